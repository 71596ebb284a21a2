"""Sorted runs of counts: a table packed in key order, and the k-way merge of runs.

A worker hands its parent its counts as a run (``CountTable.pack(sorted=True)``); the
parent merges a batch's runs (``merge_runs``: two sorted lists; ``merge_runs_packed``: one
run) instead of inserting them into a hash table.  Both implementations -- native and the
``heapq`` fallback -- must give what summing the runs' dicts and sorting gives, take each
other's runs, and refuse the same malformed or out-of-order runs.  The batch merges runs
that pile up (``counting._Batch``) and still takes out exactly their sum.
"""

from __future__ import annotations

import random
import struct
from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bpe_stream.count import table as count_table, counting
from conftest import fewer_examples
from bpe_stream.count.table import MAX_COUNT, PyCountTable, pack_counts, py_merge_runs, py_merge_runs_packed

native = pytest.mark.skipif(count_table.NativeCountTable is None, reason="bpe_stream._fastbpe is not built")
TABLES = [
    pytest.param(lambda: count_table.NativeCountTable(), id="native", marks=native),
    pytest.param(PyCountTable, id="fallback"),
]
MERGES = [
    pytest.param(lambda: (count_table.merge_runs, count_table.merge_runs_packed), id="native", marks=native),
    pytest.param(lambda: (py_merge_runs, py_merge_runs_packed), id="fallback"),
]
# keys that tie in their first 8 bytes, prefixes of each other, b"", bytes above 0x7f
KEYS = st.binary(max_size=12) | st.sampled_from(
    [b"", b"\x00", b"a", b"a\x00", b"prefix_8", b"prefix_8\x00", b"prefix_8a", b"prefix_8b", b"\xff" * 9, b"\x7f", b"\x80"]
)
PARTS = st.lists(st.dictionaries(KEYS, st.integers(1, 1 << 40), max_size=25), max_size=6)


def run_of(counts: dict) -> bytes:
    return pack_counts(dict(sorted(counts.items())))


def summed(parts) -> Counter:
    return sum((Counter(p) for p in parts), Counter())


def table_of(make, counts: dict):
    table = make()
    for key, n in counts.items():
        table.add(key, n)
    return table


@pytest.mark.parametrize("make", TABLES)
@given(counts=st.dictionaries(KEYS, st.integers(1, 1 << 40), max_size=40))
def test_pack_sorted_is_the_packed_form_in_key_order(make, counts):
    table = table_of(make, counts)
    assert table.pack(sorted=True) == run_of(counts)
    assert table.pack() == pack_counts(counts)  # unsorted: insertion order, as before


@pytest.mark.parametrize("merges", MERGES)
@given(parts=PARTS)
def test_merging_runs_sums_them_in_key_order(merges, parts):
    merge, merge_packed = merges()
    runs = [run_of(p) for p in parts]
    want = summed(parts)
    keys, counts = merge(runs)
    assert keys == sorted(want) and counts == [want[k] for k in keys]
    run, entries = merge_packed(runs)
    assert run == run_of(want) and entries == len(want)
    assert merge([run]) == (keys, counts)  # a merged run merges again into the same


@native
@given(parts=PARTS)
def test_native_and_fallback_merge_each_others_runs_alike(parts):
    native_runs = [table_of(count_table.NativeCountTable, p).pack(sorted=True) for p in parts]
    python_runs = [table_of(PyCountTable, p).pack(sorted=True) for p in parts]
    assert native_runs == python_runs
    assert count_table.merge_runs(python_runs) == py_merge_runs(native_runs)
    assert count_table.merge_runs_packed(python_runs) == py_merge_runs_packed(native_runs)


@pytest.mark.parametrize("merges", MERGES)
def test_many_runs_of_many_keys(merges):
    merge, merge_packed = merges()
    rng = random.Random(15)
    parts = [{rng.randbytes(rng.randrange(0, 10)): rng.randrange(1, 1000) for _ in range(rng.randrange(0, 3000))}
             for _ in range(70)]
    want = summed(parts)
    keys, counts = merge([run_of(p) for p in parts])
    assert dict(zip(keys, counts)) == want and keys == sorted(want)


@pytest.mark.parametrize("merges", MERGES)
def test_no_runs_and_empty_runs(merges):
    merge, merge_packed = merges()
    assert merge([]) == ([], []) and merge_packed([]) == (b"", 0)
    assert merge([b"", b""]) == ([], [])
    assert merge([b"", run_of({b"": 2}), run_of({b"": 3})]) == ([b""], [5])
    assert merge((bytearray(run_of({b"a": 1})), memoryview(run_of({b"a": 1})))) == ([b"a"], [2])  # any bytes-like


@pytest.mark.parametrize("merges", MERGES)
@pytest.mark.parametrize(
    "bad",
    [
        pack_counts({b"b": 1, b"a": 1}),  # decreasing
        struct.pack("<I", 1) + b"a" + struct.pack("<Q", 1) + struct.pack("<I", 1) + b"a" + struct.pack("<Q", 1),  # repeated
        pack_counts({b"ab": 1, b"a": 1}),  # a key after a longer one it begins
        pack_counts({b"prefix_8b": 1, b"prefix_8a": 1}),  # out of order past the first 8 bytes
        run_of({b"a": 1})[:-1],  # cut short
        b"\x01",
        run_of({b"a": 1}) + struct.pack("<I", 5) + b"ab",
    ],
    ids=["decreasing", "repeated", "prefix-after", "past-8-bytes", "truncated", "stub", "short-tail"],
)
def test_malformed_or_unordered_runs_are_refused(merges, bad):
    merge, merge_packed = merges()
    good = run_of({b"a": 1, b"zz": 2})
    for runs in ([bad], [good, bad], [bad, good]):
        with pytest.raises(ValueError, match="malformed or not in increasing key order"):
            merge(runs)
        with pytest.raises(ValueError, match="malformed or not in increasing key order"):
            merge_packed(runs)


@pytest.mark.parametrize("merges", MERGES)
def test_a_sum_past_64_bits_is_refused(merges):
    merge, merge_packed = merges()
    runs = [run_of({b"a": MAX_COUNT}), run_of({b"a": 1})]
    for fn in (merge, merge_packed):
        with pytest.raises(OverflowError):
            fn(runs)
    assert merge([run_of({b"a": MAX_COUNT - 1}), run_of({b"a": 1})]) == ([b"a"], [MAX_COUNT])


@native
def test_native_merge_takes_only_a_sequence_of_bytes_like():
    with pytest.raises(TypeError):
        count_table.merge_runs(5)
    with pytest.raises(TypeError):
        count_table.merge_runs(["text"])
    with pytest.raises(TypeError):
        count_table.merge_runs_packed([b"", 5])
    assert count_table.merge_runs(runs=[run_of({b"x": 1})]) == ([b"x"], [1])  # the keyword
    with pytest.raises(TypeError):
        count_table.NativeCountTable().pack(True)  # sorted is keyword-only


def partial_of(counts: dict, pretokens: int = 0) -> counting.PartialCounts:
    table = table_of(count_table.CountTable, counts)
    return counting._packed(counting.PartialCounts(pretokens=pretokens), table)


@given(parts=st.lists(st.dictionaries(KEYS, st.integers(1, 1000), max_size=30), max_size=30),
       compact=st.sampled_from([1, 5, 40, 1 << 16]))
def test_a_batch_takes_out_the_sum_of_its_runs_however_they_were_compacted(parts, compact):
    batch = counting._Batch(compact)
    for p in parts:
        batch.add(partial_of(p, pretokens=len(p)))
        assert len(batch.runs) <= counting.MAX_RUNS
        assert batch.run_bytes == sum(map(len, batch.runs))
        assert batch.estimated_bytes() == (batch.run_entries * counting.COUNTER_ENTRY_BYTES
                                           + counting.KEY_COPIES * batch.run_bytes)
    want = summed(parts)
    assert batch.totals["pretokens"] == sum(map(len, parts))
    counts = batch.take_counts()
    if want:
        assert list(counts.keys) == sorted(want) and list(counts.counts) == [want[k] for k in counts.keys]
    else:
        assert not counts
    assert batch.runs == [] and batch.run_entries == 0


def test_a_batch_compacts_repeats_so_its_estimate_follows_the_distinct_keys():
    batch = counting._Batch(100)
    same = {bytes([k]): 1 for k in range(60)}
    for _ in range(50):
        batch.add(partial_of(same))
    # 3,000 entries came in; compacted, the batch holds the 60 distinct keys once (plus what came since)
    assert batch.run_entries < 200 and len(batch.runs) < 5
    counts = batch.take_counts()
    assert list(counts.keys) == sorted(same) and set(counts.counts) == {50}


def test_a_batch_of_more_runs_than_max_runs_merges_them(monkeypatch):
    monkeypatch.setattr(counting, "MAX_RUNS", 4)
    batch = counting._Batch(1 << 30)  # never by entries: only by the number of runs
    for k in range(20):
        batch.add(partial_of({bytes([k]): 1}))
        assert len(batch.runs) <= 5
    assert list(batch.take_counts().keys) == [bytes([k]) for k in range(20)]


def test_a_batch_merges_its_table_with_its_runs():
    batch = counting._Batch()
    batch.table.add(b"b", 2)
    batch.table.add(b"a", 1)
    batch.add(partial_of({b"a": 5, b"c": 1}))
    counts = batch.take_counts()
    assert (counts.keys, counts.counts) == ([b"a", b"b", b"c"], [6, 2, 1])
    assert len(batch.table) == 0


@pytest.mark.parametrize("max_runs, compact_at", [(2, None), (64, 50)], ids=["by-runs", "by-entries"])
@pytest.mark.parametrize("threads", [False, True], ids=["processes", "threads"])
def test_two_workers_whose_runs_are_compacted_give_the_store_of_one(tmp_path, monkeypatch, max_runs, compact_at,
                                                                    threads):
    """count_sources with two workers (forked processes, or threads whose kept tables are
    packed every 64 entries) and many small ranges, the batch merging its runs on the way
    (more than MAX_RUNS of them, or past an entry threshold): the same words and totals as one
    worker counting into its table."""
    from bpe_stream.count.counting import LocalRunner, count_sources, make_settings
    from bpe_stream.inputs.reader import Source
    from bpe_stream.store.lmdb_store import Store

    compactions, threads = [], []
    real_compact, real_threads = counting._Batch._compact, count_table.merge_threads
    monkeypatch.setattr(counting._Batch, "_compact", lambda self: compactions.append(len(self.runs)) or real_compact(self))
    # every merge of several runs on several threads, however small (native: the key space split)
    monkeypatch.setattr(count_table, "PARALLEL_MERGE_BYTES", 0)
    monkeypatch.setattr(count_table.os, "cpu_count", lambda: 3)
    monkeypatch.setattr(count_table, "merge_threads", lambda runs: threads.append(real_threads(runs)) or threads[-1])
    monkeypatch.setattr(counting, "MAX_RUNS", max_runs)
    monkeypatch.setattr(counting, "MIN_BALANCED_RANGE", 256)
    if compact_at is not None:
        real_batch = counting._Batch
        monkeypatch.setattr(counting, "_Batch", lambda compact_entries=0: real_batch(compact_at))
    path = tmp_path / "doc.txt"
    path.write_bytes(b"".join(b"w%d x%d, and more words %d; " % (i % 301, i % 7, i) for i in range(3000)))
    settings = make_settings("gpt2", [])
    stores = []
    monkeypatch.setattr(counting, "KEPT_TABLE_ENTRIES", 64)
    for workers in (1, 2):
        runner = LocalRunner(workers) if workers > 1 and not threads else None  # (None: threads for a plain file)
        with Store.open(tmp_path / f"s{workers}", create=True) as st_:
            count_sources(st_, [Source.from_arg(str(path))], settings, workers=workers, range_bytes=4096, runner=runner)
            with st_.reader() as txn:
                stores.append((dict(st_.iter_words(txn)), st_.totals(txn)))
    assert compactions, "the two-worker count merged no runs on the way"
    assert count_table._native is None or max(threads) > 1
    assert stores[0] == stores[1]


@pytest.mark.parametrize("make", TABLES)
@given(parts=PARTS, text=st.binary(max_size=200))
def test_key_bytes_is_the_sum_of_the_distinct_keys_lengths(make, parts, text):
    """What a batch's memory estimate reads (``_Batch.estimated_bytes``), for both tables,
    after adds, a merged run and a feed; 0 once cleared."""
    table = make()
    for part in parts[:-1]:
        for key, n in part.items():
            table.add(key, n)
    if parts:
        table.merge(run_of(parts[-1]))
    table.feed(text, "gpt2")
    assert table.key_bytes == sum(map(len, table.to_dict()))
    table.clear()
    assert table.key_bytes == 0


def test_a_batch_counts_its_keys_bytes_in_its_estimate():
    """Two batches with as many entries, one with keys 1,000 times as long: the long keys
    are estimated larger by twice their bytes (the lists and LMDB's pages of the flush)."""
    short, long_ = counting._Batch(), counting._Batch()
    for i in range(100):
        short.table.add(b"%04d" % i)
        long_.table.add(b"%04d" % i * 1000)
    assert long_.estimated_bytes() - short.estimated_bytes() == counting.KEY_COPIES * 100 * (4000 - 4)
    run = counting.PartialCounts(packed=run_of({b"x" * 5000: 1}), entries=1)
    before = short.estimated_bytes()
    short.add(run)
    assert short.estimated_bytes() - before == counting.COUNTER_ENTRY_BYTES + counting.KEY_COPIES * (5000 + 12)


@pytest.fixture(scope="module")
def one_worker_store(corpus_files, tmp_path_factory):
    """The words and totals of ``corpus_files`` counted by one worker with room to spare."""
    from bpe_stream.count.counting import count_sources, make_settings
    from bpe_stream.inputs.reader import Source
    from bpe_stream.store.lmdb_store import Store

    with Store.open(tmp_path_factory.mktemp("w1"), create=True) as st_:
        count_sources(st_, [Source.from_arg(str(p)) for p in corpus_files], make_settings("gpt2", ["<|endoftext|>"]))
        with st_.reader() as txn:
            return dict(st_.iter_words(txn)), st_.totals(txn), st_.top_pretokens(txn, 64)


@fewer_examples(40)
@given(workers=st.integers(1, 8), budget_mb=st.integers(2, 48), range_kb=st.sampled_from([16, 64, 333, 4096]))
def test_any_worker_count_budget_and_range_gives_the_store_of_one_worker(corpus_files, one_worker_store, workers,
                                                                         budget_mb, range_kb):
    """Issue 36: the store is the same in content -- words, totals, the kept top -- for every
    worker count (1 to 8), memory budget (small ones flush many batches, each merged into the
    store) and range size, as the one-worker count with room to spare."""
    import tempfile

    from bpe_stream.count.counting import count_sources, make_settings
    from bpe_stream.inputs.reader import Source
    from bpe_stream.store.lmdb_store import Store

    with tempfile.TemporaryDirectory() as directory:
        with Store.open(directory, create=True) as st_:
            count_sources(st_, [Source.from_arg(str(p)) for p in corpus_files], make_settings("gpt2", ["<|endoftext|>"]),
                          workers=workers, max_memory=budget_mb << 20, range_bytes=range_kb << 10)
            with st_.reader() as txn:
                got = dict(st_.iter_words(txn)), st_.totals(txn), st_.top_pretokens(txn, 64)
    assert got == one_worker_store


# -- the native merge on several threads ----------------------------------------------------
# Few distinct keys, so that a key is often in several runs -- and the pivots, keys of the
# largest run, often fall on a key that other runs hold too.
_SHARED = st.sampled_from([b"", b"a", b"a\x00", b"ab", b"b", b"prefix_8", b"prefix_8a", b"prefix_8b", b"\xff" * 9])
_THREAD_PARTS = st.lists(st.dictionaries(_SHARED | KEYS, st.integers(1, 1 << 40), max_size=40), max_size=7)


@native
@given(parts=_THREAD_PARTS, threads=st.integers(1, 9))
def test_the_threaded_merge_gives_the_bytes_of_the_python_merge(parts, threads):
    """merge_runs_packed(threads=k) against the heapq merge: the same run and entries, for no
    runs, one, empty ones, keys shared by every run, and more threads than keys."""
    runs = [run_of(p) for p in parts]
    assert count_table._native.merge_runs_packed(runs, threads=threads) == py_merge_runs_packed(runs)


@native
@pytest.mark.parametrize("threads", [2, 3, 8])
def test_the_threaded_merge_of_large_runs_that_share_keys(threads):
    rng = random.Random(threads)
    shared = [rng.randbytes(rng.randrange(1, 9)) for _ in range(500)]
    parts = [{k: rng.randrange(1, 50) for k in rng.sample(shared, 300)} | {rng.randbytes(6): 1 for _ in range(2000)}
             for _ in range(5)]
    runs = [run_of(p) for p in parts]
    assert count_table._native.merge_runs_packed(runs, threads=threads) == py_merge_runs_packed(runs)


def packed_list(keys: list) -> bytes:
    """Keys packed as a run in the order given, each counted once (repeats kept)."""
    return b"".join(struct.pack("<I", len(k)) + k + struct.pack("<Q", 1) for k in keys)


@native
@pytest.mark.parametrize("threads", [2, 5])
@pytest.mark.parametrize(
    "runs",
    [
        [run_of({bytes([k]): 1 for k in range(40)}), pack_counts({b"b": 1, b"a": 1})],  # one out of order
        [run_of({bytes([k]): 1 for k in range(40)}), run_of({b"a": 1, b"zz": 2})[:-1]],  # one cut short
        [packed_list([bytes([k]) for k in (*range(20), 19, *range(20, 40))]), run_of({b"a": 1})],  # a key repeated
        # the largest run, whose keys are the pivots, decreasing: cuts found with them would not increase
        [packed_list([bytes([k]) for k in range(90, 0, -1)]), run_of({bytes([k]): 1 for k in range(5, 85, 3)})],
    ],
    ids=["unordered", "truncated", "repeated", "largest-unordered"],
)
def test_the_threaded_merge_refuses_what_the_one_thread_merge_refuses(threads, runs):
    with pytest.raises(ValueError, match="malformed or not in increasing key order"):
        count_table._native.merge_runs_packed(runs, threads=threads)


@native
@pytest.mark.parametrize("threads", [2, 4])
def test_the_threaded_merge_refuses_a_sum_past_64_bits(threads):
    big = {bytes([k]): 1 for k in range(60)}
    runs = [run_of(big | {b"\x30": MAX_COUNT}), run_of(big), run_of({b"\x30": 1})]
    with pytest.raises(OverflowError):
        count_table._native.merge_runs_packed(runs, threads=threads)
    assert count_table._native.merge_runs_packed(runs[1:], threads=threads) == py_merge_runs_packed(runs[1:])


@native
def test_merge_threads_are_one_for_small_runs_and_at_most_the_runs_and_the_cpus(monkeypatch):
    monkeypatch.setattr(count_table, "PARALLEL_MERGE_BYTES", 100)
    monkeypatch.setattr(count_table.os, "cpu_count", lambda: 3)
    small, large = run_of({b"a": 1}), run_of({b"x%d" % i: 1 for i in range(20)})
    assert count_table.merge_threads([small, small]) == 1  # under PARALLEL_MERGE_BYTES
    assert count_table.merge_threads([large]) == 1
    assert count_table.merge_threads([large, small]) == 2
    assert count_table.merge_threads([large] * 5) == 3
    for bad in (0, 257):
        with pytest.raises(ValueError, match="threads must be from 1 to 256"):
            count_table._native.merge_runs_packed([large], threads=bad)


@native
def test_the_threaded_merge_of_thousands_of_runs_on_the_most_threads():
    """5,000 runs on 256 threads asked: fewer parts (the cuts' arrays are bounded), the same run."""
    rng = random.Random(36)
    runs = [run_of({rng.randbytes(2): rng.randrange(1, 9) for _ in range(rng.randrange(0, 4))}) for _ in range(5000)]
    assert count_table._native.merge_runs_packed(runs, threads=256) == py_merge_runs_packed(runs)


def test_threads_kept_tables_are_flushed_by_what_they_hold(tmp_path, monkeypatch):
    """Threads keep a table each across ranges (``KeptTables``) and pack it only at a flush
    here (their cap out of reach): the batch's estimate counts what the tables hold, so a small
    budget still flushes many batches, each after every range in flight was taken -- the words
    and totals of one worker's count, and no batch larger than the budget allows."""
    from bpe_stream.count.counting import count_sources, make_settings
    from bpe_stream.inputs.reader import Source
    from bpe_stream.store.lmdb_store import Store

    monkeypatch.setattr(counting, "kept_cap", lambda flush_at, threads: 1 << 40)
    flushed = []
    real_flush = counting._Count.flush

    def flush(self):
        held = sum(e for e, _ in self.held.values())
        real_flush(self)
        flushed.append((held, self.kept is not None))

    monkeypatch.setattr(counting._Count, "flush", flush)
    path = tmp_path / "doc.txt"
    path.write_bytes(b"".join(b"w%d x%d, and more words %d; " % (i % 301, i % 7, i) for i in range(60000)))
    settings = make_settings("gpt2", [])
    stores = []
    for workers in (1, 2):
        flushed.clear()
        with Store.open(tmp_path / f"s{workers}", create=True) as st_:
            count_sources(st_, [Source.from_arg(str(path))], settings, workers=workers, max_memory=2 << 20,
                          range_bytes=16 << 10)
            with st_.reader() as txn:
                stores.append((dict(st_.iter_words(txn)), st_.totals(txn)))
    assert len(flushed) > 3 and all(kept for _, kept in flushed)
    # (the budget's share: held entries cost COUNTER_ENTRY_BYTES each, so at most a flush's worth)
    flush_at = counting.flush_threshold(2 << 20, 2)
    assert max(held for held, _ in flushed) * counting.COUNTER_ENTRY_BYTES < 2 * flush_at
    assert stores[0] == stores[1]
