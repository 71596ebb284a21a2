"""tiktoken's ``.tiktoken`` rank file, with a JSON sidecar for what the ranks do not hold.

The rank file is tiktoken's own: one ``base64(token bytes) rank`` line per mergeable token,
rank = token id.  The sidecar is ``PATH + ".json"`` (``tok.tiktoken`` ->
``tok.tiktoken.json``) and holds exactly the other arguments of ``tiktoken.Encoding``::

    {"format": "bpe-stream-tiktoken", "version": 1, "ranks_file": "tok.tiktoken",
     "name": "tok", "pat_str": "...", "special_tokens": {"<|endoftext|>": 256},
     "explicit_n_vocab": 50257, "pretokenizer": "gpt2", "tie_break": "max-bytes"}

so ``tiktoken.Encoding(name=m["name"], pat_str=m["pat_str"], mergeable_ranks=ranks,
special_tokens=m["special_tokens"])`` encodes like bpe-stream (pass
``allowed_special="all"``: bpe-stream always treats special tokens as special).
:func:`tiktoken_encoding` builds it.  (``tiktoken.load.load_tiktoken_bpe`` caches files by
path, so a re-exported file at the same path can come back stale; read the ranks with
:func:`read_ranks` instead.)

tiktoken merges by the rank of the *concatenated* bytes and looks a whole pretoken up
before merging, so the export checks that this gives bpe-stream's ids: merged tokens'
ids rise with their merge rank, no two tokens share bytes, every multi-byte token is made
by a merge and its own bytes encode to it, no special token is a prefix of another
(tiktoken tries them in no fixed order).  The word-end marker and document boundaries have
no tiktoken form.  Byte ids in any order (GPT-2's) are fine.

Loading a rank file recovers the merges as HF's converter does (the split of each token
into two lower-ranked tokens that tiktoken's own merging reaches) and reads the sidecar;
without one, the four OpenAI files are recognised by their SHA-256.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import os
from typing import Dict, List, Optional, Tuple

from ..atomic import atomic_write
from ..bpe import encode_by_rank
from ..pretok.pretokenize import CL100K_PATTERN, GPT2_PATTERN, O200K_PATTERN, Pretokenizer, PretokenizeError
from ..encode.tokenizer import Tokenizer, TokenizerError
from .common import reject_doc_boundaries, reject_end_of_word
from .files import read_json, read_tokenizer_file
from .patterns import from_fancy, pretokenizer_for_pattern, to_fancy

SIDECAR_SUFFIX = ".json"
SIDECAR_FORMAT = "bpe-stream-tiktoken"
SIDECAR_VERSION = 1
# The whole text between special tokens as one piece (pretokenizer "none").
NONE_PATTERN = r"[\s\S]+"

# tiktoken's r50k/p50k pattern: GPT-2's, written to run faster.
R50K_PATTERN = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}++| ?\p{N}++| ?[^\s\p{L}\p{N}]++|\s++$|\s+(?!\S)|\s"""
_ENDOFTEXT = "<|endoftext|>"
# SHA-256 of OpenAI's published rank files -> (pretokenizer, special tokens)
KNOWN_RANK_FILES = {
    "306cd27f03c1a714eca7108e03d66b7dc042abe8c258b44c199a7ed9838dd930": ("r50k_base", "gpt2", {_ENDOFTEXT: 50256}),
    "94b5ca7dff4d00767bc256fdd1b27e5b17361d7b8a5f968547f9f23eb70d2069": ("p50k_base", "gpt2", {_ENDOFTEXT: 50256}),
    "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7": (
        "cl100k_base", "cl100k",
        {_ENDOFTEXT: 100257, "<|fim_prefix|>": 100258, "<|fim_middle|>": 100259, "<|fim_suffix|>": 100260,
         "<|endofprompt|>": 100276},
    ),
    "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d": (
        "o200k_base", "o200k", {_ENDOFTEXT: 199999, "<|endofprompt|>": 200018},
    ),
}


def sidecar_path(path) -> str:
    return os.fspath(path) + SIDECAR_SUFFIX


# ----------------------------------------------------------------------------------
# Export
# ----------------------------------------------------------------------------------


def tiktoken_pattern(pre: Pretokenizer) -> str:
    """The ``pat_str`` that splits like ``pre`` under fancy-regex."""
    if pre.name in ("cl100k", "o200k"):
        return pre.pattern  # tiktoken's own, character for character
    if pre.name == "none":
        return NONE_PATTERN
    return to_fancy(pre.pattern)


def check_tiktoken(tok: Tokenizer) -> Dict[int, bytes]:
    """The mergeable ranks (id -> bytes) of ``tok``, or a ``TokenizerError`` saying why
    tiktoken would encode differently."""
    reject_end_of_word(tok, "tiktoken")
    reject_doc_boundaries(tok, "tiktoken")
    specials = tok.special_tokens
    for a in specials:
        for b in specials:
            if a != b and b.startswith(a):
                raise TokenizerError(
                    f"the special token {a!r} is a prefix of {b!r}; tiktoken tries special tokens in no fixed order, "
                    "so export with --format hf (which takes the longest, as bpe-stream does)"
                )
    symbol_ids = {sid for sid, _, _ in tok.symbols}
    ranks = {tid: data for tid, data in tok.vocab.items() if tid not in symbol_ids}
    seen: Dict[bytes, int] = {}
    for tid in sorted(ranks):
        other = seen.setdefault(ranks[tid], tid)
        if other != tid:
            raise TokenizerError(f"ids {other} and {tid} have the same bytes {ranks[tid]!r}; a tiktoken rank file "
                                 "holds each byte string once")
    made = set()
    last = -1
    for rank, (_, _, new) in enumerate(tok.merges):
        if new <= last:
            raise TokenizerError(
                f"merge {rank} makes id {new}, not above the id {last} the merge before it made; tiktoken ranks "
                "tokens by id, so it needs merged ids in merge order"
            )
        last = new
        made.add(new)
    for tid, data in ranks.items():
        if len(data) > 1 and tid not in made:
            raise TokenizerError(f"token {tid} ({data!r}) is made by no merge; tiktoken would merge into it")
    ranks_table = tok.ranks
    byte_ids = tok.byte_ids
    for _, _, new in tok.merges:
        got = encode_by_rank([byte_ids[b] for b in ranks[new]], ranks_table)
        if got != [new]:
            raise TokenizerError(
                f"the bytes of token {new} ({ranks[new]!r}) encode to {got}, not to the token itself; tiktoken looks "
                "whole pretokens up first and would differ, so export with --format hf"
            )
    return ranks


def save_tiktoken(tok: Tokenizer, path) -> List[str]:
    """Writes the rank file at ``path`` and the sidecar at ``path + ".json"``; returns both paths."""
    path = os.fspath(path)
    if os.path.isdir(path):
        raise TokenizerError(f"{path} is a directory; give the rank file's name, e.g. {os.path.join(path, 'tokenizer.tiktoken')}")
    ranks = check_tiktoken(tok)
    pat_str = tiktoken_pattern(tok.pretokenizer)
    specials = {text: sid for sid, role, text in tok.symbols if role == "special"}
    all_ids = set(ranks) | set(specials.values())
    base = os.path.basename(path)
    name = base[: -len(".tiktoken")] if base.endswith(".tiktoken") and len(base) > 9 else base
    meta = {
        "format": SIDECAR_FORMAT,
        "version": SIDECAR_VERSION,
        "ranks_file": base,
        "name": name,
        "pat_str": pat_str,
        "special_tokens": specials,
    }
    if all_ids == set(range(len(all_ids))):
        meta["explicit_n_vocab"] = len(all_ids)
    meta["pretokenizer"] = tok.pretokenizer.name
    meta["tie_break"] = tok.tie_break
    meta["usage"] = ("tiktoken.Encoding(name, pat_str=pat_str, mergeable_ranks=<the rank file>, "
                     "special_tokens=special_tokens).encode(text, allowed_special='all')")
    with atomic_write(path, "wb") as f:
        f.write(b"".join(base64.b64encode(ranks[tid]) + b" %d\n" % tid for tid in sorted(ranks)))
    side = sidecar_path(path)
    with atomic_write(side, "w") as f:
        json.dump(meta, f, ensure_ascii=False, indent=2)
        f.write("\n")
    return [path, side]


# ----------------------------------------------------------------------------------
# Load
# ----------------------------------------------------------------------------------


def looks_like_ranks(data: bytes) -> bool:
    line = data[:4096].split(b"\n", 1)[0].strip()
    parts = line.split(b" ")
    if len(parts) != 2 or not parts[1].isdigit():
        return False
    try:
        base64.b64decode(parts[0], validate=True)
    except (binascii.Error, ValueError):
        return False
    return True


def is_sidecar(doc) -> bool:
    return isinstance(doc, dict) and isinstance(doc.get("pat_str"), str) and (
        doc.get("format") == SIDECAR_FORMAT or "ranks_file" in doc or "special_tokens" in doc
    )


def parse_ranks(data: bytes, where: str) -> Dict[bytes, int]:
    """The ranks of a rank file's bytes.  Errors say what is wrong with which line, never
    what the line holds: the file may be any file a sidecar named."""
    ranks: Dict[bytes, int] = {}
    for lineno, line in enumerate(data.split(b"\n"), 1):
        if not line.strip():
            continue
        parts = line.split()
        try:
            if len(parts) != 2:
                raise ValueError(f"{len(parts)} field{'' if len(parts) == 1 else 's'}")
            token = base64.b64decode(parts[0], validate=True)
            if not parts[1].isdigit():
                raise ValueError("no decimal rank")
            rank = int(parts[1])
        except binascii.Error:
            raise TokenizerError(f"{where}:{lineno}: not a rank file: the token is not base64") from None
        except ValueError as exc:
            raise TokenizerError(f"{where}:{lineno}: not a rank file: expected 'base64-token rank', found "
                                 f"{exc if str(exc) else 'something else'}") from None
        if token in ranks:
            raise TokenizerError(f"{where}:{lineno}: the token {token!r} appears twice")
        ranks[token] = rank
    return ranks


def read_ranks(path) -> Dict[bytes, int]:
    """The mergeable ranks of a ``.tiktoken`` file (bytes -> rank), read directly (no cache)."""
    path = os.fspath(path)
    return parse_ranks(read_tokenizer_file(path, "a .tiktoken rank file"), path)


def _tiktoken_split(token: bytes, ranks: Dict[bytes, int], max_rank: int) -> List[bytes]:
    """tiktoken's merging of ``token`` using only ranks below ``max_rank``."""
    parts = [token[i:i + 1] for i in range(len(token))]
    while len(parts) > 1:
        best = None
        best_rank = max_rank
        for i in range(len(parts) - 1):
            r = ranks.get(parts[i] + parts[i + 1])
            if r is not None and r < best_rank:
                best, best_rank = i, r
        if best is None:
            break
        parts[best:best + 2] = [parts[best] + parts[best + 1]]
    return parts


def recover_merges(ranks: Dict[bytes, int], where: str) -> List[Tuple[int, int, int]]:
    """The merges ``(left, right, new)`` in rank order that rebuild every multi-byte token."""
    merges = []
    for token, rank in sorted(ranks.items(), key=lambda kv: kv[1]):
        if len(token) < 2:
            continue
        splits = []
        for k in range(1, len(token)):
            left, right = ranks.get(token[:k]), ranks.get(token[k:])
            if left is not None and right is not None and left < rank and right < rank:
                splits.append(k)
        if len(splits) > 1:
            parts = _tiktoken_split(token, ranks, rank)
            splits = [len(parts[0])] if len(parts) == 2 else []
        if not splits:
            raise TokenizerError(
                f"{where}: the token {token!r} (rank {rank}) is not two lower-ranked tokens merged; not a BPE rank file"
            )
        k = splits[0]
        merges.append((ranks[token[:k]], ranks[token[k:]], rank))
    return merges


def _read_sidecar(path):
    return read_json(path, "a tiktoken sidecar")


def ranks_path(sidecar, meta: dict) -> str:
    """The rank file a sidecar names: a plain file name, in the sidecar's directory (a path
    could reach any file on the machine)."""
    sidecar = os.fspath(sidecar)
    name = meta.get("ranks_file")
    if name is None and sidecar.endswith(SIDECAR_SUFFIX):
        name = os.path.basename(sidecar[: -len(SIDECAR_SUFFIX)])
    if not isinstance(name, str) or not name:
        raise TokenizerError(f"{sidecar}: the tiktoken sidecar names no ranks_file")
    if name in (".", "..") or "/" in name or (os.sep != "/" and os.sep in name) or (os.altsep and os.altsep in name):
        raise TokenizerError(
            f"{sidecar}: ranks_file must be the name of a file beside the sidecar, not a path; put the rank file "
            "there and give its name"
        )
    return os.path.join(os.path.dirname(os.path.abspath(sidecar)), name)


def _pretokenizer_from_meta(meta: dict, where: str) -> str:
    pat_str = meta["pat_str"]
    recorded = meta.get("pretokenizer")
    if isinstance(recorded, str):
        try:
            pre = Pretokenizer.from_name(recorded)
        except PretokenizeError:
            pre = None
        if pre is not None and tiktoken_pattern(pre) == pat_str:
            return pre.name
    known = {CL100K_PATTERN: "cl100k", O200K_PATTERN: "o200k", R50K_PATTERN: "gpt2", GPT2_PATTERN: "gpt2",
             NONE_PATTERN: "none"}
    if pat_str in known:
        return known[pat_str]
    return pretokenizer_for_pattern(from_fancy(pat_str), where)


def load_tiktoken(path, meta: Optional[dict] = None, data: Optional[bytes] = None) -> Tokenizer:
    """A ``Tokenizer`` from a rank file and its sidecar (``path + ".json"``, or ``meta``)."""
    path = os.fspath(path)
    if data is None:
        data = read_tokenizer_file(path, "a .tiktoken rank file")
    if meta is None:
        side = sidecar_path(path)
        if os.path.exists(side):
            meta = _read_sidecar(side)
            if not is_sidecar(meta):
                raise TokenizerError(f"{side} is not a tiktoken sidecar (no pat_str)")
        else:
            known = KNOWN_RANK_FILES.get(hashlib.sha256(data).hexdigest())
            if known is None:
                raise TokenizerError(
                    f"{path} has no sidecar {side} giving its pattern and special tokens; write one as "
                    '{"pat_str": "...", "special_tokens": {"<|endoftext|>": ID}} (bpe-stream export writes it)'
                )
            name, pre, specials = known
            meta = {"name": name, "pat_str": tiktoken_pattern(Pretokenizer.from_name(pre)), "pretokenizer": pre,
                    "special_tokens": specials}
    specials = meta.get("special_tokens") or {}
    if not isinstance(specials, dict) or not all(isinstance(k, str) and isinstance(v, int) for k, v in specials.items()):
        raise TokenizerError(f"{path}: the sidecar's special_tokens is not an object of text -> id")
    pretokenizer = _pretokenizer_from_meta(meta, path)
    ranks = parse_ranks(data, path)
    vocab = {rank: token for token, rank in ranks.items()}
    if len(vocab) != len(ranks):
        raise TokenizerError(f"{path}: two tokens share one rank")
    symbols = []
    for text, sid in specials.items():
        if sid in vocab:
            raise TokenizerError(f"{path}: the special token {text!r} has id {sid}, which a ranked token already has")
        vocab[sid] = text.encode("utf-8")
        symbols.append((sid, "special", text))
    merges = recover_merges(ranks, path)
    tie_break = meta.get("tie_break") if isinstance(meta.get("tie_break"), str) else None
    try:
        return Tokenizer(vocab, merges, symbols, pretokenizer=pretokenizer, tie_break=tie_break)
    except (TokenizerError, PretokenizeError) as exc:
        raise TokenizerError(f"{path}: {exc}") from None


def load_sidecar(path, meta: Optional[dict] = None) -> Tokenizer:
    """A ``Tokenizer`` from the sidecar at ``path`` (its ``ranks_file`` beside it)."""
    path = os.fspath(path)
    if meta is None:
        meta = _read_sidecar(path)
    return load_tiktoken(ranks_path(path, meta), meta)


def tiktoken_encoding(path):
    """A ``tiktoken.Encoding`` from an exported rank file (or its sidecar); needs tiktoken."""
    import tiktoken

    path = os.fspath(path)
    if path.endswith(SIDECAR_SUFFIX) and not looks_like_ranks(read_tokenizer_file(path, "a tiktoken file")):
        side = path
        meta = _read_sidecar(side)
        path = ranks_path(side, meta)
    else:
        meta = _read_sidecar(sidecar_path(path))
    kwargs = {}
    if meta.get("explicit_n_vocab"):
        kwargs["explicit_n_vocab"] = meta["explicit_n_vocab"]
    return tiktoken.Encoding(
        meta.get("name") or os.path.basename(path),
        pat_str=meta["pat_str"],
        mergeable_ranks=read_ranks(path),
        special_tokens=dict(meta.get("special_tokens") or {}),
        **kwargs,
    )
