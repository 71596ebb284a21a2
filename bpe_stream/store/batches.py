"""Adding counts to a store in bounded batches, each committed whole with its input's progress.

``import-counts`` and ``merge-stores`` (:mod:`bpe_stream.store.merge`) add pretoken counts
that were made elsewhere; :class:`BatchAdder` holds them up to a memory limit and commits each
batch together with the source record that says how far the input got (:meth:`Store.add_batch`),
so a killed import or merge resumes where its committed batches end.  :func:`check_room`
refuses an addition that would take the store's pretoken total past 2**63-1 before anything is
written.
"""

from __future__ import annotations

from typing import Dict, Optional

from .lmdb_store import MAX_COUNT, StoreError

# Bytes one pending entry costs (a bytes key, a dict slot, an int) beyond its own bytes.
ENTRY_BYTES = 120


class BatchAdder:
    """Adds counts to a store in bounded batches, each committed whole with the progress of
    the input (a source record; :meth:`Store.add_batch`), so a killed import or merge resumes
    where its committed batches end and never counts anything twice."""

    def __init__(self, store, key: bytes, record: dict, max_memory: int):
        self.store, self.key, self.record = store, key, dict(record)
        self.limit = max(1 << 16, max_memory // 2)
        self.counts: Dict[bytes, int] = {}
        self.size = 0
        self.new = 0

    def add(self, pretoken: bytes, n: int) -> bool:
        """Adds one count; True when the batch is full and should be flushed."""
        counts = self.counts
        old = counts.get(pretoken)
        if old is None:
            counts[pretoken] = n
            self.size += len(pretoken) + ENTRY_BYTES
        else:
            counts[pretoken] = old + n
        return self.size >= self.limit

    def flush(self, progress: dict, totals: Optional[dict] = None, done: bool = False) -> None:
        counts, self.counts, self.size = self.counts, {}, 0
        record = dict(self.record, **progress, done=done)
        store = self.store

        self.new += store.add_batch(counts, {self.key: record}, dict(totals or {}))


def check_room(store, pretokens: int, what: str) -> None:
    """Refuses to add ``pretokens`` more to ``store`` when its total would pass 2**63-1: the
    store's total bounds each of its counts, which then stay 64-bit."""
    have = int(store.totals().get("pretokens", 0))
    if have + pretokens > MAX_COUNT:
        raise StoreError(
            f"adding {what} would bring the store at {store.path} to {have + pretokens:,} pretokens, past 2**63-1 "
            "(the store keeps 64-bit counts); use another --store"
        )
