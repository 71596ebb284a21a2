"""Counting on a Dask cluster (``bpe-stream count --engine dask [--scheduler ADDRESS]``).

:class:`DaskRunner` has the methods of ``runner.LocalRunner``: ``start`` submits one counting
unit (``count_range`` of a byte range of a file, ``_count_pieces`` of stdin text, a piece of a
compressed or structured input) as a Dask task, ``result`` waits for it, ``cancel`` cancels
tasks, ``close`` shuts down a ``LocalCluster`` it started.  Which tasks are in flight (at most
twice as many as the cluster has threads) and the order their results come back in (submission
order) are ``streaming.Window``'s, as for local workers.  The partial counts stream back to this
process, which merges them into the LMDB store exactly as a local run does (same batches, same
per-file progress records), so the store is identical and a rerun after a failure resumes
without counting anything twice.

Workers read the files themselves, at the absolute paths ``counting.count_sources`` gives the
tasks: with ``--scheduler``, every worker must see the input files at the same absolute path (a
shared or replicated file system) and have bpe-stream installed.
Without ``--scheduler`` a ``LocalCluster`` of ``--workers`` single-threaded processes is started
on this machine.  Dask is an optional extra, imported only here.
"""

from __future__ import annotations

import logging
from typing import Iterable, Optional

from ..errors import SettingsError
from .runner import WorkerLost, call_on_worker, import_engine

MISSING = "--engine dask needs Dask; install it with: pip install 'bpe-stream[dask]'"


def _import_distributed():
    return import_engine("distributed", MISSING)


def _call(fn, args):
    """Runs on a worker: one counting unit (see runner.call_on_worker)."""
    return call_on_worker("Dask", fn, args)


class DaskRunner:
    """Runs counting units on a Dask cluster (``streaming.Window`` keeps them in order)."""

    inline = False

    def __init__(self, workers: int = 1, scheduler: Optional[str] = None, *, processes: bool = True,
                 connect_timeout: float = 15.0):
        distributed = _import_distributed()
        self.cluster = None
        self.client = None
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

    def start(self, fn, args):
        """Submits ``fn(*args)`` to the cluster: its future."""
        return self.client.submit(_call, fn, args, pure=False)

    def result(self, future):
        """The result of a submitted task, waited for; a worker that died is ``WorkerLost``."""
        from distributed import KilledWorker

        try:
            return future.result()
        except KilledWorker as exc:
            raise WorkerLost(
                f"a Dask worker died while counting ({exc}); rerun the same command: committed counts are kept "
                "and counting resumes where they end"
            ) from None

    def cancel(self, futures: Iterable) -> None:
        """Cancels tasks whose results are not wanted (best effort)."""
        if self.client is not None:
            try:
                self.client.cancel(list(futures))
            except Exception:  # pragma: no cover - best effort while shutting down
                pass

    def close(self) -> None:
        client, self.client = self.client, None
        cluster, self.cluster = self.cluster, None
        try:
            if client is not None:
                client.close()
        finally:
            if cluster is not None:
                cluster.close()
