"""Helpers shared by tests/test_reliability.py and benchmarks/stress.py: running the real CLI
in its own process group, killing it with SIGKILL, reading a store's committed state in one
read transaction, and an independent oracle for the counts of byte prefixes of files.

The oracle does not use bpe_stream: it applies the spec's GPT-2 pattern with the `regex`
package to the text between special tokens, so a counting bug cannot hide behind itself.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

import regex

REPO = Path(__file__).resolve().parents[1]
DATA = REPO.parent / "shared" / "data"
CORPORA = DATA / "corpora"
EOT = "<|endoftext|>"
# ../shared/spec/bpe.md, character for character
GPT2_PATTERN = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
_GPT2 = regex.compile(GPT2_PATTERN)

# The real CLI (bpe_stream.cli.main) with some of the library's own knobs turned, given as
# JSON in the environment variable BPE_TEST_KNOBS:
# * ``range_bytes``: counting ranges and stdin pieces of that many bytes instead of 8 MiB (the
#   library's ``count_sources(range_bytes=...)``), so that a file of a few hundred kB is
#   committed in several batches and a kill can cut it in the middle; ``chunk_bytes``: reads of
#   that many bytes instead of 1 MiB (stdin is cut into pieces only between reads);
# * ``initial_map``: the store's first LMDB map size, so that the map has to grow;
# * ``stage_chunk_keys``: batches over that many keys are staged and applied one chunk of
#   keys per transaction (the library's ``store.STAGE_CHUNK_KEYS``), so kills land in there;
# * ``write_delay``: seconds to sleep after each committed store transaction (a slow disk), so
#   that readers started while a count runs really do meet it running;
# * ``open_delay``: seconds to sleep right after each ``lmdb.open`` (a slow open), so that
#   another process commits in between;
# * ``hwm_file``: at exit, write the process's peak resident memory (VmHWM, kB) to this file
#   (the rusage of a child also counts the parent it was forked from, before its exec);
# * ``sigkill_at``: SIGKILL the process itself at an exact moment: ``"store_init"`` (the LMDB
#   files exist, the store's databases do not yet), ``"ensure_settings"`` (before the settings
#   are recorded in a new store: inside the first batch's transaction) or ``"replace:N"`` (just
#   before the N-th ``os.replace`` or directory exchange, i.e.
#   between the writes of a command that writes several files).
KNOBS_PRELUDE = r"""
import json, os, signal, sys, time
knobs = json.loads(os.environ.get("BPE_TEST_KNOBS") or "{}")
import bpe_stream.counting as counting, bpe_stream.store as store

def die(*args, **kwargs):
    os.kill(os.getpid(), signal.SIGKILL)

for knob in ("range_bytes", "chunk_bytes"):
    if knob in knobs:
        counting.count_sources.__kwdefaults__[knob] = knobs[knob]
if "initial_map" in knobs:
    store._INITIAL_MAP_SIZE = knobs["initial_map"]
if "stage_chunk_keys" in knobs:
    store.STAGE_CHUNK_KEYS = knobs["stage_chunk_keys"]
if "write_delay" in knobs:
    _write = store.Store.write
    def slow_write(self, fn):
        result = _write(self, fn)
        time.sleep(knobs["write_delay"])
        return result
    store.Store.write = slow_write
if "open_delay" in knobs:
    _lmdb_open = store.lmdb.open
    def slow_open(*args, **kwargs):
        env = _lmdb_open(*args, **kwargs)
        time.sleep(knobs["open_delay"])
        return env
    store.lmdb.open = slow_open
if "hwm_file" in knobs:
    import atexit
    def report_hwm():
        with open("/proc/self/status") as f:
            hwm = next(line.split()[1] for line in f if line.startswith("VmHWM:"))
        with open(knobs["hwm_file"], "w") as f:
            f.write(hwm)
    atexit.register(report_hwm)
at = knobs.get("sigkill_at", "")
if at == "store_init":
    store.Store.__init__ = die
elif at == "ensure_settings":  # the first batch's transaction, which records the settings
    store.Store.settings_in = die
elif at.startswith("replace:"):  # the N-th rename that publishes an output (file or directory)
    import bpe_stream.atomic as atomic
    n, calls = int(at.split(":")[1]), [0]
    def counted(real):
        def wrapper(*args, **kwargs):
            calls[0] += 1
            if calls[0] == n:
                die()
            return real(*args, **kwargs)
        return wrapper
    os.replace = counted(os.replace)
    atomic._exchange = counted(atomic._exchange)
from bpe_stream.cli import main
sys.argv[0] = "bpe-stream"
main()
"""


class Cmd:
    """A ``bpe-stream`` command line and its environment."""

    def __init__(self, *args, knobs: dict | None = None, env: dict | None = None):
        self.args = [str(a) for a in args]
        self.knobs = dict(knobs or {})
        self.extra_env = dict(env or {})

    @property
    def argv(self) -> list[str]:
        if self.knobs:
            return [sys.executable, "-c", KNOBS_PRELUDE, *self.args]
        return [sys.executable, "-m", "bpe_stream.cli", *self.args]

    @property
    def env(self) -> dict:
        env = dict(os.environ)
        env.pop("BPE_STREAM_STORE", None)
        env.pop("BPE_TEST_KNOBS", None)
        env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
        if self.knobs:
            env["BPE_TEST_KNOBS"] = json.dumps(self.knobs)
        env.update(self.extra_env)
        return env

    def __repr__(self):
        return "bpe-stream " + " ".join(self.args) + (f"  (knobs {self.knobs})" if self.knobs else "")


def start(cmd: Cmd, cwd, stdin=None, stderr=None, stdout=None) -> subprocess.Popen:
    """Starts ``cmd`` in a new session, so that killpg reaches its worker processes too."""
    return subprocess.Popen(
        cmd.argv, cwd=str(cwd), env=cmd.env, start_new_session=True,
        stdin=subprocess.DEVNULL if stdin is None else stdin,
        stdout=subprocess.DEVNULL if stdout is None else stdout,
        stderr=subprocess.DEVNULL if stderr is None else stderr,
    )


def run(cmd: Cmd, cwd, input: bytes | None = None, timeout: float = 120, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(cmd.argv, cwd=str(cwd), env=cmd.env, input=input if input is not None else b"",
                          capture_output=True, timeout=timeout, check=False, **kwargs)


def kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL to the whole process group, then reap it; no worker outlives the call."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            return
        time.sleep(0.01)


def kill_after(proc: subprocess.Popen, delay: float) -> bool:
    """SIGKILLs the process group after ``delay`` s; True if the process was still running then."""
    deadline = time.monotonic() + delay
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return False
        time.sleep(min(0.002, max(0.0, deadline - time.monotonic())))
    alive = proc.poll() is None
    kill_group(proc)
    return alive


def kill_when(proc: subprocess.Popen, condition: Callable[[], bool], jitter: float, timeout: float = 60) -> bool:
    """Polls ``condition`` while the process runs; once it holds, waits ``jitter`` s more and
    SIGKILLs the group.  True if the process was still running when killed."""
    deadline = time.monotonic() + timeout
    while proc.poll() is None and time.monotonic() < deadline:
        if condition():
            return kill_after(proc, jitter)
        time.sleep(0.002)
    if proc.poll() is None:
        kill_group(proc)
        raise AssertionError(f"condition not met within {timeout} s")
    return False


# -- the store's committed state -------------------------------------------------------
def snapshot(store_path) -> dict:
    """Words, totals and file records of a store, read in one transaction (read-only)."""
    from bpe_stream import Store

    with Store.open(str(store_path), readonly=True) as st, st.reader() as txn:
        return {
            "info": st.info(txn),
            "totals": st.totals(txn),
            "words": dict(st.iter_words(txn)),
            "unique_entries": st.unique_words(txn),
            "sources": {k: v for k, v in st.iter_sources(txn)},
            "checkpoint": _checkpoint(st, txn),
        }


def _checkpoint(st, txn):
    """The training checkpoint as {"fingerprint", "merges": [[left, right, count], ...]}."""
    try:
        from bpe_stream.store_checkpoint import read_checkpoint
    except ImportError:  # the first layout: everything in one record
        return st.get_train(b"checkpoint", txn)
    return read_checkpoint(st, txn)


def committed(store_path, what: str = "bytes") -> int:
    """A total of the store as committed now (``-1`` while it cannot be opened yet: this polls
    a store that another process may be creating; the tests check opening separately)."""
    import lmdb

    from bpe_stream import Store
    from bpe_stream.store import StoreError

    try:
        with Store.open(str(store_path), readonly=True) as st:
            if what == "checkpoint":
                with st.reader() as txn:
                    ck = _checkpoint(st, txn)
                return len(ck["merges"]) if ck else 0
            return st.totals().get(what, 0)
    except (StoreError, lmdb.Error):
        return -1


def oracle(texts: Iterable[bytes], specials: Sequence[str] = (EOT,)) -> tuple[Counter, int]:
    """(pretoken counts with bytes keys, number of special tokens) of documents given as
    bytes: the spec's GPT-2 pattern on the text between special tokens (at most one special
    token, so that ``str.split`` is the longest-match split)."""
    assert len(specials) <= 1
    counts: Counter = Counter()
    n_special = 0
    for data in texts:
        text = data.decode("utf-8", "surrogateescape")
        pieces = text.split(specials[0]) if specials else [text]
        n_special += len(pieces) - 1
        for piece in pieces:
            counts.update(p.encode("utf-8", "surrogateescape") for p in _GPT2.findall(piece))
    return counts, n_special


class PrefixOracle:
    """The oracle counts of byte prefixes of files, cached."""

    def __init__(self, files: dict[str, bytes], specials: Sequence[str] = (EOT,)):
        self.files = files
        self.specials = tuple(specials)
        self._cache: dict[tuple[str, int], tuple[Counter, int]] = {}

    def prefix(self, name: str, offset: int) -> tuple[Counter, int]:
        key = (name, offset)
        if key not in self._cache:
            self._cache[key] = oracle([self.files[name][:offset]], self.specials)
        return self._cache[key]

    def totals(self) -> dict:
        """The totals of one clean count of all the files."""
        counts: Counter = Counter()
        specials = 0
        for name, data in self.files.items():
            c, s = self.prefix(name, len(data))
            counts.update(c)
            specials += s
        return {
            "bytes": sum(map(len, self.files.values())), "documents": len(self.files) + specials,
            "pretokens": sum(counts.values()), "specials": specials, "unique": len(counts),
            "unique_bytes": sum(map(len, counts)),
        }

    def words(self) -> dict:
        counts: Counter = Counter()
        for name, data in self.files.items():
            counts.update(self.prefix(name, len(data))[0])
        return dict(counts)


def check_totals_agree(snap: dict) -> None:
    totals, words = snap["totals"], snap["words"]
    for key, value in totals.items():
        assert type(value) is int, f"total {key} is {type(value).__name__} {value!r}, not int"
    for word, n in words.items():
        assert type(n) is int and n > 0, (word, n)
    assert totals["pretokens"] == sum(words.values()), (totals, sum(words.values()))
    assert totals["unique"] == len(words) == snap["unique_entries"], (totals, len(words), snap["unique_entries"])
    assert totals["unique_bytes"] == sum(map(len, words)), totals


def check_partial_state(snap: dict, prefix_oracle: PrefixOracle) -> dict[str, int]:
    """Asserts that a store holds exactly the counts of one prefix of each file -- the prefix
    its record says is committed (nothing for a file without a record) -- and totals that
    agree: a state in which some batches were committed whole and the rest not at all.
    Returns the committed offset of each file."""
    check_totals_agree(snap)
    totals, words = snap["totals"], snap["words"]
    by_key = {os.fsencode(os.path.realpath(name)): name for name in prefix_oracle.files}
    unknown = set(snap["sources"]) - set(by_key)
    assert not unknown, f"records for files never counted: {unknown}"
    expected: Counter = Counter()
    specials = done = 0
    offsets: dict[str, int] = {}
    for key, name in by_key.items():
        record = snap["sources"].get(key)
        size = len(prefix_oracle.files[name])
        offset = 0 if record is None else record["offset"]
        assert type(offset) is int and 0 <= offset <= size, (name, record)
        if record is not None:
            assert record["size"] == size, (name, record)
            assert bool(record["done"]) == (offset == size), (name, record)
            done += bool(record["done"])
        counts, n_special = prefix_oracle.prefix(name, offset)
        expected.update(counts)
        specials += n_special
        offsets[name] = offset
    if words != dict(expected):
        differ = {k: (words.get(k), v) for k, v in expected.items() if words.get(k) != v}
        extra = {k: v for k, v in words.items() if k not in expected}
        raise AssertionError(
            f"the store's words are not the counts of the committed prefixes {offsets}: {len(differ)} differ "
            f"(store, expected) e.g. {list(differ.items())[:3]}; {len(extra)} unexpected e.g. {list(extra.items())[:3]}"
        )
    assert totals["bytes"] == sum(offsets.values()), (totals, offsets)
    assert totals["specials"] == specials, (totals, specials)
    assert totals["documents"] == done + specials, (totals, done, specials)
    return offsets


def write_slices(directory: Path, specs: Sequence[tuple[str, int, int]], prefix: str = "doc") -> dict[str, bytes]:
    """Writes ``(corpus file, start, length)`` slices of ../shared/data/corpora as files
    ``<prefix><i>.txt``; returns path -> bytes.  A slice starts after a newline."""
    directory.mkdir(parents=True, exist_ok=True)
    out = {}
    for i, (corpus, start, length) in enumerate(specs):
        with open(CORPORA / corpus, "rb") as f:
            f.seek(start)
            data = f.read(length + 4096)
        if start:
            data = data[data.index(b"\n") + 1:]
        data = data[:length]
        path = directory / f"{prefix}{i}.txt"
        path.write_bytes(data)
        out[str(path)] = data
    return out


def file_digest(path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def seeded(seed: int) -> random.Random:
    return random.Random(seed)
