"""``CountTable.feed_between``: the special tokens of a range found in bytes (in C, or by
``re`` in ``PyCountTable``) and the stretches between them counted, against splitting the
text with ``pretokenize.SpecialSplitter`` and ``Counter(pretokenizer.split(piece))``.
(Also run under ASan/UBSan by ``make asan``.)"""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from bpe_stream.count.table import NativeCountTable, PyCountTable, unpack_counts
from bpe_stream.pretok.pretokenize import Pretokenizer, SpecialSplitter
from bpe_stream.inputs.reader import from_bytes, to_bytes

TABLES = [PyCountTable] + ([NativeCountTable] if NativeCountTable is not None else [])
TOKENS = ["<|endoftext|>", "<|a|>", "<|", "a", "|>x", "\xe9", "\U0001f600"]
PIECES = ["<|endoftext|>", "<|a|>", "<|", "|>", "<", "|", ">", "x", "a", "ab", " ", "  ", "\n", "\xe9", "\U0001f600",
          "\udcc3", "\udc80", "\udcff", "don't", " 12"]


def reference(text: str, specials) -> tuple:
    """(the counts of the stretches between the specials, how many specials) on text."""
    pre, counts, found = Pretokenizer.from_name("gpt2"), Counter(), 0
    for is_special, piece in SpecialSplitter(list(specials)).split(text):
        if is_special:
            found += 1
        else:
            counts.update(pre.split(piece))
    return {to_bytes(k): n for k, n in counts.items()}, found


@pytest.mark.parametrize("table_type", TABLES, ids=lambda t: t.__name__)
@given(text=st.lists(st.sampled_from(PIECES), max_size=40).map("".join),
       specials=st.lists(st.sampled_from(TOKENS), min_size=1, max_size=4, unique=True))
@example(text="<|a|><|endoftext|>x<|<|a|", specials=["<|", "<|a|>"])
@example(text="aaa<|a|>a", specials=["a", "<|a|>"])
def test_feed_between_finds_the_special_tokens_the_text_splitter_finds(table_type, text, specials):
    """Tokens that share first bytes, begin one another, are one character or are not ASCII;
    text with bytes that are not UTF-8."""
    data = to_bytes(text)
    text = from_bytes(data)  # lone surrogates may spell valid UTF-8
    expected, found = reference(text, specials)
    table = table_type()
    assert table.feed_between(data, "gpt2", 0, [t.encode("utf-8") for t in specials]) == (sum(expected.values()), found)
    assert unpack_counts(table.pack()) == expected


@pytest.mark.parametrize("table_type", TABLES, ids=lambda t: t.__name__)
def test_feed_between_takes_any_buffer_and_refuses_what_is_not_a_special_token(table_type):
    for specials in ([b""], ["<|a|>"], [1]):
        with pytest.raises(TypeError):
            table_type().feed_between(b"x <|a|> y", "gpt2", 0, specials)
    with pytest.raises(ValueError):
        table_type().feed_between(b"x", "gpt2", -1, [b"<|a|>"])
    with pytest.raises(ValueError):
        table_type().feed_between(b"x", "no-such-pattern", 0, [b"<|a|>"])
    assert table_type().feed_between(memoryview(b"x<|a|>"), "gpt2", 0, [b"<|a|>"]) == (1, 1)
    assert table_type().feed_between(b"", "gpt2", 0, [b"<|a|>"]) == (0, 0)
