"""The out-of-core engine: symbol sequences on disk (LMDB), only the pair index in memory.

Used when the in-memory trainer would not fit the memory budget.  The sequence table
maps a word id (4 bytes, big-endian, so ids append in key order) to the word's count
(8 bytes, little-endian) and its current symbols (little-endian uint32): ``SEQUENCE_ROW``,
which the C pair index reads and writes too (``csrc/layout.h``; checked at import).  It
lives in a scratch LMDB environment beside the store (``<store>/train-scratch``, rebuilt
on every run and removed after it, never part of the store's durable state) opened
without fsync: losing it loses nothing a resume cannot rebuild from the store and the
checkpoint.

The pair index (``_fastbpe.PairIndex``, ``csrc/pair_index.c``) keeps each pair's 64-bit
count, the ids of the words that may hold it as packed uint32 arrays (stale ids are
skipped when met) and the heap, with exactly the in-memory trainer's order and
tie-break; each merge reads the words of the merged pair from LMDB, rewrites them in C
and writes back those that changed.  The result is byte-identical to the in-memory path
for every tie-break (the tests compare the two).  Nothing here is approximate: when even
the pair index would not fit, training still runs this exact algorithm (slower, as the
machine swaps or pages), it never subsamples or prunes pairs.

:class:`DiskEngine` is a ``merge_engine.MergeEngine``: the training driver
(``train_driver.drive``) runs it as it runs the in-memory engines.

Performance notes (measured 2026-12, the figures behind :class:`DiskSequences`' choice of
``writemap``): with the table inside its mapped-pages budget, writing rows in place in the
shared map saved the copy into malloc'ed pages and the pwrite at every commit, a third of
the CPU time on 20 MB of generated text; past the budget, with the map dropped again and
again, re-faulting dirty shared pages cost more than it saved (100 MB: 153 s with
writemap, 115 s without).
"""

from __future__ import annotations

import os
import shutil
import sys
from array import array
from typing import List, Optional, Sequence, Tuple

import lmdb

from .merge_engine import INT64_MAX, Merge, Words, engine_limits, word_sequences
from .native import agree
from .native import fastbpe as _fastbpe
from .store import StoreError
from .train_driver import ProgressFn, drive

# The sequence table's row, field by field as (name, bytes, byte order).  The key is the
# one field meant to sort: big-endian, so that LMDB's byte order is word-id order (a load
# appends; a merge reads its sorted word ids in key order).  The rest is little-endian on
# every host.  PairIndex.add_word takes the symbols in the same form.
SEQUENCE_ROW = (("key", 4, "big"), ("count", 8, "little"), ("symbol", 4, "little"))
agree("SEQUENCE_ROW", SEQUENCE_ROW)
(_, KEY_BYTES, KEY_ORDER), (_, COUNT_BYTES, COUNT_ORDER), (_, _SYMBOL_BYTES, _SYMBOL_ORDER) = SEQUENCE_ROW
if array("I").itemsize != _SYMBOL_BYTES:  # pragma: no cover - no such platform seen
    raise ImportError(f"array('I') is not {_SYMBOL_BYTES} bytes here")
_SWAP_SYMBOLS = sys.byteorder != _SYMBOL_ORDER

_BATCH = 50_000
_SLICE = 8192  # words of one merge read, rewritten and written at a time
_REMAP_ROWS = 8192  # rows read or written between two looks at the mapped pages
_DIRTY_ROWS = 16384  # rows written before a commit: each may dirty a 4 KiB page (kept for replay)
# The table's mapped pages may take what the budget leaves beside the pair index, but at
# least this much, before the map is dropped.
_MIN_MAPPED = 32 << 20


def mapped_file_bytes() -> Optional[int]:
    """This process's resident file-backed pages (Linux ``statm`` "shared"), or None."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[2]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):  # pragma: no cover - not Linux
        return None


class ScratchError(StoreError):
    """The scratch table of the disk path cannot be written (a full disk, most often)."""


_WRITEMAP = hasattr(os, "posix_fallocate")


class DiskSequences:
    """Word id -> (count, symbols) in a scratch LMDB environment.

    When the whole table fits in its mapped-pages budget the environment uses
    ``writemap``: rows are written in place in the shared map instead of being copied into
    malloc'ed pages and written out with pwrite at every commit.  When it does not, the map
    is dropped again and again, and re-faulting dirty shared pages costs more than it saves,
    so writemap is off (the figures: the module's performance notes).  A write into a map whose file has no disk block
    behind it would kill the process with SIGBUS on a full disk, so with writemap the whole
    map is reserved with ``posix_fallocate`` before use and again whenever it grows: a full
    disk is then a clean error.  Without ``posix_fallocate`` writemap is not used.
    """

    def __init__(self, directory: str, mapped_budget: Optional[int] = None, size_hint: int = 0):
        self.directory = directory
        self.mapped_budget = mapped_budget  # None: drop the map every _REMAP_ROWS rows
        if os.path.exists(directory):
            shutil.rmtree(directory)
        os.makedirs(directory)
        self.map_size = max(16 << 20, -(-2 * size_hint // (1 << 20)) << 20)
        fits = mapped_budget is None or 3 * size_hint // 2 <= mapped_budget
        self.writemap = _WRITEMAP and size_hint > 0 and fits
        self.env = None
        try:
            self.env = self._open()
        except ScratchError:
            shutil.rmtree(directory, ignore_errors=True)
            raise
        self.touched = 0  # rows read or written since the map was last dropped
        self.txn = None  # one write transaction spans many merges: commits are the cost
        self.dirty = 0
        self.uncommitted: List[List[Tuple[bytes, bytes]]] = []  # replayed if the map fills

    def _fail(self, exc: BaseException) -> ScratchError:
        return ScratchError(
            f"cannot write the training scratch table in {self.directory} ({exc}); free disk space (it needs "
            f"about {self.map_size / 1e6:,.0f} MB) and run train again with --resume to keep the checkpointed merges"
        )

    def _open(self):
        try:
            env = lmdb.open(self.directory, map_size=self.map_size, sync=False, metasync=False, readahead=False,
                            max_dbs=0, writemap=self.writemap)
        except lmdb.Error as exc:
            raise self._fail(exc) from None
        self._reserve(env)
        return env

    def _reserve(self, env) -> None:
        if not self.writemap:
            return
        try:
            fd = os.open(os.path.join(self.directory, "data.mdb"), os.O_RDWR)
            try:
                os.posix_fallocate(fd, 0, self.map_size)
            finally:
                os.close(fd)
        except OSError as exc:
            env.close()
            raise self._fail(exc.strerror or exc) from None

    def close(self, remove: bool = True) -> None:
        if self.txn is not None:
            self.txn.abort()
            self.txn = None
        if self.env is not None:
            self.env.close()
            self.env = None
        if remove:
            shutil.rmtree(self.directory, ignore_errors=True)

    def _begin(self):
        if self.txn is None:
            self.txn = self.env.begin(write=True)
        return self.txn

    def commit(self) -> None:
        if self.txn is not None:
            try:
                self.txn.commit()
            except lmdb.Error as exc:
                self.txn = None
                raise self._fail(exc) from None
            self.txn = None
        self.dirty = 0
        self.uncommitted = []
        if self.touched >= _REMAP_ROWS:
            # Pages of the table read so far stay mapped, and so count as this process's
            # memory, until the map is dropped; reopening drops it (the OS keeps them as
            # cache) so resident memory follows the pair index, not the table's size.
            # Reopening often costs page faults, so it waits for the mapped pages to
            # reach their share of the budget where the kernel tells us their size.
            mapped = mapped_file_bytes() if self.mapped_budget is not None else None
            if mapped is None or mapped >= self.mapped_budget:
                self.env.close()
                self.env = None
                self.env = self._open()
            self.touched = 0

    def put_many(self, rows: List[Tuple[bytes, bytes]]) -> None:
        """Writes (key, value) rows; commits when the batch grows large, grows the map when full."""
        if not rows:
            return
        self.uncommitted.append(rows)
        while True:
            try:
                if self.txn is None:  # a fresh transaction after a failure: replay the batch
                    cursor = self._begin().cursor()
                    for earlier in self.uncommitted:
                        cursor.putmulti(earlier)
                else:
                    self.txn.cursor().putmulti(rows)
                break
            except lmdb.MapFullError:
                self.txn.abort()
                self.txn = None
                self.map_size *= 2
                try:
                    self.env.set_mapsize(self.map_size)
                except lmdb.Error as exc:
                    raise self._fail(exc) from None
                self._reserve(self.env)
            except lmdb.Error as exc:
                raise self._fail(exc) from None
        self.dirty += len(rows)
        self.touched += len(rows)
        if self.dirty >= _DIRTY_ROWS or self.touched >= _REMAP_ROWS:
            self.commit()

    def get_many(self, keys: List[bytes]) -> List[Tuple[bytes, bytes]]:
        """The (key, value) rows of ``keys`` (sorted), as the open batch sees them."""
        if self.touched >= _REMAP_ROWS:
            self.commit()
        self.touched += len(keys)
        return self._begin().cursor().getmulti(keys)


def _index_limits():
    """The pair index's limits (a count past what it holds in 32 bits: word ids, pairs,
    tokens, list lengths; a pair count past 2**63-1) as the trainer's errors."""
    return engine_limits("the corpus is too large for the disk path's pair index ({})")


class DiskEngine:
    """The merge engine of the disk path: ``load`` the words (into the scratch table and the
    pair index), then merge; ``close`` removes the scratch table."""

    def __init__(self, tokens: Sequence[bytes], marker_id: Optional[int], tie_break: str, scratch_dir: str,
                 mapped_budget: Optional[int] = None, size_hint: int = 0):
        if _fastbpe is None:
            raise RuntimeError("the out-of-core trainer needs the C extension; reinstall bpe-stream with a C compiler")
        self.index = _fastbpe.PairIndex(tokens=list(tokens), tie_break=tie_break)
        self.marker_id = marker_id
        mapped = None if mapped_budget is None else max(_MIN_MAPPED, mapped_budget)
        self.table = DiskSequences(scratch_dir, mapped, size_hint)

    def close(self) -> None:
        if os.environ.get("BPE_STREAM_DEBUG"):
            print("pair index at the end:", self.index.memory(), file=sys.stderr)
        self.table.close()

    def memory(self) -> dict:
        return self.index.memory()

    @_index_limits()
    def load(self, words: Words) -> None:
        index, table = self.index, self.table
        pending: List[Tuple[bytes, bytes]] = []
        for wid, (seq, n) in enumerate(word_sequences(words, self.marker_id)):
            if _SWAP_SYMBOLS:  # pragma: no cover - big-endian hosts
                seq.byteswap()
            data = seq.tobytes()
            index.add_word(wid, n, data)
            pending.append((wid.to_bytes(KEY_BYTES, KEY_ORDER), n.to_bytes(COUNT_BYTES, COUNT_ORDER) + data))
            if len(pending) >= _BATCH:
                table.put_many(pending)
                pending = []
        table.put_many(pending)
        table.touched = _REMAP_ROWS  # drop the pages the load mapped
        table.commit()
        index.build_heap()
        if os.environ.get("BPE_STREAM_DEBUG"):
            print("pair index after build:", index.memory(), file=sys.stderr)

    @_index_limits()
    def merge_given(self, pairs: Sequence[Tuple[int, int]]) -> List[int]:
        counts = []
        for left, right in pairs:
            counts.append(self.index.count(left, right))
            self._merge(left, right)
        return counts

    @_index_limits()
    def merge_best(self, n: int, min_count: int) -> List[Merge]:
        done: List[Merge] = []
        threshold = min(max(1, min_count), INT64_MAX)
        while len(done) < n:
            best = self.index.pop_best(threshold)
            if best is None:
                break
            self._merge(best[0], best[1])
            done.append(best)
        return done

    def _merge(self, left: int, right: int) -> None:
        """Rewrites the words that may hold (left, right), a slice of sorted ids at a time."""
        index, table = self.index, self.table
        packed = index.take_words(left, right)
        index.begin_merge(left, right)
        for start in range(0, len(packed) // KEY_BYTES, _SLICE):
            keys = _fastbpe.split_keys(packed, start, start + _SLICE)
            table.put_many(index.merge_rows(table.get_many(keys)))
        index.end_merge()


def train_on_disk(
    words: Words,
    tokens: List[bytes],
    marker_id: Optional[int],
    tie_break: str,
    limit: int,
    min_count: int,
    forced: Sequence[Tuple[int, int]],
    scratch_dir: str,
    on_progress: Optional[ProgressFn] = None,
    every: int = 64,
) -> List[Merge]:
    """Loads ``words`` and learns up to ``limit`` merges in one call (tests and tools)."""
    engine = DiskEngine(tokens, marker_id, tie_break, scratch_dir)
    try:
        engine.load(words)
        return list(drive(engine, limit, min_count, forced, on_progress=on_progress, every=every))
    finally:
        engine.close()
