"""Reliability (issue 7): processes at once on one store.

Two counts add up exactly, two counts creating the same new store both succeed, and readers
(``stats``, ``train``) started while a count runs read one committed state, whatever the
count commits meanwhile.  The interleavings are made, not hoped for: each process is paused
at a seam of ``tests/seams.py`` (right after its first ``lmdb.open``, its N-th commit, or
with its read transaction open) while the other one does its part.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections import Counter

import pytest
import reliability_helpers as H
from reliability_helpers import EOT, Cmd

from bpe_stream import Store, Tokenizer
from bpe_stream.count.counting import count_sources, make_settings
from bpe_stream.inputs.reader import Source


def _traceback_summary(err: str) -> str:
    """The frames (``file:line in function``) and the last line of a traceback on stderr."""
    frames = re.findall(r"([\w/.]+\.py:\d+ in \w+)", err)
    last = [line for line in err.splitlines() if line.strip()][-1:] or [""]
    return " -> ".join(frames) + " | " + last[0].strip() if frames else err.strip()[-300:]


def _finish(procs) -> list:
    """Waits for each process; returns (exit status, stderr) of each, no process left behind."""
    try:
        return [(p.wait(timeout=H.HANG_TIMEOUT), p.stderr.read().decode("utf-8", "replace")) for p in procs]
    finally:
        for p in procs:
            H.kill_group(p)


def test_two_counts_at_once_on_one_store_add_up_exactly(tmp_path, corpus_files, corpus_oracle):
    """A and B count half of the files each into one store with a 64 kB first map.  A maps the
    store and stops; B grows the map and commits under it; A goes on and commits on top of B's
    batches in a map another process resized, then stops again while B grows the map further
    and finishes; A finishes."""
    store = tmp_path / "store"
    with Store.open(store, create=True) as st_:
        st_.ensure_settings(make_settings("gpt2", [EOT]))
    names = list(corpus_files)
    a_opened, a_mid, b_mid = (H.Pause(tmp_path, "open:1", "a"), H.Pause(tmp_path, "commit:3", "a"),
                              H.Pause(tmp_path, "commit:3", "b"))
    knobs = {"range_bytes": 64 << 10, "initial_map": 64 << 10}

    def start(part, *pauses):
        return H.start(Cmd("count", "--store", store, "--max-memory", "1M", "-w", "1", *part,
                           knobs=dict(knobs, **H.pause_knob(*pauses))), tmp_path, stderr=subprocess.PIPE)

    a = start(names[:2], a_opened, a_mid)
    procs = [a]
    try:
        a_opened.wait(a)
        b = start(names[2:], b_mid)
        procs.append(b)
        b_mid.wait(b)
        assert (store / "data.mdb").stat().st_size > 64 << 10, "B's commits fit the map A opened: nothing grew"
        a_opened.release()
        a_mid.wait(a)
        b_mid.release()
        assert b.wait(timeout=H.HANG_TIMEOUT) == 0, _traceback_summary(b.stderr.read().decode())
        a_mid.release()
    finally:
        results = _finish(procs)
    assert [rc for rc, _ in results] == [0, 0], [(rc, _traceback_summary(err)) for rc, err in results]
    final = H.snapshot(store)
    H.check_partial_state(final, corpus_oracle)
    assert final["words"] == corpus_oracle.words() and final["totals"] == corpus_oracle.totals()


def _open_and_count(store, doc, barrier, results):
    try:
        barrier.wait(timeout=H.HANG_TIMEOUT)
        with Store.open(store, create=True) as st_:
            count_sources(st_, [Source.from_arg(str(doc))], make_settings("gpt2", []))
        results.put(None)
    except BaseException as exc:  # noqa: BLE001 - reported to the test, not raised in the child
        results.put(f"{type(exc).__name__}: {exc}")


@pytest.mark.parametrize("first", ["a", "b"])
def test_a_count_that_finds_a_new_store_half_created_by_another_succeeds(tmp_path, first):
    """Two counts creating the same new store: the first stops right after LMDB created the
    files (no tables, no settings yet); the second must take that for a store under
    creation, not a foreign one, and count; then the first goes on and counts too."""
    docs = {"a": tmp_path / "a.txt", "b": tmp_path / "b.txt"}
    docs["a"].write_bytes(b"hello world " * 50)
    docs["b"].write_bytes(b"other words " * 50)
    second = "b" if first == "a" else "a"
    store = tmp_path / "store"
    created = H.Pause(tmp_path, "open:1", first)
    one = H.start(Cmd("count", "--store", store, "-w", "1", docs[first], knobs=H.pause_knob(created)), tmp_path,
                  stderr=subprocess.PIPE)
    try:
        created.wait(one)
        res = H.run(Cmd("count", "--store", store, "-w", "1", docs[second]), tmp_path)
        created.release()
    finally:
        (rc, err), = _finish([one])
    assert res.returncode == 0, (
        f"the count that met a half-created store failed: {_traceback_summary(res.stderr.decode())}")
    assert rc == 0, f"the count that created the store failed after the other one counted: {_traceback_summary(err)}"
    assert H.snapshot(store)["words"] == dict(H.oracle([docs["a"].read_bytes(), docs["b"].read_bytes()], ())[0])


def test_two_counts_started_at_once_on_a_new_store_both_succeed(tmp_path):
    """The same race left to the scheduler, 15 times, with forked processes released by a
    barrier (the race is a few microseconds wide): it passes whichever one wins."""
    import multiprocessing

    a, b = tmp_path / "a.txt", tmp_path / "b.txt"
    a.write_bytes(b"hello world " * 50)
    b.write_bytes(b"other words " * 50)
    expected = dict(H.oracle([a.read_bytes(), b.read_bytes()], ())[0])
    failures = []
    ctx = multiprocessing.get_context("fork")
    for i in range(15):
        store = tmp_path / f"store{i}"
        barrier, results = ctx.Barrier(2), ctx.Queue()
        procs = [ctx.Process(target=_open_and_count, args=(store, doc, barrier, results)) for doc in (a, b)]
        for p in procs:
            p.start()
        outcome = [results.get(timeout=H.HANG_TIMEOUT) for _ in procs]
        for p in procs:
            p.join(timeout=H.HANG_TIMEOUT)
        failures += [o for o in outcome if o is not None]
        if all(o is None for o in outcome):
            assert H.snapshot(store)["words"] == expected
    assert not failures, f"{len(failures)} of 30 counts failed: {failures[:3]}"


@pytest.mark.parametrize("files", [("lock.mdb",), ("lock.mdb", "data.mdb")], ids=["lock-only", "empty-data-file"])
def test_count_takes_over_a_store_caught_in_the_middle_of_its_creation(cli, tmp_path, files):
    """What another process creating the store (or killed while doing so) leaves for a few
    microseconds: LMDB's lock file alone, or with a still empty data file.  Both hold nothing
    and are ours to take over; the races above hit exactly these states."""
    store = tmp_path / "store"
    store.mkdir()
    for name in files:
        (store / name).write_bytes(b"")
    (tmp_path / "a.txt").write_bytes(b"hello world\n")
    res = cli("count", "--store", store, tmp_path / "a.txt")
    assert res.exit_code == 0, res
    assert H.snapshot(store)["words"] == dict(H.oracle([b"hello world\n"], ())[0])


def _expected_stats(offsets: dict, prefix_oracle, files: dict) -> dict:
    """What ``stats --json`` must say of a store holding these prefixes of the files."""
    expected, specials = Counter(), 0
    for name, offset in offsets.items():
        c, s = prefix_oracle.prefix(name, offset)
        expected.update(c)
        specials += s
    return {
        "bytes": sum(offsets.values()), "pretokens": sum(expected.values()), "unique_pretokens": len(expected),
        "unique_pretokens_bytes": sum(map(len, expected)), "special_tokens_seen": specials,
        "documents": specials + sum(offset == len(files[f]) for f, offset in offsets.items()),
        "top": sorted(expected.values(), reverse=True)[:20],
    }, expected


def _stats_seen(out: bytes) -> dict:
    stats = json.loads(out)
    seen = {key: stats[key] for key in ("bytes", "pretokens", "unique_pretokens", "unique_pretokens_bytes",
                                        "special_tokens_seen", "documents")}
    return dict(seen, top=[row["count"] for row in stats["top"]])


def test_stats_and_train_during_a_count_read_one_consistent_snapshot(tmp_path, corpus_files, corpus_oracle):
    """``stats`` and ``train`` start while a count stands after its first commit, and stop with
    their read transaction open (the header read, the words not yet); the count then commits
    half of the input more, and only then do they read the words.  Both must report exactly
    the state their transaction began in; a ``stats`` started then reports the later state."""
    from bpe_stream.train.pipeline import tokenizer_from_result
    from bpe_stream.train.trainer import TrainConfig, Trainer

    store = tmp_path / "store"
    # no staging: every commit of the count is one whole batch
    cmd = Cmd("count", "--store", store, "--special-token", EOT, "--max-memory", "1M", "-w", "1", *corpus_files,
              knobs={"range_bytes": 32 << 10, "stage_chunk_keys": 1 << 30})
    commits = H.points(Cmd(*[a if a != str(store) else str(tmp_path / "clean") for a in cmd.args], knobs=cmd.knobs),
                       tmp_path)["commit"]
    assert commits >= 3, commits
    first, later = H.Pause(tmp_path, "commit:1", "count"), H.Pause(tmp_path, f"commit:{commits // 2 + 1}", "count")
    stats_reading, train_reading = H.Pause(tmp_path, "read:1", "stats"), H.Pause(tmp_path, "read:1", "train")
    counting = H.start(cmd.with_knobs(**H.pause_knob(first, later)), tmp_path, stderr=subprocess.PIPE)
    readers = []
    try:
        first.wait(counting)
        state1 = H.check_partial_state(H.snapshot(store), corpus_oracle)
        readers = [H.start(Cmd("stats", "--store", store, "--json", "--top", "20", knobs=H.pause_knob(stats_reading)),
                           tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE),
                   H.start(Cmd("train", "--store", store, "-o", tmp_path / "t.json", "--num-merges", "100",
                               knobs=H.pause_knob(train_reading)), tmp_path, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE)]
        stats_reading.wait(readers[0])
        train_reading.wait(readers[1])
        first.release()
        later.wait(counting)
        state2 = H.check_partial_state(H.snapshot(store), corpus_oracle)
        stats_reading.release()
        train_reading.release()
        outputs = [p.communicate(timeout=H.HANG_TIMEOUT) + (p.returncode,) for p in readers]
        stats2 = H.run(Cmd("stats", "--store", store, "--json", "--top", "20"), tmp_path)
        later.release()
        assert counting.wait(timeout=H.HANG_TIMEOUT) == 0, counting.stderr.read()
    finally:
        for p in [counting, *readers]:
            H.kill_group(p)
    total = sum(map(len, corpus_files.values()))
    assert 0 < sum(state1.values()) < sum(state2.values()) < total, (state1, state2)
    want1, counts1 = _expected_stats(state1, corpus_oracle, corpus_files)
    (out, err, rc), (_, train_err, train_rc) = outputs
    assert rc == 0, err
    assert _stats_seen(out) == want1, "stats read words committed after its transaction began"
    assert stats2.returncode == 0, stats2
    assert _stats_seen(stats2.stdout) == _expected_stats(state2, corpus_oracle, corpus_files)[0]
    # train read the state its transaction began in: its numbers, and merges of exactly those counts
    assert train_rc == 0, train_err
    m = re.search(r"\(([\d,]+) distinct pretokens, ([\d,]+) symbols", train_err.decode())
    assert m, train_err
    assert [int(x.replace(",", "")) for x in m.groups()] == [len(counts1), sum(map(len, counts1))], train_err
    trainer = Trainer(TrainConfig(num_merges=100, special_tokens=[EOT]))
    trainer.feed(sorted(counts1.items()))
    expected_tok = tokenizer_from_result(trainer.train(), "gpt2", "max-bytes")
    assert Tokenizer.load(tmp_path / "t.json").merges == expected_tok.merges
