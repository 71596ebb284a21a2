"""The training checkpoint in the store's ``train`` table: its layout, reading and writing.

Layout (unchanged since it was introduced: stores with checkpoints resume):

* ``checkpoint``: msgpack ``{"fingerprint", "count", "chunks"}`` -- the run it belongs to
  (``pipeline``'s fingerprint of the counts and settings), how many merges it holds and in
  how many chunks;
* ``checkpoint/00000000``, ``checkpoint/00000001``, ...: msgpack flat lists
  ``[left, right, count, left, right, count, ...]``, the merges in order, each chunk the
  merges of one save.

Each save appends one chunk and rewrites the head in one transaction, so a checkpoint
costs the same at merge 30,000 as at 1,000, and a kill leaves the previous one whole.

The head also names the run that wrote it (``run``: random bytes drawn per ``Checkpointer``).
A save appends only to a checkpoint whose head is still the one this run wrote last (or the
one it resumed); when another run -- a second ``train`` on the same store at the same time --
wrote one meanwhile, the save replaces it whole with this run's merges.  So a checkpoint is
always one run's, whole, never chunks of two (issue 39: a ``--resume`` then found it damaged).
"""

from __future__ import annotations

import os
from typing import Optional, Sequence, Tuple

from .lmdb_store import Store, StoreError, pack

CHECKPOINT_KEY = b"checkpoint"  # {"fingerprint", "count", "chunks"}; the merges in chunks after it
CHUNK_PREFIX = b"checkpoint/"


def chunk_key(i: int) -> bytes:
    return CHUNK_PREFIX + b"%08d" % i


def read_checkpoint(store: Store, txn=None) -> Optional[dict]:
    """The store's training checkpoint as ``{"fingerprint", "merges": [[left, right, count], ...]}``."""
    if txn is None:
        with store.reader() as t:
            return read_checkpoint(store, t)
    head = store.get_train(CHECKPOINT_KEY, txn)
    if not isinstance(head, dict) or not isinstance(head.get("chunks"), int):
        return None
    merges: list = []
    for i in range(head["chunks"]):
        flat = store.get_train(chunk_key(i), txn)
        if not isinstance(flat, list) or len(flat) % 3:
            raise StoreError(f"the training checkpoint in {store.path} is damaged; train without --resume")
        merges += [flat[j:j + 3] for j in range(0, len(flat), 3)]
    if len(merges) != head.get("count"):
        raise StoreError(f"the training checkpoint in {store.path} is damaged; train without --resume")
    return {"fingerprint": head.get("fingerprint"), "merges": merges}


class Checkpointer:
    """Commits the merges of a run into the store, each save adding only the new ones (one
    chunk, one transaction).  ``resumed``: the checkpoint this run continues, whole (its
    merges are the run's first ones); None starts a new checkpoint at the first save."""

    def __init__(self, store: Store, fingerprint: str, resumed: Optional[dict] = None):
        self.store = store
        self.fingerprint = fingerprint
        self.saved = len(resumed["merges"]) if resumed else 0
        self.run = os.urandom(8)
        # the head this run extends: the one it resumed, then its own (None: none yet)
        self.head = None if not resumed else store.get_train(CHECKPOINT_KEY)
        self.chunks = None if not resumed else self.head["chunks"]

    def save(self, merges: Sequence[Tuple[int, int, int]]) -> None:
        new = merges[self.saved:]
        if not new and self.chunks is not None:
            return
        db = self.store.db["train"]

        def txn_fn(txn):
            nonlocal new
            if self.chunks is not None and self.store.get_train(CHECKPOINT_KEY, txn) != self.head:
                # another run wrote the checkpoint since: replaced whole by this run's merges
                self.chunks, self.saved, new = None, 0, merges
            if self.chunks is None:  # a new run: drop the chunks of an older one
                with txn.cursor(db=db) as cur:
                    if cur.set_range(CHUNK_PREFIX):
                        while cur.key().startswith(CHUNK_PREFIX):
                            if not cur.delete():
                                break
                chunks = 0
            else:
                chunks = self.chunks
            flat = [x for m in new for x in m]
            txn.put(chunk_key(chunks), pack(flat), db=db)
            head = {"fingerprint": self.fingerprint, "count": self.saved + len(new), "chunks": chunks + 1,
                    "run": self.run}
            txn.put(CHECKPOINT_KEY, pack(head), db=db)
            return head

        self.head = self.store.write(txn_fn)
        self.chunks = self.head["chunks"]
        self.saved += len(new)


def write_checkpoint(store: Store, fingerprint: str, merges: Sequence[Tuple[int, int, int]]) -> None:
    """Replaces the store's checkpoint with ``merges`` (for tools and tests)."""
    Checkpointer(store, fingerprint).save(list(merges))
