"""Token ids on the wire: ``txt`` (decimal, whitespace-separated), ``u16`` and ``u32``
(little-endian arrays that ``numpy.fromfile`` reads).  Streams in fixed-size chunks."""

from __future__ import annotations

import re
import sys
from array import array
from typing import BinaryIO, Iterable, Iterator, List

from .tokenizer import TokenizerError

FORMATS = ("txt", "u16", "u32")
_CHUNK = 1 << 20
_TYPECODES = {"u16": "H", "u32": "I"}


def _check_typecodes() -> None:
    for code, size in (("H", 2), ("I", 4)):
        if array(code).itemsize != size:  # pragma: no cover - exotic platforms
            raise RuntimeError(f"array typecode {code} is not {size} bytes here")


_check_typecodes()


_LITTLE = sys.byteorder == "little"
_ID_TEXTS: List[str] = []  # str(i) for every id seen so far: formatting by table, not by int -> str


def check_format(fmt: str, max_id: int) -> None:
    """The error for ids that ``fmt`` cannot hold, before anything is written."""
    if fmt == "u16" and max_id > 0xFFFF:
        raise TokenizerError(f"--format u16 holds ids up to 65535 but this vocabulary reaches {max_id}; use --format u32")


def id_texts(max_id: int) -> List[str]:
    """The decimal text of every id up to ``max_id`` (a shared table; built once per process)."""
    table = _ID_TEXTS
    if len(table) <= max_id:
        table.extend(map(str, range(len(table), max_id + 1)))
    return table


def format_ids(data, fmt: str, max_id: int) -> bytes:
    """``data``: ids as native-order uint32 (``bytes`` from the C encoder, an ``array('I')``);
    returns them in ``fmt`` -- ``txt`` ids separated by single spaces (no newline), or
    the little-endian ``u16``/``u32`` array.  ``max_id`` bounds the ids (``check_format``
    was called with it)."""
    if fmt == "u32":
        if _LITTLE:
            return data if type(data) is bytes else bytes(data)
        arr = array("I", bytes(data))  # pragma: no cover - big-endian hosts
        arr.byteswap()
        return arr.tobytes()
    raw = data if type(data) is bytes else bytes(data)
    if fmt == "u16":
        if _LITTLE:  # the two low bytes of each little-endian uint32
            n = len(raw) // 4
            if raw[2::4].count(0) != n or raw[3::4].count(0) != n:
                raise OverflowError("an id above 65535 cannot be written as u16")
            out = bytearray(2 * n)
            out[0::2] = raw[0::4]
            out[1::2] = raw[1::4]
            return bytes(out)
        arr = array("H", memoryview(raw).cast("I"))  # pragma: no cover - big-endian hosts
        arr.byteswap()
        return arr.tobytes()
    if fmt != "txt":
        raise ValueError(f"unknown ids format {fmt!r}")
    if not raw:
        return b""
    ids = memoryview(raw).cast("I")
    try:
        return " ".join(map(id_texts(max_id).__getitem__, ids)).encode("ascii")
    except IndexError:  # an id above max_id: not from this tokenizer, but write it anyway
        return " ".join(map(str, ids)).encode("ascii")


def write_ids(out: BinaryIO, batches: Iterable, fmt: str, max_id: int) -> int:
    """Writes every batch (lists or arrays of ids, or native-order uint32 ``bytes``) as one
    document; returns how many ids were written.  A ``txt`` document ends with a newline."""
    check_format(fmt, max_id)
    written = 0
    first = True
    for ids in batches:
        if type(ids) is not bytes:
            ids = ids.tobytes() if isinstance(ids, array) and ids.typecode == "I" else array("I", ids).tobytes()
        if not ids:
            continue
        data = format_ids(ids, fmt, max_id)
        if fmt == "txt" and not first:
            out.write(b" ")
        out.write(data)
        first = False
        written += len(ids) // 4
    if fmt == "txt":
        out.write(b"\n")
    return written


def read_ids(stream: BinaryIO, fmt: str, chunk: int = _CHUNK) -> Iterator[List[int]]:
    """Yields batches of ids read from ``stream``."""
    if fmt == "txt":
        carry = b""
        while True:
            data = stream.read(chunk)
            if not data:
                break
            data = carry + data
            parts = data.split()
            carry = b""
            if parts and not data[-1:].isspace():
                carry = parts.pop()
            yield _parse(parts, data)
        if carry:
            yield _parse([carry], carry)
        return
    code = _TYPECODES[fmt]
    width = array(code).itemsize
    carry = b""
    while True:
        data = stream.read(chunk)
        if not data:
            break
        data = carry + data
        cut = len(data) - len(data) % width
        carry = data[cut:]
        arr = array(code)
        arr.frombytes(data[:cut])
        if sys.byteorder != "little":  # pragma: no cover
            arr.byteswap()
        yield arr.tolist()
    if carry:
        raise TokenizerError(f"the {fmt} input ends with {len(carry)} stray byte(s); it is not a whole number of ids")


# What is not a decimal id: a byte other than a digit or whitespace, or a run of digits
# longer than any 32-bit id (int() would take "+5", "1_0", and thousands of digits slowly).
_NOT_IDS = re.compile(rb"[^0-9\s]|[0-9]{21}")


def _parse(parts: List[bytes], data: bytes) -> List[int]:
    """The ids of ``parts``, the whitespace-separated words of ``data`` (one C-level scan first)."""
    bad = _NOT_IDS.search(data)
    if bad is None:
        return [int(p) for p in parts]
    at = bad.start()
    while at > 0 and data[at - 1:at].isdigit():
        at -= 1
    word = data[at:].split(None, 1)[0]
    if word.isdigit():
        shown = word.decode("ascii") if len(word) <= 40 else f"{word[:20].decode('ascii')}... ({len(word):,} digits)"
        raise TokenizerError(f"id {shown} is not in the vocabulary (token ids are 32-bit)")
    raise TokenizerError(
        f"{word[:20].decode('ascii', 'replace')!r} is not a token id; decode reads decimal ids (or --format u16/u32)"
    )
