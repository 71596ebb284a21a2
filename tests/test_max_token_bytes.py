"""``count --max-token-bytes`` (issue 19, item 8): a pretoken longer than the cap is cut into
pieces of at most that many bytes, never inside a character, the same way in the C scanner
(scan, count table, text encoder) and in Python (``regex`` + ``cap_pieces``); the cap is
recorded in the store and carried by the tokenizer; and text with no space cut (a base64
line, CJK without spaces) is chunked at bounded points, so counting, encoding and decoding
it stay within a memory bound (peak RSS of the subprocess, from ``/proc``: no timing)."""

from __future__ import annotations

import base64
import functools
import json
import random
from array import array
from collections import Counter
from pathlib import Path

import pytest
import regex
from hypothesis import example, given, settings
from hypothesis import strategies as st
from scanner_inputs import CORPORA, NAMES, documents, fragment

import reliability_helpers as H
from bpe_stream.pretok import pretokenize
from bpe_stream.count.counting import make_settings
from bpe_stream.native import fastbpe
from bpe_stream.pretok.pretokenize import (
    DEFAULT_MAX_TOKEN_BYTES,
    Pretokenizer,
    SpecialSplitter,
    StreamSplitter,
    cap_pieces,
    find_byte_cut,
    last_piece_byte_cut,
)
from bpe_stream.pretok.scan import scan, scan_with_regex
from bpe_stream.store.lmdb_store import Store
from bpe_stream.encode.tokenizer import Tokenizer
from conftest import assert_user_error, ok, stderr_text
from reliability_helpers import Cmd

SE = "surrogateescape"
CAPPED = ["gpt2", "cl100k", "o200k", "whitespace", "words"]
caps = st.one_of(st.just(0), st.integers(4, 24))
# documents with long runs: a fragment repeated
runs = st.lists(st.one_of(fragment, st.tuples(fragment, st.integers(2, 40)).map(lambda t: t[0] * t[1])),
                max_size=12).map(b"".join)


def oracle_pieces(data: bytes, name: str, cap: int) -> list:
    """The independent rule: ``regex.findall`` (scan_with_regex without a cap), then each
    match longer than ``cap`` bytes cut greedily at whole characters."""
    out = []
    for piece in scan_with_regex(data, name):
        while cap and len(piece) > cap:
            chars = piece.decode("utf-8", SE)
            k, used = 0, 0
            while used + len(chars[k].encode("utf-8", SE)) <= cap:
                used += len(chars[k].encode("utf-8", SE))
                k += 1
            out.append(piece[:used])
            piece = piece[used:]
        out.append(piece)
    return out


# -- the split rule: C and Python agree -----------------------------------------------------
@given(data=st.one_of(documents, runs), name=st.sampled_from(NAMES), cap=caps)
def test_c_and_python_cut_long_pretokens_alike(data, name, cap):
    want = oracle_pieces(data, name, cap)
    pre = Pretokenizer.from_name(name, cap or None)
    assert [p.encode("utf-8", SE) for p in pre.split(data.decode("utf-8", SE))] == want
    if fastbpe is not None:
        assert fastbpe.scan(data, name, cap) == want
        table = fastbpe.CountTable()
        assert table.feed(data, name, cap) == len(want)
        assert table.to_dict() == dict(Counter(want))
    assert all(len(p) <= max(cap, 4) for p in want) or not cap


@given(data=st.one_of(documents, runs), name=st.sampled_from(CAPPED), cap=caps)
def test_the_native_text_encoder_cuts_as_the_python_path(data, name, cap):
    vocab = {i: bytes([i]) for i in range(256)} | {256: b"ab", 257: b"abab", 258: b"\xe4\xb8"}
    tok = Tokenizer(vocab, [(97, 98, 256), (256, 256, 257), (0xE4, 0xB8, 258)], pretokenizer=name,
                    max_token_bytes=cap or None)
    text = data.decode("utf-8", SE)
    python = array("I")
    python.frombytes(tok._pretoken_ids(tok.pretokenizer.split(text)))
    assert tok.encode(text) == list(python)
    if name != "words":  # (words drops the spaces)
        assert tok.decode_bytes(tok.encode(text)) == data


# -- chunking: any cut gives the pretokens of the whole -----------------------------------------
@given(data=st.one_of(documents, runs), name=st.sampled_from(CAPPED), cap=caps, seed=st.integers(0, 2 ** 16))
def test_stream_chunking_equals_all_at_once(monkeypatch, data, name, cap, seed):
    monkeypatch.setattr(pretokenize, "FAMILY_CUT_MIN_CHARS", 0)  # the no-space cuts on short texts too
    pre = Pretokenizer.from_name(name, cap or None)
    text = data.decode("utf-8", SE)
    rng = random.Random(seed)
    stream = StreamSplitter(pre, SpecialSplitter([]))
    got, pos = [], 0
    while pos < len(text):
        step = rng.randint(1, 9)
        got += [pre.split(v) for k, v in stream.feed(text[pos:pos + step]) if k == "text"]
        pos += step
    got += [pre.split(v) for k, v in stream.end_document() if k == "text"]
    assert [p for ps in got for p in ps] == pre.split(text)


@given(data=st.one_of(documents, runs), name=st.sampled_from(["gpt2", "cl100k", "o200k"]), cap=caps,
       start=st.integers(0, 60))
def test_byte_cuts_without_spaces_are_safe(monkeypatch, data, name, cap, start):
    monkeypatch.setattr(pretokenize, "FAMILY_CUT_MIN_CHARS", 0)
    pre = Pretokenizer.from_name(name, cap or None)
    whole = scan(data, name, cap)
    for cut in (find_byte_cut(data, start, pre, []), last_piece_byte_cut(data, pre, [])):
        if cut > 0:
            assert scan(data[:cut], name, cap) + scan(data[cut:], name, cap) == whole, cut


_SPACE_UNIT = st.lists(st.sampled_from([" ", " ", "\t", "\n", "\r", "\r\n", "\x0b", "\u3000", "\xa0"]), min_size=1,
                      max_size=4).map("".join)
# a unit repeated (" \t\n" * 7), and what ends the run
SPACE_RUN = st.tuples(_SPACE_UNIT, st.integers(1, 30), st.sampled_from(["", "\n", " ", "\r\n", "\t"])).map(
    lambda t: t[0] * t[1] + t[2])
CONTINUATION = st.lists(st.sampled_from(["", " ", "\n", "x", " x", "'s", "1", "!", "\u3000", "中"]), max_size=4).map("".join)


@settings(max_examples=1000)  # cheap examples (~1 ms): more of the rare shapes
@given(run=SPACE_RUN, before=st.sampled_from(["", "", "x", " x", "x!", "12", "中"]), rest=CONTINUATION,
       name=st.sampled_from(CAPPED), cap=st.integers(4, 12))
@example(run=" \t\n" * 4, before="", rest="", name="o200k", cap=4)  # no cut after " \t": a match of its own
def test_a_safe_cut_in_a_run_of_spaces_holds_for_any_continuation(monkeypatch, run, before, rest, name, cap):
    """``safe_cut``'s promise where a long run of spaces (mixed with newlines, CR/LF, NBSP and
    ideographic spaces) holds no other cut than its pieces: the text before the cut and the
    text after it, whatever follows, pretokenize as the whole."""
    monkeypatch.setattr(pretokenize, "FAMILY_CUT_MIN_CHARS", 0)
    pre = Pretokenizer.from_name(name, cap)
    text = before + run
    i = pre.safe_cut(text)
    if i > 0:
        assert pre.split(text[:i]) + pre.split(text[i:] + rest) == pre.split(text + rest), (text[:i], text[i:])


def test_family_cuts_find_the_boundaries_of_base64():
    line = base64.b64encode(random.Random(3).randbytes(30_000))
    pre = Pretokenizer.from_name("gpt2")
    cut = find_byte_cut(line, 1000, pre, [])
    assert 1000 <= cut < 1100
    assert scan(line[:cut], "gpt2") + scan(line[cut:], "gpt2") == scan(line, "gpt2")


# -- settings: recorded, defaulted, old stores, validation ---------------------------------------
def test_the_default_cap_leaves_the_shared_corpora_as_they_were():
    """Every gpt2 pretoken (the default pretokenizer) of the three corpora (150 MB) is shorter
    than the default cap: the counts with the default equal the counts without a cap, so
    their stores are the same.  (words, whose pretokens are the longest, 15,112 bytes, too:
    measured, left out for time.)"""
    if fastbpe is None:
        pytest.skip("needs the C scanner (160 MB through regex is minutes)")
    for path in sorted(CORPORA.glob("*.txt")):
        data = path.read_bytes()
        for name in ("gpt2",):
            capped, plain = fastbpe.CountTable(), fastbpe.CountTable()
            capped.feed(data, name, DEFAULT_MAX_TOKEN_BYTES)
            plain.feed(data, name, 0)
            assert capped.pack() == plain.pack(), (path.name, name)


def test_settings_record_the_cap_and_old_stores_keep_none(cli, tmp_path):
    word = b"x" * 70_000
    src = tmp_path / "doc.txt"
    src.write_bytes(word + b" y")
    ok(cli("count", "--store", tmp_path / "new", src))
    snap = H.snapshot(tmp_path / "new")
    assert snap["info"]["settings"]["max_token_bytes"] == DEFAULT_MAX_TOKEN_BYTES
    assert snap["words"] == {b"x" * 65536: 1, b"x" * 4464: 1, b" y": 1}
    # A store made before the setting: its settings have no max_token_bytes.  It keeps its
    # meaning (no cap): counted on without the option, a long pretoken stays whole.
    old = make_settings("gpt2", [], max_token_bytes=None)
    assert "max_token_bytes" not in old
    with Store.open(str(tmp_path / "old"), create=True) as st_:
        st_.ensure_settings(old)
    ok(cli("count", "--store", tmp_path / "old", src))
    assert H.snapshot(tmp_path / "old")["words"] == {word: 1, b" y": 1}
    res = cli("count", "--store", tmp_path / "old", "--max-token-bytes", "65536", "--recount", src)
    assert_user_error(res.stderr, res.exit_code)
    assert "max_token_bytes=None, not 65536" in res.stderr
    # an explicit cap on a new store, and 0 for none
    ok(cli("count", "--store", tmp_path / "c8", "--max-token-bytes", "8", src))
    assert H.snapshot(tmp_path / "c8")["words"][b"x" * 8] == 8750
    ok(cli("count", "--store", tmp_path / "c0", "--max-token-bytes", "0", src))
    assert H.snapshot(tmp_path / "c0")["words"] == {word: 1, b" y": 1}
    assert "max_token_bytes" not in H.snapshot(tmp_path / "c0")["info"]["settings"]


@pytest.mark.parametrize("value", ["3", "1"])
def test_a_cap_below_one_character_is_refused_before_a_store_exists(cli, tmp_path, value):
    src = tmp_path / "doc.txt"
    src.write_bytes(b"hello")
    res = cli("count", "--store", tmp_path / "st", "--max-token-bytes", value, src)
    assert_user_error(res.stderr, res.exit_code)
    assert "--max-token-bytes must be at least 4" in res.stderr and not (tmp_path / "st").exists()


def test_the_tokenizer_carries_the_cap_and_encode_cuts_the_same_way(cli, tmp_path):
    text = ("日本語" * 30 + " ab" * 40 + " " + "z" * 50 + "\n") * 20
    src = tmp_path / "doc.txt"
    src.write_text(text, encoding="utf-8")
    ok(cli("count", "--store", tmp_path / "st", "--max-token-bytes", "16", src))
    ok(cli("train", "--store", tmp_path / "st", "--num-merges", "20", "-o", tmp_path / "t.json"))
    doc = json.loads((tmp_path / "t.json").read_text())
    assert doc["pretokenizer"]["max_token_bytes"] == 16
    tok = Tokenizer.load(tmp_path / "t.json")
    assert tok.max_token_bytes == 16 and max(len(b) for b in tok.vocab.values()) <= 16
    ids = [int(x) for x in ok(cli("encode", "-t", tmp_path / "t.json", src)).stdout.split()]
    pieces = oracle_pieces(text.encode(), "gpt2", 16)
    assert ids == [i for p in pieces for i in tok.encode(p.decode())]
    assert ok(cli("decode", "-t", tmp_path / "t.json", input=" ".join(map(str, ids)).encode())).stdout == text.encode()
    res = ok(cli("export", "-t", tmp_path / "t.json", "--format", "hf", "-o", tmp_path / "hf.json"))
    assert "cannot record --max-token-bytes 16" in res.stderr
    # info says the cap; an export, which cannot record it, has none
    assert json.loads(ok(cli("info", "-t", tmp_path / "t.json", "--json")).stdout)["max_token_bytes"] == 16
    assert "max_token_bytes 16\n" in ok(cli("info", "-t", tmp_path / "t.json")).stdout.decode()
    assert json.loads(ok(cli("info", "-t", tmp_path / "hf.json", "--json")).stdout)["max_token_bytes"] is None


# -- memory: acceptance ------------------------------------------------------------------------
def _peak_rss_mb(cmd: Cmd, cwd, input: bytes | None = None) -> tuple:
    """Runs ``cmd``; returns (the process result, its own peak resident memory in MB)."""
    hwm = Path(cwd) / f"hwm-{random.random()}"
    res = H.run(cmd.with_knobs(hwm_file=str(hwm)), cwd, input=input)
    assert res.returncode == 0, stderr_text(res)
    return res, int(hwm.read_text()) / 1024


@pytest.fixture(scope="module")
def baseline_rss(tmp_path_factory):
    work = tmp_path_factory.mktemp("rss")
    (work / "tiny.txt").write_bytes(b"tiny\n")
    return _peak_rss_mb(Cmd("count", "--store", work / "store", "-w", "1", work / "tiny.txt"), work)[1]


BUDGET_MB = 64
SLACK_MB = 24  # the interpreter's arenas and LMDB's pages beyond a tiny count's; measured: 10-13


@functools.cache
def _big_inputs(kind: str) -> bytes:
    rng = random.Random(7)
    if kind == "base64":
        return base64.b64encode(rng.randbytes(7_500_000))  # 10 MB, one line
    return "".join(map(chr, (0x4E00 + b % 20_900 for b in array("H", rng.randbytes(6_800_000))))).encode()  # 10.2 MB


@pytest.mark.parametrize("kind, how", [("base64", "file"), ("chinese", "file"), ("chinese", "stdin")])
def test_a_10MB_run_without_spaces_counts_within_the_budget(tmp_path, baseline_rss, kind, how):
    data = _big_inputs(kind)
    src = tmp_path / "line.txt"
    src.write_bytes(data)
    store = tmp_path / "store"
    args = ("count", "--store", store, "--max-memory", f"{BUDGET_MB}M", "-w", "1")
    # (fewer, larger LMDB transactions: the commits, not the counting, are what takes time here)
    knobs = {"stage_chunk_keys": 1 << 14}
    if how == "file":
        _, rss = _peak_rss_mb(Cmd(*args, src, knobs=knobs), tmp_path)
    else:
        _, rss = _peak_rss_mb(Cmd(*args, "-", knobs=knobs), tmp_path, input=data)
    allowed = baseline_rss + BUDGET_MB + SLACK_MB
    assert rss <= allowed, f"{kind} by {how}: peak {rss:.0f} MB, allowed {allowed:.0f} MB (tiny: {baseline_rss:.0f})"
    words = H.snapshot(store)["words"]
    if kind == "base64":
        want = Counter(m.encode() for m in regex.findall(pretokenize.GPT2_PATTERN, data.decode()))
    else:  # one pretoken (regex says), of 3-byte characters: pieces of 21,845 of them
        assert len(regex.findall(pretokenize.GPT2_PATTERN, data.decode())) == 1
        step = DEFAULT_MAX_TOKEN_BYTES // 3 * 3
        want = Counter(data[i:i + step] for i in range(0, len(data), step))
    assert words == dict(want)


def test_160MB_of_spaces_after_a_word_count_within_the_budget(tmp_path, baseline_rss):
    """A run of spaces that starts after a word, not at a range's start (it was read as one
    160 MB range, and cutting it into ranges took minutes): its ranges end at the cap's
    pieces.  The counts: the word, the run less its last space in pieces of the cap, the
    last space with the next word."""
    spaces = 160_000_000
    src = tmp_path / "spaces.txt"
    with open(src, "wb") as f:
        f.write(b"word")
        for _ in range(spaces // 1_000_000):
            f.write(b" " * 1_000_000)
        f.write(b" x\n")
    store = tmp_path / "store"
    _, rss = _peak_rss_mb(Cmd("count", "--store", store, "--max-memory", f"{BUDGET_MB}M", "-w", "1", src), tmp_path)
    allowed = baseline_rss + BUDGET_MB + SLACK_MB
    assert rss <= allowed, f"peak {rss:.0f} MB, allowed {allowed:.0f} MB (tiny: {baseline_rss:.0f})"
    cap = DEFAULT_MAX_TOKEN_BYTES
    want = {b"word": 1, b" " * cap: spaces // cap, b" x": 1, b"\n": 1}
    if spaces % cap:
        want[b" " * (spaces % cap)] = 1
    assert H.snapshot(store)["words"] == want


def test_60MB_of_distinct_long_pretokens_count_within_the_budget(tmp_path, baseline_rss):
    """1,200 distinct words of 50,000 letters: few entries, but 60 MB of keys, which the
    batch's estimate of its memory counted as 128 bytes an entry (the batch was never
    flushed; peak 263 MB under a 256 MB budget for 60 MB of CJK)."""
    rng = random.Random(11)
    letters = bytes(97 + i % 26 for i in range(256))
    words = [rng.randbytes(50_000).translate(letters) for _ in range(1_200)]
    src = tmp_path / "long-words.txt"
    src.write_bytes(b" ".join(words))
    store = tmp_path / "store"
    _, rss = _peak_rss_mb(Cmd("count", "--store", store, "--max-memory", f"{BUDGET_MB}M", "-w", "1", src), tmp_path)
    allowed = baseline_rss + BUDGET_MB + SLACK_MB
    assert rss <= allowed, f"peak {rss:.0f} MB, allowed {allowed:.0f} MB (tiny: {baseline_rss:.0f})"
    assert H.snapshot(store)["words"] == Counter([words[0]] + [b" " + w for w in words[1:]])


@pytest.fixture(scope="module")
def chinese_tokenizer(tmp_path_factory):
    work = tmp_path_factory.mktemp("zh")
    text = _big_inputs("chinese")[:600_000]
    (work / "small.txt").write_bytes(text)
    res = H.run(Cmd("count", "--store", work / "store", work / "small.txt"), work)
    assert res.returncode == 0, stderr_text(res)
    res = H.run(Cmd("train", "--store", work / "store", "--num-merges", "200", "-o", work / "t.json"), work)
    assert res.returncode == 0, stderr_text(res)
    return work / "t.json"


def test_encode_and_decode_of_a_10MB_run_stay_bounded_and_round_trip(tmp_path, baseline_rss, chinese_tokenizer):
    data = _big_inputs("chinese")
    src = tmp_path / "zh.txt"
    src.write_bytes(data)
    ids = tmp_path / "ids.txt"
    _, enc_rss = _peak_rss_mb(Cmd("encode", "-t", chinese_tokenizer, src, "-o", ids), tmp_path)
    out = tmp_path / "back.txt"
    _, dec_rss = _peak_rss_mb(Cmd("decode", "-t", chinese_tokenizer, ids, "-o", out), tmp_path)
    assert out.read_bytes() == data
    allowed = baseline_rss + 64
    assert enc_rss <= allowed and dec_rss <= allowed, (enc_rss, dec_rss, allowed)


def test_one_50MB_pretoken_trains_into_a_tokenizer_that_loads(tmp_path):
    src = tmp_path / "one.txt"
    src.write_bytes(b"ab" * 25_000_000)  # gpt2: one letter run, 50 MB
    store, tok_path = tmp_path / "store", tmp_path / "t.json"
    for cmd in (Cmd("count", "--store", store, src),
                Cmd("train", "--store", store, "--num-merges", "40", "-o", tok_path),
                Cmd("info", "-t", tok_path)):
        res = H.run(cmd, tmp_path)
        assert res.returncode == 0, (cmd, stderr_text(res))
    tok = Tokenizer.load(tok_path)
    assert max(len(b) for b in tok.vocab.values()) <= DEFAULT_MAX_TOKEN_BYTES
    words = H.snapshot(store)["words"]
    assert words == dict(Counter(p.encode() for p in cap_pieces(["ab" * 25_000_000], DEFAULT_MAX_TOKEN_BYTES)))
    assert tok.decode(tok.encode("abab" * 1000)) == "abab" * 1000
