"""Tokenizer files: the native JSON format and the formats of other tools.

``load_any`` detects what a path holds -- a native file, an HF ``tokenizer.json`` (or a
directory holding one), a GPT-2 ``vocab.json`` + ``merges.txt`` directory, a ``.tiktoken``
rank file (with its ``.json`` sidecar) or that sidecar -- and gives one clear error for
anything that is not a byte-level BPE tokenizer it can read.  ``export_tokenizer`` writes
``native``, ``hf``, ``gpt2`` or ``tiktoken``; ``truncate`` keeps the first merges only.

One module a format -- ``native``, ``hf`` (``tokenizer.json``), ``gpt2`` (``vocab.json`` +
``merges.txt``), ``tiktoken_file`` (rank file + sidecar), ``counts`` (pretoken counts, not a
tokenizer) -- and what they share: ``files`` (bounded reading of regular files),
``patterns`` (the regex dialects of HF and tiktoken), ``common`` (the exports' token texts
and refusals) and ``printable`` (GPT-2's printable form of bytes).
"""

from __future__ import annotations

import gc
import io
import json
import os
from typing import BinaryIO, Dict, List, Optional

from ..atomic import check_output, stdout_binary
from ..encode.tokenizer import Tokenizer, TokenizerError
from .files import read_tokenizer_file

EXPORT_FORMATS = ("hf", "gpt2", "tiktoken", "native")


def load_any(path) -> Tokenizer:
    """The tokenizer at ``path``, in whichever supported format it is."""
    # Parsing and indexing a large vocabulary makes ~10^5 containers that all live on:
    # the cyclic collector would scan them over and over (a third of the load time).
    collecting = gc.isenabled()
    gc.disable()
    try:
        return _load_any(path)
    except TokenizerError:
        raise
    except (TypeError, AttributeError, KeyError, IndexError, ValueError, OverflowError, RecursionError) as exc:
        # A file that parses but whose fields have the wrong shapes: never a traceback.
        raise TokenizerError(f"{path}: the tokenizer file is damaged ({type(exc).__name__}: {exc})"[:300]) from None
    finally:
        if collecting:
            gc.enable()


def _load_any(path) -> Tokenizer:
    from .gpt2 import gpt2_pairs, is_gpt2_dir, load_gpt2, partner_file
    from .hf import from_hf_document, is_hf, load_hf
    from .native import from_document, is_native
    from .tiktoken_file import is_sidecar, load_sidecar, load_tiktoken, looks_like_ranks

    path = os.fspath(path)
    if os.path.isdir(path):
        if os.path.isfile(os.path.join(path, "tokenizer.json")):
            return load_hf(path)
        pairs = gpt2_pairs(path)
        if len(pairs) == 1 or (pairs and is_gpt2_dir(path)):
            return load_gpt2(*pairs[0])
        if pairs:
            names = ", ".join(os.path.basename(v) for v, _ in pairs)
            raise TokenizerError(
                f"{path} holds several vocab/merges pairs ({names}); give one, e.g. -t {pairs[0][0]}"
            )
        raise TokenizerError(
            f"{path} is a directory without tokenizer.json, or vocab.json and merges.txt; give a tokenizer file"
        )
    if not os.path.exists(path):
        raise TokenizerError(f"no tokenizer at {path}; train one with 'bpe-stream train -o {path}'")
    data = read_tokenizer_file(path)
    try:
        doc = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError):
        pair = partner_file(path)
        if pair is not None:
            return load_gpt2(*pair)
        if looks_like_ranks(data):
            return load_tiktoken(path, data=data)
        head = data[:200].lstrip()
        if head.startswith(b"#version") or path.endswith("merges.txt"):
            raise TokenizerError(f"{path} looks like a GPT-2 merges.txt; give the directory holding it and vocab.json") from None
        raise TokenizerError(f"{path} is not a tokenizer file bpe-stream can read (not JSON, or truncated)") from None
    if is_native(doc):
        return from_document(doc)
    if is_hf(doc):
        return from_hf_document(doc, path)
    if is_sidecar(doc):
        return load_sidecar(path, doc)
    if isinstance(doc, dict) and doc and all(isinstance(v, int) for v in list(doc.values())[:100]):
        pair = partner_file(path)
        if pair is not None:
            return load_gpt2(*pair)
        raise TokenizerError(f"{path} looks like a GPT-2 vocab.json; give the directory holding it and merges.txt")
    raise TokenizerError(
        f"{path} is JSON but not a tokenizer bpe-stream reads (native, Hugging Face tokenizer.json or a tiktoken "
        "sidecar); give a file written by 'bpe-stream train' or 'export'"
    )


def truncate(tok: Tokenizer, vocab_size: int) -> Tokenizer:
    """The tokenizer made of ``tok``'s first merges only, with ``vocab_size`` tokens in all.

    Merges are a prefix-closed list, so this is exactly what training to ``vocab_size``
    gives (same ids, same rules).  The base -- bytes, special symbols and any token no
    merge makes -- is always kept; a merge that remakes an earlier token adds no token.
    """
    if isinstance(vocab_size, bool) or not isinstance(vocab_size, int):
        raise TokenizerError(f"the vocabulary size must be an integer, not {vocab_size!r}")
    made_ids = {new for _, _, new in tok.merges}
    base = [tid for tid in tok.vocab if tid not in made_ids]
    if vocab_size < len(base):
        raise TokenizerError(
            f"--vocab-size {vocab_size} is smaller than the {len(base)} base tokens (bytes and special tokens); "
            f"use at least {len(base)}"
        )
    if vocab_size > tok.vocab_size:
        raise TokenizerError(
            f"--vocab-size {vocab_size} is larger than the tokenizer ({tok.vocab_size} tokens); use at most {tok.vocab_size}"
        )
    if vocab_size == tok.vocab_size:
        return tok
    want = vocab_size - len(base)
    kept = set()
    end = 0
    for end, (_, _, new) in enumerate(tok.merges):  # noqa: B007 - `end` is read after the loop
        if new not in kept:
            if len(kept) == want:
                break
            kept.add(new)
    else:
        end = len(tok.merges)
    merges = tok.merges[:end]
    vocab = {tid: data for tid, data in tok.vocab.items() if tid not in made_ids or tid in kept}
    return Tokenizer(vocab, merges, tok.symbols, pretokenizer=tok.pretokenizer.name, tie_break=tok.tie_break,
                     max_token_bytes=tok.max_token_bytes)


def export_warnings(tok: Tokenizer, fmt: str) -> List[str]:
    """What an export in ``fmt`` cannot carry of ``tok``: its pretoken cap, in any format
    but ``native`` (HF's pre-tokenizers, GPT-2's files and tiktoken have no such setting)."""
    if fmt == "native" or not tok.max_token_bytes:
        return []
    return [f"the {fmt} format cannot record --max-token-bytes {tok.max_token_bytes}: other tools (and bpe-stream "
            f"loading this export) encode a pretoken longer than {tok.max_token_bytes:,} bytes whole, this "
            "tokenizer in pieces; the ids differ only for such pretokens"]


def export_tokenizer(tok: Tokenizer, fmt: str, path, vocab_size: Optional[int] = None, like=None,
                     roles: Optional[Dict[str, str]] = None, notes: Optional[List[str]] = None) -> List[str]:
    """Writes ``tok`` (its first merges only, with ``vocab_size``) in format ``fmt``;
    returns the paths written.

    * ``hf``: ``path`` is the ``tokenizer.json`` file; a directory (or a path ending in ``/``,
      created) is a folder that ``transformers.AutoTokenizer`` loads: ``tokenizer.json``,
      ``tokenizer_config.json`` and ``special_tokens_map.json``.
    * ``gpt2``: ``path`` is a directory (created if missing) receiving ``vocab.json``,
      ``merges.txt`` and the same two config files (for ``GPT2Tokenizer``).
    * ``tiktoken``: ``path`` is the rank file; the sidecar ``path + ".json"`` holds the pattern
      and special tokens.
    * ``native``: ``path`` is the bpe-stream JSON file.

    ``path`` ``-`` is stdout, for the formats that are one file (``hf``, ``native``).  The
    output paths are checked (:func:`atomic.check_output`) before anything is converted.
    ``like`` (``hf`` only): the HF file ``tok`` extends, kept whole but for the new tokens
    and merges (``hf_like``); a folder, whose other tokenizer files are kept too.
    ``roles`` (``hf`` folder, ``gpt2``): which special token transformers takes as eos, bos,
    pad or unk (``transformers_config``).  ``notes``: a list receiving what was not carried over.
    """
    if fmt not in EXPORT_FORMATS:
        raise TokenizerError(f"unknown export format {fmt!r}; choose one of {', '.join(EXPORT_FORMATS)}")
    if like is not None and fmt != "hf":
        raise TokenizerError(f"--like keeps what an HF tokenizer.json holds: it goes with --format hf, not {fmt}")
    if roles and any(roles.values()) and fmt not in ("hf", "gpt2"):
        raise TokenizerError(f"--bos/--eos/--pad/--unk are for transformers (--format hf or gpt2), not {fmt}")
    path = os.fspath(path)
    if path == STDOUT:
        if fmt not in STREAM_FORMATS:
            raise TokenizerError(f"--format {fmt} writes {_MANY_FILES[fmt]}, which cannot go to stdout; give -o PATH")
        stream = stdout_binary()
    else:
        for output, is_directory in _outputs(fmt, path):
            check_output(output, directory=is_directory)
    if vocab_size is not None:
        tok = truncate(tok, vocab_size)
    if path == STDOUT:
        if roles and any(roles.values()):
            raise TokenizerError("--bos/--eos/--pad/--unk are written to tokenizer_config.json, beside tokenizer.json: "
                                 "give a directory as -o (e.g. -o out/)")
        dump_tokenizer(tok, fmt, stream, like)
        return [STDOUT]
    if fmt == "hf":
        from .hf import save_hf

        return save_hf(tok, path, like, roles, notes)
    if fmt == "gpt2":
        from .gpt2 import save_gpt2

        return save_gpt2(tok, path, roles)
    if fmt == "tiktoken":
        from .tiktoken_file import save_tiktoken

        return save_tiktoken(tok, path)
    from .native import save_native

    save_native(tok, path)
    return [path]


STDOUT = "-"
STREAM_FORMATS = ("hf", "native")  # one file each: these can go to stdout
_MANY_FILES = {"gpt2": "a directory (vocab.json and merges.txt)", "tiktoken": "two files (the ranks and a .json sidecar)"}


def _outputs(fmt: str, path: str) -> List[tuple]:
    """``(path, is_directory)`` of what exporting to ``path`` in ``fmt`` writes."""
    if fmt == "hf":
        from .hf import hf_file, is_folder

        return [(path, True)] if is_folder(path) else [(hf_file(path), False)]
    if fmt == "gpt2":
        return [(path, True)]
    if fmt == "tiktoken":
        from .tiktoken_file import sidecar_path

        return [(path, False), (sidecar_path(path), False)]
    return [(path, False)]


def dump_tokenizer(tok: Tokenizer, fmt: str, stream: BinaryIO, like=None) -> None:
    """Writes ``tok`` in the one-file format ``fmt`` (``hf`` or ``native``; ``like``: see
    :func:`export_tokenizer`) to a binary stream."""
    from .hf import write_hf
    from .native import write_native

    text = io.TextIOWrapper(stream, encoding="utf-8", newline="\n")
    try:
        if fmt == "hf":
            write_hf(tok, text, like)
        else:
            write_native(tok, text)
        text.flush()
    finally:
        text.detach()  # the stream (stdout) stays open
