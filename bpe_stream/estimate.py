"""Memory estimates from store statistics: they choose the training path and feed ``stats``.

Calibrated on this project's corpora with the C trainer (peak RSS of ``train``):
English 100 MB (260k distinct pretokens, 2.1M symbols) 224 MB; multilingual 25 MB (516k
distinct, 11.8M symbols) 557 MB.  The pure-Python fallback needs several times more.
"""

from __future__ import annotations

BASE = 80 << 20  # interpreter, modules, the store's mapped pages
# in-memory C trainer: symbols array (Python) + symbol/prev/next/word arrays and pair
# occurrence lists (C); per word: end offset, count, pair-table share
C_PER_SYMBOL = 36
C_PER_WORD = 150
# pure-Python trainer: a list of ints per word and set entries in the pair index
PY_PER_SYMBOL = 90
PY_PER_WORD = 400
# out-of-core path: only the pair index (4-byte word ids per pair occurrence, with slack)
DISK_PER_SYMBOL = 12


def estimate_train_memory(unique_pretokens: int, total_symbols: int, engine: str = "c") -> int:
    """Bytes the in-memory trainer needs for ``unique_pretokens`` words of ``total_symbols`` symbols."""
    if engine == "python":
        return BASE + PY_PER_WORD * unique_pretokens + PY_PER_SYMBOL * total_symbols
    return BASE + C_PER_WORD * unique_pretokens + C_PER_SYMBOL * total_symbols


def estimate_disk_train_memory(unique_pretokens: int, total_symbols: int) -> int:
    """Bytes the out-of-core trainer keeps in memory (its pair index)."""
    return BASE + DISK_PER_SYMBOL * total_symbols


def available_memory() -> int:
    """MemAvailable from /proc/meminfo (Linux), else 4 GiB."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:  # pragma: no cover
        pass
    return 4 << 30


def default_budget() -> int:
    """The default ``--max-memory`` of ``train`` and ``count``: half the available memory."""
    return available_memory() // 2
