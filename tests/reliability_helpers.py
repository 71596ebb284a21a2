"""Helpers shared by the tests/test_reliability_*.py files and benchmarks/stress.py: running
the real CLI in its own process group (with the test seams of ``tests/seams.py``), pausing it
at a seam, killing the group, reading a store's committed state in one read transaction, and
an independent oracle for the counts of byte prefixes of files.

No helper here waits for a duration: a test reaches a moment of a command through a seam
(``sigkill_at``, ``pause_at``), so it sees the same states on a machine ten times faster or
slower.  The only clock is ``HANG_TIMEOUT``, which only a hang (a bug) ever reaches.

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
import tempfile
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path

import regex

REPO = Path(__file__).resolve().parents[1]
DATA = REPO.parent / "shared" / "data"
CORPORA = DATA / "corpora"
EOT = "<|endoftext|>"
# ../shared/spec/bpe.md, character for character
GPT2_PATTERN = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
_GPT2 = regex.compile(GPT2_PATTERN)
DEFAULT_MAX_TOKEN_BYTES = 65536  # count's --max-token-bytes in a new store (README), spelt out: an oracle

SEAMS = REPO / "tests" / "seams.py"  # the CLI with test seams and knobs (see its docstring)
# Seconds after which a wait gives up: a guard against a hang, never a measure of speed (the
# commands here take well under a second each on a laptop).
HANG_TIMEOUT = 600


class Cmd:
    """A ``bpe-stream`` command line, its knobs (``tests/seams.py``) and its environment."""

    def __init__(self, *args, knobs: dict | None = None, env: dict | None = None):
        self.args = [str(a) for a in args]
        self.knobs = dict(knobs or {})
        self.extra_env = dict(env or {})

    def with_knobs(self, **knobs) -> "Cmd":
        """The same command with more knobs."""
        return Cmd(*self.args, knobs=dict(self.knobs, **knobs), env=self.extra_env)

    @property
    def argv(self) -> list[str]:
        if self.knobs:
            return [sys.executable, str(SEAMS), *self.args]
        return [sys.executable, "-m", "bpe_stream.cli.commands", *self.args]

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


def run(cmd: Cmd, cwd, input: bytes | None = None, **kwargs) -> subprocess.CompletedProcess:
    """Runs ``cmd`` to its end (or its death at a seam) in its own process group, then kills
    what is left of the group: the workers of a command killed at a seam die with it.  Output
    goes through files, so that orphaned workers holding a pipe cannot stall the read."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(cmd.argv, cwd=str(cwd), env=cmd.env, start_new_session=True,
                                stdin=subprocess.PIPE, stdout=out, stderr=err, **kwargs)
        try:
            proc.communicate(input if input is not None else b"", timeout=HANG_TIMEOUT)
        finally:
            kill_group(proc)
        out.seek(0)
        err.seek(0)
        return subprocess.CompletedProcess(cmd.argv, proc.returncode, out.read(), err.read())


def kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL to the whole process group, then reap it; no worker outlives the call (an
    orphaned worker may stay a zombie until init reaps it: dead, holding nothing)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()
    deadline = time.monotonic() + HANG_TIMEOUT
    while _live_members(proc.pid) and time.monotonic() < deadline:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            return
        time.sleep(0.001)


def _live_members(pgid: int) -> list[int]:
    """The processes of a process group that are not zombies (from /proc)."""
    live = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
        except OSError:  # gone meanwhile
            continue
        if int(fields[2]) == pgid and fields[0] != b"Z":
            live.append(int(entry.name))
    return live


def points(cmd: Cmd, cwd, input: bytes | None = None) -> Counter:
    """How often a clean run of ``cmd`` reaches each seam point (``{"commit": 58, ...}``): the
    range to draw a seeded moment from."""
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "points.json"
        res = run(cmd.with_knobs(points_file=str(report)), cwd, input=input)
        assert res.returncode == 0, res
        return Counter(json.loads(report.read_text()))


def native_store_writer() -> bool:
    """Whether counts write their batches with the native store writer (the C extension)."""
    from bpe_stream.store import lmdb_store

    return lmdb_store._StoreWriter is not None and lmdb_store.NATIVE_WRITES


class Pause:
    """A seam where a command waits (``pause_at`` of ``tests/seams.py``): give
    ``pause_knob(pause, ...)`` to the command, then ``pause.wait(proc)`` returns once the
    process has reached the moment and stands still there; ``pause.release()`` lets it go on
    (or kill it, or SIGINT it, where it stands)."""

    def __init__(self, directory, moment: str, name: str = "cmd"):
        self.moment = moment
        self.marker = Path(directory) / f"{name}-{moment.replace(':', '-')}.paused"

    def wait(self, proc: subprocess.Popen) -> None:
        deadline = time.monotonic() + HANG_TIMEOUT
        while not self.marker.exists():
            if proc.poll() is not None:
                raise AssertionError(f"{proc.args[2:]} ended (exit {proc.returncode}) before it reached {self.moment}")
            if time.monotonic() > deadline:
                kill_group(proc)
                raise AssertionError(f"{proc.args[2:]} hung: not at {self.moment} after {HANG_TIMEOUT} s")
            time.sleep(0.005)

    def release(self) -> None:
        Path(f"{self.marker}.go").touch()


def pause_knob(*pauses: Pause) -> dict:
    return {"pause_at": {p.moment: str(p.marker) for p in pauses}}


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
        from bpe_stream.store.checkpoint import read_checkpoint
    except ImportError:  # the first layout: everything in one record
        return st.get_train(b"checkpoint", txn)
    return read_checkpoint(st, txn)


def committed(store_path, what: str = "bytes") -> int:
    """A total of the store as committed now (``-1`` while it cannot be opened yet: this polls
    a store that another process may be creating; the tests check opening separately)."""
    import lmdb

    from bpe_stream import Store
    from bpe_stream.store.lmdb_store import StoreError

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
            for p in _GPT2.findall(piece):
                counts.update(capped(p.encode("utf-8", "surrogateescape")))
    return counts, n_special


def capped(pretoken: bytes, cap: int = DEFAULT_MAX_TOKEN_BYTES) -> list:
    """The pieces ``count`` stores for ``pretoken`` under ``--max-token-bytes cap`` (the
    default of a new store): longer than ``cap``, cut greedily at whole characters."""
    out = []
    while len(pretoken) > cap:
        used = 0
        for ch in pretoken.decode("utf-8", "surrogateescape"):
            width = len(ch.encode("utf-8", "surrogateescape"))
            if used + width > cap:
                break
            used += width
        out.append(pretoken[:used])
        pretoken = pretoken[used:]
    out.append(pretoken)
    return out


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


# The training of the reliability tests: 2,743 merges from ``train_base``, checkpointed at
# every progress report of the merge loop (``--checkpoint-seconds 0``: none is due to the clock).
TRAIN_ARGS = ("--vocab-size", "3000", "--checkpoint-every", "64", "--checkpoint-seconds", "0")
