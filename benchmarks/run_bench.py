"""``make bench``: time bpe-stream against its peers, in one run, on the reference data.

    .venv/bin/python benchmarks/run_bench.py [--quick] [--only SECTION[,SECTION]] [--repeat N] [--big-count SIZE]

Sections (default: all but ``out-of-core``; ``--quick`` also drops ``train-large`` unless it
is asked for by name, and shrinks the others):

* ``train-small``  count + train (vocab 500) on cs336/corpus.en: the CLI's wall time, the
                   in-library time of ``train_from_store`` and of ``train_bpe`` (the CS336
                   shape, against its reference figure of 0.38 s), rustbpe, HF tokenizers.
* ``count``        ``bpe-stream count`` of en_100M.txt (a 20 MB prefix with --quick) against a
                   bare ``Counter(regex.findall(GPT2, text))`` on one core; then on 20 MB of
                   English, multilingual and code text (5 MB with --quick) ``--workers 1`` and
                   ``2`` against that scan (issue 15: >= 8x and >= 1.7x).
* ``train-large``  count + train at vocab 32,768 on en_100M.txt (a 20 MB prefix with --quick)
                   against HF tokenizers, rustbpe and fast-bpe-rs trained from the same file
                   (issue 15: at most 0.5x the fastest of rustbpe and fast-bpe-rs).
* ``encode``       encode throughput on all of en_100M.txt (10 MB with --quick) of the library
                   (``encode``, ``encode_iterable``) and of the CLI (``--format u32`` and ``txt``,
                   ``--workers 1`` and ``2``, to a file through stdout; its start-up and load on
                   an empty file) against tiktoken, tokie (one thread) and HF tokenizers built
                   from the same vocabulary (the ids are checked to be the same); notes for
                   issues 4 and 15 (CLI with one worker >= 1.0x tokie, >= 2.5x tiktoken).
* ``phases``       issue 36, where the time of count and encode goes: ``count`` and ``encode -f u32``
                   of en_100M.txt (20 MB with --quick) in-process with 1, 2 and (on a larger
                   machine) all workers, each phase timed where it runs (count: read, scan,
                   sort, merge, write, hash; encode: read, encode, write) with its wall and CPU
                   seconds, and the serial fraction: the main thread's CPU over the process's.
* ``cores``        issue 36's acceptance in CLI walls: ``count`` with 1, 2 and all workers on 400 MB
                   of generated text and 200 MB of English (en_100M.txt twice), new stores
                   compared; ``encode -f u32`` of that English (40 MB / 20 MB with --quick).
* ``corpus-gen``   ``benchmarks/gen_corpus.py`` writes 400 MB of seeded web-like text (20 MB
                   with --quick) with 1 and with 2 processes (same bytes?), and the distinct
                   pretokens per MB of 20 MB of it against 20 MB of en_100M.txt.
* ``out-of-core``  issue 14: on 80 MB of generated text (vocab 12,000) and multi_25M.txt
                   (32,000) -- 20 MB and a 5 MB prefix with --quick -- train ``--path memory``,
                   then ``--max-memory`` a quarter of that run's anonymous peak (auto must take
                   the disk path): wall-time ratio (<= 2), anonymous peak against the budget
                   (+ 32 MB), mapped pages beside it, tokenizers compared; the plot has both
                   curves.  ``--ooc-large`` adds 400 MB (vocab 32,000, ``--max-memory 1G``,
                   against rustbpe) and 2 GB (65,536, ``2G``); ``--big-count SIZE`` a ``count
                   --max-memory 512M`` of that much generated text.  Not run unless named.
* ``multi``, ``code``  issue 9: count + train at vocab 32,768 on multi_25M.txt / code_25M.txt
                   (5 MB prefixes with --quick) against HF tokenizers, rustbpe and fast-bpe-rs, by default and
                   with ``count --workers 1`` (one process: the lean run), and the merge
                   loop alone (``train_from_store``) against English of the same size (a prefix
                   of en_100M.txt) and, in a full run, all of en_100M.txt.

The machine is small and shared, so every figure comes with a peer measured in the same
run: the ``time/bpe`` column is the row's seconds divided by those of the section's
baseline row (marked ``*``).  Every run is a separate process (see ``measure.py``); peak
RSS covers its whole process tree, and its anonymous part (``RssAnon``: the memory really
held, without the clean pages of mapped files such as the trainer's LMDB maps) is shown
beside it.  Generated corpora and stores live in a temporary directory.  Results go to
benchmarks/results/bench-<timestamp>.json (fields: benchmarks/results/README.md) with one
RSS-over-time PNG per section.
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
from typing import Callable, Dict, List, Optional, Sequence, Tuple

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
DATA = REPO.parent / "shared" / "data"
RESULTS = HERE / "results"
sys.path.insert(0, str(HERE))

import measure  # noqa: E402
import workloads as W  # noqa: E402
from measure import MB, Measurement, MeasureError  # noqa: E402

SPECIAL = "<|endoftext|>"
SECTIONS = ("train-small", "count", "train-large", "encode", "phases", "cores", "corpus-gen", "out-of-core", "multi", "code",
            "engines")
QUICK_DEFAULT = ("train-small", "count", "encode", "phases", "cores", "corpus-gen", "multi", "code", "engines")
FULL_DEFAULT = ("train-small", "count", "train-large", "encode", "phases", "cores", "corpus-gen", "multi", "code", "engines")
SKIP_REASONS = {  # why a section is left out of a run that did not name it
    "train-large": "skipped with --quick (run it with --only train-large)",
    "out-of-core": "not run by default: it generates and counts gigabytes (run it with --only out-of-core)",
}
CS336_REFERENCE_SECONDS = 0.38  # the CS336 reference train_bpe on corpus.en, vocab 500
PEER_MODULES = {"rustbpe": "rustbpe", "fast-bpe-rs": "fast_bpe_rs", "HF tokenizers": "tokenizers", "tiktoken": "tiktoken",
                "tokie": "tokie"}


def bpe_cli() -> List[str]:
    """The bpe-stream entry point of the interpreter running this script."""
    exe = Path(sys.executable).parent / "bpe-stream"
    if exe.exists():
        return [str(exe)]
    found = shutil.which("bpe-stream")
    if found:
        return [found]
    return [sys.executable, "-c", "from bpe_stream.cli.commands import main; main()"]


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
    peak_anon_mb: Optional[float] = None  # peak of the summed RssAnon (sampled): memory really held
    peak_file_mb: Optional[float] = None  # peak of the summed RssFile + RssShmem (sampled): mapped files, e.g. LMDB
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
        peak_anon_mb=m.tree_peak_anon / MB, peak_file_mb=m.tree_peak_file / MB, run=m.label, **kw,
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
        self._generated: Dict[tuple, Path] = {}  # (bytes, seed) -> a file written by gen_corpus.py
        self.merge_loops: Dict[str, dict] = {}  # text -> {"run", "stats", "section"} of its train_from_store

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

    def generated(self, nbytes: int, seed: int = 1, workers: int = 1) -> Tuple[Path, Optional[Measurement]]:
        """A corpus of about ``nbytes`` from gen_corpus.py in the temporary directory, made
        (and measured) on first use: ``(path, measurement or None when it was made before)``."""
        key = (nbytes, seed)
        path = self._generated.get(key)
        if path is not None and path.exists():
            return path, None
        import gen_corpus as G  # numpy: only the sections that generate text need it

        path = self.tmp / f"generated-seed{seed}-{nbytes / 1e6:.0f}MB.txt"
        m = self.fn(f"gen_corpus {nbytes / 1e6:,.0f} MB (seed {seed}, {workers} process{'es' if workers > 1 else ''})",
                    G.generate, str(path), nbytes, seed, workers=workers)
        self._generated[key] = path
        return path, m

    def forget(self, path: Path) -> None:
        """Deletes a large temporary file (and forgets it was generated)."""
        self._generated = {k: v for k, v in self._generated.items() if v != path}
        self._prefixes = {k: v for k, v in self._prefixes.items() if v != path}
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        elif path.exists():
            path.unlink()

    def stats(self, store: Path) -> dict:
        """``bpe-stream stats --json`` of a store (not timed; ``--top 0`` fails in bpe-stream 0.1.0)."""
        out = subprocess.run([*self.bpe, "stats", "--store", str(store), "--json", "--top", "1"], check=True,
                             capture_output=True, text=True)
        data = json.loads(out.stdout)
        data.pop("top", None)
        return data

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
        self.split_plot = False  # the plot draws anonymous and mapped memory as separate curves

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
        title = (f"{self.name}: anonymous memory (solid) and mapped file pages (dashed) of each run" if self.split_plot
                 else f"{self.name}: RSS of each run's process tree")
        plot = measure.plot_rss(self.runs, str(png), title, split=self.split_plot)
        return os.path.relpath(plot, REPO) if plot else None


def concat(label: str, runs: Sequence[Measurement]) -> Measurement:
    """Runs one after the other as one Measurement (for the plot and the combined row)."""
    samples, parts, offset = [], [], 0.0
    for m in runs:
        samples += [(t + offset, r) for t, r in m.samples]
        parts += [(t + offset, a, f) for t, a, f in m.parts]
        offset += m.wall_s
    first = runs[0]
    out = Measurement(
        label=label, argv=[], returncode=max(m.returncode for m in runs),
        wall_s=sum(m.wall_s for m in runs), seconds=sum(m.seconds for m in runs), cpu_s=sum(m.cpu_s for m in runs),
        tree_peak_rss=max(m.tree_peak_rss for m in runs), vm_hwm=max(m.vm_hwm for m in runs),
        ru_maxrss=max(m.ru_maxrss for m in runs), harness_maxrss=max(m.harness_maxrss for m in runs),
        rusage_children_maxrss=max(m.rusage_children_maxrss for m in runs), samples=samples, parts=parts,
        max_processes=max(m.max_processes for m in runs), stderr_tail=first.stderr_tail,
        tree_peak_pss=max(m.tree_peak_pss for m in runs), others_cpu_s=sum(m.others_cpu_s for m in runs),
        tree_peak_anon=max(m.tree_peak_anon for m in runs), tree_peak_file=max(m.tree_peak_file for m in runs),
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
    count_scaling(ctx, s)
    return s


COUNT_SCALING_BYTES = {False: 20_000_000, True: 5_000_000}
COUNT_SCALING_CORPORA = (("English", "en_100M.txt"), ("multilingual", "multi_25M.txt"), ("code", "code_25M.txt"))


def count_scaling(ctx: Context, s: Section) -> None:
    """Issue 15: on 20 MB of English, multilingual and code text, ``count --workers 1`` at
    least 8x the MB/s of a bare ``Counter(regex.findall(GPT2))``, and ``--workers 2`` at
    least 1.7x ``--workers 1`` (CLI walls, start-up included; the stores compared)."""
    nbytes = COUNT_SCALING_BYTES[ctx.quick]
    s.info.update(scaling_repeats=max(ctx.repeat, 3))
    ctx.min_repeat = 3  # sub-second runs on both sides (regex's too): keep the fastest of 3
    try:
        _count_scaling(ctx, s, nbytes)
    finally:
        ctx.min_repeat = 1


def _count_scaling(ctx: Context, s: Section, nbytes: int) -> None:
    for label, filename in COUNT_SCALING_CORPORA:
        text = ctx.prefix(ctx.data("corpora", filename), nbytes)
        mb = size_mb(text)
        scan = ctx.fn(f"regex scan ({label})", W.regex_scan, str(text))
        regex_row = s.add(row_from(s.name, "regex", f"{label} {mb:.0f} MB: Counter(findall(GPT2)) 1 core", "in-process",
                                   scan, mb, extra=scan.result), scan)
        rows = {}
        for workers in (1, 2):
            store = ctx.tmp / f"count-{label}-w{workers}"
            m = ctx.cmd(f"bpe-stream count -w {workers} ({label})",
                        [*ctx.bpe, "count", "--workers", workers, "--store", store, "--special-token", SPECIAL, text],
                        setup=fresh(store))
            rows[workers] = s.add(row_from(s.name, "bpe-stream", f"{label} {mb:.0f} MB: count --workers {workers}", "CLI wall",
                                           m, mb, extra=parse_count_summary(m.stderr_tail)), m)
        count_floor(ctx, s, label, text, regex_row)
        same = W.stores_equal(str(ctx.tmp / f"count-{label}-w1"), str(ctx.tmp / f"count-{label}-w2"))
        one, two = rows[1], rows[2]
        r1, r2 = one.mb_s / regex_row.mb_s, one.seconds / two.seconds
        s.info.setdefault("issue15_count", {})[label] = {"w1_over_regex": r1, "w2_over_w1": r2, "same_store": same}
        s.note(f"issue 15, {label}: count -w1 {one.mb_s:.2f} MB/s vs regex {regex_row.mb_s:.2f} MB/s: x{r1:.2f} "
               f"(target >= 8: {'met' if r1 >= 8 else 'NOT met'}); -w2 {two.mb_s:.2f} MB/s = x{r2:.2f} of -w1 "
               f"(target >= 1.7: {'met' if r2 >= 1.7 else 'NOT met'}); stores of -w1 and -w2 identical: {same}")


def count_floor(ctx: Context, s: Section, label: str, text: Path, regex_row: Row) -> None:
    """What a count spends besides scanning and counting, against the time ``-w1`` may take
    to be 8x regex: the CLI's start-up (a count of an empty file into a new store: Python,
    typer and our imports, LMDB's open and a synced commit) and the store write of this
    text's pretokens (``W.store_write``: a bytes object per key, py-lmdb's ``putmulti``)."""
    if "startup" not in s.info:
        empty, store = ctx.tmp / "empty.txt", ctx.tmp / "count-empty"
        empty.write_bytes(b"")
        m = ctx.cmd("bpe-stream count (empty file)", [*ctx.bpe, "count", "--store", store, empty], setup=fresh(store))
        s.add(row_from(s.name, "bpe-stream", "count of an empty file (start-up)", "CLI wall", m, 0.0), m)
        s.info["startup"] = m.seconds
    write = ctx.fn(f"store write ({label})", W.store_write, str(text), str(ctx.tmp))
    s.add(row_from(s.name, "bpe-stream", f"{label}: store write of its {write.result['keys']:,} pretokens", "in-process",
                   write, size_mb(text), extra=write.result), write)
    allowed = regex_row.seconds / 8
    floor = s.info["startup"] + write.seconds
    s.info.setdefault("issue15_floor", {})[label] = {"allowed": allowed, "startup": s.info["startup"],
                                                     "store_write": write.seconds}
    s.note(f"issue 15, {label}: at 8x regex the whole -w1 count may take {allowed:.3f} s; start-up "
           f"{s.info['startup']:.3f} s + store write {write.seconds:.3f} s = {floor:.3f} s "
           f"({floor / allowed:.0%} of it) before a byte is scanned")


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
    s.peer("fast-bpe-rs", "train from documents", "process wall", mb,
           lambda: ctx.fn("fast-bpe-rs train", W.fast_bpe_train, str(text), vocab, [SPECIAL]))
    # peers: compare process walls (start-up + import + read + train), like the CLI's
    for r in s.rows:
        if r.tool != "bpe-stream" and r.wall_s:
            r.extra["in_process_seconds"] = r.seconds
            r.seconds = r.wall_s
    half_of_fastest(s, s.rows[2])
    return s


def half_of_fastest(s: Section, mine: Row) -> None:
    """Issue 15: count + train at most 0.5x the wall time of the fastest of rustbpe and
    fast-bpe-rs on the same file, with peak RSS beside."""
    rivals = [r for r in s.rows if r.tool in ("rustbpe", "fast-bpe-rs") and r.seconds and not r.error]
    if not rivals or not mine.seconds:
        s.note("issue 15: no rustbpe / fast-bpe-rs row to compare count + train with")
        return
    best = min(rivals, key=lambda r: r.seconds)
    ratio = mine.seconds / best.seconds
    s.info.update(issue15_train_ratio=ratio)
    s.note(f"issue 15: {mine.phase} {mine.seconds:.2f} s ({fmt(mine.peak_rss_mb, ',.0f')} MB peak, "
           f"{fmt(mine.peak_anon_mb, ',.0f')} MB anonymous) vs the fastest peer {best.tool} {best.seconds:.2f} s "
           f"({fmt(best.peak_rss_mb, ',.0f')} MB): x{ratio:.2f} (target <= 0.5: {'met' if ratio <= 0.5 else 'NOT met'})")


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


ENCODE_BYTES = {False: None, True: 10_000_000}  # issue 4: all of en_100M.txt (a 10 MB prefix with --quick)
CLI_ENCODE_RUNS = (("u32", 1), ("u32", 2), ("txt", 1), ("txt", 2))  # (--format, --workers)


def ids_file_digest(path: Path, fmt: str) -> Tuple[str, int, int]:
    """SHA-256 of the ids in an ``encode`` output as little-endian uint32 (for ``u32`` the
    file's own digest), how many ids, how many lines (``txt``); streamed, the harness stays small."""
    import hashlib
    from array import array

    h, n, lines, carry = hashlib.sha256(), 0, 0, b""
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            if fmt == "u32":
                h.update(block)
                n += len(block) // 4
                continue
            lines += block.count(b"\n")
            data = carry + block
            parts = data.split()
            carry = parts.pop() if parts and not data[-1:].isspace() else b""
            ids = array("I", map(int, parts))
            if sys.byteorder != "little":
                ids.byteswap()
            h.update(ids.tobytes())
            n += len(ids)
    if carry:
        ids = array("I", [int(carry)])
        if sys.byteorder != "little":
            ids.byteswap()
        h.update(ids.tobytes())
        n += 1
    return h.hexdigest(), n, lines


def section_encode(ctx: Context) -> Section:
    s = Section(ctx, "encode", "encode throughput with a 32,768 tokenizer: the library, the CLI with 1 and 2 workers "
                               "(txt and u32 to a file through stdout), tiktoken and HF with the same vocabulary")
    source = ctx.data("corpora", "en_100M.txt")
    nbytes = ENCODE_BYTES[ctx.quick]
    text = ctx.prefix(source, nbytes) if nbytes else source
    mb = size_mb(text)
    s.info.update(text=str(text), mb=mb)
    tok = encode_tokenizer(ctx, s, text)

    lib = ctx.fn("bpe-stream Tokenizer.encode", W.bpe_encode, str(tok), str(text), "encode")
    s.add(row_from(s.name, "bpe-stream", "Tokenizer.encode(text)", "in-process", lib, mb, baseline=True, extra=lib.result), lib)
    want = lib.result["digest"]
    it = ctx.fn("bpe-stream encode_iterable", W.bpe_encode, str(tok), str(text), "iterable")
    s.add(row_from(s.name, "bpe-stream", "encode_iterable(lines of file)", "in-process", it, mb, extra=it.result), it)
    empty = ctx.tmp / "empty.txt"
    empty.write_bytes(b"")
    start = ctx.cmd("bpe-stream encode of an empty file", [*ctx.bpe, "encode", "-t", tok, empty])
    s.add(row_from(s.name, "bpe-stream", "encode of an empty file: start-up, imports, load (CLI)", "CLI wall", start, None), start)
    cli = {}
    for fmt, workers in CLI_ENCODE_RUNS:
        out = ctx.tmp / f"encode-w{workers}.{fmt}"
        m = ctx.cmd(f"bpe-stream encode -f {fmt} -w {workers} (CLI)",
                    [*ctx.bpe, "encode", "-t", tok, "--format", fmt, "--workers", str(workers), text], stdout=str(out))
        digest, tokens, lines = ids_file_digest(out, fmt)
        out.unlink()
        extra = {"digest": digest, "tokens": tokens, **({"lines": lines} if fmt == "txt" else {})}
        cli[(fmt, workers)] = s.add(row_from(s.name, "bpe-stream", f"encode --format {fmt} --workers {workers} (CLI)",
                                             "CLI wall", m, mb, extra=extra), m)
    tt = s.peer("tiktoken", "encode, 1 thread", "in-process", mb,
                lambda: ctx.fn("tiktoken encode", W.tiktoken_encode, str(tok), str(text)))
    one = {"RAYON_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    tk = s.peer("tokie", "encode, 1 thread", "in-process", mb,
                lambda: ctx.fn("tokie encode (1 thread)", W.tokie_encode, str(tok), str(text), str(ctx.tmp), env=one))
    s.peer("HF tokenizers", "encode per document, 1 thread", "in-process", mb,
           lambda: ctx.fn("HF encode (1 thread)", W.hf_encode, str(tok), str(text), False, env=one))
    hf = s.peer("HF tokenizers", f"encode_batch, {os.cpu_count()} threads", "in-process", mb,
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
    encode_notes(s, lib, start, cli, tt, hf)
    encode_targets(s, cli, tt, tk)
    return s


def encode_targets(s: Section, cli: dict, tt: Optional[Row], tk: Optional[Row]) -> None:
    """Issue 15: the CLI with one worker (its whole wall: start-up, load, read, write) at
    least 1.0x tokie's MB/s on one core and 2.5x tiktoken's; two workers faster than one."""
    for form in ("u32", "txt"):
        one, two = cli[(form, 1)], cli[(form, 2)]
        for peer, target in ((tk, 1.0), (tt, 2.5)):
            if peer is None or not peer.seconds:
                continue
            ratio = one.mb_s / peer.mb_s
            s.note(f"issue 15: CLI --format {form} --workers 1 {one.mb_s:.2f} MB/s vs {peer.tool} one thread "
                   f"{peer.mb_s:.2f} MB/s: x{ratio:.2f} (target >= {target}: {'met' if ratio >= target else 'NOT met'})")
        s.note(f"issue 15: CLI --format {form} --workers 2 / --workers 1 = x{one.seconds / two.seconds:.2f} "
               f"(target > 1: {'met' if two.seconds < one.seconds else 'NOT met'})")


def encode_notes(s: Section, lib: Measurement, start: Measurement, cli: dict, tt: Optional[Row], hf: Optional[Row]) -> None:
    """The CLI's overhead over the library, the speed-up of a second worker, and issue 4's
    acceptance: the CLI with every core against HF on the same cores, and per core against
    half of tiktoken's one thread."""
    for form in ("u32", "txt"):
        one, two = cli[(form, 1)], cli[(form, 2)]
        over = one.seconds - lib.seconds - start.seconds
        s.note(f"CLI --format {form}, 1 worker: {one.seconds:.2f} s = library {lib.seconds:.2f} s + start-up/load "
               f"{start.seconds:.2f} s {'+' if over >= 0 else '-'} {abs(over):.2f} s of reading, cutting, formatting and writing")
        s.note(f"CLI --format {form}: 2 workers are {one.seconds / two.seconds:.2f}x as fast as 1 "
               f"({two.mb_s:.2f} vs {one.mb_s:.2f} MB/s)")
    cores = os.cpu_count() or 1
    best = min((cli[(form, 2)] for form in ("u32", "txt")), key=lambda r: r.seconds)
    if hf is not None and hf.seconds:
        for form in ("u32", "txt"):
            r = cli[(form, 2)]
            s.note(f"issue 4: CLI --format {form} --workers 2 {r.mb_s:.2f} MB/s vs HF encode_batch on {cores} threads "
                   f"{hf.mb_s:.2f} MB/s: {'met' if r.mb_s >= hf.mb_s else 'NOT met'} ({r.mb_s / hf.mb_s:.2f}x)")
    if tt is not None and tt.seconds:
        per_core = best.mb_s / cores
        # per CPU-second too: unlike the wall time, it does not depend on what else the machine runs
        per_cpu = s.info["mb"] / best.cpu_s if best.cpu_s else None
        s.note(f"issue 4: per core, CLI {best.phase} {per_core:.2f} MB/s of wall time on {cores} cores "
               f"({fmt(per_cpu, '.2f')} MB per CPU-second) vs half of tiktoken's one thread {tt.mb_s / 2:.2f} MB/s: "
               f"{'met' if max(per_core, per_cpu or 0) >= tt.mb_s / 2 else 'NOT met'}; "
               f"library Tokenizer.encode {s.info['mb'] / lib.seconds:.2f} MB/s on one core")


# -- generated corpora, out-of-core training, multilingual and code -------------------------
GEN_BYTES = {False: 400_000_000, True: 20_000_000}  # corpus-gen's output = out-of-core's corpus
SCAN_BYTES = 20_000_000  # distinct pretokens per MB: a regex scan of this much text
DISTINCT_TARGET = 5_000_000  # issue 3: the out-of-core corpus holds at least this many distinct pretokens
OOC_COUNT_BUDGET = "512M"
COUNT_RSS_TARGET_MB = 600
PEER_VOCAB = 32768  # issue 9: multi and code against the peers
MULTI_PREFIX_QUICK = 5_000_000
MERGE_LOOP_TARGET = 3.0  # issue 9: the merge loop on multi_25M within 3x of English of the same size


def parse_train_messages(stderr: str) -> dict:
    """bpe-stream train's stderr -> the path it took and why, and what it learned."""
    out: dict = {}
    m = re.search(r"training (in memory|with the sequence table on disk) \(([\d,]+) distinct pretokens, ([\d,]+) symbols; "
                  r"([^\n]*)\)", stderr)
    if m:
        out.update(path="memory" if m.group(1) == "in memory" else "disk", distinct=int(m.group(2).replace(",", "")),
                   symbols=int(m.group(3).replace(",", "")), reason=m.group(4))
    m = re.search(r"learned ([\d,]+) merges \(last pair count ([\d,]+)\); vocabulary ([\d,]+)", stderr)
    if m:
        out.update(merges=int(m.group(1).replace(",", "")), last_pair_count=int(m.group(2).replace(",", "")),
                   vocab_size=int(m.group(3).replace(",", "")))
    return out


def mem_available() -> int:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 4 << 30


def same_file(a: Path, b: Path) -> bool:
    if not (a.exists() and b.exists()) or a.stat().st_size != b.stat().st_size:
        return False
    return W.file_digest(str(a)) == W.file_digest(str(b))


def anon_note(r: Row) -> str:
    return (f"peak RSS {fmt(r.peak_rss_mb, ',.0f')} MB = anonymous {fmt(r.peak_anon_mb, ',.0f')} MB + mapped files "
            f"{fmt(r.peak_file_mb, ',.0f')} MB at their own peaks")


def section_corpus_gen(ctx: Context) -> Section:
    s = Section(ctx, "corpus-gen", "benchmarks/gen_corpus.py: seeded web-like text (Zipf English words, a long tail of "
                "identifiers, numbers, hex ids, URLs and CJK runs): speed, determinism, distinct pretokens per MB")
    import gen_corpus as G

    nbytes = GEN_BYTES[ctx.quick]
    path = ctx.tmp / f"generated-seed1-{nbytes / 1e6:.0f}MB.txt"
    s.info.update(bytes=nbytes, seed=1, tail_rate=0.1, output=str(path))
    one = ctx.fn("gen_corpus, 1 process", G.generate, str(path), nbytes, 1, workers=1)
    ctx._generated[(nbytes, 1)] = path
    mb = one.result["bytes"] / MB
    digest = W.file_digest(str(path))
    s.add(row_from(s.name, "gen_corpus", "generate + write, 1 process", "in-process", one, mb, baseline=True,
                   extra=dict(one.result, sha256=digest)), one)
    check = ctx.tmp / "generated-check.txt"
    two = ctx.fn("gen_corpus, 2 processes", G.generate, str(check), nbytes, 1, workers=2)
    same = W.file_digest(str(check)) == digest
    ctx.forget(check)
    s.add(row_from(s.name, "gen_corpus", "generate + write, 2 processes", "in-process", two, mb,
                   extra=dict(two.result, same_bytes_as_baseline=same)), two)
    s.note(f"deterministic: seed 1 with 2 processes wrote {'the same bytes' if same else 'DIFFERENT bytes'} as with 1 "
           f"(SHA-256 {digest[:16]}...); {one.result['documents']:,} documents, vocabulary of "
           f"{one.result['vocabulary_words']:,} English words ({one.result['vocabulary_seconds']:.1f} s to build, not timed)")
    per_cpu = one.result.get("mb_per_cpu_second") or 0
    s.note(f"speed: {mb / one.seconds:.1f} MB/s wall with 1 process ({per_cpu:.1f} MB per CPU-second), "
           f"{mb / two.seconds:.1f} MB/s with 2 (target > 30 MB/s; others kept {one.others_cores:.2f} cores busy)")
    # distinct pretokens per MB: the generated text against real English of the same size;
    # half of it too, for the rate at which new ones keep coming
    sample = path if nbytes <= SCAN_BYTES else ctx.prefix(path, SCAN_BYTES)
    half = ctx.prefix(path, SCAN_BYTES // 2)
    scan = ctx.fn("regex scan (generated)", W.regex_scan, str(sample))
    s.add(row_from(s.name, "regex", "Counter(findall(GPT2)) of the generated text", "in-process", scan, size_mb(sample),
                   extra=scan.result), scan)
    scan_half = ctx.fn("regex scan (generated, half)", W.regex_scan, str(half))
    s.add(row_from(s.name, "regex", "Counter(findall(GPT2)) of its first half", "in-process", scan_half, size_mb(half),
                   extra=scan_half.result), scan_half)
    english = ctx.prefix(ctx.data("corpora", "en_100M.txt"), SCAN_BYTES)
    ref = ctx.fn("regex scan (en_100M prefix)", W.regex_scan, str(english))
    s.add(row_from(s.name, "regex", "Counter(findall(GPT2)) of en_100M (same size)", "in-process", ref, size_mb(english),
                   extra=ref.result), ref)
    gen_per_mb = scan.result["unique"] / size_mb(sample)
    en_per_mb = ref.result["unique"] / size_mb(english)
    # new distinct pretokens per further MB (the long tail is mostly unique, so this rate holds)
    marginal = (scan.result["unique"] - scan_half.result["unique"]) / (size_mb(sample) - size_mb(half))
    need_mb = size_mb(sample) + max(0, DISTINCT_TARGET - scan.result["unique"]) / marginal if marginal > 0 else None
    s.info.update(distinct_per_mb=gen_per_mb, english_distinct_per_mb=en_per_mb, new_distinct_per_further_mb=marginal,
                  mb_for_distinct_target=need_mb)
    s.note(f"distinct pretokens in {size_mb(sample):.0f} MB: generated {scan.result['unique']:,} ({gen_per_mb:,.0f}/MB), "
           f"en_100M {ref.result['unique']:,} ({en_per_mb:,.0f}/MB); the generated text's second half added "
           f"{marginal:,.0f}/MB, so about {fmt(need_mb, ',.0f')} MB hold {DISTINCT_TARGET / 1e6:.0f} million "
           f"(out-of-core counts {GEN_BYTES[False] / 1e6:,.0f} MB exactly)")
    return s


# issue 14: (label, corpus, vocabulary) trained in memory and at a quarter of that run's
# anonymous peak; --ooc-large adds (bytes generated, vocabulary, budget, against rustbpe)
OOC_RUNS = {False: (("generated 80 MB", ("generated", 80_000_000), 12_000), ("multi_25M", ("file", "multi_25M.txt"), 32_000)),
            True: (("generated 20 MB", ("generated", 20_000_000), 12_000), ("multi_25M 5 MB", ("prefix", "multi_25M.txt"), 8_000))}
OOC_LARGE = ((400_000_000, 32_000, "1G", True), (2_000_000_000, 65_536, "2G", False))
OOC_SLACK_MB = 32  # the anonymous peak may pass the budget by this much (issue 14)


def section_out_of_core(ctx: Context) -> Section:
    s = Section(ctx, "out-of-core", "issue 14: train in memory, then with the merge loop's tables in a scratch file on disk "
                "at a quarter of the in-memory run's anonymous peak; time, anonymous and mapped memory, same tokenizer")
    s.split_plot = True
    for label, (kind, what), vocab in OOC_RUNS[ctx.quick]:
        if kind == "generated":
            text, gen = ctx.generated(what, seed=1)
            if gen is not None:
                s.add(row_from(s.name, "gen_corpus", f"generate {label} (setup)", "in-process", gen,
                               gen.result["bytes"] / MB, extra=gen.result), gen)
        elif kind == "prefix":
            text = ctx.prefix(ctx.data("corpora", what), MULTI_PREFIX_QUICK)
        else:
            text = ctx.data("corpora", what)
        out_of_core_pair(ctx, s, label, text, vocab)
    if ctx.args.ooc_large:
        for nbytes, vocab, budget, against_rustbpe in OOC_LARGE:
            out_of_core_large(ctx, s, nbytes, vocab, budget, against_rustbpe)
    else:
        s.note("--ooc-large not given: the 400 MB (vocab 32,000, --max-memory 1G, against rustbpe) and 2 GB (vocab 65,536, "
               "--max-memory 2G) runs are left out")
    if ctx.args.big_count:
        big_count(ctx, s, parse_size(ctx.args.big_count))
    return s


def ooc_count(ctx: Context, s: Section, label: str, text: Path) -> Path:
    store = ctx.tmp / f"ooc-store-{re.sub(r'[^A-Za-z0-9]+', '-', label)}"
    count = ctx.cmd(f"bpe-stream count ({label})", [*ctx.bpe, "count", "--store", store, "--special-token", SPECIAL, text],
                    setup=fresh(store))
    s.add(row_from(s.name, "bpe-stream", f"{label}: count", "CLI wall", count, size_mb(text),
                   extra=parse_count_summary(count.stderr_tail)), count)
    return store


def budget_note(r: Row, budget_mb: float) -> str:
    anon = r.peak_anon_mb or 0
    return (f"anonymous peak {anon:,.0f} MB vs budget {budget_mb:,.0f} MB + {OOC_SLACK_MB} MB: "
            + ("met" if anon <= budget_mb + OOC_SLACK_MB else "NOT met")
            + f"; mapped file pages beside it {fmt(r.peak_file_mb, ',.0f')} MB")


def out_of_core_pair(ctx: Context, s: Section, label: str, text: Path, vocab: int) -> None:
    """In memory, then --max-memory a quarter of its anonymous peak (auto must take the
    disk path), on the same store: the ratio of their times, the budget, the files."""
    mb = size_mb(text)
    store = ooc_count(ctx, s, label, text)
    mem_out, disk_out = ctx.tmp / f"ooc-{label}-memory.json", ctx.tmp / f"ooc-{label}-disk.json"
    mem = ctx.cmd(f"bpe-stream train --path memory ({label})", [*ctx.bpe, "train", "--store", store, "--vocab-size", vocab,
                  "-o", mem_out, "--path", "memory"])
    mem_row = s.add(row_from(s.name, "bpe-stream", f"{label}: train --path memory, vocab {vocab:,}", "CLI wall", mem, mb,
                             baseline=not any(r.baseline for r in s.rows), extra=parse_train_messages(mem.stderr_tail)), mem)
    budget = int((mem_row.peak_anon_mb or mem_row.peak_rss_mb) * MB / 4)  # bytes: --max-memory takes them as they are
    budget_mb = budget / MB
    disk = ctx.cmd(f"bpe-stream train --max-memory {budget} ({label})",
                   [*ctx.bpe, "train", "--store", store, "--vocab-size", vocab, "-o", disk_out, "--max-memory", budget])
    took = parse_train_messages(disk.stderr_tail)
    disk_row = s.add(row_from(s.name, "bpe-stream", f"{label}: train --max-memory {budget_mb:,.0f} MB "
                              f"(auto: {took.get('path', '?')})", "CLI wall", disk, mb, extra=took), disk)
    identical = same_file(mem_out, disk_out)
    ratio = disk_row.seconds / mem_row.seconds
    s.info.setdefault("pairs", {})[label] = {
        "memory_seconds": mem_row.seconds, "disk_seconds": disk_row.seconds, "ratio": ratio, "budget_mb": budget_mb,
        "memory_peak_anon_mb": mem_row.peak_anon_mb, "disk_peak_anon_mb": disk_row.peak_anon_mb,
        "disk_peak_file_mb": disk_row.peak_file_mb, "path": took.get("path"), "identical": identical,
    }
    s.note(f"{label}: --max-memory {budget_mb:,.0f} MB (a quarter of the in-memory anonymous peak {fmt(mem_row.peak_anon_mb, ',.0f')} MB) "
           f"took the {took.get('path', 'UNKNOWN')} path; disk / memory wall time {disk_row.seconds:,.1f} / "
           f"{mem_row.seconds:,.1f} s = x{ratio:.2f} (target <= 2: {'met' if ratio <= 2 else 'NOT met'}); "
           f"{budget_note(disk_row, budget_mb)}; tokenizers " + ("byte-identical" if identical else "DIFFER"))
    ctx.forget(store)


def out_of_core_large(ctx: Context, s: Section, nbytes: int, vocab: int, budget: str, against_rustbpe: bool) -> None:
    """Generated text of ``nbytes`` trained with ``--max-memory budget`` (and rustbpe on the
    same file): wall time, anonymous and mapped peaks."""
    label = f"generated {nbytes / 1e6:,.0f} MB"
    text, gen = ctx.generated(nbytes, seed=3)
    if gen is not None:
        s.add(row_from(s.name, "gen_corpus", f"generate {label} (setup)", "in-process", gen, gen.result["bytes"] / MB,
                       extra=gen.result), gen)
    mb = size_mb(text)
    store = ooc_count(ctx, s, label, text)
    out = ctx.tmp / f"ooc-large-{vocab}.json"
    m = ctx.cmd(f"bpe-stream train --max-memory {budget} ({label})",
                [*ctx.bpe, "train", "--store", store, "--vocab-size", vocab, "-o", out, "--max-memory", budget], check=False)
    took = parse_train_messages(m.stderr_tail)
    error = None if m.ok else f"exit status {m.returncode}: {m.stderr_tail.strip()[-500:]}"
    row = s.add(row_from(s.name, "bpe-stream", f"{label}: train --max-memory {budget}, vocab {vocab:,} "
                         f"(auto: {took.get('path', '?')})", "CLI wall", m, mb, extra=took, error=error), m)
    budget_mb = (int(budget[:-1]) << 30) / MB  # "1G", "2G": binary units, as bpe-stream reads them
    s.note(f"{label}, vocab {vocab:,}, --max-memory {budget}: {row.seconds:,.1f} s wall, peak RSS {fmt(row.peak_rss_mb, ',.0f')} "
           f"MB; {budget_note(row, budget_mb)}")
    if against_rustbpe:
        peer = s.peer("rustbpe", f"{label}: train from documents, vocab {vocab:,}", "process wall", mb,
                      lambda: ctx.fn("rustbpe train (large)", W.rustbpe_train, str(text), vocab, [SPECIAL]))
        if peer is not None and peer.seconds and row.seconds:
            peer.seconds = peer.wall_s or peer.seconds
            s.note(f"{label}: bpe-stream --max-memory {budget} {row.seconds:,.1f} s ({fmt(row.peak_anon_mb, ',.0f')} MB "
                   f"anonymous, {fmt(row.peak_rss_mb, ',.0f')} MB total) vs rustbpe {peer.seconds:,.1f} s "
                   f"({fmt(peer.peak_anon_mb, ',.0f')} MB anonymous, {fmt(peer.peak_rss_mb, ',.0f')} MB total): "
                   f"{'faster: met' if row.seconds < peer.seconds else 'NOT faster'}")
    ctx.forget(store)
    ctx.forget(text)


def big_count(ctx: Context, s: Section, big_bytes: int) -> None:
    """count --max-memory 512M of a big generated input (issue 3)."""
    big, gen = ctx.generated(big_bytes, seed=2)
    if gen is not None:
        s.add(row_from(s.name, "gen_corpus", "generate the count input (seed 2, setup)", "in-process", gen,
                       gen.result["bytes"] / MB, extra=gen.result), gen)
    big_store = ctx.tmp / "ooc-big-store"
    phase = f"count --max-memory {OOC_COUNT_BUDGET}"
    bc = ctx.cmd(f"bpe-stream {phase}", [*ctx.bpe, "count", "--max-memory", OOC_COUNT_BUDGET, "--store", big_store,
                 "--special-token", SPECIAL, big], setup=fresh(big_store), check=False)
    big_summary = parse_count_summary(bc.stderr_tail)
    error = None if bc.ok else f"exit status {bc.returncode} after {bc.wall_s:,.0f} s: {bc.stderr_tail.strip()[-1000:]}"
    big_row = s.add(row_from(s.name, "bpe-stream", phase, "CLI wall", bc, size_mb(big), extra=big_summary, error=error), bc)
    s.note(f"{phase} of {size_mb(big):,.0f} MB: "
           + (f"{big_row.mb_s:.2f} MB/s, {big_summary.get('new_unique', 0):,} distinct pretokens, " if bc.ok
              else f"FAILED (exit status {bc.returncode}) after {bc.wall_s:,.0f} s; until then ")
           + f"{anon_note(big_row)}; target < {COUNT_RSS_TARGET_MB} MB: "
           + ("met" if big_row.peak_rss_mb < COUNT_RSS_TARGET_MB else "NOT met"))
    ctx.forget(big)
    ctx.forget(big_store)


def parse_size(text: str) -> int:
    """``512M``, ``5G``, ``200000000`` -> bytes (powers of 1000, like the MB of the tables)."""
    m = re.fullmatch(r"\s*([\d.]+)\s*([kKmMgGtT]?)[bB]?\s*", str(text))
    if not m:
        raise ValueError(f"not a size: {text!r} (use e.g. 200M or 5G)")
    return int(float(m.group(1)) * 1000 ** " KMGT".index(m.group(2).upper() or " "))


def merge_loop(ctx: Context, s: Section, name: str, text: Path) -> Row:
    """The in-library merge loop (``train_from_store``, vocab PEER_VOCAB) on ``text``'s
    store: counted here untimed, or the count section's store of the same text; measured
    once per run and shared between sections."""
    key = str(text)
    if key not in ctx.merge_loops:
        if ctx.count_store and str(ctx.count_store[0]) == key and ctx.count_store[1].exists():
            store = ctx.count_store[1]
        else:
            store = ctx.tmp / f"merge-loop-store-{len(ctx.merge_loops)}"
            shutil.rmtree(store, ignore_errors=True)
            say(f"  setup: counting {text.name} (not timed) ...")
            subprocess.run([*ctx.bpe, "count", "--quiet", "--store", str(store), "--special-token", SPECIAL, str(text)],
                           check=True)
        # BPE_STREAM_DEBUG: the C loop reports its set-up and merge times and how many
        # occurrences it visited and merged -- the work the data asks of any trainer whose
        # cost follows occurrences (issue 9, scope 1).
        m = ctx.fn(f"train_from_store ({name})", W.bpe_train_from_store, str(store), PEER_VOCAB,
                   env={"BPE_STREAM_DEBUG": "1"})
        st = ctx.stats(store)
        stats = {k: st[k] for k in ("unique_pretokens", "unique_pretokens_bytes", "pretokens", "bytes")}
        found = re.search(r"merge loop: init ([\d.]+) s, merges ([\d.]+) s, (\d+) occurrences visited, (\d+) merged",
                          m.stderr_tail)
        if found:
            stats.update(loop_setup_seconds=float(found.group(1)), loop_merge_seconds=float(found.group(2)),
                         occurrences_visited=int(found.group(3)), occurrences_merged=int(found.group(4)))
        ctx.merge_loops[key] = {"run": m, "stats": stats, "section": s.name}
    got = ctx.merge_loops[key]
    m = got["run"]
    extra = dict(m.result, **got["stats"])
    if got["section"] != s.name:
        extra["measured_in_section"] = got["section"]
    return s.add(row_from(s.name, "bpe-stream", f"merge loop: train_from_store on {name}", "in-process", m, size_mb(text),
                          extra=extra), m)


def section_peers(ctx: Context, name: str, filename: str) -> Section:
    """count + train at vocab 32,768 against HF tokenizers and rustbpe on one corpus, and
    the merge loop alone against English of the same size (and the whole en_100M)."""
    source = ctx.data("corpora", filename)
    text = ctx.prefix(source, MULTI_PREFIX_QUICK) if ctx.quick else source
    mb = size_mb(text)
    s = Section(ctx, name, f"issue 9: count + train vocab {PEER_VOCAB:,} on {text.name} against HF tokenizers and rustbpe; "
                "the merge loop alone against English of the same size")
    store = ctx.tmp / f"{name}-store"
    out = ctx.tmp / f"{name}-tokenizer-{PEER_VOCAB}.json"
    s.info.update(text=str(text), mb=mb, vocab_size=PEER_VOCAB)
    count = ctx.cmd("bpe-stream count", [*ctx.bpe, "count", "--store", store, "--special-token", SPECIAL, text],
                    setup=fresh(store))
    train = ctx.cmd("bpe-stream train", [*ctx.bpe, "train", "--store", store, "--vocab-size", PEER_VOCAB, "-o", out])
    both = concat("bpe-stream count + train", [count, train])
    s.add(row_from(s.name, "bpe-stream", "count", "CLI wall", count, mb, extra=parse_count_summary(count.stderr_tail)), count)
    s.add(row_from(s.name, "bpe-stream", "train", "CLI wall", train, mb, extra=parse_train_messages(train.stderr_tail)), train)
    s.add(row_from(s.name, "bpe-stream", "count + train", "CLI wall", both, mb, baseline=True))
    s.runs = [both]  # the plot shows count and train one after the other, as one line
    s.peer("HF tokenizers", "train from file", "process wall", mb,
           lambda: ctx.fn("HF train", W.hf_train, [str(text)], PEER_VOCAB, [SPECIAL]))
    s.peer("rustbpe", "train from documents", "process wall", mb,
           lambda: ctx.fn("rustbpe train", W.rustbpe_train, str(text), PEER_VOCAB, [SPECIAL]))
    s.peer("fast-bpe-rs", "train from documents", "process wall", mb,
           lambda: ctx.fn("fast-bpe-rs train", W.fast_bpe_train, str(text), PEER_VOCAB, [SPECIAL]))
    for r in s.rows:  # peers: process walls (start-up + import + read + train), like the CLI's
        if r.tool != "bpe-stream" and r.wall_s:
            r.extra["in_process_seconds"] = r.seconds
            r.seconds = r.wall_s
    base, peers = s.rows[2], [r for r in s.rows[3:] if r.seconds]
    half_of_fastest(s, base)
    # The lean run: count in one process (--workers 1), whose peak RSS is not the sum of a
    # pool of forked interpreters; train the same.
    lean_store = ctx.tmp / f"{name}-store-1w"
    count1 = ctx.cmd("bpe-stream count --workers 1", [*ctx.bpe, "count", "--workers", 1, "--store", lean_store,
                                                      "--special-token", SPECIAL, text], setup=fresh(lean_store))
    train1 = ctx.cmd("bpe-stream train (store of count --workers 1)",
                     [*ctx.bpe, "train", "--store", lean_store, "--vocab-size", PEER_VOCAB, "-o", out.with_suffix(".1w.json")])
    lean = concat("bpe-stream count --workers 1 + train", [count1, train1])
    s.add(row_from(s.name, "bpe-stream", "count --workers 1", "CLI wall", count1, mb,
                   extra=parse_count_summary(count1.stderr_tail)))
    s.add(row_from(s.name, "bpe-stream", "count --workers 1 + train", "CLI wall", lean, mb), lean)
    s.info.update(same_tokenizer_with_one_worker=same_file(out, out.with_suffix(".1w.json")))
    for mine in (base, s.rows[-1]):
        for r in peers:
            s.note(f"bpe-stream {mine.phase} {mine.seconds:,.1f} s, {mine.peak_rss_mb:,.0f} MB peak RSS; {r.tool} "
                   f"{r.seconds:,.1f} s, {fmt(r.peak_rss_mb, ',.0f')} MB: bpe-stream / {r.tool} = x{mine.seconds / r.seconds:.2f} "
                   f"in time, x{mine.peak_rss_mb / r.peak_rss_mb:.2f} in peak RSS ({r.extra.get('merges', '?'):,} merges)")
    s.note(f"tokenizer from the store of count --workers 1 identical to the default count's: "
           f"{s.info['same_tokenizer_with_one_worker']}")
    # the merge loop alone: this corpus against English of the same size (and all of en_100M)
    own = merge_loop(ctx, s, text.name, text)
    english_source = ctx.data("corpora", "en_100M.txt")
    english = ctx.prefix(english_source, max(1, round(mb)) * 1_000_000)  # whole MB: multi and code share it
    en = merge_loop(ctx, s, f"{english.name} (same size)", english)
    ratio = own.seconds / en.seconds
    s.info.update(merge_loop_seconds=own.seconds, english_merge_loop_seconds=en.seconds, merge_loop_ratio=ratio)
    s.note(f"merge loop (train_from_store, in-process): {text.name} {own.seconds:.2f} s ({own.extra['unique_pretokens']:,} "
           f"distinct pretokens, {own.extra['unique_pretokens_bytes']:,} symbols) vs {english.name} {en.seconds:.2f} s "
           f"({en.extra['unique_pretokens']:,}, {en.extra['unique_pretokens_bytes']:,}): x{ratio:.2f}"
           + (f" (target within {MERGE_LOOP_TARGET:.0f}x: {'met' if ratio <= MERGE_LOOP_TARGET else 'NOT met'})"
              if name == "multi" else ""))
    if not ctx.quick:
        full = merge_loop(ctx, s, english_source.name, english_source)
        s.info.update(full_english_merge_loop_seconds=full.seconds)
        s.note(f"merge loop on all of {english_source.name} ({full.mb:,.0f} MB, {full.extra['unique_pretokens']:,} distinct "
               f"pretokens): {full.seconds:.2f} s; {text.name} / it = x{own.seconds / full.seconds:.2f}")
        if "occurrences_merged" in own.extra and "occurrences_merged" in full.extra:
            o, f = own.extra, full.extra
            s.note(f"the work: {text.name} {o['unique_pretokens_bytes']:,} symbols, {o['occurrences_merged']:,} occurrences "
                   f"merged ({o['occurrences_visited']:,} visited); {english_source.name} {f['unique_pretokens_bytes']:,} "
                   f"symbols, {f['occurrences_merged']:,} merged ({f['occurrences_visited']:,} visited): "
                   f"x{o['unique_pretokens_bytes'] / f['unique_pretokens_bytes']:.2f} the symbols, "
                   f"x{o['occurrences_merged'] / f['occurrences_merged']:.2f} the merged occurrences; C loop set-up "
                   f"{o['loop_setup_seconds']:.2f} / {f['loop_setup_seconds']:.2f} s, merges {o['loop_merge_seconds']:.2f} / "
                   f"{f['loop_merge_seconds']:.2f} s = {1e9 * o['loop_merge_seconds'] / o['occurrences_visited']:.0f} / "
                   f"{1e9 * f['loop_merge_seconds'] / f['occurrences_visited']:.0f} ns per occurrence visited")
    s.note(f"CLI train wall {train.wall_s:.2f} s vs train_from_store {own.seconds:.2f} s in-process")
    return s


def section_multi(ctx: Context) -> Section:
    return section_peers(ctx, "multi", "multi_25M.txt")


def section_code(ctx: Context) -> Section:
    return section_peers(ctx, "code", "code_25M.txt")


ENGINE_MODULES = (("dask", "distributed"), ("ray", "ray"))


def section_engines(ctx: Context) -> Section:
    """Issue 37: the overhead of another engine, measured: ``count --engine dask --workers 2``
    (its own LocalCluster) and ``count --engine ray --workers 2`` (a local Ray started for the
    run) beside ``count -w2`` on the English corpus (20 MB with --quick), each into a new store.
    MB/s of the whole command (the engine's start-up included: it is part of what a user
    waits for) and of count's own summary line; the peak memory of the driver itself (its
    VmHWM, written at exit through tests/seams.py) beside the whole process tree's (the
    engine's scheduler and workers are its children).  An engine that is not installed is
    skipped and said so."""
    s = Section(ctx, "engines", "count -w2 vs --engine dask and --engine ray with 2 workers")
    source = ctx.data("corpora", "en_100M.txt")
    text = ctx.prefix(source, 20_000_000) if ctx.quick else source
    mb = size_mb(text)
    s.info.update(text=str(text), mb=mb)
    # the CLI, writing its own VmHWM at exit (not tests/seams.py: Dask's spawned workers
    # would run a script's top level again)
    driver = ("import atexit, os, sys\n"
              "def hwm():\n"
              "    with open('/proc/self/status') as f, open(os.environ['BPE_BENCH_HWM'], 'w') as out:\n"
              "        out.write(next(line.split()[1] for line in f if line.startswith('VmHWM:')))\n"
              "atexit.register(hwm)\n"
              "from bpe_stream.cli.commands import main\n"
              "sys.argv[0] = 'bpe-stream'\n"
              "main()\n")
    for engine, module in (("local", None), *ENGINE_MODULES):
        if module is not None and importlib.util.find_spec(module) is None:
            s.note(f"{engine}: skipped, {module} is not installed (pip install 'bpe-stream[{engine}]')")
            continue
        store, hwm = ctx.tmp / f"engine-{engine}", ctx.tmp / f"engine-{engine}.hwm"
        argv = [sys.executable, "-c", driver, "count", "--store", store, "--special-token", SPECIAL, "--workers", "2",
                *(["--engine", engine] if module else []), text]
        env = dict(os.environ, BPE_BENCH_HWM=str(hwm))
        m = ctx.cmd(f"count {engine} -w2", argv, setup=fresh(store), env=env)
        summary = parse_count_summary(m.stderr_tail)
        driver_mb = int(hwm.read_text()) / 1024 if hwm.exists() else None
        s.add(row_from(s.name, f"bpe-stream ({engine})", "count -w2", "CLI wall", m, mb, baseline=engine == "local",
                       extra=dict(summary, driver_peak_mb=driver_mb)), m)
        if summary.get("seconds"):
            s.note(f"{engine}: {mb / m.wall_s:.1f} MB/s wall ({m.wall_s:.1f} s), {mb / summary['seconds']:.1f} MB/s by "
                   f"count's summary ({summary['seconds']:.1f} s), driver peak "
                   f"{driver_mb if driver_mb is None else round(driver_mb)} MB, process tree peak {m.peak_rss / MB:.0f} MB")
    return s


PHASES_BYTES = {False: None, True: 20_000_000}


def section_phases(ctx: Context) -> Section:
    """Issue 36: the phase breakdown of count and encode (``W.count_phases``, ``W.encode_phases``),
    so that the next step against what is serial is chosen from a profile.  A phase's wall is
    summed over its calls, which overlap on several workers; the serial fraction bounds the
    speed-up of more workers (Amdahl: at most 1 / serial_fraction)."""
    s = Section(ctx, "phases", "where count and encode spend their time: phases (wall, CPU) and the serial fraction")
    source = ctx.data("corpora", "en_100M.txt")
    nbytes = PHASES_BYTES[ctx.quick]
    text = ctx.prefix(source, nbytes) if nbytes else source
    mb = size_mb(text)
    s.info.update(text=str(text), mb=mb)
    counts = sorted({1, 2, os.cpu_count() or 1})
    breakdown = s.info.setdefault("breakdown", {})
    for workers in counts:
        m = ctx.fn(f"count phases -w{workers}", W.count_phases, str(text), workers, str(ctx.tmp))
        s.add(row_from(s.name, "bpe-stream", f"count -w{workers} (in-process, phases timed)", "in-process", m, mb,
                       baseline=workers == 1, extra=m.result), m)
        breakdown[f"count -w{workers}"] = m.result
        s.note(phase_line(f"count -w{workers}", m.result))
    tok = encode_tokenizer(ctx, s, text)
    digests = set()
    for workers in counts:
        m = ctx.fn(f"encode phases -w{workers}", W.encode_phases, str(tok), str(text), workers, str(ctx.tmp))
        s.add(row_from(s.name, "bpe-stream", f"encode -f u32 -w{workers} (in-process, phases timed)", "in-process", m, mb,
                       extra=m.result), m)
        breakdown[f"encode -w{workers}"] = m.result
        digests.add(m.result["digest"])
        s.note(phase_line(f"encode -w{workers}", m.result))
    s.note(f"encode: the same ids for every worker count: {len(digests) == 1}")
    s.note("phase walls are sums over calls, which overlap on several workers; on a shared machine a wall "
           "longer than its CPU is time spent waiting for a core")
    return s



CORES_BYTES = {False: (400_000_000, 2), True: (40_000_000, 1)}  # generated text; copies of en_100M.txt (20 MB: a prefix)


def section_cores(ctx: Context) -> Section:
    """Issue 36's acceptance, CLI walls (start-up included; the fastest of 3): ``count`` with 1,
    2 and (on a larger machine) all workers on 400 MB of generated web-like text and on 200 MB
    of English (en_100M.txt twice, standing in for the 214 MB English corpus), each into a new
    store, the stores compared; ``encode -f u32`` of the English with the same worker counts,
    the ids compared.  Targets on 2 cores: count -w2 >= 1.8x -w1 on both, -w1 >= 100 MB/s on the
    generated text; encode -w2 >= 1.8x -w1.  Beside each count, two ``count -w1`` run at once as
    separate processes (:func:`_side_by_side`): how far -w2 could go on this machine."""
    s = Section(ctx, "cores", "issue 36: count and encode with 1, 2 and all workers (CLI walls, new stores)")
    gen_bytes, copies = CORES_BYTES[ctx.quick]
    generated, _ = ctx.generated(gen_bytes)
    english = ctx.tmp / f"english-{copies}x.txt"
    source = ctx.data("corpora", "en_100M.txt") if copies > 1 else ctx.prefix(ctx.data("corpora", "en_100M.txt"), 20_000_000)
    with open(english, "wb") as out:
        for _ in range(copies):
            with open(source, "rb") as f:
                shutil.copyfileobj(f, out, 1 << 20)
    counts = sorted({1, 2, os.cpu_count() or 1})
    ctx.min_repeat = 3
    try:
        empty = ctx.tmp / "cores-empty.txt"
        empty.write_bytes(b"")
        store = ctx.tmp / "cores-empty-store"
        start = ctx.cmd("bpe-stream count of an empty file (start-up)", [*ctx.bpe, "count", "--store", store, empty],
                        setup=fresh(store))
        s.add(row_from(s.name, "bpe-stream", "count of an empty file into a new store: start-up", "CLI wall", start, None),
              start)
        s.info["startup_s"] = start.seconds
        for label, text in (("generated", generated), ("English", english)):
            _cores_count(ctx, s, label, text, counts, start.seconds)
        _cores_encode(ctx, s, english, counts)
    finally:
        ctx.min_repeat = 1
    return s


def _cores_count(ctx: Context, s: Section, label: str, text: Path, counts: Sequence[int], startup: float) -> None:
    mb = size_mb(text)
    rows = {}
    for workers in counts:
        store = ctx.tmp / f"cores-{label}-w{workers}"
        m = ctx.cmd(f"bpe-stream count -w {workers} ({label})",
                    [*ctx.bpe, "count", "--workers", workers, "--store", store, text], setup=fresh(store))
        rows[workers] = s.add(row_from(s.name, "bpe-stream", f"{label} {mb:.0f} MB: count -w{workers}", "CLI wall", m, mb,
                                       baseline=(label == "generated" and workers == 1),
                                       extra=parse_count_summary(m.stderr_tail)), m)
    same = all(W.stores_equal(str(ctx.tmp / f"cores-{label}-w1"), str(ctx.tmp / f"cores-{label}-w{w}")) for w in counts[1:])
    for w in counts:
        shutil.rmtree(ctx.tmp / f"cores-{label}-w{w}", ignore_errors=True)
    one, two = rows[1], rows[2]
    # the issue's ratio leaves the start-up out (a count of an empty file into a new store)
    ratio = (one.seconds - startup) / max(two.seconds - startup, 1e-9)
    pair = _side_by_side(ctx, label, text)
    shared = (pair - startup) / max(one.seconds - startup, 1e-9)
    s.info.setdefault("issue36_count", {})[label] = {"w1_mb_s": one.mb_s, "w2_over_w1": ratio,
                                                    "w2_over_w1_with_startup": one.seconds / two.seconds,
                                                    "two_w1_at_once_s": pair, "two_w1_at_once_over_w1": shared,
                                                    "same_store": same, **{f"w{w}_mb_s": rows[w].mb_s for w in counts}}
    floor = f"; -w1 {one.mb_s:.1f} MB/s (target >= 100: {'met' if one.mb_s >= 100 else 'NOT met'})" if label == "generated" else ""
    s.note(f"issue 36, count {label} {mb:.0f} MB: -w2 x{ratio:.2f} of -w1 without the start-up (target >= 1.8: "
           f"{'met' if ratio >= 1.8 else 'NOT met'}; x{one.seconds / two.seconds:.2f} with it){floor}; "
           + ", ".join(f"-w{w} {rows[w].mb_s:.1f} MB/s" for w in counts) + f"; stores identical: {same}")
    s.note(f"count {label}: two -w1 counts at once, each a process of its own, take x{shared:.2f} of one alone "
           f"(without the start-up): what the cores share (cache, memory, the disk), not the count's own code; "
           f"-w2 with no serial step at all would reach x{2 / shared:.2f}")


def _side_by_side(ctx: Context, label: str, text: Path) -> float:
    """The wall of two ``count -w1`` of ``text`` run at once, each a process into a store of
    its own (the slower of the two; the fastest pair as ``Context.best`` takes them): what
    sharing the machine (its caches, memory and disk) costs counts that share nothing else --
    the ceiling of ``-w2``'s ratio."""
    from concurrent.futures import ThreadPoolExecutor

    stores = [ctx.tmp / f"cores-{label}-pair{i}" for i in (0, 1)]

    def pair() -> Measurement:
        with ThreadPoolExecutor(2) as pool:
            runs = [pool.submit(measure.measure_command, [*map(str, ctx.bpe), "count", "--workers", "1", "--store",
                                                         str(store), str(text)]) for store in stores]
            return max((run.result() for run in runs), key=lambda m: m.seconds)

    def remove() -> None:
        for store in stores:
            shutil.rmtree(store, ignore_errors=True)

    say(f"  running two bpe-stream count -w 1 ({label}) at once ...")
    slower = ctx.best(pair, setup=remove)
    remove()
    say(f"    {slower.seconds:8.2f} s (the slower of the two)")
    return slower.seconds


def _cores_encode(ctx: Context, s: Section, text: Path, counts: Sequence[int]) -> None:
    mb = size_mb(text)
    tok = encode_tokenizer(ctx, s, text)
    empty = ctx.tmp / "cores-empty.txt"
    start = ctx.cmd("bpe-stream encode of an empty file (start-up)", [*ctx.bpe, "encode", "-t", tok, empty])
    s.add(row_from(s.name, "bpe-stream", "encode of an empty file: start-up and load", "CLI wall", start, None), start)
    rows, digests = {}, set()
    for workers in counts:
        out = ctx.tmp / f"cores-encode-w{workers}.u32"
        m = ctx.cmd(f"bpe-stream encode -f u32 -w {workers}",
                    [*ctx.bpe, "encode", "-t", tok, "--format", "u32", "--workers", str(workers), "-o", out, text])
        digests.add(ids_file_digest(out, "u32")[0])
        out.unlink()
        rows[workers] = s.add(row_from(s.name, "bpe-stream", f"English {mb:.0f} MB: encode -f u32 -w{workers}", "CLI wall",
                                       m, mb), m)
    ratio = (rows[1].seconds - start.seconds) / max(rows[2].seconds - start.seconds, 1e-9)
    s.info["issue36_encode"] = {"w2_over_w1": ratio, "w2_over_w1_with_startup": rows[1].seconds / rows[2].seconds,
                                "same_ids": len(digests) == 1, **{f"w{w}_mb_s": rows[w].mb_s for w in counts}}
    s.note(f"issue 36, encode English {mb:.0f} MB: -w2 x{ratio:.2f} of -w1 without the start-up (target >= 1.8: "
           f"{'met' if ratio >= 1.8 else 'NOT met'}; x{rows[1].seconds / rows[2].seconds:.2f} with it); "
           + ", ".join(f"-w{w} {rows[w].mb_s:.1f} MB/s" for w in counts)
           + f"; the same ids for every worker count: {len(digests) == 1}")

def phase_line(label: str, r: dict) -> str:
    parts = ", ".join(f"{k} {v['cpu']:.2f}/{v['wall']:.2f}" for k, v in r["phases"].items())
    return (f"{label}: {r['seconds']:.2f} s wall, {r['cpu_seconds']:.2f} s CPU; phases (CPU/wall s): {parts}; "
            f"serial fraction {r['serial_fraction']:.2f} (main thread {r['main_thread_cpu_seconds']:.2f} s CPU)")


RUNNERS = {
    "train-small": section_train_small,
    "count": section_count,
    "train-large": section_train_large,
    "encode": section_encode,
    "phases": section_phases,
    "cores": section_cores,
    "corpus-gen": section_corpus_gen,
    "out-of-core": section_out_of_core,
    "multi": section_multi,
    "code": section_code,
    "engines": section_engines,
}


# -- output ------------------------------------------------------------------------------
def fmt(value, spec: str, empty: str = "-") -> str:
    return empty if value is None else format(value, spec)


def table(sections: Dict[str, dict]) -> str:
    head = ("tool", "phase", "how", "MB", "seconds", "MB/s", "cores", "others", "peak RSS MB", "anon MB", "time/bpe")
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
                fmt(r.get("peak_anon_mb"), ",.0f"),
                fmt(r["ratio"], ".2f"),
            ])
    cells = [line for line in lines if not line[0].startswith("[")]
    widths = [max([len(head[i])] + [len(line[i]) for line in cells]) for i in range(len(head))]
    right = {3, 4, 5, 6, 7, 8, 9, 10}

    def render(row):
        return "  ".join(row[i].rjust(w) if i in right else row[i].ljust(w) for i, w in enumerate(widths))

    out = [render(head), render(["-" * w for w in widths])]
    for line in lines:
        out.append(f"{line[0]} {line[1]}" if line[0].startswith("[") else render(line))
    return "\n".join(out)


def versions() -> dict:
    from importlib import metadata

    out = {}
    for dist in ("bpe-stream", "regex", "lmdb", "tokenizers", "tiktoken", "rustbpe", "fast-bpe-rs", "tokie", "matplotlib"):
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
    p.add_argument("--ooc-large", action="store_true",
                   help="out-of-core: also 400 MB (vocab 32,000, --max-memory 1G, against rustbpe) and 2 GB (65,536, 2G)")
    p.add_argument("--big-count", default=None, metavar="SIZE",
                   help="out-of-core: also 'count --max-memory 512M' of generated text of this size (e.g. 5G)")
    p.add_argument("--repeat", type=int, default=1, help="run each measurement N times and keep the fastest (default 1)")
    p.add_argument("--results", default=str(RESULTS), help="where the JSON and PNGs go (default benchmarks/results)")
    p.add_argument("--tmp", default=None, help="directory for the temporary stores and files (default: the system's)")
    p.add_argument("--keep", action="store_true", help="keep the temporary directory")
    args = p.parse_args(argv)
    chosen = [n.strip() for item in args.only for n in item.split(",") if n.strip()]
    unknown = [n for n in chosen if n not in SECTIONS]
    if unknown:
        p.error(f"unknown section {unknown[0]!r}; choose from {', '.join(SECTIONS)}")
    args.sections = [n for n in SECTIONS if n in chosen] if chosen else list(QUICK_DEFAULT if args.quick else FULL_DEFAULT)
    args.skipped = [] if chosen else [n for n in SECTIONS if n not in args.sections]
    if args.big_count:
        try:
            parse_size(args.big_count)
        except ValueError as exc:
            p.error(str(exc))
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
                report["sections"][name] = {"skipped": SKIP_REASONS.get(name, "not chosen")}
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
          "others = cores the rest of the machine kept busy meanwhile (noise); peak RSS = whole process tree; "
          "anon = peak of its RssAnon (mapped files such as LMDB excluded).")
    print(f"results: {os.path.relpath(out, Path.cwd())}" + (f"; plots: {', '.join(plots)}" if plots else ""))
    print(f"total {report['total_seconds']:.0f} s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
