"""Messages and settings that were accepted or worded badly (issue 19, item 13): special
tokens and markers given in bytes that are not UTF-8, a settings mismatch shown as
hundreds of characters of regex, ``eval`` calling the lossy word-end marker a bug,
``--pretokenizer ''``, an empty or special ``--end-of-word``, custom patterns that match
the empty string, and refused counts that left an empty store behind."""

from __future__ import annotations

import json
from collections import Counter

import pytest
from conftest import assert_user_error
from small_made import EOT, make_small, run_cli

from bpe_stream import Tokenizer
from bpe_stream.count.counting import count_text, make_settings
from bpe_stream.pretok.pretokenize import PretokenizeError, Pretokenizer

NOT_UTF8 = "\udcff\udcfe"  # what the bytes ff fe on a command line arrive as


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    return make_small(tmp_path_factory.mktemp("messages"))


def stats(store):
    code, out, err = run_cli("stats", "--store", store, "--json")
    assert code == 0, err
    return json.loads(out)


@pytest.mark.parametrize("args, fragment", [
    (("--special-token", NOT_UTF8), "the special token '\\xff\\xfe' is not valid UTF-8"),
    (("--end-of-word", NOT_UTF8), "the --end-of-word marker '\\xff\\xfe' is not valid UTF-8"),
    (("--pretokenizer", "regex:" + NOT_UTF8), "is not valid UTF-8"),
    (("--pretokenizer", ""), "unknown pretokenizer ''"),
    (("--end-of-word", ""), "--end-of-word cannot be empty"),
    (("--end-of-word", EOT, "--special-token", EOT), f"--end-of-word '{EOT}' is also a special token"),
    (("--pretokenizer", "no-such-one"), "unknown pretokenizer 'no-such-one'"),
])
def test_bad_count_settings_are_one_error_and_leave_no_store(made, tmp_path, args, fragment):
    store = tmp_path / "store"
    code, _, err = run_cli("count", "--store", store, *args, made["text"])
    assert_user_error(err, code)
    assert fragment in err and "codec" not in err
    assert not store.exists(), "a count refused for its settings left a store directory"


def test_bad_settings_of_a_later_count_leave_the_store_as_it_was(made, tmp_path):
    from reliability_helpers import file_digest

    store = tmp_path / "store"
    assert run_cli("count", "--store", store, made["text"])[0] == 0
    before = file_digest(store / "data.mdb")
    for args in (("--special-token", NOT_UTF8), ("--end-of-word", ""), ("--pretokenizer", "")):
        code, _, err = run_cli("count", "--store", store, *args, made["text"])
        assert_user_error(err, code)
    assert file_digest(store / "data.mdb") == before and stats(store)["settings"]["pretokenizer"] == "gpt2"


def test_train_refuses_a_special_token_that_is_not_utf8_before_training(made, tmp_path):
    code, _, err = run_cli("train", "--store", made["store"], "--num-merges", "5", "--special-token", NOT_UTF8,
                           "-o", tmp_path / "t.json")
    assert_user_error(err, code)
    assert "is not valid UTF-8" in err and not (tmp_path / "t.json").exists()


def test_a_pretokenizer_mismatch_names_the_pretokenizers(made):
    code, _, err = run_cli("count", "--store", made["store"], "--pretokenizer", "cl100k", made["text"])
    assert_user_error(err, code)
    assert "pretokenizer='gpt2', not 'cl100k'" in err
    assert "\\p{L}" not in err and len(err) < 250, err


def test_import_and_merge_mismatches_name_the_pretokenizers_too(made, tmp_path):
    counts = tmp_path / "w.tsv"
    counts.write_text(json.dumps({"format": "bpe-stream-counts", "settings": {"pretokenizer": "o200k"}}) + "\nab\t1\n")
    code, _, err = run_cli("import-counts", "--store", made["store"], counts)
    assert_user_error(err, code)
    assert "pretokenizer='gpt2', not 'o200k'" in err and "\\p{L}" not in err


# -- eval of a tokenizer with a word-end marker -----------------------------------------------------
def test_eval_of_an_end_of_word_tokenizer_says_lossy_by_design(made, tmp_path):
    store, tok = tmp_path / "store", tmp_path / "eow.json"
    assert run_cli("count", "--store", store, "--end-of-word", "</w>", made["text"], "-q")[0] == 0
    assert run_cli("train", "--store", store, "--num-merges", "20", "-o", tok, "-q")[0] == 0
    code, out, err = run_cli("eval", "-t", tok, made["text"])
    assert code == 0, err
    assert "lossy (by design: --end-of-word)" in out.decode() and "FAILED" not in out.decode()
    assert "lossy by design" in err and "report" not in err
    code, out, err = run_cli("eval", "-t", tok, made["text"], "--json")
    assert code == 0, err
    (row,) = json.loads(out)["results"]
    assert row["lossy_by_design"] is True and row["round_trip"] is False


def test_eval_of_a_lossless_tokenizer_still_checks_the_round_trip(made):
    code, out, err = run_cli("eval", "-t", made["tok"], made["text"], "--json")
    assert code == 0, err
    (row,) = json.loads(out)["results"]
    assert row["lossy_by_design"] is False and row["round_trip"] is True


# -- custom patterns that match the empty string ----------------------------------------------
@pytest.mark.parametrize("pattern", [r"\w*|\s", r"\w*|\s*|.", r"(?:\S*)(?:\s?)"])
def test_empty_matches_of_a_custom_pattern_are_no_pretokens(pattern):
    text = "hello world  and more\n"
    pre = Pretokenizer.from_name("regex:" + pattern)
    pieces = pre.split(text)
    assert "" not in pieces and "".join(pieces) == text
    counts = count_text(text, make_settings("regex:" + pattern))
    assert "" not in counts and sum(counts.values()) == len(pieces)


def test_a_count_with_such_a_pattern_stores_no_empty_pretoken(tmp_path):
    store = tmp_path / "store"
    text = tmp_path / "t.txt"
    text.write_bytes(b"hello world\n")
    code, _, err = run_cli("count", "--store", store, "--pretokenizer", r"regex:\w*|\s", text, "-q")
    assert code == 0, err
    s = stats(store)
    assert s["pretokens"] == 4 and Counter({r["pretoken"]: r["count"] for r in s["top"]}) == Counter(
        {"hello": 1, " ": 1, "world": 1, "\n": 1})


def test_an_end_of_word_tokenizer_with_such_a_pattern_encodes_no_lone_markers(tmp_path):
    store, tok_path = tmp_path / "store", tmp_path / "t.json"
    text = tmp_path / "t.txt"
    text.write_bytes(b"hello world hello world\n" * 20)
    assert run_cli("count", "--store", store, "--pretokenizer", r"regex:\w*|\s", "--end-of-word", "</w>", text,
                   "-q")[0] == 0
    assert run_cli("train", "--store", store, "--num-merges", "30", "-o", tok_path, "-q")[0] == 0
    tok = Tokenizer.load(tok_path)
    ids = tok.encode("hello world")
    # one marker per pretoken ("hello", " ", "world"), none for the empty matches between them
    assert sum(i in tok._marker_ends for i in ids) == 3, ids


def test_a_custom_pattern_that_does_not_cover_the_text_is_still_an_error():
    with pytest.raises(PretokenizeError, match="does not match the text"):
        Pretokenizer.from_name(r"regex:a*").split("abc")
