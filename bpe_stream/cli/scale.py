"""The scaling-out commands: ``export-counts``, ``import-counts`` and ``merge-stores``.

They parse and report; the work is :mod:`bpe_stream.store.merge`'s.  The functions are
registered on the app in :mod:`bpe_stream.cli.commands` (every command registers there), and import
the store only when they run, so loading this module loads no LMDB.
"""

from __future__ import annotations

from typing import List, Optional

import typer

from .common import QuietOpt, StoreOpt, parse_size, say, store_path, user_errors

DEFAULT_BUDGET = "256M"  # store_merge.DEFAULT_BUDGET, as --max-memory says it
BudgetOpt = typer.Option(DEFAULT_BUDGET, "--max-memory", help="Counts held before a write to the store.")


def export_counts_cmd(
    output: str = typer.Option(..., "--output", "-o", help="Counts file to write ('-' is stdout; .gz compresses)."),
    store: Optional[str] = StoreOpt,
    quiet: bool = QuietOpt,
):
    """Write the store's pretoken counts in the interchange format (JSON header, then escaped TSV)."""
    from ..store.lmdb_store import Store
    from ..store.merge import export_counts

    with user_errors():
        with Store.open(store_path(store), readonly=True) as st:
            lines, total = export_counts(st, output)
        say(quiet, f"exported {lines:,} pretokens ({total:,} occurrences) to {'stdout' if output == '-' else output}")


def import_counts_cmd(
    paths: List[str] = typer.Argument(..., help="Counts files (the format of export-counts; .gz is fine)."),
    store: Optional[str] = StoreOpt,
    max_memory: str = BudgetOpt,
    again: bool = typer.Option(False, "--again", help="Import files that were imported before once more."),
    quiet: bool = QuietOpt,
):
    """Add counts made elsewhere (Spark, another machine, ...) to the store; settings must match."""
    from ..store.lmdb_store import Store
    from ..store.merge import check_files, import_checked

    budget = parse_size(max_memory)
    with user_errors():
        checked = check_files(paths)  # before the store is created or touched
        with Store.open(store_path(store), create=True) as st:
            s = import_checked(st, checked, max_memory=budget, again=again, on_message=lambda m: say(quiet, m))
        skipped = f"; skipped {s['skipped']:,}" if s["skipped"] else ""
        say(quiet, f"imported {s['files']:,} file(s), {s['lines']:,} count lines, "
                   f"{s['new_unique']:,} new unique pretokens{skipped}")


def merge_stores_cmd(
    sources: List[str] = typer.Argument(..., help="Stores to add into --store (counted with the same settings)."),
    store: Optional[str] = StoreOpt,
    max_memory: str = BudgetOpt,
    again: bool = typer.Option(False, "--again", help="Merge stores that were merged before once more."),
    quiet: bool = QuietOpt,
):
    """Add up stores counted separately (e.g. on different machines) into --store."""
    from ..store.merge import merge_stores

    budget = parse_size(max_memory)
    with user_errors():
        dest_path = store_path(store)
        merged, new = merge_stores(dest_path, sources, max_memory=budget, again=again,
                                   on_message=lambda m: say(quiet, m))
        say(quiet, f"merged {merged:,} store(s) into {dest_path}; {new:,} new unique pretokens")
