"""The real CLI (``bpe_stream.cli.commands.main``) with test seams, run as ``python tests/seams.py ARGS``
(``reliability_helpers.Cmd`` does so whenever a command has knobs).

A test that needs a process stopped, killed or interrupted at a given moment names that
moment by what the process has done -- "right after its 3rd committed store transaction" --
never by how long it has run, so the test reaches the same state on a machine ten times
faster or slower.  The knobs come as JSON in the environment variable ``BPE_TEST_KNOBS``;
the library is monkeypatched here and needs no hook of its own.

Settings of the library turned down, so that small inputs behave like large ones:

* ``range_bytes``: counting ranges and stdin pieces of that many bytes instead of 8 MiB
  (``count_sources(range_bytes=...)``), so that a file of a few hundred kB is committed in
  several batches; ``chunk_bytes``: reads of that many bytes instead of 1 MiB;
* ``beside_bytes``: one worker hashes a range on a thread while it counts it from that many
  bytes on, instead of 1 MiB (``sources.BESIDE_BYTES``);
* ``digest_kind``: the kind of digest new file records get (``seen_files.NEW_KIND``):
  ``"blake2b"`` writes the records of the releases before XXH3;
* ``initial_map``: the store's first LMDB map size, so that the map has to grow;
* ``stage_chunk_keys``: batches over that many keys are staged and applied one chunk of keys
  per transaction (``store.STAGE_CHUNK_KEYS``, with no larger chunks for small stores);
* ``hwm_file``: at exit, write the process's peak resident memory (VmHWM, kB) to this file.

Points of the work, each counted from 1 in this process (``"commit:3"`` is the third):

* ``commit``: right after a store write transaction (``Store.write``) committed;
* ``apply``: right after the commit of a transaction that applied one chunk of a staged
  batch (``Store._apply_one_chunk``): the batch is then half applied;
* ``native``: inside a transaction of the native store writer (``_fastbpe.StoreWriter``), just
  before its commit: the batch's words are merged and its records written, nothing committed;
* ``checkpoint``: right after a training checkpoint was committed (``Checkpointer.save``);
* ``open``: right after ``lmdb.open`` returned (in ``Store.open`` and ``Store.remap``);
* ``read``: when a reader starts iterating the words (``Store.iter_word_blocks``, which
  ``Store.iter_words`` reads through), or ``stats`` reads the kept top: its read
  transaction is open and has given the header, the words are still to come;
* ``output``: right after a ``write`` to the temporary file of an atomic output;
* ``replace``: just *before* an ``os.replace`` or directory exchange (``atomic._exchange``)
  that publishes an output: between the writes of a command that writes several files.

What happens there:

* ``sigkill_at``: the process SIGKILLs itself at that point (``"commit:3"``), or at one of two
  moments without a count: ``"store_init"`` (the LMDB files exist, the store's databases do
  not yet) and ``"ensure_settings"`` (inside the first batch's transaction, before the
  settings of a new store are recorded);
* ``pause_at``: ``{"commit:3": MARKER, ...}``: the process creates the file MARKER and waits
  until the file MARKER.go exists (``reliability_helpers.Pause``), so a test can look at
  that exact state, run other processes against it, SIGINT or SIGKILL it there, or let it go on;
* ``points_file``: at exit, write ``{point: times reached}`` as JSON to this file (how many
  commits, checkpoints, writes a clean run makes, to draw a moment among them).

Pauses for the interrupt and source-identity tests (the process waits there until a signal
comes, or until the file ``until`` exists):

* ``pause_after_batch``: ``{"n": N, "marker": PATH}``: right after the N-th batch of counts is
  committed (``Store.add_batch`` returned), write PATH (whole, holding the process id) and wait;
* ``pause_in_task``: ``{"function": "module.name", "n": N, "marker": PATH}``: the N-th call of
  that task function in a process (a worker's N-th task) writes PATH and waits there (before the
  call; with ``"after": true``, after it returned); on a counting thread, SIGINT ends the wait;
* ``piece_chars``: encode pieces of that many bytes instead of 1 MiB (``encoding.PIECE_CHARS``).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from collections import Counter
from contextlib import contextmanager

from reliability_helpers import HANG_TIMEOUT  # (this file's directory is on sys.path)

# A command started from an interactive shell gets Ctrl-C's default action; a test runner
# started in the background (``cmd &`` in a script, nohup) hands SIGINT down ignored, and
# Python then sets no KeyboardInterrupt handler: a test's SIGINT would do nothing.
signal.signal(signal.SIGINT, signal.default_int_handler)

knobs = json.loads(os.environ.get("BPE_TEST_KNOBS") or "{}")
sigkill_at = knobs.get("sigkill_at", "")
pause_at = dict(knobs.get("pause_at", {}))
reached_so_far: Counter = Counter()
# The point kinds that something waits for; only their seams are installed.
wanted = {moment.split(":")[0] for moment in [sigkill_at, *pause_at] if ":" in moment}
if "points_file" in knobs:
    wanted |= {"commit", "apply", "native", "checkpoint", "open", "read", "output", "replace"}


def die(*args, **kwargs):
    os.kill(os.getpid(), signal.SIGKILL)


def wait_for_go(marker: str) -> None:
    """Announces the pause (the marker file) and waits for the test's go (MARKER.go).  A
    poll, so that SIGINT lands here as a KeyboardInterrupt, as Ctrl-C at this moment would;
    bounded like the test's own waits, so a paused process does not outlive a dead test."""
    with open(marker, "x"):
        pass
    deadline = time.monotonic() + HANG_TIMEOUT
    while not os.path.exists(marker + ".go"):
        if time.monotonic() > deadline:
            sys.exit(f"seams: no go for {marker} in {HANG_TIMEOUT} s; giving up")
        time.sleep(0.005)


def reached(kind: str) -> None:
    reached_so_far[kind] += 1
    moment = f"{kind}:{reached_so_far[kind]}"
    if moment == sigkill_at:
        die()
    if moment in pause_at:
        wait_for_go(pause_at[moment])


def after(kind: str, real):
    """``real`` wrapped: the point ``kind`` is reached each time it returns."""
    def wrapper(*args, **kwargs):
        result = real(*args, **kwargs)
        reached(kind)
        return result
    return wrapper


def before(kind: str, real):
    def wrapper(*args, **kwargs):
        reached(kind)
        return real(*args, **kwargs)
    return wrapper


def replace_everywhere(module, name: str, new) -> None:
    """Sets ``module.name`` and every already imported ``from module import name`` in the package."""
    old = getattr(module, name)
    setattr(module, name, new)
    for loaded in list(sys.modules.values()):
        if getattr(loaded, "__name__", "").startswith("bpe_stream") and getattr(loaded, name, None) is old:
            setattr(loaded, name, new)


# -- settings turned down -----------------------------------------------------------------
import bpe_stream.count.counting as counting  # noqa: E402 - after the knobs are read
import bpe_stream.store.lmdb_store as store  # noqa: E402

for knob in ("range_bytes", "chunk_bytes"):
    if knob in knobs:
        counting.count_sources.__kwdefaults__[knob] = knobs[knob]
if "beside_bytes" in knobs:
    import bpe_stream.count.seen_files as sources

    sources.BESIDE_BYTES = knobs["beside_bytes"]
if "digest_kind" in knobs:  # the records' digests as an earlier release made them ("blake2b")
    import bpe_stream.count.seen_files as seen

    seen.NEW_KIND = knobs["digest_kind"]
if "initial_map" in knobs:
    store._INITIAL_MAP_SIZE = knobs["initial_map"]
if "stage_chunk_keys" in knobs:
    store.STAGE_CHUNK_KEYS = knobs["stage_chunk_keys"]
    store.STAGE_DIRTY_PAGES = 0  # that many keys a chunk, however small the store
    counting.DIRTY_SHARE = 0  # ... and however large count's budget
if "hwm_file" in knobs:
    import atexit

    def report_hwm():
        with open("/proc/self/status") as f:
            hwm = next(line.split()[1] for line in f if line.startswith("VmHWM:"))
        with open(knobs["hwm_file"], "w") as f:
            f.write(hwm)

    atexit.register(report_hwm)
if "points_file" in knobs:
    import atexit

    def report_points():
        with open(knobs["points_file"], "w") as f:
            json.dump(reached_so_far, f)

    atexit.register(report_points)

# -- the seams ------------------------------------------------------------------------------
if sigkill_at == "store_init":
    store.Store.__init__ = die
elif sigkill_at == "ensure_settings":
    store.Store.settings_in = die

if wanted & {"commit", "apply", "checkpoint"}:
    real_write, real_apply_one_chunk = store.Store.write, store.Store._apply_one_chunk
    applied = [False]  # did the transaction being written apply a staged chunk?

    def write(self, fn, **kwargs):
        applied[0] = False
        result = real_write(self, fn, **kwargs)
        reached("commit")
        if applied[0]:
            reached("apply")
        return result

    def apply_one_chunk(self, txn):
        result = real_apply_one_chunk(self, txn)
        applied[0] = result is not None
        return result

    store.Store.write = write
    store.Store._apply_one_chunk = apply_one_chunk

if "native" in wanted and store._StoreWriter is not None:
    real_writer = store._StoreWriter

    class SeamWriter:
        """The native writer, its commit a point of the work."""

        def __init__(self, path, map_size):
            self._writer = real_writer(path, map_size)

        def commit(self):
            reached("native")
            return self._writer.commit()

        def __getattr__(self, name):
            return getattr(self._writer, name)

    store._StoreWriter = SeamWriter

if "checkpoint" in wanted:
    import bpe_stream.train.pipeline as pipeline

    real_save = pipeline.Checkpointer.save

    def save(self, merges):
        commits = reached_so_far["commit"]
        real_save(self, merges)
        if reached_so_far["commit"] > commits:  # a save with nothing new commits nothing
            reached("checkpoint")

    pipeline.Checkpointer.save = save

if "open" in wanted:
    store.lmdb.open = after("open", store.lmdb.open)

if "read" in wanted:
    real_iter_word_blocks = store.Store.iter_word_blocks  # (iter_words reads through it)

    def iter_word_blocks(self, txn, *args, **kwargs):
        reached("read")
        yield from real_iter_word_blocks(self, txn, *args, **kwargs)

    store.Store.iter_word_blocks = iter_word_blocks
    real_top_pretokens = store.Store.top_pretokens  # (stats reads the kept top, not the words)

    def top_pretokens(self, txn, *args, **kwargs):
        reached("read")
        return real_top_pretokens(self, txn, *args, **kwargs)

    store.Store.top_pretokens = top_pretokens

if "output" in wanted:
    import bpe_stream.atomic as atomic

    class CountedWrites:
        """A file whose every ``write`` is the point ``output``."""

        def __init__(self, f):
            self._f = f

        def write(self, data):
            n = self._f.write(data)
            reached("output")
            return n

        def __getattr__(self, name):
            return getattr(self._f, name)

    real_atomic_write = atomic.atomic_write

    @contextmanager
    def atomic_write(path, mode: str = "wb"):
        with real_atomic_write(path, mode) as f:
            yield CountedWrites(f)

    replace_everywhere(atomic, "atomic_write", atomic_write)

if "replace" in wanted:
    import bpe_stream.atomic as atomic

    os.replace = before("replace", os.replace)
    atomic._exchange = before("replace", atomic._exchange)

# -- pauses after a batch and inside a worker's task ---------------------------------------
# Set when SIGINT reaches the process: a counting thread paused by a seam goes on then, as
# a real one would finish its range (only the main thread gets the KeyboardInterrupt).
_interrupted = threading.Event()


def _note_interrupt(signum, frame):
    _interrupted.set()
    signal.default_int_handler(signum, frame)


signal.signal(signal.SIGINT, _note_interrupt)


def wait_here(marker: str, until=None) -> None:
    """Announces the pause (MARKER appears whole, holding this process's id: two workers may
    both get there) and waits for a signal, or until the file ``until`` exists (a thread
    other than the main one: until the process is interrupted, too)."""
    tmp = f"{marker}.{os.getpid()}.tmp"
    with open(tmp, "w") as f:
        f.write(str(os.getpid()))
    os.rename(tmp, marker)
    deadline = time.monotonic() + HANG_TIMEOUT
    in_thread = threading.current_thread() is not threading.main_thread()
    while until is None or not os.path.exists(until):
        if in_thread and _interrupted.is_set():
            return
        if time.monotonic() > deadline:
            sys.exit(f"seams: still paused at {marker} after {HANG_TIMEOUT} s; giving up")
        time.sleep(0.01)


if "pause_after_batch" in knobs:
    import bpe_stream.store.lmdb_store as store

    batch_pause, real_add_batch, batches = knobs["pause_after_batch"], store.Store.add_batch, [0]

    def add_batch_then_pause(self, *args, **kwargs):
        result = real_add_batch(self, *args, **kwargs)
        batches[0] += 1
        if batches[0] == batch_pause["n"]:
            wait_here(batch_pause["marker"], batch_pause.get("until"))
        return result

    store.Store.add_batch = add_batch_then_pause

if "pause_in_task" in knobs:
    import importlib

    task_pause, task_calls = knobs["pause_in_task"], [0]
    task_module_name, _, task_name = task_pause["function"].rpartition(".")
    task_module = importlib.import_module(task_module_name)
    real_task = getattr(task_module, task_name)

    def task_then_pause(*args, **kwargs):
        task_calls[0] += 1
        here = task_calls[0] == task_pause["n"]
        if here and not task_pause.get("after"):
            wait_here(task_pause["marker"], task_pause.get("until"))
        result = real_task(*args, **kwargs)
        if here and task_pause.get("after"):
            wait_here(task_pause["marker"], task_pause.get("until"))
        return result

    task_then_pause.__module__, task_then_pause.__qualname__ = task_module_name, task_name  # pickled by name
    setattr(task_module, task_name, task_then_pause)

if "piece_chars" in knobs:
    import bpe_stream.encode.parallel as encoding

    encoding.PIECE_CHARS = knobs["piece_chars"]

from bpe_stream.cli.commands import main  # noqa: E402 - after the seams are in place

sys.argv[0] = "bpe-stream"
main()
