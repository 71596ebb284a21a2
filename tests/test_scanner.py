"""The native pretokenizer scanner against ``regex``: the same pretokens on every input.

The reference is, for each named pattern P and bytes ``data``,
``[m.encode("utf-8", "surrogateescape") for m in regex.findall(P, data.decode("utf-8", "surrogateescape"))]``
(``none``: the whole input, if any).  Both ``bpe_stream.pretok.scan``'s native scanner and its
``regex`` fallback are held to it: by hypothesis, over text drawn from every Unicode general
category, the spaces ``regex`` calls ``\\s`` and those it does not, marks, digits of every
script, contractions in mixed case and invalid UTF-8; by every code point in several
contexts; by every lead byte of a multi-byte sequence with every second byte; and by the
shared corpora.  Last, the character tables are regenerated from the installed ``regex``
and compared with the committed header.
"""

from __future__ import annotations

import importlib.util

import pytest
import regex
from hypothesis import example, given
from hypothesis import strategies as st
from scanner_inputs import (
    CORPORA,
    GENERATOR,
    HEADER,
    NAMES,
    corpus_slices,
    documents,
    reference,
)

from bpe_stream.pretok import scan as scan_mod

native = pytest.mark.skipif(not scan_mod.native_available(), reason="bpe_stream._fastbpe is not built")
SCANNERS = [
    pytest.param(lambda data, name: scan_mod._scan.scan(data, name), id="native", marks=native),
    pytest.param(scan_mod.scan_with_regex, id="fallback"),
]


def assert_same(scanner, data: bytes, name: str) -> None:
    got, want = scanner(data, name), reference(data, name)
    if got != want:  # the first difference, not two lists of a million items
        i = next((k for k, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
        pytest.fail(f"{name}: pretoken {i} differs: scanner {got[i:i + 3]!r}, regex {want[i:i + 3]!r}")


@pytest.mark.parametrize("scanner", SCANNERS)
@pytest.mark.parametrize("name", NAMES)
@given(data=documents)
@example(data=b"a   b")
@example(data=b"Hello world's  \n\n  end  ")
@example(data=b"'S'LL'\xc5\xbf x\r\n\r\n")
@example(data=b"\xed\xa0\x80a \xe2\x82a\xcc\x81")
@example(data="12345 \u0663\u0664\u0665\u0666 x1234".encode())
@example(data=b"!\n/x ;\r\n//\n")
def test_scanner_matches_regex(scanner, name, data):
    assert_same(scanner, data, name)


@pytest.mark.parametrize("scanner", SCANNERS)
@pytest.mark.parametrize("name", NAMES)
@given(data=st.binary(max_size=80))
def test_scanner_matches_regex_on_random_bytes(scanner, name, data):
    assert_same(scanner, data, name)


def test_whitespace_runs_leave_the_last_space_to_the_word():
    # the backtracking of \s+(?!\S), and words dropping what is not a match
    assert scan_mod.scan(b"a   b", "gpt2") == [b"a", b"  ", b" b"]
    assert scan_mod.scan(b"a \n\n b", "cl100k") == [b"a", b" \n\n", b" b"]
    assert scan_mod.scan(b"  a  b  ", "words") == [b"a", b"b"]
    assert scan_mod.scan(b"", "none") == [] and scan_mod.scan(b"\xff x", "none") == [b"\xff x"]


def test_case_insensitive_contractions_fold_as_regex_does():
    # regex folds the long s to s under (?i) (so cl100k and o200k take 'ſ), and nothing to the apostrophe
    assert regex.fullmatch(r"(?i:s)", "ſ") and not regex.fullmatch(r"(?i:')", "’")
    assert scan_mod.scan("'ſ".encode(), "cl100k") == ["'ſ".encode()]
    assert scan_mod.scan("'ſ".encode(), "gpt2") == [b"'", "ſ".encode()]
    assert scan_mod.scan(b"HE'LL x", "o200k") == [b"HE'LL", b" x"]


# -- exhaustive: every code point, every lead byte -----------------------------------------
CODE_POINTS = [chr(c) for c in range(0x110000) if not 0xD800 <= c < 0xE000]
EVERY_CONTEXT = [  # (before, after) each code point, for all of them
    ("", ""), (" ", ""), ("'", "x"), ("x", "'S\n"),
]
SAMPLED_CONTEXT = [  # for every 11th code point
    ("A", "a"), ("", "\u0301"), ("!", "a"), ("1", "23"), ("\t", "a"), ("\u3000", "a"), ("", "\r\n "),
    ("a", "  "), ("\xa0", "1"), ("'", "ll"), ("", ""),
]


def code_point_texts():
    for before, after in EVERY_CONTEXT:
        yield f"{before!r}+c+{after!r}", "".join(before + c + after for c in CODE_POINTS)
    for before, after in SAMPLED_CONTEXT:
        yield f"{before!r}+c+{after!r} (sampled)", "".join(before + c + after for c in CODE_POINTS[::11])


@native
@pytest.mark.parametrize("name", NAMES)
def test_every_code_point_in_context(name):
    for label, text in code_point_texts():
        data = text.encode("utf-8")
        assert scan_mod._scan.scan(data, name) == reference(data, name), label


@native
@pytest.mark.parametrize("name", ["cl100k", "o200k", "gpt2"])
def test_every_multibyte_lead_and_second_byte(name):
    # The decoder decides as CPython's does.  A sequence followed by a letter shows how many
    # characters it is to cl100k/o200k: one non-letter before a letter joins it, several do not.
    tails = [b"", b"\x41", b"\x7f", b"\x80", b"\xbf", b"\xc0"]
    seqs = [bytes([b0, b1]) + t2 + t3 for b0 in range(0x80, 0x100) for b1 in range(256) for t2 in tails[1:] for t3 in tails[1:3]]
    data = b"".join(seq + b"a0" for seq in seqs)
    assert scan_mod._scan.scan(data, name) == reference(data, name)
    # truncated by the end of the text (a complete letter after "a" would join it); the
    # text is a view that ends before continuation bytes, which the decoder must not read
    for b0 in range(0x80, 0x100):
        for b1 in (0x41, 0x80, 0x8F, 0x90, 0x9F, 0xA0, 0xBF, 0xC0):
            for tail in (b"", b"\x80", b"\x80\x80", b"\xbf\xbf"):
                data = b"a" + bytes([b0, b1]) + tail
                view = memoryview(data + b"\x80\x80\x80")[:len(data)]
                assert scan_mod._scan.scan(view, name) == reference(data, name), data


# -- the shared corpora --------------------------------------------------------------------
@native
@pytest.mark.parametrize("name", NAMES)
def test_shared_corpora(name):
    slices = list(corpus_slices())
    assert len(slices) >= 6, f"reference data missing under {CORPORA}"
    for label, data in slices:
        got, want = scan_mod._scan.scan(data, name), reference(data, name)
        assert got == want, label


# -- the module, the fallback, the tables --------------------------------------------------
@native
def test_native_patterns_and_versions():
    assert scan_mod._scan.PATTERNS == scan_mod.NATIVE_PATTERNS
    header = HEADER.read_text()  # a stale build has the tables of another header
    assert f'REGEX_VERSION "{scan_mod._scan.REGEX_VERSION}"' in header, "rebuild bpe_stream._fastbpe"
    assert f'UNICODE_VERSION "{scan_mod._scan.UNICODE_VERSION}"' in header, "rebuild bpe_stream._fastbpe"


@pytest.mark.parametrize("scanner", SCANNERS)
def test_unknown_pattern_and_input_types(scanner):
    for bad in ("regex:\\S+", "GPT2", ""):
        with pytest.raises(ValueError, match="no native scanner"):
            scanner(b"abc", bad)
    with pytest.raises(TypeError):
        scanner("not bytes", "gpt2")
    assert scanner(bytearray(b"a b"), "gpt2") == scanner(memoryview(b"a b"), "gpt2") == [b"a", b" b"]


def test_scan_uses_the_native_scanner_when_built():
    data = "x  y'S\r\n\xa0\u3000z".encode() + b"\xff"
    for name in NAMES:
        assert scan_mod.scan(data, name) == reference(data, name)
    assert scan_mod.native_available() == (scan_mod._scan is not None)


def load_generator():
    spec = importlib.util.spec_from_file_location("gen_unicode_tables", GENERATOR)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_unicode_tables_are_what_the_installed_regex_gives():
    gen, committed = load_generator(), HEADER.read_text()
    # the tables and the Unicode version; the regex release is the one the header names
    assert gen.render(gen.committed_version(committed)) == committed, (
        f"the installed regex {regex.__version__} disagrees with {HEADER.name}: "
        "run tools/gen_unicode_tables.py, rebuild, check the scanner tests, and move the pin in setup.cfg"
    )


def test_spaces_are_regexs_not_pythons():
    # why the tables are asked of regex: str.isspace() takes \x1c-\x1f, regex's \s does not
    assert "\x1c".isspace() and "\x85".isspace()
    for scanner in (scan_mod.scan, scan_mod.scan_with_regex):
        assert scanner(b"a\x1c b\xc2\x85c", "whitespace") == [b"a\x1c", b" ", b"b", b"\xc2\x85", b"c"]
