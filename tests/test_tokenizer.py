"""Tokenizer: GPT-2 files against tiktoken, trained tokenizers against the textbook encoder,
round trips, streaming, the native file format and its damage handling."""

from __future__ import annotations

import io
import json

import pytest
import textbook
from hypothesis import given
from hypothesis import strategies as st

from bpe_stream import Tokenizer
from bpe_stream.encode.tokenizer import TokenizerError

TEXT_FILES = [
    "address.txt", "german.txt", "tinystories_sample.txt", "special_token_double_newlines_non_whitespace.txt",
    "special_token_trailing_newlines.txt", "corpus.en",
]


@pytest.fixture(scope="module")
def gpt2_auto(cs336):
    """GPT-2 files with the special tokens detected (tokens no merge makes)."""
    return Tokenizer.from_files(cs336 / "gpt2_vocab.json", cs336 / "gpt2_merges.txt")


def read_text(path):
    with open(path, encoding="utf-8", newline="") as f:
        return f.read()


# -- GPT-2 vs tiktoken -------------------------------------------------------------------
@pytest.mark.parametrize("name", TEXT_FILES)
def test_gpt2_files_equal_tiktoken_on_fixtures(cs336, tiktoken_gpt2, gpt2_tokenizer, gpt2_auto, name):
    text = read_text(cs336 / name)
    expected = tiktoken_gpt2.encode(text, allowed_special="all")
    assert gpt2_tokenizer.encode(text) == expected
    assert gpt2_auto.encode(text) == expected
    assert gpt2_tokenizer.decode(expected) == text


def test_gpt2_special_tokens(gpt2_tokenizer, gpt2_auto, tiktoken_gpt2):
    assert gpt2_tokenizer.special_tokens == ["<|endoftext|>"]
    assert gpt2_auto.special_tokens == ["<|endoftext|>"]
    text = "Héllo<|endoftext|><|endoftext|> world<|endoftext|>\n\n<|endoftext|>"
    ids = gpt2_tokenizer.encode(text)
    assert ids == tiktoken_gpt2.encode(text, allowed_special="all")
    assert ids.count(50256) == 4
    assert gpt2_tokenizer.vocab_size == 50257


GPT2_FRAGMENTS = [
    "Hello", " world", "'s", "'ll", " don't", "I'M", "  ", "\n", "\n\n", "\r\n", "\t", " \t ", "123", " 4567",
    "中文", "日本語のテキスト", "😀", "👍🏽", "é", "e\u0301", "ñ", "Ω", "!", "...", " -- ", "<|endoftext|>",
    "<|endoftext", "|>", "\u00a0", "\u3000", "\x00", "Straße", "Привет", "مرحبا", "   x",
]
gpt2_text = st.lists(
    st.sampled_from(GPT2_FRAGMENTS) | st.text(st.characters(codec="utf-8", exclude_categories=("Cs", "Co", "Cn")), max_size=3),
    max_size=25,
).map("".join)


@given(gpt2_text)
def test_gpt2_equals_tiktoken_on_random_text(gpt2_tokenizer, tiktoken_gpt2, text):
    ids = gpt2_tokenizer.encode(text)
    assert ids == tiktoken_gpt2.encode(text, allowed_special="all")
    assert gpt2_tokenizer.decode(ids) == text
    assert gpt2_tokenizer.decode_bytes(ids) == text.encode("utf-8")


def test_gpt2_directory_via_load(cs336, tmp_path, tiktoken_gpt2):
    d = tmp_path / "gpt2"
    d.mkdir()
    (d / "vocab.json").symlink_to(cs336 / "gpt2_vocab.json")
    (d / "merges.txt").symlink_to(cs336 / "gpt2_merges.txt")
    tok = Tokenizer.load(d)
    text = read_text(cs336 / "tinystories_sample.txt")
    assert tok.encode(text) == tiktoken_gpt2.encode(text, allowed_special="all")


# -- streaming and round trips ---------------------------------------------------------
@pytest.mark.parametrize("name", TEXT_FILES)
def test_encode_iterable_over_lines_equals_encode(cs336, gpt2_tokenizer, name):
    with open(cs336 / name, encoding="utf-8", newline="") as f:
        streamed = list(gpt2_tokenizer.encode_iterable(f))
    assert streamed == gpt2_tokenizer.encode(read_text(cs336 / name))


@pytest.mark.parametrize("chunk", [1, 2, 3, 7, 64])
def test_encode_stream_any_chunk_size(cs336, gpt2_tokenizer, chunk):
    data = (cs336 / "german.txt").read_bytes() + b"\xff<|endoftext|>\xe4\xb8 tail"
    got = [i for batch in gpt2_tokenizer.encode_stream(io.BytesIO(data), chunk_bytes=chunk) for i in batch]
    expected = gpt2_tokenizer.encode(data.decode("utf-8", "surrogateescape"))
    assert got == expected
    assert gpt2_tokenizer.decode_bytes(got) == data


@pytest.mark.parametrize("data", [
    b"\xff\xfe abc \xe4", b"\x00\x00 nul", "中文 and 😀 emoji\tTab\r\nCRLF".encode(), b"\xe4\xb8", b"", b"\x80" * 5,
])
def test_decode_bytes_is_byte_exact(gpt2_tokenizer, data):
    ids = gpt2_tokenizer.encode(data.decode("utf-8", "surrogateescape"))
    assert gpt2_tokenizer.decode_bytes(ids) == data
    assert gpt2_tokenizer.decode(ids) == data.decode("utf-8", "replace")


BYTES_NOT_ALL_UTF8 = [
    b"\xff\xfe abc \xe4", b"\x00\x00 nul", "中文 and 😀 emoji\tTab\r\nCRLF".encode(), b"\xe4\xb8", b"", b"\x80" * 5,
    b"<|endoftext|>\xff<|endoftext|>\xed\xa0\x80 x",  # a special token between invalid bytes; an encoded surrogate
]


@pytest.mark.parametrize("data", BYTES_NOT_ALL_UTF8)
def test_encode_bytes_gives_the_ids_of_the_cli_and_every_byte_back(cli, cs336, gpt2_tokenizer, data):
    ids = gpt2_tokenizer.encode_bytes(data)
    assert gpt2_tokenizer.decode_bytes(ids) == data
    res = cli("encode", "-t", cs336 / "gpt2_vocab.json", input=data)
    assert res.exit_code == 0, res
    assert [int(i) for i in res.stdout.split()] == ids


def test_encode_bytes_adds_the_document_boundaries_as_encode_does(tmp_path, cli):
    tok, _ = build([(b"abab", 3), (b" ab", 2)], doc_boundaries=True, num_merges=4)
    tok.save(tmp_path / "t.json")
    data = b"abab \xff ab"
    ids = tok.encode_bytes(data)
    assert ids[0] == tok.doc_start_id and ids[-1] == tok.doc_end_id
    assert ids == tok.encode(data.decode("utf-8", "surrogateescape"))
    res = cli("encode", "-t", tmp_path / "t.json", input=data)
    assert [int(i) for i in res.stdout.split()] == ids
    assert tok.decode_bytes(ids) == data


def test_every_encode_entry_gives_the_same_ids_without_the_c_encoder():
    """The pure-Python encoder (``bpe.encode_by_rank`` through the cache) behind each public entry."""
    tok, _ = build([(b"hello", 3), (b" world", 2), (b"abab", 4)], special_tokens=["<|endoftext|>"], num_merges=8)
    if tok._encoder is None:
        pytest.skip("the C extension is not built here")
    data = b"hello world<|endoftext|>abab \xff hello"
    text = data.decode("utf-8", "surrogateescape")
    entries = {
        "encode": lambda: tok.encode(text),
        "encode_bytes": lambda: tok.encode_bytes(data),
        "encode_iterable": lambda: list(tok.encode_iterable(text[i:i + 3] for i in range(0, len(text), 3))),
        "encode_stream": lambda: [i for b in tok.encode_stream(io.BytesIO(data), chunk_bytes=3) for i in b],
    }
    with_c = {name: fn() for name, fn in entries.items()}
    tok._encoder = None
    without_c = {name: fn() for name, fn in entries.items()}
    assert without_c == with_c
    assert all(ids == with_c["encode"] for ids in with_c.values())
    assert tok.decode_bytes(with_c["encode"]) == data


def test_decode_out_of_range_id(gpt2_tokenizer):
    for bad in ([50257], [-1], [10**12], [1, 2, 99999]):
        with pytest.raises(TokenizerError):
            gpt2_tokenizer.decode(bad)


# -- trained (native-id) tokenizers vs the textbook encoder -------------------------------
def build(items, pretokenizer="gpt2", **kw):
    """A Tokenizer built from the oracle's training result (independent of bpe_stream's trainer)."""
    res = textbook.train(items, **kw)
    symbols = []
    vocab = dict(res.vocab)
    base = textbook.base_symbols(kw.get("special_tokens", ()), kw.get("end_of_word"), kw.get("doc_boundaries", False))
    for i, (role, text) in enumerate(base):
        if text is None:  # document boundaries: their text is not fixed by the spec
            text = f"<|{role}|>".encode()
            vocab[256 + i] = text
        symbols.append((256 + i, role, text.decode()))
    return Tokenizer(vocab, res.merge_triples(), symbols, pretokenizer=pretokenizer), res


CORPUS_WORDS = [b"hello", b" world", b" hello", b"aaaa", b"abab", b" \xe4\xb8\xad\xe6\x96\x87", b"\xff\xfe", b"ll", b"'ll"]
corpus_st = st.lists(st.tuples(st.sampled_from(CORPUS_WORDS), st.integers(1, 9)), min_size=1, max_size=8)
probe_st = st.lists(st.sampled_from(
    ["hello", " world", "aaaaa", "abababa", "中文", " 中", "\udcff\udcfe", "'ll", "<|endoftext|>", "\n", " ", "x"]
), max_size=12).map("".join)


SPECIAL_SETS = [["<|endoftext|>"], ["<|a|>", "<|a|><|b|>"], ["<|a|><|b|>", "<|b|>", "<|a|>"], []]


@given(corpus_st, probe_st, st.sampled_from(["max-bytes", "min-bytes", "min-ids"]),
       st.sampled_from(["gpt2", "whitespace", "none"]), st.sampled_from(SPECIAL_SETS))
def test_encode_equals_textbook_replay(items, probe, rule, pre, specials):
    tok, res = build(items, pretokenizer=pre, num_merges=15, tie_break=rule, special_tokens=specials)
    pattern = {"gpt2": textbook.GPT2_PATTERN, "whitespace": textbook.WHITESPACE_PATTERN, "none": None}[pre]
    special_ids = {s: 256 + i for i, s in enumerate(dict.fromkeys(specials))}
    expected = []
    for special, piece in textbook.pretokens(probe, pattern, specials):
        if special:
            expected.append(special_ids[piece])
        else:
            expected += textbook.encode_word(list(textbook.to_bytes(piece)), res.merge_triples())
    assert tok.encode(probe) == expected
    assert list(tok.encode_iterable(iter(probe))) == expected
    assert tok.decode_bytes(expected) == textbook.to_bytes(probe)


@given(st.lists(st.sampled_from(["low", "lower", "lowest", "newer", "x"]), min_size=1, max_size=8),
       st.lists(st.integers(0, 30), max_size=4))
def test_word_marker_decode_in_any_batches_equals_whole(words, cuts):
    tok, _ = build([(b"low", 5), (b"lower", 2), (b"lowest", 1)], pretokenizer="words", num_merges=6,
                   end_of_word="</w>", tie_break="min-bytes")
    text = " ".join(words)
    ids = tok.encode(text)
    assert tok.decode(ids) == text
    bounds = sorted({min(c, len(ids)) for c in cuts})
    batches, last = [], 0
    for b in bounds:
        batches.append(ids[last:b])
        last = b
    batches.append(ids[last:])
    assert b"".join(tok._decode_chunks(batches)) == text.encode()


def test_library_decode_of_lone_lead_byte_is_replacement_char():
    tok, _ = build([(b"ab", 3), (b"bc", 2)], pretokenizer="whitespace", num_merges=2, tie_break="min-ids")
    assert tok.decode([228]) == "\ufffd"
    assert tok.decode_bytes([228]) == b"\xe4"
    assert tok.decode([228, 184, 173]) == "中"


def test_word_marker_and_doc_boundaries_decode():
    tok, _ = build([(b"low", 3), (b"lower", 1), (b"lowest", 1)], pretokenizer="words", num_merges=2,
                   end_of_word="</w>", tie_break="min-bytes")
    assert tok.encode("low") == [258, 256]
    assert tok.decode([258, 256, 258, 101, 114, 256]) == "low lower"
    assert tok.decode_bytes(tok.encode("low  lower\tlow")) == b"low lower low"
    tok, _ = build([(b"abab", 1), (b"acac", 1)], pretokenizer="none", num_merges=32, min_count=2,
                   doc_boundaries=True, tie_break="min-ids")
    assert tok.encode("abac") == [256, 258, 259, 257]
    assert tok.decode([256, 258, 259, 257]) == "abac"


def test_word_marker_with_doc_boundaries_drops_the_last_space():
    """bpe.md: markers decode to single spaces and the last one is dropped -- also when the
    document-end symbol (which decodes to nothing) follows it."""
    tok, _ = build([(b"low", 3), (b"lower", 1)], pretokenizer="words", num_merges=2, end_of_word="</w>",
                   doc_boundaries=True, tie_break="min-bytes")
    ids = tok.encode("low lower")
    assert ids[0] == tok.doc_start_id and ids[-1] == tok.doc_end_id
    assert tok.decode(ids) == "low lower"
    assert b"".join(tok._decode_chunks([ids])) == b"low lower"


# -- the native file --------------------------------------------------------------------
@pytest.fixture
def trained(tmp_path):
    tok, _ = build([(b"hello", 5), (b" world", 3), (b"\xff\xfe", 2), (b"aaaa", 4)], num_merges=10,
                   special_tokens=["<|endoftext|>", "<|pad|>"], tie_break="max-bytes")
    path = tmp_path / "tok.json"
    tok.save(path)
    return tok, path


def test_native_save_load_roundtrip(trained):
    tok, path = trained
    loaded = Tokenizer.load(path)
    assert loaded.vocab == tok.vocab
    assert loaded.merges == tok.merges
    assert loaded.symbols == tok.symbols
    assert loaded.pretokenizer.name == tok.pretokenizer.name and loaded.pretokenizer.pattern == tok.pretokenizer.pattern
    text = "hello world<|pad|>aaaa\udcff\udcfe<|endoftext|> new"
    assert loaded.encode(text) == tok.encode(text)
    assert loaded.decode_bytes(loaded.encode(text)) == textbook.to_bytes(text)
    json.loads(path.read_text(encoding="utf-8"))  # plain JSON


def _damage(path, fn):
    doc = json.loads(path.read_text(encoding="utf-8"))
    fn(doc)
    path.write_text(json.dumps(doc), encoding="utf-8")


@pytest.mark.parametrize("cut", [0, 1, 10, 100, -2])
def test_truncated_file_is_a_tokenizer_error(trained, cut):
    _, path = trained
    data = path.read_bytes()
    path.write_bytes(data[:cut] if cut >= 0 else data[:len(data) + cut])
    with pytest.raises(TokenizerError):
        Tokenizer.load(path)


DAMAGES = {
    "no version": lambda d: d.pop("version"),
    "newer version": lambda d: d.update(version=99),
    "vocab not a list": lambda d: d.update(vocab={"a": 1}),
    "vocab not hex": lambda d: d["vocab"][0].__setitem__(1, "zz"),
    "vocab entry short": lambda d: d["vocab"].__setitem__(0, [0]),
    "missing byte": lambda d: d.update(vocab=d["vocab"][1:]),
    "merge bytes wrong": lambda d: d["merges"][0].__setitem__(2, 65),
    "merge unknown id": lambda d: d["merges"][0].__setitem__(0, 10**6),
    "merges not triples": lambda d: d.update(merges=[[1, 2]]),
    "symbol bad role": lambda d: d["symbols"][0].update(role="bogus"),
    "symbol id missing": lambda d: d["symbols"][0].update(id=10**6),
    "pattern changed": lambda d: d["pretokenizer"].update(pattern=r"\S+"),
    "unknown pretokenizer": lambda d: d["pretokenizer"].update(name="gpt3"),
    "not ours": lambda d: d.update(format="something-else"),
}


@pytest.mark.parametrize("what", sorted(DAMAGES))
def test_damaged_file_is_a_tokenizer_error(trained, what):
    _, path = trained
    _damage(path, DAMAGES[what])
    with pytest.raises(TokenizerError):
        Tokenizer.load(path)


def test_not_json_and_missing_files(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_bytes(b"\x00\xff not json")
    with pytest.raises(TokenizerError):
        Tokenizer.load(bad)
    with pytest.raises(TokenizerError):
        Tokenizer.load(tmp_path / "missing.json")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(TokenizerError):
        Tokenizer.load(empty)
