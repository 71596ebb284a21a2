"""What the store knows of each input file, and what a count does with a file it has seen.

A file's record in the store's ``sources`` table, keyed by its real path, holds its identity
(size, modification time, device and inode), how far its committed counts reach (``offset``,
``done``) and a digest of exactly those committed bytes (:class:`PrefixDigest`), written in
the same transaction as the counts.  Before anything is counted, :func:`plan_files` decides
for each file named:

* the same file named twice (``f ./f $PWD/f link-to-f``, a hard link): counted once, judged
  by device and inode;
* a file without a record: counted from byte 0.  A hard link or a moved file has no record
  under its own path but is found by device and inode: it is the file that record describes
  when the record's path still names it, or when the committed bytes are still there;
* a record whose file is unchanged -- same size and time, or, when only the time changed,
  the same committed bytes -- is skipped, or resumed at its committed offset (a killed run);
* a file that grew from its committed bytes (their digest matches): counted on from the last
  safe cut at or before the old end, after the counts of the old bytes beyond that cut are
  taken back.  The old end was the end of a document and an append continues it (``hello`` +
  ``world`` counts as ``helloworld``), so the store ends equal to a clean count of the grown file;
* any other change is refused (:class:`Refused`, naming ``--recount``).  A record made by an
  older bpe-stream has no digest: it is trusted only while size and time are unchanged.

Digests are XXH3-128 (``"hash": "xxh3"`` in the record; ``csrc/filedigest.h`` says why) or,
in records from before it and where the C extension is not built, BLAKE2b-160 (no ``hash``
field).  A record is always checked with its own kind, and a file counted on keeps its
record's kind, so stores of earlier releases go on as they were; a build without the
extension cannot compute an ``xxh3`` digest, and judges such a record by size and time only,
as an older record.

A count then claims each file before it reads the file's record again and counts it, and holds
the claim until the batch holding the file's last counts is committed (:class:`Claims`): a
file another running count has claimed is skipped, so two counts on one store never count a
file twice, and a record that changed since its plan was made (another count finished the
file meanwhile) is planned again.
"""

from __future__ import annotations

import fcntl
import os
import struct
import threading
import zlib
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Dict, Iterator, List, Optional, Tuple

from ..inputs.reader import InputError, Source
from ..native import fastbpe as _native
from ..store.lmdb_store import BLAKE2B_KIND, Store, blake2b
from ..inputs import cuts

DIGEST_SIZE = 20  # of a BLAKE2b digest (an XXH3 one is 16 bytes)
BLAKE2B, XXH3 = BLAKE2B_KIND, "xxh3"  # a record's digest kind: its "hash" field (absent: BLAKE2B)
NEW_KIND = XXH3 if _native is not None else BLAKE2B  # the kind of the records made here
DIGEST_BLOCK = 1 << 20  # a resumed digest hashes on from the last multiple of this
HEAD_BYTES = 1 << 16  # the digest of a file's first bytes, kept to tell files of one path apart (merge-stores)
_READ = 1 << 20
BESIDE_BYTES = 1 << 20  # a range at least this long is hashed on a thread while it is counted


class Refused(InputError):
    """A file that changed since it was counted, other than by growing: counting it on would
    be wrong, counting it again needs ``--recount``."""


# -- digests ------------------------------------------------------------------------------
def hasher(kind: str, data: bytes = b""):
    """A new hasher of ``kind`` (XXH3 or BLAKE2B) fed ``data``: ``update``, ``digest``, ``copy``."""
    if kind == XXH3:
        return _native.FileDigest(data)
    return blake2b(data, digest_size=DIGEST_SIZE)


def record_kind(record: dict) -> Optional[str]:
    """The kind of ``record``'s digests; None when this installation cannot compute it (an
    ``xxh3`` record without the C extension, or a kind of a later release)."""
    kind = record.get("hash", BLAKE2B)
    return kind if kind == BLAKE2B or (kind == XXH3 and _native is not None) else None


class PrefixDigest:
    """The digest of ``kind`` of a file's bytes from its start, in blocks: after k whole blocks
    the state is ``chain_k = H(chain_(k-1) + block_k)`` (``chain_0`` empty), and the digest of
    a prefix is ``H(chain_k + the bytes after block k)``.  A record keeps ``[k * DIGEST_BLOCK,
    chain_k]`` beside the digest, so a resumed count hashes on from there instead of reading
    its committed bytes again; ``head`` is the digest once ``HEAD_BYTES`` were fed.

    >>> d = PrefixDigest(kind=BLAKE2B); d.update(b"hello"); d.digest() == blake2b(b"hello", digest_size=20).digest()
    True
    """

    def __init__(self, at: int = 0, chain: bytes = b"", head: Optional[list] = None, kind: Optional[str] = None):
        self.at, self.chain, self.head, self.kind = at, chain, head, kind or NEW_KIND
        self._tail = hasher(self.kind, chain)
        self._fed = 0  # bytes after ``at``

    @property
    def length(self) -> int:
        return self.at + self._fed

    def update(self, data) -> None:
        view = memoryview(data)
        while view:
            room = DIGEST_BLOCK - self._fed
            if self.head is None and self.length < HEAD_BYTES:
                room = min(room, HEAD_BYTES - self.length)
            part, view = view[:room], view[room:]
            self._tail.update(part)
            self._fed += len(part)
            if self.head is None and self.length == HEAD_BYTES:
                self.head = [HEAD_BYTES, self.digest()]
            if self._fed == DIGEST_BLOCK:
                self.chain, self.at, self._fed = self._tail.digest(), self.at + DIGEST_BLOCK, 0
                self._tail = hasher(self.kind, self.chain)

    def digest(self) -> bytes:
        return self._tail.digest()

    def copy(self) -> "PrefixDigest":
        twin = PrefixDigest.__new__(PrefixDigest)
        twin.at, twin.chain, twin.head, twin._fed, twin.kind = self.at, self.chain, self.head, self._fed, self.kind
        twin._tail = self._tail.copy()
        return twin

    def fields(self) -> dict:
        """The record's fields for the bytes fed so far."""
        digest, head = self.digest(), self.head
        if head is None and self.length <= HEAD_BYTES:
            head = [self.length, digest]  # (None: resumed from a record that kept none)
        fields = {"digest": digest, "chain": [self.at, self.chain], "head": head}
        if self.kind != BLAKE2B:  # (a BLAKE2b record is as earlier releases wrote it)
            fields["hash"] = self.kind
        return fields

    @classmethod
    def resumed(cls, record: dict) -> Optional["PrefixDigest"]:
        """The digest state a record keeps (at a block boundary), or None (an older record, or a
        kind this installation cannot compute)."""
        chain, kind = record.get("chain"), record_kind(record)
        if kind is None or not (isinstance(chain, list) and len(chain) == 2 and isinstance(chain[0], int)
                                and chain[0] % DIGEST_BLOCK == 0 and isinstance(chain[1], bytes)):
            return None
        return cls(chain[0], chain[1], record.get("head") if chain[0] >= HEAD_BYTES else None, kind)


def feed(path: str, start: int, end: int, digest: PrefixDigest, stops: Tuple[int, ...] = (),
         check: Optional["RangeCheck"] = None) -> Dict[int, "PrefixDigest"]:
    """Feeds bytes ``[start, end)`` of ``path`` into ``digest`` (which is at ``start``) and into
    ``check`` (a :class:`RangeCheck` or :class:`SameBytes`, when given); returns copies of
    ``digest`` at each offset of ``stops`` on the way.  A file shorter than ``end`` is an
    InputError."""
    taken: Dict[int, PrefixDigest] = {}
    marks = sorted(s for s in set(stops) if start <= s <= end)
    pos = start
    with open(path, "rb") as f:
        f.seek(start)
        while True:
            while marks and marks[0] == pos:
                taken[marks.pop(0)] = digest.copy()
            if pos >= end:
                break
            block = f.read(min(_READ, end - pos, (marks[0] if marks else end) - pos))
            if not block:
                raise InputError(f"{path} ended at byte {pos:,}, before byte {end:,}: it changed while being read")
            digest.update(block)
            if check is not None:
                check.update(block)
            pos += len(block)
    return taken


def range_hasher():
    """The hasher of a compressed or structured input's identity (``documents``): NEW_KIND."""
    return hasher(NEW_KIND)


class RangeCheck:
    """What a worker process feeds the bytes of its range into (``count_range``), and the
    parent the same range as it hashes the file (:func:`feed`): equal checks say the worker
    counted the bytes the file's record stands for.  Only a check against a change while
    counting, never kept: CRC-32 and Adler-32 (zlib's, ~2 GB/s), where a second BLAKE2b of
    every byte cost the parent a third of its time (0.16 s of CPU per 100 MB)."""

    __slots__ = ("crc", "adler")

    def __init__(self):
        self.crc, self.adler = 0, 1

    def update(self, data) -> None:
        self.crc = zlib.crc32(data, self.crc)
        self.adler = zlib.adler32(data, self.adler)

    def digest(self) -> bytes:
        return self.crc.to_bytes(4, "little") + self.adler.to_bytes(4, "little")

    def matches(self, other: Optional[bytes]) -> bool:
        """Whether the worker's check ``other`` is this one."""
        return self.digest() == other


class SameBytes:
    """The check of a range counted in this process (on a thread, ``count_range_shared``; one
    worker's, through :class:`HashedBeside`): the bytes it counted, compared with the bytes the
    parent reads block by block (a memcmp, where two checksums on both sides cost one worker
    ~10% of its count).

    >>> check = SameBytes(b"hello world")
    >>> check.update(b"hello "); check.update(b"world"); check.matches(None)
    True
    >>> check = SameBytes(b"hello world")
    >>> check.update(b"hello "); check.update(b"World"); check.matches(None)
    False
    """

    __slots__ = ("counted", "pos", "same")

    def __init__(self, counted: bytes):
        self.counted, self.pos, self.same = counted, 0, True

    def update(self, data) -> None:
        self.same = self.same and self.counted.startswith(data, self.pos)
        self.pos += len(data)

    def matches(self, _other=None) -> bool:
        return self.same and self.pos == len(self.counted)


class HashedBeside:
    """The parent's check of a range that one worker counts in this process
    (``counting.count_range_into``): the range read from the file again, fed into the file's
    record ``digest`` and compared with the bytes counted (:class:`SameBytes`), on a thread
    while those bytes are counted.  The re-read and BLAKE2b are a fifth of such a count's time;
    beside the count (hashlib, file reads and the C count all run without the GIL) they cost
    no wall time.  A range under ``BESIDE_BYTES`` is checked after its count, in this thread:
    a thread per small file costs more than it saves.

    >>> import tempfile
    >>> with tempfile.NamedTemporaryFile() as f:
    ...     _ = f.write(b"hello world"); f.flush()
    ...     check = HashedBeside(f.name, 0, 11, PrefixDigest())
    ...     with check.counting(b"hello world"):
    ...         pass  # (counted here)
    ...     check.matches(None), check.digest.length
    (True, 11)
    """

    def __init__(self, path: str, start: int, end: int, digest: PrefixDigest):
        self.path, self.start, self.end, self.digest = path, start, end, digest
        self.same = False  # once counted: whether the bytes re-read are the bytes counted

    @contextmanager
    def counting(self, data: bytes) -> Iterator[None]:
        """Around the count of ``data``, the range's bytes as read; an error of the re-read
        is raised after the count, unless the count raised."""
        check = SameBytes(data)

        def reread() -> None:
            feed(self.path, self.start, self.end, self.digest, check=check)

        if len(data) < BESIDE_BYTES:
            yield
            reread()
        else:
            failed: List[BaseException] = []

            def run() -> None:
                try:
                    reread()
                except BaseException as exc:  # handed to the counting thread
                    failed.append(exc)

            thread = threading.Thread(target=run, name="bpe-stream-check", daemon=True)
            thread.start()
            try:
                yield
            finally:
                thread.join()
            if failed:
                raise failed[0]
        self.same = check.matches()  # (the bytes are not kept)

    def matches(self, _other=None) -> bool:
        return self.same


def _prefix_digest(path: str, offset: int, cut: int, kind: str) -> Tuple[bytes, PrefixDigest]:
    """(digest of bytes [0, offset), the digest state at ``cut`` <= offset) of the file as it is."""
    digest = PrefixDigest(kind=kind)
    at_cut = feed(path, 0, offset, digest, (cut,))[cut]
    return digest.digest(), at_cut


# -- safe cuts ----------------------------------------------------------------------------
def last_cut(path: str, end: int, settings: dict) -> int:
    """The last safe cut at or before ``end`` in the file as it is now: ``cuts.last_cut``."""
    return cuts.last_cut(path, end, settings)


# -- claims -------------------------------------------------------------------------------
CLAIMS_FILE = "claims.lock"  # beside LMDB's files in the store directory


class Claims:
    """Which files this process is counting into one store: an open-file-description lock
    (``F_OFD_SETLK``) on one byte of the store's ``claims.lock`` per file, at an offset derived
    from the file's device and inode, so another process's claim of the same file -- under
    any name -- fails.  The kernel drops the locks when the process ends, however it ends
    (kill -9 included), so a claim cannot outlive its count, and nothing is written into the
    store: a count that fails leaves the store as it was.  (Where the lock file cannot be
    created, as on a read-only store, which count cannot write anyway, every claim succeeds.)"""

    def __init__(self, store_path: str):
        try:
            self.fd: Optional[int] = os.open(os.path.join(store_path, CLAIMS_FILE), os.O_RDWR | os.O_CREAT, 0o644)
        except OSError:
            self.fd = None
        self.held: Dict[int, Source] = {}

    @staticmethod
    def _offset(source: Source) -> int:
        return int.from_bytes(blake2b(b"%d:%d" % (source.dev, source.ino), digest_size=8).digest(), "little") >> 2

    def _lock(self, kind: int, offset: int) -> bool:
        if self.fd is None:
            return True
        try:
            if hasattr(fcntl, "F_OFD_SETLK"):
                # struct flock: l_type, l_whence, l_start, l_len, l_pid (0 for OFD locks)
                fcntl.fcntl(self.fd, fcntl.F_OFD_SETLK, struct.pack("hhqqi4x", kind, os.SEEK_SET, offset, 1, 0))
            else:  # pragma: no cover - not Linux: process locks (two counts in one process see none)
                fcntl.lockf(self.fd, (fcntl.LOCK_UN if kind == fcntl.F_UNLCK else fcntl.LOCK_EX | fcntl.LOCK_NB), 1, offset)
        except OSError:
            return False
        return True

    def take(self, source: Source) -> bool:
        """Claims ``source``; False when another count holds it."""
        offset = self._offset(source)
        if offset in self.held or self._lock(fcntl.F_WRLCK, offset):
            self.held[offset] = source
            return True
        return False

    def drop(self, source: Source) -> None:
        offset = self._offset(source)
        if self.held.pop(offset, None) is not None:
            self._lock(fcntl.F_UNLCK, offset)

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)  # drops every claim
            self.fd = None
        self.held.clear()


# -- plans --------------------------------------------------------------------------------
@dataclass(eq=False)
class FilePlan:
    """What a count does with one file: skip it, or count it from ``start`` (after taking back
    the counts of ``take_back = (cut, old offset, old done)``)."""

    source: Source
    record: Optional[dict] = None  # the record the plan was made from (None: a new file)
    record_key: Optional[bytes] = None  # where it is: the file's key, or another path of it
    start: int = 0
    digest: Optional[PrefixDigest] = None  # of bytes [0, start) (made when counting starts: plans are many)
    take_back: Optional[Tuple[int, int, bool]] = None
    skip: Optional[str] = None  # why it is not counted (said on stderr)
    refresh: bool = False  # skipped, but its record's identity is brought up to date
    message: Optional[str] = None  # said when it is counted
    # A file read as documents: the prefix digest of what its counts cover so far
    # (``documents.prefix_hasher``; for Parquet the chain the workers' row group digests extend)
    prefix: Optional[bytes] = None

    def begin(self) -> None:
        """Before the file's first range: the digest of bytes [0, start) is at hand."""
        if self.digest is None:
            self.digest = PrefixDigest()

    def record_at(self, offset: int, done: bool) -> dict:
        """The file's record once its counts reach ``offset`` (the digest is there)."""
        record = dict(self.source.identity(), offset=offset, done=done, **self.digest.fields())
        if done:
            self.digest = self.record = None
        return record

    def record_document(self, end: int, done: bool, digest: Optional[bytes], prefix: Optional[bytes] = None,
                        group_digest: Optional[bytes] = None) -> dict:
        """The record of a file read as documents (``Source.form``) once its counts reach
        ``end`` (uncompressed offset, or row groups); ``digest``: of the whole file's bytes,
        known once it was read to its end.  Until then it keeps ``prefix``, the digest of what
        its counts cover (``documents.prefix_digest``): ``prefix`` as the piece's end has it,
        or for Parquet the chain extended by the row group's ``group_digest``."""
        from ..inputs.documents import chain_group

        if group_digest is not None:
            self.prefix = chain_group(self.prefix or b"", group_digest)
        elif prefix is not None:
            self.prefix = prefix
        record = dict(self.source.identity(), offset=end, done=done, form=self.source.form.label)
        if done and digest is not None:
            record["digest"] = digest  # (range_hasher's)
            if NEW_KIND != BLAKE2B:
                record["hash"] = NEW_KIND
        elif not done and self.prefix is not None:
            record["prefix"] = self.prefix
        return record

    def settle(self, store: Store) -> None:
        """Writes what the plan changes before counting: a record moved to the file's own path
        (a hard link, a moved file), or brought up to date (only its time changed)."""
        if self.record is None or (self.record_key == self.source.key and not self.refresh):
            return
        record = dict(self.record, **self.source.identity()) if self.refresh else self.record
        old_key = self.record_key

        def txn_fn(txn):
            if old_key != self.source.key:
                store.delete_source(txn, old_key)
            store.put_source(txn, self.source.key, record)

        store.write(txn_fn)
        self.record, self.record_key = record, self.source.key

    def unchanged(self, store: Store) -> bool:
        """Whether the record is still the one this plan was made from (read under the claim)."""
        with store.reader() as txn:
            return store.source(txn, self.record_key or self.source.key, digests=True) == self.record


def _changed(source: Source) -> Refused:
    return Refused(
        f"{source.name} changed since it was counted into this store (not only by growing); pass --recount "
        "to count it again on top of its old counts, or count it into a new store"
    )


def _decide(source: Source, key: Optional[bytes], record: Optional[dict], settings: dict, recount: bool) -> FilePlan:
    plan = FilePlan(source, record, key)
    if record is None or recount:
        return plan
    name, size = source.name, source.size
    if record.get("form") is not None:
        raise Refused(
            f"{name} was counted into this store read as {record['form']}, and now it would be read as plain "
            "text; pass --recount to count it again on top of its old counts, or count it into a new store"
        )
    offset, done = record.get("offset", 0), bool(record.get("done"))
    same = (key == source.key and record.get("size") == size and record.get("mtime_ns") == source.mtime_ns
            and record.get("ino", source.ino) == source.ino and record.get("dev", source.dev) == source.dev)
    if same:
        if done:
            plan.skip = f"skipped {name}: already counted (use --recount to count it again)"
            plan.record = None  # (nothing to write: thousands of skipped files keep no record in memory)
            return plan
        plan.start = offset
        plan.digest = _resume_digest(source, record, offset)
        if offset:
            plan.message = f"resuming {name} at byte {offset:,}"
        return plan
    if not isinstance(record.get("digest"), bytes):
        raise Refused(
            f"{name} changed since it was counted into this store, which was made by an older bpe-stream "
            "without the digest that tells whether it only grew; pass --recount to count it again on top "
            "of its old counts, or count it into a new store"
        )
    kind = record_kind(record)
    if kind is None:
        raise Refused(
            f"{name} changed since it was counted into this store, and its record's {record.get('hash')!r} digest, "
            "which tells whether it only grew, needs bpe-stream's C extension; pass --recount to count it again "
            "on top of its old counts, or count it into a new store"
        )
    if size < offset:
        raise _changed(source)
    cut = offset if done and size == offset else last_cut(source.name, offset, settings)
    digest, at_cut = _prefix_digest(source.name, offset, cut, kind)
    if digest != record["digest"]:
        raise _changed(source)
    if done and size == offset:
        plan.skip = f"skipped {name}: already counted (its content is unchanged)"
        plan.refresh = True
        return plan
    plan.start, plan.digest = cut, at_cut
    if done or cut < offset:
        plan.take_back = (cut, offset, done)
    plan.message = (f"{name} grew from {offset:,} to {size:,} bytes: counting on from byte {cut:,}" if done
                    else f"resuming {name} at byte {cut:,}")
    return plan


def whole_digest(path: str, kind: str) -> bytes:
    """The digest of ``kind`` of all of a file's bytes: the identity of a file read as
    documents (a compressed file cannot be resumed by its prefix's digest: a prefix of the
    compressed bytes is not a prefix of the text)."""
    whole = hasher(kind)
    with open(path, "rb") as f:
        while True:
            block = f.read(_READ)
            if not block:
                return whole.digest()
            whole.update(block)


def _whole_matches(path: str, record: dict) -> bool:
    """Whether a record of a file read as documents has the digest of all of ``path``'s bytes."""
    kind = record_kind(record)
    return isinstance(record.get("digest"), bytes) and kind is not None and whole_digest(path, kind) == record["digest"]


def _decide_document(source: Source, key: Optional[bytes], record: Optional[dict], recount: bool) -> FilePlan:
    """:func:`_decide` for a file read as documents (compressed, JSON Lines, Parquet): such a
    file is one whole, judged by the digest of all its bytes.  Unchanged: skipped when counted
    to its end, else resumed at the committed offset of its *uncompressed* text (or row group);
    the same bytes after a ``touch`` or a move: skipped; anything else, growth included:
    refused, naming ``--recount``.  A file counted before in another form is refused too."""
    plan = FilePlan(source, record, key)
    if record is None or recount:
        return plan
    name, label = source.name, source.form.label
    if record.get("form") != label:
        was = record.get("form") or "plain text"
        raise Refused(
            f"{name} was counted into this store read as {was}, and now it would be read as {label}; "
            "pass --recount to count it again on top of its old counts, or count it into a new store"
        )
    offset, done = record.get("offset", 0), bool(record.get("done"))
    same = (key == source.key and record.get("size") == source.size and record.get("mtime_ns") == source.mtime_ns
            and record.get("ino", source.ino) == source.ino and record.get("dev", source.dev) == source.dev)
    if same and done:
        plan.skip = f"skipped {name}: already counted (use --recount to count it again)"
        plan.record = None
        return plan
    where = f"row group {offset:,}" if source.form.records == "parquet" else f"uncompressed byte {offset:,}"
    prefix = record.get("prefix") if isinstance(record.get("prefix"), bytes) else None
    if same:
        plan.start, plan.prefix = offset, prefix
        if offset:
            plan.message = f"resuming {name} at {where}" + (
                " (decompressing it from its start up to there)" if source.form.compression else "")
        return plan
    if done and record.get("size") == source.size and _whole_matches(name, record):
        plan.skip = f"skipped {name}: already counted (its content is unchanged)"
        plan.refresh = True
        return plan
    if not done and offset and prefix is not None:
        # A count that stopped part-way (killed, or failed: a download cut short, a bad record):
        # it resumes when what its committed counts cover is still there, unchanged.
        from ..inputs.documents import prefix_digest

        if prefix_digest(source, source.form, offset) == prefix:
            plan.start, plan.prefix = offset, prefix
            plan.message = (f"resuming {name} at {where}: it changed since its count stopped, but not in what its "
                            "committed counts cover")
            return plan
        raise Refused(
            f"{name} changed since its count stopped, and so did what its committed counts cover (up to {where}); "
            "pass --recount to count it again on top of those counts, or count it into a new store"
        )
    raise Refused(
        f"{name} changed since it was counted into this store ({label} files are counted whole: growth "
        "cannot be told from an edit); pass --recount to count it again on top of its old counts, or count "
        "it into a new store"
    )


def _resume_digest(source: Source, record: dict, offset: int) -> PrefixDigest:
    """The digest at ``offset`` of a file resumed unchanged: from the record's block boundary
    (hashing at most one block), or from byte 0 for a record without one."""
    digest = PrefixDigest.resumed(record)
    if digest is None or digest.at > offset:
        digest = PrefixDigest(kind=record_kind(record) or NEW_KIND)
    feed(source.name, digest.at, offset, digest)
    return digest


def _inode_index(store: Store) -> Dict[Tuple[int, int], List[bytes]]:
    index: Dict[Tuple[int, int], List[bytes]] = {}
    with store.reader() as txn:
        for key, record in store.iter_sources(txn):
            if isinstance(record, dict) and isinstance(record.get("ino"), int) and key.startswith(b"/"):
                index.setdefault((record.get("dev"), record["ino"]), []).append(key)
    return index


def _same_file(source: Source, key: bytes, record: dict) -> bool:
    """Whether ``record``, of another path with this file's device and inode, is this file:
    that path still names it (a hard link), or its committed bytes are here (it was moved)."""
    try:
        st = os.stat(os.fsdecode(key))
        if (st.st_dev, st.st_ino) == (source.dev, source.ino):
            return True
    except OSError:
        pass
    if record.get("form") is not None:  # read as documents: identified by all its bytes
        return bool(record.get("done")) and record.get("size") == source.size and _whole_matches(source.name, record)
    offset, kind = record.get("offset", 0), record_kind(record)
    if not isinstance(record.get("digest"), bytes) or kind is None or offset > source.size:
        return False
    return _prefix_digest(source.name, offset, offset, kind)[0] == record["digest"]


def what_stays(store: Store, source: Source) -> str:
    """What the store keeps of ``source`` after its count failed, and what a rerun does: said
    with the error (the committed batches stay; a rerun resumes from them while what they
    cover is unchanged)."""
    with store.reader() as txn:
        record = store.source(txn, source.key)
    if not isinstance(record, dict) or (not record.get("done") and not record.get("offset")):
        return "nothing of it was committed to the store"
    if record.get("done"):
        return "the store keeps its earlier count, whole; this run committed nothing of it"
    offset, form = record["offset"], source.form
    if form is None:
        where = f"its first {offset:,} bytes"
    elif form.records == "parquet":
        where = f"its first {offset:,} row group{'s' if offset != 1 else ''}"
    else:
        where = (f"its first {offset:,} {'uncompressed ' if form.compression else ''}bytes"
                 + (" (whole lines)" if form.records == "jsonl" else ""))
    return (f"the store keeps the counts of {where}: the same command resumes there once the rest is fixed "
            "or complete, as long as that part is unchanged (any other change is refused)")


def plan_files(store: Store, sources: List[Source], settings: dict, recount: bool = False) -> List[FilePlan]:
    """A plan for each file of ``sources`` (streams left out), in order; raises Refused."""
    plans: List[FilePlan] = []
    first: Dict[Tuple[int, int], Source] = {}
    index = None
    for source in sources:
        if source.is_stdin:
            continue
        twin = first.setdefault((source.dev, source.ino), source)
        if twin is not source:
            plans.append(FilePlan(source, skip=f"skipped {source.name}: the same file as {twin.name}"))
            continue
        with store.reader() as txn:
            key, record = source.key, store.source(txn, source.key, digests=True)
        if record is None:
            index = _inode_index(store) if index is None else index
            for other in index.get((source.dev, source.ino), []):
                with store.reader() as txn:
                    candidate = store.source(txn, other, digests=True)
                if candidate is not None and _same_file(source, other, candidate):
                    key, record = other, candidate
                    break
        if source.form is not None:
            plans.append(_decide_document(source, key if record is not None else None, record, recount))
        else:
            plans.append(_decide(source, key if record is not None else None, record, settings, recount))
    return plans
