"""The training driver: one run of merges over an engine, written once for every engine.

:func:`drive` applies the forced prefix (``--from``, ``--resume``), then learns merges in
batches until the limit or until a batch comes back short (``--min-count``, or no pair
left); after each batch it reports progress and checkpoints on the cadence of
:class:`Checkpoints`.  The engines (``merge_engine.py``) only merge; the words, the
plan and the result around a run are the callers' (``trainer.Trainer``,
``pipeline.train_from_store``).

Its own module, not inside ``trainer.py``, because it needs nothing of the trainer's
configuration: a limit and a threshold are all it is given, so the disk path's tools and
the tests drive an engine with it directly.
"""

from __future__ import annotations

import time
from array import array
from dataclasses import dataclass
from itertools import chain
from typing import Callable, Iterable, Iterator, List, Optional, Sequence, Tuple

from .engine import COUNT_OVERFLOW, Merge, MergeEngine, TrainError

# Merges per batch: one engine call, one progress report and one look at the checkpoint
# cadence each (64 keeps the per-call cost of the C loop out of sight).
PROGRESS_EVERY = 64


class MergeLog:
    """The merges of a run so far, ``(left, right, count)`` each, kept in one flat int64
    array: as a list of tuples they cost ~140 bytes a merge (4.5 MB at 32,768), held while
    the merge loop's own tables are at their largest."""

    def __init__(self, merges: Iterable[Merge] = ()):
        self.flat = array("q")
        self.extend(merges)

    def extend(self, batch: Iterable[Merge]) -> None:
        before = len(self.flat)
        try:
            self.flat.extend(chain.from_iterable(batch))
        except OverflowError:  # the pure-Python engine counts without a limit
            del self.flat[before:]
            raise TrainError(COUNT_OVERFLOW) from None
        if len(self.flat) % 3:
            del self.flat[before:]
            raise ValueError("merges are (left, right, count) triples")

    def __len__(self) -> int:
        return len(self.flat) // 3

    def __getitem__(self, which: slice) -> List[Merge]:
        start, stop, step = which.indices(len(self))
        if step != 1:
            raise ValueError("a MergeLog slice takes no step")
        it = iter(self.flat[3 * start:3 * stop])
        return list(zip(it, it, it))

    def __iter__(self) -> Iterator[Merge]:
        it = iter(self.flat)
        return zip(it, it, it)


# Merges between checkpoints (or CHECKPOINT_SECONDS, whichever comes first).  Each is a
# commit with a sync: every 1,000 merges, a 32,768 vocabulary made 32 of them, 0.3-0.5 s of
# a 1.5 s training on code_25M; a kill loses at most this many merges (under a second of
# work in memory) or the seconds.
CHECKPOINT_EVERY = 10_000
CHECKPOINT_SECONDS = 30.0


@dataclass
class Checkpoints:
    """When a run saves its merges: after a batch once ``every`` merges were made since the
    last save, or ``seconds`` passed (``seconds=0``: after every batch), and at the end.
    ``save`` gets the whole log (a ``store_checkpoint.Checkpointer`` writes only what is
    new).  ``clock``: seconds, monotonic (a seam for tests)."""

    save: Callable[[MergeLog], None]
    every: int = CHECKPOINT_EVERY
    seconds: float = CHECKPOINT_SECONDS
    clock: Callable[[], float] = time.monotonic


ProgressFn = Callable[[List[Merge], int, int], None]  # (batch, merges done, limit)


def drive(
    engine: MergeEngine,
    limit: int,
    min_count: int = 1,
    forced: Sequence[Tuple[int, int]] = (),
    *,
    on_progress: Optional[ProgressFn] = None,
    checkpoints: Optional[Checkpoints] = None,
    every: int = PROGRESS_EVERY,
) -> MergeLog:
    """Runs up to ``limit`` merges on a loaded ``engine``: ``forced`` first (at most
    ``limit`` of them, ``every`` at a time), then the best pairs whose count reaches
    ``min_count``, ``every`` at a time; returns the ``(left, right, count)`` merges in order."""
    done = MergeLog()
    saved_at, saved_time = 0, checkpoints.clock() if checkpoints else 0.0

    def after(batch: List[Merge]) -> None:
        nonlocal saved_at, saved_time
        done.extend(batch)
        if checkpoints is not None and (
            len(done) - saved_at >= checkpoints.every or checkpoints.clock() - saved_time >= checkpoints.seconds
        ):
            checkpoints.save(done)
            saved_at, saved_time = len(done), checkpoints.clock()
        if on_progress is not None:
            on_progress(batch, len(done), limit)

    forced = [tuple(m) for m in forced[:max(0, limit)]]
    for start in range(0, len(forced), every):
        chunk = forced[start:start + every]
        counts = engine.merge_given(chunk)
        after([(left, right, count) for (left, right), count in zip(chunk, counts)])
    while len(done) < limit:
        want = min(every, limit - len(done))
        batch = engine.merge_best(want, min_count)
        if batch:
            after(batch)
        if len(batch) < want:
            break
    if checkpoints is not None and len(done) > saved_at:
        checkpoints.save(done)
    return done
