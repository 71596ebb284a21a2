"""Memory estimates from store statistics: they choose the training path and feed ``stats``.

Calibrated with the C trainer (peak RSS of ``train_from_store``, vocab 32,768, 2026-12-01):
English 100 MB (260k distinct pretokens, 2.1M symbols) 107 MB; generated web text 20 MB
(366k, 4.2M) 195 MB; multilingual 25 MB (516k, 11.8M) 462 MB; generated 100 MB (1.44M,
18.5M) 635 MB.  Memory follows the symbols (a 16-byte position record, the 4-byte input
array and about one 4-byte occurrence entry each); the constants round the fit up.  The
pure-Python fallback needs several times more.  The out-of-core path keeps only the pair
index: 276 MB anonymous for the generated 100 MB store, 822 MB for a generated 400 MB
one (5.1M distinct, 70.4M symbols).
"""

from __future__ import annotations

BASE = 48 << 20  # interpreter, modules, the store's mapped pages
# in-memory C trainer, per symbol and per word (end offset, count, pair-table share)
C_PER_SYMBOL = 35
C_PER_WORD = 20
# pure-Python trainer: a list of ints per word and set entries in the pair index
PY_PER_SYMBOL = 90
PY_PER_WORD = 400
# out-of-core path: its tables are in a scratch file (as many bytes as the in-memory C
# trainer's, on disk); in memory only the words on their way in (word_arrays: one byte a
# symbol, four with an end-of-word marker or an extended tokenizer's ids; an end offset and
# a count a word) and the interpreter
DISK_PER_WORD = 16


def estimate_train_memory(unique_pretokens: int, total_symbols: int, engine: str = "c") -> int:
    """Bytes the in-memory trainer needs for ``unique_pretokens`` words of ``total_symbols`` symbols."""
    if engine == "python":
        return BASE + PY_PER_WORD * unique_pretokens + PY_PER_SYMBOL * total_symbols
    return BASE + C_PER_WORD * unique_pretokens + C_PER_SYMBOL * total_symbols


def estimate_disk_train_memory(unique_pretokens: int, total_symbols: int, wide: bool = False) -> int:
    """Bytes of anonymous memory the out-of-core trainer needs: the words on their way into
    the scratch file (``wide``: four bytes a symbol instead of one)."""
    return BASE + (4 if wide else 1) * total_symbols + DISK_PER_WORD * unique_pretokens


def estimate_scratch_bytes(unique_pretokens: int, total_symbols: int) -> int:
    """Bytes of disk the out-of-core trainer's scratch file needs: the in-memory tables."""
    return C_PER_WORD * unique_pretokens + C_PER_SYMBOL * total_symbols


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
