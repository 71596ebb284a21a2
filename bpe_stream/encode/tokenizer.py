"""``Tokenizer``: encode text to ids and decode ids to bytes, exactly and in streams.

Owns the id tables of a trained (or loaded) byte-level BPE: which id each byte has, the
merge ranks, the special tokens and their ids, the word-end marker and document
boundaries, and a bounded cache pretoken -> ids.  Encoding splits special tokens first
(longest match), pretokenizes the rest (``pretokenize.fast_split``: for ``gpt2`` the faster
``gpt2_split``), and encodes each pretoken by merge rank (the C encoder, or
``bpe.encode_by_rank``).  With the C extension built and a named pretokenizer, all of that
runs in C on the text's UTF-8 bytes instead (``_native_ids``: csrc/textencoder.c, with its
own bounded cache), giving the same ids.  Streams are split with
``pretokenize.StreamSplitter``, so any chunking gives the ids of the whole.  Reading and
writing files is left to ``formats``.

The public surface: ``encode``, ``encode_bytes``, ``encode_iterable`` and ``encode_stream``
(one document as text, bytes, text chunks or a binary stream), ``decode`` and
``decode_bytes``; ``load``, ``from_files`` and ``save``; ``vocab_size``, ``special_tokens``
and ``token_bytes``.  The private ``_encode_text_bytes``, ``_encode_raw_items_bytes`` (ids as
native uint32 ``bytes``, what the CLI's workers format), ``_native_ids`` (the native path's
ids of UTF-8 bytes, formatted) and ``_decode_chunks`` (the bytes of batches of ids, what the
CLI's decode streams) serve the package's own encode, decode and eval.  The examples in the
methods' docstrings use the ``tok`` built in the class docstring (``tests/test_doctests.py``
runs that one first).
"""

from __future__ import annotations

from array import array
from itertools import compress
from typing import BinaryIO, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple

from ..bpe import PAIR_SHIFT, encode_by_rank
from ..errors import UserError
from ..native import fastbpe as _fastbpe  # the C encoder (csrc/encoder.c); bpe.encode_by_rank is the reference
from ..pretok.pretokenize import Pretokenizer, SpecialSplitter, StreamSplitter, fast_split
from ..inputs.reader import CHUNK_BYTES, decode_chunks, from_bytes, to_bytes
from ..pretok.scan import NATIVE_PATTERNS

CACHE_ENTRIES = 1 << 17
COALESCE_CHARS = 1 << 16
SYMBOL_ROLES = ("special", "end_of_word", "doc_start", "doc_end")


class TokenizerError(UserError, ValueError):
    """A tokenizer that is inconsistent, or input it cannot encode or decode."""


# -- the library's arguments: the types it takes, named when wrong (as HF ``tokenizers`` does) --
def _type(value) -> str:
    return "None" if value is None else type(value).__name__


def text_list(value, name: str) -> List[str]:
    """A list of texts given as ``name`` (special tokens): str items, or bytes of UTF-8 text.
    One str where a list is meant is a TypeError, not its characters one by one."""
    if value is None:
        return []
    if isinstance(value, (str, bytes, bytearray)):
        raise TypeError(f"{name} takes a list of str, not one {_type(value)}: pass [{value!r}]")
    try:
        items = list(value)
    except TypeError:
        raise TypeError(f"{name} takes a list of str, not {_type(value)}") from None
    out = []
    for item in items:
        if isinstance(item, (bytes, bytearray)):
            try:
                item = bytes(item).decode("utf-8")
            except UnicodeDecodeError:
                raise ValueError(f"{name}: {bytes(item)!r} is not UTF-8 text") from None
        if not isinstance(item, str):
            raise TypeError(f"{name} takes a list of str, not a list holding {_type(item)}")
        out.append(item)
    return out


def check_pretokenizer(value) -> str:
    if not isinstance(value, str):
        raise TypeError(f"pretokenizer takes a name (str: 'gpt2', 'cl100k', 'regex:...'), not {_type(value)}")
    return value


def _utf8(text: str) -> bytes:
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        raise TokenizerError(f"the symbol {text!r} is not valid UTF-8 text") from None


class Tokenizer:
    """A byte-level BPE tokenizer.

    ``vocab``: id -> bytes.  ``merges``: ``(left, right, new)`` ids in rank order.
    ``symbols``: ``(id, role, text)`` for special tokens, the word-end marker and the
    document boundaries.  ``pretokenizer``: a name from ``pretokenize`` (``regex:...`` too).

    The tokenizer of ``../shared/spec/seed-examples.md`` (4), with a special token: the
    bytes are ids 0..255, merge 0 makes ``ab`` (256), merge 1 ``bc`` (257).

    >>> vocab = {i: bytes([i]) for i in range(256)} | {256: b"ab", 257: b"bc", 258: b"<|end|>"}
    >>> tok = Tokenizer(vocab, [(97, 98, 256), (98, 99, 257)], [(258, "special", "<|end|>")],
    ...                 pretokenizer="whitespace")
    >>> tok.encode("abc")  # merge rank, not frequency: ab + c, never a + bc
    [256, 99]
    >>> tok.decode([256, 99, 258])
    'abc<|end|>'
    """

    def __init__(
        self,
        vocab: Dict[int, bytes],
        merges: Sequence[Tuple[int, int, int]],
        symbols: Sequence[Tuple[int, str, str]] = (),
        pretokenizer: str = "gpt2",
        tie_break: Optional[str] = None,
        max_token_bytes: Optional[int] = None,
    ):
        if not isinstance(vocab, dict):
            raise TypeError(f"vocab takes a dict of id -> bytes, not {_type(vocab)}")
        check_pretokenizer(pretokenizer)
        self.vocab = dict(vocab)
        self.merges = list(map(tuple, merges))
        self.symbols = [tuple(s) for s in symbols]
        self.tie_break = tie_break
        # pretokens longer than max_token_bytes are encoded as their pieces, as they were counted
        self.pretokenizer = Pretokenizer.from_name(pretokenizer, max_token_bytes)
        self._check_and_index()

    @property
    def max_token_bytes(self) -> Optional[int]:
        """The pretokens' cap (``count --max-token-bytes`` of the store it was trained on), or None."""
        return self.pretokenizer.max_bytes

    # -- construction ----------------------------------------------------------------
    def _check_and_index(self) -> None:
        """Check the symbols, the byte tokens and the merges, then build what decode and
        encode look up (in that order: the first failed check is the one reported)."""
        symbol_ids = self._index_symbols()
        self._index_bytes(symbol_ids)
        self._check_merges()
        self._ranks: Optional[Dict[int, Tuple[int, int]]] = None  # built on first use (``ranks``)
        self._index_decoding()
        self._index_encoding()

    def _index_symbols(self) -> set:
        """Check each symbol against the vocabulary and note its role's id; return the ids."""
        vocab = self.vocab
        symbol_ids = set()
        self.special_ids: Dict[str, int] = {}
        self.marker_id = self.doc_start_id = self.doc_end_id = None
        for sid, role, text in self.symbols:
            if role not in SYMBOL_ROLES:
                raise TokenizerError(f"unknown symbol role {role!r}")
            if sid not in vocab:
                raise TokenizerError(f"symbol {text!r} has id {sid}, which is not in the vocabulary")
            if role in ("special", "end_of_word") and vocab[sid] != _utf8(text):
                # encode finds the text, decode writes the bytes: they must be one and the same
                raise TokenizerError(
                    f"the {'special token' if role == 'special' else 'word-end marker'} {text!r} (id {sid}) is "
                    f"stored as the bytes {vocab[sid][:40]!r}, not as its text"
                )
            symbol_ids.add(sid)
            if role == "special":
                self.special_ids[text] = sid
            elif role == "end_of_word":
                self.marker_id = sid
            elif role == "doc_start":
                self.doc_start_id = sid
            else:
                self.doc_end_id = sid
        return symbol_ids

    def _index_bytes(self, symbol_ids: set) -> None:
        """``byte_ids``: the token of each of the 256 bytes (symbols aside); fails on a missing one."""
        vocab = self.vocab
        byte_ids = {}
        # The one-byte tokens, in vocabulary order (C-level filter: the vocabulary is large).
        for tid in compress(vocab, map((1).__eq__, map(len, vocab.values()))):
            if tid not in symbol_ids:
                byte_ids.setdefault(vocab[tid][0], tid)
        missing = [b for b in range(256) if b not in byte_ids]
        if missing:
            raise TokenizerError(
                f"not a byte-level BPE: no token for byte 0x{missing[0]:02x} ({len(missing)} of 256 bytes missing)"
            )
        self.byte_ids = [byte_ids[b] for b in range(256)]
        self._native_bytes = all(self.byte_ids[b] == b for b in range(256))

    def _index_decoding(self) -> None:
        """The dense id -> bytes table decode reads (and the ids that end in the word-end marker);
        fails when the ids are too sparse for it."""
        vocab = self.vocab
        marker_ends = set([self.marker_id]) if self.marker_id is not None else set()
        if marker_ends:
            for _left, right, new in self.merges:
                if right in marker_ends:
                    marker_ends.add(new)
        # What each id decodes to: special tokens as their text, boundaries as nothing,
        # the word-end marker (alone or ending a merged token) as one space.
        out = dict(vocab)
        for sid, role, _text in self.symbols:
            if role in ("doc_start", "doc_end"):
                out[sid] = b""
        if self.marker_id is not None:
            marker = vocab[self.marker_id]
            for tid in marker_ends:
                out[tid] = vocab[tid][: len(vocab[tid]) - len(marker)] + b" "
        self._marker_ends = frozenset(marker_ends)
        self._max_id = max(vocab) if vocab else -1
        if self._max_id >= 2 * len(vocab) + (1 << 20):
            raise TokenizerError(
                f"the ids reach {self._max_id} for {len(vocab)} tokens; a tokenizer's ids must be (nearly) dense"
            )
        self._dense = list(map(out.get, range(self._max_id + 1)))

    def _index_encoding(self) -> None:
        """The special-token splitter, the pretokenizer's split, the cache and (when the C
        extension is there) the C encoder."""
        self.splitter = SpecialSplitter(list(self.special_ids))
        # pretokens of special-free text, as ``self.pretokenizer.split`` gives them
        self._split = fast_split(self.pretokenizer)
        self._special_bytes = {text: array("I", [sid]).tobytes() for text, sid in self.special_ids.items()}
        self._cache: Dict[str, List[int]] = {}
        self._encoder = None
        # the C encoder pretokenizes too (encode_text) for the patterns of the native scanner
        self._native_pattern = self.pretokenizer.name in NATIVE_PATTERNS
        if _fastbpe is not None:
            try:
                self._encoder = _fastbpe.Encoder(
                    merges=self.merges, byte_ids=list(self.byte_ids),
                    marker=-1 if self.marker_id is None else self.marker_id, cache_limit=CACHE_ENTRIES,
                    pattern=self.pretokenizer.name if self._native_pattern else None,
                    specials=[(_utf8(text), sid) for text, sid in self.special_ids.items()],
                    max_bytes=self.pretokenizer.max_bytes or 0,
                )
            except OverflowError as exc:
                raise TokenizerError(f"the tokenizer is too large for the encoder ({exc})") from None

    def _check_merges(self) -> None:
        """Every merge joins two tokens of the vocabulary into the token of their bytes
        (one tight pass; when it fails, a second one finds and names the first bad merge)."""
        vocab, merges = self.vocab, self.merges
        try:
            if not [1 for left, right, new in merges if vocab[left] + vocab[right] != vocab[new]]:
                return
        except (KeyError, TypeError, ValueError):
            pass
        for rank, (left, right, new) in enumerate(merges):
            for t in (left, right, new):
                if t not in vocab:
                    raise TokenizerError(f"merge {rank} uses id {t}, which is not in the vocabulary")
            if vocab[left] + vocab[right] != vocab[new]:
                raise TokenizerError(f"merge {rank}: the bytes of {new} are not those of {left} followed by {right}")

    @property
    def ranks(self) -> Dict[int, Tuple[int, int]]:
        """Packed pair -> ``(rank, new id)``, the first merge of each pair (for ``bpe.encode_by_rank``)."""
        if self._ranks is None:
            ranks: Dict[int, Tuple[int, int]] = {}
            for rank, (left, right, new) in enumerate(self.merges):
                ranks.setdefault((left << PAIR_SHIFT) | right, (rank, new))
            self._ranks = ranks
        return self._ranks

    @property
    def vocab_size(self) -> int:
        """How many tokens there are (bytes, merged tokens and symbols).

        >>> tok.vocab_size
        259
        """
        return len(self.vocab)

    @property
    def special_tokens(self) -> List[str]:
        """The special tokens' texts.

        >>> tok.special_tokens
        ['<|end|>']
        """
        return list(self.special_ids)

    @classmethod
    def load(cls, path) -> "Tokenizer":
        """Loads any supported tokenizer file or directory (the format is detected).

        >>> import os, tempfile
        >>> with tempfile.TemporaryDirectory() as d:
        ...     tok.save(os.path.join(d, "tok.json"))
        ...     Tokenizer.load(os.path.join(d, "tok.json")).encode("abc<|end|>")
        [256, 99, 258]
        """
        import os

        if not isinstance(path, (str, os.PathLike)):
            raise TypeError(f"Tokenizer.load takes a path (str or os.PathLike), not {_type(path)}")
        from ..formats import load_any

        return load_any(path)

    @classmethod
    def from_files(cls, vocab_json, merges_txt, special_tokens: Optional[Sequence[str]] = None) -> "Tokenizer":
        """GPT-2 style ``vocab.json`` + ``merges.txt``.  Special tokens get their vocab id, or a
        new one; ``None`` takes the vocab's tokens that no merge makes (``<|endoftext|>``).

        >>> import tempfile
        >>> from bpe_stream.formats.gpt2 import save_gpt2
        >>> with tempfile.TemporaryDirectory() as d:
        ...     vocab_json, merges_txt = save_gpt2(Tokenizer(tok.vocab, tok.merges, tok.symbols), d)[:2]
        ...     again = Tokenizer.from_files(vocab_json, merges_txt)
        >>> again.special_tokens, again.encode("abc<|end|>")
        (['<|end|>'], [256, 99, 258])
        """
        from ..formats.gpt2 import load_gpt2

        return load_gpt2(vocab_json, merges_txt, special_tokens)

    @classmethod
    def from_vocab_merges(cls, vocab: Dict[int, bytes], merges: Sequence[Tuple[bytes, bytes]],
                          special_tokens: Optional[Sequence[str]] = None, pretokenizer: str = "gpt2") -> "Tokenizer":
        """From what ``train_bpe`` returns (CS336's shape): id -> bytes, and the merges as byte
        pairs in order.  Special tokens as in :meth:`from_files`.  :meth:`to_vocab_merges`
        is the inverse.

        >>> again = Tokenizer.from_vocab_merges(*tok.to_vocab_merges(), pretokenizer="whitespace")
        >>> again.special_tokens, again.encode("abc<|end|>"), again.to_vocab_merges()[1]
        (['<|end|>'], [256, 99, 258], [(b'a', b'b'), (b'b', b'c')])
        """
        from ..formats.vocab_merges import from_vocab_merges

        if not isinstance(vocab, dict):
            raise TypeError(f"vocab takes a dict of id -> bytes (what train_bpe returns), not {_type(vocab)}")
        if isinstance(merges, (str, bytes)) or not all(
                isinstance(m, (tuple, list)) and len(m) == 2 and all(isinstance(x, (bytes, bytearray)) for x in m)
                for m in merges):
            raise TypeError("merges takes a list of (bytes, bytes) pairs (what train_bpe returns)")
        specials = None if special_tokens is None else text_list(special_tokens, "special_tokens")
        return from_vocab_merges(vocab, merges, specials, check_pretokenizer(pretokenizer))

    def to_vocab_merges(self) -> Tuple[Dict[int, bytes], List[Tuple[bytes, bytes]]]:
        """``(vocab, merges)`` in ``train_bpe``'s shape (see :meth:`from_vocab_merges`)."""
        from ..formats.vocab_merges import to_vocab_merges

        return to_vocab_merges(self)

    def save(self, path) -> None:
        """Writes the native tokenizer file at ``path`` (atomically; :meth:`load` reads it)."""
        from ..formats.native import save_native

        save_native(self, path)

    # -- encoding: the public surface ------------------------------------------------
    def encode(self, text: str) -> List[int]:
        """The ids of ``text`` (one document): special tokens in it are recognised, each
        pretoken is merged by rank (``abc`` is ``ab`` + ``c``: merge 0 comes first).

        >>> tok.encode("abc ab<|end|>")
        [256, 99, 32, 256, 258]
        """
        if not isinstance(text, str):
            hint = "; use encode_bytes for bytes" if isinstance(text, (bytes, bytearray)) else ""
            raise TypeError(f"encode takes text (str), not {_type(text)}{hint}")
        return self._document(self._encode_text_bytes(text))

    def encode_bytes(self, data: bytes) -> List[int]:
        """The ids of the bytes ``data`` (one document), as the CLI encodes a file: bytes that
        are not UTF-8 are kept exactly, so :meth:`decode_bytes` gives ``data`` back.

        >>> tok.encode_bytes(b"ab\\xff")
        [256, 255]
        >>> tok.decode_bytes([256, 255])
        b'ab\\xff'
        """
        if self._native():  # the bytes as they are: no text is made
            return self._document(self._native_ids(data)[0])
        return self.encode(from_bytes(data))

    def encode_iterable(self, chunks: Iterable[str]) -> Iterator[int]:
        """Lazily encodes text given in chunks (e.g. a file's lines), in constant memory;
        yields the same ids as ``encode("".join(chunks))``, however the text is cut.

        >>> list(tok.encode_iterable(["a", "bc a", "b<|e", "nd|>"]))
        [256, 99, 32, 256, 258]
        """
        for batch in self._encode_chunks(chunks):
            yield from batch

    def encode_stream(self, stream: BinaryIO, chunk_bytes: int = CHUNK_BYTES, strict: bool = False) -> Iterator[List[int]]:
        """Encodes a binary stream (one document) read ``chunk_bytes`` at a time, in batches
        of ids: :meth:`encode_bytes` in constant memory.  Bytes that are not UTF-8 are kept
        exactly, or with ``strict`` are an ``reader.InputError`` naming their offset.

        >>> import io
        >>> list(tok.encode_stream(io.BytesIO(b"abc ab\\xff"), chunk_bytes=2))
        [[256, 99, 32, 256, 255]]
        """
        texts = (text for text, _, _, _ in decode_chunks(stream, chunk_bytes, strict))
        return self._encode_chunks(texts)

    # -- encoding: what the public surface is made of ---------------------------------
    def _document(self, ids: bytes) -> List[int]:
        """A document's ids from those of its text (native uint32 ``bytes``): one list at the
        end, not one per piece, with the document boundaries."""
        out = _ids(ids)
        if self.doc_start_id is not None:
            out.insert(0, self.doc_start_id)
        if self.doc_end_id is not None:
            out.append(self.doc_end_id)
        return out

    def _encode_pretoken(self, piece: str) -> List[int]:
        data = to_bytes(piece)
        symbols = list(data) if self._native_bytes else [self.byte_ids[b] for b in data]
        if self.marker_id is not None:
            symbols.append(self.marker_id)
        return encode_by_rank(symbols, self.ranks)

    def _python_ids(self, pieces: List[str]) -> List[int]:
        """The ids of ``pieces`` by ``bpe.encode_by_rank`` (no C encoder), through the cache."""
        out: List[int] = []
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
        return out

    def _pretoken_ids(self, pieces: List[str]) -> bytes:
        """The ids of ``pieces`` as native-order uint32 ``bytes`` (what the C encoder returns)."""
        if self._encoder is None:
            return array("I", self._python_ids(pieces)).tobytes()
        try:
            return self._encoder.encode(pieces)
        except OverflowError as exc:  # a pretoken past the encoder's 32-bit positions
            raise TokenizerError(f"a pretoken is too large for the encoder ({exc})") from None

    # -- the native path: UTF-8 bytes to ids in C -------------------------------------
    def _native(self) -> bool:
        """Whether the C encoder pretokenizes too: it is built, for a named pretokenizer."""
        return self._native_pattern and self._encoder is not None

    def _native_ids(self, data, fmt: str = "ids", specials: bool = True) -> Tuple[bytes, int]:
        """The ids of the UTF-8 bytes ``data`` (invalid bytes kept, as decoding with
        ``surrogateescape`` keeps them) in ``fmt`` -- ``ids`` (native uint32), ``u32``,
        ``u16``, ``txt`` as ``ids_io.format_ids`` writes them -- and how many they are.
        ``specials``: split on special tokens (False: ``data`` holds none).  Needs :meth:`_native`."""
        try:
            return self._encoder.encode_text(data, fmt, specials)
        except OverflowError as exc:  # a pretoken past the encoder's 32-bit positions
            raise TokenizerError(f"a pretoken is too large for the encoder ({exc})") from None

    def _native_input(self, text: str) -> Optional[bytes]:
        """The bytes of ``text`` for :meth:`_native_ids`, or None when they do not decode
        back to ``text`` -- lone surrogates that are not escaped bytes, or escaped bytes that
        together are UTF-8 -- and only the str path sees what ``text`` holds."""
        try:
            return text.encode("utf-8")
        except UnicodeEncodeError:
            pass
        try:
            data = to_bytes(text)
        except UnicodeEncodeError:
            return None
        return data if data.decode("utf-8", "surrogateescape") == text else None

    def _text_ids(self, text: str) -> bytes:
        """The ids of ``text``, which holds no special token, as native-order uint32 ``bytes``."""
        data = self._native_input(text) if self._native() else None
        if data is not None:
            return self._native_ids(data, specials=False)[0]
        return self._pretoken_ids(self._split(text))

    def _encode_raw_items_bytes(self, items) -> bytes:
        """The ids of ``("text", piece)`` / ``("special", token)`` items (``StreamSplitter``
        output), each text piece pretokenized on its own, as native-order uint32 ``bytes``."""
        specials = self._special_bytes
        parts = []
        for kind, value in items:
            if kind == "special":
                parts.append(specials[value])
            else:
                parts.append(self._text_ids(value))
        return b"".join(parts)

    def _encode_text_bytes(self, text: str) -> bytes:
        """The ids of ``text`` as native-order uint32 ``bytes``, special tokens recognised,
        without the document boundaries: a safe piece of a document (or a whole one)."""
        data = self._native_input(text) if self._native() else None
        if data is not None:
            return self._native_ids(data)[0]
        split = self._split
        if self.splitter.regex is None:
            return self._pretoken_ids(split(text)) if text else b""
        specials = self._special_bytes
        parts = []
        for is_special, piece in self.splitter.split(text):
            parts.append(specials[piece] if is_special else self._pretoken_ids(split(piece)))
        return b"".join(parts)

    def _encode_chunks(self, chunks: Iterable[str]) -> Iterator[List[int]]:
        """Like :meth:`encode_iterable` but yields lists of ids, one per decided piece.
        Small chunks (a file's lines) are gathered up to ``COALESCE_CHARS`` first: the ids
        do not depend on the chunking, and one feed per line costs more than the encoding."""
        stream = StreamSplitter(self.pretokenizer, self.splitter)  # pretokenized here: self._split
        if self.doc_start_id is not None:
            yield [self.doc_start_id]
        pending: List[str] = []
        size = 0
        for chunk in chunks:
            pending.append(chunk)
            size += len(chunk)
            if size < COALESCE_CHARS:
                continue
            out = _ids(self._encode_raw_items_bytes(stream.feed("".join(pending))))
            pending, size = [], 0
            if out:
                yield out
        tail = stream.feed("".join(pending), final=True)  # the rest, and all that was held back
        out = _ids(self._encode_raw_items_bytes(tail))
        if self.doc_end_id is not None:
            out.append(self.doc_end_id)
        if out:
            yield out

    # -- decoding --------------------------------------------------------------------
    def decode_bytes(self, ids: Iterable[int]) -> bytes:
        """The exact bytes behind ``ids`` (one document).

        >>> tok.decode_bytes([256, 99, 258])
        b'abc<|end|>'
        >>> tok.decode_bytes([228])  # the first byte of a 3-byte character, alone
        b'\\xe4'
        """
        return b"".join(self._decode_chunks([_id_list(ids)]))

    def decode(self, ids: Iterable[int]) -> str:
        """:meth:`decode_bytes` as text; bytes that are not UTF-8 become U+FFFD.

        >>> tok.decode([256, 99, 32, 256, 258])
        'abc ab<|end|>'
        >>> tok.decode([228])
        '\\ufffd'
        """
        return self.decode_bytes(ids).decode("utf-8", errors="replace")

    def token_bytes(self, tid: int) -> bytes:
        """The bytes of the token ``tid``.

        >>> tok.token_bytes(257)
        b'bc'
        """
        return self.vocab[tid]

    def _lookup(self, ids: List[int]) -> List[bytes]:
        dense = self._dense
        try:  # (numpy's integers index as ints do; anything else is taken up below)
            out = [dense[i] if i >= 0 else None for i in ids]
        except (IndexError, TypeError):
            out = [None]
        return out if None not in out else self._lookup_checked(ids)

    def _lookup_checked(self, ids: List[int]) -> List[bytes]:
        """:meth:`_lookup` of ids that are integers of another type (``__index__``), or else the
        error of the first that is not a token's: TypeError for one that is not an integer,
        TokenizerError for one out of the vocabulary."""
        from operator import index

        dense, out = self._dense, []
        for i in ids:
            try:
                i = index(i)
            except TypeError:
                raise TypeError(f"decode takes ids (int), not {_type(i)} ({i!r})") from None
            data = dense[i] if 0 <= i <= self._max_id else None
            if data is None:
                shown = i if abs(i) < 10 ** 30 else f"of {i.bit_length():,} bits"
                raise TokenizerError(f"id {shown} is not in the vocabulary (ids are 0..{self._max_id})")
            out.append(data)
        return out

    def _decode_chunks(self, id_batches: Iterable[Sequence[int]]) -> Iterator[bytes]:
        """Streams the bytes of batches of ids.

        With a word-end marker, each marker becomes one space except the last of a
        document (before the document-end symbol, or at the end of the stream), which is
        dropped; the space is therefore held back until the next token shows which it is.
        """
        if self.marker_id is None:
            for ids in id_batches:
                if ids:
                    yield b"".join(self._lookup(ids if type(ids) is list else list(ids)))
            return
        pending_space = False
        ends, doc_end = self._marker_ends, self.doc_end_id
        for ids in id_batches:
            ids = ids if type(ids) is list else list(ids)
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


def _id_list(ids) -> List[int]:
    """``ids`` as a list: a sequence of ids, never a str (its items are checked as they are
    looked up, ``Tokenizer._lookup``: an item check of its own cost decode a fifth of its time)."""
    if isinstance(ids, (str, bytes, bytearray)) or not hasattr(ids, "__iter__"):
        raise TypeError(f"decode takes a sequence of ids (int), not {_type(ids)}")
    return ids if type(ids) is list else list(ids)


def _ids(data: bytes) -> List[int]:
    """The ids in native-order uint32 ``bytes``."""
    ids = array("I")
    ids.frombytes(data)
    return ids.tolist()
