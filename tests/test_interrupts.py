"""Ctrl-C (issue 19, item 5): SIGINT to the whole process group of ``count --workers 2`` or
``encode --workers 2`` stops every worker, prints one line, exits 130, and leaves a store that
resumes exactly (an output file that is the old one).

The moment of the signal is reached through seams of ``tests/seams.py``,
never a sleep: the parent waits right after its N-th committed batch, or a worker waits inside
its N-th task; either writes a marker file, and the test sends SIGINT once it is there.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time

import pytest
import reliability_helpers as H
from reliability_helpers import EOT, Cmd

from bpe_stream.pretok.pretokenize import GPT2_PATTERN


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """Three slices of the reference corpora, 480 kB in all."""
    return H.write_slices(tmp_path_factory.mktemp("input"), [
        ("en_100M.txt", 0, 200_000), ("code_25M.txt", 500_000, 120_000), ("multi_25M.txt", 1_000_001, 160_000),
    ])


def _wait_for(marker, proc, limit: float = 120.0) -> None:
    """Until the process under test writes ``marker`` (a seam, not a delay); fails if it ends first."""
    deadline = time.monotonic() + limit
    while not os.path.exists(marker):
        assert proc.poll() is None, f"the command ended (exit {proc.returncode}) before reaching the seam"
        assert time.monotonic() < deadline, "the seam was never reached"
        time.sleep(0.01)


def _interrupt(proc, marker) -> tuple:
    """SIGINT to the process group once ``marker`` exists; returns (exit status, stderr lines)."""
    try:
        _wait_for(marker, proc)
        os.killpg(proc.pid, signal.SIGINT)
        err = proc.stderr.read().decode("utf-8", "replace")
        rc = proc.wait(timeout=120)  # a deadlock fails here instead of hanging the suite
    finally:
        still_there = _group_alive(proc.pid)
        H.kill_group(proc)
    assert not still_there, "a worker outlived the interrupted command"
    return rc, [line for line in err.splitlines() if line.strip()]


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


# Plain files with a named pretokenizer are counted on threads; a regex: pattern (here the
# GPT-2 pattern itself, so that the oracle holds) on worker processes, a file a task (three
# tasks on two workers: one of them gets a second).
PROCESSES = ("--pretokenizer", "regex:" + GPT2_PATTERN)
COUNT_PAUSES = {
    # the parent, right after its second committed batch (threads busy with later ranges)
    "parent-after-a-batch": ((), lambda marker: {"pause_after_batch": {"n": 2, "marker": marker}}),
    # a counting thread, inside its third range (the parent waits for that result)
    "thread-inside-a-task": ((), lambda marker: {"pause_in_task": {"function": "bpe_stream.count.counting.count_range_shared",
                                                                   "n": 3, "marker": marker}}),
    # a counting thread packing its kept table for the flush (the parent waits for it, every
    # range in flight taken already): a budget whose tables never fill, so that the one flush
    # at the end packs at least one, whichever thread counted which range
    "thread-packing-its-kept-table": (("--max-memory", "1G"), lambda marker: {"pause_in_task": {"function": "bpe_stream.count.counting._take_table",
                                                                            "n": 1, "marker": marker}}),
    # the same with worker processes
    "parent-after-a-batch-of-workers": (PROCESSES, lambda marker: {"pause_after_batch": {"n": 2, "marker": marker}}),
    "worker-inside-a-task": (PROCESSES, lambda marker: {"pause_in_task": {"function": "bpe_stream.count.counting.count_range",
                                                                          "n": 2, "marker": marker}}),
}


@pytest.mark.parametrize("moment", sorted(COUNT_PAUSES))
def test_ctrl_c_during_count_with_two_workers_stops_them_and_the_store_resumes_exactly(tmp_path, files, moment):
    store = tmp_path / "store"
    marker = tmp_path / "paused"
    extra, pause = COUNT_PAUSES[moment]
    args = ("count", "--store", store, "--special-token", EOT, "--max-memory", "1M", "-w", "2", *extra, *files)
    knobs = dict({"range_bytes": 32 << 10}, **pause(str(marker)))
    proc = H.start(Cmd(*args, knobs=knobs), tmp_path, stderr=subprocess.PIPE)
    rc, lines = _interrupt(proc, marker)
    assert rc == 130, (rc, lines)
    assert len(lines) == 1 and lines[0].startswith("interrupted"), lines
    oracle = H.PrefixOracle(files)
    H.check_partial_state(H.snapshot(store), oracle)  # whole batches only
    res = H.run(Cmd(*args, knobs={"range_bytes": 32 << 10}), tmp_path)
    assert res.returncode == 0, res.stderr.decode()
    final = H.snapshot(store)
    assert final["words"] == oracle.words() and final["totals"] == oracle.totals()


def test_ctrl_c_while_one_workers_check_thread_rereads_a_range_stops_and_the_store_resumes_exactly(tmp_path, files):
    """-w1 counts in this process while a thread re-reads and hashes the range for the file's
    record (``sources.HashedBeside``): Ctrl-C with that thread paused inside its second range
    ends the count with the one line, no thread left waiting, and the store resumes exactly."""
    store = tmp_path / "store"
    marker = tmp_path / "paused"
    args = ("count", "--store", store, "--special-token", EOT, "--max-memory", "1M", "-w", "1", *files)
    knobs = {"range_bytes": 32 << 10, "beside_bytes": 0,
             "pause_in_task": {"function": "bpe_stream.count.seen_files.feed", "n": 2, "marker": str(marker)}}
    proc = H.start(Cmd(*args, knobs=knobs), tmp_path, stderr=subprocess.PIPE)
    rc, lines = _interrupt(proc, marker)
    assert rc == 130, (rc, lines)
    assert len(lines) == 1 and lines[0].startswith("interrupted"), lines
    oracle = H.PrefixOracle(files)
    H.check_partial_state(H.snapshot(store), oracle)  # whole batches only
    res = H.run(Cmd(*args, knobs={"range_bytes": 32 << 10}), tmp_path)
    assert res.returncode == 0, res.stderr.decode()
    final = H.snapshot(store)
    assert final["words"] == oracle.words() and final["totals"] == oracle.totals()


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory, files):
    directory = tmp_path_factory.mktemp("tok")
    store, tok = directory / "store", directory / "tok.json"
    for args in (("count", "--store", store, "-w", "1", *files), ("train", "--store", store, "--vocab-size", "400",
                                                                    "-o", tok)):
        res = H.run(Cmd(*args, "-q"), directory)
        assert res.returncode == 0, res.stderr.decode()
    return tok


def test_ctrl_c_during_encode_with_two_workers_stops_them_and_keeps_the_old_output(tmp_path, files, tokenizer):
    doc = tmp_path / "doc.txt"
    doc.write_bytes(b"".join(files.values()))
    out = tmp_path / "out.ids"
    out.write_bytes(b"the old output\n")
    marker = tmp_path / "paused"
    knobs = {"piece_chars": 16 << 10,
             "pause_in_task": {"function": "bpe_stream.encode.parallel._encode_bytes", "n": 4, "marker": str(marker)}}
    proc = H.start(Cmd("encode", "-t", tokenizer, "-w", "2", "-o", out, doc, knobs=knobs), tmp_path,
                   stderr=subprocess.PIPE)
    rc, lines = _interrupt(proc, marker)
    assert rc == 130, (rc, lines)
    assert len(lines) == 1 and lines[0].startswith("interrupted"), lines
    assert out.read_bytes() == b"the old output\n"
    left = sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith("paused"))
    assert left == ["doc.txt", "out.ids"], f"a temporary file was left: {left}"


def test_a_worker_killed_from_outside_is_one_error_line_not_a_hang(tmp_path, files):
    """The out-of-memory killer (here: SIGKILL to the worker the seam holds): the parent reads
    end-of-file on that worker's pipe, says so in one Error line, and the store resumes."""
    store = tmp_path / "store"
    marker = tmp_path / "paused"
    args = ("count", "--store", store, "--special-token", EOT, "--max-memory", "1M", "-w", "2", *PROCESSES, *files)
    knobs = {"range_bytes": 32 << 10,
             "pause_in_task": {"function": "bpe_stream.count.counting.count_range", "n": 2, "marker": str(marker)}}
    proc = H.start(Cmd(*args, knobs=knobs), tmp_path, stderr=subprocess.PIPE)
    try:
        _wait_for(marker, proc)
        os.kill(int(marker.read_text()), signal.SIGKILL)
        err = proc.stderr.read().decode("utf-8", "replace")
        rc = proc.wait(timeout=120)
    finally:
        H.kill_group(proc)
    lines = [line for line in err.splitlines() if line.strip()]
    assert rc == 1 and len(lines) == 1 and lines[0].startswith("Error: a worker process was killed by SIGKILL"), (rc, lines)
    oracle = H.PrefixOracle(files)
    H.check_partial_state(H.snapshot(store), oracle)
    assert H.run(Cmd(*args), tmp_path).returncode == 0
    assert H.snapshot(store)["words"] == oracle.words()
