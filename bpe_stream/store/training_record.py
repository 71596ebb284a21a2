"""The training record: what the last ``train`` on a store took (issue 38), kept in the store.

One msgpack map under :data:`RECORD_KEY` in the store's ``train`` table (beside the
checkpoint, :mod:`bpe_stream.store.checkpoint`), rewritten by each run that finishes on a
writable store; a read-only store records nothing.  Fields (all scalars):

* ``date``: when the run finished, UTC ISO 8601; ``seconds``: its wall time (plan, load, merges);
* ``path`` (``memory``/``disk``), ``reason`` (why), ``engine``, ``budget_bytes`` (``--max-memory``);
* ``peak_rss_bytes``: the process's peak resident set size (``getrusage(RUSAGE_SELF).ru_maxrss``),
  the whole process's, not only the training's;
* ``scratch_peak_bytes``: the disk path's scratch file at its largest (absent in memory);
* ``merges`` (the tokenizer's), ``merges_learned`` (this run's), ``forced_merges`` (``--from``'s or
  a resumed checkpoint's), ``vocab_size``, ``tie_break``, ``distinct_pretokens``, ``symbols``.

Read with msgpack only (no pickle: opening a record runs no code).  A record that does not
decode, or is not a map of scalars, is left out with a note, never an error.
"""

from __future__ import annotations

import datetime
import resource
import sys
from typing import Callable, Optional, Tuple

from .lmdb_store import Store, StoreError, pack

RECORD_KEY = b"last-run"  # in the ``train`` table; checkpoints use ``checkpoint`` and ``checkpoint/...``
_SCALARS = (bool, int, float, str, type(None))
_REQUIRED = {"date": str, "seconds": (int, float), "path": str, "merges_learned": int}


def peak_rss_bytes() -> int:
    """The process's peak resident set size in bytes (ru_maxrss: KiB on Linux, bytes on macOS)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak) if sys.platform == "darwin" else int(peak) * 1024


def make_record(plan, tok, merges_learned: int, forced_merges: int, seconds: float,
                scratch_peak: Optional[int] = None) -> dict:
    """The record of a finished run of ``plan`` (a ``TrainPlan``) that made ``tok``."""
    record = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "seconds": round(seconds, 3),
        "path": plan.path, "reason": plan.reason, "engine": plan.engine, "budget_bytes": plan.budget,
        "peak_rss_bytes": peak_rss_bytes(),
        "merges": len(tok.merges), "merges_learned": merges_learned, "forced_merges": forced_merges,
        "vocab_size": tok.vocab_size, "tie_break": plan.config.tie_break,
        "distinct_pretokens": plan.unique, "symbols": plan.symbols,
    }
    if scratch_peak is not None:
        record["scratch_peak_bytes"] = int(scratch_peak)
    return record


def write_record(store: Store, record: dict) -> None:
    """Replaces the store's training record (nothing on a read-only store)."""
    if store.readonly:
        return
    db = store.db["train"]
    store.write(lambda txn: txn.put(RECORD_KEY, pack(record), db=db))


def read_record(store: Store, txn=None) -> Tuple[Optional[dict], Optional[str]]:
    """``(record, note)``: the store's training record, or None -- with a note saying why when
    one is there but garbled (it is then left out)."""
    try:
        record = store.get_train(RECORD_KEY, txn)
    except StoreError:  # bytes that are not msgpack
        record = False
    if record is None:
        return None, None
    if (not isinstance(record, dict) or not all(isinstance(k, str) and isinstance(v, _SCALARS) for k, v in record.items())
            or not all(isinstance(record.get(k), t) and not isinstance(record.get(k), bool) for k, t in _REQUIRED.items())):
        return None, f"note: the training record in {store.path} is garbled; left out (the next train rewrites it)"
    return record, None


def stored_record(store: Store, on_note: Callable[[str], None] = lambda m: None) -> Optional[dict]:
    """:func:`read_record`, its note (if any) given to ``on_note``."""
    record, note = read_record(store)
    if note:
        on_note(note)
    return record


def _mb(n) -> str:
    return f"{n / 1e6:,.1f} MB"


def describe(record: dict) -> list:
    """The record as ``(label, text)`` rows, for people (the report's table)."""
    rows = [("finished (UTC)", record.get("date")), ("wall time", f"{record['seconds']:,.1f} s"),
            ("path", f"{record['path']}" + (f" ({record['reason']})" if record.get("reason") else ""))]
    if record.get("engine"):
        rows.append(("engine", record["engine"]))
    for key, label in (("budget_bytes", "memory budget"), ("peak_rss_bytes", "peak RSS of the process"),
                       ("scratch_peak_bytes", "scratch file at its largest")):
        if isinstance(record.get(key), int):
            rows.append((label, _mb(record[key])))
    for key, label in (("merges_learned", "merges learned"), ("forced_merges", "merges given (--from or resumed)"),
                       ("merges", "merges in the tokenizer"), ("vocab_size", "vocabulary"),
                       ("distinct_pretokens", "distinct pretokens"), ("symbols", "symbols")):
        if isinstance(record.get(key), int):
            rows.append((label, f"{record[key]:,}"))
    if record.get("tie_break"):
        rows.append(("tie-break", record["tie_break"]))
    return rows


def one_line(record: dict) -> str:
    """The record in one line (``bpe-stream stats``)."""
    text = (f"{record['date']}: {record['merges_learned']:,} merges learned in {record['seconds']:,.1f} s "
            f"on the {record['path']} path")
    if isinstance(record.get("vocab_size"), int):
        text += f", vocabulary {record['vocab_size']:,}"
    if isinstance(record.get("peak_rss_bytes"), int):
        text += f", peak RSS {_mb(record['peak_rss_bytes'])}"
    if isinstance(record.get("budget_bytes"), int):
        text += f" (budget {_mb(record['budget_bytes'])})"
    if isinstance(record.get("scratch_peak_bytes"), int):
        text += f", scratch file at most {_mb(record['scratch_peak_bytes'])}"
    return text
