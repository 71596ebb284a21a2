"""Counting on Ray (``bpe-stream count --engine ray [--address ADDRESS]``).

:class:`RayRunner` has the methods of ``runner.LocalRunner`` (and of ``dask_runner.DaskRunner``):
``start`` submits one counting unit (``count_range`` of a byte range of a file, a piece of
stdin or of a compressed or structured input) as a Ray task, ``result`` waits for it,
``cancel`` cancels tasks, ``close`` disconnects (and stops the local Ray it started).  Which
tasks are in flight and the order their results come back in are ``streaming.Window``'s; the
partial counts come back to this process, which merges them into the LMDB store as a local
run does, so the store is the same and a rerun after a failure resumes where the committed
counts end.

A worker process that dies in the middle of a task (killed, out of memory) is Ray's to
handle: the task is retried (``MAX_RETRIES`` times; a task's result is taken once, from the
attempt that finished, so nothing is counted twice).  An error the task raises (a file a
worker cannot read) is not retried: it is raised here as the error it is.

Without ``--address`` a local Ray of ``--workers`` CPUs is started for the run (a few
seconds) and stopped after it; with it, this process joins a running cluster (``ray start
--head`` on one machine, ``ray start --address=HEAD:6379`` on the others), whose workers
must see the input files at the same absolute path and have bpe-stream installed.  A
process that has already called ``ray.init`` is used as it is.  Ray is an optional extra
(``bpe-stream[ray]``), imported only here.
"""

from __future__ import annotations

from typing import Iterable, Optional

from ..errors import SettingsError
from .runner import WorkerLost, call_on_worker, import_engine

MISSING = "--engine ray needs Ray; install it with: pip install 'bpe-stream[ray]'"
MAX_RETRIES = 3  # attempts after a worker died in the middle of a task (Ray's default, said here)


def _import_ray():
    return import_engine("ray", MISSING)


def _call(fn, args):
    """Runs on a worker: one counting unit (see runner.call_on_worker)."""
    return call_on_worker("Ray", fn, args)


class RayRunner:
    """Runs counting units as Ray tasks (``streaming.Window`` keeps them in order)."""

    inline = False

    def __init__(self, workers: int = 1, address: Optional[str] = None):
        ray = _import_ray()
        self._ray = ray
        self._started = False
        if not ray.is_initialized():
            options = dict(include_dashboard=False, log_to_driver=False, configure_logging=False)
            try:
                if address:
                    ray.init(address=address, **options)
                else:
                    ray.init(num_cpus=max(1, workers), **options)
            except (ConnectionError, TimeoutError, ValueError, RuntimeError) as exc:
                why = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
                where = f"the Ray cluster at {address}" if address else "a local Ray"
                raise SettingsError(f"cannot start or reach {where} ({why}); check --address (e.g. head:6379)") from None
            self._started = True
        try:
            cpus = int(ray.cluster_resources().get("CPU", 0))
            self.workers = max(1, cpus or workers)
            self._task = ray.remote(_call).options(num_cpus=1, max_retries=MAX_RETRIES, retry_exceptions=False)
        except BaseException:
            self.close()
            raise

    def start(self, fn, args):
        """Submits ``fn(*args)`` as a Ray task: its object reference."""
        return self._task.remote(fn, args)

    def result(self, ref):
        """The result of a submitted task, waited for: the task's own error raised as it is; a
        worker lost on every attempt is ``WorkerLost``."""
        from ray.exceptions import RayTaskError, WorkerCrashedError

        try:
            return self._ray.get(ref)
        except RayTaskError as exc:
            cause = getattr(exc, "cause", None)
            if isinstance(cause, BaseException):
                raise cause from None
            raise
        except WorkerCrashedError as exc:
            raise WorkerLost(
                f"a Ray worker died while counting, {MAX_RETRIES + 1} times ({str(exc).splitlines()[0]}); rerun the "
                "same command: committed counts are kept and counting resumes where they end"
            ) from None

    def cancel(self, refs: Iterable) -> None:
        """Cancels tasks whose results are not wanted (best effort)."""
        for ref in refs:
            try:
                self._ray.cancel(ref)
            except Exception:  # pragma: no cover - best effort while shutting down
                pass

    def close(self) -> None:
        started, self._started = self._started, False
        if started:
            self._ray.shutdown()
