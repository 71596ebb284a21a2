"""Reliability (issue 7): processes at once on one store.

Two counts add up exactly, two counts creating the same new store both succeed, and readers
(``stats``, ``train``) started while a count runs read one committed state.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from collections import Counter

import pytest
import reliability_helpers as H
from reliability_helpers import EOT, Cmd

from bpe_stream import Store, Tokenizer
from bpe_stream.counting import count_sources, make_settings
from bpe_stream.reader import Source


def _traceback_summary(err: str) -> str:
    """The frames (``file:line in function``) and the last line of a traceback on stderr."""
    frames = re.findall(r"([\w/.]+\.py:\d+ in \w+)", err)
    last = [line for line in err.splitlines() if line.strip()][-1:] or [""]
    return " -> ".join(frames) + " | " + last[0].strip() if frames else err.strip()[-300:]


def test_two_counts_at_once_on_one_store_add_up_exactly(tmp_path, corpus_files, corpus_oracle):
    store = tmp_path / "store"
    with Store.open(store, create=True) as st_:
        st_.ensure_settings(make_settings("gpt2", [EOT]))
    names = list(corpus_files)
    # 64 kB ranges and a 64 kB first map: many commits from each, and the map grows again and
    # again; the first one is slow to commit and to open LMDB (a slow disk), so the other one
    # grows the map in between
    knobs = {"range_bytes": 64 << 10, "initial_map": 64 << 10}
    procs = [H.start(Cmd("count", "--store", store, "--max-memory", "1M", "-w", "1", *part,
                         knobs=dict(knobs, **delay)), tmp_path, stderr=subprocess.PIPE)
             for part, delay in ((names[:2], {"open_delay": 0.05}), (names[2:], {"open_delay": 0.03}))]
    results = [(p.stderr.read().decode(), p.wait(timeout=120)) for p in procs]
    assert [rc for _, rc in results] == [0, 0], [(rc, _traceback_summary(err)) for err, rc in results]
    final = H.snapshot(store)
    H.check_partial_state(final, corpus_oracle)
    assert final["words"] == corpus_oracle.words() and final["totals"] == corpus_oracle.totals()


def _open_and_count(store, doc, barrier, results):
    try:
        barrier.wait(timeout=30)
        with Store.open(store, create=True) as st_:
            count_sources(st_, [Source.from_arg(str(doc))], make_settings("gpt2", []))
        results.put(None)
    except BaseException as exc:  # noqa: BLE001 - reported to the test, not raised in the child
        results.put(f"{type(exc).__name__}: {exc}")


def test_two_counts_started_at_once_on_a_new_store_both_succeed(tmp_path):
    """Two processes creating the same new store at the same moment: both count, neither
    takes the other's half-created store for a foreign one.  Through the CLI once, then 15
    times with forked processes released by a barrier (the race is a few microseconds wide)."""
    import multiprocessing

    a, b = tmp_path / "a.txt", tmp_path / "b.txt"
    a.write_bytes(b"hello world " * 50)
    b.write_bytes(b"other words " * 50)
    expected = dict(H.oracle([a.read_bytes(), b.read_bytes()], ())[0])
    failures = []
    for i in range(1):
        store = tmp_path / f"cli-store{i}"
        procs = [H.start(Cmd("count", "--store", store, "-w", "1", doc), tmp_path, stderr=subprocess.PIPE)
                 for doc in (a, b)]
        results = [(p.wait(timeout=60), p.stderr.read().decode()) for p in procs]
        failures += [err for rc, err in results if rc != 0]
        if all(rc == 0 for rc, _ in results):
            assert H.snapshot(store)["words"] == expected
    ctx = multiprocessing.get_context("fork")
    for i in range(15):
        store = tmp_path / f"store{i}"
        barrier, results = ctx.Barrier(2), ctx.Queue()
        procs = [ctx.Process(target=_open_and_count, args=(store, doc, barrier, results)) for doc in (a, b)]
        for p in procs:
            p.start()
        outcome = [results.get(timeout=60) for _ in procs]
        for p in procs:
            p.join(timeout=60)
        failures += [o for o in outcome if o is not None]
        if all(o is None for o in outcome):
            assert H.snapshot(store)["words"] == expected
    assert not failures, f"{len(failures)} of 32 counts failed: {failures[:3]}"


@pytest.mark.parametrize("files", [("lock.mdb",), ("lock.mdb", "data.mdb")], ids=["lock-only", "empty-data-file"])
def test_count_takes_over_a_store_caught_in_the_middle_of_its_creation(cli, tmp_path, files):
    """What another process creating the store (or killed while doing so) leaves for a few
    microseconds: LMDB's lock file alone, or with a still empty data file.  Both hold nothing
    and are ours to take over; the race above hits exactly these states."""
    store = tmp_path / "store"
    store.mkdir()
    for name in files:
        (store / name).write_bytes(b"")
    (tmp_path / "a.txt").write_bytes(b"hello world\n")
    res = cli("count", "--store", store, tmp_path / "a.txt")
    assert res.exit_code == 0, res
    assert H.snapshot(store)["words"] == dict(H.oracle([b"hello world\n"], ())[0])


def _sequential_offsets(files: dict, committed_bytes: int) -> dict:
    """With files counted one after the other, the offsets a total of committed bytes means."""
    out, left = {}, committed_bytes
    for name, data in files.items():
        out[name] = min(left, len(data))
        left -= out[name]
    assert left == 0
    return out


def test_stats_and_train_during_a_count_read_one_consistent_snapshot(tmp_path, corpus_files, corpus_oracle):
    from bpe_stream.counting import plan_ranges
    from bpe_stream.pipeline import tokenizer_from_result
    from bpe_stream.trainer import TrainConfig, Trainer

    store = tmp_path / "store"
    settings_ = make_settings("gpt2", [EOT])
    range_bytes = 32 << 10
    cmd = Cmd("count", "--store", store, "--special-token", EOT, "--max-memory", "1M", "-w", "1", *corpus_files,
              knobs={"range_bytes": range_bytes, "write_delay": 0.15})
    total = sum(map(len, corpus_files.values()))
    counting = H.start(cmd, tmp_path, stderr=subprocess.PIPE)
    readers = {}
    checked_states = set()
    try:
        while counting.poll() is None:
            done = H.committed(store)
            if done > 0 and "stats1" not in readers:
                readers["stats1"] = H.start(Cmd("stats", "--store", store, "--json", "--top", "20"), tmp_path,
                                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
                readers["train"] = H.start(Cmd("train", "--store", store, "-o", tmp_path / "t.json", "--num-merges",
                                               "100"), tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            if done > total // 2 and "stats2" not in readers:
                readers["stats2"] = H.start(Cmd("stats", "--store", store, "--json", "--top", "20"), tmp_path,
                                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            if done > 0 and done not in checked_states and len(checked_states) < 5:
                snap = H.snapshot(store)  # the library's own reader, one transaction
                H.check_partial_state(snap, corpus_oracle)
                checked_states.add(snap["totals"]["bytes"])
            time.sleep(0.01)
        assert counting.wait() == 0, counting.stderr.read()
        outputs = {name: (p.communicate(timeout=120), p.returncode) for name, p in readers.items()}
    finally:
        for p in [counting, *readers.values()]:
            H.kill_group(p)
    assert set(outputs) == {"stats1", "stats2", "train"}, "the readers did not start while the count ran"
    mid = 0
    for name in ("stats1", "stats2"):
        (out, err), rc = outputs[name]
        assert rc == 0, err
        stats = json.loads(out)
        offsets = _sequential_offsets(corpus_files, stats["bytes"])
        mid += 0 < stats["bytes"] < total
        expected, specials = Counter(), 0
        for file, offset in offsets.items():
            c, s = corpus_oracle.prefix(file, offset)
            expected.update(c)
            specials += s
        done_files = sum(offset == len(corpus_files[f]) for f, offset in offsets.items())
        assert stats["pretokens"] == sum(expected.values()), name
        assert stats["unique_pretokens"] == len(expected), name
        assert stats["unique_pretokens_bytes"] == sum(map(len, expected)), name
        assert stats["special_tokens_seen"] == specials and stats["documents"] == specials + done_files, name
        assert [row["count"] for row in stats["top"]] == sorted(expected.values(), reverse=True)[:20], name
    assert mid, "no stats run saw the count in the middle"
    # train read one committed state: the one with the numbers it reports, and its merges are
    # exactly those of that state's counts
    (_, err), rc = outputs["train"]
    assert rc == 0, err
    m = re.search(r"\(([\d,]+) distinct pretokens, ([\d,]+) symbols", err.decode())
    assert m, err
    unique, symbols = (int(x.replace(",", "")) for x in m.groups())
    states, running = [], Counter()
    for file, data in corpus_files.items():
        for a, b in plan_ranges(file, 0, len(data), settings_, range_bytes):
            running.update(H.oracle([data[a:b]])[0])
            states.append(Counter(running))
    match = [s for s in states if len(s) == unique and sum(map(len, s)) == symbols]
    assert match, f"train saw {unique} distinct pretokens, {symbols} symbols: no committed state has those"
    trainer = Trainer(TrainConfig(num_merges=100, special_tokens=[EOT]))
    trainer.feed(sorted(match[0].items()))
    expected_tok = tokenizer_from_result(trainer.train(), "gpt2", "max-bytes")
    assert Tokenizer.load(tmp_path / "t.json").merges == expected_tok.merges


