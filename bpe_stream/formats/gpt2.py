"""GPT-2 style ``vocab.json`` (printable token -> id) and ``merges.txt`` (one ``left right`` per line)."""

from __future__ import annotations

import json
import os
from typing import List, Optional, Sequence

from ..tokenizer import Tokenizer, TokenizerError
from .printable import from_printable


def _read_json(path):
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise TokenizerError(f"{path}: cannot read a vocab.json ({exc})") from None


def load_gpt2(vocab_json, merges_txt, special_tokens: Optional[Sequence[str]] = None) -> Tokenizer:
    """``special_tokens=None`` treats every multi-byte token that no merge makes (GPT-2's
    ``<|endoftext|>``) as a special token, as HF does with added tokens."""
    raw = _read_json(vocab_json)
    if not isinstance(raw, dict):
        raise TokenizerError(f"{vocab_json}: not a JSON object of token -> id")
    vocab = {}
    text_to_id = {}
    for token, tid in raw.items():
        if not isinstance(tid, int) or tid < 0:
            raise TokenizerError(f"{vocab_json}: the id of {token!r} is not a non-negative integer")
        text_to_id[token] = tid
        try:
            vocab[tid] = from_printable(token)
        except KeyError:
            vocab[tid] = token.encode("utf-8")  # an added token such as <|endoftext|>
    merges = []
    try:
        with open(merges_txt, encoding="utf-8") as f:
            lines = f.read().split("\n")
    except (OSError, UnicodeDecodeError) as exc:
        raise TokenizerError(f"{merges_txt}: cannot read a merges.txt ({exc})") from None
    for lineno, line in enumerate(lines, 1):
        if not line or line.startswith("#version"):
            continue
        parts = line.split(" ")
        if len(parts) != 2:
            raise TokenizerError(f"{merges_txt}:{lineno}: expected 'left right', got {line[:40]!r}")
        left, right = parts
        ids = [text_to_id.get(left), text_to_id.get(right), text_to_id.get(left + right)]
        if None in ids:
            raise TokenizerError(f"{merges_txt}:{lineno}: {line!r} names a token missing from {vocab_json}")
        merges.append(tuple(ids))
    if special_tokens is None:
        made = {new for _, _, new in merges}
        special_tokens = [t for t, tid in sorted(text_to_id.items(), key=lambda kv: kv[1])
                          if len(vocab[tid]) > 1 and tid not in made]
    symbols = []
    next_id = max(vocab, default=-1) + 1
    for special in special_tokens:
        tid = text_to_id.get(special)
        if tid is None:
            tid = next_id
            next_id += 1
            vocab[tid] = special.encode("utf-8")
        symbols.append((tid, "special", special))
    return Tokenizer(vocab, merges, symbols, pretokenizer="gpt2")


def is_gpt2_dir(path) -> bool:
    return os.path.isdir(path) and os.path.exists(os.path.join(path, "vocab.json")) and os.path.exists(
        os.path.join(path, "merges.txt")
    )


def gpt2_dir_files(path) -> List[str]:
    return [os.path.join(path, "vocab.json"), os.path.join(path, "merges.txt")]
