"""Issue 39, reliability round three: the inputs (zstd skippable frames, JSON Lines and Parquet
records a user can give), the library with wrong types, and the CLI's words.

Each test here failed before its fix.  References are independent of the code under test: the
same documents as plain files counted by the plain path, ``regex``'s GPT-2 pattern
(``reliability_helpers.oracle``), or the exact bytes the input holds.  The failed-count (item 2)
and concurrency (item 12) tests are in ``test_reliability_round3_resume.py``.
"""

from __future__ import annotations

import json
import struct

import pytest
import reliability_helpers as H
from conftest import assert_clean_error, ok, stderr_text

zstandard = pytest.importorskip("zstandard", reason="the zstd extra (zstandard) is not installed")
pa = pytest.importorskip("pyarrow", reason="the parquet extra (pyarrow) is not installed")
import pyarrow.parquet as pq  # noqa: E402

TEXT = ("The quick brown fox jumps over the lazy dog, again and again. " * 200).encode()


def words(store) -> dict:
    return H.snapshot(store)["words"]


def content(store) -> dict:
    snap = H.snapshot(store)
    return {"words": snap["words"], "totals": snap["totals"]}


# -- 1. zstd streams that start with a skippable frame -------------------------------------------
def skippable_then_frame(data: bytes, magic: int = 0x184D2A50) -> bytes:
    """What ``pzstd`` writes: a skippable frame (magic, 4-byte little-endian size, payload)
    before the zstd frames (here one frame, then a second skippable frame between two)."""
    payload = b"pzstd!\x00\x01"
    skip = struct.pack("<II", magic, len(payload)) + payload
    half = len(data) // 2
    cctx = zstandard.ZstdCompressor()
    return skip + cctx.compress(data[:half]) + struct.pack("<II", 0x184D2A5F, 0) + cctx.compress(data[half:])


@pytest.mark.parametrize("magic", [0x184D2A50, 0x184D2A57, 0x184D2A5F])
def test_zstd_with_a_skippable_frame_first_is_zstd_on_stdin_and_as_a_file(bpe, tmp_path, magic):
    packed = skippable_then_frame(TEXT, magic)
    assert zstandard.ZstdDecompressor().decompressobj().decompress(packed) == b""  # a frame of no output first
    (tmp_path / "a.txt").write_bytes(TEXT)
    (tmp_path / "pz.txt.zst").write_bytes(packed)
    ok(bpe("count", "--store", "plain", "a.txt"))
    ok(bpe("count", "--store", "file", "pz.txt.zst"))
    ok(bpe("count", "--store", "stdin", "-", input=packed))
    assert content(tmp_path / "file") == content(tmp_path / "plain")
    assert content(tmp_path / "stdin") == content(tmp_path / "plain")
    assert words(tmp_path / "plain") == H.oracle([TEXT])[0]


def test_a_skippable_frame_cut_short_is_a_damaged_stream(bpe, tmp_path):
    packed = struct.pack("<II", 0x184D2A50, 100) + b"only ten b"
    (tmp_path / "cut.txt.zst").write_bytes(packed)
    assert_clean_error(bpe("count", "--store", "s", "cut.txt.zst"), "cut.txt.zst", "not a valid zstd stream")


# -- 3. JSON nested too deeply -----------------------------------------------------------------
DEEP = b'{"text": "fine", "meta": ' + b"[" * 100_000 + b"]" * 100_000 + b"}\n"


def test_a_record_nested_100000_deep_is_a_bad_record_not_a_traceback(bpe, tmp_path):
    (tmp_path / "deep.jsonl").write_bytes(b'{"text": "first doc"}\n' + DEEP + b'{"text": "last doc"}\n')
    assert_clean_error(bpe("count", "--store", "s", "deep.jsonl"), "deep.jsonl line 2", "nested too deeply")
    ok(bpe("count", "--store", "k", "--skip-bad-records", "deep.jsonl"))
    assert words(tmp_path / "k") == H.oracle([b"first doc", b"last doc"])[0]
    (tmp_path / "tok.json").write_bytes(_byte_tokenizer())
    assert_clean_error(bpe("encode", "-t", "tok.json", "deep.jsonl"), "deep.jsonl line 2", "nested too deeply")
    res = ok(bpe("encode", "-t", "tok.json", "--skip-bad-records", "deep.jsonl"))
    assert res.stdout.decode().split("\n")[:2] == [" ".join(map(str, b"first doc")), " ".join(map(str, b"last doc"))]


def _byte_tokenizer() -> bytes:
    """A tokenizer of the 256 bytes only (ids are the bytes), saved natively."""
    import os
    import tempfile

    from bpe_stream import Tokenizer

    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "t.json")
        Tokenizer({i: bytes([i]) for i in range(256)}, []).save(path)
        with open(path, "rb") as f:
            return f.read()


# -- 4, 8. Parquet string columns: invalid UTF-8, dictionary-encoded -----------------------------------
def test_a_parquet_string_column_with_invalid_utf8_keeps_its_bytes(bpe, tmp_path):
    docs = [b"caf\xe9 ok \xff end", b"plain text", b"\xc3\x28 broken pair"]
    # pyarrow validates strings it builds, not a view of bytes: the file holds what other writers write
    column = pa.array(docs, pa.binary()).view(pa.string())
    pq.write_table(pa.table({"text": column}), str(tmp_path / "bad.parquet"))
    for i, d in enumerate(docs):
        (tmp_path / f"d{i}.txt").write_bytes(d)
    ok(bpe("count", "--store", "pq", "bad.parquet"))
    ok(bpe("count", "--store", "txt", "d0.txt", "d1.txt", "d2.txt"))
    assert content(tmp_path / "pq") == content(tmp_path / "txt")
    assert_clean_error(bpe("count", "--store", "strict", "--strict-utf8", "bad.parquet"),
                       "bad.parquet row 1", "invalid UTF-8 at byte offset 3")
    (tmp_path / "tok.json").write_bytes(_byte_tokenizer())
    res = ok(bpe("encode", "-t", "tok.json", "bad.parquet"))
    assert [bytes(map(int, line.split())) for line in res.stdout.decode().splitlines()] == docs


def test_a_dictionary_encoded_string_column_is_strings(bpe, tmp_path):
    docs = ["a cat", "a dog", "a cat", None, "a cat and a dog"]
    pq.write_table(pa.table({"text": pa.array(docs).dictionary_encode()}), str(tmp_path / "cat.parquet"))
    assert pa.types.is_dictionary(pq.read_table(str(tmp_path / "cat.parquet")).column(0).type)
    assert_clean_error(bpe("count", "--store", "s", "cat.parquet"), "cat.parquet row 4", "is null")
    ok(bpe("count", "--store", "s", "--skip-bad-records", "cat.parquet"))
    kept = [d.encode() for d in docs if d is not None]
    assert words(tmp_path / "s") == H.oracle(kept)[0] and H.snapshot(tmp_path / "s")["totals"]["documents"] == 4
    large = pa.array(docs, pa.large_string()).dictionary_encode()
    pq.write_table(pa.table({"text": large}), str(tmp_path / "large.parquet"))
    ok(bpe("count", "--store", "l", "--skip-bad-records", "large.parquet"))
    assert words(tmp_path / "l") == H.oracle(kept)[0]


# -- 5. JSON lines in UTF-16 / UTF-32 ---------------------------------------------------------------
@pytest.mark.parametrize("encoding", ["utf-16-le", "utf-16-be", "utf-32-le", "utf-32-be"])
def test_a_json_line_in_utf16_or_utf32_is_a_bad_record(bpe, tmp_path, encoding):
    odd = '{"text": "wide"}'.encode(encoding)
    assert json.loads(odd) == {"text": "wide"}  # what json.loads(bytes) took as a record
    (tmp_path / "m.jsonl").write_bytes(b'{"text": "one"}\n' + odd + b'\n{"text": "two"}\n')
    assert_clean_error(bpe("count", "--store", "s", "m.jsonl"), "m.jsonl line 2", "UTF-16 or UTF-32")
    res = ok(bpe("count", "--store", "k", "--skip-bad-records", "m.jsonl"))
    assert "skipped 1 bad record" in stderr_text(res)
    assert words(tmp_path / "k") == H.oracle([b"one", b"two"])[0]


def test_a_whole_utf16_file_is_refused_at_its_first_line(bpe, tmp_path):
    (tmp_path / "w.jsonl").write_bytes('{"text": "a"}\n{"text": "b"}\n'.encode("utf-16"))
    assert_clean_error(bpe("count", "--store", "s", "w.jsonl"), "w.jsonl line 1:", "UTF-16 or UTF-32")


def test_a_byte_order_mark_before_the_first_record_is_no_error(bpe, tmp_path):
    (tmp_path / "b.jsonl").write_bytes(b'\xef\xbb\xbf{"text": "one"}\n{"text": "two"}\n')
    ok(bpe("count", "--store", "s", "b.jsonl"))
    assert words(tmp_path / "s") == H.oracle([b"one", b"two"])[0]


# -- 6. \udcXX escapes: the bytes 0x80-0xff; every other lone surrogate: a bad record -------------------
def test_surrogate_escapes_follow_one_rule(bpe, tmp_path):
    """``\\udc80``-``\\udcff`` are the bytes 0x80-0xff (as ``json.dumps`` writes bytes decoded
    with surrogateescape): the record counts as the plain file of those bytes.  Any other lone
    surrogate escape -- ``\\ud800``, ``\\udbff``, ``\\udc00``, ``\\udc7f``, ``\\udd00``, ``\\udfff``
    -- stands for no byte: a bad record, named as such, skipped by --skip-bad-records."""
    raw = bytes(range(0x80, 0x100)) + b" tail"
    line = json.dumps({"text": raw.decode("utf-8", "surrogateescape")}).encode()
    assert b"\\udc80" in line and b"\\udcff" in line
    (tmp_path / "ok.jsonl").write_bytes(line + b"\n")
    (tmp_path / "ok.txt").write_bytes(raw)
    ok(bpe("count", "--store", "j", "ok.jsonl"))
    ok(bpe("count", "--store", "t", "ok.txt"))
    assert content(tmp_path / "j") == content(tmp_path / "t")
    for escape in ("ud800", "udbff", "udc00", "udc7f", "udd00", "udfff"):
        (tmp_path / "bad.jsonl").write_bytes(b'{"text": "x \\%s y"}\n{"text": "kept"}\n' % escape.encode())
        assert_clean_error(bpe("count", "--store", "s", "bad.jsonl"), "bad.jsonl line 1",
                           f"holds a lone surrogate escape, \\{escape}, which stands for no byte", "\\udc80-\\udcff")
        ok(bpe("count", "--store", f"k{escape}", "--skip-bad-records", "bad.jsonl"))
        assert words(tmp_path / f"k{escape}") == H.oracle([b"kept"])[0]


# -- 7. --strict-utf8 names the file -----------------------------------------------------------------
@pytest.mark.parametrize("name", ["bad.txt", "bad.txt.gz", "bad.txt.zst"])
def test_strict_utf8_names_the_file_with_the_bad_byte(bpe, tmp_path, name):
    import gzip

    data = b"good text " * 50 + b"\xff and more"
    packed = {"bad.txt": data, "bad.txt.gz": gzip.compress(data),
              "bad.txt.zst": zstandard.ZstdCompressor().compress(data)}[name]
    (tmp_path / "fine.txt").write_bytes(b"all fine")
    (tmp_path / name).write_bytes(packed)
    res = bpe("count", "--store", "s", "--strict-utf8", "fine.txt", name)
    assert_clean_error(res, f"{name}: invalid UTF-8 at byte offset 500")


def test_strict_utf8_in_encode_names_the_file(bpe, tmp_path):
    import gzip

    data = b"good text " * 50 + b"\xff and more"
    (tmp_path / "tok.json").write_bytes(_byte_tokenizer())
    (tmp_path / "fine.txt").write_bytes(b"all fine")
    for name, packed in (("bad.txt", data), ("bad.txt.gz", gzip.compress(data))):
        (tmp_path / name).write_bytes(packed)
        assert_clean_error(bpe("encode", "-t", "tok.json", "--strict-utf8", "fine.txt", name),
                           f"{name}: invalid UTF-8 at byte offset 500")


# -- 9. the library with wrong types: TypeError naming the argument; what users pass accepted ---------
class NumpyLikeId:
    """An integer that is not an ``int`` (numpy.int64's protocol: ``__index__``)."""

    def __init__(self, value):
        self.value = value

    def __index__(self):
        return self.value


def test_the_library_names_a_wrong_type_and_accepts_what_users_pass(tmp_path):
    from bpe_stream import Tokenizer
    from bpe_stream.encode.tokenizer import TokenizerError
    from bpe_stream.train.pipeline import train_bpe, train_from_iterator

    texts = ["hello world, hello <s> there"] * 20
    tok = train_from_iterator(texts, 270, ["<s>"])
    (tmp_path / "c.txt").write_text(texts[0] * 5)
    wrong = [
        (lambda: Tokenizer.from_vocab_merges([b"a", b"b"], []), "vocab takes a dict"),
        (lambda: Tokenizer.from_vocab_merges(*tok.to_vocab_merges(), pretokenizer=5), "pretokenizer takes a name"),
        (lambda: Tokenizer(tok.vocab, tok.merges, pretokenizer=5), "pretokenizer takes a name"),
        (lambda: tok.encode(b"ab"), "encode takes text (str), not bytes; use encode_bytes"),
        (lambda: tok.encode(None), "encode takes text (str), not None"),
        (lambda: tok.decode("1 2"), "decode takes a sequence of ids (int), not str"),
        (lambda: tok.decode([1.5]), "decode takes ids (int), not float"),
        (lambda: Tokenizer.load(5), "Tokenizer.load takes a path"),
        (lambda: train_bpe(str(tmp_path / "c.txt"), 300, "<s>"), "special_tokens takes a list of str, not one str"),
        (lambda: train_from_iterator(texts, 300, special_tokens="<s>"), "special_tokens takes a list of str"),
        (lambda: train_from_iterator("one long text", 300), "texts takes an iterable of texts, not one str"),
        (lambda: train_from_iterator(texts, 300, from_tokenizer=5), "from_tokenizer takes a Tokenizer or a path"),
    ]
    for call, words_ in wrong:
        with pytest.raises(TypeError) as info:
            call()
        assert words_ in str(info.value), (words_, str(info.value))
    # accepted: numpy-style ids, bytes special tokens, a tokenizer's path
    assert tok.decode([NumpyLikeId(i) for i in tok.encode("hello there")]) == "hello there"
    with pytest.raises(TokenizerError, match="id 270 is not in the vocabulary"):  # (checked on the way)
        tok.decode([NumpyLikeId(1), NumpyLikeId(270)])
    with pytest.raises(TypeError, match="not str"):
        tok.decode([1, 2, "3"])
    vocab, merges_ = train_bpe(str(tmp_path / "c.txt"), 270, [b"<s>"])
    assert vocab == train_bpe(str(tmp_path / "c.txt"), 270, ["<s>"])[0] and b"<s>" in vocab.values()
    assert Tokenizer.from_vocab_merges(vocab, merges_, [b"<s>"]).special_tokens == ["<s>"]
    tok.save(str(tmp_path / "tok.json"))
    more = train_from_iterator(texts, 280, ["<s>"], from_tokenizer=str(tmp_path / "tok.json"))
    assert more.merges[:len(tok.merges)] == tok.merges


# -- 10. stats of a store under a directory that cannot be entered ------------------------------------
def test_stats_under_a_directory_that_cannot_be_entered_says_permission_denied(bpe, tmp_path):
    import os
    import shutil
    import subprocess

    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root and setpriv to drop root's power to enter any directory")
    (tmp_path / "a.txt").write_bytes(TEXT)
    ok(bpe("count", "--store", "locked/st", "a.txt"))
    (tmp_path / "locked").chmod(0)
    try:
        for command in (["stats"], ["train", "--vocab-size", "300", "-o", "t.json"]):
            cmd = H.Cmd(*command, "--store", tmp_path / "locked" / "st")
            res = subprocess.run(["setpriv", "--bounding-set=-dac_override,-dac_read_search", "--", *cmd.argv],
                                 env=cmd.env, cwd=tmp_path, capture_output=True, timeout=H.HANG_TIMEOUT)
            assert_clean_error(res, "Permission denied")
            assert b"no store at" not in res.stderr
    finally:
        (tmp_path / "locked").chmod(0o755)


# -- 11. train --from a tokenizer of other counts: extending, not continuing -------------------------
def test_from_a_tokenizer_of_another_store_says_extending(bpe, tmp_path):
    (tmp_path / "a.txt").write_bytes(TEXT)
    (tmp_path / "b.txt").write_bytes(b"Completely other words: zebra quantum lexicon " * 300)
    ok(bpe("count", "--store", "a", "a.txt"))
    ok(bpe("count", "--store", "b", "b.txt"))
    ok(bpe("train", "--store", "a", "--vocab-size", 280, "-o", "a.json"))
    res = ok(bpe("train", "--store", "b", "--vocab-size", 300, "--from", "a.json", "-o", "b.json"))
    assert "continuing" not in stderr_text(res) and "extending a tokenizer with 24 merges" in stderr_text(res)
    res = ok(bpe("train", "--store", "a", "--vocab-size", 300, "--from", "a.json", "-o", "a2.json"))
    assert "continuing from a tokenizer with 24 merges" in stderr_text(res)


# -- 13. what the last pass found still failing ---------------------------------------------------------
def test_a_file_name_with_a_newline_is_shown_whole_on_one_line(bpe, tmp_path):
    assert_clean_error(bpe("count", "--store", "s", "no\nsuch.txt"), "no\\nsuch.txt: no such file")


@pytest.mark.parametrize("size", ["0.1", "0.5B", "0.0001K"])
def test_a_budget_below_one_byte_is_refused(bpe, tmp_path, size):
    (tmp_path / "a.txt").write_bytes(TEXT)
    res = bpe("count", "--store", "s", "--max-memory", size, "a.txt")
    assert res.returncode == 2 and b"less than one byte" in res.stderr
    assert not (tmp_path / "s").exists()


def test_a_count_refused_for_its_regex_pattern_leaves_no_store(bpe, tmp_path):
    (tmp_path / "a.txt").write_bytes(b"words and spaces")
    res = bpe("count", "--store", "s", "--pretokenizer", r"regex:\w+", "a.txt")
    assert_clean_error(res, "does not match the text")
    assert not (tmp_path / "s").exists()
    ok(bpe("count", "--store", "kept", "a.txt"))  # an existing store is never removed
    assert_clean_error(bpe("count", "--store", "kept", "--pretokenizer", r"regex:\w+", "a.txt"))
    assert (tmp_path / "kept").is_dir()


def test_train_with_an_empty_output_is_refused_before_the_work(bpe, tmp_path):
    (tmp_path / "a.txt").write_bytes(TEXT)
    ok(bpe("count", "--store", "s", "a.txt"))
    res = bpe("train", "--store", "s", "--vocab-size", 300, "-o", "")
    assert res.returncode == 2 and b"-o '' names no file" in res.stderr
    assert H.snapshot(tmp_path / "s")["checkpoint"] is None  # refused before any merge


@pytest.mark.parametrize("args", [["count", "--help"], ["--help"], ["train", "--help"]])
def test_help_into_a_pipe_closed_early_exits_0(tmp_path, args):
    import subprocess
    import sys

    cmd = H.Cmd(*args)
    shell = subprocess.run(["bash", "-c", 'set -o pipefail; "$@" | head -c 10 >/dev/null', "_", *cmd.argv],
                           env=cmd.env, cwd=tmp_path, capture_output=True, timeout=H.HANG_TIMEOUT)
    assert shell.returncode == 0 and shell.stderr == b"", (shell, sys.executable)
