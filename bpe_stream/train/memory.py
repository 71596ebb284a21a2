"""The in-memory merge engines: the plain algorithm in Python (the reference, and the
fallback when the C extension is not built) and the C merge loop (``csrc/merge_loop.c``).

Both implement ``merge_engine.MergeEngine`` and give the same merges and counts for every
tie-break (the tests compare them with each other and with a textbook oracle).
"""

from __future__ import annotations

import heapq
import os
import sys
from typing import Dict, List, Optional, Sequence, Tuple

from ..bpe import LOW_MASK, PAIR_SHIFT, TIE_BREAKS, count_pairs, merge_word, tie_break_keys
from .engine import INT64_MAX, Merge, TrainError, Words, engine_limits, word_arrays, word_sequences
from ..native import agree
from ..native import fastbpe as _fastbpe  # the C merge loop (csrc/merge_loop.c), or None: the Python engine only

agree("TIE_BREAKS", TIE_BREAKS)  # the C loop knows the rules by these names (csrc/layout.h)


class PythonEngine:
    """The plain algorithm: each merge rewrites the words that hold the merged pair.

    It keeps the pair counts (weighted by word frequency), an index pair -> ids of the words
    that hold it, and a heap ordered by ``(-count, tie-break key)``.  A merge rewrites only
    the words the index names, and the pair-count changes that ``bpe.merge_word`` returns
    update the counts: there is never a full recount.  Counts only ever fall for pairs that
    already exist (only pairs with the new token are born), so the heap is invalidated
    lazily: a popped entry whose count is stale is pushed back with the current count, and
    the first entry whose count is current is the best pair.  Index entries of words that
    lost a pair are left in place and skipped when met.

    A small example (ids 0..255 are the bytes, so the first merge makes 256)::

        >>> engine = PythonEngine([bytes([i]) for i in range(256)], None, "max-bytes")
        >>> engine.load([(b"abab", 3), (b"abc", 2)])   # (a, b) 3*2 + 2 = 8, (b, a) 3, (b, c) 2
        >>> engine.merge_best(1, min_count=1)          # "ab" -> 256: words [256, 256] x3, [256, c] x2
        [(97, 98, 8)]
        >>> engine.merge_best(5, min_count=3)          # (256, 256) 3, then (256, c) 2 < 3: stop
        [(256, 256, 3)]
        >>> engine.merge_given([(256, 99), (98, 99)])  # applied whatever their counts
        [2, 0]
    """

    def __init__(self, tokens: Sequence[bytes], marker_id: Optional[int], tie_break: str):
        self.vocab: Dict[int, bytes] = dict(enumerate(tokens))
        self.marker_id = marker_id
        # The tie-break among pairs of equal count, as a key whose smallest value wins:
        # max-bytes the greatest (bytes(left), bytes(right)), min-bytes the smallest, min-ids
        # the smallest (left, right); equal bytes fall back to the smaller ids.  (The C heap
        # compares the same way: pairs.c, better().)
        self.key_of = tie_break_keys(tie_break)
        self.words: List[List[int]] = []
        self.freqs: List[int] = []
        self.pair_counts: Dict[int, int] = {}
        self.where: Dict[int, set] = {}
        self.heap: list = []

    def load(self, words: Words) -> None:
        for seq, n in word_sequences(words, self.marker_id):
            self.words.append(list(seq))
            self.freqs.append(n)
        self.pair_counts = count_pairs(self.words, self.freqs)
        for wid, word in enumerate(self.words):
            for i in range(len(word) - 1):
                self._index(word[i], word[i + 1], wid)
        vocab = self.vocab
        self.heap = [(-c, self.key_of(p, vocab[p >> PAIR_SHIFT], vocab[p & LOW_MASK]), p)
                     for p, c in self.pair_counts.items() if c > 0]
        heapq.heapify(self.heap)

    def _index(self, left: int, right: int, wid: int) -> None:
        p = (left << PAIR_SHIFT) | right
        s = self.where.get(p)
        if s is None:
            self.where[p] = {wid}
        else:
            s.add(wid)

    def merge_given(self, pairs: Sequence[Tuple[int, int]]) -> List[int]:
        return [self._merge((left << PAIR_SHIFT) | right) for left, right in pairs]

    def merge_best(self, n: int, min_count: int) -> List[Merge]:
        done: List[Merge] = []
        while len(done) < n:
            pair = self._best(max(1, min_count))
            if pair is None:
                break
            done.append((pair >> PAIR_SHIFT, pair & LOW_MASK, self._merge(pair)))
        return done

    def _best(self, min_count: int) -> Optional[int]:
        """Pops the best pair whose count reaches ``min_count``, or None (then left in the heap)."""
        heap = self.heap
        while heap:
            neg, key, pair = heap[0]
            current = self.pair_counts.get(pair, 0)
            if current != -neg:
                heapq.heappop(heap)
                if current > 0:
                    heapq.heappush(heap, (-current, key, pair))
                continue
            if current < min_count:
                return None
            heapq.heappop(heap)
            return pair
        return None

    def _merge(self, pair: int) -> int:
        """Merges ``pair`` into the next id; returns its count before the merge."""
        left, right = pair >> PAIR_SHIFT, pair & LOW_MASK
        vocab, words, pair_counts = self.vocab, self.words, self.pair_counts
        count = pair_counts.get(pair, 0)
        new_id = len(vocab)
        vocab[new_id] = vocab[left] + vocab[right]
        deltas: Dict[int, int] = {}
        for wid in self.where.pop(pair, ()):
            word = words[wid]
            new_word = merge_word(word, left, right, new_id, self.freqs[wid], deltas)
            if len(new_word) == len(word):
                continue  # a stale index entry: the word lost this pair earlier
            words[wid] = new_word
            for i in range(len(new_word) - 1):
                a, b = new_word[i], new_word[i + 1]
                if a == new_id or b == new_id:
                    self._index(a, b, wid)
        for p, d in deltas.items():
            if d == 0:
                continue
            c = pair_counts.get(p, 0) + d
            if c > 0:
                pair_counts[p] = c
            else:
                pair_counts.pop(p, None)
            a, b = p >> PAIR_SHIFT, p & LOW_MASK
            if (a == new_id or b == new_id) and c > 0:
                heapq.heappush(self.heap, (-c, self.key_of(p, vocab[a], vocab[b]), p))
        pair_counts.pop(pair, None)
        return count

    def memory(self) -> dict:
        return {"words": len(self.words), "pairs": len(self.pair_counts), "heap": len(self.heap)}

    def close(self) -> None:
        self.words, self.freqs, self.pair_counts, self.where, self.heap = [], [], {}, {}, []


def _too_large():
    """The C loop's limits (a count past what it holds in 32 bits: positions, pairs, tokens --
    the same limits in memory and on disk; a pair count past 2**63-1) as the trainer's errors."""
    return engine_limits("the corpus is too large for the merge loop ({})")


class CEngine:
    """The C merge loop (``_fastbpe.MergeLoop``): occurrence lists, see ``csrc/merge_loop.c``."""

    def __init__(self, tokens: Sequence[bytes], marker_id: Optional[int], tie_break: str,
                 scratch_dir: Optional[str] = None, scratch_quota: int = 0):
        """``scratch_dir``: the loop's tables in a scratch file there (``disk_engine``), except
        up to ``scratch_quota`` bytes of them kept in anonymous memory."""
        if _fastbpe is None:
            raise TrainError("the C trainer is not built here; use engine='python'")
        self.marker_id = marker_id
        self.loop = _fastbpe.MergeLoop(tokens=list(tokens), tie_break=tie_break, scratch_dir=scratch_dir,
                                      scratch_quota=scratch_quota)

    @_too_large()
    def load(self, words: Words) -> None:
        arrays = word_arrays(words, self.marker_id)
        self.loop.load(words=arrays.take(), width=arrays.width)

    @_too_large()
    def merge_given(self, pairs: Sequence[Tuple[int, int]]) -> List[int]:
        return self.loop.merge_given(pairs=[tuple(p) for p in pairs])

    @_too_large()
    def merge_best(self, n: int, min_count: int) -> List[Merge]:
        return self.loop.merge_best(n=min(n, INT64_MAX), min_count=min(max(1, min_count), INT64_MAX))

    def memory(self) -> dict:
        return self.loop.stats()

    def close(self) -> None:
        if self.loop is None:
            return
        if os.environ.get("BPE_STREAM_DEBUG"):
            st = self.loop.stats()
            print(f"merge loop: init {st['load_seconds']:.3f} s, merges {st['merge_seconds']:.3f} s, {st['visits']} "
                  f"occurrences visited, {st['merged']} merged, {st['pairs']} pairs, heap {st['heap']}, "
                  f"{st['compactions']} compactions in {st['compact_seconds']:.3f} s", file=sys.stderr)
        self.loop = None


ENGINES = ("auto", "c", "python")


def memory_engine(name: str, tokens: Sequence[bytes], marker_id: Optional[int], tie_break: str):
    """The in-memory engine ``name``: ``"c"``, ``"python"`` or ``"auto"`` (C when built)."""
    if name == "auto":
        name = "c" if _fastbpe is not None else "python"
    if name == "c":
        return CEngine(tokens, marker_id, tie_break)
    if name == "python":
        return PythonEngine(tokens, marker_id, tie_break)
    raise TrainError(f"unknown engine {name!r}")
