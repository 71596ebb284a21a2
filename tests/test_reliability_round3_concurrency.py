"""Issue 39, item 12: two ``train`` runs at once on one store.  A checkpoint written by both
must stay one run's or the other's, whole, and ``train --resume`` must read it.

The moment is a seam (``tests/seams.py``'s ``pause_at``: right after run A's first committed
checkpoint), never a sleep: A stands still there while B trains to its end, then A goes on.
The library test interleaves two ``Checkpointer`` objects the same way, in one process.
"""

from __future__ import annotations

import shutil

import pytest
import reliability_helpers as H
from conftest import ok
from reliability_helpers import Cmd

from bpe_stream import Store
from bpe_stream.store.checkpoint import Checkpointer, read_checkpoint


def merges(n: int, salt: int) -> list:
    return [[256 + salt, i, 1000 - i] for i in range(n)]


@pytest.mark.parametrize("second", [3, 5])  # B's first save: as long as A's (a silent mix before), or not
def test_interleaved_checkpointers_leave_one_runs_checkpoint_whole(tmp_path, second):
    with Store.open(str(tmp_path / "s"), create=True) as st:
        a, b = Checkpointer(st, "fp"), Checkpointer(st, "fp")
        run_a, run_b = merges(9, 0), merges(9, 1)
        a.save(run_a[:3])
        assert read_checkpoint(st)["merges"] == run_a[:3]
        b.save(run_b[:second])
        assert read_checkpoint(st)["merges"] == run_b[:second]
        a.save(run_a[:6])  # A's next save finds B's checkpoint: A's, whole
        assert read_checkpoint(st)["merges"] == run_a[:6]
        b.save(run_b[:7])
        assert read_checkpoint(st)["merges"] == run_b[:7]
        b.save(run_b[:9])  # B's own again: appended
        assert read_checkpoint(st)["merges"] == run_b[:9]
        a.save(run_a[:9])
        assert read_checkpoint(st)["merges"] == run_a[:9]
        resumed = Checkpointer(st, "fp", read_checkpoint(st))
        a.save(run_a[:9] + merges(2, 2))  # A goes on after a resumed run started from its checkpoint
        resumed.save(run_a[:9] + merges(1, 3))  # ... and the resumed run's save replaces A's, whole
        assert read_checkpoint(st)["merges"] == run_a[:9] + merges(1, 3)


def test_two_trains_at_once_then_resume(tmp_path, corpus_files):
    """A pauses right after its first checkpoint (50 merges); B, with other settings (other
    counts, checkpoints of 70), trains to its end; then A goes on.  A's later saves found B's
    chunks under their head: ``--resume`` said the checkpoint was damaged (or, had the counts
    agreed, took a mix of both runs).  Now the checkpoint is A's, whole: the one a clean run
    of A leaves, and ``--resume`` continues it to the clean result."""
    ok(H.run(Cmd("count", "--store", "s", "--special-token", H.EOT, *list(corpus_files)[:2]), tmp_path))
    shutil.copytree(tmp_path / "s", tmp_path / "alone")
    train = ("train", "--vocab-size", 700, "--checkpoint-seconds", 1e9)
    a_args = (*train, "--checkpoint-every", 50)
    ok(H.run(Cmd(*a_args, "--store", "alone", "-o", "alone.json"), tmp_path))
    pause = H.Pause(tmp_path, "checkpoint:1", "a")
    proc = H.start(Cmd(*a_args, "--store", "s", "-o", "a.json", knobs=H.pause_knob(pause)), tmp_path)
    try:
        pause.wait(proc)
        ok(H.run(Cmd(*train, "--store", "s", "--checkpoint-every", 70, "--min-word-count", 3, "-o", "b.json"), tmp_path))
        pause.release()
        assert proc.wait(timeout=H.HANG_TIMEOUT) == 0
    finally:
        H.kill_group(proc)
    assert H.snapshot(tmp_path / "s")["checkpoint"] == H.snapshot(tmp_path / "alone")["checkpoint"]
    res = ok(H.run(Cmd("train", "--store", "s", "--vocab-size", 800, "--resume", "-o", "c.json"), tmp_path))
    assert b"resuming after" in res.stderr and b"damaged" not in res.stderr
    ok(H.run(Cmd("train", "--store", "alone", "--vocab-size", 800, "-o", "d.json"), tmp_path))
    assert (tmp_path / "c.json").read_bytes() == (tmp_path / "d.json").read_bytes()
