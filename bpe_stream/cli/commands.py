"""The ``bpe-stream`` command line (typer): parse, call the library, report.

Every command registers here, on :data:`app` (the scaling-out ones are defined in
:mod:`bpe_stream.cli.scale`).  Data goes to stdout; progress (:mod:`bpe_stream.progress`: a
bar on a terminal, log lines when stderr is a file, nothing with ``--quiet``), summaries and
errors go to stderr.  Every error a user can fix (:class:`bpe_stream.errors.UserError`)
becomes one ``Error: ...`` line and exit status 1; bad usage is typer's exit status 2; a bug
is a traceback and exit status 70 (:func:`bpe_stream.cli.common.user_errors`).
"""

from __future__ import annotations

import copy
import gc
import json
import sys
import time
from contextlib import contextmanager
from typing import List, Optional

import typer

from .. import __version__
from . import scale as cli_scale
from ..atomic import atomic_write, check_output, stdout_binary
from .common import (EveryOpt, ProgressOpt, QuietOpt, StoreOpt, TokOpt, fail, parse_size, progress_bar, say,
                         store_path, user_errors)
from ..train.estimate import default_budget
from ..progress import CountingReader, summary_line
from ..inputs.reader import STDIN, Source
from ..train.driver import CHECKPOINT_EVERY, CHECKPOINT_SECONDS

# The modules that open a store (and so LMDB), train or count, and those that load a
# tokenizer, are imported by the commands that use them: each command starts without the
# others' imports (encode and decode never load LMDB; count never loads a tokenizer).
app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Train byte-level BPE tokenizers on corpora larger than RAM; encode and decode in streams.",
    context_settings={"help_option_names": ["-h", "--help"]},
)



def _check_input_format(value: str) -> str:
    from ..inputs.documents import INPUT_FORMATS

    if value not in INPUT_FORMATS:  # refused before any work
        raise typer.BadParameter(f"must be one of {', '.join(INPUT_FORMATS)}, not {value!r}")
    return value


InputFormatOpt = typer.Option(
    "auto", "--input-format", callback=_check_input_format,
    help="auto (by extension: .jsonl/.json, .parquet, else text; .gz/.zst/.xz/.bz2 decompressed), text, jsonl or parquet.",
)
FieldOpt = typer.Option("text", "--field", help="JSON Lines: the field of each record that holds its document.")
ColumnOpt = typer.Option("text", "--column", help="Parquet: the column that holds each row's document.")
SkipBadOpt = typer.Option(False, "--skip-bad-records", help="Skip JSON Lines/Parquet records without a text (counted in the summary) instead of stopping.")


@contextmanager
def _interrupted(store, before: dict, sources):
    """Ctrl-C during count: say what the store kept (stdin cannot be replayed), exit 130."""
    try:
        yield
    except KeyboardInterrupt:
        try:
            kept = f"the {store.totals().get('bytes', 0) - before.get('bytes', 0):,} bytes"
        except Exception:  # noqa: BLE001 - Ctrl-C is what to say, whatever reading the store says
            kept = "what was"
        stdin = any(s.is_stdin for s in sources)
        typer.echo(
            f"interrupted: the store keeps {kept} committed by this run"
            + ("; stdin cannot be replayed, so feed only what follows them" if stdin else
               "; run the same command again to resume each file where it stopped"),
            err=True,
        )
        raise typer.Exit(130) from None


def version_callback(value: bool):
    if value:
        typer.echo(f"bpe-stream {__version__}")
        raise typer.Exit()


@app.callback()
def root(
    version: bool = typer.Option(False, "--version", callback=version_callback, is_eager=True, help="Print the version."),
):
    """bpe-stream: count -> train -> encode/decode."""


# -- count -------------------------------------------------------------------------
@app.command()
def count(
    paths: List[str] = typer.Argument(None, help="Files to count; none or '-' reads stdin."),
    store: Optional[str] = StoreOpt,
    special_token: List[str] = typer.Option(None, "--special-token", help="A special token (repeatable)."),
    pretokenizer: Optional[str] = typer.Option(
        None, "--pretokenizer", help="gpt2 (default), cl100k, o200k, whitespace, words, none or regex:PATTERN."
    ),
    end_of_word: Optional[str] = typer.Option(None, "--end-of-word", help="Word-end marker added to every pretoken."),
    max_token_bytes: Optional[int] = typer.Option(
        None, "--max-token-bytes", min=0,
        help="Cut pretokens longer than N bytes into pieces of at most N (never inside a character); 0: no cap. "
             "Recorded in the store \\[default: 65536 in a new store; none with --pretokenizer none]."),
    max_memory: Optional[str] = typer.Option(
        None, "--max-memory", help="Memory budget; counts are flushed to the store before it is reached \\[default: half the available memory]."
    ),
    workers: Optional[int] = typer.Option(None, "--workers", "-w", min=1, help="Processes \\[default: all cores]."),
    engine: str = typer.Option("local", "--engine", help="local (processes here), dask (a Dask cluster) or ray (Ray)."),
    scheduler: Optional[str] = typer.Option(None, "--scheduler", help="Dask scheduler address; none starts a LocalCluster."),
    address: Optional[str] = typer.Option(None, "--address", help="Ray cluster address (head:6379); none starts a local Ray."),
    recount: bool = typer.Option(False, "--recount", help="Count files again even if already counted."),
    strict_utf8: bool = typer.Option(False, "--strict-utf8", help="Stop at invalid UTF-8 instead of keeping it."),
    input_format: str = InputFormatOpt,
    field: str = FieldOpt,
    column: str = ColumnOpt,
    skip_bad_records: bool = SkipBadOpt,
    quiet: bool = QuietOpt,
    progress_every: Optional[float] = EveryOpt,
    progress: str = ProgressOpt,
):
    """Stream text into the word-frequency store; runs add up.

    .gz, .zst, .xz and .bz2 files are decompressed as they are read (stdin: by its first
    bytes); a killed count of one resumes by decompressing it again up to the committed offset
    of its uncompressed text.  .jsonl/.json files: each record's --field is one document;
    .parquet: each row's --column, by row groups."""
    from ..count.counting import count_sources, default_workers, make_runner, resolve_settings
    from ..inputs.documents import with_form
    from ..store.lmdb_store import Store

    budget = parse_size(max_memory) if max_memory else default_budget()
    with user_errors():
        # forms found (a .gz that is not gzip, a missing extra) before a store is made for them
        sources = [with_form(Source.from_arg(p), input_format, field, column) for p in (paths or [STDIN])]
        given = {"pretokenizer": pretokenizer, "special_tokens": special_token or None, "end_of_word": end_of_word,
                 "max_token_bytes": max_token_bytes}
        resolve_settings(given)  # bad settings are refused before a new store is created for them
        with _new_store_removed_on_error(store_path(store)), Store.open(store_path(store), create=True) as st:
            settings = resolve_settings(given, st.settings())
            before = st.totals()
            n_workers = workers or default_workers()
            runner = make_runner(engine, n_workers, scheduler, address) if engine != "local" or scheduler or address \
                else None
            # The bar closes (cleared) before the interrupted line is said.
            bar = progress_bar(quiet, "count", "bytes", every=progress_every, style=progress, unit_scale=True)
            with _interrupted(st, before, sources), bar:
                summary = count_sources(
                    st, sources, settings, workers=n_workers, runner=runner, max_memory=budget,
                    recount=recount, strict_utf8=strict_utf8, input_format=input_format, field=field,
                    column=column, skip_bad_records=skip_bad_records,
                    on_bytes=bar.update, on_message=bar.write, on_total=bar.set_total,
                )
            say(quiet, summary.line())


@contextmanager
def _new_store_removed_on_error(path: str):
    """A store this count creates is removed again when the count is refused before its first
    batch (a ``regex:`` pattern that does not cover the text is known only from the text): a
    refused count leaves no directory behind.  Only LMDB's files and the claims file are
    removed, and the directory only when that empties it.  (Only for a refusal of the settings:
    a count interrupted or failed otherwise keeps its store, as it always did.)"""
    import os

    from ..pretok.pretokenize import PretokenizeError

    existed = os.path.exists(path)
    try:
        yield
    except PretokenizeError:
        if not existed:
            from ..store.lmdb_store import Store

            try:
                with Store.open(path, readonly=True) as st:
                    empty = st.settings() is None
            except Exception:  # noqa: BLE001 - no store there (or none readable): nothing committed
                empty = True
            if empty:
                for name in ("data.mdb", "lock.mdb", "claims.lock"):
                    try:
                        os.unlink(os.path.join(path, name))
                    except OSError:
                        pass
                try:
                    os.rmdir(path)
                except OSError:
                    pass
        raise


# -- train -------------------------------------------------------------------------
@app.command()
def train(
    output: Optional[str] = typer.Option(None, "--output", "-o", help="Where to write the tokenizer (JSON; '-' is stdout)."),
    vocab_size: Optional[int] = typer.Option(None, "--vocab-size", help="Total vocabulary: 256 + specials + merges (with --from: all its tokens + the new merges)."),
    num_merges: Optional[int] = typer.Option(None, "--num-merges", help="Number of merges to learn."),
    store: Optional[str] = StoreOpt,
    special_token: List[str] = typer.Option(None, "--special-token", help="Extra special tokens, after the store's."),
    tie_break: str = typer.Option("max-bytes", "--tie-break", help="max-bytes, min-bytes or min-ids."),
    min_count: int = typer.Option(1, "--min-count", help="Stop when the best pair's count is below N."),
    min_word_count: int = typer.Option(1, "--min-word-count", help="Ignore pretokens counted fewer than N times."),
    doc_boundaries: bool = typer.Option(False, "--doc-boundaries", help="Wrap documents in start/end symbols."),
    max_memory: Optional[str] = typer.Option(
        None, "--max-memory", help="Memory budget; above it the merge loop's tables move to a scratch file on disk \\[default: half the available memory]."
    ),
    path: str = typer.Option("auto", "--path", help="auto, memory or disk: where the symbol sequences live."),
    resume: bool = typer.Option(False, "--resume", help="Continue from the store's checkpoint of this run."),
    from_tokenizer: Optional[str] = typer.Option(None, "--from", help="Continue this tokenizer: one this store trained, or extend any -t format (its ids kept)."),
    checkpoint_every: int = typer.Option(CHECKPOINT_EVERY, "--checkpoint-every", min=1, help="Checkpoint every N merges."),
    checkpoint_seconds: float = typer.Option(CHECKPOINT_SECONDS, "--checkpoint-seconds", min=0.0, help="... or every T seconds."),
    plan: bool = typer.Option(False, "--plan", help="Only say what the run would take (path, memory, scratch disk, time); train nothing."),
    as_json: bool = typer.Option(False, "--json", help="With --plan: the plan as JSON on stdout."),
    quiet: bool = QuietOpt,
    progress_every: Optional[float] = EveryOpt,
    progress: str = ProgressOpt,
):
    """Learn the merges from the store and write a tokenizer."""
    from ..train.pipeline import train_from_store
    from ..store.lmdb_store import Store
    from ..train.trainer import TrainConfig

    usage_error = next(c for c in typer.BadParameter.__mro__ if c.__name__ == "UsageError")
    if output is None and not plan:
        raise usage_error("Missing option '--output' / '-o' (the tokenizer to write; or --plan).")
    if as_json and not plan:
        raise usage_error("--json goes with --plan (train writes its tokenizer with -o).")
    budget = parse_size(max_memory) if max_memory else None
    from ..formats import load_any
    with user_errors():
        if not plan:
            _check_output_arg(output)  # before the training, not after it
        config = TrainConfig(
            vocab_size=vocab_size, num_merges=num_merges, special_tokens=list(special_token or []),
            doc_boundaries=doc_boundaries, tie_break=tie_break, min_count=min_count, min_word_count=min_word_count,
        )
        base = load_any(from_tokenizer) if from_tokenizer else None
        if plan:
            _show_plan(store, config, budget, path, resume, base, as_json)
            return
        with Store.open_for_update(store_path(store)) as st:  # read-only: no checkpoints
            bar = progress_bar(quiet, "train", "merges", every=progress_every, style=progress)

            def on_progress(batch, done, limit):
                bar.set_total(limit)
                bar.update(len(batch))
                bar.set_postfix(count=batch[-1][2], refresh=False)

            with bar:  # messages go through the bar: none is glued to its first frame
                tok, result = train_from_store(
                    st, config, on_progress, max_memory=budget, path=path, resume=resume, from_tokenizer=base,
                    checkpoint_every=checkpoint_every, checkpoint_seconds=checkpoint_seconds,
                    on_message=bar.write,
                )
        if output == "-":
            from ..formats import dump_tokenizer

            dump_tokenizer(tok, "native", stdout_binary())
        else:
            tok.save(output)
        last = result.merge_counts[-1] if result.merge_counts else 0
        say(quiet, f"learned {len(result.merges):,} merges (last pair count {last:,}); vocabulary {tok.vocab_size:,}; "
                   f"wrote {_shown(output)}")


def _show_plan(store, config, budget, path, resume, base, as_json: bool) -> None:
    """``train --plan``: the plan's figures on stdout (a table, or JSON)."""
    from ..store.lmdb_store import Store
    from ..train.pipeline import plan_summary, plan_training

    with Store.open(store_path(store), readonly=True) as st:
        summary = plan_summary(plan_training(st, config, max_memory=budget, path=path, resume=resume,
                                             from_tokenizer=base))
    if as_json:
        typer.echo(json.dumps(summary, indent=2))
        return
    mb = lambda n: f"{n / 1e6:,.0f} MB"  # noqa: E731
    rows = [("path", f"{summary['path']} ({summary['reason']})"),
            ("words", f"{summary['distinct_pretokens']:,} distinct pretokens, {summary['symbols']:,} symbols"),
            ("merges", f"{summary['merges']:,}" + (f" after {summary['forced_merges']:,} given" if summary["forced_merges"] else "")),
            ("in-memory path peak", mb(summary["memory_path_peak_bytes"])),
            ("peak anonymous memory", mb(summary["peak_anonymous_bytes"]) + f" (budget {mb(summary['budget_bytes'])})")]
    if summary["path"] == "disk":
        rows += [("scratch file", f"{mb(summary['scratch_bytes'])} in {summary['scratch_dir']}"),
                 ("tables kept in memory", mb(summary["kept_in_memory_bytes"]))]
    rows.append(("estimated time", f"{summary['estimated_seconds']:,.0f} s (one core, rough)"))
    for key, value in rows:
        typer.echo(f"{key:24} {value}")


# -- encode / decode ---------------------------------------------------------------
FormatOpt = typer.Option("txt", "--format", "-f", help="txt (decimal ids), u16 or u32 (little-endian binary).")


def _inputs(paths: Optional[List[str]]) -> List[str]:
    return paths or [STDIN]


def _check_output_arg(output: Optional[str]) -> None:
    """The error for an ``-o`` that cannot be written (or a closed stdout), before the work."""
    if output is None or output == "-":
        stdout_binary()
    elif output == "":
        raise typer.BadParameter("-o '' names no file; give a path, or '-' for stdout")
    else:
        check_output(output)


def _total_size(sources: List[Source]) -> Optional[int]:
    """The bytes of all the inputs, None with stdin or a pipe (no size to know)."""
    return None if any(s.is_stdin for s in sources) else sum(s.size for s in sources)


def _shown(output: Optional[str]) -> str:
    return "stdout" if output in (None, "-") else output


def _open_output(output: Optional[str]):
    if output is None or output == "-":
        return _StdoutContext()
    return atomic_write(output, "wb")


class _StdoutContext:
    def __enter__(self):
        self.stream = stdout_binary()
        return self.stream

    def __exit__(self, *exc):
        self.stream.flush()


@app.command()
def encode(
    paths: List[str] = typer.Argument(None, help="Files to encode (each one document); none or '-' reads stdin."),
    tokenizer: str = TokOpt,
    fmt: str = FormatOpt,
    output: Optional[str] = typer.Option(None, "--output", "-o", help="Write here (atomically) instead of stdout."),
    strict_utf8: bool = typer.Option(False, "--strict-utf8", help="Stop at invalid UTF-8 instead of keeping it."),
    workers: int = typer.Option(1, "--workers", "-w", min=1, help="Processes; the output is the same for any number."),
    input_format: str = InputFormatOpt,
    field: str = FieldOpt,
    column: str = ColumnOpt,
    skip_bad_records: bool = SkipBadOpt,
    append_special: Optional[str] = typer.Option(
        None, "--append-special", help="A special token of the tokenizer written after each document (e.g. '<|endoftext|>')."),
    quiet: bool = QuietOpt,
    progress_every: Optional[float] = EveryOpt,
    progress: str = ProgressOpt,
):
    """Text to token ids, streaming: one line of ids per document (txt), or the ids in order (u16/u32).

    Documents: each file (a .gz/.zst/.xz/.bz2 file decompressed), or each record of a
    .jsonl/.json (--field) or .parquet (--column) file."""
    from ..inputs.documents import with_form
    from ..encode.parallel import ParallelEncoder, encode_sources, special_id
    from ..formats import load_any
    from ..encode.ids_io import FORMATS, check_format

    with user_errors():
        if fmt not in FORMATS:
            raise typer.BadParameter(f"--format must be one of {', '.join(FORMATS)}")
        _check_output_arg(output)
        tok = load_any(tokenizer)
        sources = [with_form(Source.from_arg(p), input_format, field, column) for p in _inputs(paths)]
        check_format(fmt, max(tok.vocab) if tok.vocab else 0)
        append = [special_id(tok, append_special)] if append_special is not None else []
        started = time.monotonic()
        bar = progress_bar(quiet, "encode", "bytes", _total_size(sources), every=progress_every, style=progress,
                           unit_scale=True)
        with ParallelEncoder(tok, workers) as encoder, _open_output(output) as out, bar:
            tokens, documents, skipped, text_bytes = encode_sources(
                encoder, out, sources, fmt, strict=strict_utf8, append=append, skip_bad=skip_bad_records,
                on_bytes=bar.update)
        line = summary_line("encoded", text_bytes, documents, tokens, time.monotonic() - started)
        say(quiet, line + (f"; skipped {skipped:,} bad record{'s' if skipped != 1 else ''}" if skipped else ""))


@app.command()
def decode(
    paths: List[str] = typer.Argument(None, help="Files of ids; none or '-' reads stdin."),
    tokenizer: str = TokOpt,
    fmt: str = FormatOpt,
    output: Optional[str] = typer.Option(None, "--output", "-o", help="Write here (atomically) instead of stdout."),
    quiet: bool = QuietOpt,
    progress_every: Optional[float] = EveryOpt,
    progress: str = ProgressOpt,
):
    """Token ids back to the exact bytes."""
    from ..formats import load_any
    from ..encode.ids_io import FORMATS, read_ids
    with user_errors():
        if fmt not in FORMATS:
            raise typer.BadParameter(f"--format must be one of {', '.join(FORMATS)}")
        _check_output_arg(output)
        tok = load_any(tokenizer)
        sources = [Source.from_arg(p) for p in _inputs(paths)]
        started, tokens, written = time.monotonic(), 0, 0

        def counted(batches):
            nonlocal tokens
            for ids in batches:
                tokens += len(ids)
                yield ids

        # The bar runs over the bytes of ids read (known before); the summary gives the bytes written.
        bar = progress_bar(quiet, "decode", "bytes", _total_size(sources), every=progress_every, style=progress,
                           unit_scale=True)
        with _open_output(output) as out, bar:
            for source in sources:
                with source.reading() as stream:
                    for data in tok._decode_chunks(counted(read_ids(CountingReader(stream, bar.update), fmt))):
                        out.write(data)
                        written += len(data)
        say(quiet, summary_line("decoded", written, len(sources), tokens, time.monotonic() - started, tokens_first=True))


# -- info / stats ------------------------------------------------------------------
@app.command()
def info(tokenizer: str = TokOpt, as_json: bool = typer.Option(False, "--json", help="Machine-readable output.")):
    """Vocabulary size, merges, special tokens, pretokenizer (and its cap on a pretoken's bytes),
    tie-break and rules digest."""
    from ..formats import load_any
    from ..formats.native import rules_digest
    with user_errors():
        stdout_binary()
        tok = load_any(tokenizer)
        data = {
            "vocab_size": tok.vocab_size,
            "merges": len(tok.merges),
            "special_tokens": {text: sid for sid, role, text in tok.symbols if role == "special"},
            "end_of_word": next((text for _, role, text in tok.symbols if role == "end_of_word"), None),
            "doc_boundaries": tok.doc_start_id is not None,
            "pretokenizer": tok.pretokenizer.name,
            "pattern": tok.pretokenizer.pattern,
            "max_token_bytes": tok.max_token_bytes,  # (None: pretokens of any length are encoded whole)
            "tie_break": tok.tie_break,
            "rules_sha256": rules_digest(tok),
        }
        if as_json:
            typer.echo(json.dumps(data, ensure_ascii=False, indent=2))
            return
        for key, value in data.items():
            typer.echo(f"{key:15} {value}")


def _note(message: str) -> None:
    typer.echo(message, err=True)


@app.command()
def stats(
    store: Optional[str] = StoreOpt,
    top: int = typer.Option(10, "--top", min=0, help="How many of the most frequent pretokens to list."),
    as_json: bool = typer.Option(False, "--json", help="Machine-readable output."),
):
    """What the store holds: totals, the most frequent pretokens, size on disk, training memory."""
    from ..store.lmdb_store import Store

    with user_errors():
        stdout_binary()
        from ..store.training_record import one_line, stored_record

        with Store.open(store_path(store), readonly=True) as st:
            data = st.stats(top)
            data["last_training"] = stored_record(st, _note)
        if as_json:
            typer.echo(json.dumps(data, ensure_ascii=False, indent=2))
            return
        for key in ("store", "documents", "bytes", "pretokens", "special_tokens_seen", "unique_pretokens", "files"):
            value = data[key]
            typer.echo(f"{key:30} {value:,}" if isinstance(value, int) else f"{key:30} {value}")
        typer.echo(f"{'pretokenizer':30} {data['settings']['pretokenizer']}")
        typer.echo(f"{'special tokens':30} {data['settings']['special_tokens']}")
        typer.echo(f"{'disk size':30} {data['disk_bytes'] / 1e6:,.1f} MB")
        typer.echo(f"{'estimated in-memory train':30} {data['estimated_train_memory_bytes'] / 1e6:,.1f} MB")
        typer.echo(f"{'last training':30} {one_line(data['last_training']) if data['last_training'] else 'none recorded'}")
        typer.echo("most frequent pretokens:")
        for row in data["top"]:
            typer.echo(f"  {row['count']:>12,}  {row['pretoken']!r}")


@app.command()
def verify(store: Optional[str] = StoreOpt, quiet: bool = QuietOpt):
    """Check every page and every count of the store (opening it checks only what changed)."""
    from ..store.lmdb_store import check_store

    with user_errors():
        started = time.monotonic()
        unique, nbytes = check_store(store_path(store))
        say(quiet, f"verified the store at {store_path(store)}: every page and count whole ({unique:,} distinct "
                   f"pretokens, {nbytes / 1e6:,.1f} MB) in {time.monotonic() - started:.2f} s")


# -- export / eval -----------------------------------------------------------------
@app.command()
def export(
    tokenizer: str = TokOpt,
    fmt: str = typer.Option(..., "--format", "-f", help="hf (tokenizer.json), gpt2 (directory), tiktoken (rank file + PATH.json) or native."),
    output: str = typer.Option(..., "--output", "-o", help="Where to write (a directory for gpt2; '-' is stdout for hf and native)."),
    vocab_size: Optional[int] = typer.Option(None, "--vocab-size", help="Keep only the first merges: this many tokens in all."),
    like: Optional[str] = typer.Option(
        None, "--like", help="hf: copy this tokenizer.json or folder (the one train --from extended), adding the new tokens and merges."
    ),
    bos: Optional[str] = typer.Option(None, "--bos", help="hf folder, gpt2: the special token transformers takes as bos_token \\[default: none]."),
    eos: Optional[str] = typer.Option(None, "--eos", help="hf folder, gpt2: the special token transformers takes as eos_token \\[default: none]."),
    pad: Optional[str] = typer.Option(None, "--pad", help="hf folder, gpt2: the special token transformers takes as pad_token \\[default: none]."),
    unk: Optional[str] = typer.Option(None, "--unk", help="hf folder, gpt2: the special token transformers takes as unk_token \\[default: none]."),
    quiet: bool = QuietOpt,
):
    """Write the tokenizer in a format other tools load directly.

    --format hf -o DIR (an existing directory, or a path ending in /) writes a folder that
    transformers' AutoTokenizer.from_pretrained loads: tokenizer.json, tokenizer_config.json and
    special_tokens_map.json; --format gpt2 writes the same two configs beside vocab.json and
    merges.txt for GPT2Tokenizer.  No special token is eos, bos, pad or unk unless given."""
    from ..formats import export_tokenizer, export_warnings, load_any

    with user_errors():
        tok = load_any(tokenizer)
        notes: List[str] = []
        roles = {"bos": bos, "eos": eos, "pad": pad, "unk": unk}
        for written in export_tokenizer(tok, fmt, output, vocab_size, like, roles, notes):
            say(quiet, f"wrote {_shown(written)}")
        for note in notes:
            say(quiet, f"note: {note}")
        for warning in export_warnings(tok, fmt):
            say(quiet, f"warning: {warning}")


def _merge_prefixes(merges: Optional[str]) -> Optional[List[int]]:
    """``--merges 0,16,32`` of eval and report (None: the whole tokenizer)."""
    if not merges:
        return None
    try:
        return [int(x) for x in merges.split(",") if x.strip()]
    except ValueError:
        raise typer.BadParameter(f"--merges takes numbers separated by commas, not {merges!r}") from None


@app.command(name="eval")
def eval_(
    paths: List[str] = typer.Argument(None, help="Held-out text files (each one document); none or '-' reads stdin."),
    tokenizer: str = TokOpt,
    merges: Optional[str] = typer.Option(None, "--merges", help="Evaluate these merge-prefixes, e.g. 0,16,32,64."),
    as_json: bool = typer.Option(False, "--json", help="Machine-readable output."),
    baseline: Optional[str] = typer.Option(
        None, "--baseline", help="Compare with this tokenizer, e.g. the one train --from extended: tokens saved."
    ),
):
    """Bytes, tokens, bytes/token, compression ratio, encode MB/s and a round-trip check."""
    from ..encode.evaluate import compare, evaluate
    from ..formats import load_any

    with user_errors():
        stdout_binary()
        prefixes = _merge_prefixes(merges)
        tok = load_any(tokenizer)
        sources = [Source.from_arg(p) for p in _inputs(paths)]
        if prefixes is not None and any(s.is_stdin for s in sources) and len(prefixes) > 1:
            raise typer.BadParameter("several --merges need files: stdin can be read only once")
        if baseline is not None and any(s.is_stdin for s in sources):
            raise typer.BadParameter("--baseline needs files: stdin can be read only once")
        base = evaluate(load_any(baseline), sources)[0] if baseline is not None else None
        rows = evaluate(tok, sources, prefixes)
        compared = [compare(r, base) for r in rows] if base is not None else None
        if as_json:
            doc = {"tokenizer": tokenizer, "results": rows}
            if base is not None:
                doc.update(baseline={"tokenizer": baseline, "result": base}, against_baseline=compared)
            typer.echo(json.dumps(doc, indent=2))
            return
        header = f"{'merges':>7} {'vocab':>7} {'bytes':>12} {'tokens':>12} {'B/token':>8} {'ratio':>6} {'tok/word':>8} {'used':>6} {'MB/s':>6}  round-trip"
        typer.echo(header)

        def fmt_num(x, spec):
            return format(x, spec) if x is not None else "-"

        for r in rows:
            typer.echo(
                f"{r['merges']:>7,} {r['vocab_size']:>7,} {r['bytes']:>12,} {r['tokens']:>12,} "
                f"{fmt_num(r['bytes_per_token'], '8.3f')} {fmt_num(r['compression_ratio'], '6.3f')} "
                f"{fmt_num(r['tokens_per_word'], '8.3f')} {r['vocab_used_share']:>6.1%} "
                f"{fmt_num(r['encode_mb_per_s'], '6.2f')}  {_round_trip_word(r)}"
            )
        for r, c in zip(rows, compared or ()):
            typer.echo(
                f"against {baseline}: {r['merges']:,} merges give {c['tokens_after']:,} tokens for "
                f"{c['tokens_before']:,}, {c['tokens_saved']:,} saved ({fmt_num(c['tokens_saved_share'], '.1%')}); "
                f"bytes/token {fmt_num(c['bytes_per_token_before'], '.3f')} -> {fmt_num(c['bytes_per_token_after'], '.3f')}"
            )
        if not all(r["round_trip"] for r in rows) and all(r["lossy_by_design"] for r in rows):
            typer.echo(
                "note: this tokenizer has a word-end marker (--end-of-word), which decodes as one space, so decoding "
                "does not give the text back exactly: lossy by design, not a bug",
                err=True,
            )
        if not all(r["round_trip"] or r["lossy_by_design"] for r in rows):
            fail("the round trip changed the bytes; please report this with the tokenizer and the text")


@app.command()
def report(
    paths: List[str] = typer.Argument(..., help="Held-out text files (each one document)."),
    tokenizer: List[str] = typer.Option(..., "--tokenizer", "-t", help="A tokenizer to show (repeatable)."),
    output: str = typer.Option(..., "--output", "-o", help="The HTML file to write."),
    baseline: Optional[str] = typer.Option(
        None, "--baseline", help="The tokenizer the others extend (train --from): shown too, with the new tokens and the tokens saved."),
    merges: Optional[str] = typer.Option(None, "--merges", help="The merge-prefixes of the curve, e.g. 0,500,1000 \\[default: 9 evenly spread]."),
    store: Optional[str] = typer.Option(None, "--store", help="Show this store's totals (the training text)."),
    scripts: bool = typer.Option(True, "--scripts/--no-scripts", help="Bytes per token per Unicode script (encodes each distinct pretoken)."),
    quiet: bool = QuietOpt,
):
    """One self-contained HTML page (inline SVG, nothing fetched) of the tokenizers on held-out
    text: bytes/token against vocabulary size, per file and script, token lengths, the most
    frequent and longest tokens, an extension's new tokens; the numbers eval --json gives."""
    import os

    from ..encode import report as rep
    from ..formats import load_any

    with user_errors():
        check_output(output)
        prefixes = _merge_prefixes(merges)
        sources = [Source.from_arg(p) for p in paths]
        if any(s.is_stdin for s in sources):
            raise typer.BadParameter("report reads its files several times: give files, not stdin")
        labels = [os.path.basename(os.path.normpath(t)) for t in tokenizer]
        labels = [lab if labels.count(lab) == 1 else t for lab, t in zip(labels, tokenizer)]
        toks = [(lab, load_any(t)) for lab, t in zip(labels, tokenizer)]
        base = (os.path.basename(os.path.normpath(baseline)), load_any(baseline)) if baseline else None
        stats_ = None
        if store is not None:
            from ..store.lmdb_store import Store

            from ..store.training_record import stored_record

            with Store.open(store_path(store), readonly=True) as st:
                stats_ = st.stats(10)
                stats_["training"] = stored_record(st, _note)
        fig = rep.build(toks, sources, prefixes, base, stats_, scripts)
        rep.write(fig, output)
        say(quiet, f"wrote {output}")


def _round_trip_word(row: dict) -> str:
    if row["round_trip"]:
        return "ok"
    return "lossy (by design: --end-of-word)" if row["lossy_by_design"] else "FAILED"


# -- scaling out (bpe_stream.cli.scale) ----------------------------------------------
# Every command registers here, on the one app; cli_scale defines its commands without it.
app.command("export-counts")(cli_scale.export_counts_cmd)
app.command("import-counts")(cli_scale.import_counts_cmd)
app.command("merge-stores")(cli_scale.merge_stores_cmd)


def app_for(args: List[str]) -> typer.Typer:
    """The app that runs ``bpe-stream ARGS``: for ``bpe-stream COMMAND ...``, :data:`app` with
    that one command registered (and its root options), else :data:`app`.  Typer makes the
    click command of every registered command each time an app runs (~7 ms for all of
    them); a command's own run needs only its own, and parses, says and exits the same."""
    name = args[0] if args else None
    chosen = [c for c in app.registered_commands
              if name == (c.name or typer.main.get_command_name(c.callback.__name__))]
    if not chosen:  # no command (--help, --version, none) or an unknown one: the whole app
        return app
    one = copy.copy(app)
    one.registered_commands = chosen
    return one


def main():
    """The ``bpe-stream`` script (and ``python -m bpe_stream``): runs the command, then exits."""
    # The modules imported so far (typer, click, ours) live as long as the process: frozen, the
    # collector's full passes no longer walk them each time a command makes many objects
    # (a train's merges and its tokenizer document: 33 ms of such passes on code_25M).
    gc.freeze()
    try:
        app_for(sys.argv[1:])(prog_name="bpe-stream")
    except SystemExit as exc:
        # rich (typer's help) and click turn a reader that went away (``--help | head -c 10``:
        # EPIPE) into exit 1; as for any command's output (``common.user_errors``), a closed
        # pipe ends quietly with status 0.
        if exc.code == 1 and (isinstance(exc.__context__, BrokenPipeError)
                              or type(sys.stdout).__name__ == "PacifyFlushWrapper"):
            raise SystemExit(0) from None
        raise
    finally:
        # Whatever is alive now lives until the process ends: frozen, it is out of the sight
        # of the garbage collections the interpreter runs as it shuts down, which otherwise
        # walk every object of typer, click and the run (20-60 ms after a count, 5-9 ms
        # frozen).  The store, the files and the outputs are closed by then (``with``
        # blocks), stdout and stderr are flushed at exit as ever, atexit handlers still run.
        gc.freeze()


if __name__ == "__main__":  # python -m bpe_stream.cli.commands (python -m bpe_stream is __main__.py)
    main()
