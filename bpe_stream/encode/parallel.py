"""Encoding documents on several processes with exactly the ids of one process.

A document is cut where the pretokens of the parts equal the pretokens of the whole, into
pieces of about ``PIECE_CHARS`` bytes (characters for the pretokenizers whose safe points
are not byte-level).  Each piece is split on special tokens, pretokenized, encoded *and
formatted* (``txt``, ``u16`` or ``u32``) by a worker, which sends back the finished output
bytes; the parent only reads, cuts and writes, in order.  With the C extension a worker
does all of that in C on the piece's bytes (``Tokenizer._native_ids``); without it, it
decodes the piece and runs the Python path.

The pieces and the window of tasks in flight are ``streaming``'s, as for ``count``:

* Byte-level cuts (``streaming.byte_pieces``, ``pretokenize.find_byte_cut``: an ASCII space
  after a non-space, not inside a special token; every named pretokenizer but ``none``): the
  parent never decodes the text.  A cut before an ASCII byte is never inside a UTF-8
  character, so the pieces decode to exactly the text of the whole, invalid bytes included
  (``surrogateescape``).
* Otherwise (``none``, ``regex:...``): the parent decodes and cuts with
  ``StreamSplitter`` (``streaming.text_pieces``) and sends text pieces.

With one worker the same pieces are encoded in this process.  The output bytes do not
depend on the number of workers, the piece size or the read size.

Threads, not processes, where the C encoder does the whole piece (a named pretokenizer, the
extension built): ``Encoder.encode_text`` runs without the GIL, so each of ``workers``
threads encodes its pieces on its own ``Encoder.clone()`` (a copy of the merges, a cache of
its own), and nothing is pickled or piped.  With processes the parent copied every piece
into a pipe and every result out of one (measured on en_100M.txt, u32, -w2: 0.43 s reading
results and 0.23 s sending pieces of the parent's 2.8 s, beside 0.54 s writing the output
and 0.33 s reading and cutting the input): those were the largest serial steps.
"""

from __future__ import annotations

import threading
from array import array
from typing import BinaryIO, Callable, Iterator, List, Optional, Sequence, Tuple

from .ids_io import check_format, format_ids
from ..pretok.pretokenize import StreamSplitter, splittable
from ..inputs.reader import CHUNK_BYTES, InputError, to_bytes
from ..pretok.scan import first_invalid_utf8
from ..inputs.streaming import Window, byte_pieces, text_pieces
from .tokenizer import Tokenizer, TokenizerError

PIECE_CHARS = 1 << 20  # bytes (or characters) encoded at a time, by one worker: ~100 tasks per 100 MB
_IDS = "ids"  # a "format" for encode_stream: native uint32 bytes, made into lists by the parent

_TOKENIZER: Optional[Tokenizer] = None  # the workers' copy, inherited through fork


def _finish(tok: Tokenizer, data: bytes, fmt: str) -> Tuple[bytes, int]:
    n = len(data) // 4
    if fmt == _IDS or not n:
        return data, n
    return format_ids(data, fmt, tok._max_id), n


def _encode_items(items, fmt: str, tok: Optional[Tokenizer] = None) -> Tuple[bytes, int]:
    """A task: the ids of raw items (``StreamSplitter`` output) in ``fmt``, and
    how many ids they are.  ``tok``: the encoder's own (in process), else the workers' copy."""
    tok = _TOKENIZER if tok is None else tok
    return _finish(tok, tok._encode_raw_items_bytes(items), fmt)


def _encode_bytes(data: bytes, offset: int, strict: bool, fmt: str, tok: Optional[Tokenizer] = None) -> Tuple[bytes, int]:
    """A task: the ids of a piece of a document's bytes (cut at safe points; ``offset`` is
    where it starts, for the error message) in ``fmt``, and how many ids they are.  With
    the C extension the bytes go to the native encoder as they are (no text is made)."""
    tok = _TOKENIZER if tok is None else tok
    bad = first_invalid_utf8(data) if strict else -1
    if bad >= 0:
        raise InputError(f"invalid UTF-8 at byte offset {offset + bad}; drop --strict-utf8 to keep such bytes as they are")
    if tok._native():
        return tok._native_ids(data, fmt)
    return _finish(tok, tok._encode_text_bytes(data.decode("utf-8", "surrogateescape")), fmt)


class _ThreadEncoders:
    """What :func:`_encode_bytes` needs of a tokenizer (``_native``, ``_native_ids``), on a
    thread of a ``ThreadRunner``: the ids from this thread's own ``Encoder.clone()`` of the
    tokenizer's native encoder (made on its first piece), so that threads never share one."""

    def __init__(self, tok: Tokenizer):
        self.tok, self._local = tok, threading.local()

    def _native(self) -> bool:
        return True

    def _native_ids(self, data, fmt: str) -> Tuple[bytes, int]:
        encoder = getattr(self._local, "encoder", None)
        if encoder is None:
            encoder = self._local.encoder = self.tok._encoder.clone()
        try:
            return encoder.encode_text(data, fmt, True)
        except OverflowError as exc:  # (as Tokenizer._native_ids says it)
            raise TokenizerError(f"a pretoken is too large for the encoder ({exc})") from None


class ParallelEncoder:
    """``encode_stream(stream)`` like ``Tokenizer.encode_stream``, and ``write(out, stream,
    fmt)`` -- the CLI's encode of one document -- on ``workers`` processes."""

    def __init__(self, tok: Tokenizer, workers: int):
        global _TOKENIZER
        self.tok = tok
        self.workers = workers
        _TOKENIZER = tok
        self.window = None  # one worker: the pieces are encoded here, with ``tok``
        # the C encoder does whole pieces: threads (module docstring)
        self.threads = _ThreadEncoders(tok) if workers > 1 and tok._native() and splittable(tok.pretokenizer) else None
        if workers > 1:
            from ..parallel.runner import LocalRunner, ThreadRunner

            self.window = Window(ThreadRunner(workers) if self.threads else LocalRunner(workers))

    def close(self) -> None:
        if self.window is not None:
            self.window.discard()
            self.window.runner.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _tasks(self, stream: BinaryIO, chunk_bytes: int, strict: bool) -> Iterator[tuple]:
        """The tasks of one document: ``(_encode_bytes, (piece, offset, strict))`` for pieces of
        about ``PIECE_CHARS`` bytes cut at byte-level safe points, or for the other
        pretokenizers ``(_encode_items, (items,))`` with lists of ``StreamSplitter`` items of
        about ``PIECE_CHARS`` characters (``streaming``)."""
        tok = self.tok
        if splittable(tok.pretokenizer):
            specials = [to_bytes(s) for s in tok.special_ids]
            for piece, offset in byte_pieces(stream, tok.pretokenizer, specials, PIECE_CHARS, chunk_bytes):
                yield _encode_bytes, (piece, offset, strict)
            return
        splitter = StreamSplitter(tok.pretokenizer, tok.splitter)
        for items, _ in text_pieces(stream, splitter, PIECE_CHARS, chunk_bytes, strict):
            if items:
                yield _encode_items, (items,)

    def _encoded(self, stream: BinaryIO, fmt: str, chunk_bytes: int, strict: bool) -> Iterator[Tuple[bytes, int]]:
        """``(output bytes, ids)`` of each piece of the document, in order."""
        tasks = self._tasks(stream, chunk_bytes, strict)
        if self.window is None:
            tok = self.tok
            for fn, args in tasks:
                yield fn(*args, fmt, tok)
            return
        window = self.window
        try:
            for fn, args in tasks:
                # (threads: every task is _encode_bytes, each thread on its own encoder)
                args = (*args, fmt, self.threads) if self.threads else (*args, fmt)
                for _, result in window.submit(fn, args, None):
                    yield result
            for _, result in window.drain():
                yield result
        except BaseException:  # an error, or a reader that stopped: the next document must not get these results
            window.discard()
            raise

    def encode_stream(self, stream: BinaryIO, chunk_bytes: int = CHUNK_BYTES, strict: bool = False) -> Iterator[List[int]]:
        """Batches of ids of one document (a binary stream), as ``Tokenizer.encode_stream``."""
        tok = self.tok
        if tok.doc_start_id is not None:
            yield [tok.doc_start_id]
        for data, n in self._encoded(stream, _IDS, chunk_bytes, strict):
            if n:
                ids = array("I")
                ids.frombytes(data)
                yield ids.tolist()
        if tok.doc_end_id is not None:
            yield [tok.doc_end_id]

    def write(self, out: BinaryIO, stream: BinaryIO, fmt: str, chunk_bytes: int = CHUNK_BYTES, strict: bool = False,
              append: Sequence[int] = ()) -> int:
        """Writes the ids of one document (a binary stream) to ``out`` in ``fmt``: exactly
        the bytes of ``ids_io.write_ids`` over ``encode_stream``, then the ids ``append``
        (``--append-special``: after the document's end symbol, if any).  Returns the number of ids."""
        tok = self.tok
        max_id = tok._max_id
        check_format(fmt, max_id)
        txt = fmt == "txt"
        written = 0
        sep = b""
        if tok.doc_start_id is not None:
            out.write(format_ids(array("I", [tok.doc_start_id]).tobytes(), fmt, max_id))
            written, sep = 1, b" "
        for data, n in self._encoded(stream, fmt, chunk_bytes, strict):
            if not n:
                continue
            if txt and sep:
                out.write(sep)
            out.write(data)
            written += n
            sep = b" "
        if tok.doc_end_id is not None:
            if txt and sep:
                out.write(sep)
            out.write(format_ids(array("I", [tok.doc_end_id]).tobytes(), fmt, max_id))
            written, sep = written + 1, b" "
        if append:
            if txt and sep:
                out.write(sep)
            out.write(format_ids(array("I", append).tobytes(), fmt, max_id))
            written += len(append)
        if txt:
            out.write(b"\n")
        return written


def encode_sources(encoder: ParallelEncoder, out: BinaryIO, sources, fmt: str, *, strict: bool = False,
                   append: Sequence[int] = (), skip_bad: bool = False,
                   on_bytes: Callable[[int], None] = lambda n: None) -> Tuple[int, int, int]:
    """Encodes each document of ``sources`` (``reader.Source``; a plain file is one document,
    a compressed file its decompressed text, a JSON Lines or Parquet file one document per
    record, see ``documents``) to ``out``: one line per document in ``txt``, the ids in order
    in ``u16``/``u32``, each document followed by ``append``.  ``on_bytes``: the input bytes
    read (compressed bytes for a compressed file).  Returns (ids, documents, bad records skipped, the documents' bytes)."""
    from ..inputs.documents import iter_documents
    from ..inputs.reader import naming
    from ..progress import CountingReader

    tokens = documents = text_bytes = 0
    skipped: List[int] = []
    for source in sources:
        with naming(source.name):  # (an error of the bytes, --strict-utf8's, names their file)
            if source.form is None:
                with source.reading() as stream:
                    doc = CountingReader(stream, on_bytes)
                    tokens += encoder.write(out, doc, fmt, strict=strict, append=append)
                documents, text_bytes = documents + 1, text_bytes + doc.bytes
                continue
            for stream in iter_documents(source, source.form, strict, skip_bad, on_bytes, skipped):
                doc = CountingReader(stream, lambda n: None)
                tokens += encoder.write(out, doc, fmt, strict=strict, append=append)
                documents, text_bytes = documents + 1, text_bytes + doc.bytes
    return tokens, documents, len(skipped), text_bytes


def special_id(tok: Tokenizer, text: str) -> int:
    """The id of the special token ``text`` of ``tok`` (``--append-special``), or ValueError."""
    if text not in tok.special_ids:
        known = ", ".join(repr(t) for t in tok.special_ids) or "none"
        raise TokenizerError(f"--append-special {text!r} is not a special token of this tokenizer (its special tokens: {known})")
    return tok.special_ids[text]
