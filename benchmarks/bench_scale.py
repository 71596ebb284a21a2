"""The scale benchmark (``make bench-scale``): web-like JSON Lines counted and trained out of core.

    .venv/bin/python benchmarks/bench_scale.py --size 2G --vocab 65536 --budgets 2G,1G \\
        [--memory-path] [--rustbpe-timeout 1800] [--dir build/scale] [--data-dir DIR] [--keep]

For each ``--size`` (several may be given, e.g. ``--size 2G --size 5G``):

1. generates that much text with ``gen_corpus.py`` (its distribution, ``--seed``), written as
   ``.jsonl.zst`` -- one ``{"text": ...}`` record a document -- as a web dump comes (kept in
   ``--data-dir``, by default ``bpe-stream-scale`` in the system's temporary directory, never in
   the repository, and reused by later runs of the same size and seed);
2. counts it with ``bpe-stream count -w`` all cores into a new store;
3. for each budget, ``train --plan`` (the forecast), then ``train --max-memory BUDGET``;
   with ``--memory-path`` also ``train --path memory`` on the same store (the reference the
   disk path is held against: wall ratio and identical tokenizer); before training, what
   opening the store costs: ``stats`` of it and ``count`` of an empty file into it against one
   into a new store (``open_costs``);
4. with ``--rustbpe-timeout S``, rustbpe on the same documents (in a process stopped after S
   seconds: its time and peak, or that it did not finish).

Each phase is one JSON record in ``DIR/scale.jsonl`` (and on stdout): wall and CPU seconds,
the peak anonymous and mapped (file) memory of the process tree, bytes read and written
(``/proc/PID/io``, the tree's sum), store and scratch sizes, distinct pretokens and symbols;
the plan's figures beside the measured ones; and ``DIR/rss-SIZE.png``, RSS over time of every
phase (when matplotlib is installed).  Sizes are powers of 1024 (``2G`` = 2 GiB), as
``--max-memory`` reads them.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))

import measure  # noqa: E402

SPECIAL = "<|endoftext|>"
# The generated inputs, kept for later runs: never in the repository (gen_corpus refuses it)
DEFAULT_DATA_DIR = Path(tempfile.gettempdir()) / "bpe-stream-scale"


def parse_size(text: str) -> int:
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]?)i?B?\s*", text, re.I)
    if not m:
        raise SystemExit(f"not a size: {text!r} (e.g. 2G, 512M)")
    return int(float(m.group(1)) * 1024 ** " KMGT".index(m.group(2).upper() or " "))


def bpe_stream() -> list:
    exe = Path(sys.executable).with_name("bpe-stream")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "bpe_stream"]


# -- the input -----------------------------------------------------------------------------------
def make_jsonl_zst(nbytes: int, seed: int, out: Path) -> dict:
    """Generated text of ``nbytes`` as zstd JSON Lines, a record a document."""
    import zstandard

    if out.exists():
        return {"path": str(out), "reused": True, "bytes": out.stat().st_size}
    text = out.with_suffix(".txt.tmp")  # (beside it: gen_corpus never writes inside the repository)
    t0 = time.perf_counter()
    subprocess.run([sys.executable, str(HERE / "gen_corpus.py"), "--bytes", str(nbytes), "--seed", str(seed),
                    "--workers", str(os.cpu_count() or 1), "-o", str(text)], check=True, stdout=subprocess.DEVNULL)
    tmp = out.with_suffix(".tmp")
    docs = raw = 0
    cctx = zstandard.ZstdCompressor(level=3, threads=-1)
    with open(text, "r", encoding="utf-8", newline="") as src, open(tmp, "wb") as dst, \
            cctx.stream_writer(dst) as z:
        pending = []
        for line in src:
            if line.rstrip("\n") == SPECIAL:
                doc = "".join(pending)
                z.write((json.dumps({"text": doc}, ensure_ascii=False) + "\n").encode())
                docs, raw, pending = docs + 1, raw + len(doc.encode()), []
            else:
                pending.append(line)
        if pending:
            doc = "".join(pending)
            z.write((json.dumps({"text": doc}, ensure_ascii=False) + "\n").encode())
            docs, raw = docs + 1, raw + len(doc.encode())
    os.replace(tmp, out)
    text.unlink()
    return {"path": str(out), "reused": False, "documents": docs, "text_bytes": raw, "bytes": out.stat().st_size,
            "seconds": round(time.perf_counter() - t0, 1)}


def iter_jsonl_zst(path: str):
    import io

    import zstandard

    with open(path, "rb") as f, zstandard.ZstdDecompressor().stream_reader(f) as r:
        for line in io.TextIOWrapper(r, encoding="utf-8"):
            yield json.loads(line)["text"]


# -- measuring ----------------------------------------------------------------------------------
class IoSampler:
    """Bytes read and written by a process tree (``/proc/PID/io``: read_bytes, write_bytes --
    what reached the block layer), summed over the processes seen, sampled every second."""

    def __init__(self):
        self.seen = {}
        self.stop = threading.Event()

    def watch(self, root_pid_getter):
        def run():
            while not self.stop.wait(1.0):
                root = root_pid_getter()
                if root is None:
                    continue
                for pid in measure.process_tree(root):
                    try:
                        with open(f"/proc/{pid}/io") as f:
                            fields = dict(line.split(": ") for line in f.read().splitlines())
                        self.seen[pid] = (int(fields["read_bytes"]), int(fields["write_bytes"]))
                    except (OSError, ValueError, KeyError):
                        pass
        t = threading.Thread(target=run, daemon=True)
        t.start()
        return t

    def totals(self):
        return sum(r for r, _ in self.seen.values()), sum(w for _, w in self.seen.values())


def run_phase(label: str, argv: list, env=None, timeout=None) -> dict:
    """One measured command, with its tree's I/O; ``timeout``: stopped after that many seconds."""
    io = IoSampler()
    pid_box = {}
    real_popen = subprocess.Popen

    class Watched(real_popen):  # the pid of the child measure_command starts, for the I/O sampler
        def __init__(self, *a, **kw):
            super().__init__(*a, **kw)
            pid_box["pid"] = self.pid
            if timeout:
                threading.Timer(timeout, self._stop_late).start()

        def _stop_late(self):
            if self.poll() is None:
                pid_box["timed_out"] = True
                self.kill()

    subprocess.Popen = Watched
    io.watch(lambda: pid_box.get("pid"))
    try:
        m = measure.measure_command(argv, label=label, env=env, check=False, interval=0.2)
    finally:
        subprocess.Popen = real_popen
        io.stop.set()
    read, written = io.totals()
    return {
        "phase": label, "returncode": m.returncode, "timed_out": bool(pid_box.get("timed_out")),
        "wall_s": round(m.wall_s, 2), "cpu_s": round(m.cpu_s, 2),
        "peak_anon_mb": round(m.tree_peak_anon / 1e6, 1), "peak_file_mb": round(m.tree_peak_file / 1e6, 1),
        "peak_rss_mb": round(m.peak_rss / 1e6, 1), "read_mb": round(read / 1e6, 1), "written_mb": round(written / 1e6, 1),
        "others_cpu_s": round(m.others_cpu_s, 1), "stderr_tail": m.stderr_tail[-2000:], "_m": m,
    }


def dir_bytes(path) -> int:
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            try:
                total += os.stat(os.path.join(root, name)).st_blocks * 512
            except OSError:
                pass
    return total


def scratch_of(stderr: str) -> dict:
    """The scratch file's figures that ``BPE_STREAM_DEBUG=1`` makes the disk engine print."""
    m = re.search(r"scratch file: ([\d,]+) MB at the end, at most ([\d,]+) MB; in memory ([\d,]+) MB at the end, "
                  r"at most ([\d,]+) MB", stderr)
    if not m:
        return {}
    n = [int(x.replace(",", "")) for x in m.groups()]
    return {"scratch_mb": n[1], "scratch_anon_mb": n[3]}


def open_costs(bpe: list, store: Path, scratch: Path, reps: int = 5) -> dict:
    """What opening the large store costs (issue 35: the same for 1 MB and 50 GB): ``stats``
    of it, and ``count`` of an empty file into it against one into a new store, each run
    ``reps`` times (a new empty file each time, so that every count opens, checks and commits
    as a first count of that file does; an empty file adds no counts, so training after it is
    unchanged).  Medians and minima of the CLI walls, start-up included."""
    import statistics

    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir(parents=True)

    def wall(argv: list) -> float:
        t0 = time.perf_counter()
        subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        return time.perf_counter() - t0

    def empty(i: int, where: str) -> Path:
        path = scratch / f"empty-{where}-{i}.txt"
        path.write_bytes(b"")
        return path

    stats = [wall([*bpe, "stats", "--store", str(store), "--json"]) for _ in range(reps)]
    big = [wall([*bpe, "count", "--store", str(store), str(empty(i, "big"))]) for i in range(reps)]
    new = [wall([*bpe, "count", "--store", str(scratch / f"new-store-{i}"), str(empty(i, "new"))]) for i in range(reps)]
    shutil.rmtree(scratch, ignore_errors=True)
    med = statistics.median
    return {
        "reps": reps, "store_mb": round(dir_bytes(store) / 1e6, 1),
        "stats_s": round(med(stats), 3), "stats_min_s": round(min(stats), 3),
        "count_empty_s": round(med(big), 3), "count_empty_min_s": round(min(big), 3),
        "count_empty_new_store_s": round(med(new), 3), "count_empty_new_store_min_s": round(min(new), 3),
        "open_extra_s": round(med(big) - med(new), 3) + 0.0,  # (no -0.0)
        "targets": "stats_s < 0.3; open_extra_s <= 0.05",
    }


# -- the run -------------------------------------------------------------------------------------
def bench_size(args, size: int, out) -> None:
    tag = f"{size >> 30}G" if size % (1 << 30) == 0 else f"{size >> 20}M"
    workdir = Path(args.dir)
    workdir.mkdir(parents=True, exist_ok=True)
    data_dir = Path(args.data_dir)
    data_dir.mkdir(parents=True, exist_ok=True)
    data = data_dir / f"web-{tag}-seed{args.seed}.jsonl.zst"
    gen = make_jsonl_zst(size, args.seed, data)
    emit(out, dict(phase=f"{tag}: input", **gen))
    store = workdir / f"store-{tag}"
    bpe = bpe_stream()
    workers = str(args.workers or os.cpu_count() or 1)
    runs = []
    if args.reuse_store and (store / "data.mdb").exists():
        count = {"phase": f"{tag}: count (store reused)", "_m": None}
    else:
        shutil.rmtree(store, ignore_errors=True)
        count = run_phase(f"{tag}: count -w{workers}", [*bpe, "count", "--store", str(store), "-w", workers, str(data)])
        runs.append(count)
    st = json.loads(subprocess.run([*bpe, "stats", "--store", str(store), "--json"], capture_output=True, text=True,
                                   check=True).stdout)
    emit(out, dict(count, store_mb=round(dir_bytes(store) / 1e6, 1), distinct_pretokens=st["unique_pretokens"],
                   symbols=st["unique_pretokens_bytes"], text_bytes=st["bytes"]))
    emit(out, dict(phase=f"{tag}: opening the store", **open_costs(bpe, store, workdir / "open-costs")))
    env = dict(os.environ, BPE_STREAM_DEBUG="1")
    tokenizers = {}
    if args.memory_path:
        out_json = workdir / f"tok-{tag}-memory.json"
        r = run_phase(f"{tag}: train --path memory", [*bpe, "train", "--store", str(store), "--vocab-size",
                      str(args.vocab), "--path", "memory", "-o", str(out_json), "--quiet"], env=env)
        runs.append(r)
        emit(out, r)
        tokenizers["memory"] = (out_json, r)
    for budget in args.budgets:
        plan = subprocess.run([*bpe, "train", "--store", str(store), "--vocab-size", str(args.vocab), "--max-memory",
                               budget, "--plan", "--json"], capture_output=True, text=True)
        planned = json.loads(plan.stdout) if plan.returncode == 0 else {"error": plan.stderr.strip()[-300:]}
        out_json = workdir / f"tok-{tag}-{budget}.json"
        r = run_phase(f"{tag}: train --max-memory {budget}", [*bpe, "train", "--store", str(store), "--vocab-size",
                      str(args.vocab), "--max-memory", budget, "-o", str(out_json), "--quiet"], env=env)
        runs.append(r)
        r.update(scratch_of(r["stderr_tail"]), plan=planned)
        if "memory" in tokenizers and r["returncode"] == 0:
            ref, mem = tokenizers["memory"]
            r["identical_to_memory"] = out_json.read_bytes() == ref.read_bytes()
            r["wall_vs_memory"] = round(r["wall_s"] / mem["wall_s"], 2)
        if "error" not in planned:
            r["plan_vs_measured"] = {
                "peak_anon": round(planned.get("peak_anonymous_bytes", 0) / 1e6 / max(r["peak_anon_mb"], 1), 2),
                "scratch": (round(planned.get("scratch_bytes", 0) / 1e6 / r["scratch_mb"], 2)
                            if r.get("scratch_mb") else None),
            }
        emit(out, r)
    if args.rustbpe_timeout:
        r = run_phase(f"{tag}: rustbpe train (timeout {args.rustbpe_timeout} s)",
                      [sys.executable, str(HERE / "bench_scale.py"), "--rustbpe-child", str(data), str(args.vocab)],
                      timeout=args.rustbpe_timeout)
        runs.append(r)
        emit(out, r)
    plot = workdir / f"rss-{tag}.png"
    try:
        measure.plot_rss([r["_m"] for r in runs], str(plot), title=f"bench-scale {tag}: RSS over time", split=True)
    except Exception as exc:  # the plot is a convenience: the records are the result
        print(f"(no plot: {exc})", file=sys.stderr)
    if not args.keep:
        shutil.rmtree(store, ignore_errors=True)


def emit(out, record: dict) -> None:
    record = {k: v for k, v in record.items() if not k.startswith("_")}
    record.setdefault("date", time.strftime("%Y-%m-%d %H:%M"))
    line = json.dumps(record)
    print(line, flush=True)
    out.write(line + "\n")
    out.flush()


def rustbpe_child(path: str, vocab: int) -> None:
    import rustbpe

    from bpe_stream.pretok.pretokenize import GPT2_PATTERN

    tok = rustbpe.Tokenizer()
    tok.train_from_iterator(iter_jsonl_zst(path), vocab - 1, pattern=GPT2_PATTERN)
    print(f"rustbpe: {tok.vocab_size} tokens", file=sys.stderr)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--size", action="append", help="generated text to count and train (repeatable; default 2G)")
    ap.add_argument("--vocab", type=int, default=65536)
    ap.add_argument("--budgets", default="2G,1G", help="--max-memory values, comma-separated")
    ap.add_argument("--memory-path", action="store_true", help="also train in memory (needs that much RAM)")
    ap.add_argument("--rustbpe-timeout", type=int, default=0, help="seconds; 0: rustbpe is not run")
    ap.add_argument("--seed", type=int, default=3)
    ap.add_argument("--workers", type=int, default=0)
    ap.add_argument("--dir", default=str(REPO / "build" / "scale"), help="records, plot, stores, tokenizers")
    ap.add_argument("--data-dir", default=str(DEFAULT_DATA_DIR),
                    help="the generated .jsonl.zst inputs, kept for later runs (outside the repository: "
                         "generated corpora never go into it)")
    ap.add_argument("--keep", action="store_true", help="keep the stores")
    ap.add_argument("--reuse-store", action="store_true", help="train on the store a --keep run left (no count)")
    ap.add_argument("--rustbpe-child", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.rustbpe_child:
        rustbpe_child(args.rustbpe_child[0], int(args.rustbpe_child[1]))
        return
    args.budgets = [b for b in args.budgets.split(",") if b]
    Path(args.dir).mkdir(parents=True, exist_ok=True)
    with open(Path(args.dir) / "scale.jsonl", "a") as out:
        for size in args.size or ["2G"]:
            bench_size(args, parse_size(size), out)


if __name__ == "__main__":
    main()
