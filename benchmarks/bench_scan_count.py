"""Scan + count in native code against ``Counter(regex.findall(GPT2, text))``, one core.

For a slice of each shared corpus (``--mb`` MB from the start): the native count table's
``feed`` (bytes in, counts in native memory; ``to_dict`` timed apart, since a worker hands
``pack()`` on instead) against the bare ``regex`` baseline on the decoded text (decoding not
timed).  Both results are checked equal.  Times are CPU seconds of this process (best of
``--repeat``), which a busy machine disturbs less than wall time.

    .venv/bin/python benchmarks/bench_scan_count.py [--mb 20] [--pattern gpt2]
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from pathlib import Path

import regex

from bpe_stream.count.table import NativeCountTable
from bpe_stream.pretok.pretokenize import NAMED_PATTERNS

CORPORA = Path(__file__).resolve().parent.parent.parent / "shared" / "data" / "corpora"


def cpu_best(fn, repeat: int):
    best, result = float("inf"), None
    for _ in range(repeat):
        t0 = time.process_time()
        result = fn()
        best = min(best, time.process_time() - t0)
    return best, result


def bench(path: Path, mb: int, pattern: str, repeat: int) -> str:
    with open(path, "rb") as f:
        data = f.read(mb << 20)
    text = data.decode("utf-8", "surrogateescape")
    findall = regex.compile(NAMED_PATTERNS[pattern][0]).findall

    def native():
        table = NativeCountTable()
        table.feed(data, pattern)
        return table

    t_native, table = cpu_best(native, repeat)
    t_dict, counts = cpu_best(table.to_dict, 1)
    t_pack, _ = cpu_best(table.pack, 1)
    t_regex, baseline = cpu_best(lambda: Counter(findall(text)), 1)
    want = {k.encode("utf-8", "surrogateescape"): n for k, n in baseline.items()}
    if counts != want:
        raise SystemExit(f"{path.name}: native counts differ from Counter(regex.findall)")
    mbytes = len(data) / 1e6
    return (
        f"{path.name:14} {mbytes:6.1f} MB  native feed {mbytes / t_native:7.1f} MB/s"
        f" (+to_dict {t_dict:.2f} s, pack {t_pack * 1e3:.0f} ms for {len(table):,} distinct)"
        f"  regex {mbytes / t_regex:5.1f} MB/s  -> {t_regex / t_native:5.1f}x"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=20)
    parser.add_argument("--pattern", default="gpt2", choices=sorted(NAMED_PATTERNS))
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    if NativeCountTable is None:
        print("Error: bpe_stream._fastbpe is not built", file=sys.stderr)
        return 1
    for name in ("en_100M.txt", "multi_25M.txt", "code_25M.txt"):
        print(bench(CORPORA / name, args.mb, args.pattern, args.repeat), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
