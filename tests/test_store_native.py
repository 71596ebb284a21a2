"""The store written from native code (``csrc/storewrite.c`` through ``Store.write(native=True)``)
against the Python path (py-lmdb, ``NATIVE_WRITES = False``): the same content, key for key and
record for record, for random batches, staged or whole, into new stores and into stores the
Python path wrote (what every release before the native writer made); and the rule of who
owns the environment when."""

from __future__ import annotations

import tempfile
from pathlib import Path

import lmdb
import pytest
from conftest import fewer_examples
from hypothesis import given
from hypothesis import strategies as st

from bpe_stream.count.counting import count_sources, make_settings
from bpe_stream.count.table import pack_counts
from bpe_stream.inputs.reader import Source
from bpe_stream.store import lmdb_store as store_mod
from bpe_stream.store.lmdb_store import SortedRun, Store, StoreError

NEEDS_WRITER = pytest.mark.skipif(store_mod._StoreWriter is None, reason="the native writer needs the C extension")

GPT2 = make_settings("gpt2", ["<|endoftext|>"])
TOTALS = {"bytes": 7, "documents": 1, "pretokens": 3, "specials": 0}


def run_of(counts: dict) -> SortedRun:
    return SortedRun(pack_counts(dict(sorted(counts.items()))), len(counts))


def content(path) -> dict:
    """Every key and value of every table, as the file holds them."""
    env = lmdb.open(str(path), max_dbs=8, readonly=True, lock=False)
    try:
        out = {}
        with env.begin() as txn:
            for name in store_mod._DBS:
                with txn.cursor(db=env.open_db(name, txn=txn, create=False)) as cur:
                    out[name] = [(bytes(k), bytes(v)) for k, v in cur]
        return out
    finally:
        env.close()


def write_batches(path, batches, native: bool, monkeypatch, first_python: int = 0):
    """Each batch through add_batch (its source record and totals with it); the first
    ``first_python`` by the Python path whatever ``native`` says (an older store)."""
    with Store.open(path, create=True) as st_:
        for i, counts in enumerate(batches):
            monkeypatch.setattr(store_mod, "NATIVE_WRITES", native and i >= first_python)
            st_.add_batch(run_of(counts), {b"file%d" % i: {"offset": i, "done": False}}, TOTALS,
                          before=lambda txn: st_.settings_in(txn, GPT2))
    return content(path)


# pretokens of every kind: empty (a longwords key), short, sharing prefixes, past LMDB's 511
_pretokens = st.binary(max_size=6) | st.sampled_from([b"a", b"ab", b"abc", b"b", b"\xff"]) | st.binary(min_size=505,
                                                                                                         max_size=515)
_batches = st.lists(st.dictionaries(_pretokens, st.integers(1, 2**40), max_size=40), min_size=1, max_size=5)


@NEEDS_WRITER
@fewer_examples(40)
@given(batches=_batches, chunk_keys=st.integers(1, 9), staged=st.booleans(), first_python=st.integers(0, 5))
def test_native_writes_equal_python_writes(tmp_path, monkeypatch, batches, chunk_keys, staged, first_python):
    """Random batches, whole or staged in chunks, into a new store or one whose first batches
    the Python path wrote: every table equal to the Python path's, byte for byte per value."""
    if staged:
        monkeypatch.setattr(store_mod, "STAGE_CHUNK_KEYS", chunk_keys)
        monkeypatch.setattr(store_mod, "STAGE_DIRTY_PAGES", 0)
    base = Path(tempfile.mkdtemp(dir=tmp_path))
    python = write_batches(base / "python", batches, False, monkeypatch)
    native = write_batches(base / "native", batches, True, monkeypatch, first_python)
    assert native == python
    assert not any(k.startswith(b"staged/") or k == b"pending" for k, _ in native[b"meta"])



# more keys than the kept top's TOP_KEPT, their counts tied often: which of equal counts the
# top keeps is decided by the keys' bytes
_many = st.dictionaries(st.binary(min_size=1, max_size=2) | st.sampled_from([b"l" * 510, b"l" * 512, b"m" * 600]),
                        st.integers(1, 6), min_size=70, max_size=150)


@NEEDS_WRITER
@fewer_examples(40)
@given(batches=st.lists(_many, min_size=1, max_size=4), staged=st.booleans())
def test_the_kept_top_of_many_tied_keys_equals_the_python_writes(tmp_path, monkeypatch, batches, staged):
    """Batches of more keys than the kept top holds, many with equal counts, whole or staged:
    the native writer, which hands Python only the best TOP_KEPT candidates of each call, keeps
    the record byte for byte as the Python path does, and it is the top read from every word."""
    if staged:
        monkeypatch.setattr(store_mod, "STAGE_CHUNK_KEYS", 40)
        monkeypatch.setattr(store_mod, "STAGE_DIRTY_PAGES", 0)
    base = Path(tempfile.mkdtemp(dir=tmp_path))
    python = write_batches(base / "python", batches, False, monkeypatch)
    native = write_batches(base / "native", batches, True, monkeypatch)
    assert native == python
    with Store.open(base / "native", readonly=True) as st_, st_.reader() as txn:
        exact, kept = st_._top_record(txn)
        assert exact or not st_.unique_words(txn)  # (no word yet: no record)
        assert kept == st_._scan_top(txn, store_mod.TOP_KEPT)


def added_top(path, first: dict, second: dict, how: str, floor: int, keep=None) -> list:
    """The ``top`` the writer's add_run or add_chunk (``how``) hands back for ``second``,
    added to a new store after ``first``."""
    def add(txn, counts, *limits):
        keys = sorted(counts)
        if how == "run":
            return txn.writer.add_run(run_of(counts).run, *limits)
        return txn.writer.add_chunk(store_mod.pack([keys, [counts[k] for k in keys]]), *limits)

    with Store.open(path, create=True) as st_:
        st_.write(lambda txn: add(txn, first), native=True)
        limits = (floor,) if keep is None else (floor, keep)
        return st_.write(lambda txn: add(txn, second, *limits), native=True)[4]


@NEEDS_WRITER
@fewer_examples(60)
@given(first=_many, second=_many, how=st.sampled_from(["run", "chunk"]), floor=st.integers(0, 9),
       keep=st.integers(0, 70))
def test_the_writer_hands_back_the_best_candidates_of_a_call(tmp_path, first, second, how, floor, keep):
    """add_run and add_chunk with a floor: every written key whose new count reaches it is a
    candidate, and the writer hands back the best ``keep`` of them (all without ``keep``),
    count descending, then bytes -- against the counts summed here."""
    base = Path(tempfile.mkdtemp(dir=tmp_path))
    now = {k: first.get(k, 0) + n for k, n in second.items()}
    best_first = sorted(((n, k) for k, n in now.items() if n >= floor and len(k) <= 511), key=lambda c: (-c[0], c[1]))
    assert added_top(base / "all", first, second, how, floor) == best_first
    assert added_top(base / "kept", first, second, how, floor, keep) == best_first[:keep]


@NEEDS_WRITER
def test_a_store_of_the_previous_release_opens_and_adds_up(tmp_path, monkeypatch, corpus_files):
    """A store counted by the Python path (as every release before the native writer wrote
    them), then counted on by the native writer: equal to one counted by the Python path
    throughout, and to the oracle's words."""
    files = [str(p) for p in corpus_files]  # (a dict: path -> bytes)
    first, rest = files[:2], files[2:]

    def count(path, names, native):
        monkeypatch.setattr(store_mod, "NATIVE_WRITES", native)
        with Store.open(path, create=True) as st_:
            count_sources(st_, [Source.from_arg(p) for p in names], GPT2, range_bytes=65536)

    count(tmp_path / "old", first, False)
    count(tmp_path / "old", rest, True)
    count(tmp_path / "python", first, False)
    count(tmp_path / "python", rest, False)
    old, python = content(tmp_path / "old"), content(tmp_path / "python")
    assert old == python and len(old[b"words"]) > 100


@NEEDS_WRITER
def test_py_lmdb_is_closed_while_the_native_writer_holds_the_environment(store_dir, monkeypatch):
    """The ownership rule (module docstring): inside a native transaction py-lmdb's handle
    is closed; after it, and after a native transaction that failed, py-lmdb's is open again."""
    seen = []
    with Store.open(store_dir, create=True) as st_:
        def before(txn):
            with pytest.raises(lmdb.Error):
                st_.env.info()  # closed: LMDB allows one open of an environment per process
            seen.append(type(txn).__name__)
            st_.settings_in(txn, GPT2)

        st_.add_batch(run_of({b"a": 1, b"b": 2}), {}, TOTALS, before=before)
        assert seen == ["_NativeTxn"]
        assert st_.count_of(b"b") == 2  # py-lmdb's handle reopened
        with pytest.raises(StoreError, match=r"would pass 2\*\*63-1"):
            st_.add_batch(run_of({b"a": 2**63 - 1, b"c": 1}), {b"f": {"offset": 1}}, TOTALS)
        assert st_.count_of(b"a") == 1 and st_.count_of(b"c") == 0  # the failed batch left nothing
        with st_.reader() as txn:
            assert st_.source(txn, b"f") is None and st_.totals(txn)["bytes"] == TOTALS["bytes"]


@NEEDS_WRITER
def test_a_staged_take_back_is_applied_by_the_native_writer_as_by_python(tmp_path, monkeypatch):
    """Negative counts (``count --recount`` taking a file's counts back) are staged by the Python
    path; the native writer declines those chunks and Python adds them in its transaction."""
    monkeypatch.setattr(store_mod, "STAGE_CHUNK_KEYS", 2)
    monkeypatch.setattr(store_mod, "STAGE_DIRTY_PAGES", 0)
    results = []
    for native in (False, True):
        monkeypatch.setattr(store_mod, "NATIVE_WRITES", native)
        path = tmp_path / f"s{native}"
        with Store.open(path, create=True) as st_:
            st_.ensure_settings(GPT2)
            st_.add_batch(run_of({b"a": 3, b"b": 2, b"c": 1, b"x" * 600: 4}), {}, TOTALS)
            st_.add_batch({b"a": -1, b"b": -2, b"c": -1, b"x" * 600: -4}, {}, {"bytes": -1})
            assert dict(st_.iter_words(st_.env.begin())) == {b"a": 2}
        results.append(content(path))
    assert results[0] == results[1]


@NEEDS_WRITER
def test_a_damaged_count_is_a_store_error(store_dir):
    with Store.open(store_dir, create=True) as st_:
        st_.ensure_settings(GPT2)
        st_.add_batch(run_of({b"a": 1}), {}, TOTALS)
        st_.write(lambda txn: txn.put(b"b", b"123", db=st_.db["words"]))  # 3 bytes, not 8
        with pytest.raises(StoreError, match="damaged"):
            st_.add_batch(run_of({b"a": 1, b"b": 1}), {}, TOTALS)


@NEEDS_WRITER
@pytest.mark.parametrize("workers", [1, 2])
def test_count_writes_the_same_store_natively(tmp_path, monkeypatch, corpus_files, workers):
    """``count_sources`` hands its batches to the native writer as one run each, or as the
    runs of the workers for it to merge as it writes (``_Batch.take_counts(packed=True)``):
    the store equals the Python path's, for one worker's table and for several workers' runs,
    over several batches."""
    results, real = [], Store.add_batch
    for native in (True, False):
        monkeypatch.setattr(store_mod, "NATIVE_WRITES", native)
        calls = []

        def add_batch(self, counts, *a, calls=calls, **k):
            calls.append(type(counts).__name__)
            return real(self, counts, *a, **k)

        monkeypatch.setattr(Store, "add_batch", add_batch)
        with Store.open(tmp_path / f"s{native}", create=True) as st_:
            count_sources(st_, [Source.from_arg(str(p)) for p in corpus_files], GPT2, workers=workers,
                          range_bytes=65536, max_memory=4 << 20)
        assert len(calls) > 1, calls
        assert set(calls) == ({"SortedCounts"} if not native else {"SortedRun"} if workers == 1 else {"SortedRuns"}), calls
        results.append(content(tmp_path / f"s{native}"))
    assert results[0] == results[1]


def test_a_run_becomes_the_python_path_s_lists_with_or_without_the_extension(monkeypatch):
    counts = {b"": 2, b"a": 1, b"ab": 3, b"b" * 600: 4, "中".encode(): 5}
    want = (sorted(counts), [counts[k] for k in sorted(counts)])
    run = run_of(counts)
    assert (run.sorted_counts().keys, run.sorted_counts().counts) == want
    monkeypatch.setattr(store_mod, "_native", None)  # (pure Python: the run parsed by struct)
    assert (run.sorted_counts().keys, run.sorted_counts().counts) == want
    assert run.key_bytes() == sum(map(len, counts)) and len(run) == 5


@NEEDS_WRITER
@pytest.mark.parametrize("block", [0, 1, 2], ids=["as-py-lmdb-closes", "as-py-lmdb-reopens", "before-the-reopening-holds"])
def test_ctrl_c_held_back_around_the_handover_leaves_py_lmdb_open(tmp_path, monkeypatch, block):
    """Store.write(native=True) closes py-lmdb's handle and reopens it after the native
    transaction, each with SIGINT held back.  A Ctrl-C held while the handle closes is raised
    as that block ends (``block`` 0: before, that was outside the try that reopens it, and the
    next read of the store failed on a closed environment; seen once in a dozen runs of the
    Ctrl-C test of count -w2); one held while it reopens, after it is open again; one raised on
    the way into the reopening's hold, before it holds (``block`` 2: a SIGINT that came during
    the native writer's close, run by Python at its next function call; before, the handle
    stayed closed: seen once in 80 runs of the Ctrl-C test of count -w2 with worker
    processes), kept, the handle reopened all the same, then raised.  Every way:
    KeyboardInterrupt, the handle open, nothing written."""
    import os
    import signal
    from contextlib import contextmanager

    real, seen, entered = store_mod._sigint_deferred, [], []

    @contextmanager
    def ctrl_c_in(number=block):
        entered.append(1)
        if number == 2 and len(entered) == 2:  # (the reopening's hold, not set up yet)
            raise KeyboardInterrupt
        with real():
            yield
            seen.append(1)
            if len(seen) == number + 1:
                os.kill(os.getpid(), signal.SIGINT)  # held back until the block ends

    with Store.open(tmp_path / "s", create=True) as st_:
        st_.ensure_settings(make_settings("gpt2", []))
        st_.add_batch({b"kept": 1}, {}, {"pretokens": 1})
        monkeypatch.setattr(store_mod, "_sigint_deferred", ctrl_c_in)
        with pytest.raises(KeyboardInterrupt):
            st_.write(lambda txn: txn.put(b"x", b"1", db=st_.db["meta"]) if block == 0 else None, native=True)
        monkeypatch.setattr(store_mod, "_sigint_deferred", real)
        with st_.reader() as txn:  # the handle is open
            assert dict(st_.iter_words(txn)) == {b"kept": 1}
            assert block == 1 or txn.get(b"x", db=st_.db["meta"]) is None


def _runs_of(parts: list) -> list:
    return [run_of(counts).run for counts in parts]


@NEEDS_WRITER
@fewer_examples(50)
@given(first=_batches.map(lambda b: b[0]), parts=st.lists(st.dictionaries(_pretokens, st.integers(1, 2**40), max_size=120)
                                                          | _many, min_size=0, max_size=6),
       threads=st.integers(1, 4), floor=st.none() | st.integers(0, 9), keep=st.integers(0, 70))
def test_runs_merged_as_they_are_written_equal_their_merge_written(tmp_path, first, parts, threads, floor, keep):
    """StoreWriter.add_runs (the merge handed to the writer part by part while helper threads
    merge the next) against add_run of merge_runs_packed of the same runs, after the same
    first batch: the same tables byte for byte and the same result -- new keys, their bytes,
    the total, the pretokens left to Python and the candidates for the kept top."""
    from bpe_stream.count.table import merge_runs_packed

    base = Path(tempfile.mkdtemp(dir=tmp_path))
    runs = _runs_of(parts)
    limits = () if floor is None else (floor, keep)
    results = []
    for name in ("runs", "merged"):
        with Store.open(base / name, create=True) as st_:
            st_.write(lambda txn: txn.writer.add_run(run_of(first).run), native=True)
            if name == "runs":
                add = lambda txn: txn.writer.add_runs(runs, *limits, threads=threads)  # noqa: E731
            else:
                add = lambda txn: txn.writer.add_run(merge_runs_packed(runs)[0], *limits)  # noqa: E731
            results.append(st_.write(add, native=True))
    assert results[0] == results[1]
    assert content(base / "runs") == content(base / "merged")


@NEEDS_WRITER
def test_runs_merged_as_written_are_cut_into_parts_and_faults_abort_the_transaction(tmp_path):
    """Runs of many keys are merged in many parts (the writer takes each as it comes), with
    the bytes of one merge; a run out of order or two counts past 2**64-1 fail the call
    (ValueError, OverflowError with a text) and the transaction is aborted: nothing written."""
    from bpe_stream.count.table import merge_runs_packed

    parts = [{b"k%06d" % i: i % 7 + 1 for i in range(j, 20000, 3)} for j in range(3)]
    runs = _runs_of(parts)
    with Store.open(tmp_path / "a", create=True) as st_:
        new = st_.write(lambda txn: txn.writer.add_runs(runs, threads=3), native=True)[0]
    with Store.open(tmp_path / "b", create=True) as st_:
        st_.write(lambda txn: txn.writer.add_run(merge_runs_packed(runs)[0]), native=True)
    assert new == 20000 and content(tmp_path / "a") == content(tmp_path / "b")
    backwards = pack_counts({b"b": 1, b"a": 1})
    huge = [pack_counts({b"a": 2**63, b"z": 1}), pack_counts({b"a": 2**63, b"y": 1})]
    for bad, error in (([runs[0], backwards], ValueError), (huge, OverflowError)):
        with Store.open(tmp_path / "c", create=True) as st_:
            with pytest.raises(error) as raised:
                st_.write(lambda txn, bad=bad: txn.writer.add_runs(bad, threads=2), native=True)
            if error is OverflowError:
                assert "2**64-1" in str(raised.value)
            with st_.reader() as txn:
                assert st_.unique_words(txn) == 0
    with Store.open(tmp_path / "d", create=True) as st_:
        with pytest.raises(StoreError, match="2\\*\\*64-1"):
            st_.add_batch(store_mod.SortedRuns(huge, 4), {}, TOTALS, before=lambda txn: st_.settings_in(txn, GPT2))


@NEEDS_WRITER
@fewer_examples(30)
@given(batches=st.lists(st.lists(st.dictionaries(_pretokens, st.integers(1, 2**40), max_size=30), min_size=2,
                                 max_size=4), min_size=1, max_size=3),
       staged=st.booleans())
def test_a_batch_of_several_runs_writes_the_store_of_their_merge(tmp_path, monkeypatch, batches, staged):
    """add_batch of SortedRuns (counting's flush of several runs: merged as written when the
    batch fits one transaction, merged first and staged when it does not) against add_batch
    of the merged run: every table equal."""
    from bpe_stream.count.table import merge_runs_packed

    if staged:
        monkeypatch.setattr(store_mod, "STAGE_CHUNK_KEYS", 3)
        monkeypatch.setattr(store_mod, "STAGE_DIRTY_PAGES", 0)
    base = Path(tempfile.mkdtemp(dir=tmp_path))
    for name in ("runs", "merged"):
        with Store.open(base / name, create=True) as st_:
            for i, parts in enumerate(batches):
                runs = _runs_of(parts)
                entries = sum(map(len, parts))
                counts = store_mod.SortedRuns(runs, entries, 2) if name == "runs" else SortedRun(*merge_runs_packed(runs))
                st_.add_batch(counts, {b"file%d" % i: {"offset": i, "done": False}}, TOTALS,
                              before=lambda txn: st_.settings_in(txn, GPT2))
    assert content(base / "runs") == content(base / "merged")
