"""Training in memory: the settings of a run (:class:`TrainConfig`), its result
(:class:`TrainResult`), and :class:`Trainer`, which takes pretoken counts from anywhere.

Counting and training are separate steps (as in HF ``tokenizers``): :meth:`Trainer.feed`
takes (pretoken, count) pairs from anywhere -- the store, a file, a test -- and
:meth:`Trainer.train` hands them to an in-memory engine (``memory_engines.py``: C, or
the pure-Python reference) and runs the merges with the training driver
(``train_driver.drive``), which the store's disk path uses too.

Ids: 0..255 are the bytes, then the special tokens in order, then the word-end marker
(``--end-of-word``), then document start and end (``--doc-boundaries``), then merge ``r``
gets ``first_merge_id + r``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Dict, Iterable, List, Optional, Sequence, Tuple

from ..bpe import TIE_BREAKS
from .memory import _fastbpe, memory_engine  # noqa: F401  (_fastbpe: None when the C loop is not built)
from .engine import TrainError, WordArrays
from ..pretok.pretokenize import SpecialSplitter, check_end_of_word
from .driver import MergeLog, drive  # noqa: F401  (MergeLog: the run's merges, part of this module's API)

DOC_START = "<|startofdoc|>"
DOC_END = "<|endofdoc|>"
# Token ids are 32-bit everywhere (the C loops, the u32 format), one value kept for "none".
MAX_VOCAB_SIZE = (1 << 32) - 1
# Counts are 64-bit signed in the merge loop (and in the store, below 2**63).
MAX_COUNT = (1 << 63) - 1


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

    def base_tokens(self) -> List[bytes]:
        """The base vocabulary's bytes in id order: what an engine is made with."""
        vocab = self.base_vocab()
        return [vocab[i] for i in range(len(vocab))]

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

    def max_merges(self, extending: Optional[int] = None) -> int:
        """The merges at most (``--vocab-size`` counts all tokens); ``extending``: the tokens
        of the tokenizer a run extends, which take the place of the base symbols."""
        self.check()
        base = 256 + len(self.base_symbols()) if extending is None else extending
        if self.tie_break not in TIE_BREAKS:
            raise TrainError(f"unknown tie-break {self.tie_break!r}; choose one of {', '.join(TIE_BREAKS)}")
        if self.vocab_size is None and self.num_merges is None:
            raise TrainError("give --vocab-size N or --num-merges N")
        limits = []
        if self.vocab_size is not None:
            if self.vocab_size < base and extending is not None:
                raise TrainError(
                    f"--vocab-size {self.vocab_size} is smaller than the {base:,} tokens of the tokenizer to "
                    f"extend; use at least {base}"
                )
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
    words fed are handed to the engine (see ``merge_engine.WordArrays.take``)."""

    def __init__(self, config: TrainConfig):
        self.config = config
        self.symbols = config.base_symbols()
        self.first_merge_id = 256 + len(self.symbols)
        self.marker_id = config.marker_id()
        self.fed = WordArrays(self.marker_id)

    # The fed words' arrays: all symbols, each word's end offset, its count.
    seq = property(lambda self: self.fed.symbols)
    ends = property(lambda self: self.fed.ends)
    freqs = property(lambda self: self.fed.freqs)

    def feed(self, counts: Iterable[Tuple[bytes, int]]) -> None:
        """Adds (pretoken, count) pairs, each pretoken once (as the store yields them; a
        pretoken fed twice trains like one with the summed count, but ``min_word_count``
        applies to each count as fed).  Words of one symbol are dropped: they hold no pair."""
        self.fed.add(counts, self.config.min_word_count)

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
        merger = memory_engine(engine, config.base_tokens(), self.marker_id, config.tie_break)
        try:
            merger.load(self.fed)
            done = drive(merger, limit, config.min_count, forced, on_progress=on_progress)
        finally:
            merger.close()
        return config.result(done)
