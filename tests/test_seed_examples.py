"""The five worked examples of ../shared/spec/seed-examples.md, each through the library and the CLI.

Counting options (recorded in the store): --pretokenizer, --end-of-word, --special-token.
Training options: --tie-break, --num-merges, --vocab-size, --min-count, --doc-boundaries.
"""

from __future__ import annotations

import json
import math

import textbook

from bpe_stream import Store, TrainConfig, Trainer, train_from_store
from bpe_stream import bpe as core
from bpe_stream.count.counting import count_sources, count_text, make_settings
from bpe_stream.inputs.reader import Source

EOT = "<|endoftext|>"


# -- helpers -----------------------------------------------------------------------------
def write_docs(tmp_path, docs, prefix="doc"):
    paths = []
    for i, data in enumerate(docs):
        p = tmp_path / f"{prefix}{i}.txt"
        p.write_bytes(data)
        paths.append(p)
    return paths


def lib_train(tmp_path, docs, count_kw, train_kw, name="lib"):
    """count_sources into a fresh store (one file per document), then train_from_store."""
    settings = make_settings(**count_kw)
    paths = write_docs(tmp_path, docs, prefix=name)
    with Store.open(tmp_path / f"{name}-store", create=True) as st_:
        count_sources(st_, [Source.from_arg(str(p)) for p in paths], settings)
    with Store.open(tmp_path / f"{name}-store", readonly=True) as st_:
        tok, result = train_from_store(st_, TrainConfig(**train_kw))
    return tok, result


def cli_train(cli, tmp_path, docs, count_args, train_args, name="cli"):
    paths = write_docs(tmp_path, docs, prefix=name)
    store = tmp_path / f"{name}-store"
    res = cli("count", "--store", store, *count_args, *paths)
    assert res.exit_code == 0, res
    out = tmp_path / f"{name}.json"
    res = cli("train", "--store", store, "-o", out, *train_args)
    assert res.exit_code == 0, res
    return out, store


def cli_encode(cli, tok_path, data: bytes):
    res = cli("encode", "-t", tok_path, input=data)
    assert res.exit_code == 0, res
    return [int(x) for x in res.stdout.split()]


def cli_decode(cli, tok_path, ids):
    res = cli("decode", "-t", tok_path, input=" ".join(map(str, ids)).encode())
    assert res.exit_code == 0, res
    return res.stdout


def cli_info(cli, tok_path):
    res = cli("info", "-t", tok_path, "--json")
    assert res.exit_code == 0, res
    return json.loads(res.stdout)


def merges_of(tok):
    return [(a, b) for a, b, _ in tok.merges]


# -- 1. classic word-level BPE with an end-of-word marker ------------------------------
CORPUS_1 = b"low lower lowest low low"


def test_example_1_counts(tmp_path):
    counts = count_text(CORPUS_1.decode(), make_settings("words", [], "</w>"))
    assert dict(counts) == {"low": 3, "lower": 1, "lowest": 1}
    marker = 256
    words = [list(w.encode()) + [marker] for w in counts]
    freqs = list(counts.values())
    symbols = {}
    for w, f in zip(words, freqs):
        for s in w:
            symbols[s] = symbols.get(s, 0) + f
    assert symbols == {ord("l"): 5, ord("o"): 5, ord("w"): 5, marker: 5, ord("e"): 2, ord("r"): 1, ord("s"): 1, ord("t"): 1}
    pairs = {core.unpack_pair(p): c for p, c in core.count_pairs(words, freqs).items()}
    assert pairs[(ord("l"), ord("o"))] == 5 and pairs[(ord("o"), ord("w"))] == 5
    assert pairs[(ord("w"), marker)] == 3 and pairs[(ord("w"), ord("e"))] == 2
    assert all(c == 1 for p, c in pairs.items()
               if p not in {(ord("l"), ord("o")), (ord("o"), ord("w")), (ord("w"), marker), (ord("w"), ord("e"))})


def test_example_1_library(tmp_path):
    trainer = Trainer(TrainConfig(num_merges=2, end_of_word="</w>", tie_break="min-bytes"))
    trainer.feed([(b"low", 3), (b"lower", 1), (b"lowest", 1)])
    res = trainer.train()
    assert res.vocab[256] == b"</w>"
    assert res.merges == [(108, 111), (257, 119)] and res.merge_counts == [5, 5]
    tok, _ = lib_train(tmp_path, [CORPUS_1], dict(pretokenizer="words", end_of_word="</w>"),
                            dict(num_merges=2, tie_break="min-bytes"))
    assert merges_of(tok) == [(108, 111), (257, 119)]
    assert tok.vocab[257] == b"lo" and tok.vocab[258] == b"low"
    assert tok.encode("low") == [258, 256]
    assert tok.decode([258, 256, 258, 101, 114, 256]) == "low lower"
    # byte level, no marker: ids are the byte values
    tok0, _ = lib_train(tmp_path, [b"Hello world! Hello"], dict(pretokenizer="words"), dict(num_merges=0), name="hello")
    assert tok0.encode("Hello") == [72, 101, 108, 108, 111]
    assert tok0.encode("world!") == [119, 111, 114, 108, 100, 33]


def test_example_1_cli(cli, tmp_path):
    out, store = cli_train(cli, tmp_path, [CORPUS_1], ("--pretokenizer", "words", "--end-of-word", "</w>"),
                           ("--tie-break", "min-bytes", "--num-merges", "2"))
    st = json.loads(cli("stats", "--store", store, "--json").stdout)
    assert {r["pretoken"]: r["count"] for r in st["top"]} == {"low": 3, "lower": 1, "lowest": 1}
    info = cli_info(cli, out)
    assert info["end_of_word"] == "</w>" and info["merges"] == 2
    assert cli_encode(cli, out, b"low") == [258, 256]
    assert cli_decode(cli, out, [258, 256, 258, 101, 114, 256]) == b"low lower"
    hello, _ = cli_train(cli, tmp_path, [b"Hello world! Hello"], ("--pretokenizer", "words"), ("--num-merges", "0"),
                         name="hello")
    assert cli_encode(cli, hello, b"Hello world!") == [72, 101, 108, 108, 111, 119, 111, 114, 108, 100, 33]


# -- 2. GPT-2 style byte-level BPE (CS336) ---------------------------------------------
CORPUS_2 = b"low low low low low\nlower lower widest widest widest\nnewest newest newest newest newest newest"
MERGES_2 = [(b"s", b"t"), (b"e", b"st"), (b"o", b"w"), (b"l", b"ow"), (b"w", b"est"), (b"n", b"e")]


def test_example_2_library(tmp_path):
    tok, result = lib_train(tmp_path, [CORPUS_2], dict(pretokenizer="words", special_tokens=[EOT]),
                            dict(num_merges=6, tie_break="max-bytes"))
    assert tok.vocab[256] == EOT.encode() and tok.special_tokens == [EOT]
    assert [(tok.vocab[a], tok.vocab[b]) for a, b, _ in tok.merges] == MERGES_2
    assert [new for _, _, new in tok.merges] == list(range(257, 263))
    assert result.merge_counts == [9, 9, 7, 7, 6, 6]
    oracle = textbook.train([(b"low", 5), (b"lower", 2), (b"widest", 3), (b"newest", 6)], num_merges=6,
                            special_tokens=[EOT])
    assert oracle.merge_bytes() == MERGES_2


def test_example_2_empty_and_special_only(tmp_path):
    for i, docs in enumerate(([b""], [EOT.encode() * 2])):
        tok, result = lib_train(tmp_path, docs, dict(special_tokens=[EOT]), dict(vocab_size=500), name=f"e{i}")
        assert result.merges == [] and tok.vocab_size == 257


def test_example_2_cli(cli, tmp_path):
    out, _ = cli_train(cli, tmp_path, [CORPUS_2], ("--pretokenizer", "words", "--special-token", EOT),
                       ("--tie-break", "max-bytes", "--num-merges", "6"))
    from bpe_stream import Tokenizer

    tok = Tokenizer.load(out)
    assert tok.vocab[256] == EOT.encode()
    assert [(tok.vocab[a], tok.vocab[b]) for a, b, _ in tok.merges] == MERGES_2
    ids = cli_encode(cli, out, b"newest lowest" + EOT.encode())
    assert ids == tok.encode("newest lowest" + EOT) and ids[-1] == 256
    assert cli_decode(cli, out, tok.encode("widest")) == b"widest"


# -- 3. document-level BPE with boundary symbols -----------------------------------------
def test_example_3_library(tmp_path):
    tok, result = lib_train(tmp_path, [b"abab", b"acac"], dict(pretokenizer="none"),
                            dict(num_merges=32, doc_boundaries=True, tie_break="min-ids", min_count=2))
    assert result.merges == [(97, 98), (97, 99)] and result.merge_counts == [2, 2]
    assert [new for _, _, new in tok.merges] == [258, 259]
    assert tok.doc_start_id == 256 and tok.doc_end_id == 257
    assert tok.vocab_size == 260
    assert tok.encode("abac") == [256, 258, 259, 257]
    assert tok.decode([256, 258, 259, 257]) == "abac"
    tok, result = lib_train(tmp_path, [b"aaaa"], dict(pretokenizer="none"),
                            dict(num_merges=1, doc_boundaries=True, tie_break="min-ids"), name="aaaa")
    assert result.merges == [(97, 97)] and result.merge_counts == [3]
    assert tok.encode("aaa") == [256, 258, 97, 257]


def test_example_3_cli(cli, bpe, tmp_path):
    out, _ = cli_train(cli, tmp_path, [b"abab", b"acac"], ("--pretokenizer", "none"),
                       ("--doc-boundaries", "--tie-break", "min-ids", "--min-count", "2", "--num-merges", "32"))
    info = cli_info(cli, out)
    assert info["vocab_size"] == 260 and info["merges"] == 2 and info["doc_boundaries"] is True
    assert cli_encode(cli, out, b"abac") == [256, 258, 259, 257]
    res = bpe("decode", "-t", out, input=b"256 258 259 257\n")
    assert res.returncode == 0 and res.stdout == b"abac"
    out, _ = cli_train(cli, tmp_path, [b"aaaa"], ("--pretokenizer", "none"),
                       ("--doc-boundaries", "--tie-break", "min-ids", "--num-merges", "1"), name="aaaa")
    assert cli_encode(cli, out, b"aaa") == [256, 258, 97, 257]


# -- 4. encoding follows merge rank, not frequency ----------------------------------------
def test_example_4_library(tmp_path):
    tok, result = lib_train(tmp_path, [b"ab ab ab bc bc"], dict(pretokenizer="whitespace"),
                            dict(num_merges=2, tie_break="min-ids"))
    assert result.merges == [(97, 98), (98, 99)] and result.merge_counts == [3, 2]
    assert tok.encode("abc") == [256, 99]
    assert tok.decode([256]) == "ab"
    assert tok.decode([228]) == "\ufffd"


def test_example_4_cli(cli, bpe, tmp_path):
    out, _ = cli_train(cli, tmp_path, [b"ab ab ab bc bc"], ("--pretokenizer", "whitespace"),
                       ("--tie-break", "min-ids", "--num-merges", "2"))
    assert cli_encode(cli, out, b"abc") == [256, 99]
    assert cli_decode(cli, out, [256]) == b"ab"
    res = bpe("decode", "-t", out, input=b"228")
    assert res.returncode == 0 and res.stdout == b"\xe4"


# -- 5. whitespace pre-split, repeated symbols -------------------------------------------
ROUND_TRIP_5 = ["中文", "😀🎉", "line\nline\n\n", "\ttab\t", "çà ça Ωμ ☃", "ab ac\r\n", " "]


def test_example_5_library(tmp_path):
    tok, result = lib_train(tmp_path, [b"ab ab", b"ab ac"], dict(pretokenizer="whitespace"),
                            dict(num_merges=2, tie_break="min-ids"))
    assert result.merges == [(97, 98), (97, 99)] and result.merge_counts == [3, 1]
    assert tok.encode("ab ac") == [256, 32, 257]
    for text in ROUND_TRIP_5:
        assert tok.decode(tok.encode(text)) == text
    tok, result = lib_train(tmp_path, [b"aaaaa"], dict(pretokenizer="whitespace"),
                            dict(num_merges=1, tie_break="min-ids"), name="a5")
    assert result.merges == [(97, 97)] and result.merge_counts == [4]
    assert tok.encode("aaaaa") == [256, 256, 97]


def test_example_5_cli(cli, bpe, tmp_path):
    out, _ = cli_train(cli, tmp_path, [b"ab ab", b"ab ac"], ("--pretokenizer", "whitespace"),
                       ("--tie-break", "min-ids", "--num-merges", "2"))
    assert cli_encode(cli, out, b"ab ac") == [256, 32, 257]
    data = "".join(ROUND_TRIP_5).encode()
    enc = bpe("encode", "-t", out, input=data)
    dec = bpe("decode", "-t", out, input=enc.stdout)
    assert enc.returncode == 0 and dec.returncode == 0 and dec.stdout == data
    out5, _ = cli_train(cli, tmp_path, [b"aaaaa"], ("--pretokenizer", "whitespace"),
                        ("--tie-break", "min-ids", "--num-merges", "1"), name="a5")
    assert cli_encode(cli, out5, b"aaaaa") == [256, 256, 97]


def _numbers(obj):
    if isinstance(obj, bool):
        return []
    if isinstance(obj, (int, float)):
        return [obj]
    if isinstance(obj, dict):
        return [n for v in obj.values() for n in _numbers(v)]
    if isinstance(obj, list):
        return [n for v in obj for n in _numbers(v)]
    return []


def test_example_5_eval(cli, tmp_path):
    """``eval --json`` reports bytes, tokens and the compression ratio
    8 * bytes / (tokens * ceil(log2(vocab_size))), also for several merge prefixes."""
    out, _ = cli_train(cli, tmp_path, [b"ab ab", b"ab ac"], ("--pretokenizer", "whitespace"),
                       ("--tie-break", "min-ids", "--num-merges", "2"))
    held_out = tmp_path / "held_out.txt"
    data = b"ab ac ab ab ac abc"
    held_out.write_bytes(data)
    merges = [(97, 98, 256), (97, 99, 257)]
    pieces = [textbook.to_bytes(p) for _, p in textbook.pretokens(data.decode(), textbook.WHITESPACE_PATTERN)]

    def tokens(k):
        return sum(len(textbook.encode_word(list(p), merges[:k])) for p in pieces)

    def ratio(k):
        return 8 * len(data) / (tokens(k) * math.ceil(math.log2(256 + k)))

    assert (tokens(0), tokens(1), tokens(2)) == (18, 14, 12)
    for args, prefixes in (((), (2,)), (("--merges", "0,1,2"), (0, 1, 2))):
        res = cli("eval", "-t", out, held_out, *args, "--json")
        assert res.exit_code == 0, res
        records = list(_records(json.loads(res.stdout)))
        for k in prefixes:
            # one record holds this prefix's bytes, tokens, vocabulary size and compression ratio
            assert any(
                len(data) in _numbers(r) and tokens(k) in _numbers(r) and 256 + k in _numbers(r)
                and any(isinstance(n, float) and abs(n - ratio(k)) < 1e-6 for n in _numbers(r))
                for r in records
            ), (k, ratio(k), records)


def _records(obj):
    """Every JSON object that holds numbers directly (one result row)."""
    if isinstance(obj, dict):
        if any(isinstance(v, (int, float)) and not isinstance(v, bool) for v in obj.values()):
            yield obj
        for v in obj.values():
            yield from _records(v)
    elif isinstance(obj, list):
        for v in obj:
            yield from _records(v)
