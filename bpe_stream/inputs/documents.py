"""Inputs in the forms corpora come in: compressed files, JSON Lines and Parquet, read as documents.

Owns: what form an input has (:func:`form_of`: compression by extension, checked against the
file's first bytes, and for stdin by those bytes alone; records by extension or
``--input-format``), the decompressed stream of a file (gzip, xz and bz2 from the standard
library, zstd from the ``zstandard`` extra), the documents of a form (:func:`iter_documents`:
the whole text, each JSON Lines record's field, each Parquet row's column), and the pieces the
counting workers get (:func:`count_pieces`) with the unit that counts each piece.

A compressed stream cannot be cut into byte ranges ahead (nothing tells where the compressed
bytes of an uncompressed offset are), so the parent decompresses each file front to back and
cuts the uncompressed bytes as it goes: text at safe cuts (``streaming.byte_pieces``, as
``encode`` cuts a document), JSON Lines after a line's newline; the workers count the pieces.  A
piece's end is an offset in the *uncompressed* stream, and that is what a file's record keeps:
a resumed count decompresses from the start again and skips up to it.  Parquet files are cut by
row group instead (the workers read their row groups themselves); the record keeps how many
row groups are counted.

Each document is counted on its own (a pretoken never spans two records), so the store of a
JSON Lines or Parquet file equals the store of the same documents written one per plain file.
Bad records (a line that is not JSON, not an object, without the field, a field that is not a
string; a null in Parquet) are an :class:`InputError` naming the file and the line or row, or,
with ``skip_bad``, counted in ``PartialCounts.skipped``.
"""

from __future__ import annotations

import bz2
import hashlib
import json
import lzma
import os
import sys
from dataclasses import dataclass, replace
from typing import BinaryIO, Callable, Iterator, List, Optional, Tuple

from .reader import CHUNK_BYTES, STDIN, InputError, Source, from_bytes, invalid_utf8_message
from ..pretok.scan import first_invalid_utf8
from .streaming import Spooled, byte_pieces

INPUT_FORMATS = ("auto", "text", "jsonl", "parquet")
COMPRESSIONS = {".gz": "gzip", ".zst": "zstd", ".xz": "xz", ".bz2": "bz2"}
_EXTENSION = {v: k for k, v in COMPRESSIONS.items()}
RECORD_EXTENSIONS = {".jsonl": "jsonl", ".json": "jsonl", ".parquet": "parquet"}
# What each compressed stream starts with.  bz2's is checked in full for stdin (``BZh`` + a
# level digit + a block or end-of-stream marker), since "BZh" alone could begin a text.
_MAGIC = {"gzip": b"\x1f\x8b", "zstd": b"\x28\xb5\x2f\xfd", "xz": b"\xfd7zXZ\x00", "bz2": b"BZh"}
_BZ2_MARKS = (b"1AY&SY", b"\x17rE8P\x90")
# A zstd stream may also start with a skippable frame (magic 0x184D2A50 to 0x184D2A5F, little-endian:
# what ``pzstd`` writes first), which ``zstd -d`` skips; so does the decompressor here.
_ZSTD_SKIPPABLE = range(0x184D2A50, 0x184D2A60)
_PARQUET_MAGIC = b"PAR1"
EXTRAS = {"zstd": ("zstandard", "zstd"), "parquet": ("pyarrow", "parquet")}
PREFIX_DIGEST_SIZE = 20


class MissingExtra(InputError):
    """An input whose form needs an optional dependency that is not installed."""


def require(what: str):
    """The module behind an optional form (``zstd``: zstandard, ``parquet``: pyarrow.parquet),
    or :class:`MissingExtra` naming the extra that installs it."""
    module, extra = EXTRAS[what]
    try:
        if what == "parquet":
            import pyarrow.parquet as pq

            return pq
        import zstandard

        return zstandard
    except ImportError:
        raise MissingExtra(
            f"reading {what} files needs the {module} package, which is not installed; "
            f"install it with: pip install 'bpe-stream[{extra}]'"
        ) from None


@dataclass(frozen=True)
class InputForm:
    """How one input is read: its compression (None: as it is) and its records (``text``: the
    whole stream is one document; ``jsonl``: each line's ``field``; ``parquet``: each row's
    ``field`` column)."""

    compression: Optional[str] = None
    records: str = "text"
    field: str = "text"

    @property
    def plain(self) -> bool:
        """Read as bpe-stream always read files: bytes as they are, one document."""
        return self.compression is None and self.records == "text"

    @property
    def label(self) -> str:
        """What a file's record says it was read as: ``gzip+jsonl:text``, ``parquet:text``..."""
        parts = [p for p in (self.compression, self.records) if p]
        return "+".join(parts) + (f":{self.field}" if self.records != "text" else "")


def _starts_as(head: bytes, compression: str) -> bool:
    """Whether ``head`` can begin a ``compression`` stream: its magic number (zstd's: a frame's or
    a skippable frame's)."""
    if compression == "zstd" and len(head) >= 4 and int.from_bytes(head[:4], "little") in _ZSTD_SKIPPABLE:
        return True
    return head.startswith(_MAGIC[compression])


def _sniff(head: bytes) -> Optional[str]:
    for name in _MAGIC:
        if _starts_as(head, name) and (name != "bz2" or (len(head) >= 10 and head[3:4] in b"123456789"
                                                         and head[4:10] in _BZ2_MARKS)):
            return name
    return None


def _looks(head: bytes) -> str:
    found = _sniff(head) or ("parquet" if head.startswith(_PARQUET_MAGIC) else None)
    if found:
        return f"they are {found}'s"
    return "it is empty" if not head else "they look like plain data"


def form_of(source: Source, input_format: str = "auto", field: str = "text", column: str = "text") -> InputForm:
    """The form of ``source``: compression from the name's last extension (a file whose first
    bytes contradict it is an InputError), records from ``input_format`` or, with ``auto``, the
    extension before it (``.jsonl``/``.json``, ``.parquet``; anything else is text).  Stdin and
    pipes: compression from their first bytes (see :func:`open_stream`), records only from
    ``input_format``."""
    if input_format not in INPUT_FORMATS:
        raise ValueError(f"--input-format must be one of {', '.join(INPUT_FORMATS)}, not {input_format!r}")
    if source.is_stdin:
        if input_format == "parquet":
            raise InputError(f"{source.name}: Parquet cannot be read from a stream (its index is at the end); "
                             "name the file instead")
        records = "text" if input_format == "auto" else input_format
        return InputForm(None, records, field)  # compression: sniffed when it is opened
    base, ext = os.path.splitext(source.name)
    compression = COMPRESSIONS.get(ext.lower())
    if compression is not None:
        ext = os.path.splitext(base)[1]
    records = input_format if input_format != "auto" else RECORD_EXTENSIONS.get(ext.lower(), "text")
    if compression is None and records == "text":
        return InputForm(None, "text", field)  # a plain file: nothing to check
    with open(source.name, "rb") as f:
        head = f.read(16)
    if compression is not None:
        if records == "parquet":
            raise InputError(f"{source.name}: a Parquet file compresses its own pages; name it without "
                             f"{_EXTENSION[compression]}, uncompressed")
        if not _starts_as(head, compression):
            raise InputError(
                f"{source.name} is named {_EXTENSION[compression]} but its first bytes are not {compression}'s "
                f"({_looks(head)}); rename it to what it is"
            )
    elif records == "parquet" and not head.startswith(_PARQUET_MAGIC):
        raise InputError(f"{source.name} is not a Parquet file (its first bytes are not PAR1; {_looks(head)})")
    if compression == "zstd":
        require("zstd")
    if records == "parquet":
        require("parquet")
    return InputForm(compression, records, column if records == "parquet" else field)


def with_form(source: Source, input_format: str = "auto", field: str = "text", column: str = "text") -> Source:
    """``source`` with its form (:func:`form_of`) when it is not read as plain bytes."""
    form = form_of(source, input_format, field, column)
    if source.name == STDIN:
        form = stdin_form(source, form)
    return source if form.plain else replace(source, form=form)


def _check_unchanged(source: Source, f) -> None:
    """A file written to while it was read: an error before its last counts are taken."""
    st = os.fstat(f.fileno()) if f is not None else os.stat(source.name)
    if (st.st_size, st.st_mtime_ns) != (source.size, source.mtime_ns):
        raise InputError(f"{source.name} changed while it was being counted; run the same command again "
                         "once nothing writes to it (with --recount if it is said to have changed)")


def _hash_file(source: Source, hasher) -> None:
    """Feeds all of a file's bytes to ``hasher`` (a Parquet file's identity, which the
    workers' reads do not see), after checking that it did not change meanwhile."""
    _check_unchanged(source, None)
    if hasher is not None:
        with open(source.name, "rb") as f:
            for block in iter(lambda: f.read(CHUNK_BYTES), b""):
                hasher.update(block)


# -- streams ------------------------------------------------------------------------------
class RawReader:
    """The compressed bytes of a file as the decompressor reads them: counted (``on_bytes``,
    for the progress bar) and hashed (the file's identity)."""

    def __init__(self, f: BinaryIO, on_bytes: Callable[[int], None] = lambda n: None, hasher=None):
        self.f, self.on_bytes, self.hasher = f, on_bytes, hasher
        self.bytes = 0

    def read(self, n: int = -1) -> bytes:
        data = self.f.read(n)
        if data:
            self.bytes += len(data)
            if self.hasher is not None:
                self.hasher.update(data)
            self.on_bytes(len(data))
        return data

    def readinto(self, buf) -> int:
        data = self.read(len(buf))
        buf[:len(data)] = data
        return len(data)

    def readable(self) -> bool:
        return True

    def finish(self) -> None:
        """Reads what the decompressor left (padding after the last frame): hashed and counted."""
        while self.read(CHUNK_BYTES):
            pass


class _Decompressed:
    """A decompressing stream whose errors are InputErrors naming the file."""

    def __init__(self, stream, name: str, compression: str):
        self.stream, self.name, self.compression = stream, name, compression

    def read(self, n: int = -1) -> bytes:
        try:
            return self.stream.read(n)
        except (OSError, EOFError, lzma.LZMAError, ValueError) as exc:
            raise InputError(f"{self.name}: not a valid {self.compression} stream ({exc}); "
                             "is the file cut short or damaged?") from None
        except Exception as exc:  # zstandard.ZstdError
            if type(exc).__name__ == "ZstdError":
                raise InputError(f"{self.name}: not a valid zstd stream ({exc}); is the file cut short or damaged?") from None
            raise


def decompressing(raw, compression: Optional[str], name: str):
    """A binary stream of the uncompressed bytes of ``raw`` (``raw`` itself with no compression)."""
    if compression is None:
        return raw
    # gzip is imported for a gzip stream only; bz2 and lzma come with typer (through shutil)
    # whatever this module does, so importing them lazily saved nothing.
    if compression == "gzip":
        import gzip

        stream = gzip.GzipFile(fileobj=raw, mode="rb")
    elif compression == "xz":
        stream = lzma.LZMAFile(raw)
    elif compression == "bz2":
        stream = bz2.BZ2File(raw)
    else:
        stream = _ZstdFrames(raw, require("zstd"))
    return _Decompressed(stream, name, compression)


class _ZstdFrames:
    """zstd frames one after another, as ``zstd -d`` reads them.  (zstandard's
    ``stream_reader`` ends quietly at a frame cut short: a truncated file would count as
    its first part.)  The compressed bytes go in small blocks, so one block's output stays
    small for text."""

    _BLOCK = 1 << 13

    def __init__(self, raw, zstd):
        self.raw, self.zstd = raw, zstd
        self.obj = zstd.ZstdDecompressor().decompressobj()
        self.in_frame = False
        self.pending = b""
        self.buf = bytearray()
        self.done = False

    def read(self, n: int = -1) -> bytes:
        while not self.done and (n < 0 or len(self.buf) < n):
            data, self.pending = (self.pending or self.raw.read(self._BLOCK)), b""
            if not data:
                if self.in_frame:
                    raise EOFError("the stream ends inside a frame")
                self.done = True
                break
            self.buf += self.obj.decompress(data)
            self.in_frame = not self.obj.eof
            if self.obj.eof:  # the next frame, if any, starts in what this one did not use
                self.pending = self.obj.unused_data
                self.obj = self.zstd.ZstdDecompressor().decompressobj()
        if n < 0 or n >= len(self.buf):
            out, self.buf = bytes(self.buf), bytearray()
        else:
            out = bytes(self.buf[:n])
            del self.buf[:n]
        return out


def open_stream(source: Source, form: InputForm, on_bytes: Callable[[int], None] = lambda n: None,
                hasher=None) -> Tuple[RawReader, BinaryIO, InputForm]:
    """(the raw reader, the uncompressed stream, the form with stdin's compression found)."""
    if source.name == STDIN:
        f = sys.stdin.buffer
    else:
        try:
            f = open(source.name, "rb")
        except OSError as exc:
            raise InputError(f"{source.name}: cannot read it ({exc.strerror})") from None
    form = stdin_form(source, form)
    raw = RawReader(f, on_bytes, hasher)
    return raw, decompressing(raw, form.compression, source.name), form


def stdin_form(source: Source, form: InputForm) -> InputForm:
    """The form of stdin with its compression found from its first bytes (nothing is
    consumed); a pipe named by path is read as it is."""
    if source.name != STDIN or form.compression is not None:
        return form
    try:
        compression = _sniff(sys.stdin.buffer.peek(16)[:16])
    except (AttributeError, OSError, ValueError):  # no stdin (closed), or one that cannot peek: read as it is
        compression = None
    if compression == "zstd":
        require("zstd")
    return InputForm(compression, form.records, form.field)


def skip_to(stream: BinaryIO, n: int, name: str, prefix=None) -> int:
    """Reads and drops the first ``n`` uncompressed bytes (a resumed file), fed to ``prefix``
    (a hasher) when given; returns how many newlines they held (the line number of a JSON
    Lines file resumed there)."""
    lines, offset = 0, n
    while n > 0:
        block = stream.read(min(CHUNK_BYTES, n))
        if not block:
            raise InputError(f"{name} ends before uncompressed byte {offset:,}, where its committed counts reach: "
                             "it changed since it was counted; pass --recount")
        if prefix is not None:
            prefix.update(block)
        lines += block.count(b"\n")
        n -= len(block)
    return lines


# -- the committed prefix of a file read as documents --------------------------------------
# A file read as documents keeps in its record, while it is not counted to its end, a digest
# of what its committed counts cover (``prefix``): the BLAKE2b of its first ``offset``
# uncompressed bytes (text and JSON Lines: a cut or a line's end), or for Parquet a chain over
# its first row groups' documents.  A rerun of a count that stopped -- killed, or failed at a
# damaged stream, a cut-short download, a bad record -- resumes there whenever that part is
# unchanged, whatever happened to the rest (completed, fixed); any other change is refused.
def prefix_hasher():
    return hashlib.blake2b(digest_size=PREFIX_DIGEST_SIZE)


def chain_group(prefix: bytes, group_digest: bytes) -> bytes:
    """The Parquet prefix digest after one more row group (``group_digest``: :func:`hash_documents`')."""
    return hashlib.blake2b(prefix + group_digest, digest_size=PREFIX_DIGEST_SIZE).digest()


def hash_documents(docs: Iterator[Tuple[Optional[bytes], int]], hasher) -> Iterator[Tuple[Optional[bytes], int]]:
    """``docs`` as they are, each fed to ``hasher`` (a row group's digest: nulls and documents,
    each document length-prefixed)."""
    for doc, at in docs:
        hasher.update(b"\x00" if doc is None else b"\x01" + len(doc).to_bytes(8, "little") + doc)
        yield doc, at


def parquet_group_digest(path: str, group: int, column: str) -> bytes:
    """What :func:`hash_documents` gives for one row group of a Parquet file, as a counting
    worker computes it."""
    hasher = prefix_hasher()
    for _ in hash_documents(parquet_documents(path, group, 0, column, False, True), hasher):
        pass
    return hasher.digest()


def prefix_digest(source: Source, form: InputForm, end: int) -> Optional[bytes]:
    """The prefix digest of ``source`` as it is now up to ``end`` (uncompressed bytes, or row
    groups), or None when it has no such prefix (shorter, damaged before it, another column)."""
    try:
        if form.records == "parquet":
            if end > len(parquet_row_groups(source.name)):
                return None
            prefix = b""
            for g in range(end):
                prefix = chain_group(prefix, parquet_group_digest(source.name, g, form.field))
            return prefix
        raw, stream, _ = open_stream(source, form)
        try:
            hasher = prefix_hasher()
            skip_to(stream, end, source.name, hasher)
            return hasher.digest()
        finally:
            raw.f.close()
    except InputError:
        return None


def _hash_spooled(spooled: Spooled, hasher) -> None:
    with open(spooled.path, "rb") as f:
        for block in iter(lambda: f.read(CHUNK_BYTES), b""):
            hasher.update(block)


# -- records ------------------------------------------------------------------------------
def _type_name(value) -> str:
    return {dict: "an object", list: "an array", bool: "a boolean", int: "a number", float: "a number",
            type(None): "null"}.get(type(value), type(value).__name__)


def record_text(line: bytes, field: str, strict: bool) -> Tuple[Optional[bytes], Optional[str]]:
    """(the bytes of the document a JSON Lines line holds, None) or (None, what is wrong with it).

    The line is decoded as UTF-8 first: ``json.loads`` of bytes would take a line of UTF-16 or
    UTF-32 as well, which a JSON Lines file is not (each line is UTF-8).  A string's escapes
    ``\\udc80``-``\\udcff`` are the bytes 0x80-0xff (Python's ``surrogateescape``: what
    ``json.dumps`` writes for bytes that are not UTF-8 read that way), kept exactly as a plain
    file keeps them; every other lone surrogate escape (``\\ud800``, ``\\udc7f``...) stands for
    no byte and makes the record bad."""
    if b"\x00" in line:  # (never in a UTF-8 JSON line: raw control characters are not JSON)
        return None, "not UTF-8 JSON (it holds NUL bytes: UTF-16 or UTF-32?); convert the file to UTF-8"
    try:
        doc = line.decode("utf-8")
    except UnicodeDecodeError:
        return None, "not UTF-8"
    if doc.startswith("\ufeff"):  # a byte order mark before a file's first record
        doc = doc[1:]
    try:
        value = json.loads(doc)
    except RecursionError:
        return None, "JSON nested too deeply to be read"
    except ValueError as exc:
        return None, f"not JSON ({exc.msg} at column {exc.colno})" if hasattr(exc, "msg") else "not JSON"
    if not isinstance(value, dict):
        return None, f"{_type_name(value)}, not a JSON object with a {field!r} field"
    if field not in value:
        return None, f"no field {field!r} (pass --field NAME for another)"
    text = value[field]
    if not isinstance(text, str):
        return None, f"field {field!r} is {_type_name(text)}, not a string"
    try:
        data = text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError as exc:
        return None, (f"field {field!r} holds a lone surrogate escape, \\u{ord(text[exc.start]):04x}, which stands "
                      "for no byte (of the lone surrogates only \\udc80-\\udcff are read, as the bytes 0x80-0xff)")
    if strict:
        bad = first_invalid_utf8(data)
        if bad >= 0:
            return None, f"field {field!r}: {invalid_utf8_message(bad)}"
    return data, None


def jsonl_documents(data: bytes, first_line: int, name: str, field: str, strict: bool,
                    skip_bad: bool) -> Iterator[Tuple[Optional[bytes], int]]:
    """(document bytes, line number) of each record of whole lines ``data`` (line numbers from
    ``first_line``); a bad record raises, or with ``skip_bad`` is yielded as (None, line).
    Lines of only white space are no records."""
    for i, line in enumerate(data.split(b"\n")):
        if not line.strip():
            continue
        doc, why = record_text(line, field, strict)
        if why is not None:
            if not skip_bad:
                raise InputError(f"{name} line {first_line + i:,}: {why}; fix or drop that record "
                                 "(--skip-bad-records skips such records)")
        yield doc, first_line + i


def parquet_row_groups(path: str) -> List[Tuple[int, int]]:
    """(rows, compressed bytes) of each row group of a Parquet file."""
    pq = require("parquet")
    try:
        meta = pq.ParquetFile(path).metadata
    except Exception as exc:  # pyarrow.ArrowInvalid and kin
        raise InputError(f"{path}: not a readable Parquet file ({exc})") from None
    groups = []
    for i in range(meta.num_row_groups):
        group = meta.row_group(i)
        groups.append((group.num_rows, sum(group.column(c).total_compressed_size for c in range(group.num_columns))))
    return groups


def parquet_documents(path: str, group: int, first_row: int, column: str, strict: bool,
                      skip_bad: bool, name: Optional[str] = None) -> Iterator[Tuple[Optional[bytes], int]]:
    """(document bytes, row number from 1) of each row of one row group; a null raises, or with
    ``skip_bad`` is yielded as (None, row).  ``name``: the file as messages call it (``path``)."""
    pq = require("parquet")
    import pyarrow as pa

    shown = path if name is None else name

    try:
        pf = pq.ParquetFile(path)
        if column not in pf.schema_arrow.names:
            raise InputError(f"{shown} has no column {column!r} (its columns: {', '.join(pf.schema_arrow.names)}); "
                             "pass --column NAME")
        table = pf.read_row_group(group, columns=[column], use_threads=False)
    except InputError:
        raise
    except Exception as exc:
        raise InputError(f"{shown}: row group {group} cannot be read ({exc})") from None
    col = table.column(0)
    kind = col.type
    # A dictionary-encoded string column (pandas' categorical) holds strings too.
    values = kind.value_type if pa.types.is_dictionary(kind) else kind
    if not (pa.types.is_string(values) or pa.types.is_large_string(values)):
        raise InputError(f"{shown}: column {column!r} holds {kind}, not strings; pass --column NAME of a text column")
    # Read as the bytes they are: writers other than pyarrow store strings that are not UTF-8,
    # kept exactly as a plain file's bytes are (or refused with --strict-utf8).
    binary = pa.binary() if pa.types.is_string(values) else pa.large_binary()
    row = first_row
    for chunk in col.chunks:
        if pa.types.is_dictionary(kind):
            chunk = chunk.dictionary_decode()
        chunk = chunk.view(binary)
        for start in range(0, len(chunk), 4096):
            for data in chunk.slice(start, 4096).to_pylist():
                row += 1
                if data is None:
                    if not skip_bad:
                        raise InputError(f"{shown} row {row:,}: column {column!r} is null; fix or drop that row "
                                         "(--skip-bad-records skips such rows)")
                    yield None, row
                    continue
                if strict:
                    bad = first_invalid_utf8(data)
                    if bad >= 0:
                        raise InputError(f"{shown} row {row:,}: {invalid_utf8_message(bad)}")
                yield data, row


def iter_documents(source: Source, form: InputForm, strict: bool = False, skip_bad: bool = False,
                   on_bytes: Callable[[int], None] = lambda n: None, skipped: Optional[list] = None) -> Iterator[BinaryIO]:
    """Each document of ``source`` as a binary stream, in order (for encode): the decompressed
    text (one document, streamed), or one record's bytes at a time.  Bad records skipped with
    ``skip_bad`` are appended (line or row numbers) to ``skipped``."""
    import io

    if form.records == "parquet":
        groups = parquet_row_groups(source.name)
        first = 0
        for g, (rows, size) in enumerate(groups):
            for doc, row in parquet_documents(source.name, g, first, form.field, strict, skip_bad):
                if doc is None:
                    if skipped is not None:
                        skipped.append(row)
                    continue
                yield io.BytesIO(doc)
            on_bytes(size)
            first += rows
        on_bytes(max(0, source.size - sum(size for _, size in groups)))  # the footer: the bar ends at the file's size
        return
    raw, stream, form = open_stream(source, form, on_bytes)
    try:
        if form.records == "text":
            yield stream
            return
        line = 1
        for data, _ in _line_blocks(stream, CHUNK_BYTES):
            for doc, at in jsonl_documents(data, line, source.name, form.field, strict, skip_bad):
                if doc is None:
                    if skipped is not None:
                        skipped.append(at)
                    continue
                yield io.BytesIO(doc)
            line += data.count(b"\n") + 1
    finally:
        if source.name != STDIN:
            raw.f.close()


def _line_blocks(stream: BinaryIO, size: int) -> Iterator[Tuple[bytes, int]]:
    """(block, bytes of the stream it stands for) for blocks of whole lines of about ``size``
    bytes, each without its last newline (but the stream's last block, as it is); a line
    longer than ``size`` is one block."""
    buf = bytearray()
    while True:
        block = stream.read(min(size, CHUNK_BYTES))
        if not block:
            break
        buf += block
        if len(buf) >= size:
            end = buf.rfind(b"\n")
            if end >= 0:
                yield bytes(buf[:end]), end + 1
                del buf[:end + 1]
    if buf:
        yield bytes(buf), len(buf)


# -- pieces for the counting workers -------------------------------------------------------
@dataclass
class Piece:
    """What the parent hands on from a document source: the task, where it ends in the
    uncompressed stream (or in row groups), the compressed bytes read for it, and whether
    it is the file's last."""

    fn: Callable
    args: tuple
    end: int
    raw: int
    last: bool
    prefix: Optional[bytes] = None  # the prefix digest up to ``end`` (text, JSON Lines; Parquet's is chained from the workers')


def count_pieces(source: Source, form: InputForm, start: int, settings: dict, strict: bool, skip_bad: bool,
                 piece_bytes: int, hasher=None, spool_dir: Optional[str] = None,
                 expect_prefix: Optional[bytes] = None) -> Iterator[Piece]:
    """The tasks that count ``source`` from ``start`` (uncompressed offset, or row groups) on.
    ``spool_dir``: where text with no cut for twice a piece is spooled (``streaming.byte_pieces``)
    and counted from as a file; the task removes its spool.  ``expect_prefix``: the prefix digest
    of what comes before ``start`` in the file's record, checked on the way (text, JSON Lines)."""
    if form.records == "parquet":
        yield from _parquet_pieces(source, form, start, settings, strict, skip_bad, hasher)
        return
    raw, stream, form = open_stream(source, form, hasher=hasher)
    try:
        prefix = prefix_hasher()
        lines = skip_to(stream, start, source.name, prefix) if start else 0
        if start and expect_prefix is not None and prefix.digest() != expect_prefix:
            raise InputError(f"{source.name}: its first {start:,} uncompressed bytes are not those its committed counts "
                             "cover: it changed since it was counted; pass --recount to count it again on top of its "
                             "old counts, or count it into a new store")
        if form.records == "jsonl":
            yield from _jsonl_pieces(source, form, raw, stream, prefix, start, lines, settings, strict, skip_bad,
                                     piece_bytes)
            return
        yield from _text_pieces(source, raw, stream, prefix, start, settings, strict, piece_bytes, spool_dir)
    finally:
        if source.name != STDIN:
            raw.f.close()


def _parquet_pieces(source: Source, form: InputForm, start: int, settings: dict, strict: bool, skip_bad: bool,
                    hasher) -> Iterator[Piece]:
    """One task per row group of a Parquet file from row group ``start`` on (or one empty last
    task when there are none left); the file's digest is taken with its last."""
    from ..count.counting import count_data_piece, count_parquet_group

    groups = parquet_row_groups(source.name)
    first = sum(rows for rows, _ in groups[:start])
    if start >= len(groups):  # no row groups (or resumed after the last, which is never committed as such)
        _hash_file(source, hasher)
        yield Piece(count_data_piece, (b"", settings, False, 0), len(groups), source.size, True)
        return
    raw = 0
    for g in range(start, len(groups)):
        rows, size = groups[g]
        last = g == len(groups) - 1
        raw = source.size if last else raw + size
        if last:
            _hash_file(source, hasher)
        # the worker reads the file (at its absolute path: it may run elsewhere, see Dask)
        args = (os.path.abspath(source.name), g, first, form.field, settings, strict, skip_bad, source.name)
        yield Piece(count_parquet_group, args, g + 1, raw, last)
        first += rows


def _jsonl_pieces(source: Source, form: InputForm, raw, stream, prefix, offset: int, lines: int, settings: dict,
                  strict: bool, skip_bad: bool, piece_bytes: int) -> Iterator[Piece]:
    """The tasks of a JSON Lines stream from uncompressed ``offset`` (after ``lines`` lines):
    blocks of whole lines; the last task (an empty one if there is none) carries the file's end."""
    from ..count.counting import count_data_piece, count_jsonl_piece

    line = lines + 1
    pending = None
    for data, consumed in _line_blocks(stream, piece_bytes):
        if pending is not None:
            yield pending
        offset += consumed
        prefix.update(data)
        if consumed > len(data):  # (the line's newline, which the block leaves out)
            prefix.update(b"\n")
        pending = Piece(count_jsonl_piece, (data, line, source.name, form.field, settings, strict, skip_bad),
                        offset, raw.bytes, False, prefix.digest())
        line += data.count(b"\n") + 1
    raw.finish()
    if not source.is_stdin:
        _check_unchanged(source, raw.f)
    if pending is None:
        pending = Piece(count_data_piece, (b"", settings, False, 0), offset, raw.bytes, True, prefix.digest())
    pending.raw, pending.last = raw.bytes, True
    yield pending


def _text_pieces(source: Source, raw, stream, prefix, offset: int, settings: dict, strict: bool, piece_bytes: int,
                 spool_dir: Optional[str]) -> Iterator[Piece]:
    """The tasks of a text stream from uncompressed ``offset``: pieces cut where the pretokenizer
    allows (spooled when there is no cut for long); the last one carries the file's end."""
    from ..count.counting import count_data_piece, count_spooled, pretokenizer_of

    # The whole document as one piece for a pretokenizer whose ranges cannot be counted
    # apart (``none``, ``regex:``), as for a plain file; with the store's cap, a run with no
    # other cut is cut between its pieces, so a piece stays bounded.
    specials = [s.encode("utf-8") for s in settings["special_tokens"]]
    pending = None
    pieces = byte_pieces(stream, pretokenizer_of(settings), specials, piece_bytes, CHUNK_BYTES, offset, spool_dir)
    for data, at in pieces:
        if pending is not None:
            yield pending
        if isinstance(data, Spooled):
            _hash_spooled(data, prefix)
            args = (data.path, data.size, settings, strict, at, piece_bytes)
            pending = Piece(count_spooled, args, at + data.size, raw.bytes, False, prefix.digest())
        else:
            prefix.update(data)
            pending = Piece(count_data_piece, (data, settings, strict, at), at + len(data), raw.bytes, False,
                            prefix.digest())
    raw.finish()
    if not source.is_stdin:
        _check_unchanged(source, raw.f)
    if pending is None:
        pending = Piece(count_data_piece, (b"", settings, strict, offset), offset, raw.bytes, True, prefix.digest())
    pending.raw, pending.last = raw.bytes, True
    yield pending


__all__ = ["INPUT_FORMATS", "InputForm", "MissingExtra", "form_of", "iter_documents", "count_pieces", "from_bytes"]
