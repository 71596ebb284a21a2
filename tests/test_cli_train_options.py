"""CLI behaviours of train, encode, export, info and eval beyond the basics.

train --path disk|memory, --resume, --from; encode --workers; export through the CLI; the
rules digest of info; eval's table and its prefix figures against a hand computation.
"""

from __future__ import annotations

import json

import pytest

from conftest import CS336

EOT = "<|endoftext|>"


def ok(res):
    assert res.exit_code == 0, res
    return res


@pytest.fixture
def counted(cli, tmp_path):
    """A store holding corpus.en."""
    store = tmp_path / "store"
    ok(cli("count", "--store", store, "--special-token", EOT, CS336 / "corpus.en", "-q"))
    return store


def test_disk_and_memory_paths_write_the_same_file(cli, counted, tmp_path):
    ok(cli("train", "--store", counted, "--vocab-size", 600, "-o", tmp_path / "m.json", "--path", "memory"))
    res = ok(cli("train", "--store", counted, "--vocab-size", 600, "-o", tmp_path / "d.json", "--path", "disk"))
    assert "on disk" in res.stderr
    assert (tmp_path / "m.json").read_bytes() == (tmp_path / "d.json").read_bytes()


def test_a_small_budget_chooses_the_disk_path(cli, counted, tmp_path):
    res = ok(cli("train", "--store", counted, "--vocab-size", 600, "-o", tmp_path / "d.json", "--max-memory", "1M"))
    assert "on disk" in res.stderr and "exceeds" in res.stderr
    # a budget below even the disk path's: still the exact algorithm, and the user is told what holds
    assert "smallest budget that holds it is --max-memory" in res.stderr and "training goes on, exact" in res.stderr
    res = ok(cli("train", "--store", counted, "--vocab-size", 600, "-o", tmp_path / "m.json", "--max-memory", "4G"))
    assert "in memory" in res.stderr and "fits" in res.stderr and "smallest budget" not in res.stderr
    assert (tmp_path / "m.json").read_bytes() == (tmp_path / "d.json").read_bytes()


def test_from_continues_to_the_same_tokenizer(cli, counted, tmp_path):
    ok(cli("train", "--store", counted, "--vocab-size", 700, "-o", tmp_path / "full.json"))
    ok(cli("train", "--store", counted, "--vocab-size", 400, "-o", tmp_path / "small.json"))
    res = ok(cli("train", "--store", counted, "--vocab-size", 700, "--from", tmp_path / "small.json",
                 "-o", tmp_path / "cont.json"))
    assert "continuing from a tokenizer with 143 merges" in res.stderr
    assert (tmp_path / "cont.json").read_bytes() == (tmp_path / "full.json").read_bytes()


def test_from_a_tokenizer_of_other_settings_is_an_error(cli, counted, tmp_path):
    ok(cli("train", "--store", counted, "--vocab-size", 400, "-o", tmp_path / "small.json"))
    res = cli("train", "--store", counted, "--vocab-size", 700, "--from", tmp_path / "small.json",
              "--special-token", "<x>", "-o", tmp_path / "cont.json")
    assert res.exit_code == 1 and res.stderr.startswith("Error: --from")
    assert not (tmp_path / "cont.json").exists()


def test_resume_after_the_store_changed_starts_over(cli, counted, tmp_path):
    ok(cli("train", "--store", counted, "--vocab-size", 500, "-o", tmp_path / "a.json"))
    extra = tmp_path / "more.txt"
    extra.write_text("a few more words\n")
    ok(cli("count", "--store", counted, extra, "-q"))
    res = ok(cli("train", "--store", counted, "--vocab-size", 500, "--resume", "-o", tmp_path / "b.json"))
    assert "no checkpoint of this run to resume" in res.stderr
    res = ok(cli("train", "--store", counted, "--vocab-size", 520, "--resume", "-o", tmp_path / "c.json"))
    assert "resuming after 243" in res.stderr


def test_encode_workers_give_identical_output(cli, counted, tmp_path, monkeypatch):
    """Small pieces, so the work really spreads over the workers; output equal for any N."""
    import io

    import bpe_stream.encode.parallel as encoding
    from bpe_stream import Tokenizer

    ok(cli("train", "--store", counted, "--vocab-size", 500, "--doc-boundaries", "-o", tmp_path / "tok.json"))
    tok = Tokenizer.load(tmp_path / "tok.json")
    text = (CS336 / "corpus.en").read_bytes()[:40000] + "<|endoftext|> 中文 ".encode() + b"\xff\xfe end"
    monkeypatch.setattr(encoding, "PIECE_CHARS", 2000)
    outputs = []
    for workers in (1, 2, 3):
        with encoding.ParallelEncoder(tok, workers) as enc:
            outputs.append([i for batch in enc.encode_stream(io.BytesIO(text), chunk_bytes=777) for i in batch])
    assert outputs[0] == outputs[1] == outputs[2]
    assert outputs[0] == tok.encode(text.decode("utf-8", "surrogateescape"))
    assert tok.decode_bytes(outputs[1]) == text
    # and through the CLI
    doc = tmp_path / "doc.txt"
    doc.write_bytes(text)
    one = ok(cli("encode", "-t", tmp_path / "tok.json", "-f", "u32", doc)).stdout
    two = ok(cli("encode", "-t", tmp_path / "tok.json", "-f", "u32", "-w", "2", doc)).stdout
    assert one == two


def test_export_through_the_cli(cli, counted, tmp_path):
    ok(cli("train", "--store", counted, "--vocab-size", 500, "-o", tmp_path / "tok.json"))
    res = ok(cli("export", "-t", tmp_path / "tok.json", "--format", "hf", "-o", tmp_path / "hf.json"))
    assert "wrote" in res.stderr
    import tokenizers

    hf = tokenizers.Tokenizer.from_file(str(tmp_path / "hf.json"))
    text = (CS336 / "tinystories_sample.txt").read_text()
    ours = ok(cli("encode", "-t", tmp_path / "tok.json", input=text.encode())).stdout.split()
    assert [int(x) for x in ours] == hf.encode(text).ids
    ok(cli("export", "-t", tmp_path / "tok.json", "--format", "gpt2", "-o", tmp_path / "g", "--vocab-size", 300))
    assert sum(1 for line in (tmp_path / "g" / "merges.txt").read_text().splitlines() if not line.startswith("#")) == 43
    res = cli("export", "-t", tmp_path / "tok.json", "--format", "wordpiece", "-o", tmp_path / "x")
    assert res.exit_code == 1 and res.stderr.startswith("Error:")


def test_info_digest_is_stable_and_follows_the_rules(cli, counted, tmp_path):
    ok(cli("train", "--store", counted, "--vocab-size", 500, "-o", tmp_path / "a.json"))
    info = json.loads(ok(cli("info", "-t", tmp_path / "a.json", "--json")).stdout)
    assert info["vocab_size"] == 500 and info["merges"] == 243 and info["special_tokens"] == {EOT: 256}
    assert info["tie_break"] == "max-bytes" and info["pretokenizer"] == "gpt2"
    # save/load keeps the digest; the same rules written again keep it too
    from bpe_stream import Tokenizer

    tok = Tokenizer.load(tmp_path / "a.json")
    tok.save(tmp_path / "b.json")
    info_b = json.loads(ok(cli("info", "-t", tmp_path / "b.json", "--json")).stdout)
    assert info_b["rules_sha256"] == info["rules_sha256"]
    # the tie-break is not a rule of encoding: relabelled, the digest stays
    tok.tie_break = "min-ids"
    tok.save(tmp_path / "c.json")
    info_c = json.loads(ok(cli("info", "-t", tmp_path / "c.json", "--json")).stdout)
    assert info_c["rules_sha256"] == info["rules_sha256"]
    # one merge different (its two parts swapped, the new token's bytes to match): another digest
    doc = json.loads((tmp_path / "a.json").read_text())
    hexes = dict((i, h) for i, h in doc["vocab"])
    left, right, new = doc["merges"][-1]
    doc["merges"][-1] = [right, left, new]
    hexes[new] = hexes[right] + hexes[left]
    doc["vocab"] = [[i, hexes[i]] for i, _ in doc["vocab"]]
    (tmp_path / "d.json").write_text(json.dumps(doc))
    info_d = json.loads(ok(cli("info", "-t", tmp_path / "d.json", "--json")).stdout)
    assert info_d["rules_sha256"] != info["rules_sha256"]


def test_eval_table_and_round_trip(cli, counted, tmp_path):
    ok(cli("train", "--store", counted, "--vocab-size", 500, "-o", tmp_path / "tok.json"))
    held = CS336 / "german.txt"  # no special tokens in it: without merges, one token per byte
    res = ok(cli("eval", "-t", tmp_path / "tok.json", held, "--merges", "0,100,243"))
    lines = res.stdout.decode().splitlines()
    assert lines[0].split()[:4] == ["merges", "vocab", "bytes", "tokens"]
    assert [line.split()[0] for line in lines[1:]] == ["0", "100", "243"]
    assert all(line.endswith("ok") for line in lines[1:])
    rows = json.loads(ok(cli("eval", "-t", tmp_path / "tok.json", held, "--merges", "0,243", "--json")).stdout)["results"]
    size = held.stat().st_size
    assert rows[0]["tokens"] == size and rows[0]["bytes"] == size  # no merges: one token per byte
    assert rows[0]["compression_ratio"] == pytest.approx(8 * size / (size * 9))  # ceil(log2(257)) = 9
    assert rows[1]["tokens"] < rows[0]["tokens"]
    assert rows[1]["words"] == len(held.read_bytes().split())
    res = cli("eval", "-t", tmp_path / "tok.json", held, "--merges", "0,9999")
    assert res.exit_code == 1 and res.stderr.startswith("Error: --merges 9999")


def test_stats_top_zero_and_json(cli, counted):
    data = json.loads(ok(cli("stats", "--store", counted, "--top", "0", "--json")).stdout)
    assert data["top"] == [] and data["unique_pretokens"] == 4763 and data["bytes"] == 133027
    data = json.loads(ok(cli("stats", "--store", counted, "--top", "2", "--json")).stdout)
    assert [row["pretoken"] for row in data["top"]] == [" ,", " the"]


def test_options_that_do_not_go_together_are_one_error(cli, counted, tmp_path):
    res = cli("count", "--store", counted, "--scheduler", "tcp://127.0.0.1:1", CS336 / "german.txt")
    assert res.exit_code == 1 and res.stderr == "Error: --scheduler goes with --engine dask\n"
    res = cli("count", "--store", counted, "--engine", "spark", CS336 / "german.txt")
    assert res.exit_code == 1 and res.stderr.startswith("Error: unknown engine 'spark'")
    res = cli("train", "--store", counted, "--vocab-size", 300, "--path", "ram", "-o", tmp_path / "t.json")
    assert res.exit_code == 1 and res.stderr.startswith("Error: unknown training path 'ram'")
    assert not (tmp_path / "t.json").exists()
