"""Reliability (issue 7): kill -9 and Ctrl-C in the middle of ``count`` and ``train``.

Each test stops the real CLI at a moment named by its work, through the seams of
``tests/seams.py``: right after its N-th committed store transaction, its N-th applied chunk
of a staged batch or its N-th training checkpoint, with N drawn from a seeded generator among
the moments a clean run of the same command goes through.  So every seed reaches the same
states on any machine, however fast or loaded.  After each kill the test opens the store
read-only and checks that it holds exactly the counts of one committed prefix of each file
(``reliability_helpers.check_partial_state``, against an oracle that does not use
bpe_stream), and that rerunning the same command ends with exactly the words and totals of
one clean run.  Kills at random moments in real time, minutes long: ``benchmarks/stress.py``.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import threading
from collections import Counter

import pytest
import reliability_helpers as H
from conftest import assert_clean_error, ok, stderr_text
from reliability_helpers import EOT, TRAIN_ARGS, Cmd

from bpe_stream import Tokenizer


def _kill_rounds(cmd, cwd, store, point: str, clean_count: int, rng, rounds, prefix_oracle, peek=None):
    """Runs ``cmd`` up to ``rounds`` times, each SIGKILLed right after its N-th ``point``, and
    checks the store after each kill (``peek(store)`` first, if given).  N is drawn from
    1 .. a ``rounds``-th of the ``clean_count`` moments of a clean run, so the kills spread
    over the run and the first one always lands in its middle.  Stops when a run ends before
    its moment (nothing was left to count).  Returns (moment, committed offsets) per kill."""
    seen = []
    most = max(1, (clean_count - 1) // rounds)
    for _ in range(rounds):
        moment = f"{point}:{rng.randint(1, most)}"
        res = H.run(cmd.with_knobs(sigkill_at=moment), cwd)
        if res.returncode == 0:
            break
        assert res.returncode == -signal.SIGKILL, (moment, res)
        if peek is not None:
            peek(store)
        try:
            snap = H.snapshot(store)  # the store always opens
        except Exception as exc:
            raise AssertionError(
                f"after a kill at {moment}, the store does not open: {type(exc).__name__}: {exc}") from exc
        offsets = H.check_partial_state(snap, prefix_oracle)
        if seen:
            assert all(offsets[f] >= seen[-1][1][f] for f in offsets), f"a kill at {moment} lost committed counts"
        seen.append((moment, offsets))
    return seen


def _scratch(cmd: Cmd, store, scratch) -> Cmd:
    """The same command on another store."""
    return Cmd(*[str(scratch) if a == str(store) else a for a in cmd.args], knobs=cmd.knobs)


@pytest.mark.parametrize("workers, seed", [(1, 7), (2, 8)])
def test_count_kill9_at_random_moments_then_rerun_gives_one_clean_run(tmp_path, corpus_files, corpus_oracle,
                                                                       workers, seed):
    store = tmp_path / "store"
    # 64 kB ranges: every file is committed in several batches, so kills cut files in the middle
    # (and with two workers, 1.1 MB of them is counted by a pool, which dies with the parent)
    cmd = Cmd("count", "--store", store, "--special-token", EOT, "--max-memory", "1M", "-w", workers, *corpus_files,
              knobs={"range_bytes": 64 << 10})
    clean = tmp_path / "clean"
    commits = H.points(_scratch(cmd, store, clean), tmp_path)["commit"]
    total = sum(map(len, corpus_files.values()))
    seen = _kill_rounds(cmd, tmp_path, store, "commit", commits, H.seeded(seed), 5, corpus_oracle)
    assert seen and 0 < sum(seen[0][1].values()) < total, f"the first kill did not land mid-run: {seen}"
    last = H.check_partial_state(H.snapshot(store), corpus_oracle)
    res = ok(H.run(cmd, tmp_path))
    err = stderr_text(res)
    for name, offset in last.items():  # the rerun says where it takes up each file
        if offset == len(corpus_files[name]):
            assert f"skipped {name}" in err, err
        elif offset:
            assert f"resuming {name} at byte {offset:,}" in err, err
    final = H.snapshot(store)
    assert H.check_partial_state(final, corpus_oracle) == {n: len(d) for n, d in corpus_files.items()}
    assert final["words"] == corpus_oracle.words()
    assert final["totals"] == corpus_oracle.totals()
    # ... exactly what one clean run of the same command writes
    clean_snap = H.snapshot(clean)
    assert final["words"] == clean_snap["words"] and final["totals"] == clean_snap["totals"]


def test_count_kill9_while_large_batches_are_applied_in_key_ranges(tmp_path, corpus_files, corpus_oracle):
    """Batches staged and applied 200 keys per transaction, each run killed right after one
    of those transactions: the batch is left half applied, to be finished by whoever opens
    the store next (here the read-only snapshot, then the rerun), never half-counted, never
    twice."""
    store = tmp_path / "store"
    cmd = Cmd("count", "--store", store, "--special-token", EOT, "--max-memory", "1M", "-w", "1", *corpus_files,
              knobs={"range_bytes": 128 << 10, "stage_chunk_keys": 200})
    applied = H.points(_scratch(cmd, store, tmp_path / "clean"), tmp_path)["apply"]
    cut_off = []

    def peek(path):  # is a staged batch left half applied? (raw LMDB: opening would finish it)
        import lmdb

        with lmdb.open(str(path), readonly=True, max_dbs=8, subdir=True) as env:
            meta = env.open_db(b"meta", create=False)
            with env.begin() as txn:
                cut_off.append(txn.get(b"pending", db=meta) is not None)

    seen = _kill_rounds(cmd, tmp_path, store, "apply", applied, H.seeded(11), 8, corpus_oracle, peek)
    assert seen and all(cut_off) and len(cut_off) == len(seen), (
        f"a kill right after a staged chunk was applied left no batch half applied: {list(zip(seen, cut_off))}")
    ok(H.run(cmd, tmp_path))
    final = H.snapshot(store)
    assert final["words"] == corpus_oracle.words() and final["totals"] == corpus_oracle.totals()


def test_count_kill9_with_default_ranges_whole_files_per_batch(tmp_path, corpus_files, corpus_oracle):
    """The CLI's own range size (8 MiB: a range holds a whole file here, and the 1.1 MB of
    input is counted in this one process whatever ``-w`` says)."""
    store = tmp_path / "store"
    cmd = Cmd("count", "--store", store, "--special-token", EOT, "--max-memory", "1M", "-w", "2", *corpus_files)
    commits = H.points(_scratch(cmd, store, tmp_path / "clean"), tmp_path)["commit"]
    total = sum(map(len, corpus_files.values()))
    seen = _kill_rounds(cmd, tmp_path, store, "commit", commits, H.seeded(3), 3, corpus_oracle)
    assert seen and 0 < sum(seen[0][1].values()) < total, seen
    ok(H.run(cmd, tmp_path))
    final = H.snapshot(store)
    assert final["words"] == corpus_oracle.words() and final["totals"] == corpus_oracle.totals()


@pytest.mark.parametrize("moment", ["store_init", "ensure_settings"])
def test_count_kill9_while_the_store_is_being_created(tmp_path, moment):
    """SIGKILL between creating the LMDB files and recording the settings (a window of tens of
    milliseconds that every new store goes through): the store must still open, and the same
    command must then run."""
    doc = tmp_path / "a.txt"
    doc.write_bytes(b"hello world, hello store\n")
    store = tmp_path / "store"
    args = ("count", "--store", store, doc)
    res = H.run(Cmd(*args, knobs={"sigkill_at": moment}), tmp_path)
    assert res.returncode == -signal.SIGKILL, res
    assert (store / "data.mdb").exists()
    # what other commands see of it: nothing counted yet, or one clean error
    for other in (("stats", "--store", store), ("train", "--store", store, "-o", tmp_path / "t.json", "--num-merges", "5")):
        res = H.run(Cmd(*other), tmp_path)
        if res.returncode != 0:
            assert_clean_error(res)
    res = H.run(Cmd(*args), tmp_path)
    assert res.returncode == 0, f"after a kill at {moment}, rerunning {args} fails: {stderr_text(res)}"
    snap = H.snapshot(store)
    assert snap["words"] == dict(H.oracle([doc.read_bytes()], ())[0])


def test_stdin_kill9_keeps_exactly_the_committed_batches(tmp_path, corpus_files):
    """Stdin cannot be replayed: what a killed run committed stays (whole batches, each a
    prefix of the input cut at a safe point), no file record claims more."""
    data = b"".join(corpus_files.values())
    store = tmp_path / "store"
    # 32 kB pieces: the pool (2 workers, up to 4 pieces in flight) hands results back while
    # later pieces are submitted
    cmd = Cmd("count", "--store", store, "--special-token", EOT, "--max-memory", "1M", "-w", "2", "-",
              knobs={"range_bytes": 32 << 10, "chunk_bytes": 16 << 10})
    commits = H.points(_scratch(cmd, store, tmp_path / "clean"), tmp_path, input=data)["commit"]
    rng = H.seeded(5)
    kept = []
    expected: Counter = Counter()
    for _ in range(2):
        before = H.snapshot(store)["totals"]["bytes"] if store.exists() else 0
        # at most half way: the end of stdin, and so its last document, is never committed
        moment = f"commit:{rng.randint(1, commits // 2)}"
        res = H.run(cmd.with_knobs(sigkill_at=moment), tmp_path, input=data)
        assert res.returncode == -signal.SIGKILL, (moment, res)
        snap = H.snapshot(store)
        H.check_totals_agree(snap)
        assert snap["sources"] == {}, "stdin has no file record"
        kept.append(snap["totals"]["bytes"] - before)
        assert 0 < kept[-1] < len(data), (moment, kept)
        counts, _ = H.oracle([data[:kept[-1]]])
        expected += counts
        assert snap["words"] == dict(expected), f"the store is not the counts of stdin prefixes of {kept} bytes"
        specials = sum(H.oracle([data[:k]])[1] for k in kept)
        assert snap["totals"]["specials"] == specials and snap["totals"]["documents"] == specials
    # a later, whole run of stdin adds exactly the whole input on top
    before = H.snapshot(store)
    ok(H.run(cmd, tmp_path, input=data))
    after = H.snapshot(store)
    full, specials = H.oracle([data])
    assert Counter(after["words"]) == Counter(before["words"]) + full
    assert after["totals"]["bytes"] == before["totals"]["bytes"] + len(data)
    assert after["totals"]["documents"] == before["totals"]["documents"] + specials + 1


def _feed(proc, data):
    try:
        proc.stdin.write(data)
        proc.stdin.close()
    except (BrokenPipeError, ValueError, OSError):  # the process died or stopped reading
        pass


@pytest.mark.parametrize("moment, stage_chunk_keys", [
    ("commit:2", 1 << 30),  # every batch committed in one transaction: two batches whole
    # Ctrl-C between staging a batch and applying its last chunk: the staged batch is
    # committed (a kill -9 would be finished by the next opener), so the interrupted count
    # finishes it and says the store keeps it.
    ("apply:1", 200),
])
def test_stdin_interrupted_keeps_what_was_committed_and_says_so(tmp_path, corpus_files, moment, stage_chunk_keys):
    """Ctrl-C (SIGINT to the process group) while counting stdin, with the count paused right
    after a commit: the committed batches stay, and -- since stdin cannot be replayed -- the
    summary on stderr says exactly how much was kept."""
    data = b"".join(corpus_files.values())
    store = tmp_path / "store"
    pause = H.Pause(tmp_path, moment)
    cmd = Cmd("count", "--store", store, "--special-token", EOT, "--max-memory", "1M", "-w", "1", "-",
              knobs={"range_bytes": 32 << 10, "chunk_bytes": 16 << 10, "stage_chunk_keys": stage_chunk_keys,
                     **H.pause_knob(pause)})
    proc = H.start(cmd, tmp_path, stdin=subprocess.PIPE, stderr=subprocess.PIPE)
    threading.Thread(target=_feed, args=(proc, data), daemon=True).start()
    try:
        pause.wait(proc)
        os.killpg(proc.pid, signal.SIGINT)
        rc = proc.wait(timeout=H.HANG_TIMEOUT)  # (its stderr is one line: the pipe cannot fill)
        err = proc.stderr.read().decode("utf-8", "replace")
    finally:
        H.kill_group(proc)
    import lmdb

    with lmdb.open(str(store), readonly=True, max_dbs=8, subdir=True) as env:  # raw: opening would finish it
        meta = env.open_db(b"meta", create=False)
        with env.begin() as txn:
            assert txn.get(b"pending", db=meta) is None, (
                "the interrupted count left its staged batch for the next opener: what it said it keeps is not what the store keeps")
    snap = H.snapshot(store)
    H.check_totals_agree(snap)
    kept = snap["totals"]["bytes"]
    assert 0 < kept < len(data)
    assert snap["words"] == dict(H.oracle([data[:kept]])[0])
    assert rc != 0, "an interrupted count must not exit 0"
    assert "Traceback" not in err, err
    assert "stdin" in err and f"keeps the {kept:,} bytes" in err, (
        f"after Ctrl-C the store keeps {kept:,} bytes of stdin, but stderr does not say so: {err!r}")


@pytest.mark.parametrize("workers, stage_chunk_keys, seed", [(1, 1 << 30, 11), (2, 200, 12)])
def test_count_kill9_inside_a_native_store_write(tmp_path, corpus_files, corpus_oracle, workers, stage_chunk_keys,
                                                  seed):
    """Killed inside a transaction of the native store writer (its words merged, its records
    written, not committed; whole batches, or staged ones applied 200 keys a transaction):
    the store opens with whole batches only, and the rerun ends as one clean run."""
    if not H.native_store_writer():
        pytest.skip("the native store writer needs the C extension")
    store = tmp_path / "store"
    cmd = Cmd("count", "--store", store, "--special-token", EOT, "--max-memory", "1M", "-w", workers, *corpus_files,
              knobs={"range_bytes": 64 << 10, "stage_chunk_keys": stage_chunk_keys})
    natives = H.points(_scratch(cmd, store, tmp_path / "clean"), tmp_path)["native"]
    assert natives > 3, natives  # the batches are written natively
    seen = _kill_rounds(cmd, tmp_path, store, "native", natives, H.seeded(seed), 4, corpus_oracle)
    assert seen, "no kill landed"
    ok(H.run(cmd, tmp_path))
    final = H.snapshot(store)
    assert final["words"] == corpus_oracle.words() and final["totals"] == corpus_oracle.totals()


def test_ctrl_c_inside_a_native_store_write_keeps_whole_batches(tmp_path, corpus_files, corpus_oracle):
    """Ctrl-C while the native writer holds the store (paused before its 3rd commit): the
    transaction is aborted, py-lmdb's handle reopened, the count ends as an interrupted count
    does, and the store holds whole batches that the rerun completes."""
    if not H.native_store_writer():
        pytest.skip("the native store writer needs the C extension")
    store = tmp_path / "store"
    pause = H.Pause(tmp_path, "native:3")
    cmd = Cmd("count", "--store", store, "--special-token", EOT, "--max-memory", "1M", "-w", "1", *corpus_files,
              knobs={"range_bytes": 64 << 10, **H.pause_knob(pause)})
    proc = H.start(cmd, tmp_path, stderr=subprocess.PIPE)
    try:
        pause.wait(proc)
        os.killpg(proc.pid, signal.SIGINT)
        rc = proc.wait(timeout=H.HANG_TIMEOUT)
        err = proc.stderr.read().decode("utf-8", "replace")
    finally:
        H.kill_group(proc)
    assert rc == 130 and "Traceback" not in err, (rc, err)
    offsets = H.check_partial_state(H.snapshot(store), corpus_oracle)
    assert 0 < sum(offsets.values()) < sum(map(len, corpus_files.values())), offsets
    ok(H.run(Cmd(*cmd.args), tmp_path))
    final = H.snapshot(store)
    assert final["words"] == corpus_oracle.words() and final["totals"] == corpus_oracle.totals()


# -- train --------------------------------------------------------------------------------
@pytest.mark.parametrize("path, seed", [("memory", 1), ("disk", 3)])
def test_train_kill9_then_resume_gives_the_uninterrupted_tokenizer(tmp_path, train_base, path, seed):
    base, ref, checkpoints = train_base
    ref_tok = Tokenizer.load(ref)
    n_merges = len(ref_tok.merges)
    store, out = tmp_path / "store", tmp_path / "tok.json"
    shutil.copytree(base, store)
    out.write_bytes(b"the previous tokenizer file\n")
    cmd = Cmd("train", "--store", store, "-o", out, *TRAIN_ARGS, "--path", path)
    moment = f"checkpoint:{H.seeded(seed).randint(1, checkpoints - 1)}"  # before the last: the run is not over
    res = H.run(cmd.with_knobs(sigkill_at=moment), tmp_path)
    assert res.returncode == -signal.SIGKILL, (moment, res)
    assert out.read_bytes() == b"the previous tokenizer file\n", "a killed train touched its output"
    snap = H.snapshot(store)
    saved = [tuple(m[:2]) for m in snap["checkpoint"]["merges"]]
    assert 0 < len(saved) < n_merges, (moment, len(saved))
    assert saved == [m[:2] for m in ref_tok.merges[:len(saved)]], "the checkpoint is not a prefix of the run"
    assert all(type(m[2]) is int for m in snap["checkpoint"]["merges"])
    res = ok(H.run(Cmd(*cmd.args, "--resume"), tmp_path))
    assert f"resuming after {len(saved):,}" in stderr_text(res), stderr_text(res)
    assert out.read_bytes() == ref.read_bytes(), f"train --resume after a kill at {len(saved)} merges differs"


def test_train_resume_with_a_higher_min_count_equals_a_clean_run(cli, tmp_path, train_base):
    """A checkpoint holds merges with their counts; resuming with --min-count N must stop where
    an uninterrupted run with --min-count N stops, not replay the checkpoint's rarer merges."""
    base = train_base[0]
    store = tmp_path / "store"
    shutil.copytree(base, store)
    ok(cli("train", "--store", store, "-o", tmp_path / "all.json", "--num-merges", "600", "--checkpoint-every", "64"))
    ok(cli("train", "--store", store, "-o", tmp_path / "resumed.json", "--num-merges", "600", "--min-count", "1000",
           "--resume"))
    clean_store = tmp_path / "clean"
    shutil.copytree(base, clean_store)
    ok(cli("train", "--store", clean_store, "-o", tmp_path / "clean.json", "--num-merges", "600", "--min-count", "1000"))
    resumed, clean = Tokenizer.load(tmp_path / "resumed.json"), Tokenizer.load(tmp_path / "clean.json")
    assert len(clean.merges) < 600
    assert resumed.merges == clean.merges, (
        f"--resume --min-count 1000 gave {len(resumed.merges)} merges, a clean run {len(clean.merges)}")
