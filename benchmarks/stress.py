"""Reliability stress (issue 7), minutes long and outside `make test`: the kill, race and
resume checks of tests/test_reliability_*.py repeated many times, with kills at random
moments in real time (a random delay, or once a random share of the input is committed).
The tests reach their moments through seams (tests/seams.py) and see the same states on any
machine; this script is where timing is random on purpose, to find the moments no seam names.

    .venv/bin/python benchmarks/stress.py                 # about 5 minutes, every scenario
    .venv/bin/python benchmarks/stress.py --minutes 1 --only count-kill,train-kill
    .venv/bin/python benchmarks/stress.py --seed 7        # reproduce a run

Scenarios (each round runs the real CLI in its own process group and checks the store with
an oracle that does not use bpe_stream, see tests/reliability_helpers.py):

* ``count-kill``: a multi-file ``count`` SIGKILLed 3-6 times at random moments (random delay,
  or once a random share of the input is committed), the store checked after each kill
  (whole batches only), then rerun: exactly one clean run's words and totals.
* ``stdin-kill``: ``count -`` killed at random moments: the store holds stdin prefixes.
* ``train-kill``: ``train`` killed after a random number of checkpoints, ``--resume``: the
  uninterrupted tokenizer, byte for byte (memory and disk paths).
* ``two-counts``: two ``count`` processes on one store with a small first map (both grow it).
* ``new-store-race``: two ``count`` processes creating the same new store at once.
* ``create-kill``: ``count`` killed within its first 100 ms, while the store is created.

Prints one line per round and a summary of failures by kind; exits 1 if any round failed.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections import Counter, defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO))

import reliability_helpers as H  # noqa: E402 - from tests/, put on the path above
from reliability_helpers import EOT, Cmd  # noqa: E402

SCENARIOS = ("count-kill", "stdin-kill", "train-kill", "two-counts", "new-store-race", "create-kill")


def kill_after(proc: subprocess.Popen, delay: float) -> bool:
    """SIGKILLs the process group after ``delay`` s; True if the process was still running then."""
    deadline = time.monotonic() + delay
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return False
        time.sleep(min(0.002, max(0.0, deadline - time.monotonic())))
    alive = proc.poll() is None
    H.kill_group(proc)
    return alive


def kill_when(proc: subprocess.Popen, condition, jitter: float, timeout: float = 60) -> bool:
    """Polls ``condition`` while the process runs; once it holds, waits ``jitter`` s more and
    SIGKILLs the group.  True if the process was still running when killed."""
    deadline = time.monotonic() + timeout
    while proc.poll() is None and time.monotonic() < deadline:
        if condition():
            return kill_after(proc, jitter)
        time.sleep(0.002)
    if proc.poll() is None:
        H.kill_group(proc)
        raise AssertionError(f"condition not met within {timeout} s")
    return False


def _feed(proc, data):
    try:
        proc.stdin.write(data)
        proc.stdin.close()
    except (BrokenPipeError, ValueError, OSError):
        pass


def _summary(err: bytes) -> str:
    import re

    text = err.decode("utf-8", "replace")
    frames = re.findall(r"([\w/.]+\.py:\d+ in \w+)", text)
    last = [line.strip() for line in text.splitlines() if line.strip()][-1:] or [""]
    return (" -> ".join(frames[-3:]) + " | " if frames else "") + last[0][:200]


class Stress:
    def __init__(self, work: Path, seed: int):
        self.work = work
        self.rng = H.seeded(seed)
        self.files = H.write_slices(work / "corpus", [
            ("en_100M.txt", 0, 300_000), ("code_25M.txt", 1_000_000, 200_000), ("multi_25M.txt", 2_000_001, 200_000),
            ("en_100M.txt", 5_000_000, 250_000), ("multi_25M.txt", 9_000_003, 150_000),
        ])
        self.oracle = H.PrefixOracle(self.files)
        self.total = sum(map(len, self.files.values()))
        self.n = 0
        self._train_base = None

    def fresh(self, name: str) -> Path:
        self.n += 1
        path = self.work / f"{name}-{self.n}"
        path.mkdir()
        return path

    # -- scenarios --------------------------------------------------------------------
    def count_kill(self) -> str:
        d = self.fresh("count")
        store = d / "store"
        workers = self.rng.choice([1, 2])
        knobs = self.rng.choice([{}, {"range_bytes": 64 << 10}, {"range_bytes": 16 << 10}])
        cmd = Cmd("count", "--store", store, "--special-token", EOT, "--max-memory", "1M", "-w", workers,
                  *self.files, knobs=knobs)
        kills = self.rng.randint(3, 6)
        states = []
        for _i in range(kills):
            done = max(0, H.committed(store))
            if done >= self.total:
                break
            proc = H.start(cmd, d)
            if self.rng.random() < 0.3:
                kill_after(proc, self.rng.uniform(0.05, 1.0))
            else:
                target = self.rng.uniform(done + 1, self.total)
                kill_when(proc, lambda target=target: H.committed(store) >= target, jitter=self.rng.uniform(0, 0.05))
            if (store / "data.mdb").exists():
                offsets = H.check_partial_state(H.snapshot(store), self.oracle)
                states.append(sum(offsets.values()))
        res = H.run(cmd, d)
        assert res.returncode == 0, f"rerun failed: {_summary(res.stderr)}"
        final = H.snapshot(store)
        assert final["words"] == self.oracle.words(), "rerun words differ from one clean run"
        assert final["totals"] == self.oracle.totals(), (final["totals"], self.oracle.totals())
        shutil.rmtree(d)
        return f"w={workers} knobs={knobs} committed after kills={states}"

    def stdin_kill(self) -> str:
        d = self.fresh("stdin")
        store = d / "store"
        data = b"".join(self.files.values())
        cmd = Cmd("count", "--store", store, "--special-token", EOT, "--max-memory", "1M",
                  "-w", self.rng.choice([1, 2]), "-", knobs={"range_bytes": 32 << 10, "chunk_bytes": 16 << 10})
        proc = H.start(cmd, d, stdin=subprocess.PIPE)
        threading.Thread(target=_feed, args=(proc, data), daemon=True).start()
        target = self.rng.uniform(1, len(data))
        kill_when(proc, lambda target=target: H.committed(store) >= target, jitter=self.rng.uniform(0, 0.05))
        snap = H.snapshot(store)
        H.check_totals_agree(snap)
        kept = snap["totals"]["bytes"]
        assert snap["words"] == dict(H.oracle([data[:kept]])[0]), f"not the counts of stdin's first {kept} bytes"
        assert snap["sources"] == {}
        shutil.rmtree(d)
        return f"kept {kept:,} of {len(data):,} bytes"

    def train_base(self):
        if self._train_base is None:
            from bpe_stream import Store
            from bpe_stream.count.counting import count_sources, make_settings
            from bpe_stream.inputs.reader import Source

            d = self.fresh("train-base")
            files = H.write_slices(d / "in", [("en_100M.txt", 20_000_000, 800_000), ("code_25M.txt", 5_000_000, 400_000)])
            base = d / "base"
            with Store.open(base, create=True) as st_:
                count_sources(st_, [Source.from_arg(p) for p in files], make_settings("gpt2", [EOT]))
            shutil.copytree(base, d / "ref-store")
            res = H.run(Cmd("train", "--store", d / "ref-store", "-o", d / "ref.json", "--vocab-size", "3000"), d)
            assert res.returncode == 0, _summary(res.stderr)
            self._train_base = base, d / "ref.json"
        return self._train_base

    def train_kill(self) -> str:
        base, ref = self.train_base()
        d = self.fresh("train")
        store, out = d / "store", d / "tok.json"
        shutil.copytree(base, store)
        path = self.rng.choice(["memory", "disk"])
        cmd = Cmd("train", "--store", store, "-o", out, "--vocab-size", "3000", "--checkpoint-every",
                  self.rng.choice(["64", "128", "500"]), "--checkpoint-seconds", "0", "--path", path)
        kills = []
        for _ in range(self.rng.randint(1, 3)):
            done = max(0, H.committed(store, "checkpoint"))
            if done >= 2600:
                break
            proc = H.start(cmd, d)
            target = self.rng.randint(done + 1, 2700)
            killed = kill_when(proc, lambda store=store, target=target: H.committed(store, "checkpoint") >= target,
                                 jitter=self.rng.uniform(0, 0.05))
            kills.append((killed, H.committed(store, "checkpoint")))
            assert not killed or not out.exists() or out.read_bytes() == ref.read_bytes(), "half-written output"
            cmd = Cmd(*cmd.args, "--resume") if "--resume" not in cmd.args else cmd
        res = H.run(Cmd(*[a for a in cmd.args if a != "--resume"], "--resume"), d)
        assert res.returncode == 0, _summary(res.stderr)
        assert out.read_bytes() == ref.read_bytes(), f"resume after kills at {kills} differs from the uninterrupted run"
        shutil.rmtree(d)
        return f"path={path} kills (killed, checkpointed merges)={kills}"

    def two_counts(self) -> str:
        from bpe_stream import Store
        from bpe_stream.count.counting import make_settings

        d = self.fresh("two")
        store = d / "store"
        with Store.open(store, create=True) as st_:
            st_.ensure_settings(make_settings("gpt2", [EOT]))
        names = list(self.files)
        self.rng.shuffle(names)
        cut = self.rng.randint(1, len(names) - 1)
        knobs = {"range_bytes": 64 << 10, "initial_map": 64 << 10}
        procs = [H.start(Cmd("count", "--store", store, "--max-memory", "1M", "-w", self.rng.choice([1, 2]), *part,
                             knobs=knobs), d, stderr=subprocess.PIPE) for part in (names[:cut], names[cut:])]
        results = [(p.stderr.read(), p.wait(timeout=300)) for p in procs]
        failed = [_summary(err) for err, rc in results if rc != 0]
        assert not failed, f"a concurrent count failed: {failed}"
        final = H.snapshot(store)
        assert final["words"] == self.oracle.words() and final["totals"] == self.oracle.totals(), "totals do not add up"
        shutil.rmtree(d)
        return "both finished, totals exact"

    def new_store_race(self) -> str:
        d = self.fresh("race")
        a, b = d / "a.txt", d / "b.txt"
        a.write_bytes(b"hello world " * 50)
        b.write_bytes(b"other words " * 50)
        store = d / "store"
        procs = [H.start(Cmd("count", "--store", store, "-w", "1", doc), d, stderr=subprocess.PIPE) for doc in (a, b)]
        results = [(p.stderr.read(), p.wait(timeout=60)) for p in procs]
        failed = [_summary(err) for err, rc in results if rc != 0]
        assert not failed, f"a count on a new store failed: {failed}"
        shutil.rmtree(d)
        return "both created/counted"

    def create_kill(self) -> str:
        d = self.fresh("create")
        store = d / "store"
        doc = d / "a.txt"
        doc.write_bytes(b"hello world\n")
        proc = H.start(Cmd("count", "--store", store, doc), d)
        # kill as soon as the store directory appears, plus 0-30 ms
        jitter = self.rng.uniform(0, 0.03)
        kill_when(proc, lambda: store.exists(), jitter=jitter, timeout=30)
        res = H.run(Cmd("stats", "--store", store), d)
        assert res.returncode in (0, 1) and b"Traceback" not in res.stderr, f"stats after the kill: {_summary(res.stderr)}"
        res = H.run(Cmd("count", "--store", store, doc), d)
        assert res.returncode == 0, f"count after a kill {jitter * 1000:.0f} ms into creation: {_summary(res.stderr)}"
        shutil.rmtree(d)
        return f"killed {jitter * 1000:.0f} ms after the store appeared"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=5.0)
    parser.add_argument("--seed", type=int, default=int(time.time()) % 100_000)
    parser.add_argument("--only", default=",".join(SCENARIOS), help="comma-separated scenarios")
    args = parser.parse_args(argv)
    chosen = [s for s in args.only.split(",") if s]
    unknown = set(chosen) - set(SCENARIOS)
    if unknown:
        parser.error(f"unknown scenarios {sorted(unknown)}; choose from {', '.join(SCENARIOS)}")
    work = Path(tempfile.mkdtemp(prefix="bpe-stress-"))
    print(f"seed {args.seed}, work dir {work}, {args.minutes} min, scenarios {', '.join(chosen)}", flush=True)
    stress = Stress(work, args.seed)
    deadline = time.monotonic() + 60 * args.minutes
    runs: Counter = Counter()
    failures = defaultdict(list)
    i = 0
    while time.monotonic() < deadline:
        name = chosen[i % len(chosen)]
        i += 1
        started = time.monotonic()
        try:
            note = getattr(stress, name.replace("-", "_"))()
            status = "ok"
        except AssertionError as exc:
            note, status = str(exc).splitlines()[0][:300] if str(exc) else repr(exc), "FAIL"
            failures[name].append(note)
        except Exception as exc:  # noqa: BLE001 - a crash of the harness or of bpe_stream's library
            note, status = f"{type(exc).__name__}: {exc}"[:300], "FAIL"
            failures[name].append(note + " | " + traceback.format_exc().splitlines()[-3].strip())
        runs[name] += 1
        print(f"{status:4} {name:15} {time.monotonic() - started:5.1f}s  {note}", flush=True)
    print("\nsummary:")
    for name in chosen:
        print(f"  {name:15} {runs[name]:4} rounds, {len(failures[name])} failed")
        for note, n in Counter(failures[name]).most_common(5):
            print(f"      {n} x {note}")
    failed = any(failures.values())  # (the summary's look-ups added an empty list per scenario)
    if not failed:
        shutil.rmtree(work, ignore_errors=True)
    else:
        print(f"work dir kept: {work}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
