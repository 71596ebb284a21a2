"""The counting fast path against the plain path: exactly the same counts.

The fast path (``counting.PretokenCounter``) cuts text into segments at the safe cuts of
the pretokenizer (``pretokenize.segmenter``), counts the segments, and pretokenizes each
distinct segment once; all-ASCII text goes through an ``re`` pattern with the
pretokenizer's matches on ASCII (``pretokenize.ASCII_PATTERNS``), and a process chooses
between that and the plain path by what it measures.  The reference here is always
``Counter(pretokenizer.split(text))`` (``regex``) for each piece between special tokens,
whichever path is taken or forced.  Texts are
drawn from alphabets heavy in whitespace of every kind -- including \\x1c-\\x1f, which
``str.isspace()`` calls space and ``regex`` does not, \\x85, \\xa0, \\u2028, \\u3000, \\r\\n --
with letters, digits, punctuation, CJK, lone surrogates (invalid UTF-8) and special tokens;
then slices of the reference corpora go through the CLI and the store.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
import regex
from conftest import fewer_examples
from hypothesis import example, given
from hypothesis import strategies as st

from bpe_stream import counting
from bpe_stream.counting import (
    DocumentCounter,
    PartialCounts,
    PretokenCounter,
    _add_times,
    _Choice,
    _Forced,
    count_sources,
    make_settings,
    merge_counts,
)
from bpe_stream.pretokenize import (
    ASCII_PATTERNS,
    SPACE_CHARS,
    Pretokenizer,
    SpecialSplitter,
    ascii_pattern,
    segmenter,
)
from bpe_stream.reader import Source, from_bytes, to_bytes
from bpe_stream.store import Store

NAMED = ["gpt2", "cl100k", "o200k", "whitespace", "words"]
ALL = NAMED + ["none", r"regex:\S+|\s+"]
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
ascii_texts = st.lists(
    st.one_of(
        st.text(alphabet=[chr(i) for i in range(128)], max_size=4),
        st.sampled_from([w for w in SPACES + WORDS if w.isascii()]),
    ),
    max_size=50,
).map("".join)


def plain_counts(text: str, name: str, specials=()) -> Counter:
    """The reference: ``Counter(pre.split(piece))`` for each piece between special tokens."""
    pre = Pretokenizer.from_name(name)
    counts = Counter()
    for is_special, piece in SpecialSplitter(list(specials)).split(text):
        if not is_special:
            counts.update(pre.split(piece))
    return counts


def fast_counts(pieces, name: str, fast=True) -> PartialCounts:
    partial = PartialCounts()
    counter = PretokenCounter(Pretokenizer.from_name(name), partial, fast)
    for piece in pieces:
        counter.add(piece)
    counter.flush()
    return partial


# -- the building blocks -------------------------------------------------------------------
def test_space_chars_are_regex_whitespace():
    everything = "".join(chr(c) for c in range(0x110000) if not 0xD800 <= c < 0xE000)
    assert set(regex.findall(r"\s", everything)) == set(SPACE_CHARS)
    # which is why neither str.split() nor re's \s will do
    assert {c for c in everything if c.isspace()} - set(SPACE_CHARS) == set("\x1c\x1d\x1e\x1f")
    assert "\x85" in SPACE_CHARS and "\u200b" not in SPACE_CHARS


@pytest.mark.parametrize("name", sorted(ASCII_PATTERNS))
@given(text=ascii_texts)
def test_ascii_patterns_match_like_the_pretokenizer_on_ascii(name, text):
    pre = Pretokenizer.from_name(name)
    assert text.isascii()
    assert ascii_pattern(pre).findall(text) == pre.split(text)


def test_ascii_patterns_on_every_short_ascii_string():
    """Every string of up to 3 characters over an alphabet of the characters that matter."""
    alphabet = "asdtlvremASLK'1 \t\n\r\x0b\x0c\x1c\x00!/."
    strings = [a + b + c for a in alphabet for b in [""] + list(alphabet) for c in [""] + list(alphabet)]
    for name in ASCII_PATTERNS:
        pre = Pretokenizer.from_name(name)
        fast = ascii_pattern(pre)
        assert all(fast.findall(s) == pre.split(s) for s in strings), name


def test_only_named_pretokenizers_have_a_fast_path():
    for name in ["none", r"regex:\S+|\s+"]:
        pre = Pretokenizer.from_name(name)
        assert segmenter(pre) is None and ascii_pattern(pre) is None
    for name in NAMED:
        assert segmenter(Pretokenizer.from_name(name)) is not None


@pytest.mark.parametrize("name", NAMED)
@given(text=texts)
def test_segments_end_at_exactly_the_safe_cuts(name, text):
    pre = Pretokenizer.from_name(name)
    seg = segmenter(pre)
    segments = seg.pattern.findall(text)
    assert "".join(segments) == text and all(segments)
    ends, pos = set(), 0
    for s in segments[:-1]:
        pos += len(s)
        ends.add(pos)
    rule = r"(?<=\S)[^\S\r\n]" if name in ("cl100k", "o200k") else r"(?<=\S)\s"
    assert ends == {m.start() for m in regex.finditer(rule, text)}
    # every segment but the first and the last can be joined to others
    assert all(seg.joinable(s) for s in segments[1:-1])
    # pieces cut at those points pretokenize like the whole ...
    assert [t for s in segments for t in pre.split(s)] == pre.split(text)
    # ... and so does any join of joinable segments, in any order
    joinable = [s for s in segments if seg.joinable(s)][::-1]
    assert pre.split("".join(joinable)) == [t for s in joinable for t in pre.split(s)]


# -- the fast path against the plain path ----------------------------------------------------
@pytest.mark.parametrize("name", ALL)
@given(text=texts, data=st.data())
@example(text="a  b \n", data=None)
@example(text=" x\r\n y\x1c \x85z\u3000 ", data=None)
@example(text="don't  stop\n\n  it's\t", data=None)
def test_fast_path_counts_like_plain_split(name, text, data):
    expected = Counter(Pretokenizer.from_name(name).split(text))
    for fast in (True, False, None):
        partial = fast_counts([text], name, fast)
        assert partial.counter == expected
        assert partial.pretokens == sum(expected.values())
    # several pieces, cut at safe cuts, count like the whole (first and last segments of
    # each piece are the ones that cannot be joined)
    seg = segmenter(Pretokenizer.from_name(name))
    if seg is not None and text and data is not None:
        segments = seg.pattern.findall(text)
        cuts = sorted(data.draw(st.sets(st.integers(1, len(segments)), max_size=5)))
        pieces = ["".join(segments[a:b]) for a, b in zip([0] + cuts, cuts + [len(segments)])]
        partial = fast_counts(pieces, name, True)
        assert partial.counter == expected and partial.pretokens == sum(expected.values())


@pytest.mark.parametrize("name", ALL)
@fewer_examples(100)
@given(text=with_specials, sizes=st.lists(st.integers(1, 40), min_size=1, max_size=8), fast=st.sampled_from([True, False, None]))
def test_document_counter_equals_plain_path(name, text, sizes, fast):
    """Special tokens split the text before pretokenization; any chunking, either path."""
    settings_ = make_settings(name, SPECIAL_TOKENS)
    doc = DocumentCounter(settings_, fast=fast)
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


@pytest.mark.parametrize("name", NAMED)
@fewer_examples(60)
@given(pieces=st.lists(texts, max_size=6), limit=st.integers(1, 5), flush_slice=st.integers(1, 4))
def test_pending_segments_flushed_early_and_in_slices_count_the_same(name, pieces, limit, flush_slice):
    expected = Counter()
    for piece in pieces:
        expected.update(Pretokenizer.from_name(name).split(piece))
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(counting, "SEGMENT_LIMIT", limit)  # pretokenize the distinct segments every few
        mp.setattr(counting, "FLUSH_SLICE", flush_slice)  # ... a few per findall call
        partial = fast_counts(pieces, name, True)
    assert partial.counter == expected and partial.pretokens == sum(expected.values())


def test_invalid_utf8_survives_the_fast_path():
    data = "a\xff b\xff\xfe  c\xe4\xb8 中\xe4 \xff".encode("utf-8", "surrogateescape")
    text = from_bytes(b"x \xff\xfe y \xc3 \xe4\xb8 z\xff " + data * 3)
    for name in NAMED:
        partial = fast_counts([text], name, True)
        assert partial.counter == Counter(Pretokenizer.from_name(name).split(text))
        if name != "words":  # the lossless ones: every byte is in some pretoken
            assert sum(n * len(to_bytes(k)) for k, n in partial.counter.items()) == len(to_bytes(text))
        assert any("\udcff" in k for k in partial.counter)


def test_counts_are_added_with_repeats_and_merged():
    counter = Counter({"a": 1})
    _add_times(counter, ["a", "b", "a", "c", "b", "a"], 5)
    assert counter == Counter({"a": 16, "b": 10, "c": 5})
    _add_times(counter, ["c", "c"], 1)
    assert counter == Counter({"a": 16, "b": 10, "c": 7})
    merge_counts(counter, {"a": 1, "d": 2})
    assert counter == Counter({"a": 17, "b": 10, "c": 7, "d": 2})
    empty = Counter()
    merge_counts(empty, Counter({"x": 3}))
    assert empty == Counter({"x": 3}) and type(empty) is Counter


def test_units_hand_the_store_its_bytes(tmp_path):
    """What the workers send to the parent: counts keyed by the pretokens' exact bytes."""
    data = "caf\xe9 \xff\xfe x<|endoftext|>\u4e2d\u6587 \xe4\xb8".encode("utf-8", "surrogateescape") * 50
    path = tmp_path / "doc.txt"
    path.write_bytes(data)
    settings_ = make_settings("gpt2", ["<|endoftext|>"])
    as_str = counting.count_range(str(path), 0, len(data), settings_)
    as_bytes = counting.count_range(str(path), 0, len(data), settings_, bytes_keys=True)
    assert as_bytes.counter == {to_bytes(k): n for k, n in as_str.counter.items()}
    assert (as_bytes.pretokens, as_bytes.specials, as_bytes.bytes) == (as_str.pretokens, as_str.specials, len(data))
    pieces = [from_bytes(b"caf\xc3\xa9 \xff\xfe x"), from_bytes(b"\n\xe4\xb8\xad caf\xc3\xa9")]
    partial = counting._count_pieces("gpt2", pieces, 1, 13)
    expected = Counter(t for piece in pieces for t in Pretokenizer.from_name("gpt2").split(piece))
    assert partial.counter == {to_bytes(k): n for k, n in expected.items()}
    assert (partial.specials, partial.bytes) == (1, 13 + sum(len(to_bytes(p)) for p in pieces))


def test_the_choice_between_paths():
    enough = counting.MIN_CHOICE_PRETOKENS
    choice = _Choice(False, 0.9, first_try=100, retry_chars=1000)
    choice.plain_done(60)
    assert not choice.fast
    choice.plain_done(60)
    assert choice.fast  # tries the fast path
    choice.fast_done(segments=enough, distinct=0, distinct_tokens=0, total=enough // 2)
    assert choice.fast  # too little to tell
    choice.fast_done(segments=enough, distinct=0, distinct_tokens=0, total=enough // 2)
    assert not choice.fast  # cost (2 * enough) / enough > 0.9
    choice.plain_done(999)
    assert not choice.fast
    choice.plain_done(1)
    assert choice.fast  # tries again after retry_chars
    choice.fast_done(segments=2 * enough, distinct=0, distinct_tokens=0, total=enough)
    assert not choice.fast
    choice.plain_done(1999)
    assert not choice.fast  # the next try waits twice as long
    choice.plain_done(1)
    assert choice.fast
    choice.fast_done(segments=enough // 2, distinct=enough // 10, distinct_tokens=enough // 4, total=enough)
    assert choice.fast  # cost 0.8 < 0.9: it pays, keep it
    forced = _Forced(True)
    forced.fast_done(enough * 10, enough * 10, enough * 10, enough)
    assert forced.fast


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
    res = cli("count", "--quiet", "--store", tmp_path / "store", "--special-token", "<|endoftext|>",
              "--workers", "2", path)
    assert res.exit_code == 0, res
    words, totals = _store_words(tmp_path / "store")
    assert words == expected
    assert totals["pretokens"] == pretokens


@pytest.mark.parametrize("fast", [True, False])
@pytest.mark.parametrize("name", NAMED)
def test_corpus_slices_on_either_path_equal_the_plain_path(monkeypatch, tmp_path, name, fast):
    """Every lane forced onto one path, in ranges of 256 kB on two workers."""
    monkeypatch.setattr(counting, "_choice", lambda _name, _ascii, _fast: _Forced(fast))
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
