"""The training driver (``train_driver.drive``) and the engine interface it drives.

* a fake engine records the calls: the forced prefix first, in chunks, then learned merges
  in batches, a short batch ends the run, progress after every batch, checkpoints on the
  cadence by merge count (and by a clock the test turns, never by real time);
* every engine (Python, C, disk) keeps the interface's contract: state kept between calls,
  counts as applied, a threshold that stops a call leaves the pair for the next, words as
  pairs or as handed-over arrays -- the same merges from all of them.
"""

from __future__ import annotations

import random

import pytest

from bpe_stream.train import memory as memory_engines
from bpe_stream.train.memory import CEngine, PythonEngine
from bpe_stream.train.engine import WordArrays
from bpe_stream.train.disk import DiskEngine
from bpe_stream.train.driver import Checkpoints, MergeLog, drive

BYTES = [bytes([i]) for i in range(256)]


class FakeEngine:
    """Scripted merges: ``merge_best`` hands out ``learned`` in order while their counts reach
    the threshold; ``merge_given`` counts each pair as 7.  Every call is recorded."""

    def __init__(self, learned, on_call=None):
        self.learned = list(learned)
        self.calls = []
        self.on_call = on_call

    def load(self, words):
        self.calls.append(("load",))

    def merge_given(self, pairs):
        self.calls.append(("given", list(pairs)))
        if self.on_call:
            self.on_call()
        return [7] * len(pairs)

    def merge_best(self, n, min_count):
        self.calls.append(("best", n, min_count))
        if self.on_call:
            self.on_call()
        out = []
        while self.learned and len(out) < n and self.learned[0][2] >= min_count:
            out.append(self.learned.pop(0))
        return out

    def memory(self):
        return {}

    def close(self):
        self.calls.append(("close",))


def learned(n, first=1000):
    """n merges of falling counts."""
    return [(300 + i, 301 + i, first - i) for i in range(n)]


def forced(n):
    return [(i, i + 1) for i in range(n)]


def test_forced_prefix_first_in_chunks_then_learned_batches():
    engine = FakeEngine(learned(500))
    progress = []
    done = drive(engine, limit=300, min_count=1, forced=forced(150), every=64,
                 on_progress=lambda batch, n, limit: progress.append((len(batch), n, limit)))
    kinds = [(c[0], len(c[1])) if c[0] == "given" else c for c in engine.calls]
    assert kinds == [("given", 64), ("given", 64), ("given", 22), ("best", 64, 1), ("best", 64, 1), ("best", 22, 1)]
    assert [c[1] for c in engine.calls if c[0] == "given"] == [forced(150)[:64], forced(150)[64:128], forced(150)[128:]]
    assert list(done) == [(a, b, 7) for a, b in forced(150)] + learned(150)
    assert progress == [(64, 64, 300), (64, 128, 300), (22, 150, 300), (64, 214, 300), (64, 278, 300), (22, 300, 300)]


def test_a_short_batch_ends_the_run():
    engine = FakeEngine(learned(100))
    done = drive(engine, limit=1000, min_count=1, every=64)
    assert [c for c in engine.calls] == [("best", 64, 1), ("best", 64, 1)]  # 36 came back: no third call
    assert list(done) == learned(100)
    # the threshold goes to the engine; counts 1000, 999, ... reach 950 for 51 merges
    engine = FakeEngine(learned(100))
    assert len(drive(engine, limit=1000, min_count=950, every=64)) == 51
    assert engine.calls == [("best", 64, 950)]
    # an engine with nothing to merge: one call, no merges
    engine = FakeEngine([])
    assert len(drive(engine, limit=10, min_count=1)) == 0 and engine.calls == [("best", 10, 1)]


def test_the_limit_cuts_the_forced_prefix_and_asks_no_more():
    engine = FakeEngine(learned(10))
    done = drive(engine, limit=100, forced=forced(130), every=64)
    assert [(c[0], len(c[1])) for c in engine.calls] == [("given", 64), ("given", 36)]
    assert len(done) == 100
    engine = FakeEngine(learned(10))
    assert len(drive(engine, limit=0, forced=forced(5))) == 0 and engine.calls == []
    engine = FakeEngine(learned(200))  # exactly at the limit after a full batch: no extra call
    assert len(drive(engine, limit=128, every=64)) == 128 and len(engine.calls) == 2


def test_checkpoints_by_merge_count_and_at_the_end():
    saves = []
    cadence = Checkpoints(lambda log: saves.append(list(log)), every=100, seconds=1e9, clock=lambda: 0.0)
    engine = FakeEngine(learned(1000))
    done = drive(engine, limit=500, forced=forced(70), checkpoints=cadence, every=64)
    # batches end at 64, 70 (forced), 134, 198, 262, 326, 390, 454, 500
    assert [len(s) for s in saves] == [134, 262, 390, 500]
    assert saves[-1] == list(done) and all(s == list(done)[:len(s)] for s in saves)  # the whole log each time
    # nothing new since the last save: no save at the end; no merges at all: none
    saves.clear()
    drive(FakeEngine(learned(1000)), limit=128, checkpoints=dataclass_copy(cadence, every=64), every=64)
    assert [len(s) for s in saves] == [64, 128]
    saves.clear()
    drive(FakeEngine([]), limit=128, checkpoints=cadence)
    assert saves == []


def test_the_default_cadence_is_every_10000_merges_or_30_seconds_and_the_cli_uses_it():
    import inspect

    from bpe_stream.cli import commands as cli
    from bpe_stream.train import pipeline
    from bpe_stream.train.driver import CHECKPOINT_EVERY, CHECKPOINT_SECONDS, PROGRESS_EVERY

    assert (CHECKPOINT_EVERY, CHECKPOINT_SECONDS) == (10_000, 30.0)
    saves = []
    cadence = Checkpoints(lambda log: saves.append(len(log)), clock=lambda: 0.0)  # the defaults
    drive(FakeEngine(learned(25_000, first=10**6)), limit=25_000, checkpoints=cadence)
    # after the first batch (of PROGRESS_EVERY) at or past each 10,000 merges since the last save, and at the end
    first = -(-10_000 // PROGRESS_EVERY) * PROGRESS_EVERY
    assert saves == [first, 2 * first, 25_000]
    now = [0.0]
    saves.clear()
    drive(FakeEngine(learned(500, first=10**6), on_call=lambda: now.__setitem__(0, now[0] + 16.0)), limit=500,
          checkpoints=Checkpoints(lambda log: saves.append(len(log)), clock=lambda: now[0]))
    assert saves[0] == 2 * PROGRESS_EVERY and saves[-1] == 500  # 32 s: past the 30 s default
    # what `train` passes when the options are not given
    options = inspect.signature(cli.train).parameters
    assert options["checkpoint_every"].default.default == CHECKPOINT_EVERY
    assert options["checkpoint_seconds"].default.default == CHECKPOINT_SECONDS
    defaults = inspect.signature(pipeline.train_from_store).parameters
    assert defaults["checkpoint_every"].default == CHECKPOINT_EVERY
    assert defaults["checkpoint_seconds"].default == CHECKPOINT_SECONDS


def dataclass_copy(obj, **changes):
    import dataclasses

    return dataclasses.replace(obj, **changes)


def test_checkpoints_by_time_follow_the_clock_given():
    now = [0.0]

    def tick():
        now[0] += 10.0  # each engine call "takes" 10 s

    saves = []
    engine = FakeEngine(learned(1000), on_call=tick)
    cadence = Checkpoints(lambda log: saves.append(len(log)), every=10**9, seconds=25, clock=lambda: now[0])
    drive(engine, limit=64 * 7, checkpoints=cadence, every=64)
    assert saves == [64 * 3, 64 * 6, 64 * 7]  # 30 s after the start, 30 s after that, then the end
    saves.clear()
    drive(FakeEngine(learned(1000)), limit=200, every=64,
          checkpoints=Checkpoints(lambda log: saves.append(len(log)), every=10**9, seconds=0, clock=lambda: 0.0))
    assert saves == [64, 128, 192, 200]  # seconds=0: after every batch


def test_merge_log_hands_out_slices_of_triples():
    log = MergeLog(learned(3))
    assert log[1:] == learned(3)[1:] and list(log) == learned(3) and len(log) == 3


# -- the engines keep the interface's contract ------------------------------------------------
def tokens(marker):
    return BYTES + ([b"</w>"] if marker is not None else [])  # the marker, when there is one, is id 256


def python_engine(tmp_path, marker=None, tie="max-bytes"):
    return PythonEngine(tokens(marker), marker, tie)


def c_engine(tmp_path, marker=None, tie="max-bytes"):
    return CEngine(tokens(marker), marker, tie)


def disk_engine(tmp_path, marker=None, tie="max-bytes"):
    return DiskEngine(tokens(marker), marker, tie, str(tmp_path / f"scratch-{random.random()}"))


FACTORIES = [python_engine]
if memory_engines._fastbpe is not None:
    FACTORIES += [c_engine, disk_engine]
WORDS = [(b"abab", 3), (b"abc", 2), (b"a", 50), (b"bcbcbc", 1)]


@pytest.fixture(params=FACTORIES, ids=lambda f: f.__name__)
def make(request, tmp_path):
    engines = []

    def factory(**kw):
        engine = request.param(tmp_path, **kw)
        engines.append(engine)
        return engine

    yield factory
    for engine in engines:
        engine.close()


def test_an_engine_keeps_its_state_between_calls(make):
    whole = make()
    whole.load(WORDS)
    expected = whole.merge_best(100, 1)
    # (a, b) 3*2 + 2; then (b, c) is left only in "bcbcbc": 3, and beats (ab, ab) 3 on its bytes
    assert expected[:3] == [(97, 98, 8), (98, 99, 3), (256, 256, 3)]
    engine = make()
    engine.load(WORDS)
    assert engine.merge_best(1, 1) == expected[:1]
    assert engine.merge_best(5, 4) == []  # the best has 3: stopped, and still there
    assert engine.merge_given([(98, 99)]) == [3]
    assert engine.merge_best(100, 1) == expected[2:]
    assert engine.merge_best(3, 1) == []  # nothing left
    assert engine.merge_given([(97, 97), (256, 256)]) == [0, 0]  # applied whatever their counts
    assert isinstance(engine.memory(), dict)
    engine.close()
    engine.close()  # once closed, closing again does nothing


def test_an_engine_takes_pairs_or_handed_over_arrays_with_the_marker(make):
    by_pairs = make(marker=256)
    by_pairs.load(WORDS)
    arrays = WordArrays(256)
    arrays.add(WORDS)
    by_arrays = make(marker=256)
    by_arrays.load(arrays)
    assert len(arrays) == 0  # handed over
    merges = by_pairs.merge_best(100, 1)
    assert merges == by_arrays.merge_best(100, 1)
    assert (97, 256, 50) in merges  # "a" plus the marker is a word of two symbols


def test_every_engine_gives_the_same_merges(tmp_path):
    rng = random.Random(3)
    words = [(bytes(rng.choice(b"abcab_") for _ in range(rng.randint(1, 9))), rng.randint(1, 30)) for _ in range(200)]
    for tie in ("max-bytes", "min-bytes", "min-ids"):
        runs = []
        for factory in FACTORIES:
            engine = factory(tmp_path, marker=256, tie=tie)
            engine.load(words)
            runs.append(list(drive(engine, limit=150, min_count=2, forced=[(98, 97), (95, 256)], every=7)))
            engine.close()
        assert all(run == runs[0] for run in runs), tie
        assert runs[0][:2] == [(98, 97, runs[0][0][2]), (95, 256, runs[0][1][2])]



@pytest.mark.skipif(memory_engines._fastbpe is None, reason="the C extension is not built")
def test_the_c_engine_reports_its_times_in_the_line_the_benchmark_reads(monkeypatch, capsys):
    import re

    from bpe_stream.train.trainer import TrainConfig, Trainer

    monkeypatch.setenv("BPE_STREAM_DEBUG", "1")
    trainer = Trainer(TrainConfig(num_merges=3))
    trainer.feed(WORDS)
    trainer.train(engine="c")
    # benchmarks/run_bench.py parses this line (the merge loop section)
    found = re.search(r"merge loop: init ([\d.]+) s, merges ([\d.]+) s, (\d+) occurrences visited, (\d+) merged",
                      capsys.readouterr().err)
    # occurrences merged: (a, b) 3 (twice in abab, once in abc), (b, c) 3 (bcbcbc), (ab, ab) 1
    assert found and int(found.group(4)) == 3 + 3 + 1
