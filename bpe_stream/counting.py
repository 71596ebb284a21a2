"""Counting: bytes in, pretoken counts into the store, in bounded memory.

The counting unit is :class:`DocumentCounter`: it takes the text of one source in chunks
of any size and adds its pretokens to an in-memory counter, holding back only what a
later chunk could still change (see ``pretokenize.StreamSplitter``).  The pipeline
(:func:`count_sources`) runs it over files and stdin and flushes the counter to LMDB
whenever the memory budget is reached.  Each flush is one transaction that carries the
counts, the totals and each file's progress (the byte offset its counts reach), so a
killed run leaves a store in which every batch is committed whole or not at all, and a
rerun resumes each file where its committed counts end.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable, Iterable, List, Optional

from .pretokenize import Pretokenizer, SpecialSplitter, StreamSplitter
from .reader import CHUNK_BYTES, Source, decode_chunks, to_bytes
from .store import Store

# Bytes one counter entry costs in CPython (a str key, a dict slot, an int) beyond its
# characters; measured with tracemalloc on English text, rounded up.
COUNTER_ENTRY_BYTES = 160
DEFAULT_MAX_MEMORY = 1 << 30


def make_settings(pretokenizer: str = "gpt2", special_tokens: Iterable[str] = (), end_of_word: Optional[str] = None) -> dict:
    """The counting settings recorded in a store (and checked on every later run)."""
    pre = Pretokenizer.from_name(pretokenizer)
    specials = list(dict.fromkeys(special_tokens))
    SpecialSplitter(specials)  # validates
    return {"pretokenizer": pre.name, "pattern": pre.pattern, "special_tokens": specials, "end_of_word": end_of_word}


class DocumentCounter:
    """Counts the pretokens of one document fed in chunks into ``counter``."""

    def __init__(self, settings: dict, counter: Counter):
        self.splitter = StreamSplitter(
            Pretokenizer.from_name(settings["pretokenizer"]), SpecialSplitter(settings["special_tokens"])
        )
        self.counter = counter
        self.pretokens = 0
        self.specials = 0

    def feed(self, text: str, final: bool = False) -> None:
        items = self.splitter.feed(text, final=final)
        self._take(items)

    def _take(self, items) -> None:
        counter = self.counter
        for kind, value in items:
            if kind == "pretokens":
                counter.update(value)
                self.pretokens += len(value)
            else:
                self.specials += 1

    def held_bytes(self) -> int:
        """Bytes of input fed but not yet counted (their pretokens may still change)."""
        s = self.splitter
        return len(to_bytes("".join(s._run) + s._pending)) if s.held_chars else 0


def count_text(text: str, settings: dict) -> Counter:
    """The pretoken counts of one document, as ``str`` keys (the reference for tests)."""
    counter: Counter = Counter()
    doc = DocumentCounter(settings, counter)
    doc.feed(text, final=True)
    return counter


@dataclass
class CountSummary:
    bytes: int = 0
    documents: int = 0
    pretokens: int = 0
    new_unique: int = 0
    seconds: float = 0.0
    skipped: List[str] = field(default_factory=list)
    stdin_partial: bool = False

    @property
    def mb_per_s(self) -> float:
        return self.bytes / 1e6 / self.seconds if self.seconds > 0 else 0.0

    def line(self) -> str:
        return (
            f"counted {self.bytes:,} bytes, {self.documents:,} documents, {self.pretokens:,} pretokens, "
            f"{self.new_unique:,} new unique pretokens in {self.seconds:.2f} s ({self.mb_per_s:.1f} MB/s)"
        )


class _Batch:
    """What has been counted since the last flush."""

    def __init__(self):
        self.counter: Counter = Counter()
        self.totals = {"bytes": 0, "documents": 0, "pretokens": 0, "specials": 0}
        self.sources = {}

    def estimated_bytes(self) -> int:
        return len(self.counter) * COUNTER_ENTRY_BYTES


def count_sources(
    store: Store,
    sources: List[Source],
    settings: dict,
    *,
    max_memory: int = DEFAULT_MAX_MEMORY,
    recount: bool = False,
    strict_utf8: bool = False,
    chunk_bytes: int = CHUNK_BYTES,
    on_bytes: Callable[[int], None] = lambda n: None,
    on_message: Callable[[str], None] = lambda m: None,
) -> CountSummary:
    """Counts ``sources`` into ``store`` (whose settings must equal ``settings``)."""
    store.ensure_settings(settings)
    summary = CountSummary()
    started = time.monotonic()
    batch = _Batch()
    # Half the budget for the counter: the flush sorts its keys and encodes them.
    flush_at = max(1 << 20, max_memory // 2)

    def flush():
        nonlocal batch
        current = batch

        def txn_fn(txn):
            for key, record in current.sources.items():
                store.put_source(txn, key, record)
            new = store.add_counts(txn, {to_bytes(k): v for k, v in current.counter.items()})
            delta = dict(current.totals, unique=new)
            store.bump_totals(txn, delta)
            return new

        if current.counter or current.sources or any(current.totals.values()):
            summary.new_unique += store.write(txn_fn)
        for key in ("bytes", "documents", "pretokens"):
            setattr(summary, key, getattr(summary, key) + current.totals[key])
        batch = _Batch()

    for source in sources:
        offset = 0
        if not source.is_stdin:
            with store.reader() as txn:
                record = store.source(txn, source.key)
            same = record is not None and record.get("size") == source.size and record.get("mtime_ns") == source.mtime_ns
            if same and record.get("done") and not recount:
                summary.skipped.append(source.name)
                on_message(f"skipped {source.name}: already counted (use --recount to count it again)")
                continue
            if same and not record.get("done") and not recount:
                offset = record.get("offset", 0)
                if offset:
                    on_message(f"resuming {source.name} at byte {offset:,}")
        counter = DocumentCounter(settings, batch.counter)
        stream = source.open(offset)
        committed = offset  # bytes of this source whose counts are in the batch or the store
        try:
            for text, read, held, final in decode_chunks(stream, chunk_bytes, strict_utf8, start_offset=offset):
                counter.feed(text, final=final)
                position = offset + read - held - counter.held_bytes()
                batch.totals["bytes"] += position - committed
                batch.totals["pretokens"] += counter.pretokens
                batch.totals["specials"] += counter.specials
                batch.totals["documents"] += counter.specials
                counter.pretokens = counter.specials = 0
                on_bytes(position - committed)
                committed = position
                if final:
                    break
                if batch.estimated_bytes() >= flush_at:
                    if not source.is_stdin:
                        batch.sources[source.key] = dict(source.identity(), offset=committed, done=False)
                    flush()
                    counter.counter = batch.counter
        finally:
            if not source.is_stdin:
                stream.close()
        batch.totals["documents"] += 1
        if not source.is_stdin:
            batch.sources[source.key] = dict(source.identity(), offset=committed, done=True)
    flush()
    summary.seconds = time.monotonic() - started
    return summary
