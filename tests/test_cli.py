"""The command line contract (../shared/spec/cli.md), in process (CliRunner) and, where the exact
bytes on stdout or the exit status a shell sees matter, through the real entry point."""

from __future__ import annotations

import json
import os
import re
from array import array
from collections import Counter

import pytest
import textbook
from conftest import assert_user_error

from bpe_stream import Tokenizer
from bpe_stream.formats.printable import from_printable

EOT = "<|endoftext|>"


def ok(res):
    assert res.exit_code == 0, res
    return res


def stats(cli, store):
    return json.loads(ok(cli("stats", "--store", store, "--json")).stdout)


def count_train(cli, tmp_path, text: bytes, count_args=(), train_args=("--num-merges", "20"), name="tok.json"):
    store = tmp_path / ("store-" + name)
    ok(cli("count", "--store", store, *count_args, input=text))
    out = tmp_path / name
    ok(cli("train", "--store", store, "-o", out, *train_args))
    return out


def merges_as_bytes(tok):
    return [(tok.vocab[a], tok.vocab[b]) for a, b, _ in tok.merges]


# -- count -------------------------------------------------------------------------------
def test_two_counts_add_up(cli, tmp_path):
    store = tmp_path / "st"
    text = "hello world hello\n中文 \xff".encode("utf-8", "surrogateescape")
    ok(cli("count", "--store", store, input=text))
    first = stats(cli, store)
    ok(cli("count", "--store", store, "-", input=text))
    second = stats(cli, store)
    assert first["bytes"] == len(text) and second["bytes"] == 2 * len(text)
    n = len(textbook.pretokens(text.decode("utf-8", "surrogateescape"), textbook.GPT2_PATTERN))
    assert first["pretokens"] == n and second["pretokens"] == 2 * n
    assert second["documents"] == 2 * first["documents"] == 2
    assert second["unique_pretokens"] == first["unique_pretokens"]
    top = {row["pretoken"]: row["count"] for row in second["top"]}
    assert top["hello"] == 2 and top[" hello"] == 2


def test_store_from_environment(cli, tmp_path):
    store = tmp_path / "env-store"
    ok(cli("count", input=b"abc abc", env={"BPE_STREAM_STORE": str(store)}))
    assert (store / "data.mdb").exists()
    assert stats(cli, store)["pretokens"] == 2


def test_count_with_other_settings_is_a_clean_error(cli, tmp_path):
    store = tmp_path / "st"
    ok(cli("count", "--store", store, "--special-token", EOT, input=b"one two"))
    before = stats(cli, store)
    for args in (("--pretokenizer", "words"), ("--special-token", "<|other|>"), ("--end-of-word", "</w>")):
        res = cli("count", "--store", store, *args, input=b"three four")
        assert_user_error(res.stderr, res.exit_code)
        assert res.exception is None or isinstance(res.exception, SystemExit)
    assert stats(cli, store)["pretokens"] == before["pretokens"]
    # the recorded settings are reused when none are given
    ok(cli("count", "--store", store, input=b"x<|endoftext|>y"))
    assert stats(cli, store)["settings"]["special_tokens"] == [EOT]


def test_count_other_settings_error_through_the_entry_point(bpe, tmp_path):
    store = tmp_path / "st"
    assert bpe("count", "--store", store, input=b"a b c").returncode == 0
    res = bpe("count", "--store", store, "--pretokenizer", "whitespace", input=b"a b c")
    assert_user_error(res.stderr, res.returncode)
    assert res.stdout == b""


def test_file_counted_twice_is_skipped_unless_recount(cli, tmp_path):
    store = tmp_path / "st"
    f = tmp_path / "doc.txt"
    f.write_bytes(b"some words here, some words")
    ok(cli("count", "--store", store, f))
    once = stats(cli, store)
    res = ok(cli("count", "--store", store, f))
    assert "skipped" in res.stderr and str(f) in res.stderr
    assert res.stdout == b""
    assert stats(cli, store)["pretokens"] == once["pretokens"]
    ok(cli("count", "--store", store, "--recount", f))
    assert stats(cli, store)["pretokens"] == 2 * once["pretokens"]
    assert stats(cli, store)["bytes"] == 2 * f.stat().st_size


def test_count_summary_goes_to_stderr(cli, tmp_path):
    res = ok(cli("count", "--store", tmp_path / "st", input=b"hello"))
    assert res.stdout == b""
    assert len([line for line in res.stderr.splitlines() if line.strip()]) == 1


def test_count_missing_file_is_a_clean_error(cli, tmp_path):
    res = cli("count", "--store", tmp_path / "st", tmp_path / "missing.txt")
    assert_user_error(res.stderr, res.exit_code)


def test_strict_utf8_names_the_offset(cli, tmp_path):
    res = cli("count", "--store", tmp_path / "st", "--strict-utf8", input=b"abc\xffdef")
    assert_user_error(res.stderr, res.exit_code)
    assert re.search(r"offset 3\b", res.stderr), res.stderr


def test_stdin_counts_equal_oracle(cli, tmp_path):
    text = ("Hello<|endoftext|> world's 12345 \xff\xfe 中文😀\r\n\t x" * 30).encode("utf-8", "surrogateescape")
    store = tmp_path / "st"
    ok(cli("count", "--store", store, "--special-token", EOT, input=text))
    from bpe_stream.store.lmdb_store import Store

    expected = Counter(textbook.to_bytes(p) for s, p in
                       textbook.pretokens(text.decode("utf-8", "surrogateescape"), textbook.GPT2_PATTERN, [EOT]) if not s)
    with Store.open(store, readonly=True) as st_:
        with st_.reader() as txn:
            assert dict(st_.iter_words(txn)) == dict(expected)


# -- train -------------------------------------------------------------------------------
def test_count_then_train_equals_cs336_reference(cli, tmp_path, cs336):
    store = tmp_path / "st"
    ok(cli("count", "--store", store, "--special-token", EOT, cs336 / "corpus.en"))
    out = tmp_path / "tok.json"
    res = ok(cli("train", "--store", store, "--vocab-size", "500", "-o", out))
    assert res.stdout == b""
    tok = Tokenizer.load(out)
    expected = []
    for line in (cs336 / "train-bpe-reference-merges.txt").read_text(encoding="utf-8").splitlines():
        left, right = line.split(" ")
        expected.append((from_printable(left), from_printable(right)))
    assert merges_as_bytes(tok) == expected
    assert tok.vocab_size == 500
    assert tok.special_tokens == [EOT] and tok.vocab[256] == EOT.encode()


def test_train_without_store_is_a_clean_error(cli, tmp_path):
    res = cli("train", "--store", tmp_path / "missing", "--vocab-size", "300", "-o", tmp_path / "t.json")
    assert_user_error(res.stderr, res.exit_code)
    assert not (tmp_path / "missing").exists()
    assert not (tmp_path / "t.json").exists()


def test_train_bad_settings_are_clean_errors(cli, tmp_path):
    store = tmp_path / "st"
    ok(cli("count", "--store", store, input=b"abc"))
    for args in (("--vocab-size", "100"), ("--num-merges", "5", "--tie-break", "sideways"), ()):
        res = cli("train", "--store", store, "-o", tmp_path / "t.json", *args)
        assert_user_error(res.stderr, res.exit_code)


@pytest.mark.parametrize("text", [b"", EOT.encode(), (EOT * 3).encode()])
def test_empty_and_special_only_inputs(cli, bpe, tmp_path, text):
    out = count_train(cli, tmp_path, text, ("--special-token", EOT), ("--vocab-size", "500"))
    tok = Tokenizer.load(out)
    assert tok.merges == [] and tok.vocab_size == 257
    res = ok(cli("encode", "-t", out, input=text))
    assert res.stdout.split() == [b"256"] * text.count(EOT.encode())
    assert ok(cli("decode", "-t", out, input=res.stdout)).stdout == text
    if not text:  # the real entry point too: nothing in, nothing out
        enc = bpe("encode", "-t", out, input=b"")
        assert enc.returncode == 0, enc.stderr
        dec = bpe("decode", "-t", out, input=enc.stdout)
        assert dec.returncode == 0 and dec.stdout == b""


# -- encode / decode ---------------------------------------------------------------------
ROUND_TRIPS = [
    "中文字符和标点。".encode(),
    "emoji 😀👍🏽 mixed".encode(),
    b"tabs\tand\t\ttabs\n",
    b"crlf line\r\nnext line\r\n\r\n",
    b"\xff\xfe abc \xe4",
    b"nul \x00 bytes \x00\x00",
    b"\n",
    b"  leading and trailing spaces  ",
    "never seen: Ωμέγα ق ☃".encode() + b"\xf0\x9f",
]


@pytest.fixture(scope="module")
def small_tok(tmp_path_factory):
    """A tokenizer trained through the CLI on a little English (with a special token)."""
    from typer.testing import CliRunner

    from bpe_stream.cli.commands import app

    d = tmp_path_factory.mktemp("small")
    runner = CliRunner()
    text = b"the quick brown fox jumps over the lazy dog. " * 20 + b"<|endoftext|> \xe4\xb8\xad\xe6\x96\x87 " * 5
    res = runner.invoke(app, ["count", "--store", str(d / "st"), "--special-token", EOT], input=text)
    assert res.exit_code == 0, res.stderr
    res = runner.invoke(app, ["train", "--store", str(d / "st"), "--num-merges", "40", "-o", str(d / "tok.json")])
    assert res.exit_code == 0, res.stderr
    return d / "tok.json"


def test_encode_decode_byte_exact_through_the_entry_point(bpe, small_tok, tmp_path):
    """Each input is one file (one document, one line of ids); decode gives every byte back."""
    tok = Tokenizer.load(small_tok)
    paths = []
    for i, data in enumerate(ROUND_TRIPS):
        paths.append(tmp_path / f"in{i}.txt")
        paths[-1].write_bytes(data)
    enc = bpe("encode", "-t", small_tok, *paths)
    assert enc.returncode == 0, enc.stderr
    lines = enc.stdout.split(b"\n")
    assert lines[-1] == b"" and len(lines) == len(ROUND_TRIPS) + 1
    for data, line in zip(ROUND_TRIPS, lines):
        ids = [int(x) for x in line.split()]
        assert ids == tok.encode(data.decode("utf-8", "surrogateescape"))
        assert tok.decode_bytes(ids) == data
    dec = bpe("decode", "-t", small_tok, input=enc.stdout)
    assert dec.returncode == 0, dec.stderr
    assert dec.stdout == b"".join(ROUND_TRIPS)
    # and through a pipe-like stdin, one document
    data = b"|".join(ROUND_TRIPS)
    enc = bpe("encode", "-t", small_tok, input=data)
    dec = bpe("decode", "-t", small_tok, "-", input=enc.stdout)
    assert enc.returncode == 0 and dec.returncode == 0
    assert dec.stdout == data


@pytest.mark.parametrize("data", ROUND_TRIPS)
def test_encode_decode_byte_exact_in_process(cli, small_tok, data):
    enc = ok(cli("encode", "-t", small_tok, input=data))
    assert ok(cli("decode", "-t", small_tok, input=enc.stdout)).stdout == data


def test_encode_decode_files_and_stdin_in_process(cli, small_tok, tmp_path):
    data = b"".join(ROUND_TRIPS) + b"<|endoftext|>" + b"tail"
    f = tmp_path / "in.txt"
    f.write_bytes(data)
    from_file = ok(cli("encode", "-t", small_tok, f)).stdout
    from_stdin = ok(cli("encode", "-t", small_tok, input=data)).stdout
    assert from_file == from_stdin
    assert ok(cli("decode", "-t", small_tok, input=from_file)).stdout == data


@pytest.mark.parametrize("fmt,width,code", [("u16", 2, "H"), ("u32", 4, "I"), ("txt", None, None)])
def test_formats_roundtrip(cli, small_tok, fmt, width, code):
    data = b"".join(ROUND_TRIPS)
    tok = Tokenizer.load(small_tok)
    expected = tok.encode(data.decode("utf-8", "surrogateescape"))
    enc = ok(cli("encode", "-t", small_tok, "--format", fmt, input=data))
    if width:
        assert len(enc.stdout) == width * len(expected)
        arr = array(code)
        arr.frombytes(enc.stdout)  # little-endian on this machine, as numpy.fromfile reads it
        assert arr.tolist() == expected
    else:
        assert [int(x) for x in enc.stdout.split()] == expected
    assert ok(cli("decode", "-t", small_tok, "--format", fmt, input=enc.stdout)).stdout == data


def test_u32_roundtrip_through_the_entry_point(bpe, small_tok):
    data = b"".join(ROUND_TRIPS)
    enc = bpe("encode", "-t", small_tok, "-f", "u32", input=data)
    assert enc.returncode == 0, enc.stderr
    arr = array("I")
    arr.frombytes(enc.stdout)
    assert arr.tolist() == Tokenizer.load(small_tok).encode(data.decode("utf-8", "surrogateescape"))
    dec = bpe("decode", "-t", small_tok, "-f", "u32", input=enc.stdout)
    assert dec.returncode == 0 and dec.stdout == data


def test_u16_with_large_vocabulary_is_an_error(cli, tmp_path):
    vocab = {i: bytes([i]) for i in range(256)}
    vocab[70000] = b"<|far|>"
    tok = Tokenizer(vocab, [], [(70000, "special", "<|far|>")], pretokenizer="gpt2")
    path = tmp_path / "big.json"
    tok.save(path)
    res = cli("encode", "-t", path, "--format", "u16", input=b"x<|far|>")
    assert_user_error(res.stderr, res.exit_code)
    res = ok(cli("encode", "-t", path, "--format", "u32", input=b"x<|far|>"))
    arr = array("I")
    arr.frombytes(res.stdout)
    assert arr.tolist() == [120, 70000]


def test_decode_out_of_range_id_is_a_clean_error(bpe, cli, small_tok):
    res = bpe("decode", "-t", small_tok, input=b"72 101 999999\n")
    assert_user_error(res.stderr, res.returncode)
    res = cli("decode", "-t", small_tok, input=b"72 101 999999\n")
    assert_user_error(res.stderr, res.exit_code)
    res = cli("decode", "-t", small_tok, input=b"1 2 -3")
    assert_user_error(res.stderr, res.exit_code)
    res = cli("decode", "-t", small_tok, input=b"1 2 abc")
    assert_user_error(res.stderr, res.exit_code)
    res = cli("decode", "-t", small_tok, "--format", "u16", input=b"\x01\x00\x02")
    assert_user_error(res.stderr, res.exit_code)


def test_missing_or_damaged_tokenizer_is_a_clean_error(cli, tmp_path, small_tok):
    res = cli("encode", "-t", tmp_path / "nope.json", input=b"x")
    assert_user_error(res.stderr, res.exit_code)
    bad = tmp_path / "bad.json"
    bad.write_bytes(small_tok.read_bytes()[:50])
    res = cli("decode", "-t", bad, input=b"1")
    assert_user_error(res.stderr, res.exit_code)


def test_bad_format_is_usage_error(cli, small_tok):
    res = cli("encode", "-t", small_tok, "--format", "u8", input=b"x")
    assert res.exit_code == 2


def test_gpt2_directory_as_tokenizer(cli, tmp_path, cs336, tiktoken_gpt2):
    d = tmp_path / "gpt2"
    d.mkdir()
    (d / "vocab.json").symlink_to(cs336 / "gpt2_vocab.json")
    (d / "merges.txt").symlink_to(cs336 / "gpt2_merges.txt")
    data = (cs336 / "address.txt").read_bytes() + b"<|endoftext|>" + (cs336 / "german.txt").read_bytes()
    enc = ok(cli("encode", "-t", d, input=data))
    assert [int(x) for x in enc.stdout.split()] == tiktoken_gpt2.encode(data.decode(), allowed_special="all")
    assert ok(cli("decode", "-t", d, input=enc.stdout)).stdout == data


def test_decode_writes_lone_byte_unchanged(bpe, small_tok):
    res = bpe("decode", "-t", small_tok, input=b"228\n")
    assert res.returncode == 0 and res.stdout == b"\xe4"


def test_train_extra_special_tokens_follow_the_stores(cli, tmp_path):
    store = tmp_path / "st"
    ok(cli("count", "--store", store, "--special-token", EOT, input=b"hello hello<|endoftext|>hello <|pad|>"))
    out = tmp_path / "tok.json"
    ok(cli("train", "--store", store, "--num-merges", "3", "--special-token", "<|pad|>", "-o", out))
    tok = Tokenizer.load(out)
    assert tok.special_tokens == [EOT, "<|pad|>"]
    assert tok.vocab[256] == EOT.encode() and tok.vocab[257] == b"<|pad|>"
    assert [new for _, _, new in tok.merges] == [258, 259, 260]
    ids = [int(x) for x in ok(cli("encode", "-t", out, input=b"<|pad|>hello<|endoftext|>")).stdout.split()]
    assert ids[0] == 257 and ids[-1] == 256


def test_worker_count_does_not_change_counts(cli, tmp_path, cs336):
    data = (cs336 / "corpus.en").read_bytes()[:30000] + "\xff 中文 <|endoftext|> end".encode("utf-8", "surrogateescape")
    f = tmp_path / "doc.txt"
    f.write_bytes(data)
    outs = []
    for workers in ("1", "2"):
        store = tmp_path / f"st{workers}"
        ok(cli("count", "--store", store, "--special-token", EOT, "--workers", workers, f))
        ok(cli("count", "--store", store, "--workers", workers, input=data))
        s = stats(cli, store)
        out = tmp_path / f"tok{workers}.json"
        ok(cli("train", "--store", store, "--num-merges", "50", "-o", out))
        outs.append((s["pretokens"], s["unique_pretokens"], s["bytes"], out.read_bytes()))
    assert outs[0] == outs[1]
    assert outs[0][2] == 2 * len(data)


def test_long_pretokens_train_like_the_oracle(cli, tmp_path):
    """Pretokens longer than LMDB's key limit (511 bytes) are stored apart and still train."""
    text = b"x" * 700 + b" " + b"ab" * 400 + b" " + b"ab" * 400 + b" " + "é".encode() * 300 + b" abab ab"
    store = tmp_path / "st"
    ok(cli("count", "--store", store, "--pretokenizer", "whitespace", input=text))
    out = tmp_path / "tok.json"
    ok(cli("train", "--store", store, "--num-merges", "12", "--tie-break", "min-bytes", "-o", out))
    counts = Counter(textbook.to_bytes(p) for _, p in textbook.pretokens(text.decode(), textbook.WHITESPACE_PATTERN))
    oracle = textbook.train(counts.items(), num_merges=12, tie_break="min-bytes")
    tok = Tokenizer.load(out)
    assert [(a, b) for a, b, _ in tok.merges] == oracle.merges
    assert stats(cli, store)["unique_pretokens"] == len(counts)


def test_count_and_encode_read_a_named_pipe_like_stdin(bpe, tmp_path, cs336):
    """A pipe given by path (``<(zcat f.gz)``, ``/dev/stdin``) is read once, front to back:
    the counts equal those of the same bytes as a file, and it is never skipped as counted."""
    import threading

    data = (cs336 / "corpus.en").read_bytes()[:20000] + "\xff 中文 end".encode("utf-8", "surrogateescape")
    (tmp_path / "doc.txt").write_bytes(data)

    def through_fifo(*args):
        fifo = tmp_path / "fifo"
        if fifo.exists():
            fifo.unlink()
        os.mkfifo(fifo)
        writer = threading.Thread(target=lambda: fifo.write_bytes(data))
        writer.start()
        try:
            return bpe(*args, fifo)
        finally:
            writer.join(timeout=60)

    for _ in range(2):  # counted both times: a pipe has no identity to skip it by
        res = through_fifo("count", "--store", "piped", "--workers", "2")
        assert res.returncode == 0, res.stderr
        assert b"skipped" not in res.stderr
    assert bpe("count", "--store", "filed", "doc.txt").returncode == 0
    assert bpe("count", "--store", "filed", "--recount", "doc.txt").returncode == 0
    for store in ("piped", "filed"):
        assert bpe("train", "--store", store, "--num-merges", "40", "-o", f"{store}.json").returncode == 0
    assert (tmp_path / "piped.json").read_bytes() == (tmp_path / "filed.json").read_bytes()
    piped_stats = json.loads(bpe("stats", "--store", "piped", "--json").stdout)
    assert piped_stats["bytes"] == 2 * len(data)
    encoded = through_fifo("encode", "-t", "filed.json")
    assert encoded.returncode == 0, encoded.stderr
    assert encoded.stdout == bpe("encode", "-t", "filed.json", "doc.txt").stdout


def test_progress_bar_only_on_a_terminal_and_not_quiet(monkeypatch):
    import io
    import sys

    from tqdm import tqdm

    from bpe_stream.cli import commands as cli_mod

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    monkeypatch.setattr(sys, "stderr", Terminal())
    bar = cli_mod.progress_bar(False, unit="merge", desc="train")
    assert isinstance(bar.bar, tqdm)
    bar.total = 10
    bar.update(4)
    bar.set_postfix(count=7, refresh=False)
    bar.close()
    assert "train" in sys.stderr.getvalue() and "4/10" in sys.stderr.getvalue()
    quiet = cli_mod.progress_bar(True, unit="merge")
    monkeypatch.setattr(sys, "stderr", io.StringIO())  # a pipe or a file: no bar either
    for silent in (quiet, cli_mod.progress_bar(False, unit="B", total=5)):
        assert not isinstance(getattr(silent, "bar", None), tqdm)
        with silent as b:
            b.update(3)
            b.set_postfix(count=1, refresh=False)
        silent.close()
    assert sys.stderr.getvalue() == ""
