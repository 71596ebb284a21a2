"""Generates bpe_stream/csrc/unicode_tables.h: the character classes of the native scanner.

Every class is asked of the installed ``regex`` itself, never derived from ``unicodedata``
(Python's \\s and Unicode version differ from ``regex``'s): each class is run, as it is
spelled in the patterns of ``bpe_stream/pretok/pretokenize.py``, over one string holding every
code point U+0000..U+10FFFF (surrogates included: the scanner sees an invalid UTF-8 byte
``b`` as U+DC00+b, as ``surrogateescape`` does).  The result, one 16-bit mask per code
point, is written as a two-stage table (a block index per 2**SHIFT code points, then the
distinct blocks), plus a 128-entry table for ASCII.

The relations the scanner relies on are checked here, and generation fails if the
installed ``regex`` breaks one (for example a code point that folds to two of the
contraction letters, or a case-insensitive contraction matched by one character).

    python tools/gen_unicode_tables.py            # rewrites the header
    python tools/gen_unicode_tables.py --check    # exit 1 if the header is not what regex gives

``tests/test_scanner.py`` calls :func:`render` and compares it with the committed header
(:func:`committed_version` is the regex release it states).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import re
import sys
from array import array
from pathlib import Path

import regex

HEADER = Path(__file__).resolve().parent.parent / "bpe_stream" / "csrc" / "unicode_tables.h"
N_CODE_POINTS = 0x110000

# (C name, bit, class as the patterns spell it)
CLASS_BITS = [
    ("BS_L", 0x0001, r"\p{L}"),
    ("BS_N", 0x0002, r"\p{N}"),
    ("BS_S", 0x0004, r"\s"),
    ("BS_OTHER", 0x0008, r"[^\s\p{L}\p{N}]"),
    ("BS_PFX", 0x0010, r"[^\r\n\p{L}\p{N}]"),
    ("BS_UP", 0x0020, r"[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]"),  # o200k's first letter class
    ("BS_LO", 0x0040, r"[\p{Ll}\p{Lm}\p{Lo}\p{M}]"),  # o200k's second letter class
    ("BS_CRLF", 0x0080, r"[\r\n]"),
]
# The letters of the case-insensitive contractions of cl100k and o200k; what folds to
# letter k (as (?i:x) matches it) has k in bits 8..11 (0: none).
FOLD_LETTERS = "sdmtlver"
FOLD_SHIFT = 8
FOLD_MASK = 0x0F00
# Case-insensitive pieces that must not match a single character (no multi-character fold).
MULTI_CHAR_PIECES = ["ll", "ve", "re", "'s", "'t", "'re", "'ve", "'m", "'ll", "'d"]


def all_code_points() -> str:
    return "".join(map(chr, range(N_CODE_POINTS)))


def members(pattern: str, text: str) -> array:
    """A 0/1 byte per code point: whether ``pattern`` (one character wide) matches it."""
    hit = bytearray(N_CODE_POINTS)
    for m in regex.finditer(f"(?:{pattern})+", text):
        hit[m.start():m.end()] = b"\x01" * (m.end() - m.start())
    return hit


def class_masks() -> array:
    """The 16-bit class mask of every code point, checked for what the scanner assumes."""
    text = all_code_points()
    masks = array("H", bytes(2 * N_CODE_POINTS))
    sets = {}
    for name, bit, pattern in CLASS_BITS:
        sets[name] = hit = members(pattern, text)
        for cp in _indices(hit):
            masks[cp] |= bit
    for k, letter in enumerate(FOLD_LETTERS, start=1):
        for cp in _indices(members(f"(?i:{letter})", text)):
            if masks[cp] & FOLD_MASK:
                raise SystemExit(f"U+{cp:04X} folds to two contraction letters")
            masks[cp] |= k << FOLD_SHIFT
    _check(sets, masks, text)
    return masks


def _indices(hit: bytearray):
    i = hit.find(1)
    while i != -1:
        yield i
        i = hit.find(1, i + 1)


def _check(sets: dict, masks: array, text: str) -> None:
    """The set relations the scanner's code takes for granted."""
    L, N, S = sets["BS_L"], sets["BS_N"], sets["BS_S"]
    cr_lf = {0x0D, 0x0A}
    for cp in range(N_CODE_POINTS):
        le, n, s = L[cp], N[cp], S[cp]
        if le + n + s > 1:
            raise SystemExit(f"U+{cp:04X} is in two of \\p{{L}}, \\p{{N}}, \\s")
        if sets["BS_OTHER"][cp] != (le + n + s == 0):
            raise SystemExit(f"U+{cp:04X}: [^\\s\\p{{L}}\\p{{N}}] is not the complement")
        if sets["BS_PFX"][cp] != (le + n == 0 and cp not in cr_lf):
            raise SystemExit(f"U+{cp:04X}: [^\\r\\n\\p{{L}}\\p{{N}}] is not the complement")
        if sets["BS_CRLF"][cp] and not s:
            raise SystemExit(f"U+{cp:04X}: CR/LF is not \\s")
    if members(r"\S", text) != bytearray(1 - b for b in S):
        raise SystemExit("\\S is not the complement of \\s")
    if members("(?i:')", text) != members("'", text):
        raise SystemExit("something folds to the apostrophe")
    union = members("(?i:[sdmt])", text)
    if any(union[cp] != (((masks[cp] & FOLD_MASK) >> FOLD_SHIFT) in (1, 2, 3, 4)) for cp in range(N_CODE_POINTS)):
        raise SystemExit("(?i:[sdmt]) is not the union of (?i:s), (?i:d), (?i:m), (?i:t)")
    apart = "\0".join(text)  # a match here would be one code point standing for two letters
    for piece in MULTI_CHAR_PIECES:
        m = regex.search(f"(?i:{piece})", apart)
        if m:
            raise SystemExit(f"(?i:{piece}) matches the single code point {m.group()!r}")


def two_stage(masks: array) -> tuple:
    """(shift, stage1, stage2) with the smallest total size."""
    best = None
    for shift in range(4, 10):
        size = 1 << shift
        blocks, index = {}, []
        for start in range(0, N_CODE_POINTS, size):
            block = masks[start:start + size].tobytes()
            index.append(blocks.setdefault(block, len(blocks)))
        index_bytes = 1 if len(blocks) <= 256 else 2
        total = len(index) * index_bytes + len(blocks) * size * 2
        if best is None or total < best[0]:
            stage2 = array("H")
            for block in blocks:
                stage2.frombytes(block)
            best = (total, shift, index, stage2)
    return best[1:]


def unicode_version() -> str:
    """The Unicode version the installed ``regex`` states in its description."""
    # the raw file, not metadata().get_payload(): some imports (dask's) leave that empty
    description = importlib.metadata.distribution("regex").read_text("METADATA") or ""
    m = re.search(r"supports Unicode (\d+\.\d+\.\d+)", description)
    return m.group(1) if m else "unknown"


def _c_array(ctype: str, name: str, values, per_line: int = 16) -> str:
    width = 4 if ctype == "uint16_t" else 3
    lines = []
    values = list(values)
    for i in range(0, len(values), per_line):
        lines.append("    " + ", ".join(f"0x{v:0{width}x}" if ctype == "uint16_t" else str(v) for v in values[i:i + per_line]) + ",")
    return f"static const {ctype} {name}[{len(values)}] = {{\n" + "\n".join(lines) + "\n};\n"


def render(version: str = regex.__version__) -> str:
    """The text of unicode_tables.h for the installed ``regex``, stated as made from
    release ``version`` (a test passes the committed one: a release with the same tables
    agrees with the header)."""
    masks = class_masks()
    shift, stage1, stage2 = two_stage(masks)
    index_type = "uint8_t" if max(stage1) < 256 else "uint16_t"
    ucd = unicode_version()
    bits = "\n".join(f"#define {name} 0x{bit:04x}u /* {pattern} */" for name, bit, pattern in CLASS_BITS)
    folds = "\n".join(f"#define BS_FOLD_{letter.upper()} {k}u /* (?i:{letter}) */" for k, letter in enumerate(FOLD_LETTERS, 1))
    return f"""/*
 * unicode_tables.h -- GENERATED by tools/gen_unicode_tables.py; do not edit.
 *
 * Character classes of the native scanner, asked of regex {version} (Unicode {ucd}, as
 * that release states) for every code point U+0000..U+10FFFF.  A class mask is
 *   bs_ascii[cp]                                                       for cp < 0x80,
 *   bs_stage2[(bs_stage1[cp >> BS_BLOCK_SHIFT] << BS_BLOCK_SHIFT) | (cp & BS_BLOCK_MASK)]  otherwise.
 * An invalid UTF-8 byte b is looked up as U+DC00+b (a lone surrogate, as surrogateescape).
 * tests/test_scanner.py regenerates this file and fails if the installed regex disagrees.
 */
#ifndef BS_UNICODE_TABLES_H
#define BS_UNICODE_TABLES_H
#include <stdint.h>

#define BS_TABLES_REGEX_VERSION "{version}"
#define BS_TABLES_UNICODE_VERSION "{ucd}"

{bits}
/* bits 8..11: the contraction letter a code point folds to under (?i), 0 for none */
#define BS_FOLD_SHIFT {FOLD_SHIFT}
#define BS_FOLD_MASK 0x{FOLD_MASK:04x}u
{folds}

#define BS_BLOCK_SHIFT {shift}
#define BS_BLOCK_MASK 0x{(1 << shift) - 1:x}u

{_c_array("uint16_t", "bs_ascii", masks[:128])}
{_c_array(index_type, "bs_stage1", stage1, per_line=32)}
{_c_array("uint16_t", "bs_stage2", stage2)}
#endif
"""


def committed_version(header_text: str) -> str:
    """The regex release a header says it was generated from."""
    m = re.search(r'#define BS_TABLES_REGEX_VERSION "([^"]*)"', header_text)
    return m.group(1) if m else ""


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only compare with the committed header")
    args = parser.parse_args(argv)
    if args.check:
        text = render(committed_version(HEADER.read_text()) if HEADER.exists() else regex.__version__)
        same = HEADER.exists() and HEADER.read_text() == text
        print(f"{HEADER}: {'up to date' if same else 'differs from the installed regex'}", file=sys.stderr)
        return 0 if same else 1
    text = render()
    HEADER.parent.mkdir(parents=True, exist_ok=True)
    HEADER.write_text(text)
    print(f"wrote {HEADER} (regex {regex.__version__}, Unicode {unicode_version()})", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
