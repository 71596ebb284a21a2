"""What keeps a store's cost the same at 1 MB and 50 GB (issue 35, item 3).

* Opening checks every tree of the data file only when the file is not in a state this library
  vouched for: the last full check, or the last commit of a writer that closed cleanly.  A
  write by anyone else, a copy or a writer killed after its commits leads to the full walk
  again, and damage is still one StoreError.
* ``stats`` reads kept totals and the kept most frequent pretokens, never every word; the kept
  top equals the top read from every word after any sequence of batches, counts taken back
  included (the record is then rebuilt by the next write).
* ``bpe-stream verify`` walks everything whatever the record says.
"""

from __future__ import annotations

import os
import random

import pytest
from conftest import assert_user_error
from hypothesis import given, settings
from hypothesis import strategies as st

from bpe_stream.count.counting import make_settings
from bpe_stream.store import lmdb_store as store_mod
from bpe_stream.store.lmdb_store import TOP_KEPT, Store, StoreError

GPT2 = make_settings("gpt2", ["<|endoftext|>"])


def make_store(path, batches) -> None:
    with Store.open(path, create=True) as st:
        st.ensure_settings(GPT2)
        for counts in batches:
            st.add_batch(dict(counts), {}, {})


@pytest.fixture
def walks(monkeypatch):
    """How many times opening walked every tree."""
    calls = []
    real = store_mod._check_structure

    def counting(env, path):
        calls.append(path)
        return real(env, path)

    monkeypatch.setattr(store_mod, "_check_structure", counting)
    return calls


def _age(path, seconds=5):
    """Makes the data file look last written ``seconds`` ago (a check vouches only for a file
    left alone longer than the file system's clock tick)."""
    data = os.path.join(path, "data.mdb")
    st = os.stat(data)
    os.utime(data, ns=(st.st_atime_ns, st.st_mtime_ns - seconds * 10**9))


def test_a_cleanly_closed_writer_vouches_for_its_commits(tmp_path, walks):
    path = str(tmp_path / "s")
    make_store(path, [{b" the": 3, b"cat": 1}])
    Store.open(path, readonly=True).close()
    Store.open(path).close()  # opened for writing, nothing committed: still vouched for
    assert walks == []
    make_store(path, [{b"dog": 2}])  # another writer's commits, closed cleanly
    Store.open(path, readonly=True).close()
    assert walks == []


def test_a_write_by_anything_else_is_checked_and_damage_found(tmp_path, walks):
    path = str(tmp_path / "s")
    make_store(path, [{bytes([i % 200 + 30]) * (i % 7 + 1) + str(i).encode(): i + 1 for i in range(5000)}])
    data = os.path.join(path, "data.mdb")
    with open(data, "r+b") as f:  # a flipped byte in a page of the words' tree, same size
        raw = bytearray(f.read())
        pgno = len(raw) // 4096 - 2
        raw[pgno * 4096 + 20] ^= 0xFF
        f.seek(0)
        f.write(raw)
    with pytest.raises(StoreError, match="damaged"):
        Store.open(path, readonly=True).close()
    assert len(walks) == 1


def test_a_killed_writer_leaves_the_next_open_to_check(tmp_path, walks):
    path = str(tmp_path / "s")
    make_store(path, [{b"a": 1}])
    st = Store.open(path)
    st.write(lambda txn: st.add_counts(txn, {b"b": 2}))
    st.env.close()  # as a kill -9 after the commit: close() never ran
    Store.open(path, readonly=True).close()
    assert len(walks) == 1


def test_a_full_check_vouches_only_for_a_settled_file(tmp_path, walks):
    path = str(tmp_path / "s")
    make_store(path, [{b"a": 1}])
    os.unlink(os.path.join(path, "checked"))  # as a store from before the record
    Store.open(path, readonly=True).close()  # written just now: checked, not vouched for
    Store.open(path, readonly=True).close()
    assert len(walks) == 2
    _age(path)
    Store.open(path, readonly=True).close()  # checked and vouched for
    Store.open(path, readonly=True).close()
    assert len(walks) == 3


def test_a_copy_is_checked(tmp_path, walks):
    import shutil

    path, copy = str(tmp_path / "s"), str(tmp_path / "copy")
    make_store(path, [{b"a": 1}])
    shutil.copytree(path, copy)  # "checked" comes along, but the copy is another file
    Store.open(copy, readonly=True).close()
    assert len(walks) == 1


def test_verify_walks_a_vouched_store_and_names_damage(tmp_path, cli):
    path = str(tmp_path / "s")
    make_store(path, [{b"word%d" % i: i + 1 for i in range(3000)}])
    res = cli("verify", "--store", path)
    assert res.exit_code == 0 and "3,000 distinct pretokens" in res.stderr, res.stderr
    data = os.path.join(path, "data.mdb")
    st = os.stat(data)
    with open(data, "r+b") as f:
        f.seek(st.st_size - 4096 + 18)
        f.write(b"\xff\xff")
    os.utime(data, ns=(st.st_atime_ns, st.st_mtime_ns))  # even with its old times: verify walks
    res = cli("verify", "--store", path)
    assert_user_error(res.stderr, res.exit_code)
    assert "damaged" in res.stderr


# -- the kept totals and top -------------------------------------------------------------------
def scanned_top(st, n):
    with st.reader() as txn:
        return st._scan_top(txn, n)


@settings(max_examples=40, deadline=None)
@given(batches=st.lists(st.dictionaries(st.binary(min_size=1, max_size=3), st.integers(1, 40), max_size=120),
                        min_size=1, max_size=6),
       take_back=st.booleans(), seed=st.integers(0, 1000))
def test_the_kept_top_is_the_top_of_every_word(tmp_path_factory, batches, take_back, seed):
    path = str(tmp_path_factory.mktemp("top") / "s")
    make_store(path, batches)
    with Store.open(path) as st:
        if take_back and any(batches):  # counts taken back: the record is rebuilt by the next write
            with st.reader() as txn:
                words = dict(st.iter_words(txn))
            victim = random.Random(seed).choice(sorted(words))
            st.write(lambda txn: st.add_counts(txn, {victim: -1}))
            st.write(lambda txn: st.add_counts(txn, {b"zz": 1}))
        with st.reader() as txn:
            exact, kept = st._top_record(txn)
            assert exact or not st.unique_words(txn)  # (a store with no word yet has no record)
            assert kept == st._scan_top(txn, TOP_KEPT)
            assert st.top_pretokens(txn, 10) == st._scan_top(txn, 10)


def test_stats_reads_no_word(tmp_path, monkeypatch):
    path = str(tmp_path / "s")
    make_store(path, [{b"w%d" % i: i % 97 + 1 for i in range(20_000)}, {b" the": 10**6, b"w5": 3}])
    monkeypatch.setattr(Store, "iter_words", lambda *a, **k: pytest.fail("stats read the words"))
    monkeypatch.setattr(Store, "iter_word_blocks", lambda *a, **k: pytest.fail("stats read the words"))
    with Store.open(path, readonly=True) as st:
        data = st.stats(5)
    assert data["unique_pretokens"] == 20_001 and data["unique_pretokens_bytes"] == sum(
        len(b"w%d" % i) for i in range(20_000)) + 4
    assert data["top"][0] == {"pretoken": " the", "count": 10**6}
    assert [r["count"] for r in data["top"]] == [10**6, 97, 97, 97, 97]


def test_a_store_from_before_the_kept_top_is_read_then_kept(tmp_path):
    path = str(tmp_path / "s")
    make_store(path, [{b"a": 5, b"b": 7, b"c": 1}])
    with Store.open(path) as st:  # as a store written before the record existed
        st.write(lambda txn: txn.delete(store_mod._TOP, db=st.db["meta"]))
    with Store.open(path, readonly=True) as st:
        assert [r["count"] for r in st.stats(2)["top"]] == [7, 5]  # read from every word
    make_store(path, [{b"c": 10}])  # the next count keeps it again
    with Store.open(path, readonly=True) as st, st.reader() as txn:
        assert st._top_record(txn) == (True, [(11, b"c"), (7, b"b"), (5, b"a")])


@pytest.mark.parametrize("native", [True, False])
def test_counts_keep_the_top_on_either_writer(tmp_path, monkeypatch, native):
    """A count in many batches (the native writer's sorted runs, or the Python path's lists),
    staged or whole: the kept top is the top of every word, and stats reads it."""
    from bpe_stream.count import counting
    from bpe_stream.count.counting import count_sources
    from bpe_stream.inputs.reader import Source

    monkeypatch.setattr(store_mod, "NATIVE_WRITES", native)
    monkeypatch.setattr(store_mod, "STAGE_CHUNK_KEYS", 64)
    monkeypatch.setattr(store_mod, "STAGE_DIRTY_PAGES", 0)
    monkeypatch.setattr(counting, "DIRTY_SHARE", 0)  # staged, whatever count's budget
    rng = random.Random(3)
    words = [b"w%d" % rng.randint(0, 30_000) for _ in range(400_000)]
    text = tmp_path / "t.txt"
    text.write_bytes(b" ".join(words) + b" the the the")
    path = str(tmp_path / "s")
    batches, real = [], Store.add_batch
    monkeypatch.setattr(Store, "add_batch", lambda self, *a, **k: batches.append(1) or real(self, *a, **k))
    with Store.open(path, create=True) as st:
        count_sources(st, [Source.from_arg(str(text))], GPT2, max_memory=1 << 20, range_bytes=16 << 10)
    assert len(batches) >= 3
    with Store.open(path, readonly=True) as st, st.reader() as txn:
        exact, kept = st._top_record(txn)
        assert exact and kept == st._scan_top(txn, TOP_KEPT) and len(kept) == TOP_KEPT
