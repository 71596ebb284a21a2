"""Running units of work (counting a range, encoding a piece) on a process pool.

Results come back in submission order, with a bounded number of tasks in flight, so the
caller can merge or write them as a stream in bounded memory.  One worker runs inline.
"""

from __future__ import annotations

from collections import deque
from typing import Iterable


class LocalRunner:
    """Runs counting units inline or on a process pool, keeping a bounded number in flight
    and handing results back in submission order.  Another engine (Dask) implements the
    same three methods: ``submit``, ``drain``, ``close``."""

    def __init__(self, workers: int):
        self.workers = workers
        self.pool = None
        if workers > 1:
            import multiprocessing

            self.pool = multiprocessing.get_context("fork").Pool(workers)
        self.pending = deque()

    def submit(self, fn, args, meta) -> Iterable[tuple]:
        """Queues ``fn(*args)``; yields ``(meta, result)`` of finished earlier tasks."""
        if self.pool is None:
            yield meta, fn(*args)
            return
        self.pending.append((meta, self.pool.apply_async(fn, args)))
        while len(self.pending) > 2 * self.workers:
            meta0, res = self.pending.popleft()
            yield meta0, res.get()

    def drain(self) -> Iterable[tuple]:
        while self.pending:
            meta, res = self.pending.popleft()
            yield meta, res.get()

    def close(self) -> None:
        if self.pool is not None:
            self.pool.terminate()
            self.pool.join()
