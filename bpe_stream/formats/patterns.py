"""The pattern dialects of the foreign formats: Python ``regex``, Oniguruma and fancy-regex.

bpe-stream's patterns are read by Python's ``regex``; HF compiles ``Split`` patterns with
Oniguruma (Ruby syntax) and tiktoken with fancy-regex.  They agree on classes, ``\\p{..}``,
look-arounds, possessive ``*+ ++ ?+`` and ``(?i)``, and differ on ``$`` (Python: end or
before a final newline; Ruby: end of any line; Rust: end), ``^`` (Ruby: start of any
line), ``\\Z`` and, in Ruby, ``X{n,m}+`` (a repetition, not possessive) and ``X{n}?``
(an optional ``X{n}``, not a lazy one).
:func:`to_oniguruma`/:func:`from_oniguruma` and :func:`to_fancy`/:func:`from_fancy`
rewrite exactly those constructs, on a small syntax tree of the pattern; a reversed
pattern that re-translates to the same text is given back as the original.
:func:`pretokenizer_for_pattern` names the pretokenizer a read-back pattern is.

Knows nothing of files or of the formats' documents (``hf``, ``tiktoken_file``).
"""

from __future__ import annotations

import re
from typing import Dict

from ..pretok.pretokenize import (
    CL100K_PATTERN,
    GPT2_PATTERN,
    O200K_PATTERN,
    WHITESPACE_PATTERN,
    Pretokenizer,
    PretokenizeError,
)
from ..encode.tokenizer import TokenizerError


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
            i = _open_group(p, i, stack)
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


def _open_group(p: str, i: int, stack: list) -> int:
    """Parse the group opener at ``p[i]`` (``(``) into ``stack``; return where parsing resumes.

    A comment group is skipped whole; a global flag group such as ``(?i)`` is a leaf; any other
    opener starts a group whose children the following tokens fill."""
    cur = stack[-1]
    if p.startswith("(?#", i):
        j = p.find(")", i)
        if j < 0:
            raise _PatternError("unterminated comment group")
        return j + 1
    m = _GROUP_OPEN.match(p, i)
    opener = m.group()
    if opener.endswith(")"):  # a global flag group such as (?i)
        cur.append(("flags", opener))
    else:
        node = ("group", opener, [])
        cur.append(node)
        stack.append(node[2])
    return m.end()


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


# What each dialect writes for the anchors and escapes the other reads differently.
_PY_TO_ONIG = {("anchor", "$"): r"(?=\n?\z)", ("anchor", "^"): r"\A", ("esc", r"\Z"): r"\z"}
_ONIG_TO_PY = {("anchor", "$"): r"(?=\n|\Z)", ("anchor", "^"): r"(?<![^\n])", ("esc", r"\z"): r"\Z",
               ("esc", r"\Z"): r"(?=\n?\Z)"}
_PY_TO_FANCY = {("anchor", "$"): r"(?=\n?\z)", ("esc", r"\Z"): r"\z"}
_FANCY_TO_PY = {("anchor", "$"): r"\Z", ("esc", r"\z"): r"\Z"}


def _replacing(table: Dict[tuple, str]):
    """A ``leaf`` for :func:`_translate`: the nodes in ``table`` become its raw text."""
    def leaf(node):
        raw = table.get(node)
        return node if raw is None else ("raw", raw)

    return leaf


def _same_brace(out: list, text: str) -> None:
    out.append(("brace", text))


def _py_to_onig(nodes: list) -> list:
    def brace(out, text):
        if text.endswith("+"):  # possessive in Python, a repetition in Ruby: use an atomic group
            out.append(("group", "(?>", [_take_atom(out, text), ("brace", text[:-1])]))
        elif text.endswith("?") and "," not in text:  # X{n}? is X{n} in Python (lazy), optional in Ruby
            out.append(("brace", text[:-1]))
        else:
            out.append(("brace", text))

    return _translate(nodes, _replacing(_PY_TO_ONIG), brace, lambda o: _map_flags(o, "isx", {"s": "m"}))


def _onig_to_py(nodes: list) -> list:
    def brace(out, text):
        exact = "," not in text
        if text.endswith("+") or (exact and text.endswith("?")):  # Ruby: (?:X{n,m})+ and (?:X{n})?
            out.append(("group", "(?:", [_take_atom(out, text), ("brace", text[:-1])]))
            out.append(("quant", text[-1]))
        else:
            out.append(("brace", text))

    return _translate(nodes, _replacing(_ONIG_TO_PY), brace, lambda o: _map_flags(o, "imx", {"m": "s"}))


def _py_to_fancy(nodes: list) -> list:
    return _translate(nodes, _replacing(_PY_TO_FANCY), _same_brace, lambda o: _map_flags(o, "isx", {}))


def _fancy_to_py(nodes: list) -> list:
    return _translate(nodes, _replacing(_FANCY_TO_PY), _same_brace, lambda o: _map_flags(o, "isx", {}))


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



def pretokenizer_for_pattern(python_pattern: str, where: str) -> str:
    """The pretokenizer a Python pattern is: a built-in name when it is one's pattern, else
    ``regex:PATTERN``, which must compile (an error names ``where`` the pattern came from)."""
    for name, pattern in (("gpt2", GPT2_PATTERN), ("cl100k", CL100K_PATTERN), ("o200k", O200K_PATTERN),
                          ("whitespace", WHITESPACE_PATTERN)):
        if python_pattern == pattern:
            return name
    name = "regex:" + python_pattern
    try:
        Pretokenizer.from_name(name)
    except PretokenizeError as exc:
        raise TokenizerError(f"{where}: {exc}") from None
    return name
