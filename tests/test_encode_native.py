"""The native encode path (``csrc/textencoder.c`` through ``Encoder.encode_text``): UTF-8
bytes to ids in C -- special tokens split, the named pattern scanned, each pretoken from the
native cache or merged -- and formatted as the CLI writes them.

Checked here against the Python path (the same tokenizer with no C extension, which
decodes, splits with ``regex`` and merges with ``bpe.encode_by_rank``) and against
tiktoken's ``gpt2``: any bytes (every Unicode category, invalid UTF-8, special tokens that
overlap, touch, or are cut by piece edges) give the same ids; pieces cut at safe points and
any worker count give the bytes of the whole in every format; ``--strict-utf8`` names the
offset ``decode`` names; the cache stays within its bounds and never changes an id; text
that the bytes cannot stand for goes the Python way.
"""

from __future__ import annotations

import copy
import io
import random
from array import array

import pytest
from conftest import fewer_examples, tiktoken_pattern
from hypothesis import given
from hypothesis import strategies as st
from scanner_inputs import corpus_slices, fragment
from test_encode_stream import train, written
from test_engines import random_tokenizer

from bpe_stream import Tokenizer, native
from bpe_stream.encode import parallel as encoding
from bpe_stream.pretok import scan
from bpe_stream.encode.ids_io import format_ids, write_ids
from bpe_stream.inputs.reader import InputError
from bpe_stream.pretok.scan import NATIVE_PATTERNS
from bpe_stream.encode.tokenizer import TokenizerError

fastbpe = native.fastbpe
pytestmark = pytest.mark.skipif(fastbpe is None, reason="the C extension is not built")

EOT = "<|endoftext|>"
# one that is a prefix of two others (the longest at a position wins), one holding a space,
# one not starting with '<' (the finder's table path), one with a non-ASCII character, and
# two where the leftmost wins over a longer one that starts later ("ab" in "abcd", not "bcd")
SPECIALS = [EOT, "<|end|>", "<|end", "<| sp |>", "[SEP]", "中<文>", "ab", "bcd"]
FORMATS = ("ids", "txt", "u16", "u32")
SPECIAL_BYTES = [s.encode() for s in SPECIALS] + [b"<|end", b"|>", b"<|", b"endoftext|>", b"\xe4\xb8\xad<", b"b", b"cd"]
text_bytes = st.lists(fragment | st.sampled_from(SPECIAL_BYTES), max_size=40).map(b"".join)


def python_twin(tok: Tokenizer) -> Tokenizer:
    """The same tokenizer without the C extension: what a build without a compiler runs."""
    twin = copy.copy(tok)
    twin._encoder = None
    twin._cache = {}
    return twin


def with_specials(tok: Tokenizer, pretokenizer: str, specials=SPECIALS) -> Tokenizer:
    """GPT-2's merges with another pretokenizer and more special tokens (new ids)."""
    vocab = dict(tok.vocab)
    symbols = list(tok.symbols)
    for text in specials:
        if text not in tok.special_ids:
            sid = max(vocab) + 1
            vocab[sid] = text.encode()
            symbols.append((sid, "special", text))
    return Tokenizer(vocab, tok.merges, symbols, pretokenizer)


@pytest.fixture(scope="module")
def toks(gpt2_tokenizer):
    """Tokenizers of every named pretokenizer: GPT-2's merges (byte ids that are not the
    bytes), and small trained ones with a word-end marker and document boundaries."""
    made = {name: with_specials(gpt2_tokenizer, name) for name in NATIVE_PATTERNS}
    made["gpt2-plain"] = gpt2_tokenizer
    made["whitespace-eow"] = train("whitespace", [EOT, "[SEP]"], "</w>", False)
    made["words-eow"] = train("words", [EOT], "</w>", False)
    made["o200k-doc"] = train("o200k", SPECIALS, None, True)
    return made


@pytest.fixture(scope="module")
def twins(toks):
    return {name: python_twin(tok) for name, tok in toks.items()}


def native_list(tok: Tokenizer, data: bytes) -> list:
    out, n = tok._native_ids(data)
    ids = array("I")
    ids.frombytes(out)
    assert len(ids) == n
    return ids.tolist()


# -- the same ids as the Python path -------------------------------------------------------------
@given(data=text_bytes, name=st.sampled_from(["gpt2", "cl100k", "o200k", "whitespace", "words", "none",
                                              "gpt2-plain", "whitespace-eow", "words-eow", "o200k-doc"]))
def test_any_bytes_give_the_ids_of_the_python_path(toks, twins, data, name):
    tok, twin = toks[name], twins[name]
    assert tok._native() and not twin._native()
    text = data.decode("utf-8", "surrogateescape")
    want = twin.encode(text)
    assert tok.encode(text) == want
    assert tok.encode_bytes(data) == want == twin.encode_bytes(data)
    body = want[1:] if tok.doc_start_id is not None else want
    body = body[:-1] if tok.doc_end_id is not None else body
    assert native_list(tok, data) == body


@given(text=st.text(alphabet="aabbc é", max_size=90), seed=st.integers(0, 10**6), eow=st.sampled_from([None, "</w>"]))
def test_short_and_long_pretokens_merge_as_the_reference(text, seed, eow):
    """One pretoken (``none``; ``whitespace`` with a marker) of up to 90 symbols: the short
    pretokens' pair scan and the long ones' heap both merge as ``bpe.encode_by_rank``."""
    tok = random_tokenizer(random.Random(seed), "none" if eow is None else "whitespace", 60, eow)
    assert native_list(tok, text.encode()) == python_twin(tok).encode(text)


@pytest.mark.parametrize("label, data", list(corpus_slices()), ids=lambda v: v if isinstance(v, str) else "")
def test_the_corpora_give_the_ids_of_the_python_path_and_of_tiktoken(toks, tiktoken_gpt2, label, data):
    tok = toks["gpt2-plain"]
    lists = copy.copy(tok)
    lists._native_pattern = False  # the C merges of Python's pretokens: the path before this one
    lists._cache = {}
    ids = native_list(tok, data)
    assert ids == lists.encode(data.decode("utf-8", "surrogateescape")), label
    text = data.decode("utf-8", "ignore")  # a slice cut inside a character: whole characters only
    assert native_list(tok, text.encode()) == tiktoken_gpt2.encode(text, allowed_special={EOT}), label


@pytest.mark.parametrize("name, tiktoken_name", [("cl100k", "cl100k_base"), ("o200k", "o200k_base")])
def test_cl100k_and_o200k_pretokens_with_gpt2_merges_equal_tiktoken(toks, tiktoken_gpt2, name, tiktoken_name):
    """tiktoken's own pattern over GPT-2's ranks against ours (the corpora's first MB)."""
    import tiktoken

    theirs = tiktoken.Encoding(f"gpt2-{name}", pat_str=tiktoken_pattern(tiktoken_name),
                               mergeable_ranks=tiktoken_gpt2._mergeable_ranks, special_tokens={EOT: 50256})
    tok = with_specials(toks["gpt2-plain"], name, [EOT])
    for label, data in corpus_slices():
        text = data.decode("utf-8", "ignore")
        assert native_list(tok, text.encode()) == theirs.encode(text, allowed_special={EOT}), label


CRAFTED = [
    b"<|endoftext|><|endoftext|><|end|><| sp |>[SEP][SEP]",  # adjacent
    b"<|end<|endoftext|>|> <|endof<|end|>text|>",  # one inside the debris of another
    b"abcd bcd ab abc xbcdab <| sp|> <| sp |>x",  # the leftmost first, then the longest
    "中<文>中<文> 中<文 中文> x中<文>y".encode(),
    b"\xff<|end|>\xe4\xb8<|endoftext|>\xad \xe4\xb8\xad<\xe6\x96\x87>",  # around invalid bytes
    b"   <|end|>   \n\n<|end|>\n \t<| sp |>  ",  # spaces that a special cuts apart
]


@pytest.mark.parametrize("data", CRAFTED)
@pytest.mark.parametrize("name", ["gpt2", "cl100k", "o200k", "whitespace", "words", "none", "o200k-doc"])
def test_special_tokens_that_overlap_touch_and_straddle_piece_edges(toks, twins, data, name):
    tok, twin = toks[name], twins[name]
    text = data.decode("utf-8", "surrogateescape")
    assert tok.encode(text) == twin.encode(text)
    with encoding.ParallelEncoder(tok, 1) as enc:
        want = reference(twin, data, "txt")
        for piece in range(1, len(data) + 2):  # every cut position
            assert written(enc, data, "txt", 3, piece) == want, piece


def reference(twin: Tokenizer, data: bytes, fmt: str) -> bytes:
    """What the CLI writes for one document: ``write_ids`` of the Python path's ids."""
    out = io.BytesIO()
    write_ids(out, [twin.encode(data.decode("utf-8", "surrogateescape"))], fmt, twin._max_id)
    return out.getvalue()


@pytest.fixture(scope="module")
def pools(toks):
    made = {(name, w): encoding.ParallelEncoder(toks[name], w) for name in ("gpt2", "cl100k", "words-eow", "o200k-doc")
            for w in (1, 2)}
    yield made
    for enc in made.values():
        enc.close()


@fewer_examples(120)
@given(data=text_bytes, name=st.sampled_from(["gpt2", "cl100k", "words-eow", "o200k-doc"]),
       fmt=st.sampled_from(["txt", "u16", "u32"]), chunk_bytes=st.integers(1, 50), piece=st.integers(1, 80))
def test_pieces_cut_at_safe_points_and_any_workers_give_the_whole(toks, twins, pools, data, name, fmt, chunk_bytes,
                                                                    piece):
    if fmt == "u16" and toks[name]._max_id > 0xFFFF:
        fmt = "u32"
    want = reference(twins[name], data, fmt)
    for workers in (1, 2):
        assert written(pools[(name, workers)], data, fmt, chunk_bytes, piece) == want, workers


# -- formats ---------------------------------------------------------------------------------
@fewer_examples(100)
@given(data=text_bytes)
def test_every_format_is_what_ids_io_writes(toks, data):
    tok = toks["gpt2"]
    ids, n = tok._native_ids(data, "ids")
    for fmt in ("txt", "u16", "u32"):
        assert tok._native_ids(data, fmt) == (format_ids(ids, fmt, tok._max_id), n)


def test_u16_refuses_an_id_above_65535_and_an_unknown_format_is_refused(toks):
    tok = toks["gpt2"]
    big = max(tok.vocab) + 70_000
    vocab = dict(tok.vocab)
    vocab[big] = b"<|big|>"
    large = Tokenizer(vocab, tok.merges, [*tok.symbols, (big, "special", "<|big|>")], "gpt2")
    assert large._native_ids(b"a<|big|>", "u32")[1] == 2
    with pytest.raises(ValueError, match="above 65535"):
        large._native_ids(b"a<|big|>", "u16")
    with pytest.raises(ValueError, match="unknown ids format"):
        tok._native_ids(b"a", "u8")


# -- UTF-8 -------------------------------------------------------------------------------------
def decode_fails_at(data: bytes) -> int:
    """Where ``data.decode("utf-8")`` fails (its error's start), or -1."""
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as exc:
        return exc.start
    return -1


@given(data=text_bytes)
def test_first_invalid_utf8_is_where_decode_fails(data):
    assert scan.first_invalid_utf8(data) == decode_fails_at(data)
    assert fastbpe.first_invalid_utf8(data=bytearray(data)) == decode_fails_at(data)


def test_first_invalid_utf8_without_the_extension(monkeypatch):
    monkeypatch.setattr(scan, "_scan", None)
    assert scan.first_invalid_utf8(b"ok \xe4\xb8\xad \xe4\xb8 x") == 7
    assert scan.first_invalid_utf8(memoryview(b"fine")) == -1


@fewer_examples(60)
@given(data=text_bytes, piece=st.integers(1, 40), workers=st.sampled_from([1, 2]))
def test_strict_utf8_names_the_offset_decode_names(pools, data, piece, workers):
    bad = decode_fails_at(data)
    enc = pools[("gpt2", workers)]
    old = encoding.PIECE_CHARS
    encoding.PIECE_CHARS = piece
    try:
        if bad < 0:
            enc.write(io.BytesIO(), io.BytesIO(data), "u32", chunk_bytes=7, strict=True)
        else:
            with pytest.raises(InputError, match=rf"invalid UTF-8 at byte offset {bad}\b"):
                enc.write(io.BytesIO(), io.BytesIO(data), "u32", chunk_bytes=7, strict=True)
    finally:
        encoding.PIECE_CHARS = old


def test_text_the_bytes_cannot_stand_for_goes_the_python_way(toks, twins):
    """Escaped bytes that together are UTF-8 ("\\udcc3\\udca9" is the bytes of é) are other
    pretokens than é itself; a surrogate that is no escaped byte has no bytes."""
    tok, twin = toks["gpt2"], twins["gpt2"]
    text = " caf\udcc3\udca9"
    assert tok._native_input(text) is None
    assert tok.encode(text) == twin.encode(text) == [19945, 2634]
    assert tok.encode(" café") == [40304]
    assert tok._native_input("a\udcff b") == b"a\xff b"
    with pytest.raises(UnicodeEncodeError):
        tok.encode("a\ud800")


# -- the cache -------------------------------------------------------------------------------------
def small_encoder(tok: Tokenizer, cache_limit: int):
    return fastbpe.Encoder(merges=tok.merges, byte_ids=list(tok.byte_ids), marker=-1, cache_limit=cache_limit,
                           pattern="gpt2", specials=[(EOT.encode(), tok.special_ids[EOT])])


def test_the_cache_stays_bounded_and_never_changes_an_id(toks, twins):
    tok = toks["gpt2-plain"]
    data = b" ".join(b"w%dx" % i for i in range(3000)) + b" " + b"long" * 40 + b"<|endoftext|>" + b"w7x " * 5
    want = native_list(tok, data)
    assert want == twins["gpt2-plain"].encode(data.decode())
    for limit in (0, 1, 7, 100, 1 << 17):
        enc = small_encoder(tok, limit)
        for _ in range(2):  # the second time partly from the cache
            out, n = enc.encode_text(data)
            assert n == len(want)
            assert array("I", out).tolist() == want, limit
            assert enc.text_cached <= limit
    enc = small_encoder(tok, 1 << 17)
    enc.encode_text(b"long" * 40)
    assert enc.text_cached == 0  # longer than BS_IDCACHE_MAX_KEY: not cached
    enc.encode_text(b"long" * 16 + b" x")
    assert enc.text_cached == 2  # 64 bytes: cached


def test_a_full_cache_keeps_its_pretokens_until_as_many_more_have_missed(toks):
    """Full, the cache keeps what it holds (the first pretokens, mostly the frequent ones)
    while the next ones are merged uncached; after as many misses as it holds it is emptied
    and fills again -- the ids the same throughout."""
    tok = toks["gpt2-plain"]
    enc = small_encoder(tok, 4)
    texts = [b"a b c d", b" e f g h", b" b c", b" i", b" j k"]
    counts = []
    for text in texts:
        out, n = enc.encode_text(text)
        assert array("I", out).tolist() == native_list(tok, text)
        counts.append(enc.text_cached)
    # full after 4; 4 misses refused; hits; the 5th miss empties it (" i" then cached); then 2 more
    assert counts == [4, 4, 4, 1, 3]


def test_a_huge_text_then_small_ones(toks):
    """Past BS_TE_KEEP_IDS ids the encoder lets its buffer go after the call; the next calls
    make a new one."""
    plain = Tokenizer({i: bytes([i]) for i in range(256)}, [], [], "gpt2")
    data = bytes(range(256)) * 17_000  # 4.35 million bytes, one id each
    assert plain.encode_bytes(data) == list(data)
    assert plain.encode_bytes(b"ab c") == [97, 98, 32, 99]
    assert plain._native_ids(b"ab c", "txt") == (b"97 98 32 99", 4)


# -- the boundary ---------------------------------------------------------------------------------
def test_encode_text_arguments(toks):
    tok = toks["gpt2-plain"]
    plain = fastbpe.Encoder(merges=tok.merges, byte_ids=list(tok.byte_ids), marker=-1, cache_limit=10)
    with pytest.raises(RuntimeError, match="without a pattern"):
        plain.encode_text(b"x")
    with pytest.raises(ValueError, match="no native scanner"):
        fastbpe.Encoder(merges=[], byte_ids=list(range(256)), marker=-1, cache_limit=1, pattern="regex:x")
    with pytest.raises(TypeError):
        fastbpe.Encoder(merges=[], byte_ids=list(range(256)), marker=-1, cache_limit=1, pattern="gpt2",
                        specials=[("text", 1)])
    with pytest.raises(ValueError, match="special token|argument"):
        fastbpe.Encoder(merges=[], byte_ids=list(range(256)), marker=-1, cache_limit=1, pattern="gpt2",
                        specials=[(b"", 1)])
    enc = small_encoder(tok, 4)
    by_keyword = enc.encode_text(data=memoryview(b"a <|endoftext|>"), fmt="txt", specials=False)
    assert by_keyword == enc.encode_text(b"a <|endoftext|>", "txt", False)
    assert by_keyword[0] == format_ids(tok._pretoken_ids(["a", " <|", "endoftext", "|>"]), "txt", tok._max_id)


def test_a_pretoken_past_the_32_bit_limit_is_the_tokenizers_error(toks):
    tok = toks["none"]
    old = fastbpe._set_limit32(limit=100)
    try:
        assert tok._native_ids(b"x" * 100)[1] > 0
        with pytest.raises(TokenizerError, match="too large for the encoder"):
            tok._native_ids(b"x" * 101)
    finally:
        fastbpe._set_limit32(limit=old)


def test_the_cli_gives_the_same_bytes_for_one_and_two_workers(bpe, tmp_path, toks, twins, data_dir):
    tok_path = tmp_path / "tok.json"
    toks["gpt2"].save(tok_path)
    with open(data_dir / "corpora" / "multi_25M.txt", "rb") as f:
        data = f.read(1_500_000) + b"\xff\xfe<|end|>[SEP] tail \xe4\xb8"
    (tmp_path / "doc.txt").write_bytes(data)
    for fmt in ("txt", "u32"):
        want = reference(twins["gpt2"], data, fmt)
        for workers in ("1", "2"):
            out = tmp_path / f"out-{fmt}-{workers}"
            res = bpe("encode", "-t", str(tok_path), "-f", fmt, "-w", workers, "-o", str(out), str(tmp_path / "doc.txt"))
            assert res.returncode == 0, res.stderr
            assert out.read_bytes() == want, (fmt, workers)
