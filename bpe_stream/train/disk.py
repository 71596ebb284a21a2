"""The out-of-core engine: the C merge loop with every table in a scratch file on disk.

Used when the in-memory trainer would not fit the memory budget.  It is the in-memory
engine's algorithm and code (``csrc/merge_loop.c``: positions, pair records and their
occurrence lists, the heap), run with its allocations in a file arena (``csrc/filearena.c``):
an unnamed file in ``<store>/train-scratch`` (or $TMPDIR for a read-only store) mapped
shared into the process.  Those pages are file-backed, not anonymous: the kernel writes
them back and may drop them as it does any page cache, so ``--max-memory`` bounds the
process's anonymous memory and the mapped pages are reported beside it.  The budget is used
before the disk: what the interpreter and the words on their way in leave of it
(``estimate.scratch_quota``, raised after the load) the arena serves from anonymous memory,
the positions first, split between memory and the file when they do not fit.  They are the
table the merges dirty most densely (each merge rewrites the positions it merges, spread
over the whole array), and once a file's dirty pages pass the kernel's dirty limits every
write fault on it is throttled while the flusher writes back pages the loop dirties again:
measured on 400 MB of generated text (vocab 32,000, ``--max-memory 1G``) with the limits
lowered to 300/150 MB, 120 s with the positions in memory, 2,048 merges in 2 minutes with
every table in the file, and no gain (2,112) with the quota given to the pair records, lists,
table and heap instead.  The merges are the in-memory engine's, byte for byte,
for every tie-break (the tests compare them).

Why not the symbol sequences as LMDB rows, visited through Python or in C over blocks of
rows (both built and measured, see the commit history): every merge then copies each word it
touches out of and back into a B-tree, 13-18x the in-memory time on 80 MB of generated text
(1.18M distinct pretokens, vocab 12,000), where this engine took 1.2x (load 3.9 s vs 2.8 s,
merges 5.2 s vs 4.9 s, on a loaded 2-core machine), with 11 MB of anonymous memory against
394 MB in memory.

The file is unnamed (O_TMPFILE), so a killed run leaves nothing; it is reserved with
posix_fallocate as it grows, so a full disk is a clean :class:`ScratchError`, never a
SIGBUS.  The directory itself is made for the run and removed after it.
"""

from __future__ import annotations

import errno
import os
import shutil
import sys
from contextlib import contextmanager
from typing import List, Optional, Sequence, Tuple

from .memory import CEngine
from .engine import Merge, Words
from ..store.lmdb_store import StoreError

_DISK_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)


class ScratchError(StoreError):
    """The scratch file of the disk path cannot be written (a full disk, most often)."""


def _scratch_error(directory: str, exc: OSError) -> ScratchError:
    if exc.errno in _DISK_ERRNOS:
        return ScratchError(
            f"the training scratch file in {directory} ran out of disk ({exc.strerror}); free disk space "
            "(or train with a larger --max-memory) and run the same command again"
        )
    return ScratchError(f"the training scratch file in {directory} failed: {exc.strerror}")


class DiskEngine(CEngine):
    """The C merge loop with its tables in a scratch file in ``scratch_dir`` (made here,
    removed by :meth:`close`)."""

    def __init__(self, tokens: Sequence[bytes], marker_id, tie_break: str, scratch_dir: str, quota: int = 0,
                 run_quota: Optional[int] = None):
        """``quota``: bytes of the tables kept in anonymous memory while the words load (the
        positions first; 0: all in the file), ``run_quota`` after (None: ``quota``), see
        :func:`bpe_stream.train.estimate.scratch_quota`."""
        self.directory = scratch_dir
        self.run_quota = quota if run_quota is None else run_quota
        try:
            os.makedirs(scratch_dir, exist_ok=True)
        except OSError as exc:
            raise ScratchError(f"cannot make the training scratch directory {scratch_dir}: {exc.strerror}") from None
        try:
            super().__init__(tokens, marker_id, tie_break, scratch_dir=scratch_dir, scratch_quota=quota)
        except OSError as exc:
            self._remove()
            raise _scratch_error(scratch_dir, exc) from None

    @contextmanager
    def _disk_failures(self):
        """An OSError of the scratch file (a full disk) as one ScratchError, the engine closed."""
        try:
            yield
        except OSError as exc:
            self.close()
            raise _scratch_error(self.directory, exc) from None

    def load(self, words: Words) -> None:
        with self._disk_failures():
            super().load(words)
            self.loop.set_quota(self.run_quota)

    def merge_given(self, pairs: Sequence[Tuple[int, int]]) -> List[int]:
        with self._disk_failures():
            return super().merge_given(pairs)

    def merge_best(self, n: int, min_count: int) -> List[Merge]:
        with self._disk_failures():
            return super().merge_best(n, min_count)

    def close(self) -> None:
        if self.loop is not None and os.environ.get("BPE_STREAM_DEBUG"):
            st = self.loop.stats()
            print(f"scratch file: {st['disk_bytes'] / 1e6:,.0f} MB at the end, at most {st['peak_disk_bytes'] / 1e6:,.0f} MB; "
                  f"in memory {st['anon_bytes'] / 1e6:,.0f} MB at the end, at most {st['peak_anon_bytes'] / 1e6:,.0f} MB "
                  f"(quota {st['anon_quota'] / 1e6:,.0f} MB)", file=sys.stderr)
        super().close()
        self._remove()

    def _remove(self) -> None:
        shutil.rmtree(self.directory, ignore_errors=True)


def train_on_disk(
    words: Words,
    tokens: List[bytes],
    marker_id,
    tie_break: str,
    limit: int,
    min_count: int,
    forced: Sequence[Tuple[int, int]],
    scratch_dir: str,
    on_progress=None,
    every: int = 64,
    quota: int = 0,
) -> List[Merge]:
    """Loads ``words`` and learns up to ``limit`` merges in one call (tests and tools).

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as d:
    ...     train_on_disk([(b"abab", 3), (b"ab", 1)], [bytes([i]) for i in range(256)], None, "max-bytes",
    ...                   2, 1, [], d + "/scratch")
    [(97, 98, 7), (256, 256, 3)]
    """
    from .driver import drive

    engine = DiskEngine(tokens, marker_id, tie_break, scratch_dir, quota)
    try:
        engine.load(words)
        return list(drive(engine, limit, min_count, forced, on_progress=on_progress, every=every))
    finally:
        engine.close()
