"""The encode stream of the CLI (``encoding.ParallelEncoder.write``) and what it is made of.

Workers encode *and format* pieces of a document cut at safe points (byte-level cuts for
the named pretokenizers, ``StreamSplitter`` text pieces for ``none`` and ``regex:``); the
parent writes them in order.  Checked here: the bytes written are those of the reference
(``ids_io.write_ids`` over ``Tokenizer.encode`` of the whole document) for every number of
workers, piece size and read size, in ``txt``, ``u16`` and ``u32``, with special tokens
(overlapping ones, one holding a space), document boundaries, a word-end marker, invalid
UTF-8 and every kind of whitespace; ``encode | decode`` gives the bytes back.  Also the id
formatting, the tokenizer file's fast validation, and the lazy imports of the package.
"""

from __future__ import annotations

import io
import json
import random
import subprocess
import sys
from array import array

import pytest
from conftest import CS336
from hypothesis import given
from hypothesis import strategies as st

from bpe_stream import Tokenizer
from bpe_stream.encode import parallel as encoding
from bpe_stream.count.counting import count_text, make_settings
from bpe_stream.encode.ids_io import check_format, format_ids, read_ids, write_ids
from bpe_stream.train.pipeline import tokenizer_from_result
from bpe_stream.inputs.reader import InputError, to_bytes
from bpe_stream.encode.tokenizer import TokenizerError
from bpe_stream.train.trainer import TrainConfig, Trainer

EOT = "<|endoftext|>"
SPECIALS = [EOT, "<|end|>", "<| sp |>"]  # a prefix of another, and one with a space inside
FORMATS = ("txt", "u16", "u32")

# name -> (pretokenizer, special tokens, end-of-word marker, document boundaries)
TOKENIZERS = {
    "gpt2": ("gpt2", SPECIALS, None, False),
    "gpt2-nospecial": ("gpt2", [], None, False),
    "cl100k-doc": ("cl100k", SPECIALS, None, True),
    "whitespace-eow": ("whitespace", [EOT], "</w>", False),
    "none": ("none", [EOT], None, False),  # no safe cuts: one piece per document
    "custom": ("regex:\\s+|\\S+", [EOT, "<| sp |>"], None, False),  # text pieces cut by StreamSplitter
}
LOSSLESS = {"gpt2", "gpt2-nospecial", "cl100k-doc", "none", "custom"}  # decode gives the bytes back


def train(pretokenizer, specials, eow, doc, merges=120) -> Tokenizer:
    sample = (CS336 / "corpus.en").read_text(encoding="utf-8")[:20_000] + " 中文字符 😀👍🏽 Ωμέγα\r\n\t x  y"
    counts = count_text(sample, make_settings(pretokenizer, specials, eow))
    config = TrainConfig(num_merges=merges, special_tokens=list(specials), end_of_word=eow, doc_boundaries=doc)
    trainer = Trainer(config)
    trainer.feed(sorted((to_bytes(k), n) for k, n in counts.items()))
    return tokenizer_from_result(trainer.train(), pretokenizer, "max-bytes")


@pytest.fixture(scope="module")
def toks():
    return {name: train(*spec) for name, spec in TOKENIZERS.items()}


@pytest.fixture(scope="module")
def encoders(toks):
    """A ParallelEncoder per tokenizer and worker count (pools made once for the module)."""
    made = {(name, w): encoding.ParallelEncoder(tok, w) for name, tok in toks.items() for w in (1, 2, 3)}
    yield made
    for enc in made.values():
        enc.close()


def reference(tok: Tokenizer, data: bytes, fmt: str) -> bytes:
    """The bytes the CLI wrote before pieces were formatted by workers: ``write_ids`` of the
    ids of the whole document, which here must equal a plain formatting of them."""
    ids = tok.encode(data.decode("utf-8", "surrogateescape"))
    out = io.BytesIO()
    assert write_ids(out, [ids], fmt, tok._max_id) == len(ids)
    plain = {
        "txt": (" ".join(map(str, ids)) + "\n").encode(),
        "u16": array("H", ids).tobytes(),
        "u32": array("I", ids).tobytes(),
    }[fmt]
    assert sys.byteorder != "little" or out.getvalue() == plain
    return out.getvalue()


def written(enc, data: bytes, fmt: str, chunk_bytes: int, piece: int) -> bytes:
    old = encoding.PIECE_CHARS
    encoding.PIECE_CHARS = piece
    try:
        out = io.BytesIO()
        enc.write(out, io.BytesIO(data), fmt, chunk_bytes=chunk_bytes)
        return out.getvalue()
    finally:
        encoding.PIECE_CHARS = old


FRAGMENTS = [
    "Hello", " world", "'s", " don't", "123", " 4567", "x", "  ", " ", "\n", "\n\n", "\r\n", "\r", "\t", " \t ",
    "\x0b", "\x0c", "\x1c", "\x85", "\u00a0", "\u3000", "\u2028", " 中文", "字符", "😀", "👍🏽", "e\u0301", "Ωμέγα",
    "!", "...", " -- ", EOT, "<|end|>", "<| sp |>", "<|end", "|>", "<|", " sp |>", "<|endoftext", "\ufeff",
]
RAW = [b"\xff", b"\xfe", b"\xe4\xb8", b"\xf0\x9f\x98", b"\x80", b"\xc3"]  # not UTF-8 (alone)
doc_bytes = st.lists(
    st.sampled_from(FRAGMENTS).map(lambda s: s.encode("utf-8")) | st.sampled_from(RAW)
    | st.binary(max_size=3),
    max_size=60,
).map(b"".join)


@given(data=doc_bytes, name=st.sampled_from(sorted(TOKENIZERS)), fmt=st.sampled_from(FORMATS),
       chunk_bytes=st.integers(1, 40), piece=st.integers(1, 60))
def test_written_bytes_equal_the_reference_for_any_workers_and_pieces(toks, encoders, data, name, fmt, chunk_bytes, piece):
    tok = toks[name]
    want = reference(tok, data, fmt)
    for workers in (1, 2, 3):
        got = written(encoders[(name, workers)], data, fmt, chunk_bytes, piece)
        assert got == want, (workers, got[:200], want[:200])
    if name in LOSSLESS:
        assert b"".join(tok._decode_chunks(read_ids(io.BytesIO(want), fmt))) == data


CRAFTED = [
    b"a<| sp |>b <| sp |> <|end|><|endoftext|>x  y\r\n z<| sp |>",
    "x \xff\xfe y\xe4\xb8 z 中文 字 <|endoftext|> \xf0\x9f\x98 ".encode("utf-8", "surrogateescape"),
    "\u3000a\u00a0b \x85c  \r\n\r\n d<|end|>|> <|endof<|end|>text|>!\t\t<| sp".encode(),
    b"<| sp |><| sp |> <|end|>  <| sp |>\n",
]


@pytest.mark.parametrize("name", sorted(TOKENIZERS))
def test_every_piece_size_on_crafted_documents(toks, encoders, name):
    """Every cut position: a piece size from 1 to the whole, read sizes 1 to 64."""
    tok = toks[name]
    for data in CRAFTED:
        want = {fmt: reference(tok, data, fmt) for fmt in FORMATS}
        for piece in range(1, len(data) + 2):
            for chunk_bytes in (1, 2, 5, 64):
                assert written(encoders[(name, 1)], data, "txt", chunk_bytes, piece) == want["txt"], (data, piece, chunk_bytes)
            assert written(encoders[(name, 2)], data, "u32", 3, piece) == want["u32"], (data, piece)
        assert written(encoders[(name, 3)], data, "u16", 1, 1) == want["u16"]


@given(data=doc_bytes, name=st.sampled_from(sorted(TOKENIZERS)), chunk_bytes=st.integers(1, 40), piece=st.integers(1, 120))
def test_encode_stream_batches_equal_encode(toks, encoders, data, name, chunk_bytes, piece):
    tok = toks[name]
    want = tok.encode(data.decode("utf-8", "surrogateescape"))
    old = encoding.PIECE_CHARS
    encoding.PIECE_CHARS = piece
    try:
        for workers in (1, 2, 3):
            enc = encoders[(name, workers)]
            got = [i for batch in enc.encode_stream(io.BytesIO(data), chunk_bytes=chunk_bytes) for i in batch]
            assert got == want
    finally:
        encoding.PIECE_CHARS = old


@pytest.mark.parametrize("name", ["gpt2", "cl100k-doc", "custom"])
def test_a_real_text_in_many_small_pieces(toks, encoders, name):
    """Some 300 kB of English with documents and odd bytes, in pieces of a few kB."""
    text = (CS336 / "corpus.en").read_bytes()[:100_000]
    data = (text + "<|endoftext|> 中文 <| sp |>".encode() + b"\xff\xfe end\r\n") * 3
    tok = toks[name]
    for fmt in FORMATS:
        want = reference(tok, data, fmt)
        for workers in (1, 2, 3):
            assert written(encoders[(name, workers)], data, fmt, 4096, 3000) == want


def test_one_encoder_per_tokenizer_in_process(toks):
    """Encoders of different tokenizers alive at once each use their own (not the last made)."""
    a = encoding.ParallelEncoder(toks["gpt2"], 1)
    b = encoding.ParallelEncoder(toks["whitespace-eow"], 2)
    try:
        data = b"hello world<|endoftext|> x"
        assert written(a, data, "u32", 7, 5) == reference(toks["gpt2"], data, "u32")
        assert written(b, data, "u32", 7, 5) == reference(toks["whitespace-eow"], data, "u32")
    finally:
        a.close()
        b.close()


@pytest.mark.parametrize("workers", [1, 2])
@pytest.mark.parametrize("name", ["gpt2", "custom"])
def test_strict_utf8_names_the_offset_of_the_first_bad_byte(toks, encoders, workers, name):
    data = b"abc def " * 50 + b"ok \xff then " + b"more words " * 40 + b"\xfe"
    with pytest.raises(InputError, match=r"invalid UTF-8 at byte offset 403\b"):
        old = encoding.PIECE_CHARS
        encoding.PIECE_CHARS = 64
        try:
            encoders[(name, workers)].write(io.BytesIO(), io.BytesIO(data), "txt", chunk_bytes=16, strict=True)
        finally:
            encoding.PIECE_CHARS = old


# -- the gpt2 pretokens by `re` (``pretokenize.gpt2_split``; its own tests are in test_pretokenize.py) --
def test_only_gpt2_takes_the_fast_split(toks):
    from bpe_stream.pretok.pretokenize import gpt2_split

    for name, tok in toks.items():
        assert (tok._split is gpt2_split) == (TOKENIZERS[name][0] == "gpt2"), name


# -- formatting ------------------------------------------------------------------------------
@given(ids=st.lists(st.integers(0, 0xFFFF), max_size=50), extra=st.integers(0, 100))
def test_format_ids_equals_plain_formatting(ids, extra):
    data = array("I", ids).tobytes()
    max_id = max(ids, default=0) + extra
    assert format_ids(data, "txt", max_id) == " ".join(map(str, ids)).encode()
    assert format_ids(data, "u16", max_id) == array("H", ids).tobytes() if sys.byteorder == "little" else True
    assert format_ids(data, "u32", max_id) == data if sys.byteorder == "little" else True
    assert format_ids(array("I", ids), "u32", max_id) == format_ids(data, "u32", max_id)
    with pytest.raises(OverflowError):
        format_ids(array("I", ids + [0x10000]).tobytes(), "u16", 0xFFFF)
    # an id above max_id (not from the tokenizer) is still written as what it is
    assert format_ids(array("I", ids + [70_000]).tobytes(), "txt", 5) == " ".join(map(str, ids + [70_000])).encode()


def test_u16_refuses_a_large_vocabulary_before_writing():
    check_format("u16", 0xFFFF)
    with pytest.raises(TokenizerError, match="--format u32"):
        check_format("u16", 0x10000)
    out = io.BytesIO()
    with pytest.raises(TokenizerError):
        write_ids(out, [[1, 2]], "u16", 0x10000)
    assert out.getvalue() == b""


def test_write_ids_takes_lists_arrays_and_bytes():
    ids = [5, 0, 300, 7]
    for batches in ([ids], [array("I", ids)], [array("I", ids).tobytes()], [ids[:2], [], ids[2:]]):
        out = io.BytesIO()
        assert write_ids(out, batches, "txt", 300) == 4
        assert out.getvalue() == b"5 0 300 7\n"


# -- the CLI -----------------------------------------------------------------------------------
def ok(res):
    assert res.exit_code == 0, res
    return res


@pytest.fixture(scope="module")
def tok_file(toks, tmp_path_factory):
    path = tmp_path_factory.mktemp("encode-stream") / "tok.json"
    toks["gpt2"].save(path)
    return path


def test_cli_output_is_the_same_for_any_workers(cli, tok_file, tmp_path):
    docs = []
    rng = random.Random(7)
    text = (CS336 / "corpus.en").read_bytes()
    for i in range(3):
        start = rng.randrange(len(text) - 60_000)
        doc = tmp_path / f"doc{i}.txt"
        doc.write_bytes(text[start:start + 60_000] + "<|end|> 中文 <| sp |>".encode() + b"\xff" * i)
        docs.append(doc)
    for fmt in FORMATS:
        outs = [ok(cli("encode", "-t", tok_file, "-f", fmt, "-w", w, *docs)).stdout for w in ("1", "2", "3")]
        assert outs[0] == outs[1] == outs[2]
        tok = Tokenizer.load(tok_file)
        assert outs[0] == b"".join(reference(tok, d.read_bytes(), fmt) for d in docs)
        if fmt == "txt":
            assert outs[0].count(b"\n") == 3  # one line per document
        dec = ok(cli("decode", "-t", tok_file, "-f", fmt, input=outs[1])).stdout
        assert dec == b"".join(d.read_bytes() for d in docs)


def test_cli_stdin_and_output_file(cli, tok_file, tmp_path):
    data = (CS336 / "corpus.en").read_bytes()[:30_000] + b"<|endoftext|>\xfe"
    out = tmp_path / "ids.u32"
    ok(cli("encode", "-t", tok_file, "-f", "u32", "-w", "2", "-o", out, input=data))
    assert out.read_bytes() == ok(cli("encode", "-t", tok_file, "-f", "u32", input=data)).stdout
    assert ok(cli("decode", "-t", tok_file, "-f", "u32", out)).stdout == data


def test_cli_u16_error_leaves_no_output_file(cli, tmp_path):
    vocab = {i: bytes([i]) for i in range(256)}
    vocab[70_000] = b"<|far|>"
    tok = Tokenizer(vocab, [], [(70_000, "special", "<|far|>")])
    path = tmp_path / "far.json"
    tok.save(path)
    res = cli("encode", "-t", path, "-f", "u16", "-w", "2", "-o", tmp_path / "out.u16", input=b"x<|far|>")
    assert res.exit_code == 1 and "Error:" in res.stderr and "--format u32" in res.stderr
    assert not (tmp_path / "out.u16").exists()


def test_cli_strict_utf8_is_a_clean_error(cli, tok_file):
    res = cli("encode", "-t", tok_file, "-w", "2", "--strict-utf8", input=b"fine text \xff")
    assert res.exit_code == 1 and "offset 10" in res.stderr


# -- loading -----------------------------------------------------------------------------------
def test_native_load_fast_checks_agree_with_the_slow_ones(toks, tmp_path):
    tok = toks["cl100k-doc"]
    path = tmp_path / "t.json"
    tok.save(path)
    doc = json.loads(path.read_text())
    again = Tokenizer.load(path)
    assert again.vocab == tok.vocab and again.merges == tok.merges and again.symbols == tok.symbols
    assert again.ranks == {(a << 32) | b: (r, c) for r, (a, b, c) in reversed(list(enumerate(tok.merges)))}
    # well-formed but not of the exact JSON types (bools): accepted as before, entry by entry
    from bpe_stream.formats.native import from_document

    odd = json.loads(json.dumps(doc))
    odd["vocab"][1][0] = True  # id 1, as a bool
    assert from_document(odd).vocab[1] == tok.vocab[1]
    for mutate, message in [
        (lambda d: d["vocab"].__setitem__(3, [3, "zz"]), "vocab entry 3 is not hex"),
        (lambda d: d["vocab"].__setitem__(3, [-3, "00"]), "negative id -3"),
        (lambda d: d["vocab"].__setitem__(3, [3]), "is not \\[id, hex\\]"),
        (lambda d: d["merges"].__setitem__(0, [1, 2]), "merges are not"),
        (lambda d: d["merges"].__setitem__(0, [1, 2, "x"]), "merges are not"),
    ]:
        bad = json.loads(json.dumps(doc))
        mutate(bad)
        p = tmp_path / "bad.json"
        p.write_text(json.dumps(bad))
        with pytest.raises(TokenizerError, match=message):
            Tokenizer.load(p)


def test_bad_merges_are_named(toks):
    tok = toks["gpt2"]
    merges = list(tok.merges)
    a, b, c = merges[5]
    merges[5] = (b, a, c) if tok.vocab[a] != tok.vocab[b] else (a, a, 0)
    with pytest.raises(TokenizerError, match="merge 5"):
        Tokenizer(tok.vocab, merges, tok.symbols, "gpt2")
    merges[5] = (a, b, 999_999)
    with pytest.raises(TokenizerError, match="merge 5 uses id 999999"):
        Tokenizer(tok.vocab, merges, tok.symbols, "gpt2")


def test_package_attributes_are_lazy_but_there():
    code = (
        "import sys, bpe_stream, bpe_stream.cli.commands\n"
        "heavy = [m for m in ('bpe_stream.train.pipeline', 'bpe_stream.train.trainer', 'bpe_stream.train.disk') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
        "from bpe_stream import Tokenizer, Store, TrainConfig, Trainer, train_bpe, train_from_store, __version__\n"
        "assert {'Tokenizer', 'train_bpe'} <= set(dir(bpe_stream))\n"
        "try:\n"
        "    bpe_stream.nothing\n"
        "except AttributeError:\n"
        "    pass\n"
        "else:\n"
        "    raise SystemExit('no AttributeError')\n"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert res.returncode == 0, res.stderr


def test_the_tokenizers_learned_merges(toks):
    """The tokenizers above really merge (the tests would be weak otherwise)."""
    for name, tok in toks.items():
        assert len(tok.encode("the quick brown fox")) < len("the quick brown fox"), name


@pytest.mark.parametrize("name", ["gpt2", "custom"])
def test_a_long_stretch_without_any_cut(toks, encoders, name):
    """300 kB with no safe cut (no space after a non-space) is held and encoded whole."""
    data = b"ab" * 100_000 + "中文".encode() * 20_000 + b" tail words <|endoftext|>"
    tok = toks[name]
    want = reference(tok, data, "u32")
    for workers in (1, 2):
        assert written(encoders[(name, workers)], data, "u32", 1024, 1000) == want


def test_an_encoder_is_reusable_after_a_failed_or_abandoned_document(toks):
    tok = toks["gpt2"]
    good = (CS336 / "corpus.en").read_bytes()[:50_000]
    bad = good[:20_000] + b"\xff" + good[20_000:]
    old = encoding.PIECE_CHARS
    encoding.PIECE_CHARS = 2000
    try:
        with encoding.ParallelEncoder(tok, 2) as enc:
            with pytest.raises(InputError):
                enc.write(io.BytesIO(), io.BytesIO(bad), "u32", strict=True)
            batches = enc.encode_stream(io.BytesIO(bad), chunk_bytes=1000)
            next(batches)
            batches.close()  # stopped reading after the first batch
            out = io.BytesIO()
            enc.write(out, io.BytesIO(good), "u32", chunk_bytes=1000)
            assert out.getvalue() == reference(tok, good, "u32")
    finally:
        encoding.PIECE_CHARS = old


def test_native_pieces_are_encoded_on_threads_with_an_encoder_each(toks, encoders):
    """With the C encoder doing whole pieces, workers are threads (nothing piped), each on
    its own ``Encoder.clone()``; other pretokenizers keep worker processes.  (Their output is
    the reference's for every worker count: the tests above.)"""
    from bpe_stream.parallel.runner import LocalRunner, ThreadRunner

    native = {name for name, tok in toks.items() if tok._native()}
    assert {"gpt2", "cl100k-doc", "whitespace-eow"} <= native
    for (name, workers), enc in encoders.items():
        if workers > 1:
            kind = ThreadRunner if name in native and name != "none" else LocalRunner
            assert type(enc.window.runner) is kind, (name, workers)
    tok = toks["gpt2"]
    text = (CS336 / "corpus.en").read_bytes()[:50_000] + "中文 😀 <|end|>x".encode()
    clone = tok._encoder.clone()
    assert clone is not tok._encoder and clone.text_cached == 0
    for fmt in ("ids", "u32", "txt"):
        assert clone.encode_text(text, fmt) == tok._encoder.encode_text(text, fmt)
