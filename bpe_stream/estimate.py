"""Memory estimates from store statistics (used by ``stats`` and to choose a training path)."""

from __future__ import annotations

# CPython costs of the in-memory trainer per distinct pretoken (list object, its word id
# in the pair index sets, the frequency) and per symbol (a list slot, index set entries).
PER_WORD = 200
PER_SYMBOL = 90


def estimate_train_memory(unique_pretokens: int, total_symbols: int) -> int:
    """Bytes the in-memory trainer needs for ``unique_pretokens`` words of ``total_symbols`` bytes."""
    return PER_WORD * unique_pretokens + PER_SYMBOL * total_symbols
