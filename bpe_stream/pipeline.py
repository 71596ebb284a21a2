"""The library's front doors: train from a store or a file, returning a ``Tokenizer``.

Glue only: it reads counts from the store (or counts a file in memory), hands them to the
trainer and turns the result into a ``Tokenizer``.  The CLI calls these functions.
"""

from __future__ import annotations

import os
from collections import Counter
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from .counting import count_range, make_settings
from .reader import to_bytes
from .store import Store, StoreError
from .tokenizer import Tokenizer
from .trainer import TrainConfig, Trainer, TrainResult


def tokenizer_from_result(result: TrainResult, pretokenizer: str, tie_break: str) -> Tokenizer:
    first = 256 + len(result.symbols)
    merges = [(left, right, first + r) for r, (left, right) in enumerate(result.merges)]
    symbols = [(256 + i, role, text) for i, (role, text) in enumerate(result.symbols)]
    return Tokenizer(result.vocab, merges, symbols, pretokenizer=pretokenizer, tie_break=tie_break)


def train_from_store(
    store: Store,
    config: TrainConfig,
    on_progress: Optional[Callable[[list, int, int], None]] = None,
    engine: str = "auto",
) -> Tuple[Tokenizer, TrainResult]:
    """Trains on the counts in ``store``; its special tokens come first, then ``config``'s extra ones."""
    settings = store.settings()
    if settings is None:
        raise StoreError(f"the store at {store.path} has no counts yet; run 'bpe-stream count' first")
    config.special_tokens = list(dict.fromkeys(list(settings["special_tokens"]) + list(config.special_tokens)))
    config.end_of_word = settings.get("end_of_word")
    config.max_merges()  # validate before reading the store
    trainer = Trainer(config)
    with store.reader() as txn:
        trainer.feed(store.iter_words(txn, max(1, config.min_word_count)))
    result = trainer.train(on_progress, engine=engine)
    return tokenizer_from_result(result, settings["pretokenizer"], config.tie_break), result


def count_file(path, settings: dict) -> Counter:
    """Pretoken counts (bytes keys) of one file, counted in memory."""
    counter = count_range(os.fspath(path), 0, os.path.getsize(path), settings).counter
    return Counter({to_bytes(k): v for k, v in counter.items()})


def train_bpe(
    input_path: str | os.PathLike,
    vocab_size: int,
    special_tokens: Sequence[str] = (),
    *,
    pretokenizer: str = "gpt2",
    tie_break: str = "max-bytes",
    engine: str = "auto",
) -> Tuple[Dict[int, bytes], List[Tuple[bytes, bytes]]]:
    """CS336's ``train_bpe``: the vocabulary (id -> bytes) and the merges as byte pairs, in order."""
    settings = make_settings(pretokenizer, special_tokens)
    config = TrainConfig(vocab_size=vocab_size, special_tokens=list(special_tokens), tie_break=tie_break)
    trainer = Trainer(config)
    trainer.feed(count_file(input_path, settings).items())
    result = trainer.train(engine=engine)
    merges = [(result.vocab[a], result.vocab[b]) for a, b in result.merges]
    return result.vocab, merges
