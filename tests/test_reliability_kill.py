"""Reliability (issue 7): kill -9 and Ctrl-C in the middle of ``count`` and ``train``.

The kill tests run the real CLI (``python -m bpe_stream.cli``) in its own process group and
SIGKILL the group -- after a seeded random delay, or once the store shows that a random
share of the input is committed, plus a random few milliseconds -- then open the store
read-only and check that it holds exactly the counts of one committed prefix of each file
(see ``reliability_helpers.check_partial_state``, against an oracle that does not use
bpe_stream), and that rerunning the same command ends with exactly the words and totals of
one clean run.  Longer, many-times versions: ``benchmarks/stress.py``.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import threading
import time
from collections import Counter

import pytest
import reliability_helpers as H
from conftest import assert_clean_error, ok, stderr_text
from reliability_helpers import EOT, TRAIN_ARGS, Cmd

from bpe_stream import Tokenizer


def _kill_rounds(cmd, cwd, store, total, rng, rounds, prefix_oracle, peek=None):
    """Runs ``cmd`` up to ``rounds`` times, each killed with SIGKILL at a random moment, and
    checks the store after each kill (``peek(store)`` first, if given).  Returns the states
    seen, as (killed, offsets)."""
    seen = []
    for i in range(rounds):
        done = max(0, H.committed(store))
        if done >= total:
            break
        proc = H.start(cmd, cwd)
        if i == 0:
            moment = f"{rng.uniform(0.05, 0.8):.3f} s after the start"  # start-up, store creation, first batch
            killed = H.kill_after(proc, float(moment.split()[0]))
        else:
            target = rng.uniform(done + 1, total)
            moment = f"once {target:,.0f} bytes were committed"
            killed = H.kill_when(proc, lambda target=target: H.committed(store) >= target, jitter=rng.uniform(0, 0.03))
        data = store / "data.mdb"
        if not data.exists() or data.stat().st_size == 0:
            # killed before LMDB wrote its first page: opening says "empty, run count first"
            # (tested in test_count_kill9_while_the_store_is_being_created)
            seen.append((killed, None))
            continue
        if peek is not None:
            peek(store)
        try:
            snap = H.snapshot(store)  # the store always opens
        except Exception as exc:
            raise AssertionError(f"after a kill {moment}, the store does not open: {type(exc).__name__}: {exc}") from exc
        seen.append((killed, H.check_partial_state(snap, prefix_oracle)))
    return seen


def _feed(proc, data, held_back=0, release=None):
    """Writes ``data`` to the process's stdin; with ``release``, the last ``held_back`` bytes wait
    until that event is set, so the process cannot finish the input before the test kills it."""
    try:
        proc.stdin.write(data[:len(data) - held_back])
        proc.stdin.flush()
        if release is not None:
            release.wait()
        proc.stdin.write(data[len(data) - held_back:])
        proc.stdin.close()
    except (BrokenPipeError, ValueError, OSError):
        pass


def test_count_kill9_at_random_moments_then_rerun_gives_one_clean_run(tmp_path, corpus_files, corpus_oracle):
    workers, seed = 1, 7
    store = tmp_path / "store"
    args = ["count", "--store", store, "--special-token", EOT, "--max-memory", "1M", "-w", workers, *corpus_files]
    # 64 kB ranges: every file is committed in several batches, so kills cut files in the middle
    cmd = Cmd(*args, knobs={"range_bytes": 64 << 10})
    total = sum(map(len, corpus_files.values()))
    seen = _kill_rounds(cmd, tmp_path, store, total, H.seeded(seed), 5, corpus_oracle)
    mid_run = [offs for killed, offs in seen if killed and offs and 0 < sum(offs.values()) < total]
    assert mid_run, f"no kill landed in the middle of the run: {seen}"
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
    clean = tmp_path / "clean"
    ok(H.run(Cmd(*[clean if a == store else a for a in args], knobs=cmd.knobs), tmp_path))
    clean_snap = H.snapshot(clean)
    assert final["words"] == clean_snap["words"] and final["totals"] == clean_snap["totals"]


def test_count_kill9_while_large_batches_are_applied_in_key_ranges(tmp_path, corpus_files, corpus_oracle):
    """Batches staged and applied 200 keys per transaction: a kill in the middle of applying
    one leaves it to be finished by whoever opens the store next (here the read-only
    snapshot, then the rerun), never half-counted, never twice."""
    store = tmp_path / "store"
    args = ["count", "--store", store, "--special-token", EOT, "--max-memory", "1M", "-w", "1", *corpus_files]
    cmd = Cmd(*args, knobs={"range_bytes": 128 << 10, "stage_chunk_keys": 200})
    total = sum(map(len, corpus_files.values()))
    cut_off = []

    def peek(path):  # was a staged batch left half-applied? (raw LMDB: opening would finish it)
        import lmdb

        with lmdb.open(str(path), readonly=True, max_dbs=8, subdir=True) as env:
            try:
                meta = env.open_db(b"meta", create=False)
            except lmdb.NotFoundError:  # killed before the tables existed
                cut_off.append(False)
                return
            with env.begin() as txn:
                cut_off.append(txn.get(b"pending", db=meta) is not None)

    seen = _kill_rounds(cmd, tmp_path, store, total, H.seeded(11), 8, corpus_oracle, peek)
    assert any(cut_off), f"no kill landed while a batch was being applied: {seen}"
    ok(H.run(cmd, tmp_path))
    final = H.snapshot(store)
    assert final["words"] == corpus_oracle.words() and final["totals"] == corpus_oracle.totals()


def test_count_kill9_with_default_ranges_whole_files_per_batch(tmp_path, corpus_files, corpus_oracle):
    """The CLI exactly as shipped (8 MiB ranges: a batch holds whole files), with a pool of workers."""
    store = tmp_path / "store"
    cmd = Cmd("count", "--store", store, "--special-token", EOT, "--max-memory", "1M", "-w", "2", *corpus_files)
    total = sum(map(len, corpus_files.values()))
    seen = _kill_rounds(cmd, tmp_path, store, total, H.seeded(3), 3, corpus_oracle)
    assert any(offs and 0 < sum(offs.values()) < total for _, offs in seen), seen
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
    # later pieces are submitted, so most of what was fed gets committed before the kill
    cmd = Cmd("count", "--store", store, "--special-token", EOT, "--max-memory", "1M", "-w", "2", "-",
              knobs={"range_bytes": 32 << 10, "chunk_bytes": 16 << 10})
    rng = H.seeded(5)
    kept = []
    expected: Counter = Counter()
    for _ in range(2):
        before = max(0, H.committed(store))
        proc = H.start(cmd, tmp_path, stdin=subprocess.PIPE)
        # the last 20% is held back until the kill: on a fast machine the whole input would
        # otherwise be counted before the first poll sees a commit
        release = threading.Event()
        threading.Thread(target=_feed, args=(proc, data, len(data) // 5, release), daemon=True).start()
        target = before + rng.uniform(1, len(data) * 0.4)
        try:
            assert H.kill_when(proc, lambda target=target: H.committed(store) >= target, jitter=rng.uniform(0, 0.02))
        finally:
            release.set()
        snap = H.snapshot(store)
        H.check_totals_agree(snap)
        assert snap["sources"] == {}, "stdin has no file record"
        kept.append(snap["totals"]["bytes"] - before)
        assert 0 < kept[-1] <= len(data) - len(data) // 5, kept
        counts, _ = H.oracle([data[:kept[-1]]])
        expected += counts
        assert snap["words"] == dict(expected), f"the store is not the counts of stdin prefixes of {kept} bytes"
        specials = sum(H.oracle([data[:k]])[1] for k in kept)
        # the end of stdin was held back, so no run got to count its last document
        assert snap["totals"]["specials"] == specials and snap["totals"]["documents"] == specials
    # a later, whole run of stdin adds exactly the whole input on top
    before = H.snapshot(store)
    ok(H.run(cmd, tmp_path, input=data))
    after = H.snapshot(store)
    full, specials = H.oracle([data])
    assert Counter(after["words"]) == Counter(before["words"]) + full
    assert after["totals"]["bytes"] == before["totals"]["bytes"] + len(data)
    assert after["totals"]["documents"] == before["totals"]["documents"] + specials + 1


def test_stdin_interrupted_keeps_what_was_committed_and_says_so(tmp_path, corpus_files):
    """Ctrl-C (SIGINT to the process group) while counting stdin: the committed batches stay,
    and -- since stdin cannot be replayed -- the summary on stderr says how much was kept."""
    data = b"".join(corpus_files.values())
    store = tmp_path / "store"
    cmd = Cmd("count", "--store", store, "--special-token", EOT, "--max-memory", "1M", "-w", "1", "-",
              knobs={"range_bytes": 32 << 10, "chunk_bytes": 16 << 10, "write_delay": 0.05})
    proc = H.start(cmd, tmp_path, stdin=subprocess.PIPE, stderr=subprocess.PIPE)
    threading.Thread(target=_feed, args=(proc, data), daemon=True).start()
    deadline = time.monotonic() + 60
    while H.committed(store) <= 0 and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.005)
    assert proc.poll() is None, "the count ended before it could be interrupted"
    os.killpg(proc.pid, signal.SIGINT)
    try:
        err = proc.stderr.read().decode("utf-8", "replace")
        rc = proc.wait(timeout=30)
    finally:
        H.kill_group(proc)
    snap = H.snapshot(store)
    H.check_totals_agree(snap)
    kept = snap["totals"]["bytes"]
    assert 0 < kept < len(data)
    assert snap["words"] == dict(H.oracle([data[:kept]])[0])
    assert rc != 0, "an interrupted count must not exit 0"
    assert "Traceback" not in err, err
    assert "stdin" in err and (f"{kept:,}" in err or str(kept) in err), (
        f"after Ctrl-C the store keeps {kept:,} bytes of stdin, but stderr does not say so: {err!r}")



@pytest.mark.parametrize("path, seeds", [("memory", (1,)), ("disk", (3,))])
def test_train_kill9_then_resume_gives_the_uninterrupted_tokenizer(tmp_path, train_base, path, seeds):
    base, ref = train_base
    ref_tok = Tokenizer.load(ref)
    n_merges = len(ref_tok.merges)
    for seed in seeds:
        rng = H.seeded(seed)
        store, out = tmp_path / f"store{seed}", tmp_path / f"tok{seed}.json"
        shutil.copytree(base, store)
        out.write_bytes(b"the previous tokenizer file\n")
        # 20 ms after each checkpoint's commit: the last 300 merges take longer than the kill's
        # jitter (the in-memory loop alone runs them in a few milliseconds)
        cmd = Cmd("train", "--store", store, "-o", out, *TRAIN_ARGS, "--path", path, knobs={"write_delay": 0.02})
        target = rng.randint(64, n_merges - 300)
        proc = H.start(cmd, tmp_path)
        assert H.kill_when(proc, lambda store=store, target=target: H.committed(store, "checkpoint") >= target, jitter=rng.uniform(0, 0.05))
        assert out.read_bytes() == b"the previous tokenizer file\n", "a killed train touched its output"
        snap = H.snapshot(store)
        saved = [tuple(m[:2]) for m in snap["checkpoint"]["merges"]]
        # (a kill may land after the last checkpoint, before the tokenizer is written)
        assert target <= len(saved) <= n_merges
        assert saved == [m[:2] for m in ref_tok.merges[:len(saved)]], "the checkpoint is not a prefix of the run"
        assert all(type(m[2]) is int for m in snap["checkpoint"]["merges"])
        res = ok(H.run(Cmd(*cmd.args, "--resume"), tmp_path))
        assert f"resuming after {len(saved):,}" in stderr_text(res), stderr_text(res)
        assert out.read_bytes() == ref.read_bytes(), f"train --resume after a kill at {len(saved)} merges differs"


def test_train_resume_with_a_higher_min_count_equals_a_clean_run(cli, tmp_path, train_base):
    """A checkpoint holds merges with their counts; resuming with --min-count N must stop where
    an uninterrupted run with --min-count N stops, not replay the checkpoint's rarer merges."""
    base, _ = train_base
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


