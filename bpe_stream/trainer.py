"""The merge loop: from pretoken counts to an ordered list of merges.

Counting and training are separate steps (as in HF ``tokenizers``): :meth:`Trainer.feed`
takes (pretoken, count) pairs from anywhere -- the store, a file, a test -- and
:meth:`Trainer.train` runs the merges.

The loop keeps, for the words that hold each pair, the pair count (weighted by word
frequency), an index pair -> word ids, and a heap ordered by ``(-count, tie-break key)``.
A merge rewrites only the words the index names, and the pair-count deltas that
``bpe.merge_word`` returns update the counts; there is never a full recount.  Counts only
ever fall for pairs that already exist (only pairs with the new token are born), so the
heap is invalidated lazily: a popped entry whose count is stale is pushed back with the
current count, and the first entry whose count is current is the best pair.  Index
entries of words that lost a pair are left in place and skipped when met.

Ids: 0..255 are the bytes, then the special tokens in order, then the word-end marker
(``--end-of-word``), then document start and end (``--doc-boundaries``), then merge ``r``
gets ``first_merge_id + r``.
"""

from __future__ import annotations

import heapq
from array import array
from dataclasses import dataclass, field
from itertools import chain
from typing import Callable, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple

from .bpe import LOW_MASK, PAIR_SHIFT, TIE_BREAKS, count_pairs, merge_word, tie_break_keys
from .pretokenize import SpecialSplitter, check_end_of_word

from .native import agree
from .native import fastbpe as _fastbpe  # the C merge loop (csrc/merge_loop.c); the Python loop below is the fallback

agree("TIE_BREAKS", TIE_BREAKS)  # the C loop knows the rules by these names (csrc/layout.h)

DOC_START = "<|startofdoc|>"
DOC_END = "<|endofdoc|>"
# Token ids are 32-bit everywhere (the C loops, the u32 format), one value kept for "none".
MAX_VOCAB_SIZE = (1 << 32) - 1
# Counts are 64-bit signed in the merge loop (and in the store, below 2**63).
MAX_COUNT = (1 << 63) - 1
COUNT_OVERFLOW = "the pair counts of these words pass 2**63-1, the limit of the merge loop's 64-bit counts"


class TrainError(ValueError):
    """Training settings that cannot work (a vocabulary smaller than the base, ...)."""


@dataclass
class TrainConfig:
    vocab_size: Optional[int] = None
    num_merges: Optional[int] = None
    special_tokens: List[str] = field(default_factory=list)
    end_of_word: Optional[str] = None
    doc_boundaries: bool = False
    tie_break: str = "max-bytes"
    min_count: int = 1
    min_word_count: int = 1

    def base_symbols(self) -> List[Tuple[str, str]]:
        """The non-byte symbols in id order, as (role, text)."""
        out = [("special", s) for s in dict.fromkeys(self.special_tokens)]
        if self.end_of_word is not None:
            out.append(("end_of_word", self.end_of_word))
        if self.doc_boundaries:
            out += [("doc_start", DOC_START), ("doc_end", DOC_END)]
        return out

    def base_vocab(self) -> Dict[int, bytes]:
        """Ids 0..255 (the bytes), then the symbols' texts (how the tie-break compares them)."""
        vocab = {i: bytes([i]) for i in range(256)}
        for i, (_, text) in enumerate(self.base_symbols()):
            vocab[256 + i] = text.encode("utf-8")
        return vocab

    def marker_id(self) -> Optional[int]:
        for i, (role, _) in enumerate(self.base_symbols()):
            if role == "end_of_word":
                return 256 + i
        return None

    def result(self, done: Iterable[Tuple[int, int, int]]) -> "TrainResult":
        """The vocabulary and merges from ``(left, right, count)`` merges in order."""
        vocab = self.base_vocab()
        first = len(vocab)
        merges, counts = [], []
        for left, right, count in done:
            vocab[first + len(merges)] = vocab[left] + vocab[right]
            merges.append((left, right))
            counts.append(count)
        return TrainResult(merges, counts, vocab, self.base_symbols())

    def check(self) -> None:
        """The options' bounds (no value a user can give reaches a loop as an overflow) and the
        symbols (special tokens and a word-end marker that work as they are given)."""
        for option, value, top in (("--vocab-size", self.vocab_size, MAX_VOCAB_SIZE),
                                   ("--num-merges", self.num_merges, MAX_VOCAB_SIZE)):
            if value is not None and value > top:
                raise TrainError(f"{option} {value} is beyond the {top:,} tokens 32-bit ids allow")
        for option, value in (("--min-count", self.min_count), ("--min-word-count", self.min_word_count)):
            if not 0 <= value <= MAX_COUNT:
                raise TrainError(f"{option} {value} is not a count; give a number from 0 (the same as 1) to {MAX_COUNT}")
        SpecialSplitter(self.special_tokens)  # non-empty UTF-8 texts
        check_end_of_word(self.end_of_word, self.special_tokens)

    def max_merges(self) -> int:
        self.check()
        base = 256 + len(self.base_symbols())
        if self.tie_break not in TIE_BREAKS:
            raise TrainError(f"unknown tie-break {self.tie_break!r}; choose one of {', '.join(TIE_BREAKS)}")
        if self.vocab_size is None and self.num_merges is None:
            raise TrainError("give --vocab-size N or --num-merges N")
        limits = []
        if self.vocab_size is not None:
            if self.vocab_size < base:
                raise TrainError(
                    f"--vocab-size {self.vocab_size} is smaller than the {base} base symbols "
                    f"(256 bytes + {base - 256} special); use at least {base}"
                )
            limits.append(self.vocab_size - base)
        if self.num_merges is not None:
            if self.num_merges < 0:
                raise TrainError("--num-merges must be 0 or more")
            limits.append(self.num_merges)
        return min(limits)


@dataclass
class TrainResult:
    merges: List[Tuple[int, int]]
    merge_counts: List[int]
    vocab: Dict[int, bytes]
    symbols: List[Tuple[str, str]]  # non-byte base symbols (role, text), ids 256..


class Trainer:
    """Learns merges from pretoken counts in memory.  ``feed`` then ``train``, once: the
    words fed are handed to the merge loop (see :meth:`_hand_over`)."""

    def __init__(self, config: TrainConfig):
        self.config = config
        self.symbols = config.base_symbols()
        self.first_merge_id = 256 + len(self.symbols)
        self.marker_id = config.marker_id()
        self.seq, self.ends, self.freqs = self._no_words()

    def _no_words(self):
        """Empty word arrays: all symbols in one array, each word's end offset, its count.
        Without a word-end marker every symbol is a byte, so the symbols are the pretokens'
        bytes themselves (a quarter of array('I'), and extending is a copy)."""
        return (array("I") if self.marker_id is not None else bytearray()), array("Q"), array("q")

    def feed(self, counts: Iterable[Tuple[bytes, int]]) -> None:
        """Adds (pretoken, count) pairs, each pretoken once (as the store yields them; a
        pretoken fed twice trains like one with the summed count, but ``min_word_count``
        applies to each count as fed).  Words of one symbol are dropped: they hold no pair."""
        marker = self.marker_id
        min_count = max(1, self.config.min_word_count)
        seq, ends, freqs = self.seq, self.ends, self.freqs
        extra = 1 if marker is not None else 0
        for pretoken, n in counts:
            if n < min_count or len(pretoken) + extra < 2:
                continue
            seq.extend(pretoken)
            if marker is not None:
                seq.append(marker)
            ends.append(len(seq))
            freqs.append(n)

    def words(self) -> List[List[int]]:
        out, start, seq = [], 0, self.seq
        for end in self.ends:
            out.append(list(seq[start:end]))
            start = end
        return out

    def base_vocab(self) -> Dict[int, bytes]:
        return self.config.base_vocab()

    def train(
        self,
        on_progress: Optional[Callable[[List[Tuple[int, int, int]], int, int], None]] = None,
        forced: Sequence[Tuple[int, int]] = (),
        engine: str = "auto",
    ) -> TrainResult:
        """Runs the merges.  ``forced`` merges are applied first, in order (resume, continue
        training).  ``on_progress(batch, done, limit)`` gets each batch of new
        ``(left, right, count)`` merges.  ``engine``: ``"c"``, ``"python"`` or ``"auto"``
        (C when the extension is built)."""
        config = self.config
        limit = config.max_merges()
        forced = [tuple(m) for m in forced][:limit]
        if engine == "auto":
            engine = "c" if _fastbpe is not None else "python"
        if engine == "c":
            if _fastbpe is None:
                raise TrainError("the C trainer is not built here; use engine='python'")
            done = _train_c(self._hand_over(), self.base_vocab(), config, limit, forced, on_progress)
        elif engine == "python":
            freqs, words = list(self.freqs), self.words()
            self._hand_over()
            done = _train_python(words, freqs, self.base_vocab(), self.first_merge_id, config, limit, forced, on_progress)
        else:
            raise TrainError(f"unknown engine {engine!r}")
        return config.result(done)

    def _hand_over(self) -> list:
        """The fed words as ``[symbols, ends, freqs]``, which this trainer no longer holds:
        the C loop empties the list once it has copied them, so they are freed before the
        merges (20 MB on multi_25M).  A trainer trains once on what it was fed."""
        words = [self.seq, self.ends, self.freqs]
        self.seq, self.ends, self.freqs = self._no_words()
        return words


PROGRESS_EVERY = 64
INT64_MAX = (1 << 63) - 1  # a limit or threshold past it is as good as none (C takes int64)


class MergeLog:
    """The merges of a run so far, ``(left, right, count)`` each, kept in one flat int64
    array: as a list of tuples they cost ~140 bytes a merge (4.5 MB at 32,768), held while
    the merge loop's own tables are at their largest."""

    def __init__(self, merges: Iterable[Tuple[int, int, int]] = ()):
        self.flat = array("q")
        self.extend(merges)

    def extend(self, batch: Iterable[Tuple[int, int, int]]) -> None:
        before = len(self.flat)
        try:
            self.flat.extend(chain.from_iterable(batch))
        except OverflowError:  # the pure-Python loop counts without a limit
            del self.flat[before:]
            raise TrainError(COUNT_OVERFLOW) from None
        if len(self.flat) % 3:
            del self.flat[before:]
            raise ValueError("merges are (left, right, count) triples")

    def __len__(self) -> int:
        return len(self.flat) // 3

    def __getitem__(self, which: slice) -> List[Tuple[int, int, int]]:
        start, stop, step = which.indices(len(self))
        if step != 1:
            raise ValueError("a MergeLog slice takes no step")
        it = iter(self.flat[3 * start:3 * stop])
        return list(zip(it, it, it))

    def __iter__(self) -> Iterator[Tuple[int, int, int]]:
        it = iter(self.flat)
        return zip(it, it, it)


def _train_c(words: list, vocab, config, limit, forced, on_progress) -> MergeLog:
    tokens = [vocab[i] for i in range(len(vocab))]
    done = MergeLog()

    def callback(batch):
        done.extend(batch)
        if on_progress is not None:
            on_progress(batch, len(done), limit)

    width = 1 if isinstance(words[0], bytearray) else 4
    try:
        _fastbpe.train(
            words=words, width=width, tokens=tokens, max_merges=min(limit, INT64_MAX),
            min_count=min(max(1, config.min_count), INT64_MAX),
            tie_break=config.tie_break, forced=[tuple(m) for m in forced], callback=callback, every=PROGRESS_EVERY,
        )
    except OverflowError as exc:
        raise TrainError(f"the corpus is too large for the in-memory trainer ({exc}); train with --path disk") from None
    return done


def _train_python(words, freqs, vocab, first_merge_id, config, limit, forced, on_progress) -> List[Tuple[int, int, int]]:
    """The plain algorithm: rewrites each word that holds the merged pair."""
    pair_counts = count_pairs(words, freqs)
    where: Dict[int, set] = {}
    for wid, word in enumerate(words):
        for i in range(len(word) - 1):
            p = (word[i] << PAIR_SHIFT) | word[i + 1]
            s = where.get(p)
            if s is None:
                where[p] = {wid}
            else:
                s.add(wid)

    key_of = tie_break_keys(config.tie_break)
    heap = [(-c, key_of(p, vocab[p >> PAIR_SHIFT], vocab[p & LOW_MASK]), p) for p, c in pair_counts.items() if c > 0]
    heapq.heapify(heap)

    done: List[Tuple[int, int, int]] = []
    batch: List[Tuple[int, int, int]] = []
    min_count = max(1, config.min_count)
    new_id = first_merge_id
    while len(done) < limit:
        if len(done) < len(forced):
            pair = (forced[len(done)][0] << PAIR_SHIFT) | forced[len(done)][1]
            current = pair_counts.get(pair, 0)
        else:
            if not heap:
                break
            neg, key, pair = heap[0]
            current = pair_counts.get(pair, 0)
            if current != -neg:
                heapq.heappop(heap)
                if current > 0:
                    heapq.heappush(heap, (-current, key, pair))
                continue
            if current < min_count:
                break
            heapq.heappop(heap)
        left, right = pair >> PAIR_SHIFT, pair & LOW_MASK
        vocab[new_id] = vocab[left] + vocab[right]
        deltas: Dict[int, int] = {}
        for wid in where.pop(pair, ()):
            word = words[wid]
            new_word = merge_word(word, left, right, new_id, freqs[wid], deltas)
            if len(new_word) == len(word):
                continue  # a stale index entry: the word lost this pair earlier
            words[wid] = new_word
            for i in range(len(new_word) - 1):
                a, b = new_word[i], new_word[i + 1]
                if a == new_id or b == new_id:
                    p = (a << PAIR_SHIFT) | b
                    s = where.get(p)
                    if s is None:
                        where[p] = {wid}
                    else:
                        s.add(wid)
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
                heapq.heappush(heap, (-c, key_of(p, vocab[a], vocab[b]), p))
        pair_counts.pop(pair, None)
        done.append((left, right, current))
        batch.append((left, right, current))
        new_id += 1
        if len(batch) >= PROGRESS_EVERY:
            if on_progress is not None:
                on_progress(batch, len(done), limit)
            batch = []
    if batch and on_progress is not None:
        on_progress(batch, len(done), limit)
    return done
