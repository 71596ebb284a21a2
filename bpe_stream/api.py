"""The public engine API: what Ray, Spark, Dask or any other engine calls to count and encode.

Everything here is also importable from the package itself (``from bpe_stream import
count_text``); these names are stable, the modules behind them are not.  A job that counts
elsewhere follows four steps, and each step is one call:

1. :func:`count_settings` -- the counting settings, exactly as ``bpe-stream count`` records
   them in a store (pretokenizer, special tokens, end-of-word marker, pretoken cap);
2. on the workers, :func:`count_text` / :func:`count_bytes` (one document),
   :func:`count_file_range` (a range of :func:`file_ranges`) or :func:`count_file` (a whole
   file as one document): :class:`Counts`, pretoken bytes -> count, with the totals
   ``count`` keeps (bytes, documents, specials, pretokens);
3. :func:`add_counts` to add them up (in a reduce, or on the driver);
4. :func:`write_counts` to stream them into the counts interchange file (and
   :func:`read_counts` / :func:`read_counts_header` to read one back, streamed), which
   :func:`import_counts` (``bpe-stream import-counts``) adds into a store in bounded memory.

The counts of a document equal those ``bpe-stream count`` gives it: a file counted by
``count`` is one document (:func:`count_file`, or the sum of :func:`count_file_range` over
its :func:`file_ranges`), and so is each record of a JSON Lines or Parquet file
(:func:`count_text` of the record's text).  So a store made from an engine's counts is the
store one local ``count`` of the same documents makes.

After training, :func:`encode_batch` turns a batch of texts into numpy id arrays (``uint16``
or ``uint32``), with the ids ``bpe-stream encode`` writes.  numpy is needed only there, and
imported only there.
"""

from __future__ import annotations

import os
from itertools import repeat
from operator import add
from typing import Dict, Iterable, Iterator, List, Mapping, NamedTuple, Optional, Sequence, Tuple, Union

__all__ = [
    "TOTAL_KEYS", "Counts", "FileRange", "count_settings", "count_text", "count_bytes", "count_file",
    "file_ranges", "count_file_range", "add_counts", "write_counts", "read_counts", "read_counts_header",
    "import_counts", "encode_batch",
]

TOTAL_KEYS = ("bytes", "documents", "specials", "pretokens")
PathLike = Union[str, "os.PathLike[str]"]
RANGE_BYTES = 8 << 20  # ``count``'s range of a file (counting.RANGE_BYTES)


class Counts(dict):
    """Pretoken counts, ``{pretoken bytes: count}``, and ``totals``: the bytes, documents,
    special tokens and pretokens they were counted from (what a store adds to its totals).

    A ``dict``, so any engine can iterate, pickle and ship it; the totals travel with it.

    >>> c = count_text("hi hi", count_settings())
    >>> sorted(c.items()), c.totals
    ([(b' hi', 1), (b'hi', 1)], {'bytes': 5, 'documents': 1, 'specials': 0, 'pretokens': 2})
    """

    def __init__(self, counts: Union[Mapping[bytes, int], Iterable[Tuple[bytes, int]]] = (),
                 totals: Optional[Mapping[str, int]] = None):
        super().__init__(counts)
        self.totals: Dict[str, int] = dict.fromkeys(TOTAL_KEYS, 0)
        if totals:
            for key in TOTAL_KEYS:
                self.totals[key] += int(totals.get(key, 0))

    def __reduce__(self):  # pickled with its totals (plain ``dict`` pickling would drop them)
        return (Counts, (dict(self), self.totals))

    def __repr__(self) -> str:
        return f"Counts({len(self):,} pretokens, totals={self.totals})"


class FileRange(NamedTuple):
    """Bytes ``[start, end)`` of the file ``path``, cut where ``count`` cuts (see
    :func:`file_ranges`): counted apart and added up, the ranges give the file's counts.
    ``one_pretoken``: the range is pieces of one long pretoken; ``last``: the range ends the
    file (its document)."""

    path: str
    start: int
    end: int
    one_pretoken: bool = False
    last: bool = True


# -- settings --------------------------------------------------------------------------
def count_settings(pretokenizer: str = "gpt2", special_tokens: Sequence[str] = (),
                   end_of_word: Optional[str] = None, max_token_bytes: Union[int, None, str] = "default") -> dict:
    """The counting settings ``bpe-stream count`` records in a new store for these options
    (``--pretokenizer``, ``--special-token`` in order, ``--end-of-word``,
    ``--max-token-bytes``; ``"default"``: the cap a new store gets).  Bad settings raise the
    error ``count`` reports.  Pass the result to every counting call and to :func:`write_counts`.

    >>> count_settings("gpt2", ["<|endoftext|>"])["special_tokens"]
    ['<|endoftext|>']
    """
    from .count.counting import make_settings

    return make_settings(pretokenizer, special_tokens, end_of_word, max_token_bytes)


# -- counting --------------------------------------------------------------------------
def _counts_of(partial, documents: int) -> Counts:
    """A ``counting.PartialCounts`` (bytes keys) as :class:`Counts`, its document total the
    way ``count`` adds it: each special token ends a document, and so does ``documents``."""
    partial.unpacked()
    counts = Counts(partial.counter)
    counts.totals.update(bytes=partial.bytes, specials=partial.specials, pretokens=partial.pretokens,
                         documents=partial.specials + documents)
    return counts


def count_bytes(data: bytes, settings: dict) -> Counts:
    """The counts of one document given as bytes (a file's content, a record's UTF-8): bytes
    that are not UTF-8 are kept, as ``count`` keeps them.

    >>> sorted(count_bytes(b"ab\\xff", count_settings()).items())
    [(b'ab', 1), (b'\\xff', 1)]
    """
    from .count.counting import count_data_piece

    data = bytes(data)
    partial = count_data_piece(data, settings, False, 0)
    return _counts_of(partial, 1)


def count_text(text: str, settings: dict) -> Counts:
    """The counts of one document given as text (a record of a data set, a row's column)."""
    from .inputs.reader import to_bytes

    return count_bytes(to_bytes(text), settings)


def file_ranges(path: PathLike, settings: dict, range_bytes: int = RANGE_BYTES) -> List[FileRange]:
    """The file ``path`` cut into ranges of about ``range_bytes`` at the safe cuts ``count``
    uses (the pretokens of the parts are the pretokens of the whole), in order, covering it
    exactly; reads only a window around each cut.  Plan on the driver, count each range on a
    worker (:func:`count_file_range`), add up."""
    from .count.counting import pretokenizer_of
    from .inputs.streaming import file_ranges as plan

    path = os.fspath(path)
    size = os.path.getsize(path)
    specials = [t.encode("utf-8") for t in settings["special_tokens"]]
    ranges = plan(path, 0, size, pretokenizer_of(settings), specials, max(1, int(range_bytes)))
    return [FileRange(path, r.start, r.end, r.one_pretoken, i == len(ranges) - 1) for i, r in enumerate(ranges)]


def count_file_range(file_range: FileRange, settings: dict) -> Counts:
    """The counts of one range of :func:`file_ranges` (read by the worker that counts it:
    the file must be at ``file_range.path`` there).  The range that ends the file counts its
    document."""
    from .count.counting import count_range, range_settings

    path, start, end, one, last = file_range
    partial = count_range(path, start, end, range_settings(settings, one), bytes_keys=True)
    return _counts_of(partial, 1 if last else 0)


def count_file(path: PathLike, settings: dict, range_bytes: int = RANGE_BYTES) -> Counts:
    """The counts of a whole file, one document (as ``count`` counts a plain file), read a
    range at a time."""
    total = Counts()
    for r in file_ranges(path, settings, range_bytes):
        add_counts(total, count_file_range(r, settings))
    return total


def add_counts(into: Mapping[bytes, int], more: Mapping[bytes, int]) -> Mapping[bytes, int]:
    """Adds ``more`` into ``into`` (both ``{bytes: count}``; totals too when both are
    :class:`Counts`) and returns ``into``: the reduce step of every engine.

    >>> s = count_settings()
    >>> c = add_counts(count_text("a b", s), count_text("b", s))
    >>> sorted(c.items()), c.totals["documents"]
    ([(b' b', 1), (b'a', 1), (b'b', 1)], 2)
    """
    if not isinstance(into, dict):
        raise TypeError(f"add_counts adds into a dict (Counts), not {type(into).__name__}")
    if into:
        keys = list(more)
        get = into.get
        dict.update(into, zip(keys, map(add, map(get, keys, repeat(0)), more.values())))  # in C loops
    else:
        dict.update(into, more)
    totals_in, totals_more = getattr(into, "totals", None), getattr(more, "totals", None)
    if totals_in is not None and totals_more is not None:
        for key in TOTAL_KEYS:
            totals_in[key] += totals_more.get(key, 0)
    return into


# -- the interchange file ---------------------------------------------------------------
def write_counts(path: PathLike, settings: dict, counts: Union[Mapping[bytes, int], Iterable[Tuple[bytes, int]]],
                 totals: Optional[Mapping[str, int]] = None) -> Tuple[int, int]:
    """Writes the counts interchange file that ``bpe-stream import-counts`` reads, atomically
    (``-``: stdout; a name ending in ``.gz`` is compressed); returns ``(lines, sum of counts)``.

    ``counts``: a mapping (written in key order) or any iterable of ``(pretoken bytes,
    count)`` pairs -- a Spark ``toLocalIterator()``, a Ray ``iter_rows()`` -- written as it
    comes, never held whole.  ``totals`` (default: those of a :class:`Counts`) go into the
    header; without them an import adds the sum of the counts as pretokens and no bytes or
    documents."""
    from .store.counts_file import write_counts as write

    if totals is None:
        totals = getattr(counts, "totals", None)
    rows = sorted(counts.items()) if isinstance(counts, Mapping) else counts
    return write(os.fspath(path), settings, rows, dict(totals) if totals is not None else None)


def read_counts_header(path: PathLike) -> dict:
    """``{"settings": ..., "totals": ...}`` of a counts file (its first line only), settings
    normalised as ``count`` records them; a file that is not one raises ``CountsFormatError``."""
    from .store.counts_file import _open_read, _parse_header, header_settings

    path = os.fspath(path)
    with _open_read(path) as f:
        line = f.readline()
    header = _parse_header(line.rstrip(b"\n"), f"{path}: line 1: ")
    return {"settings": header_settings(header, f"{path}: "), "totals": dict(header.get("totals", {}))}


def read_counts(path: PathLike) -> Iterator[Tuple[bytes, int]]:
    """Streams the ``(pretoken bytes, count)`` pairs of a counts file, in file order (memory
    does not grow with the file); a malformed line raises ``CountsFormatError`` naming it."""
    from .store.counts_file import iter_counts

    for pretoken, n, _, _ in iter_counts(os.fspath(path)):
        yield pretoken, n


def import_counts(store: PathLike, paths: Sequence[PathLike], max_memory: int = 256 << 20,
                  again: bool = False) -> dict:
    """Adds counts files to the store at ``store`` (created with their settings if new), as
    ``bpe-stream import-counts`` does: each file checked whole first, added in batches of at
    most ``max_memory`` bytes; a file imported before is skipped (``again``: added once more).
    Returns ``{"files", "skipped", "lines", "new_unique"}``."""
    from .store.lmdb_store import Store
    from .store.merge import import_counts as add_files

    with Store.open(os.fspath(store), create=True) as st:
        return add_files(st, [os.fspath(p) for p in paths], max_memory=max_memory, again=again)


# -- encoding --------------------------------------------------------------------------
def _numpy():
    try:
        import numpy
    except ImportError:
        raise ImportError("encode_batch returns numpy arrays and needs numpy; install it with: pip install numpy") from None
    return numpy


def encode_batch(tokenizer, texts: Iterable[Union[str, bytes]], dtype: Optional[str] = None) -> list:
    """The ids of each text of ``texts`` (one document each: ``str``, or ``bytes`` whose
    invalid UTF-8 is kept as ``encode`` keeps a file's), as numpy arrays of ``dtype``
    ``"uint16"``/``"u16"`` or ``"uint32"``/``"u32"`` (default: uint16 when every id of the
    vocabulary fits, else uint32).  ``tokenizer``: a :class:`Tokenizer`, or a path in any
    format ``-t`` reads.  The ids are those ``bpe-stream encode`` writes for each document;
    ``arr.astype("<u2").tobytes()`` is its ``--format u16`` output."""
    np = _numpy()
    if not hasattr(tokenizer, "encode_bytes"):
        from .formats import load_any

        tokenizer = load_any(os.fspath(tokenizer))
    max_id = max(tokenizer.vocab) if tokenizer.vocab else 0  # as ``encode`` checks --format
    wide = {"u16": "uint16", "uint16": "uint16", "u32": "uint32", "uint32": "uint32"}
    if dtype is None:
        dtype = "uint16" if max_id <= 0xFFFF else "uint32"
    elif str(dtype) not in wide:
        raise ValueError(f"dtype must be uint16 or uint32, not {dtype!r}")
    dtype = wide[str(dtype)]
    if dtype == "uint16" and max_id > 0xFFFF:
        raise ValueError(f"uint16 holds ids up to 65535 but this vocabulary reaches {max_id}; use uint32")
    out = []
    for text in texts:
        ids = tokenizer.encode_bytes(bytes(text)) if isinstance(text, (bytes, bytearray, memoryview)) \
            else tokenizer.encode(text)
        out.append(np.asarray(ids, dtype=dtype))
    return out
