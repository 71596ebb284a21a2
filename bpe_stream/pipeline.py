"""The library's front doors: train from a store or a file, returning a ``Tokenizer``.

Glue only: it reads counts from the store (or counts a file in memory), hands them to the
trainer and turns the result into a ``Tokenizer``.  The CLI calls these functions.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections import Counter
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from .counting import count_range, make_settings
from .reader import to_bytes
from .estimate import default_budget, estimate_disk_train_memory, estimate_train_memory
from .sequences import DiskTrainer
from .store import Store, StoreError, pack
from .tokenizer import Tokenizer
from .trainer import MergeLog, TrainConfig, TrainError, Trainer, TrainResult


def tokenizer_from_result(result: TrainResult, pretokenizer: str, tie_break: str) -> Tokenizer:
    first = 256 + len(result.symbols)
    merges = [(left, right, first + r) for r, (left, right) in enumerate(result.merges)]
    symbols = [(256 + i, role, text) for i, (role, text) in enumerate(result.symbols)]
    return Tokenizer(result.vocab, merges, symbols, pretokenizer=pretokenizer, tie_break=tie_break)


CHECKPOINT_KEY = b"checkpoint"  # {"fingerprint", "count", "chunks"}; the merges in chunks after it
_CHUNK_PREFIX = b"checkpoint/"


def _chunk_key(i: int) -> bytes:
    return _CHUNK_PREFIX + b"%08d" % i


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
        flat = store.get_train(_chunk_key(i), txn)
        if not isinstance(flat, list) or len(flat) % 3:
            raise StoreError(f"the training checkpoint in {store.path} is damaged; train without --resume")
        merges += [flat[j:j + 3] for j in range(0, len(flat), 3)]
    if len(merges) != head.get("count"):
        raise StoreError(f"the training checkpoint in {store.path} is damaged; train without --resume")
    return {"fingerprint": head.get("fingerprint"), "merges": merges}


class Checkpointer:
    """Commits the merges of a run into the store, each save adding only the new ones (one
    chunk, one transaction), so checkpoints cost the same at merge 30,000 as at 1,000."""

    def __init__(self, store: Store, fingerprint: str, resumed: Optional[dict] = None):
        self.store = store
        self.fingerprint = fingerprint
        self.saved = len(resumed["merges"]) if resumed else 0
        self.chunks = None if not resumed else store.get_train(CHECKPOINT_KEY)["chunks"]

    def save(self, merges: Sequence[Tuple[int, int, int]]) -> None:
        new = merges[self.saved:]
        if not new and self.chunks is not None:
            return
        db = self.store.db["train"]

        def txn_fn(txn):
            if self.chunks is None:  # a new run: drop the chunks of an older one
                with txn.cursor(db=db) as cur:
                    if cur.set_range(_CHUNK_PREFIX):
                        while cur.key().startswith(_CHUNK_PREFIX):
                            if not cur.delete():
                                break
                chunks = 0
            else:
                chunks = self.chunks
            flat = [x for m in new for x in m]
            txn.put(_chunk_key(chunks), pack(flat), db=db)
            head = {"fingerprint": self.fingerprint, "count": self.saved + len(new), "chunks": chunks + 1}
            txn.put(CHECKPOINT_KEY, pack(head), db=db)
            return chunks + 1

        self.chunks = self.store.write(txn_fn)
        self.saved += len(new)


def write_checkpoint(store: Store, fingerprint: str, merges: Sequence[Tuple[int, int, int]]) -> None:
    """Replaces the store's checkpoint with ``merges`` (for tools and tests)."""
    Checkpointer(store, fingerprint).save(list(merges))


def _fingerprint(settings: dict, totals: dict, config: TrainConfig) -> str:
    """What a checkpoint's merges depend on: the counts (through the store's totals) and the
    settings that change merges or ids -- not the vocabulary size, so a resumed run may go further."""
    keys = ("bytes", "documents", "pretokens", "specials", "unique", "unique_bytes")
    rules = {
        "settings": settings,
        "totals": {k: totals.get(k, 0) for k in keys},
        "special_tokens": config.special_tokens,
        "end_of_word": config.end_of_word,
        "doc_boundaries": config.doc_boundaries,
        "tie_break": config.tie_break,
        "min_word_count": config.min_word_count,
    }
    return hashlib.sha256(json.dumps(rules, sort_keys=True).encode("utf-8")).hexdigest()


def _forced_from_tokenizer(tok: Tokenizer, config: TrainConfig, settings: dict) -> List[Tuple[int, int]]:
    """The merges of ``tok`` to continue from; it must have been trained on these settings."""
    expected = [(256 + i, role, text) for i, (role, text) in enumerate(config.base_symbols())]
    if tok.pretokenizer.name != settings["pretokenizer"] or list(tok.symbols) != expected:
        raise TrainError(
            "--from: that tokenizer was not trained with this store's pretokenizer and special tokens; "
            "continue only a tokenizer this store trained"
        )
    first = 256 + len(expected)
    for r, (left, right, new) in enumerate(tok.merges):
        if new != first + r:
            raise TrainError("--from: the tokenizer's ids are not in bpe-stream's order; export it from bpe-stream first")
    if tok.tie_break is not None and tok.tie_break != config.tie_break:
        raise TrainError(f"--from: the tokenizer was trained with --tie-break {tok.tie_break}; use the same")
    return [(left, right) for left, right, _ in tok.merges]


def train_from_store(
    store: Store,
    config: TrainConfig,
    on_progress: Optional[Callable[[list, int, int], None]] = None,
    engine: str = "auto",
    *,
    max_memory: Optional[int] = None,
    path: str = "auto",
    resume: bool = False,
    from_tokenizer: Optional[Tokenizer] = None,
    checkpoint_every: int = 1000,
    checkpoint_seconds: float = 30.0,
    on_message: Callable[[str], None] = lambda m: None,
) -> Tuple[Tokenizer, TrainResult]:
    """Trains on the counts in ``store``; its special tokens come first, then ``config``'s extra ones.

    ``path``: ``"memory"``, ``"disk"`` (sequence table in LMDB) or ``"auto"`` (memory when the
    estimate fits ``max_memory``).  Both give the same merges.  Every ``checkpoint_every``
    merges or ``checkpoint_seconds`` the merges so far are committed to the store, and
    ``resume`` continues from them; ``from_tokenizer`` continues a finished tokenizer.
    """
    settings = store.settings()
    if settings is None:
        raise StoreError(f"the store at {store.path} has no counts yet; run 'bpe-stream count' first")
    config.special_tokens = list(dict.fromkeys(list(settings["special_tokens"]) + list(config.special_tokens)))
    config.end_of_word = settings.get("end_of_word")
    limit = config.max_merges()  # validates before reading the store
    budget = max_memory if max_memory is not None else default_budget()

    with store.reader() as txn:
        totals = store.totals(txn)
        unique = store.unique_words(txn)
        unique_bytes = totals.get("unique_bytes")
        if unique_bytes is None or (unique and not unique_bytes):  # a store from before the total existed
            unique_bytes = sum(len(w) for w, _ in store.iter_words(txn))
        symbols = unique_bytes + (unique if config.end_of_word is not None else 0)
        fingerprint = _fingerprint(settings, totals, config)
        checkpoint = read_checkpoint(store, txn)

        forced: List[Tuple[int, int]] = []
        if from_tokenizer is not None:
            forced = _forced_from_tokenizer(from_tokenizer, config, settings)
            on_message(f"continuing from a tokenizer with {len(forced):,} merges")
        if resume:
            if checkpoint is None or checkpoint.get("fingerprint") != fingerprint:
                on_message("no checkpoint of this run to resume (the store or the settings changed); training from the start")
            else:
                # The checkpoint's merges stand only while their counts reach --min-count,
                # which the fingerprint leaves out (it only stops training earlier).
                kept = []
                for m in checkpoint["merges"]:
                    if m[2] < max(1, config.min_count):
                        break
                    kept.append(m)
                checkpoint = dict(checkpoint, merges=kept)
                saved = [tuple(m[:2]) for m in kept]
                if forced and saved[: len(forced)] != forced[: len(saved)]:
                    raise TrainError("--resume and --from disagree: the checkpoint holds other merges; drop one of them")
                if len(saved) > len(forced):
                    forced = saved
                on_message(f"resuming after {len(saved):,} checkpointed merges")

        use_c = engine in ("auto", "c") and _fastbpe_available()
        need = estimate_train_memory(unique, symbols, "c" if use_c else "python")
        if path == "auto":
            path = "memory" if need <= budget or not _fastbpe_available() else "disk"
            reason = (
                f"estimated {need / 1e6:,.0f} MB {'fits' if path == 'memory' else 'exceeds'} the budget of {budget / 1e6:,.0f} MB"
            )
        else:
            reason = "as asked"
        if path not in ("memory", "disk"):
            raise TrainError(f"unknown training path {path!r}; use memory, disk or auto")
        on_message(
            f"training {'in memory' if path == 'memory' else 'with the sequence table on disk'} "
            f"({unique:,} distinct pretokens, {symbols:,} symbols; {reason})"
        )
        index_need = estimate_disk_train_memory(unique, symbols)
        if path == "disk" and index_need > budget:
            # The exact algorithm still runs (nothing is pruned or sampled); the pair index
            # just lives beyond the budget, and the OS pages it if it must.
            on_message(
                f"note: the pair index alone is estimated at {index_need / 1e6:,.0f} MB, over the budget of "
                f"{budget / 1e6:,.0f} MB; training stays exact but may page (raise --max-memory if you can)"
            )

        if store.readonly:
            on_message(f"the store at {store.path} cannot be written here: training without checkpoints "
                       "(--resume cannot continue this run)")
        merges_so_far = MergeLog()
        last_save = [time.monotonic(), 0]
        resumed = checkpoint if (resume and checkpoint and checkpoint.get("fingerprint") == fingerprint
                                 and [tuple(m[:2]) for m in checkpoint["merges"]] == forced[: len(checkpoint["merges"])]) else None
        checkpointer = Checkpointer(store, fingerprint, resumed) if not store.readonly else None

        def save_checkpoint() -> None:
            checkpointer.save(merges_so_far)
            last_save[0], last_save[1] = time.monotonic(), len(merges_so_far)

        def progress(batch, done, lim):
            merges_so_far.extend(batch)
            if store.readonly:
                pass
            elif len(merges_so_far) - last_save[1] >= checkpoint_every or time.monotonic() - last_save[0] >= checkpoint_seconds:
                save_checkpoint()
            if on_progress is not None:
                on_progress(batch, done, lim)

        # The words are read in the same transaction as the totals the fingerprint names.
        min_word = max(1, config.min_word_count)
        if path == "memory":
            trainer = Trainer(config)
            trainer.feed(store.iter_words(txn, min_word))
        else:
            trainer = DiskTrainer(
                [config.base_vocab()[i] for i in range(256 + len(config.base_symbols()))], config.marker_id(),
                config.tie_break, _scratch_dir(store),
                mapped_budget=budget - index_need,  # what the pair index leaves for the table's pages
                size_hint=4 * symbols + 40 * unique,  # the table: symbols, and a count and key per word
            )
            try:
                trainer.load(store.iter_words(txn, min_word))
            except BaseException:
                trainer.close()
                raise
    store.remap()  # the store's pages read so far are not needed while merging
    try:
        if path == "memory":
            result = trainer.train(progress, forced=forced, engine=engine)
        else:
            result = config.result(trainer.run(limit, config.min_count, forced, progress))
    finally:
        if path == "disk":
            trainer.close()
    if merges_so_far and not store.readonly:
        save_checkpoint()
    return tokenizer_from_result(result, settings["pretokenizer"], config.tie_break), result


def _scratch_dir(store: Store) -> str:
    """Where the disk path's sequence table goes: beside the store, or in the temporary
    directory ($TMPDIR) when the store cannot be written here."""
    if store.readonly:
        import tempfile

        return tempfile.mkdtemp(prefix="bpe-stream-train-scratch-")
    return os.path.join(store.path, "train-scratch")


def _fastbpe_available() -> bool:
    from .trainer import _fastbpe

    return _fastbpe is not None


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
