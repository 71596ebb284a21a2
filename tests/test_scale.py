"""Scaling out (issue 8): the counts interchange format (export-counts / import-counts),
merge-stores, and counting on a Dask cluster (``count --engine dask``).

The Dask tests need the ``dask`` extra (``pip install -e '.[dask]'``) and are skipped without it.
They start real ``LocalCluster``s of 2 worker processes: one shared by the library-level tests,
and one that ``count --engine dask`` starts itself.
"""

from __future__ import annotations

import gzip
import json
import random
import signal
import sys
from pathlib import Path

import pytest
import reliability_helpers as H
from conftest import assert_user_error

from bpe_stream.count.counting import count_sources, make_settings
from bpe_stream.store.counts_file import CountsFormatError, check_counts, escape, unescape
from bpe_stream.store.batches import BatchAdder
from bpe_stream.inputs.reader import Source
from bpe_stream.store.lmdb_store import Store

EOT = "<|endoftext|>"
NO_DASK = "the dask extra is not installed (pip install -e '.[dask]')"


def ok(res):
    assert res.exit_code == 0, res
    return res


def snapshot(path, with_sources=True):
    """Everything a store holds that counting decides: settings, totals, counts, file records."""
    with Store.open(path, readonly=True) as st, st.reader() as txn:
        info = st.info(txn)
        snap = {"settings": info["settings"], "totals": info["totals"], "words": list(st.iter_words(txn))}
        if with_sources:
            snap["sources"] = {k: v for k, v in st.iter_sources(txn) if k.startswith(b"/")}
    return snap


def make_corpus(directory: Path, n_files: int, size: int, seed: int = 0):
    """Files of varied text: words, numbers, punctuation, non-ASCII, invalid UTF-8, special tokens."""
    rng = random.Random(seed)
    syll = ["ka", "lo", "mi", "ne", "ru", "ta", "zo", "é", "ö", "中", "文", "th", "sh", "an"]
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for i in range(n_files):
        parts, n = [], 0
        while n < size:
            r = rng.random()
            if r < 0.75:
                w = "".join(rng.choice(syll) for _ in range(rng.randint(1, 4)))
                piece = (" " if rng.random() < 0.8 else "") + w
            elif r < 0.85:
                piece = " " + str(rng.randint(0, 99999))
            elif r < 0.93:
                piece = rng.choice([".", ",", "!", "?!", " -", "'s", "\n", "\n\n", "\t", "  "])
            elif r < 0.97:
                piece = EOT
            else:
                piece = rng.choice(["\udcff", "\udc80\udcfe", "\x00", "\\"])
            parts.append(piece)
            n += len(piece)
        p = directory / f"doc{i:03d}.txt"
        p.write_bytes("".join(parts).encode("utf-8", "surrogateescape"))
        paths.append(p)
    return paths


# -- the format ------------------------------------------------------------------------------
def test_escape_round_trips_any_bytes():
    rng = random.Random(8)
    samples = [b"", b"a b", b"\t", b"\n", b"\r\n", b"\x00", b"\\", b"\\x41", b"\\\\n", b"\xff\xfe", b"caf\xc3\xa9",
               b"\xed\xa0\x80", b"\xc3", b"\x7f\x1b[0m", "中文 \u2028\x85".encode(), bytes(range(256))]
    samples += [bytes(rng.randrange(256) for _ in range(rng.randint(0, 40))) for _ in range(3000)]
    for data in samples:
        esc = escape(data)
        assert b"\t" not in esc and b"\n" not in esc and b"\r" not in esc
        esc.decode("utf-8")  # always valid UTF-8
        assert unescape(esc) == data, data
    assert escape(b"a b\tc\\d\xff\x00") == b"a b\\tc\\\\d\\xff\\x00"
    assert escape("café 中".encode()) == "café 中".encode()  # valid UTF-8 stays readable


@pytest.mark.parametrize("line, message", [
    (b"abc\n", "no tab"),
    (b"a\tb\t3\n", "more than one tab"),
    (b"abc\tx\n", "not a positive integer"),
    (b"abc\t0\n", "out of range"),
    (b"abc\t-3\n", "not a positive integer"),
    (b"abc\t3\r\n", "not a positive integer"),
    (b"ab\\qc\t3\n", "bad escape"),
    (b"ab\\x4\t3\n", "bad escape"),
    (b"abc\t%d\n" % (1 << 64), "out of range"),
])
def test_malformed_lines_name_the_line(tmp_path, line, message):
    path = tmp_path / "bad.tsv"
    header = json.dumps({"format": "bpe-stream-counts", "settings": {"pretokenizer": "gpt2"}})
    path.write_bytes(header.encode() + b"\nok\t1\n" + line)
    with pytest.raises(CountsFormatError, match=rf"bad.tsv: line 3: .*{message}"):
        check_counts(str(path))


def test_headers_are_checked(tmp_path):
    path = tmp_path / "c.tsv"
    for header, message in [
        (b"hello\t3", "not a bpe-stream counts file"),
        (b'{"format": "other"}', "not a bpe-stream counts file"),
        (b'{"format": "bpe-stream-counts", "version": 9, "settings": {"pretokenizer": "gpt2"}}', "newer"),
        (b'{"format": "bpe-stream-counts"}', "settings.pretokenizer"),
        (b'{"format": "bpe-stream-counts", "settings": {"pretokenizer": "nope"}}', "unknown pretokenizer"),
        (b'{"format": "bpe-stream-counts", "settings": {"pretokenizer": "gpt2", "pattern": "x"}}', "another pattern"),
        (b'{"format": "bpe-stream-counts", "settings": {"pretokenizer": "gpt2"}, "lines": 3}', "announces 3"),
    ]:
        path.write_bytes(header + b"\na\t1\n")
        with pytest.raises(CountsFormatError, match=message):
            check_counts(str(path))


# -- export / import ---------------------------------------------------------------------------
WEIRD_DOCS = [b"a b", b"\t", b"x\ny\r\n", b"\xff\xfe", b"\x00", b"\x00\x00z", b"\\x41", b"\\", b"\\\\n", b"z" * 2000,
              "café 中文".encode(), b"\xed\xa0\x80", b"tab\there", b"a b", b"\x7f\x1b", b"end\\"]


def test_export_import_round_trip_exact(cli, tmp_path):
    a = tmp_path / "a"
    text = EOT.encode().join(WEIRD_DOCS)
    ok(cli("count", "--store", a, "--pretokenizer", "none", "--special-token", EOT, input=text))
    ok(cli("count", "--store", a, "--pretokenizer", "none", input=b"more\tcounts\n\xff"))
    words = dict(snapshot(a)["words"])
    for doc in WEIRD_DOCS:
        assert doc in words, doc
    assert words[b"a b"] == 2 and words[b"z" * 2000] == 1
    for name in ("counts.tsv", "counts.tsv.gz"):
        out = tmp_path / name
        ok(cli("export-counts", "--store", a, "-o", out))
        dest = tmp_path / ("imported-" + name)
        ok(cli("import-counts", "--store", dest, out))
        assert snapshot(dest, with_sources=False) == snapshot(a, with_sources=False)
        again = tmp_path / ("again-" + name)
        ok(cli("export-counts", "--store", dest, "-o", again))
        assert again.read_bytes() == out.read_bytes()
    assert gzip.decompress((tmp_path / "counts.tsv.gz").read_bytes()) == (tmp_path / "counts.tsv").read_bytes()
    # stdout too, and the header says what the counts are
    res = ok(cli("export-counts", "--store", a, "-o", "-", "-q"))
    assert res.stdout == (tmp_path / "counts.tsv").read_bytes()
    header = json.loads(res.stdout.split(b"\n", 1)[0])
    assert header["settings"]["pretokenizer"] == "none" and header["settings"]["special_tokens"] == [EOT]
    assert header["lines"] == len(words)


def test_import_twice_is_skipped_and_again_adds(cli, tmp_path):
    src, dest = tmp_path / "src", tmp_path / "dest"
    ok(cli("count", "--store", src, input=b"hello world hello"))
    ok(cli("export-counts", "--store", src, "-o", tmp_path / "c.tsv"))
    ok(cli("import-counts", "--store", dest, tmp_path / "c.tsv"))
    res = ok(cli("import-counts", "--store", dest, tmp_path / "c.tsv"))
    assert "already imported" in res.stderr
    assert snapshot(dest, False) == snapshot(src, False)
    ok(cli("import-counts", "--store", dest, "--again", tmp_path / "c.tsv"))
    snap = snapshot(dest, False)
    assert snap["words"] == [(w, 2 * n) for w, n in snapshot(src)["words"]]
    assert snap["totals"]["pretokens"] == 6 and snap["totals"]["unique"] == 3


def test_import_other_settings_is_an_error(cli, tmp_path):
    src, dest = tmp_path / "src", tmp_path / "dest"
    ok(cli("count", "--store", src, "--pretokenizer", "whitespace", input=b"a b c"))
    ok(cli("export-counts", "--store", src, "-o", tmp_path / "c.tsv"))
    ok(cli("count", "--store", dest, input=b"x y z"))
    before = snapshot(dest)
    res = cli("import-counts", "--store", dest, tmp_path / "c.tsv")
    assert_user_error(res.stderr, res.exit_code)
    assert "pretokenizer" in res.stderr or "pattern" in res.stderr
    assert snapshot(dest) == before
    # and a store with other special tokens
    ok(cli("count", "--store", tmp_path / "s2", "--pretokenizer", "whitespace", "--special-token", EOT, input=b"a"))
    res = cli("import-counts", "--store", tmp_path / "s2", tmp_path / "c.tsv")
    assert_user_error(res.stderr, res.exit_code)
    assert "special_tokens" in res.stderr


def test_malformed_import_changes_nothing(cli, tmp_path):
    good, bad = tmp_path / "good.tsv", tmp_path / "bad.tsv"
    header = json.dumps({"format": "bpe-stream-counts", "settings": {"pretokenizer": "gpt2"}}).encode()
    good.write_bytes(header + b"\nhello\t3\n")
    bad.write_bytes(header + b"\n" + b"hello\t3\n" * 1000 + b"oops\n")
    res = cli("import-counts", "--store", tmp_path / "st", good, bad)
    assert_user_error(res.stderr, res.exit_code)
    assert "bad.tsv: line 1002" in res.stderr
    assert not (tmp_path / "st").exists()


def test_foreign_writer_file(cli, tmp_path):
    """What a Spark job writes: a minimal header, raw UTF-8, duplicate lines, no final newline."""
    path = tmp_path / "spark.tsv"
    header = {"format": "bpe-stream-counts", "version": 1,
              "settings": {"pretokenizer": "gpt2", "special_tokens": [EOT]},
              "totals": {"documents": 2}}
    body = " wörld\t5\n hello\t2\n\\t\\n\t4\n hello\t1\n\\xff\t1"
    path.write_bytes(json.dumps(header).encode() + b"\n" + body.encode())
    ok(cli("import-counts", "--store", tmp_path / "st", path))
    snap = snapshot(tmp_path / "st")
    assert dict(snap["words"]) == {" wörld".encode(): 5, b" hello": 3, b"\t\n": 4, b"\xff": 1}
    assert snap["totals"]["pretokens"] == 13 and snap["totals"]["documents"] == 2
    assert snap["totals"]["unique"] == 4 and snap["totals"]["unique_bytes"] == len(" wörld".encode()) + 6 + 2 + 1
    # (a header without max_token_bytes, as every one before the setting: no cap)
    assert snap["settings"] == make_settings("gpt2", [EOT], max_token_bytes=None)


def _fail_after(monkeypatch, n):
    """Makes the n-th batch write of an import or merge fail, as a kill would."""
    real = BatchAdder.flush
    calls = {"n": 0}

    def flush(self, *args, **kwargs):
        calls["n"] += 1
        if calls["n"] == n:
            raise KeyboardInterrupt
        return real(self, *args, **kwargs)

    monkeypatch.setattr(BatchAdder, "flush", flush)
    return lambda: monkeypatch.setattr(BatchAdder, "flush", real)


def test_interrupted_import_and_merge_resume_exactly(cli, tmp_path, monkeypatch):
    from bpe_stream.store.merge import import_counts, merge_store

    files = make_corpus(tmp_path / "corpus", 2, 60_000, seed=3)
    ref = tmp_path / "ref"
    ok(cli("count", "--store", ref, "--special-token", EOT, *files))
    ok(cli("export-counts", "--store", ref, "-o", tmp_path / "c.tsv"))
    restore = _fail_after(monkeypatch, 3)
    with Store.open(tmp_path / "imp", create=True) as st:
        with pytest.raises(KeyboardInterrupt):
            import_counts(st, [str(tmp_path / "c.tsv")], max_memory=200_000)
    restore()
    with Store.open(tmp_path / "imp") as st:
        assert 0 < st.unique_words() < len(snapshot(ref)["words"])
        messages = []
        import_counts(st, [str(tmp_path / "c.tsv")], max_memory=200_000, on_message=messages.append)
        assert any("resuming" in m for m in messages)
    assert snapshot(tmp_path / "imp", False) == snapshot(ref, False)

    restore = _fail_after(monkeypatch, 4)
    with Store.open(tmp_path / "mrg", create=True) as st:
        st.ensure_settings(make_settings("gpt2", [EOT]))
        with pytest.raises(KeyboardInterrupt):
            merge_store(st, str(ref), max_memory=200_000)
    restore()
    with Store.open(tmp_path / "mrg") as st:
        messages = []
        merge_store(st, str(ref), max_memory=200_000, on_message=messages.append)
        assert any("resuming" in m for m in messages)
    assert snapshot(tmp_path / "mrg") == snapshot(ref)


# -- merge-stores ------------------------------------------------------------------------------
def test_merge_two_halves_equals_one_store(cli, tmp_path):
    files = make_corpus(tmp_path / "corpus", 6, 20_000, seed=1)
    args = ("--special-token", EOT)
    ok(cli("count", "--store", tmp_path / "all", *args, *files))
    ok(cli("count", "--store", tmp_path / "h1", *args, *files[:3]))
    ok(cli("count", "--store", tmp_path / "h2", *args, *files[3:]))
    ok(cli("merge-stores", tmp_path / "h1", tmp_path / "h2", "--store", tmp_path / "m", "--max-memory", "100K"))
    assert snapshot(tmp_path / "m") == snapshot(tmp_path / "all")
    # the merged store knows what it holds: counting a file again is skipped, merging again too
    res = ok(cli("count", "--store", tmp_path / "m", files[0]))
    assert "skipped" in res.stderr
    res = ok(cli("merge-stores", tmp_path / "h1", "--store", tmp_path / "m"))
    assert "already merged" in res.stderr
    assert snapshot(tmp_path / "m") == snapshot(tmp_path / "all")
    with Store.open(tmp_path / "m", readonly=True) as st, st.reader() as txn:
        kinds = sorted(r.get("kind", "count") for _, r in st.iter_sources(txn))
    assert kinds.count("merge") == 2 and kinds.count("count") == 6
    # trained tokenizers agree
    for name in ("m", "all"):
        ok(cli("train", "--store", tmp_path / name, "--num-merges", "60", "-o", tmp_path / f"{name}.json"))
    assert (tmp_path / "m.json").read_bytes() == (tmp_path / "all.json").read_bytes()
    # a source store that grew after it was merged is refused rather than double-counted
    ok(cli("count", "--store", tmp_path / "h1", input=b"new text"))
    res = cli("merge-stores", tmp_path / "h1", "--store", tmp_path / "m")
    assert_user_error(res.stderr, res.exit_code)
    assert "changed since" in res.stderr


def test_merge_errors(cli, tmp_path):
    ok(cli("count", "--store", tmp_path / "a", input=b"a b"))
    ok(cli("count", "--store", tmp_path / "w", "--pretokenizer", "whitespace", input=b"a b"))
    for args, message in [
        (("merge-stores", tmp_path / "a", tmp_path / "w", "--store", tmp_path / "m"), "other settings"),
        (("merge-stores", tmp_path / "w", "--store", tmp_path / "a"), "pretokenizer='gpt2', not 'whitespace'"),
        (("merge-stores", tmp_path / "a", "--store", tmp_path / "a"), "destination store itself"),
        (("merge-stores", tmp_path / "missing", "--store", tmp_path / "m2"), "no store"),
    ]:
        res = cli(*args)
        assert_user_error(res.stderr, res.exit_code)
        assert message in res.stderr
    assert not (tmp_path / "m").exists() and not (tmp_path / "m2").exists()


# -- Dask --------------------------------------------------------------------------------------
def test_dask_missing_is_one_clear_error(cli, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "distributed", None)  # as if the extra were not installed
    (tmp_path / "f.txt").write_text("hello")
    res = cli("count", "--store", tmp_path / "st", "--engine", "dask", tmp_path / "f.txt")
    assert_user_error(res.stderr, res.exit_code)
    assert "pip install 'bpe-stream[dask]'" in res.stderr


@pytest.fixture(scope="module")
def dask_cluster():
    distributed = pytest.importorskip("distributed", reason=NO_DASK)
    import logging

    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                       dashboard_address=None, silence_logs=logging.ERROR)
    try:
        yield cluster.scheduler_address
    finally:
        cluster.close()


def test_dask_count_equals_local_count_and_trains_the_same(cli, tmp_path):
    pytest.importorskip("distributed", reason=NO_DASK)
    files = make_corpus(tmp_path / "corpus", 5, 30_000, seed=2)
    args = ("--special-token", EOT, "--workers", "2")
    ok(cli("count", "--store", tmp_path / "local", *args, *files))
    ok(cli("count", "--store", tmp_path / "dask", "--engine", "dask", *args, *files))  # its own LocalCluster
    assert snapshot(tmp_path / "dask") == snapshot(tmp_path / "local")
    for name in ("local", "dask"):
        ok(cli("train", "--store", tmp_path / name, "--num-merges", "80", "-o", tmp_path / f"{name}.json"))
    assert (tmp_path / "dask.json").read_bytes() == (tmp_path / "local.json").read_bytes()


def test_dask_ranges_and_stdin_equal_local(tmp_path, dask_cluster, monkeypatch):
    import io

    from bpe_stream.parallel.dask_runner import DaskRunner

    files = make_corpus(tmp_path / "corpus", 3, 120_000, seed=4)
    settings = make_settings("gpt2", [EOT])
    stdin_bytes = files[0].read_bytes()
    stores = {}
    for engine in ("local", "dask"):
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin_bytes)))
        sources = [Source.from_arg(str(p)) for p in files] + [Source.from_arg("-")]
        runner = DaskRunner(2, dask_cluster) if engine == "dask" else None
        with Store.open(tmp_path / engine, create=True) as st:
            summary = count_sources(st, sources, settings, workers=2, runner=runner,
                                    range_bytes=16_384, max_memory=300_000)
        assert summary.bytes == sum(p.stat().st_size for p in files) + len(stdin_bytes)
        stores[engine] = snapshot(tmp_path / engine)
    assert stores["dask"] == stores["local"]


def test_dask_interrupted_in_process_resumes_mid_file(tmp_path, dask_cluster):
    from bpe_stream.parallel.dask_runner import DaskRunner

    files = make_corpus(tmp_path / "corpus", 2, 150_000, seed=5)
    settings = make_settings("gpt2", [EOT])
    sources = [Source.from_arg(str(p)) for p in files]
    with Store.open(tmp_path / "ref", create=True) as st:
        count_sources(st, sources, settings, workers=1)
    seen = {"n": 0}

    def on_bytes(n):
        seen["n"] += 1
        if seen["n"] == 12:
            raise KeyboardInterrupt

    with Store.open(tmp_path / "st", create=True) as st:
        with pytest.raises(KeyboardInterrupt):
            count_sources(st, sources, settings, runner=DaskRunner(2, dask_cluster), range_bytes=8192,
                          max_memory=100_000, on_bytes=on_bytes)
        with st.reader() as txn:
            offsets = [r.get("offset", 0) for _, r in st.iter_sources(txn)]
        assert offsets and 0 < offsets[0] < files[0].stat().st_size  # stopped inside the first file
        messages = []
        count_sources(st, sources, settings, runner=DaskRunner(2, dask_cluster), range_bytes=8192,
                      max_memory=100_000, on_message=messages.append)
        assert any("resuming" in m for m in messages)
    assert snapshot(tmp_path / "st") == snapshot(tmp_path / "ref")


def test_dask_client_killed_then_rerun_gives_exact_totals(tmp_path, dask_cluster, cli):
    """The client SIGKILLs itself right after its 3rd commit (tests/seams.py; batches are not
    staged, so each commit is one batch of whole files) while the cluster lives on: the store
    holds those files done, and a rerun counts the rest exactly once."""
    files = make_corpus(tmp_path / "corpus", 40, 40_000, seed=6)
    store = tmp_path / "st"
    args = ["count", "--store", str(store), "--special-token", EOT, "--engine", "dask", "--scheduler", dask_cluster,
            "--max-memory", "1M", "-q", *map(str, files)]
    res = H.run(H.Cmd(*args, knobs={"sigkill_at": "commit:3", "stage_chunk_keys": 1 << 30}), tmp_path)
    assert res.returncode == -signal.SIGKILL, f"the count ended before its 3rd commit: {res.stderr[-500:]!r}"
    with Store.open(store, readonly=True) as st, st.reader() as txn:
        done = sum(1 for _, r in st.iter_sources(txn) if r.get("done"))
    assert 3 <= done < len(files)
    res = ok(cli(*args[:-len(files)], *files))
    assert res.exit_code == 0
    ok(cli("count", "--store", tmp_path / "ref", "--special-token", EOT, "--workers", "1", *files))
    assert snapshot(store) == snapshot(tmp_path / "ref")
