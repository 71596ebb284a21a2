"""GPT-2 style ``vocab.json`` (printable token -> id) and ``merges.txt`` (one ``left right`` per line)."""

from __future__ import annotations

import json
import os
from typing import Dict, List, Optional, Sequence, Tuple

from ..encode.tokenizer import Tokenizer, TokenizerError
from .common import printable_keys, reject_doc_boundaries, reject_end_of_word
from .files import read_json, read_tokenizer_file
from .printable import from_printable
from .transformers_config import check_roles, config_files, write_folder
from .vocab_merges import special_symbols


def load_gpt2(vocab_json, merges_txt, special_tokens: Optional[Sequence[str]] = None) -> Tokenizer:
    """``special_tokens=None`` treats every multi-byte token that no merge makes (GPT-2's
    ``<|endoftext|>``) as a special token, as HF does with added tokens."""
    raw = read_json(vocab_json, "a vocab.json")
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
        text = read_tokenizer_file(merges_txt, "a merges.txt").decode("utf-8")
        lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")  # as a text-mode open() reads it
    except UnicodeDecodeError as exc:
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
    by_id = {tid: text for text, tid in text_to_id.items()}
    symbols = special_symbols(vocab, merges, special_tokens, text_to_id.get, by_id.__getitem__)
    return Tokenizer(vocab, merges, symbols, pretokenizer="gpt2")


def is_gpt2_dir(path) -> bool:
    return os.path.isdir(path) and os.path.exists(os.path.join(path, "vocab.json")) and os.path.exists(
        os.path.join(path, "merges.txt")
    )


def gpt2_dir_files(path) -> List[str]:
    return [os.path.join(path, "vocab.json"), os.path.join(path, "merges.txt")]


MERGES_VERSION_LINE = "#version: 0.2\n"


def save_gpt2(tok: Tokenizer, directory, roles: Optional[Dict[str, str]] = None) -> List[str]:
    """Writes ``vocab.json`` (printable token -> id, in id order, written as GPT-2's own file
    is), ``merges.txt`` (a ``#version: 0.2`` line, then ``left right`` per merge) and the
    ``tokenizer_config.json`` + ``special_tokens_map.json`` that make transformers'
    ``GPT2Tokenizer`` read them as bpe-stream does (``roles``: which special token is eos,
    bos, pad, unk; none by default) into ``directory`` (created if missing); returns the paths.

    The pair holds no pretokenizer: readers (``Tokenizer.from_files``, HF's
    ``BPE.from_file``) assume GPT-2's, so other pretokenizers are an error, as are the word
    marker and document boundaries.  Special tokens are written as their text and come
    back as the tokens no merge makes.
    """
    directory = os.fspath(directory)
    if os.path.exists(directory) and not os.path.isdir(directory):
        raise TokenizerError(f"{directory} is a file; the gpt2 format is a directory (vocab.json + merges.txt)")
    vocab_text, merges_text = gpt2_texts(tok)
    files = [("vocab.json", vocab_text), ("merges.txt", merges_text)]
    # transformers reads the pair with GPT2Tokenizer's defaults unless told: see transformers_config
    files += config_files(tok, "GPT2Tokenizer", check_roles(tok, roles))
    return write_folder(directory, files)


def gpt2_texts(tok: Tokenizer) -> Tuple[str, str]:
    """The texts of ``vocab.json`` and ``merges.txt``, or an error saying why ``tok`` has none."""
    reject_end_of_word(tok, "the GPT-2 vocab.json/merges.txt format")
    reject_doc_boundaries(tok, "the GPT-2 vocab.json/merges.txt format")
    if tok.pretokenizer.name != "gpt2":
        raise TokenizerError(
            f"vocab.json/merges.txt record no pretokenizer and are read with GPT-2's, not {tok.pretokenizer.name!r}; "
            "export with --format hf or tiktoken, which record the pattern"
        )
    keys = printable_keys(tok, "vocab.json")
    made = {new for _, _, new in tok.merges}
    symbol_ids = {sid for sid, _, _ in tok.symbols}
    for tid, data in tok.vocab.items():
        if tid not in symbol_ids and len(data) > 1 and tid not in made:
            raise TokenizerError(
                f"token {tid} ({data!r}) is made by no merge; readers of vocab.json would take it for a special "
                "token, so export with --format hf"
            )
    for _sid, _, text in tok.symbols:
        if len(text.encode("utf-8")) < 2:
            raise TokenizerError(
                f"the special token {text!r} is a single byte; readers of vocab.json would take it for a byte token, "
                "so export with --format hf"
            )
    vocab_doc = {keys[tid]: tid for tid in sorted(tok.vocab)}
    merges_text = MERGES_VERSION_LINE + "".join(f"{keys[left]} {keys[right]}\n" for left, right, _ in tok.merges)
    vocab_text = json.dumps(vocab_doc)  # GPT-2's own layout: ", " / ": " separators, ASCII escapes
    return vocab_text, merges_text


def gpt2_pairs(directory) -> List[Tuple[str, str]]:
    """The ``PREFIXvocab.json`` + ``PREFIXmerges.txt`` pairs in ``directory`` (``vocab.json``
    + ``merges.txt`` first), e.g. CS336's ``gpt2_vocab.json`` + ``gpt2_merges.txt``."""
    directory = os.fspath(directory)
    names = set(os.listdir(directory))
    pairs = []
    for name in sorted(names, key=lambda n: (n != "vocab.json", n)):
        if name.endswith("vocab.json"):
            merges = name[: -len("vocab.json")] + "merges.txt"
            if merges in names:
                pairs.append((os.path.join(directory, name), os.path.join(directory, merges)))
    return pairs


def partner_file(path) -> Optional[Tuple[str, str]]:
    """``(vocab_json, merges_txt)`` when ``path`` is one of a ``*vocab.json``/``*merges.txt``
    pair whose other half sits beside it."""
    path = os.fspath(path)
    directory, name = os.path.split(path)
    for mine, other in (("vocab.json", "merges.txt"), ("merges.txt", "vocab.json")):
        if name.endswith(mine):
            partner = os.path.join(directory, name[: -len(mine)] + other)
            if os.path.isfile(partner):
                return (path, partner) if mine == "vocab.json" else (partner, path)
    return None
