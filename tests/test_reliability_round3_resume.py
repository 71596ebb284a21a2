"""Issue 39, item 2: a count that fails part-way -- a download cut short, a bad JSON Lines or
Parquet record, a byte that is not UTF-8 under --strict-utf8 -- keeps its committed batches,
says so, and the same command resumes from them once the file is complete or fixed, as long
as what they cover is unchanged; any other change is refused (and nothing is counted twice).

The reference is a clean count of the final file into a new store (and ``regex``'s GPT-2
pattern for the words).  No test waits for a duration: the failure is in the data, and the
batches commit by the memory budget (``--max-memory 128K``: a flush every few hundred new
pretokens), so every run commits the same batches before the failure.
"""

from __future__ import annotations

import gzip
import json
import re

import pytest
import reliability_helpers as H
from conftest import assert_clean_error, ok, stderr_text

pa = pytest.importorskip("pyarrow", reason="the parquet extra (pyarrow) is not installed")
import pyarrow.parquet as pq  # noqa: E402

SMALL = ("--max-memory", "128K", "--workers", "1")


def _docs(n_bytes: int) -> list[bytes]:
    with open(H.CORPORA / "en_100M.txt", "rb") as f:
        text = f.read(n_bytes).decode("utf-8", "ignore")
    return [d.encode() for d in text.split(H.EOT)[:-1] if d.strip()]


DOCS = _docs(900_000)
TEXT = H.EOT.encode().join(DOCS)
# Decompressed 1 MiB a read: a gzip cut short must hold more than a read's worth to commit any
BIG = H.EOT.encode().join(_docs(4_000_000))


def content(store) -> dict:
    snap = H.snapshot(store)
    return {"words": snap["words"], "totals": snap["totals"]}


def kept_offset(res) -> int:
    """The offset the error says the store keeps (bytes, or row groups)."""
    m = re.search(r"the store keeps the counts of its first ([\d,]+) ", stderr_text(res))
    assert m, stderr_text(res)
    return int(m.group(1).replace(",", ""))


def clean(bpe, tmp_path, name: str, *args) -> dict:
    ok(bpe("count", "--store", "clean-" + name, *args, name))
    return content(tmp_path / ("clean-" + name))


# -- compressed text ----------------------------------------------------------------------------
def test_a_gzip_cut_short_resumes_once_the_download_completes(bpe, tmp_path):
    whole = gzip.compress(BIG)
    (tmp_path / "dl.txt.gz").write_bytes(whole[: len(whole) * 3 // 4])
    res = bpe("count", "--store", "s", "--special-token", H.EOT, *SMALL, "dl.txt.gz")
    assert_clean_error(res, "dl.txt.gz: not a valid gzip stream", "uncompressed bytes: the same command resumes there")
    kept = kept_offset(res)
    assert 0 < kept < len(BIG)
    assert H.snapshot(tmp_path / "s")["totals"]["bytes"] == kept  # what it says is what is there
    (tmp_path / "dl.txt.gz").write_bytes(whole)  # the download completed
    res = ok(bpe("count", "--store", "s", "--special-token", H.EOT, *SMALL, "dl.txt.gz"))
    assert f"resuming dl.txt.gz at uncompressed byte {kept:,}" in stderr_text(res)
    assert content(tmp_path / "s") == clean(bpe, tmp_path, "dl.txt.gz", "--special-token", H.EOT)
    assert H.snapshot(tmp_path / "s")["words"] == H.oracle([BIG])[0]


def test_a_gzip_cut_before_any_commit_leaves_nothing_and_says_so(bpe, tmp_path):
    whole = gzip.compress(BIG)
    (tmp_path / "dl.txt.gz").write_bytes(whole[:200])
    res = bpe("count", "--store", "s", *SMALL, "dl.txt.gz")
    assert_clean_error(res, "dl.txt.gz: not a valid gzip stream", "nothing of it was committed to the store")
    assert not H.snapshot(tmp_path / "s")["sources"] and H.snapshot(tmp_path / "s")["totals"].get("bytes", 0) == 0
    (tmp_path / "dl.txt.gz").write_bytes(whole)
    ok(bpe("count", "--store", "s", *SMALL, "dl.txt.gz"))
    assert content(tmp_path / "s") == clean(bpe, tmp_path, "dl.txt.gz")


def test_a_stopped_count_whose_committed_part_changed_is_refused_not_counted_twice(bpe, tmp_path):
    whole = gzip.compress(BIG)
    (tmp_path / "dl.txt.gz").write_bytes(whole[: len(whole) * 3 // 4])
    kept = kept_offset(bpe("count", "--store", "s", *SMALL, "dl.txt.gz"))
    before = content(tmp_path / "s")
    (tmp_path / "dl.txt.gz").write_bytes(gzip.compress(b"another text altogether " + BIG))
    res = bpe("count", "--store", "s", *SMALL, "dl.txt.gz")
    assert_clean_error(res, "dl.txt.gz changed since its count stopped, and so did what its committed counts cover",
                       f"up to uncompressed byte {kept:,}", "--recount")
    assert content(tmp_path / "s") == before


# -- JSON Lines ---------------------------------------------------------------------------------
def _lines(docs) -> bytes:
    return b"".join(json.dumps({"text": d.decode()}).encode() + b"\n" for d in docs)


@pytest.mark.parametrize("name", ["r.jsonl", "r.jsonl.gz"])
@pytest.mark.parametrize("repair", ["drop", "fix"])
def test_jsonl_with_a_broken_last_line_resumes_once_it_is_fixed_or_dropped(bpe, tmp_path, name, repair):
    pack = gzip.compress if name.endswith(".gz") else (lambda b: b)
    good = _lines(DOCS)
    (tmp_path / name).write_bytes(pack(good + b'{"text": "cut sho'))
    res = bpe("count", "--store", "s", *SMALL, name)
    n_line = len(DOCS) + 1
    assert_clean_error(res, f"{name} line {n_line:,}: not JSON", "(whole lines): the same command resumes there")
    kept = kept_offset(res)
    assert 0 < kept < len(good) and good[kept - 1:kept] == b"\n"
    final = good + (b'{"text": "cut short no more"}\n' if repair == "fix" else b"")
    (tmp_path / name).write_bytes(pack(final))
    res = ok(bpe("count", "--store", "s", *SMALL, name))
    assert f"at uncompressed byte {kept:,}" in stderr_text(res) and "resuming" in stderr_text(res)
    assert content(tmp_path / "s") == clean(bpe, tmp_path, name)
    docs = DOCS + ([b"cut short no more"] if repair == "fix" else [])
    assert H.snapshot(tmp_path / "s")["words"] == H.oracle(docs)[0]


# -- Parquet ------------------------------------------------------------------------------------
def test_parquet_with_a_null_resumes_after_its_committed_row_groups_once_fixed(bpe, tmp_path):
    texts = [d.decode() for d in DOCS]
    broken = texts[:-3] + [None] + texts[-2:]
    pq.write_table(pa.table({"text": broken}), str(tmp_path / "p.parquet"), row_group_size=20)
    res = bpe("count", "--store", "s", *SMALL, "p.parquet")
    assert_clean_error(res, f"p.parquet row {len(texts) - 2:,}: column 'text' is null", "row groups: the same command")
    kept = kept_offset(res)
    assert kept > 0
    pq.write_table(pa.table({"text": texts}), str(tmp_path / "p.parquet"), row_group_size=20)
    res = ok(bpe("count", "--store", "s", *SMALL, "p.parquet"))
    assert f"resuming p.parquet at row group {kept:,}" in stderr_text(res)
    assert content(tmp_path / "s") == clean(bpe, tmp_path, "p.parquet")
    # rewritten with other row groups, what the committed counts cover is not the same: refused
    pq.write_table(pa.table({"text": broken}), str(tmp_path / "q.parquet"), row_group_size=20)
    kept = kept_offset(bpe("count", "--store", "t", *SMALL, "q.parquet"))
    pq.write_table(pa.table({"text": texts}), str(tmp_path / "q.parquet"), row_group_size=7)
    assert_clean_error(bpe("count", "--store", "t", *SMALL, "q.parquet"),
                       f"so did what its committed counts cover (up to row group {kept:,})")


# -- plain files, --strict-utf8 -------------------------------------------------------------------
def test_a_plain_file_failed_under_strict_utf8_names_itself_and_resumes_once_fixed(bpe, tmp_path):
    bad_at = len(TEXT) - 1000
    (tmp_path / "t.txt").write_bytes(TEXT[:bad_at] + b"\xff" + TEXT[bad_at + 1:])
    res = bpe("count", "--store", "s", "--strict-utf8", *SMALL, "t.txt")
    assert_clean_error(res, f"t.txt: invalid UTF-8 at byte offset {bad_at}", "bytes: the same command resumes there")
    kept = kept_offset(res)
    assert 0 < kept <= bad_at
    (tmp_path / "t.txt").write_bytes(TEXT)
    res = ok(bpe("count", "--store", "s", "--strict-utf8", *SMALL, "t.txt"))
    assert "resuming t.txt at byte" in stderr_text(res)
    assert content(tmp_path / "s") == clean(bpe, tmp_path, "t.txt")
