"""Pretokens of UTF-8 bytes for the named patterns: the native scanner, or ``regex``.

:func:`scan` gives, for ``gpt2``, ``cl100k``, ``o200k``, ``whitespace``, ``words`` and
``none``, exactly what ``Pretokenizer.split`` gives on the bytes decoded with
``surrogateescape``, each pretoken encoded back the same way (invalid UTF-8 is kept byte
for byte).  It runs the native scanner (``bpe_stream._fastbpe``, built from
``bpe_stream/csrc/scan.c``, whose character tables are generated from the installed
``regex`` by ``tools/gen_unicode_tables.py``) when that extension is built, and
:func:`scan_with_regex` -- the same result, slower -- when it is not.  Custom
``regex:PATTERN`` pretokenizers have no native scanner.  :func:`first_invalid_utf8` finds
where bytes stop being UTF-8, with the scanner's decoder.
"""

from __future__ import annotations

from typing import List

from .pretokenize import NAMED_PATTERNS, Pretokenizer

from ..native import fastbpe as _scan  # None without a C compiler at install time

NATIVE_PATTERNS = tuple(NAMED_PATTERNS) + ("none",)


def native_available() -> bool:
    """Whether the native scanner is built."""
    return _scan is not None


def scan(data: bytes, pattern: str, max_bytes: int = 0) -> List[bytes]:
    """The pretokens of ``data`` (bytes-like) for the named ``pattern``, in order; one longer
    than ``max_bytes`` (0: no cap) as its pieces (``pretokenize.cap_pieces``)."""
    if _scan is None:
        return scan_with_regex(data, pattern, max_bytes)
    return _scan.scan(data, pattern, max_bytes)


def first_invalid_utf8(data: bytes) -> int:
    """The offset of the first byte of ``data`` (bytes-like) that is not part of well-formed
    UTF-8 -- where ``data.decode("utf-8")`` fails -- or -1 when it is all UTF-8."""
    if _scan is not None:
        return _scan.first_invalid_utf8(data)
    try:
        bytes(data).decode("utf-8")
    except UnicodeDecodeError as exc:
        return exc.start
    return -1


def scan_with_regex(data: bytes, pattern: str, max_bytes: int = 0) -> List[bytes]:
    """:func:`scan` through ``regex`` (the reference, and the fallback without ``_scan``)."""
    if pattern not in NATIVE_PATTERNS:
        raise ValueError(f"no native scanner for the pretokenizer {pattern!r}")
    text = bytes(data).decode("utf-8", "surrogateescape")
    return [piece.encode("utf-8", "surrogateescape") for piece in Pretokenizer.from_name(pattern, max_bytes or None).split(text)]
