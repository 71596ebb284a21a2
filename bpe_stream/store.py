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
about one B-tree page per key it touches -- a 1.7M-key batch into an 18M-key store took
500 MB of dirty pages and 1 GB of mapped file -- so :meth:`Store.add_batch` stages it
first: its sorted counts go into ``meta`` as compact chunks together with a ``pending``
record holding the batch's source records and totals (one transaction, written
sequentially), then each chunk is added in its own transaction that also deletes it, and
the last step writes the records and drops ``pending``.  Whoever opens the store next
finishes a staged batch that a kill cut off, before anything reads the words, so readers
see every batch whole or not at all, and nothing is counted twice.

Every value is a fixed-width integer or msgpack, never pickle: opening a store cannot
run code.  When the map is full it grows and the transaction is retried whole.
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from typing import Iterator, Optional, Tuple

import lmdb
import msgpack

FORMAT_VERSION = 1
MAGIC = "bpe-stream store"
_DBS = (b"meta", b"words", b"longwords", b"sources", b"train")
_INITIAL_MAP_SIZE = 1 << 30
# A batch with more keys than this is staged and applied one chunk of this many keys per
# transaction, the store re-mapped after each, so the B-tree pages read on the way stop
# counting as this process's memory.  Small, because Linux maps up to 16
# cached pages around each page fault ("fault-around"): 32,768 sorted keys read from a
# 55M-key store left 840 MB of it mapped; 4,096 keys per chunk peaked at 110 MB, and the
# commits cost no more time (20.7 s vs 22.3 s for 1.45M keys).
STAGE_CHUNK_KEYS = 2048
_PENDING = b"pending"  # in meta: the staged batch's source records and totals
_STAGED = b"staged/"  # in meta: + 4-byte big-endian chunk number -> msgpack [keys, counts]


class StoreError(Exception):
    """A store that is missing, not ours, of another format or another setting."""


class WriteFailed(StoreError):
    """A write transaction failed (a full disk, a map that cannot grow); ``cause`` is LMDB's
    own words."""

    def __init__(self, message: str, cause: str):
        super().__init__(message)
        self.cause = cause


class _NoTables(StoreError):
    """An environment whose creation was cut off before its tables existed."""


_LMDB_FILES = {"data.mdb", "lock.mdb"}


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
        return {name.decode(): env.open_db(name, create=not readonly) for name in _DBS}

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
    keys = sorted(set(a) | set(b), key=lambda k: (k == "pattern", k))
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


def unpack(data: bytes):
    try:
        return msgpack.unpackb(data, raw=False, strict_map_key=False)
    except Exception as exc:  # msgpack raises several unrelated types on garbage
        raise StoreError(f"a store record is damaged ({exc})") from None


MAX_COUNT = (1 << 63) - 1  # counts and totals: what the merge loop's signed 64-bit counts hold


def _u64(value: int) -> bytes:
    if value > MAX_COUNT:  # the whole transaction is aborted: the store keeps its last commit
        raise StoreError(f"a count would pass 2**63-1 ({value:,}); the store keeps 64-bit counts")
    return value.to_bytes(8, "little")


try:  # hashlib's own blake2b, without the OpenSSL library hashlib loads (~4 MB of RSS in every count)
    from _blake2 import blake2b
except ImportError:  # pragma: no cover - another Python
    from hashlib import blake2b


def _digest(pretoken: bytes) -> bytes:
    return blake2b(pretoken, digest_size=20).digest()


class Store:
    """An open store.  Use :meth:`open`; close it (or use ``with``) when done."""

    def __init__(self, path: str, env: lmdb.Environment, readonly: bool):
        self.path = path
        self.env = env
        self.readonly = readonly
        self.db = _open_dbs(env, readonly, path)
        self.max_key = env.max_key_size()

    # -- opening -------------------------------------------------------------------
    @classmethod
    def open(cls, path: str, *, create: bool = False, readonly: bool = False) -> "Store":
        path = os.fspath(path)
        if os.path.exists(path) and not os.path.isdir(path):
            raise StoreError(f"{path} is a file, not a store directory; give --store a directory path")
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
        else:
            _check_not_truncated(data, size)
        try:
            env = lmdb.open(
                path, subdir=True, map_size=max(_INITIAL_MAP_SIZE, size), max_dbs=len(_DBS),
                readonly=readonly and exists, create=create, metasync=True, sync=True, readahead=False, lock=True,
            )
        except lmdb.Error as exc:
            raise StoreError(f"cannot open the store at {path}: {exc}") from None
        try:
            meta, blank = _retrying(env, lambda: cls._inspect(env))
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
            store = cls(path, env, readonly=readonly and exists)
            if store.has_staged_batch():
                if not store.readonly:
                    try:
                        store.apply_staged()
                    except BaseException:
                        store.close()
                        raise
                else:
                    store.close()
                    cls._finish_staged(path)
                    return cls.open(path, readonly=True)
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
        self.env.close()

    def remap(self) -> None:
        """Closes and reopens the environment (no transaction may be open): pages of the file
        read or written so far stay mapped -- and count as this process's memory -- until
        the map is dropped; the OS keeps them as cache."""
        map_size = self.env.info()["map_size"]
        self.env.close()
        try:
            self.env = lmdb.open(
                self.path, subdir=True, map_size=map_size, max_dbs=len(_DBS), readonly=self.readonly,
                create=False, metasync=True, sync=True, readahead=False, lock=True,
            )
        except lmdb.Error as exc:
            raise StoreError(f"cannot reopen the store at {self.path}: {exc}") from None
        self.db = _open_dbs(self.env, self.readonly, self.path)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # -- transactions --------------------------------------------------------------
    def write(self, fn):
        """Run ``fn(txn)`` in one write transaction; grow the map and retry when full.  Any
        other LMDB failure (a full disk) aborts the transaction whole: the store keeps its
        last commit, and the same command resumes once the cause is gone."""
        while True:
            try:
                with self.env.begin(write=True) as txn:
                    return fn(txn)
            except lmdb.MapFullError:
                try:
                    self.env.set_mapsize(self.env.info()["map_size"] * 2)
                except lmdb.Error as exc:
                    raise WriteFailed(_write_failed(self.path, exc), str(exc)) from None
            except lmdb.MapResizedError:
                self.env.set_mapsize(0)
            except lmdb.Error as exc:
                raise WriteFailed(_write_failed(self.path, exc), str(exc)) from None

    @contextmanager
    def reader(self):
        while True:
            try:
                txn = self.env.begin()
                break
            except lmdb.MapResizedError:
                self.env.set_mapsize(0)
        try:
            yield txn
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
        ``txn``; returns how many pretokens were new and their bytes."""
        words, longwords, max_key = self.db["words"], self.db["longwords"], self.max_key
        new = new_bytes = 0
        pairs = ((k, counts[k]) for k in sorted(counts)) if isinstance(counts, dict) else counts
        for key, n in pairs:
            if len(key) <= max_key and key:
                old = txn.get(key, db=words)
                if old is None:
                    new += 1
                    new_bytes += len(key)
                    txn.put(key, _u64(n), db=words)
                else:
                    txn.put(key, _u64(int.from_bytes(old, "little") + n), db=words)
            else:
                digest = _digest(key)
                old = txn.get(digest, db=longwords)
                if old is None:
                    new += 1
                    new_bytes += len(key)
                    txn.put(digest, _u64(n) + key, db=longwords)
                else:
                    txn.put(digest, _u64(int.from_bytes(old[:8], "little") + n) + key, db=longwords)
        return new, new_bytes

    def add_batch(self, counts: dict, sources: dict, totals: dict, before=None) -> int:
        """Adds ``counts`` (pretoken bytes -> count) with the source records and totals they
        stand for, atomically as readers see it (see the module docstring); ``before(txn)``
        runs in the first transaction.  Returns how many pretokens were new."""
        keys = sorted(counts)
        if len(keys) <= STAGE_CHUNK_KEYS:
            def whole(txn):
                if before is not None:
                    before(txn)
                for key, record in sources.items():
                    self.put_source(txn, key, record)
                new, new_bytes = self.add_counts(txn, zip(keys, map(counts.__getitem__, keys)))
                self.bump_totals(txn, dict(totals, unique=new, unique_bytes=new_bytes))
                return new

            return self.write(whole)

        def stage(txn) -> bool:
            meta = self.db["meta"]
            if txn.get(_PENDING, db=meta) is not None:
                return False  # another count's staged batch: finish it first
            if before is not None:
                before(txn)
            for number, i in enumerate(range(0, len(keys), STAGE_CHUNK_KEYS)):
                part = keys[i:i + STAGE_CHUNK_KEYS]
                txn.put(_STAGED + number.to_bytes(4, "big"), pack([part, [counts[k] for k in part]]), db=meta)
            txn.put(_PENDING, pack({"sources": list(sources.items()), "totals": totals}), db=meta)
            return True

        while not self.write(stage):
            self.apply_staged()
        del keys
        return self.apply_staged()

    def has_staged_batch(self) -> bool:
        with self.reader() as txn:
            return txn.get(_PENDING, db=self.db["meta"]) is not None

    def apply_staged(self) -> int:
        """Applies a staged batch one chunk per transaction; returns how many pretokens the
        chunks applied here were new (another process may be applying the same batch)."""
        new_total = 0
        while True:
            step = self.write(self._apply_one_chunk)
            if step is None:
                return new_total
            new_total += step
            self.remap()

    def _apply_one_chunk(self, txn) -> Optional[int]:
        """Adds the first staged chunk and deletes it (returns how many keys were new), or,
        with none left, writes the batch's records and ends it (returns None, as when no
        batch is staged)."""
        meta = self.db["meta"]
        raw = txn.get(_PENDING, db=meta)
        if raw is None:
            return None
        with txn.cursor(db=meta) as cur:
            if cur.set_range(_STAGED) and bytes(cur.key()).startswith(_STAGED):
                chunk_key = bytes(cur.key())
                keys, values = unpack(cur.value())
                new, new_bytes = self.add_counts(txn, zip(keys, values))
                self.bump_totals(txn, {"unique": new, "unique_bytes": new_bytes})
                txn.delete(chunk_key, db=meta)
                return new
        pending = unpack(raw)
        for key, record in pending["sources"]:
            self.put_source(txn, key, record)
        self.bump_totals(txn, pending["totals"])
        txn.delete(_PENDING, db=meta)
        return None

    def bump_totals(self, txn, delta: dict) -> None:
        info = unpack(txn.get(b"info", db=self.db["meta"]))
        totals = info["totals"]
        for key, value in delta.items():
            totals[key] = totals.get(key, 0) + value
            if totals[key] > MAX_COUNT:
                raise StoreError(f"the store's total of {key} would pass 2**63-1; the store keeps 64-bit counts")
        txn.put(b"info", pack(info), db=self.db["meta"])

    def count_of(self, pretoken: bytes) -> int:
        with self.reader() as txn:
            if pretoken and len(pretoken) <= self.max_key:
                raw = txn.get(pretoken, db=self.db["words"])
                return int.from_bytes(raw, "little") if raw else 0
            raw = txn.get(_digest(pretoken), db=self.db["longwords"])
            return int.from_bytes(raw[:8], "little") if raw else 0

    def iter_words(self, txn, min_count: int = 1) -> Iterator[Tuple[bytes, int]]:
        """Every (pretoken, count) with count >= ``min_count``, short ones in byte order first."""
        with txn.cursor(db=self.db["words"]) as cur:
            for key, value in cur:
                n = int.from_bytes(value, "little")
                if n >= min_count:
                    yield bytes(key), n
        with txn.cursor(db=self.db["longwords"]) as cur:
            for _digest_key, value in cur:
                n = int.from_bytes(value[:8], "little")
                if n >= min_count:
                    yield bytes(value[8:]), n

    def unique_words(self, txn=None) -> int:
        if txn is None:
            with self.reader() as t:
                return self.unique_words(t)
        return txn.stat(self.db["words"])["entries"] + txn.stat(self.db["longwords"])["entries"]

    # -- sources -------------------------------------------------------------------
    def source(self, txn, key: bytes) -> Optional[dict]:
        raw = txn.get(key, db=self.db["sources"])
        return unpack(raw) if raw is not None else None

    def put_source(self, txn, key: bytes, record: dict) -> None:
        txn.put(key, pack(record), db=self.db["sources"])

    def iter_sources(self, txn) -> Iterator[Tuple[bytes, dict]]:
        with txn.cursor(db=self.db["sources"]) as cur:
            for key, value in cur:
                yield bytes(key), unpack(value)

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


_ZERO_TOTALS = {"bytes": 0, "documents": 0, "pretokens": 0, "specials": 0, "unique": 0, "unique_bytes": 0}
