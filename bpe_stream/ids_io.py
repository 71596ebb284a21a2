"""Token ids on the wire: ``txt`` (decimal, whitespace-separated), ``u16`` and ``u32``
(little-endian arrays that ``numpy.fromfile`` reads).  Streams in fixed-size chunks."""

from __future__ import annotations

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


def write_ids(out: BinaryIO, batches: Iterable[List[int]], fmt: str, max_id: int) -> int:
    """Writes every batch; returns how many ids were written.  A ``txt`` document ends with a newline."""
    if fmt == "u16" and max_id > 0xFFFF:
        raise TokenizerError(f"--format u16 holds ids up to 65535 but this vocabulary reaches {max_id}; use --format u32")
    written = 0
    if fmt == "txt":
        first = True
        for ids in batches:
            if not ids:
                continue
            text = " ".join(map(str, ids))
            out.write((text if first else " " + text).encode("ascii"))
            first = False
            written += len(ids)
        out.write(b"\n")
        return written
    code = _TYPECODES[fmt]
    for ids in batches:
        arr = array(code, ids)
        if sys.byteorder != "little":  # pragma: no cover
            arr.byteswap()
        out.write(arr.tobytes())
        written += len(ids)
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
            yield _parse(parts)
        if carry:
            yield _parse([carry])
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


def _parse(parts: List[bytes]) -> List[int]:
    try:
        return [int(p) for p in parts]
    except ValueError:
        bad = next(p for p in parts if not p.strip().isdigit())
        raise TokenizerError(
            f"{bad[:20].decode('ascii', 'replace')!r} is not a token id; decode reads decimal ids (or --format u16/u32)"
        ) from None
