"""Interop: export to HF ``tokenizer.json``, GPT-2 ``vocab.json``+``merges.txt`` and tiktoken, and load
them (and files other tools wrote) back -- differential tests against ``tokenizers`` and ``tiktoken``.

The other libraries are the oracles: whatever text hypothesis makes up, and the real corpora, an
exported tokenizer must give bpe-stream's ids there, and a loaded one must give theirs here.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from conftest import assert_user_error, fewer_examples, tiktoken_pattern
from bpe_stream.count.counting import make_settings
from bpe_stream.formats import export_tokenizer, load_any, truncate
from bpe_stream.formats.native import rules_digest
from bpe_stream.formats.tiktoken_file import tiktoken_encoding
from bpe_stream.train.pipeline import count_file, tokenizer_from_result
from bpe_stream.encode.tokenizer import Tokenizer, TokenizerError
from bpe_stream.train.trainer import TrainConfig, Trainer

tokenizers = pytest.importorskip("tokenizers")
tiktoken = pytest.importorskip("tiktoken")

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
CS336 = DATA / "cs336"
CORPORA = DATA / "corpora"
EOT = "<|endoftext|>"
SPECIALS = [EOT, "<|fim|>", "<pad>"]
PRETOKENIZERS = ["gpt2", "cl100k", "o200k"]

# -- text strategies -------------------------------------------------------------------------
FRAGMENTS = [
    EOT, "<|fim|>", "<pad>", "<|endoftext", "<pad", "<|", " ", "  ", "   ", "\n", "\n\n", "\r\n", "\t", " \n",
    "\n ", "\u00a0", "\u3000", "the", " the", "The", " THE", "'s", "'S", "'ll", "'LL", "'ve", "don't", " I'm",
    "123", "1234567", " 42", "3.14159", "hello", " world", "!!!", " ...", "?!\n", "/*", "*/", "//\n", "@",
    "café", " naïve", "Straße", "日本語", "中文字符", " 한국어", "Привет", " мир", "مرحبا", "हिन्दी", "ελληνικά",
    "😀", "👍🏽", "\u200d", "e\u0301", "ǅungla", "CamelCase", "HTTPServer", "snake_case", "x=1;", "def f():\n    return 0\n",
    "\x00", "\x1f", "\x7f", "\ufeff",
]
characters = st.characters(blacklist_categories=("Cs", "Cn"))
texts = st.lists(
    st.one_of(st.sampled_from(FRAGMENTS), st.text(characters, max_size=12), st.sampled_from(FRAGMENTS).map(str.upper)),
    max_size=30,
).map("".join)
HYPO = settings(suppress_health_check=list(HealthCheck))
HYPO_FEW = settings(fewer_examples(40), suppress_health_check=list(HealthCheck))  # exports to files, loaded again


def corpus_samples():
    """A prefix of each real corpus (and the CS336 texts), a few hundred KB in all."""
    out = {}
    for name in ("en_100M.txt", "multi_25M.txt", "code_25M.txt"):
        with open(CORPORA / name, "rb") as f:
            out[name] = f.read(120_000).decode("utf-8", "ignore")
    for name in ("tinystories_sample.txt", "german.txt", "address.txt", "special_token_double_newlines_non_whitespace.txt"):
        out[name] = (CS336 / name).read_text(encoding="utf-8")
    return out


SAMPLES = corpus_samples()


# -- tokenizers under test -------------------------------------------------------------------
def train(pretokenizer: str, vocab_size: int, specials=SPECIALS, source=None, **config) -> Tokenizer:
    settings_ = make_settings(pretokenizer, specials, config.get("end_of_word"))
    trainer = Trainer(TrainConfig(vocab_size=vocab_size, special_tokens=list(specials), **config))
    trainer.feed(count_file(source or TRAIN_TEXT, settings_).items())
    return tokenizer_from_result(trainer.train(), pretokenizer, config.get("tie_break", "max-bytes"))


@pytest.fixture(scope="module", autouse=True)
def _train_text(tmp_path_factory):
    """corpus.en plus slices of the three corpora: merges for English, code and other scripts."""
    global TRAIN_TEXT
    path = tmp_path_factory.mktemp("train") / "train.txt"
    parts = [(CS336 / "corpus.en").read_text(encoding="utf-8")]
    for name in ("en_100M.txt", "multi_25M.txt", "code_25M.txt"):
        with open(CORPORA / name, "rb") as f:
            f.seek(1_000_000)
            parts.append(f.read(150_000).decode("utf-8", "ignore"))
    path.write_text(f"\n{EOT}\n".join(parts), encoding="utf-8")
    TRAIN_TEXT = path
    yield


TRAIN_TEXT = None
_CACHE = {}


def trained(pretokenizer: str) -> Tokenizer:
    if pretokenizer not in _CACHE:
        _CACHE[pretokenizer] = train(pretokenizer, 1200)
    return _CACHE[pretokenizer]


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """pretokenizer -> (our tokenizer, tokenizers.Tokenizer, tiktoken.Encoding) via exported files."""
    out = {}
    base = tmp_path_factory.mktemp("exports")
    for pre in PRETOKENIZERS:
        tok = trained(pre)
        export_tokenizer(tok, "hf", base / f"{pre}.json")
        export_tokenizer(tok, "tiktoken", base / f"{pre}.tiktoken")
        out[pre] = (tok, tokenizers.Tokenizer.from_file(str(base / f"{pre}.json")),
                    tiktoken_encoding(base / f"{pre}.tiktoken"), base)
    return out


def hf_ids(hf, text):
    return hf.encode(text).ids


def tt_ids(enc, text):
    return enc.encode(text, allowed_special="all")


# -- exports encode identically ---------------------------------------------------------------
@pytest.mark.parametrize("pre", PRETOKENIZERS)
@HYPO
@given(text=texts)
def test_hf_export_encodes_like_bpe_stream(exported, pre, text):
    tok, hf, _, _ = exported[pre]
    assert hf_ids(hf, text) == tok.encode(text)


@pytest.mark.parametrize("pre", PRETOKENIZERS)
@HYPO
@given(text=texts)
def test_tiktoken_export_encodes_like_bpe_stream(exported, pre, text):
    tok, _, enc, _ = exported[pre]
    assert tt_ids(enc, text) == tok.encode(text)


@pytest.mark.parametrize("pre", PRETOKENIZERS)
def test_exports_encode_the_corpora_identically(exported, pre):
    tok, hf, enc, _ = exported[pre]
    for name, text in SAMPLES.items():
        ours = tok.encode(text)
        assert hf_ids(hf, text) == ours, name
        assert tt_ids(enc, text) == ours, name
        assert hf.decode(ours, skip_special_tokens=False) == text == enc.decode(ours), name
    # special tokens really are special in all three
    ids = tok.encode(f"a{EOT}b<pad><|fim|>")
    assert tok.special_ids[EOT] in ids and tok.special_ids["<pad>"] in ids
    assert hf_ids(hf, f"a{EOT}b<pad><|fim|>") == ids == tt_ids(enc, f"a{EOT}b<pad><|fim|>")


def test_tiktoken_export_uses_tiktokens_own_patterns(exported):
    for pre, name in (("cl100k", "cl100k_base"), ("o200k", "o200k_base")):
        meta = json.loads((exported[pre][3] / f"{pre}.tiktoken.json").read_text())
        assert meta["pat_str"] == tiktoken_pattern(name)
        assert meta["special_tokens"] == {t: exported[pre][0].special_ids[t] for t in SPECIALS}
        assert meta["pretokenizer"] == pre


@pytest.mark.parametrize("fmt,name", [("hf", "t.json"), ("tiktoken", "t.tiktoken"), ("gpt2", "dir"), ("native", "n.json")])
def test_round_trip_keeps_the_rules(exported, tmp_path, fmt, name):
    for pre in PRETOKENIZERS if fmt != "gpt2" else ["gpt2"]:
        tok = exported[pre][0]
        (tmp_path / pre).mkdir()
        export_tokenizer(tok, fmt, tmp_path / pre / name)
        back = load_any(tmp_path / pre / name)
        assert back.pretokenizer.name == pre
        assert rules_digest(back) == rules_digest(tok)
        assert back.encode(SAMPLES["en_100M.txt"][:20000]) == tok.encode(SAMPLES["en_100M.txt"][:20000])


# -- other pretokenizers, custom patterns and their regex dialects ----------------------------
CUSTOM = [
    "whitespace",
    "none",
    r"regex:\p{N}{1,2}+|[ ]+$|\s+|\p{L}+|[^\s\p{L}\p{N}]+",
    r"regex:^\s+|(?i:ab)+|\d{2}+|\s+\Z|\s+|\w+|[^\w\s]",
    r"regex:\s+(?!\S)|\s+|\p{L}++|\p{N}+|.",
]


@pytest.fixture(scope="module")
def custom_exports(tmp_path_factory):
    out = {}
    base = tmp_path_factory.mktemp("custom")
    for i, pre in enumerate(CUSTOM):
        tok = train(pre, 420, specials=[EOT])
        export_tokenizer(tok, "hf", base / f"{i}.json")
        export_tokenizer(tok, "tiktoken", base / f"{i}.tiktoken")
        out[pre] = (tok, tokenizers.Tokenizer.from_file(str(base / f"{i}.json")), tiktoken_encoding(base / f"{i}.tiktoken"),
                    base / f"{i}.json", base / f"{i}.tiktoken")
    return out


@pytest.mark.parametrize("pre", CUSTOM)
@HYPO_FEW
@given(text=texts)
def test_custom_pretokenizers_export_identically(custom_exports, pre, text):
    tok, hf, enc, _, _ = custom_exports[pre]
    ours = tok.encode(text)
    assert hf_ids(hf, text) == ours
    assert tt_ids(enc, text) == ours


@pytest.mark.parametrize("pre", CUSTOM)
def test_custom_pretokenizers_round_trip(custom_exports, pre):
    tok, _, _, hf_path, tt_path = custom_exports[pre]
    for path in (hf_path, tt_path):
        back = load_any(path)
        assert back.pretokenizer.name == tok.pretokenizer.name
        assert rules_digest(back) == rules_digest(tok)


def test_words_pretokenizer_exports_to_hf_and_tiktoken(tmp_path):
    tok = train("words", 400, specials=[EOT])
    export_tokenizer(tok, "hf", tmp_path / "w.json")
    export_tokenizer(tok, "tiktoken", tmp_path / "w.tiktoken")
    hf = tokenizers.Tokenizer.from_file(str(tmp_path / "w.json"))
    enc = tiktoken_encoding(tmp_path / "w.tiktoken")
    for text in (SAMPLES["german.txt"], " a  b\n\tc " + EOT + " d"):
        assert hf_ids(hf, text) == tok.encode(text) == tt_ids(enc, text)
    assert load_any(tmp_path / "w.json").pretokenizer.name == "words"


# -- GPT-2's own files -------------------------------------------------------------------------
@pytest.fixture(scope="module")
def gpt2_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("gpt2dir")
    os.symlink(CS336 / "gpt2_vocab.json", d / "vocab.json")
    os.symlink(CS336 / "gpt2_merges.txt", d / "merges.txt")
    return d


@pytest.fixture(scope="module")
def gpt2_loaded(gpt2_dir):
    return load_any(gpt2_dir)


def test_gpt2_files_load_every_way(gpt2_dir, gpt2_loaded, tiktoken_gpt2):
    from_files = Tokenizer.from_files(CS336 / "gpt2_vocab.json", CS336 / "gpt2_merges.txt")
    by_vocab_path = load_any(CS336 / "gpt2_vocab.json")  # CS336's prefixed names, found in pairs
    assert gpt2_loaded.symbols == [(50256, "special", EOT)]
    assert gpt2_loaded.byte_ids[ord("!")] == 0  # GPT-2's ids are not byte values
    digest = rules_digest(gpt2_loaded)
    assert rules_digest(from_files) == digest == rules_digest(by_vocab_path)
    for name, text in SAMPLES.items():
        assert gpt2_loaded.encode(text) == tiktoken_gpt2.encode(text, allowed_special="all"), name


@HYPO
@given(text=texts)
def test_gpt2_files_encode_like_tiktoken_gpt2(gpt2_loaded, tiktoken_gpt2, text):
    assert gpt2_loaded.encode(text) == tiktoken_gpt2.encode(text, allowed_special="all")


def test_gpt2_export_is_byte_identical_to_the_originals(gpt2_loaded, tmp_path):
    written = export_tokenizer(gpt2_loaded, "gpt2", tmp_path / "out")
    assert [Path(p).name for p in written] == ["vocab.json", "merges.txt", "tokenizer_config.json", "special_tokens_map.json"]
    assert (tmp_path / "out" / "vocab.json").read_bytes() == (CS336 / "gpt2_vocab.json").read_bytes()
    merges = (tmp_path / "out" / "merges.txt").read_bytes()
    assert merges.startswith(b"#version: 0.2\n")
    assert merges.split(b"\n", 1)[1] == (CS336 / "gpt2_merges.txt").read_bytes()
    # and HF's own reader takes it
    model = tokenizers.models.BPE.from_file(str(tmp_path / "out" / "vocab.json"), str(tmp_path / "out" / "merges.txt"))
    assert model.token_to_id("Ġthe") == gpt2_loaded.encode(" the")[0]


def test_gpt2_exported_to_hf_and_tiktoken_encodes_like_tiktoken_gpt2(gpt2_loaded, tiktoken_gpt2, tmp_path):
    export_tokenizer(gpt2_loaded, "hf", tmp_path / "tokenizer.json")
    export_tokenizer(gpt2_loaded, "tiktoken", tmp_path / "gpt2.tiktoken")
    hf = tokenizers.Tokenizer.from_file(str(tmp_path / "tokenizer.json"))
    enc = tiktoken_encoding(tmp_path / "gpt2.tiktoken")
    for name, text in SAMPLES.items():
        ref = tiktoken_gpt2.encode(text, allowed_special="all")
        assert hf_ids(hf, text) == ref, name
        assert tt_ids(enc, text) == ref, name
    # the tiktoken files come back with GPT-2's ids and merges
    back = load_any(tmp_path / "gpt2.tiktoken")
    assert rules_digest(back) == rules_digest(gpt2_loaded)
    assert rules_digest(load_any(tmp_path)) == rules_digest(gpt2_loaded)  # a directory holding tokenizer.json


# -- HF files written by tokenizers itself ----------------------------------------------------
@pytest.fixture(scope="module")
def hf_trained(tmp_path_factory):
    from tokenizers import decoders, models, pre_tokenizers, trainers

    hf = tokenizers.Tokenizer(models.BPE())
    hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    hf.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=900, special_tokens=["<s>", EOT], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    hf.train([str(TRAIN_TEXT)], trainer)
    path = tmp_path_factory.mktemp("hftrained") / "tokenizer.json"
    hf.save(str(path))
    return hf, path


@HYPO
@given(text=texts)
def test_hf_trained_tokenizer_loads_and_encodes_like_tokenizers(hf_trained, text):
    hf, path = hf_trained
    tok = _load_cached(path)
    assert tok.encode(text) == hf.encode(text).ids


def _load_cached(path, _cache={}):  # noqa: B006 - the dict is the cache, on purpose
    if path not in _cache:
        _cache[path] = load_any(path)
    return _cache[path]


def test_hf_trained_tokenizer_ids_and_specials(hf_trained, tmp_path):
    hf, path = hf_trained
    tok = load_any(path)
    assert tok.special_ids == {"<s>": 0, EOT: 1}  # HF puts special tokens first: ids are not bytes
    assert tok.byte_ids[ord("!")] == 2
    for name, text in SAMPLES.items():
        assert tok.encode(text) == hf.encode(text).ids, name
    # and out again, in every format, with the same ids
    export_tokenizer(tok, "gpt2", tmp_path / "g")
    export_tokenizer(tok, "hf", tmp_path / "h.json")
    text = SAMPLES["code_25M.txt"][:30000] + "<s>" + EOT
    assert load_any(tmp_path / "g").encode(text) == hf.encode(text).ids
    assert tokenizers.Tokenizer.from_file(str(tmp_path / "h.json")).encode(text).ids == hf.encode(text).ids


def test_bytelevel_bpe_tokenizer_class_loads(tmp_path):
    bl = tokenizers.ByteLevelBPETokenizer()
    bl.train([str(CS336 / "corpus.en")], vocab_size=500, special_tokens=[EOT], show_progress=False)
    bl.save(str(tmp_path / "bl.json"))
    tok = load_any(tmp_path / "bl.json")
    for text in (SAMPLES["tinystories_sample.txt"], "x" + EOT + "y"):
        assert tok.encode(text) == bl.encode(text).ids


# -- special tokens and document boundaries ---------------------------------------------------
def test_overlapping_special_tokens_longest_wins_in_hf_and_tiktoken_refuses(tmp_path):
    double = EOT + EOT
    tok = train("gpt2", 400, specials=[EOT, double])
    text = "a" + EOT * 3 + "b" + double
    export_tokenizer(tok, "hf", tmp_path / "t.json")
    hf = tokenizers.Tokenizer.from_file(str(tmp_path / "t.json"))
    assert hf_ids(hf, text) == tok.encode(text)
    assert tok.encode(text).count(tok.special_ids[double]) == 2
    with pytest.raises(TokenizerError, match="prefix"):
        export_tokenizer(tok, "tiktoken", tmp_path / "t.tiktoken")


def test_hf_added_tokens_are_special_in_both_directions(tmp_path):
    tok = trained("gpt2")
    export_tokenizer(tok, "hf", tmp_path / "t.json")
    doc = json.loads((tmp_path / "t.json").read_text())
    assert [(a["content"], a["id"], a["special"]) for a in doc["added_tokens"]] == [(s, tok.special_ids[s], True) for s in SPECIALS]
    assert all(doc["model"]["vocab"][s] == tok.special_ids[s] for s in SPECIALS)
    assert doc["pre_tokenizer"] == {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": True}
    assert doc["decoder"]["type"] == "ByteLevel"
    # a non-special added token is matched in text by HF too, so it loads as a special token
    hf = tokenizers.Tokenizer.from_file(str(tmp_path / "t.json"))
    hf.add_tokens(["<mark>"])
    hf.save(str(tmp_path / "t2.json"))
    back = load_any(tmp_path / "t2.json")
    text = "x<mark>y" + EOT
    assert back.encode(text) == hf.encode(text).ids
    assert back.decode(back.encode(text)) == text


def test_doc_boundaries_export_to_hf_as_a_template(tmp_path):
    tok = train("gpt2", 400, specials=[EOT], doc_boundaries=True)
    export_tokenizer(tok, "hf", tmp_path / "t.json")
    hf = tokenizers.Tokenizer.from_file(str(tmp_path / "t.json"))
    for text in ("hello world" + EOT + "again", SAMPLES["address.txt"]):
        ids = tok.encode(text)
        assert ids[0] == tok.doc_start_id and ids[-1] == tok.doc_end_id
        assert hf_ids(hf, text) == ids
    back = load_any(tmp_path / "t.json")
    assert rules_digest(back) == rules_digest(tok)
    for fmt, name in (("tiktoken", "t.tiktoken"), ("gpt2", "g")):
        with pytest.raises(TokenizerError, match="document boundaries"):
            export_tokenizer(tok, fmt, tmp_path / name)


def test_end_of_word_tokenizers_are_refused_by_every_foreign_format(tmp_path):
    tok = train("words", 300, specials=[], end_of_word="</w>")
    for fmt, name in (("hf", "t.json"), ("tiktoken", "t.tiktoken"), ("gpt2", "g")):
        with pytest.raises(TokenizerError, match="word-end marker"):
            export_tokenizer(tok, fmt, tmp_path / name)
        assert not (tmp_path / name).exists()


# -- --vocab-size: the first merges only ------------------------------------------------------
def test_truncation_equals_training_the_smaller_vocabulary(tmp_path):
    big = trained("cl100k")
    small = train("cl100k", 500)
    assert rules_digest(truncate(big, 500)) == rules_digest(small)
    export_tokenizer(big, "hf", tmp_path / "t.json", vocab_size=500)
    export_tokenizer(big, "tiktoken", tmp_path / "t.tiktoken", vocab_size=500)
    hf = tokenizers.Tokenizer.from_file(str(tmp_path / "t.json"))
    enc = tiktoken_encoding(tmp_path / "t.tiktoken")
    text = SAMPLES["en_100M.txt"][:30000] + EOT
    assert hf_ids(hf, text) == small.encode(text) == tt_ids(enc, text)
    assert hf.get_vocab_size() == 500 and enc.n_vocab == 500
    assert truncate(big, big.vocab_size) is big
    with pytest.raises(TokenizerError, match="smaller than the 259 base"):
        truncate(big, 258)
    with pytest.raises(TokenizerError, match="larger than the tokenizer"):
        truncate(big, big.vocab_size + 1)


def test_truncating_gpt2_keeps_its_ids(gpt2_loaded, tiktoken_gpt2, tmp_path):
    small = truncate(gpt2_loaded, 1000)
    assert small.vocab_size == 1000 and small.special_ids == {EOT: 50256}
    export_tokenizer(gpt2_loaded, "gpt2", tmp_path / "g", vocab_size=1000)
    merges = (tmp_path / "g" / "merges.txt").read_text(encoding="utf-8").splitlines()
    assert merges[1:] == (CS336 / "gpt2_merges.txt").read_text(encoding="utf-8").splitlines()[:1000 - 257]
    # the first merges of GPT-2 encode like GPT-2's tiktoken ranks cut at the same place
    ranks = {t: r for t, r in tiktoken_gpt2._mergeable_ranks.items() if r < 999}
    enc = tiktoken.Encoding("gpt2-1000", pat_str=tiktoken_gpt2._pat_str, mergeable_ranks=ranks,
                            special_tokens={EOT: 50256})
    text = SAMPLES["tinystories_sample.txt"]
    assert load_any(tmp_path / "g").encode(text) == small.encode(text) == enc.encode(text, allowed_special="all")
    # ids with a gap (0..998, then 50256) in the other formats too
    export_tokenizer(gpt2_loaded, "hf", tmp_path / "t.json", vocab_size=1000)
    export_tokenizer(gpt2_loaded, "tiktoken", tmp_path / "t.tiktoken", vocab_size=1000)
    text += EOT
    assert tokenizers.Tokenizer.from_file(str(tmp_path / "t.json")).encode(text).ids == small.encode(text)
    assert tiktoken_encoding(tmp_path / "t.tiktoken").encode(text, allowed_special="all") == small.encode(text)


# -- clear errors -----------------------------------------------------------------------------
def _save_hf(tmp_path, name, build):
    from tokenizers import models

    hf = tokenizers.Tokenizer(models.BPE(vocab={"a": 0}, merges=[]))
    build(hf)
    hf.save(str(tmp_path / name))
    return tmp_path / name


def test_unsupported_hf_tokenizers_give_one_clear_error(tmp_path, cli):
    from tokenizers import models, normalizers, pre_tokenizers

    cases = {
        "wordpiece.json": (lambda hf: setattr(hf, "model", models.WordPiece({"[UNK]": 0, "a": 1}, unk_token="[UNK]")),
                           "WordPiece model, not byte-level BPE"),
        "unigram.json": (lambda hf: setattr(hf, "model", models.Unigram([("a", -1.0)], 0, False)),
                         "Unigram model, not byte-level BPE"),
        "normalizer.json": (lambda hf: (setattr(hf, "normalizer", normalizers.NFKC()),
                                        setattr(hf, "pre_tokenizer", pre_tokenizers.ByteLevel(add_prefix_space=False))),
                            "normalizer 'NFKC' is not supported"),
        "prefix.json": (lambda hf: setattr(hf, "pre_tokenizer", pre_tokenizers.ByteLevel(add_prefix_space=True)),
                        "add_prefix_space=true is not supported"),
        "whitespace.json": (lambda hf: setattr(hf, "pre_tokenizer", pre_tokenizers.Whitespace()), "not byte-level"),
        "no_pretok.json": (lambda hf: None, "not byte-level"),
    }
    for name, (build, message) in cases.items():
        path = _save_hf(tmp_path, name, build)
        with pytest.raises(TokenizerError, match=message):
            load_any(path)
        res = cli("info", "-t", path)
        assert_user_error(res.stderr, res.exit_code)
        assert message in res.stderr
    doc = json.loads(_save_hf(tmp_path, "im.json", lambda hf: setattr(
        hf, "pre_tokenizer", pre_tokenizers.ByteLevel(add_prefix_space=False))).read_text())
    doc["model"]["ignore_merges"] = True
    (tmp_path / "im.json").write_text(json.dumps(doc))
    with pytest.raises(TokenizerError, match="ignore_merges"):
        load_any(tmp_path / "im.json")
    # byte-level in name but missing bytes: the fix is named
    with pytest.raises(TokenizerError, match="initial_alphabet"):
        _missing_bytes(tmp_path)


def _missing_bytes(tmp_path):
    from tokenizers import decoders, models, pre_tokenizers, trainers

    hf = tokenizers.Tokenizer(models.BPE())
    hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    hf.decoder = decoders.ByteLevel()
    hf.train_from_iterator(["hello world"] * 10, trainers.BpeTrainer(vocab_size=300, show_progress=False))
    hf.save(str(tmp_path / "partial.json"))
    load_any(tmp_path / "partial.json")


def test_format_detection_errors_name_the_fix(tmp_path, gpt2_loaded):
    shutil.copy(CS336 / "gpt2_vocab.json", tmp_path / "vocab.json")
    with pytest.raises(TokenizerError, match="vocab.json; give the directory"):
        load_any(tmp_path / "vocab.json")
    (tmp_path / "merges.txt").write_text("#version: 0.2\nĠ t\n", encoding="utf-8")
    (tmp_path / "sub").mkdir()
    shutil.copy(tmp_path / "merges.txt", tmp_path / "sub" / "merges.txt")
    with pytest.raises(TokenizerError, match="merges.txt; give the directory"):
        load_any(tmp_path / "sub" / "merges.txt")
    with pytest.raises(TokenizerError, match="several vocab/merges pairs"):
        load_any(CS336)
    (tmp_path / "other.json").write_text('{"hello": [1, 2]}')
    with pytest.raises(TokenizerError, match="JSON but not a tokenizer"):
        load_any(tmp_path / "other.json")
    export_tokenizer(trained("gpt2"), "tiktoken", tmp_path / "t.tiktoken")
    os.remove(tmp_path / "t.tiktoken.json")
    with pytest.raises(TokenizerError, match="no sidecar"):
        load_any(tmp_path / "t.tiktoken")
    with pytest.raises(TokenizerError, match="unknown export format"):
        export_tokenizer(gpt2_loaded, "sentencepiece", tmp_path / "x")
    with pytest.raises(TokenizerError, match="record no pretokenizer"):
        export_tokenizer(trained("cl100k"), "gpt2", tmp_path / "g")


def test_tiktoken_sidecar_alone_loads(tmp_path):
    tok = trained("o200k")
    paths = export_tokenizer(tok, "tiktoken", tmp_path / "o.tiktoken")
    assert [Path(p).name for p in paths] == ["o.tiktoken", "o.tiktoken.json"]
    assert rules_digest(load_any(tmp_path / "o.tiktoken.json")) == rules_digest(tok)


def test_cli_reads_every_format(tmp_path, cli, gpt2_dir):
    tok = trained("gpt2")
    export_tokenizer(tok, "hf", tmp_path / "t.json")
    export_tokenizer(tok, "tiktoken", tmp_path / "t.tiktoken")
    (tmp_path / "in.txt").write_text(SAMPLES["german.txt"], encoding="utf-8")
    want = " ".join(map(str, tok.encode(SAMPLES["german.txt"])))
    for source in (tmp_path / "t.json", tmp_path / "t.tiktoken"):
        res = cli("encode", "-t", source, tmp_path / "in.txt")
        assert res.exit_code == 0, res
        assert res.stdout.decode().split() == want.split()
    res = cli("info", "-t", gpt2_dir)
    assert res.exit_code == 0, res
