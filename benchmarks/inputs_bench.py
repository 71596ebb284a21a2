"""count MB/s of a corpus as .jsonl.zst against the same text as .txt (issue 18).

    python benchmarks/inputs_bench.py --dir /tmp/inputs-bench [--corpus ../shared/data/corpora/en_100M.txt] [-w 2]

Writes the corpus's documents (split on <|endoftext|>) as JSON Lines compressed with zstd
(level 3) beside a copy of the text, counts each into a new store with ``bpe-stream count
--special-token '<|endoftext|>'`` and prints seconds and MB/s of uncompressed text (the
documents' bytes).  Both stores must hold the same counts; the script checks that.  Nothing is
written into the repository.

Seen on 2026-12-02 (2 cores shared with three other helpers' test suites, load average 5-6,
so the figures are rough): en_100M.txt, 50,489 documents, 37.9 MB as .jsonl.zst --
-w 2: .txt 13.5 s (7.4 MB/s), .jsonl.zst 15.9 s (6.2 MB/s); -w 1: .txt 9.3 s (10.7 MB/s),
.jsonl.zst 14.4 s (6.9 MB/s).  The .jsonl.zst path decompresses, splits lines and parses
JSON on top of the counting (the parent decompresses; the workers parse).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
EOT = "<|endoftext|>"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", required=True)
    ap.add_argument("--corpus", default=str(REPO.parent / "shared" / "data" / "corpora" / "en_100M.txt"))
    ap.add_argument("-w", "--workers", default="2")
    args = ap.parse_args()
    import zstandard

    work = Path(args.dir)
    work.mkdir(parents=True, exist_ok=True)
    data = Path(args.corpus).read_bytes()
    txt, zst = work / "corpus.txt", work / "corpus.jsonl.zst"
    if not zst.exists():
        txt.write_bytes(data)
        docs = data.decode("utf-8", "surrogateescape").split(EOT)
        lines = b"".join(json.dumps({"text": d}).encode() + b"\n" for d in docs)
        zst.write_bytes(zstandard.ZstdCompressor(level=3).compress(lines))
    exports = []
    for path in (txt, zst):
        store = work / f"store-{path.name}"
        shutil.rmtree(store, ignore_errors=True)
        started = time.monotonic()
        subprocess.run([sys.executable, "-m", "bpe_stream.cli.commands", "count", "--store", str(store), "--special-token", EOT,
                        "-w", args.workers, "-q", str(path)], check=True, cwd=REPO)
        seconds = time.monotonic() - started
        text_bytes = len(data) - data.count(EOT.encode()) * len(EOT)
        print(f"{path.name}: {os.path.getsize(path):,} bytes on disk, {seconds:.2f} s, "
              f"{text_bytes / 1e6 / seconds:.1f} MB/s of text ({args.workers} workers)")
        out = subprocess.run([sys.executable, "-m", "bpe_stream.cli.commands", "export-counts", "--store", str(store), "-o", "-"],
                             check=True, cwd=REPO, capture_output=True).stdout
        exports.append(out.split(b"\n", 1)[1])  # the counts, without the header's totals
    assert exports[0] == exports[1], "the two stores differ"
    print("same counts: yes")


if __name__ == "__main__":
    main()
