"""The benchmarks' generated web-like text (benchmarks/gen_corpus.py): the same bytes whatever
``--workers``, and a fork pool that stops once the output has enough (its shutdown hung once
when the pool was fed from an endless imap)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import gen_corpus  # noqa: E402


def test_the_bytes_do_not_depend_on_the_workers(tmp_path):
    made = {}
    for workers in (1, 2, 3):
        out = tmp_path / f"w{workers}.txt"
        info = gen_corpus.generate(str(out), 3_000_000, seed=7, workers=workers)
        assert info["bytes"] == out.stat().st_size and 2_900_000 < info["bytes"] <= 3_000_000
        made[workers] = out.read_bytes()
    assert made[1] == made[2] == made[3]
