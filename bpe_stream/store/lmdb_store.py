"""The persistent word-frequency store: one LMDB environment (a directory).

Owns the on-disk layout and nothing of BPE:

* ``meta``: format version, the counting settings fixed at creation (pretokenizer with
  its exact pattern, special tokens, word-end marker) and running totals.
* ``words``: pretoken bytes -> 64-bit little-endian count.  LMDB keys are limited to
  ``max_key_size()`` bytes (511), so longer pretokens go to ``longwords``: a BLAKE2b
  digest -> count followed by the pretoken bytes.
* ``sources``: one record per counted file (identity, byte offset reached, done), written
  in the same transaction as the counts it stands for, so a kill never double-counts.
* ``train``: training checkpoints (their layout: ``store_checkpoint.py``).

A batch of counts is one transaction when it is small.  A large one would dirty (and map)
about one B-tree page per key it touches (see the performance notes below), so :meth:`Store.add_batch` stages it
first: its sorted counts go into ``meta`` as compact chunks together with a ``pending``
record holding the batch's source records and totals (one transaction, written
sequentially), then each chunk is added in its own transaction that also deletes it, and
the last step writes the records and drops ``pending``.  Whoever opens the store next
finishes a staged batch that a kill cut off, before anything reads the words, so readers
see every batch whole or not at all, and nothing is counted twice.

Two writers, one layout.  A batch given as a sorted run (:class:`SortedRun`, what counting
hands over; or several, :class:`SortedRuns`, merged as they are written) is written by the
native writer (``csrc/storewrite.c``, ``_fastbpe.StoreWriter``:
the LMDB release py-lmdb bundles, vendored in ``csrc/lmdb``, so one on-disk format): the
words merged in C with a cursor walk in key order, no Python object per pretoken.  Everything
else -- the metadata of every transaction (totals, source records, settings, the check
record), long pretokens, reading, and every write without the extension -- stays on
py-lmdb, through the same code (:class:`_NativeTxn` has py-lmdb's get/put/delete), so both
paths write the same transactions with the same content.  Who owns the environment: LMDB
allows one open of an environment per process (its locks are per process, and closing a
second handle drops the first one's), so *py-lmdb's handle is open except while the native
writer runs one write transaction*: :meth:`Store.write` with ``native=True`` closes it,
opens the native environment, runs and commits the transaction, closes that, and reopens
py-lmdb's -- also when the transaction fails or is interrupted.  No other code opens the
native writer.

Every value is a fixed-width integer or msgpack, never pickle: opening a store cannot
run code.  When the map is full it grows and the transaction is retried whole.

LMDB trusts its file (no checksums): a damaged page number or node size made it read past
the end of the file (SIGBUS) or fail an assertion (SIGABRT).  So opening a store first checks
that the file holds every page its meta pages name, then walks every tree of the snapshot
with ``csrc/storecheck.c`` (page numbers, types, node bounds, key order, counts; see its header)
before LMDB touches a page; :meth:`Store.iter_words` checks the values it decodes against a
check record (sum and number of the counts) that :meth:`Store.add_counts` keeps.  Damage is
one :class:`StoreError` naming the store.  LMDB's lock file is given its disk blocks before
LMDB writes to it through a map (on a full disk that write was a SIGBUS).

Performance notes (measured 2026-12, one server; the figures behind the constants):

* Staging: a 1.7M-key batch added in one transaction into an 18M-key store took 500 MB of
  dirty pages and 1 GB of mapped file.
* ``STAGE_CHUNK_KEYS``: 32,768 sorted keys read from a 55M-key store left 840 MB of it
  mapped (Linux's fault-around maps up to 16 cached pages around each fault); 4,096 keys a
  chunk peaked at 110 MB, and the commits cost no more time (20.7 s against 22.3 s for 1.45M
  keys).  The chunk is 2,048 keys now.
* The standalone ``_blake2`` module spares the ~4 MB of RSS of the OpenSSL library that
  ``hashlib`` loads, in every count.
"""

from __future__ import annotations

import errno
import heapq
import os
from contextlib import contextmanager
from itertools import chain, compress, islice, repeat
from operator import add, ge, is_, le, lt, not_
from typing import Iterator, List, Optional, Tuple, Union

import lmdb
import msgpack

from ..errors import UserError
from ..native import fastbpe as _native  # None without a C compiler: stores are then opened unchecked

FORMAT_VERSION = 1
MAGIC = "bpe-stream store"
_DBS = (b"meta", b"words", b"longwords", b"sources", b"train")
_INITIAL_MAP_SIZE = 1 << 30
# A batch with more keys than this is staged and applied one chunk of this many keys per
# transaction, the store re-mapped after each, so the B-tree pages read on the way stop
# counting as this process's memory.  Small, because Linux maps up to 16
# cached pages around each page fault ("fault-around"; figures in the module docstring).
STAGE_CHUNK_KEYS = 2048
# ... but a store of fewer pages than this has few to dirty: a transaction then adds as many
# keys as their new pages and the store's own fit in it (32 MB), and a batch that fits is
# added in one transaction, unstaged (``Store._stage_chunk_keys``).
STAGE_DIRTY_PAGES = 8192
WORD_BLOCK = 1 << 16  # pretokens a block of Store.iter_word_blocks
_PAGE = 4096
_ENTRY_OVERHEAD = 16  # bytes of a words entry besides its key: an 8-byte count, the node header
_PENDING = b"pending"  # in meta: the staged batch's source records and totals
# In meta: b"SUM ENTRIES" (decimal) of the words, kept by add_counts in each transaction that
# changes a count and compared by iter_words at its end: LMDB has no checksums, and a bit
# flipped inside a count changes the sum.  Stores from before it have none and go unchecked.
_CHECK = b"check"
_SOURCE_DIGESTS = b"source-digests/"  # in meta: + a source key -> its record's DIGEST_FIELDS
DIGEST_FIELDS = ("digest", "chain", "head", "hash")  # ("hash": their kind, count/seen_files.py)
BLAKE2B_KIND = "blake2b"  # the kind of a record's digests without a "hash" field (the first releases')
_STAGED = b"staged/"  # in meta: + 4-byte big-endian chunk number -> msgpack [keys, counts]
# In meta: msgpack [exact, [[count, pretoken], ...]] -- the TOP_KEPT most frequent pretokens
# (count descending, then bytes), kept by every transaction that adds counts, so that ``stats``
# reads them instead of every word.  Counts only grow, so a pretoken that enters the top does so
# in a batch that holds it, and the batch's new counts at or above the kept floor are all it
# takes.  Taking counts back (a negative count) can let an unseen pretoken into the top: the
# record is then marked not exact and the next ``stats`` reads the words (and keeps the top
# again).  Stores from before it have none: the same.
_TOP = b"top"
TOP_KEPT = 64


class StoreError(UserError):
    """A store that is missing, not ours, of another format or another setting."""


class WriteFailed(StoreError):
    """A write transaction failed (a full disk, a map that cannot grow); ``cause`` is LMDB's
    own words."""

    def __init__(self, message: str, cause: str):
        super().__init__(message)
        self.cause = cause


class _NoTables(StoreError):
    """An environment whose creation was cut off before its tables existed."""


class NotWritable(StoreError):
    """A store that this process may read but not write (a read-only mount, no permission)."""


# What LMDB says when it may not open a file for writing: EACCES (py-lmdb's ReadonlyError),
# EROFS, or EPERM (an immutable file).
_NOT_WRITABLE = (os.strerror(errno.EACCES), os.strerror(errno.EROFS), os.strerror(errno.EPERM))


def _not_writable(exc: Exception) -> bool:
    return isinstance(exc, lmdb.ReadonlyError) or any(text in str(exc) for text in _NOT_WRITABLE)


# LMDB's lock file for its default 126 readers: 125 reader slots of 64 bytes and the
# 192-byte header (mdb.c, mdb_env_setup_locks); a file of this size is taken as it is.
LOCK_FILE_BYTES = 8192


def _reserve_lock_file(path: str) -> None:
    """LMDB sizes its lock file with ftruncate, which gives it no disk blocks, and then writes
    to it through a shared map: on a full disk the first write into a page without a block
    kills the process with SIGBUS.  So the file's blocks are allocated first, where a full
    disk is an ordinary error (for a lock file that exists, this allocates only its holes)."""
    lock_file = os.path.join(path, "lock.mdb")
    try:
        st = os.stat(lock_file)
        if st.st_size >= LOCK_FILE_BYTES and st.st_blocks * 512 >= st.st_size:
            return  # allocated whole (the common case: no descriptor opened and closed, see below)
    except OSError:
        pass
    # (Closing a descriptor of the lock file drops every fcntl lock this process holds on it,
    # LMDB's included: harmless here, as LMDB forbids opening one environment twice in a process.)
    try:
        fd = os.open(lock_file, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        if exc.errno in (errno.EACCES, errno.EROFS, errno.EPERM):
            return  # not ours to write: LMDB opens it read-only or without the lock
        raise StoreError(f"cannot open the store at {path}: {exc.strerror}") from None
    try:
        os.posix_fallocate(fd, 0, max(os.fstat(fd).st_size, LOCK_FILE_BYTES))
    except OSError as exc:
        if exc.errno not in (errno.EOPNOTSUPP, errno.EINVAL):  # a file system without it: as before
            raise WriteFailed(_write_failed(path, exc.strerror), exc.strerror) from None
    finally:
        os.close(fd)


_META_BYTES = 2 * 4096  # LMDB's two meta pages, written in one call when it creates the file


def _discard_cut_off_creation(path: str, data_file: str) -> bool:
    """A data file shorter than the two meta pages, whose first meta page records no commit
    (or is still zeros), holds nothing: LMDB's first write was cut off, by a full disk most
    often, and LMDB would call it invalid forever.  Unless another process has the store open
    (every LMDB user holds a lock on the lock file's first byte), remove it so that LMDB starts
    over; True when it was removed."""
    import fcntl
    import struct

    with open(data_file, "rb") as f:
        head = f.read(16 + 136)
    if head.strip(b"\0") and not (len(head) == 16 + 136 and struct.unpack_from("<Q", head, 16 + 128)[0] == 0):
        return False
    try:
        fd = os.open(os.path.join(path, "lock.mdb"), os.O_RDWR | os.O_CREAT, 0o644)
    except OSError:
        return False
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 0)  # LMDB's own test for "no one else"
        os.unlink(data_file)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)  # (releases the lock)


def _open_env(path: str, map_size: int, readonly: bool, create: bool, lock: bool):
    if lock and (create or os.path.isdir(path)) and hasattr(os, "posix_fallocate"):
        if create:
            os.makedirs(path, exist_ok=True)
        _reserve_lock_file(path)
    return lmdb.open(
        path, subdir=True, map_size=map_size, max_dbs=len(_DBS), readonly=readonly, create=create,
        metasync=True, sync=True, readahead=False, lock=lock,
    )


_LMDB_FILES = {"data.mdb", "lock.mdb", "claims.lock", "checked"}  # (claims.lock: sources.Claims; checked: below)
# The state of the data file that the last structure check (or this library's own last commit)
# vouched for, beside it: see Store._verify.
_CHECKED = "checked"


def _write_failed(path: str, exc: Exception) -> str:
    return (
        f"writing to the store at {path} failed ({exc}); free disk space (or fix the cause) and run "
        "the same command again: the store holds every batch committed so far and resumes"
    )


def _retrying(env, fn, attempts: int = 8):
    """``fn()``, again after adopting the map size another process grew the store to."""
    for _ in range(attempts - 1):
        try:
            return fn()
        except lmdb.MapResizedError:
            env.set_mapsize(0)
    return fn()


def _open_dbs(env, readonly: bool, path: str) -> dict:
    def open_all():
        if readonly:
            return {name.decode(): env.open_db(name, create=False) for name in _DBS}
        # One write transaction for all of them: without one, each open_db made and committed
        # its own (a synced commit each when it creates its table: 4-38 ms to create a store,
        # against ~1 ms to open one).
        with env.begin(write=True) as txn:
            return {name.decode(): env.open_db(name, txn=txn, create=True) for name in _DBS}

    try:
        return _retrying(env, open_all)
    except lmdb.NotFoundError:
        raise _NoTables(f"the store at {path} is empty; run 'bpe-stream count' first") from None
    except lmdb.Error as exc:
        raise StoreError(f"cannot open the tables of the store at {path}: {exc}") from None


def _check_not_truncated(data_file: str, size: int) -> None:
    """LMDB maps the file and dies of SIGBUS reading past its end, so check first that the
    file holds every page its two meta pages name (a store cut short by a copy or a full disk)."""
    import struct

    if size < 2 * 4096:
        raise StoreError(f"the store file {data_file} is truncated ({size} bytes); restore it from a copy")
    with open(data_file, "rb") as f:
        head = f.read(2 * 65536)
        # The size after the meta pages were read: another process may be committing now, and
        # LMDB writes the pages before the meta page that names them, so a size taken
        # before (the caller's) can be short of what the meta pages read after name.
        size = max(size, os.fstat(f.fileno()).st_size)
    # Each meta page: page header (16 bytes), then MDB_meta: magic u32, version u32, address
    # u64, mapsize u64, two MDB_db of 48 bytes, last_pg u64, txnid u64.
    psize = None
    last_pages = []
    for offset in (0, None):
        if offset is None:
            if psize is None:
                break
            offset = psize
        if offset + 16 + 136 > len(head):
            break
        magic, version = struct.unpack_from("<II", head, offset + 16)
        if magic != 0xBEEFC0DE:
            raise StoreError(f"{data_file} is not an LMDB file; choose another --store")
        if psize is None:
            psize = struct.unpack_from("<I", head, offset + 16 + 24)[0] or 4096  # md_pad of the free DB
        last_pg, txnid = struct.unpack_from("<QQ", head, offset + 16 + 24 + 96)
        last_pages.append((txnid, last_pg))
    if psize and last_pages:
        last_pg = max(last_pages)[1]
        if (last_pg + 1) * psize > size:
            raise StoreError(
                f"the store file {data_file} is truncated ({size:,} bytes, its pages reach "
                f"{(last_pg + 1) * psize:,}); restore it from a copy"
            )


def settings_difference(a: dict, b: dict) -> Optional[Tuple[str, object, object]]:
    """The first setting where ``a`` and ``b`` differ, as ``(key, a's, b's)``: the pretokenizer's
    name before its pattern (which differs whenever the name does, in hundreds of characters)."""
    keys = sorted(set(a) | set(b), key=lambda k: (k == "pattern", k == "max_token_bytes", k))
    for key in keys:
        if a.get(key) != b.get(key):
            if key == "pattern" and len(str(a.get(key))) + len(str(b.get(key))) > 120:
                return key, _short(a.get(key)), _short(b.get(key))
            return key, a.get(key), b.get(key)
    return None


def _short(pattern) -> str:
    text = str(pattern)
    return text if len(text) <= 60 else f"{text[:40]}... ({len(text)} characters)"


def pack(obj) -> bytes:
    return msgpack.packb(obj, use_bin_type=True)


class _Garbled(StoreError):
    """A record that does not decode; the store's methods name the store in its place."""


def unpack(data: bytes):
    try:
        return msgpack.unpackb(data, raw=False, strict_map_key=False)
    except Exception as exc:  # msgpack raises several unrelated types on garbage
        raise _Garbled(f"a record does not decode: {exc}") from None


MAX_COUNT = (1 << 63) - 1  # counts and totals: what the merge loop's signed 64-bit counts hold


class SortedCounts:
    """Counts as two lists: the pretokens in increasing (bytes) order, each once, and their
    counts -- what ``CountTable.sorted_items`` gives; :meth:`Store.add_batch` takes them
    without sorting again.  ``len()``: how many pretokens."""

    __slots__ = ("keys", "counts")

    def __init__(self, keys: List[bytes], counts: List[int]):
        self.keys, self.counts = keys, counts

    def __len__(self) -> int:
        return len(self.keys)


class SortedRun:
    """Counts as one *run*: ``count.table``'s packed form (per entry a u32 length, the
    pretoken, a u64 count, all little-endian) with the pretokens strictly increasing --
    what ``merge_runs_packed`` and ``CountTable.pack(sorted=True)`` give.  The native writer
    adds it without an object per pretoken.  ``len()``: how many pretokens."""

    __slots__ = ("run", "entries")

    def __init__(self, run, entries: int):
        self.run, self.entries = run, entries

    def __len__(self) -> int:
        return self.entries

    def key_bytes(self) -> int:
        return len(self.run) - _RUN_ENTRY_OVERHEAD * self.entries

    def sorted_counts(self) -> SortedCounts:
        """The run as two lists (the Python path)."""
        if _native is not None:
            return SortedCounts(*_native.merge_runs([self.run]))
        import struct

        keys, counts, view, off = [], [], memoryview(self.run).cast("B"), 0
        while off < len(view):
            (length,) = struct.unpack_from("<I", view, off)
            keys.append(bytes(view[off + 4:off + 4 + length]))
            counts.append(struct.unpack_from("<Q", view, off + 4 + length)[0])
            off += _RUN_ENTRY_OVERHEAD + length
        return SortedCounts(keys, counts)


_RUN_ENTRY_OVERHEAD = 12  # a run's bytes per entry besides its key (csrc/counttable.h)


class SortedRuns:
    """Counts as several runs (each a :class:`SortedRun`'s), for the native writer to merge
    as it writes them (``StoreWriter.add_runs``: each part of the merge written while
    ``threads`` helper threads merge the next), not merged first.  ``entries``: the runs'
    entries, at most the pretokens (a key in two runs counts twice)."""

    __slots__ = ("runs", "entries", "threads")

    def __init__(self, runs: List, entries: int, threads: int = 1):
        self.runs, self.entries, self.threads = runs, entries, threads

    def __len__(self) -> int:
        return self.entries

    def key_bytes(self) -> int:
        return sum(map(len, self.runs)) - _RUN_ENTRY_OVERHEAD * self.entries

    def merged(self) -> SortedRun:
        """The runs merged into one (the native merge: SortedRuns come from a process that
        writes natively)."""
        return SortedRun(*_native.merge_runs_packed(self.runs, threads=self.threads))


_StoreWriter = getattr(_native, "StoreWriter", None)  # None without the extension
# Whether batches are written by the native writer where it can (tests turn it off to
# compare the two paths).
NATIVE_WRITES = True


class _NativeTxn:
    """A write transaction of the native writer (``csrc/storewrite.h``), with the ``get``,
    ``put`` and ``delete`` of py-lmdb's (``db=`` one of the store's table handles), so that
    the metadata code (totals, source records, settings, the check record) is one for both."""

    __slots__ = ("writer", "_tables")

    def __init__(self, writer, tables: dict):
        self.writer, self._tables = writer, {id(handle): i for i, handle in enumerate(map(tables.get, _DB_NAMES))}

    def get(self, key, default=None, db=None):
        value = self.writer.get(self._tables[id(db)], key)
        return default if value is None else value

    def put(self, key, value, db=None) -> bool:
        self.writer.put(self._tables[id(db)], key, value)
        return True

    def delete(self, key, db=None) -> bool:
        return self.writer.delete(self._tables[id(db)], key)

    def first_from(self, key, db=None):
        return self.writer.first_from(self._tables[id(db)], key)


_DB_NAMES = [name.decode() for name in _DBS]
_WORDS, _LONGWORDS = _DB_NAMES.index("words"), _DB_NAMES.index("longwords")  # (the native writer's numbers)


_NO_COUNT = bytes(8)  # what add_counts reads for a pretoken the store does not hold (a held count is > 0)


def _column_stats(keys: list, ns: list) -> Tuple[int, int, int, int, int]:
    """(the sum of the keys' lengths, the longest, the sum of the counts, the smallest, the
    largest) of two lists of one length, not empty: in one pass in C where it can (~3 ms for
    420k keys, against ~50 ms for the five passes of Python's sum, max and min)."""
    stats = _native.column_stats(keys, ns) if _native is not None else None
    if stats is None:  # no extension, or a count past 64 bits (refused later, with its words)
        lens = list(map(len, keys))
        stats = sum(lens), max(lens), sum(ns), min(ns), max(ns)
    return stats


_VALUE_BLOCK = 1 << 16


def _values(ns: list) -> Iterator[bytes]:
    """The counts (each checked to be at most MAX_COUNT) as the store's values, 8 bytes
    little-endian, made in C a block at a time (int.to_bytes was 45 ms of 420k keys' write)."""
    if _native is None:
        return map(int.to_bytes, ns, repeat(8), repeat("little"))
    blocks = (ns[i:i + _VALUE_BLOCK] for i in range(0, len(ns), _VALUE_BLOCK))
    return chain.from_iterable(map(_native.le64_values, blocks))


def _u64(value: int) -> bytes:
    if value > MAX_COUNT:  # the whole transaction is aborted: the store keeps its last commit
        raise StoreError(f"a count would pass 2**63-1 ({value:,}); the store keeps 64-bit counts")
    return value.to_bytes(8, "little")


# What LMDB raises for a file whose structure it cannot follow.
_DAMAGE = (lmdb.CorruptedError, lmdb.PageNotFoundError, lmdb.InvalidError, lmdb.BadValsizeError,
           lmdb.VersionMismatchError, lmdb.PanicError)


# The native writer's codes for the same (``_fastbpe.MDB_*``).
_NATIVE_DAMAGE = frozenset(
    getattr(_native, name) for name in ("MDB_CORRUPTED", "MDB_PAGE_NOTFOUND", "MDB_INVALID", "MDB_PANIC",
                                        "MDB_BAD_VALSIZE", "MDB_VERSION_MISMATCH") if hasattr(_native, name))


def _damaged(path: str, what) -> str:
    return f"the store at {path} is damaged ({what}); restore it from a copy, or count again into a new store"


def _check_structure(env, path: str) -> None:
    """Checks every tree of the data file (``csrc/storecheck.c``) in a snapshot this process holds
    (so that no writer reuses its pages meanwhile), before LMDB itself walks any of them."""
    if _native is None:
        return
    import mmap

    def check_snapshot() -> int:
        with env.begin() as txn, open(os.path.join(path, "data.mdb"), "rb") as f:
            with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
                return _native.store_check(mapped, txn.id())

    for _ in range(8):  # 1: writers committed twice during the check; check a newer snapshot
        try:
            if _retrying(env, check_snapshot) == 0:
                return
        except ValueError as exc:
            raise StoreError(_damaged(path, exc)) from None


def _file_state(env, path: str) -> Optional[Tuple[str, int]]:
    """The data file as it stands -- its last committed transaction and what the file system says
    of it (size, modification and change times, inode) -- and its modification time.  Any write
    to the file changes the times; a copy is another inode with another change time."""
    try:
        st = os.stat(os.path.join(path, "data.mdb"))
        txnid = env.info()["last_txnid"]
    except (OSError, lmdb.Error):
        return None
    return f"{txnid} {st.st_size} {st.st_mtime_ns} {st.st_ctime_ns} {st.st_ino}", st.st_mtime_ns


def _recorded_state(path: str) -> Optional[str]:
    """The data file's state that the last full structure check, or the last commit of a
    writer that closed cleanly, recorded in ``checked`` (None: none)."""
    try:
        with open(os.path.join(path, _CHECKED), "rb") as f:
            return f.read(256).decode("ascii", "replace").strip() or None
    except OSError:
        return None


# A file's times come from a coarse clock (a few ms): a write in the same tick as the state a
# check saw would leave the same times.  So a check vouches only for a file left alone for
# longer than this, and a writer closing stamps the file with a time of its own (see close).
_SETTLED_NS = 1_000_000_000


def _record_checked(path: str, state: str) -> None:
    """Records ``state`` of the data file as checked (best effort: a store this process cannot
    write is checked at every open)."""
    tmp = os.path.join(path, f".{_CHECKED}.{os.getpid()}")
    try:
        with open(tmp, "w", encoding="ascii") as f:
            f.write(state + "\n")
        os.replace(tmp, os.path.join(path, _CHECKED))
    except OSError:
        try:
            os.unlink(tmp)
        except OSError:
            pass


def check_store(path: str) -> Tuple[int, int]:
    """``bpe-stream verify``: walks every tree of the store at ``path`` (whatever ``checked``
    says) and reads every count against the check record; raises :class:`StoreError` naming
    the damage.  Returns (distinct pretokens, bytes of the data file)."""
    with Store.open(path, readonly=True, full_check=True) as store:
        with store.reader() as txn:
            for _ in store.iter_word_blocks(txn):
                pass
            return store.unique_words(txn), os.path.getsize(os.path.join(path, "data.mdb"))


try:  # hashlib's own blake2b, without the OpenSSL library hashlib loads (performance notes above)
    from _blake2 import blake2b
except ImportError:  # pragma: no cover - another Python
    from hashlib import blake2b


def _best(candidates) -> list:
    """The TOP_KEPT best of (count, pretoken) pairs: count descending, then bytes."""
    return heapq.nsmallest(TOP_KEPT, candidates, key=lambda c: (-c[0], c[1]))


class _Desc:
    """A pretoken in a min-heap of (count, _Desc) whose root is the one to drop first: the least
    count, and among equal counts the greatest bytes (the top ranks smaller bytes first)."""

    __slots__ = ("b",)

    def __init__(self, b: bytes):
        self.b = b

    def __lt__(self, other: "_Desc") -> bool:
        return self.b > other.b


def _digest(pretoken: bytes) -> bytes:
    return blake2b(pretoken, digest_size=20).digest()


@contextmanager
def _sigint_deferred():
    """Inside the block, SIGINT is held back and raised (KeyboardInterrupt) when it ends."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: held.append(frame))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        if held and callable(previous):
            previous(signal.SIGINT, held[0])


class Store:
    """An open store.  Use :meth:`open`; close it (or use ``with``) when done."""

    def __init__(self, path: str, env: lmdb.Environment, readonly: bool, lock: bool = True):
        self.path = path
        self.env = env
        self.readonly = readonly
        self.lock = lock  # False: read without LMDB's lock file, which this process cannot write
        self.db = _open_dbs(env, readonly, path)
        self.max_key = env.max_key_size()
        self._committed = 0  # the id of this process's last write transaction (0: none)
        self._handle_open = True  # py-lmdb's handle (False while the native writer holds the store)

    # -- opening -------------------------------------------------------------------
    @classmethod
    def open(cls, path: str, *, create: bool = False, readonly: bool = False, full_check: bool = False) -> "Store":
        """Opens (``create``: or makes) the store at ``path``.  A file cut short is refused at
        every open; every tree is walked when the data file is not in a state vouched for
        (:meth:`_verify`), or with ``full_check``."""
        path = os.fspath(path)
        if os.path.exists(path) and not os.path.isdir(path):
            raise StoreError(f"{path} is a file, not a store directory; give --store a directory path")
        size, exists = cls._data_size(path, create)
        env_readonly = readonly and exists
        env, lock = cls._open_environment(path, size, env_readonly, create)
        try:
            if exists:
                cls._verify(env, path, full_check)
            cls._check_header(env, path, exists)
            store = cls(path, env, readonly=env_readonly, lock=lock)
            if store.has_staged_batch():
                store = cls._settle_staged(store, path)
        except _NoTables:
            env.close()
            if not readonly:
                raise
            # Read-only, a store cut off before its tables existed: create the (empty)
            # tables, which changes nothing a reader could see, then open it as asked.
            cls.open(path, create=False, readonly=False).close()
            return cls.open(path, create=False, readonly=True)
        except BaseException:
            env.close()
            raise
        return store

    @staticmethod
    def _data_size(path: str, create: bool) -> Tuple[int, bool]:
        """``(size of the data file, whether it holds data)``; refuses a directory that is not a
        store, a missing store (unless ``create``) and a data file cut short, and discards a
        creation cut off before its first commit (``create``)."""
        data = os.path.join(path, "data.mdb")
        size = os.path.getsize(data) if os.path.isfile(data) else 0
        # LMDB's own files with no data yet: a store whose creation was cut off, or is
        # under way in another process this very moment -- not someone else's directory.
        exists = size > 0
        if not exists:
            if os.path.isdir(path) and set(os.listdir(path)) - _LMDB_FILES:
                raise StoreError(f"{path} is a non-empty directory that is not a bpe-stream store; choose another --store")
            if not create:
                if os.path.isdir(path) and os.listdir(path):
                    raise StoreError(f"the store at {path} is empty; run 'bpe-stream count' first")
                raise StoreError(f"no store at {path}; run 'bpe-stream count' first or pass --store PATH")
        elif create and size < _META_BYTES and _discard_cut_off_creation(path, data):
            size, exists = 0, False
        else:
            _check_not_truncated(data, size)
        return size, exists

    @staticmethod
    def _open_environment(path: str, size: int, env_readonly: bool, create: bool):
        """``(env, lock)``: the LMDB environment, opened without the lock file (``lock`` False)
        when a reader cannot write it; a writer that cannot write gets ``NotWritable``."""
        lock = True
        try:
            try:
                env = _open_env(path, max(_INITIAL_MAP_SIZE, size), env_readonly, create, lock)
            except lmdb.Error as exc:
                if not _not_writable(exc):
                    raise
                if not env_readonly:
                    raise NotWritable(f"the store at {path} cannot be written here ({exc})") from None
                # A reader takes a slot in the lock file; without write access to it, read
                # without the lock (LMDB does so itself on a read-only mount).  Nothing
                # excludes a writer then: see README, "Stores you cannot write".
                lock = False
                env = _open_env(path, max(_INITIAL_MAP_SIZE, size), env_readonly, create, lock)
        except lmdb.Error as exc:
            raise StoreError(f"cannot open the store at {path}: {exc}") from None
        return env, lock

    @staticmethod
    def _verify(env, path: str, full_check: bool) -> None:
        """Walk every tree when the data file is not in a state vouched for (or ``full_check``),
        and vouch for it once it has settled."""
        state = _file_state(env, path)
        if not full_check and state is not None and state[0] == _recorded_state(path):
            return  # its pages are the ones checked, or written by this library, since
        import time

        _check_structure(env, path)
        if state is not None and _file_state(env, path) == state and time.time_ns() - state[1] > _SETTLED_NS:
            _record_checked(path, state[0])

    @classmethod
    def _check_header(cls, env, path: str, exists: bool) -> None:
        """The header record is a bpe-stream store's, of a format this version reads, and whole
        (or there is none yet, in a store that holds nothing but its empty tables)."""
        try:
            meta, blank = _retrying(env, lambda: cls._inspect(env))
        except (_DAMAGE + (_Garbled,)) as exc:
            raise StoreError(_damaged(path, exc)) from None
        if exists and meta is None and not blank:
            raise StoreError(f"{path} is an LMDB database but not a bpe-stream store; choose another --store")
        if meta is not None:
            if not isinstance(meta, dict) or meta.get("magic") != MAGIC:
                raise StoreError(f"{path} is not a bpe-stream store; choose another --store")
            if meta.get("format", 0) > FORMAT_VERSION:
                raise StoreError(
                    f"the store at {path} has format {meta['format']}, newer than this bpe-stream "
                    f"understands ({FORMAT_VERSION}); upgrade bpe-stream"
                )
            if not isinstance(meta.get("settings"), dict) or not isinstance(meta.get("totals"), dict):
                raise StoreError(f"the store at {path} has a damaged header record; restore it from a copy or count again")

    @classmethod
    def _settle_staged(cls, store: "Store", path: str) -> "Store":
        """A store holding a staged batch: a writer applies it; a reader has it finished (see
        :meth:`_finish_staged`) and opens the store again."""
        if not store.readonly:
            try:
                store.apply_staged()
            except BaseException:
                store.close()
                raise
            return store
        store.close()
        cls._finish_staged(path)
        return cls.open(path, readonly=True)

    @classmethod
    def open_for_update(cls, path: str) -> "Store":
        """Read-write where the store can be written here, else read-only (``store.readonly``):
        for commands that only add to what the store keeps (training checkpoints)."""
        try:
            return cls.open(path)
        except NotWritable:
            return cls.open(path, readonly=True)

    @classmethod
    def _finish_staged(cls, path: str) -> None:
        """A reader met a staged batch (cut off by a kill, or being applied right now): it
        finishes it, which changes nothing a reader could see, so that it reads it whole."""
        try:
            cls.open(path).close()
        except StoreError as exc:
            cause = getattr(exc, "cause", None) or str(exc)
            raise StoreError(
                f"the store at {path} holds a batch of counts that its writer could not finish, and "
                f"finishing it failed here too ({cause}); free disk space (or fix the cause): the next "
                "'bpe-stream count' on this store finishes it"
            ) from None

    @staticmethod
    def _inspect(env) -> Tuple[Optional[dict], bool]:
        """The header record, and whether the environment holds nothing but our empty tables
        (a store whose creation was cut off before its first batch, or is under way in
        another process) -- both read in one transaction, so a batch committed meanwhile by
        that other process cannot make the store look like someone else's."""
        with env.begin() as txn:
            names = [bytes(k) for k, _ in txn.cursor()]
            if any(name not in _DBS for name in names):
                return None, False
            meta = None
            blank = True
            for name in names:
                db = env.open_db(name, txn=txn, create=False)
                if name == b"meta":
                    raw = txn.get(b"info", db=db)
                    meta = unpack(raw) if raw is not None else None
                if txn.stat(db)["entries"]:
                    blank = False
            return meta, blank

    def close(self) -> None:
        # A writer that committed and closes cleanly vouches for the pages it wrote: the next
        # open need not walk them (a kill skips this, and the next open checks everything).
        if self._committed and not self.readonly:
            self._vouch_for_own_commits()
        self.env.close()

    def _vouch_for_own_commits(self) -> None:
        """Records the data file as checked when this process's commit is its last: the file is
        stamped with a modification time to the nanosecond, which no later write keeps (the
        kernel's clock for file times is coarse), so the state recorded is this one alone."""
        import time

        data = os.path.join(self.path, "data.mdb")
        try:
            if self.env.info()["last_txnid"] != self._committed:
                return
            stamp = time.time_ns()
            os.utime(data, ns=(stamp, stamp))
        except (OSError, lmdb.Error):
            return
        state = _file_state(self.env, self.path)
        if state is not None and state[1] == stamp and state[0].split()[0] == str(self._committed):
            _record_checked(self.path, state[0])

    def remap(self) -> None:
        """Closes and reopens the environment (no transaction may be open): pages of the file
        read or written so far stay mapped -- and count as this process's memory -- until
        the map is dropped; the OS keeps them as cache.  A Ctrl-C meanwhile takes effect once
        the store is open again (it left a closed environment that the interrupted command
        then failed to read its totals from)."""
        with _sigint_deferred():
            map_size = self.env.info()["map_size"]
            self.env.close()
            try:
                self.env = _open_env(self.path, map_size, self.readonly, False, self.lock)
            except lmdb.Error as exc:
                raise StoreError(f"cannot reopen the store at {self.path}: {exc}") from None
            self.db = _open_dbs(self.env, self.readonly, self.path)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # -- transactions --------------------------------------------------------------
    @property
    def writes_natively(self) -> bool:
        """Whether :meth:`write` with ``native=True`` uses the native writer: with the
        extension built, on a store this process may write and lock."""
        return NATIVE_WRITES and _StoreWriter is not None and not self.readonly and self.lock

    def write(self, fn, native: bool = False):
        """Run ``fn(txn)`` in one write transaction; grow the map and retry when full.  Any
        other LMDB failure (a full disk) aborts the transaction whole: the store keeps its
        last commit, and the same command resumes once the cause is gone.  ``native``: in a
        transaction of the native writer (a :class:`_NativeTxn`) where :attr:`writes_natively`."""
        if native and self.writes_natively:
            return self._write_native(fn)
        while True:
            try:
                with self.env.begin(write=True) as txn:
                    result = fn(txn)
                    committed = txn.id()
                self._committed = committed
                return result
            except lmdb.MapFullError:
                try:
                    self.env.set_mapsize(self.env.info()["map_size"] * 2)
                except lmdb.Error as exc:
                    raise WriteFailed(_write_failed(self.path, exc), str(exc)) from None
            except lmdb.MapResizedError:
                self.env.set_mapsize(0)
            except (_DAMAGE + (_Garbled,)) as exc:
                raise StoreError(_damaged(self.path, exc)) from None
            except lmdb.Error as exc:
                raise WriteFailed(_write_failed(self.path, exc), str(exc)) from None

    def _write_native(self, fn):
        """:meth:`write` in the native writer's environment.  Ownership (see the module
        docstring): py-lmdb's handle is closed first and reopened after the native one is
        closed, whatever happens in between -- LMDB allows one open of an environment per
        process, and a second handle's close would drop the first one's locks."""
        committed = closed = False
        try:
            # (a Ctrl-C held back while py-lmdb's handle closes is raised as this block ends:
            # inside the try, so that the handle is reopened below)
            with _sigint_deferred():
                map_size = self.env.info()["map_size"]
                self.env.close()
                closed = True
            try:
                writer = _StoreWriter(self.path, map_size)
            except _native.LmdbError as exc:
                raise WriteFailed(_write_failed(self.path, exc.args[1]), exc.args[1]) from None
            try:
                result = self._native_transaction(writer, fn)
                committed = True
                return result
            finally:
                map_size = writer.map_size()
                writer.close()
        finally:
            if closed:
                # Reopened whenever a Ctrl-C comes.  Python runs a signal's handler at its next
                # function call, so a SIGINT that came during the native writer's commit or
                # close can be raised on the way into the reopening's hold, before it holds
                # anything (seen 1 in 80 runs of the Ctrl-C test of count -w2 with worker
                # processes: the handle stayed closed and the count ended on "Attempt to
                # operate on closed/deleted/dropped object"): that Ctrl-C is kept, the handle
                # reopened, and the Ctrl-C raised after.
                self._handle_open, early = False, None
                while not self._handle_open:
                    try:
                        self._reopen_after_native(map_size, committed)
                    except KeyboardInterrupt as exc:
                        early = exc
                if early is not None:
                    raise early

    def _reopen_after_native(self, map_size: int, committed: bool) -> None:
        """py-lmdb's handle opened again after the native writer's (a Ctrl-C held back
        meanwhile); ``_handle_open`` set once it is."""
        with _sigint_deferred():
            try:
                self.env = _open_env(self.path, map_size, self.readonly, False, self.lock)
            except lmdb.Error as exc:
                raise StoreError(f"cannot reopen the store at {self.path}: {exc}") from None
            self.db = _open_dbs(self.env, self.readonly, self.path)
            self._handle_open = True
            if committed:  # (the native commit is the file's last, as close() checks)
                self._committed = self.env.info()["last_txnid"]

    def _native_transaction(self, writer, fn):
        while True:
            try:
                writer.begin()
                try:
                    result = fn(_NativeTxn(writer, self.db))
                    writer.commit()
                    return result
                finally:
                    writer.abort()  # (nothing once committed)
            except _native.LmdbError as exc:
                code, text = exc.args
                if code == _native.MDB_MAP_FULL:
                    try:
                        writer.set_map_size(writer.map_size() * 2)
                    except _native.LmdbError as grow:
                        raise WriteFailed(_write_failed(self.path, grow.args[1]), grow.args[1]) from None
                    continue
                if code in _NATIVE_DAMAGE:
                    raise StoreError(_damaged(self.path, text)) from None
                raise WriteFailed(_write_failed(self.path, text), text) from None
            except _Garbled as exc:
                raise StoreError(_damaged(self.path, exc)) from None

    @contextmanager
    def reader(self):
        """A read transaction; LMDB's errors inside it become one StoreError naming the store."""
        while True:
            try:
                txn = self.env.begin()
                break
            except lmdb.MapResizedError:
                self.env.set_mapsize(0)
        try:
            yield txn
        except _Garbled as exc:
            raise StoreError(_damaged(self.path, exc)) from None
        except lmdb.Error as exc:
            raise StoreError(_damaged(self.path, exc) if isinstance(exc, _DAMAGE)
                             else f"reading the store at {self.path} failed ({exc})") from None
        finally:
            txn.abort()

    # -- metadata ------------------------------------------------------------------
    def info(self, txn=None) -> Optional[dict]:
        if txn is None:
            with self.reader() as t:
                return self.info(t)
        raw = txn.get(b"info", db=self.db["meta"])
        return unpack(raw) if raw is not None else None

    def settings(self) -> Optional[dict]:
        info = self.info()
        return info["settings"] if info else None

    def totals(self, txn=None) -> dict:
        info = self.info(txn)
        return dict(info["totals"]) if info else dict(_ZERO_TOTALS)

    def check_settings(self, settings: dict) -> None:
        """Raises unless the store is new or was counted with ``settings``."""
        with self.reader() as txn:
            self.settings_in(txn, settings, record=False)

    def settings_in(self, txn, settings: dict, record: bool = True) -> dict:
        """Inside ``txn``: checks ``settings`` against the recorded ones, recording them in a
        new store when ``record`` (so a count that fails before its first batch leaves none)."""
        raw = txn.get(b"info", db=self.db["meta"])
        if raw is None:
            if record:
                info = {"magic": MAGIC, "format": FORMAT_VERSION, "settings": settings, "totals": dict(_ZERO_TOTALS)}
                txn.put(b"info", pack(info), db=self.db["meta"])
                txn.put(_CHECK, b"0 0", db=self.db["meta"])
            return settings
        recorded = unpack(raw)["settings"]
        diff = settings_difference(recorded, settings)
        if diff:
            raise StoreError(
                f"the store at {self.path} was counted with {diff[0]}={diff[1]!r}, not {diff[2]!r}; "
                "use the same settings or another --store"
            )
        return recorded

    def ensure_settings(self, settings: dict) -> dict:
        """Records ``settings`` in a new store, or checks they equal the recorded ones."""
        return self.write(lambda txn: self.settings_in(txn, settings))

    # -- counts --------------------------------------------------------------------
    def add_counts(self, txn, counts) -> Tuple[int, int]:
        """Adds ``counts`` (a dict, or (pretoken, count) pairs best in key order) inside
        ``txn``; returns how many pretokens were new and their bytes.  A negative count takes
        back what was counted: a pretoken that falls to 0 is removed (and counts as -1 new).

        >>> st.write(lambda txn: st.add_counts(txn, {b" the": 3, b"cat": 1}))  # doctest: +SKIP
        (2, 7)
        """
        if isinstance(counts, dict):
            keys = sorted(counts)
            ns = list(map(counts.__getitem__, keys))
        else:
            pairs = list(counts)
            keys, ns = [k for k, _ in pairs], [n for _, n in pairs]
        return self._add_sorted(txn, keys, ns)

    def _add_sorted(self, txn, keys: list, ns: list, increasing: bool = False, stats=None) -> Tuple[int, int]:
        """:meth:`add_counts` of ``keys`` (best sorted) and their counts ``ns``; ``increasing``:
        the caller made ``keys`` increasing (a sorted dict, ``CountTable.sorted_items``);
        ``stats``: their :func:`_column_stats`, if the caller has them."""
        if not keys:
            return 0, 0
        # increasing: so distinct, and in the tree's order
        increasing = increasing or all(map(lt, keys, islice(keys, 1, None)))
        key_bytes, max_len, total, lowest, highest = stats or _column_stats(keys, ns)
        floor = self._top_floor(txn)
        top = []
        if not increasing or lowest <= 0:
            new, new_bytes = self._add_each(txn, zip(keys, ns), floor, top)
        else:
            # Pretokens of 1 to max_key bytes are keys of their own; the rest (b"" sorts first)
            # go under their digest.
            if keys[0] and max_len <= self.max_key:  # all short: the usual batch
                new, new_bytes = self._add_short(txn, keys, ns, (key_bytes, highest), floor, top)
            else:
                short = list(map(le, map(len, keys), repeat(self.max_key)))
                short[0] = short[0] and bool(keys[0])
                long_ = list(map(not_, short))
                new, new_bytes = self._add_short(txn, list(compress(keys, short)), list(compress(ns, short)),
                                                 None, floor, top)
                more, more_bytes = self._add_each(txn, zip(compress(keys, long_), compress(ns, long_)), floor, top)
                new, new_bytes = new + more, new_bytes + more_bytes
        if None in top:  # counts taken back: the top may now miss a pretoken
            self._lose_top(txn)
        else:
            self._keep_top(txn, top)
        self._bump_check(txn, total, new)
        return new, new_bytes

    def _add_short(self, txn, keys: list, ns: list, known: Optional[Tuple[int, int]], floor: int,
                   top: list) -> Tuple[int, int]:
        """Adds positive counts of pretokens, in increasing order, that are keys of their own (1 to
        ``max_key`` bytes) in C loops: a lookup per key, the sums, one ``putmulti``.  (Per key
        from Python, the same took 4x as long: 1.8 s against 0.45 s for 420k keys.)  Into an
        empty tree (a new store's first batch) the keys are appended: no lookups, pages filled.
        ``known``: the keys' total length and the largest count, if the caller has them.  The
        (new count, pretoken) of the keys reaching ``floor`` (see _top_floor) that can rank in
        the kept top go to ``top``."""
        if not keys:
            return 0, 0
        words = self.db["words"]
        if not txn.stat(words)["entries"]:  # a new store's first batch: every key new, appended in order
            key_bytes, highest = known or (sum(map(len, keys)), max(ns))
            if highest > MAX_COUNT:
                _u64(highest)
            with txn.cursor(db=words) as cur:
                cur.putmulti(zip(keys, _values(ns)), append=True)
            top.extend(_best(zip(ns, keys)))
            return len(keys), key_bytes
        olds = list(map(txn.get, keys, repeat(_NO_COUNT), repeat(words)))  # _NO_COUNT: not there
        # old + new, the values, the largest and the new keys in one pass in C ...
        summed = _native.add_le64(keys, olds, ns, _NO_COUNT, floor) if _native is not None else None
        if summed is not None:
            values, highest, new, new_bytes, reached = summed
            top.extend(_best((m, keys[i]) for m, i in reached))
        else:  # ... or in Python's, with the errors a damaged store or a count too large gets
            if set(map(len, olds)) != {8}:
                raise StoreError(_damaged(self.path, "a count is not 8 bytes"))
            totals = list(map(add, map(int.from_bytes, olds, repeat("little")), ns))
            highest = max(totals)
            missing = list(map(is_, olds, repeat(_NO_COUNT)))
            new, new_bytes = sum(missing), sum(map(len, compress(keys, missing)))
            values = _values(totals)  # (made as putmulti takes them: after the check below)
            top.extend(_best((m, k) for m, k in zip(totals, keys) if m >= floor))
        if highest > MAX_COUNT:  # the whole transaction is aborted: the store keeps its last commit
            _u64(highest)
        del olds
        with txn.cursor(db=words) as cur:
            cur.putmulti(zip(keys, values))
        return new, new_bytes

    def _add_each(self, txn, pairs, floor: Optional[int] = None, top: Optional[list] = None) -> Tuple[int, int]:
        """Adds (pretoken, count) pairs one by one: long pretokens (under their digest, the
        count followed by the pretoken itself) and counts taken back.  The (new count, pretoken)
        of those reaching ``floor`` go to ``top``, and a count taken back puts a None there (the
        kept top is lost, see _add_sorted)."""
        words, longwords, max_key = self.db["words"], self.db["longwords"], self.max_key
        new = new_bytes = 0
        for key, n in pairs:
            short = len(key) <= max_key and key
            db_key, db = (key, words) if short else (_digest(key), longwords)
            old = txn.get(db_key, db=db)
            total = n if old is None else int.from_bytes(old[:8], "little") + n
            if n < 0 and top is not None:
                top.append(None)
            elif floor is not None and total >= floor and top is not None:
                top.append((total, key))
            if total > 0:
                txn.put(db_key, _u64(total) if short else _u64(total) + key, db=db)
                if old is None:
                    new += 1
                    new_bytes += len(key)
            elif total == 0 and old is not None:
                txn.delete(db_key, db=db)
                new -= 1
                new_bytes -= len(key)
            else:
                raise StoreError(_damaged(self.path, f"taking back counts of {key[:40]!r} that it does not hold"))
        return new, new_bytes

    # -- the kept most frequent pretokens (_TOP) ---------------------------------------
    def _top_record(self, txn) -> Tuple[bool, list]:
        raw = txn.get(_TOP, db=self.db["meta"])
        if raw is None:
            return False, []
        try:
            exact, entries = unpack(raw)
            return bool(exact), [(int(n), bytes(w)) for n, w in entries]
        except (TypeError, ValueError):
            raise StoreError(_damaged(self.path, "its record of the most frequent pretokens is garbled")) from None

    def _top_floor(self, txn) -> int:
        """The least count a pretoken needs to enter the kept top.  A store whose record is not
        kept (from before it, or counts were taken back) has it rebuilt here, from every word,
        once: the write that needs it is this transaction's."""
        exact, entries = self._top_record(txn)
        if not exact and (entries or self.unique_words(txn)):
            entries = self._scan_top(txn, TOP_KEPT)
            txn.put(_TOP, pack([True, [[n, w] for n, w in entries]]), db=self.db["meta"])
        return entries[-1][0] if len(entries) >= TOP_KEPT else 0

    def _keep_top(self, txn, candidates) -> None:
        """Merges ``candidates`` ((new count, pretoken) of this transaction's adds at or above the
        floor) into the kept top (none: the record stays as it is, or absent)."""
        if not candidates:
            return
        exact, entries = self._top_record(txn)
        merged = dict((w, n) for n, w in entries)
        for n, w in candidates:
            merged[w] = n
        best = _best((n, w) for w, n in merged.items())
        txn.put(_TOP, pack([True, [[n, w] for n, w in best]]), db=self.db["meta"])

    def _lose_top(self, txn) -> None:
        txn.put(_TOP, pack([False, []]), db=self.db["meta"])

    def top_pretokens(self, txn, top: int) -> List[Tuple[int, bytes]]:
        """The ``top`` most frequent (count, pretoken), count descending then bytes: from the
        kept record when it holds them, else read from every word."""
        exact, entries = self._top_record(txn)
        if exact and (top <= TOP_KEPT or len(entries) < TOP_KEPT):
            return entries[:top]
        return self._scan_top(txn, top)

    def _scan_top(self, txn, top: int) -> List[Tuple[int, bytes]]:
        """The ``top`` most frequent (count, pretoken), read from every word."""
        best = []
        for word, n in self.iter_words(txn):
            if len(best) < top:
                heapq.heappush(best, (n, _Desc(word)))
            elif top and (n > best[0][0] or (n == best[0][0] and word < best[0][1].b)):
                heapq.heapreplace(best, (n, _Desc(word)))
        return [(n, d.b) for n, d in sorted(best, key=lambda x: (-x[0], x[1].b))]

    def _check_record(self, txn) -> Optional[Tuple[int, int]]:
        raw = txn.get(_CHECK, db=self.db["meta"])
        if raw is None:
            return None
        try:
            total, entries = map(int, bytes(raw).split())
        except ValueError:
            raise StoreError(_damaged(self.path, "its check record is not two numbers")) from None
        return total, entries

    def _bump_check(self, txn, added: int, new: int) -> None:
        record = self._check_record(txn)
        if record is not None:
            txn.put(_CHECK, b"%d %d" % (record[0] + added, record[1] + new), db=self.db["meta"])

    def add_batch(self, counts: Union[dict, "SortedCounts"], sources: dict, totals: dict, before=None,
                  dirty_bytes: Optional[int] = None) -> int:
        """Adds ``counts`` (pretoken bytes -> count, or a :class:`SortedCounts`) with the
        source records and totals they stand for, atomically as readers see it (see the
        module docstring); ``before(txn)`` runs in the first transaction.  ``dirty_bytes``:
        the memory a transaction of the batch may dirty (LMDB holds its dirty pages in this
        process until the commit), which sets how many keys a transaction adds
        (:meth:`_stage_chunk_keys`); None: STAGE_DIRTY_PAGES.  Returns how many pretokens
        were new."""
        dirty_pages = None if dirty_bytes is None else dirty_bytes // _PAGE  # (None: _stage_chunk_keys's default)
        if isinstance(counts, SortedRuns):
            if self.writes_natively and counts.entries <= self._stage_chunk_keys(
                    counts.entries, counts.key_bytes(), dirty_pages):
                return self._add_runs_batch(counts, sources, totals, before)
            counts = counts.merged()  # (a staged batch: its chunks are cut from one run)
        if isinstance(counts, SortedRun):
            if self.writes_natively:
                return self._add_run_batch(counts, sources, totals, before, dirty_pages)
            counts = counts.sorted_counts()
        if isinstance(counts, SortedCounts):
            keys, ns = counts.keys, counts.counts
        else:
            keys = sorted(counts)
            ns = list(map(counts.__getitem__, keys))
        counts = None  # (not kept beside the lists)
        stats = _column_stats(keys, ns) if keys else None
        chunk_keys = self._stage_chunk_keys(len(keys), stats[0] if stats else 0, dirty_pages)
        whole = len(keys) <= chunk_keys
        batch = [keys, ns]  # (emptied once staged: not needed while the chunks are applied)
        del keys, ns

        def add_words(txn):
            return self._add_sorted(txn, *batch, increasing=True, stats=stats)

        def stage_words(txn):
            keys, ns = batch
            for number, i in enumerate(range(0, len(keys), chunk_keys)):
                txn.put(_STAGED + number.to_bytes(4, "big"), pack([keys[i:i + chunk_keys], ns[i:i + chunk_keys]]),
                        db=self.db["meta"])

        return self._write_batch(whole, add_words, stage_words, sources, totals, before, False, batch.clear)

    def _add_run_batch(self, counts: SortedRun, sources: dict, totals: dict, before, dirty_pages: Optional[int]) -> int:
        """:meth:`add_batch` of a run by the native writer: the same transactions, staging and
        records as the Python path, the words merged in C (``StoreWriter.add_run``)."""
        self._ensure_top()
        chunk_keys = self._stage_chunk_keys(counts.entries, counts.key_bytes(), dirty_pages)
        whole = counts.entries <= chunk_keys
        batch = [counts.run]  # (emptied once staged, as add_batch's)
        del counts
        return self._write_batch(
            whole, lambda txn: self._added_natively(txn, txn.writer.add_run, batch[0]),
            lambda txn: txn.writer.stage_run(batch[0], chunk_keys, _STAGED),  # msgpack [keys, counts] chunks
            sources, totals, before, True, batch.clear)

    def _add_runs_batch(self, counts: SortedRuns, sources: dict, totals: dict, before) -> int:
        """:meth:`add_batch` of runs that fit one transaction: merged by the native writer as
        it adds them (``StoreWriter.add_runs``), the rest as :meth:`_add_run_batch`'s."""
        self._ensure_top()
        runs, threads = counts.runs, counts.threads
        del counts

        def add(txn):
            return self._added_natively(txn, lambda data, *top: txn.writer.add_runs(data, *top, threads=threads), runs)

        return self._write_batch(True, add, None, sources, totals, before, True, None)

    def _write_batch(self, whole: bool, add_words, stage_words, sources: dict, totals: dict, before,
                     native: bool, release) -> int:
        """One batch into the store, either path (``native``): in one transaction when it is
        ``whole`` (``add_words(txn)`` -> (new, new_bytes)), else staged -- its chunks written by
        ``stage_words(txn)`` with the pending records, then applied a chunk a transaction (see
        the module docstring), after ``release()`` let the batch's words go.  Returns how many
        pretokens were new."""
        if whole:
            def one(txn):
                if before is not None:
                    before(txn)
                for key, record in sources.items():
                    self.put_source(txn, key, record)
                new, new_bytes = add_words(txn)
                self.bump_totals(txn, dict(totals, unique=new, unique_bytes=new_bytes))
                return new

            return self.write(one, native=native)

        def stage(txn) -> bool:
            meta = self.db["meta"]
            if txn.get(_PENDING, db=meta) is not None:
                return False  # another count's staged batch: finish it first
            if before is not None:
                before(txn)
            stage_words(txn)
            txn.put(_PENDING, pack({"sources": list(sources.items()), "totals": totals}), db=meta)
            return True

        try:
            while not self.write(stage, native=native):
                self.apply_staged()
            release()
            return self.apply_staged()
        except KeyboardInterrupt:
            # Once staged, a batch is committed: a kill -9 now is finished by the next
            # opener.  So Ctrl-C finishes it here too (a second Ctrl-C waits), and what the
            # interrupted count then says the store keeps is what it keeps.
            with _sigint_deferred():
                self.apply_staged()
            raise

    def _added_natively(self, txn: _NativeTxn, add, data) -> Optional[Tuple[int, int]]:
        """``add(data)`` (the writer's add_run or add_chunk) and what it left to Python (long
        pretokens), the check record bumped: (new pretokens, their bytes); None where add_chunk
        declined the chunk (nothing written)."""
        exact, entries = self._top_record(txn)  # (made exact before the batch: _ensure_top)
        if not exact and not entries and not any(txn.writer.stat(t)[0] for t in (_WORDS, _LONGWORDS)):
            exact = True  # an empty store: its record starts with this batch, as on the Python path
        floor = (entries[-1][0] if len(entries) >= TOP_KEPT else 0) if exact else None
        try:
            # (the writer hands back only the TOP_KEPT best of the call's candidates: no other
            # can enter the kept top, and a new store's floor 0 makes every written key one)
            result = add(data) if floor is None else add(data, floor, TOP_KEPT)
        except OverflowError as exc:
            if not isinstance(exc.args[0], int):  # (runs merged as written: a sum past 2**64-1)
                raise StoreError("a count would pass 2**63-1 (a sum of one batch's counts passed 2**64-1); "
                                 "the store keeps 64-bit counts") from None
            _u64(exc.args[0])
            raise
        except ValueError as exc:
            if "not 8 bytes" in str(exc):
                raise StoreError(_damaged(self.path, exc)) from None
            raise
        if result is None:
            return None
        new, new_bytes, total, skipped, top = result
        if skipped:
            more, more_bytes = self._add_each(txn, skipped, floor, top)
            new, new_bytes = new + more, new_bytes + more_bytes
        if floor is None or None in top:
            self._lose_top(txn)
        else:
            self._keep_top(txn, top)
        self._bump_check(txn, total, new)
        return new, new_bytes

    def _ensure_top(self) -> None:
        """The kept top made exact before a native write, which keeps it but cannot read every
        word in its transaction: an empty store's record started, an old store's rebuilt."""
        with self.reader() as txn:
            exact, _ = self._top_record(txn)
            empty = not self.unique_words(txn)
        if not exact and not empty:
            self.write(self._top_floor)  # (rebuilds it)

    def _stage_chunk_keys(self, n_keys: int, key_bytes: int, dirty_pages: Optional[int] = None) -> int:
        """How many of ``n_keys`` sorted keys (of ``key_bytes`` in all) one transaction may
        add, when it may dirty ``dirty_pages`` pages (copies in this process's memory until the
        commit; None: STAGE_DIRTY_PAGES).  A key can dirty a page of the words' tree besides the new entries' own
        pages, so a store of many pages takes ``dirty_pages`` keys a transaction, less their
        new pages; a store of few has few to dirty besides the new keys' pages, and takes as
        many as fit -- often the whole batch, unstaged.  Never fewer than STAGE_CHUNK_KEYS.
        Fewer, larger transactions write less: each commit is a sync and rewrites the tree's
        path to every page it touched (100 MB of generated text counted into a store of 5.15M
        pretokens, 2026-12-04: 2,048 keys a transaction 3.45 s and 652 MB written, 32,768
        keys 2.72 s and 314 MB, the whole batch 2.25 s and 314 MB)."""
        if n_keys <= STAGE_CHUNK_KEYS:
            return n_keys
        if dirty_pages is None:
            dirty_pages = STAGE_DIRTY_PAGES
        with self.reader() as txn:
            stat = txn.stat(self.db["words"])
        pages = stat["leaf_pages"] + stat["branch_pages"] + stat["overflow_pages"]
        # The new entries' pages: the key, a value and a node header each, pages 2/3 full.
        per_key = (key_bytes / n_keys + _ENTRY_OVERHEAD) * 3 / 2 / _PAGE
        # k keys dirty at most min(pages, k) of the tree's pages and k * per_key new ones
        fit = max(min(pages, dirty_pages / (1 + per_key)), (dirty_pages - pages) / per_key)
        return min(n_keys, max(STAGE_CHUNK_KEYS, int(fit)))

    def has_staged_batch(self) -> bool:
        with self.reader() as txn:
            return txn.get(_PENDING, db=self.db["meta"]) is not None

    def apply_staged(self) -> int:
        """Applies a staged batch one chunk per transaction; returns how many pretokens the
        chunks applied here were new (another process may be applying the same batch)."""
        new_total = 0
        while True:
            step = self.write(self._apply_one_chunk, native=True)
            if step is None:
                return new_total
            new_total += step
            if not self.writes_natively:  # (the native writer's map is dropped with it)
                self.remap()

    def _apply_one_chunk(self, txn) -> Optional[int]:
        """Adds the first staged chunk and deletes it (returns how many keys were new), or,
        with none left, writes the batch's records and ends it (returns None, as when no
        batch is staged)."""
        meta = self.db["meta"]
        raw = txn.get(_PENDING, db=meta)
        if raw is None:
            return None
        staged = self._first_staged(txn)
        if staged is not None:
            chunk_key, chunk = staged
            added = self._added_natively(txn, txn.writer.add_chunk, chunk) if isinstance(txn, _NativeTxn) else None
            if added is None:
                keys, values = unpack(chunk)
                if isinstance(txn, _NativeTxn):  # a chunk the native writer declined: counts taken back
                    added = self._add_each(txn, zip(keys, values))
                    self._bump_check(txn, sum(values), added[0])
                    self._lose_top(txn)
                else:
                    added = self._add_sorted(txn, keys, values)
            new, new_bytes = added
            self.bump_totals(txn, {"unique": new, "unique_bytes": new_bytes})
            txn.delete(chunk_key, db=meta)
            return new
        pending = unpack(raw)
        for key, record in pending["sources"]:
            self.put_source(txn, key, record)
        self.bump_totals(txn, pending["totals"])
        txn.delete(_PENDING, db=meta)
        return None

    def _first_staged(self, txn) -> Optional[Tuple[bytes, bytes]]:
        """The first staged chunk's key and value, or None."""
        meta = self.db["meta"]
        if isinstance(txn, _NativeTxn):
            found = txn.first_from(_STAGED, db=meta)
        else:
            with txn.cursor(db=meta) as cur:
                found = (bytes(cur.key()), bytes(cur.value())) if cur.set_range(_STAGED) else None
        return found if found is not None and found[0].startswith(_STAGED) else None

    def bump_totals(self, txn, delta: dict) -> None:
        info = unpack(txn.get(b"info", db=self.db["meta"]))
        totals = info["totals"]
        for key, value in delta.items():
            totals[key] = totals.get(key, 0) + value
            if totals[key] > MAX_COUNT:
                raise StoreError(f"the store's total of {key} would pass 2**63-1; the store keeps 64-bit counts")
        txn.put(b"info", pack(info), db=self.db["meta"])

    def count_of(self, pretoken: bytes, txn=None) -> int:
        if txn is None:
            with self.reader() as t:
                return self.count_of(pretoken, t)
        if pretoken and len(pretoken) <= self.max_key:
            raw = txn.get(pretoken, db=self.db["words"])
            return int.from_bytes(raw, "little") if raw else 0
        raw = txn.get(_digest(pretoken), db=self.db["longwords"])
        return int.from_bytes(raw[:8], "little") if raw else 0

    def iter_words(self, txn, min_count: int = 1) -> Iterator[Tuple[bytes, int]]:
        """Every (pretoken, count) with count >= ``min_count``, short ones in byte order first,
        checked as :meth:`iter_word_blocks` says."""
        for keys, counts in self.iter_word_blocks(txn, min_count):
            yield from zip(keys, counts)

    def iter_word_blocks(self, txn, min_count: int = 1, block: int = WORD_BLOCK) -> Iterator[Tuple[List[bytes], List[int]]]:
        """Every pretoken with its count >= ``min_count``, as blocks of two lists (at most
        ``block`` pretokens and their counts), short pretokens in byte order first: what a
        trainer loads, read and checked in C loops (a Python step per word cost as much as
        the merges of a small run).

        Decoded with checks, since LMDB keeps no checksums: no count is above the sum of all
        counts the check record holds (a flipped high bit), a long pretoken's bytes match its
        digest, and once every entry has been read, their number and the sum of their counts
        must be the check record's -- else a StoreError says the store is damaged."""
        record = self._check_record(txn)
        bound = record[0] if record is not None else 1 << 64
        total = 0
        # Keys and values through two cursors in step (one snapshot: the same entries in the
        # same order), not (key, value) tuples: a tuple is an object the cyclic garbage
        # collector tracks, and its passes over half a million of them were 0.6 s of a 3.5 s
        # training on multi_25M's 516k words; bytes are not tracked.
        with txn.cursor(db=self.db["words"]) as key_cur, txn.cursor(db=self.db["words"]) as value_cur:
            key_it, value_it = key_cur.iternext(keys=True, values=False), value_cur.iternext(keys=False, values=True)
            while True:
                keys = list(islice(key_it, block))
                if not keys:
                    break
                values = list(islice(value_it, len(keys)))
                counts = list(map(int.from_bytes, values, repeat("little")))
                del values
                total += sum(counts)
                top = max(counts)
                if top > bound:
                    key = keys[counts.index(top)]
                    raise StoreError(_damaged(self.path, f"the count of {bytes(key)[:40]!r} is above the sum of all counts"))
                if min(counts) < min_count:
                    keep = list(map(ge, counts, repeat(min_count)))
                    keys, counts = list(compress(keys, keep)), list(compress(counts, keep))
                if keys:
                    yield keys, counts
        with txn.cursor(db=self.db["longwords"]) as cur:
            for digest, value in cur:
                word, n = bytes(value[8:]), int.from_bytes(value[:8], "little")
                total += n
                if n > bound or len(value) < 8 or _digest(word) != digest:
                    raise StoreError(_damaged(self.path, f"the record of the long pretoken {word[:40]!r} is garbled"))
                if n >= min_count:
                    yield [word], [n]
        if record is not None and (total, self.unique_words(txn)) != record:
            raise StoreError(_damaged(
                self.path, f"its counts add up to {total:,} in {self.unique_words(txn):,} pretokens, its check record "
                f"says {record[0]:,} in {record[1]:,}"))

    def unique_words(self, txn=None) -> int:
        if txn is None:
            with self.reader() as t:
                return self.unique_words(t)
        return txn.stat(self.db["words"])["entries"] + txn.stat(self.db["longwords"])["entries"]

    # -- sources -------------------------------------------------------------------
    # A file's record holds numbers (and ``done``); the digests of its content that
    # ``bpe_stream.count.seen_files`` keeps beside them live in ``meta`` under _SOURCE_DIGESTS + key,
    # written and removed together with the record.  ``digests=True`` reads them back in.
    def source(self, txn, key: bytes, digests: bool = False) -> Optional[dict]:
        raw = txn.get(key, db=self.db["sources"])
        if raw is None:
            return None
        record = unpack(raw)
        return self._with_digests(txn, key, record) if digests else record

    def _with_digests(self, txn, key: bytes, record):
        raw = txn.get(_SOURCE_DIGESTS + key, db=self.db["meta"])
        if raw is not None and isinstance(record, dict):
            extra = unpack(raw)
            if isinstance(extra, dict):
                record = dict(record, **{k: extra[k] for k in DIGEST_FIELDS if k in extra})
        return record

    def put_source(self, txn, key: bytes, record: dict) -> None:
        """Writes a record; its digest fields (if any) go beside it, others' are removed."""
        extra = {k: record[k] for k in DIGEST_FIELDS if k in record}
        txn.put(key, pack({k: v for k, v in record.items() if k not in DIGEST_FIELDS}), db=self.db["sources"])
        if extra:
            txn.put(_SOURCE_DIGESTS + key, pack(extra), db=self.db["meta"])
        else:
            txn.delete(_SOURCE_DIGESTS + key, db=self.db["meta"])

    def delete_source(self, txn, key: bytes) -> None:
        txn.delete(key, db=self.db["sources"])
        txn.delete(_SOURCE_DIGESTS + key, db=self.db["meta"])

    def iter_sources(self, txn, digests: bool = False) -> Iterator[Tuple[bytes, dict]]:
        with txn.cursor(db=self.db["sources"]) as cur:
            for key, value in cur:
                key = bytes(key)
                record = unpack(value)
                yield key, (self._with_digests(txn, key, record) if digests else record)

    # -- training checkpoints ------------------------------------------------------
    def get_train(self, key: bytes, txn=None):
        if txn is None:
            with self.reader() as t:
                return self.get_train(key, t)
        raw = txn.get(key, db=self.db["train"])
        return unpack(raw) if raw is not None else None

    def disk_bytes(self) -> int:
        total = 0
        for name in ("data.mdb", "lock.mdb"):
            p = os.path.join(self.path, name)
            if os.path.exists(p):
                total += os.stat(p).st_blocks * 512
        return total

    def stats(self, top: int = 10) -> dict:
        """What the store holds (``bpe-stream stats``): settings, totals, unique pretokens and
        their bytes, files, size on disk, the estimated memory of training in memory, and the
        ``top`` most frequent pretokens (count first, then bytes).  Read from the kept totals
        and top (:data:`_TOP`), not from every word -- except in a store from before they were
        kept, until its next count."""
        from ..train.estimate import estimate_train_memory

        with self.reader() as txn:
            info_ = self.info(txn)
            if info_ is None:
                raise StoreError(f"the store at {self.path} is empty; run 'bpe-stream count' first")
            totals = info_["totals"]
            unique = self.unique_words(txn)
            symbols = totals.get("unique_bytes")
            if symbols is None or (unique and not symbols):  # a store from before the total existed
                symbols = sum(sum(map(len, pretokens)) for pretokens, _ in self.iter_word_blocks(txn))
            best = self.top_pretokens(txn, top)
            sources = txn.stat(self.db["sources"])["entries"]
        return {
            "store": self.path,
            "settings": info_["settings"],
            "documents": totals.get("documents", 0),
            "bytes": totals.get("bytes", 0),
            "pretokens": totals.get("pretokens", 0),
            "special_tokens_seen": totals.get("specials", 0),
            "unique_pretokens": unique,
            "unique_pretokens_bytes": symbols,
            "files": sources,
            "disk_bytes": self.disk_bytes(),
            "estimated_train_memory_bytes": estimate_train_memory(unique, symbols),
            "top": [{"pretoken": w.decode("utf-8", "backslashreplace"), "count": n} for n, w in best],
        }


_ZERO_TOTALS = {"bytes": 0, "documents": 0, "pretokens": 0, "specials": 0, "unique": 0, "unique_bytes": 0}
