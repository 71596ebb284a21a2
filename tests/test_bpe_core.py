"""The pure core (bpe_stream/bpe.py) against definitions from bpe.md and the textbook oracle."""

from __future__ import annotations

from collections import Counter

import pytest
import textbook
from hypothesis import given
from hypothesis import strategies as st

from bpe_stream import bpe

# Small alphabets make prefixes (b"a" vs b"ab") and equal concatenations likely; 0x00 and 0xff
# are the edges of an order-preserving byte encoding.
token_bytes = st.binary(min_size=1, max_size=4).map(lambda b: bytes(x % 3 for x in b)) | st.sampled_from(
    [b"\x00", b"\xff", b"\x00\xff", b"\xff\x00", b"a", b"ab", b"abc", b"b", b"bc", b"c", b"</w>", b"<"]
)
pair_bytes = st.tuples(token_bytes, token_bytes)


def _sign(x):
    return (x > 0) - (x < 0)


def _cmp(a, b):
    return _sign((a > b) - (a < b))


@given(pair_bytes, pair_bytes)
def test_max_bytes_key_orders_like_reversed_tuple_of_bytes(p, q):
    key = bpe.tie_break_keys("max-bytes")
    kp, kq = key(1, *p), key(2, *q)
    # The smallest key wins: it must belong to the greatest (bytes(left), bytes(right)).
    assert _cmp(kp, kq) == _cmp(q, p)
    assert (kp == kq) == (p == q)


@given(pair_bytes, pair_bytes)
def test_min_bytes_key_orders_like_tuple_of_bytes(p, q):
    key = bpe.tie_break_keys("min-bytes")
    kp, kq = key(1, *p), key(2, *q)
    assert _cmp(kp, kq) == _cmp(p, q)
    assert (kp == kq) == (p == q)


ids = st.integers(min_value=0, max_value=2**32 - 1)


@given(ids, ids, ids, ids)
def test_min_ids_key_orders_like_tuple_of_ids(a, b, c, d):
    key = bpe.tie_break_keys("min-ids")
    kp = key(bpe.pack_pair(a, b), b"x", b"y")
    kq = key(bpe.pack_pair(c, d), b"x", b"y")
    assert _cmp(kp, kq) == _cmp((a, b), (c, d))
    assert bpe.unpack_pair(bpe.pack_pair(a, b)) == (a, b)


@given(st.lists(pair_bytes, min_size=1, max_size=12))
def test_tie_break_winner_matches_spec(pairs):
    """Picking the minimum key picks what bpe.md names for each rule."""
    for rule, expected in (("max-bytes", max(pairs)), ("min-bytes", min(pairs))):
        key = bpe.tie_break_keys(rule)
        assert min(pairs, key=lambda p: key(0, *p)) == expected


def test_tie_break_examples_from_spec():
    key = bpe.tie_break_keys("max-bytes")
    # (s,t) beats (e,s) under max-bytes (seed example 2)
    assert key(0, b"s", b"t") < key(0, b"e", b"s")
    # a prefix is smaller than its extensions: (b"a", b"bc") < (b"ab", b"c") as tuples
    assert key(0, b"ab", b"c") < key(0, b"a", b"bc")
    key = bpe.tie_break_keys("min-bytes")
    assert key(0, b"l", b"o") < key(0, b"o", b"w")
    assert key(0, b"a", b"bc") < key(0, b"ab", b"c")
    with pytest.raises(ValueError):
        bpe.tie_break_keys("max-count")


# -- merge_word ------------------------------------------------------------------------
RUNS = [[97] * 4, [97, 98] * 2, [97] * 5, [97, 98, 97], [98, 97, 97, 97, 98]]
words = st.one_of(
    st.lists(st.sampled_from([97, 98, 99]), max_size=12),
    st.sampled_from(RUNS),
    st.lists(st.sampled_from(RUNS + [[99], [98], [97]]), max_size=4).map(lambda ws: [x for w in ws for x in w]),
)


def _recount(ws, freqs):
    return textbook.all_pair_counts(Counter(dict(zip(map(tuple, ws), freqs))))


@given(words, st.data(), st.integers(min_value=1, max_value=2**40))
def test_merge_word_deltas_equal_full_recount(word, data, freq):
    choices = [(word[i], word[i + 1]) for i in range(len(word) - 1)] or [(97, 97)]
    left, right = data.draw(st.sampled_from(choices + [(97, 97), (97, 98), (98, 97)]))
    new = 500
    deltas = {}
    out = bpe.merge_word(word, left, right, new, freq, deltas)
    assert out == list(textbook.replace_pair(word, left, right, new))
    assert out == bpe.apply_merge(word, left, right, new)
    before = Counter()
    after = Counter()
    for i in range(len(word) - 1):
        before[(word[i], word[i + 1])] += freq
    for i in range(len(out) - 1):
        after[(out[i], out[i + 1])] += freq
    expected = {p: after[p] - before[p] for p in set(before) | set(after) if after[p] != before[p]}
    got = {bpe.unpack_pair(p): d for p, d in deltas.items() if d != 0}
    assert got == expected


@given(st.lists(st.tuples(words, st.integers(min_value=1, max_value=9)), max_size=6), st.data())
def test_merge_word_deltas_accumulate_over_words(items, data):
    """One shared ``deltas`` dict over several words equals the recount of the whole corpus."""
    ws = [w for w, _ in items]
    freqs = [f for _, f in items]
    left, right = data.draw(st.sampled_from([(97, 97), (97, 98), (98, 97), (99, 97)]))
    deltas = {}
    new_ws = [bpe.merge_word(w, left, right, 600, f, deltas) for w, f in items]
    before = Counter()
    after = Counter()
    for w, nw, f in zip(ws, new_ws, freqs):
        for i in range(len(w) - 1):
            before[(w[i], w[i + 1])] += f
        for i in range(len(nw) - 1):
            after[(nw[i], nw[i + 1])] += f
    expected = {p: after[p] - before[p] for p in set(before) | set(after) if after[p] != before[p]}
    assert {bpe.unpack_pair(p): d for p, d in deltas.items() if d != 0} == expected
    counted = bpe.count_pairs(ws, freqs)
    assert {bpe.unpack_pair(p): c for p, c in counted.items()} == dict(+before)


def test_merge_word_examples():
    deltas = {}
    # aaa -> [aa, a]: non-overlapping, left to right
    assert bpe.merge_word([97, 97, 97], 97, 97, 256, 1, deltas) == [256, 97]
    assert {bpe.unpack_pair(p): d for p, d in deltas.items() if d} == {(97, 97): -2, (256, 97): 1}
    deltas = {}
    assert bpe.merge_word([97] * 4, 97, 97, 256, 3, deltas) == [256, 256]
    assert {bpe.unpack_pair(p): d for p, d in deltas.items() if d} == {(97, 97): -9, (256, 256): 3}
    deltas = {}
    assert bpe.merge_word([97, 98, 97, 98], 97, 98, 256, 2, deltas) == [256, 256]
    assert {bpe.unpack_pair(p): d for p, d in deltas.items() if d} == {(97, 98): -4, (98, 97): -2, (256, 256): 2}
    # overlapping pair count: aaa holds (a,a) twice
    assert {bpe.unpack_pair(p): c for p, c in bpe.count_pairs([[97, 97, 97]], [5]).items()} == {(97, 97): 10}


# -- encode_by_rank --------------------------------------------------------------------
@st.composite
def merge_tables(draw):
    """A merge list in which every merge uses ids that exist before it (as training makes)."""
    alphabet = [97, 98, 99, 0xE4]
    existing = list(alphabet)
    merges = []
    for r in range(draw(st.integers(min_value=0, max_value=12))):
        left = draw(st.sampled_from(existing))
        right = draw(st.sampled_from(existing))
        new = 256 + r
        merges.append((left, right, new))
        existing.append(new)
    word = draw(st.lists(st.sampled_from(alphabet), max_size=16) | st.sampled_from([[97] * 7, [97, 98] * 4]))
    return merges, word


def _ranks(merges):
    ranks = {}
    for rank, (left, right, new) in enumerate(merges):
        ranks.setdefault(bpe.pack_pair(left, right), (rank, new))
    return ranks


@given(merge_tables())
def test_encode_by_rank_equals_replaying_merges(table):
    merges, word = table
    assert bpe.encode_by_rank(list(word), _ranks(merges)) == textbook.encode_word(word, merges)


@given(
    st.lists(st.tuples(st.binary(min_size=1, max_size=8).map(lambda b: bytes(97 + x % 3 for x in b)),
                       st.integers(1, 5)), min_size=1, max_size=8),
    st.lists(st.binary(min_size=0, max_size=10).map(lambda b: bytes(97 + x % 3 for x in b)), max_size=5),
)
def test_encode_by_rank_on_trained_merges(corpus, probes):
    result = textbook.train(corpus, num_merges=10, tie_break="min-ids")
    merges = result.merge_triples()
    ranks = _ranks(merges)
    for probe in probes + [w for w, _ in corpus]:
        assert bpe.encode_by_rank(list(probe), ranks) == textbook.encode_word(list(probe), merges)


def test_encode_by_rank_follows_rank_not_frequency():
    # seed example 4: merges (a,b) rank 0 and (b,c) rank 1; "abc" -> [ab, c]
    ranks = _ranks([(97, 98, 256), (98, 99, 257)])
    assert bpe.encode_by_rank([97, 98, 99], ranks) == [256, 99]
    # the same pairs, ranks swapped: "abc" -> [a, bc]
    ranks = _ranks([(98, 99, 256), (97, 98, 257)])
    assert bpe.encode_by_rank([97, 98, 99], ranks) == [97, 256]
    assert bpe.encode_by_rank([97, 97, 97], _ranks([(97, 97, 256)])) == [256, 97]
