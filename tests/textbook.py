"""A slow, obviously-correct textbook BPE: the differential oracle of the test suite.

Written from ``../shared/spec/bpe.md`` only, sharing no code with ``bpe_stream``:

* words are tuples of symbol ids (bytes 0..255, then the non-byte symbols, then merges);
* every merge step recounts every adjacent pair of every word from scratch (overlapping
  occurrences, weighted by the word's count), takes the highest count, breaks ties with the
  chosen rule and replaces the non-overlapping occurrences of the winning pair left to right;
* encoding a pretoken replays the merges one by one in training order.

Where the spec leaves a tie open (two different pairs whose symbols have *identical* bytes,
e.g. ``(a, bc)`` and ``(ab, c)`` both made ``abc`` and now each precede ``d``), the smaller
``(id_left, id_right)`` wins.  Tests avoid relying on that case where they can.
"""

from __future__ import annotations

from collections import Counter
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

import regex

# The patterns, copied from the spec (bpe.md), not from bpe_stream.
GPT2_PATTERN = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
WHITESPACE_PATTERN = r"""\s+|\S+"""
WORDS_PATTERN = r"""\S+"""


class Result:
    def __init__(self, merges, counts, vocab, first_merge_id):
        self.merges: List[Tuple[int, int]] = merges
        self.counts: List[int] = counts
        self.vocab: Dict[int, Optional[bytes]] = vocab
        self.first_merge_id = first_merge_id

    def merge_triples(self) -> List[Tuple[int, int, int]]:
        return [(a, b, self.first_merge_id + r) for r, (a, b) in enumerate(self.merges)]

    def merge_bytes(self) -> List[Tuple[bytes, bytes]]:
        return [(self.vocab[a], self.vocab[b]) for a, b in self.merges]


def base_symbols(special_tokens: Sequence[str] = (), end_of_word: Optional[str] = None,
                 doc_boundaries: bool = False) -> List[Tuple[str, Optional[bytes]]]:
    """Non-byte symbols in id order (from 256): specials (first occurrence wins), the
    word-end marker, then document start and end (their text is not fixed by the spec)."""
    out: List[Tuple[str, Optional[bytes]]] = []
    seen = set()
    for s in special_tokens:
        if s not in seen:
            seen.add(s)
            out.append(("special", s.encode("utf-8")))
    if end_of_word is not None:
        out.append(("end_of_word", end_of_word.encode("utf-8")))
    if doc_boundaries:
        out.append(("doc_start", None))
        out.append(("doc_end", None))
    return out


def replace_pair(word: Sequence[int], left: int, right: int, new: int) -> Tuple[int, ...]:
    """Non-overlapping occurrences of (left, right), scanning left to right."""
    out = []
    i = 0
    while i < len(word):
        if i + 1 < len(word) and word[i] == left and word[i + 1] == right:
            out.append(new)
            i += 2
        else:
            out.append(word[i])
            i += 1
    return tuple(out)


def all_pair_counts(words: Dict[Tuple[int, ...], int]) -> Counter:
    counts: Counter = Counter()
    for word, freq in words.items():
        for i in range(len(word) - 1):
            counts[(word[i], word[i + 1])] += freq
    return counts


def pick(cands: List[Tuple[int, int]], vocab: Dict[int, bytes], rule: str) -> Tuple[int, int]:
    def as_bytes(p):
        return (vocab[p[0]], vocab[p[1]])

    if rule == "min-ids":
        return min(cands)
    if rule == "max-bytes":
        target = max(as_bytes(p) for p in cands)
    elif rule == "min-bytes":
        target = min(as_bytes(p) for p in cands)
    else:
        raise ValueError(rule)
    return min(p for p in cands if as_bytes(p) == target)


def train(
    word_counts: Iterable[Tuple[bytes, int]],
    *,
    num_merges: Optional[int] = None,
    vocab_size: Optional[int] = None,
    special_tokens: Sequence[str] = (),
    end_of_word: Optional[str] = None,
    doc_boundaries: bool = False,
    tie_break: str = "max-bytes",
    min_count: int = 1,
    min_word_count: int = 1,
) -> Result:
    symbols = base_symbols(special_tokens, end_of_word, doc_boundaries)
    vocab: Dict[int, Optional[bytes]] = {i: bytes([i]) for i in range(256)}
    marker = None
    for i, (role, text) in enumerate(symbols):
        vocab[256 + i] = text
        if role == "end_of_word":
            marker = 256 + i
    first = 256 + len(symbols)
    limits = []
    if vocab_size is not None:
        limits.append(vocab_size - first)
    if num_merges is not None:
        limits.append(num_merges)
    assert limits, "give vocab_size or num_merges"
    limit = min(limits)

    totals: Counter = Counter()
    for pretoken, n in word_counts:
        if n > 0:
            totals[bytes(pretoken)] += n
    words: Dict[Tuple[int, ...], int] = {}
    for pretoken, n in totals.items():
        if n < min_word_count:
            continue
        word = tuple(pretoken) + ((marker,) if marker is not None else ())
        words[word] = words.get(word, 0) + n

    merges: List[Tuple[int, int]] = []
    counts: List[int] = []
    while len(merges) < limit:
        pair_counts = all_pair_counts(words)
        if not pair_counts:
            break
        best_count = max(pair_counts.values())
        if best_count < max(1, min_count):
            break
        left, right = pick([p for p, c in pair_counts.items() if c == best_count], vocab, tie_break)
        new = first + len(merges)
        vocab[new] = vocab[left] + vocab[right]
        merged: Dict[Tuple[int, ...], int] = {}
        for word, freq in words.items():
            w = replace_pair(word, left, right, new)
            merged[w] = merged.get(w, 0) + freq
        words = merged
        merges.append((left, right))
        counts.append(best_count)
    return Result(merges, counts, vocab, first)


# -- encoding --------------------------------------------------------------------------
def encode_word(symbols: Sequence[int], merges: Sequence[Tuple[int, int, int]]) -> List[int]:
    """Replays every merge, in training order, over one pretoken."""
    word = tuple(symbols)
    for left, right, new in merges:
        word = replace_pair(word, left, right, new)
    return list(word)


def split_specials(text: str, specials: Sequence[str]) -> List[Tuple[bool, str]]:
    """Left to right; at each position the longest special token starting there wins."""
    out: List[Tuple[bool, str]] = []
    buf = []
    i = 0
    by_len = sorted(set(specials), key=len, reverse=True)
    while i < len(text):
        hit = next((s for s in by_len if s and text.startswith(s, i)), None)
        if hit is None:
            buf.append(text[i])
            i += 1
            continue
        if buf:
            out.append((False, "".join(buf)))
            buf = []
        out.append((True, hit))
        i += len(hit)
    if buf:
        out.append((False, "".join(buf)))
    return out


def pretokens(text: str, pattern: Optional[str], specials: Sequence[str] = ()) -> List[Tuple[bool, str]]:
    """``(is_special, piece)`` for the whole text; ``pattern=None`` means one unit per segment."""
    out: List[Tuple[bool, str]] = []
    for is_special, piece in split_specials(text, specials):
        if is_special:
            out.append((True, piece))
        elif pattern is None:
            out.append((False, piece))
        else:
            out.extend((False, p) for p in regex.findall(pattern, piece))
    return out


def to_bytes(text: str) -> bytes:
    return text.encode("utf-8", "surrogateescape")
