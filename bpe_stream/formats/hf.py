"""Hugging Face ``tokenizer.json``: export and load byte-level BPE.

Export writes a ``tokenizers`` document that ``tokenizers.Tokenizer.from_file`` loads and
that encodes every text to the ids ``Tokenizer.encode`` gives:

* model ``BPE`` with the vocabulary in GPT-2's printable byte form (ids kept as they are,
  gaps allowed), the merges in rank order, ``ignore_merges`` false, no dropout;
* pre-tokenizer: ``gpt2`` is HF's own ``ByteLevel`` (``use_regex`` true -- its pattern is
  GPT-2's); any other pattern is a ``Split`` (``Isolated``) with the pattern rewritten for
  Oniguruma (see :func:`to_oniguruma`) followed by ``ByteLevel`` without its own regex;
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

Pattern dialects.  bpe-stream's patterns are read by Python's ``regex``; HF compiles
``Split`` patterns with Oniguruma (Ruby syntax) and tiktoken with fancy-regex.  They agree
on classes, ``\\p{..}``, look-arounds, possessive ``*+ ++ ?+`` and ``(?i)``, and differ on
``$`` (Python: end or before a final newline; Ruby: end of any line; Rust: end), ``^``
(Ruby: start of any line), ``\\Z`` and, in Ruby, ``X{n,m}+`` (a repetition, not
possessive).  :func:`to_oniguruma`/:func:`from_oniguruma` and
:func:`to_fancy`/:func:`from_fancy` rewrite exactly those constructs; a reversed pattern
that re-translates to the same text is given back as the original.
"""

from __future__ import annotations

import json
import os
import re
from typing import Dict, List, Optional, Tuple

from ..atomic import atomic_write
from ..pretokenize import (
    CL100K_PATTERN,
    GPT2_PATTERN,
    O200K_PATTERN,
    WHITESPACE_PATTERN,
    Pretokenizer,
    PretokenizeError,
)
from ..tokenizer import Tokenizer, TokenizerError
from .files import read_tokenizer_file
from .printable import from_printable, to_printable

# ----------------------------------------------------------------------------------
# Regex dialects
# ----------------------------------------------------------------------------------

_GROUP_OPEN = re.compile(r"\((?:\?(?:[:=!>|]|<[=!]|P?<[A-Za-z_]\w*>|[A-Za-z\-]+[:)]))?")
_BRACE_QUANT = re.compile(r"\{(?:\d+(?:,\d*)?|,\d+)\}[+?]?")
_FLAG_GROUP = re.compile(r"\(\?([A-Za-z\-]+)([:)])")


class _PatternError(ValueError):
    pass


def _escape_end(p: str, i: int) -> int:
    n = len(p)
    if i + 1 >= n:
        raise _PatternError("the pattern ends with a lone backslash")
    c = p[i + 1]
    if c in "pPNx" and i + 2 < n and p[i + 2] == "{":
        j = p.find("}", i + 2)
        if j < 0:
            raise _PatternError(f"unterminated \\{c}{{...}}")
        return j + 1
    if c in "pP":
        return min(n, i + 3)
    if c == "x":
        return min(n, i + 4)
    if c == "u":
        return min(n, i + 6)
    if c == "U":
        return min(n, i + 10)
    return i + 2


def _class_end(p: str, i: int) -> int:
    n = len(p)
    j = i + 1
    if j < n and p[j] == "^":
        j += 1
    if j < n and p[j] == "]":
        j += 1
    while j < n:
        c = p[j]
        if c == "\\":
            j = _escape_end(p, j)
        elif p.startswith("[:", j) and p.find(":]", j) > 0:
            j = p.find(":]", j) + 2
        elif c == "[":
            j = _class_end(p, j)
        elif c == "]":
            return j + 1
        else:
            j += 1
    raise _PatternError("unterminated character class")


def _parse(p: str) -> list:
    """A small syntax tree: ``(kind, text)`` leaves and ``("group", opener, children)``."""
    root: list = []
    stack = [root]
    i, n = 0, len(p)
    while i < n:
        c = p[i]
        cur = stack[-1]
        if c == "\\":
            j = _escape_end(p, i)
            cur.append(("esc", p[i:j]))
            i = j
        elif c == "[":
            j = _class_end(p, i)
            cur.append(("class", p[i:j]))
            i = j
        elif c == "(":
            if p.startswith("(?#", i):
                j = p.find(")", i)
                if j < 0:
                    raise _PatternError("unterminated comment group")
                i = j + 1
                continue
            m = _GROUP_OPEN.match(p, i)
            opener = m.group()
            if opener.endswith(")"):  # a global flag group such as (?i)
                cur.append(("flags", opener))
            else:
                node = ("group", opener, [])
                cur.append(node)
                stack.append(node[2])
            i = m.end()
        elif c == ")":
            if len(stack) == 1:
                raise _PatternError("unbalanced ')'")
            stack.pop()
            i += 1
        elif c in "*+?":
            j = i + 1
            if j < n and p[j] in "+?":
                j += 1
            cur.append(("quant", p[i:j]))
            i = j
        elif c == "{" and _BRACE_QUANT.match(p, i):
            m = _BRACE_QUANT.match(p, i)
            cur.append(("brace", m.group()))
            i = m.end()
        elif c in "^$":
            cur.append(("anchor", c))
            i += 1
        elif c == "|":
            cur.append(("alt", c))
            i += 1
        else:
            cur.append(("char", c))
            i += 1
    if len(stack) != 1:
        raise _PatternError("unbalanced '('")
    return root


def _render(nodes: list) -> str:
    out = []
    for node in nodes:
        if node[0] == "group":
            out.append(node[1] + _render(node[2]) + ")")
        else:
            out.append(node[1])
    return "".join(out)


def _map_flags(opener: str, allowed: str, rename: Dict[str, str]) -> str:
    m = _FLAG_GROUP.match(opener)
    if not m:
        return opener
    flags = m.group(1)
    for f in flags:
        if f != "-" and f not in allowed:
            raise _PatternError(f"the inline flag {f!r} ({opener}) reads differently in the other regex engine")
    return "(?" + "".join(rename.get(f, f) for f in flags) + m.group(2)


def _is_atom(node) -> bool:
    return node[0] in ("char", "esc", "class", "group")


def _translate(nodes: list, leaf, brace, flags) -> list:
    out: list = []
    for node in nodes:
        kind = node[0]
        if kind == "group":
            out.append(("group", flags(node[1]), _translate(node[2], leaf, brace, flags)))
        elif kind == "flags":
            out.append(("flags", flags(node[1])))
        elif kind == "brace":
            brace(out, node[1])
        else:
            out.append(leaf(node))
    return out


def _take_atom(out: list, quant: str):
    if not out or not _is_atom(out[-1]):
        raise _PatternError(f"the quantifier {quant} has nothing to repeat")
    return out.pop()


def _py_to_onig(nodes: list) -> list:
    def leaf(node):
        if node == ("anchor", "$"):
            return ("raw", r"(?=\n?\z)")
        if node == ("anchor", "^"):
            return ("raw", r"\A")
        if node == ("esc", r"\Z"):
            return ("raw", r"\z")
        return node

    def brace(out, text):
        if text.endswith("+"):  # possessive in Python, a repetition in Ruby: use an atomic group
            out.append(("group", "(?>", [_take_atom(out, text), ("brace", text[:-1])]))
        else:
            out.append(("brace", text))

    return _translate(nodes, leaf, brace, lambda o: _map_flags(o, "isx", {"s": "m"}))


def _onig_to_py(nodes: list) -> list:
    def leaf(node):
        if node == ("anchor", "$"):
            return ("raw", r"(?=\n|\Z)")
        if node == ("anchor", "^"):
            return ("raw", r"(?<![^\n])")
        if node == ("esc", r"\z"):
            return ("raw", r"\Z")
        if node == ("esc", r"\Z"):
            return ("raw", r"(?=\n?\Z)")
        return node

    def brace(out, text):
        exact = "," not in text
        if text.endswith("+") or (exact and text.endswith("?")):  # Ruby: (?:X{n,m})+ and (?:X{n})?
            out.append(("group", "(?:", [_take_atom(out, text), ("brace", text[:-1])]))
            out.append(("quant", text[-1]))
        else:
            out.append(("brace", text))

    return _translate(nodes, leaf, brace, lambda o: _map_flags(o, "imx", {"m": "s"}))


def _py_to_fancy(nodes: list) -> list:
    def leaf(node):
        if node == ("anchor", "$"):
            return ("raw", r"(?=\n?\z)")
        if node == ("esc", r"\Z"):
            return ("raw", r"\z")
        return node

    return _translate(nodes, leaf, lambda out, text: out.append(("brace", text)), lambda o: _map_flags(o, "isx", {}))


def _fancy_to_py(nodes: list) -> list:
    def leaf(node):
        if node == ("anchor", "$") or node == ("esc", r"\z"):
            return ("raw", r"\Z")
        return node

    return _translate(nodes, leaf, lambda out, text: out.append(("brace", text)), lambda o: _map_flags(o, "isx", {}))


def _undo(pattern: str) -> str:
    """The likely original of a pattern that ``to_oniguruma``/``to_fancy`` wrote."""
    text = pattern.replace(r"(?=\n?\z)", "$").replace(r"\A", "^").replace(r"\z", r"\Z")
    # (?>ATOM{n,m}) -> ATOM{n,m}+
    nodes = _parse(text)

    def walk(nodes):
        out = []
        for node in nodes:
            if node[0] == "group":
                kids = walk(node[2])
                if node[1] == "(?>" and len(kids) == 2 and _is_atom(kids[0]) and kids[1][0] == "brace" and kids[1][1][-1] not in "+?":
                    out += [kids[0], ("brace", kids[1][1] + "+")]
                    continue
                out.append(("group", node[1], kids))
            else:
                out.append(node)
        return out

    return _render(walk(nodes))


def _convert(pattern: str, fn, what: str) -> str:
    try:
        return _render(fn(_parse(pattern)))
    except (_PatternError, re.error) as exc:
        raise TokenizerError(f"cannot express the pattern {pattern!r} for {what}: {exc}; use a simpler pattern") from None


def to_oniguruma(pattern: str) -> str:
    """A Python ``regex`` pattern rewritten so Oniguruma (HF ``Split``) splits the same way."""
    return _convert(pattern, _py_to_onig, "Hugging Face (Oniguruma)")


def to_fancy(pattern: str) -> str:
    """A Python ``regex`` pattern rewritten for fancy-regex (tiktoken)."""
    return _convert(pattern, _py_to_fancy, "tiktoken (fancy-regex)")


def _back(pattern: str, forward, backward, what: str) -> str:
    try:
        candidate = _undo(pattern)
        if forward(candidate) == pattern:
            return candidate
    except (TokenizerError, _PatternError):
        pass
    try:
        return _render(backward(_parse(pattern)))
    except _PatternError as exc:
        raise TokenizerError(f"cannot read the {what} pattern {pattern!r}: {exc}") from None


def from_oniguruma(pattern: str) -> str:
    """The Python ``regex`` pattern that splits like Oniguruma reading ``pattern``."""
    return _back(pattern, to_oniguruma, _onig_to_py, "Oniguruma")


def from_fancy(pattern: str) -> str:
    """The Python ``regex`` pattern that splits like fancy-regex (tiktoken) reading ``pattern``."""
    return _back(pattern, to_fancy, _fancy_to_py, "tiktoken")


def pretokenizer_for_pattern(python_pattern: str) -> str:
    """A pretokenizer name for a Python pattern: a built-in name when it is one, else ``regex:``."""
    for name, pattern in (("gpt2", GPT2_PATTERN), ("cl100k", CL100K_PATTERN), ("o200k", O200K_PATTERN),
                          ("whitespace", WHITESPACE_PATTERN)):
        if python_pattern == pattern:
            return name
    return "regex:" + python_pattern


# ----------------------------------------------------------------------------------
# Shared checks for the exports
# ----------------------------------------------------------------------------------


def printable_keys(tok: Tokenizer, what: str) -> Dict[int, str]:
    """id -> the token's text in GPT-2's printable form (symbols as their own text),
    checking that no two ids share one text."""
    symbol_text = {sid: text for sid, _, text in tok.symbols}
    keys: Dict[int, str] = {}
    seen: Dict[str, int] = {}
    for tid in sorted(tok.vocab):
        key = symbol_text[tid] if tid in symbol_text else to_printable(tok.vocab[tid])
        other = seen.get(key)
        if other is not None:
            raise TokenizerError(
                f"ids {other} and {tid} are both {key!r} in {what}'s token -> id table, which holds each text once; "
                "this tokenizer cannot be exported to that format"
            )
        seen[key] = tid
        keys[tid] = key
    return keys


def reject_end_of_word(tok: Tokenizer, what: str) -> None:
    if tok.marker_id is not None:
        raise TokenizerError(
            f"{what} has no word-end marker like this tokenizer's; export it with --format native "
            "or train without --end-of-word"
        )


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


def hf_file(path) -> str:
    """Where ``save_hf`` writes for ``path``: ``tokenizer.json`` inside it when it is a directory."""
    path = os.fspath(path)
    return os.path.join(path, "tokenizer.json") if os.path.isdir(path) else path


def write_hf(tok: Tokenizer, f) -> None:
    """Writes the ``tokenizer.json`` document of ``tok`` to the text stream ``f``."""
    json.dump(to_hf_document(tok), f, ensure_ascii=False, indent=2)
    f.write("\n")


def save_hf(tok: Tokenizer, path) -> str:
    """Writes ``tokenizer.json`` at ``path`` (inside it when ``path`` is a directory); returns the file."""
    path = hf_file(path)
    with atomic_write(path, "w") as f:
        write_hf(tok, f)
    return path


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
    name = pretokenizer_for_pattern(from_oniguruma(regex_text))
    try:
        Pretokenizer.from_name(name)
    except PretokenizeError as exc:
        raise TokenizerError(f"{where}: {exc}") from None
    return name


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


def from_hf_document(doc: dict, where: str = "tokenizer.json") -> Tokenizer:
    model = doc["model"]
    _check_model(model, where)
    _check_normalizer(doc.get("normalizer"), where)
    pretokenizer = _pretokenizer_from_hf(doc.get("pre_tokenizer"), where)
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
    start, end = _doc_boundaries(doc.get("post_processor"), where)
    for role, found in (("doc_start", start), ("doc_end", end)):
        if found is not None:
            text, tid = found
            if tid not in vocab:
                vocab[tid] = text.encode("utf-8")
            symbols.append((tid, role, text))
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
    data = read_tokenizer_file(path, "a tokenizer.json")
    try:
        doc = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise TokenizerError(f"{path}: cannot read a tokenizer.json ({exc})") from None
    if not is_hf(doc):
        raise TokenizerError(f"{path} is not a Hugging Face tokenizer.json (no model)")
    return from_hf_document(doc, path)
