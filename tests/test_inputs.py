"""Compressed files, JSON Lines and Parquet for count and encode (issue 18).

Every input here is written by the real libraries (gzip, bz2, lzma, zstandard, pyarrow).  The
reference is independent of the new code: the same documents written one per plain file (or
joined by <|endoftext|> in one plain file), counted by the plain path -- and, for the words,
the spec's GPT-2 pattern applied by ``regex`` (``reliability_helpers.oracle``).  Kills go
through the seams of ``tests/seams.py`` (right after the N-th commit), never a sleep.
"""

from __future__ import annotations

import bz2
import gzip
import json
import lzma
import os
import signal
import sys
from collections import Counter

import pytest
import reliability_helpers as H
from conftest import assert_clean_error, ok, stderr_text
from reliability_helpers import EOT, Cmd

from bpe_stream import Store
from bpe_stream.count.counting import count_sources, make_settings
from bpe_stream.inputs.reader import Source

zstandard = pytest.importorskip("zstandard", reason="the zstd extra (zstandard) is not installed")
pa = pytest.importorskip("pyarrow", reason="the parquet extra (pyarrow) is not installed")
import pyarrow.parquet as pq  # noqa: E402


def _documents() -> list[bytes]:
    """About 200 real documents of English, code and many scripts (valid UTF-8)."""
    docs = []
    for name, start, size in (("en_100M.txt", 0, 150_000), ("code_25M.txt", 0, 80_000), ("multi_25M.txt", 0, 100_000)):
        with open(H.CORPORA / name, "rb") as f:
            f.seek(start)
            text = f.read(size).decode("utf-8", "ignore")
        docs += [d.encode() for d in text.split(EOT)[:-1] if d]
    return docs


DOCS = _documents()
SETTINGS = make_settings("gpt2", [EOT])


def compress(data: bytes, how: str) -> bytes:
    if how == "gz":
        return gzip.compress(data)
    if how == "bz2":
        return bz2.compress(data)
    if how == "xz":
        return lzma.compress(data)
    if how == "zst":
        return zstandard.ZstdCompressor().compress(data)
    assert how == "", how
    return data


def jsonl(docs, field="text") -> bytes:
    return b"".join(json.dumps({"id": i, field: d.decode("utf-8", "surrogateescape")}).encode() + b"\n"
                    for i, d in enumerate(docs))


def write_parquet(path, docs, row_group_size=40, column="text"):
    table = pa.table({"id": list(range(len(docs))), column: [d.decode() if d is not None else None for d in docs]})
    pq.write_table(table, str(path), row_group_size=row_group_size)


def count_lib(store, paths, workers=1, range_bytes=16 << 10, **kwargs):
    with Store.open(str(store), create=True) as st:
        return count_sources(st, [Source.from_arg(str(p)) for p in paths], SETTINGS, workers=workers,
                             range_bytes=range_bytes, max_memory=1 << 20, **kwargs)


def content(store) -> dict:
    """What a store holds, file records aside: its words and totals."""
    snap = H.snapshot(store)
    return {"words": snap["words"], "totals": snap["totals"]}


@pytest.fixture(scope="module")
def refs(tmp_path_factory):
    """Stores of the documents as plain text: one per file, and joined by <|endoftext|>."""
    d = tmp_path_factory.mktemp("refs")
    files = []
    for i, doc in enumerate(DOCS):
        files.append(d / f"doc{i:04}.txt")
        files[-1].write_bytes(doc)
    count_lib(d / "per_file", files)
    (d / "joined.txt").write_bytes(EOT.encode().join(DOCS))
    count_lib(d / "joined", [d / "joined.txt"])
    per_file, joined = content(d / "per_file"), content(d / "joined")
    words, specials = H.oracle(DOCS)
    assert per_file["words"] == joined["words"] == dict(words) and specials == 0  # the oracle agrees
    assert per_file["totals"]["documents"] == joined["totals"]["documents"] == len(DOCS)
    return {"per_file": per_file, "joined": joined}


# -- compressed text ----------------------------------------------------------------------
@pytest.mark.parametrize("how", ["gz", "bz2", "xz", "zst"])
@pytest.mark.parametrize("workers", [1, 2])
def test_compressed_text_counts_as_the_plain_text(tmp_path, refs, how, workers):
    path = tmp_path / f"joined.txt.{how}"
    path.write_bytes(compress(EOT.encode().join(DOCS), how))
    summary = count_lib(tmp_path / "st", [path], workers=workers)  # 16 kB pieces: many per file
    assert content(tmp_path / "st") == refs["joined"]
    assert summary.bytes == refs["joined"]["totals"]["bytes"]
    record = H.snapshot(tmp_path / "st")["sources"][os.fsencode(os.path.realpath(path))]
    assert record["done"] and record["form"] == {"gz": "gzip", "zst": "zstd"}.get(how, how) + "+text"


@pytest.mark.parametrize("how", ["", "gz", "zst", "xz"])
@pytest.mark.parametrize("workers", [1, 2])
def test_jsonl_records_count_as_documents_one_per_file(tmp_path, refs, how, workers):
    path = tmp_path / ("corpus.jsonl" + (f".{how}" if how else ""))
    path.write_bytes(compress(jsonl(DOCS), how))
    count_lib(tmp_path / "st", [path], workers=workers)
    assert content(tmp_path / "st") == refs["per_file"]


@pytest.mark.parametrize("workers", [1, 2])
def test_parquet_rows_count_as_documents_one_per_file(tmp_path, refs, workers):
    path = tmp_path / "corpus.parquet"
    write_parquet(path, DOCS, row_group_size=25)
    assert pq.ParquetFile(str(path)).metadata.num_row_groups > 4
    count_lib(tmp_path / "st", [path], workers=workers)
    assert content(tmp_path / "st") == refs["per_file"]
    assert H.snapshot(tmp_path / "st")["sources"][os.fsencode(str(path))]["offset"] == \
        pq.ParquetFile(str(path)).metadata.num_row_groups


def test_json_extension_other_field_and_a_record_never_spans_documents(bpe, tmp_path):
    # "a b" and "c": as one text they would pretokenize as "a", " b", "c"... here "b" and "c" must
    # stay apart, and the document without a trailing newline is read too
    (tmp_path / "x.json").write_bytes(b'{"body": "ab"}\n\n  \n{"body": "cd"}')
    ok(bpe("count", "--store", "st", "x.json", "--field", "body"))
    snap = H.snapshot(tmp_path / "st")
    assert snap["words"] == {b"ab": 1, b"cd": 1} and snap["totals"]["documents"] == 2


def test_jsonl_keeps_bytes_that_are_not_utf8_as_surrogate_escapes(bpe, tmp_path):
    doc = b"caf\xe9 ok \xff"
    (tmp_path / "d.jsonl").write_bytes(jsonl([doc]))
    (tmp_path / "d.txt").write_bytes(doc)
    ok(bpe("count", "--store", "a", "d.jsonl"))
    ok(bpe("count", "--store", "b", "d.txt"))
    assert content(tmp_path / "a") == content(tmp_path / "b")


# -- stdin ---------------------------------------------------------------------------------
@pytest.mark.parametrize("how", ["gz", "bz2", "xz", "zst"])
def test_stdin_is_decompressed_by_its_first_bytes(bpe, tmp_path, how):
    text = EOT.encode().join(DOCS[:40])
    ok(bpe("count", "--store", "plain", "-", input=text))
    ok(bpe("count", "--store", "packed", "-", input=compress(text, how)))
    assert content(tmp_path / "packed") == content(tmp_path / "plain")


@pytest.mark.parametrize("name", ["cl100k", "o200k"])
def test_stdin_spools_a_long_run_of_spaces_and_counts_what_the_file_counts(bpe, tmp_path, name):
    """cl100k's and o200k's spaces after a newline wait for the run's end; piped in, a run
    longer than a piece (64 kB under --max-memory 16M) is spooled to the store's directory,
    counted as a file and removed: the store equals the file's, and no spool is left.  (That
    the splitter then holds little is tests/test_streaming.py's.)"""
    text = b"word\n" + b" " * 700_000 + b"\nword\n" + b"\n" + b"\t" * 300_000 + b"end"
    (tmp_path / "runs.txt").write_bytes(text)
    args = ("--pretokenizer", name, "--max-memory", "16M", "--max-token-bytes", "4096")
    ok(bpe("count", "--store", "file", *args, "runs.txt"))
    ok(bpe("count", "--store", "piped", *args, "-", input=text))
    assert content(tmp_path / "piped") == content(tmp_path / "file")
    assert sorted(p.name for p in (tmp_path / "piped").iterdir()) == sorted(p.name for p in (tmp_path / "file").iterdir())


@pytest.mark.parametrize("name", ["cl100k", "o200k"])
def test_a_compressed_long_run_of_spaces_is_spooled_and_counted_as_the_text(bpe, tmp_path, name):
    """The same runs gzipped: the decompressed text with no cut is spooled and counted by a
    worker as a file (2 workers), the store equals the plain text's; with --strict-utf8 a bad
    byte inside a spooled stretch is named at its offset in the text, and no spool is left."""
    text = b"word\n" + b" " * 700_000 + b"\nword\n" + b"\n" + b"\t" * 300_000 + b"end"
    (tmp_path / "runs.txt").write_bytes(text)
    (tmp_path / "runs.txt.gz").write_bytes(gzip.compress(text, 1))
    args = ("--pretokenizer", name, "--max-memory", "16M", "--max-token-bytes", "4096", "-w", "2")
    ok(bpe("count", "--store", "plain", *args, "runs.txt"))
    ok(bpe("count", "--store", "packed", *args, "runs.txt.gz"))
    assert content(tmp_path / "packed") == content(tmp_path / "plain")
    bad = text[:400_000] + b"\xff" + text[400_000:]
    (tmp_path / "bad.txt.gz").write_bytes(gzip.compress(bad, 1))
    res = bpe("count", "--store", "bad", *args, "--strict-utf8", "bad.txt.gz")
    assert_clean_error(res, "invalid UTF-8 at byte offset 400000;")
    for store in ("plain", "packed", "bad"):
        assert not [p for p in (tmp_path / store).iterdir() if p.name.startswith("stdin-spool-")]


def test_stdin_jsonl_compressed(bpe, tmp_path):
    for i, doc in enumerate(DOCS[:30]):
        (tmp_path / f"d{i}.txt").write_bytes(doc)
    ok(bpe("count", "--store", "files", *[f"d{i}.txt" for i in range(30)]))
    ok(bpe("count", "--store", "piped", "--input-format", "jsonl", input=gzip.compress(jsonl(DOCS[:30]))))
    assert content(tmp_path / "piped") == content(tmp_path / "files")


def test_parquet_from_stdin_is_an_error(bpe):
    assert_clean_error(bpe("count", "--store", "st", "--input-format", "parquet", input=b"PAR1"), "name the file")


# -- what a file is ------------------------------------------------------------------------
def test_magic_that_contradicts_the_extension_is_an_error(bpe, tmp_path):
    (tmp_path / "a.txt.gz").write_bytes(b"plain text, not gzip")
    (tmp_path / "b.jsonl.zst").write_bytes(gzip.compress(b'{"text": "x"}\n'))
    (tmp_path / "c.parquet").write_bytes(b"not parquet at all")
    write_parquet(tmp_path / "d.parquet", [b"x"])
    (tmp_path / "d.parquet.gz").write_bytes(gzip.compress((tmp_path / "d.parquet").read_bytes()))
    res = bpe("count", "--store", "st", "a.txt.gz")
    assert_clean_error(res, "a.txt.gz is named .gz but its first bytes are not gzip's", "plain data")
    assert not (tmp_path / "st" / "data.mdb").exists() or H.snapshot(tmp_path / "st")["words"] == {}
    assert_clean_error(bpe("count", "--store", "st", "b.jsonl.zst"), "not zstd's", "gzip's")
    assert_clean_error(bpe("count", "--store", "st", "c.parquet"), "c.parquet is not a Parquet file")
    assert_clean_error(bpe("count", "--store", "st", "d.parquet.gz"), "compresses its own pages")


def test_a_damaged_or_truncated_stream_is_an_error(bpe, tmp_path):
    data = gzip.compress(EOT.encode().join(DOCS))
    (tmp_path / "cut.txt.gz").write_bytes(data[: len(data) // 2])
    assert_clean_error(bpe("count", "--store", "st", "cut.txt.gz"), "cut.txt.gz: not a valid gzip stream")
    data = zstandard.ZstdCompressor().compress(EOT.encode().join(DOCS))
    (tmp_path / "cut.txt.zst").write_bytes(data[: len(data) // 2])
    assert_clean_error(bpe("count", "--store", "st", "cut.txt.zst"), "cut.txt.zst: not a valid zstd stream")
    assert not (tmp_path / "st" / "data.mdb").exists() or H.snapshot(tmp_path / "st")["words"] == {}
    data = lzma.compress(b"hello world " * 1000)
    (tmp_path / "bad.xz").write_bytes(data[:20] + b"\0" * 40 + data[60:])
    assert_clean_error(bpe("count", "--store", "st2", "bad.xz"), "bad.xz: not a valid xz stream")


def test_a_missing_extra_is_one_error_naming_it(cli, tmp_path, monkeypatch):
    (tmp_path / "a.txt.zst").write_bytes(zstandard.ZstdCompressor().compress(b"hello"))
    write_parquet(tmp_path / "b.parquet", [b"hello"])
    monkeypatch.setitem(sys.modules, "zstandard", None)  # import zstandard -> ImportError
    assert_clean_error(cli("count", "--store", "st", "a.txt.zst"), "pip install 'bpe-stream[zstd]'")
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    assert_clean_error(cli("count", "--store", "st", "b.parquet"), "pip install 'bpe-stream[parquet]'")
    assert not (tmp_path / "st").exists()  # refused before a store was made


def test_a_missing_extra_for_stdin_is_one_error_naming_it(bpe, tmp_path):
    shadow = tmp_path / "shadow" / "zstandard"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ImportError('simulated: not installed')\n")
    env = {"PYTHONPATH": f"{tmp_path / 'shadow'}{os.pathsep}{H.REPO}"}
    res = bpe("count", "--store", "st", "-", input=zstandard.ZstdCompressor().compress(b"hello"), env=env)
    assert_clean_error(res, "pip install 'bpe-stream[zstd]'")
    assert ok(bpe("count", "--store", "st", "-", input=gzip.compress(b"hello"), env=env))


def test_bad_input_format_is_a_usage_error(bpe):
    res = bpe("count", "--store", "st", "--input-format", "xml", "x")
    assert res.returncode == 2 and b"xml" in res.stderr


# -- identity: skip, touch, change, other compression ---------------------------------------
def test_counted_once_touch_and_change_of_a_compressed_file(bpe, tmp_path):
    path = tmp_path / "c.jsonl.gz"
    path.write_bytes(gzip.compress(jsonl(DOCS[:50])))
    ok(bpe("count", "--store", "st", "c.jsonl.gz"))
    once = content(tmp_path / "st")
    res = ok(bpe("count", "--store", "st", "c.jsonl.gz"))
    assert "skipped c.jsonl.gz: already counted" in stderr_text(res)
    os.utime(path, ns=(1, 1))  # only the time changed: the same bytes
    res = ok(bpe("count", "--store", "st", "c.jsonl.gz"))
    assert "its content is unchanged" in stderr_text(res) and content(tmp_path / "st") == once
    ok(bpe("count", "--store", "st", "c.jsonl.gz"))  # the record took the new time
    assert content(tmp_path / "st") == once
    path.write_bytes(gzip.compress(jsonl(DOCS[:51])))  # grown, as a compressed file: a new whole
    assert_clean_error(bpe("count", "--store", "st", "c.jsonl.gz"), "changed since it was counted", "--recount")
    ok(bpe("count", "--store", "st", "c.jsonl.gz", "--recount"))
    words = Counter(once["words"])
    words.update(once["words"])
    words.update(dict(H.oracle([DOCS[50]])[0]))
    assert content(tmp_path / "st")["words"] == dict(words)


def test_the_same_documents_in_another_compression_are_another_file(bpe, tmp_path):
    (tmp_path / "a.jsonl.gz").write_bytes(gzip.compress(jsonl(DOCS[:20])))
    (tmp_path / "a.jsonl.zst").write_bytes(zstandard.ZstdCompressor().compress(jsonl(DOCS[:20])))
    ok(bpe("count", "--store", "one", "a.jsonl.gz"))
    ok(bpe("count", "--store", "both", "a.jsonl.gz", "a.jsonl.zst"))
    one, both = content(tmp_path / "one"), content(tmp_path / "both")
    assert both["words"] == {w: 2 * n for w, n in one["words"].items()}  # the rule: files, not documents
    # a hard link to a counted compressed file is that file
    os.link(tmp_path / "a.jsonl.gz", tmp_path / "link.jsonl.gz")
    res = ok(bpe("count", "--store", "one", "link.jsonl.gz"))
    assert content(tmp_path / "one") == one and "skipped" in stderr_text(res)


def test_a_file_counted_in_one_form_is_refused_in_another(bpe, tmp_path):
    (tmp_path / "r.jsonl").write_bytes(jsonl(DOCS[:5]))
    ok(bpe("count", "--store", "st", "r.jsonl", "--input-format", "text"))
    assert_clean_error(bpe("count", "--store", "st", "r.jsonl"), "read as plain text", "jsonl:text", "--recount")
    ok(bpe("count", "--store", "st2", "r.jsonl"))
    assert_clean_error(bpe("count", "--store", "st2", "r.jsonl", "--field", "body"), "--recount")
    assert_clean_error(bpe("count", "--store", "st2", "r.jsonl", "--input-format", "text"), "read as plain text")


# -- bad records -----------------------------------------------------------------------------
BAD_LINES = [
    (b"{not json}", "not JSON"),
    (b'["text", "an array"]', "an array, not a JSON object"),
    (b'{"body": "no text field"}', "no field 'text'"),
    (b'{"text": 42}', "field 'text' is a number, not a string"),
    (b'{"text": null}', "field 'text' is null, not a string"),
    (b'{"text": {"nested": 1}}', "field 'text' is an object"),
    (b'{"text": "lone \\ud800 surrogate"}', "field 'text' holds a lone surrogate"),
    (b'{"text": "caf\xe9"}', "not UTF-8"),
]


@pytest.mark.parametrize("line, why", BAD_LINES, ids=[w for _, w in BAD_LINES])
@pytest.mark.parametrize("how", ["", "gz"])
def test_each_bad_record_is_one_error_naming_file_and_line(bpe, tmp_path, line, why, how):
    good = jsonl(DOCS[:6]).splitlines(keepends=True)
    data = b"".join(good[:4]) + line + b"\n" + b"".join(good[4:])
    name = "bad.jsonl" + (f".{how}" if how else "")
    (tmp_path / name).write_bytes(compress(data, how))
    res = bpe("count", "--store", "st", name, "-w", "2")
    assert_clean_error(res, f"{name} line 5: {why}", "--skip-bad-records")
    assert H.snapshot(tmp_path / "st")["totals"].get("bytes", 0) == 0  # nothing of that batch committed
    res = ok(bpe("count", "--store", "st", name, "--skip-bad-records"))
    assert "skipped 1 bad record" in stderr_text(res).splitlines()[-1]
    for i, doc in enumerate(DOCS[:6]):
        (tmp_path / f"g{i}.txt").write_bytes(doc)
    ok(bpe("count", "--store", "ref", *[f"g{i}.txt" for i in range(6)]))
    assert content(tmp_path / "st") == content(tmp_path / "ref")


def test_a_bad_record_in_a_later_batch_keeps_the_committed_ones_and_reruns_the_same(tmp_path):
    good = jsonl(DOCS).splitlines(keepends=True)
    path = tmp_path / "late.jsonl"
    path.write_bytes(b"".join(good[:150]) + b"oops\n" + b"".join(good[150:]))
    from bpe_stream.inputs.reader import InputError

    with pytest.raises(InputError, match="late.jsonl line 151: not JSON"):
        count_lib(tmp_path / "st", [path])
    snap = H.snapshot(tmp_path / "st")
    record = snap["sources"][os.fsencode(str(path))]
    kept = b"".join(good[:150])
    # what is committed is whole records before the bad line, never beyond it
    assert 0 < record["offset"] <= len(kept) and not record["done"]
    assert snap["words"] == dict(H.oracle([json.loads(x)["text"].encode() for x in
                                           kept[:record["offset"]].splitlines()])[0])


def test_parquet_bad_rows_and_columns(bpe, tmp_path):
    write_parquet(tmp_path / "n.parquet", [DOCS[0], None, DOCS[2]], row_group_size=2)
    assert_clean_error(bpe("count", "--store", "st", "n.parquet"), "n.parquet row 2: column 'text' is null")
    res = ok(bpe("count", "--store", "st", "n.parquet", "--skip-bad-records"))
    assert "skipped 1 bad record" in stderr_text(res)
    assert content(tmp_path / "st")["words"] == dict(H.oracle([DOCS[0], DOCS[2]])[0])
    assert_clean_error(bpe("count", "--store", "st2", "n.parquet", "--column", "body"),
                       "no column 'body'", "id, text")
    assert_clean_error(bpe("count", "--store", "st2", "n.parquet", "--column", "id"), "not strings")
    write_parquet(tmp_path / "b.parquet", [DOCS[1]], column="body")
    ok(bpe("count", "--store", "st3", "b.parquet", "--column", "body"))
    assert content(tmp_path / "st3")["words"] == dict(H.oracle([DOCS[1]])[0])


# -- kill, then resume -------------------------------------------------------------------------
KILL_FORMS = [("corpus.jsonl.zst", 1), ("corpus.jsonl.zst", 2), ("joined.txt.gz", 2), ("corpus.parquet", 2)]


@pytest.mark.parametrize("name, workers", KILL_FORMS)
def test_kill9_during_a_compressed_count_then_resume_gives_the_uninterrupted_store(tmp_path, name, workers):
    path = tmp_path / name
    if name.endswith(".parquet"):
        write_parquet(path, DOCS, row_group_size=20)
    elif ".jsonl" in name:
        path.write_bytes(compress(jsonl(DOCS), "zst"))
    else:
        path.write_bytes(compress(EOT.encode().join(DOCS), "gz"))
    args = ["--special-token", EOT, "--max-memory", "1M", "-w", workers, path]
    knobs = {"range_bytes": 16 << 10}
    ok(H.run(Cmd("count", "--store", tmp_path / "clean", *args), tmp_path))
    clean = content(tmp_path / "clean")
    commits = H.points(Cmd("count", "--store", tmp_path / "probe", *args, knobs=knobs), tmp_path)["commit"]
    assert commits >= 4, commits
    store = tmp_path / "st"
    cmd = Cmd("count", "--store", store, *args, knobs=knobs)
    res = H.run(cmd.with_knobs(sigkill_at=f"commit:{commits // 2}"), tmp_path)
    assert res.returncode == -signal.SIGKILL, res
    record = H.snapshot(store)["sources"][os.fsencode(str(path))]
    assert 0 < record["offset"] and not record["done"]
    res = ok(H.run(cmd, tmp_path))
    unit = "row group" if name.endswith(".parquet") else "uncompressed byte"
    assert f"resuming {path} at {unit} {record['offset']:,}" in stderr_text(res)
    assert content(store) == clean
    res = ok(H.run(cmd, tmp_path))
    assert "already counted" in stderr_text(res) and content(store) == clean


# -- progress --------------------------------------------------------------------------------
def test_the_progress_bar_moves_by_compressed_bytes(bpe, tmp_path):
    path = tmp_path / "p.jsonl.xz"
    path.write_bytes(compress(jsonl(DOCS), "xz"))
    res = ok(bpe("count", "--store", "st", "p.jsonl.xz", "--progress", "json", "-w", "1"))
    objects = [json.loads(line) for line in stderr_text(res).splitlines() if line.startswith("{")]
    assert objects[-1]["final"] and objects[-1]["done"] == objects[-1]["total"] == path.stat().st_size

    (tmp_path / "t.txt.gz").write_bytes(compress(EOT.encode().join(DOCS[:20]), "gz"))
    write_parquet(tmp_path / "t.parquet", DOCS[:20], row_group_size=6)
    ok(bpe("train", "--store", "st", "--vocab-size", "300", "-o", "tok.json", "-q"))
    for name in ("t.txt.gz", "t.parquet"):
        res = ok(bpe("encode", "-t", "tok.json", name, "-o", "ids", "--progress", "json"))
        last = [json.loads(line) for line in stderr_text(res).splitlines() if line.startswith("{")][-1]
        assert last["done"] == last["total"] == (tmp_path / name).stat().st_size, name


@pytest.mark.parametrize("pretokenizer", [r"regex:\w+|\s+|[^\w\s]+", "none"])
def test_other_pretokenizers_count_documents_as_plain_files(tmp_path, pretokenizer):
    """The str path (regex:) and the unsplittable none: a compressed text is one piece, and
    each record still counts on its own."""
    docs = DOCS[:30]
    settings = make_settings(pretokenizer, [EOT])
    for i, doc in enumerate(docs):
        (tmp_path / f"d{i}.txt").write_bytes(doc)
    (tmp_path / "j.txt").write_bytes(EOT.encode().join(docs))
    (tmp_path / "j.txt.bz2").write_bytes(compress(EOT.encode().join(docs), "bz2"))
    (tmp_path / "r.jsonl.gz").write_bytes(compress(jsonl(docs), "gz"))

    def store_of(name, paths, workers):
        with Store.open(str(tmp_path / name), create=True) as st:
            count_sources(st, [Source.from_arg(str(tmp_path / p)) for p in paths], settings, workers=workers,
                          range_bytes=4 << 10)
        return content(tmp_path / name)

    per_file = store_of("files", [f"d{i}.txt" for i in range(len(docs))], 1)
    joined = store_of("joined", ["j.txt"], 1)
    for workers in (1, 2):
        assert store_of(f"bz2-{workers}", ["j.txt.bz2"], workers) == joined
        assert store_of(f"jsonl-{workers}", ["r.jsonl.gz"], workers) == per_file


def test_strict_utf8_in_a_compressed_file_names_the_uncompressed_offset(bpe, tmp_path):
    text = b"hello world " * 5000 + b"\xff" + b" tail"
    (tmp_path / "s.txt.gz").write_bytes(gzip.compress(text))
    assert_clean_error(bpe("count", "--store", "st", "--strict-utf8", "s.txt.gz"),
                       f"invalid UTF-8 at byte offset {len(text) - 6};")
    ok(bpe("count", "--store", "st2", "s.txt.gz"))
    (tmp_path / "s.txt").write_bytes(text)
    ok(bpe("count", "--store", "st3", "s.txt"))
    assert content(tmp_path / "st2") == content(tmp_path / "st3")


# -- encode ------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def tok_file(tmp_path_factory, refs):
    d = tmp_path_factory.mktemp("tok")
    (d / "joined.txt").write_bytes(EOT.encode().join(DOCS))
    count_lib(d / "st", [d / "joined.txt"])
    from bpe_stream.train.pipeline import train_from_store
    from bpe_stream.train.trainer import TrainConfig

    with Store.open(str(d / "st")) as st:
        tok, _ = train_from_store(st, TrainConfig(vocab_size=600), lambda *a: None)
    tok.save(str(d / "tok.json"))
    return d / "tok.json"


def _encode_each(bpe, tok_file, tmp_path, docs, fmt, *extra) -> bytes:
    """The reference: each document as a plain file, encoded by the plain path."""
    out = b""
    for i, doc in enumerate(docs):
        (tmp_path / f"e{i}.txt").write_bytes(doc)
    names = [f"e{i}.txt" for i in range(len(docs))]
    out = ok(bpe("encode", "-t", tok_file, "-f", fmt, *extra, *names)).stdout
    return out


@pytest.mark.parametrize("fmt", ["txt", "u16"])
@pytest.mark.parametrize("workers", [1, 2])
def test_encode_jsonl_and_parquet_one_document_per_line(bpe, tmp_path, tok_file, fmt, workers):
    docs = DOCS[:25]
    want = _encode_each(bpe, tok_file, tmp_path, docs, fmt)
    (tmp_path / "d.jsonl.zst").write_bytes(compress(jsonl(docs), "zst"))
    write_parquet(tmp_path / "d.parquet", docs, row_group_size=7)
    for name in ("d.jsonl.zst", "d.parquet"):
        res = ok(bpe("encode", "-t", tok_file, "-f", fmt, "-w", workers, name))
        assert res.stdout == want, name
        assert f"{len(docs)} documents" in stderr_text(res)
    if fmt == "txt":
        assert want.count(b"\n") == len(docs)


def test_encode_append_special_after_each_document(bpe, tmp_path, tok_file):
    docs = DOCS[:5]
    (tmp_path / "d.jsonl").write_bytes(jsonl(docs))
    from bpe_stream import Tokenizer

    tok = Tokenizer.load(str(tok_file))
    eot = tok.special_ids[EOT]
    lines = ok(bpe("encode", "-t", tok_file, "d.jsonl", "--append-special", EOT)).stdout.splitlines()
    assert [list(map(int, line.split())) for line in lines] == [tok.encode_bytes(d) + [eot] for d in docs]
    u32 = ok(bpe("encode", "-t", tok_file, "-f", "u32", "d.jsonl", "--append-special", EOT)).stdout
    import array

    ids = array.array("I")
    ids.frombytes(u32)
    assert ids.tolist() == [i for d in docs for i in tok.encode_bytes(d) + [eot]]
    # a plain file is one document, and gets it too
    (tmp_path / "p.txt").write_bytes(docs[0])
    assert ok(bpe("encode", "-t", tok_file, "p.txt", "--append-special", EOT)).stdout == lines[0] + b"\n"
    assert_clean_error(bpe("encode", "-t", tok_file, "d.jsonl", "--append-special", "<|pad|>"),
                       "'<|pad|>' is not a special token", EOT)


@pytest.mark.parametrize("how", ["gz", "bz2", "xz", "zst"])
def test_encode_compressed_text_and_stdin_equal_the_plain_text(bpe, tmp_path, tok_file, how):
    text = EOT.encode().join(DOCS[:30])
    (tmp_path / "t.txt").write_bytes(text)
    (tmp_path / f"t.txt.{how}").write_bytes(compress(text, how))
    want = ok(bpe("encode", "-t", tok_file, "t.txt")).stdout
    assert ok(bpe("encode", "-t", tok_file, f"t.txt.{how}", "-w", "2")).stdout == want
    assert ok(bpe("encode", "-t", tok_file, input=compress(text, how))).stdout == want


def test_encode_bad_records(bpe, tmp_path, tok_file):
    (tmp_path / "b.jsonl").write_bytes(jsonl(DOCS[:2]) + b'{"text": 1}\n' + jsonl(DOCS[2:3]))
    assert_clean_error(bpe("encode", "-t", tok_file, "b.jsonl", "-o", "out"), "b.jsonl line 3: field 'text' is a number")
    assert not (tmp_path / "out").exists()
    res = ok(bpe("encode", "-t", tok_file, "b.jsonl", "--skip-bad-records"))
    assert res.stdout == _encode_each(bpe, tok_file, tmp_path, DOCS[:3], "txt")
    assert "skipped 1 bad record" in stderr_text(res)


def test_documents_module_reads_what_it_is_given(tmp_path):
    """iter_documents straight: a zstd file of several frames is read across them."""
    from bpe_stream.inputs.documents import InputForm, iter_documents

    frames = zstandard.ZstdCompressor().compress(b"one ") + zstandard.ZstdCompressor().compress(b"two")
    (tmp_path / "f.txt.zst").write_bytes(frames)
    texts = [doc.read() for doc in iter_documents(Source.from_arg(str(tmp_path / "f.txt.zst")), InputForm("zstd"))]
    assert texts == [b"one two"]


def test_a_run_without_cuts_in_a_compressed_file_is_cut_between_its_capped_pieces(tmp_path):
    """A 3 MB run of one character in a .gz file: the parent cuts the decompressed text with
    the store's cap (between the run's pieces of max_token_bytes), so no piece holds the whole
    run, and the store is the plain file's."""
    from bpe_stream.inputs.documents import count_pieces, with_form

    text = b"some words first " + b"x" * 3_000_000 + b" and words after"
    (tmp_path / "run.txt").write_bytes(text)
    (tmp_path / "run.txt.gz").write_bytes(compress(text, "gz"))
    settings = make_settings("gpt2", [EOT], max_token_bytes=64)
    source = with_form(Source.from_arg(str(tmp_path / "run.txt.gz")), "auto", "text", "text")
    sizes = [len(piece.args[0]) for piece in count_pieces(source, source.form, 0, settings, False, False, 4096)]
    assert sum(sizes) == len(text) and max(sizes) < 2_000_000  # (uncapped: one piece of 3 MB)
    stores = []
    for name in ("run.txt", "run.txt.gz"):
        with Store.open(str(tmp_path / f"s-{name}"), create=True) as st:
            count_sources(st, [Source.from_arg(str(tmp_path / name))], settings, range_bytes=4096)
        stores.append(content(tmp_path / f"s-{name}"))
    assert stores[0] == stores[1]
