"""Pretokenizers, special-token splitting and streaming: any chunking gives the pretokens of the whole.

References: the patterns of bpe.md (gpt2, whitespace, words), tiktoken's own ``pat_str`` for
cl100k/o200k (read from tiktoken_ext without loading any ranks), ``regex.findall`` over the
whole text, and a textbook longest-match special-token scan (tests/textbook.py).
"""

from __future__ import annotations

import io
from collections import Counter

import pytest
import regex
import textbook
from conftest import fewer_examples, tiktoken_pattern
from hypothesis import given
from hypothesis import strategies as st

from bpe_stream.inputs import reader
from bpe_stream.count.counting import DocumentCounter, count_text, make_settings
from bpe_stream.pretok.pretokenize import (
    FAMILY_CUT_MIN_CHARS,
    PretokenizeError,
    Pretokenizer,
    SpecialSplitter,
    StreamSplitter,
    _ascii_classes_agree,
    gpt2_split,
)

NAMES = ["gpt2", "cl100k", "o200k", "whitespace", "words", "none"]


@pytest.fixture(scope="module")
def patterns():
    return {
        "gpt2": textbook.GPT2_PATTERN,
        "cl100k": tiktoken_pattern("cl100k_base"),
        "o200k": tiktoken_pattern("o200k_base"),
        "whitespace": textbook.WHITESPACE_PATTERN,
        "words": textbook.WORDS_PATTERN,
        "none": None,
    }


# -- text strategies ---------------------------------------------------------------------
FRAGMENTS = [
    "a", "hello", "Hello", "HELLO", "wORLD", "x", " ", "  ", "   ", "\t", "\n", "\n\n", "\r\n", "\r", " \n", "\u00a0",
    "\u3000", "'ll", "'s", "'S", "'re", "'ve", "'d", "'m", "'t", "don't", "I'LL", "'", "1", "12", "123", "12345",
    "٣", "中文", "日本語", "😀", "👍🏽", "é", "e\u0301", "ß", "Ω", "!", "?!", "...", "/", "//", "-", "<", "|", ">", "<|",
    "|>", "<|a|>", "<|b|>", "<|a|><|b|>", "<|endoftext|>", "<|endoftext", "<|a b|>", "\x00", "\x0b", "\x0c", "\x1c", "\x85",
]
RAW_BYTES = [b"\xff", b"\xfe", b"\xe4", b"\x80", b"\xe4\xb8", b"\xf0\x9f\x98", b"\xc3"]

part = st.one_of(
    st.sampled_from(FRAGMENTS).map(lambda s: s.encode("utf-8")),
    st.sampled_from(RAW_BYTES),
    st.text(max_size=4).map(lambda s: s.encode("utf-8", "surrogatepass")),
)
document_bytes = st.lists(part, max_size=30).map(b"".join)
SPECIAL_SETS = [[], ["<|endoftext|>"], ["<|a|>", "<|a|><|b|>"], ["<|a|><|b|>", "<|a|>", "<|b|>"], ["<|a b|>", "\n\n"]]
specials_st = st.sampled_from(SPECIAL_SETS)


class PieceStream(io.RawIOBase):
    """A binary stream whose reads return pieces of the given sizes (cycled), whatever is asked."""

    def __init__(self, data: bytes, sizes):
        self.data, self.sizes, self.pos, self.k = data, list(sizes) or [1], 0, 0

    def readable(self):
        return True

    def read(self, n=-1):
        size = self.sizes[self.k % len(self.sizes)]
        self.k += 1
        out = self.data[self.pos:self.pos + size]
        self.pos += len(out)
        return out


def stream_items(name, specials, data, sizes):
    """(is_special, piece) from StreamSplitter fed through reader.decode_chunks in odd chunks."""
    pre = Pretokenizer.from_name(name)
    splitter = StreamSplitter(pre, SpecialSplitter(specials))
    out = []
    for text, _, _, final in reader.decode_chunks(PieceStream(data, sizes), chunk_bytes=3):
        out += split_items(pre, splitter.feed(text, final=final))
    return out


def split_items(pre, items):
    """(is_special, piece) of StreamSplitter items, each text piece pretokenized alone."""
    out = []
    for kind, value in items:
        if kind == "special":
            out.append((True, value))
        else:
            assert kind == "text", kind
            out.extend((False, p) for p in pre.split(value))
    return out


def whole_items(patterns, name, specials, data):
    return textbook.pretokens(reader.from_bytes(data), patterns[name], specials)


# -- the patterns ------------------------------------------------------------------------
def test_named_patterns_are_the_reference_patterns(patterns):
    for name in ("gpt2", "cl100k", "o200k", "whitespace", "words"):
        assert Pretokenizer.from_name(name).pattern == patterns[name], name
    assert Pretokenizer.from_name("none").pattern is None


@given(document_bytes, st.sampled_from(NAMES))
def test_split_equals_findall_of_reference_pattern(patterns, data, name):
    text = reader.from_bytes(data)
    expected = [text] if name == "none" and text else (regex.findall(patterns[name], text) if patterns[name] else [])
    assert Pretokenizer.from_name(name).split(text) == expected


@given(st.text(max_size=40), st.sampled_from(["gpt2", "cl100k", "o200k"]))
def test_split_equals_findall_on_arbitrary_text(patterns, text, name):
    assert Pretokenizer.from_name(name).split(text) == regex.findall(patterns[name], text)


def test_split_examples():
    gpt2 = Pretokenizer.from_name("gpt2")
    assert gpt2.split("Hello world! I'll  go") == ["Hello", " world", "!", " I", "'ll", " ", " go"]
    assert Pretokenizer.from_name("whitespace").split("ab  ab\tac") == ["ab", "  ", "ab", "\t", "ac"]
    assert Pretokenizer.from_name("words").split(" low  lower\n") == ["low", "lower"]
    assert Pretokenizer.from_name("none").split("a b") == ["a b"]
    cl = Pretokenizer.from_name("cl100k")
    assert cl.split("I'LL 12345") == ["I", "'LL", " ", "123", "45"]


def test_unknown_or_bad_pretokenizer():
    with pytest.raises(PretokenizeError):
        Pretokenizer.from_name("gpt3")
    with pytest.raises(PretokenizeError):
        Pretokenizer.from_name("regex:(")


# -- special tokens ----------------------------------------------------------------------
@given(document_bytes, specials_st)
def test_special_splitter_is_longest_match_left_to_right(data, specials):
    text = reader.from_bytes(data)
    assert list(SpecialSplitter(specials).split(text)) == textbook.split_specials(text, specials)


def test_overlapping_specials_longest_wins():
    sp = SpecialSplitter(["<|a|>", "<|a|><|b|>"])
    assert list(sp.split("x<|a|><|b|>y<|a|><|a|>")) == [
        (False, "x"), (True, "<|a|><|b|>"), (False, "y"), (True, "<|a|>"), (True, "<|a|>"),
    ]
    sp = SpecialSplitter(["<|endoftext|>", "<|endoftext|><|endoftext|>"])
    assert list(sp.split("<|endoftext|><|endoftext|><|endoftext|>")) == [
        (True, "<|endoftext|><|endoftext|>"), (True, "<|endoftext|>"),
    ]


# -- streaming ---------------------------------------------------------------------------
chunk_sizes = st.lists(st.integers(min_value=1, max_value=9), min_size=1, max_size=6)


@given(document_bytes, specials_st, chunk_sizes)
@pytest.mark.parametrize("name", NAMES)
def test_stream_splitter_any_chunking_equals_whole(patterns, name, data, specials, sizes):
    assert stream_items(name, specials, data, sizes) == whole_items(patterns, name, specials, data)


@given(st.lists(st.sampled_from(FRAGMENTS), max_size=40).map("".join), specials_st,
       st.lists(st.integers(min_value=0, max_value=12), max_size=8))
@pytest.mark.parametrize("name", NAMES)
def test_stream_splitter_character_cuts(patterns, name, text, specials, cuts):
    """Cut the str itself (no decoder involved) at arbitrary character positions."""
    positions = sorted({min(c * 3, len(text)) for c in cuts})
    pieces, last = [], 0
    for p in positions:
        pieces.append(text[last:p])
        last = p
    pieces.append(text[last:])
    pre = Pretokenizer.from_name(name)
    splitter = StreamSplitter(pre, SpecialSplitter(specials))
    out = []
    for piece in pieces:
        out += split_items(pre, splitter.feed(piece))
    out += split_items(pre, splitter.end_document())
    assert out == textbook.pretokens(text, patterns[name], specials)


@fewer_examples(80)
@given(document_bytes, specials_st, chunk_sizes)
@pytest.mark.parametrize("name", NAMES)
def test_document_counter_any_chunking_equals_whole(patterns, name, data, specials, sizes):
    settings_ = make_settings(name, specials)
    expected = Counter(p for is_special, p in whole_items(patterns, name, specials, data) if not is_special)
    assert count_text(reader.from_bytes(data), settings_) == expected
    doc = DocumentCounter(settings_)
    for text, _, _, final in reader.decode_chunks(PieceStream(data, sizes), chunk_bytes=2):
        doc.feed(text, final=final)
    assert doc.partial.counter == expected
    assert doc.partial.pretokens == sum(expected.values())
    assert doc.partial.specials == sum(1 for s, _ in whole_items(patterns, name, specials, data) if s)


@given(document_bytes, specials_st, st.integers(min_value=1, max_value=7))
@pytest.mark.parametrize("name", ["gpt2", "cl100k", "o200k", "whitespace", "none"])
def test_lossless_pretokenizers_preserve_every_byte(name, data, specials, chunk):
    """Invalid UTF-8 is kept exactly: pretokens and specials concatenate back to the input."""
    items = stream_items(name, specials, data, [chunk])
    assert b"".join(reader.to_bytes(p) for _, p in items) == data


def test_decode_chunks_keeps_invalid_bytes_and_split_characters():
    data = "a中😀b".encode() + b"\xff\xe4 x\xe4\xb8"
    for size in range(1, 8):
        texts = [t for t, _, _, _ in reader.decode_chunks(io.BytesIO(data), chunk_bytes=size)]
        assert reader.to_bytes("".join(texts)) == data
        assert "".join(texts) == data.decode("utf-8", "surrogateescape")


def test_words_pretokenizer_drops_whitespace_only():
    data = b"  low\tlower\xff\n lowest  "
    items = stream_items("words", [], data, [2])
    assert [reader.to_bytes(p) for _, p in items] == [b"low", b"lower\xff", b"lowest"]


def test_long_text_without_cut_points_streams(patterns):
    """One long run with no space (CJK) fed in many small chunks: same pretokens, whole."""
    text = "中文" * 3000 + " end"
    data = text.encode()
    for name in ("gpt2", "o200k", "whitespace"):
        assert stream_items(name, [], data, [7, 100]) == whole_items(patterns, name, [], data)


def test_splitter_holds_back_little(patterns):
    """Memory stays bounded: after many fed chunks only the text after the last cut is held."""
    splitter = StreamSplitter(Pretokenizer.from_name("gpt2"), SpecialSplitter(["<|endoftext|>"]))
    for _ in range(2000):
        list(splitter.feed("some words here "))
    assert splitter.held_chars < 64


@pytest.mark.parametrize("name", ["whitespace", "words"])
def test_splitter_cuts_before_a_long_run_without_spaces(patterns, name):
    """whitespace's pretokens change where a space meets a non-space either way round, and
    words has none with a space: after 'word ' the splitter cuts before 120,000 characters of
    CJK and then at its capped pieces, instead of holding the run (what ``cat | count`` kept
    in memory)."""
    pre = Pretokenizer.from_name(name, max_bytes=64)
    splitter = StreamSplitter(pre, SpecialSplitter([]))
    held = 0
    list(splitter.feed("word "))
    for _ in range(10_000):
        list(splitter.feed("中文字符" * 3))
        held = max(held, splitter.held_chars)
    assert held <= 2 * FAMILY_CUT_MIN_CHARS + 12  # (a cut is looked for once the held text doubled)
    assert pre.safe_cut("word 中文") == (5 if name == "whitespace" else 4)
    assert pre.safe_cut(" 中文") == 1


# -- gpt2 pretokens by `re` on ASCII runs ------------------------------------------------------
SPLIT_FRAGMENTS = [
    "a", "Zz", "9", "42", "'s", "'ll", "'", "-", "!!", " ", "  ", "\t", "\n", "\r\n", "\x0b", "\x0c", "\x1c", "\x1f",
    "\x00", "\x7f", "é", "中", "😀", "\u00a0", "\u3000", "\x85", "\u2028", "\u1680", "\u0660", "\u00b2", "ǅ",
    "\udcff", "\udc80", " é", "é ", "x" * 63, "y" * 64, " " * 65, "a b " * 20,
]
split_text = st.lists(st.sampled_from(SPLIT_FRAGMENTS) | st.text(max_size=4), max_size=40).map("".join)


@given(split_text)
def test_gpt2_split_equals_the_regex_pretokenizer(text):
    assert _ascii_classes_agree()
    assert gpt2_split(text) == Pretokenizer.from_name("gpt2").split(text)


@pytest.mark.parametrize("corpus", ["en_100M.txt", "multi_25M.txt", "code_25M.txt"])
def test_gpt2_split_on_the_corpora(data_dir, corpus):
    with open(data_dir / "corpora" / corpus, "rb") as f:
        text = f.read(1_500_000).decode("utf-8", "surrogateescape")
    full = Pretokenizer.from_name("gpt2").split
    for doc in text.split("<|endoftext|>"):
        assert gpt2_split(doc) == full(doc)
