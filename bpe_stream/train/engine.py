"""The merge engine interface: what the training driver (``train_driver.py``) drives.

An engine holds the words and the pairs between merges and knows nothing of the run around
it -- the forced prefix, the limit, progress, checkpoints and the result are the driver's.
Three engines implement it and give the same merges, byte for byte, for every tie-break:

* ``memory_engines.PythonEngine``: the plain algorithm in Python, the reference;
* ``memory_engines.CEngine``: the C merge loop (``csrc/merge_loop.c``), in memory;
* ``disk_engine.DiskEngine``: the C merge loop with its tables in a scratch file on disk.

An engine is made with the base tokens (the bytes of ids ``0..n-1``, for the tie-break),
the word-end marker's id (appended to every pretoken, or None) and the tie-break's name
(one of ``bpe.TIE_BREAKS``).  Its life cycle: :meth:`MergeEngine.load` once, then any
sequence of :meth:`~MergeEngine.merge_given` and :meth:`~MergeEngine.merge_best`, the
state kept between calls, then :meth:`~MergeEngine.close`.  Merge ``r`` (counting both
kinds) makes token ``n + r``.  An engine raises :class:`TrainError` when the words are
too large for it (a count past what it holds in 32 bits).

The words come as ``(pretoken bytes, count)`` pairs, as the store yields them, or as a
:class:`WordArrays` that the engine takes over (the in-memory trainer's fast hand-over:
the C loop copies the arrays and lets them go before its tables grow).
"""

from __future__ import annotations

from array import array
from contextlib import contextmanager
from itertools import accumulate, compress, islice, repeat
from operator import and_, ge
from typing import Iterable, Iterator, List, Optional, Protocol, Sequence, Tuple, Union

from ..errors import UserError

INT64_MAX = (1 << 63) - 1  # a limit or threshold past it is as good as none (C takes int64)
# The C loops' words (common.c, BS_COUNT_OVERFLOW) for the Python engine's counts past int64.
COUNT_OVERFLOW = "the pair counts of these words pass 2**63-1, the limit of the merge loop's 64-bit counts"

Merge = Tuple[int, int, int]  # (left, right, count)


class TrainError(UserError, ValueError):
    """Training settings that cannot work (a vocabulary smaller than the base, ...), or
    words too large for an engine."""


@contextmanager
def engine_limits(too_large: str):
    """A C engine's limits as the trainer's errors: its OverflowError (a count past what it
    holds in 32 bits) as ``TrainError(too_large.format(exc))``, and its ValueError for a pair
    count past 2**63-1 (the words of :data:`COUNT_OVERFLOW`, ``csrc/common.c``: the store's
    counts did it) as ``TrainError(COUNT_OVERFLOW)``.  Any other ValueError is a bug and stays one."""
    try:
        yield
    except OverflowError as exc:
        raise TrainError(too_large.format(exc)) from None
    except ValueError as exc:
        if str(exc) != COUNT_OVERFLOW:
            raise
        raise TrainError(COUNT_OVERFLOW) from None


class WordArrays:
    """Words as three flat arrays: all symbols word after word, each word's end offset and
    its count.  Without a word-end marker every symbol is a byte, so the symbols are the
    pretokens' bytes themselves (a bytearray: a quarter of array('I'), and extending is a
    copy); with one, or ``wide`` (words given as arrays of ids), array('I')."""

    def __init__(self, marker: Optional[int] = None, wide: bool = False):
        self.marker = marker
        self.wide = wide or marker is not None
        self.symbols, self.ends, self.freqs = self._empty()

    def _empty(self):
        return (array("I") if self.wide else bytearray()), array("Q"), array("q")

    @property
    def width(self) -> int:
        """Bytes a symbol: 1 (a bytearray) or 4 (array('I'))."""
        return 1 if isinstance(self.symbols, bytearray) else 4

    def add(self, counts: Iterable[Tuple[bytes, int]], min_count: int = 1) -> None:
        """Adds (pretoken, count) pairs, the marker after each pretoken; skips counts below
        ``min_count`` (at least 1) and words of one symbol (they hold no pair)."""
        marker = self.marker
        min_count = max(1, min_count)
        seq, ends, freqs = self.symbols, self.ends, self.freqs
        extra = 1 if marker is not None else 0
        for pretoken, n in counts:
            if n < min_count or len(pretoken) + extra < 2:
                continue
            seq.extend(pretoken)
            if marker is not None:
                seq.append(marker)
            ends.append(len(seq))
            freqs.append(n)

    def add_columns(self, pretokens: List[bytes], counts: List[int], min_count: int = 1) -> None:
        """:meth:`add` of ``zip(pretokens, counts)``, in C loops when there is no marker
        (the symbols are the pretokens' bytes joined, the ends their running lengths).

        >>> w = WordArrays(); w.add_columns([b"a", b"ab", b"cde"], [9, 2, 1]); bytes(w.symbols), list(w.ends)
        (b'abcde', [2, 5])
        """
        if self.marker is not None or self.wide:
            self.add(zip(pretokens, counts), min_count)
            return
        keep = list(map(and_, map(ge, counts, repeat(max(1, min_count))), map(ge, map(len, pretokens), repeat(2))))
        if not all(keep):
            pretokens, counts = list(compress(pretokens, keep)), list(compress(counts, keep))
        if not pretokens:
            return
        self.ends.extend(islice(accumulate(map(len, pretokens), initial=len(self.symbols)), 1, None))
        self.symbols.extend(b"".join(pretokens))
        self.freqs.extend(counts)

    def take(self) -> list:
        """The arrays as ``[symbols, ends, freqs]``, which this object no longer holds (it
        is left empty): given the only references, whoever empties the list frees them."""
        words = [self.symbols, self.ends, self.freqs]
        self.symbols, self.ends, self.freqs = self._empty()
        return words

    def __len__(self) -> int:
        return len(self.ends)


Words = Union[WordArrays, Iterable[Tuple[bytes, int]]]


def word_arrays(words: Words, marker: Optional[int]) -> WordArrays:
    """``words`` as a :class:`WordArrays` (itself when it is one)."""
    if isinstance(words, WordArrays):
        return words
    arrays = WordArrays(marker)
    arrays.add(words)
    return arrays


def word_sequences(words: Words, marker: Optional[int]) -> Iterator[Tuple[array, int]]:
    """``words`` one ``(array('I') of symbols, count)`` at a time, the marker appended to
    pretokens, words of one symbol left out; a :class:`WordArrays` is taken over."""
    if isinstance(words, WordArrays):
        symbols, ends, freqs = words.take()
        start = 0
        for end, n in zip(ends, freqs):
            seq = array("I")
            seq.extend(symbols[start:end])  # (array("I", some_bytes) would read raw machine words)
            yield seq, n
            start = end
        return
    for pretoken, n in words:
        seq = array("I")
        seq.extend(pretoken)
        if marker is not None:
            seq.append(marker)
        if len(seq) >= 2:
            yield seq, n


class MergeEngine(Protocol):
    """See the module's docstring for the life cycle and the ids."""

    def load(self, words: Words) -> None:
        """Takes all the words, once, before any merge."""

    def merge_given(self, pairs: Sequence[Tuple[int, int]]) -> List[int]:
        """Applies the ``(left, right)`` merges in order, whatever their counts; returns each
        one's count at the time it was applied (0 for a pair no word holds)."""

    def merge_best(self, n: int, min_count: int) -> List[Merge]:
        """Up to ``n`` merges, each of the best pair (highest count, then the tie-break) whose
        count is at least ``max(min_count, 1)``: fewer when no pair reaches it."""

    def memory(self) -> dict:
        """Figures about the engine's state (sizes, counters), for debugging."""

    def close(self) -> None:
        """Frees what the engine holds (files included); it is not used after."""
