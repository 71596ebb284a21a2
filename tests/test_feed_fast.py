"""The native feed's fast paths against ``regex``: the scanner's 64-byte blocks and the count
table's batches.

The native scanner decides the common ASCII pretokens from bit masks of a 64-byte block of
the text (on an SSE2 build) and hands the rest -- a non-ASCII character at a pretoken's
start, end or after its space, an apostrophe, a pretoken that runs past its block -- to
the character-by-character matcher; ``CountTable.feed`` counts the spans it finds in
batches and cuts the pretokens longer than its cap into pieces itself.  Every check here
compares with ``regex.findall`` (``scanner_inputs.reference``) or with the ``regex``
fallback (``scan.scan_with_regex``), never with spelled-out pretokens, so the same tests
hold a build without the fast paths (no SSE2) to the same results.  The inputs put runs,
spaces, apostrophes and non-ASCII characters at every offset of a block, across block
boundaries and at the end of the text.
"""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from scanner_inputs import NAMES, corpus_slices, reference

from bpe_stream.count import table as count_table
from bpe_stream.pretok import scan as scan_mod
from bpe_stream.pretok.scan import scan_with_regex

pytestmark = pytest.mark.skipif(not scan_mod.native_available(), reason="bpe_stream._fastbpe is not built")


def native_scan(data: bytes, name: str, max_bytes: int = 0) -> list:
    return scan_mod._scan.scan(data, name, max_bytes)


def check(data: bytes, name: str) -> None:
    want = reference(data, name)
    got = native_scan(data, name)
    if got != want:
        i = next((k for k, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
        pytest.fail(f"{name} on {data!r}: pretoken {i} differs: scanner {got[i:i + 3]!r}, regex {want[i:i + 3]!r}")


def check_feed(data: bytes, name: str, max_bytes: int = 0) -> None:
    want = Counter(scan_with_regex(data, name, max_bytes))
    table = count_table.NativeCountTable()
    fed = table.feed(data, name, max_bytes)
    assert table.to_dict() == want, (name, max_bytes, data)
    assert fed == sum(want.values())


# What a run is made of, and what may end it: ASCII of each class, the spaces regex calls \s
# and one it does not, contractions, and non-ASCII characters of each class right after it.
RUNS = ["a", "Z", "7", ".", "'", " ", "\n", "\t", "\r\n", "aB", "ABc"]  # (o200k cuts letters by case)
BREAKS = [
    "", " ", "  ", " a", " 1", " .", "\n", "\n\n", " \n", "'s", "'LL", "'x", "''", "é", "\xa0", "\u2003", "²", "٣",
    "—", "“", "\u0301", "中", "😀", "\x1c", "\x00", "\x7f", "a", "1", ";", "\r", "\r\n", " \r\n", "\t", "\ta", "(a",
    "((a", " (a", "1234", "12345678", ".\n", "\x0ba", "aB", "Ab", "ABc", "/", "/\n",
]
INVALID = [b"\xff", b"\x80", b"\xc3", b"\xe2\x82", b"\xed\xa0\x80"]


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("run", RUNS)
def test_runs_of_every_length_ended_by_every_kind_of_character(name, run):
    # runs from 0 to 140 bytes cross 0, 1 and 2 block boundaries, after prefixes that shift
    # them (and that cl100k's [^\r\n\p{L}\p{N}]?+ may take)
    for prefix in ("", "x", " ", "ab ", "(", "\t", "1"):
        for k in range(0, 141, 1 if len(run) == 1 else 3):
            body = prefix + run * k
            for brk in BREAKS:
                check((body + brk).encode(), name)
                check((body + brk + "q").encode(), name)
            for bad in INVALID:
                check(body.encode() + bad + b"q", name)


@pytest.mark.parametrize("name", NAMES)
def test_every_length_of_text_from_0_to_200_bytes(name):
    # every cut of mixed text: the end of the text at every offset of the last block
    text = (
        "The quick brown fox's 12 jumps --  over\n\nthe lazy dog\t\t(3.14) don't STOP é \xa0x "
        "naïve café 42ms   \r\n  end's ''' ... x1y2z3 \u2003 !?\n" * 2
    ).encode()
    for n in range(0, 201):
        check(text[:n], name)
        check(text[n:n + 70], name)


ascii_fragment = st.one_of(
    st.text(alphabet="abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ", min_size=1, max_size=70),
    st.text(alphabet="0123456789", min_size=1, max_size=12),
    st.text(alphabet="!\"#$%&()*+,-./:;<=>?@[\\]^_`{|}~'", min_size=1, max_size=8),
    st.text(alphabet=" \t\n\r\x0b\x0c", min_size=1, max_size=70),
    st.sampled_from(["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'LL", "n't", " '", "''"]),
    st.sampled_from(["\r", "\n", "\r\n", " \n", "\n ", "(", " (", "((", "\t", "\x0b"]),
    st.sampled_from([" ", " ", " ", "  ", "\n"]),
)
fast_fragment = st.one_of(
    ascii_fragment.map(str.encode),
    ascii_fragment.map(str.encode),
    ascii_fragment.map(str.encode),
    st.sampled_from(["é", "\xa0", "\u2003", "²", "٣", "—", "“", "\u0301", "中文", "😀", "\x1c", "Ǆ", "ß"]).map(str.encode),
    st.sampled_from(INVALID),
)
fast_documents = st.lists(fast_fragment, max_size=60).map(b"".join)


@pytest.mark.parametrize("name", NAMES)
@given(data=fast_documents)
def test_ascii_heavy_documents_scan_as_regex_finds(name, data):
    check(data, name)


@pytest.mark.parametrize("name", NAMES)
@given(data=fast_documents, max_bytes=st.sampled_from([0, 4, 5, 7, 8, 9, 16, 63, 64, 65]))
def test_ascii_heavy_documents_feed_as_regex_counts(name, data, max_bytes):
    check_feed(data, name, max_bytes)
    check_feed(data * 3, name, max_bytes)  # more than one block, the same pretokens again


@pytest.mark.parametrize("name", NAMES)
def test_feed_of_more_pretokens_than_a_batch_with_long_ones_among_them(name):
    # feed scans 256 spans at a time: pretokens longer than the cap at every place of a batch
    words = [("w" * (i % 23 + 1)) + " " + ("9" * (i % 7 + 1)) + ("." * (i % 5)) for i in range(700)]
    data = " ".join(words).encode() + "\n\n é".encode()
    for max_bytes in (0, 4, 8, 20):
        check_feed(data, name, max_bytes)


# -- the portable scanner (no blocks) against the one with blocks ------------------------------
DRIVER = r"""
#include "scan.h"
#include <stdio.h>
#include <stdlib.h>
/* stdin: records (u32 length, little-endian, then the bytes); argv[1]: a pattern.  stdout:
 * for each record its spans, "start end" a line, then a line "-". */
int main(int argc, char **argv) {
    int pattern = bs_scan_pattern_by_name(argv[1]);
    unsigned char head[4];
    bs_span spans[100];
    while (fread(head, 1, 4, stdin) == 4) {
        size_t len = head[0] | head[1] << 8 | head[2] << 16 | (size_t)head[3] << 24, pos = 0;
        unsigned char *data = malloc(len ? len : 1);
        if (fread(data, 1, len, stdin) != len) return 2;
        ptrdiff_t got;
        while ((got = bs_scan(pattern, data, len, &pos, spans, 100)) > 0)
            for (ptrdiff_t i = 0; i < got; i++) printf("%zu %zu\n", spans[i].start, spans[i].end);
        if (got < 0) return 3;
        printf("-\n");
        free(data);
    }
    return 0;
}
"""


def portable_records() -> list:
    records = []
    for run in RUNS:
        for k in (0, 1, 2, 7, 8, 9, 15, 16, 17, 31, 32, 33, 62, 63, 64, 65, 66, 127, 128, 129):
            for brk in BREAKS:
                records.append((" " + run * k + brk + "q").encode())
            records.extend(run.encode() * k + bad for bad in INVALID)
    for _label, data in corpus_slices():
        records.append(data[: 1 << 17])
    return records


@pytest.mark.parametrize("name", NAMES)
def test_the_portable_scanner_finds_what_the_block_scanner_finds(tmp_path, name):
    # scan.c built twice, with and without BS_SCAN_NO_SIMD (the path of a build without SSE2):
    # each against regex on the same records
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if not cc:
        pytest.skip("no C compiler")
    csrc = Path(__file__).resolve().parent.parent / "bpe_stream" / "csrc"
    (tmp_path / "driver.c").write_text(DRIVER)
    records = portable_records()
    feed = b"".join(struct.pack("<I", len(r)) + r for r in records)
    for flags in ([], ["-DBS_SCAN_NO_SIMD"]):
        exe = tmp_path / ("scan" + "".join(flags))
        subprocess.run([cc, "-O2", *flags, f"-I{csrc}", str(tmp_path / "driver.c"), str(csrc / "scan.c"), "-o", str(exe)],
                       check=True)
        out = subprocess.run([str(exe), name], input=feed, capture_output=True, check=True).stdout.decode()
        chunks = out.split("-\n")
        assert len(chunks) == len(records) + 1 and chunks[-1] == ""
        for data, chunk in zip(records, chunks):
            spans = [tuple(map(int, line.split())) for line in chunk.splitlines()]
            got = [data[s:e] for s, e in spans]
            assert got == reference(data, name), (flags, name, data[:200])
