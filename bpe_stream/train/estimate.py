"""Memory estimates from store statistics: they choose the training path, feed ``stats`` and
``train --plan``.

The in-memory C trainer, calibrated 2026-12-04 with the CLI (``train --path memory``, the
peak anonymous memory of the process sampled by benchmarks/measure.py; the stores counted
from the shared corpora and from benchmarks/gen_corpus.py):

    store (distinct pretokens W, symbols S)   merges M   measured   estimate
    code_25M (104k, 0.93M)                     32,512      59 MB      54 MB
    en_100M, first 50 MB (187k, 1.50M)         32,512      67 MB      72 MB
    en_100M (260k, 2.11M)                      11,744      77 MB      84 MB
                                               32,512      82 MB      92 MB
    multi_25M (516k, 11.8M)                    11,744     336 MB     301 MB
                                               32,512     382 MB     343 MB
    generated 80 MB (1.18M, 15.0M)             11,744     365 MB     372 MB
                                               32,512     436 MB     420 MB
                                               65,280     527 MB     496 MB
    generated 400 MB (5.15M, 70.4M)            11,744   1,395 MB   1,567 MB
                                               32,512   1,738 MB   1,671 MB
                                               65,280   1,872 MB   1,836 MB
    generated 2 GB (24.95M, 362M)              65,280   8,299 MB   8,377 MB

Memory follows the symbols -- an 8-byte position and a 4-byte frequency each (merge_loop.c),
an entry in a pair's occurrence list, the words' arrays on their way in -- plus what the
merges add: the pairs they give birth to (a record, a table slot, a heap entry) and those
pairs' lists.  That part grows with the merges and, more slowly, with the symbols (new
pairs per merge grow with the corpus's variety), and stops growing with the merges once
they are many for the words (small corpora: most pairs already exist):
``BASE + C_PER_SYMBOL * S + C_MERGE_FACTOR * min(M, C_MERGE_WORD_SHARE * W) * sqrt(S)``,
a fit to the table above within 12% (long words -- the multilingual text -- hold more
distinct pairs per symbol, hence its -11%).  The path choice leaves MODEL_SPREAD for that.
Without a merge count (``stats``) the estimate is for DEFAULT_MERGES.

On disk the same tables are in the scratch file (:func:`estimate_scratch_bytes`) and the
anonymous memory is the interpreter and the words on their way in, plus what the budget
leaves of the tables (the positions first); calibrated 2026-12-02 (with every table in the
scratch file, quota 0):

    store (distinct pretokens, symbols)       disk path   estimate
    generated 80 MB (1.18M, 15.0M)               50 MB      54 MB
    multi_25M (516k, 11.8M)                      45 MB      44 MB
    en_100M, first 50 MB (187k, 1.5M)            44 MB      44 MB
    code_25M (104k, 0.93M)                       44 MB      44 MB
    generated 400 MB (5.15M, 70.4M)             158 MB     172 MB  (the peak before the
                                                                    loop takes the words)

With a quota (:func:`scratch_quota`) the arena adds up to the quota to it, which is the rest
of the budget.  The pure-Python fallback needs several times more (not calibrated again: it
is the reference, not a path for large corpora).
"""

from __future__ import annotations

import math

BASE = 28 << 20  # the interpreter and modules of a train run
# in-memory C trainer: per symbol, and what the merges add (see the module docstring)
C_PER_SYMBOL = 21
C_MERGE_FACTOR = 0.6
C_MERGE_WORD_SHARE = 0.08
DEFAULT_MERGES = 32768 - 256  # a 32,768-token vocabulary, for an estimate without a run
# the in-memory path is chosen when its estimate times this fits the budget: the fit's
# largest underestimate (-11%) with room to spare
MODEL_SPREAD = 1.15
# pure-Python trainer: a list of ints per word and set entries in the pair index
PY_BASE = 48 << 20
PY_PER_SYMBOL = 90
PY_PER_WORD = 400
# out-of-core path: the interpreter with the store, the checkpoint writer and the scratch
# file's bookkeeping (DISK_BASE, the floor measured on small stores), and while loading, the
# interpreter (DISK_LOAD_BASE) with the words' arrays on their way in: one byte a symbol (four
# with 4-byte symbols) and 16 a word (its end offset and count), measured 158 MB on 400 MB of
# generated text (5.15M, 70.4M) against 172 MB estimated
DISK_BASE = 44 << 20
DISK_LOAD_BASE = 20 << 20
DISK_PER_WORD = 16
# the disk path keeps up to the rest of the budget of its tables in anonymous memory (the
# positions first, see csrc/filearena.h), less this margin (see scratch_quota)
QUOTA_MARGIN = 16 << 20
QUOTA_SHARE = 32


def estimate_train_memory(unique_pretokens: int, total_symbols: int, engine: str = "c",
                          merges: int = DEFAULT_MERGES) -> int:
    """Bytes the in-memory trainer needs for ``unique_pretokens`` words of ``total_symbols``
    symbols and ``merges`` merges (see the module docstring).

    >>> round(estimate_train_memory(24_950_000, 362_000_000, merges=65_280) / 1e6)  # 2 GB of web text
    8377
    """
    if engine == "python":
        return PY_BASE + PY_PER_WORD * unique_pretokens + PY_PER_SYMBOL * total_symbols
    merging = min(max(merges, 0), C_MERGE_WORD_SHARE * unique_pretokens)
    return int(BASE + C_PER_SYMBOL * total_symbols + C_MERGE_FACTOR * merging * math.sqrt(total_symbols))


def estimate_disk_train_memory(unique_pretokens: int, total_symbols: int, wide: bool = False) -> int:
    """Bytes of anonymous memory the out-of-core trainer needs besides the tables it keeps in
    memory (:func:`scratch_quota`): the interpreter, and the words on their way into the
    scratch file (``wide``: four bytes a symbol instead of one)."""
    return max(DISK_BASE, DISK_LOAD_BASE + (4 if wide else 1) * total_symbols + DISK_PER_WORD * unique_pretokens)


def scratch_quota(budget: int, disk_need: int) -> int:
    """Bytes of the disk path's tables that stay in anonymous memory while the words load: the
    budget less what the rest of the process needs then (``disk_need``,
    :func:`estimate_disk_train_memory`) and a margin of QUOTA_MARGIN and 1/QUOTA_SHARE of the
    budget (the allocator's slack, the interpreter's growth); 0 when nothing is left.  The file
    arena never holds more than this there."""
    return max(0, budget - disk_need - QUOTA_MARGIN - budget // QUOTA_SHARE)


def scratch_run_quota(budget: int) -> int:
    """The same once the words are loaded (their arrays gone): the budget less DISK_BASE and
    the margin."""
    return scratch_quota(budget, DISK_BASE)


def estimate_scratch_bytes(unique_pretokens: int, total_symbols: int, run_quota: int = 0) -> int:
    """Bytes of disk the out-of-core trainer's scratch file needs: its tables less what the
    quota keeps in memory (at most the positions, 8 bytes a symbol, and what else fits)."""
    return max(0, estimate_disk_tables(unique_pretokens, total_symbols) - run_quota)


# The disk path's tables as the file arena holds them (in the scratch file and in the anonymous
# memory of its quota), per symbol and per word; and the CPU time of a run per symbol, for
# ``train --plan``.  See the calibration table in the module docstring.  Per symbol 34 bytes
# since a freed block of the file is punched only in whole large folios (filearena.c), its edges
# kept: with 32 the plan said 10.1 and 11.1 GB for the 2 GB store at 2G and 1G, and 25.4 GB for
# the 5 GB store at 4G, where the runs of 2026-12-06 peaked at 11.5, 11.6 and 26.3 GB.
DISK_TABLES_PER_SYMBOL = 34
DISK_TABLES_PER_WORD = 20
SECONDS_PER_SYMBOL = 180e-9  # load and merges, in memory, for 32,768 merges
# The disk path's time against the in-memory one (see estimate_train_seconds): a floor, and
# what each dirty-background-limit's worth of positions left in the scratch file adds.
DISK_TIME_FLOOR = 1.1
DISK_TIME_PER_DIRTY_LIMIT = 1.2
POSITION_BYTES = 8  # a position of the merge loop (merge_loop.c's Node): the table every merge dirties


def estimate_disk_tables(unique_pretokens: int, total_symbols: int) -> int:
    """Bytes of the disk path's tables: what the scratch file and the quota share."""
    return DISK_TABLES_PER_WORD * unique_pretokens + DISK_TABLES_PER_SYMBOL * total_symbols


def estimate_train_seconds(total_symbols: int, merges: int, disk: bool, run_quota: int = 0,
                           dirty_limit: int = 0) -> float:
    """A rough wall time of training (one core, nothing else running): the symbols at a rate
    measured on generated web text, growing slowly with the merges.

    On disk (``disk``) the merges rewrite positions scattered over the whole table, and those
    the quota (``run_quota``, :func:`scratch_run_quota`) leaves in the scratch file are
    written back by the kernel and dirtied again, a page fault each time, once the file's
    dirty pages pass its background limit (``dirty_limit``, :func:`dirty_background_limit`;
    0: read it here).  So the time grows with the positions in the file as a share of that
    limit: ``DISK_TIME_FLOOR + DISK_TIME_PER_DIRTY_LIMIT * file_positions / dirty_limit``
    times the in-memory time.  Measured on this project's 2-core, 24 GB machine (dirty limit
    about 2.3 GB), against the in-memory run of the same store:

        store (symbols), merges, budget      in the file  measured     model
        generated 400 MB (70.4M), 32,000, 435M    0.18 GB  x1.0         x1.19
        generated 2 GB (362M), 65,280, 2G         0.78 GB  x1.42-1.47   x1.49
                                       1G         1.87 GB  x1.88-2.09   x2.03
        generated 5 GB (886M), 131,072, 4G        2.99 GB  759-886 s    625 s

    (the 5 GB store's in-memory run needs more memory than the machine has; the model's
    in-memory time for it is 242 s).  At 5 GB the scratch (24 GB) outgrows the page cache as
    well, which the model leaves out: it underestimated there, by 18-30%.  Since the scratch
    file is mapped with large folios and the lists are renumbered lazily (2026-12-06) the 2 GB
    runs measure x1.41-1.42 at both budgets and the 5 GB run 588 s: the model is now close at
    5 GB and pessimistic at 2 GB, where the in-memory time itself varied from 41 to 52 s that day.

    >>> round(estimate_train_seconds(362_000_000, 65_280, False))
    80
    >>> round(estimate_train_seconds(362_000_000, 65_280, True, run_quota=977 << 20, dirty_limit=2300 << 20))
    163
    """
    seconds = total_symbols * SECONDS_PER_SYMBOL * (max(merges, 1) / 32768) ** 0.3
    if not disk:
        return seconds
    in_file = max(0, POSITION_BYTES * total_symbols - run_quota)
    limit = dirty_limit or dirty_background_limit()
    return seconds * (DISK_TIME_FLOOR + DISK_TIME_PER_DIRTY_LIMIT * in_file / max(limit, 1))


VM_SYSCTL_DIR = "/proc/sys/vm"


def dirty_background_limit() -> int:
    """The page cache's dirty bytes past which the kernel starts writing back (Linux:
    ``vm.dirty_background_bytes``, else ``vm.dirty_background_ratio`` percent of the available
    memory); 10% of the available memory where those cannot be read."""
    def read(name: str) -> int:
        try:
            with open(f"{VM_SYSCTL_DIR}/{name}") as f:
                return int(f.read().split()[0])
        except (OSError, ValueError, IndexError):
            return -1

    nbytes = read("dirty_background_bytes")
    if nbytes > 0:
        return nbytes
    ratio = read("dirty_background_ratio")
    return available_memory() * (ratio if 0 < ratio <= 100 else 10) // 100


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
