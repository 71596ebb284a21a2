"""Counting: bytes in, pretoken counts into the store, in bounded memory, on every core.

The counting unit is engine-independent: :func:`count_range` turns a byte range of a file
(cut at a safe point, see ``pretokenize.find_byte_cut``) and the counting settings into
partial counts, and :func:`count_text` does the same for a piece of text.  The local
pipeline (:func:`count_sources`) plans the ranges, runs the unit in worker processes
(``--workers``) and merges the partial counts in order into an in-memory batch; stdin,
which cannot be split ahead, is cut by the parent (``StreamSplitter(raw=True)``) and the
pieces are pretokenized by the workers.  Every result is the same for any number of
workers and any range size: ranges and pieces end only where the pretokens of the parts
equal the pretokens of the whole.

Inside a unit (:class:`PretokenCounter`), special tokens are split off first; the text
between them is counted on one of two paths that give the same counts:

* plain: ``Counter(pretokenizer.split(piece))``, with an ``re`` pattern instead of the
  ``regex`` one when the piece is all ASCII (``pretokenize.ASCII_PATTERNS``: the same
  matches on ASCII text, about twice as fast);
* fast (``gpt2``, ``cl100k``, ``o200k``, ``whitespace``, ``words``): the piece is cut into
  segments at every safe cut of the pretokenizer (``pretokenize.segmenter``: a non-space
  followed by a space -- for cl100k/o200k a space other than CR/LF -- is a pretoken
  boundary, and the text on either side pretokenizes as it does in the whole; a space is
  what ``regex`` calls one, which ``str.isspace()`` is not), the segments are counted,
  and each distinct segment is pretokenized once, its pretokens counted times its count.
  That is exact because cutting at those points never changes the pretokens; and since
  the joint of two segments is such a cut too, the distinct segments of equal count are
  joined and pretokenized in one call.  Only a piece's first segment (which may start
  with a non-space) and last (which may end with a space) cannot be joined and are
  pretokenized alone.  Lone surrogates (invalid UTF-8) are non-spaces like any other
  character, and survive.

The fast path saves work when segments repeat (code; multilingual text, for which the
plain path needs ``regex``) and costs more when they do not (random words; English prose
in ASCII, where the plain path's ``re`` is cheaper still), so each process measures, per
lane of ASCII and other pieces, how much the fast path's flushes deduplicated and keeps the
cheaper path (:class:`_Choice`).

The parent merges the partial counts into the batch in C loops (:func:`merge_counts`;
``Counter.update`` of a mapping is a Python loop).  The batch is flushed whenever it
reaches its share of the memory budget (:func:`flush_threshold`), committed whole with the
totals and each file's progress (the byte offset its counts reach) by
:meth:`Store.add_batch`, so a killed run leaves a store in which every batch counts whole
or not at all, and a rerun resumes each file where its committed counts end.
"""

from __future__ import annotations

import os
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from itertools import repeat
from operator import add
from typing import Callable, Iterable, List, Optional, Tuple

from .runner import LocalRunner
from .pretokenize import (
    Pretokenizer,
    Segmenter,
    SpecialSplitter,
    StreamSplitter,
    ascii_pattern,
    check_end_of_word,
    find_byte_cut,
    segmenter,
    splittable,
)
from .reader import CHUNK_BYTES, InputError, Source, decode_chunks, to_bytes
from .sources import Claims, FilePlan, feed, plan_files, range_hasher
from .store import Store, StoreError

# Bytes one counter entry costs in CPython (a str key of ~8 characters, a dict slot, an
# int), measured with tracemalloc on generated web text (105), rounded up.
COUNTER_ENTRY_BYTES = 128
# Share of the budget for the counter: a flush also needs the sorted keys and LMDB's dirty
# pages, and results from the workers keep arriving.
COUNTER_SHARE = 0.35
# What the budget keeps aside for each worker process before the counter's share: the peak
# of a worker counting an 8 MiB range of generated web text with its long tail was ~90 MB
# (the interpreter's pages it shares with the parent included).
WORKER_BYTES = 96 << 20
DEFAULT_MAX_MEMORY = 1 << 30
RANGE_BYTES = 8 << 20  # one task of a worker
_CUT_WINDOW = 1 << 16
# The fast path pretokenizes its distinct segments when this many are pending (about 150
# bytes each), and at the end of every counting unit.
SEGMENT_LIMIT = 1 << 16
FLUSH_SLICE = 1 << 13  # distinct segments pretokenized in one call at a flush
# Relative cost (see _Choice) under which a lane keeps the fast path.
ASCII_FAST_LIMIT = 0.9
OTHER_FAST_LIMIT = 1.1
MIN_CHOICE_PRETOKENS = 1 << 16  # what the fast path must have counted before a lane decides
RETRY_CHARS = 64 << 20  # a lane on the plain path tries the fast one again after this many characters


def make_settings(pretokenizer: str = "gpt2", special_tokens: Iterable[str] = (), end_of_word: Optional[str] = None) -> dict:
    """The counting settings recorded in a store (and checked on every later run)."""
    pre = Pretokenizer.from_name(pretokenizer)
    specials = list(dict.fromkeys(special_tokens))
    SpecialSplitter(specials)  # validates
    check_end_of_word(end_of_word, specials)
    return {"pretokenizer": pre.name, "pattern": pre.pattern, "special_tokens": specials, "end_of_word": end_of_word}


def default_workers() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


@dataclass
class PartialCounts:
    """What one unit of counting found: pretoken counts (``str`` keys, or the store's
    ``bytes`` after :meth:`to_bytes_keys`) and totals."""

    counter: Counter = field(default_factory=Counter)
    pretokens: int = 0
    specials: int = 0
    bytes: int = 0
    digest: Optional[bytes] = None  # of the range's bytes, as read (count_range)

    def to_bytes_keys(self) -> "PartialCounts":
        """Turns the counter into a plain dict keyed by the pretokens' bytes (``to_bytes``),
        which is what the store keeps: cheaper to pickle and unpickle than ``str``, and
        bytes sort faster, so the parent of the workers has less to do."""
        counter = self.counter
        # {to_bytes(k): n for k, n in counter.items()}, in C loops
        self.counter = dict(zip(map(str.encode, counter, repeat("utf-8"), repeat("surrogateescape")), counter.values()))
        return self


class PretokenCounter:
    """Counts the pretokens of text pieces into ``partial`` (its counter and pretoken total).

    Pieces are what :class:`StreamSplitter` yields with ``raw=True``: text with no special
    token inside, cut only at safe points.  :meth:`flush` must be called at the end: the
    fast path counts a piece's segments at once but pretokenizes them only there.

    Pieces go into one of two lanes, all-ASCII ones and the others, which choose between
    the plain and the fast path apart (see :class:`_Choice`); ``fast`` forces one."""

    def __init__(self, pre: Pretokenizer, partial: PartialCounts, fast: Optional[bool] = None):
        self.partial = partial
        seg = segmenter(pre)
        if seg is None:  # none and custom patterns: no proven cut rule, so the plain path only
            self._split = pre.split  # (which checks that a custom pattern covers the text)
            return
        self._split = None
        findall, ascii_findall = pre.compiled.findall, ascii_pattern(pre).findall
        self._ascii = _Lane(seg, ascii_findall, None, _choice(pre.name, True, fast))
        self._other = _Lane(seg, findall, ascii_findall, _choice(pre.name, False, fast))

    def add(self, text: str) -> None:
        if not text:
            return
        if self._split is not None:
            tokens = self._split(text)
            self.partial.counter.update(tokens)
            self.partial.pretokens += len(tokens)
        elif text.isascii():  # O(1): CPython records it
            self._ascii.add(text, self.partial)
        else:
            self._other.add(text, self.partial)

    def flush(self) -> None:
        """Pretokenizes what the fast path has pending into ``partial``."""
        if self._split is None:
            self._ascii.flush(self.partial)
            self._other.flush(self.partial)


class _Lane:
    """One lane of a :class:`PretokenCounter`: the plain path pretokenizes each piece with
    ``findall``; the fast path counts the piece's segments and, at :meth:`flush`,
    pretokenizes each distinct segment once and adds its pretokens times its count.
    ``ascii_findall`` (the lane of pieces that are not all ASCII) is used for the distinct
    segments that are."""

    def __init__(self, seg: Segmenter, findall, ascii_findall, choice: _Choice):
        self.seg = seg
        self.findall = findall
        self.ascii_findall = ascii_findall
        self.choice = choice
        self.fast = choice.fast  # fixed until the next flush, so a flush measures one path
        self.segments: Counter = Counter()
        self.loose: Counter = Counter()
        self.n_segments = 0
        self.plain_chars = 0

    def tokens(self, text: str) -> list:
        if self.ascii_findall is not None and text.isascii():
            return self.ascii_findall(text)
        return self.findall(text)

    def add(self, text: str, partial: PartialCounts) -> None:
        if not self.fast:
            tokens = self.findall(text)
            partial.counter.update(tokens)
            partial.pretokens += len(tokens)
            self.plain_chars += len(text)
            return
        segments = self.seg.pattern.findall(text)
        self.segments.update(segments)
        self.n_segments += len(segments)
        # Only the first segment of a piece may start with a non-space and only the last
        # may end with a space: those cannot be joined to others and are pretokenized alone.
        if not self.seg.joinable(segments[0]):
            self._move_loose(segments[0])
        if len(segments) > 1 and segments[-1][-1] in self.seg.spaces:
            self._move_loose(segments[-1])
        if len(self.segments) >= SEGMENT_LIMIT:
            self.flush(partial)

    def _move_loose(self, segment: str) -> None:
        n = self.segments[segment] - 1
        if n:
            self.segments[segment] = n
        else:
            del self.segments[segment]
        self.loose[segment] += 1

    def flush(self, partial: PartialCounts) -> None:
        if not self.fast:
            if self.plain_chars:
                self.choice.plain_done(self.plain_chars)
                self.plain_chars = 0
            self.fast = self.choice.fast
            return
        segments, loose = self.segments, self.loose
        if not segments and not loose:
            return
        # Segments seen equally often are joined and pretokenized in one call: every joint
        # is a cut, so the pretokens of the join are those of its segments in turn.
        by_count = defaultdict(list)
        for segment, n in segments.items():
            by_count[n].append(segment)
        counter = partial.counter
        pretokens = distinct_tokens = 0
        findall, ascii_findall = self.findall, self.ascii_findall
        for n, whole in by_count.items():
            # In slices: the pretokens of every distinct segment at once, as str objects,
            # were the peak of a whole count (one slice costs a few MB).
            for at in range(0, len(whole), FLUSH_SLICE):
                group = whole[at:at + FLUSH_SLICE]
                text = "".join(group)
                if ascii_findall is None:
                    tokens = findall(text)
                elif text.isascii():
                    tokens = ascii_findall(text)
                else:
                    tokens = ascii_findall("".join([s for s in group if s.isascii()]))
                    tokens += findall("".join([s for s in group if not s.isascii()]))
                distinct_tokens += len(tokens)
                pretokens += n * len(tokens)
                _add_times(counter, tokens, n)
        for segment, n in loose.items():
            tokens = self.tokens(segment)
            distinct_tokens += len(tokens)
            pretokens += n * len(tokens)
            _add_times(counter, tokens, n)
        partial.pretokens += pretokens
        self.choice.fast_done(self.n_segments, len(segments) + len(loose), distinct_tokens, pretokens)
        self.segments, self.loose, self.n_segments = Counter(), Counter(), 0
        self.fast = self.choice.fast


def merge_counts(counter: Counter, other) -> None:
    """``counter.update(other)`` for a mapping ``other``, in C loops (Counter's own is a Python loop)."""
    if not counter:
        dict.update(counter, other)
        return
    keys = list(other)
    get = counter.get
    dict.update(counter, zip(keys, map(add, map(get, keys, repeat(0)), other.values())))


def _add_times(counter: Counter, tokens: list, n: int) -> None:
    """``counter[t] += n`` for each ``t`` in ``tokens`` (repeats included), in C loops."""
    if n == 1:
        counter.update(tokens)
    else:
        # dict.update consumes the pairs one at a time, so each get sees the earlier sums.
        get = counter.get
        dict.update(counter, zip(tokens, map(add, map(get, tokens, repeat(0)), repeat(n))))


class _Choice:
    """Which path a lane takes, learned per process from what the fast path measured.

    Both paths give the same counts; what differs is the work, and in CPython that is
    mostly a regex match and a dict update per object.  The plain path counts every
    pretoken (``total``); the fast path counts every segment, then the pretokens of the
    distinct segments, and handles each distinct segment a few more times (grouping,
    joining), so ``cost = (segments + distinct_tokens + distinct / 2) / total`` is its
    relative cost.  Measured on 8 MB ranges (one machine; CPU time, fast against plain):
    on ASCII text, where the plain path uses the ``re`` pattern, English prose 1.01 (8%
    slower), code 0.83 (5-11% faster), random hex 1.18 (17% slower), random words 1.74
    (64% slower); on text that is not all ASCII, where the plain path needs ``regex``,
    multilingual 0.94 (16% faster), the non-ASCII documents of English 1.08 (about 5%
    faster), Chinese and Japanese 1.12 (even to 10% slower), random Cyrillic words 1.78
    (64% slower).  So a lane takes the fast path while ``cost`` stays under ``limit``; on
    the plain path it tries the fast one again after ``retry_chars`` characters, twice as
    many each time.  The lane of ASCII pieces starts on the plain path (prose is the common
    case) and first tries the fast one after ``first_try`` characters; the other lane
    starts on the fast path.  Both paths being exact, a wrong guess costs time, never
    counts."""

    def __init__(self, fast: bool, limit: float, first_try: int, retry_chars: int = RETRY_CHARS):
        self.fast = fast
        self.limit = limit
        self.retry_chars = retry_chars
        self.until_try = first_try
        self.sums = [0, 0, 0, 0]  # segments, distinct, distinct_tokens, total, until enough to tell

    def plain_done(self, chars: int) -> None:
        self.until_try -= chars
        if self.until_try <= 0:
            self.fast = True

    def fast_done(self, segments: int, distinct: int, distinct_tokens: int, total: int) -> None:
        sums = self.sums
        for i, x in enumerate((segments, distinct, distinct_tokens, total)):
            sums[i] += x
        segments, distinct, distinct_tokens, total = sums
        if total < MIN_CHOICE_PRETOKENS:
            return  # too little to tell yet
        self.sums = [0, 0, 0, 0]
        self.fast = (segments + distinct_tokens + distinct / 2) / total < self.limit
        if not self.fast:  # try again later, and later still each time it does not pay
            self.until_try = self.retry_chars
            self.retry_chars = min(2 * self.retry_chars, 1 << 34)


class _Forced(_Choice):
    """One path, whatever is measured (``fast=True``/``False``; tests)."""

    def __init__(self, fast: bool):
        self.fast = fast

    def plain_done(self, chars: int) -> None:
        pass

    def fast_done(self, segments: int, distinct: int, distinct_tokens: int, total: int) -> None:
        pass


_CHOICES = {}  # (pretokenizer name, ASCII lane) -> _Choice, shared by the counters of this process


def _choice(name: str, ascii_lane: bool, fast: Optional[bool]) -> _Choice:
    if fast is not None:
        return _Forced(fast)
    choice = _CHOICES.get((name, ascii_lane))
    if choice is None:
        if ascii_lane:
            choice = _Choice(False, ASCII_FAST_LIMIT, first_try=RANGE_BYTES)
        else:
            choice = _Choice(True, OTHER_FAST_LIMIT, first_try=0)
        choice = _CHOICES.setdefault((name, ascii_lane), choice)
    return choice


class DocumentCounter:
    """Counts the pretokens of one document fed in text chunks into ``partial`` (complete
    once the last chunk is fed with ``final=True``); ``fast`` forces the path of
    :class:`PretokenCounter` (tests)."""

    def __init__(self, settings: dict, partial: Optional[PartialCounts] = None, fast: Optional[bool] = None):
        pre = Pretokenizer.from_name(settings["pretokenizer"])
        self.splitter = StreamSplitter(pre, SpecialSplitter(settings["special_tokens"]), raw=True)
        self.partial = partial if partial is not None else PartialCounts()
        self.counts = PretokenCounter(pre, self.partial, fast)

    def feed(self, text: str, final: bool = False) -> None:
        add = self.counts.add
        for kind, value in self.splitter.feed(text, final=final):
            if kind == "text":
                add(value)
            else:
                self.partial.specials += 1
        if final:
            self.counts.flush()


def count_text(text: str, settings: dict) -> Counter:
    """The pretoken counts of one whole document, ``str`` keys (the reference for tests)."""
    doc = DocumentCounter(settings)
    doc.feed(text, final=True)
    return doc.partial.counter


class _Limited:
    """A reader that stops after ``remaining`` bytes, and hashes what it reads."""

    def __init__(self, f, remaining: int):
        self.f, self.remaining = f, remaining
        self.hasher = range_hasher()

    def read(self, n: int) -> bytes:
        if self.remaining <= 0:
            return b""
        data = self.f.read(min(n, self.remaining))
        self.remaining -= len(data)
        self.hasher.update(data)
        return data


def count_range(path: str, start: int, end: int, settings: dict, strict_utf8: bool = False,
                chunk_bytes: int = CHUNK_BYTES, bytes_keys: bool = False) -> PartialCounts:
    """The counting unit: partial counts of bytes ``[start, end)`` of ``path``.  ``start`` and
    ``end`` must be safe cuts (0, the file's end, or from :func:`plan_ranges`).  With
    ``bytes_keys`` the counter is keyed by bytes (:meth:`PartialCounts.to_bytes_keys`)."""
    doc = DocumentCounter(settings)
    with open(path, "rb") as f:
        f.seek(start)
        limited = _Limited(f, end - start)
        for text, _, _, final in decode_chunks(limited, chunk_bytes, strict_utf8, start_offset=start):
            doc.feed(text, final=final)
    doc.partial.bytes = end - start
    # What was counted, so that the parent can tell the bytes it hashes for the file's record
    # are these (a file written to while it is counted is an error, not a wrong digest).
    doc.partial.digest = limited.hasher.digest()
    return doc.partial.to_bytes_keys() if bytes_keys else doc.partial


def plan_ranges(path: str, start: int, end: int, settings: dict, target: int = RANGE_BYTES) -> List[Tuple[int, int]]:
    """Cuts ``[start, end)`` of ``path`` into ranges of about ``target`` bytes at safe points."""
    pre = Pretokenizer.from_name(settings["pretokenizer"])
    if not splittable(pre) or end - start <= target:
        return [(start, end)]
    specials = [s.encode("utf-8") for s in settings["special_tokens"]]
    # Look back far enough to see a special token (or a character) that straddles a cut.
    back = max([4] + [len(x) for x in specials])
    cuts = [start]
    pos = start + target
    with open(path, "rb") as f:
        while pos < end - 4:
            lo = max(start, pos - back)
            f.seek(lo)
            window = f.read(min(_CUT_WINDOW, end - lo))
            cut = find_byte_cut(window, pos - lo, pre, specials)
            if cut < 0:
                pos = lo + max(pos - lo + 1, len(window) - back)  # keep the tail: a special may straddle it
                continue
            cut += lo
            cuts.append(cut)
            pos = cut + target
    cuts.append(end)
    return [(a, b) for a, b in zip(cuts, cuts[1:]) if b > a]


@dataclass
class CountSummary:
    bytes: int = 0
    documents: int = 0
    pretokens: int = 0
    new_unique: int = 0
    seconds: float = 0.0
    workers: int = 1
    skipped: List[str] = field(default_factory=list)

    @property
    def mb_per_s(self) -> float:
        return self.bytes / 1e6 / self.seconds if self.seconds > 0 else 0.0

    def line(self) -> str:
        return (
            f"counted {self.bytes:,} bytes, {self.documents:,} documents, {self.pretokens:,} pretokens, "
            f"{self.new_unique:,} new unique pretokens in {self.seconds:.2f} s ({self.mb_per_s:.1f} MB/s, "
            f"{self.workers} worker{'s' if self.workers != 1 else ''})"
        )


class _Batch:
    """What has been counted since the last flush (pretoken counts keyed by bytes)."""

    def __init__(self):
        self.counter: Counter = Counter()
        self.totals = {"bytes": 0, "documents": 0, "pretokens": 0, "specials": 0}
        self.sources = {}

    def add(self, partial: PartialCounts) -> None:
        merge_counts(self.counter, partial.counter)
        self.totals["bytes"] += partial.bytes
        self.totals["pretokens"] += partial.pretokens
        self.totals["specials"] += partial.specials
        self.totals["documents"] += partial.specials

    def estimated_bytes(self) -> int:
        return len(self.counter) * COUNTER_ENTRY_BYTES


def flush_threshold(max_memory: int, workers: int) -> int:
    """The estimated counter size (bytes) at which a batch is flushed: the counter's share of
    what the budget leaves beside the worker processes (at least half of the budget)."""
    counter_budget = max(max_memory - (workers if workers > 1 else 0) * WORKER_BYTES, max_memory // 2)
    return max(1 << 16, int(counter_budget * COUNTER_SHARE))


ENGINES = ("local", "dask")


def make_runner(engine: str = "local", workers: int = 1, scheduler: Optional[str] = None):
    """The engine that runs counting units: ``local`` processes or a ``dask`` cluster."""
    if engine == "local":
        if scheduler:
            raise ValueError("--scheduler goes with --engine dask")
        return LocalRunner(workers)
    if engine == "dask":
        from .engines.dask_engine import DaskRunner

        return DaskRunner(workers, scheduler)
    raise ValueError(f"unknown engine {engine!r}; choose one of {', '.join(ENGINES)}")


def count_sources(
    store: Store,
    sources: List[Source],
    settings: dict,
    *,
    workers: int = 1,
    runner=None,
    max_memory: int = DEFAULT_MAX_MEMORY,
    recount: bool = False,
    strict_utf8: bool = False,
    chunk_bytes: int = CHUNK_BYTES,
    range_bytes: int = RANGE_BYTES,
    on_bytes: Callable[[int], None] = lambda n: None,
    on_message: Callable[[str], None] = lambda m: None,
    on_total: Callable[[Optional[int]], None] = lambda total: None,
) -> CountSummary:
    """Counts ``sources`` into ``store`` (whose settings must equal ``settings``).  Progress:
    ``on_total`` gets the bytes there are to count once the files are planned (skipped files
    and what was counted before left out; again if a plan changes; never with stdin, whose
    size is not known), ``on_bytes`` the bytes of each part counted.  What is
    done with a file the store has seen before (skip, resume, count on after it grew, refuse)
    and the claims that keep two counts from counting one file: :mod:`bpe_stream.sources`."""
    store.check_settings(settings)  # recorded with the first batch: a failed first run leaves none
    summary = CountSummary(workers=workers)
    started = time.monotonic()
    batch = _Batch()
    flush_at = flush_threshold(max_memory, workers if runner is None else getattr(runner, "workers", workers))
    plans = plan_files(store, sources, settings, recount)  # every file decided before any is counted
    plan_of = {id(p.source): p for p in plans}
    stdin = any(s.is_stdin for s in sources)
    to_count = sum(_bytes_to_count(p) for p in plans)
    if not stdin:
        on_total(to_count)
    claims = Claims(store.path)
    finished: List[Source] = []  # claimed until the batch with their last counts is committed

    def flush():
        nonlocal batch
        current, batch = batch, _Batch()

        if current.counter or current.sources or any(current.totals.values()):
            # bytes keys (from count_range and _count_pieces); settings recorded with the first batch
            summary.new_unique += store.add_batch(
                current.counter, current.sources, current.totals, before=lambda txn: store.settings_in(txn, settings)
            )
            store.remap()
        for source in finished:
            claims.drop(source)
        finished.clear()
        for key in ("bytes", "documents", "pretokens"):
            setattr(summary, key, getattr(summary, key) + current.totals[key])

    def take(meta, partial: PartialCounts):
        plan, start, end, last = meta
        if plan is not None:
            counted = feed(plan.source.name, start, end, plan.digest)[0]
            if counted != partial.digest:
                flush()  # what was counted before stays
                raise InputError(
                    f"{plan.source.name} changed while it was being counted (bytes {start:,} to {end:,}); "
                    "run the same command again once nothing writes to it"
                )
        batch.add(partial)
        on_bytes(partial.bytes)
        if last:
            batch.totals["documents"] += 1
        if plan is not None:
            batch.sources[plan.source.key] = plan.record_at(end, last)
            if last:
                finished.append(plan.source)
        if batch.estimated_bytes() >= flush_at:
            flush()

    if runner is None:
        # A pool costs more than it saves on input that is a single range.
        small = all(not s.is_stdin for s in sources) and sum(s.size for s in sources) <= range_bytes
        runner = LocalRunner(1 if small else workers)
    summary.workers = getattr(runner, "workers", workers)
    try:
        for source in sources:
            if source.is_stdin:
                for meta, partial in _count_stdin(source, settings, runner, strict_utf8, chunk_bytes, range_bytes):
                    take(meta, partial)
                continue
            planned = plan_of[id(source)]
            plan = _claimed_plan(store, claims, planned, settings, recount)
            if _bytes_to_count(plan) != _bytes_to_count(planned) and not stdin:
                to_count += _bytes_to_count(plan) - _bytes_to_count(planned)
                on_total(to_count)
            if plan.skip is not None:
                summary.skipped.append(source.name)
                on_message(plan.skip)
                continue
            plan.begin()
            if plan.take_back is not None:
                flush()
                _take_back(store, plan, settings)
            if plan.message:
                on_message(plan.message)
            ranges = plan_ranges(source.name, plan.start, source.size, settings, range_bytes)
            for i, (a, b) in enumerate(ranges):
                args = (source.name, a, b, settings, strict_utf8, chunk_bytes, True)
                for meta, partial in runner.submit(count_range, args, (plan, a, b, i == len(ranges) - 1)):
                    take(meta, partial)
        for meta, partial in runner.drain():
            take(meta, partial)
        flush()
    finally:
        runner.close()
        claims.close()
    summary.seconds = time.monotonic() - started
    return summary


def _bytes_to_count(plan: FilePlan) -> int:
    return 0 if plan.skip is not None else max(plan.source.size - plan.start, 0)


def _claimed_plan(store: Store, claims: Claims, plan: FilePlan, settings: dict, recount: bool) -> FilePlan:
    """The plan for a file once this process has claimed it (a file another count holds is
    skipped; one whose record changed since the plan was made is planned again), with the
    record moves or refreshes it asks for written.  A skipped file's claim is dropped."""
    source = plan.source
    if plan.skip is not None and not plan.refresh:
        return plan
    if not claims.take(source):
        plan.skip, plan.refresh = f"skipped {source.name}: another count is counting it into this store right now", False
        return plan
    if not plan.unchanged(store):
        plan = plan_files(store, [source], settings, recount)[0]
    plan.settle(store)
    if plan.skip is not None:
        claims.drop(source)
    return plan


def _take_back(store: Store, plan: FilePlan, settings: dict) -> None:
    """Takes the counts of a file's bytes ``[cut, old end)`` out of the store (with the end
    of their document, when the file was counted whole), and records the file as committed up
    to the cut, in one batch: the same state a count cut off there would have left."""
    cut, old_end, was_done = plan.take_back
    old = count_range(plan.source.name, cut, old_end, settings, bytes_keys=True)
    with store.reader() as txn:  # checked first: a staged batch that cannot apply would stay
        short = next((k for k, n in old.counter.items() if store.count_of(k, txn) < n), None)
    if short is not None:
        raise StoreError(
            f"the store at {store.path} holds fewer counts of {short[:40]!r} than {plan.source.name} gave it "
            "when it was counted; count the grown file with --recount, or into a new store"
        )
    totals = {"bytes": cut - old_end, "pretokens": -old.pretokens, "specials": -old.specials,
              "documents": -old.specials - (1 if was_done else 0)}
    store.add_batch({k: -n for k, n in old.counter.items()}, {plan.source.key: plan.record_at(cut, False)}, totals)
    store.remap()


def _count_stdin(source: Source, settings: dict, runner: LocalRunner, strict_utf8: bool, chunk_bytes: int,
                 piece_bytes: int) -> Iterable[tuple]:
    """Cuts stdin into pieces in this process; workers pretokenize and count them."""
    pre = settings["pretokenizer"]
    splitter = StreamSplitter(Pretokenizer.from_name(pre), SpecialSplitter(settings["special_tokens"]), raw=True)
    pieces: List[str] = []
    size = 0
    specials = PartialCounts()

    def dispatch(last: bool):
        nonlocal pieces, size, specials
        args = (pre, pieces, specials.specials, specials.bytes)
        pieces, size, specials = [], 0, PartialCounts()
        yield from runner.submit(_count_pieces, args, (None, 0, 0, last))

    for text, _, _, final in decode_chunks(source.open(), chunk_bytes, strict_utf8):
        for kind, value in splitter.feed(text, final=final):
            if kind == "special":
                specials.specials += 1
                specials.bytes += len(to_bytes(value))
            else:
                pieces.append(value)
                size += len(value)
        if size >= piece_bytes:
            yield from dispatch(False)
    yield from dispatch(True)


def _count_pieces(pretokenizer: str, pieces: List[str], n_specials: int, special_bytes: int) -> PartialCounts:
    """Counts text pieces that were cut apart at safe points (each pretokenized on its own);
    the counter is keyed by bytes, like :func:`count_range`'s for :func:`count_sources`."""
    partial = PartialCounts(specials=n_specials, bytes=special_bytes)
    counts = PretokenCounter(Pretokenizer.from_name(pretokenizer), partial)
    for piece in pieces:
        counts.add(piece)
        partial.bytes += len(to_bytes(piece))
    counts.flush()
    return partial.to_bytes_keys()
