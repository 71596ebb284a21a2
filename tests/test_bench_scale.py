"""``make bench-scale`` (benchmarks/bench_scale.py) end to end on a tiny size: every phase
recorded, the disk path's tokenizer identical to the in-memory one, and the generated input
kept outside the repository (gen_corpus refuses to write into it, which once broke the
benchmark's default run)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import bench_scale  # noqa: E402
import gen_corpus  # noqa: E402

pytest.importorskip("zstandard")


def test_the_default_input_directory_is_outside_the_repository():
    assert not gen_corpus.is_inside_repo(str(bench_scale.DEFAULT_DATA_DIR / "web-2G-seed3.jsonl.txt.tmp"))


def test_a_tiny_run_records_every_phase(tmp_path, capsys):
    results, data = tmp_path / "results", tmp_path / "data"
    bench_scale.main(["--size", "2M", "--vocab", "400", "--budgets", "24M", "--memory-path",
                      "--dir", str(results), "--data-dir", str(data)])
    records = [json.loads(line) for line in (results / "scale.jsonl").read_text().splitlines()]
    phases = [r["phase"] for r in records]
    assert phases[0] == "2M: input" and phases[1].startswith("2M: count -w")
    assert phases[2:] == ["2M: opening the store", "2M: train --path memory", "2M: train --max-memory 24M"]
    assert (data / "web-2M-seed3.jsonl.zst").exists() and not list(data.glob("*.tmp"))
    count, opening, memory, disk = records[1:]
    assert count["returncode"] == 0 and count["distinct_pretokens"] > 1000
    assert opening["stats_s"] > 0
    assert memory["returncode"] == 0 and disk["returncode"] == 0
    assert disk["plan"]["path"] == "disk" and disk["scratch_mb"] > 0  # (the budget is below the in-memory need)
    assert disk["identical_to_memory"] is True
    assert "error" not in disk["plan"] and disk["plan_vs_measured"]["peak_anon"] > 0
    assert not (results / "store-2M").exists()  # (without --keep)
