"""``Tokenizer``: encode text to ids and decode ids to bytes, exactly and in streams.

Owns the id tables of a trained (or loaded) byte-level BPE: which id each byte has, the
merge ranks, the special tokens and their ids, the word-end marker and document
boundaries, and a bounded cache pretoken -> ids.  Encoding splits special tokens first
(longest match), pretokenizes the rest, and encodes each pretoken by merge rank
(``bpe.encode_by_rank``).  Streams are split with ``pretokenize.StreamSplitter``, so any
chunking gives the ids of the whole.  Reading and writing files is left to ``formats``.
"""

from __future__ import annotations

from typing import BinaryIO, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple

from array import array

from .bpe import PAIR_SHIFT, encode_by_rank

try:  # the C encoder (bpe_stream/_fastbpe.c); the Python loop below is the reference
    from . import _fastbpe
except ImportError:  # pragma: no cover - depends on the build
    _fastbpe = None
from .pretokenize import Pretokenizer, SpecialSplitter, StreamSplitter
from .reader import CHUNK_BYTES, decode_chunks, to_bytes

CACHE_ENTRIES = 1 << 17
COALESCE_CHARS = 1 << 16
SYMBOL_ROLES = ("special", "end_of_word", "doc_start", "doc_end")


class TokenizerError(ValueError):
    """A tokenizer that is inconsistent, or input it cannot encode or decode."""


class Tokenizer:
    """A byte-level BPE tokenizer.

    ``vocab``: id -> bytes.  ``merges``: ``(left, right, new)`` ids in rank order.
    ``symbols``: ``(id, role, text)`` for special tokens, the word-end marker and the
    document boundaries.  ``pretokenizer``: a name from ``pretokenize`` (``regex:...`` too).
    """

    def __init__(
        self,
        vocab: Dict[int, bytes],
        merges: Sequence[Tuple[int, int, int]],
        symbols: Sequence[Tuple[int, str, str]] = (),
        pretokenizer: str = "gpt2",
        tie_break: Optional[str] = None,
    ):
        self.vocab = dict(vocab)
        self.merges = [tuple(m) for m in merges]
        self.symbols = [tuple(s) for s in symbols]
        self.tie_break = tie_break
        self.pretokenizer = Pretokenizer.from_name(pretokenizer)
        self._check_and_index()

    # -- construction ----------------------------------------------------------------
    def _check_and_index(self) -> None:
        vocab = self.vocab
        symbol_ids = set()
        self.special_ids: Dict[str, int] = {}
        self.marker_id = self.doc_start_id = self.doc_end_id = None
        for sid, role, text in self.symbols:
            if role not in SYMBOL_ROLES:
                raise TokenizerError(f"unknown symbol role {role!r}")
            if sid not in vocab:
                raise TokenizerError(f"symbol {text!r} has id {sid}, which is not in the vocabulary")
            symbol_ids.add(sid)
            if role == "special":
                self.special_ids[text] = sid
            elif role == "end_of_word":
                self.marker_id = sid
            elif role == "doc_start":
                self.doc_start_id = sid
            else:
                self.doc_end_id = sid
        byte_ids = {}
        for tid, data in vocab.items():
            if len(data) == 1 and tid not in symbol_ids:
                byte_ids.setdefault(data[0], tid)
        missing = [b for b in range(256) if b not in byte_ids]
        if missing:
            raise TokenizerError(
                f"not a byte-level BPE: no token for byte 0x{missing[0]:02x} ({len(missing)} of 256 bytes missing)"
            )
        self.byte_ids = [byte_ids[b] for b in range(256)]
        self._native_bytes = all(self.byte_ids[b] == b for b in range(256))
        ranks: Dict[int, Tuple[int, int]] = {}
        marker_ends = set([self.marker_id]) if self.marker_id is not None else set()
        for rank, (left, right, new) in enumerate(self.merges):
            for t in (left, right, new):
                if t not in vocab:
                    raise TokenizerError(f"merge {rank} uses id {t}, which is not in the vocabulary")
            if vocab[left] + vocab[right] != vocab[new]:
                raise TokenizerError(f"merge {rank}: the bytes of {new} are not those of {left} followed by {right}")
            ranks.setdefault((left << PAIR_SHIFT) | right, (rank, new))
            if right in marker_ends:
                marker_ends.add(new)
        self.ranks = ranks
        # What each id decodes to: special tokens as their text, boundaries as nothing,
        # the word-end marker (alone or ending a merged token) as one space.
        out = dict(vocab)
        for sid, role, text in self.symbols:
            if role in ("doc_start", "doc_end"):
                out[sid] = b""
        if self.marker_id is not None:
            marker = vocab[self.marker_id]
            for tid in marker_ends:
                out[tid] = vocab[tid][: len(vocab[tid]) - len(marker)] + b" "
        self._marker_ends = frozenset(marker_ends)
        self.decode_table = out
        self._max_id = max(vocab) if vocab else -1
        if self._max_id >= 2 * len(vocab) + (1 << 20):
            raise TokenizerError(
                f"the ids reach {self._max_id} for {len(vocab)} tokens; a tokenizer's ids must be (nearly) dense"
            )
        self._dense = [out.get(i) for i in range(self._max_id + 1)]
        self.splitter = SpecialSplitter(list(self.special_ids))
        self._cache: Dict[str, List[int]] = {}
        self._encoder = None
        if _fastbpe is not None:
            self._encoder = _fastbpe.Encoder(
                [tuple(m) for m in self.merges], list(self.byte_ids),
                -1 if self.marker_id is None else self.marker_id, CACHE_ENTRIES,
            )

    @property
    def vocab_size(self) -> int:
        return len(self.vocab)

    @property
    def special_tokens(self) -> List[str]:
        return list(self.special_ids)

    @classmethod
    def load(cls, path) -> "Tokenizer":
        """Loads any supported tokenizer file or directory (the format is detected)."""
        from .formats import load_any

        return load_any(path)

    @classmethod
    def from_files(cls, vocab_json, merges_txt, special_tokens: Optional[Sequence[str]] = None) -> "Tokenizer":
        """GPT-2 style ``vocab.json`` + ``merges.txt``.  Special tokens get their vocab id, or a
        new one; ``None`` takes the vocab's tokens that no merge makes (``<|endoftext|>``)."""
        from .formats.gpt2 import load_gpt2

        return load_gpt2(vocab_json, merges_txt, special_tokens)

    def save(self, path) -> None:
        from .formats.native import save_native

        save_native(self, path)

    # -- encoding --------------------------------------------------------------------
    def _encode_pretoken(self, piece: str) -> List[int]:
        data = to_bytes(piece)
        symbols = list(data) if self._native_bytes else [self.byte_ids[b] for b in data]
        if self.marker_id is not None:
            symbols.append(self.marker_id)
        return encode_by_rank(symbols, self.ranks)

    def _encode_pretokens(self, pieces: List[str], out: List[int]) -> None:
        if self._encoder is not None:
            ids = array("I")
            ids.frombytes(self._encoder.encode(pieces))
            out += ids.tolist()
            return
        cache = self._cache
        get = cache.get
        for piece in pieces:
            ids = get(piece)
            if ids is None:
                ids = self._encode_pretoken(piece)
                if len(cache) >= CACHE_ENTRIES:
                    cache.clear()
                cache[piece] = ids
            out.extend(ids)

    def _encode_items(self, items, out: List[int]) -> None:
        for kind, value in items:
            if kind == "pretokens":
                self._encode_pretokens(value, out)
            else:
                out.append(self.special_ids[value])

    def encode_raw_items(self, items) -> List[int]:
        """The ids of ``("text", piece)`` / ``("special", token)`` items, each text piece
        pretokenized on its own (``StreamSplitter(raw=True)`` output)."""
        out: List[int] = []
        for kind, value in items:
            if kind == "special":
                out.append(self.special_ids[value])
            else:
                self._encode_pretokens(self.pretokenizer.split(value), out)
        return out

    def encode(self, text: str) -> List[int]:
        """The ids of ``text`` (one document); special tokens in it are recognised."""
        out: List[int] = []
        if self.doc_start_id is not None:
            out.append(self.doc_start_id)
        for is_special, piece in self.splitter.split(text):
            if is_special:
                out.append(self.special_ids[piece])
            else:
                self._encode_pretokens(self.pretokenizer.split(piece), out)
        if self.doc_end_id is not None:
            out.append(self.doc_end_id)
        return out

    def encode_iterable(self, chunks: Iterable[str]) -> Iterator[int]:
        """Lazily encodes text given in chunks (e.g. a file's lines), in constant memory;
        yields the same ids as ``encode("".join(chunks))``."""
        for batch in self.encode_chunks(chunks):
            yield from batch

    def encode_chunks(self, chunks: Iterable[str]) -> Iterator[List[int]]:
        """Like :meth:`encode_iterable` but yields lists of ids, one per decided piece.
        Small chunks (a file's lines) are gathered up to ``COALESCE_CHARS`` first: the ids
        do not depend on the chunking, and one feed per line costs more than the encoding."""
        stream = StreamSplitter(self.pretokenizer, self.splitter)
        if self.doc_start_id is not None:
            yield [self.doc_start_id]
        pending: List[str] = []
        size = 0
        for chunk in chunks:
            pending.append(chunk)
            size += len(chunk)
            if size < COALESCE_CHARS:
                continue
            out: List[int] = []
            self._encode_items(stream.feed("".join(pending)), out)
            pending, size = [], 0
            if out:
                yield out
        out = []
        if pending:
            self._encode_items(stream.feed("".join(pending)), out)
        self._encode_items(stream.end_document(), out)
        if self.doc_end_id is not None:
            out.append(self.doc_end_id)
        if out:
            yield out

    def encode_stream(self, stream: BinaryIO, chunk_bytes: int = CHUNK_BYTES, strict: bool = False) -> Iterator[List[int]]:
        """Encodes a binary stream (one document) chunk by chunk; invalid UTF-8 is kept exactly."""
        texts = (text for text, _, _, _ in decode_chunks(stream, chunk_bytes, strict))
        return self.encode_chunks(texts)

    # -- decoding --------------------------------------------------------------------
    def decode_bytes(self, ids: Iterable[int]) -> bytes:
        """The exact bytes behind ``ids``."""
        return b"".join(self.decode_chunks([list(ids)]))

    def decode(self, ids: Iterable[int]) -> str:
        """``decode_bytes`` as text; bytes that are not UTF-8 become U+FFFD."""
        return self.decode_bytes(ids).decode("utf-8", errors="replace")

    def _lookup(self, ids: List[int]) -> List[bytes]:
        dense = self._dense
        try:
            out = [dense[i] if i >= 0 else None for i in ids]
        except (IndexError, TypeError):
            out = [None]
        if None in out:
            bad = next(i for i in ids if not isinstance(i, int) or i < 0 or i > self._max_id or dense[i] is None)
            raise TokenizerError(f"id {bad} is not in the vocabulary (ids are 0..{self._max_id})")
        return out

    def decode_chunks(self, id_batches: Iterable[Sequence[int]]) -> Iterator[bytes]:
        """Streams the bytes of batches of ids.

        With a word-end marker, each marker becomes one space except the last of a
        document (before the document-end symbol, or at the end of the stream), which is
        dropped; the space is therefore held back until the next token shows which it is.
        """
        if self.marker_id is None:
            for ids in id_batches:
                if ids:
                    yield b"".join(self._lookup(list(ids)))
            return
        pending_space = False
        ends, doc_end = self._marker_ends, self.doc_end_id
        for ids in id_batches:
            ids = list(ids)
            parts = self._lookup(ids)
            out = []
            for tid, data in zip(ids, parts):
                if tid == doc_end:
                    pending_space = False
                    continue
                if not data:
                    continue
                if pending_space:
                    out.append(b" ")
                    pending_space = False
                if tid in ends:
                    out.append(data[:-1])
                    pending_space = True
                else:
                    out.append(data)
            if out:
                yield b"".join(out)

    def token_bytes(self, tid: int) -> bytes:
        return self.vocab[tid]
