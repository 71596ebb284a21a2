"""Hugging Face ``tokenizer.json``: export and load byte-level BPE.

Export writes a ``tokenizers`` document that ``tokenizers.Tokenizer.from_file`` loads and
that encodes every text to the ids ``Tokenizer.encode`` gives:

* model ``BPE`` with the vocabulary in GPT-2's printable byte form (ids kept as they are,
  gaps allowed), the merges in rank order, ``ignore_merges`` false, no dropout;
* pre-tokenizer: ``gpt2`` is HF's own ``ByteLevel`` (``use_regex`` true -- its pattern is
  GPT-2's); any other pattern is a ``Split`` (``Isolated``) with the pattern rewritten for
  Oniguruma (``patterns.to_oniguruma``) followed by ``ByteLevel`` without its own regex;
  ``none`` is ``ByteLevel`` alone; ``words`` a ``Split`` that removes whitespace runs.
  ``add_prefix_space`` is always false, ``trim_offsets`` false (offsets are exact);
* the ``ByteLevel`` decoder, and the special tokens as added tokens (``special``, not
  normalized, no strip) that are also in the model vocabulary so they keep their ids;
* document boundaries as a ``TemplateProcessing`` post-processor (``encode`` adds them, as
  bpe-stream does); the end-of-word marker has no HF equivalent and is an error.

Load reads the same shapes back, plus what ``tokenizers``' own byte-level BPE trainer and
converters write (GPT-2-like ids, special tokens anywhere, several merges making one
token, Roberta/Template post-processors with a start and/or end token).  Anything whose
ids bpe-stream could not reproduce -- WordPiece/Unigram/WordLevel models, normalizers,
``add_prefix_space``, ``ignore_merges``, dropout, subword prefixes/suffixes, stripping
added tokens, other pre-tokenizers -- is one clear error.

The patterns are rewritten by ``patterns``; the checks and token texts that the GPT-2
and tiktoken exports share are in ``common``.
"""

from __future__ import annotations

import json
import os
from typing import Dict, List, Optional, Tuple

from ..atomic import atomic_write
from ..pretok.pretokenize import Pretokenizer, PretokenizeError
from ..encode.tokenizer import Tokenizer, TokenizerError
from .common import printable_keys, reject_end_of_word
from .files import read_json
from .patterns import from_oniguruma, pretokenizer_for_pattern, to_oniguruma
from .printable import from_printable

# ----------------------------------------------------------------------------------
# Export
# ----------------------------------------------------------------------------------


def _byte_level(use_regex: bool) -> dict:
    return {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": use_regex}


def _hf_pre_tokenizer(pre: Pretokenizer) -> dict:
    if pre.name == "gpt2":
        return _byte_level(True)
    if pre.name == "none":
        return _byte_level(False)
    if pre.name == "words":
        split = {"type": "Split", "pattern": {"Regex": r"\s+"}, "behavior": "Removed", "invert": False}
    else:
        split = {"type": "Split", "pattern": {"Regex": to_oniguruma(pre.pattern)}, "behavior": "Isolated", "invert": False}
    return {"type": "Sequence", "pretokenizers": [split, _byte_level(False)]}


def _template(tok: Tokenizer, keys: Dict[int, str]) -> Optional[dict]:
    start, end = tok.doc_start_id, tok.doc_end_id
    if start is None and end is None:
        return None

    def piece(seq: str, type_id: int) -> List[dict]:
        out = []
        if start is not None:
            out.append({"SpecialToken": {"id": keys[start], "type_id": type_id}})
        out.append({"Sequence": {"id": seq, "type_id": type_id}})
        if end is not None:
            out.append({"SpecialToken": {"id": keys[end], "type_id": type_id}})
        return out

    specials = {}
    for tid in (start, end):
        if tid is not None:
            specials[keys[tid]] = {"id": keys[tid], "ids": [tid], "tokens": [keys[tid]]}
    return {"type": "TemplateProcessing", "single": piece("A", 0), "pair": piece("A", 0) + piece("B", 1),
            "special_tokens": specials}


def to_hf_document(tok: Tokenizer) -> dict:
    reject_end_of_word(tok, "a Hugging Face tokenizer.json")
    keys = printable_keys(tok, "tokenizer.json")
    added = [
        {"id": sid, "content": text, "single_word": False, "lstrip": False, "rstrip": False,
         "normalized": False, "special": True}
        for sid, role, text in tok.symbols if role == "special"
    ]
    post = _template(tok, keys) or {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False,
                                    "use_regex": True}
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": None,
        "pre_tokenizer": _hf_pre_tokenizer(tok.pretokenizer),
        "post_processor": post,
        "decoder": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": True},
        "model": {
            "type": "BPE",
            "dropout": None,
            "unk_token": None,
            "continuing_subword_prefix": None,
            "end_of_word_suffix": None,
            "fuse_unk": False,
            "byte_fallback": False,
            "ignore_merges": False,
            "vocab": {keys[tid]: tid for tid in sorted(tok.vocab)},
            # "left right": printable tokens never hold a space, and every tokenizers version reads it
            "merges": [f"{keys[left]} {keys[right]}" for left, right, _ in tok.merges],
        },
    }


def is_folder(path) -> bool:
    """Whether an hf export to ``path`` writes a folder: an existing directory, or a path
    ending in a separator (``-o out/``, created)."""
    path = os.fspath(path)
    return os.path.isdir(path) or path.endswith(os.sep)


def hf_file(path) -> str:
    """Where ``save_hf`` writes ``tokenizer.json`` for ``path``: inside it when it is a folder."""
    path = os.fspath(path)
    return os.path.join(path, "tokenizer.json") if is_folder(path) else path


def write_hf(tok: Tokenizer, f, like=None) -> None:
    """Writes the ``tokenizer.json`` document of ``tok`` to the text stream ``f`` (``like``:
    as a copy of that HF file, which ``tok`` extends; see ``hf_like``)."""
    f.write(hf_text(tok, like))


def hf_text(tok: Tokenizer, like=None) -> str:
    if like is not None:
        from .hf_like import to_hf_document_like

        doc = to_hf_document_like(tok, like)
    else:
        doc = to_hf_document(tok)
    return json.dumps(doc, ensure_ascii=False, indent=2) + "\n"


def save_hf(tok: Tokenizer, path, like=None, roles=None, notes: Optional[List[str]] = None) -> List[str]:
    """Writes ``tokenizer.json`` at ``path``; returns the files written.  A folder (see
    :func:`is_folder`) also gets the ``tokenizer_config.json`` and ``special_tokens_map.json``
    that ``AutoTokenizer.from_pretrained`` needs (``roles``: see ``transformers_config``), or,
    with ``like`` a folder, that folder's own files (``hf_like.folder_files``); what is
    not carried over is said in ``notes``."""
    from .transformers_config import check_roles, config_files, write_folder

    roles = check_roles(tok, roles)
    if not is_folder(path):
        if roles:
            raise TokenizerError("--bos/--eos/--pad/--unk are written to tokenizer_config.json, beside tokenizer.json: "
                                 "give a directory as -o (e.g. -o out/)")
        path = os.fspath(path)
        with atomic_write(path, "w") as f:
            write_hf(tok, f, like)
        return [path]
    files = [("tokenizer.json", hf_text(tok, like))]
    if like is not None and os.path.isdir(like):
        from .hf_like import folder_files

        files += folder_files(tok, like, roles, notes if notes is not None else [])
    else:
        # PreTrainedTokenizerFast: tokenizer.json as it is (a model class such as GPT2Tokenizer
        # would impose its own pre-tokenizer in transformers 5)
        files += config_files(tok, "PreTrainedTokenizerFast", roles)
    return write_folder(path, files)


# ----------------------------------------------------------------------------------
# Load
# ----------------------------------------------------------------------------------


def is_hf(doc) -> bool:
    return isinstance(doc, dict) and isinstance(doc.get("model"), dict) and (
        "added_tokens" in doc or "pre_tokenizer" in doc or "merges" in doc["model"] or "vocab" in doc["model"]
    )


def _kind(obj) -> Optional[str]:
    return obj.get("type") if isinstance(obj, dict) else None


def _pretokenizer_from_hf(pre, where: str) -> str:
    if pre is None:
        raise TokenizerError(f"{where} has no pre-tokenizer, so it is not byte-level; bpe-stream reads only "
                             "byte-level BPE (a ByteLevel pre-tokenizer)")
    steps = pre.get("pretokenizers") if _kind(pre) == "Sequence" else [pre]
    if not isinstance(steps, list) or not steps:
        raise TokenizerError(f"{where}: an empty pre-tokenizer Sequence; bpe-stream needs a ByteLevel pre-tokenizer")
    last = steps[-1]
    if _kind(last) != "ByteLevel":
        names = ", ".join(str(_kind(s)) for s in steps)
        raise TokenizerError(
            f"{where}: the pre-tokenizer ({names}) is not byte-level; bpe-stream reads only byte-level BPE "
            "(a ByteLevel pre-tokenizer, optionally after one Split)"
        )
    if last.get("add_prefix_space", False):
        raise TokenizerError(f"{where}: ByteLevel add_prefix_space=true is not supported (bpe-stream never adds a "
                             "space); set it to false")
    use_regex = last.get("use_regex", True)
    if len(steps) == 1:
        return "gpt2" if use_regex else "none"
    if len(steps) != 2 or _kind(steps[0]) != "Split" or use_regex:
        names = ", ".join(str(_kind(s)) for s in steps)
        raise TokenizerError(
            f"{where}: the pre-tokenizer sequence ({names}) is not supported; bpe-stream reads ByteLevel alone "
            "or one regex Split followed by ByteLevel with use_regex=false"
        )
    split = steps[0]
    pattern = split.get("pattern")
    if not isinstance(pattern, dict) or not isinstance(pattern.get("Regex"), str):
        raise TokenizerError(f"{where}: the Split pre-tokenizer must use a Regex pattern, not {pattern!r}")
    regex_text = pattern["Regex"]
    behavior = split.get("behavior")
    if split.get("invert", False):
        raise TokenizerError(f"{where}: a Split with invert=true is not supported; bpe-stream reads invert=false")
    if behavior == "Removed" and regex_text == r"\s+":
        return "words"
    if behavior != "Isolated":
        raise TokenizerError(f"{where}: a Split with behavior {behavior!r} is not supported; use Isolated")
    return pretokenizer_for_pattern(from_oniguruma(regex_text), where)


def _check_model(model: dict, where: str) -> None:
    mtype = model.get("type", "BPE" if "merges" in model else None)
    if mtype != "BPE":
        raise TokenizerError(
            f"{where} holds a {mtype or 'unknown'} model, not byte-level BPE; bpe-stream reads only byte-level BPE"
        )
    if model.get("dropout") not in (None, 0, 0.0):
        raise TokenizerError(f"{where}: BPE dropout={model['dropout']} is random; set it to null to load it")
    for key in ("continuing_subword_prefix", "end_of_word_suffix"):
        if model.get(key):
            raise TokenizerError(f"{where}: BPE {key}={model[key]!r} is not supported (bpe-stream merges plain bytes)")
    if model.get("ignore_merges"):
        raise TokenizerError(
            f"{where}: BPE ignore_merges=true (whole-word lookup before merging) is not supported; bpe-stream "
            "encodes by merge rank only"
        )


def _check_normalizer(norm, where: str) -> None:
    if norm is None:
        return
    if _kind(norm) == "Sequence" and not norm.get("normalizers"):
        return
    raise TokenizerError(
        f"{where}: the normalizer {_kind(norm) or norm!r} is not supported (bpe-stream does not normalize text); "
        "remove it or use a tokenizer without one"
    )


def _doc_boundaries(post, where: str) -> Tuple[Optional[Tuple[str, int]], Optional[Tuple[str, int]]]:
    """The (text, id) of the tokens the post-processor puts around a single text."""
    kind = _kind(post)
    if post is None or kind == "ByteLevel":
        return None, None
    if kind == "Sequence":
        found = (None, None)
        for step in post.get("processors", []):
            s, e = _doc_boundaries(step, where)
            if s or e:
                if found != (None, None):
                    raise TokenizerError(f"{where}: two post-processors add tokens; bpe-stream supports one")
                found = (s, e)
        return found
    if kind == "RobertaProcessing":
        (s_text, s_id), (e_text, e_id) = post["cls"], post["sep"]
        return (s_text, s_id), (e_text, e_id)
    if kind == "TemplateProcessing":
        single = post.get("single", [])
        specials = post.get("special_tokens", {})
        seq_at = [i for i, p in enumerate(single) if "Sequence" in p]
        if len(seq_at) != 1 or len(single) > 3:
            raise TokenizerError(f"{where}: the TemplateProcessing template is not supported; bpe-stream supports "
                                 "at most one token before and one after the text")

        def token(p):
            name = p["SpecialToken"]["id"]
            entry = specials.get(name, {})
            ids = entry.get("ids", [])
            if len(ids) != 1:
                raise TokenizerError(f"{where}: the template token {name!r} is not exactly one id")
            return (entry.get("tokens", [name])[0], ids[0])

        i = seq_at[0]
        if i > 1 or len(single) - i > 2:
            raise TokenizerError(f"{where}: the TemplateProcessing template is not supported; bpe-stream supports "
                                 "at most one token before and one after the text")
        start = token(single[0]) if i == 1 else None
        end = token(single[i + 1]) if len(single) > i + 1 else None
        return start, end
    raise TokenizerError(f"{where}: the post-processor {kind!r} is not supported; use ByteLevel or TemplateProcessing")


def _hf_vocab(model: dict, where: str):
    """The BPE model's vocab object as ``(vocab, text_to_id, id_to_text)``: ``{id: bytes}``
    (printable byte-level text decoded, other text as its UTF-8), text to id, and each id's
    first text."""
    raw_vocab = model.get("vocab")
    if not isinstance(raw_vocab, dict):
        raise TokenizerError(f"{where}: the BPE model has no vocab object")
    vocab: Dict[int, bytes] = {}
    text_to_id: Dict[str, int] = {}
    id_to_text: Dict[int, str] = {}
    for text, tid in raw_vocab.items():
        if not isinstance(tid, int) or isinstance(tid, bool) or tid < 0:
            raise TokenizerError(f"{where}: the id of {text!r} is not a non-negative integer")
        text_to_id[text] = tid
        id_to_text.setdefault(tid, text)
        try:
            vocab[tid] = from_printable(text)
        except KeyError:
            vocab[tid] = text.encode("utf-8")
    return vocab, text_to_id, id_to_text


def _hf_added_tokens(doc: dict, vocab: Dict[int, bytes], text_to_id: Dict[str, int], id_to_text: Dict[int, str],
                     where: str) -> List[Tuple[int, str, str]]:
    """The added tokens as special symbols, each also put in ``vocab`` as its UTF-8; fails on
    the flags bpe-stream does not support and on an id the vocab gives to another token."""
    symbols: List[Tuple[int, str, str]] = []
    for entry in doc.get("added_tokens") or []:
        content, tid = entry.get("content"), entry.get("id")
        if not isinstance(content, str) or not isinstance(tid, int):
            raise TokenizerError(f"{where}: an added token without content and id")
        for flag in ("lstrip", "rstrip", "single_word"):
            if entry.get(flag):
                raise TokenizerError(f"{where}: the added token {content!r} has {flag}=true, which bpe-stream does "
                                     "not support; set it to false")
        model_id = text_to_id.get(content)
        if model_id is not None and model_id != tid:
            raise TokenizerError(f"{where}: the added token {content!r} has id {tid} but the vocab gives it {model_id}")
        model_text = id_to_text.get(tid)
        if model_text is not None and model_text != content and vocab[tid] != content.encode("utf-8"):
            raise TokenizerError(f"{where}: the added token {content!r} has id {tid}, which the vocab gives to "
                                 f"{model_text[:40]!r}; one id cannot be two tokens")
        vocab[tid] = content.encode("utf-8")
        symbols.append((tid, "special", content))
    return symbols


def _hf_merges(model: dict, text_to_id: Dict[str, int], where: str) -> list:
    """The BPE model's merges (``"left right"`` strings or ``[left, right]`` lists) as
    ``(left, right, new)`` id triples, in rank order."""
    raw_merges = model.get("merges")
    if not isinstance(raw_merges, list):
        raise TokenizerError(f"{where}: the BPE model has no merges list")
    merges = []
    for rank, m in enumerate(raw_merges):
        if isinstance(m, str):
            parts = m.split(" ")
        elif isinstance(m, list):
            parts = m
        else:
            parts = None
        if not parts or len(parts) != 2 or not all(isinstance(x, str) for x in parts):
            raise TokenizerError(f"{where}: merge {rank} is not 'left right': {str(m)[:40]!r}")
        left, right = parts
        ids = (text_to_id.get(left), text_to_id.get(right), text_to_id.get(left + right))
        if None in ids:
            raise TokenizerError(f"{where}: merge {rank} ({left!r} {right!r}) names a token missing from the vocab")
        merges.append(ids)
    return merges


def from_hf_document(doc: dict, where: str = "tokenizer.json") -> Tokenizer:
    model = doc["model"]
    _check_model(model, where)
    _check_normalizer(doc.get("normalizer"), where)
    pretokenizer = _pretokenizer_from_hf(doc.get("pre_tokenizer"), where)
    vocab, text_to_id, id_to_text = _hf_vocab(model, where)
    symbols = _hf_added_tokens(doc, vocab, text_to_id, id_to_text, where)
    start, end = _doc_boundaries(doc.get("post_processor"), where)
    for role, found in (("doc_start", start), ("doc_end", end)):
        if found is not None:
            text, tid = found
            if tid not in vocab:
                vocab[tid] = text.encode("utf-8")
            symbols.append((tid, role, text))
    merges = _hf_merges(model, text_to_id, where)
    try:
        return Tokenizer(vocab, merges, symbols, pretokenizer=pretokenizer, tie_break=None)
    except (TokenizerError, PretokenizeError) as exc:
        msg = str(exc)
        if msg.startswith("not a byte-level BPE"):
            msg += " (train with initial_alphabet=pre_tokenizers.ByteLevel.alphabet())"
        raise TokenizerError(f"{where}: {msg}") from None


def load_hf(path) -> Tokenizer:
    path = os.fspath(path)
    if os.path.isdir(path):
        path = os.path.join(path, "tokenizer.json")
    doc = read_json(path, "a tokenizer.json")
    if not is_hf(doc):
        raise TokenizerError(f"{path} is not a Hugging Face tokenizer.json (no model)")
    return from_hf_document(doc, path)
