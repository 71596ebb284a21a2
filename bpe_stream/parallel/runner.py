"""Running units of work (counting a range, encoding a piece) on worker processes, or on
threads of this process where the work is native code that releases the GIL.

A runner only runs tasks (``start``, ``result``, ``cancel``, ``close``); which tasks are in
flight and the order their results come back in are ``streaming.Window``'s.  One worker
runs each task inline, when its result is asked for.

The workers are forked processes of our own, each with a private pipe, not a
``multiprocessing.Pool``: a Pool's workers share queues guarded by locks, and its teardown
joins threads that read those queues.  Ctrl-C reaches the whole process group, so it stopped
Pool workers in the middle of a message -- each printed a traceback, and about one run in six
``terminate()`` then waited forever on a lock or half a message.  Here a worker ignores SIGINT
(the parent alone decides what an interrupt means), shares nothing with the other workers,
and is stopped with SIGKILL when the parent is done or interrupted; all that is waited for
then is the exit of a killed process.

:class:`ThreadRunner` runs tasks on threads instead: for counting ranges of plain files,
whose scan, count and sort are C without the GIL (``CountTable.feed``/``pack``).  The range's
bytes, the counts and the run then stay in this process -- nothing is pickled or sent, and
the parent checks the bytes a thread counted against the file with a memcmp instead of a
checksum that both sides compute.  A thread finishes its range (milliseconds) when the count
is interrupted, and a killed process leaves no worker behind.
"""

from __future__ import annotations

import os
import signal
from collections import deque
from typing import Iterable, List

# multiprocessing.connection (~7 ms of imports) is imported by the first worker made: one
# worker runs its tasks inline and needs no pipe.


class WorkerLost(ChildProcessError):
    """A worker process ended in the middle of a task (killed from outside, out of memory)."""


def _serve(conn) -> None:
    """A worker's loop: ``(fn, args)`` in, ``(True, result)`` or ``(False, exception)`` out."""
    while True:
        try:
            fn, args = conn.recv()
        except (EOFError, OSError):  # the parent closed its end or is gone
            return
        try:
            reply = (True, fn(*args))
        except BaseException as exc:  # noqa: BLE001 - handed to the parent, which raises it
            reply = (False, exc)
        try:
            conn.send(reply)
        except (EOFError, OSError):
            return
        except Exception as exc:  # noqa: BLE001 - the result or the exception does not pickle
            conn.send((False, RuntimeError(f"a worker's result could not be sent back: {type(exc).__name__}: {exc}")))


class _Worker:
    """One forked worker process and the parent's end of its pipe."""

    def __init__(self, siblings: List["_Worker"]):
        from multiprocessing.connection import Pipe

        parent_end, child_end = Pipe(duplex=True)
        pid = os.fork()
        if pid == 0:  # the worker
            try:
                signal.signal(signal.SIGINT, signal.SIG_IGN)
                # Only the parent may hold the parent's ends: a worker whose parent died then
                # reads end-of-file and exits instead of waiting forever.
                for conn in [parent_end] + [w.conn for w in siblings]:
                    conn.close()
                _serve(child_end)
            finally:
                os._exit(0)  # never the parent's exit handlers (atexit, temporary files, tqdm)
        child_end.close()
        self.pid = pid
        self.conn = parent_end

    def stop(self) -> None:
        """SIGKILL and reap: a worker holds nothing that needs a clean shutdown."""
        try:
            os.kill(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        try:
            os.waitpid(self.pid, 0)
        except ChildProcessError:
            pass
        self.conn.close()

    def lost(self) -> WorkerLost:
        try:
            _, status = os.waitpid(self.pid, 0)
        except ChildProcessError:
            status = None
        self.pid = -1 if status is not None else self.pid
        if status is not None and os.WIFSIGNALED(status):
            how = f"was killed by {signal.Signals(os.WTERMSIG(status)).name}"
        elif status is not None:
            how = f"exited with status {os.WEXITSTATUS(status)}"
        else:
            how = "ended"
        return WorkerLost(f"a worker process {how} in the middle of a task (out of memory?); run the command again")


class _Task:
    __slots__ = ("fn", "args", "done", "ok", "value")

    def __init__(self, fn, args):
        self.fn, self.args = fn, args
        self.done = False

    def result(self):
        if not self.ok:
            raise self.value
        return self.value


class LocalRunner:
    """Runs tasks inline (one worker) or on forked worker processes, each as soon as a worker
    is idle.  Another engine (Dask) has the same methods: ``start``, ``result``, ``cancel``,
    ``close``, and ``workers`` and ``inline`` for ``streaming.Window``."""

    def __init__(self, workers: int):
        self.workers = workers
        self._unsent = deque()  # tasks waiting for an idle worker
        self._busy = {}  # parent's pipe end -> (_Worker, _Task)
        self._idle: List[_Worker] = []
        self._all: List[_Worker] = []
        if workers > 1:
            try:
                for _ in range(workers):
                    self._all.append(_Worker(self._all))
            except BaseException:
                self.close()
                raise
            self._idle = list(self._all)

    @property
    def inline(self) -> bool:
        """Whether tasks run in this process (one worker), each when its result is asked for."""
        return not self._all

    def start(self, fn, args) -> _Task:
        """Queues ``fn(*args)``: a worker gets it as soon as one is idle."""
        task = _Task(fn, args)
        if self._all:
            self._unsent.append(task)
            self._dispatch()
        return task

    def result(self, task: _Task):
        """The result of a started task (its exception raised), waited for."""
        if not self._all:
            fn, args, task.fn, task.args = task.fn, task.args, None, None
            return fn(*args)
        while not task.done:
            self._collect()
        return task.result()

    def cancel(self, tasks: Iterable[_Task]) -> None:
        """Forgets ``tasks``: those not sent are never run; the results of the others are dropped."""
        drop = set(map(id, tasks))
        self._unsent = deque(t for t in self._unsent if id(t) not in drop)

    def _collect(self) -> None:
        """Waits for at least one busy worker, takes every finished result, refills idle workers."""
        from multiprocessing.connection import wait

        for conn in wait(list(self._busy)):
            worker, task = self._busy.pop(conn)
            try:
                task.ok, task.value = conn.recv()
            except (EOFError, OSError):
                raise worker.lost() from None
            task.done = True
            self._idle.append(worker)
        self._dispatch()

    def _dispatch(self) -> None:
        # Only an idle worker gets a task: it is waiting in recv, so a large task cannot
        # block on a pipe whose reader is itself blocked sending a result.
        while self._idle and self._unsent:
            worker, task = self._idle.pop(), self._unsent.popleft()
            task.fn, task.args, fn, args = None, None, task.fn, task.args  # the parent keeps no copy
            try:
                worker.conn.send((fn, args))
            except OSError:  # (a BrokenPipeError here is a dead worker, not a closed stdout)
                raise worker.lost() from None
            self._busy[worker.conn] = (worker, task)

    def close(self) -> None:
        workers, self._all, self._idle, self._busy = self._all, [], [], {}
        for worker in workers:
            if worker.pid > 0:
                worker.stop()
        self._unsent.clear()


class ThreadRunner:
    """Runs tasks on ``workers`` threads of this process, each as soon as one is idle: the
    methods of :class:`LocalRunner`, for tasks that spend their time in native code without
    the GIL.  ``shares_memory``: a task's arguments and result are not copied (the counting
    pipeline then picks the unit that hands back the bytes it counted)."""

    inline = False
    shares_memory = True

    def __init__(self, workers: int):
        from concurrent.futures import ThreadPoolExecutor

        self.workers = workers
        self._pool = ThreadPoolExecutor(workers, thread_name_prefix="bpe-stream-count")

    def start(self, fn, args):
        return self._pool.submit(fn, *args)

    def result(self, future):
        return future.result()

    def cancel(self, futures: Iterable) -> None:
        for future in futures:
            future.cancel()

    def close(self) -> None:
        # the running tasks finish their range; the queued ones never start
        self._pool.shutdown(wait=True, cancel_futures=True)


def import_engine(module: str, missing: str):
    """The module of another engine (``distributed``, ``ray``), or the SettingsError ``missing``
    that says how to install it."""
    from importlib import import_module

    from ..errors import SettingsError

    try:
        return import_module(module)
    except ImportError:
        raise SettingsError(missing) from None


def call_on_worker(engine: str, fn, args):
    """Runs on a worker of ``engine`` (Dask, Ray): one counting unit, with a hint when the
    worker cannot see the file."""
    try:
        return fn(*args)
    except FileNotFoundError as exc:
        from ..inputs.reader import InputError

        raise InputError(
            f"{exc.filename}: no such file on the {engine} worker; the input files must be at the same "
            "path on every worker (a shared file system)"
        ) from None
