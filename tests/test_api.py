"""The public engine API (``bpe_stream.api``, issue 37): counts of texts, bytes, files and
file ranges, added up and written to the interchange file, make the store that one local
``count`` of the same documents makes (compared as ``export-counts`` output: settings,
totals and every count); ``encode_batch`` gives the ids ``bpe-stream encode`` writes.
Every example in the README and in docs/ imports only public names."""

from __future__ import annotations

import doctest
import pickle
import re
import subprocess
import sys

import pytest
from conftest import REPO
from engine_helpers import EOT, exported, local_count, record_texts, write_records
from test_scale import make_corpus

import bpe_stream
from bpe_stream import api


def ok(res):
    assert res.exit_code == 0, res
    return res


def test_the_api_doctests_hold():
    tests = [t for t in doctest.DocTestFinder().find(api) if t.examples]
    assert len(tests) >= 3
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    for t in tests:
        runner.run(t)
    assert runner.failures == 0


def test_every_name_is_in_the_package_namespace_and_loaded_on_first_use():
    for name in api.__all__:
        assert getattr(bpe_stream, name) is getattr(api, name)
        assert name in bpe_stream.__all__ and name in dir(bpe_stream)
    code = ("import sys, bpe_stream; assert 'bpe_stream.api' not in sys.modules; "
            "bpe_stream.count_text; assert 'bpe_stream.api' in sys.modules; "
            "assert 'bpe_stream.store.lmdb_store' not in sys.modules, 'the store is loaded only to import'")
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize("pretokenizer", ["gpt2", "cl100k", "regex:\\S+|\\s+"])
def test_files_and_ranges_counted_apart_make_the_local_store(tmp_path, pretokenizer):
    files = make_corpus(tmp_path / "corpus", 4, 40_000, seed=11)
    settings = api.count_settings(pretokenizer, [EOT])
    want = local_count(tmp_path / "local", files, settings)

    whole = api.Counts()
    for f in files:
        api.add_counts(whole, api.count_file(f, settings))
    ranged = api.Counts()
    ranges = [r for f in files for r in api.file_ranges(f, settings, range_bytes=4096)]
    assert len(ranges) > 4 * len(files) or pretokenizer.startswith("regex")  # regex: no byte cuts, one range
    for r in reversed(ranges):  # any order: the sum is the same
        api.add_counts(ranged, pickle.loads(pickle.dumps(api.count_file_range(r, settings))))  # as shipped
    assert ranged == whole and ranged.totals == whole.totals

    api.write_counts(tmp_path / "c.tsv.gz", settings, whole)
    api.import_counts(tmp_path / "imported", [tmp_path / "c.tsv.gz"])
    assert exported(tmp_path / "imported") == want


def test_records_counted_as_texts_make_the_local_store_of_their_files(tmp_path):
    texts = record_texts(300, seed=3)
    jsonl, parquet = write_records(tmp_path / "in", texts)
    settings = api.count_settings("gpt2", [EOT])
    for source in (jsonl, parquet):
        want = local_count(tmp_path / f"local-{source.suffix[1:]}", [source], settings)
        counts = api.Counts()
        for t in texts:
            api.add_counts(counts, api.count_text(t, settings) if len(t) % 2 else api.count_bytes(t.encode(), settings))
        out = tmp_path / f"c-{source.suffix[1:]}.tsv"
        api.write_counts(out, settings, counts)
        api.import_counts(tmp_path / f"st-{source.suffix[1:]}", [out])
        assert exported(tmp_path / f"st-{source.suffix[1:]}") == want


def test_invalid_utf8_is_kept_as_count_keeps_it(tmp_path):
    data = b"caf\xc3\xa9 \xff\xfe bad\x80 ok"
    (tmp_path / "f.txt").write_bytes(data)
    settings = api.count_settings()
    want = local_count(tmp_path / "local", [tmp_path / "f.txt"], settings)
    counts = api.count_bytes(data, settings)
    assert counts == api.count_file(tmp_path / "f.txt", settings) and b" \xff\xfe" in counts
    api.write_counts(tmp_path / "c.tsv", settings, counts)
    api.import_counts(tmp_path / "st", [tmp_path / "c.tsv"])
    assert exported(tmp_path / "st") == want


def test_interchange_file_streams_both_ways(tmp_path):
    settings = api.count_settings("gpt2", [EOT], end_of_word="</w>")
    counts = api.count_text("a b\tc\nd \\ é" + EOT + "x", settings)
    lines, total = api.write_counts(tmp_path / "c.tsv", settings, counts)
    assert (lines, total) == (len(counts), sum(counts.values()))
    assert dict(api.read_counts(tmp_path / "c.tsv")) == counts
    header = api.read_counts_header(tmp_path / "c.tsv")
    assert header == {"settings": settings, "totals": counts.totals}
    # an iterable of pairs (what a cluster streams back) is written as it comes, with given totals
    pairs = iter([(b"z", 2), (b"a", 1)])
    api.write_counts(tmp_path / "p.tsv", settings, pairs, totals={"pretokens": 3})
    assert list(api.read_counts(tmp_path / "p.tsv")) == [(b"z", 2), (b"a", 1)]
    assert api.read_counts_header(tmp_path / "p.tsv")["totals"] == {"pretokens": 3}
    (tmp_path / "bad.tsv").write_bytes(b'{"format": "bpe-stream-counts", "settings": {"pretokenizer": "gpt2"}}\nab 3\n')
    from bpe_stream.store.counts_file import CountsFormatError

    with pytest.raises(CountsFormatError, match="bad.tsv: line 2: no tab"):
        list(api.read_counts(tmp_path / "bad.tsv"))


def test_add_counts_adds_counts_and_totals_and_plain_dicts():
    settings = api.count_settings()
    a, b = api.count_text("x y y", settings), api.count_text("x y z", settings)
    assert api.add_counts(api.Counts(), a) == a
    total = api.add_counts(api.Counts(a, a.totals), b)
    assert total == {b"x": 2, b" y": 3, b" z": 1}
    assert total.totals == {k: a.totals[k] + b.totals[k] for k in api.TOTAL_KEYS}
    assert api.add_counts({b"q": 1}, {b"q": 2, b"r": 1}) == {b"q": 3, b"r": 1}
    with pytest.raises(TypeError):
        api.add_counts([], a)


def test_settings_are_those_count_records(cli, tmp_path):
    (tmp_path / "f.txt").write_text("hi")
    ok(cli("count", "--store", tmp_path / "st", "--pretokenizer", "cl100k", "--special-token", EOT,
           "--special-token", "<pad>", tmp_path / "f.txt"))
    from bpe_stream.store.lmdb_store import Store

    with Store.open(tmp_path / "st", readonly=True) as st:
        assert st.settings() == api.count_settings("cl100k", [EOT, "<pad>"])
    from bpe_stream.pretok.pretokenize import PretokenizeError

    with pytest.raises(PretokenizeError):
        api.count_settings("nope")


# -- encoding -----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def tokenizer_file(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("tok")
    files = make_corpus(tmp / "corpus", 3, 20_000, seed=9)
    settings = api.count_settings("gpt2", [EOT])
    counts = api.Counts()
    for f in files:
        api.add_counts(counts, api.count_file(f, settings))
    api.write_counts(tmp / "c.tsv", settings, counts)
    api.import_counts(tmp / "st", [tmp / "c.tsv"])
    with bpe_stream.Store.open(str(tmp / "st")) as st:
        tok, _ = bpe_stream.train_from_store(st, bpe_stream.TrainConfig(vocab_size=400))
    tok.save(str(tmp / "tok.json"))
    return tmp / "tok.json", files


@pytest.mark.parametrize("fmt", ["u16", "u32"])
def test_encode_batch_gives_the_ids_encode_writes(cli, tmp_path, tokenizer_file, fmt):
    np = pytest.importorskip("numpy")
    tok_path, files = tokenizer_file
    docs = [f.read_bytes() for f in files]  # with invalid UTF-8: bytes kept
    arrays = api.encode_batch(str(tok_path), docs, dtype=fmt)
    texts = [d.decode("utf-8", "surrogateescape") for d in docs]
    tok = bpe_stream.Tokenizer.load(str(tok_path))
    assert all(a.dtype == np.dtype(f"uint{fmt[1:]}") for a in arrays)
    assert [a.tolist() for a in api.encode_batch(tok, texts, dtype=fmt)] == [a.tolist() for a in arrays]
    for f, arr in zip(files, arrays):
        res = ok(cli("encode", "-t", tok_path, "--format", fmt, f, "-q"))
        assert arr.astype("<u2" if fmt == "u16" else "<u4").tobytes() == res.stdout


def test_encode_batch_dtypes_and_numpy_missing(tokenizer_file, monkeypatch):
    pytest.importorskip("numpy")
    tok = bpe_stream.Tokenizer.load(str(tokenizer_file[0]))
    assert api.encode_batch(tok, ["ab"])[0].dtype.name == "uint16"  # 400 ids fit
    assert api.encode_batch(tok, ["ab"], dtype="uint32")[0].dtype.name == "uint32"
    assert api.encode_batch(tok, []) == []
    with pytest.raises(ValueError, match="uint16 or uint32"):
        api.encode_batch(tok, ["ab"], dtype="int8")
    wide = bpe_stream.Tokenizer.from_vocab_merges({**{i: bytes([i]) for i in range(256)}, 70_000: b"ab"},
                                                  [(b"a", b"b")])
    with pytest.raises(ValueError, match="reaches 70000; use uint32"):
        api.encode_batch(wide, ["ab"], dtype="u16")
    assert api.encode_batch(wide, ["ab"])[0].tolist() == [70_000]
    monkeypatch.setitem(sys.modules, "numpy", None)
    with pytest.raises(ImportError, match="pip install numpy"):
        api.encode_batch(tok, ["ab"])


# -- examples import public names only --------------------------------------------------------
PUBLIC_MODULES = {"bpe_stream", "bpe_stream.api"}
_IMPORT = re.compile(r"^\s*(?:from\s+(bpe_stream[\w.]*)\s+import|import\s+(bpe_stream[\w.]*))", re.M)


def private_imports(text: str):
    """The ``bpe_stream`` modules other than the public ones that ``text`` imports."""
    return sorted({m for pair in _IMPORT.findall(text) for m in pair if m and m not in PUBLIC_MODULES})


def example_files():
    return [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")), *sorted((REPO / "examples").glob("*.py"))]


def test_the_private_import_check_catches_what_it_should():
    text = "```python\nfrom bpe_stream.count.counting import count_text\nimport bpe_stream.store\n" \
           "from bpe_stream import count_text\nimport bpe_stream.api as api\n```"
    assert private_imports(text) == ["bpe_stream.count.counting", "bpe_stream.store"]


@pytest.mark.parametrize("path", example_files(), ids=lambda p: str(p.relative_to(REPO)))
def test_examples_import_only_public_names(path):
    assert private_imports(path.read_text(encoding="utf-8")) == [], (
        f"{path.relative_to(REPO)} imports private modules: use the names of bpe_stream (bpe_stream.api)")
