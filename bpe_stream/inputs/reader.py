"""Reading files and stdin as text chunks, byte-exactly.

Owns: the identity of a source (real path, device and inode, size, modification time), opening it at a byte
offset, and decoding its bytes in fixed-size chunks with an incremental UTF-8 decoder.
Bytes that are not UTF-8 become lone surrogates (``surrogateescape``) and turn back into
the same bytes on the way out, so nothing is replaced or lost; a character cut by a
chunk boundary is held until its remaining bytes arrive.  Knows nothing of BPE or LMDB.
"""

from __future__ import annotations

import codecs
from contextlib import contextmanager
import os
import stat
import sys
from dataclasses import dataclass, field
from typing import BinaryIO, Iterator, Optional, Tuple

from ..errors import UserError

CHUNK_BYTES = 1 << 20
STDIN = "-"


class InputError(UserError):
    """An input that cannot be read (missing, a directory, unreadable, not UTF-8 under --strict-utf8)."""

    def naming(self, name: str, then: str = "") -> "InputError":
        """This error as one that starts with the input's name (errors raised where only bytes
        are known -- a worker's range, a decoder -- do not say which file), followed by
        ``then``: what a count kept of it."""
        message = str(self)
        if not message.startswith(name):
            message = f"{name}: {message}"
        error = type(self).__new__(type(self))
        InputError.__init__(error, message + (f"; {then}" if then else ""))
        return error


@contextmanager
def naming(name: str) -> Iterator[None]:
    """``with naming(source.name):`` -- an InputError inside names the input (``InputError.naming``)."""
    try:
        yield
    except InputError as exc:
        raise exc.naming(name) from None


def to_bytes(text: str) -> bytes:
    """The exact bytes behind text decoded by :func:`decode_chunks`."""
    return text.encode("utf-8", "surrogateescape")


def from_bytes(data: bytes) -> str:
    return data.decode("utf-8", "surrogateescape")


@dataclass(frozen=True)
class Source:
    """One input: a file (which can be re-read and resumed) or stdin (which cannot)."""

    name: str  # as the user gave it, for messages
    key: bytes  # identity in the store: the real path of a file, b"-" for stdin
    size: int = 0
    mtime_ns: int = 0
    stream: bool = False  # a pipe or device named by path: /dev/stdin, <(zcat f.gz)
    dev: int = 0  # with ino: the same file under any name (a hard link, ./f and $PWD/f)
    ino: int = 0
    # How it is read when not as plain bytes: a ``documents.InputForm`` (compressed, JSON
    # Lines, Parquet), set by ``documents.with_form``; None: bytes as they are, one document.
    form: Optional[object] = field(default=None, compare=False)

    @property
    def is_stdin(self) -> bool:
        """Stdin, or a pipe or device given by path: read once, front to back, never
        split into ranges, skipped or resumed."""
        return self.name == STDIN or self.stream

    @classmethod
    def from_arg(cls, arg: str) -> "Source":
        if arg == STDIN:
            return cls(STDIN, b"-")
        try:
            st = os.stat(arg)
        except FileNotFoundError:
            raise InputError(f"{arg}: no such file; check the path") from None
        except OSError as exc:
            raise InputError(f"{arg}: cannot read it ({exc.strerror})") from None
        if stat.S_ISDIR(st.st_mode):
            raise InputError(f"{arg} is a directory; pass the files inside it (e.g. {arg}/*.txt)")
        if not os.access(arg, os.R_OK):
            raise InputError(f"{arg}: permission denied; make it readable or leave it out")
        if not stat.S_ISREG(st.st_mode):
            return cls(arg, b"-", stream=True)
        return cls(arg, os.fsencode(os.path.realpath(arg)), st.st_size, st.st_mtime_ns, dev=st.st_dev, ino=st.st_ino)

    def identity(self) -> dict:
        return {"size": self.size, "mtime_ns": self.mtime_ns, "dev": self.dev, "ino": self.ino}

    @contextmanager
    def reading(self, offset: int = 0) -> Iterator[BinaryIO]:
        """``with source.reading() as stream:`` -- closes a file afterwards, never stdin."""
        stream = self.open(offset)
        try:
            yield stream
        finally:
            if self.name != STDIN:
                stream.close()

    def open(self, offset: int = 0) -> BinaryIO:
        if self.name == STDIN:
            return sys.stdin.buffer
        try:
            f = open(self.name, "rb")
        except OSError as exc:
            raise InputError(f"{self.name}: cannot read it ({exc.strerror})") from None
        if offset:
            f.seek(offset)
        return f


def invalid_utf8_message(offset: int) -> str:
    """What ``--strict-utf8`` says of input that stops being UTF-8 at byte ``offset``."""
    return f"invalid UTF-8 at byte offset {offset}; drop --strict-utf8 to keep such bytes as they are"


def decode_chunks(
    stream: BinaryIO, chunk_bytes: int = CHUNK_BYTES, strict: bool = False, start_offset: int = 0
) -> Iterator[Tuple[str, int, int]]:
    """Yields ``(text, bytes_read_so_far, bytes_held, final)`` per chunk, ``final`` on the
    last one (at end of input).  ``bytes_held`` counts bytes of an incomplete character
    kept back for the next chunk."""
    decoder = codecs.getincrementaldecoder("utf-8")("strict" if strict else "surrogateescape")
    done = 0
    read = stream.read
    while True:
        try:
            chunk = read(chunk_bytes)
        except OSError as exc:
            raise InputError(f"read failed ({exc.strerror})") from None
        final = not chunk
        held_before = len(decoder.getstate()[0])
        try:
            text = decoder.decode(chunk, final=final)
        except UnicodeDecodeError as exc:
            offset = start_offset + done - held_before + exc.start
            raise InputError(invalid_utf8_message(offset)) from None
        done += len(chunk)
        yield text, done, len(decoder.getstate()[0]), final
        if final:
            return
