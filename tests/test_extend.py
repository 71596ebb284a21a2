"""``train --from`` a tokenizer the store did not train (issue 17): GPT-2's files, an HF
``tokenizer.json`` made by ``tokenizers``, a ``.tiktoken`` rank file read by ``tiktoken``.

The oracle is independent of bpe_stream: the words are pretokenized with the spec's
pattern (``textbook``), each distinct word is encoded by the *original* library
(``tokenizers`` or ``tiktoken``), and textbook BPE (a full recount per merge) runs on those
id sequences with the new ids from max_id + 1.  The new merges of ``train --from`` must be
the same, for two tie-breaks; every existing id and merge must keep its place.
"""

from __future__ import annotations

import base64
import json
from collections import Counter
from typing import Callable, Dict, List, Tuple

import pytest

import textbook
from bpe_stream.formats import load_any

EOT = "<|endoftext|>"
MERGES = 30


def ok(res):
    assert res.exit_code == 0, res
    return res


@pytest.fixture(scope="module")
def texts(data_dir) -> Tuple[str, str]:
    """A small slice of multi_25M (to train on) and the next one (held out)."""
    with open(data_dir / "corpora" / "multi_25M.txt", "rb") as f:
        raw = f.read(240_000)
    cut = raw.rfind(b"\n", 0, 160_000) + 1
    train = raw[:cut].decode("utf-8")
    held = raw[cut:raw.rfind(b"\n") + 1].decode("utf-8")
    return train, held


def oracle(text: str, encode: Callable[[str], List[int]], vocab: Dict[int, bytes], specials, tie_break: str,
           n: int = MERGES) -> List[Tuple[bytes, bytes]]:
    """Textbook BPE for ``n`` merges over the words of ``text`` as ``encode`` gives them."""
    words = Counter(p for special, p in textbook.pretokens(text, textbook.GPT2_PATTERN, specials) if not special)
    return oracle_words(words, encode, vocab, tie_break, n)


def oracle_words(words: Counter, encode: Callable[[str], List[int]], vocab: Dict[int, bytes], tie_break: str,
                 n: int = MERGES) -> List[Tuple[bytes, bytes]]:
    """Textbook BPE for ``n`` merges over ``words`` (text -> count) as ``encode`` gives them."""
    seqs: Dict[Tuple[int, ...], int] = {}
    for word, count in words.items():
        ids = tuple(encode(word))
        seqs[ids] = seqs.get(ids, 0) + count
    vocab = dict(vocab)
    new_id = max(vocab) + 1
    out = []
    for _ in range(n):
        pairs = textbook.all_pair_counts(seqs)
        if not pairs:
            break
        best = max(pairs.values())
        left, right = textbook.pick([p for p, c in pairs.items() if c == best], vocab, tie_break)
        vocab[new_id] = vocab[left] + vocab[right]
        merged: Dict[Tuple[int, ...], int] = {}
        for seq, count in seqs.items():
            w = textbook.replace_pair(seq, left, right, new_id)
            merged[w] = merged.get(w, 0) + count
        seqs = merged
        out.append((vocab[left], vocab[right]))
        new_id += 1
    return out


def new_merges(base, tok) -> List[Tuple[bytes, bytes]]:
    """The merges ``tok`` adds to ``base``, as byte pairs, after checking ``base`` is kept whole."""
    assert tok.merges[:len(base.merges)] == base.merges
    assert all(tok.vocab[i] == data for i, data in base.vocab.items())
    assert tok.symbols == base.symbols
    first = max(base.vocab) + 1
    added = tok.merges[len(base.merges):]
    assert [new for _, _, new in added] == list(range(first, first + len(added)))
    return [(tok.vocab[a], tok.vocab[b]) for a, b, _ in added]


def count(cli, tmp_path, text: str, *flags) -> str:
    (tmp_path / "train.txt").write_text(text, encoding="utf-8")
    store = str(tmp_path / "st")
    ok(cli("count", "--store", store, "-q", *flags, tmp_path / "train.txt"))
    return store


# -- GPT-2's vocab.json + merges.txt ---------------------------------------------------
@pytest.fixture(scope="module")
def hf_gpt2(cs336):
    from tokenizers import Tokenizer as HFTokenizer
    from tokenizers import decoders, models, pre_tokenizers

    hf = HFTokenizer(models.BPE.from_file(str(cs336 / "gpt2_vocab.json"), str(cs336 / "gpt2_merges.txt")))
    hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    hf.decoder = decoders.ByteLevel()
    return hf


@pytest.mark.parametrize("tie_break", ["max-bytes", "min-ids"])
def test_gpt2_extension_is_textbook_bpe_from_gpt2s_encoding(cli, tmp_path, cs336, texts, hf_gpt2, tie_break):
    store = count(cli, tmp_path, texts[0], "--special-token", EOT)
    res = ok(cli("train", "--store", store, "--from", cs336 / "gpt2_vocab.json", "--num-merges", MERGES,
                 "--tie-break", tie_break, "-o", tmp_path / "ext.json"))
    assert "new merges take ids from 50,257" in res.stderr
    gpt2, ext = load_any(cs336 / "gpt2_vocab.json"), load_any(tmp_path / "ext.json")
    assert len(gpt2.merges) == 50_000 and ext.vocab_size == 50_257 + MERGES
    expected = oracle(texts[0], lambda w: hf_gpt2.encode(w).ids, gpt2.vocab, [EOT], tie_break)
    assert new_merges(gpt2, ext) == expected
    assert ext.tie_break == tie_break


def test_extended_gpt2_exports_to_hf_with_the_same_ids(cli, tmp_path, cs336, texts):
    from tokenizers import Tokenizer as HFTokenizer

    store = count(cli, tmp_path, texts[0], "--special-token", EOT)
    ok(cli("train", "--store", store, "--from", cs336 / "gpt2_vocab.json", "--vocab-size", 50_257 + 200,
           "-o", tmp_path / "ext.json", "-q"))
    ok(cli("export", "-t", tmp_path / "ext.json", "-f", "hf", "-o", tmp_path / "hf.json", "-q"))
    ext, gpt2 = load_any(tmp_path / "ext.json"), load_any(cs336 / "gpt2_vocab.json")
    hf = HFTokenizer.from_file(str(tmp_path / "hf.json"))
    held = texts[1] + EOT + texts[1][:2000]
    ids = ext.encode(held)
    assert hf.encode(held).ids == ids and ext.decode(ids) == held
    assert max(ids) >= 50_257  # the new merges are used on held-out text ...
    assert len(ids) < len(gpt2.encode(held))  # ... and save tokens


def test_extension_paths_and_engines_agree(cli, tmp_path, cs336, texts):
    from bpe_stream.train.pipeline import train_from_store
    from bpe_stream.store.lmdb_store import Store
    from bpe_stream.train.trainer import TrainConfig

    store = count(cli, tmp_path, texts[0], "--special-token", EOT)
    gpt2 = load_any(cs336 / "gpt2_vocab.json")
    results = []
    with Store.open(store) as st:
        for engine, path in (("c", "memory"), ("python", "memory"), ("auto", "disk")):
            tok, result = train_from_store(st, TrainConfig(num_merges=20), engine=engine, path=path,
                                           from_tokenizer=gpt2, checkpoint_every=10 ** 9)
            assert len(result.merges) == 20 and tok.merges[:50_000] == gpt2.merges
            results.append((tok.merges, result.merge_counts))
    assert results[0] == results[1] == results[2]


def test_extension_checkpoints_and_resumes(cli, tmp_path, cs336, texts):
    store = count(cli, tmp_path, texts[0], "--special-token", EOT)
    vocab = cs336 / "gpt2_vocab.json"
    ok(cli("train", "--store", store, "--from", vocab, "--num-merges", 40, "-o", tmp_path / "whole.json", "-q"))
    ok(cli("train", "--store", store, "--from", vocab, "--num-merges", 15, "-o", tmp_path / "part.json", "-q"))
    res = ok(cli("train", "--store", store, "--from", vocab, "--num-merges", 40, "--resume",
                 "-o", tmp_path / "resumed.json"))
    assert "resuming after 15 checkpointed merges" in res.stderr
    assert (tmp_path / "resumed.json").read_bytes() == (tmp_path / "whole.json").read_bytes()
    # another base tokenizer is another run: its checkpoint does not apply
    ok(cli("export", "-t", vocab, "-f", "hf", "-o", tmp_path / "gpt2_hf.json", "-q"))
    small = json.loads((tmp_path / "gpt2_hf.json").read_text())
    small["model"]["merges"] = small["model"]["merges"][:-1]
    last = next(text for text, tid in small["model"]["vocab"].items() if tid == 50_255)
    del small["model"]["vocab"][last]  # id 50,255 is now unused: the new merges still start at 50,257
    (tmp_path / "other.json").write_text(json.dumps(small))
    res = ok(cli("train", "--store", store, "--from", tmp_path / "other.json", "--num-merges", 40, "--resume",
                 "-o", tmp_path / "other_ext.json"))
    assert "no checkpoint of this run" in res.stderr and "new merges take ids from 50,257" in res.stderr
    other = load_any(tmp_path / "other_ext.json")
    assert 50_255 not in other.vocab and len(other.merges) == 49_999 + 40


# -- an HF tokenizer.json that tokenizers trained ------------------------------------
@pytest.fixture(scope="module")
def hf_small(tmp_path_factory, texts):
    from tokenizers import Tokenizer as HFTokenizer
    from tokenizers import decoders, models, pre_tokenizers, trainers

    hf = HFTokenizer(models.BPE())
    hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    hf.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=600, special_tokens=[EOT], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    hf.train_from_iterator([texts[1]], trainer)  # trained on other text than the extension's
    path = tmp_path_factory.mktemp("hf") / "tokenizer.json"
    hf.save(str(path))
    return path


@pytest.mark.parametrize("tie_break", ["max-bytes", "min-bytes"])
def test_hf_extension_is_textbook_bpe_from_its_encoding(cli, tmp_path, texts, hf_small, tie_break):
    from tokenizers import Tokenizer as HFTokenizer

    store = count(cli, tmp_path, texts[0], "--special-token", EOT)
    ok(cli("train", "--store", store, "--from", hf_small, "--num-merges", MERGES, "--tie-break", tie_break,
           "-o", tmp_path / "ext.json", "-q"))
    base, ext = load_any(hf_small), load_any(tmp_path / "ext.json")
    assert base.byte_ids != list(range(256))  # HF put the bytes at ids of its own
    hf = HFTokenizer.from_file(str(hf_small))
    hf.pre_tokenizer = __import__("tokenizers").pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    assert new_merges(base, ext) == oracle(texts[0], lambda w: hf.encode(w).ids, base.vocab, [EOT], tie_break)


# -- a .tiktoken rank file (no merge list), a gap in its ids --------------------------
@pytest.fixture(scope="module")
def tiktoken_small(tmp_path_factory, cs336):
    """GPT-2's first 1,500 ranks (tiktoken's gpt2 is GPT-2's vocab as ranks), a special token
    at 1,510: ids 1,500..1,509 are unused."""
    vocab = load_any(cs336 / "gpt2_vocab.json").vocab
    d = tmp_path_factory.mktemp("tt")
    lines = [f"{base64.b64encode(vocab[i]).decode()} {i}" for i in range(1500)]
    (d / "small.tiktoken").write_text("\n".join(lines) + "\n")
    from bpe_stream.formats.tiktoken_file import GPT2_PATTERN

    (d / "small.tiktoken.json").write_text(json.dumps({"pat_str": GPT2_PATTERN, "special_tokens": {EOT: 1510}}))
    return d / "small.tiktoken"


@pytest.mark.parametrize("tie_break", ["max-bytes", "min-ids"])
def test_tiktoken_extension_is_textbook_bpe_from_its_encoding(cli, tmp_path, texts, tiktoken_small, tie_break):
    import tiktoken

    from bpe_stream.formats.tiktoken_file import GPT2_PATTERN, read_ranks

    store = count(cli, tmp_path, texts[0], "--special-token", EOT)
    res = ok(cli("train", "--store", store, "--from", tiktoken_small, "--num-merges", MERGES,
                 "--tie-break", tie_break, "-o", tmp_path / "ext.json"))
    assert "new merges take ids from 1,511" in res.stderr
    base, ext = load_any(tiktoken_small), load_any(tmp_path / "ext.json")
    enc = tiktoken.Encoding("small", pat_str=GPT2_PATTERN, mergeable_ranks=read_ranks(tiktoken_small),
                            special_tokens={EOT: 1510})
    assert new_merges(base, ext) == oracle(texts[0], enc.encode_ordinary, base.vocab, [EOT], tie_break)
    assert not set(range(1500, 1510)) & set(ext.vocab)


def test_a_rank_that_no_two_tokens_make_is_an_error_naming_it(cli, tmp_path, tiktoken_small):
    lines = tiktoken_small.read_text().splitlines()
    lines.append(f"{base64.b64encode(b'qqqzz').decode()} 1500")  # "qqq" and "qqqz" are no tokens
    (tmp_path / "bad.tiktoken").write_text("\n".join(lines) + "\n")
    (tmp_path / "bad.tiktoken.json").write_text((tiktoken_small.parent / "small.tiktoken.json").read_text())
    res = cli("encode", "-t", tmp_path / "bad.tiktoken", input=b"hi")
    assert res.exit_code == 1 and "b'qqqzz' (rank 1500) is not two lower-ranked tokens merged" in res.stderr
    assert res.stderr.count("\n") == 1


# -- what cannot be extended -----------------------------------------------------------
@pytest.mark.parametrize("flags, said", [
    ((), ("the tokenizer has the special tokens '<|endoftext|>', which the store was not counted with; "
          "a store counted with --pretokenizer gpt2 --special-token '<|endoftext|>' fits it")),
    (("--pretokenizer", "whitespace", "--special-token", EOT),
     "the tokenizer pretokenizes with 'gpt2', the store was counted with 'whitespace'"),
    (("--special-token", EOT, "--special-token", "<pad>"),
     "the store and --special-token have '<pad>', which the tokenizer has no token for"),
    (("--special-token", EOT, "--end-of-word", "</w>"),
     "the tokenizer has no word-end marker, the store was counted with the word-end marker '</w>'"),
])
def test_incompatible_stores_are_one_error_naming_the_difference(cli, tmp_path, cs336, flags, said):
    store = count(cli, tmp_path, "some text to count\n", *flags)
    res = cli("train", "--store", store, "--from", cs336 / "gpt2_vocab.json", "--num-merges", 5,
              "-o", tmp_path / "x.json")
    assert res.exit_code == 1 and res.stderr.startswith("Error: --from: " + said), res
    assert res.stderr.count("\n") == 1 and not (tmp_path / "x.json").exists()


def test_a_vocab_size_below_the_tokenizers_is_an_error(cli, tmp_path, cs336):
    store = count(cli, tmp_path, "some text to count\n", "--special-token", EOT)
    res = cli("train", "--store", store, "--from", cs336 / "gpt2_vocab.json", "--vocab-size", 50_000,
              "-o", tmp_path / "x.json")
    assert res.exit_code == 1
    assert res.stderr == ("Error: --vocab-size 50000 is smaller than the 50,257 tokens of the tokenizer to extend; "
                          "use at least 50257\n")


def test_unused_ids_and_a_new_merge_repeating_an_existing_tokens_bytes(cli, tmp_path):
    """Merged ids from 300 (256..299 unused); "abc" is a token, but "abc" encodes as a + bc,
    so the first new merge (a, bc) makes a second "abc": a new id, as textbook BPE has it."""
    from bpe_stream.encode.tokenizer import Tokenizer

    vocab = {i: bytes([i]) for i in range(256)} | {300: b"bc", 301: b"ab", 302: b"abc"}
    base = Tokenizer(vocab, [(98, 99, 300), (97, 98, 301), (301, 99, 302)], pretokenizer="gpt2")
    assert base.encode("abc") == [97, 300]
    base.save(tmp_path / "base.json")
    store = count(cli, tmp_path, "abc abc abc abcd\n")
    ok(cli("train", "--store", store, "--from", tmp_path / "base.json", "--num-merges", 1, "-o", tmp_path / "e.json",
           "-q"))
    ext = load_any(tmp_path / "e.json")
    assert ext.merges[3:] == [(97, 300, 303)] and ext.vocab[303] == ext.vocab[302] == b"abc"
    assert ext.encode("abc") == [303] and not set(range(256, 300)) & set(ext.vocab)
    res = cli("export", "-t", tmp_path / "e.json", "-f", "hf", "-o", tmp_path / "hf.json")
    assert res.exit_code == 1 and "ids 302 and 303 are both" in res.stderr


def test_eval_compares_the_extended_tokenizer_with_its_baseline(cli, tmp_path, cs336, texts):
    store = count(cli, tmp_path, texts[0], "--special-token", EOT)
    ok(cli("train", "--store", store, "--from", cs336 / "gpt2_vocab.json", "--num-merges", 300,
           "-o", tmp_path / "ext.json", "-q"))
    (tmp_path / "held.txt").write_text(texts[1], encoding="utf-8")
    gpt2, ext = load_any(cs336 / "gpt2_vocab.json"), load_any(tmp_path / "ext.json")
    before, after = len(gpt2.encode(texts[1])), len(ext.encode(texts[1]))
    assert after < before
    res = ok(cli("eval", "-t", tmp_path / "ext.json", "--baseline", cs336 / "gpt2_vocab.json", tmp_path / "held.txt"))
    assert f"50,300 merges give {after:,} tokens for {before:,}, {before - after:,} saved" in res.stdout.decode()
    doc = json.loads(ok(cli("eval", "-t", tmp_path / "ext.json", "--baseline", cs336 / "gpt2_vocab.json",
                            tmp_path / "held.txt", "--json")).stdout)
    (row,) = doc["against_baseline"]
    assert row["tokens_saved"] == before - after and doc["baseline"]["result"]["tokens"] == before
    assert row["bytes_per_token_after"] > row["bytes_per_token_before"]
    res = cli("eval", "-t", tmp_path / "ext.json", "--baseline", cs336 / "gpt2_vocab.json", input=b"some text")
    assert res.exit_code == 2 and "--baseline needs files" in res.stderr


def test_hf_export_like_the_original_keeps_what_bpe_stream_does_not_model(cli, tmp_path, texts, hf_small):
    from tokenizers import Tokenizer as HFTokenizer
    from tokenizers import processors

    hf = HFTokenizer.from_file(str(hf_small))
    hf.post_processor = processors.ByteLevel(trim_offsets=True)
    hf.enable_truncation(max_length=100_000)
    hf.enable_padding(pad_id=0, pad_token="!")
    hf.save(str(tmp_path / "orig.json"))
    original = json.loads((tmp_path / "orig.json").read_text())
    store = count(cli, tmp_path, texts[0], "--special-token", EOT)
    ok(cli("train", "--store", store, "--from", tmp_path / "orig.json", "--num-merges", 100, "-o", tmp_path / "ext.json",
           "-q"))
    ok(cli("export", "-t", tmp_path / "ext.json", "-f", "hf", "--like", tmp_path / "orig.json", "-o",
           tmp_path / "out.json", "-q"))
    out = json.loads((tmp_path / "out.json").read_text())
    for key in ("added_tokens", "normalizer", "pre_tokenizer", "post_processor", "decoder", "padding", "truncation"):
        assert out[key] == original[key], key
    model, before = out["model"], original["model"]
    assert {k: v for k, v in model.items() if k not in ("vocab", "merges")} == \
        {k: v for k, v in before.items() if k not in ("vocab", "merges")}
    assert list(model["vocab"].items())[:len(before["vocab"])] == list(before["vocab"].items())
    assert model["merges"][:len(before["merges"])] == before["merges"] and len(model["merges"]) == len(before["merges"]) + 100
    ext, again = load_any(tmp_path / "ext.json"), HFTokenizer.from_file(str(tmp_path / "out.json"))
    again.no_padding()
    assert again.encode(texts[1]).ids == ext.encode(texts[1])
    assert again.get_vocab_size() == ext.vocab_size
    # only for hf, and only for a tokenizer that extends the file
    res = cli("export", "-t", tmp_path / "ext.json", "-f", "gpt2", "--like", tmp_path / "orig.json", "-o", tmp_path / "d")
    assert res.exit_code == 1 and "--like keeps what an HF tokenizer.json holds" in res.stderr
    res = cli("export", "-t", tmp_path / "ext.json", "-f", "hf", "--like", tmp_path / "orig.json", "--vocab-size", 300,
              "-o", tmp_path / "cut.json")
    assert res.exit_code == 1 and "does not extend --like" in res.stderr and "id 300 is not the original's token" in res.stderr
    assert not (tmp_path / "cut.json").exists()


def test_a_tokenizer_with_a_word_end_marker_extends_with_it(cli, tmp_path, texts):
    """Trained on one store (specials <a>, <b>), extended on another (<b>, <a>: other ids, so
    not a continuation): each word starts as the tokenizer encodes it, marker included."""
    text = texts[0][:40_000]
    (tmp_path / "t.txt").write_text(text, encoding="utf-8")
    flags = ["--pretokenizer", "whitespace", "--end-of-word", "</w>"]
    ok(cli("count", "--store", tmp_path / "a", *flags, "--special-token", "<a>", "--special-token", "<b>",
           tmp_path / "t.txt", "-q"))
    ok(cli("train", "--store", tmp_path / "a", "--num-merges", 200, "-o", tmp_path / "base.json", "-q"))
    ok(cli("count", "--store", tmp_path / "b", *flags, "--special-token", "<b>", "--special-token", "<a>",
           tmp_path / "t.txt", "-q"))
    res = ok(cli("train", "--store", tmp_path / "b", "--from", tmp_path / "base.json", "--num-merges", MERGES,
                 "-o", tmp_path / "ext.json"))
    assert "extending a tokenizer of 459 tokens" in res.stderr
    base, ext = load_any(tmp_path / "base.json"), load_any(tmp_path / "ext.json")
    assert ext.marker_id == base.marker_id == 258
    words = Counter(p for _, p in textbook.pretokens(text, textbook.WHITESPACE_PATTERN))
    # (here the words are encoded by bpe-stream itself: what this test holds is the marker's plumbing)
    expected = oracle_words(words, base.encode, base.vocab, "max-bytes")
    assert new_merges(base, ext) == expected
    assert any(ext.vocab[new].endswith(b"</w>") for _, _, new in ext.merges[-MERGES:])  # the marker takes part
