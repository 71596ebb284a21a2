"""``regex:PATTERN`` pretokenizers: text the pattern does not cover is an error, never
dropped; long text is cut only between matches with a look-ahead margin, so any chunking
counts like the whole."""

from __future__ import annotations

import random
from collections import Counter

import pytest
import regex
from conftest import fewer_examples
from hypothesis import given
from hypothesis import strategies as st

from bpe_stream.count.counting import DocumentCounter, make_settings
from bpe_stream.pretok.pretokenize import CUSTOM_LOOKAHEAD_MARGIN, Pretokenizer, PretokenizeError

PATTERNS = [r"\S+|\s+", r"\p{L}+|\p{N}+|\s+(?!\S)|\s+|[^\s\p{L}\p{N}]+", r"(?:\w+'?)+|\s|[^\w\s]+"]


def whole(text: str, pattern: str) -> Counter:
    return Counter(regex.findall(pattern, text))


@fewer_examples(40)
@given(pattern=st.sampled_from(PATTERNS), seed=st.integers(0, 10**6), sizes=st.lists(st.integers(1, 3000), min_size=1))
def test_custom_pattern_any_chunking_equals_whole(pattern, seed, sizes):
    rng = random.Random(seed)
    words = ["ab", "don't", "x1", "中文", "  ", "\n", "!!", "é", "42"]
    text = "".join(rng.choice(words) + rng.choice(["", " ", "\t", "\n\n"]) for _ in range(3 * CUSTOM_LOOKAHEAD_MARGIN // 4))
    assert len(text) > 2 * CUSTOM_LOOKAHEAD_MARGIN  # long enough that cuts happen
    doc = DocumentCounter(make_settings("regex:" + pattern))
    pos = 0
    i = 0
    while pos < len(text):
        step = sizes[i % len(sizes)]
        doc.feed(text[pos:pos + step])
        pos += step
        i += 1
    doc.feed("", final=True)
    assert doc.partial.counter == whole(text, pattern)


def test_the_splitter_cuts_long_custom_text():
    pre = Pretokenizer.from_name(r"regex:\S+|\s+")
    text = "word " * 5000
    cut = pre.safe_cut(text)
    assert 0 < cut <= len(text) - CUSTOM_LOOKAHEAD_MARGIN
    assert pre.split(text[:cut]) + pre.split(text[cut:]) == pre.split(text)


def test_uncovered_text_is_an_error_naming_it():
    pre = Pretokenizer.from_name("regex:[a-z]+")
    assert pre.split("abc") == ["abc"]
    with pytest.raises(PretokenizeError, match=r"does not match the text at ' 123'"):
        pre.split("abc 123")


def test_uncovered_text_through_the_cli(cli, tmp_path):
    res = cli("count", "--store", tmp_path / "s", "--pretokenizer", "regex:[a-z]+", input=b"abc def")
    assert res.exit_code == 1
    assert res.stderr.startswith("Error: the pattern") and res.stderr.count("\n") == 1
    res = cli("count", "--store", tmp_path / "t", "--pretokenizer", r"regex:[a-z]+|\s+", input=b"abc def")
    assert res.exit_code == 0, res
