"""The LMDB word-frequency store, and counting into it (count_sources) against the oracle."""

from __future__ import annotations

import os
import tempfile
from collections import Counter
from pathlib import Path

import lmdb
import msgpack
import pytest
import textbook
from conftest import assert_user_error, fewer_examples
from hypothesis import given
from hypothesis import strategies as st

from bpe_stream.store import lmdb_store as store_mod
from bpe_stream.count.counting import count_sources, make_settings
from bpe_stream.inputs.reader import Source
from bpe_stream.count.seen_files import Refused
from bpe_stream.store.lmdb_store import Store, StoreError

GPT2 = make_settings("gpt2", ["<|endoftext|>"])


def add(st_, counts):
    """Adds counts in one transaction; returns how many pretokens were new."""
    res = st_.write(lambda txn: st_.add_counts(txn, counts))
    return res[0] if isinstance(res, tuple) else res


def all_words(st_):
    with st_.reader() as txn:
        return dict(st_.iter_words(txn))


def oracle_counts(texts, settings_):
    """Textbook counts (bytes keys) of documents given as bytes."""
    pattern = {"gpt2": textbook.GPT2_PATTERN, "whitespace": textbook.WHITESPACE_PATTERN,
               "words": textbook.WORDS_PATTERN, "none": None}.get(settings_["pretokenizer"], settings_["pattern"])
    counts = Counter()
    for data in texts:
        text = data.decode("utf-8", "surrogateescape")
        for special, piece in textbook.pretokens(text, pattern, settings_["special_tokens"]):
            if not special:
                counts[textbook.to_bytes(piece)] += 1
    return counts


# -- opening ---------------------------------------------------------------------------
def test_create_write_reopen(store_dir):
    with Store.open(store_dir, create=True) as st_:
        st_.ensure_settings(GPT2)
        assert add(st_, {b"hello": 3, b" world": 1}) == 2
        assert add(st_, {b"hello": 2, b"new": 1}) == 1
    with Store.open(store_dir, readonly=True) as st_:
        assert st_.settings() == GPT2
        assert all_words(st_) == {b"hello": 5, b" world": 1, b"new": 1}
        assert st_.count_of(b"hello") == 5 and st_.count_of(b"absent") == 0
        assert st_.unique_words() == 3


def test_missing_store_is_an_error(tmp_path):
    with pytest.raises(StoreError, match="count"):
        Store.open(tmp_path / "nope")
    with pytest.raises(StoreError):
        Store.open(tmp_path / "nope", readonly=True)
    assert not (tmp_path / "nope").exists()


def test_not_a_store(tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    with pytest.raises(StoreError):
        Store.open(f, create=True)
    d = tmp_path / "dir"
    d.mkdir()
    (d / "notes.txt").write_text("mine")
    with pytest.raises(StoreError):
        Store.open(d, create=True)
    assert (d / "notes.txt").read_text() == "mine"
    # an LMDB environment that is not ours
    other = tmp_path / "other"
    env = lmdb.open(str(other), max_dbs=2)
    with env.begin(write=True) as txn:
        txn.put(b"k", b"v")
    env.close()
    with pytest.raises(StoreError):
        Store.open(other, create=True)
    with pytest.raises(StoreError):
        Store.open(other, readonly=True)


def _write_meta(path, info):
    env = lmdb.open(str(path), max_dbs=8)
    db = env.open_db(b"meta")
    with env.begin(write=True) as txn:
        txn.put(b"info", msgpack.packb(info, use_bin_type=True), db=db)
    env.close()


def test_newer_format_is_refused(store_dir):
    with Store.open(store_dir, create=True) as st_:
        st_.ensure_settings(GPT2)
        info = st_.info()
    info["format"] = store_mod.FORMAT_VERSION + 1
    _write_meta(store_dir, info)
    with pytest.raises(StoreError, match="newer|upgrade"):
        Store.open(store_dir, readonly=True)
    with pytest.raises(StoreError, match="newer|upgrade"):
        Store.open(store_dir, create=True)


def test_wrong_magic_is_refused(store_dir):
    with Store.open(store_dir, create=True) as st_:
        st_.ensure_settings(GPT2)
        info = st_.info()
    info["magic"] = "someone else"
    _write_meta(store_dir, info)
    with pytest.raises(StoreError):
        Store.open(store_dir, readonly=True)


def test_settings_mismatch(store_dir):
    with Store.open(store_dir, create=True) as st_:
        assert st_.ensure_settings(GPT2) == GPT2
        assert st_.ensure_settings(make_settings("gpt2", ["<|endoftext|>"])) == GPT2
        for other in (make_settings("whitespace", ["<|endoftext|>"]), make_settings("gpt2", []),
                      make_settings("gpt2", ["<|endoftext|>"], "</w>"), make_settings("gpt2", ["<|endoftext|>", "<|x|>"])):
            with pytest.raises(StoreError):
                st_.ensure_settings(other)
    with Store.open(store_dir, readonly=True) as st_:
        assert st_.settings() == GPT2


# -- counts ------------------------------------------------------------------------------
def test_long_pretokens_and_key_size_boundary(store_dir):
    with Store.open(store_dir, create=True) as st_:
        st_.ensure_settings(GPT2)
        limit = st_.max_key
        keys = {b"a" * limit: 1, b"b" * (limit + 1): 2, bytes(range(256)) * 5: 3, b"\xff" * 4000: 4, b"": 5}
        assert add(st_, keys) == len(keys)
        assert add(st_, {b"b" * (limit + 1): 10, b"\xff" * 4000: 1}) == 0
        expected = dict(keys)
        expected[b"b" * (limit + 1)] += 10
        expected[b"\xff" * 4000] += 1
        assert all_words(st_) == expected
        for k, n in expected.items():
            assert st_.count_of(k) == n
        assert st_.unique_words() == len(keys)
        # two long words sharing a 511-byte prefix stay apart
        add(st_, {b"c" * 600 + b"x": 1, b"c" * 600 + b"y": 2})
        assert st_.count_of(b"c" * 600 + b"x") == 1 and st_.count_of(b"c" * 600 + b"y") == 2


_keys = st.binary(max_size=10) | st.binary(min_size=500, max_size=520)  # around max_key (511): the digest side


@fewer_examples(30)
@given(batches=st.lists(st.dictionaries(_keys, st.integers(1, 1 << 40), max_size=40), min_size=1, max_size=4),
       sorted_form=st.booleans(), dirty_pages=st.sampled_from([0, 1, 8192]), data=st.data())
def test_batches_add_up_in_any_form_and_any_transaction_size(tmp_path, monkeypatch, batches, sorted_form, dirty_pages,
                                                              data):
    """add_batch of a dict or of sorted lists (``SortedCounts``), in one transaction or staged
    (the store's dirty-page allowance), then counts taken back one by one: the store holds the
    sums, its totals the distinct pretokens and their bytes."""
    monkeypatch.setattr(store_mod, "STAGE_CHUNK_KEYS", 3)
    monkeypatch.setattr(store_mod, "STAGE_DIRTY_PAGES", dirty_pages)
    want = Counter()
    with Store.open(Path(tempfile.mkdtemp(dir=tmp_path)) / "s", create=True) as st_:
        st_.ensure_settings(GPT2)
        for counts in batches:
            form = store_mod.SortedCounts(sorted(counts), [counts[k] for k in sorted(counts)]) if sorted_form else counts
            st_.add_batch(form, {}, {"pretokens": sum(counts.values())})
            want.update(counts)
        taken = data.draw(st.lists(st.sampled_from(sorted(want)), unique=True)) if want else []
        for key in taken:  # the one-by-one path (a negative count takes a count back)
            n = want.pop(key)
            st_.add_batch({key: -n}, {}, {"pretokens": -n})
        assert all_words(st_) == dict(want)
        totals = st_.totals()
        assert totals["unique"] == len(want) and totals["unique_bytes"] == sum(map(len, want))


def test_a_count_that_is_not_8_bytes_is_damage(store_dir):
    with Store.open(store_dir, create=True) as st_:
        st_.ensure_settings(GPT2)
        add(st_, {b"ab": 1})
        st_.write(lambda txn: txn.put(b"ab", b"\x01" * 7, db=st_.db["words"]))
        with pytest.raises(StoreError, match="damaged"):
            add(st_, {b"ab": 1, b"cd": 2})


def test_counts_above_32_bits(store_dir):
    big = 2**33 + 5
    with Store.open(store_dir, create=True) as st_:
        st_.ensure_settings(GPT2)
        add(st_, {b"x": big, b"y" * 600: big})
        add(st_, {b"x": big, b"y" * 600: 2**40})
    with Store.open(store_dir, readonly=True) as st_:
        assert st_.count_of(b"x") == 2 * big
        assert st_.count_of(b"y" * 600) == big + 2**40


def test_totals_add_up(store_dir):
    with Store.open(store_dir, create=True) as st_:
        st_.ensure_settings(GPT2)
        before = st_.totals()
        st_.write(lambda txn: st_.bump_totals(txn, {"bytes": 2**35, "documents": 2}))
        st_.write(lambda txn: st_.bump_totals(txn, {"bytes": 7, "documents": 1, "pretokens": 4}))
        after = st_.totals()
    assert after["bytes"] - before.get("bytes", 0) == 2**35 + 7
    assert after["documents"] - before.get("documents", 0) == 3
    assert after["pretokens"] - before.get("pretokens", 0) == 4


def test_map_grows_when_full(store_dir, monkeypatch):
    monkeypatch.setattr(store_mod, "_INITIAL_MAP_SIZE", 64 << 10)
    expected = {}
    with Store.open(store_dir, create=True) as st_:
        st_.ensure_settings(GPT2)
        assert st_.env.info()["map_size"] <= 64 << 10
        for batch in range(3):
            counts = {f"pretoken-{batch}-{i:06d}-".encode() * 3: i + 1 for i in range(3000)}
            counts[b"L" * 700 + str(batch).encode()] = 2**34
            add(st_, counts)
            expected.update(counts)
        assert st_.env.info()["map_size"] > 64 << 10
    assert os.path.getsize(store_dir / "data.mdb") > 64 << 10
    with Store.open(store_dir, readonly=True) as st_:
        assert all_words(st_) == expected


# -- counting into the store -------------------------------------------------------------
def _count(store_path, paths, settings_, **kw):
    with Store.open(store_path, create=True) as st_:
        summary = count_sources(st_, [Source.from_arg(str(p)) for p in paths], settings_, **kw)
        return summary, all_words(st_), st_.totals()


def test_runs_add_up_and_files_are_skipped(tmp_path, store_dir):
    a, b = tmp_path / "a.txt", tmp_path / "b.txt"
    a.write_bytes(b"hello world<|endoftext|>hello again\n")
    b.write_bytes("über \xff café hello".encode("utf-8", "surrogateescape") + b"\xe4")
    messages = []
    _, words, totals = _count(store_dir, [a], GPT2, on_message=messages.append)
    assert words == oracle_counts([a.read_bytes()], GPT2)
    assert totals["bytes"] == a.stat().st_size and totals["documents"] == 2
    s2, words, totals = _count(store_dir, [a, b], GPT2, on_message=messages.append)
    assert [str(x) for x in s2.skipped] == [str(a)]
    assert any("skipped" in m and str(a) in m for m in messages)
    assert words == oracle_counts([a.read_bytes(), b.read_bytes()], GPT2)
    assert totals["bytes"] == a.stat().st_size + b.stat().st_size
    assert totals["documents"] == 3
    s3, words, totals = _count(store_dir, [a], GPT2, recount=True)
    assert not s3.skipped
    assert words == oracle_counts([a.read_bytes(), a.read_bytes(), b.read_bytes()], GPT2)
    # a file changed other than by growing is refused (issue 19: it was counted again on top of
    # its old counts, silently), and counted on top of them only with recount
    a.write_bytes(b"changed text")
    with pytest.raises(Refused, match="--recount"):
        _count(store_dir, [a], GPT2)
    s4, words, _ = _count(store_dir, [a], GPT2, recount=True)
    assert not s4.skipped
    assert words == oracle_counts([b"hello world<|endoftext|>hello again\n"] * 2 + [b.read_bytes(), b"changed text"], GPT2)


text_part = st.sampled_from(
    ["hello", " world", " ", "  ", "\n", "\r\n", "\t", "'ll", "don't", "123456", "中文", "😀", "!!", " é",
     "<|endoftext|>", "<|a b|>", "<|a", "b|>", "\u00a0", "x"]
).map(str.encode) | st.sampled_from([b"\xff", b"\xe4", b"\xe4\xb8"])
doc_st = st.lists(text_part, max_size=60).map(b"".join)
SETTING_CHOICES = [
    make_settings("gpt2", ["<|endoftext|>"]),
    make_settings("gpt2", ["<|a b|>", "<|endoftext|>"]),
    make_settings("cl100k", ["<|endoftext|>"]),
    make_settings("o200k", []),
    make_settings("whitespace", ["<|a b|>"]),
    make_settings("words", []),
    make_settings("none", ["<|endoftext|>"]),
]


@fewer_examples(60)
@given(st.lists(doc_st, min_size=1, max_size=3), st.sampled_from(SETTING_CHOICES),
       st.integers(min_value=1, max_value=40), st.integers(min_value=1, max_value=9))
def test_count_sources_equals_oracle_for_any_range_and_chunk_size(tmp_path, docs, settings_, range_bytes, chunk_bytes):
    if settings_["pretokenizer"] in ("cl100k", "o200k"):
        from conftest import tiktoken_pattern

        settings_ = dict(settings_)
        assert settings_["pattern"] == tiktoken_pattern(settings_["pretokenizer"] + "_base")
    work = Path(tempfile.mkdtemp(dir=tmp_path))
    paths = []
    for i, data in enumerate(docs):
        p = work / f"doc{i}.txt"
        p.write_bytes(data)
        paths.append(p)
    _, words, totals = _count(work / "store", paths, settings_, range_bytes=range_bytes, chunk_bytes=chunk_bytes)
    assert words == oracle_counts(docs, settings_)
    assert totals["bytes"] == sum(map(len, docs))
    assert totals["pretokens"] == sum(oracle_counts(docs, settings_).values())


def test_planned_ranges_never_split_a_special_token(tmp_path, store_dir):
    """A special token holding a space, placed so that the first planned cut falls on that space
    and the token starts more than 4 bytes before the cut."""
    special = "<|abcdef gh|>"
    s = make_settings("gpt2", [special])
    target = 64
    data = (b"y" * (target - 8) + special.encode() + b" tail words here" * 8)
    path = tmp_path / "doc.txt"
    path.write_bytes(data)
    _, words, _ = _count(store_dir, [path], s, range_bytes=target)
    assert words == oracle_counts([data], s)


def test_parallel_counting_equals_serial(tmp_path, cs336):
    data = (cs336 / "corpus.en").read_bytes()[:40000] + b"\xff\xfe <|endoftext|> " + "中文 😀".encode() * 50
    path = tmp_path / "doc.txt"
    path.write_bytes(data)
    expected = oracle_counts([data], GPT2)
    for workers in (1, 2):
        _, words, totals = _count(tmp_path / f"store{workers}", [path], GPT2, workers=workers, range_bytes=1000)
        assert words == expected
        assert totals["bytes"] == len(data)


def test_count_after_settings_mismatch_leaves_store_unchanged(tmp_path, store_dir):
    a = tmp_path / "a.txt"
    a.write_bytes(b"some text here")
    _count(store_dir, [a], GPT2)
    with pytest.raises(StoreError):
        _count(store_dir, [a], make_settings("words", ["<|endoftext|>"]), recount=True)
    with Store.open(store_dir, readonly=True) as st_:
        assert all_words(st_) == oracle_counts([a.read_bytes()], GPT2)


@fewer_examples(40)
@given(doc_st, st.sampled_from(SETTING_CHOICES), st.integers(min_value=1, max_value=40),
       st.integers(min_value=1, max_value=9))
def test_count_stdin_equals_oracle_for_any_piece_and_chunk_size(tmp_path, monkeypatch, data, settings_, piece_bytes,
                                                                chunk_bytes):
    """Stdin is cut into pieces by the parent (it cannot be planned ahead); any piece size and
    read size gives the counts of the whole."""
    import io
    import sys

    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data)))
    work = Path(tempfile.mkdtemp(dir=tmp_path))
    with Store.open(work / "store", create=True) as st_:
        count_sources(st_, [Source.from_arg("-")], settings_, range_bytes=piece_bytes, chunk_bytes=chunk_bytes)
        words, totals = all_words(st_), st_.totals()
    assert words == oracle_counts([data], settings_)
    assert totals["bytes"] == len(data)
    assert totals["documents"] == 1 + sum(
        1 for s, _ in textbook.pretokens(data.decode("utf-8", "surrogateescape"), None, settings_["special_tokens"]) if s)


def test_killed_run_resumes_without_double_counting(tmp_path, store_dir, monkeypatch, cs336):
    """Each flush commits counts, totals and the file's progress together; a run killed in the
    middle of a flush leaves the earlier batches, and a rerun counts exactly the rest."""
    from bpe_stream.count import counting

    data = (cs336 / "corpus.en").read_bytes()[:20000]
    path = tmp_path / "doc.txt"
    path.write_bytes(data)
    expected = oracle_counts([data], GPT2)
    monkeypatch.setattr(counting, "COUNTER_ENTRY_BYTES", 1 << 30)  # every range result triggers a flush
    calls = {"n": 0}
    real_bump = Store.bump_totals

    def dying_bump(self, txn, delta):
        calls["n"] += 1
        if calls["n"] == 4:
            raise KeyboardInterrupt("killed")
        return real_bump(self, txn, delta)

    monkeypatch.setattr(Store, "bump_totals", dying_bump)
    with pytest.raises(KeyboardInterrupt):
        _count(store_dir, [path], GPT2, range_bytes=1500)
    with Store.open(store_dir, readonly=True) as st_:
        partial = all_words(st_)
        assert 0 < sum(partial.values()) < sum(expected.values())
    monkeypatch.setattr(Store, "bump_totals", real_bump)
    messages = []
    summary, words, totals = _count(store_dir, [path], GPT2, range_bytes=1500, on_message=messages.append)
    assert any("resum" in m for m in messages), messages
    assert words == expected
    assert totals["bytes"] == len(data)
    assert totals["pretokens"] == sum(expected.values())
    assert totals["documents"] == 1
    # and it is done: a third run skips it
    summary, words, _ = _count(store_dir, [path], GPT2)
    assert [str(s) for s in summary.skipped] == [str(path)] and words == expected


@pytest.mark.parametrize("workers", [1, 2])
def test_strict_utf8_names_the_file_offset(tmp_path, store_dir, workers):
    from bpe_stream.inputs.reader import InputError

    data = b"word " * 400 + b"\xff" + b" more words" * 50
    path = tmp_path / "doc.txt"
    path.write_bytes(data)
    with pytest.raises(InputError, match=r"offset 2000\b"):
        _count(store_dir, [path], GPT2, strict_utf8=True, range_bytes=300, workers=workers, chunk_bytes=7)


# -- large batches: staged, then applied one key range per transaction ----------------------
def _snapshot(path):
    with Store.open(path, readonly=True) as st_, st_.reader() as txn:
        return all_words(st_), st_.totals(txn), dict(st_.iter_sources(txn)), st_.has_staged_batch()


_pretokens = st.binary(min_size=1, max_size=12) | st.binary(min_size=500, max_size=520)  # some past LMDB's key limit
_batches = st.lists(st.dictionaries(_pretokens, st.integers(1, 2**40), max_size=40), min_size=1, max_size=4)


@fewer_examples(40)
@given(batches=_batches, chunk_keys=st.integers(1, 7), stop_after=st.integers(0, 12), data=st.data())
def test_staged_batches_equal_whole_ones_even_when_cut_off(tmp_path, monkeypatch, batches, chunk_keys, stop_after, data):
    """A batch over STAGE_CHUNK_KEYS keys is staged and applied chunk by chunk; cut off after
    any number of chunks (a kill), the next open -- read-only or not -- finishes it, and the
    store equals one where every batch went in as one transaction."""
    base = Path(tempfile.mkdtemp(dir=tmp_path))
    whole, staged = base / "whole", base / "staged"
    with Store.open(whole, create=True) as st_:
        st_.ensure_settings(GPT2)
        for i, counts in enumerate(batches):
            st_.add_batch(counts, {b"src": {"offset": i}}, {"bytes": 10, "pretokens": sum(counts.values())})
    expected = _snapshot(whole)
    assert expected[3] is False

    monkeypatch.setattr(store_mod, "STAGE_CHUNK_KEYS", chunk_keys)
    monkeypatch.setattr(store_mod, "STAGE_DIRTY_PAGES", 0)
    cut_at = data.draw(st.integers(0, len(batches) - 1))
    real_apply = Store._apply_one_chunk
    for i, counts in enumerate(batches):
        applied = {"n": 0}

        def dying_apply(self, txn, applied=applied):
            applied["n"] += 1
            if applied["n"] > stop_after:
                raise KeyboardInterrupt("killed")
            return real_apply(self, txn)

        with Store.open(staged, create=True) as st_:
            st_.ensure_settings(GPT2)
            if i == cut_at:
                monkeypatch.setattr(Store, "_apply_one_chunk", dying_apply)
            killed = False
            try:
                st_.add_batch(counts, {b"src": {"offset": i}}, {"bytes": 10, "pretokens": sum(counts.values())})
            except KeyboardInterrupt:
                killed = True
            finally:
                monkeypatch.setattr(Store, "_apply_one_chunk", real_apply)
            # a staged batch takes one step per chunk and one that writes its records
            steps = -(-len(counts) // chunk_keys) + 1 if len(counts) > chunk_keys else 0
            assert killed == (i == cut_at and stop_after < steps)
        if i == cut_at and data.draw(st.booleans()):
            with Store.open(staged) as st_:  # a writer finishes it on open, too
                assert not st_.has_staged_batch()
    assert _snapshot(staged) == expected


def test_the_dirty_page_allowance_sets_how_many_keys_a_transaction_adds(tmp_path, monkeypatch):
    """``add_batch(dirty_bytes=)``: a store of many pages (here: more than STAGE_DIRTY_PAGES,
    turned down) adds as many keys a transaction as may each dirty a page of it, less their
    new pages -- never fewer than STAGE_CHUNK_KEYS; a store of few pages takes what fits
    beside them; without an allowance, STAGE_DIRTY_PAGES'.  The store is the same."""
    monkeypatch.setattr(store_mod, "STAGE_CHUNK_KEYS", 16)
    monkeypatch.setattr(store_mod, "STAGE_DIRTY_PAGES", 40)
    per_key = (2 + store_mod._ENTRY_OVERHEAD) * 3 / 2 / store_mod._PAGE  # keys of 2 bytes
    with Store.open(tmp_path / "s", create=True) as st_:
        st_.ensure_settings(GPT2)
        assert st_._stage_chunk_keys(1000, 2000, 0) == 16
        assert st_._stage_chunk_keys(1000, 2000, 1) == int(1 / per_key)  # no pages yet: only the new ones
        assert st_._stage_chunk_keys(1000, 2000, 8) == 1000
        st_.add_batch({b"%05d" % i: 1 for i in range(20_000)}, {}, {})
        with st_.reader() as txn:
            stat = txn.stat(st_.db["words"])
        pages = stat["leaf_pages"] + stat["branch_pages"]
        assert pages > 50
        assert st_._stage_chunk_keys(10**6, 2 * 10**6, 40) == int(40 / (1 + per_key))  # each key a page of its own
        assert st_._stage_chunk_keys(10**6, 2 * 10**6, 2 * pages) == int(pages / per_key)  # the tree, and new pages
        assert st_._stage_chunk_keys(10**6, 2 * 10**6) == st_._stage_chunk_keys(10**6, 2 * 10**6, 40)

    writes = []
    real = Store._apply_one_chunk
    monkeypatch.setattr(Store, "_apply_one_chunk", lambda self, txn: writes.append(1) or real(self, txn))
    batch = {b"%05d" % i: 2 for i in range(0, 20_000, 7)}  # 2,858 keys over every page
    # (a staged batch takes a step per chunk and one that writes its records; a whole one none)
    for dirty_bytes, steps in ((None, -(-2858 // int(40 / (1 + per_key))) + 1), (0, -(-2858 // 16) + 1),
                               (100 * store_mod._PAGE, -(-2858 // int(100 / (1 + per_key))) + 1), (1 << 30, 0)):
        writes.clear()
        with Store.open(tmp_path / "s") as st_:
            st_.add_batch(batch, {}, {}, dirty_bytes=dirty_bytes)
        assert len(writes) == steps, dirty_bytes
    with Store.open(tmp_path / "s", readonly=True) as st_, st_.reader() as txn:
        assert dict(st_.iter_words(txn)) == {b"%05d" % i: 1 + 2 * 4 * (i % 7 == 0) for i in range(20_000)}  # four batches of 2


def test_count_lets_a_flush_dirty_its_share_of_the_budget(tmp_path, monkeypatch):
    """count_sources hands each batch DIRTY_SHARE of the counter's budget as its dirty-page
    allowance: a larger budget, fewer transactions."""
    from bpe_stream.count import counting
    from bpe_stream.inputs.reader import Source

    seen = []
    real = Store.add_batch
    monkeypatch.setattr(Store, "add_batch", lambda self, *a, **k: seen.append(k.get("dirty_bytes")) or real(self, *a, **k))
    text = tmp_path / "t.txt"
    text.write_bytes(b"one two three " * 100)
    for budget, workers in ((64 << 20, 1), (1 << 30, 1), (1 << 30, 2)):
        with Store.open(tmp_path / f"s{budget}-{workers}", create=True) as st_:
            counting.count_sources(st_, [Source.from_arg(str(text))], GPT2, max_memory=budget, workers=workers)
        assert seen[-1] == counting.dirty_budget(budget, workers)
    assert counting.dirty_budget(64 << 20, 1) == 8 << 20  # the smallest chunks' 2,048 pages
    assert counting.dirty_budget(1 << 30, 2) < counting.dirty_budget(1 << 30, 1)  # the workers' share set aside
    assert counting.dirty_budget(64 << 30, 2) == counting.DIRTY_MAX


def test_a_reader_finishes_a_staged_batch_while_its_writer_is_at_it(store_dir, monkeypatch):
    """Each chunk is applied and deleted in one transaction, so another process that opens
    the store in the middle (and finishes the batch, taking turns on LMDB's write lock)
    cannot make a chunk count twice; the writer then finds nothing left to apply."""
    import subprocess
    import sys

    counts = {f"w{i:04d}".encode(): i + 1 for i in range(50)}
    with Store.open(store_dir, create=True) as st_:
        st_.ensure_settings(GPT2)
        st_.add_batch({b"w0000": 5}, {}, {})
    monkeypatch.setattr(store_mod, "STAGE_CHUNK_KEYS", 4)
    monkeypatch.setattr(store_mod, "STAGE_DIRTY_PAGES", 0)
    steps = []
    with Store.open(store_dir) as st_:
        real_write = st_.write

        def write_and_watch(fn, **kwargs):
            result = real_write(fn, **kwargs)
            if getattr(fn, "__name__", "") == "_apply_one_chunk":
                steps.append(result)
                if len(steps) == 2:  # another process opens the store now
                    code = "import sys; from bpe_stream import Store; Store.open(sys.argv[1], readonly=True).close()"
                    subprocess.run([sys.executable, "-c", code, str(store_dir)], check=True)
            return result

        st_.write = write_and_watch
        st_.add_batch(counts, {b"src": {"offset": 1}}, {"bytes": 1})
    assert steps == [3, 4, None]  # new keys of two chunks here, the rest by the other process
    words, totals, sources, pending = _snapshot(store_dir)
    assert words == {**counts, b"w0000": 6}
    assert totals["unique"] == 50 and totals["bytes"] == 1 and sources == {b"src": {"offset": 1}} and not pending


def test_a_reader_that_cannot_finish_a_staged_batch_says_how(store_dir, monkeypatch, cli):
    monkeypatch.setattr(store_mod, "STAGE_CHUNK_KEYS", 2)
    monkeypatch.setattr(store_mod, "STAGE_DIRTY_PAGES", 0)
    with Store.open(store_dir, create=True) as st_:
        st_.ensure_settings(GPT2)
        monkeypatch.setattr(Store, "_apply_one_chunk", lambda self, txn: (_ for _ in ()).throw(KeyboardInterrupt()))
        with pytest.raises(KeyboardInterrupt):
            st_.add_batch({b"a": 1, b"b": 2, b"c": 3}, {}, {})
    monkeypatch.undo()

    def failing(self):
        raise store_mod.WriteFailed("writing to the store failed (...); free disk space", "No space left on device")

    monkeypatch.setattr(Store, "apply_staged", failing)
    with pytest.raises(StoreError) as err:
        Store.open(store_dir, readonly=True)
    assert str(err.value) == (
        f"the store at {store_dir} holds a batch of counts that its writer could not finish, and finishing it "
        "failed here too (No space left on device); free disk space (or fix the cause): the next 'bpe-stream "
        "count' on this store finishes it")
    res = cli("stats", "--store", store_dir)  # what a user sees
    assert_user_error(res.stderr, res.exit_code)
    assert "free disk space" in res.stderr
    monkeypatch.undo()
    res = cli("stats", "--store", store_dir)  # a reader finishes the batch, then reads it whole
    assert res.exit_code == 0, res.stderr
    with Store.open(store_dir, readonly=True) as st_:
        assert all_words(st_) == {b"a": 1, b"b": 2, b"c": 3} and not st_.has_staged_batch()
        assert st_.totals()["unique"] == 3


def test_the_count_budget_keeps_room_for_the_workers(tmp_path, store_dir, monkeypatch):
    """--max-memory covers the worker processes too: with a pool, the counter flushes once it
    reaches its share of what the budget leaves beside them (never less than half of it)."""
    from bpe_stream.count import counting

    mib = 1 << 20
    one = counting.flush_threshold(512 * mib, 1)
    assert one == int(512 * mib * counting.COUNTER_SHARE)
    assert counting.flush_threshold(512 * mib, 2) == int((512 * mib - 2 * counting.WORKER_BYTES) * counting.COUNTER_SHARE)
    assert counting.flush_threshold(512 * mib, 16) == int(256 * mib * counting.COUNTER_SHARE)
    # and count_sources flushes by it: the batches it adds stay below the threshold's entries
    path = tmp_path / "doc.txt"
    path.write_bytes(" ".join(f"w{i}" for i in range(20000)).encode())
    sizes = []
    real = Store.add_batch

    def recording(self, counts, *args, **kw):
        sizes.append(len(counts))
        return real(self, counts, *args, **kw)

    monkeypatch.setattr(Store, "add_batch", recording)
    monkeypatch.setattr(counting, "WORKER_BYTES", 1 << 20)
    # an entry of a worker's run: its estimate, and twice its key (" w10000") with its packed length and count
    per_entry = counting.COUNTER_ENTRY_BYTES + counting.KEY_COPIES * (len(b" w10000") + 12)
    budget = 8 * mib  # 2 workers: 6 MiB left, ~13,200 entries; 1 worker: ~21,000 (the doc has 20,000)
    _count(store_dir, [path], GPT2, workers=2, max_memory=budget, range_bytes=4096)
    limit = counting.flush_threshold(budget, 2) // per_entry
    # + the ranges taken at the flush: the one that reached the limit and those in flight on the
    # threads (2 per worker, counted into their kept tables already), about 585 pretokens each
    assert len(sizes) == 2 and limit <= sizes[0] <= limit + 5 * 600, (sizes, limit)
    sizes.clear()
    _count(tmp_path / "one", [path], GPT2, workers=1, max_memory=budget, range_bytes=4096)
    assert len(sizes) == 1 and sizes[0] > limit, sizes


# -- Store.stats and the settings of a run (what `stats` and `count` show) ---------------------
def test_stats_against_a_direct_reading_of_the_words(tmp_path):
    """``Store.stats`` (``bpe-stream stats``) against the words read back one by one: the
    unique pretokens, their bytes, the top ones (count first, then bytes) and the totals."""
    from bpe_stream.train.estimate import estimate_train_memory

    with Store.open(tmp_path / "st", create=True) as st_:
        st_.ensure_settings(make_settings("gpt2", ["<|endoftext|>"]))
        counts = {b" the": 9, b" a": 9, b"x" * 600: 3, b"\xff": 1, b" b": 2}
        add(st_, counts)
        words = dict(all_words(st_))
        for top in (0, 1, 2, 10):
            data = st_.stats(top)
            assert data["unique_pretokens"] == len(words) == 5
            assert data["unique_pretokens_bytes"] == sum(map(len, words))
            assert data["estimated_train_memory_bytes"] == estimate_train_memory(5, sum(map(len, words)))
            best = sorted(Counter(words).items(), key=lambda kv: (-kv[1], kv[0]))[:top]
            assert [(row["pretoken"], row["count"]) for row in data["top"]] == [
                (w.decode("utf-8", "backslashreplace"), n) for w, n in best]
            assert data["settings"]["special_tokens"] == ["<|endoftext|>"]
            assert data["files"] == 0 and data["store"] == st_.path


def test_stats_of_an_empty_store_is_a_store_error(tmp_path):
    with Store.open(tmp_path / "st", create=True) as st_:
        with pytest.raises(StoreError, match="is empty; run 'bpe-stream count' first"):
            st_.stats()


def test_resolve_settings_takes_the_recorded_ones_for_what_is_not_given():
    from bpe_stream.count.counting import resolve_settings

    recorded = make_settings("cl100k", ["<s>"], "</w>")
    nothing = {"pretokenizer": None, "special_tokens": None, "end_of_word": None}
    assert resolve_settings(nothing) == make_settings("gpt2", [], None)  # a new store: the defaults
    assert resolve_settings(nothing, recorded) == recorded
    given = dict(nothing, pretokenizer="whitespace")
    assert resolve_settings(given, recorded) == make_settings("whitespace", ["<s>"], "</w>")
    # the cap: the store's when not given, none in a store recorded without one, the default in a new one
    with_cap = dict(nothing, max_token_bytes=None)
    assert resolve_settings(with_cap, recorded)["max_token_bytes"] == 65536
    uncapped = make_settings("gpt2", [], None, None)
    assert "max_token_bytes" not in resolve_settings(with_cap, uncapped)
    assert resolve_settings(with_cap)["max_token_bytes"] == 65536
    assert resolve_settings(dict(nothing, max_token_bytes=128), recorded)["max_token_bytes"] == 128
    with pytest.raises(ValueError):
        resolve_settings(dict(nothing, pretokenizer=""))  # checked, as make_settings checks


def test_a_file_is_cut_into_at_least_four_ranges_a_worker(tmp_path, monkeypatch):
    """balanced_range: 4 ranges a worker where the file allows it (never below the minimum,
    never more than range_bytes, one worker keeps range_bytes); the store is the same."""
    from bpe_stream.count import counting

    assert counting.balanced_range(8 << 20, 20_000_000, 2) == 2_500_000
    assert counting.balanced_range(8 << 20, 20_000_000, 1) == 8 << 20
    assert counting.balanced_range(8 << 20, 1 << 30, 2) == 8 << 20
    assert counting.balanced_range(8 << 20, 100, 2) == counting.MIN_BALANCED_RANGE
    monkeypatch.setattr(counting, "MIN_BALANCED_RANGE", 64)
    path = tmp_path / "doc.txt"
    path.write_bytes(b"".join(b"word%d and more words, " % (i % 97) for i in range(400)))
    planned = []
    real = counting.file_ranges
    monkeypatch.setattr(counting, "file_ranges", lambda *a: planned.append(a[5]) or real(*a))
    words = []
    for workers in (1, 2):
        with Store.open(tmp_path / f"s{workers}", create=True) as st_:
            count_sources(st_, [Source.from_arg(str(path))], GPT2, workers=workers, range_bytes=4096)
            words.append(all_words(st_))
    size = path.stat().st_size
    assert planned == [4096, -(-size // 8)] and words[0] == words[1]


@fewer_examples(30)
@given(counts=st.dictionaries(_keys, st.integers(1, 1000), max_size=30), block=st.integers(1, 8),
       min_count=st.integers(1, 500))
def test_word_blocks_are_the_words_in_order(tmp_path, counts, block, min_count):
    """iter_word_blocks: the pretokens with counts >= min_count in blocks of at most
    ``block``, short ones in byte order and then the long ones -- what iter_words yields."""
    with Store.open(Path(tempfile.mkdtemp(dir=tmp_path)) / "s", create=True) as st_:
        st_.ensure_settings(GPT2)
        st_.add_batch(counts, {}, {"pretokens": sum(counts.values())})
        with st_.reader() as txn:
            blocks = list(st_.iter_word_blocks(txn, min_count, block=block))
            pairs = list(st_.iter_words(txn, min_count))
    assert all(0 < len(keys) == len(ns) <= block for keys, ns in blocks)
    flat = [(k, n) for keys, ns in blocks for k, n in zip(keys, ns)]
    assert flat == pairs and dict(flat) == {k: n for k, n in counts.items() if n >= min_count}
    short = [k for k, _ in flat if 0 < len(k) <= 511]
    assert short == sorted(short) and flat[:len(short)] == [(k, counts[k]) for k in short]


def test_the_truncation_check_takes_the_size_after_reading_the_meta_pages(store_dir):
    """Store.open took the file's size, then read the meta pages: a count committing in
    between (two counts on a new store) made pages the size did not cover, and the check
    called a whole store truncated.  A size taken before the read that is short of what the
    meta pages name is not damage while the file itself holds them."""
    with Store.open(store_dir, create=True) as st_:
        st_.ensure_settings(GPT2)
        st_.add_batch({b"w%d" % i: 1 for i in range(3000)}, {}, {"pretokens": 3000})
    data = os.path.join(store_dir, "data.mdb")
    size = os.path.getsize(data)
    assert size > 4 * 4096
    store_mod._check_not_truncated(data, 2 * 4096)  # a size from before the last commits
    with open(data, "r+b") as f:  # truly cut short: still damage
        f.truncate(size - 4096)
    with pytest.raises(StoreError, match="truncated"):
        store_mod._check_not_truncated(data, size - 4096)


@pytest.mark.parametrize("first", [True, False])
def test_a_count_past_2_63_aborts_the_batch_in_a_new_store_and_an_old_one(tmp_path, first):
    """The first batch of a new store is appended without lookups; its counts are checked as
    any batch's: past 2**63-1 the batch is refused whole and the store keeps what it had."""
    with Store.open(tmp_path / "s", create=True) as st_:
        st_.ensure_settings(GPT2)
        if not first:
            st_.add_batch({b"ab": 5}, {}, {"pretokens": 5})
        with pytest.raises(StoreError, match="2\\*\\*63"):
            st_.add_batch(store_mod.SortedCounts([b"a", b"ab"], [1, 1 << 63]), {}, {"pretokens": 1})
        assert all_words(st_) == ({} if first else {b"ab": 5})


# -- a batch's columns: the statistics and values made in C ---------------------------------
_native_only = pytest.mark.skipif(store_mod._native is None, reason="bpe_stream._fastbpe is not built")


def _python_stats(keys, ns):
    return sum(map(len, keys)), max(map(len, keys)), sum(ns), min(ns), max(ns)


@_native_only
@given(pairs=st.lists(st.tuples(st.binary(max_size=20), st.integers(-(1 << 56), 1 << 56)), min_size=1, max_size=50))
def test_column_stats_in_c_are_pythons_sums_and_extremes(pairs):
    keys, ns = [k for k, _ in pairs], [n for _, n in pairs]
    assert store_mod._native.column_stats(keys, ns) == _python_stats(keys, ns)
    assert store_mod._column_stats(keys, ns) == _python_stats(keys, ns)


@_native_only
def test_column_stats_leave_to_python_what_c_cannot_hold():
    stats = store_mod._native.column_stats
    for keys, ns in (([b"a"], [1 << 63]), ([b"a", b"b"], [(1 << 63) - 1, 1]),  # past 64 bits, a sum past them
                     ([bytearray(b"a")], [1]), ([b"a"], [True]), ([], []), ([b"a", b"b"], [1])):
        assert stats(keys, ns) is None
    # and the store's helper then computes them in Python, big numbers included
    assert store_mod._column_stats([b"a", b"bc"], [1 << 70, 2]) == (3, 2, (1 << 70) + 2, 2, 1 << 70)


@_native_only
def test_values_in_c_are_eight_bytes_little_endian_in_blocks(monkeypatch):
    monkeypatch.setattr(store_mod, "_VALUE_BLOCK", 7)  # several blocks and a short last one
    ns = [0, 1, 63, 64, 255, 256, (1 << 63) - 1, (1 << 64) - 1] * 4  # (counts below 64 share their values)
    assert list(store_mod._values(ns)) == [n.to_bytes(8, "little") for n in ns]
    for bad in ([-1], [1 << 64]):
        with pytest.raises(OverflowError):
            store_mod._native.le64_values(bad)
    with pytest.raises(TypeError):
        store_mod._native.le64_values([1.0])
    assert list(store_mod._values([])) == []


def test_values_without_the_extension_are_the_same(monkeypatch):
    ns = [1, 2, (1 << 63) - 1]
    want = [n.to_bytes(8, "little") for n in ns]
    monkeypatch.setattr(store_mod, "_native", None)
    assert list(store_mod._values(ns)) == want
    assert store_mod._column_stats([b"x", b"yz", b"w"], ns) == (4, 2, sum(ns), 1, (1 << 63) - 1)


@_native_only
@given(rows=st.lists(st.tuples(st.binary(min_size=1, max_size=12), st.one_of(st.none(), st.integers(1, 1 << 62)),
                               st.integers(1, 1 << 62)), min_size=1, max_size=40),
       floor=st.integers(0, 1 << 63))
def test_add_le64_in_c_is_old_plus_new_with_the_new_keys_counted(rows, floor):
    absent = bytes(8)  # (compared by identity: a value equal to it that the store holds is an old count)
    keys = [k for k, _, _ in rows]
    olds = [absent if old is None else old.to_bytes(8, "little") for _, old, _ in rows]
    ns = [n for _, _, n in rows]
    totals = [(old or 0) + n for _, old, n in rows]
    values, highest, new, new_bytes, reached = store_mod._native.add_le64(keys, olds, ns, absent, floor)
    assert values == [t.to_bytes(8, "little") for t in totals] and highest == max(totals)
    assert reached == [(t, i) for i, t in enumerate(totals) if t >= floor]  # (for the kept top)
    assert (new, new_bytes) == (sum(old is None for _, old, _ in rows), sum(len(k) for k, old, _ in rows if old is None))


@_native_only
def test_add_le64_leaves_to_python_what_c_cannot_hold():
    absent, one = object(), (1).to_bytes(8, "little")
    for keys, olds, ns in (([b"a"], [b"\x01" * 7], [1]),  # a damaged (short) old count
                           ([b"a"], [(2**64 - 1).to_bytes(8, "little")], [1]),  # a sum past 64 bits
                           ([b"a"], [one], [-1]), ([b"a"], [one], [1 << 63]), ([b"a"], [one], [True]),
                           ([b"a", b"b"], [one], [1, 1]), ([bytearray(b"a")], [absent], [1])):
        assert store_mod._native.add_le64(keys, olds, ns, absent, 0) is None
    assert store_mod._native.add_le64([], [], [], absent, 0) == ([], 0, 0, 0, [])


@pytest.mark.parametrize("native", [True, False], ids=["native", "fallback"])
def test_a_batch_into_a_store_that_holds_counts_sums_them(tmp_path, monkeypatch, native):
    if native and store_mod._native is None:
        pytest.skip("bpe_stream._fastbpe is not built")
    if not native:
        monkeypatch.setattr(store_mod, "_native", None)
    with Store.open(tmp_path / "s", create=True) as st_:
        st_.ensure_settings(make_settings("gpt2", []))
        assert st_.add_batch({b" a": 2, b" b": 1}, {}, {"pretokens": 3}) == 2
        assert st_.add_batch({b" a": 5, b" c": 4, b"zz": 1}, {}, {"pretokens": 10}) == 2
        with st_.reader() as txn:
            assert dict(st_.iter_words(txn)) == {b" a": 7, b" b": 1, b" c": 4, b"zz": 1}
        assert st_.totals()["unique_bytes"] == 2 + 2 + 2 + 2
        with pytest.raises(StoreError, match="2\\*\\*63-1"):
            st_.add_batch({b" a": (1 << 63) - 7}, {}, {"pretokens": 1})
        with st_.reader() as txn:
            assert st_.count_of(b" a", txn) == 7  # the refused batch left nothing
