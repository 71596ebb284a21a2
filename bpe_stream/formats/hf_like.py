"""``export --format hf --like ORIGINAL``: an extended tokenizer as a copy of the HF file it
extends (``train --from ORIGINAL``), so that it drops into the original pipeline.

Everything of ``ORIGINAL`` is kept as it is -- added tokens and their flags, padding,
truncation, post-processor, decoder, the model's settings, its vocabulary and merges in
their own spelling and style (``"a b"`` strings or ``["a", "b"]`` pairs) -- and only the new
tokens and merges are appended.  The tokenizer must extend ``ORIGINAL`` (the same
pretokenizer and symbols, every id with its bytes, the merges a prefix), or it is an error.
With ``ORIGINAL`` a folder and ``-o`` a folder, the original's other tokenizer files come
along (:func:`folder_files`): its ``tokenizer_config.json`` and the like as they are, its
``vocab.json`` + ``merges.txt`` written anew; a model's files (weights, ``config.json``) are not.
"""

from __future__ import annotations

import copy
import os
from typing import Dict, List, Tuple

from ..encode.tokenizer import Tokenizer, TokenizerError
from .common import printable_keys
from .files import read_json, read_tokenizer_file
from .hf import from_hf_document, hf_file, is_hf


def _difference(tok: Tokenizer, base: Tokenizer) -> str:
    """Why ``tok`` does not extend ``base`` ('' when it does)."""
    if tok.pretokenizer.name != base.pretokenizer.name:
        return f"it pretokenizes with {tok.pretokenizer.name!r}, the original with {base.pretokenizer.name!r}"
    if tok.symbols != base.symbols:
        return "its special tokens or boundaries differ"
    changed = next((tid for tid, data in base.vocab.items() if tok.vocab.get(tid) != data), None)
    if changed is not None:
        return f"id {changed} is not the original's token"
    if tok.merges[:len(base.merges)] != base.merges:
        return "its merges do not begin with the original's"
    return ""


def to_hf_document_like(tok: Tokenizer, original) -> dict:
    """The ``tokenizer.json`` document of ``tok``: the HF file ``original`` with ``tok``'s new
    tokens and merges appended."""
    where = hf_file(os.fspath(original))
    doc = read_json(where, "a tokenizer.json")
    if not is_hf(doc):
        raise TokenizerError(f"--like {where} is not a Hugging Face tokenizer.json (no model)")
    base = from_hf_document(doc, where)
    why = _difference(tok, base)
    if why:
        raise TokenizerError(f"the tokenizer does not extend --like {where}: {why}")
    doc = copy.deepcopy(doc)
    model = doc["model"]
    keys = printable_keys(tok, "tokenizer.json")  # (refuses two new tokens of one text, as the plain export)
    text_of = {tid: text for text, tid in model["vocab"].items()}
    taken = set(model["vocab"])
    for tid in sorted(set(tok.vocab) - set(base.vocab)):
        if keys[tid] in taken:
            raise TokenizerError(
                f"ids {model['vocab'][keys[tid]]} and {tid} are both {keys[tid]!r} in tokenizer.json's token -> id "
                "table, which holds each text once; this tokenizer cannot be exported to that format"
            )
        model["vocab"][keys[tid]] = tid
        text_of[tid] = keys[tid]
    pairs = model["merges"] and isinstance(model["merges"][0], list)
    for left, right, _ in tok.merges[len(base.merges):]:
        a, b = text_of[left], text_of[right]
        model["merges"].append([a, b] if pairs else f"{a} {b}")
    return doc


# The tokenizer's own files in a transformers folder, copied as they are (the ids they name are kept).
COPIED = ("tokenizer_config.json", "special_tokens_map.json", "added_tokens.json", "chat_template.jinja",
          "chat_template.json")


def folder_files(tok: Tokenizer, original, roles: Dict[str, str], notes: List[str]) -> List[Tuple[str, str]]:
    """``(name, text)`` of the files beside ``tokenizer.json`` in the folder ``original``
    for the export of ``tok`` (``roles`` set in the copied configs); what is left out is
    said in ``notes``."""
    from .gpt2 import gpt2_texts
    from .transformers_config import config_files, with_roles

    original = os.fspath(original)
    names = sorted(n for n in os.listdir(original) if os.path.isfile(os.path.join(original, n)))
    files = []
    for name in names:
        if name in COPIED:
            text = read_tokenizer_file(os.path.join(original, name), f"a {name}").decode("utf-8")
            files.append((name, with_roles(name, text, roles)))
    if "tokenizer_config.json" not in names:
        files += config_files(tok, "PreTrainedTokenizerFast", roles)
    if "vocab.json" in names and "merges.txt" in names:
        try:
            vocab_text, merges_text = gpt2_texts(tok)
            files += [("vocab.json", vocab_text), ("merges.txt", merges_text)]
        except TokenizerError as exc:
            notes.append(f"{original}'s vocab.json and merges.txt are not written with the new tokens ({exc})")
    left = [n for n in names if n not in COPIED and n not in ("tokenizer.json", "vocab.json", "merges.txt")]
    if left:
        notes.append(f"not copied from {original}: {', '.join(left)} (not the tokenizer's files; a model's "
                     f"embeddings must grow to {tok.vocab_size:,} tokens)")
    return files
