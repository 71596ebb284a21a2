"""The one streaming layer of ``count`` and ``encode``: inputs cut into pieces at safe points,
and the bounded window of tasks in flight.

Owns:

* :func:`file_ranges` -- ``[start, end)`` of a file cut into byte ranges (:class:`Range`) of
  about ``target`` bytes at safe cuts, reading only a window around each cut, or a long run
  of spaces to its end (``count``'s plain files; the workers read their ranges themselves).
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

A safe cut (``cuts.find_byte_cut``, or with a cap ``last_piece_byte_cut`` in a run
with no other) is a byte offset where the pretokens of the parts equal the pretokens of the
whole, special tokens included, so every count and every encoding is the same for any
piece size, range size, read size and number of workers.  A pretokenizer without byte-level
cuts (``cuts.splittable``) gets one range or piece for the whole.  In a file, a run of
spaces with no such cut (cl100k's spaces after a newline: where the run ends decides its
pretokens) is read to its end and cut between its pretokens and, with a cap, between their
pieces: a range inside one pretoken is ``Range.one_pretoken`` and counted as its pieces, and
a count resumed from any of these cuts counts the rest of the whole.
"""

from __future__ import annotations

import itertools
import os
from collections import deque
from typing import BinaryIO, Iterable, Iterator, List, NamedTuple, Optional, Sequence, Tuple

from ..pretok.pretokenize import Pretokenizer, StreamSplitter
from .cuts import (
    CUT_WINDOW,
    SPACE_RUN_PRETOKENIZERS,
    cut_margin,
    find_byte_cut,
    last_byte_cut,
    last_piece_byte_cut,
    piece_cut_from,
    space_run_cuts,
    splittable,
)
from .reader import InputError, decode_chunks, from_bytes, to_bytes

class Range(NamedTuple):
    """Bytes ``[start, end)`` of a file, to be counted apart.  ``one_pretoken``: the range is
    pieces of one pretoken (cut from a piece boundary of it, by the cap, to another or to the
    pretoken's end), to be counted as such -- pretokenizer ``none`` with the cap -- since
    pretokenized alone it may not be one pretoken (cl100k's spaces up to a newline)."""

    start: int
    end: int
    one_pretoken: bool = False


def file_ranges(path: str, start: int, end: int, pre: Pretokenizer, specials: Sequence[bytes],
                target: int) -> List[Range]:
    """``[start, end)`` of the file ``path`` (``start`` a safe cut) as ranges of about
    ``target`` bytes that end at safe cuts, in order, covering it exactly.

    >>> import tempfile
    >>> with tempfile.NamedTemporaryFile() as f:
    ...     _ = f.write(b"Hello world, hello again and again"); f.flush()
    ...     [tuple(r) for r in file_ranges(f.name, 0, 34, Pretokenizer.from_name("gpt2"), [], 8)]
    [(0, 12, False), (12, 24, False), (24, 34, False)]
    """
    if not splittable(pre) or end - start <= target:
        return [Range(start, end)]
    back = cut_margin(specials)
    cuts = [start]
    whole = set()  # the cuts that start a one_pretoken range
    pos = start + target
    tried = -1
    runs_from = start  # space runs before this were planned (or left) already
    with open(path, "rb") as f:
        while pos < end - 4:
            lo = max(start, pos - back)
            f.seek(lo)
            window = f.read(min(CUT_WINDOW, end - lo))
            cut = find_byte_cut(window, pos - lo, pre, specials)
            if cut < 0 and pre.max_bytes and pre.name in SPACE_RUN_PRETOKENIZERS and pos >= runs_from:
                # In a run of spaces, whose pretokens depend on where it ends ("word\n", 1 GB
                # of spaces, "\nword"): read to its end, then cut it between its pretokens and
                # at their pieces' boundaries.
                planned = space_run_cuts(f, cuts[-1], pos, end, pre, specials, target)
                if planned is not None:
                    runs_from, run_cuts = planned
                    if run_cuts:
                        for at, one in run_cuts:
                            if at > cuts[-1]:
                                cuts.append(at)
                            if one:
                                whole.add(at)
                        pos = cuts[-1] + target
                        continue
            if cut < 0 and pre.max_bytes and tried != cuts[-1]:
                # A run with no cut (10 MB of CJK, of spaces): a piece boundary of its
                # pretoken, found from a cut where the pretoken starts -- the range's start,
                # or the last cut before the run when it starts further on ("word" and 1 GB
                # of spaces) -- so a range stays bounded (tried once per range: the reads
                # are a range long).
                tried = cuts[-1]
                origin = cuts[-1]
                piece = piece_cut_from(f, origin, min(end, pos + CUT_WINDOW), pre, specials)
                if piece < pos - origin:
                    origin = last_byte_cut(f, cuts[-1], pos, pre, specials)
                    if origin > cuts[-1]:
                        piece = piece_cut_from(f, origin, min(end, pos + CUT_WINDOW), pre, specials)
                if piece >= pos - origin:
                    cut = origin + piece - lo
            if cut < 0:
                pos = lo + max(pos - lo + 1, len(window) - back)  # keep the tail: a special may straddle it
                continue
            cut += lo
            cuts.append(cut)
            pos = cut + target
    if cuts[-1] < end:
        cuts.append(end)
    return [Range(a, b, a in whole) for a, b in zip(cuts, cuts[1:]) if b > a]


def byte_pieces(stream: BinaryIO, pre: Pretokenizer, specials: Sequence[bytes], limit: int, chunk_bytes: int,
                offset: int = 0, spool_dir: Optional[str] = None) -> Iterator[Tuple[bytes, int]]:
    """``(piece, where it starts)`` for pieces of ``stream`` (which starts at ``offset``, a safe
    cut) of about ``limit`` bytes that end at safe cuts, read ``chunk_bytes`` at a time; the
    whole stream as one piece for a pretokenizer without byte-level cuts.  Nothing for an
    empty stream.  A failed read is an ``InputError``.  With ``spool_dir``, bytes with no cut
    past twice ``limit`` are spooled there as :func:`text_pieces` does, and come as
    ``(Spooled, where it starts)``.

    >>> import io
    >>> list(byte_pieces(io.BytesIO(b"Hello world, hello again"), Pretokenizer.from_name("gpt2"), [], 8, 5))
    [(b'Hello world,', 0), (b' hello again', 12)]
    """
    cut_ok = splittable(pre)
    back = cut_margin(specials)
    limit = max(limit, 1)
    read = stream.read
    buf = bytearray()  # appended to and cut from the front in amortized O(1): text without a cut stays linear
    scan = 0  # no cut in buf before this (but for a special that may straddle the end)
    spool = None
    try:
        while True:
            try:
                block = read(chunk_bytes)
            except OSError as exc:
                raise InputError(f"read failed ({exc.strerror})") from None
            if spool is not None:
                rest = spool.feed(block, not block)
                if rest is None:
                    continue
                done, spool = spool.done(), None
                yield done, offset
                offset += done.size
                buf, scan = bytearray(rest), 0
            else:
                buf += block
            if not block:
                break
            while cut_ok and len(buf) >= limit:
                cut = find_byte_cut(buf, max(scan, limit), pre, specials)
                if cut < 0 and len(buf) >= 2 * limit:  # a run with no cut: a cap's piece boundary, if any
                    cut = last_piece_byte_cut(buf, pre, specials)
                    if cut < 0 and spool_dir is not None:  # (or none yet: to a file, not memory)
                        spool, buf = _Spool(spool_dir, pre, specials, bytes(buf)), bytearray()
                        break
                if cut < 0:
                    scan = max(scan, len(buf) - back)
                    break
                yield bytes(buf[:cut]), offset
                del buf[:cut]
                offset += cut
                scan = 0
        if buf:
            yield bytes(buf), offset
    finally:
        if spool is not None:
            spool.discard()


def text_pieces(stream: BinaryIO, splitter: StreamSplitter, limit: int, chunk_bytes: int,
                strict: bool = False, spool_dir: Optional[str] = None) -> Iterator[Tuple[list, bool]]:
    """``(items, last)`` for lists of ``StreamSplitter`` items (``("text", piece)``, each
    pretokenized on its own as within the whole, and ``("special", token)``) of about
    ``limit`` characters of ``stream`` decoded (``reader.decode_chunks``, ``chunk_bytes`` at a
    time; ``strict``: invalid UTF-8 is an error); the last list (``last``: True, maybe empty)
    always comes.

    With ``spool_dir`` (and a pretokenizer with byte-level cuts), text the splitter holds past
    ``limit`` characters with no cut (a run of spaces whose pretokens wait for its end) is
    written to a file there instead, up to the next byte-level cut, and comes as
    ``("spool", Spooled)``: bytes from a safe cut to a safe cut, for the caller to count as a
    file (``counting.count_spooled``, which removes it).

    >>> import io
    >>> from bpe_stream.pretok.pretokenize import SpecialSplitter
    >>> splitter = StreamSplitter(Pretokenizer.from_name("gpt2"), SpecialSplitter(["<|e|>"]))
    >>> for piece in text_pieces(io.BytesIO(b"Hi there<|e|> again"), splitter, 4, 6):
    ...     print(piece)
    ([('text', 'Hi'), ('text', ' there'), ('special', '<|e|>')], False)
    ([('text', ' again')], False)
    ([], True)
    """
    items: list = []
    size = 0
    spool_ok = spool_dir is not None and splittable(splitter.pre)
    spool = None
    try:
        for text, _, _, final in decode_chunks(stream, chunk_bytes, strict):
            if spool is not None:
                rest = spool.feed(to_bytes(text), final)
                if rest is None:
                    continue
                items.append(("spool", spool.done()))
                spool, text = None, from_bytes(rest)
            for item in splitter.feed(text, final=final):
                items.append(item)
                size += len(item[1])
            if spool_ok and not final and splitter.held_chars > limit:
                specials = [t.encode("utf-8") for t in splitter.specials.tokens]
                spool = _Spool(spool_dir, splitter.pre, specials, to_bytes(splitter.take_held()))
            if size >= limit:
                yield items, False
                items, size = [], 0
        yield items, True  # (a spool ended at the final chunk, which decode_chunks always gives)
    finally:
        if spool is not None:
            spool.discard()
        for kind, value in items:
            if kind == "spool":
                value.remove()


class Spooled(NamedTuple):
    """Bytes of a stream written to ``path`` (``size`` of them), from a safe cut to one."""

    path: str
    size: int

    def remove(self) -> None:
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass


SPOOL_PREFIX = "stdin-spool-"


class _Spool:
    """Bytes with no cut yet, written to a new file in ``directory`` as they come, until a
    byte-level cut (``find_byte_cut``) or the stream's end.  Files of earlier processes that
    were killed while spooling are removed when a new one starts."""

    def __init__(self, directory: str, pre: Pretokenizer, specials: Sequence[bytes], held: bytes):
        _remove_stale_spools(directory)
        self.pre, self.specials = pre, list(specials)
        self.keep = 8 + max([0] + [len(t) for t in self.specials])  # bytes a cut's checks look back
        self.path = os.path.join(directory, f"{SPOOL_PREFIX}{os.getpid()}-{next(_SPOOL_IDS)}.tmp")
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        self.f = os.fdopen(fd, "wb")
        self.f.write(held)
        self.size, self.tail = len(held), bytes(held[-self.keep:])

    def feed(self, data: bytes, final: bool) -> Optional[bytes]:
        """Spools ``data``; at a cut, the spool ends there and the bytes after it are returned
        (None: no cut yet).  ``final``: the stream ends after ``data`` (then b"" is returned)."""
        window = self.tail + data
        cut = -1 if final else find_byte_cut(window, 4, self.pre, self.specials)
        if cut < 0:
            self.f.write(data)
            self.size += len(data)
            self.tail = window[-self.keep:]
            return b"" if final else None
        at = self.size - len(self.tail) + cut  # the cut in the file
        if cut >= len(self.tail):
            self.f.write(window[len(self.tail):cut])
        else:
            self.f.flush()
            self.f.truncate(at)
        self.size = at
        return window[cut:]

    def done(self) -> Spooled:
        self.f.close()
        return Spooled(self.path, self.size)

    def discard(self) -> None:
        self.f.close()
        Spooled(self.path, self.size).remove()


_SPOOL_IDS = itertools.count()


def _remove_stale_spools(directory: str) -> None:
    for name, pid in _spools_in(directory):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            Spooled(os.path.join(directory, name), 0).remove()
        except PermissionError:
            pass


def remove_own_spools(directory: str) -> None:
    """Removes this process's spools in ``directory``: those whose task never ran (a count
    that stopped with an error, its tasks in flight dropped)."""
    for name, pid in _spools_in(directory):
        if pid == os.getpid():
            Spooled(os.path.join(directory, name), 0).remove()


def _spools_in(directory: str) -> Iterator[Tuple[str, int]]:
    for name in os.listdir(directory):
        if name.startswith(SPOOL_PREFIX) and name.endswith(".tmp"):
            try:
                yield name, int(name[len(SPOOL_PREFIX):].split("-")[0])
            except ValueError:
                pass


class Window:
    """The tasks in flight on ``runner``, at most ``2 * runner.workers`` (none with an
    ``inline`` runner: each runs when it is submitted), their results in submission order.

    >>> from bpe_stream.parallel.runner import LocalRunner
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
        try:
            return meta, self.runner.result(handle)
        except InputError as exc:  # (which task failed: the caller names its input)
            exc.task_meta = meta
            raise
