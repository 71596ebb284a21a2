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

The batch is flushed to LMDB whenever it reaches the memory budget, in one transaction
that carries the counts, the totals and each file's progress (the byte offset its
counts reach), so a killed run leaves a store in which every batch is committed whole or
not at all, and a rerun resumes each file where its committed counts end.
"""

from __future__ import annotations

import os
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable, Iterable, List, Optional, Tuple

from .runner import LocalRunner
from .pretokenize import Pretokenizer, SpecialSplitter, StreamSplitter, find_byte_cut, splittable
from .reader import CHUNK_BYTES, Source, decode_chunks, to_bytes
from .store import Store

# Bytes one counter entry costs in CPython (a str key of ~8 characters, a dict slot, an
# int), measured with tracemalloc on generated web text (105), rounded up.
COUNTER_ENTRY_BYTES = 128
# Share of the budget for the counter: a flush also needs the sorted keys and LMDB's dirty
# pages, and results from the workers keep arriving.
COUNTER_SHARE = 0.35
DEFAULT_MAX_MEMORY = 1 << 30
RANGE_BYTES = 8 << 20  # one task of a worker
_CUT_WINDOW = 1 << 16


def make_settings(pretokenizer: str = "gpt2", special_tokens: Iterable[str] = (), end_of_word: Optional[str] = None) -> dict:
    """The counting settings recorded in a store (and checked on every later run)."""
    pre = Pretokenizer.from_name(pretokenizer)
    specials = list(dict.fromkeys(special_tokens))
    SpecialSplitter(specials)  # validates
    return {"pretokenizer": pre.name, "pattern": pre.pattern, "special_tokens": specials, "end_of_word": end_of_word}


def default_workers() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


@dataclass
class PartialCounts:
    """What one unit of counting found: pretoken counts (``str`` keys) and totals."""

    counter: Counter = field(default_factory=Counter)
    pretokens: int = 0
    specials: int = 0
    bytes: int = 0


class DocumentCounter:
    """Counts the pretokens of one document fed in text chunks into ``partial``."""

    def __init__(self, settings: dict, partial: Optional[PartialCounts] = None):
        self.splitter = StreamSplitter(
            Pretokenizer.from_name(settings["pretokenizer"]), SpecialSplitter(settings["special_tokens"])
        )
        self.partial = partial if partial is not None else PartialCounts()

    def feed(self, text: str, final: bool = False) -> None:
        partial = self.partial
        update = partial.counter.update
        for kind, value in self.splitter.feed(text, final=final):
            if kind == "pretokens":
                update(value)
                partial.pretokens += len(value)
            else:
                partial.specials += 1


def count_text(text: str, settings: dict) -> Counter:
    """The pretoken counts of one whole document, ``str`` keys (the reference for tests)."""
    doc = DocumentCounter(settings)
    doc.feed(text, final=True)
    return doc.partial.counter


class _Limited:
    """A reader that stops after ``remaining`` bytes."""

    def __init__(self, f, remaining: int):
        self.f, self.remaining = f, remaining

    def read(self, n: int) -> bytes:
        if self.remaining <= 0:
            return b""
        data = self.f.read(min(n, self.remaining))
        self.remaining -= len(data)
        return data


def count_range(path: str, start: int, end: int, settings: dict, strict_utf8: bool = False,
                chunk_bytes: int = CHUNK_BYTES) -> PartialCounts:
    """The counting unit: partial counts of bytes ``[start, end)`` of ``path``.  ``start`` and
    ``end`` must be safe cuts (0, the file's end, or from :func:`plan_ranges`)."""
    doc = DocumentCounter(settings)
    with open(path, "rb") as f:
        f.seek(start)
        for text, _, _, final in decode_chunks(_Limited(f, end - start), chunk_bytes, strict_utf8, start_offset=start):
            doc.feed(text, final=final)
    doc.partial.bytes = end - start
    return doc.partial


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
    """What has been counted since the last flush."""

    def __init__(self):
        self.counter: Counter = Counter()
        self.totals = {"bytes": 0, "documents": 0, "pretokens": 0, "specials": 0}
        self.sources = {}

    def add(self, partial: PartialCounts) -> None:
        self.counter.update(partial.counter)
        self.totals["bytes"] += partial.bytes
        self.totals["pretokens"] += partial.pretokens
        self.totals["specials"] += partial.specials
        self.totals["documents"] += partial.specials

    def estimated_bytes(self) -> int:
        return len(self.counter) * COUNTER_ENTRY_BYTES


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
) -> CountSummary:
    """Counts ``sources`` into ``store`` (whose settings must equal ``settings``)."""
    store.check_settings(settings)  # recorded with the first batch: a failed first run leaves none
    summary = CountSummary(workers=workers)
    started = time.monotonic()
    batch = _Batch()
    flush_at = max(1 << 16, int(max_memory * COUNTER_SHARE))

    def flush():
        nonlocal batch
        current, batch = batch, _Batch()

        def txn_fn(txn):
            store.settings_in(txn, settings)
            for key, record in current.sources.items():
                store.put_source(txn, key, record)
            counter = current.counter
            new, new_bytes = store.add_counts(txn, ((to_bytes(k), counter[k]) for k in sorted(counter)))
            store.bump_totals(txn, dict(current.totals, unique=new, unique_bytes=new_bytes))
            return new

        if current.counter or current.sources or any(current.totals.values()):
            summary.new_unique += store.write(txn_fn)
            store.remap()
        for key in ("bytes", "documents", "pretokens"):
            setattr(summary, key, getattr(summary, key) + current.totals[key])

    def take(meta, partial: PartialCounts):
        source, end, last = meta
        batch.add(partial)
        on_bytes(partial.bytes)
        if last:
            batch.totals["documents"] += 1
        if not source.is_stdin:
            batch.sources[source.key] = dict(source.identity(), offset=end, done=last)
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
            offset = _resume_offset(store, source, recount, summary, on_message)
            if offset is None:
                continue
            ranges = plan_ranges(source.name, offset, source.size, settings, range_bytes)
            for i, (a, b) in enumerate(ranges):
                args = (source.name, a, b, settings, strict_utf8, chunk_bytes)
                for meta, partial in runner.submit(count_range, args, (source, b, i == len(ranges) - 1)):
                    take(meta, partial)
        for meta, partial in runner.drain():
            take(meta, partial)
    finally:
        runner.close()
    flush()
    summary.seconds = time.monotonic() - started
    return summary


def _resume_offset(store: Store, source: Source, recount: bool, summary: CountSummary, on_message) -> Optional[int]:
    """Where to start counting a file: 0, its committed offset, or None to skip it."""
    with store.reader() as txn:
        record = store.source(txn, source.key)
    same = record is not None and record.get("size") == source.size and record.get("mtime_ns") == source.mtime_ns
    if not same or recount:
        return 0
    if record.get("done"):
        summary.skipped.append(source.name)
        on_message(f"skipped {source.name}: already counted (use --recount to count it again)")
        return None
    offset = record.get("offset", 0)
    if offset:
        on_message(f"resuming {source.name} at byte {offset:,}")
    return offset


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
        yield from runner.submit(_count_pieces, args, (source, 0, last))

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
    """Counts text pieces that were cut apart at safe points (each pretokenized on its own)."""
    split = Pretokenizer.from_name(pretokenizer).split
    partial = PartialCounts(specials=n_specials, bytes=special_bytes)
    update = partial.counter.update
    for piece in pieces:
        tokens = split(piece)
        update(tokens)
        partial.pretokens += len(tokens)
        partial.bytes += len(to_bytes(piece))
    return partial
