"""Reliability (issue 7): bad input is one ``Error: ...`` line (exit 1, no traceback) and
leaves the store untouched; odd but valid input is counted and round-tripped byte-exactly;
memory stays within the budget whatever the input.

Bad input: files that cannot be read or are not UTF-8 under ``--strict-utf8``, settings that
do not compile, stores that are not ours (another program's LMDB, a newer format, damaged
records, a truncated data file), truncated and hand-edited tokenizer files, ids outside the
vocabulary.  Odd input: invalid UTF-8, NUL bytes, binaries, overlapping special tokens, one
50 MB line.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
from collections import Counter
from pathlib import Path

import lmdb
import pytest
import reliability_helpers as H
from bpe_stream.pretok.pretokenize import DEFAULT_MAX_TOKEN_BYTES, cap_pieces
from conftest import assert_clean_error, ok, stderr_text
from reliability_helpers import EOT, Cmd

from bpe_stream import Store, Tokenizer
from bpe_stream.count.counting import count_sources, make_settings
from bpe_stream.inputs.reader import Source


def store_state(path: Path):
    """Everything a user can see of a store, and the bytes of its data file."""
    snap = H.snapshot(path)
    snap.pop("unique_entries")
    return snap, H.file_digest(path / "data.mdb")


@pytest.fixture
def filled_store(tmp_path):
    path = tmp_path / "filled-store"
    doc = tmp_path / "filled.txt"
    doc.write_bytes("some text, counted before\n中文 \xff".encode("utf-8", "surrogateescape"))
    with Store.open(path, create=True) as st_:
        count_sources(st_, [Source.from_arg(str(doc))], make_settings("gpt2", [EOT]))
    return path


STRICT_DOC = b"word " * 300 + b"\xff" + b" more words" * 20  # invalid byte at offset 1500


@pytest.mark.parametrize("case", [
    "strict-utf8 file", "strict-utf8 stdin", "strict-utf8 cut character at the end", "a directory",
    "a missing file", "a path through a file", "a directory among good files", "regex that does not compile",
    "empty special token",
])
def test_count_bad_input_is_one_error_line_and_leaves_the_store_untouched(cli, tmp_path, filled_store, case):
    good = tmp_path / "good.txt"
    good.write_bytes(b"good text\n")
    bad = tmp_path / "bad.txt"
    stdin = b""
    args, fragments = [], []
    if case == "strict-utf8 file":
        bad.write_bytes(STRICT_DOC)
        args, fragments = ["--strict-utf8", good, bad], ["offset 1500"]
    elif case == "strict-utf8 stdin":
        args, fragments, stdin = ["--strict-utf8", "-"], ["offset 1500"], STRICT_DOC
    elif case == "strict-utf8 cut character at the end":
        bad.write_bytes("abc 中文 \u00e9".encode() + "中".encode()[:2])
        args, fragments = ["--strict-utf8", bad], [f"offset {len('abc 中文 é'.encode())}"]
    elif case == "a directory":
        args, fragments = [tmp_path], [str(tmp_path), "directory"]
    elif case == "a missing file":
        args, fragments = [tmp_path / "nope.txt"], ["nope.txt"]
    elif case == "a path through a file":
        args, fragments = [good / "x"], ["good.txt/x"]
    elif case == "a directory among good files":
        args, fragments = [good, tmp_path, good], ["directory"]
    elif case == "regex that does not compile":
        args, fragments = ["--pretokenizer", "regex:(?<x", good], ["does not compile"]
    elif case == "empty special token":
        args, fragments = ["--special-token", "", good], ["special token"]
    before = store_state(filled_store)
    res = cli("count", "--store", filled_store, *args, input=stdin)
    assert_clean_error(res, *fragments)
    assert store_state(filled_store) == before


@pytest.mark.parametrize("settings_args", [
    ("--pretokenizer", "regex:("), ("--special-token", ""), ("--pretokenizer", "regex:[a-z]+"),
], ids=["regex-does-not-compile", "empty-special-token", "regex-does-not-cover-the-text"])
def test_count_with_bad_settings_on_a_new_store_leaves_no_broken_store(cli, tmp_path, settings_args):
    """A count that fails on its settings (or on text a custom pattern does not cover) must not
    leave behind a store directory that no later command can open."""
    doc = tmp_path / "a.txt"
    doc.write_bytes(b"hello world\n")
    store = tmp_path / "new-store"
    assert_clean_error(cli("count", "--store", store, *settings_args, doc))
    res = cli("count", "--store", store, doc)
    assert res.exit_code == 0, f"after a failed 'count {' '.join(settings_args)}', a plain count fails: {res}"
    assert H.snapshot(store)["words"] == dict(H.oracle([doc.read_bytes()], ())[0])


def _setpriv_or_skip():
    if os.geteuid() != 0:
        pytest.skip("making a file unreadable needs a non-root user, and this test drops root's DAC "
                    "override instead, which needs root")
    tool = shutil.which("setpriv")
    if tool is None:
        pytest.skip("setpriv (util-linux) is not installed; it drops root's power to read any file")
    return tool


def test_unreadable_file_is_one_error_line(tmp_path, filled_store):
    setpriv = _setpriv_or_skip()
    doc = tmp_path / "secret.txt"
    doc.write_bytes(b"you cannot read me\n")
    doc.chmod(0)
    before = store_state(filled_store)
    cmd = Cmd("count", "--store", filled_store, doc)
    res = subprocess.run([setpriv, "--bounding-set=-dac_override,-dac_read_search", "--", *cmd.argv],
                         env=cmd.env, cwd=tmp_path, capture_output=True, timeout=H.HANG_TIMEOUT, check=False)
    assert_clean_error(res, "secret.txt")
    assert store_state(filled_store) == before


def _pack(obj) -> bytes:
    import msgpack

    return msgpack.packb(obj, use_bin_type=True)


def _make_foreign_lmdb(path: Path, meta_info=None):
    env = lmdb.open(str(path), max_dbs=5)
    if meta_info is None:
        with env.begin(write=True) as txn:
            txn.put(b"some-key", b"some value of another program")
    else:
        db = env.open_db(b"meta")
        with env.begin(write=True) as txn:
            txn.put(b"info", meta_info, db=db)
    env.close()


@pytest.mark.parametrize("case", [
    "a file", "a non-empty directory", "another program's LMDB", "a newer format", "meta record garbage",
    "meta record a list", "meta record without totals", "meta record without settings",
])
@pytest.mark.parametrize("command", ["count", "stats", "train"])
def test_store_that_is_not_ours_is_one_error_line_and_left_untouched(cli, tmp_path, case, command):
    store = tmp_path / "store"
    magic = {"magic": "bpe-stream store", "format": 1}
    settings_ = make_settings("gpt2", [])
    totals = {"bytes": 0, "documents": 0, "pretokens": 0, "specials": 0, "unique": 0, "unique_bytes": 0}
    if case == "a file":
        store.write_bytes(b"not a directory")
    elif case == "a non-empty directory":
        store.mkdir()
        (store / "notes.txt").write_bytes(b"mine")
    elif case == "another program's LMDB":
        _make_foreign_lmdb(store)
    elif case == "a newer format":
        _make_foreign_lmdb(store, _pack(dict(magic, format=99, settings=settings_, totals=totals)))
    elif case == "meta record garbage":
        _make_foreign_lmdb(store, b"\x93garbage")
    elif case == "meta record a list":
        _make_foreign_lmdb(store, _pack([1, 2, 3]))
    elif case == "meta record without totals":
        _make_foreign_lmdb(store, _pack(dict(magic, settings=settings_)))
    elif case == "meta record without settings":
        _make_foreign_lmdb(store, _pack(dict(magic, totals=totals)))
    before = {p.name: H.file_digest(p) for p in ([store] if store.is_file() else store.iterdir()) if p.name != "lock.mdb"}
    doc = tmp_path / "a.txt"
    doc.write_bytes(b"hello world\n")
    args = {"count": ("count", doc), "stats": ("stats",), "train": ("train", "-o", tmp_path / "t.json",
                                                                    "--vocab-size", "300")}[command]
    res = cli(args[0], "--store", store, *args[1:])
    assert_clean_error(res)
    after = {p.name: H.file_digest(p) for p in ([store] if store.is_file() else store.iterdir()) if p.name != "lock.mdb"}
    assert after == before
    assert not (tmp_path / "t.json").exists()


def test_truncated_store_file_is_one_error_line_not_a_crash(tmp_path, filled_store):
    """A data.mdb cut short (a copy interrupted, a disk that filled during a copy): LMDB maps
    pages past the end of the file, and reading them is SIGBUS unless the size is checked."""
    data = filled_store / "data.mdb"
    with open(data, "r+b") as f:
        f.truncate(os.path.getsize(data) // 2)
    res = H.run(Cmd("stats", "--store", filled_store), tmp_path)
    assert res.returncode >= 0, f"stats on a truncated store died of signal {-res.returncode}"
    assert_clean_error(res)


@pytest.mark.parametrize("command", ["stats", "train"])
def test_missing_store_is_one_error_line_and_creates_nothing(cli, tmp_path, command):
    store = tmp_path / "missing"
    args = ("-o", tmp_path / "t.json", "--vocab-size", "300") if command == "train" else ()
    assert_clean_error(cli(command, "--store", store, *args), str(store))
    assert not store.exists()
    res = cli(command, *args, env={"BPE_STREAM_STORE": str(store)})
    assert_clean_error(res, str(store))
    assert not store.exists()


# -- tokenizer files ------------------------------------------------------------------------
def _edited(doc: dict, case: str) -> dict:
    doc = json.loads(json.dumps(doc))
    if case == "merge names an unknown id":
        doc["merges"][5][2] = 999_999
    elif case == "a vocab entry removed":
        doc["vocab"].pop()
    elif case == "a byte token removed":
        doc["vocab"] = [e for e in doc["vocab"] if e[0] != 65]
    elif case == "newer version":
        doc["version"] = 2
    elif case == "float in a merge":
        doc["merges"][0][0] = float(doc["merges"][0][0])
    elif case == "not hex":
        doc["vocab"][3][1] = "zz"
    elif case == "negative id":
        doc["vocab"].append([-5, "4142"])
    elif case == "merge bytes do not add up":
        doc["merges"][0][0], doc["merges"][0][1] = doc["merges"][0][1], doc["merges"][0][0]
        if doc["merges"][0][0] == doc["merges"][0][1]:
            doc["merges"][0][1] = 0
    elif case == "pretokenizer that does not compile":
        doc["pretokenizer"] = {"name": "regex:(", "pattern": "("}
    elif case == "unknown pretokenizer":
        doc["pretokenizer"] = {"name": "gpt5", "pattern": "x"}
    elif case == "vocab is an object":
        doc["vocab"] = {str(i): h for i, h in doc["vocab"]}
    elif case == "merges missing":
        del doc["merges"]
    elif case == "symbol with an unknown role":
        doc["symbols"][0]["role"] = "magic"
    elif case == "symbol id outside the vocab":
        doc["symbols"][0]["id"] = 10 ** 6
    elif case == "format name changed":
        doc["format"] = "something-else"
    else:
        raise AssertionError(case)
    return doc


EDITS = ["merge names an unknown id", "a vocab entry removed", "a byte token removed", "newer version",
         "float in a merge", "not hex", "negative id", "merge bytes do not add up",
         "pretokenizer that does not compile", "unknown pretokenizer", "vocab is an object", "merges missing",
         "symbol with an unknown role", "symbol id outside the vocab", "format name changed"]


@pytest.mark.parametrize("command", ["encode", "decode", "info", "export"])
def test_truncated_and_hand_edited_tokenizer_files_are_one_error_line(cli, tmp_path, small_tok_file, command):
    raw = small_tok_file.read_bytes()
    doc = json.loads(raw)
    variants = {f"truncated at {share:.0%}": raw[: int(len(raw) * share)] for share in (0.0, 0.01, 0.5, 0.99)}
    variants.update({case: json.dumps(_edited(doc, case)).encode() for case in EDITS})
    src = tmp_path / "in.txt"
    src.write_bytes(b"hello world\n")
    for name, data in variants.items():
        path = tmp_path / "tok.json"
        path.write_bytes(data)
        out = tmp_path / "out"
        args = {"encode": ("encode", "-t", path, src, "-o", out), "decode": ("decode", "-t", path, "-o", out),
                "info": ("info", "-t", path), "export": ("export", "-t", path, "-f", "hf", "-o", out)}[command]
        res = cli(*args, input=b"1 2 3\n")
        try:
            assert_clean_error(res)
        except AssertionError as exc:
            raise AssertionError(f"{command} with a tokenizer file ({name}): {exc}") from None
        assert not out.exists(), name


def test_tokenizer_file_with_one_huge_id_builds_no_table_of_that_size(tmp_path, small_tok_file):
    """A hand-edited id of 2**40 must not make the loader build a table of 2**40 entries (out
    of memory) or walk one (hours): it is one clean error, or a tokenizer that works, within
    400 MB of address space and 120 s of CPU -- bounds on the work, not on the clock (the
    load needs 250 MB and well under a second of CPU)."""
    import resource

    doc = json.loads(small_tok_file.read_bytes())
    doc["vocab"].append([2 ** 40, "4142"])
    path = tmp_path / "huge-id.json"
    path.write_text(json.dumps(doc))

    def limit_work():
        resource.setrlimit(resource.RLIMIT_AS, (400 << 20, 400 << 20))
        resource.setrlimit(resource.RLIMIT_CPU, (120, 120))

    res = H.run(Cmd("info", "-t", path), tmp_path, preexec_fn=limit_work)
    assert res.returncode != -signal.SIGXCPU, "info -t on a tokenizer file with the id 2**40 used 120 s of CPU"
    err = stderr_text(res)
    assert "out of memory" not in err and "MemoryError" not in err, err
    if res.returncode != 0:
        assert_clean_error(res, str(2 ** 40))


# -- decode: ids that are not in the vocabulary --------------------------------------------------
@pytest.mark.parametrize("fmt, data, bad", [
    ("txt", b"5 300 99999 1\n", "99999"), ("txt", b"-3\n", "-3"), ("txt", b"1 " + b"9" * 30 + b"\n", "9" * 30),
    ("txt", b"1 2 x\n", "'x'"), ("txt", "١٢\n".encode(), "token id"), ("txt", b"1\x002\n", "token id"),
    ("u16", b"\xff\xff", "65535"), ("u32", b"\xff\xff\xff\x7f", "2147483647"), ("u32", b"\x01\x00\x00", "stray"),
])
def test_decode_ids_out_of_range_are_one_error_line(cli, tmp_path, small_tok_file, fmt, data, bad):
    ids = tmp_path / "ids"
    ids.write_bytes(data)
    out = tmp_path / "out.bin"
    out.write_bytes(b"old output\n")
    assert_clean_error(cli("decode", "-t", small_tok_file, "-f", fmt, ids, "-o", out), bad)
    assert out.read_bytes() == b"old output\n"
    assert_clean_error(cli("decode", "-t", small_tok_file, "-f", fmt, input=data), bad)


@pytest.fixture(scope="module")
def big_vocab_tok(tmp_path_factory):
    """A tokenizer of 65,656 tokens (every byte pair but a few merged): ids above 65,535."""
    merges, vocab = [], {i: bytes([i]) for i in range(256)}
    new = 256
    for a in range(256):
        for b in range(256):
            if new >= 256 + 65_400:
                break
            vocab[new] = bytes([a, b])
            merges.append((a, b, new))
            new += 1
    tok = Tokenizer(vocab, merges)
    path = tmp_path_factory.mktemp("big") / "big.json"
    tok.save(path)
    return path


def test_u16_with_a_vocabulary_over_65536_is_one_error_line(cli, tmp_path, big_vocab_tok):
    src = tmp_path / "in.txt"
    text = bytes(range(256)) * 4 + b"a\xff!"  # the pretoken b"\xff!" is token 65,569
    src.write_bytes(text)
    out = tmp_path / "ids.u16"
    assert_clean_error(cli("encode", "-t", big_vocab_tok, "-f", "u16", src, "-o", out), "u32")
    assert not out.exists()
    assert_clean_error(cli("encode", "-t", big_vocab_tok, "-f", "u16", input=text), "u32")
    ids = ok(cli("encode", "-t", big_vocab_tok, "-f", "u32", src)).stdout
    from array import array

    assert max(array("I", ids)) > 0xFFFF
    (tmp_path / "ids.u32").write_bytes(ids)
    assert ok(cli("decode", "-t", big_vocab_tok, "-f", "u32", tmp_path / "ids.u32")).stdout == text


# -- input that is odd but valid: counted and encoded byte-exactly ------------------------------
ODD_INPUTS = {
    "invalid UTF-8": b"caf\xe9 na\xefve \xff\xfe \xc0\xaf overlong \xed\xa0\x80 surrogate \x80 lone, cut \xe4\xb8",
    "NUL bytes": b"\x00\x00 nul\x00 in\x00the middle \x00\n\x00",
    "random binary": bytes(H.seeded(1).getrandbits(8) for _ in range(20_000)),
    "empty": b"",
    "only a special token": EOT.encode(),
    "CR and odd spaces": b"a\r\nb\rc\x0b\x0cd\xc2\xa0e\xe3\x80\x80f \t\n",
}


@pytest.mark.parametrize("name", list(ODD_INPUTS) + ["a compiled binary"])
def test_odd_inputs_are_counted_and_round_tripped_byte_exactly(cli, tmp_path, small_tok_file, name):
    data = ODD_INPUTS.get(name)
    if data is None:
        from bpe_stream import _fastbpe

        data = Path(_fastbpe.__file__).read_bytes()[:200_000]
    src = tmp_path / "in.bin"
    src.write_bytes(data)
    store = tmp_path / "store"
    ok(cli("count", "--store", store, "--special-token", EOT, src))
    ok(cli("count", "--store", store, "-", input=data))
    snap = H.snapshot(store)
    counts, specials = H.oracle([data])
    assert snap["words"] == {k: 2 * v for k, v in counts.items()}
    assert snap["totals"]["bytes"] == 2 * len(data)
    assert snap["totals"]["documents"] == 2 * (specials + 1)
    ids = ok(cli("encode", "-t", small_tok_file, src)).stdout
    assert ok(cli("decode", "-t", small_tok_file, input=ids)).stdout == data
    for fmt in ("u16", "u32"):
        ids = ok(cli("encode", "-t", small_tok_file, "-f", fmt, input=data)).stdout
        assert ok(cli("decode", "-t", small_tok_file, "-f", fmt, input=ids)).stdout == data
    try:
        data.decode("utf-8")
        first_bad = None
    except UnicodeDecodeError as exc:
        first_bad = exc.start
    if first_bad is not None:
        for args in (("count", "--store", tmp_path / "strict", "--strict-utf8", src),
                     ("encode", "-t", small_tok_file, "--strict-utf8", src)):
            assert_clean_error(cli(*args), f"offset {first_bad}")


def test_empty_store_trains_an_empty_tokenizer(cli, tmp_path):
    store = tmp_path / "store"
    (tmp_path / "empty.txt").write_bytes(b"")
    ok(cli("count", "--store", store, tmp_path / "empty.txt"))
    ok(cli("count", "--store", store, input=b""))
    stats = json.loads(ok(cli("stats", "--store", store, "--json")).stdout)
    assert (stats["documents"], stats["bytes"], stats["pretokens"], stats["unique_pretokens"]) == (2, 0, 0, 0)
    ok(cli("train", "--store", store, "-o", tmp_path / "t.json", "--vocab-size", "1000"))
    tok = Tokenizer.load(tmp_path / "t.json")
    assert tok.vocab_size == 256 and tok.merges == []
    assert ok(cli("encode", "-t", tmp_path / "t.json", input=b"")).stdout.strip() == b""


def _longest_match_oracle(text: str, specials):
    """(pretoken counts, specials seen) with the longest special token winning at each position."""
    by_len = sorted(specials, key=len, reverse=True)
    counts, seen, buf, i = Counter(), [], [], 0
    while i < len(text):
        hit = next((s for s in by_len if text.startswith(s, i)), None)
        if hit is None:
            buf.append(text[i])
            i += 1
            continue
        counts.update(H.oracle(["".join(buf).encode()], ())[0])
        buf = []
        seen.append(hit)
        i += len(hit)
    counts.update(H.oracle(["".join(buf).encode()], ())[0])
    return counts, seen


def test_overlapping_special_tokens_longest_match_wins(cli, tmp_path):
    specials = ["<|a|>", "<|a|><|b|>", "<|a", "|>"]
    text = "x<|a|><|b|>y<|a|>z<|a w|>v<|a|><|a|><|b|><|b|>"
    src = tmp_path / "in.txt"
    src.write_text(text)
    store = tmp_path / "store"
    args = [a for s in specials for a in ("--special-token", s)]
    ok(cli("count", "--store", store, *args, src))
    counts, seen = _longest_match_oracle(text, specials)
    snap = H.snapshot(store)
    assert snap["words"] == dict(counts)
    assert snap["totals"]["specials"] == len(seen) and snap["totals"]["documents"] == len(seen) + 1
    ok(cli("train", "--store", store, "-o", tmp_path / "t.json", "--num-merges", "5"))
    tok = Tokenizer.load(tmp_path / "t.json")
    ids = [int(x) for x in ok(cli("encode", "-t", tmp_path / "t.json", src)).stdout.split()]
    assert [tok.vocab[i].decode() for i in ids if i in set(tok.special_ids.values())] == seen
    assert ok(cli("decode", "-t", tmp_path / "t.json", input=" ".join(map(str, ids)).encode())).stdout == text.encode()


def _peak_rss_mb(cmd: Cmd, cwd) -> tuple:
    """Runs ``cmd``; returns (exit status, stderr, its own peak resident memory in MB)."""
    fd, hwm = tempfile.mkstemp(dir=cwd, prefix="hwm-")
    os.close(fd)
    res = H.run(cmd.with_knobs(hwm_file=hwm), cwd)
    return res.returncode, stderr_text(res), int(Path(hwm).read_text()) / 1024


@pytest.fixture(scope="module")
def baseline_rss(tmp_path_factory):
    work = tmp_path_factory.mktemp("rss")
    (work / "tiny.txt").write_bytes(b"tiny\n")
    rc, err, rss = _peak_rss_mb(Cmd("count", "--store", work / "store", "-w", "1", work / "tiny.txt"), work)
    assert rc == 0, err
    return rss


@pytest.mark.parametrize("kind", ["words, no newline", "one pretoken"])
def test_a_single_50MB_line_is_counted_exactly_within_the_memory_budget(tmp_path, baseline_rss, kind):
    """cli.md: "Memory stays within the budget whatever the input: a 10 GB file with no newline
    included".  A 50 MB line: of 100 kB words, or of one letter only (a single pretoken,
    counted as its 64 KiB pieces under the default --max-token-bytes; the allowance below
    is still four copies of the longest pretoken beyond the budget)."""
    size = 50_000_000
    src = tmp_path / "line.txt"
    if kind == "one pretoken":
        src.write_bytes(b"a" * size)
        whole = {b"a" * size: 1}
    else:
        word = b"x" * 99_999 + b" "
        src.write_bytes(word * (size // len(word)))
        whole = {b"x" * 99_999: 1, b" " + b"x" * 99_999: size // len(word) - 1, b" ": 1}
    # the default --max-token-bytes cuts the pretokens longer than 64 KiB into pieces
    expected = Counter()
    for pretoken, n in whole.items():
        for piece in cap_pieces([pretoken.decode()], DEFAULT_MAX_TOKEN_BYTES):
            expected[piece.encode()] += n
    expected = dict(expected)
    longest = max(map(len, expected))
    budget_mb = 16
    store = tmp_path / "store"
    rc, err, rss = _peak_rss_mb(Cmd("count", "--store", store, "--max-memory", f"{budget_mb}M", "-w", "1", src),
                                tmp_path)
    assert rc == 0, err
    snap = H.snapshot(store)
    assert snap["words"] == expected
    assert snap["totals"]["bytes"] == size and snap["totals"]["documents"] == 1
    # One pretoken is held about four times at its peak: the joined text, the regex match,
    # its bytes and the stored value (count + bytes) -- a design limit for giant pretokens.
    allowed = baseline_rss + budget_mb + 4 * longest / 2 ** 20 + 16
    assert rss <= allowed, (
        f"counting a 50 MB line ({kind}) peaked at {rss:.0f} MB; a tiny input needs {baseline_rss:.0f} MB, "
        f"the budget is {budget_mb} MB, the longest pretoken {longest / 2 ** 20:.0f} MB: allowed {allowed:.0f} MB")


