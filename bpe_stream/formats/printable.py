"""GPT-2's printable form of bytes, used by ``vocab.json``/``merges.txt`` and HF files.

The 188 bytes ``!``..``~``, ``¡``..``¬``, ``®``..``ÿ`` stand for themselves; the other 68
byte values map, in increasing order, to ``chr(256 + n)`` (so space is ``Ġ``).
"""

from __future__ import annotations


def _byte_to_char() -> dict:
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    table = {b: chr(b) for b in keep}
    n = 0
    for b in range(256):
        if b not in table:
            table[b] = chr(256 + n)
            n += 1
    return table


BYTE_TO_CHAR = _byte_to_char()
CHAR_TO_BYTE = {c: b for b, c in BYTE_TO_CHAR.items()}
_ENCODE_TABLE = [BYTE_TO_CHAR[b] for b in range(256)]


def to_printable(data: bytes) -> str:
    return "".join(_ENCODE_TABLE[b] for b in data)


def from_printable(text: str) -> bytes:
    """Inverse of :func:`to_printable`; ``KeyError`` on a character outside the alphabet."""
    return bytes(CHAR_TO_BYTE[c] for c in text)
