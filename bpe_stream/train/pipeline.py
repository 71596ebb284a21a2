"""The library's front doors: train from a store or a file, returning a ``Tokenizer``.

Training from a store is two steps.  :func:`plan_training` decides everything from the
store and the options without side effects -- the effective settings, the fingerprint of
the run, what to resume or continue (the forced prefix), the path (memory or disk) and
why -- into a :class:`TrainPlan`; then the words go into the plan's engine and the
training driver (``train_driver.drive``) runs it, checkpointing into the store.
:func:`train_from_store` does both, in the numbered steps it reads as.  The CLI calls it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from typing import Callable, Dict, Iterable, List, Optional, Sequence, Tuple, Union

import lmdb

from ..count.counting import DocumentCounter, count_range, make_settings, merge_counts
from .estimate import (DISK_BASE, MODEL_SPREAD, default_budget, estimate_disk_train_memory, estimate_scratch_bytes, estimate_train_memory,
                       estimate_disk_tables, estimate_train_seconds, scratch_quota, scratch_run_quota)
from .extend import Extension
from .memory import _fastbpe, memory_engine
from .engine import MergeEngine, WordArrays
from .disk import DiskEngine
from ..store.lmdb_store import Store, StoreError
from ..store.checkpoint import Checkpointer, read_checkpoint, write_checkpoint  # noqa: F401  (also imported from here)
from ..encode.tokenizer import Tokenizer, check_pretokenizer, text_list
from .driver import CHECKPOINT_EVERY, CHECKPOINT_SECONDS, Checkpoints, ProgressFn, drive
from .trainer import TrainConfig, TrainError, Trainer, TrainResult


def tokenizer_from_result(result: TrainResult, pretokenizer: str, tie_break: str,
                          max_token_bytes: Optional[int] = None) -> Tokenizer:
    first = 256 + len(result.symbols)
    merges = [(left, right, first + r) for r, (left, right) in enumerate(result.merges)]
    symbols = [(256 + i, role, text) for i, (role, text) in enumerate(result.symbols)]
    return Tokenizer(result.vocab, merges, symbols, pretokenizer=pretokenizer, tie_break=tie_break,
                     max_token_bytes=max_token_bytes)


def _fingerprint(settings: dict, totals: dict, config: TrainConfig, base: Optional[str] = None) -> str:
    """What a checkpoint's merges depend on: the counts (through the store's totals), the
    settings that change merges or ids -- not the vocabulary size, so a resumed run may go
    further -- and ``base``, the rules digest of the tokenizer an extension starts from."""
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
    if base is not None:  # (absent otherwise: the checkpoints of runs from scratch stay valid)
        rules["base"] = base
    return hashlib.sha256(json.dumps(rules, sort_keys=True).encode("utf-8")).hexdigest()


def _forced_from_tokenizer(tok: Tokenizer, config: TrainConfig, settings: dict) -> Optional[List[Tuple[int, int]]]:
    """The merges of ``tok`` to continue from when a store of these settings could have
    trained it (its symbols and ids in this run's order); None when not (an extension)."""
    expected = [(256 + i, role, text) for i, (role, text) in enumerate(config.base_symbols())]
    if tok.pretokenizer.name != settings["pretokenizer"] or list(tok.symbols) != expected:
        return None
    if tok.max_token_bytes != settings.get("max_token_bytes"):
        return None
    if any(tok.byte_ids[b] != b for b in range(256)):
        return None
    first = 256 + len(expected)
    if any(new != first + r for r, (_, _, new) in enumerate(tok.merges)):
        return None
    if tok.tie_break is not None and tok.tie_break != config.tie_break:
        raise TrainError(f"--from: the tokenizer was trained with --tie-break {tok.tie_break}; use the same")
    return [(left, right) for left, right, _ in tok.merges]


@dataclass(frozen=True)
class TrainPlan:
    """What a training run from a store will do, decided before it does anything."""

    config: TrainConfig  # the effective settings: the store's special tokens first, its word-end marker
    settings: dict  # the store's counting settings (pretokenizer, ...)
    limit: int  # merges at most (forced ones included)
    fingerprint: str  # what a checkpoint of this run must carry to be resumed
    forced: Tuple[Tuple[int, int], ...]  # merges applied first: --from's, or the checkpoint's
    extension: Optional[Extension]  # the tokenizer of another store's --from that this run extends
    resumed: Optional[dict]  # the checkpoint this run extends, whole; None: its first save starts a new one
    path: str  # "memory" or "disk"
    reason: str  # why that path
    engine: str  # "c", "python" or "disk"
    budget: int  # bytes (--max-memory)
    unique: int  # distinct pretokens trained on ...
    symbols: int  # ... and their symbols
    memory_estimate: int  # bytes the in-memory engine needs
    disk_estimate: int  # bytes of anonymous memory the disk path needs (its tables are in a scratch file)
    scratch_quota: int  # bytes of the disk path's tables kept in anonymous memory while loading (the rest of the budget)
    scratch_run_quota: int  # ... and after, while merging
    messages: Tuple[str, ...]  # what the run says on stderr before it starts, in order
    scratch_bytes: int = 0  # bytes of disk the disk path's scratch file takes (0 in memory)
    scratch_dir: str = ""  # where it goes
    seconds: float = 0.0  # a rough estimate of the run's time


def plan_training(
    store: Store,
    config: TrainConfig,
    txn=None,
    *,
    engine: str = "auto",
    max_memory: Optional[int] = None,
    path: str = "auto",
    resume: bool = False,
    from_tokenizer: Optional[Tokenizer] = None,
) -> TrainPlan:
    """The plan of training on ``store`` as ``txn`` (a read transaction; None: a new one)
    sees it.  Reads only; raises ``StoreError`` / ``TrainError`` for what cannot work."""
    if txn is None:
        with store.reader() as t:
            return plan_training(store, config, t, engine=engine, max_memory=max_memory, path=path, resume=resume,
                                 from_tokenizer=from_tokenizer)
    # 1. The settings: the store's special tokens, then the config's extra ones; its marker.
    settings, config = _settings_of(store, txn, config)
    limit = config.max_merges()  # validates before reading the words
    budget = max_memory if max_memory is not None else default_budget()
    # 2. The words' figures, and the run's fingerprint.
    totals, unique, symbols = _word_figures(store, txn, config)
    fingerprint = _fingerprint(settings, totals, config)
    # 3. The forced prefix: the merges of --from, or those of the checkpoint (--resume).
    messages: List[str] = []
    forced, extension, limit, fingerprint = _from_prefix(store, txn, from_tokenizer, config, settings, totals, limit,
                                                         fingerprint, messages)
    resumed = None
    if resume:
        forced, resumed, said = _resume(read_checkpoint(store, txn), fingerprint, config, forced)
        messages.append(said)
    # 4. The path, the engine, and why.
    path, reason, engine, need = _choose_path(path, engine, unique, symbols, limit, budget)
    messages.append(
        f"training {'in memory' if path == 'memory' else 'with the sequence table on disk'} "
        f"({unique:,} distinct pretokens, {symbols:,} symbols; {reason})"
    )
    wide = config.end_of_word is not None or extension is not None
    disk_need = estimate_disk_train_memory(unique, symbols, wide)
    quota, run_quota = scratch_quota(budget, disk_need), scratch_run_quota(budget)
    scratch, where = 0, ""
    if path == "disk":
        scratch, where = _plan_scratch(store, budget, unique, symbols, disk_need, quota, run_quota, messages)
    if store.readonly:
        messages.append(f"the store at {store.path} cannot be written here: training without checkpoints "
                        "(--resume cannot continue this run)")
    return TrainPlan(
        config=config, settings=settings, limit=limit, fingerprint=fingerprint, forced=tuple(forced),
        extension=extension, resumed=resumed, path=path, reason=reason, engine=engine, budget=budget, unique=unique, symbols=symbols,
        memory_estimate=need, disk_estimate=disk_need, scratch_quota=quota, scratch_run_quota=run_quota,
        messages=tuple(messages), scratch_bytes=scratch, scratch_dir=where,
        seconds=estimate_train_seconds(symbols, max(0, limit - len(forced)), path == "disk", run_quota),
    )


def _settings_of(store: Store, txn, config: TrainConfig):
    """Step 1: the store's settings (failing when it has no counts yet) and ``config`` with the
    store's special tokens before its own extra ones, and the store's word-end marker."""
    info = store.info(txn)
    settings = info["settings"] if info else None
    if settings is None:
        raise StoreError(f"the store at {store.path} has no counts yet; run 'bpe-stream count' first")
    config = dataclasses.replace(
        config, special_tokens=list(dict.fromkeys(list(settings["special_tokens"]) + list(config.special_tokens))),
        end_of_word=settings.get("end_of_word"),
    )
    return settings, config


def _word_figures(store: Store, txn, config: TrainConfig):
    """Step 2: the store's totals, its distinct pretokens and the symbols they hold (one more
    per word with a word-end marker)."""
    totals = store.totals(txn)
    unique = store.unique_words(txn)
    unique_bytes = totals.get("unique_bytes")
    if unique_bytes is None or (unique and not unique_bytes):  # a store from before the total existed
        unique_bytes = sum(sum(map(len, pretokens)) for pretokens, _ in store.iter_word_blocks(txn))
    symbols = unique_bytes + (unique if config.end_of_word is not None else 0)
    return totals, unique, symbols


def _from_prefix(store: Store, txn, from_tokenizer: Optional[Tokenizer], config: TrainConfig, settings: dict,
                 totals: dict, limit: int, fingerprint: str, messages: List[str]):
    """Step 3 for ``--from``: ``(forced, extension, limit, fingerprint)``: the tokenizer's merges
    as the forced prefix when they are this store's kind, else an ``Extension`` of it (with its
    own limit and fingerprint); what it does goes to ``messages``."""
    forced: List[Tuple[int, int]] = []
    extension = None
    if from_tokenizer is not None:
        own = _forced_from_tokenizer(from_tokenizer, config, settings)
        if own is not None:
            forced = own
            if _trained_here(store, txn, fingerprint, own):
                messages.append(f"continuing from a tokenizer with {len(forced):,} merges")
            else:  # (the same settings, other counts: its merges first, then this store's)
                messages.append(f"extending a tokenizer with {len(forced):,} merges that this store's checkpoint does "
                                "not hold (trained on other counts): its merges first, its ids kept, then new merges")
        else:
            extension = Extension.of(from_tokenizer, settings, config)
            limit = extension.limit(config)
            fingerprint = _fingerprint(settings, totals, config, base=extension.digest)
            messages.append(extension.describe())
    return forced, extension, limit, fingerprint


def _plan_scratch(store: Store, budget: int, unique: int, symbols: int, disk_need: int, quota: int, run_quota: int,
                  messages: List[str]):
    """Step 4 for the disk path: ``(scratch bytes, where)`` of the scratch file, checked for
    room beside the store; what it costs (and a note when even that is over the budget) goes to
    ``messages``."""
    scratch = estimate_scratch_bytes(unique, symbols, run_quota)
    where = _check_scratch_room(store, scratch)
    messages.append(
        f"the tables go to a scratch file beside the store (about {scratch / 1e6:,.0f} MB of disk, mapped: page "
        f"cache, not part of the budget) except up to {run_quota / 1e6:,.0f} MB of them kept in "
        f"memory (the rest of the budget, the positions first: every merge rewrites them); in memory about "
        f"{_disk_peak(disk_need, quota, run_quota, unique, symbols) / 1e6:,.0f} MB"
    )
    if disk_need > budget:
        # Below the interpreter and the words on their way in nothing can go: say what
        # would hold, and train anyway (the same exact merges).
        messages.append(
            f"note: even on disk, training needs about {disk_need / 1e6:,.0f} MB of memory (the interpreter, the "
            f"words on their way to the scratch file), over the budget of {budget / 1e6:,.0f} MB; the smallest "
            f"budget that holds it is --max-memory {-(-disk_need // (1 << 20))}M (training goes on, exact)"
        )
    return scratch, where


def _disk_peak(disk_need: int, quota: int, run_quota: int, unique: int, symbols: int) -> int:
    """The disk path's anonymous peak: while loading, the interpreter and the words on their way
    in with what of the tables the load quota keeps; while merging, the base and the run quota
    (each at most the tables)."""
    tables = estimate_disk_tables(unique, symbols)
    return max(disk_need + min(quota, tables), DISK_BASE + min(run_quota, tables))


def _check_scratch_room(store: Store, scratch: int) -> str:
    """The directory the scratch file goes to (see _scratch_dir); a TrainError at once when its
    file system has not room for it, rather than a full disk hours into the run."""
    import shutil
    import tempfile

    where = store.path if os.access(store.path, os.W_OK) else tempfile.gettempdir()
    try:
        free = shutil.disk_usage(where).free
    except OSError:
        return where
    if scratch > free:
        raise TrainError(
            f"the disk path's scratch file needs about {scratch / 1e6:,.0f} MB in {where}, which has "
            f"{free / 1e6:,.0f} MB free; free disk space, give a larger --max-memory (more of the tables in "
            f"memory), or train on a smaller store (--min-word-count)"
        )
    return where


def plan_summary(plan: TrainPlan) -> dict:
    """What ``train --plan`` reports: the path and why, the words, the in-memory peak, the disk
    path's scratch and what of it the budget keeps in memory, the anonymous peak of the path
    taken, and a rough time."""
    disk = plan.path == "disk"
    peak = (_disk_peak(plan.disk_estimate, plan.scratch_quota, plan.scratch_run_quota, plan.unique, plan.symbols)
            if disk else plan.memory_estimate)
    return {
        "path": plan.path, "reason": plan.reason, "budget_bytes": plan.budget,
        "distinct_pretokens": plan.unique, "symbols": plan.symbols,
        "merges": max(0, plan.limit - len(plan.forced)), "forced_merges": len(plan.forced),
        "memory_path_peak_bytes": plan.memory_estimate,
        "peak_anonymous_bytes": peak,
        "scratch_bytes": plan.scratch_bytes, "scratch_dir": plan.scratch_dir,
        "kept_in_memory_bytes": min(plan.scratch_run_quota, estimate_disk_tables(plan.unique, plan.symbols)) if disk else 0,
        "estimated_seconds": round(plan.seconds, 1),
    }


def _trained_here(store: Store, txn, fingerprint: str, merges: List[Tuple[int, int]]) -> bool:
    """Whether this store's checkpoint (of a run with these counts and settings) begins with
    ``merges``: the tokenizer of ``--from`` was trained here, and training goes on from it."""
    try:
        checkpoint = read_checkpoint(store, txn)
    except StoreError:
        return False
    if checkpoint is None or checkpoint.get("fingerprint") != fingerprint or len(checkpoint["merges"]) < len(merges):
        return False
    return [tuple(m[:2]) for m in checkpoint["merges"][:len(merges)]] == list(merges)


def _resume(checkpoint: Optional[dict], fingerprint: str, config: TrainConfig, forced: List[Tuple[int, int]]):
    """The forced prefix with the checkpoint's merges, the checkpoint extended (or None), and what to say."""
    if checkpoint is None or checkpoint.get("fingerprint") != fingerprint:
        return forced, None, "no checkpoint of this run to resume (the store or the settings changed); training from the start"
    # The checkpoint's merges stand only while their counts reach --min-count, which the
    # fingerprint leaves out (it only stops training earlier).
    kept = []
    for m in checkpoint["merges"]:
        if m[2] < max(1, config.min_count):
            break
        kept.append(m)
    saved = [tuple(m[:2]) for m in kept]
    if forced and saved[: len(forced)] != forced[: len(saved)]:
        raise TrainError("--resume and --from disagree: the checkpoint holds other merges; drop one of them")
    # Cut short, the checkpoint is not this run's start: the run's first save replaces it
    # (appending to its chunks would leave more merges in them than the head counts).
    resumed = checkpoint if len(kept) == len(checkpoint["merges"]) else None
    return (saved if len(saved) > len(forced) else forced), resumed, f"resuming after {len(saved):,} checkpointed merges"


def _choose_path(path: str, engine: str, unique: int, symbols: int, merges: int,
                 budget: int) -> Tuple[str, str, str, int]:
    """(path, the reason for it, the engine, the in-memory estimate of ``merges`` merges)."""
    if engine not in ("auto", "c", "python"):
        raise TrainError(f"unknown engine {engine!r}")
    if engine == "c" and _fastbpe is None:
        raise TrainError("the C trainer is not built here; use engine='python'")
    memory = "python" if engine == "python" or _fastbpe is None else "c"
    need = estimate_train_memory(unique, symbols, memory, merges)
    if path == "auto":
        path = "memory" if need * MODEL_SPREAD <= budget or _fastbpe is None else "disk"
        reason = (f"estimated {need / 1e6:,.0f} MB, with a {MODEL_SPREAD - 1:.0%} margin, "
                  f"{'fits' if path == 'memory' else 'exceeds'} the budget of {budget / 1e6:,.0f} MB")
    else:
        reason = "as asked"
    if path not in ("memory", "disk"):
        raise TrainError(f"unknown training path {path!r}; use memory, disk or auto")
    if path == "disk" and _fastbpe is None:
        raise TrainError("the disk path needs the C extension; reinstall bpe-stream with a C compiler")
    return path, reason, (memory if path == "memory" else "disk"), need


def _scratch_dir(store: Store) -> str:
    """Where the disk path's scratch file goes: beside the store, or in the temporary
    directory ($TMPDIR) when the store cannot be written here."""
    if store.readonly:
        import tempfile

        return tempfile.mkdtemp(prefix="bpe-stream-train-scratch-")
    return os.path.join(store.path, "train-scratch")


def load_engine(store: Store, plan: TrainPlan, txn) -> MergeEngine:
    """The plan's engine with the store's words loaded, read in ``txn`` (the plan's)."""
    config = plan.config
    tokens, marker = config.base_tokens(), config.marker_id()
    min_count = max(1, config.min_word_count)
    if plan.extension is not None:  # the words as the tokenizer encodes them (marker included)
        tokens, marker = plan.extension.tokens, None
        words = plan.extension.word_arrays(store.iter_words(txn, min_count))
    else:
        words = WordArrays(marker)
        for pretokens, counts in store.iter_word_blocks(txn, min_count):
            words.add_columns(pretokens, counts)
    if plan.engine == "disk":
        engine = DiskEngine(tokens, marker, config.tie_break, _scratch_dir(store), plan.scratch_quota,
                            plan.scratch_run_quota)
    else:
        engine = memory_engine(plan.engine, tokens, marker, config.tie_break)
    try:
        engine.load(words)
    except BaseException:
        engine.close()
        raise
    return engine


def run_plan(
    store: Store,
    plan: TrainPlan,
    engine: MergeEngine,
    on_progress: Optional[ProgressFn] = None,
    *,
    checkpoint_every: int = CHECKPOINT_EVERY,
    checkpoint_seconds: float = CHECKPOINT_SECONDS,
    started: Optional[float] = None,
    on_message: Callable[[str], None] = lambda m: None,
) -> Tuple[Tokenizer, TrainResult]:
    """Runs the merges of ``plan`` on its loaded ``engine`` (closed after), checkpointing
    into ``store`` unless it is read-only, where it then keeps the run's training record
    (:mod:`.record`; ``started``: the run's ``time.monotonic()`` start, default now)."""
    started = time.monotonic() if started is None else started
    checkpoints = None
    if not store.readonly:
        saver = Checkpointer(store, plan.fingerprint, plan.resumed)
        checkpoints = Checkpoints(saver.save, every=checkpoint_every, seconds=checkpoint_seconds)
    scratch_peak = None
    try:
        done = drive(engine, plan.limit, plan.config.min_count, plan.forced, on_progress=on_progress,
                     checkpoints=checkpoints)
        if plan.path == "disk":
            scratch_peak = _scratch_peak(engine)
    finally:
        engine.close()
    if plan.extension is not None:
        tok, result = plan.extension.result(done, plan.config.tie_break)
    else:
        result = plan.config.result(done)
        settings = plan.settings
        tok = tokenizer_from_result(result, settings["pretokenizer"], plan.config.tie_break,
                                    settings.get("max_token_bytes"))
    if not store.readonly:
        from ..store.training_record import make_record, write_record

        given = min(len(plan.forced), len(done))  # (a limit below the forced prefix cuts it)
        record = make_record(plan, tok, len(done) - given, given, time.monotonic() - started, scratch_peak)
        try:
            write_record(store, record)
        except (StoreError, lmdb.Error, OSError) as exc:  # the tokenizer is made: a missing record is no failure
            on_message(f"note: the training record was not kept in {store.path}: {exc}")
    return tok, result


def _scratch_peak(engine: MergeEngine) -> Optional[int]:
    """The disk engine's scratch file at its largest, in bytes (None where it does not say)."""
    try:
        peak = engine.memory().get("peak_disk_bytes")
    except Exception:  # a figure for the record only: never worth failing a finished run
        return None
    return int(peak) if isinstance(peak, int) else None


def train_from_store(
    store: Store,
    config: TrainConfig,
    on_progress: Optional[ProgressFn] = None,
    engine: str = "auto",
    *,
    max_memory: Optional[int] = None,
    path: str = "auto",
    resume: bool = False,
    from_tokenizer: Optional[Tokenizer] = None,
    checkpoint_every: int = CHECKPOINT_EVERY,
    checkpoint_seconds: float = CHECKPOINT_SECONDS,
    on_message: Callable[[str], None] = lambda m: None,
) -> Tuple[Tokenizer, TrainResult]:
    """Trains on the counts in ``store``; its special tokens come first, then ``config``'s extra ones.

    ``path``: ``"memory"``, ``"disk"`` (the tables in a scratch file) or ``"auto"`` (memory when the
    estimate fits ``max_memory``).  Both give the same merges.  Every ``checkpoint_every``
    merges or ``checkpoint_seconds`` the merges so far are committed to the store, and
    ``resume`` continues from them; ``from_tokenizer`` continues a finished tokenizer.
    ``config`` is not changed (the plan holds the effective one).
    """
    started = time.monotonic()
    if not checkpoint_seconds >= 0:  # nan too
        raise TrainError(f"--checkpoint-seconds {checkpoint_seconds} is not a time; give seconds, 0 or more (inf: never)")
    with store.reader() as txn:  # the plan's figures and the words trained on: one committed state
        # 1. Plan: settings, fingerprint, forced prefix, path (no side effects).
        plan = plan_training(store, config, txn, engine=engine, max_memory=max_memory, path=path, resume=resume,
                             from_tokenizer=from_tokenizer)
        # 2. Say what will happen.
        for message in plan.messages:
            on_message(message)
        # 3. Load the words into the plan's engine.
        merger = load_engine(store, plan, txn)
    # 4. Drop the store's pages read so far: they are not needed while merging.
    try:
        store.remap()
    except BaseException:
        merger.close()
        raise
    # 5. Merge (forced prefix, then learned), checkpointing; the tokenizer.
    return run_plan(store, plan, merger, on_progress, checkpoint_every=checkpoint_every,
                    checkpoint_seconds=checkpoint_seconds, started=started, on_message=on_message)


def count_file(path, settings: dict) -> Counter:
    """Pretoken counts (bytes keys) of one file, counted in memory."""
    return count_range(os.fspath(path), 0, os.path.getsize(path), settings, bytes_keys=True).counter


def train_bpe(
    input_path: str | os.PathLike,
    vocab_size: int,
    special_tokens: Sequence[str] = (),
    *,
    pretokenizer: str = "gpt2",
    tie_break: str = "max-bytes",
    engine: str = "auto",
) -> Tuple[Dict[int, bytes], List[Tuple[bytes, bytes]]]:
    """CS336's ``train_bpe``: the vocabulary (id -> bytes) and the merges as byte pairs, in order.
    ``special_tokens``: a list of str (or of UTF-8 bytes)."""
    special_tokens = text_list(special_tokens, "special_tokens")
    if not isinstance(input_path, (str, os.PathLike)):
        raise TypeError(f"input_path takes a path (str or os.PathLike), not {type(input_path).__name__}")
    settings = make_settings(check_pretokenizer(pretokenizer), special_tokens)
    config = TrainConfig(vocab_size=vocab_size, special_tokens=list(special_tokens), tie_break=tie_break)
    trainer = Trainer(config)
    trainer.feed(count_file(input_path, settings).items())
    result = trainer.train(engine=engine)
    merges = [(result.vocab[a], result.vocab[b]) for a, b in result.merges]
    return result.vocab, merges


# Distinct pretokens gathered from texts before they go to the store in one batch.
TEXTS_BATCH_KEYS = 1 << 20


def count_texts(store: Store, texts: Iterable[str], settings: dict) -> int:
    """Counts ``texts`` into ``store`` (created with, or counted before with, ``settings``),
    each text a document of its own; returns how many texts there were."""
    store.check_settings(settings)
    n_texts = 0
    batch: Counter = Counter()
    totals = dict.fromkeys(("bytes", "documents", "pretokens", "specials"), 0)

    def flush():
        nonlocal batch
        if batch or any(totals.values()):
            store.add_batch(batch, {}, dict(totals), before=lambda txn: store.settings_in(txn, settings))
        batch = Counter()
        totals.update(dict.fromkeys(totals, 0))

    for text in texts:
        if not isinstance(text, str):
            raise TypeError(f"train_from_iterator takes texts (str), not {type(text).__name__}")
        doc = DocumentCounter(settings)
        doc.feed(text, final=True)
        partial = doc.partial.to_bytes_keys()
        merge_counts(batch, partial.counter)
        totals["bytes"] += len(text.encode("utf-8", "surrogateescape"))
        totals["pretokens"] += partial.pretokens
        totals["specials"] += partial.specials
        totals["documents"] += partial.specials + 1  # as ``count`` has it: each special token ends one
        n_texts += 1
        if len(batch) >= TEXTS_BATCH_KEYS:
            flush()
    flush()
    return n_texts


def train_from_iterator(
    texts: Iterable[str],
    vocab_size: Optional[int] = None,
    special_tokens: Sequence[str] = (),
    *,
    num_merges: Optional[int] = None,
    store: Union[None, str, os.PathLike, Store] = None,
    pretokenizer: str = "gpt2",
    end_of_word: Optional[str] = None,
    tie_break: str = "max-bytes",
    min_count: int = 1,
    from_tokenizer: Optional[Tokenizer] = None,
    engine: str = "auto",
) -> Tokenizer:
    """Trains on an iterable of texts (each one document), as HF's and rustbpe's
    ``train_from_iterator``: the texts are counted into ``store`` (a path -- created, or
    counted before with the same settings: runs add up -- or an open ``Store``; None: a
    temporary one, removed after), then :func:`train_from_store` runs.  ``from_tokenizer``
    extends that tokenizer (see the README's train section): a ``Tokenizer`` or the path of one.
    ``special_tokens``: a list of str (or of UTF-8 bytes)."""
    if isinstance(texts, (str, bytes, bytearray)):
        raise TypeError(f"texts takes an iterable of texts, not one {type(texts).__name__}: pass [text]")
    special_tokens = text_list(special_tokens, "special_tokens")
    if isinstance(from_tokenizer, (str, os.PathLike)):
        from_tokenizer = Tokenizer.load(from_tokenizer)
    elif from_tokenizer is not None and not isinstance(from_tokenizer, Tokenizer):
        raise TypeError(f"from_tokenizer takes a Tokenizer or a path, not {type(from_tokenizer).__name__}")
    settings = make_settings(check_pretokenizer(pretokenizer), special_tokens, end_of_word)
    config = TrainConfig(vocab_size=vocab_size, num_merges=num_merges, tie_break=tie_break, min_count=min_count)
    config.max_merges()  # bad options fail before the texts are read
    if isinstance(store, Store):
        count_texts(store, texts, settings)
        return train_from_store(store, config, engine=engine, from_tokenizer=from_tokenizer)[0]
    with tempfile.TemporaryDirectory(prefix="bpe-stream-") as scratch:
        path = os.fspath(store) if store is not None else os.path.join(scratch, "store")
        with Store.open(path, create=True) as st:
            return train_from_iterator(texts, special_tokens=special_tokens, store=st, pretokenizer=pretokenizer,
                                       end_of_word=end_of_word, vocab_size=vocab_size, num_merges=num_merges,
                                       tie_break=tie_break, min_count=min_count, from_tokenizer=from_tokenizer,
                                       engine=engine)
