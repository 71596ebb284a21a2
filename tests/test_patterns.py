"""The pattern translator (``formats/patterns.py``) between Python ``regex``, Oniguruma
(Hugging Face ``Split``) and fancy-regex (tiktoken).

Each rewrite is pinned by example, the constructs the engines read differently are checked
by what the rewritten pattern matches, and HF's own ``Split`` is the oracle for Oniguruma.
(The exports that use the translator are tested against ``tokenizers`` and tiktoken in
``test_interop.py``.)
"""

from __future__ import annotations

import pytest
import regex
from conftest import fewer_examples
from hypothesis import HealthCheck, given, settings, strategies as st

from bpe_stream.formats.patterns import from_fancy, from_oniguruma, pretokenizer_for_pattern, to_fancy, to_oniguruma
from bpe_stream.pretok.pretokenize import CL100K_PATTERN, GPT2_PATTERN, O200K_PATTERN, WHITESPACE_PATTERN, Pretokenizer
from bpe_stream.encode.tokenizer import TokenizerError

HYPO = settings(fewer_examples(40), suppress_health_check=list(HealthCheck))  # patterns compiled by three engines
texts = st.lists(st.sampled_from(["a", "ab", "7", "123", " ", "  ", "\n", "\t", " \n", "!", "é", "日本"]), max_size=12).map("".join)
# Python patterns with each construct the engines read differently: $, ^, \Z, X{n,m}+
DIVERGENT = [
    r"\p{N}{1,2}+|[ ]+$|\s+|\p{L}+|[^\s\p{L}\p{N}]+",
    r"^\s+|(?i:ab)+|\d{2}+|\s+\Z|\s+|\w+|[^\w\s]",
    r"\s+(?!\S)|\s+|\p{L}++|\p{N}+|.",
    r" ?\p{L}{2}?\p{L}|\p{N}{2}?|\s+|.",  # X{n}?: exactly n in Python, optional in Ruby
]


# -- each rewrite, by example -----------------------------------------------------------------
@pytest.mark.parametrize("python, onig", [
    (r"a$", r"a(?=\n?\z)"),  # Ruby's $ is the end of any line
    (r"^a", r"\Aa"),  # Ruby's ^ the start of any line
    (r"a\Z", r"a\z"),
    (r"\p{N}{1,3}+", r"(?>\p{N}{1,3})"),  # in Ruby X{n,m}+ repeats X{n,m}: possessive is an atomic group
    (r"(?s:.)", r"(?m:.)"),  # Ruby's m is Python's s
    (r"x{3}|y{1,2}?|(?i)z", r"x{3}|y{1,2}?|(?i)z"),  # what both read alike is kept
    (r"x{3}?", r"x{3}"),  # lazy X{n} is X{n}; Ruby would read X{n}? as an optional X{n}
    (r"(?#note)x", r"x"),  # comments go
])
def test_to_oniguruma_rewrites_exactly_the_divergent_constructs(python, onig):
    assert to_oniguruma(python) == onig
    assert from_oniguruma(onig) == python.replace("(?#note)", "").replace("{3}?", "{3}")


@pytest.mark.parametrize("onig, python", [
    (r"a$", r"a(?=\n|\Z)"),
    (r"^a", r"(?<![^\n])a"),
    (r"a\z", r"a\Z"),
    (r"a\Z", r"a(?=\n?\Z)"),
    (r"\d{2}+", r"(?:\d{2})+"),
    (r"\d{2}?", r"(?:\d{2})?"),  # X{n}? is an optional X{n} in Ruby
    (r"(?m:.)", r"(?s:.)"),
])
def test_from_oniguruma_reads_foreign_patterns_as_ruby_does(onig, python):
    assert from_oniguruma(onig) == python


@pytest.mark.parametrize("python, fancy", [
    (r"a$", r"a(?=\n?\z)"),  # fancy-regex's $ is the very end
    (r"a\Z", r"a\z"),
    (r"^a", r"^a"),
    (r"\p{N}{1,3}+", r"\p{N}{1,3}+"),
])
def test_to_fancy_and_back(python, fancy):
    assert to_fancy(python) == fancy
    assert from_fancy(fancy) == python


def test_from_fancy_reads_a_foreign_end_as_the_end_of_the_text():
    assert from_fancy(r"\s+$|\s+\z|\S+") == r"\s+\Z|\s+\Z|\S+"
    assert regex.findall(from_fancy(r"a$"), "a\na") == ["a"]  # only the last: Python's $ would take both


def test_named_patterns_translate_and_come_back():
    for pattern in (GPT2_PATTERN, CL100K_PATTERN, O200K_PATTERN, r"a{2}+$|^\Z"):
        assert from_oniguruma(to_oniguruma(pattern)) == pattern
        assert from_fancy(to_fancy(pattern)) == pattern
    # the one construct of cl100k that Oniguruma reads otherwise: X{1,3}+ is a repetition in Ruby syntax
    assert r"(?>\p{N}{1,3})" in to_oniguruma(CL100K_PATTERN)
    assert to_fancy(CL100K_PATTERN).startswith("'(?i:[sdmt]")


def test_the_rewritten_anchors_match_what_the_other_engine_matches():
    """Ruby reads ``$``/``^`` per line; the Python patterns read back match there, and only there."""
    text = "ab\ncd\n"
    assert regex.findall(from_oniguruma(r"\w$"), text) == ["b", "d"]
    assert regex.findall(from_oniguruma(r"^\w"), text) == ["a", "c"]
    assert regex.findall(to_oniguruma(r"\w$").replace(r"\z", r"\Z"), text) == ["d"]  # what Python's $ means


# -- what cannot be translated ----------------------------------------------------------------
@pytest.mark.parametrize("pattern, why", [
    ("a\\", "lone backslash"),
    ("(a", "unbalanced '('"),
    ("a)", "unbalanced ')'"),
    ("[a", "unterminated character class"),
    ("(?m)x", "inline flag 'm'"),  # Python's multiline has no one-letter equivalent in Ruby
])
def test_untranslatable_patterns_are_one_error_naming_the_pattern(pattern, why):
    for fn, engine in ((to_oniguruma, "Oniguruma"), (to_fancy, "fancy-regex")):
        with pytest.raises(TokenizerError, match=engine) as err:
            fn(pattern)
        assert why in str(err.value) and repr(pattern) in str(err.value)


def test_a_possessive_repetition_of_nothing_cannot_become_an_atomic_group():
    with pytest.raises(TokenizerError, match=r"the quantifier \{2\}\+ has nothing to repeat"):
        to_oniguruma("{2}+a")


@pytest.mark.parametrize("fn, engine", [(from_oniguruma, "Oniguruma"), (from_fancy, "tiktoken")])
def test_unreadable_foreign_patterns_are_one_error(fn, engine):
    with pytest.raises(TokenizerError, match=f"cannot read the {engine} pattern '\\(a'"):
        fn("(a")


# -- the pretokenizer a pattern read back is ----------------------------------------------------
@pytest.mark.parametrize("pattern, name", [
    (GPT2_PATTERN, "gpt2"), (CL100K_PATTERN, "cl100k"), (O200K_PATTERN, "o200k"), (WHITESPACE_PATTERN, "whitespace"),
    (r"\S+|\s+", r"regex:\S+|\s+"),
])
def test_pretokenizer_for_pattern_names_the_built_ins(pattern, name):
    assert pretokenizer_for_pattern(pattern, "t.json") == name
    assert Pretokenizer.from_name(name).pattern == pattern


def test_pretokenizer_for_a_pattern_that_does_not_compile_names_the_file():
    with pytest.raises(TokenizerError, match=r"^t\.json: the pattern '\[a-' does not compile"):
        pretokenizer_for_pattern("[a-", "t.json")


# -- HF's Split is the oracle for Oniguruma -------------------------------------------------------
@pytest.mark.parametrize("pattern", DIVERGENT)
@HYPO
@given(text=texts)
def test_exported_patterns_split_in_hf_as_in_bpe_stream(pattern, text):
    tokenizers = pytest.importorskip("tokenizers")
    split = tokenizers.pre_tokenizers.Split(tokenizers.Regex(to_oniguruma(pattern)), "isolated")
    assert [piece for piece, _ in split.pre_tokenize_str(text)] == Pretokenizer.from_name("regex:" + pattern).split(text)


@HYPO
@given(text=texts)
def test_foreign_oniguruma_patterns_are_read_as_oniguruma_reads_them(text):
    """A Split pattern written for Oniguruma (not by us) splits here as HF splits it."""
    tokenizers = pytest.importorskip("tokenizers")
    onig = r"\p{N}{1,3}+|[ ]+$|^[ ]+|\p{L}+|\s+|[^\s\p{L}\p{N}]+"
    split = tokenizers.pre_tokenizers.Split(tokenizers.Regex(onig), "isolated")
    ours = Pretokenizer.from_name("regex:" + from_oniguruma(onig)).split(text)
    assert ours == [piece for piece, _ in split.pre_tokenize_str(text)]
