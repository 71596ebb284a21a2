"""The counts interchange format: pretoken counts as text, for other engines and other machines.

``bpe-stream export-counts`` writes it and ``bpe-stream import-counts`` reads it, so counts made
with Spark, Ray, a shell pipeline or another bpe-stream store can be loaded into a store, and a
store can be shipped as one file.  A file is UTF-8-compatible bytes, lines ending in ``\\n``
(a name ending in ``.gz`` is gzip-compressed; gzip input is also recognised by its magic bytes):

1. **Header**, the first line: one JSON object (written in ASCII), for example::

     {"format": "bpe-stream-counts", "version": 1,
      "settings": {"pretokenizer": "gpt2", "pattern": "...", "special_tokens": ["<|endoftext|>"],
                   "end_of_word": null},
      "totals": {"bytes": 1234, "documents": 2, "specials": 1, "pretokens": 321},
      "lines": 123}

   ``format`` and ``settings.pretokenizer`` are required.  ``settings`` are the counting settings
   of ``bpe-stream count`` (``--pretokenizer``, ``--special-token`` in order, ``--end-of-word``);
   ``pattern``, when given, must be the exact pattern string of that pretokenizer (a check that the
   counts were pretokenized the same way).  ``totals`` (optional, each key optional) are added to
   the store's totals on import; ``pretokens`` defaults to the sum of the counts.  ``lines``
   (optional) is the number of count lines that follow: a shorter or longer file is an error, which
   catches a truncated copy.  Every total, and the sum of the counts, is below 2**63; a given
   ``pretokens`` is at least the sum of the counts (each occurrence is a pretoken).

2. **One line per pretoken**: ``ESCAPED_PRETOKEN <TAB> COUNT``.  ``COUNT`` is a positive decimal
   integer (ASCII digits, below 2**63: the store and the merge loop keep signed 64-bit counts).  ``ESCAPED_PRETOKEN`` is the pretoken's bytes with these
   escapes, and every other byte as it is:

   =============================================  ==============
   byte(s)                                        written as
   =============================================  ==============
   ``\\`` (0x5C)                                   ``\\\\``
   tab, newline, carriage return                  ``\\t`` ``\\n`` ``\\r``
   other control bytes 0x00-0x1F and 0x7F         ``\\xNN`` (two hex digits)
   each byte that is not part of valid UTF-8       ``\\xNN``
   =============================================  ==============

   Valid UTF-8 (including non-ASCII text and spaces) is written as it is.  A backslash followed by
   anything other than ``\\``, ``t``, ``n``, ``r`` or ``xNN`` is an error, so decoding is
   unambiguous; readers take every other byte literally (a writer that does not escape non-UTF-8
   bytes still round-trips, but must escape ``\\``, tab and newline).  The same pretoken may appear
   on several lines: the counts add up.  The empty pretoken is an empty field.

The exporter writes the store's short pretokens in byte order, then the long ones (over 511 bytes)
in a fixed order, so equal stores export to identical files.  Readers stream: memory does not
grow with the file.  Errors are one line naming the file and the line number.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import stat
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import BinaryIO, Dict, Iterable, Iterator, Optional, Tuple

from ..atomic import atomic_write, stdout_binary
from ..pretok.settings import make_settings
from ..errors import UserError
from ..pretok.pretokenize import PretokenizeError
from .lmdb_store import MAX_COUNT

FORMAT = "bpe-stream-counts"
VERSION = 1
TOTAL_KEYS = ("bytes", "documents", "specials", "pretokens")
MAX_HEADER_BYTES = 1 << 20


class CountsFormatError(UserError, ValueError):
    """A counts file that is not in the interchange format (one line naming the file and line)."""


# -- escaping --------------------------------------------------------------------------
_NEEDS_ESCAPE = re.compile(rb"[\x00-\x1f\x7f\\]")
_ESCAPE_CHARS = re.compile("[\x00-\x1f\x7f\\\\\udc80-\udcff]")
_NAMED = {"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r"}
_ESCAPE_SPLIT = re.compile(rb"(\\(?:x[0-9a-fA-F]{2}|[\\tnr]))")
_UNNAMED = {b"\\\\": b"\\", b"\\t": b"\t", b"\\n": b"\n", b"\\r": b"\r"}
_COUNT = re.compile(rb"[0-9]+")


def _escape_char(m) -> str:
    c = m.group()
    named = _NAMED.get(c)
    if named is not None:
        return named
    code = ord(c)
    return "\\x%02x" % (code - 0xDC00 if code >= 0xDC00 else code)


def escape(pretoken: bytes) -> bytes:
    """The escaped form of ``pretoken`` (see the module docstring)."""
    try:
        pretoken.decode("utf-8")
    except UnicodeDecodeError:
        pass
    else:
        if _NEEDS_ESCAPE.search(pretoken) is None:
            return pretoken
    text = pretoken.decode("utf-8", "surrogateescape")
    return _ESCAPE_CHARS.sub(_escape_char, text).encode("utf-8")


def unescape(field_: bytes) -> bytes:
    """The pretoken bytes of an escaped field; ``ValueError`` on a malformed escape."""
    if b"\\" not in field_:
        return field_
    parts = _ESCAPE_SPLIT.split(field_)
    out = []
    for i, part in enumerate(parts):
        if i % 2:
            out.append(_UNNAMED.get(part) or bytes([int(part[2:], 16)]))
        elif b"\\" in part:
            bad = part[part.index(b"\\"):][:4]
            shown = bad.decode("ascii", "backslashreplace")
            raise ValueError(f"bad escape {shown!r} (use \\\\, \\t, \\n, \\r or \\xNN)")
        else:
            out.append(part)
    return b"".join(out)


# -- header ----------------------------------------------------------------------------
def make_header(settings: dict, totals: Optional[dict] = None, lines: Optional[int] = None) -> dict:
    header = {"format": FORMAT, "version": VERSION, "settings": dict(settings)}
    if totals is not None:
        header["totals"] = {k: int(totals[k]) for k in TOTAL_KEYS if k in totals}
    if lines is not None:
        header["lines"] = int(lines)
    return header


def header_settings(header: dict, where: str = "") -> dict:
    """The store settings a header records (normalised as ``bpe-stream count`` records them)."""
    raw = header.get("settings")
    if not isinstance(raw, dict) or not isinstance(raw.get("pretokenizer"), str):
        raise CountsFormatError(
            f"{where}the header has no settings.pretokenizer; add the settings the counts were made with"
        )
    specials = raw.get("special_tokens") or []
    end_of_word = raw.get("end_of_word")
    if not isinstance(specials, list) or not all(isinstance(s, str) for s in specials):
        raise CountsFormatError(f"{where}settings.special_tokens in the header must be a list of strings")
    if end_of_word is not None and not isinstance(end_of_word, str):
        raise CountsFormatError(f"{where}settings.end_of_word in the header must be a string or null")
    try:
        # (a header without max_token_bytes, as every one before it existed: counted with no cap)
        settings = make_settings(raw["pretokenizer"], specials, end_of_word, raw.get("max_token_bytes"))
    except (PretokenizeError, ValueError) as exc:
        raise CountsFormatError(f"{where}{exc}") from None
    if raw.get("pattern") is not None and raw["pattern"] != settings["pattern"]:
        raise CountsFormatError(
            f"{where}the counts were pretokenized with another pattern than this bpe-stream's "
            f"{settings['pretokenizer']!r}; count again with the same pattern (or use regex:PATTERN)"
        )
    return settings


def _parse_header(line: bytes, where: str) -> dict:
    try:
        header = json.loads(line.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        header = None
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise CountsFormatError(
            f"{where}not a bpe-stream counts file: the first line must be a JSON header with \"format\": \"{FORMAT}\""
        )
    version = header.get("version", VERSION)
    if not isinstance(version, int) or version > VERSION:
        raise CountsFormatError(
            f"{where}counts format version {version!r} is newer than this bpe-stream reads ({VERSION}); "
            "upgrade bpe-stream"
        )
    totals = header.get("totals", {})
    if not isinstance(totals, dict) or not all(
        isinstance(totals.get(k, 0), int) and 0 <= totals.get(k, 0) <= MAX_COUNT for k in TOTAL_KEYS
    ):
        raise CountsFormatError(
            f"{where}header totals must be integers from 0 to 2**63-1 ({', '.join(TOTAL_KEYS)})"
        )
    lines = header.get("lines")
    if lines is not None and (not isinstance(lines, int) or lines < 0):
        raise CountsFormatError(f"{where}header lines must be a non-negative integer")
    return header


# -- reading ---------------------------------------------------------------------------
def _open_read(path: str) -> BinaryIO:
    f = open(path, "rb")
    if f.read(2) == b"\x1f\x8b":
        f.seek(0)
        return gzip.GzipFile(fileobj=f, mode="rb")
    f.seek(0)
    return f


@dataclass
class CountsInfo:
    """What a full check of a counts file found."""

    path: str
    header: dict
    settings: dict
    lines: int = 0
    total: int = 0  # the sum of the counts
    body_offset: int = 0  # where the first count line starts
    totals: Dict[str, int] = field(default_factory=dict)  # what an import adds to the store totals


def parse_line(line: bytes) -> Tuple[bytes, int]:
    """``(pretoken, count)`` of one count line (without or with its ``\\n``); ``ValueError`` if malformed."""
    if line.endswith(b"\n"):
        line = line[:-1]
    tab = line.find(b"\t")
    if tab < 0:
        raise ValueError("no tab between the escaped pretoken and its count")
    raw, count = line[:tab], line[tab + 1:]
    if b"\t" in count:
        raise ValueError("more than one tab (escape tabs in pretokens as \\t)")
    if _COUNT.fullmatch(count) is None:
        shown = count[:20].decode("utf-8", "backslashreplace")
        raise ValueError(f"the count {shown!r} is not a positive integer")
    if len(count) > 40:  # far more digits than 2**63-1 has (int() of thousands is slow, or refused)
        raise ValueError(f"the count of {len(count):,} digits is out of range (1 to 2**63-1)")
    n = int(count)
    if not 0 < n <= MAX_COUNT:
        raise ValueError(f"the count {n} is out of range (1 to 2**63-1)")
    return unescape(raw), n


def iter_counts(path: str, start: Optional[int] = None) -> Iterator[Tuple[bytes, int, int, int]]:
    """Streams ``(pretoken, count, line_number, end_offset)`` of a counts file, from byte ``start``
    of the (decompressed) data, or from the first count line.  ``end_offset`` is where the next
    line starts (a resume point)."""
    with _open_read(path) as f:
        header_line = f.readline()
        where = f"{path}: line 1: "
        _parse_header(header_line.rstrip(b"\n"), where)
        offset = len(header_line)
        number = 1
        if start is not None and start > offset:
            # Resuming: line numbers are not known without reading; count them (cheap).
            while offset < start:
                line = f.readline()
                if not line:
                    break
                offset += len(line)
                number += 1
        for line in f:
            number += 1
            offset += len(line)
            try:
                pretoken, n = parse_line(line)
            except ValueError as exc:
                raise CountsFormatError(f"{path}: line {number}: {exc}") from None
            yield pretoken, n, number, offset


def check_counts(path: str) -> CountsInfo:
    """Reads a whole counts file once and checks it, so an import never stops half-way on a bad line."""
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            raise CountsFormatError(f"{path} is not a regular file; a counts file is read twice (checked whole "
                                    "first), so give a file")
        with _open_read(path) as f:
            header_line = f.readline(MAX_HEADER_BYTES + 1)
    except (OSError, EOFError, gzip.BadGzipFile) as exc:
        raise CountsFormatError(f"{path}: cannot read it ({getattr(exc, 'strerror', None) or exc})") from None
    where = f"{path}: line 1: "
    if not header_line:
        raise CountsFormatError(f"{path}: empty file; a counts file starts with its JSON header")
    if not header_line.endswith(b"\n") and len(header_line) > MAX_HEADER_BYTES:
        raise CountsFormatError(f"{where}not a bpe-stream counts file: its first line is over "
                                f"{MAX_HEADER_BYTES:,} bytes, no JSON header")
    header = _parse_header(header_line.rstrip(b"\n"), where)
    info = CountsInfo(path, header, header_settings(header, f"{path}: "), body_offset=len(header_line))
    try:
        for _, n, _, _ in iter_counts(path):
            info.lines += 1
            info.total += n
    except (EOFError, gzip.BadGzipFile, OSError) as exc:
        raise CountsFormatError(f"{path}: the compressed data is damaged or cut short ({exc})") from None
    if header.get("lines") is not None and header["lines"] != info.lines:
        raise CountsFormatError(
            f"{path}: the header announces {header['lines']:,} count lines but the file has {info.lines:,}; "
            "it is truncated or was edited"
        )
    if info.total > MAX_COUNT:
        raise CountsFormatError(f"{path}: the counts add up to {info.total:,}, past 2**63-1 (the store keeps "
                                "64-bit counts); split the file and import the parts into separate stores")
    totals = header.get("totals", {})
    info.totals = {k: int(totals.get(k, 0)) for k in ("bytes", "documents", "specials")}
    info.totals["pretokens"] = int(totals["pretokens"]) if "pretokens" in totals else info.total
    if info.totals["pretokens"] < info.total:
        raise CountsFormatError(
            f"{path}: the header's totals.pretokens ({info.totals['pretokens']:,}) is less than the counts add up to "
            f"({info.total:,}); fix the header or leave pretokens out (it defaults to the sum)"
        )
    return info


# -- writing ---------------------------------------------------------------------------
@contextmanager
def _open_write(path: str):
    if path == "-":
        out = stdout_binary()
        yield out
        out.flush()
        return
    with atomic_write(path, "wb") as f:
        if path.endswith(".gz"):
            with gzip.GzipFile(fileobj=f, mode="wb", mtime=0, compresslevel=6) as g:
                yield g
        else:
            yield f


def write_counts(path, settings: dict, rows: Iterable[Tuple[bytes, int]], totals: Optional[dict] = None,
                 lines: Optional[int] = None) -> Tuple[int, int]:
    """Writes a counts file (atomically; ``-`` is stdout; ``.gz`` compresses).  Returns
    ``(lines, sum of counts)``."""
    path = os.fspath(path)
    header = make_header(settings, totals, lines)
    written = total = 0
    with _open_write(path) as out:
        out.write(json.dumps(header, ensure_ascii=True).encode("ascii") + b"\n")
        buf = []
        size = 0
        for pretoken, n in rows:
            line = b"%s\t%d\n" % (escape(pretoken), n)
            buf.append(line)
            size += len(line)
            written += 1
            total += n
            if size >= 1 << 20:
                out.write(b"".join(buf))
                buf, size = [], 0
        out.write(b"".join(buf))
        if lines is not None and written != lines:
            raise RuntimeError(f"wrote {written} lines, expected {lines}")  # a store changed under us
    return written, total
