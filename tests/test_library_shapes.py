"""The library shapes people arrive with (issue 17, item 5): ``Tokenizer.from_vocab_merges``
/ ``to_vocab_merges`` (what CS336's ``train_bpe`` returns) and ``train_from_iterator``
(texts in memory, as HF and rustbpe take them), backed by a temporary or given store."""

from __future__ import annotations

import pytest

from bpe_stream import Store, Tokenizer, train_bpe, train_from_iterator
from bpe_stream.formats import load_any
from bpe_stream.store.lmdb_store import StoreError
from bpe_stream.encode.tokenizer import TokenizerError

EOT = "<|endoftext|>"


def ok(res):
    assert res.exit_code == 0, res
    return res


@pytest.fixture(scope="module")
def stories(cs336) -> str:
    return (cs336 / "tinystories_sample.txt").read_text(encoding="utf-8")


def test_train_bpe_output_is_a_tokenizer_and_back(cs336, stories):
    vocab, merges = train_bpe(cs336 / "tinystories_sample.txt", 400, [EOT])
    tok = Tokenizer.from_vocab_merges(vocab, merges)  # None: EOT, the one token no merge makes
    assert tok.special_tokens == [EOT] and tok.special_ids[EOT] == 256
    assert tok.to_vocab_merges() == (vocab, merges)
    same = train_from_iterator([stories], 400, [EOT])
    assert same.merges == tok.merges and same.encode(stories[:3000]) == tok.encode(stories[:3000])
    given = Tokenizer.from_vocab_merges(vocab, merges, special_tokens=[EOT, "<pad>"])
    assert given.special_ids == {EOT: 256, "<pad>": 400}


def test_from_vocab_merges_refuses_a_merge_of_unknown_tokens():
    vocab = {i: bytes([i]) for i in range(256)} | {256: b"ab"}
    with pytest.raises(TokenizerError, match=r"merge 1 \(b'ab', b'c'\): b'abc' is not in the vocabulary"):
        Tokenizer.from_vocab_merges(vocab, [(b"a", b"b"), (b"ab", b"c")])
    with pytest.raises(TokenizerError, match="token 256 .* is not UTF-8 text"):
        Tokenizer.from_vocab_merges(vocab | {256: b"\xff\xfe"}, [])


def test_to_vocab_merges_refuses_a_word_end_marker(cli, tmp_path):
    (tmp_path / "t.txt").write_text("low lower lowest\n" * 5)
    ok(cli("count", "--store", tmp_path / "st", "--end-of-word", "</w>", tmp_path / "t.txt", "-q"))
    ok(cli("train", "--store", tmp_path / "st", "--num-merges", 5, "-o", tmp_path / "tok.json", "-q"))
    with pytest.raises(TokenizerError, match="no word-end marker"):
        load_any(tmp_path / "tok.json").to_vocab_merges()


def test_train_from_iterator_is_count_then_train(cli, tmp_path, stories):
    docs = stories.split(EOT)
    (tmp_path / "t.txt").write_text(EOT.join(docs), encoding="utf-8")
    ok(cli("count", "--store", tmp_path / "st", "--special-token", EOT, tmp_path / "t.txt", "-q"))
    ok(cli("train", "--store", tmp_path / "st", "--vocab-size", 450, "--tie-break", "min-ids",
           "-o", tmp_path / "tok.json", "-q"))
    tok = train_from_iterator(iter(docs), 450, [EOT], tie_break="min-ids")
    cli_tok = load_any(tmp_path / "tok.json")
    assert tok.merges == cli_tok.merges and tok.vocab == cli_tok.vocab and tok.symbols == cli_tok.symbols


def test_train_from_iterator_into_a_given_store_adds_up(tmp_path):
    path = tmp_path / "st"
    train_from_iterator(["aaa bbb"] * 3, num_merges=2, store=path)
    train_from_iterator(["aaa bbb"] * 3, num_merges=2, store=path)
    with Store.open(str(path)) as st:
        with st.reader() as txn:
            assert dict(st.iter_words(txn)) == {b"aaa": 6, b" bbb": 6}
        assert st.totals()["documents"] == 6
    with pytest.raises(StoreError):
        train_from_iterator(["aaa"], num_merges=2, store=path, pretokenizer="whitespace")
    with pytest.raises(TypeError, match="not bytes"):
        train_from_iterator([b"aaa"], num_merges=2)


def test_train_from_iterator_extends_a_tokenizer(cli, tmp_path, cs336, stories):
    gpt2 = load_any(cs336 / "gpt2_vocab.json")
    ext = train_from_iterator([stories], special_tokens=[EOT], num_merges=20, from_tokenizer=gpt2)
    (tmp_path / "t.txt").write_text(stories, encoding="utf-8")
    ok(cli("count", "--store", tmp_path / "st", "--special-token", EOT, tmp_path / "t.txt", "-q"))
    ok(cli("train", "--store", tmp_path / "st", "--num-merges", 20, "--from", cs336 / "gpt2_vocab.json",
           "-o", tmp_path / "ext.json", "-q"))
    # (GPT-2 leaves few pairs in these stories: the pairs run out before 20 merges)
    assert ext.merges == load_any(tmp_path / "ext.json").merges and 50_000 < len(ext.merges) <= 50_020
