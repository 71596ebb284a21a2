"""The one streaming layer of ``count`` and ``encode``: inputs cut into pieces at safe points,
and the bounded window of tasks in flight.

Owns:

* :func:`file_ranges` -- ``[start, end)`` of a file cut into byte ranges of about ``target``
  bytes at safe cuts, reading only a window around each cut (``count``'s plain files; the
  workers read their ranges themselves).
* :func:`byte_pieces` -- a binary stream cut into pieces of about ``limit`` bytes at safe
  cuts as it is read (``encode``'s documents; ``count``'s decompressed streams, see
  ``documents``).
* :func:`text_pieces` -- a binary stream decoded and cut by ``StreamSplitter`` into lists of
  items of about ``limit`` characters (stdin of ``count``; ``encode`` for the pretokenizers
  whose safe points are not byte-level, ``none`` and ``regex:``).
* :class:`Window` -- tasks handed to a runner (``runner.LocalRunner``,
  ``engines.dask_engine.DaskRunner``), at most ``2 * workers`` in flight, their results
  handed back in submission order, so the caller merges or writes them as a stream in
  bounded memory.  A runner only runs tasks: ``start(fn, args)`` gives a handle,
  ``result(handle)`` waits for its result (or raises its exception), ``cancel(handles)``
  forgets them, ``close()``; ``inline`` says it runs each task in this process when its
  result is asked for (then nothing is held in flight).

A safe cut (``pretokenize.find_byte_cut``, or with a cap ``last_piece_byte_cut`` in a run
with no other) is a byte offset where the pretokens of the parts equal the pretokens of the
whole, special tokens included, so every count and every encoding is the same for any
piece size, range size, read size and number of workers.  A pretokenizer without byte-level
cuts (``pretokenize.splittable``) gets one range or piece for the whole.
"""

from __future__ import annotations

from collections import deque
from typing import BinaryIO, Iterable, Iterator, List, Sequence, Tuple

from .pretokenize import Pretokenizer, StreamSplitter, find_byte_cut, last_piece_byte_cut, splittable
from .reader import InputError, decode_chunks

CUT_WINDOW = 1 << 16  # bytes read around a planned cut of a file


def _back(specials: Sequence[bytes]) -> int:
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


def file_ranges(path: str, start: int, end: int, pre: Pretokenizer, specials: Sequence[bytes],
                target: int) -> List[Tuple[int, int]]:
    """``[start, end)`` of the file ``path`` (``start`` a safe cut) as ranges of about
    ``target`` bytes that end at safe cuts, in order, covering it exactly.

    >>> import tempfile
    >>> with tempfile.NamedTemporaryFile() as f:
    ...     _ = f.write(b"Hello world, hello again and again"); f.flush()
    ...     file_ranges(f.name, 0, 34, Pretokenizer.from_name("gpt2"), [], 8)
    [(0, 12), (12, 24), (24, 34)]
    """
    if not splittable(pre) or end - start <= target:
        return [(start, end)]
    back = _back(specials)
    cuts = [start]
    pos = start + target
    tried = -1
    with open(path, "rb") as f:
        while pos < end - 4:
            lo = max(start, pos - back)
            f.seek(lo)
            window = f.read(min(CUT_WINDOW, end - lo))
            cut = find_byte_cut(window, pos - lo, pre, specials)
            if cut < 0 and pre.max_bytes and tried != cuts[-1]:
                # A run with no cut (10 MB of CJK, of spaces): a piece boundary of its
                # pretoken, found from a cut where the pretoken starts -- the range's start,
                # or the last cut before the run when it starts further on ("word" and 1 GB
                # of spaces) -- so a range stays bounded (tried once per range: the reads
                # are a range long).
                tried = cuts[-1]
                origin = cuts[-1]
                piece = _piece_cut_from(f, origin, min(end, pos + CUT_WINDOW), pre, specials)
                if piece < pos - origin:
                    origin = last_byte_cut(f, cuts[-1], pos, pre, specials)
                    if origin > cuts[-1]:
                        piece = _piece_cut_from(f, origin, min(end, pos + CUT_WINDOW), pre, specials)
                if piece >= pos - origin:
                    cut = origin + piece - lo
            if cut < 0:
                pos = lo + max(pos - lo + 1, len(window) - back)  # keep the tail: a special may straddle it
                continue
            cut += lo
            cuts.append(cut)
            pos = cut + target
    cuts.append(end)
    return [(a, b) for a, b in zip(cuts, cuts[1:]) if b > a]


def _piece_cut_from(f: BinaryIO, origin: int, end: int, pre: Pretokenizer, specials: Sequence[bytes]) -> int:
    """``last_piece_byte_cut`` of bytes ``[origin, end)`` of the open file ``f``: an offset
    from ``origin``, or -1."""
    f.seek(origin)
    return last_piece_byte_cut(f.read(end - origin), pre, specials)


def byte_pieces(stream: BinaryIO, pre: Pretokenizer, specials: Sequence[bytes], limit: int, chunk_bytes: int,
                offset: int = 0) -> Iterator[Tuple[bytes, int]]:
    """``(piece, where it starts)`` for pieces of ``stream`` (which starts at ``offset``, a safe
    cut) of about ``limit`` bytes that end at safe cuts, read ``chunk_bytes`` at a time; the
    whole stream as one piece for a pretokenizer without byte-level cuts.  Nothing for an
    empty stream.  A failed read is an ``InputError``.

    >>> import io
    >>> list(byte_pieces(io.BytesIO(b"Hello world, hello again"), Pretokenizer.from_name("gpt2"), [], 8, 5))
    [(b'Hello world,', 0), (b' hello again', 12)]
    """
    cut_ok = splittable(pre)
    back = _back(specials)
    limit = max(limit, 1)
    read = stream.read
    buf = bytearray()  # appended to and cut from the front in amortized O(1): text without a cut stays linear
    scan = 0  # no cut in buf before this (but for a special that may straddle the end)
    while True:
        try:
            block = read(chunk_bytes)
        except OSError as exc:
            raise InputError(f"read failed ({exc.strerror})") from None
        if not block:
            break
        buf += block
        while cut_ok and len(buf) >= limit:
            cut = find_byte_cut(buf, max(scan, limit), pre, specials)
            if cut < 0 and len(buf) >= 2 * limit:  # a run with no cut: a cap's piece boundary, if any
                cut = last_piece_byte_cut(buf, pre, specials)
            if cut < 0:
                scan = max(scan, len(buf) - back)
                break
            yield bytes(buf[:cut]), offset
            del buf[:cut]
            offset += cut
            scan = 0
    if buf:
        yield bytes(buf), offset


def text_pieces(stream: BinaryIO, splitter: StreamSplitter, limit: int, chunk_bytes: int,
                strict: bool = False) -> Iterator[Tuple[list, bool]]:
    """``(items, last)`` for lists of ``StreamSplitter`` items (``("text", piece)``, each
    pretokenized on its own as within the whole, and ``("special", token)``) of about
    ``limit`` characters of ``stream`` decoded (``reader.decode_chunks``, ``chunk_bytes`` at a
    time; ``strict``: invalid UTF-8 is an error); the last list (``last``: True, maybe empty)
    always comes.

    >>> import io
    >>> from bpe_stream.pretokenize import SpecialSplitter
    >>> splitter = StreamSplitter(Pretokenizer.from_name("gpt2"), SpecialSplitter(["<|e|>"]))
    >>> for piece in text_pieces(io.BytesIO(b"Hi there<|e|> again"), splitter, 4, 6):
    ...     print(piece)
    ([('text', 'Hi'), ('text', ' there'), ('special', '<|e|>')], False)
    ([('text', ' again')], False)
    ([], True)
    """
    items: list = []
    size = 0
    for text, _, _, final in decode_chunks(stream, chunk_bytes, strict):
        for item in splitter.feed(text, final=final):
            items.append(item)
            size += len(item[1])
        if size >= limit:
            yield items, False
            items, size = [], 0
    yield items, True


class Window:
    """The tasks in flight on ``runner``, at most ``2 * runner.workers`` (none with an
    ``inline`` runner: each runs when it is submitted), their results in submission order.

    >>> from bpe_stream.runner import LocalRunner
    >>> window = Window(LocalRunner(1))
    >>> [r for i in range(3) for r in window.submit(pow, (i, 2), i)] + list(window.drain())
    [(0, 0), (1, 1), (2, 4)]
    """

    def __init__(self, runner):
        self.runner = runner
        self.depth = 0 if runner.inline else 2 * runner.workers
        self.pending = deque()  # (meta, handle) in submission order

    def submit(self, fn, args, meta) -> Iterable[tuple]:
        """Starts ``fn(*args)``; yields ``(meta, result)`` of the earlier tasks that must be
        handed back before more are in flight."""
        self.pending.append((meta, self.runner.start(fn, args)))
        while len(self.pending) > self.depth:
            yield self._next()

    def drain(self) -> Iterable[tuple]:
        """``(meta, result)`` of every task still in flight, in order."""
        while self.pending:
            yield self._next()

    def discard(self) -> None:
        """Forgets the tasks not handed back yet (results still arriving are dropped)."""
        pending, self.pending = self.pending, deque()
        if pending:
            self.runner.cancel([handle for _, handle in pending])

    def _next(self) -> tuple:
        meta, handle = self.pending.popleft()
        return meta, self.runner.result(handle)
