"""The small files beside an export that make ``transformers`` read it as bpe-stream does.

``tokenizer.json`` (``hf``) or ``vocab.json`` + ``merges.txt`` (``gpt2``) alone are read by
``transformers`` with its own defaults, and those differ from the tokenizer (issue 38):

* ``GPT2Tokenizer`` knows only the special tokens named in ``tokenizer_config.json``: any
  other (``<|pad|>``) is cut into byte tokens;
* with no special token at all, ``GPT2Tokenizer`` adds its default ``<|endoftext|>`` as a
  new id (``unk``/``bos``/``eos`` default to it);
* ``AutoTokenizer`` in transformers 4 refuses a folder without ``tokenizer_config.json``
  ("Unrecognized model"), and transformers 5 loads it without the eos token;
* ``clean_up_tokenization_spaces`` (true in some versions) turns ``" ."`` into ``"."`` on decode.

:func:`tokenizer_config` writes all of them down: the class to load (``GPT2Tokenizer``
for the gpt2 folder, ``PreTrainedTokenizerFast`` -- the ``tokenizer.json`` as it is -- for
hf), every special token at its id (``added_tokens_decoder``), the roles (eos, bos, pad,
unk: none unless asked for, so nothing is added that bpe-stream would not add), no prefix
space, no bos added, no clean-up.  :func:`special_tokens_map` is the older file of the roles.
"""

from __future__ import annotations

import json
import os
from typing import Dict, List, Optional, Tuple

from ..atomic import atomic_directory, atomic_write
from ..encode.tokenizer import Tokenizer, TokenizerError

TOKENIZER_CONFIG = "tokenizer_config.json"
SPECIAL_TOKENS_MAP = "special_tokens_map.json"
ROLES = ("bos", "eos", "pad", "unk")


def check_roles(tok: Tokenizer, roles: Optional[Dict[str, Optional[str]]]) -> Dict[str, str]:
    """``roles`` (role -> special token text, e.g. ``{"eos": "<|endoftext|>"}``) without the
    unset ones, after checking each names a special token of ``tok``."""
    specials = [text for _, role, text in tok.symbols if role == "special"]
    out = {}
    for role, text in (roles or {}).items():
        if role not in ROLES:
            raise TokenizerError(f"unknown special-token role {role!r}; choose one of {', '.join(ROLES)}")
        if text is None:
            continue
        if text not in specials:
            have = ", ".join(specials) if specials else "none"
            raise TokenizerError(f"--{role} {text!r} is not a special token of this tokenizer (it has: {have}); "
                                 "give one of its special tokens, or train with --special-token")
        out[role] = text
    return out


def _added_token(text: str) -> dict:
    return {"content": text, "lstrip": False, "normalized": False, "rstrip": False, "single_word": False,
            "special": True}


def tokenizer_config(tok: Tokenizer, tokenizer_class: str, roles: Dict[str, str]) -> dict:
    """The ``tokenizer_config.json`` document (``roles`` checked by :func:`check_roles`)."""
    config = {
        "tokenizer_class": tokenizer_class,
        "add_prefix_space": False,
        "add_bos_token": False,
        "add_eos_token": False,
        "clean_up_tokenization_spaces": False,
        # every special token at its own id, never split (GPT2Tokenizer cuts the others into bytes)
        "added_tokens_decoder": {str(sid): _added_token(text) for sid, role, text in tok.symbols if role == "special"},
    }
    for role in ROLES:
        # null, not absent: GPT2Tokenizer's defaults would add <|endoftext|> as a new id
        config[f"{role}_token"] = roles.get(role)
    # The specials without a role: transformers 4's Python GPT2Tokenizer decodes an added token
    # that is not in this list with a space on each side ("a <|pad|> b").
    config["additional_special_tokens"] = _others(tok, roles)
    return config


def _others(tok: Tokenizer, roles: Dict[str, str]) -> List[str]:
    taken = set(roles.values())
    return [text for _, role, text in tok.symbols if role == "special" and text not in taken]


def special_tokens_map(tok: Tokenizer, roles: Dict[str, str]) -> dict:
    doc = {f"{role}_token": _added_token(roles[role]) for role in ROLES if role in roles}
    others = _others(tok, roles)
    if others:
        doc["additional_special_tokens"] = [_added_token(text) for text in others]
    return doc


def config_files(tok: Tokenizer, tokenizer_class: str, roles: Dict[str, str]) -> List[Tuple[str, str]]:
    """``(file name, text)`` of ``tokenizer_config.json`` and ``special_tokens_map.json``."""
    return [(name, json.dumps(doc, ensure_ascii=False, indent=2) + "\n")
            for name, doc in ((TOKENIZER_CONFIG, tokenizer_config(tok, tokenizer_class, roles)),
                              (SPECIAL_TOKENS_MAP, special_tokens_map(tok, roles)))]


def with_roles(name: str, text: str, roles: Dict[str, str]) -> str:
    """The text of a copied ``tokenizer_config.json``/``special_tokens_map.json`` with ``roles`` set in it."""
    if not roles or name not in (TOKENIZER_CONFIG, SPECIAL_TOKENS_MAP):
        return text
    doc = json.loads(text)
    for role, value in roles.items():
        doc[f"{role}_token"] = value if name == TOKENIZER_CONFIG else _added_token(value)
    return json.dumps(doc, ensure_ascii=False, indent=2) + "\n"


def write_files(directory, files: List[Tuple[str, str]]) -> List[str]:
    """Writes each ``(name, text)`` into ``directory`` (atomically, one by one); the paths."""
    written = []
    for name, text in files:
        path = os.path.join(os.fspath(directory), name)
        with atomic_write(path, "w") as f:
            f.write(text)
        written.append(path)
    return written


def write_folder(directory, files: List[Tuple[str, str]]) -> List[str]:
    """Writes each ``(name, text)`` into ``directory`` (created if missing); the paths.  A new
    folder, or one holding only these names, is replaced in one step (readers see the old set
    of files or the new one, never a mix); one with other files of the user's gets each file
    replaced atomically."""
    directory = os.fspath(directory)
    names = {name for name, _ in files}
    others = set(os.listdir(directory)) - names if os.path.isdir(directory) else set()
    if others:
        return write_files(directory, files)
    with atomic_directory(directory) as tmp:
        for name, text in files:
            with open(os.path.join(tmp, name), "w", encoding="utf-8", newline="\n") as f:
                f.write(text)
                f.flush()
                os.fsync(f.fileno())
    return [os.path.join(directory, name) for name, _ in files]
