"""Counting on a Dask cluster (``bpe-stream count --engine dask [--scheduler ADDRESS]``).

:class:`DaskRunner` has the three methods of ``counting.LocalRunner``: ``submit`` queues one
counting unit (``count_range`` of a byte range of a file, or ``_count_pieces`` of stdin text)
as a Dask task and yields the results of earlier tasks **in submission order**, keeping at most
twice as many tasks in flight as the cluster has threads; ``drain`` yields the rest; ``close``
cancels what is left and shuts down a ``LocalCluster`` it started.  The partial counts stream
back to this process, which merges them into the LMDB store exactly as a local run does (same
batches, same per-file progress records), so the store is identical and a rerun after a failure
resumes without counting anything twice.

Workers read the files themselves: with ``--scheduler``, every worker must see the input files at
the same absolute path (a shared or replicated file system) and have bpe-stream installed.
Without ``--scheduler`` a ``LocalCluster`` of ``--workers`` single-threaded processes is started
on this machine.  Dask is an optional extra, imported only here.
"""

from __future__ import annotations

import logging
import os
from collections import deque
from typing import Iterable, Optional

from ..errors import SettingsError
from ..runner import WorkerLost

MISSING = "--engine dask needs Dask; install it with: pip install 'bpe-stream[dask]'"


def _import_distributed():
    try:
        import distributed
    except ImportError:
        raise SettingsError(MISSING) from None
    return distributed


def _call(fn, args):
    """Runs on a worker: one counting unit, with a hint when a worker cannot see the file."""
    try:
        return fn(*args)
    except FileNotFoundError as exc:
        from ..reader import InputError

        raise InputError(
            f"{exc.filename}: no such file on the Dask worker; the input files must be at the same "
            "path on every worker (a shared file system)"
        ) from None


class DaskRunner:
    """Runs counting units on a Dask cluster; results come back in submission order."""

    def __init__(self, workers: int = 1, scheduler: Optional[str] = None, *, processes: bool = True,
                 connect_timeout: float = 15.0):
        distributed = _import_distributed()
        self.cluster = None
        self.client = None
        self.pending = deque()
        try:
            if scheduler:
                try:
                    self.client = distributed.Client(scheduler, timeout=connect_timeout, set_as_default=False)
                except (OSError, TimeoutError, ValueError) as exc:
                    why = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
                    raise SettingsError(
                        f"cannot reach the Dask scheduler at {scheduler} ({why}); check --scheduler (e.g. tcp://host:8786)"
                    ) from None
            else:
                self.cluster = distributed.LocalCluster(
                    n_workers=max(1, workers), threads_per_worker=1, processes=processes,
                    dashboard_address=None, silence_logs=logging.CRITICAL,
                )
                self.client = distributed.Client(self.cluster, set_as_default=False)
            threads = sum(w.get("nthreads", 1) for w in self.client.scheduler_info()["workers"].values())
        except BaseException:
            self.close()
            raise
        self.workers = max(1, threads or workers)
        self.address = self.client.scheduler.address

    def _result(self, future):
        from distributed import KilledWorker

        try:
            return future.result()
        except KilledWorker as exc:
            raise WorkerLost(
                f"a Dask worker died while counting ({exc}); rerun the same command: committed counts are kept "
                "and counting resumes where they end"
            ) from None

    def submit(self, fn, args, meta) -> Iterable[tuple]:
        """Queues ``fn(*args)`` on the cluster; yields ``(meta, result)`` of finished earlier tasks."""
        from ..counting import count_range

        if fn is count_range:  # workers may run elsewhere: give them an absolute path
            args = (os.path.abspath(args[0]),) + tuple(args[1:])
        self.pending.append((meta, self.client.submit(_call, fn, args, pure=False)))
        while len(self.pending) > 2 * self.workers:
            meta0, future = self.pending.popleft()
            yield meta0, self._result(future)

    def drain(self) -> Iterable[tuple]:
        while self.pending:
            meta, future = self.pending.popleft()
            yield meta, self._result(future)

    def close(self) -> None:
        pending, self.pending = [f for _, f in self.pending], deque()
        client, self.client = self.client, None
        cluster, self.cluster = self.cluster, None
        try:
            if client is not None:
                if pending:
                    try:
                        client.cancel(pending)
                    except Exception:  # pragma: no cover - best effort while shutting down
                        pass
                client.close()
        finally:
            if cluster is not None:
                cluster.close()
