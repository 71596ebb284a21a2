"""Adding up counts made elsewhere: counts files (``import-counts``), other stores (``merge-stores``),
and writing a store's counts out (``export-counts``).

Counts made elsewhere -- another machine's store, Spark, any engine that writes the interchange
format of :mod:`bpe_stream.store.counts_file` -- are added into a store in bounded batches
(:class:`bpe_stream.store.batches.BatchAdder`).  Each batch is one write transaction that also
records how far its input got, in the store's ``sources`` table under ``import:PATH`` or
``merge:PATH``; so a killed import or merge resumes where it stopped, a finished one is skipped
when run again (``again=True`` adds it once more), and the store keeps a record of what it was
made from.  Totals stay consistent: unique pretokens (and their bytes) grow with each batch;
bytes, documents, special tokens and pretokens are added in the transaction that finishes an
input.  Stores that counted the same input are refused before anything is added
(:func:`check_counted_once`).
"""

from __future__ import annotations

import itertools
import os
from typing import Callable, Dict, List, Optional, Tuple

from .counts_file import CountsFormatError, CountsInfo, check_counts, iter_counts, write_counts
from .lmdb_store import BLAKE2B_KIND, Store, StoreError, settings_difference
from .batches import BatchAdder, check_room

DEFAULT_BUDGET = 256 << 20  # counts held before a write to the store (the CLI's --max-memory 256M)
_TOTALS = ("bytes", "documents", "specials", "pretokens")


def _settings_mismatch(a: dict, b: dict) -> Optional[str]:
    diff = settings_difference(a, b)
    return f"{diff[0]}={diff[1]!r} vs {diff[2]!r}" if diff else None


def export_counts(store: Store, output: str) -> tuple:
    """Writes every pretoken count of ``store`` to ``output``; returns ``(lines, sum)``."""
    with store.reader() as txn:
        info = store.info(txn)
        if info is None:
            raise StoreError(f"the store at {store.path} is empty; run 'bpe-stream count' first")
        totals = info["totals"]
        try:
            return write_counts(output, info["settings"], _within_total(store.iter_words(txn), totals),
                                totals, store.unique_words(txn))
        except RuntimeError as exc:  # fewer lines than entries: a count of 0, which is never stored
            raise StoreError(f"the store at {store.path} is damaged ({exc}); restore it from a copy") from None


def _within_total(rows, totals: dict):
    """``rows``, then RuntimeError if their counts add up to more than the store's pretokens
    total (every count is of pretokens it counted: a damaged totals record, which no counts
    file may carry, since import refuses such a header)."""
    total, limit = 0, totals.get("pretokens")
    for row in rows:
        total += row[1]
        yield row
    if isinstance(limit, int) and total > limit:
        raise RuntimeError(f"its words add up to {total:,} pretokens, its totals say {limit:,}")


def import_counts(store: Store, paths: List[str], *, max_memory: int = DEFAULT_BUDGET, again: bool = False,
                  on_message: Callable[[str], None] = lambda m: None) -> dict:
    """Adds the counts files ``paths`` to ``store`` (created with their settings if new).  Every
    file is checked whole first, so a malformed file changes nothing."""
    return import_checked(store, check_files(paths), max_memory=max_memory, again=again, on_message=on_message)


def check_files(paths: List[str]) -> List[CountsInfo]:
    """Checks counts files whole (format, and the same settings in all)."""
    checked = [check_counts(os.fspath(p)) for p in paths]
    for c in checked[1:]:
        diff = _settings_mismatch(checked[0].settings, c.settings)
        if diff:
            raise CountsFormatError(
                f"{c.path} was counted with other settings than {checked[0].path} ({diff}); "
                "import them into separate stores"
            )
    return checked


def import_checked(store: Store, checked: List[CountsInfo], *, max_memory: int = DEFAULT_BUDGET,
                   again: bool = False, on_message: Callable[[str], None] = lambda m: None) -> dict:
    """Adds counts files checked by :func:`check_files` to ``store``."""
    summary = {"files": 0, "skipped": 0, "lines": 0, "new_unique": 0}
    if not checked:
        return summary
    store.ensure_settings(checked[0].settings)
    for c in checked:
        st = os.stat(c.path)
        key = b"import:" + os.fsencode(os.path.realpath(c.path))
        identity = {"kind": "import", "size": st.st_size, "mtime_ns": st.st_mtime_ns}
        with store.reader() as txn:
            record = store.source(txn, key)
        start = None
        if record is not None and not again and all(record.get(k) == v for k, v in identity.items()):
            if record.get("done"):
                on_message(f"skipped {c.path}: already imported into this store (use --again to add it once more)")
                summary["skipped"] += 1
                continue
            start = record.get("offset")
            on_message(f"resuming {c.path} at line {record.get('lines', 0) + 2:,}")
        lines = record.get("lines", 0) if start is not None else 0
        check_room(store, c.totals["pretokens"], c.path)
        adder = BatchAdder(store, key, dict(identity, header=c.header), max_memory)
        offset = start or c.body_offset
        for pretoken, n, _, offset in iter_counts(c.path, start):
            lines += 1
            if adder.add(pretoken, n):
                adder.flush({"offset": offset, "lines": lines})
        adder.flush({"offset": offset, "lines": lines}, totals=c.totals, done=True)
        summary["files"] += 1
        summary["lines"] += c.lines
        summary["new_unique"] += adder.new
    return summary


def _merge_key(src_path: str) -> bytes:
    return b"merge:" + os.fsencode(os.path.realpath(src_path))


def _what(key: bytes) -> str:
    """A source record's key as the user knows it."""
    for prefix, what in ((b"import:", "the counts file "), (b"merge:", "the store ")):
        if key.startswith(prefix):
            return what + os.fsdecode(key[len(prefix):])
    return os.fsdecode(key)


def _different_files(a: dict, b: dict) -> bool:
    """Two records of one path that are different files by their first bytes (the same path on
    two machines): their heads -- digests of as many first bytes, of one kind -- differ."""
    heads = [r.get("head") if isinstance(r, dict) else None for r in (a, b)]
    kinds = {r.get("hash", BLAKE2B_KIND) for r in (a, b) if isinstance(r, dict)}  # (digests of one kind compare)
    return (len(kinds) == 1 and all(isinstance(h, list) and len(h) == 2 for h in heads) and heads[0][0] == heads[1][0]
            and heads[0][1] != heads[1][1])


def check_counted_once(sources: List[Tuple[str, Store]], dest: Optional[Store] = None) -> None:
    """Refuses (StoreError) to add up stores that hold the counts of one input twice: a file
    counted into two of them (the same path, unless its first bytes tell different files
    apart), a counts file imported or a store merged into two of them, or one of the sources
    merged into another.  A destination's records count as one more store, but for the
    sources it has begun merging already (a merge cut off, now resumed: it holds their copies)."""
    seen: Dict[bytes, Tuple[str, dict]] = {}
    started = set()
    if dest is not None:
        with dest.reader() as txn:
            for key, record in dest.iter_sources(txn, digests=True):
                seen[key] = (dest.path, record)
                if key.startswith(b"merge:"):
                    started.add(key)
    merge_keys = {_merge_key(name): name for name, _ in sources}
    for name, store in sources:
        resumed = _merge_key(name) in started
        with store.reader() as txn:
            for key, record in store.iter_sources(txn, digests=True):
                if merge_keys.get(key, name) != name:
                    raise StoreError(f"{merge_keys[key]} was merged into {name} before; adding up both would count "
                                     f"it twice: leave {merge_keys[key]} out")
                earlier = seen.setdefault(key, (name, record))
                if earlier[0] == name or _different_files(earlier[1], record):
                    continue
                if resumed and dest is not None and earlier[0] == dest.path:
                    continue
                raise StoreError(
                    f"{_what(key)} was counted into both {earlier[0]} and {name}; adding them up would count it "
                    "twice: merge only one of them (or pass --again to add everything all the same)"
                )


def merge_store(dest: Store, src_path: str, *, max_memory: int = DEFAULT_BUDGET, again: bool = False,
                on_message: Callable[[str], None] = lambda m: None) -> Optional[int]:
    """Adds the store at ``src_path`` into ``dest`` (same settings).  Returns the new unique
    pretokens, or None when it was merged before.  Unless ``again``, refuses (StoreError) when
    both stores counted the same input (:func:`check_counted_once`)."""
    key = _merge_key(src_path)
    with Store.open(src_path, readonly=True) as src, src.reader() as txn:
        if not again:
            check_counted_once([(src_path, src)], dest)
        info = src.info(txn)
        if info is None:
            raise StoreError(f"the store at {src_path} is empty; nothing to merge")
        identity = {"kind": "merge", "totals": dict(info["totals"]), "unique": src.unique_words(txn)}
        with dest.reader() as dtxn:
            record = dest.source(dtxn, key)
        skip = 0
        if record is not None and not again:
            same = record.get("totals") == identity["totals"] and record.get("unique") == identity["unique"]
            if not same:
                raise StoreError(
                    f"{src_path} was {'merged' if record.get('done') else 'partly merged'} into {dest.path} and has "
                    "changed since; merging it again would count its old pretokens twice: count the new input into "
                    "a fresh store and merge that, or pass --again to add it whole anyway"
                )
            if record.get("done"):
                on_message(f"skipped {src_path}: already merged into this store (use --again to add it once more)")
                return None
            skip = record.get("entries", 0)
            on_message(f"resuming {src_path} after {skip:,} pretokens")
        check_room(dest, int(info["totals"].get("pretokens", 0)), src_path)
        adder = BatchAdder(dest, key, identity, max_memory)
        done = skip
        for word, n in itertools.islice(src.iter_words(txn), skip, None):
            done += 1
            if adder.add(word, n):
                adder.flush({"entries": done})
        # What the source store was made from comes along (files counted, imports, merges), so a
        # later count or merge of the same input into ``dest`` is skipped rather than doubled.
        batch, kept = [], [0]
        for skey, srecord in src.iter_sources(txn, digests=True):
            batch.append((skey, srecord))
            if len(batch) >= 10000:
                _copy_sources(dest, batch, kept)
                batch = []
        _copy_sources(dest, batch, kept)
        if kept[0]:
            on_message(f"note: {kept[0]:,} file(s) of {src_path} share a path with another file counted into "
                       f"{dest.path} (their first bytes differ); the merged store keeps the record of the latter")
        totals = {k: int(info["totals"].get(k, 0)) for k in _TOTALS}
        adder.flush({"entries": done}, totals=totals, done=True)
        return adder.new


def _copy_sources(dest: Store, records, kept: list) -> None:
    if not records:
        return

    def txn_fn(txn):
        kept_here = 0
        for key, record in records:
            mine = dest.source(txn, key, digests=True)
            if mine is None:
                dest.put_source(txn, key, record)
            elif mine != record:  # (equal: copied by this merge before it was cut off)
                kept_here += 1
        return kept_here

    kept[0] += dest.write(txn_fn)


def check_merge(dest_path: str, sources: List[str]) -> None:
    """:func:`check_counted_once` on the destination (if it exists) and all the sources."""
    from contextlib import ExitStack

    data = os.path.join(dest_path, "data.mdb")
    with ExitStack() as stack:
        dest = None
        if os.path.isfile(data) and os.path.getsize(data):
            dest = stack.enter_context(Store.open(dest_path, readonly=True))
        check_counted_once([(p, stack.enter_context(Store.open(p, readonly=True))) for p in sources], dest)


def merge_stores(dest_path: str, sources: List[str], *, max_memory: int = DEFAULT_BUDGET, again: bool = False,
                 on_message: Callable[[str], None] = lambda m: None) -> Tuple[int, int]:
    """Adds the stores ``sources`` into the store at ``dest_path`` (created if new); returns
    ``(stores merged, new unique pretokens)``.  The sources must have the same settings, and
    (unless ``again``) no input counted twice (:func:`check_merge`), both checked before
    anything is added or the destination created."""
    real_dest = os.path.realpath(dest_path)
    settings = None
    for src_path in sources:
        if os.path.realpath(src_path) == real_dest:
            raise StoreError(f"{src_path} is the destination store itself; give another --store")
        with Store.open(src_path, readonly=True) as src:
            s = src.settings()
        if s is None:
            raise StoreError(f"the store at {src_path} is empty; nothing to merge")
        if settings is None:
            settings, first = s, src_path
        elif _settings_mismatch(settings, s):
            raise StoreError(
                f"{src_path} was counted with other settings than {first} ({_settings_mismatch(settings, s)}); "
                "only stores with the same settings add up"
            )
    if not again:  # before anything is added (or the destination created)
        check_merge(dest_path, sources)
    merged = new = 0
    with Store.open(dest_path, create=True) as dest:
        dest.ensure_settings(settings)
        for src_path in sources:
            n = merge_store(dest, src_path, max_memory=max_memory, again=again, on_message=on_message)
            if n is not None:
                merged += 1
                new += n
    return merged, new
