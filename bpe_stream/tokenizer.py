"""``Tokenizer``: encode text to ids and decode ids to bytes, exactly and in streams.

Owns the id tables of a trained (or loaded) byte-level BPE: which id each byte has, the
merge ranks, the special tokens and their ids, the word-end marker and document
boundaries, and a bounded cache pretoken -> ids.  Encoding splits special tokens first
(longest match), pretokenizes the rest (``gpt2`` through :func:`gpt2_split`, which gives
the same pretokens faster), and encodes each pretoken by merge rank (the C encoder, or
``bpe.encode_by_rank``).  With the C extension built and a named pretokenizer, all of that
runs in C on the text's UTF-8 bytes instead (``_native_ids``: csrc/textencoder.c, with its
own bounded cache), giving the same ids.  Streams are split with
``pretokenize.StreamSplitter``, so any chunking gives the ids of the whole.  ``encode_text_bytes`` and ``encode_raw_items_bytes``
return the ids as native uint32 ``bytes`` (no list of ints: what the CLI writes).
Reading and writing files is left to ``formats``.
"""

from __future__ import annotations

import re as _re
from array import array
from itertools import compress
from typing import BinaryIO, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple

import regex

from .bpe import PAIR_SHIFT, encode_by_rank

from .native import fastbpe as _fastbpe  # the C encoder (csrc/encoder.c); bpe.encode_by_rank is the reference
from .pretokenize import ASCII_PATTERNS, GPT2_PATTERN, Pretokenizer, SpecialSplitter, StreamSplitter
from .reader import CHUNK_BYTES, decode_chunks, to_bytes
from .scan import NATIVE_PATTERNS

CACHE_ENTRIES = 1 << 17
COALESCE_CHARS = 1 << 16
SYMBOL_ROLES = ("special", "end_of_word", "doc_start", "doc_end")

# -- gpt2 pretokens, faster ------------------------------------------------------------------
# Pretokenizing is most of the encoding time, and Python's ``re`` runs gpt2's pattern about
# twice as fast as ``regex`` -- but ``re`` has no \p{L} or \p{N}.  On ASCII text the pattern
# below is gpt2's exactly: there ``regex``'s \p{L}, \p{N} and \s are [A-Za-z], [0-9] and
# [\t\n\v\f\r ] (checked when first used).  Text that is not all ASCII is cut at gpt2's
# safe cuts (a space after a non-space, as ``pretokenize.safe_cut``) around each stretch
# of non-ASCII characters less than ``_ISLAND_GAP`` apart; those stretches go to ``regex``
# (so mostly non-ASCII text is one stretch: no slower), the ASCII runs between them to ``re``.
_GPT2_SOURCE = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
_GPT2_ASCII = _re.compile(ASCII_PATTERNS["gpt2"])  # gpt2's matches on ASCII text
_ISLAND_GAP = 64  # about where a separate ``regex`` call (~3 us) costs what ``re`` saves on the gap
_ISLAND = _re.compile(rf"[^\x00-\x7f]+(?:[\x00-\x7f]{{1,{_ISLAND_GAP}}}[^\x00-\x7f]+)*")
_LAST_CUT = regex.compile(r"(?r)(?<=\S)\s")  # searched backwards: the last cut in a range
_NEXT_CUT = regex.compile(r"(?<=\S)\s")
_GPT2_FINDALL = regex.compile(GPT2_PATTERN).findall
_ascii_exact: Optional[bool] = None


def _ascii_classes_agree() -> bool:
    global _ascii_exact
    if _ascii_exact is None:
        want = [(r"\p{L}", r"[A-Za-z]"), (r"\p{N}", r"[0-9]"), (r"\s", r"\s")]
        _ascii_exact = GPT2_PATTERN == _GPT2_SOURCE and all(
            bool(regex.match(u, chr(c))) == bool(_re.match(a, chr(c), _re.ASCII)) for u, a in want for c in range(128)
        )
    return _ascii_exact


def gpt2_split(text: str) -> List[str]:
    """``Pretokenizer.from_name("gpt2").split(text)``, faster on mostly-ASCII text."""
    if text.isascii():
        return _GPT2_ASCII.findall(text)
    ascii_findall, find_island = _GPT2_ASCII.findall, _ISLAND.search
    last_cut, next_cut = _LAST_CUT.search, _NEXT_CUT.search
    out: List[str] = []
    pos, end = 0, len(text)
    while pos < end:
        m = find_island(text, pos)
        if m is None:
            out += ascii_findall(text, pos)
            break
        cut = last_cut(text, pos, m.start() + 1)  # the word holding the first non-ASCII character starts here ...
        start = cut.start() if cut is not None and cut.start() > pos else pos
        cut = next_cut(text, m.end())  # ... and the word holding the last one ends here
        stop = cut.start() if cut is not None else end
        if start > pos:
            out += ascii_findall(text, pos, start)  # (pos, endpos: as if the text were cut there)
        out += _GPT2_FINDALL(text[start:stop])
        pos = stop
    return out


class TokenizerError(ValueError):
    """A tokenizer that is inconsistent, or input it cannot encode or decode."""


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
        self.merges = list(map(tuple, merges))
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
        self._check_merges()
        self._ranks: Optional[Dict[int, Tuple[int, int]]] = None  # built on first use (``ranks``)
        marker_ends = set([self.marker_id]) if self.marker_id is not None else set()
        if marker_ends:
            for left, right, new in self.merges:
                if right in marker_ends:
                    marker_ends.add(new)
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
        self._dense = list(map(out.get, range(self._max_id + 1)))
        self.splitter = SpecialSplitter(list(self.special_ids))
        # pretokens of special-free text, as ``self.pretokenizer.split`` gives them
        self._split = gpt2_split if self.pretokenizer.name == "gpt2" and _ascii_classes_agree() else self.pretokenizer.split
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
            ids.frombytes(self._c_ids(pieces))
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

    def _c_ids(self, pieces: List[str]) -> bytes:
        """The C encoder's ids of ``pieces`` (native-order uint32 ``bytes``)."""
        try:
            return self._encoder.encode(pieces)
        except OverflowError as exc:  # a pretoken past the encoder's 32-bit positions
            raise TokenizerError(f"a pretoken is too large for the encoder ({exc})") from None

    def _pretoken_ids(self, pieces: List[str]) -> bytes:
        """The ids of ``pieces`` as native-order uint32 ``bytes`` (what the C encoder returns)."""
        if self._encoder is not None:
            return self._c_ids(pieces)
        out: List[int] = []
        self._encode_pretokens(pieces, out)
        return array("I", out).tobytes()

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

    def _append_text_ids(self, text: str, out: List[int]) -> None:
        """Appends the ids of ``text``, which holds no special token, to ``out``."""
        if self._native():
            ids = array("I")
            ids.frombytes(self._text_ids(text))
            out += ids.tolist()
        else:
            self._encode_pretokens(self._split(text), out)

    def encode_raw_items_bytes(self, items) -> bytes:
        """:meth:`encode_raw_items` as native-order uint32 ``bytes``: no list of ints is made."""
        specials = self._special_bytes
        parts = []
        for kind, value in items:
            if kind == "special":
                parts.append(specials[value])
            else:
                parts.append(self._text_ids(value))
        return b"".join(parts)

    def encode_text_bytes(self, text: str) -> bytes:
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

    def _encode_items(self, items, out: List[int]) -> None:
        """Appends the ids of ``StreamSplitter`` items (``raw`` or not) to ``out``."""
        for kind, value in items:
            if kind == "text":
                self._append_text_ids(value, out)
            elif kind == "pretokens":
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
                self._append_text_ids(value, out)
        return out

    def encode(self, text: str) -> List[int]:
        """The ids of ``text`` (one document); special tokens in it are recognised."""
        ids = array("I")
        ids.frombytes(self.encode_text_bytes(text))  # one list at the end, not one per piece
        out = ids.tolist()
        if self.doc_start_id is not None:
            out.insert(0, self.doc_start_id)
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
        stream = StreamSplitter(self.pretokenizer, self.splitter, raw=True)  # pretokenized here: self._split
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
            shown = bad if not isinstance(bad, int) or abs(bad) < 10 ** 30 else f"of {bad.bit_length():,} bits"
            raise TokenizerError(f"id {shown} is not in the vocabulary (ids are 0..{self._max_id})")
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
