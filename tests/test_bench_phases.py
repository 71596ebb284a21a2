"""The phase breakdown of ``make bench`` (``benchmarks/workloads.py``: ``count_phases``,
``encode_phases``): its timers wrap the library's functions by name, so a renamed function
must fail here, not in a benchmark run; and the runs it times give the library's results."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import workloads as W  # noqa: E402

from bpe_stream.count.counting import count_sources, make_settings  # noqa: E402
from bpe_stream.encode.tokenizer import Tokenizer  # noqa: E402
from bpe_stream.inputs.reader import Source  # noqa: E402
from bpe_stream.store.lmdb_store import Store  # noqa: E402


@pytest.fixture(scope="module")
def text(corpus_files, tmp_path_factory):
    path = tmp_path_factory.mktemp("phases") / "text.txt"
    path.write_bytes(b"".join(corpus_files.values()))
    return path


@pytest.mark.parametrize("workers", [1, 2])
def test_count_phases_time_the_real_count(text, tmp_path, workers):
    got = W.count_phases(str(text), workers, str(tmp_path))
    with Store.open(tmp_path / "oracle", create=True) as st_:
        want = count_sources(st_, [Source.from_arg(str(text))], make_settings("gpt2", [W.SPECIAL]), workers=1)
    assert (got["bytes"], got["unique"]) == (want.bytes, want.new_unique)
    assert {"read", "scan", "merge", "write", "hash"} <= set(got["phases"]) and 0 < got["serial_fraction"] <= 1.01
    assert all(v["cpu"] >= 0 and v["wall"] > 0 for v in got["phases"].values())


def test_encode_phases_time_the_real_encode(text, tmp_path, gpt2_tokenizer):
    tok_path = tmp_path / "tok.json"
    gpt2_tokenizer.save(tok_path)
    runs = [W.encode_phases(str(tok_path), str(text), workers, str(tmp_path)) for workers in (1, 2)]
    ids = Tokenizer.load(tok_path).encode(text.read_bytes().decode("utf-8", "surrogateescape"))
    assert {r["digest"] for r in runs} == {W.ids_digest(ids)} and runs[0]["tokens"] == len(ids)
    assert all(set(r["phases"]) == {"read", "encode", "write"} for r in runs)
    assert all(0 <= r["serial_fraction"] <= 1.01 for r in runs)  # (a share of CPU time: no threshold, which load would move)
