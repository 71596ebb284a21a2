"""The training record (issue 38): ``train`` keeps what its run took in the store's ``train``
table; ``stats`` and ``report --store`` show it; a read-only store records nothing; a garbled
record is left out with a note, never a traceback (and is never unpickled or run)."""

from __future__ import annotations

import datetime
import json
import re

import msgpack
import pytest

from bpe_stream import Tokenizer
from bpe_stream.store.lmdb_store import Store, pack
from bpe_stream.train.pipeline import train_from_store
from bpe_stream.store.training_record import RECORD_KEY, read_record, write_record
from bpe_stream.train.trainer import TrainConfig


def ok(res):
    assert res.exit_code == 0, res
    return res


@pytest.fixture
def counted(cli, cs336, tmp_path):
    store = tmp_path / "st"
    ok(cli("count", "--store", store, "--special-token", "<|endoftext|>", "-q", cs336 / "corpus.en"))
    return store


def _stats(cli, store) -> dict:
    return json.loads(ok(cli("stats", "--store", store, "--json")).stdout)


def _put_raw(store, raw: bytes) -> None:
    with Store.open(str(store)) as st:
        db = st.db["train"]
        st.write(lambda txn: txn.put(RECORD_KEY, raw, db=db))


def _page(cli, store, tmp_path) -> str:
    out = tmp_path / "r.html"
    ok(cli("report", "-t", tmp_path / "t.json", "--store", store, "--no-scripts", "-o", out, "-q", _held(tmp_path)))
    return out.read_text(encoding="utf-8")


def _held(tmp_path):
    p = tmp_path / "held.txt"
    if not p.exists():
        p.write_text("Held-out text, a few words of it.\n", encoding="utf-8")
    return p


def test_a_cli_train_records_its_run(cli, counted, tmp_path):
    assert _stats(cli, counted)["last_training"] is None
    assert "none recorded" in ok(cli("stats", "--store", counted)).stdout.decode()
    ok(cli("train", "--store", counted, "--num-merges", 120, "--path", "memory", "-o", tmp_path / "t.json", "-q"))
    tok = Tokenizer.load(tmp_path / "t.json")
    stats = _stats(cli, counted)
    rec = stats["last_training"]
    assert rec["path"] == "memory" and rec["reason"] and rec["engine"] in ("c", "python")
    assert rec["merges_learned"] == 120 == rec["merges"] == len(tok.merges) and rec["forced_merges"] == 0
    assert rec["vocab_size"] == tok.vocab_size and rec["tie_break"] == tok.tie_break
    assert rec["distinct_pretokens"] == stats["unique_pretokens"] and rec["symbols"] == stats["unique_pretokens_bytes"]
    assert rec["seconds"] > 0 and rec["peak_rss_bytes"] > 0 and rec["budget_bytes"] > 0
    assert "scratch_peak_bytes" not in rec
    date = datetime.datetime.fromisoformat(rec["date"])
    assert date.utcoffset() == datetime.timedelta(0)
    assert abs((datetime.datetime.now(datetime.timezone.utc) - date).days) < 1
    # stats' text form: one line
    lines = [line for line in ok(cli("stats", "--store", counted)).stdout.decode().splitlines()
             if line.startswith("last training")]
    assert len(lines) == 1 and "120 merges learned" in lines[0] and "memory path" in lines[0], lines
    # the stored bytes are a plain msgpack map (no pickle, no extension types)
    with Store.open(str(counted), readonly=True) as st, st.reader() as txn:
        raw = bytes(txn.get(RECORD_KEY, db=st.db["train"]))
    assert msgpack.unpackb(raw, raw=False, ext_hook=lambda code, data: pytest.fail("an ext type")) == rec


def test_the_disk_path_records_its_scratch_file(cli, counted, tmp_path):
    ok(cli("train", "--store", counted, "--num-merges", 40, "--path", "disk", "-o", tmp_path / "t.json", "-q"))
    rec = _stats(cli, counted)["last_training"]
    assert rec["path"] == "disk" and rec["engine"] == "disk" and rec["merges_learned"] == 40
    assert rec["scratch_peak_bytes"] > 0


def test_a_run_from_a_tokenizer_records_the_merges_it_learned(cli, counted, tmp_path):
    ok(cli("train", "--store", counted, "--num-merges", 50, "-o", tmp_path / "base.json", "-q"))
    store2 = tmp_path / "st2"
    ok(cli("count", "--store", store2, "--special-token", "<|endoftext|>", "-q", _held(tmp_path)))
    # (the same settings: --from's merges are a forced prefix, and --num-merges counts them)
    ok(cli("train", "--store", store2, "--from", tmp_path / "base.json", "--num-merges", 53, "-o", tmp_path / "ext.json",
           "-q"))
    rec = _stats(cli, store2)["last_training"]
    assert rec["merges_learned"] == 3 and rec["forced_merges"] == 50
    assert rec["merges"] == len(Tokenizer.load(tmp_path / "ext.json").merges) == 53


def test_the_report_shows_the_record_escaped(cli, counted, tmp_path):
    ok(cli("train", "--store", counted, "--num-merges", 30, "-o", tmp_path / "t.json", "-q"))
    page = _page(cli, counted, tmp_path)
    data = json.loads(re.search(r'id="report-data">(.*?)</script>', page, re.S).group(1).replace("<\\/", "</"))
    assert data["store"]["training"] == _stats(cli, counted)["last_training"]
    assert "<h3>Training record</h3>" in page and "merges learned</td>" in page
    assert ">30</td>" in page and "peak RSS of the process" in page
    # a record's text is shown as text, never as markup
    with Store.open(str(counted)) as st:
        rec, _ = read_record(st)
        write_record(st, dict(rec, reason='<b>&"x</b>'))
    page = _page(cli, counted, tmp_path)
    outside = re.sub(r'<script type="application/json".*?</script>', "", page, flags=re.S)
    assert "&lt;b&gt;&amp;&quot;x&lt;/b&gt;" in outside and "<b>" not in outside


def test_a_readonly_store_records_nothing(cli, counted):
    with Store.open(str(counted), readonly=True) as st:
        assert st.readonly
        tok, _ = train_from_store(st, TrainConfig(num_merges=20))
        assert len(tok.merges) == 20
    with Store.open(str(counted), readonly=True) as st:
        assert read_record(st) == (None, None) and st.get_train(RECORD_KEY) is None
        write_record(st, {"date": "x"})  # nothing, no error
    assert _stats(cli, counted)["last_training"] is None


@pytest.mark.parametrize("raw", [
    b"\xc1 not msgpack",  # 0xc1: never used by msgpack
    pack([1, 2, 3]),  # not a map
    pack({"date": "2025-01-01T00:00:00+00:00", "seconds": "fast", "path": "memory", "merges_learned": 3}),
    pack({"date": "d", "seconds": 1.0, "path": "memory", "merges_learned": 3, "x": [1]}),  # not scalars
    msgpack.packb({"date": "d", "seconds": 1.0, "path": "memory", "merges_learned": 3,
                   "x": msgpack.ExtType(5, b"\x80\x04code")}),  # an extension type: left as bytes, never run
    msgpack.packb({b"date": b"d"}, use_bin_type=True),  # bytes keys
], ids=["garbage", "list", "wrong-type", "nested", "ext", "bytes-keys"])
def test_a_garbled_record_is_left_out_with_a_note(cli, counted, tmp_path, raw):
    ok(cli("train", "--store", counted, "--num-merges", 10, "-o", tmp_path / "t.json", "-q"))
    _put_raw(counted, raw)
    res = ok(cli("stats", "--store", counted, "--json"))
    assert json.loads(res.stdout)["last_training"] is None
    assert "training record" in res.stderr and "garbled" in res.stderr and "Traceback" not in res.stderr
    res = ok(cli("stats", "--store", counted))
    assert "none recorded" in res.stdout.decode() and "garbled" in res.stderr
    page = _page(cli, counted, tmp_path)
    assert "Training store" in page and "Training record" not in page
    # the next train rewrites it
    ok(cli("train", "--store", counted, "--num-merges", 10, "-o", tmp_path / "t.json", "-q"))
    assert _stats(cli, counted)["last_training"]["merges_learned"] == 10
