"""Tokenizer files: the native JSON format and the formats of other tools.

``load_any`` detects what a path holds and gives one clear error for anything that is
not a byte-level BPE tokenizer it can read.
"""

from __future__ import annotations

import json
import os

from ..tokenizer import Tokenizer, TokenizerError


def load_any(path) -> Tokenizer:
    from .gpt2 import gpt2_dir_files, is_gpt2_dir, load_gpt2
    from .native import from_document, is_native

    path = os.fspath(path)
    if os.path.isdir(path):
        if is_gpt2_dir(path):
            vocab, merges = gpt2_dir_files(path)
            return load_gpt2(vocab, merges)
        raise TokenizerError(f"{path} is a directory without vocab.json and merges.txt; give a tokenizer file")
    if not os.path.exists(path):
        raise TokenizerError(f"no tokenizer at {path}; train one with 'bpe-stream train -o {path}'")
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as exc:
        raise TokenizerError(f"{path}: cannot read it ({exc.strerror})") from None
    try:
        doc = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise TokenizerError(f"{path} is not a tokenizer file bpe-stream can read (not JSON, or truncated)") from None
    if is_native(doc):
        return from_document(doc)
    raise TokenizerError(f"{path} is JSON but not a bpe-stream tokenizer; give a file written by 'bpe-stream train'")
