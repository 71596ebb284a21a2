"""Pretokenizers and special-token splitting: text in, pretokens out.

This module owns the named patterns (``gpt2``, ``cl100k``, ``o200k``, ``whitespace``,
``words``, ``none``, ``regex:PATTERN``), the longest-match splitting of special tokens,
and the rule for where a long text may be cut so that pretokenizing the pieces gives
exactly the pretokens of the whole, and :func:`gpt2_split`, gpt2's pretokens by ``re`` on
ASCII runs (for encoding and counting text in Python; files are counted by the native
scanner, ``bpe_stream.pretok.scan``).  It works on ``str`` only; bytes
that are not UTF-8 arrive here as lone surrogates (``surrogateescape``) and leave the same
way, so invalid input is preserved byte for byte.  It knows nothing of files, LMDB or the CLI.
The examples in the docstrings are run by ``tests/test_doctests.py``.
"""

from __future__ import annotations

import codecs
import re
from dataclasses import dataclass, replace
from functools import cache, cached_property
from typing import Callable, Iterator, Optional, Sequence

from ..errors import UserError


def _compile(pattern: str, _cache: dict = {}):  # noqa: B006 - the dict is the cache, on purpose
    compiled = _cache.get(pattern)
    if compiled is None:
        import regex  # imported at the first pattern compiled, not with this module (~20 ms)

        compiled = _cache[pattern] = regex.compile(pattern)
    return compiled


class _Lazy:
    """A ``regex`` pattern compiled (and ``regex`` imported) when first used: counting a file
    with a named pretokenizer and the C extension never needs one.  A method, once looked up,
    is the compiled pattern's own, kept in the instance (no indirection on later calls)."""

    def __init__(self, pattern):
        self.pattern = pattern

    def __getattr__(self, name: str):  # only for what the instance does not hold yet
        if name.startswith("__"):
            raise AttributeError(name)
        value = getattr(_compile(self.pattern), name)
        setattr(self, name, value)
        return value


GPT2_PATTERN = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
# tiktoken's cl100k_base and o200k_base patterns, character for character.
CL100K_PATTERN = (
    r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+"""
    r"""|\s++$|\s*[\r\n]|\s+(?!\S)|\s"""
)
O200K_PATTERN = "|".join(
    [
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""\p{N}{1,3}""",
        r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
        r"""\s*[\r\n]+""",
        r"""\s+(?!\S)""",
        r"""\s+""",
    ]
)
WHITESPACE_PATTERN = r"""\s+|\S+"""
WORDS_PATTERN = r"""\S+"""

# name -> (pattern, whether every character of the input ends up in some pretoken)
NAMED_PATTERNS = {
    "gpt2": (GPT2_PATTERN, True),
    "cl100k": (CL100K_PATTERN, True),
    "o200k": (O200K_PATTERN, True),
    "whitespace": (WHITESPACE_PATTERN, True),
    "words": (WORDS_PATTERN, False),
}
PRETOKENIZER_NAMES = ("gpt2", "cl100k", "o200k", "whitespace", "words", "none", "regex:PATTERN")

# ``count --max-token-bytes`` in a new store: a pretoken longer is cut into pieces of at most
# this many bytes.  A cap bounds what one pretoken costs everywhere after the scanner (the
# counts, the trainer's words and pairs, the longest token, the encoder); SentencePiece has
# one too (max_sentencepiece_length).  64 KiB is far above the pretokens of text: the
# longest in the shared corpora (code, English, multilingual; 150 MB) are 333 bytes for
# gpt2, cl100k and o200k and 15,112 for whitespace and words, so their stores are the same
# with it as without.
DEFAULT_MAX_TOKEN_BYTES = 1 << 16

# Where a text may be cut.  For gpt2, whitespace and words no alternative matches a
# non-space character followed by a space character, so every such position is a
# pretoken boundary and the pieces on either side pretokenize exactly as the whole.
# cl100k/o200k let punctuation absorb following CR/LF, so only other spaces qualify.
_CUT_ANY_SPACE = _Lazy(r"(?r)(?<=\S)\s")
# words (\S+ alone) has no pretoken with a space in it: a cut before any space is safe.
_CUT_BEFORE_SPACE = _Lazy(r"(?r)\s")
_CUT_NOT_NEWLINE = _Lazy(r"(?r)(?<=\S)[^\S\r\n]")
# whitespace (\s+|\S+) changes pretoken wherever a space meets a non-space, either way round.
_CUT_SPACE_EDGE = _Lazy(r"(?r)(?<=\S)\s|(?<=\s)\S")
_CUTTERS = {"cl100k": _CUT_NOT_NEWLINE, "o200k": _CUT_NOT_NEWLINE, "whitespace": _CUT_SPACE_EDGE}  # else any space
# Text with no such space (a base64 line, code without spaces) is cut where two non-space
# characters of different families meet -- letters, numbers, the rest -- an apostrophe on
# neither side (contractions).  Each family is a run alternative of these patterns, so its
# match ends right there, alone as in the whole, and the next match starts there: the cut
# depends on these two characters only.  cl100k and o200k let one non-letter lead letters
# ("!abc", "!Abc"), so rest-then-letter is no cut for them; o200k's letter runs take marks
# (\p{M}) and so do its runs of the rest: no cut beside a mark there.  whitespace and words
# have no such cut (\S+ spans the families).
# Runs of one family each (marks, apostrophes and spaces end a run and are never beside a
# cut), as groups 1 (letters), 2 (numbers), 3 (the rest); a cut is where a run ends and the
# next one starts, of another family, but for the pairs that _FAMILY_NO_CUT forbids.
_RUNS = {
    "gpt2": _Lazy(r"(\p{L}++)|(\p{N}++)|([^\s\p{L}\p{N}']++)"),
    "cl100k": _Lazy(r"(\p{L}++)|(\p{N}++)|([^\s\p{L}\p{N}']++)"),
    "o200k": _Lazy(r"(\p{L}++)|(\p{N}++)|([^\s\p{L}\p{N}\p{M}']++)"),
}
_FAMILY_NO_CUT = {"gpt2": {(3, 1)}, "cl100k": {(3, 1)}, "o200k": {(3, 1)}}
_FAMILY_NO_CUT["gpt2"] = set()  # gpt2's letters take a space before them, never another character
_FAMILY_WINDOW = 1 << 16


def _family_cuts(name: str, text: str, lo: int, hi: int) -> Iterator[int]:
    """The cuts between two non-space characters of different families in ``text[lo:hi]``
    (both characters inside it), in order."""
    no_cut = _FAMILY_NO_CUT[name]
    prev_end, prev_family = -1, 0
    for m in _RUNS[name].finditer(text, lo, hi):
        family = m.lastindex
        if m.start() == prev_end and family != prev_family and (prev_family, family) not in no_cut:
            yield m.start()
        prev_end, prev_family = m.end(), family


def _last_family_cut(name: str, text: str, end: int) -> int:
    """The last of :func:`_family_cuts` in ``text[:end]``, or 0: windows from the end (a cut
    depends on two characters only, so any window sees the cuts inside it)."""
    hi = end
    while hi > 1:
        lo = max(0, hi - _FAMILY_WINDOW)
        last = 0
        for last in _family_cuts(name, text, lo, hi):  # noqa: B007 - the last one is wanted
            pass
        if last:
            return last
        if lo == 0:
            return 0
        hi = lo + 1  # (the pair across the window's start)
    return 0


# Looked for only in text this long without a space cut (ordinary text is cut as before).
FAMILY_CUT_MIN_CHARS = 1 << 14
# With a cap (``max_bytes``), a run longer than it that is one pretoken (10 MB of CJK, a
# base64 line under ``words``) is cut between two of its pieces: the pieces are cut from the
# pretoken's start, so the text after a piece boundary starts the same pretoken's rest.
_SPACE = _Lazy(r"\s")
_CRLF = _Lazy(r"[\r\n]")
# The most characters after a match that a named pattern reads to decide where the match
# ends: a contraction's three ("'ll" after a letter run, for o200k), a space's one (\s+(?!\S)).
NAMED_LOOKAHEAD = 4
# For a custom pattern we cannot prove a boundary; we cut at the start of a match that has
# this many characters after it, and only where the text before the cut pretokenizes
# alone into the same matches.  A pattern that never looks further ahead than this (any
# lookahead, or a greedy run that stops within it) gets exactly the pretokens of the whole.
CUSTOM_LOOKAHEAD_MARGIN = 4096


class PretokenizeError(UserError, ValueError):
    """Input a pretokenizer cannot handle (for example text a custom pattern does not cover)."""


def require_utf8(text: str, what: str) -> None:
    """Settings are stored and matched as text: one given in bytes that are not UTF-8 (which
    arrive as lone surrogates) is an error that says so."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        shown = text.encode("utf-8", "surrogateescape").decode("ascii", "backslashreplace")
        raise PretokenizeError(f"{what} '{shown}' is not valid UTF-8; give it as UTF-8 text") from None


def check_end_of_word(marker: Optional[str], special_tokens: Sequence[str]) -> None:
    """The word-end marker, when there is one, is a non-empty text that is not a special token."""
    if marker is None:
        return
    if not marker:
        raise PretokenizeError("--end-of-word cannot be empty; give the marker text, e.g. '</w>'")
    require_utf8(marker, "the --end-of-word marker")
    if marker in special_tokens:
        raise PretokenizeError(
            f"--end-of-word {marker!r} is also a special token; the marker and the special tokens must differ"
        )


@dataclass(frozen=True)
class Pretokenizer:
    """A named pretokenizer: ``split`` turns text into pretokens, ``safe_cut`` says where
    a prefix of the text may be pretokenized on its own.

    >>> Pretokenizer.from_name("gpt2").pattern == GPT2_PATTERN
    True
    """

    name: str
    pattern: Optional[str]  # None for "none": the whole text is one pretoken
    lossless: bool
    max_bytes: Optional[int] = None  # pretokens longer than this are cut (cap_pieces); None: no cap

    @staticmethod
    def from_name(name: str, max_bytes: Optional[int] = None) -> "Pretokenizer":
        check_max_token_bytes(max_bytes)
        return replace(Pretokenizer._named(name), max_bytes=max_bytes or None)

    @staticmethod
    def _named(name: str) -> "Pretokenizer":
        if name == "none":
            return Pretokenizer("none", None, True)
        if name.startswith("regex:"):
            pattern = name[len("regex:"):]
            if not pattern:
                raise PretokenizeError("the regex: pretokenizer needs a pattern, e.g. 'regex:\\S+|\\s+'")
            require_utf8(pattern, "the pattern")
            import regex  # (only a custom pattern, the fallback without the C extension and text in memory need it)

            try:
                regex.compile(pattern)
            except regex.error as exc:
                raise PretokenizeError(f"the pattern {pattern!r} does not compile: {exc}") from None
            return Pretokenizer(name, pattern, True)
        if name not in NAMED_PATTERNS:
            raise PretokenizeError(
                f"unknown pretokenizer {name!r}; choose one of {', '.join(PRETOKENIZER_NAMES)}"
            )
        pattern, lossless = NAMED_PATTERNS[name]
        return Pretokenizer(name, pattern, lossless)

    @property
    def compiled(self):
        return _compile(self.pattern)

    @property
    def is_custom(self) -> bool:
        return self.name.startswith("regex:")

    def split(self, text: str) -> list:
        """The pretokens of ``text`` (no special tokens inside), in order.  A custom pattern's
        empty matches are no pretokens (the named patterns have none): counting them would
        count nothing, and encoding one with a word-end marker would add a marker.

        >>> Pretokenizer.from_name("gpt2").split("Hello world's 42!")
        ['Hello', ' world', "'s", ' 42', '!']
        >>> Pretokenizer.from_name("words").split("a  b\\n")  # words drops the spaces
        ['a', 'b']
        """
        if not text:
            return []
        if self.pattern is None:
            pieces = [text]
        else:
            pieces = self.compiled.findall(text)
            if self.is_custom:
                if "" in pieces:
                    pieces = [p for p in pieces if p]
                if sum(map(len, pieces)) != len(text):
                    self._raise_uncovered(text)
        return cap_pieces(pieces, self.max_bytes) if self.max_bytes else pieces

    def _raise_uncovered(self, text: str) -> None:
        pos = 0
        for m in self.compiled.finditer(text):
            if m.start() != pos:
                break
            pos = m.end()
        snippet = text[pos:pos + 20]
        raise PretokenizeError(
            f"the pattern {self.pattern!r} does not match the text at {snippet!r}; "
            "extend the pattern so it covers every character (e.g. add '|\\s+|.')"
        )

    def safe_cut(self, text: str) -> int:
        """The largest index ``i`` (0 when there is none) such that ``split(text[:i]) +
        split(rest)`` equals ``split(text[:i] + rest)`` for any continuation ``rest``.

        >>> gpt2 = Pretokenizer.from_name("gpt2")
        >>> gpt2.safe_cut("Hello world again")  # before " again": a space after a non-space
        11
        >>> gpt2.safe_cut("Hello")  # "Hello" may go on ("Hellos"): no cut yet
        0
        >>> Pretokenizer.from_name("cl100k").safe_cut("a!\\nb")  # cl100k's "!\\n" is one pretoken
        0
        """
        if self.pattern is None:
            return self._piece_cut(text, 0) if self.max_bytes else 0
        if self.is_custom:
            return self._custom_cut(text)
        if self.name == "words":
            m = _CUT_BEFORE_SPACE.search(text)
            if not m:
                return self._last_piece_cut(text) if self.max_bytes else 0
            # Before the last space -- or, with a cap, at a piece boundary of the pretoken
            # after it (" " + 1 GB of CJK); after it when it starts the text.
            after = m.end()
            long_tail = self.max_bytes and len(text) - after > self.max_bytes // 4
            piece = self._last_piece_cut(text[after:]) if long_tail else 0
            return after + piece if piece else (m.start() or after)
        cutter = _CUTTERS.get(self.name, _CUT_ANY_SPACE)
        # A cut has a non-space before it, so none is in the spaces that end the text: the
        # searches start before them (``regex`` went through 8 MB of spaces in 0.5 s).
        solid = len(text.rstrip(SPACE_STRING))
        m = cutter.search(text, 0, solid + 1)
        if m:
            return m.start()
        if len(text) < FAMILY_CUT_MIN_CHARS:
            return 0
        cut = _last_family_cut(self.name, text, solid) if self.name in _RUNS else 0
        if cut:
            return cut
        return self._last_piece_cut(text) if self.max_bytes else 0

    def _last_piece_cut(self, text: str) -> int:
        """With a cap, in text with no other cut: the last boundary between two pieces of
        the pretoken that reaches the end of ``text``, or 0.  The text starts at a safe cut,
        so that pretoken starts where the whole's does when it starts the text, or when its
        start is more than NAMED_LOOKAHEAD characters before the end: the matches before it
        then end where the whole's do, since a named pattern decides where a match ends by
        at most that many characters after it (o200k's "word" becomes "word's" when "'s"
        comes; cl100k's "word !!!" + 1 GB of CJK has its giant pretoken after the "!!!").
        Two kinds of match look further, however far, so a pretoken next to them must start
        the text: a run of spaces (cl100k's ``\\s*[\\r\\n]`` gives back spaces up to the
        run's last newline), so neither the pretoken nor the character before it may be a
        space; and o200k's run of letters (``U*L+`` gives back uppercase letters until a
        lowercase one follows: "!\u0301" + 1 GB of "A" is "!\u0301" and the A's, with a
        "b" after them one pretoken), so for o200k the character before it may be neither
        a letter nor a mark.

        >>> cl100k = Pretokenizer.from_name("cl100k", 8)
        >>> text = "word !!!" + "中" * 9
        >>> cut = cl100k._last_piece_cut(text)
        >>> text[:cut], cl100k.split(text[:cut]) + cl100k.split(text[cut:] + " end") == cl100k.split(text + " end")
        ('word !!!中中中中中中', True)
        """
        last = None
        for last in self.compiled.finditer(text):  # noqa: B007 - the last one is wanted
            pass
        if last is None or last.end() != len(text):
            return 0
        start = last.start()
        if start and len(text) - start <= NAMED_LOOKAHEAD:
            return 0
        if start and (_SPACE.match(text, start - 1) or _SPACE.match(text, start)):
            return 0
        if start and self.name == "o200k" and _WORD_CHAR.match(text, start - 1):
            return 0
        return self._piece_cut(text, start)

    def _piece_cut(self, text: str, start: int) -> int:
        # The last piece boundary at least 2 characters before the end (the character after
        # the cut decides, with cl100k, whether a non-letter leads letters), between two
        # non-spaces (a space run's matches depend on where it ends), no apostrophe after it
        # (a contraction would start there), where the pattern's match from the boundary
        # ends where the pretoken does.
        n = len(text)
        bounds = _piece_bounds(text[start:], self.max_bytes)
        rest_ends_alike = _O200kRest(text, start) if self.name == "o200k" else None
        # cl100k's and o200k's punctuation takes the CR/LF after it ("!" + 1 GB of "\n"):
        # matched from inside those, the rest would run on into the spaces after them
        # (cl100k: "!!" + "\n" * 10**6 + "\u3000" ends "!...\n", "\u3000"), so no cut there.
        # (A run of letters holds none: not searched for, through 1 GB of CJK.)
        newline_tail = None
        if self.name in ("cl100k", "o200k") and not _SPACE.match(text, start):
            letters = rest_ends_alike.word if rest_ends_alike else _CL100K_WORD_START.match(text, start)
            tail = None if letters else _CRLF.search(text, start)
            newline_tail = tail.start() if tail else n
        for b in reversed(bounds):
            p = start + b
            if p > n - 2:
                continue
            if self.pattern is None:
                return p
            if text[p] == "'" or (newline_tail is not None and p >= newline_tail):
                continue
            if _SPACE.match(text, p - 1) or _SPACE.match(text, p):
                # Inside a run of spaces (a space run's matches depend on where it ends): a
                # cut where the text before it is one match too, so both sides keep the
                # pieces of the whole (a run after its last newline is a match of its own
                # for cl100k: no cut there).
                left = self.compiled.match(text, start, p)
                if left is None or left.end() != p:
                    continue
            m = self.compiled.match(text, p)
            if m is None or m.end() != n:
                continue
            if rest_ends_alike is not None:
                # o200k: the match from ``p`` must end where the pretoken does, and the text
                # before ``p`` stay one match when cut there ("!\u0301" + "A" * 60 + "Cd" is
                # one pretoken, its first 56 characters alone two)
                if not rest_ends_alike(p):
                    continue
                if not rest_ends_alike.left_is_one_match(p):
                    left = self.compiled.match(text, start, p)
                    if left is None or left.end() != p:
                        continue
            return p
        return 0

    def _custom_cut(self, text: str) -> int:
        # A cut at the start of a match with CUSTOM_LOOKAHEAD_MARGIN characters after it,
        # where the text before it, pretokenized alone, gives the matches it has inside
        # the whole (a lookahead at its end, like \s+(?!\S), may see the difference).
        limit = len(text) - CUSTOM_LOOKAHEAD_MARGIN
        if limit <= 0:
            return 0
        starts, pieces = [], []
        for m in self.compiled.finditer(text):
            if m.start() > limit:
                break
            starts.append(m.start())
            pieces.append(m.group())
        for k in range(len(starts) - 1, max(0, len(starts) - 9), -1):
            if self.compiled.findall(text[:starts[k]]) == pieces[:k]:
                return starts[k]
        return 0


def check_max_token_bytes(max_bytes: Optional[int]) -> None:
    """The cap is a whole number of bytes, at least 4 (a UTF-8 character's most), or 0/None: no cap."""
    if max_bytes is None or max_bytes == 0:
        return
    if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 4:
        raise PretokenizeError(
            f"--max-token-bytes must be at least 4 (the longest UTF-8 character), or 0 for no cap; not {max_bytes!r}"
        )


def _utf8_len(ch: str) -> int:
    c = ord(ch)
    if c < 0x80 or 0xDC80 <= c <= 0xDCFF:  # ASCII, or a byte that is not UTF-8 (surrogateescape)
        return 1
    return 2 if c < 0x800 else 3 if c < 0x10000 else 4


# o200k's pretokens are not runs of one class: what the pattern matches from inside one may
# end elsewhere than the pretoken does (_O200kRest).
_O200K_WORD_START = _Lazy(r"[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]")
_CL100K_WORD_START = _Lazy(r"[^\r\n\p{L}\p{N}]?\p{L}")  # (its letter runs: marks are not letters)
_LOWERCASE = _Lazy(r"\p{Ll}")
_WORD_CHAR = _Lazy(r"[\p{L}\p{M}]")
_BOTH_CASES = _Lazy(r"[\p{Lm}\p{Lo}\p{M}]")  # in U and in L
_MARK = _Lazy(r"\p{M}")


class _O200kRest:
    """Called with ``p``: whether o200k's match from ``p`` ends where the pretoken does,
    whatever follows ``text``.  The pretoken starts at ``start``, runs past the end of
    ``text`` and holds ``p`` (at least 2 characters before the end); the match from ``p`` in
    ``text`` reaches the end.

    - A run of letters and marks ``U*L+`` (``U``: Lu Lt Lm Lo M, ``L``: Ll Lm Lo M; the
      pattern's first two alternatives, which take it when a letter or mark starts it; its
      ``U`` run ends at its first lowercase letter, the only letter not in ``U``): from
      inside its ``U`` run the match ends where the run's does.  From inside its ``L`` run
      the match starts a ``U`` run of its own, which goes on past the pretoken's end into an
      uppercase letter ("Ab" + 1 GB of CJK + "Cd": "Ab中...中" is one pretoken, "中...中Cd"
      another) -- unless a lowercase letter (``L`` only) ends that ``U`` run within the text.
    - Any other run (of punctuation and marks): a mark at ``p`` or after it starts a run
      of letters and marks instead ("!!" + marks + "'ll": the marks then take "'ll").

    >>> _O200kRest("Ab中中中中", 0)(3), _O200kRest(" 中中中中", 0)(2), _O200kRest("Ab中中c中中", 0)(3)
    (False, True, True)
    >>> _O200kRest("!!\u0301\u0301!", 0)(2), _O200kRest("!!!!!", 0)(2)
    (False, True)
    """

    def __init__(self, text: str, start: int):
        self.text, self.start, self.last = text, start, len(text) - 1
        self.word = _O200K_WORD_START.match(text, start) is not None
        self._upper_end: Optional[int] = None

    def upper_end(self) -> int:
        """Where the run's ``U`` part ends (its first lowercase letter), or the text's last
        character; found once (a search for Ll is 6x as fast as matching the run)."""
        if self._upper_end is None:
            lower = _LOWERCASE.search(self.text, self.start, self.last)
            self._upper_end = lower.start() if lower else self.last
        return self._upper_end

    def __call__(self, p: int) -> bool:
        if not self.word:
            return not (_MARK.match(self.text, p) or _MARK.match(self.text, p + 1))
        return p < self.upper_end() or _LOWERCASE.search(self.text, p, self.last) is not None

    def left_is_one_match(self, p: int) -> bool:
        """Whether the text from the start to ``p`` is surely one match (False: ask the
        pattern): a run of letters cut inside its ``L`` part or after a letter of both
        classes (its ``L+`` then ends at ``p``); any other run cut 2 characters or more from
        its start.  (Cut after an uppercase letter, the ``U`` run gives back letters up to
        its last one of both classes: "!\u0301" + "AAA" is "!\u0301" and "AAA".)"""
        if not self.word:
            return p - self.start >= 2
        return p > self.upper_end() or _BOTH_CASES.match(self.text, p - 1) is not None


def _piece_bounds(text: str, max_bytes: int) -> list:
    """The character offsets where :func:`cap_pieces` cuts ``text`` (one pretoken)."""
    bounds, pos, n = [], 0, len(text)
    while n - pos > max_bytes // 4:
        head = text[pos:pos + max_bytes]  # max_bytes characters: at least max_bytes bytes
        raw = head.encode("utf-8", "surrogateescape")
        if len(raw) <= max_bytes:
            if pos + len(head) >= n:
                break
            k = len(head)
        else:
            # the characters whose bytes fit: decoding the first max_bytes bytes gives them,
            # then at most 3 of a character cut there (as surrogates)
            fit = raw[:max_bytes].decode("utf-8", "surrogateescape")
            k = len(fit)
            while k and not head.startswith(fit[:k]):
                k -= 1
            k = k or 1  # (a cap below 4 bytes: one character, as bs_piece_end)
        pos += k
        if pos >= n:
            break
        bounds.append(pos)
    return bounds


def cap_pieces(pieces: list, max_bytes: Optional[int]) -> list:
    """``pieces`` (pretokens) with each one longer than ``max_bytes`` bytes (its UTF-8, a
    surrogate-escaped byte being one byte) cut into pieces of at most ``max_bytes`` bytes,
    greedily from its start, never inside a character -- ``csrc/scan.c``'s
    ``bs_piece_end`` on the bytes.

    >>> cap_pieces(["Hello", " wonderful", " world"], 4)
    ['Hell', 'o', ' won', 'derf', 'ul', ' wor', 'ld']
    >>> cap_pieces(["日本語です"], 7)  # 3 bytes a character: two fit in 7
    ['日本', '語で', 'す']
    """
    if not max_bytes or not pieces or max(map(len, pieces)) * 4 <= max_bytes:
        return pieces
    out = []
    for piece in pieces:
        if len(piece) * 4 <= max_bytes:
            out.append(piece)
            continue
        prev = 0
        for b in _piece_bounds(piece, max_bytes):
            out.append(piece[prev:b])
            prev = b
        out.append(piece[prev:])
    return out


class SpecialSplitter:
    """Splits text on special tokens; where two overlap at one position the longest wins,
    and scanning goes left to right (an earlier match beats a later overlapping one)."""

    def __init__(self, special_tokens: Sequence[str]):
        self.tokens = list(dict.fromkeys(special_tokens))
        for tok in self.tokens:
            if not tok:
                raise PretokenizeError("a special token cannot be empty")
            require_utf8(tok, "the special token")
        self.max_len = max((len(t) for t in self.tokens), default=0)
        self._ordered = sorted(self.tokens, key=len, reverse=True)

    @cached_property
    def regex(self):
        """The compiled alternation of the tokens, longest first (None without tokens); made
        when first used (counting a file with the C extension splits them off in bytes, with no ``regex``)."""
        if not self._ordered:
            return None
        import regex

        return regex.compile("|".join(regex.escape(t) for t in self._ordered))

    def split(self, text: str) -> Iterator[tuple]:
        """Yields ``(is_special, piece)`` covering ``text`` in order; text pieces are non-empty.

        >>> list(SpecialSplitter(["<a>", "<a><b>"]).split("x<a><b>y<a>"))  # <a><b> over <a>: the longest wins
        [(False, 'x'), (True, '<a><b>'), (False, 'y'), (True, '<a>')]
        """
        if self.regex is None:
            if text:
                yield False, text
            return
        pos = 0
        for m in self.regex.finditer(text):
            if m.start() > pos:
                yield False, text[pos:m.start()]
            yield True, m.group()
            pos = m.end()
        if pos < len(text):
            yield False, text[pos:]


class StreamSplitter:
    """Feeds text in arbitrary chunks and yields what can be decided so far.

    Items are ``("special", token)`` and ``("text", piece)`` -- a piece that pretokenizes
    alone exactly as within the whole, so that the caller (or a worker process) pretokenizes
    it -- and, from :meth:`end_document`, everything that was held back.  Whatever the chunking, the
    concatenation of the items equals what splitting the whole document gives.  Held back
    are at most the last ``max_len - 1`` characters (a special token may be starting
    there) plus the text after the last safe cut.

    >>> stream = StreamSplitter(Pretokenizer.from_name("gpt2"), SpecialSplitter(["<|end|>"]))
    >>> list(stream.feed("Hello wor"))  # "Hello" may go on, and a special token may start
    []
    >>> list(stream.feed("ld<|en"))
    [('text', 'Hello')]
    >>> list(stream.feed("d|> again"))
    [('text', ' world'), ('special', '<|end|>')]
    >>> list(stream.end_document())
    [('text', ' again')]
    """

    def __init__(self, pretokenizer: Pretokenizer, specials: SpecialSplitter):
        self.pre = pretokenizer
        self.specials = specials
        self._pending = ""  # text not yet scanned for special tokens
        self._run = []  # text pieces known to hold no special token, not yet pretokenized
        self._run_len = 0
        # Try a cut only when the run has doubled since a try found none, so text with
        # no cut point (one long CJK clause) costs linear, not quadratic, time.
        self._next_cut_try = 0

    @property
    def held_chars(self) -> int:
        return len(self._pending) + self._run_len

    def feed(self, text: str, final: bool = False) -> Iterator[tuple]:
        buf = self._pending + text if self._pending else text
        self._pending = ""
        pos = 0
        hold_from = len(buf) if final else max(0, len(buf) - self.specials.max_len + 1)
        if self.specials.regex is not None:
            for m in self.specials.regex.finditer(buf):
                # A match is final once every longer special starting at it could be seen.
                if m.start() >= hold_from:
                    break
                if m.start() > pos:
                    self._add_text(buf[pos:m.start()])
                yield from self._flush_run()
                yield "special", m.group()
                pos = m.end()
        if hold_from > pos:
            self._add_text(buf[pos:hold_from])
            pos = hold_from
        self._pending = buf[pos:]
        if final:
            yield from self._flush_run()
        else:
            yield from self._cut_run()

    def take_held(self) -> str:
        """Everything held back, taken out (the splitter goes on as at a document's start):
        text that starts where the last item ended, for a caller that counts it otherwise.

        >>> stream = StreamSplitter(Pretokenizer.from_name("gpt2"), SpecialSplitter(["<|end|>"]))
        >>> list(stream.feed("Hello wor")), stream.take_held(), stream.held_chars
        ([], 'Hello wor', 0)
        """
        held = "".join(self._run) + self._pending
        self._run, self._run_len, self._next_cut_try, self._pending = [], 0, 0, ""
        return held

    def end_document(self) -> Iterator[tuple]:
        """Flushes everything held back: the document ends here."""
        yield from self.feed("", final=True)

    def _add_text(self, piece: str) -> None:
        if piece:
            self._run.append(piece)
            self._run_len += len(piece)

    def _flush_run(self) -> Iterator[tuple]:
        if self._run:
            text = "".join(self._run)
            self._run, self._run_len, self._next_cut_try = [], 0, 0
            yield "text", text

    def _cut_run(self) -> Iterator[tuple]:
        if not self._run or self._run_len < self._next_cut_try:
            return
        text = "".join(self._run) if len(self._run) > 1 else self._run[0]
        cut = self.pre.safe_cut(text)
        if cut <= 0:
            self._run = [text]
            self._next_cut_try = 2 * len(text)
            return
        head, tail = text[:cut], text[cut:]
        self._run = [tail] if tail else []
        self._run_len = len(tail)
        self._next_cut_try = 0
        yield "text", head


# Byte-level cut points, for splitting a file into ranges that can be counted apart.  A
# cut goes right before an ASCII space byte (never inside a multi-byte character) whose
# preceding character is not a space -- the same rule as ``safe_cut`` -- and that no
# occurrence of a special token straddles.
# (Byte classes: ``re`` finds what ``regex`` does.)  A candidate is a space byte after a
# byte that is not an ASCII space, matched as the pair: a run of spaces is skipped inside
# ``re``, not one position at a time in Python (20 MB of spaces took 7 s to cut into
# ranges).  A non-ASCII space before one is checked after.
_ASCII_SPACE = re.compile(rb"[^\t\n\v\f\r ][\t\n\v\f\r ]")
_ASCII_SPACE_NOT_NEWLINE = re.compile(rb"[^\t\n\v\f\r ][\t\v\f ]")
_NOT_ASCII_SPACE = re.compile(rb"[^\t\n\v\f\r ]")
_ANY_ASCII_SPACE = re.compile(rb"[\t\n\v\f\r ]")
# For whitespace (\s+|\S+) a space followed by a non-space is a boundary too (zero-width, so
# that the two edges around one byte, as in b"a b", are both found).
_ASCII_SPACE_EDGE = re.compile(rb"(?=[^\t\n\v\f\r ][\t\n\v\f\r ]|[\t\n\v\f\r ][^\t\n\v\f\r ])")
_ASCII_SPACE_BYTES = frozenset(b"\t\n\v\f\r ")
_BYTE_CUTTERS = {"cl100k": _ASCII_SPACE_NOT_NEWLINE, "o200k": _ASCII_SPACE_NOT_NEWLINE, "whitespace": _ASCII_SPACE_EDGE}
# The characters ``regex``'s \s matches (the White_Space property, unchanged since Unicode
# 6.3; tests/test_startup.py checks it against the installed ``regex``), so that finding
# a cut in a file needs no ``regex``.
SPACE_CHARS = frozenset("\t\n\x0b\x0c\r \x85\xa0\u1680" + "".join(map(chr, range(0x2000, 0x200B)))
                        + "\u2028\u2029\u202f\u205f\u3000")
SPACE_STRING = "".join(sorted(SPACE_CHARS))  # (for str.strip)


def splittable(pre: Pretokenizer) -> bool:
    """Whether byte ranges of a document can be counted apart (not for ``none`` or custom patterns)."""
    return pre.pattern is not None and not pre.is_custom


def find_byte_cut(data: bytes, start: int, pre: Pretokenizer, specials: Sequence[bytes]) -> int:
    """The first safe cut at or after ``start`` in ``data`` (at least 4 bytes in), or -1.

    >>> gpt2 = Pretokenizer.from_name("gpt2")
    >>> find_byte_cut(b"Hello world again", 0, gpt2, []), find_byte_cut(b"Hello world again", 6, gpt2, [])
    (5, 11)
    >>> find_byte_cut(b"Hello<|a b|>world", 0, gpt2, [b"<|a b|>"])  # never inside a special token
    -1
    """
    longest = max((len(s) for s in specials), default=0)
    if pre.name == "words":  # (no pretoken holds a space: a cut before or after any space byte)
        for m in _ANY_ASCII_SPACE.finditer(data, max(start, 4) - 1):
            for p in (m.start(), m.end()):
                if p < max(start, 4):
                    continue
                if longest and p + longest > len(data):
                    return -1
                if not _straddled(data, p, specials, longest):
                    return p
        return -1
    spaces = _BYTE_CUTTERS.get(pre.name, _ASCII_SPACE)
    for m in spaces.finditer(data, max(start, 4) - 1):
        p = m.start() + 1
        if data[p - 1] in _ASCII_SPACE_BYTES:  # (whitespace: a space, then the first non-space)
            after = data[p:p + 4].decode("utf-8", "surrogateescape")[:1]
            if after in SPACE_CHARS or ("\udc80" <= after <= "\udcff" and p + 4 > len(data)):
                continue  # (a character cut by the window's end may be a space)
        elif data[p - 4:p].decode("utf-8", "surrogateescape")[-1] in SPACE_CHARS:
            continue
        if longest and p + longest > len(data):
            return -1
        if _straddled(data, p, specials, longest):
            continue
        return p
    if len(data) - start >= FAMILY_CUT_MIN_CHARS and pre.name in _RUNS and _NOT_ASCII_SPACE.search(data, start):
        # (a window of spaces alone has no two characters of different families)
        return _family_byte_cut(data, start, pre, specials, longest)
    return -1


def last_piece_byte_cut(data: bytes, pre: Pretokenizer, specials: Sequence[bytes]) -> int:
    """For ``data`` that starts at a safe cut and holds no other (a run longer than the cap):
    the last cut ``pre.safe_cut`` finds in its text -- with a cap, a piece boundary of the
    pretoken that runs to the end -- as a byte offset, or -1 (no cap, a custom pattern, or a
    special token inside, whose text would pass for pretokens)."""
    if not pre.max_bytes or pre.is_custom or any(s in data for s in specials):
        return -1
    text = codecs.getincrementaldecoder("utf-8")("surrogateescape").decode(bytes(data), final=False)
    i = pre.safe_cut(text)
    if i <= 0:
        return -1
    cut = len(text[:i].encode("utf-8", "surrogateescape"))
    longest = max((len(s) for s in specials), default=0)
    if longest and (cut + longest > len(data) or _straddled(data, cut, specials, longest)):
        return -1  # (a special token may start before the cut and end after it: "<|a" + " b|>")
    return cut


def _straddled(data: bytes, p: int, specials: Sequence[bytes], longest: int) -> bool:
    window = data[max(0, p - longest + 1):p + longest - 1]
    lo = p - max(0, p - longest + 1)
    return any(_straddles(window, s, lo) for s in specials)


def _family_byte_cut(data: bytes, start: int, pre: Pretokenizer, specials: Sequence[bytes], longest: int) -> int:
    """:func:`find_byte_cut` where two non-space characters of different families meet
    (``safe_cut``'s rule for text without a space cut), the characters on both sides whole."""
    lo = max(start, 4)
    text = bytes(data[lo - 4:]).decode("utf-8", "surrogateescape")
    se = "surrogateescape"
    i_prev, b_prev = 0, lo - 4
    # from the 5th character: before it, up to 3 bytes of a character cut by ``lo - 4``
    for i in _family_cuts(pre.name, text, 3, len(text)):
        if i < 4:
            continue
        b = b_prev + len(text[i_prev:i].encode("utf-8", se))
        i_prev, b_prev = i, b
        if b < lo:
            continue
        if b + max(4, longest) > len(data):
            return -1
        # no character straddles b (decoding around it gives the two sides' characters)
        if data[b - 4:b + 4].decode("utf-8", se) != data[b - 4:b].decode("utf-8", se) + data[b:b + 4].decode("utf-8", se):
            continue
        if longest and _straddled(data, b, specials, longest):
            continue
        return b
    return -1


def _straddles(window: bytes, special: bytes, cut: int) -> bool:
    i = window.find(special)
    while i != -1:
        if i < cut < i + len(special):
            return True
        i = window.find(special, i + 1)
    return False


# -- gpt2 pretokens, faster (what ``Tokenizer`` encodes with) ----------------------------------
# Pretokenizing is most of the encoding time, and Python's ``re`` runs gpt2's pattern about
# twice as fast as ``regex`` -- but ``re`` has no \p{L} or \p{N}.  On ASCII text
# ``GPT2_ASCII_PATTERN`` is gpt2's pattern exactly: there ``regex``'s \p{L}, \p{N} and
# \s are [A-Za-z], [0-9] and [\t\n\v\f\r ] (checked when first used).  Text that is not all
# ASCII is cut at gpt2's safe cuts (a space after a non-space, as ``safe_cut``) around each
# stretch of non-ASCII characters less than ``_ISLAND_GAP`` apart; those stretches go to
# ``regex`` (so mostly non-ASCII text is one stretch: no slower), the ASCII runs between
# them to ``re``.
# On ASCII, \p{L} is [A-Za-z], \p{N} [0-9] and \s [\t\n\x0b\x0c\r ] (\x1c-\x1f are not spaces
# for ``regex``, though ``re``'s \s takes them, so the class is spelt out).
_WS_ASCII = r"\t\n\x0b\x0c\r "
_A, _NA = "A-Za-z", "0-9"
GPT2_ASCII_PATTERN = (
    rf"""'(?:[sdmt]|ll|ve|re)| ?[{_A}]+| ?[{_NA}]+| ?[^{_WS_ASCII}{_A}{_NA}]+"""
    rf"""|[{_WS_ASCII}]+(?![^{_WS_ASCII}])|[{_WS_ASCII}]+"""
)
_GPT2_ASCII = re.compile(GPT2_ASCII_PATTERN)
_ISLAND_GAP = 64  # about where a separate ``regex`` call (~3 us) costs what ``re`` saves on the gap
_ISLAND = re.compile(rf"[^\x00-\x7f]+(?:[\x00-\x7f]{{1,{_ISLAND_GAP}}}[^\x00-\x7f]+)*")
_NEXT_CUT = _Lazy(r"(?<=\S)\s")
_GPT2 = _Lazy(GPT2_PATTERN)


def fast_split(pre: Pretokenizer) -> Callable[[str], list]:
    """``pre.split``, or for gpt2 :func:`gpt2_split` (the same pretokens, faster)."""
    if pre.name == "gpt2":
        if pre.max_bytes:
            cap = pre.max_bytes
            return lambda text: cap_pieces(gpt2_split(text), cap)
        return gpt2_split
    return pre.split


@cache
def _ascii_classes_agree() -> bool:
    """Whether ``regex``'s \\p{L}, \\p{N} and \\s are [A-Za-z], [0-9] and ``re``'s ASCII \\s
    on the 128 ASCII characters (what :func:`gpt2_split` relies on)."""
    import regex

    want = [(r"\p{L}", r"[A-Za-z]"), (r"\p{N}", r"[0-9]"), (r"\s", r"\s")]
    return all(bool(regex.match(u, chr(c))) == bool(re.match(a, chr(c), re.ASCII)) for u, a in want for c in range(128))


# Whether ``re`` may take gpt2's ASCII runs (:func:`_ascii_classes_agree`, which imports
# ``regex``): found at the first split, not when a tokenizer is made -- the native encoder
# never splits in Python, so encode and decode with the C extension import no ``regex``.
_re_on_ascii: Optional[bool] = None


def gpt2_split(text: str) -> list:
    """``Pretokenizer.from_name("gpt2").split(text)``, faster on mostly-ASCII text.

    >>> gpt2_split("Hello world's 42  café!")
    ['Hello', ' world', "'s", ' 42', ' ', ' café', '!']
    """
    global _re_on_ascii
    if _re_on_ascii is not True:
        if _re_on_ascii is None:
            _re_on_ascii = _ascii_classes_agree()
        if not _re_on_ascii:
            return _GPT2.findall(text)
    if text.isascii():
        return _GPT2_ASCII.findall(text)
    ascii_findall, find_island = _GPT2_ASCII.findall, _ISLAND.search
    last_cut, next_cut = _CUT_ANY_SPACE.search, _NEXT_CUT.search
    out: list = []
    pos, end = 0, len(text)
    while pos < end:
        m = find_island(text, pos)
        if m is None:
            out += ascii_findall(text, pos)
            break
        cut = last_cut(text, pos, m.start() + 1)  # the word holding the first non-ASCII character starts here ...
        start = cut.start() if cut is not None and cut.start() > pos else pos
        cut = next_cut(text, m.end())  # ... and the word holding the last one ends here
        stop = cut.start() if cut is not None else end
        if start > pos:
            out += ascii_findall(text, pos, start)  # (pos, endpos: as if the text were cut there)
        out += _GPT2.findall(text[start:stop])
        pos = stop
    return out
