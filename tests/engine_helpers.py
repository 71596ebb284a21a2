"""What the engine tests (``test_api``, ``test_engine_*``) share: a corpus, the oracle (one
local ``count`` of the same documents, exported), and a worker killed in the middle of a task.

A worker is killed at a moment named by what it has done -- "right after it computed the
counts of the N-th task submitted, before it hands them back" -- never by time:
:func:`die_once` computes the task, then, if the marker file does not exist yet, creates it
and SIGKILLs its own process; the engine retries the task (on a worker that finds the marker,
and returns).  So the counts of that task were made once, lost once, and must be counted once.
The function runs on the engine's workers, which cannot import this test directory: each
engine test registers this module to be pickled by value (``register_pickle_by_value``).
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

EOT = "<|endoftext|>"


def die_once(marker: str, fn, *args):
    """Runs ``fn(*args)``; the first time (no ``marker`` yet), the worker then dies by SIGKILL
    instead of returning -- in the middle of its task, its result computed and not handed back."""
    result = fn(*args)
    try:
        fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return result  # the retry
    os.write(fd, str(os.getpid()).encode())
    os.close(fd)
    os.kill(os.getpid(), signal.SIGKILL)
    raise AssertionError("not reached")  # pragma: no cover


def kill_in_task(runner, n: int, marker) -> None:
    """Makes the ``n``-th task (from 1) started on ``runner`` (a ``DaskRunner``, a
    ``RayRunner``) kill its worker once, right after computing its result (:func:`die_once`)."""
    start, seen = runner.start, {"n": 0}

    def wrapped(fn, args):
        seen["n"] += 1
        if seen["n"] == n:
            return start(die_once, (str(marker), fn, *args))
        return start(fn, args)

    runner.start = wrapped


def exported(store) -> bytes:
    """The store's counts interchange file (``export-counts``): its settings, totals and every
    count, in a fixed order -- equal bytes for stores equal in content."""
    from bpe_stream.store.lmdb_store import Store
    from bpe_stream.store.merge import export_counts

    out = Path(str(store) + ".export.tsv")
    with Store.open(str(store), readonly=True) as st:
        export_counts(st, str(out))
    return out.read_bytes()


def local_count(store, paths, settings, **options) -> bytes:
    """The oracle: one local ``count_sources`` of ``paths`` into a new store, exported."""
    from bpe_stream.count.counting import count_sources
    from bpe_stream.inputs.reader import Source
    from bpe_stream.store.lmdb_store import Store

    with Store.open(str(store), create=True) as st:
        count_sources(st, [Source.from_arg(str(p)) for p in paths], settings, workers=1, **options)
    return exported(store)


def write_records(directory: Path, texts, name: str = "records"):
    """The texts as a JSON Lines file and a Parquet file (two row groups): each one a record."""
    directory.mkdir(parents=True, exist_ok=True)
    jsonl = directory / f"{name}.jsonl"
    jsonl.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts), encoding="utf-8")
    import pyarrow as pa
    import pyarrow.parquet as pq

    parquet = directory / f"{name}.parquet"
    pq.write_table(pa.table({"text": list(texts)}), parquet, row_group_size=max(1, len(texts) // 2))
    return jsonl, parquet


def record_texts(n: int, seed: int = 0):
    """Valid UTF-8 texts of varied shape (words, numbers, spaces, newlines, special tokens)."""
    import random

    rng = random.Random(seed)
    syll = ["ka", "lo", "mi", "ne", " ", "ta", "zo", "é", "中", "\n", "  ", "7", "!", EOT]
    return ["".join(rng.choice(syll) for _ in range(rng.randint(0, 60))) for _ in range(n)]
