"""What the scanner and count-table tests feed: the ``regex`` reference, hypothesis
strategies over every Unicode general category and invalid UTF-8, and corpus slices."""

from __future__ import annotations

from pathlib import Path

import regex
from hypothesis import strategies as st

from bpe_stream.pretok.pretokenize import (
    CL100K_PATTERN,
    GPT2_PATTERN,
    O200K_PATTERN,
    WHITESPACE_PATTERN,
    WORDS_PATTERN,
)

REPO = Path(__file__).resolve().parent.parent
CORPORA = REPO.parent / "shared" / "data" / "corpora"
CS336 = REPO.parent / "shared" / "data" / "cs336"
GENERATOR = REPO / "tools" / "gen_unicode_tables.py"
HEADER = REPO / "bpe_stream" / "csrc" / "unicode_tables.h"

PATTERNS = {
    "gpt2": GPT2_PATTERN,
    "cl100k": CL100K_PATTERN,
    "o200k": O200K_PATTERN,
    "whitespace": WHITESPACE_PATTERN,
    "words": WORDS_PATTERN,
}
NAMES = list(PATTERNS) + ["none"]
COMPILED = {name: regex.compile(p) for name, p in PATTERNS.items()}

def reference(data: bytes, name: str) -> list:
    """``regex.findall`` of the pattern on the bytes decoded with surrogateescape, encoded back."""
    if name == "none":
        return [data] if data else []
    text = data.decode("utf-8", "surrogateescape")
    return [m.encode("utf-8", "surrogateescape") for m in COMPILED[name].findall(text)]


# -- what hypothesis draws from ---------------------------------------------------------------
CATEGORIES = [
    "Lu", "Ll", "Lt", "Lm", "Lo", "Mn", "Mc", "Me", "Nd", "Nl", "No", "Pc", "Pd", "Ps", "Pe", "Pi", "Pf", "Po",
    "Sm", "Sc", "Sk", "So", "Zs", "Zl", "Zp", "Cc", "Cf", "Co", "Cn",
]  # every general category but Cs: lone surrogates come from invalid UTF-8 below
SPACES = [
    " ", "  ", "   ", "\t", "\n", "\n\n", "\r", "\r\n", "\r\r\n", "\n\r", "\x0b", "\x0c", " \n", "\n ", " \r\n ",
    "\t ", "\t\n", "\xa0", "\u2007", "\u202f", "\u3000", "\x85", "\u1680", "\u2000", "\u200a", "\u2028",
    "\u2029", "\u205f", " \u3000", "\xa0 ",
    "\x1c", "\x1d", "\x1e", "\x1f", "\u180e", "\u200b", "\ufeff",  # not \s for regex
]
CONTRACTIONS = [
    "'", "''", "'s", "'S", "'t", "'T", "'d", "'D", "'m", "'M", "'ll", "'LL", "'lL", "'Ll", "'ve", "'VE", "'vE",
    "'re", "'RE", "'rE", "'ſ", "'\u212a", "'\u0130", "'x", "don't", "DON'T", "I'm", "we'Re", "ʼs", "’s",
]
WORDS = [
    "a", "A", "the", "The", "HELLO", "wORLD", "x1", "1", "12", "123", "1234", "٣٤٥٦", "²³", "Ⅻ", "é", "e\u0301",
    "E\u0301\u0302", "\u0301", "\u0301a", "ǅ", "ǅa", "ʰ", "ʰA", "中文", "ß", "Ω", "ﬀ", "😀", "👍🏽", "!", "...", "?!",
    "/", "//", "!/\n", "!\n/", ";\r\n//", "-", '"', "(", "\x00", "\x7f", "<|endoftext|>",
]
INVALID_UTF8 = [
    b"\x80", b"\xbf", b"\xc0\xaf", b"\xc1\x81", b"\xc2", b"\xe0\x80\x80", b"\xe0\x9f\xbf", b"\xe2\x82",
    b"\xed\xa0\x80", b"\xed\xbf\xbf", b"\xf0\x8f\xbf\xbf", b"\xf4\x90\x80\x80", b"\xf5\x80\x80\x80",
    b"\xf8", b"\xfe", b"\xff", b"\xf0\x9f\x98", b"\xc3\xa9"[:1],
]


def utf8(text: str) -> bytes:
    return text.encode("utf-8")


fragment = st.one_of(
    st.one_of(*[st.characters(categories=[c]) for c in CATEGORIES]).map(utf8),
    st.characters(categories=["Mn", "Mc", "Me"]).map(utf8),
    st.characters(categories=["Nd", "Nl", "No"]).map(utf8),
    st.sampled_from(SPACES).map(utf8),
    st.sampled_from(SPACES).map(utf8),
    st.sampled_from(CONTRACTIONS).map(utf8),
    st.sampled_from(WORDS).map(utf8),
    st.sampled_from(INVALID_UTF8),
    st.binary(min_size=1, max_size=3),
)
documents = st.lists(fragment, max_size=40).map(b"".join)


SLICE = 1 << 20


def corpus_slices():
    """(label, bytes): a slice at the start and one from a byte in the middle of each shared
    corpus, and each of the cs336 files."""
    for path in sorted(CORPORA.glob("*.txt")):
        size = path.stat().st_size
        with open(path, "rb") as f:
            for start in (0, size // 2 + 1):  # the middle one starts at an arbitrary byte
                f.seek(start)
                yield f"{path.name}@{start}", f.read(SLICE)
    for path in sorted(CS336.glob("*")):
        yield path.name, path.read_bytes()
