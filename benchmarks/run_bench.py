"""``make bench``: time bpe-stream against its peers, in one run, on the reference data.

    .venv/bin/python benchmarks/run_bench.py [--quick] [--only SECTION[,SECTION]] [--repeat N]

Sections (default: all; ``--quick`` drops ``train-large`` unless it is asked for by name
and shrinks the others):

* ``train-small``  count + train (vocab 500) on cs336/corpus.en: the CLI's wall time, the
                   in-library time of ``train_from_store`` and of ``train_bpe`` (the CS336
                   shape, against its reference figure of 0.38 s), rustbpe, HF tokenizers.
* ``count``        ``bpe-stream count`` of en_100M.txt (a 20 MB prefix with --quick) against a
                   bare ``Counter(regex.findall(GPT2, text))`` on one core.
* ``train-large``  count + train at vocab 32,768 on en_100M.txt (a 20 MB prefix with --quick)
                   against HF tokenizers and rustbpe trained from the same file.
* ``encode``       encode throughput of the library (``encode``, ``encode_iterable``) and the
                   CLI on a 20 MB text (10 MB with --quick) against tiktoken and HF tokenizers
                   built from the same vocabulary (the ids are checked to be the same).

The machine is small and shared, so every figure comes with a peer measured in the same
run: the ``time/bpe`` column is the row's seconds divided by those of the section's
baseline row (marked ``*``).  Every run is a separate process (see ``measure.py``); peak
RSS covers its whole process tree.  Results go to benchmarks/results/bench-<timestamp>.json
(fields: benchmarks/results/README.md) with one RSS-over-time PNG per section.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import importlib.util
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
DATA = REPO.parent / "shared" / "data"
RESULTS = HERE / "results"
sys.path.insert(0, str(HERE))

import measure  # noqa: E402
import workloads as W  # noqa: E402
from measure import MB, Measurement, MeasureError  # noqa: E402

SPECIAL = "<|endoftext|>"
SECTIONS = ("train-small", "count", "train-large", "encode")
QUICK_DEFAULT = ("train-small", "count", "encode")
CS336_REFERENCE_SECONDS = 0.38  # the CS336 reference train_bpe on corpus.en, vocab 500
PEER_MODULES = {"rustbpe": "rustbpe", "HF tokenizers": "tokenizers", "tiktoken": "tiktoken"}


def bpe_cli() -> List[str]:
    """The bpe-stream entry point of the interpreter running this script."""
    exe = Path(sys.executable).parent / "bpe-stream"
    if exe.exists():
        return [str(exe)]
    found = shutil.which("bpe-stream")
    if found:
        return [found]
    return [sys.executable, "-c", "from bpe_stream.cli import main; main()"]


# -- rows ------------------------------------------------------------------------------
@dataclass
class Row:
    section: str
    tool: str
    phase: str
    how: str  # "CLI wall", "in-process", "process wall", "reference figure", ...
    mb: Optional[float] = None
    seconds: Optional[float] = None
    peak_rss_mb: Optional[float] = None
    cores: Optional[float] = None  # CPU seconds / wall seconds of the process
    others: Optional[float] = None  # cores the rest of the machine kept busy meanwhile (noise)
    baseline: bool = False
    ratio: Optional[float] = None  # seconds / baseline seconds of the section
    rss_ratio: Optional[float] = None  # peak RSS / baseline peak RSS
    all_seconds: List[float] = field(default_factory=list)  # every repeat
    wall_s: Optional[float] = None
    cpu_s: Optional[float] = None
    ru_maxrss_mb: Optional[float] = None
    tree_peak_rss_mb: Optional[float] = None
    vm_hwm_mb: Optional[float] = None  # the largest VmHWM of one process of the tree
    tree_peak_pss_mb: Optional[float] = None  # only for multi-process trees
    processes: Optional[int] = None  # the most processes seen in the tree at once
    run: Optional[str] = None  # label of the measurement in the section's "runs"
    error: Optional[str] = None
    extra: dict = field(default_factory=dict)

    @property
    def mb_s(self) -> Optional[float]:
        if self.mb and self.seconds:
            return self.mb / self.seconds
        return None

    def to_json(self) -> dict:
        d = asdict(self)
        d["mb_s"] = self.mb_s
        return d


def row_from(section: str, tool: str, phase: str, how: str, m: Measurement, mb: Optional[float], *, seconds=None, **kw) -> Row:
    return Row(
        section=section, tool=tool, phase=phase, how=how, mb=mb,
        seconds=m.seconds if seconds is None else seconds,
        peak_rss_mb=m.peak_rss / MB, cores=m.cores, others=m.others_cores, all_seconds=list(getattr(m, "all_seconds", [m.seconds])),
        wall_s=m.wall_s, cpu_s=m.cpu_s, ru_maxrss_mb=m.ru_maxrss / MB, tree_peak_rss_mb=m.tree_peak_rss / MB,
        vm_hwm_mb=m.vm_hwm / MB, tree_peak_pss_mb=(m.tree_peak_pss / MB) if m.tree_peak_pss else None, processes=m.max_processes,
        run=m.label, **kw,
    )


# -- the run's shared state -------------------------------------------------------------
class Context:
    def __init__(self, args):
        self.args = args
        self.quick = args.quick
        self.repeat = max(1, args.repeat)
        self.min_repeat = 1  # a section with sub-second runs raises it (cheap, and less noise)
        self.tmp = Path(tempfile.mkdtemp(prefix="bpe-bench-", dir=args.tmp))
        self.bpe = bpe_cli()
        self.stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
        self.results_dir = Path(args.results)
        self.sections: Dict[str, dict] = {}
        self.count_store: Optional[tuple] = None  # (text path, store path) counted with SPECIAL
        self.large_tokenizer: Optional[dict] = None  # {"path":..., "trained_on":..., "vocab_size":...}
        self._prefixes: Dict[tuple, Path] = {}

    def data(self, *parts) -> Path:
        path = DATA.joinpath(*parts)
        if not path.exists():
            raise FileNotFoundError(f"{path} is missing (the reference data lives in {DATA})")
        return path

    def prefix(self, source: Path, nbytes: int) -> Path:
        """The first ``nbytes`` of ``source`` (cut back to the last newline), as a temp file."""
        key = (str(source), nbytes)
        if key not in self._prefixes:
            out = self.tmp / f"{source.stem}.prefix-{nbytes // 1_000_000}MB.txt"
            # streamed in blocks: the harness stays small (children's ru_maxrss include its peak)
            with open(source, "rb") as f, open(out, "wb") as g:
                left = nbytes
                while left > 0:
                    block = f.read(min(left, 1 << 20))
                    if not block:
                        break
                    left -= len(block)
                    if left == 0 and b"\n" in block:
                        block = block[: block.rindex(b"\n") + 1]  # end on a whole line
                    g.write(block)
            self._prefixes[key] = out
        return self._prefixes[key]

    # measuring with --repeat: keep the fastest run, remember every time
    def best(self, make: Callable[[], Measurement], setup: Optional[Callable[[], None]] = None) -> Measurement:
        best, times = None, []
        for _ in range(max(self.repeat, self.min_repeat)):
            if setup:
                setup()
            m = make()
            times.append(m.seconds)
            if best is None or m.seconds < best.seconds:
                best = m
        best.all_seconds = times
        return best

    def cmd(self, label: str, argv: Sequence, setup=None, **kw) -> Measurement:
        say(f"  running {label} ...")
        m = self.best(lambda: measure.measure_command([str(a) for a in argv], label=label, **kw), setup)
        say(f"    {m.seconds:8.2f} s  peak RSS {m.peak_rss / MB:8.1f} MB")
        return m

    def fn(self, label: str, func, *args, env=None, **kwargs) -> Measurement:
        say(f"  running {label} ...")
        m = self.best(lambda: measure.measure_callable(func, *args, label=label, env=env, **kwargs))
        say(f"    {m.seconds:8.2f} s  peak RSS {m.peak_rss / MB:8.1f} MB  (process wall {m.wall_s:.2f} s)")
        return m

    def cleanup(self):
        if self.args.keep:
            say(f"kept the temporary files in {self.tmp}")
        else:
            shutil.rmtree(self.tmp, ignore_errors=True)


def say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def peer_missing(name: str) -> Optional[str]:
    module = PEER_MODULES[name]
    if importlib.util.find_spec(module) is None:
        return f"{name} is not installed (module {module!r}; pip install -e '.[dev]'): skipping its rows"
    return None


class Section:
    """Collects one section's rows, measurements and notes."""

    def __init__(self, ctx: Context, name: str, description: str):
        self.ctx, self.name = ctx, name
        self.rows: List[Row] = []
        self.runs: List[Measurement] = []
        self.notes: List[str] = []
        self.info: dict = {"description": description}
        self.plot: Optional[str] = None

    def add(self, row: Row, *runs: Measurement) -> Row:
        self.rows.append(row)
        self.runs.extend(r for r in runs if r not in self.runs)
        return row

    def note(self, text: str) -> None:
        self.notes.append(text)
        say(f"  note: {text}")

    def peer(self, tool: str, phase: str, how: str, mb, make: Callable[[], Measurement], **kw) -> Optional[Row]:
        """A peer's row: skipped with a message when it is not installed; a failure is a row with an error."""
        missing = peer_missing(tool)
        if missing:
            self.note(missing)
            return None
        try:
            m = make()
        except MeasureError as exc:
            self.note(f"{tool} {phase} failed: {str(exc).splitlines()[0]}")
            return self.add(Row(self.name, tool, phase, how, mb=mb, error=str(exc)[-2000:]))
        kw.setdefault("extra", dict(m.result) if isinstance(m.result, dict) else {})
        return self.add(row_from(self.name, tool, phase, how, m, mb, **kw), m)

    def finish(self) -> dict:
        seen = set()
        for r in self.rows:
            key = (r.processes, r.tree_peak_rss_mb)  # a combined row repeats its part's figures
            if r.processes and r.processes > 1 and key not in seen:
                seen.add(key)
                self.note(
                    f"{r.run} ran as up to {r.processes} processes: summed RSS peak {r.tree_peak_rss_mb:,.0f} MB counts "
                    f"pages shared by forked workers once per process; summed PSS peak "
                    f"{fmt(r.tree_peak_pss_mb, ',.0f')} MB; largest single process {r.vm_hwm_mb:,.0f} MB (VmHWM)"
                )
        base = next((r for r in self.rows if r.baseline and r.seconds), None)
        for r in self.rows:
            if base and r.seconds:
                r.ratio = r.seconds / base.seconds
            if base and base.peak_rss_mb and r.peak_rss_mb:
                r.rss_ratio = r.peak_rss_mb / base.peak_rss_mb
        return {
            **self.info,
            "baseline": f"{base.tool} {base.phase} ({base.how})" if base else None,
            "rows": [r.to_json() for r in self.rows],
            "runs": [m.summary() for m in self.runs],
            "notes": self.notes,
            "plot": None,
        }

    def draw(self) -> Optional[str]:
        """The RSS PNG; called after every section has run (matplotlib would grow the
        harness, and a child's ru_maxrss includes the harness's peak)."""
        if not self.runs:
            return None
        png = self.ctx.results_dir / f"rss-{self.ctx.stamp}-{self.name}.png"
        plot = measure.plot_rss(self.runs, str(png), f"{self.name}: RSS of each run's process tree")
        return os.path.relpath(plot, REPO) if plot else None


def concat(label: str, runs: Sequence[Measurement]) -> Measurement:
    """Runs one after the other as one Measurement (for the plot and the combined row)."""
    samples, offset = [], 0.0
    for m in runs:
        samples += [(t + offset, r) for t, r in m.samples]
        offset += m.wall_s
    first = runs[0]
    out = Measurement(
        label=label, argv=[], returncode=max(m.returncode for m in runs),
        wall_s=sum(m.wall_s for m in runs), seconds=sum(m.seconds for m in runs), cpu_s=sum(m.cpu_s for m in runs),
        tree_peak_rss=max(m.tree_peak_rss for m in runs), vm_hwm=max(m.vm_hwm for m in runs),
        ru_maxrss=max(m.ru_maxrss for m in runs), harness_maxrss=max(m.harness_maxrss for m in runs),
        rusage_children_maxrss=max(m.rusage_children_maxrss for m in runs), samples=samples,
        max_processes=max(m.max_processes for m in runs), stderr_tail=first.stderr_tail,
        tree_peak_pss=max(m.tree_peak_pss for m in runs), others_cpu_s=sum(m.others_cpu_s for m in runs),
        loadavg=first.loadavg,
    )
    out.all_seconds = [sum(m.seconds for m in runs)]
    return out


def parse_count_summary(stderr: str) -> dict:
    """bpe-stream count's summary line -> its numbers."""
    m = re.search(
        r"counted ([\d,]+) bytes, ([\d,]+) documents, ([\d,]+) pretokens, ([\d,]+) new unique pretokens in ([\d.]+) s",
        stderr,
    )
    if not m:
        return {}
    n = [int(x.replace(",", "")) for x in m.groups()[:4]]
    return {"bytes": n[0], "documents": n[1], "pretokens": n[2], "new_unique": n[3], "seconds": float(m.group(5))}


def fresh(path: Path) -> Callable[[], None]:
    return lambda: shutil.rmtree(path, ignore_errors=True)


def size_mb(path: Path) -> float:
    return path.stat().st_size / MB


# -- sections ----------------------------------------------------------------------------
def section_train_small(ctx: Context) -> Section:
    s = Section(ctx, "train-small", "count + train vocab 500 on cs336/corpus.en (special token <|endoftext|>)")
    corpus = ctx.data("cs336", "corpus.en")
    reference = DATA / "cs336" / "train-bpe-reference-merges.txt"
    mb = size_mb(corpus)
    vocab = 500
    store = ctx.tmp / "small-store"
    out = ctx.tmp / "small-tokenizer.json"
    s.info.update(corpus=str(corpus), vocab_size=vocab, mb=mb, repeats=max(ctx.repeat, 3))
    ctx.min_repeat = 3  # every run here is well under a second: keep the fastest of 3
    try:
        return _train_small(ctx, s, corpus, reference, mb, vocab, store, out)
    finally:
        ctx.min_repeat = 1


def _train_small(ctx, s, corpus, reference, mb, vocab, store, out) -> Section:

    m = ctx.cmd("bpe-stream --version", [*ctx.bpe, "--version"])
    s.add(row_from(s.name, "bpe-stream", "CLI start-up (--version)", "CLI wall", m, None), m)
    count = ctx.cmd(
        "bpe-stream count", [*ctx.bpe, "count", "--store", store, "--special-token", SPECIAL, corpus], setup=fresh(store)
    )
    s.add(row_from(s.name, "bpe-stream", "count", "CLI wall", count, mb, extra=parse_count_summary(count.stderr_tail)), count)
    train = ctx.cmd("bpe-stream train", [*ctx.bpe, "train", "--store", store, "--vocab-size", vocab, "-o", out])
    s.add(row_from(s.name, "bpe-stream", "train", "CLI wall", train, mb), train)
    lib = ctx.fn("train_from_store", W.bpe_train_from_store, str(store), vocab)
    s.add(row_from(s.name, "bpe-stream", "train_from_store (merges only)", "in-process", lib, mb, extra=lib.result), lib)
    e2e = ctx.fn(
        "train_bpe", W.bpe_train_bpe, str(corpus), vocab, [SPECIAL], reference_merges=str(reference) if reference.exists() else ""
    )
    s.add(
        row_from(s.name, "bpe-stream", "train_bpe (count + merges)", "in-process", e2e, mb, baseline=True, extra=e2e.result),
        e2e,
    )
    s.add(Row(s.name, "CS336 reference", "train_bpe (count + merges)", "reference figure", mb=mb, seconds=CS336_REFERENCE_SECONDS))
    if "matches_reference_merges" in e2e.result:
        s.note(f"train_bpe's merges {'match' if e2e.result['matches_reference_merges'] else 'DO NOT match'} "
               f"{reference.name}")
    s.note(
        f"CLI train wall {train.wall_s:.2f} s vs train_from_store {lib.seconds:.3f} s in-process; "
        f"CLI start-up alone {s.rows[0].seconds:.2f} s"
    )
    s.peer("rustbpe", "train from documents", "in-process", mb,
           lambda: ctx.fn("rustbpe train", W.rustbpe_train, str(corpus), vocab, [SPECIAL]))
    s.peer("HF tokenizers", "train from file", "in-process", mb,
           lambda: ctx.fn("HF train", W.hf_train, [str(corpus)], vocab, [SPECIAL]))
    return s


def section_count(ctx: Context) -> Section:
    s = Section(ctx, "count", "bpe-stream count vs a bare Counter(regex.findall(GPT2, text)) on one core")
    source = ctx.data("corpora", "en_100M.txt")
    text = ctx.prefix(source, 20_000_000) if ctx.quick else source
    mb = size_mb(text)
    store = ctx.tmp / "count-store"
    s.info.update(text=str(text), source=str(source), mb=mb)
    count = ctx.cmd(
        "bpe-stream count", [*ctx.bpe, "count", "--store", store, "--special-token", SPECIAL, text], setup=fresh(store)
    )
    summary = parse_count_summary(count.stderr_tail)
    s.add(row_from(s.name, "bpe-stream", "count", "CLI wall", count, mb, baseline=True, extra=summary), count)
    if summary.get("seconds"):
        s.add(row_from(s.name, "bpe-stream", "count (its own summary time)", "summary line", count, mb,
                       seconds=summary["seconds"], extra=summary))
    ctx.count_store = (text, store)
    scan = ctx.fn("regex scan", W.regex_scan, str(text))
    s.add(row_from(s.name, "regex", "Counter(findall(GPT2)) 1 core", "in-process", scan, mb, extra=scan.result), scan)
    # per core = per CPU-second, which a busy machine distorts less than wall time
    bpe_per_cpu = mb / count.cpu_s if count.cpu_s else 0
    scan_cpu = scan.result.get("cpu_seconds") or scan.seconds
    scan_per_cpu = mb / scan_cpu
    s.info.update(bpe_mb_per_cpu_second=bpe_per_cpu, regex_mb_per_cpu_second=scan_per_cpu,
                  per_core_ratio=bpe_per_cpu / scan_per_cpu)
    s.note(
        f"per core: bpe-stream count {mb / count.wall_s:.2f} MB/s wall on {count.cores:.2f} cores = "
        f"{bpe_per_cpu:.2f} MB per CPU-second (whole process tree, start-up included); bare regex "
        f"{mb / scan.seconds:.2f} MB/s wall, {scan_per_cpu:.2f} MB per CPU-second; "
        f"bpe-stream per core / regex per core = {bpe_per_cpu / scan_per_cpu:.2f}"
    )
    if summary:
        s.note(f"pretokens: bpe-stream {summary['pretokens']:,} ({summary['new_unique']:,} unique), "
               f"regex {scan.result['pretokens']:,} ({scan.result['unique']:,} unique; it also splits "
               f"'{SPECIAL}' into pretokens)")
    return s


def section_train_large(ctx: Context) -> Section:
    s = Section(ctx, "train-large", "count + train vocab 32,768 on en_100M.txt, end to end from the file")
    source = ctx.data("corpora", "en_100M.txt")
    text = ctx.prefix(source, 20_000_000) if ctx.quick else source
    mb = size_mb(text)
    vocab = 32768
    store = ctx.tmp / "large-store"
    out = ctx.tmp / f"large-tokenizer-{vocab}.json"
    s.info.update(text=str(text), mb=mb, vocab_size=vocab)
    count = ctx.cmd(
        "bpe-stream count", [*ctx.bpe, "count", "--store", store, "--special-token", SPECIAL, text], setup=fresh(store)
    )
    train = ctx.cmd("bpe-stream train", [*ctx.bpe, "train", "--store", store, "--vocab-size", vocab, "-o", out])
    both = concat("bpe-stream count + train", [count, train])
    s.add(row_from(s.name, "bpe-stream", "count", "CLI wall", count, mb, extra=parse_count_summary(count.stderr_tail)), count)
    s.add(row_from(s.name, "bpe-stream", "train", "CLI wall", train, mb), train)
    s.add(row_from(s.name, "bpe-stream", "count + train", "CLI wall", both, mb, baseline=True))
    ctx.large_tokenizer = {"path": str(out), "trained_on": str(text), "vocab_size": vocab}
    # the plot shows count and train one after the other, as one line
    s.runs = [both]
    s.peer("HF tokenizers", "train from file", "process wall", mb,
           lambda: ctx.fn("HF train", W.hf_train, [str(text)], vocab, [SPECIAL]))
    s.peer("rustbpe", "train from documents", "process wall", mb,
           lambda: ctx.fn("rustbpe train", W.rustbpe_train, str(text), vocab, [SPECIAL]))
    # peers: compare process walls (start-up + import + read + train), like the CLI's
    for r in s.rows:
        if r.tool != "bpe-stream" and r.wall_s:
            r.extra["in_process_seconds"] = r.seconds
            r.seconds = r.wall_s
    return s


def encode_tokenizer(ctx: Context, s: Section, text: Path) -> Path:
    """The tokenizer trained by train-large in this run, else one trained now (vocab 32,768)
    on the store of the count section (or on the encode text)."""
    if ctx.large_tokenizer:
        s.info["tokenizer"] = ctx.large_tokenizer
        return Path(ctx.large_tokenizer["path"])
    vocab = 32768
    out = ctx.tmp / f"encode-tokenizer-{vocab}.json"
    if ctx.count_store and ctx.count_store[1].exists():
        trained_on, store = ctx.count_store
    else:
        trained_on, store = text, ctx.tmp / "encode-store"
        say(f"  setup: counting {text.name} for the encode tokenizer ...")
        subprocess.run([*ctx.bpe, "count", "--quiet", "--store", str(store), "--special-token", SPECIAL, str(text)], check=True)
    say(f"  setup: training a {vocab:,} tokenizer on {Path(trained_on).name} (not timed) ...")
    t0 = time.perf_counter()
    subprocess.run([*ctx.bpe, "train", "--quiet", "--store", str(store), "--vocab-size", str(vocab), "-o", str(out)], check=True)
    s.info["tokenizer"] = {"path": str(out), "trained_on": str(trained_on), "vocab_size": vocab,
                           "train_seconds": time.perf_counter() - t0}
    return out


def section_encode(ctx: Context) -> Section:
    s = Section(ctx, "encode", "encode throughput with a 32,768 tokenizer; tiktoken and HF use the same vocabulary")
    source = ctx.data("corpora", "en_100M.txt")
    text = ctx.prefix(source, 10_000_000 if ctx.quick else 20_000_000)
    mb = size_mb(text)
    s.info.update(text=str(text), mb=mb)
    tok = encode_tokenizer(ctx, s, text)

    lib = ctx.fn("bpe-stream Tokenizer.encode", W.bpe_encode, str(tok), str(text), "encode")
    s.add(row_from(s.name, "bpe-stream", "Tokenizer.encode(text)", "in-process", lib, mb, baseline=True, extra=lib.result), lib)
    want = lib.result["digest"]
    it = ctx.fn("bpe-stream encode_iterable", W.bpe_encode, str(tok), str(text), "iterable")
    s.add(row_from(s.name, "bpe-stream", "encode_iterable(lines of file)", "in-process", it, mb, extra=it.result), it)
    ids_file = ctx.tmp / "encode.u32"
    cli = ctx.cmd("bpe-stream encode (CLI)", [*ctx.bpe, "encode", "-t", tok, "--format", "u32", "-o", ids_file, text])
    cli_digest = W.file_digest(str(ids_file))
    s.add(row_from(s.name, "bpe-stream", "encode --format u32 (CLI)", "CLI wall", cli, mb,
                   extra={"digest": cli_digest, "tokens": ids_file.stat().st_size // 4}), cli)
    s.peer("tiktoken", "encode, 1 thread", "in-process", mb,
           lambda: ctx.fn("tiktoken encode", W.tiktoken_encode, str(tok), str(text)))
    one = {"RAYON_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    s.peer("HF tokenizers", "encode per document, 1 thread", "in-process", mb,
           lambda: ctx.fn("HF encode (1 thread)", W.hf_encode, str(tok), str(text), False, env=one))
    s.peer("HF tokenizers", f"encode_batch, {os.cpu_count()} threads", "in-process", mb,
           lambda: ctx.fn("HF encode_batch", W.hf_encode, str(tok), str(text), True, env={"TOKENIZERS_PARALLELISM": "true"}))
    for r in s.rows:
        if r.baseline or r.error:
            continue
        got = r.extra.get("digest")
        if got is not None:
            r.extra["same_ids_as_baseline"] = got == want
            if got != want:
                s.note(f"{r.tool} {r.phase}: ids DIFFER from Tokenizer.encode "
                       f"({r.extra.get('tokens'):,} tokens vs {lib.result['tokens']:,})")
    same = [f"{r.tool} {r.phase}" for r in s.rows if r.extra.get("same_ids_as_baseline")]
    if same:
        s.note(f"same ids as Tokenizer.encode ({lib.result['tokens']:,} tokens): {'; '.join(same)}")
    return s


RUNNERS = {
    "train-small": section_train_small,
    "count": section_count,
    "train-large": section_train_large,
    "encode": section_encode,
}


# -- output ------------------------------------------------------------------------------
def fmt(value, spec: str, empty: str = "-") -> str:
    return empty if value is None else format(value, spec)


def table(sections: Dict[str, dict]) -> str:
    head = ("tool", "phase", "how", "MB", "seconds", "MB/s", "cores", "others", "peak RSS MB", "time/bpe")
    lines = []
    for name, sec in sections.items():
        if "rows" not in sec:
            lines.append([f"[{name}]", sec.get("skipped") or f"ERROR: {(sec.get('error') or 'unknown').splitlines()[0]}"])
            continue
        load = sec.get("loadavg_start")
        lines.append([f"[{name}]", f"baseline *: {sec.get('baseline')}"
                      + (f"; load average at start {load[0]:.2f}" if load else "")])
        for r in sec["rows"]:
            lines.append([
                ("* " if r["baseline"] else "  ") + r["tool"],
                r["phase"],
                r["how"],
                fmt(r["mb"], ".1f"),
                "failed" if r["error"] else fmt(r["seconds"], ".3f"),
                fmt(r["mb_s"], ".2f"),
                fmt(r["cores"], ".2f"),
                fmt(r["others"], ".2f"),
                fmt(r["peak_rss_mb"], ",.0f"),
                fmt(r["ratio"], ".2f"),
            ])
    cells = [line for line in lines if not line[0].startswith("[")]
    widths = [max([len(head[i])] + [len(line[i]) for line in cells]) for i in range(len(head))]
    right = {3, 4, 5, 6, 7, 8, 9}

    def render(row):
        return "  ".join(row[i].rjust(w) if i in right else row[i].ljust(w) for i, w in enumerate(widths))

    out = [render(head), render(["-" * w for w in widths])]
    for line in lines:
        out.append(f"{line[0]} {line[1]}" if line[0].startswith("[") else render(line))
    return "\n".join(out)


def versions() -> dict:
    from importlib import metadata

    out = {}
    for dist in ("bpe-stream", "regex", "lmdb", "tokenizers", "tiktoken", "rustbpe", "matplotlib"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = None
    return out


def machine() -> dict:
    info = {
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        "cpu_count": os.cpu_count(),
        "loadavg_start": os.getloadavg(),
    }
    try:
        with open("/proc/cpuinfo") as f:
            info["cpu"] = next((x.split(":", 1)[1].strip() for x in f if x.startswith("model name")), None)
        with open("/proc/meminfo") as f:
            info["mem_total_mb"] = int(f.readline().split()[1]) * 1024 / MB
    except OSError:
        pass
    return info


def git_state() -> dict:
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "bpe_stream"], cwd=REPO, capture_output=True,
                               text=True).stdout.strip()
        return {"commit": head or None, "bpe_stream_dirty": bool(dirty)}
    except OSError:
        return {}


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--only", action="append", default=[], metavar="NAME",
                   help=f"run only these sections (repeatable or comma-separated): {', '.join(SECTIONS)}")
    p.add_argument("--quick", action="store_true", help="smaller inputs; skips train-large unless named with --only")
    p.add_argument("--repeat", type=int, default=1, help="run each measurement N times and keep the fastest (default 1)")
    p.add_argument("--results", default=str(RESULTS), help="where the JSON and PNGs go (default benchmarks/results)")
    p.add_argument("--tmp", default=None, help="directory for the temporary stores and files (default: the system's)")
    p.add_argument("--keep", action="store_true", help="keep the temporary directory")
    args = p.parse_args(argv)
    chosen = [n.strip() for item in args.only for n in item.split(",") if n.strip()]
    unknown = [n for n in chosen if n not in SECTIONS]
    if unknown:
        p.error(f"unknown section {unknown[0]!r}; choose from {', '.join(SECTIONS)}")
    args.sections = [n for n in SECTIONS if n in chosen] if chosen else list(QUICK_DEFAULT if args.quick else SECTIONS)
    args.skipped = [] if chosen else [n for n in SECTIONS if n not in args.sections]
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    if not DATA.exists():
        say(f"Error: the reference data is not at {DATA}")
        return 1
    ctx = Context(args)
    started = time.perf_counter()
    say(f"bpe-stream benchmarks ({'quick' if args.quick else 'full'}): {', '.join(args.sections)}; "
        f"CLI {' '.join(ctx.bpe)}; temp {ctx.tmp}")
    report = {
        "timestamp": ctx.stamp,
        "argv": sys.argv[1:] if argv is None else list(argv),
        "quick": args.quick,
        "repeat": ctx.repeat,
        "data": str(DATA),
        "machine": machine(),
        "versions": versions(),
        "git": git_state(),
        "sections": {},
    }
    failed = False
    done: Dict[str, Section] = {}
    try:
        for name in SECTIONS:
            if name in args.skipped:
                report["sections"][name] = {"skipped": "skipped with --quick (run it with --only train-large)"}
                continue
            if name not in args.sections:
                continue
            say(f"[{name}] (load average {os.getloadavg()[0]:.2f})")
            t0, load = time.perf_counter(), os.getloadavg()
            try:
                sec = done[name] = RUNNERS[name](ctx)
                report["sections"][name] = dict(sec.finish(), seconds=time.perf_counter() - t0, loadavg_start=load)
            except Exception as exc:  # a broken section is reported; the others still run
                failed = True
                say(f"  [{name}] FAILED: {exc}")
                report["sections"][name] = {"error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()}
    finally:
        ctx.cleanup()
    ctx.results_dir.mkdir(parents=True, exist_ok=True)
    for name, sec in done.items():
        report["sections"][name]["plot"] = sec.draw()
    report["machine"]["loadavg_end"] = os.getloadavg()
    report["total_seconds"] = time.perf_counter() - started
    out = ctx.results_dir / f"bench-{ctx.stamp}.json"
    out.write_text(json.dumps(report, indent=1, default=str) + "\n")
    print()
    print(table(report["sections"]))
    print()
    for name, sec in report["sections"].items():
        for note in sec.get("notes", []):
            print(f"[{name}] {note}")
    plots = [sec["plot"] for sec in report["sections"].values() if sec.get("plot")]
    print("\ntime/bpe = seconds / the section's baseline (*) seconds; cores = the run's CPU s / wall s; "
          "others = cores the rest of the machine kept busy meanwhile (noise); peak RSS = whole process tree.")
    print(f"results: {os.path.relpath(out, Path.cwd())}" + (f"; plots: {', '.join(plots)}" if plots else ""))
    print(f"total {report['total_seconds']:.0f} s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
