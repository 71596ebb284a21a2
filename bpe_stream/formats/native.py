"""The native tokenizer file: one versioned JSON document.

Holds everything encoding needs and nothing that runs: the pretokenizer with its exact
pattern, the tie-break the merges were learned with, the special symbols with their
ids and roles, every token's bytes (hex) and the merges as ``[left, right, new]`` ids in
rank order.  Loading checks every field and gives one clear error for anything else.
"""

from __future__ import annotations

import json
from itertools import chain
from typing import Any

from ..atomic import atomic_write
from ..pretok.pretokenize import PretokenizeError
from ..encode.tokenizer import SYMBOL_ROLES, Tokenizer, TokenizerError

FORMAT_NAME = "bpe-stream"
FORMAT_VERSION = 1


def to_document(tok: Tokenizer) -> dict:
    pre = {"name": tok.pretokenizer.name, "pattern": tok.pretokenizer.pattern}
    if tok.max_token_bytes:  # (absent without a cap: older files and their digests stay as they were)
        pre["max_token_bytes"] = tok.max_token_bytes
    return {
        "format": FORMAT_NAME,
        "version": FORMAT_VERSION,
        "pretokenizer": pre,
        "tie_break": tok.tie_break,
        "symbols": [{"id": sid, "role": role, "text": text} for sid, role, text in tok.symbols],
        "vocab": [[tid, tok.vocab[tid].hex()] for tid in sorted(tok.vocab)],
        "merges": [list(m) for m in tok.merges],
    }


def write_native(tok: Tokenizer, f) -> None:
    """Writes the native document of ``tok`` to the text stream ``f``."""
    f.write(json.dumps(to_document(tok), ensure_ascii=False, separators=(",", ":")))  # dumps has the C encoder
    f.write("\n")


def save_native(tok: Tokenizer, path) -> None:
    with atomic_write(path, "w") as f:
        write_native(tok, f)


def is_native(doc: Any) -> bool:
    return isinstance(doc, dict) and doc.get("format") == FORMAT_NAME


def _fail(what: str):
    raise TokenizerError(f"the tokenizer file is damaged: {what}; re-create it with 'bpe-stream train' or 'export'")


def _fast_vocab(raw_vocab: list):
    """``{id: bytes}`` of a well-formed vocab list (``[[id, hex], ...]``, ids >= 0) with
    C-level checks, or None when any entry is not: the caller then checks entry by entry."""
    if not raw_vocab:
        return {}
    if set(map(type, raw_vocab)) != {list} or set(map(len, raw_vocab)) != {2}:
        return None
    ids = [e[0] for e in raw_vocab]
    hexes = [e[1] for e in raw_vocab]
    if set(map(type, ids)) != {int} or set(map(type, hexes)) != {str} or min(ids) < 0:
        return None
    try:
        return dict(zip(ids, map(bytes.fromhex, hexes)))
    except ValueError:
        return None


def _int_triples(merges: list) -> bool:
    """Whether ``merges`` is a list of ``[int, int, int]`` lists (C-level checks; False
    may still be fine, e.g. for bools, and is then checked one by one)."""
    return not merges or (
        set(map(type, merges)) == {list}
        and set(map(len, merges)) == {3}
        and set(map(type, chain.from_iterable(merges))) == {int}
    )


def from_document(doc: dict) -> Tokenizer:
    version = doc.get("version")
    if not isinstance(version, int):
        _fail("no version")
    if version > FORMAT_VERSION:
        raise TokenizerError(
            f"the tokenizer file has format version {version}, newer than this bpe-stream reads ({FORMAT_VERSION}); upgrade bpe-stream"
        )
    pre = doc.get("pretokenizer")
    if not isinstance(pre, dict) or not isinstance(pre.get("name"), str):
        _fail("no pretokenizer")
    vocab = _read_vocab(doc.get("vocab"))
    merges = doc.get("merges")
    if not isinstance(merges, list) or not (_int_triples(merges) or all(
        isinstance(m, list) and len(m) == 3 and all(isinstance(x, int) for x in m) for m in merges
    )):
        _fail("merges are not [left, right, new] id triples")
    symbols = doc.get("symbols", [])
    if not isinstance(symbols, list) or not all(
        isinstance(s, dict) and isinstance(s.get("id"), int) and s.get("role") in SYMBOL_ROLES and isinstance(s.get("text"), str)
        for s in symbols
    ):
        _fail("symbols are not {id, role, text} records")
    name = pre["name"]
    _check_recorded_pattern(pre)
    try:
        return Tokenizer(
            vocab,
            [tuple(m) for m in merges],
            [(s["id"], s["role"], s["text"]) for s in symbols],
            pretokenizer=name,
            tie_break=doc.get("tie_break"),
            max_token_bytes=pre.get("max_token_bytes"),
        )
    except PretokenizeError as exc:
        raise TokenizerError(str(exc)) from None


def _read_vocab(raw_vocab) -> dict:
    """The document's ``vocab`` list as ``{id: bytes}``; fails naming the first bad entry."""
    if not isinstance(raw_vocab, list):
        _fail("no vocab list")
    vocab = _fast_vocab(raw_vocab)
    if vocab is None:  # entry by entry, to name the first bad one
        vocab = {}
        for entry in raw_vocab:
            if not (isinstance(entry, list) and len(entry) == 2 and isinstance(entry[0], int) and isinstance(entry[1], str)):
                _fail(f"vocab entry {str(entry)[:40]} is not [id, hex]")
            try:
                vocab[entry[0]] = bytes.fromhex(entry[1])
            except ValueError:
                _fail(f"vocab entry {entry[0]} is not hex")
            if entry[0] < 0:
                _fail(f"negative id {entry[0]}")
    return vocab


def _check_recorded_pattern(pre: dict) -> None:
    """A named (not ``regex:``) pretokenizer's recorded pattern must be the one bpe-stream
    has under that name, or the file would encode differently here than where it was made."""
    name = pre["name"]
    if name.startswith("regex:") is False and pre.get("pattern") is not None:
        from ..pretok.pretokenize import Pretokenizer

        try:
            expected = Pretokenizer.from_name(name).pattern
        except PretokenizeError as exc:
            raise TokenizerError(str(exc)) from None
        if expected != pre.get("pattern"):
            _fail(f"the pattern recorded for {name!r} differs from bpe-stream's")


def rules_digest(tok: Tokenizer) -> str:
    """SHA-256 of everything that decides the ids of an input (pretokenizer, symbols,
    vocabulary bytes, merges) and of nothing else (not the tie-break, not the file form)."""
    import hashlib

    doc = to_document(tok)
    rules = {k: doc[k] for k in ("pretokenizer", "symbols", "vocab", "merges")}
    canonical = json.dumps(rules, ensure_ascii=True, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode("ascii")).hexdigest()
