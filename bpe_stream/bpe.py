"""The pure BPE core: pair keys, tie-break order, merging one word, encoding by rank.

No I/O of any kind: the store, the trainer's loop, the tokenizer and the exports call in.
Every function's docstring carries a small worked example (run by ``tests/test_doctests.py``).

Conventions (``../shared/spec/bpe.md``):

* A pair is packed into one int, ``left << 32 | right`` (ids are below 2**32), so the
  pair index hashes small ints instead of tuples.
* Pair counts are weighted by word frequency and count overlapping occurrences; a merge
  replaces non-overlapping occurrences scanning left to right (``aaa`` -> ``[aa, a]``).
* Tie-break among pairs of equal count, implemented by :func:`tie_break_keys`:
  ``max-bytes`` (default, CS336) prefers the greatest ``(bytes(left), bytes(right))``,
  ``min-bytes`` the smallest, ``min-ids`` the smallest ``(id(left), id(right))``.
  The trainer's heap is a min-heap on ``(-count, key, pair)``, so each rule becomes a key
  whose *smallest* value is the winner; pairs whose bytes are equal (a word-end marker
  spelled like a byte) fall back to the smaller packed ids.
"""

from __future__ import annotations

from typing import Callable, Dict, List, Sequence, Tuple

TIE_BREAKS = ("max-bytes", "min-bytes", "min-ids")
PAIR_SHIFT = 32
LOW_MASK = (1 << PAIR_SHIFT) - 1


def pack_pair(left: int, right: int) -> int:
    """The pair ``(left, right)`` as one int.

    >>> pack_pair(1, 2)
    4294967298
    """
    return (left << PAIR_SHIFT) | right


def unpack_pair(pair: int) -> Tuple[int, int]:
    """The ``(left, right)`` of a packed pair.

    >>> unpack_pair(4294967298)
    (1, 2)
    """
    return pair >> PAIR_SHIFT, pair & LOW_MASK


# Order-preserving, prefix-free encodings of a byte string: each byte b becomes
# (1, b) (or (1, 255 - b) for the reversed order) and the string ends with 0 (or 2).
# Prefix-free means comparing enc(l1)+enc(r1) with enc(l2)+enc(r2) as bytes is the
# same as comparing the tuples (l1, r1) and (l2, r2) -- in one C-level comparison.
_FORWARD = bytes(range(256))
_REVERSED = bytes(255 - b for b in range(256))


def forward_key(token: bytes) -> bytes:
    """A key that orders byte strings as bytes do, also when keys are concatenated.

    >>> forward_key(b"ab")
    b'\\x01a\\x01b\\x00'
    >>> forward_key(b"a") < forward_key(b"ab") < forward_key(b"b")
    True
    """
    out = bytearray(2 * len(token) + 1)
    out[0:-1:2] = b"\x01" * len(token)
    out[1::2] = token
    out[-1] = 0
    return bytes(out)


def reversed_key(token: bytes) -> bytes:
    """A key that orders byte strings in reverse, also when keys are concatenated.

    >>> reversed_key(b"b") < reversed_key(b"ab") < reversed_key(b"a")
    True
    """
    out = bytearray(2 * len(token) + 1)
    out[0:-1:2] = b"\x01" * len(token)
    out[1::2] = token.translate(_REVERSED)
    out[-1] = 2
    return bytes(out)


def tie_break_keys(rule: str) -> Callable[[int, bytes, bytes], object]:
    """``key(pair, left_bytes, right_bytes)``: among pairs of equal count the smallest key wins.

    >>> key = tie_break_keys("max-bytes")  # (a, c) beats (a, b): its bytes are greater
    >>> key(pack_pair(97, 99), b"a", b"c") < key(pack_pair(97, 98), b"a", b"b")
    True
    >>> key = tie_break_keys("min-ids")  # the smaller ids win, whatever their bytes
    >>> key(pack_pair(97, 98), b"a", b"b") < key(pack_pair(97, 99), b"a", b"c")
    True
    """
    if rule == "max-bytes":
        return lambda pair, lb, rb: reversed_key(lb) + reversed_key(rb)
    if rule == "min-bytes":
        return lambda pair, lb, rb: forward_key(lb) + forward_key(rb)
    if rule == "min-ids":
        return lambda pair, lb, rb: pair
    raise ValueError(f"unknown tie-break {rule!r}; choose one of {', '.join(TIE_BREAKS)}")


def count_pairs(words: Sequence[Sequence[int]], freqs: Sequence[int]) -> Dict[int, int]:
    """Weighted counts of adjacent pairs, overlapping occurrences included.

    >>> {unpack_pair(p): n for p, n in count_pairs([[1, 2, 3, 1, 2]], [1]).items()}
    {(1, 2): 2, (2, 3): 1, (3, 1): 1}
    >>> {unpack_pair(p): n for p, n in count_pairs([[1, 2, 3, 1, 2], [1, 2]], [1, 10]).items()}
    {(1, 2): 12, (2, 3): 1, (3, 1): 1}
    >>> {unpack_pair(p): n for p, n in count_pairs([b"aaa"], [1]).items()}  # overlapping: aa twice
    {(97, 97): 2}
    """
    counts: Dict[int, int] = {}
    get = counts.get
    for word, freq in zip(words, freqs):
        for i in range(len(word) - 1):
            p = (word[i] << PAIR_SHIFT) | word[i + 1]
            counts[p] = get(p, 0) + freq
    return counts


def merge_word(word: Sequence[int], left: int, right: int, new: int, freq: int, deltas: Dict[int, int]) -> List[int]:
    """Replaces the non-overlapping occurrences of ``(left, right)`` in ``word``, scanning left
    to right, and adds to ``deltas`` the change of every pair count (weighted by ``freq``).

    Only the pairs next to each occurrence change: ``(x, left)``, ``(left, right)`` and
    ``(right, y)`` lose one, ``(x, new)`` and ``(new, y)`` gain one, where ``x`` is the symbol
    already written before the occurrence (possibly a fresh ``new``) and ``y`` the one after.

    >>> deltas = {}
    >>> merge_word([1, 2, 3, 1, 2], 1, 2, 4, 5, deltas)  # the word occurs 5 times
    [4, 3, 4]
    >>> {unpack_pair(p): n for p, n in deltas.items()}
    {(1, 2): -10, (2, 3): -5, (4, 3): 5, (3, 1): -5, (3, 4): 5}
    """
    out: List[int] = []
    n = len(word)
    i = 0
    get = deltas.get
    merged = (left << PAIR_SHIFT) | right
    while i < n:
        if i + 1 < n and word[i] == left and word[i + 1] == right:
            deltas[merged] = get(merged, 0) - freq
            if out:
                x = out[-1]
                p = (x << PAIR_SHIFT) | left
                deltas[p] = get(p, 0) - freq
                p = (x << PAIR_SHIFT) | new
                deltas[p] = get(p, 0) + freq
            if i + 2 < n:
                y = word[i + 2]
                p = (right << PAIR_SHIFT) | y
                deltas[p] = get(p, 0) - freq
                p = (new << PAIR_SHIFT) | y
                deltas[p] = get(p, 0) + freq
            out.append(new)
            i += 2
        else:
            out.append(word[i])
            i += 1
    return out


def apply_merge(word: Sequence[int], left: int, right: int, new: int) -> List[int]:
    """``word`` with the non-overlapping occurrences of ``(left, right)`` replaced, left to right.

    >>> apply_merge([97, 97, 97], 97, 97, 256)  # aaa -> [aa, a]
    [256, 97]
    """
    return merge_word(word, left, right, new, 0, {})


def encode_by_rank(symbols: List[int], ranks: Dict[int, Tuple[int, int]]) -> List[int]:
    """Merges the adjacent pair of lowest merge rank until none is left.

    ``ranks`` maps a packed pair to ``(rank, new_id)``.  Because a token's merges all come
    after the merge that made it, this equals replaying the merges in training order --
    never a choice by frequency in the input.

    >>> ranks = {pack_pair(97, 98): (0, 256), pack_pair(98, 99): (1, 257)}  # ab first, then bc
    >>> encode_by_rank([97, 98, 99], ranks)  # abc -> ab + c, not a + bc
    [256, 99]
    """
    if len(symbols) < 2:
        return symbols
    word = symbols
    get = ranks.get
    while True:
        best = None
        best_rank = None
        for i in range(len(word) - 1):
            r = get((word[i] << PAIR_SHIFT) | word[i + 1])
            if r is not None and (best_rank is None or r[0] < best_rank):
                best_rank = r[0]
                best = i
        if best is None:
            return word
        left, right = word[best], word[best + 1]
        word = apply_merge(word, left, right, get((left << PAIR_SHIFT) | right)[1])
        if len(word) < 2:
            return word
