"""Where a byte stream may be cut: every rule that makes "counted in any chunking" equal
"counted all at once".

A cut is safe when the pretokens of the bytes before it and after it, each pretokenized
alone, are the pretokens of the whole.  The rules, from the smallest to the largest scale:

* in a window of bytes (``find_byte_cut``: after a space, or where two characters of
  different families meet; ``last_piece_byte_cut``: with a cap, between two pieces of a
  pretoken that runs on), never inside a special token or a UTF-8 character -- the
  pretokenizer's own byte rules, built on its pattern tables in ``pretok.pretokenize`` and
  named here;
* in a run of spaces whose pretokens wait for its end (cl100k and o200k take spaces after a
  newline up to the run's last newline): read to its end, then cut between its pretokens and
  their pieces (:func:`space_run_pretokens`, :func:`space_run_absorbed`,
  :func:`space_run_cuts`);
* in a file (:func:`last_byte_cut`, :func:`last_cut`, :func:`piece_cut_from`): windows read
  around a wanted offset.

``streaming.file_ranges`` and ``streaming.byte_pieces`` plan ranges and pieces with these;
``seen_files`` asks :func:`last_cut` where a grown file's counts are taken back to.
"""

from __future__ import annotations

import re
from typing import BinaryIO, Optional, Sequence, Tuple

from ..pretok.pretokenize import (  # noqa: F401 - the byte rules, named here with the others
    SPACE_CHARS,
    Pretokenizer,
    _compile,
    find_byte_cut,
    last_piece_byte_cut,
    splittable,
)
from ..pretok.settings import pretokenizer_of
from .reader import from_bytes

CUT_WINDOW = 1 << 16  # bytes read around a planned cut of a file


def cut_margin(specials: Sequence[bytes]) -> int:
    """How far before a cut to look: a special token (or a character) may straddle it."""
    return max([4] + [len(s) for s in specials])


def last_byte_cut(f: BinaryIO, floor: int, end: int, pre: Pretokenizer, specials: Sequence[bytes]) -> int:
    """The last safe cut ``c`` with ``floor < c <= end`` in the open file ``f`` (whose bytes
    from ``floor`` on are read as they are now), or ``floor`` when there is none: windows read
    backwards from ``end``, growing, so a long stretch without a cut costs linear time.
    Special tokens that straddle ``end`` are seen (the window reads a little past it)."""
    longest = max([0] + [len(s) for s in specials])
    back = max(4, longest)
    hi, span = end, CUT_WINDOW
    while hi > floor:
        lo = max(floor, hi - span)
        first = max(0, lo - back)
        f.seek(first)
        window = f.read(hi + longest + 1 - first)  # (a special may straddle hi; short at the end of the file)
        best, p = -1, find_byte_cut(window, lo - first, pre, specials)
        while 0 <= p and first + p <= hi:
            best = first + p
            p = find_byte_cut(window, p + 1, pre, specials)
        if best > floor:
            return best
        hi, span = lo, 2 * span
    return floor


# -- runs of spaces whose pretokens depend on where the run ends --------------------------
# cl100k and o200k match a run of spaces that holds a CR or LF up to its last one
# (``\s*[\r\n]``), so no cut inside such a run is safe for every continuation: a cut is
# only valid once the run's end is known.  The file planner (``streaming.file_ranges``)
# reads to that end (:func:`space_run_cuts`) and asks these rules for the run's pretokens.
SPACE_RUN_PRETOKENIZERS = ("gpt2", "cl100k", "o200k", "whitespace")
# A run of space characters (SPACE_CHARS) in UTF-8, and one read backwards: the ASCII ones a
# class taken whole (a run of them is matched at memory speed, not character by character).
_ASCII_SPACE_CLASS = b"[" + re.escape(bytes(sorted(ord(c) for c in SPACE_CHARS if c < "\x80"))) + b"]++"
_WIDE_SPACES = sorted(c.encode("utf-8") for c in SPACE_CHARS if c >= "\x80")
SPACE_RUN_BYTES = re.compile(b"(?:" + b"|".join([_ASCII_SPACE_CLASS] + [re.escape(c) for c in _WIDE_SPACES]) + b")+")
SPACE_RUN_BYTES_REVERSED = re.compile(
    b"(?:" + b"|".join([_ASCII_SPACE_CLASS] + [re.escape(c[::-1]) for c in _WIDE_SPACES]) + b")+")


def space_run_absorbed(name: str, before: Optional[str]) -> Optional[bool]:
    """Whether the pretoken that ends with the character ``before`` (None: the run starts a
    text) takes the CR and LF that start the run of spaces after it: cl100k's and o200k's
    ``[^\\s\\p{L}\\p{N}]+[\\r\\n]*`` does when ``before`` is neither a letter nor a number.
    None when it cannot be told from that character alone (o200k's marks end letter runs and
    runs of the rest alike; a byte that is not UTF-8) -- then the planner asks ``regex``.

    >>> space_run_absorbed("cl100k", "!"), space_run_absorbed("cl100k", "a"), space_run_absorbed("o200k", "7")
    (True, False, False)
    """
    if before is None or name in ("gpt2", "whitespace"):
        return False
    if "\ud800" <= before <= "\udfff":
        return None
    if _compile(r"[\p{L}\p{N}]").match(before):
        return False
    if name == "o200k" and _compile(r"\p{M}").match(before):
        return None
    return True


def space_run_pretokens(name: str, start: int, after_newline: int, last: int, end: int, at_text_end: bool) -> list:
    """The pretokens, as ``(start, end)``, that lie wholly inside the run of spaces
    ``[start, end)`` (maximal: a non-space or the text's end after it; ``start`` where the
    run's own pretokens begin, after what the pretoken before took), for ``name`` in
    ``SPACE_RUN_PRETOKENIZERS``; ``after_newline``: the end of the run's last CR or LF, or
    ``start`` when it has none; ``last``: where its last character starts, which may join a
    non-space after it, and is then in none of them.

    >>> space_run_pretokens("cl100k", 0, 3, 9, 10, False)   # '  \\n' + 7 spaces + 'x...'
    [(0, 3), (3, 9)]
    >>> space_run_pretokens("cl100k", 0, 3, 9, 10, True)    # \\s++$: one pretoken to the end
    [(0, 10)]
    >>> space_run_pretokens("o200k", 0, 3, 9, 10, True)
    [(0, 3), (3, 10)]
    >>> space_run_pretokens("whitespace", 0, 3, 9, 10, False)
    [(0, 10)]
    >>> space_run_pretokens("gpt2", 0, 3, 9, 10, False)
    [(0, 9)]
    """
    if name == "whitespace" or (name == "cl100k" and at_text_end):
        return [(start, end)] if end > start else []
    if name == "gpt2":  # (no alternative of its own for newlines)
        after_newline = start
    spans = [(start, after_newline)] if after_newline > start else []  # \s*[\r\n]: to the last newline
    tail_end = end if at_text_end else last  # \s+(?!\S)
    if tail_end > after_newline:
        spans.append((after_newline, tail_end))
    return spans


def space_run_cuts(f: BinaryIO, floor: int, pos: int, end: int, pre: Pretokenizer,
                    specials: Sequence[bytes], target: int) -> Optional[Tuple[int, list]]:
    """For a planned cut at ``pos`` with none near it: when ``pos`` is inside a run of spaces
    (after ``floor``, the last cut), ``(where the run ends, cuts)``: ``cuts`` as ``(offset,
    whether a one_pretoken range starts there)`` -- where the run's own pretokens start, the
    boundaries between them (``space_run_pretokens``) and their pieces' boundaries about
    ``target`` apart, the last one where the run's pretokens end.  The run is read twice, a
    window at a time.  None when ``pos`` is in no run of spaces or a special token could
    touch one; no cuts when the run's start cannot be told (``space_run_absorbed``)."""
    if any(c in SPACE_CHARS for s in specials for c in s.decode("utf-8", "surrogateescape")):
        return None
    pos = _char_start(f, max(floor, pos - 3), pos)
    f.seek(pos)
    if not SPACE_RUN_BYTES.match(f.read(4)):
        return None
    run_start = _run_start(f, floor, pos)
    run_end, lead_end, after_newline = _run_end(f, run_start, end)
    absorbed = space_run_absorbed(pre.name, _char_before(f, floor, run_start, specials))
    if absorbed is None:
        absorbed = _takes_a_newline(f, floor, run_start, pre, specials)
    own_start = lead_end if absorbed else run_start
    if absorbed is None or own_start - run_start > target:  # (left as it was: no cut found)
        return run_end, []
    spans = _run_spans(f, specials, end, run_start, run_end, own_start, after_newline, pre.name)
    if not spans:
        return run_end, []
    return run_end, _span_cuts(f, spans, own_start, target, pre.max_bytes)


def _char_start(f: BinaryIO, first: int, pos: int) -> int:
    """Back from ``pos`` to the start of the character at it (not before ``first``)."""
    f.seek(first)
    head = f.read(pos + 1 - first)
    return first + next((i for i in range(len(head) - 1, -1, -1) if head[i] & 0xC0 != 0x80), 0)


def _run_start(f: BinaryIO, floor: int, pos: int) -> int:
    """Back from ``pos`` (in a run of spaces) to the run's start, a window at a time (reversed:
    the run that ends at ``hi``).  A window all spaces but for its first 3 bytes (a space cut
    by it?) goes on from there."""
    hi = pos
    while True:
        lo = max(floor, hi - CUT_WINDOW)
        f.seek(lo)
        m = SPACE_RUN_BYTES_REVERSED.match(f.read(hi - lo)[::-1])
        n = m.end() if m else 0
        if lo == floor or n < hi - lo - 3:
            return hi - n
        hi -= n


def _run_end(f: BinaryIO, run_start: int, end: int) -> Tuple[int, int, int]:
    """Forward from ``run_start`` to the run's end: ``(its end, where the CR/LF that start it
    end, where its last CR/LF ends)``."""
    lead_end = after_newline = at = run_start
    leading = True
    while at < end:
        f.seek(at)
        window = f.read(min(end - at, CUT_WINDOW))
        m = SPACE_RUN_BYTES.match(window)
        n = m.end() if m else 0
        run = window[:n]
        if leading:
            k = n - len(run.lstrip(b"\r\n"))
            lead_end, leading = at + k, k == n
        last = max(run.rfind(b"\n"), run.rfind(b"\r"))
        if last >= 0:
            after_newline = at + last + 1
        at += n
        if n == 0 or n < len(window) - 3:  # (else a space may be cut by the window's end: read on)
            break
    return at, lead_end, after_newline


def _char_before(f: BinaryIO, floor: int, run_start: int, specials: Sequence[bytes]) -> Optional[str]:
    """The character before the run; None at ``floor`` or where a special token ends there."""
    if run_start <= floor:
        return None
    f.seek(max(floor, run_start - 4))
    tail = f.read(run_start - max(floor, run_start - 4))
    longest = max([0] + [len(s) for s in specials])
    f.seek(max(floor, run_start - longest))
    if any(f.read(run_start - max(floor, run_start - longest)).endswith(s) for s in specials):
        return None
    return tail.decode("utf-8", "surrogateescape")[-1]


def _run_spans(f: BinaryIO, specials: Sequence[bytes], end: int, run_start: int, run_end: int, own_start: int,
               after_newline: int, name: str) -> list:
    """``space_run_pretokens`` of the run: whether a special token starts after it, and where
    its last space starts."""
    f.seek(run_end)
    following = f.read(max([1] + [len(s) for s in specials]))
    at_text_end = run_end >= end or any(following.startswith(s) for s in specials)
    f.seek(max(run_start, run_end - 4))
    tail = f.read(run_end - max(run_start, run_end - 4))
    last = run_end - len(tail.decode("utf-8", "surrogateescape")[-1].encode("utf-8", "surrogateescape"))  # its last space
    return space_run_pretokens(name, own_start, max(own_start, after_newline), max(own_start, last), run_end,
                               at_text_end)


def _span_cuts(f: BinaryIO, spans: list, own_start: int, target: int, cap: int) -> list:
    """The cuts of the run's pretokens ``spans``: where they start, their pieces' boundaries
    about ``target`` apart, and where they end."""
    cuts = [(own_start, False)]
    for a, b in spans:
        cuts.append((a, True))
        q = a
        while True:
            q = _piece_bound_from(f, q, q + target, b, cap)
            if q >= b:
                break
            cuts.append((q, True))
        cuts.append((b, False))
    return cuts


def _takes_a_newline(f: BinaryIO, floor: int, at: int, pre: Pretokenizer, specials: Sequence[bytes]) -> Optional[bool]:
    """Whether the pretoken that ends at ``at`` takes a newline after it, found by ``regex``:
    the text from the last safe cut before ``at`` pretokenized with a newline after it (an
    o200k mark may end a run of letters or one of the rest).  None when that cut is over a
    read window back, or a special token is in the way."""
    q = last_byte_cut(f, floor, at - 1, pre, specials)
    if at - q > CUT_WINDOW:
        return None
    f.seek(q)
    context = f.read(at - q)
    if any(s in context for s in specials):
        return None
    last = Pretokenizer.from_name(pre.name).split(from_bytes(context) + "\n")[-1]
    return last != "\n"


def _piece_bound_from(f: BinaryIO, q: int, want: int, b: int, cap: int) -> int:
    """The first boundary at or after ``want`` between the cap's pieces of the pretoken that
    ends at ``b`` (of spaces, valid UTF-8), ``q`` being one of them; ``b`` when there is none
    before it.  Pieces are cut greedily (``pretokenize.cap_pieces``): the most whole
    characters that fit in ``cap`` bytes."""
    while q < want:
        if b - q <= cap:
            return b
        f.seek(q)
        chunk = f.read(min(b - q, max(CUT_WINDOW, cap + 4)))
        if chunk.isascii():  # a byte a character: pieces of ``cap`` bytes
            k = max(1, min((b - q - 1) // cap, len(chunk) // cap, -(-(want - q) // cap)))
            q += k * cap
            continue
        i = 0
        while q + i < want and b - (q + i) > cap and i + cap < len(chunk):
            j = i + cap
            while chunk[j] & 0xC0 == 0x80:  # (not inside a character)
                j -= 1
            i = j
        q += i
    return q


def piece_cut_from(f: BinaryIO, origin: int, end: int, pre: Pretokenizer, specials: Sequence[bytes]) -> int:
    """``last_piece_byte_cut`` of bytes ``[origin, end)`` of the open file ``f``: an offset
    from ``origin``, or -1."""
    f.seek(origin)
    return last_piece_byte_cut(f.read(end - origin), pre, specials)


def last_cut(path: str, end: int, settings: dict) -> int:
    """The last safe cut at or before ``end`` in the file as it is now (0 when there is none,
    and for the pretokenizers whose ranges cannot be counted apart): bytes before and after it
    pretokenize as they do in the whole, special tokens that straddle ``end`` included."""
    pre = pretokenizer_of(settings)
    if not splittable(pre) or end <= 0:
        return 0
    specials = [s.encode("utf-8") for s in settings["special_tokens"]]
    with open(path, "rb") as f:
        return last_byte_cut(f, 0, end, pre, specials)
