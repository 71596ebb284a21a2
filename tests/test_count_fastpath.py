"""Counting in native code against the plain path: exactly the same counts and stores.

Files and stdin with a named pretokenizer are counted by ``counting.count_bytes``: special
tokens split off in bytes, the stretches between them scanned and counted by a
``CountTable`` (native, or ``PyCountTable`` without the extension), handed to the parent
packed.  The reference here is always ``Counter(pretokenizer.split(text))`` (``regex``) for
each piece between special tokens.  Texts are drawn from alphabets heavy in whitespace of
every kind -- including \\x1c-\\x1f, which ``str.isspace()`` calls space and ``regex`` does
not, \\x85, \\xa0, \\u2028, \\u3000, \\r\\n -- with letters, digits, punctuation, CJK, lone
surrogates (invalid UTF-8) and special tokens; stores are compared for random range sizes,
chunk sizes and worker counts, with the native table and with the Python one; then slices of
the reference corpora go through the CLI and the store.
"""

from __future__ import annotations

import tempfile
from collections import Counter
from pathlib import Path

import pytest
from conftest import fewer_examples
from hypothesis import example, given
from hypothesis import strategies as st
from reliability_helpers import oracle

from bpe_stream.count import counting
from bpe_stream.inputs import streaming
from bpe_stream.count.table import NativeCountTable, PyCountTable, unpack_counts
from bpe_stream.count.counting import (
    DocumentCounter,
    PartialCounts,
    count_bytes,
    count_sources,
    make_settings,
    merge_counts,
)
from bpe_stream.pretok.pretokenize import GPT2_PATTERN, Pretokenizer, SpecialSplitter
from bpe_stream.inputs.reader import InputError, Source, from_bytes, to_bytes
from bpe_stream.store.lmdb_store import Store

NAMED = ["gpt2", "cl100k", "o200k", "whitespace", "words"]
NATIVE = NAMED + ["none"]
ALL = NATIVE + [r"regex:\S+|\s+"]
# The tables a count may run on: the native one only where the extension is built.
TABLES = [PyCountTable] + ([NativeCountTable] if NativeCountTable is not None else [])
CORPORA = Path(__file__).resolve().parent.parent.parent / "shared" / "data" / "corpora"

SPACES = [
    " ", "  ", "   ", "\t", "\n", "\n\n", "\r", "\r\n", "\n\r", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x1f",
    "\x85", "\xa0", "\u1680", "\u2000", "\u2007", "\u200a", "\u2028", "\u2029", "\u202f", "\u205f", "\u3000",
    " \n", "\n ", "\n    ", " \r\n", "\t ", "\xa0 ", " \u3000",
]
WORDS = [
    "a", "s", "the", "The", "HELLO", "wORLD", "x1", "1", "12", "123", "1234", "'s", "'S", "'ll", "'LL", "'re", "'ve",
    "'d", "'m", "'t", "don't", "I'm", "é", "e\u0301", "ß", "Ω", "中文", "日本語", "한국어", "😀", "👍🏽", "٣", "²",
    "!", "...", "?!", ",", ".", "/", "//", "-", "'", '"', "(", ")", "\x00", "\x01", "\x7f", "\u200b",
]
SURROGATES = ["\udc80", "\udcff", "\udce4", "\udcc3"]  # invalid UTF-8 bytes, as surrogateescape decodes them
SPECIAL_TOKENS = ["<|endoftext|>", "<|a|>"]

fragment = st.one_of(
    st.sampled_from(SPACES),
    st.sampled_from(SPACES),
    st.sampled_from(WORDS),
    st.sampled_from(SURROGATES),
    st.text(max_size=3),
)
texts = st.lists(fragment, max_size=60).map("".join)
with_specials = st.lists(st.one_of(fragment, fragment, fragment, st.sampled_from(SPECIAL_TOKENS)), max_size=60).map("".join)


def plain_counts(text: str, name: str, specials=()) -> Counter:
    """The reference: ``Counter(pre.split(piece))`` for each piece between special tokens."""
    pre = Pretokenizer.from_name(name)
    counts = Counter()
    for is_special, piece in SpecialSplitter(list(specials)).split(text):
        if not is_special:
            counts.update(pre.split(piece))
    return counts


def bytes_keys(counts) -> dict:
    return {to_bytes(k): n for k, n in counts.items()}


def native_counts(data: bytes, name: str, specials, table_type) -> PartialCounts:
    partial, table = PartialCounts(), table_type()
    count_bytes(data, make_settings(name, specials), partial, table)
    partial.packed = table.pack()
    return partial


# -- the counting unit -------------------------------------------------------------------------
@pytest.mark.parametrize("name", NATIVE)
@given(text=with_specials)
@example(text="a  b \n")
@example(text=" x\r\n y\x1c \x85z\u3000 <|a|><|endoftext|>")
@example(text="don't  stop\n\n  it's\t<|a|>")
def test_count_bytes_equals_the_plain_path(name, text):
    """Special tokens split off in bytes, the rest scanned and counted by either table."""
    data = to_bytes(text)
    text = from_bytes(data)  # lone surrogates may spell valid UTF-8 ("\udcc3\udc80" is b"\xc3\x80")
    expected = plain_counts(text, name, SPECIAL_TOKENS)
    n_specials = sum(1 for is_special, _ in SpecialSplitter(SPECIAL_TOKENS).split(text) if is_special)
    packed = set()
    for table_type in TABLES:
        partial = native_counts(data, name, SPECIAL_TOKENS, table_type)
        assert unpack_counts(partial.packed) == bytes_keys(expected)
        assert (partial.pretokens, partial.specials) == (sum(expected.values()), n_specials)
        packed.add(partial.packed)
    assert len(packed) == 1  # the native table packs exactly what the Python one does
    # no special tokens: the whole text is scanned, special tokens' characters included
    partial = native_counts(data, name, [], TABLES[-1])
    assert unpack_counts(partial.packed) == bytes_keys(plain_counts(text, name))


def test_special_tokens_in_bytes_take_the_longest_match_left_to_right():
    specials = ["<a>", "<a><b>", "b><c"]
    text = "x<a><b><c>y<a>b><c\xff<a><a><b"
    data = to_bytes(text)
    partial = native_counts(data, "gpt2", specials, TABLES[-1])
    assert partial.specials == sum(1 for is_special, _ in SpecialSplitter(specials).split(text) if is_special) == 5
    assert unpack_counts(partial.packed) == bytes_keys(plain_counts(text, "gpt2", specials))


@pytest.mark.parametrize("name", ALL)
@fewer_examples(100)
@given(text=with_specials, sizes=st.lists(st.integers(1, 40), min_size=1, max_size=8))
def test_document_counter_equals_plain_path(name, text, sizes):
    """The str path (text in memory): special tokens split the text before pretokenization,
    any chunking."""
    settings_ = make_settings(name, SPECIAL_TOKENS)
    doc = DocumentCounter(settings_)
    pos, k = 0, 0
    while pos < len(text):
        doc.feed(text[pos:pos + sizes[k % len(sizes)]])
        pos += sizes[k % len(sizes)]
        k += 1
    doc.feed("", final=True)
    expected = plain_counts(text, name, SPECIAL_TOKENS)
    assert doc.partial.counter == expected
    assert doc.partial.pretokens == sum(expected.values())
    assert doc.partial.specials == sum(1 for is_special, _ in SpecialSplitter(SPECIAL_TOKENS).split(text) if is_special)


def test_invalid_utf8_survives_native_counting():
    data = "a\xff b\xff\xfe  c\xe4\xb8 中\xe4 \xff".encode("utf-8", "surrogateescape")
    data = b"x \xff\xfe y \xc3 \xe4\xb8 z\xff " + data * 3
    text = from_bytes(data)
    for name in NATIVE:
        for table_type in TABLES:
            counts = unpack_counts(native_counts(data, name, [], table_type).packed)
            assert counts == bytes_keys(Counter(Pretokenizer.from_name(name).split(text)))
            if name != "words":  # the lossless ones: every byte is in some pretoken
                assert sum(n * len(k) for k, n in counts.items()) == len(data)
            assert any(b"\xff" in k for k in counts)


def test_counts_are_merged():
    counter = Counter({"a": 1, "b": 10})
    merge_counts(counter, {"a": 1, "d": 2})
    assert counter == Counter({"a": 2, "b": 10, "d": 2})
    empty = Counter()
    merge_counts(empty, Counter({"x": 3}))
    assert empty == Counter({"x": 3}) and type(empty) is Counter


@pytest.mark.parametrize("name", ["gpt2", "none", r"regex:\S+|\s+"])
def test_units_hand_the_store_its_bytes(tmp_path, name):
    """What the workers send to the parent: counts keyed by the pretokens' exact bytes (packed
    for the named pretokenizers), whichever form the unit is asked for."""
    data = "caf\xe9 \xff\xfe x<|endoftext|>\u4e2d\u6587 \xe4\xb8".encode("utf-8", "surrogateescape") * 50
    path = tmp_path / "doc.txt"
    path.write_bytes(data)
    settings_ = make_settings(name, ["<|endoftext|>"])
    expected = plain_counts(from_bytes(data), name, ["<|endoftext|>"])
    as_str = counting.count_range(str(path), 0, len(data), settings_)
    as_bytes = counting.count_range(str(path), 0, len(data), settings_, bytes_keys=True)
    as_packed = counting.count_range(str(path), 0, len(data), settings_, bytes_keys=True, packed=True)
    assert as_str.counter == expected and as_str.packed is None
    assert as_bytes.counter == bytes_keys(expected) and as_bytes.packed is None
    if name.startswith("regex:"):
        assert as_packed.packed is None and as_packed.counter == bytes_keys(expected)
    else:
        assert not as_packed.counter and unpack_counts(as_packed.packed) == bytes_keys(expected)
    for unit in (as_str, as_bytes, as_packed):
        assert (unit.pretokens, unit.specials, unit.bytes) == (sum(expected.values()), 50, len(data))
        assert unit.digest == as_str.digest
    pieces = [from_bytes(b"caf\xc3\xa9 \xff\xfe x"), from_bytes(b"\n\xe4\xb8\xad caf\xc3\xa9"), ""]
    partial = counting._count_pieces(settings_, pieces, 1, 13).unpacked()
    expected = Counter(t for piece in pieces for t in Pretokenizer.from_name(name).split(piece))
    assert partial.counter == bytes_keys(expected) and partial.pretokens == sum(expected.values())
    assert (partial.specials, partial.bytes) == (1, 13 + sum(len(to_bytes(p)) for p in pieces))


@pytest.mark.parametrize("name", ["gpt2", "words", r"regex:\S+|\s+"])
@fewer_examples(40)
@given(before=st.binary(max_size=30).map(lambda b: b.decode("utf-8", "ignore").encode()),
       bad=st.sampled_from([b"\xff", b"\xe4\xb8", b"\xc3", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\x80"]),
       after=st.binary(max_size=10), start=st.integers(0, 5))
def test_strict_utf8_names_the_first_invalid_byte(tmp_path, name, before, bad, after, start):
    """The native path checks the range before counting it and names the same offset as the
    str path's decoder: of the file, not of the range."""
    data = b"hello " + before + bad + after
    path = Path(tempfile.mkdtemp(dir=tmp_path)) / "doc.txt"
    path.write_bytes(data)
    with pytest.raises(UnicodeDecodeError) as decoded:
        data[start:].decode("utf-8")
    offset = start + decoded.value.start
    with pytest.raises(InputError, match=f"^invalid UTF-8 at byte offset {offset};"):
        counting.count_range(str(path), start, len(data), make_settings(name), strict_utf8=True, packed=True)
    before_bad = counting.count_range(str(path), start, 6, make_settings(name), strict_utf8=True)
    assert before_bad.counter == plain_counts("hello "[start:], name)


# -- stores: any range size, chunk size, worker count and table ------------------------------------
@pytest.mark.parametrize("name", ALL)
@fewer_examples(12)
@given(docs=st.lists(with_specials.map(to_bytes), min_size=1, max_size=3), range_bytes=st.integers(1, 60),
       chunk_bytes=st.integers(1, 9), workers=st.sampled_from([1, 2]), python_table=st.booleans())
def test_stores_equal_the_plain_path_for_any_ranges_workers_and_table(tmp_path, name, docs, range_bytes,
                                                                      chunk_bytes, workers, python_table):
    work = Path(tempfile.mkdtemp(dir=tmp_path))
    paths = []
    for i, data in enumerate(docs):
        paths.append(work / f"doc{i}.txt")
        paths[-1].write_bytes(data)
    expected = Counter()
    for data in docs:
        expected.update(bytes_keys(plain_counts(from_bytes(data), name, SPECIAL_TOKENS)))
    settings_ = make_settings(name, SPECIAL_TOKENS)
    with pytest.MonkeyPatch.context() as mp:
        if python_table:  # what an install without a C compiler counts with
            mp.setattr(counting, "CountTable", PyCountTable)
        with Store.open(str(work / "store"), create=True) as st_:
            count_sources(st_, [Source.from_arg(str(p)) for p in paths], settings_, workers=workers,
                          range_bytes=range_bytes, chunk_bytes=chunk_bytes)
    words, totals = _store_words(work / "store")
    assert words == dict(expected)
    assert totals["pretokens"] == sum(expected.values()) and totals["bytes"] == sum(map(len, docs))
    n_specials = sum(1 for data in docs for s, _ in SpecialSplitter(SPECIAL_TOKENS).split(from_bytes(data)) if s)
    assert (totals["specials"], totals["documents"]) == (n_specials, n_specials + len(docs))


# Long runs of spaces (newlines anywhere in them, between any characters): ranges planned
# inside them (``streaming.Range.one_pretoken``, counted as one pretoken's pieces) with small
# read windows, so that every run is read to its end.
space_run = st.lists(st.tuples(st.sampled_from(SPACES), st.integers(1, 30)).map(lambda t: t[0] * t[1]), min_size=1,
                     max_size=5).map("".join)
run_doc = st.lists(st.one_of(st.sampled_from(WORDS), st.sampled_from(SPECIAL_TOKENS), space_run), max_size=12).map("".join)


@pytest.mark.parametrize("name", ["gpt2", "cl100k", "o200k", "whitespace"])
@fewer_examples(30)
@given(text=run_doc, range_bytes=st.integers(1, 80), cap=st.integers(4, 16), workers=st.sampled_from([1, 2]),
       python_table=st.booleans(), stream=st.booleans())
def test_stores_of_long_runs_of_spaces_equal_the_plain_path(tmp_path, name, text, range_bytes, cap, workers,
                                                           python_table, stream):
    """Documents of long runs of spaces give the plain path's store, counted from a file or
    as a stream (stdin's path: text held past a piece with no cut is spooled to the store's
    directory and counted as a file; no spool is left behind)."""
    work = Path(tempfile.mkdtemp(dir=tmp_path))
    path = work / "doc.txt"
    data = to_bytes(text)
    path.write_bytes(data)
    settings_ = make_settings(name, SPECIAL_TOKENS, max_token_bytes=cap)
    pre = Pretokenizer.from_name(name, max_bytes=cap)
    expected = Counter()
    for is_special, piece in SpecialSplitter(SPECIAL_TOKENS).split(text):
        if not is_special:
            expected.update(bytes_keys(Counter(pre.split(piece))))
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(streaming, "CUT_WINDOW", 32)
        mp.setattr(counting, "MIN_BALANCED_RANGE", 1)
        if python_table:
            mp.setattr(counting, "CountTable", PyCountTable)
        source = Source(str(path), b"-", stream=True) if stream else Source.from_arg(str(path))
        with Store.open(str(work / "store"), create=True) as st_:
            count_sources(st_, [source], settings_, workers=workers, range_bytes=range_bytes, chunk_bytes=16)
    words, totals = _store_words(work / "store")
    assert words == dict(expected)
    assert totals["pretokens"] == sum(expected.values()) and totals["bytes"] == len(data)
    assert not [p for p in (work / "store").iterdir() if p.name.startswith(streaming.SPOOL_PREFIX)]


# -- the reference corpora, through the store --------------------------------------------------
def _slice(tmp_path, name: str, size: int) -> Path:
    source = CORPORA / name
    if not source.is_file():
        pytest.fail(f"reference corpus missing: {source}")
    with open(source, "rb") as f:
        data = f.read(size)
    path = tmp_path / name
    path.write_bytes(data)
    return path


def _store_words(path: Path):
    with Store.open(str(path), readonly=True) as st_, st_.reader() as txn:
        return dict(st_.iter_words(txn)), st_.totals(txn)


def _expected(path: Path, name: str) -> dict:
    counts = plain_counts(from_bytes(path.read_bytes()), name, ["<|endoftext|>"])
    return {to_bytes(k): v for k, v in counts.items()}, sum(counts.values())


@pytest.mark.parametrize("corpus", ["en_100M.txt", "multi_25M.txt", "code_25M.txt"])
def test_corpus_slices_through_the_cli_equal_the_plain_path(cli, tmp_path, corpus):
    path = _slice(tmp_path, corpus, 1_500_000)
    expected, pretokens = _expected(path, "gpt2")
    assert (expected, pretokens) == _oracle(path)  # the spec's GPT-2 pattern, as reliability tests count
    res = cli("count", "--quiet", "--store", tmp_path / "store", "--special-token", "<|endoftext|>",
              "--workers", "2", path)
    assert res.exit_code == 0, res
    words, totals = _store_words(tmp_path / "store")
    assert words == expected
    assert totals["pretokens"] == pretokens


@pytest.mark.parametrize("name", NATIVE)
def test_corpus_slices_equal_the_plain_path(tmp_path, name):
    """The three corpora, in ranges of 256 kB on two workers, for every named pretokenizer."""
    paths = [_slice(tmp_path, c, 700_000) for c in ("en_100M.txt", "multi_25M.txt", "code_25M.txt")]
    settings_ = make_settings(name, ["<|endoftext|>"])
    expected, pretokens = Counter(), 0
    for p in paths:
        e, n = _expected(p, name)
        expected.update(e)
        pretokens += n
    with Store.open(str(tmp_path / "store"), create=True) as st_:
        count_sources(st_, [Source.from_arg(str(p)) for p in paths], settings_, workers=2, range_bytes=256 << 10)
    words, totals = _store_words(tmp_path / "store")
    assert words == dict(expected)
    assert totals["pretokens"] == pretokens


def _oracle(path: Path):
    counts, _ = oracle([path.read_bytes()])
    return dict(counts), sum(counts.values())


def test_two_workers_count_plain_files_on_threads_and_other_inputs_on_processes(tmp_path, monkeypatch):
    """Plain files with a named pretokenizer: ranges counted on threads of this process (their
    C code runs without the GIL), with the stores of one worker.  A JSON Lines file among the
    inputs (its records decoded in Python) or a ``regex:`` pattern: worker processes."""
    import threading

    text = (CORPORA / "en_100M.txt").read_bytes()[:400_000]
    plain = tmp_path / "a.txt"
    plain.write_bytes(text)
    records = tmp_path / "b.jsonl"
    records.write_text('{"text": "one two"}\n{"text": "three"}\n')
    seen = []
    real = counting.count_range_shared

    def spy(*args):
        seen.append(threading.current_thread().name)
        return real(*args)

    monkeypatch.setattr(counting, "count_range_shared", spy)

    def count(store, paths, workers, name="gpt2"):
        with Store.open(str(store), create=True) as st_:
            return count_sources(st_, [Source.from_arg(str(p)) for p in paths], make_settings(name, ["<|endoftext|>"]),
                                 workers=workers, range_bytes=64 << 10)

    assert count(tmp_path / "one", [plain], 1).workers == 1 and seen == []
    assert count(tmp_path / "two", [plain], 2).workers == 2
    assert len(seen) >= 6 and all(name.startswith("bpe-stream-count") for name in seen), seen
    assert _store_words(tmp_path / "two") == _store_words(tmp_path / "one")
    seen.clear()
    count(tmp_path / "mixed", [plain, records], 2)
    count(tmp_path / "custom", [plain], 2, name="regex:" + GPT2_PATTERN)
    assert seen == []
    assert _store_words(tmp_path / "custom")[0] == _store_words(tmp_path / "one")[0]
