"""Counting: bytes in, pretoken counts into the store, in bounded memory, on every core.

The counting unit is engine-independent: :func:`count_range` turns a byte range of a file
(cut at a safe point, see ``pretokenize.find_byte_cut``) and the counting settings into
partial counts, and :func:`count_text` does the same for a piece of text.  The local
pipeline (:func:`count_sources`) plans the ranges (``streaming.file_ranges``), runs the unit
on ``--workers`` threads (plain files with a named pretokenizer, whose scan and count are C
without the GIL: :func:`count_range_shared`), worker processes (everything else) or Dask, a
bounded window of tasks in flight (``streaming.Window``), and merges the partial counts in
order into an in-memory batch;
stdin, which cannot be split ahead, is cut by the parent (``streaming.text_pieces``) and the
pieces are pretokenized by the workers.  Every result is the same for any number of
workers and any range size: ranges and pieces end only where the pretokens of the parts
equal the pretokens of the whole.

Inside a unit, for the named pretokenizers (``gpt2``, ``cl100k``, ``o200k``,
``whitespace``, ``words``, ``none``; :func:`count_bytes`), special tokens are split off in
bytes and the stretches between them are scanned and counted by a ``count_table.CountTable``
-- natively, with no Python object per pretoken -- whose counts go to the parent packed in
one ``bytes`` object in key order (``PartialCounts.packed``, a sorted run).  Without the C extension the table is the
Python ``PyCountTable`` (``regex``): the same counts, slower.  Custom ``regex:PATTERN``
pretokenizers, and text already in memory (:func:`count_text`), take the str path:
``Counter(pretokenizer.split(piece))`` for each piece between special tokens
(:class:`PretokenCounter`).

The parent keeps the runs of a batch as they come (one worker: the ranges are counted
straight into the batch's native table; threads: each into a table of its own kept across
its ranges, :class:`KeptTables`, which hands a run over when it is full and at each flush)
and merges them k-way once per flush
(``count_table.merge_runs``), in one sequential pass, into the sorted lists the store takes;
runs that pile up are merged into one run on the way (:meth:`_Batch.add`), so that the
repeats of a pretoken in many ranges are not held until the flush.  The counts of the str
path go into the batch's counter in C loops (:func:`merge_counts`; ``Counter.update`` of a
mapping is a Python loop).  The
batch is flushed whenever it reaches its share of the memory budget (:func:`flush_threshold`),
committed whole with the totals and each file's progress (the byte offset its counts reach)
by :meth:`Store.add_batch`, so a killed run leaves a store in which every batch counts
whole or not at all, and a rerun resumes each file where its committed counts end.

Performance notes (the figures behind the memory constants, 2026-12): a counter entry (a
str key of ~8 characters, a dict slot, an int) cost 105 bytes under tracemalloc on generated
web text (``COUNTER_ENTRY_BYTES`` rounds it up to 128); a worker counting an 8 MiB range of
generated web text with its long tail peaked at ~90 MB, the interpreter's pages it shares
with the parent included (``WORKER_BYTES``, 96 MiB).
"""

from __future__ import annotations

import os
import threading
import time
from collections import Counter
from contextlib import nullcontext
from dataclasses import dataclass, field
from functools import cache
from itertools import repeat
from operator import add
from typing import Callable, Iterable, List, NamedTuple, Optional, Tuple

from .table import CountTable, merge_runs, merge_runs_packed, merge_threads, unpack_counts
from ..errors import SettingsError
from ..parallel.runner import LocalRunner, ThreadRunner
from ..pretok.pretokenize import Pretokenizer, SpecialSplitter, StreamSplitter, fast_split
from ..pretok.settings import (  # noqa: F401 - the settings' functions, also by their old name here
    DEFAULT_MAX_TOKEN_BYTES,
    default_max_token_bytes,
    make_settings,
    pretokenizer_of,
    resolve_settings,
)
from ..inputs.reader import CHUNK_BYTES, InputError, Source, decode_chunks, from_bytes, invalid_utf8_message, to_bytes
from ..pretok.scan import NATIVE_PATTERNS, first_invalid_utf8
from .seen_files import (Claims, FilePlan, HashedBeside, RangeCheck, Refused, SameBytes, feed, plan_files, range_hasher,
                         what_stays)
from ..store.lmdb_store import SortedCounts, SortedRun, SortedRuns, Store, StoreError
from ..inputs.streaming import Spooled, Window, file_ranges, remove_own_spools, text_pieces

# Bytes one counter entry costs in CPython (a str key, a dict slot, an int), rounded up
# from a measurement (performance notes above).
COUNTER_ENTRY_BYTES = 128
# The copies of a batch's keys at its flush besides the table's own: the sorted lists and
# LMDB's dirty pages of the write (the table's are freed once the lists are made).
KEY_COPIES = 2
# Share of the budget for the counter: a flush also needs the sorted keys and LMDB's dirty
# pages, and results from the workers keep arriving.
COUNTER_SHARE = 0.35
# What the budget keeps aside for each worker process before the counter's share: a
# worker's measured peak, rounded up (performance notes above).
WORKER_BYTES = 96 << 20
# Share of the counter's budget that a flush's store transactions may dirty (LMDB's dirty
# pages, this process's memory until each commit): the batch's keys are then added in as
# few transactions as that allows (``Store.add_batch(dirty_bytes=)``); a 64 MB budget keeps
# the 8 MB of the smallest chunks.  At most DIRTY_MAX: LMDB frees the pages a transaction
# copied only at its commit, so the file grows by about what one transaction dirties (the
# 2 GB bench-scale count in one transaction a flush: a 1.8 GB store file for 1.27 GB of pages).
DIRTY_SHARE = 0.125
DIRTY_MAX = 512 << 20
DEFAULT_MAX_MEMORY = 1 << 30
# One counting task: a range of a file, on a worker process or a thread.  Processes were
# measured with it for WORKER_BYTES.  Threads took 32 MiB ranges while each range had a table
# of its own (fewer tables to sort and merge); with kept tables smaller ranges balance the
# threads' last ranges better: -w2 into a new store, 2 cores, idle, median of 10 paired runs
# (2026-12-05), 8 MiB against 32 MiB x0.92 on 200 MB of English (0.51 s) and x0.93 on 400 MB
# of generated text (1.96 s); 4 and 16 MiB within 2% of 8.  Capped by the budget (range_for).
RANGE_BYTES = 8 << 20
# The entries a counting thread's kept table (``KeptTables``) holds before it packs them into a
# run; fewer when the budget is small (kept_cap).  A larger table scans slower (its slots fall
# out of the caches) and its pack waits at the flush.  Measured 2026-12-05, 2 cores, -w2, the
# median of 8 paired runs against a table per range: 200 MB of English x0.97, 400 MB of
# generated text x0.92 at 2**18 entries; 2**17 and 2**19 within 1% of it.
KEPT_TABLE_ENTRIES = 1 << 18
RUN_ENTRY_BYTES = 12  # a run's bytes per entry besides its key (a u32 length, a u64 count)


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
    digest: Optional[bytes] = None  # the RangeCheck of the range's bytes, as read (count_range)
    counted: Optional[bytes] = None  # the range's bytes, as read (count_range_shared: on a thread of this process)
    # The counts packed in key order (a run, ``count_table``: bytes keys), from count_bytes;
    # then ``counter`` is empty.  ``entries``: how many keys the run has.
    packed: Optional[bytes] = None
    entries: int = 0
    documents: int = 0  # records counted (JSON Lines, Parquet); special tokens add their own
    skipped: int = 0  # bad records skipped (--skip-bad-records)
    # What the counting thread's kept table (``KeptTables``) holds after this range: which
    # table, its entries and key bytes (the parent's estimate of the batch includes them).
    held_table: int = 0
    held_entries: int = 0
    held_key_bytes: int = 0

    def unpacked(self, str_keys: bool = False) -> "PartialCounts":
        """The packed counts moved into ``counter`` (keyed by bytes, or by text decoded with
        ``surrogateescape`` with ``str_keys``)."""
        if self.packed is not None:
            counts = unpack_counts(self.packed)
            self.packed, self.entries = None, 0
            if str_keys:
                counts = dict(zip(map(from_bytes, counts), counts.values()))
            self.counter = Counter(counts)
        return self

    def to_bytes_keys(self) -> "PartialCounts":
        """Turns the counter into a plain dict keyed by the pretokens' bytes (``to_bytes``),
        which is what the store keeps: cheaper to pickle and unpickle than ``str``, and
        bytes sort faster, so the parent of the workers has less to do."""
        counter = self.counter
        # {to_bytes(k): n for k, n in counter.items()}, in C loops
        self.counter = dict(zip(map(str.encode, counter, repeat("utf-8"), repeat("surrogateescape")), counter.values()))
        return self


class PretokenCounter:
    """Counts the pretokens of text pieces into ``partial`` (its counter and pretoken total),
    ``Counter(pretokenizer.split(piece))`` for each piece (``fast_split``: gpt2's pretokens
    by ``re`` on ASCII runs, the same ones).  The str path: for one document in memory
    (:func:`count_text`, ``pipeline.count_texts``) and for custom patterns; files and stdin
    with a named pattern are counted by :func:`count_bytes` instead.

    Pieces are what :class:`StreamSplitter` yields: text with no special
    token inside, cut only at safe points."""

    def __init__(self, pre: Pretokenizer, partial: PartialCounts):
        self.partial = partial
        # a custom pattern's split checks that it covers the text
        self._split = fast_split(pre)

    def add(self, text: str) -> None:
        if not text:
            return
        tokens = self._split(text)
        self.partial.counter.update(tokens)
        self.partial.pretokens += len(tokens)

    def flush(self) -> None:
        """Kept for the callers that end a document with it: nothing is pending."""


def merge_counts(counter: Counter, other) -> None:
    """``counter.update(other)`` for a mapping ``other``, in C loops (Counter's own is a Python loop)."""
    if not counter:
        dict.update(counter, other)
        return
    keys = list(other)
    get = counter.get
    dict.update(counter, zip(keys, map(add, map(get, keys, repeat(0)), other.values())))


def native_countable(settings: dict) -> bool:
    """Whether the pretokenizer of ``settings`` is counted by :func:`count_bytes` (the named
    ones, ``none`` included; a ``CountTable`` scans them natively or, without the extension,
    with ``regex``), not on the str path (custom ``regex:`` patterns)."""
    return settings["pretokenizer"] in NATIVE_PATTERNS


def count_bytes(data, settings: dict, partial: PartialCounts, table) -> None:
    """Counts the pretokens of ``data`` (bytes of whole documents or parts of one, cut at
    safe points) into ``table`` (a ``CountTable``) and the specials and pretoken totals of
    ``partial``: special tokens split off in bytes (``CountTable.feed_between``), the
    stretches between them scanned and counted natively -- no Python object per pretoken."""
    name, cap = settings["pretokenizer"], settings.get("max_token_bytes") or 0
    specials = _special_bytes(tuple(settings["special_tokens"]))
    if not specials:
        partial.pretokens += table.feed(data, name, cap) if data else 0
        return
    pretokens, found = table.feed_between(data, name, cap, specials)
    partial.pretokens += pretokens
    partial.specials += found


@cache
def _special_bytes(specials: Tuple[str, ...]) -> List[bytes]:
    """The special tokens' UTF-8: found in bytes exactly where their characters are in the
    text decoded with ``surrogateescape`` (``count_table.special_split``)."""
    return [t.encode("utf-8") for t in specials]


class DocumentCounter:
    """Counts the pretokens of one document fed in text chunks into ``partial`` (complete
    once the last chunk is fed with ``final=True``), on the str path."""

    def __init__(self, settings: dict, partial: Optional[PartialCounts] = None):
        pre = pretokenizer_of(settings)
        self.splitter = StreamSplitter(pre, SpecialSplitter(settings["special_tokens"]))
        self.partial = partial if partial is not None else PartialCounts()
        self.counts = PretokenCounter(pre, self.partial)

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
        self.hasher = RangeCheck()

    def read(self, n: int) -> bytes:
        if self.remaining <= 0:
            return b""
        data = self.f.read(min(n, self.remaining))
        self.remaining -= len(data)
        self.hasher.update(data)
        return data


def range_settings(settings: dict, one_pretoken: bool) -> dict:
    """The settings a range of ``streaming.file_ranges`` is counted with: a range that is
    pieces of one pretoken (``Range.one_pretoken``) as such -- pretokenizer ``none``, the
    cap's pieces of the whole range."""
    return dict(settings, pretokenizer="none", pattern=None) if one_pretoken else settings


def count_range(path: str, start: int, end: int, settings: dict, strict_utf8: bool = False,
                chunk_bytes: int = CHUNK_BYTES, bytes_keys: bool = False, packed: bool = False) -> PartialCounts:
    """The counting unit: partial counts of bytes ``[start, end)`` of ``path``.  ``start`` and
    ``end`` must be safe cuts (0, the file's end, or from ``streaming.file_ranges``).  With
    ``bytes_keys`` the counter is keyed by bytes (:meth:`PartialCounts.to_bytes_keys`); with
    ``packed`` (and a pretokenizer that :func:`native_countable` allows) the counts are
    ``PartialCounts.packed`` instead, the form a worker hands its parent."""
    if native_countable(settings):
        partial = _count_range_bytes(path, start, end, settings, strict_utf8)
        if packed:
            return partial
        return partial.unpacked(str_keys=not bytes_keys)
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


def _count_range_bytes(path: str, start: int, end: int, settings: dict, strict_utf8: bool) -> PartialCounts:
    """:func:`count_range` for a pretokenizer that :func:`count_bytes` counts: the range read
    whole (it is about ``RANGE_BYTES``; the str path holds as much when a range has no safe
    cut), checked for UTF-8 when ``strict_utf8``, counted into a ``CountTable``, packed
    (the range's bytes freed first: a giant pretoken is held at most twice, table and packed)."""
    data = _read_range(path, start, end, strict_utf8)
    check = RangeCheck()
    check.update(data)
    partial = PartialCounts(bytes=len(data), digest=check.digest())
    table = CountTable()
    count_bytes(data, settings, partial, table)
    del data
    return _packed(partial, table)


def _packed(partial: PartialCounts, table) -> PartialCounts:
    """``partial`` with the counts of ``table`` as a run (packed in key order: the workers
    sort, the parent only merges)."""
    partial.packed, partial.entries = table.pack(sorted=True), len(table)
    return partial


def _read_range(path: str, start: int, end: int, strict_utf8: bool) -> bytes:
    """Bytes ``[start, end)`` of ``path``, checked for UTF-8 when ``strict_utf8``."""
    with open(path, "rb") as f:
        f.seek(start)
        data = f.read(end - start)
    if strict_utf8:
        bad = first_invalid_utf8(data)
        if bad >= 0:
            raise InputError(invalid_utf8_message(start + bad))
    return data


def count_range_into(path: str, start: int, end: int, settings: dict, strict_utf8: bool, table,
                     beside: Optional[HashedBeside] = None) -> PartialCounts:
    """:func:`count_range` in the counting process itself (one worker): the counts go straight
    into ``table``, the batch's ``CountTable`` (nothing packed, nothing merged).  ``beside``:
    the parent's check of the range for the file's record, run while its bytes are counted
    (then ``beside.matches()`` says whether the bytes re-read were the bytes counted, so no
    checksum is needed on either side); without one nothing is checked."""
    data = _read_range(path, start, end, strict_utf8)
    partial = PartialCounts(bytes=len(data))
    with beside.counting(data) if beside is not None else nullcontext():
        count_bytes(data, settings, partial, table)
    return partial


def count_range_shared(path: str, start: int, end: int, settings: dict, strict_utf8: bool,
                       kept: Optional["KeptTables"] = None) -> PartialCounts:
    """:func:`count_range` on a thread of the counting process (``runner.ThreadRunner``): in
    ``counted`` the range's bytes themselves, which the parent compares with the bytes it
    hashes (as for :func:`count_range_into`: no checksum on either side).  The counts go into
    the thread's table of ``kept``, held across ranges, and come back packed as a run only when
    that table is full (:meth:`KeptTables.count_into`); without ``kept``, into a table of the
    range's own, packed as a run, as a worker process's."""
    data = _read_range(path, start, end, strict_utf8)
    partial = PartialCounts(bytes=len(data), counted=data)
    if kept is not None:
        kept.count_into(data, settings, partial)
        return partial
    table = CountTable()
    count_bytes(data, settings, partial, table)
    return _packed(partial, table)


class KeptTables:
    """A ``CountTable`` for each counting thread, kept across its ranges: a pretoken found in
    every range is inserted once per thread, and sorted and merged once per flush, not once per
    range (on 200 MB of English a table per 25 MB range cost the threads 0.84 s of CPU against
    the one worker's 0.65 s).  A table is packed into a run by its own thread when it reaches
    ``cap`` entries, so a thread never holds more than that unpacked.

    The counts of a range taken by the parent may still sit in a thread's table, and a table
    may hold counts of ranges not taken yet, so a flush first takes every task in flight and
    then every table (:meth:`take`): the batch then holds exactly the ranges its records name.

    >>> kept = KeptTables(cap=3)
    >>> p = PartialCounts(); kept.count_into(b"ab ab", make_settings("gpt2", []), p)
    >>> p.pretokens, p.packed, p.held_entries
    (2, None, 2)
    >>> p = PartialCounts(); kept.count_into(b" cd", make_settings("gpt2", []), p)
    >>> p.entries, p.held_entries, sorted(unpack_counts(p.packed).items())
    (3, 0, [(b' ab', 1), (b' cd', 1), (b'ab', 1)])
    """

    def __init__(self, cap: int):
        self.cap = cap
        self.tables: List = []  # every thread's, in the order the threads first counted
        self._mine = threading.local()
        self._lock = threading.Lock()

    def count_into(self, data: bytes, settings: dict, partial: PartialCounts) -> None:
        """Counts ``data`` into this thread's table; the table packed into ``partial`` (and
        emptied) once it holds ``cap`` entries.  ``partial.held_*``: what the table holds after."""
        table = getattr(self._mine, "table", None)
        if table is None:
            table = self._mine.table = CountTable()
            with self._lock:
                self.tables.append(table)
        count_bytes(data, settings, partial, table)
        if len(table) >= self.cap:
            _packed(partial, table)
            table.clear()
        partial.held_table, partial.held_entries, partial.held_key_bytes = id(table), len(table), table.key_bytes

    def take(self, runner) -> List[Tuple[bytes, int]]:
        """Every table's counts as runs ``(run, entries)`` (packed on ``runner``'s threads, one
        table a task), the tables emptied.  Only when no counting task is running."""
        full = [t for t in self.tables if len(t)]
        tasks = [runner.start(_take_table, (t,)) for t in full]
        return [runner.result(task) for task in tasks]


def _take_table(table) -> Tuple[bytes, int]:
    run, entries = table.pack(sorted=True), len(table)
    table.clear()
    return run, entries


def count_data_piece(data: bytes, settings: dict, strict_utf8: bool, offset: int) -> PartialCounts:
    """The counting unit of a piece of one document's bytes in memory (a decompressed stream
    cut at safe points; ``offset``: where it starts, for the UTF-8 error): as
    :func:`count_range` for those bytes, packed where the pretokenizer allows."""
    if strict_utf8:
        bad = first_invalid_utf8(data)
        if bad >= 0:
            raise InputError(invalid_utf8_message(offset + bad))
    partial = PartialCounts(bytes=len(data))
    if native_countable(settings):
        table = CountTable()
        count_bytes(data, settings, partial, table)
        return _packed(partial, table)
    doc = DocumentCounter(settings, partial)
    doc.feed(from_bytes(data), final=True)
    return partial.to_bytes_keys()


def count_spooled(path: str, size: int, settings: dict, strict_utf8: bool, offset: int, range_bytes: int) -> PartialCounts:
    """The counting unit of a spooled stretch of a stream (``streaming.Spooled``: ``size``
    bytes at ``path`` that were at ``offset`` in the stream, from a safe cut to one): counted
    as a file's ranges are (``file_ranges``, a range at a time), as one packed result; the
    spool is removed."""
    try:
        pre, specials = pretokenizer_of(settings), [t.encode("utf-8") for t in settings["special_tokens"]]
        partial, table = PartialCounts(), CountTable()
        for r in file_ranges(path, 0, size, pre, specials, range_bytes):
            data = _read_range(path, r.start, r.end, False)
            if strict_utf8:
                bad = first_invalid_utf8(data)
                if bad >= 0:
                    raise InputError(invalid_utf8_message(offset + r.start + bad))
            partial.bytes += len(data)
            count_bytes(data, range_settings(settings, r.one_pretoken), partial, table)
            del data
        return _packed(partial, table)
    finally:
        Spooled(path, size).remove()


def _count_documents(docs, settings: dict) -> PartialCounts:
    """Counts each document of ``docs`` ((bytes or None for a skipped record, number)) on its
    own: no pretoken spans two documents, as if each were a file."""
    partial = PartialCounts()
    table = CountTable() if native_countable(settings) else None
    for doc, _ in docs:
        if doc is None:
            partial.skipped += 1
            continue
        partial.documents += 1
        partial.bytes += len(doc)
        if table is not None:
            count_bytes(doc, settings, partial, table)
        else:
            DocumentCounter(settings, partial).feed(from_bytes(doc), final=True)
    if table is None:
        return partial.to_bytes_keys()
    return _packed(partial, table)


def count_jsonl_piece(data: bytes, first_line: int, name: str, field: str, settings: dict, strict_utf8: bool,
                      skip_bad: bool) -> PartialCounts:
    """The counting unit of whole JSON Lines lines: each record's ``field`` one document."""
    from ..inputs.documents import jsonl_documents

    return _count_documents(jsonl_documents(data, first_line, name, field, strict_utf8, skip_bad), settings)


def count_parquet_group(path: str, group: int, first_row: int, column: str, settings: dict, strict_utf8: bool,
                        skip_bad: bool, name: Optional[str] = None) -> PartialCounts:
    """The counting unit of one Parquet row group: each row's ``column`` one document
    (``name``: the file as messages call it, ``path`` by default)."""
    from ..inputs.documents import hash_documents, parquet_documents, prefix_hasher

    # The row group's digest goes with its counts: the file's record chains it (issue 39: a
    # stopped count resumes while the row groups it committed are unchanged).
    hasher = prefix_hasher()
    docs = hash_documents(parquet_documents(path, group, first_row, column, strict_utf8, skip_bad, name), hasher)
    partial = _count_documents(docs, settings)
    partial.digest = hasher.digest()
    return partial


@dataclass
class CountSummary:
    bytes: int = 0
    documents: int = 0
    pretokens: int = 0
    new_unique: int = 0
    seconds: float = 0.0
    workers: int = 1
    skipped: List[str] = field(default_factory=list)
    skipped_records: int = 0  # bad records skipped (--skip-bad-records)

    @property
    def mb_per_s(self) -> float:
        return self.bytes / 1e6 / self.seconds if self.seconds > 0 else 0.0

    def line(self) -> str:
        return (
            f"counted {self.bytes:,} bytes, {self.documents:,} documents, {self.pretokens:,} pretokens, "
            f"{self.new_unique:,} new unique pretokens in {self.seconds:.2f} s ({self.mb_per_s:.1f} MB/s, "
            f"{self.workers} worker{'s' if self.workers != 1 else ''})"
            + (f"; skipped {self.skipped_records:,} bad record{'s' if self.skipped_records != 1 else ''}"
               if self.skipped_records else "")
        )


# A batch merges its runs into one when it holds more than this many (the merge's heap stays small).
MAX_RUNS = 64


class _Batch:
    """What has been counted since the last flush (pretoken counts keyed by bytes): runs from
    the workers, the table one worker counts into, and the counter of the str path.

    Runs that pile up are merged into one (:meth:`add`) when the entries that came since the
    last such merge reach both the merged run's and ``compact_entries``: a pretoken found in
    every range is then held once, not once a range, and each entry is merged again only
    after as many new ones came (a few times in all, not once a range)."""

    def __init__(self, compact_entries: int = 1 << 16):
        self.counter: Counter = Counter()  # from the str path (custom patterns)
        self.table = CountTable()  # one worker's ranges, counted into it (count_range_into)
        self.runs: List[bytes] = []  # the workers' runs; runs[0] the merge of earlier ones once compacted
        self.run_entries = 0  # the runs' entries, a key in two runs counted twice
        self.run_bytes = 0  # the runs' sizes
        self._compacted = 0  # entries of runs[0] when it is a merge of earlier runs
        self._compact_entries = compact_entries
        self.totals = {"bytes": 0, "documents": 0, "pretokens": 0, "specials": 0}
        self.sources = {}
        self.skipped = 0  # bad records (not a store total: said in the summary)

    def add(self, partial: PartialCounts) -> None:
        if partial.packed is not None:
            self.runs.append(partial.packed)
            self.run_entries += partial.entries
            self.run_bytes += len(partial.packed)
            partial.packed = None  # consumed: held once, in the batch, until the next flush
            fresh = self.run_entries - self._compacted
            if fresh >= max(self._compacted, self._compact_entries) or len(self.runs) > MAX_RUNS:
                self._compact()
        else:
            merge_counts(self.counter, partial.counter)
        self.totals["bytes"] += partial.bytes
        self.totals["pretokens"] += partial.pretokens
        self.totals["specials"] += partial.specials
        self.totals["documents"] += partial.specials + partial.documents
        self.skipped += partial.skipped

    def _compact(self) -> None:
        run, entries = merge_runs_packed(self.runs)
        self.runs = [run]
        self.run_entries = self._compacted = entries
        self.run_bytes = len(run)

    def take_counts(self, packed: bool = False):
        """Every count of the batch, bytes keys, as ``Store.add_batch`` takes them, taken out:
        the runs (and the table, sorted in C) merged into two sorted lists, once, at the flush;
        ``packed``: the run, or the runs for the store's native writer to merge as it writes
        them (``SortedRun``, ``SortedRuns``: no list made)."""
        entries = self.run_entries  # (exact for one run)
        runs, self.runs, self.run_entries, self.run_bytes, self._compacted = self.runs, [], 0, 0, 0
        if packed and not self.counter and (runs or len(self.table)):
            if len(self.table):
                entries += len(self.table)
                runs.append(self.table.pack(sorted=True))
                self.table.clear()
            if len(runs) == 1:
                return SortedRun(runs[0], entries)
            # merged by the store's writer as it writes them, on helper threads: this one writes
            return SortedRuns(runs, entries, max(1, merge_threads(runs) - 1))
        if len(self.table):
            if not runs and not self.counter:
                counts = SortedCounts(*self.table.sorted_items())
                self.table.clear()
                return counts
            runs.append(self.table.pack(sorted=True))
            self.table.clear()  # taken: a giant pretoken is not held in the table and the run at once
        if not runs:
            return self.counter
        counts = SortedCounts(*merge_runs(runs))
        runs.clear()  # merged: the runs are not held beside the lists while the store writes
        if not self.counter:
            return counts
        merged = dict(zip(counts.keys, counts.counts))
        merge_counts(merged, self.counter)
        return merged

    def estimated_bytes(self) -> int:
        # A native entry or a run's costs less than a Counter's, but the flush makes lists of
        # them all; and their keys twice over (the lists', LMDB's dirty pages), which for
        # pretokens of the cap's length (60 MB of CJK: 900 distinct) is what counts.
        entries = len(self.counter) + len(self.table) + self.run_entries
        return entries * COUNTER_ENTRY_BYTES + KEY_COPIES * (self.table.key_bytes + self.run_bytes)


def _counter_budget(max_memory: int, workers: int) -> int:
    """What the budget leaves beside the worker processes (at least half of it)."""
    return max(max_memory - (workers if workers > 1 else 0) * WORKER_BYTES, max_memory // 2)


def flush_threshold(max_memory: int, workers: int) -> int:
    """The estimated counter size (bytes) at which a batch is flushed: the counter's share of
    what the budget leaves beside the worker processes."""
    return max(1 << 16, int(_counter_budget(max_memory, workers) * COUNTER_SHARE))


def dirty_budget(max_memory: int, workers: int) -> int:
    """The bytes a flush's store transaction may dirty: DIRTY_SHARE of what the budget leaves
    beside the worker processes, at most DIRTY_MAX."""
    return min(DIRTY_MAX, int(_counter_budget(max_memory, workers) * DIRTY_SHARE))


def kept_cap(flush_at: int, threads: int) -> int:
    """The entries a counting thread's kept table holds before it packs them: KEPT_TABLE_ENTRIES,
    or fewer where the budget is small (all the threads' tables at most half the batch's
    estimate at its flush, ``flush_at``)."""
    return min(KEPT_TABLE_ENTRIES, max(64, flush_at // (2 * COUNTER_ENTRY_BYTES * threads)))


def range_for(flush_at: int, range_bytes: int = RANGE_BYTES) -> int:
    """The bytes of one counting unit under a flush threshold: a range of N bytes holds at
    most N pretokens, so its counts are at most the threshold's worth -- text whose
    pretokens are nearly all distinct (a base64 line: 930K distinct in 10 MB) is flushed
    between ranges instead of piling up one unit's counts past the budget.  Ordinary
    budgets keep ``range_bytes``."""
    return min(range_bytes, max(1 << 16, flush_at // COUNTER_ENTRY_BYTES))


# The smallest range a file is cut into to spread it over the workers.
MIN_BALANCED_RANGE = 1 << 20


def balanced_range(range_bytes: int, size: int, workers: int) -> int:
    """The range size for ``size`` bytes of one file on ``workers``: ``range_bytes``, or less
    so that the file makes at least 4 ranges a worker -- a 20 MB file in 8 MB ranges kept
    one of two workers busy for 12 MB while the other finished its 8 (never below
    MIN_BALANCED_RANGE, nor for one worker).

    >>> balanced_range(8 << 20, 20_000_000, 2), balanced_range(8 << 20, 20_000_000, 1)
    (2500000, 8388608)
    """
    if workers <= 1:
        return range_bytes
    return min(range_bytes, max(MIN_BALANCED_RANGE, -(-size // (4 * workers))))


ENGINES = ("local", "dask", "ray")


def make_runner(engine: str = "local", workers: int = 1, scheduler: Optional[str] = None,
                address: Optional[str] = None):
    """The engine that runs counting units: ``local`` processes, a ``dask`` cluster
    (``scheduler``) or ``ray`` (``address``)."""
    if scheduler and engine != "dask":
        raise SettingsError("--scheduler goes with --engine dask")
    if address and engine != "ray":
        raise SettingsError("--address goes with --engine ray")
    if engine == "local":
        return LocalRunner(workers)
    if engine == "dask":
        from ..parallel.dask_runner import DaskRunner

        return DaskRunner(workers, scheduler)
    if engine == "ray":
        from ..parallel.ray_runner import RayRunner

        return RayRunner(workers, address)
    raise SettingsError(f"unknown engine {engine!r}; choose one of {', '.join(ENGINES)}")


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
    range_bytes: Optional[int] = None,
    on_bytes: Callable[[int], None] = lambda n: None,
    on_message: Callable[[str], None] = lambda m: None,
    on_total: Callable[[Optional[int]], None] = lambda total: None,
    input_format: str = "auto",
    field: str = "text",
    column: str = "text",
    skip_bad_records: bool = False,
) -> CountSummary:
    """Counts ``sources`` into ``store`` (whose settings must equal ``settings``).  Progress:
    ``on_total`` gets the bytes there are to count once the files are planned (skipped files
    and what was counted before left out; again if a plan changes; never with stdin, whose
    size is not known), ``on_bytes`` the bytes of each part counted.  What is
    done with a file the store has seen before (skip, resume, count on after it grew, refuse)
    and the claims that keep two counts from counting one file: :mod:`bpe_stream.count.seen_files`.
    ``range_bytes``: the size of a counting task (None: RANGE_BYTES)."""
    store.check_settings(settings)  # recorded with the first batch: a failed first run leaves none
    from ..inputs.documents import with_form

    # Compressed, JSON Lines and Parquet inputs (``documents``): their form found (and checked
    # against their first bytes) before anything is counted.
    sources = [s if s.form is not None else with_form(s, input_format, field, column) for s in sources]
    options = _Options(workers, max_memory, recount, strict_utf8, chunk_bytes, range_bytes, skip_bad_records,
                       on_bytes, on_message, on_total)
    return _Count(store, settings, options, runner).run(sources)


class Part(NamedTuple):
    """What the result of one counting task stands for (the meta it carries through the
    window): ``plan``, the file's plan (None: stdin); ``[start, end)``, its bytes -- for a
    document source ``end`` is where its counts reach in the uncompressed text (or row
    groups); ``last``, whether it is the file's (or the stream's) last part.  A document
    source's part (compressed, JSON Lines, Parquet) also has its ``form``, ``raw``, the
    compressed bytes read for it, and ``hasher``, the digest of the file being read."""

    plan: Optional[FilePlan]
    start: int
    end: int
    last: bool
    form: object = None  # (documents.InputForm)
    raw: int = 0
    hasher: object = None
    prefix: object = None  # the digest of what a document source's counts cover so far (seen_files)


@dataclass
class _Options:
    """The options of one :func:`count_sources` call, as it was given them."""

    workers: int
    max_memory: int
    recount: bool
    strict_utf8: bool
    chunk_bytes: int
    range_bytes: Optional[int]
    skip_bad_records: bool
    on_bytes: Callable[[int], None]
    on_message: Callable[[str], None]
    on_total: Callable[[Optional[int]], None]


class _Count:
    """One :func:`count_sources` call, as named steps: plan every file, start the runner,
    count each source (a file's ranges, a document source's pieces, stdin's pieces), take each
    result into the batch in order, flush the batch into the store when it is full, and at
    the end, close what was opened."""

    def __init__(self, store: Store, settings: dict, options: _Options, runner):
        self.store, self.settings, self.options, self.runner = store, settings, options, runner
        self.summary = CountSummary(workers=options.workers)
        self.started = time.monotonic()
        workers = options.workers if runner is None else getattr(runner, "workers", options.workers)
        self.flush_at = flush_threshold(options.max_memory, workers)
        self.dirty_bytes = dirty_budget(options.max_memory, workers)
        # runs are merged into one when a quarter of a batch's worth has come since the last merge
        self.compact_entries = max(1 << 16, self.flush_at // COUNTER_ENTRY_BYTES // 4)
        self.batch = _Batch(self.compact_entries)
        self.range_bytes = range_for(self.flush_at, options.range_bytes or RANGE_BYTES)
        self.finished: List[Source] = []  # claimed until the batch with their last counts is committed
        self.kept: Optional[KeptTables] = None  # the counting threads' tables (_start_runner)
        self.held = {}  # a kept table's id -> (entries, key bytes) as its last range taken left it
        self._taking_kept = False

    def run(self, sources: List[Source]) -> CountSummary:
        plans = plan_files(self.store, sources, self.settings, self.options.recount)  # every file decided first
        self.plan_of = {id(p.source): p for p in plans}
        self.stdin = any(s.is_stdin for s in sources)
        self.to_count = sum(_bytes_to_count(p) for p in plans)
        if not self.stdin:
            self.options.on_total(self.to_count)
        self.claims = Claims(self.store.path)
        self._start_runner(sources)
        given_names = {os.path.abspath(s.name): s.name for s in sources if not s.is_stdin}
        source = None
        try:
            for source in sources:
                self._count_source(source)
            self._take_all(self.window.drain())
            self.flush()
        except InputError as exc:
            raise self._named(exc, source) from None
        except OSError as exc:  # a worker's read of a file: named as the user named it, not by its absolute path
            if isinstance(exc.filename, str) and exc.filename in given_names:
                exc.filename = given_names[exc.filename]
            raise
        finally:
            self._close()
        self.summary.seconds = time.monotonic() - self.started
        return self.summary

    def _named(self, exc: InputError, source: Optional[Source]) -> InputError:
        """Issue 39: a failed count names its file (a worker's task's, from the part it carried,
        or the file read here) and says what the store keeps of it (``seen_files.what_stays``)."""
        from ..inputs.documents import MissingExtra

        part = getattr(exc, "task_meta", None)
        failed = source if part is None else (part.plan.source if part.plan is not None else None)
        if isinstance(exc, (Refused, MissingExtra)) or failed is None or failed.is_stdin:
            return exc
        return exc.naming(failed.name, what_stays(self.store, failed))

    def _start_runner(self, sources: List[Source]) -> None:
        if self.runner is None:
            plain = all(not s.is_stdin and s.form is None for s in sources)
            # A pool costs more than it saves on input that is a single range.
            n = 1 if plain and sum(s.size for s in sources) <= self.range_bytes else self.options.workers
            # Plain files' ranges are counted in C without the GIL: on threads, with nothing sent
            # between processes.  Custom patterns, documents and stdin are Python's work: processes.
            self.runner = ThreadRunner(n) if n > 1 and plain and native_countable(self.settings) else LocalRunner(n)
        if getattr(self.runner, "shares_memory", False) and native_countable(self.settings):
            self.kept = KeptTables(kept_cap(self.flush_at, max(1, getattr(self.runner, "workers", 1))))
        self.summary.workers = getattr(self.runner, "workers", self.options.workers)
        self.window = Window(self.runner)
        # Text of a stream with no cut for long goes to a file in the store's directory (on its
        # disk): counted there by this process (stdin) or a worker on this machine (documents).
        self.spool_dir = self.store.path if isinstance(self.runner, (LocalRunner, ThreadRunner)) else None
        self.pre = pretokenizer_of(self.settings)
        self.specials = [t.encode("utf-8") for t in self.settings["special_tokens"]]

    def _close(self) -> None:
        self.window.discard()
        self.runner.close()
        self.claims.close()
        if self.spool_dir is not None:
            remove_own_spools(self.spool_dir)

    # -- the sources -------------------------------------------------------------------------
    def _count_source(self, source: Source) -> None:
        options = self.options
        if source.is_stdin:
            if source.form is not None:
                self._count_documents(source, None)
            else:
                self._take_all(_count_stdin(source, self.settings, self.window, options.strict_utf8,
                                            options.chunk_bytes, self.range_bytes, self.store.path))
            return
        plan = self._claim(source)
        if plan.skip is not None:
            self.summary.skipped.append(source.name)
            options.on_message(plan.skip)
            return
        if source.form is not None:
            if plan.message:
                options.on_message(plan.message)
            self._count_documents(source, plan)
            return
        self._count_file(plan)

    def _claim(self, source: Source) -> FilePlan:
        """The file's plan once claimed; the bar's total follows a plan that changed."""
        planned = self.plan_of[id(source)]
        plan = _claimed_plan(self.store, self.claims, planned, self.settings, self.options.recount)
        if _bytes_to_count(plan) != _bytes_to_count(planned) and not self.stdin:
            self.to_count += _bytes_to_count(plan) - _bytes_to_count(planned)
            self.options.on_total(self.to_count)
        return plan

    def _count_file(self, plan: FilePlan) -> None:
        """A plain file, in ranges cut at safe points (after taking back the counts of a grown
        file's old tail)."""
        source = plan.source
        plan.begin()
        if plan.take_back is not None:
            self.flush()
            _take_back(self.store, plan, self.settings)
        if plan.message:
            self.options.on_message(plan.message)
        ranges = file_ranges(source.name, plan.start, source.size, self.pre, self.specials,
                             balanced_range(self.range_bytes, source.size - plan.start, self.summary.workers))
        path = os.path.abspath(source.name)  # a worker may run elsewhere (Dask), in another directory
        if self.window.runner.inline and native_countable(self.settings):
            self._count_ranges_here(plan, path, ranges)
        else:
            self._count_ranges(plan, path, ranges)

    def _count_ranges_here(self, plan: FilePlan, path: str, ranges: list) -> None:
        """One worker: counted into the batch's table, no packing and merging, while a thread
        hashes the range for the file's record."""
        for i, (a, b, one) in enumerate(ranges):
            check = HashedBeside(plan.source.name, a, b, plan.digest)
            partial = count_range_into(path, a, b, range_settings(self.settings, one), self.options.strict_utf8,
                                       self.batch.table, check)
            self.take(Part(plan, a, b, i == len(ranges) - 1), partial, in_batch=True, check=check)

    def _count_ranges(self, plan: FilePlan, path: str, ranges: list) -> None:
        shared = getattr(self.window.runner, "shares_memory", False)
        strict = self.options.strict_utf8
        for i, (a, b, one) in enumerate(ranges):
            unit_settings = range_settings(self.settings, one)
            if shared:
                unit, args = count_range_shared, (path, a, b, unit_settings, strict, self.kept)
            else:
                unit, args = count_range, (path, a, b, unit_settings, strict, self.options.chunk_bytes, True, True)
            self._take_all(self.window.submit(unit, args, Part(plan, a, b, i == len(ranges) - 1)))

    def _count_documents(self, source: Source, plan: Optional[FilePlan]) -> None:
        """Pieces of a compressed, JSON Lines or Parquet input, cut by this process, counted by
        the workers; each piece's end (uncompressed offset, or row groups) is its commit point."""
        from ..inputs.documents import count_pieces

        hasher = range_hasher()
        raw_before = 0
        start = plan.start if plan is not None else 0
        pieces = count_pieces(source, source.form, start, self.settings, self.options.strict_utf8,
                              self.options.skip_bad_records, self.range_bytes, hasher, self.spool_dir,
                              plan.prefix if plan is not None else None)
        for piece in pieces:
            part = Part(plan, 0, piece.end, piece.last, source.form, piece.raw - raw_before, hasher, piece.prefix)
            raw_before = piece.raw
            self._take_all(self.window.submit(piece.fn, piece.args, part))

    # -- the results, in order -----------------------------------------------------------------
    def _take_all(self, results: Iterable[tuple]) -> None:
        for part, partial in results:
            self.take(part, partial)

    def take(self, part: Part, partial: PartialCounts, in_batch: bool = False,
             check: Optional[HashedBeside] = None) -> None:
        """A result into the batch; ``in_batch``: its counts are in the batch's table already
        (``count_range_into``), so a file that changed is the batch dropped, not committed;
        ``check``: the range was hashed for the file's record as it was counted."""
        if part.form is not None:
            self._take_document(part, partial)
            return
        if part.plan is not None:
            self._check_counted(part, partial, in_batch or self.kept is not None, check)
        if partial.held_table:
            self.held[partial.held_table] = (partial.held_entries, partial.held_key_bytes)
        self.batch.add(partial)
        self.options.on_bytes(partial.bytes)
        if part.last:
            self.batch.totals["documents"] += 1
        if part.plan is not None:
            self._record(part.plan, part.plan.record_at(part.end, part.last), part.last)
        self._flush_if_full()

    def _take_document(self, part: Part, partial: PartialCounts) -> None:
        self.batch.add(partial)
        self.options.on_bytes(part.raw)
        if part.last and part.form.records == "text" and part.end > 0:
            self.batch.totals["documents"] += 1  # the decompressed text: one document (none if empty, as a plain file)
        if part.plan is not None:
            digest = part.hasher.digest() if part.last else None
            # (with the digest of what the counts cover: a Parquet row group's comes from its worker)
            group = partial.digest if part.form.records == "parquet" else None
            self._record(part.plan, part.plan.record_document(part.end, part.last, digest, part.prefix, group),
                         part.last)
        self._flush_if_full()

    def _check_counted(self, part: Part, partial: PartialCounts, in_batch: bool,
                       check: Optional[HashedBeside]) -> None:
        """The bytes the file's record stands for, hashed, must be the bytes counted."""
        plan = part.plan
        if check is None:
            check = RangeCheck() if partial.counted is None else SameBytes(partial.counted)
            partial.counted = None
            feed(plan.source.name, part.start, part.end, plan.digest, check=check)
        if check.matches(partial.digest):
            return
        if in_batch:
            # (in the batch's table, or in a thread's kept table beside the counts of other ranges)
            self.batch = _Batch(self.compact_entries)  # what was committed before stays
        else:
            self.flush()  # what was counted before stays
        changed = InputError(
            f"{plan.source.name} changed while it was being counted (bytes {part.start:,} to {part.end:,}); "
            "run the same command again once nothing writes to it"
        )
        changed.task_meta = part  # (whose: the file of this result, not the one being read)
        raise changed

    def _record(self, plan: FilePlan, record, last: bool) -> None:
        self.batch.sources[plan.source.key] = record
        if last:
            self.finished.append(plan.source)

    # -- the batch into the store ------------------------------------------------------------
    def _flush_if_full(self) -> None:
        if self._taking_kept:
            return  # (the flush that takes the tasks in flight goes on)
        # (a kept table's entries as the run they become: keys with their packed length and count)
        held = sum(e * COUNTER_ENTRY_BYTES + KEY_COPIES * (b + RUN_ENTRY_BYTES * e) for e, b in self.held.values())
        if self.batch.estimated_bytes() + held >= self.flush_at:
            self.flush()

    def flush(self) -> None:
        """The batch committed whole with its files' records, then the claims of the files it
        finished dropped, and its totals added to the summary."""
        if self.kept is not None:
            self._take_kept()
        current, self.batch = self.batch, _Batch(self.compact_entries)
        counts = current.take_counts(packed=self.store.writes_natively)
        if counts or current.sources or any(current.totals.values()):
            # bytes keys (from count_range and _count_pieces); settings recorded with the first batch
            store, settings = self.store, self.settings
            self.summary.new_unique += store.add_batch(
                counts, current.sources, current.totals, before=lambda txn: store.settings_in(txn, settings),
                dirty_bytes=self.dirty_bytes,
            )
            store.remap()
        for source in self.finished:
            self.claims.drop(source)
        self.finished.clear()
        for key in ("bytes", "documents", "pretokens"):
            setattr(self.summary, key, getattr(self.summary, key) + current.totals[key])
        self.summary.skipped_records += current.skipped


    def _take_kept(self) -> None:
        """Every task in flight taken (its counts may already be in a kept table), then the
        counting threads' kept tables into the batch: it then holds every range it records."""
        self._taking_kept = True
        try:
            self._take_all(self.window.drain())
        finally:
            self._taking_kept = False
        for run, entries in self.kept.take(self.runner):
            self.batch.add(PartialCounts(packed=run, entries=entries))
        self.held.clear()


def _bytes_to_count(plan: FilePlan) -> int:
    """Bytes of the file to read (the bar's total): a compressed or structured file is read
    whole again when resumed (its committed offset is in the uncompressed text)."""
    if plan.skip is not None:
        return 0
    if plan.source.form is not None:
        return plan.source.size
    return max(plan.source.size - plan.start, 0)


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


def _count_stdin(source: Source, settings: dict, window: Window, strict_utf8: bool, chunk_bytes: int,
                 piece_bytes: int, spool_dir: Optional[str] = None) -> Iterable[tuple]:
    """Cuts stdin into pieces in this process (``streaming.text_pieces``); workers pretokenize
    and count them.  Text with no cut for more than a piece (a run of spaces after a newline,
    whose pretokens wait for its end) is spooled to a file in ``spool_dir`` (the store's
    directory, on its disk) and counted from there as a file's ranges are."""
    splitter = StreamSplitter(pretokenizer_of(settings), SpecialSplitter(settings["special_tokens"]))
    for items, last in text_pieces(source.open(), splitter, piece_bytes, chunk_bytes, strict_utf8, spool_dir):
        pieces = [value for kind, value in items if kind == "text"]
        found = [value for kind, value in items if kind == "special"]
        spooled = [value for kind, value in items if kind == "spool"]
        args = (settings, pieces, len(found), sum(len(to_bytes(s)) for s in found))
        del items
        yield from window.submit(_count_pieces, args, Part(None, 0, 0, last))
        for spool in spooled:  # (counted here, where the spool is, and removed)
            yield Part(None, 0, 0, False), count_spooled(spool.path, spool.size, settings, False, 0, piece_bytes)


def _count_pieces(settings: dict, pieces: List[str], n_specials: int, special_bytes: int) -> PartialCounts:
    """Counts text pieces that were cut apart at safe points (each pretokenized on its own,
    with no special token inside); the counts are packed, or for a custom pattern keyed by
    bytes, like :func:`count_range`'s for :func:`count_sources`."""
    partial = PartialCounts(specials=n_specials, bytes=special_bytes)
    if native_countable(settings):
        table, name, cap = CountTable(), settings["pretokenizer"], settings.get("max_token_bytes") or 0
        for piece in map(to_bytes, pieces):
            partial.bytes += len(piece)
            partial.pretokens += table.feed(piece, name, cap) if piece else 0
        return _packed(partial, table)
    counts = PretokenCounter(pretokenizer_of(settings), partial)
    for piece in pieces:
        counts.add(piece)
        partial.bytes += len(to_bytes(piece))
    return partial.to_bytes_keys()
