"""The plan of a training run from a store (``pipeline.plan_training``): decided from the store
and the options without side effects, then run by ``train_from_store``.

The plan for a few stores and options: effective settings (the caller's config untouched),
the path and its reason, the engine, the forced prefix of --from and --resume, what the run
will say, and the errors a plan refuses with.  And a resume from a checkpoint cut short by
--min-count, continued past it with --from, leaves a checkpoint the next --resume reads.
"""

from __future__ import annotations

import dataclasses
import os

import pytest

from bpe_stream import Store
from bpe_stream.count.counting import count_sources, make_settings
from bpe_stream.train.memory import _fastbpe
from bpe_stream.train.pipeline import TrainPlan, plan_training, train_from_store
from bpe_stream.inputs.reader import Source
from bpe_stream.store.lmdb_store import StoreError
from bpe_stream.store.checkpoint import read_checkpoint, write_checkpoint
from bpe_stream.train.trainer import TrainConfig, TrainError

from conftest import CS336

EOT = "<|endoftext|>"
needs_c = pytest.mark.skipif(_fastbpe is None, reason="the C extension is not built")


@pytest.fixture(scope="module")
def counted(tmp_path_factory):
    """A store of corpus.en with <|endoftext|> and the word-end marker "</w>"."""
    path = tmp_path_factory.mktemp("plan") / "store"
    with Store.open(path, create=True) as st:
        count_sources(st, [Source.from_arg(str(CS336 / "corpus.en"))], make_settings("gpt2", [EOT], end_of_word="</w>"))
    return path


def plan(store, config=None, **options) -> TrainPlan:
    # writable, as train opens it: a plan must write nothing even where it could (and a
    # read-only store's plan says it trains without checkpoints: test_readonly_store)
    with Store.open(store) as st:
        return plan_training(st, config or TrainConfig(vocab_size=600), **options)


def state(path):
    """The store's files and its checkpoint: what a plan must leave as it is."""
    with Store.open(path, readonly=True) as st:
        checkpoint = read_checkpoint(st)
    return sorted(os.listdir(path)), os.path.getsize(path / "data.mdb"), checkpoint


@needs_c
def test_the_plan_of_a_plain_run(counted):
    config = TrainConfig(vocab_size=600, special_tokens=["<x>"])
    before = state(counted)
    p = plan(counted, config, max_memory=4 << 30)
    assert state(counted) == before  # nothing written, no scratch table
    assert config == TrainConfig(vocab_size=600, special_tokens=["<x>"])  # the caller's config as given
    assert p.config.special_tokens == [EOT, "<x>"] and p.config.end_of_word == "</w>"
    assert p.config.vocab_size == 600 and p.limit == 600 - 256 - 3
    assert (p.path, p.engine, p.forced, p.resumed, p.budget) == ("memory", "c", (), None, 4 << 30)
    assert p.reason.startswith("estimated") and "fits the budget of 4,295 MB" in p.reason
    assert p.unique > 0 and p.symbols > p.unique and 0 < p.memory_estimate < 4 << 30
    assert p.messages == (f"training in memory ({p.unique:,} distinct pretokens, {p.symbols:,} symbols; {p.reason})",)
    assert p.settings["pretokenizer"] == "gpt2"
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.path = "disk"
    assert plan(counted, config, max_memory=4 << 30) == p  # the same store and options: the same plan


def test_the_in_memory_estimate_grows_with_the_merges_until_the_words_are_spent(counted):
    """The in-memory estimate (train/estimate.py): the symbols' tables, plus what the merges add
    -- growing with the merges up to a share of the words, and with the symbols; the plan asks
    it for the run's merges."""
    from bpe_stream.train import estimate

    words, symbols = 1_000_000, 15_000_000
    at = [estimate.estimate_train_memory(words, symbols, merges=m) for m in (0, 10_000, 40_000, 80_000, 160_000)]
    assert at[0] == estimate.BASE + estimate.C_PER_SYMBOL * symbols
    assert at[0] < at[1] < at[2] < at[3] == at[4]  # capped at C_MERGE_WORD_SHARE of the words: 80,000
    more_symbols = estimate.estimate_train_memory(words, 4 * symbols, merges=40_000)
    assert more_symbols - estimate.C_PER_SYMBOL * 3 * symbols > at[2]  # more variety: more pairs a merge
    assert estimate.estimate_train_memory(words, symbols) == estimate.estimate_train_memory(
        words, symbols, merges=estimate.DEFAULT_MERGES)
    few, many = plan(counted, TrainConfig(vocab_size=300)), plan(counted, TrainConfig(vocab_size=900))
    assert few.memory_estimate == estimate.estimate_train_memory(few.unique, few.symbols, merges=few.limit)
    assert few.memory_estimate <= many.memory_estimate


def test_the_disk_time_follows_the_positions_the_budget_leaves_in_the_file(counted, monkeypatch, tmp_path):
    """The disk path's estimated time (train/estimate.py): the in-memory time times a floor,
    plus what each dirty-background-limit's worth of positions left in the scratch file adds;
    the in-memory time takes no quota.  The plan passes its run quota; the limit comes from
    /proc/sys/vm (bytes when set, else a ratio of the available memory)."""
    from bpe_stream.train import estimate

    symbols, merges, limit = 362_000_000, 65_280, 2300 << 20
    memory = estimate.estimate_train_seconds(symbols, merges, False)
    assert estimate.estimate_train_seconds(symbols, merges, False, 1 << 30, limit) == memory
    times = [estimate.estimate_train_seconds(symbols, merges, True, quota, limit)
             for quota in (estimate.POSITION_BYTES * symbols, 2 << 30, 1 << 30, 0)]
    assert times[0] == pytest.approx(memory * estimate.DISK_TIME_FLOOR)  # every position in memory
    assert times[0] < times[1] < times[2] < times[3]
    in_file = estimate.POSITION_BYTES * symbols - (1 << 30)
    assert times[2] == pytest.approx(memory * (estimate.DISK_TIME_FLOOR + estimate.DISK_TIME_PER_DIRTY_LIMIT * in_file / limit))
    # the limit as the kernel states it
    monkeypatch.setattr(estimate, "VM_SYSCTL_DIR", str(tmp_path))
    monkeypatch.setattr(estimate, "available_memory", lambda: 20_000_000_000)
    assert estimate.dirty_background_limit() == 2_000_000_000  # nothing readable: 10%
    (tmp_path / "dirty_background_ratio").write_text("5\n")
    (tmp_path / "dirty_background_bytes").write_text("0\n")
    assert estimate.dirty_background_limit() == 1_000_000_000
    (tmp_path / "dirty_background_bytes").write_text("300000000\n")
    assert estimate.dirty_background_limit() == 300_000_000
    # the plan passes its run quota: a budget that keeps every position in memory plans less
    # time than one that keeps none
    low, high = plan(counted, TrainConfig(vocab_size=600), max_memory=30 << 20, path="disk"), \
        plan(counted, TrainConfig(vocab_size=600), max_memory=1 << 30, path="disk")
    assert low.scratch_run_quota < estimate.POSITION_BYTES * low.symbols <= high.scratch_run_quota
    for p in (low, high):
        assert p.seconds == pytest.approx(estimate.estimate_train_seconds(p.symbols, p.limit, True, p.scratch_run_quota))
    assert low.seconds > high.seconds


@needs_c
def test_the_path_follows_the_budget_or_the_option(counted):
    small = plan(counted, max_memory=1 << 20)
    assert (small.path, small.engine) == ("disk", "disk") and "exceeds the budget of 1 MB" in small.reason
    assert "on disk" in small.messages[0] and "scratch file" in small.messages[1]
    assert "smallest budget that holds it is --max-memory" in small.messages[2]
    asked = plan(counted, path="disk", max_memory=4 << 30)
    assert (asked.path, asked.reason, len(asked.messages)) == ("disk", "as asked", 2)
    # the budget before the disk: up to the rest of the budget of the tables stays in memory,
    # while loading (the words' arrays beside it) and after; nothing when no budget is left
    assert small.scratch_quota == small.scratch_run_quota == 0
    assert 0 < asked.scratch_quota <= asked.scratch_run_quota
    assert asked.disk_estimate + asked.scratch_quota <= asked.scratch_run_quota + (44 << 20) < 4 << 30
    assert "kept in memory" in asked.messages[1]
    python = plan(counted, engine="python", max_memory=4 << 30)
    assert (python.path, python.engine) == ("memory", "python")
    assert python.memory_estimate > plan(counted, max_memory=4 << 30).memory_estimate  # the Python engine's needs
    # the fingerprint names what merges depend on: not the vocabulary size, but the tie-break
    assert plan(counted, TrainConfig(vocab_size=900)).fingerprint == plan(counted).fingerprint
    assert plan(counted, TrainConfig(vocab_size=600, tie_break="min-ids")).fingerprint != plan(counted).fingerprint


@needs_c
def test_the_forced_prefix_of_from_and_resume(counted, tmp_path):
    store = tmp_path / "store"
    import shutil

    shutil.copytree(counted, store)
    assert plan(store, resume=True).messages[0].startswith("no checkpoint of this run to resume")
    with Store.open(store) as st:
        small, _ = train_from_store(st, TrainConfig(vocab_size=400), checkpoint_every=50, checkpoint_seconds=1e9)
    merges = [(a, b) for a, b, _ in small.merges]
    p = plan(store, from_tokenizer=small)
    assert p.forced == tuple(merges) and p.messages[0] == f"continuing from a tokenizer with {len(merges):,} merges"
    assert p.resumed is None  # a new run: its first save replaces the checkpoint
    resumed = plan(store, resume=True)
    assert resumed.forced == tuple(merges) and resumed.messages[0] == f"resuming after {len(merges):,} checkpointed merges"
    with Store.open(store, readonly=True) as st:
        assert resumed.resumed == read_checkpoint(st)  # extended in place
    # --min-count cuts the checkpoint's merges where their counts fall below it
    with Store.open(store, readonly=True) as st:
        counts = [m[2] for m in read_checkpoint(st)["merges"]]
    cut = next(i for i, c in enumerate(counts) if c < 300)
    high = plan(store, TrainConfig(vocab_size=600, min_count=300), resume=True)
    assert high.forced == tuple(merges[:cut]) and high.resumed is None
    # --from and --resume must agree
    with Store.open(store) as st:
        write_checkpoint(st, resumed.fingerprint, [[97, 98, 5]])
    with pytest.raises(TrainError, match="--resume and --from disagree"):
        plan(store, resume=True, from_tokenizer=small)


def test_a_plan_refuses_what_cannot_work(counted, tmp_path):
    with pytest.raises(TrainError, match="unknown training path"):
        plan(counted, path="cloud")
    with pytest.raises(TrainError, match="unknown engine"):
        plan(counted, engine="rust")
    with pytest.raises(TrainError, match="smaller than the 258 base symbols"):
        plan(counted, TrainConfig(vocab_size=257))
    Store.open(tmp_path / "empty", create=True).close()
    with pytest.raises(StoreError, match="no counts yet"):
        plan(tmp_path / "empty")


@needs_c
@pytest.mark.parametrize("path", ["memory", "disk"])
def test_resuming_a_cut_checkpoint_past_its_end_leaves_a_readable_one(counted, tmp_path, path):
    """--resume with a higher --min-count keeps only the checkpoint's first merges; --from a
    longer tokenizer then carries the run past them.  The run's checkpoint must then hold
    exactly its own merges (appending to the longer one left a head that miscounts its
    chunks: the next --resume said "damaged")."""
    import shutil

    store = tmp_path / "store"
    shutil.copytree(counted, store)
    with Store.open(store) as st:
        full, _ = train_from_store(st, TrainConfig(vocab_size=500), checkpoint_every=64, checkpoint_seconds=1e9)
        counts = [m[2] for m in read_checkpoint(st)["merges"]]
    cut = next(i for i, c in enumerate(counts) if c < 100)
    with Store.open(store) as st:
        cont, _ = train_from_store(st, TrainConfig(vocab_size=560, min_count=100), path=path, resume=True,
                                   from_tokenizer=full, checkpoint_every=64, checkpoint_seconds=1e9)
        checkpoint = read_checkpoint(st)
    assert cut < len(full.merges) and cont.merges[:len(full.merges)] == full.merges
    assert [tuple(m[:2]) for m in checkpoint["merges"]] == [m[:2] for m in cont.merges]
    with Store.open(store) as st:
        messages = []
        again, _ = train_from_store(st, TrainConfig(vocab_size=560), resume=True, on_message=messages.append)
    assert f"resuming after {len(cont.merges):,} checkpointed merges" in messages
    assert again.merges[:len(cont.merges)] == cont.merges and len(again.merges) == 560 - 258


# -- train --plan (issue 35, item 4) ------------------------------------------------------------
def test_train_plan_says_what_the_run_takes_and_trains_nothing(counted, cli):
    from bpe_stream.train.pipeline import plan_summary

    before = sorted(os.listdir(counted))
    # (a budget given: the default is half the memory available at each reading, which moves
    # while other work frees or takes memory)
    res = cli("train", "--store", counted, "--vocab-size", "1000", "--plan", "--json", "--max-memory", "1G")
    assert res.exit_code == 0, res.stderr
    summary = __import__("json").loads(res.stdout)
    with Store.open(counted, readonly=True) as st:
        plan = plan_training(st, TrainConfig(vocab_size=1000), max_memory=1 << 30)
    assert summary == plan_summary(plan) and summary["path"] == "memory" and summary["scratch_bytes"] == 0
    assert summary["merges"] == plan.limit and summary["estimated_seconds"] >= 0
    assert sorted(os.listdir(counted)) == before  # nothing written: no tokenizer, no scratch
    res = cli("train", "--store", counted, "--vocab-size", "1000", "--plan", "--max-memory", "30M", "--path", "disk")
    assert res.exit_code == 0, res.stderr
    text = res.stdout.decode()
    assert "path                     disk (as asked)" in text and f"MB in {counted}" in text, text


@needs_c
def test_the_disk_path_is_refused_at_once_when_the_scratch_does_not_fit(counted, cli, monkeypatch):
    import shutil
    from collections import namedtuple

    real = shutil.disk_usage
    Usage = namedtuple("Usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda p: Usage(10**9, 10**9 - 1000, 1000) if str(p) == str(counted)
                        else real(p))
    res = cli("train", "--store", counted, "--vocab-size", "1000", "--max-memory", "30M", "--path", "disk", "-o", "t.json")
    assert res.exit_code == 1, res.stderr
    lines = [line for line in res.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("Error: the disk path's scratch file needs about"), lines
    assert f"in {counted}, which has 0 MB free" in lines[0]
    assert not os.path.exists("t.json")
    assert cli("train", "--store", counted, "--vocab-size", "1000", "--path", "memory", "-o", "t.json").exit_code == 0


def test_train_without_an_output_or_plan_is_a_usage_error(counted, cli):
    res = cli("train", "--store", counted, "--vocab-size", "1000")
    assert res.exit_code == 2 and "Missing option '--output'" in res.stderr
    res = cli("train", "--store", counted, "--vocab-size", "1000", "--json", "-o", "t.json")
    assert res.exit_code == 2 and "--json goes with --plan" in res.stderr and not os.path.exists("t.json")
