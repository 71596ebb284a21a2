"""Pretoken counts keyed by bytes: fed with text, merged and handed on packed.

A :class:`CountTable` counts the pretokens of the bytes it is fed (``feed(data, pattern)``,
for the patterns of ``bpe_stream.pretok.scan``), takes counts one by one (``add``) or packed
(``merge``), and gives them as one ``bytes`` object (``pack``), a dict (``to_dict``) or two
lists in key order (``sorted_items``, what the store adds in one pass).
The packed form -- for each entry, in insertion order, a little-endian u32 length, the
pretoken's bytes and a little-endian u64 count -- lets a worker hand its partial counts to
the parent without a Python object per pretoken.  Packed in key order (``pack(sorted=True)``)
it is a *run*: a worker's runs are merged by the parent in one sequential pass
(:func:`merge_runs`, k-way, equal keys summed) into the sorted lists the store takes, or into
one run (:func:`merge_runs_packed`) to hold a batch's counts without their repeats -- natively
on several threads when the runs are large (:func:`merge_threads`), the same bytes.

>>> a, b = PyCountTable(), PyCountTable()
>>> a.feed(b"ab a ab", "gpt2"), b.feed(b"ab b", "gpt2")
(3, 2)
>>> merge_runs([a.pack(sorted=True), b.pack(sorted=True)])
([b' a', b' ab', b' b', b'ab'], [1, 1, 1, 2])

``CountTable`` is the native table (``bpe_stream._fastbpe.CountTable``: scanning and counting
in C, counts in native memory) when the extension is built, and :class:`PyCountTable`
(the same behaviour, packed bytes included, on a dict and ``regex``) when it is not.
"""

from __future__ import annotations

import os
import re
import struct
from functools import cache
from heapq import merge as _heap_merge
from typing import Dict, Iterator, List, Mapping, Sequence, Tuple

from ..pretok.scan import scan_with_regex

from ..native import fastbpe as _native

NativeCountTable = _native.CountTable if _native is not None else None  # None without a C compiler

MAX_COUNT = (1 << 64) - 1
MAX_KEY_BYTES = (1 << 32) - 1
_LENGTH = struct.Struct("<I")
_COUNT = struct.Struct("<Q")


def pack_counts(counts: Mapping[bytes, int]) -> bytes:
    """``counts`` in the packed form, in the mapping's order."""
    parts = []
    for key, count in counts.items():
        parts += (_LENGTH.pack(len(key)), key, _COUNT.pack(count))
    return b"".join(parts)


def iter_packed(packed) -> Iterator[Tuple[bytes, int]]:
    """The ``(key, count)`` entries of a packed buffer; ValueError where it stops parsing."""
    view = memoryview(packed).cast("B")
    off, end = 0, len(view)
    while off < end:
        if end - off < _LENGTH.size:
            raise ValueError("packed counts are malformed (entries before the fault were merged)")
        (length,) = _LENGTH.unpack_from(view, off)
        key_end = off + _LENGTH.size + length
        if key_end + _COUNT.size > end:
            raise ValueError("packed counts are malformed (entries before the fault were merged)")
        yield bytes(view[off + _LENGTH.size:key_end]), _COUNT.unpack_from(view, key_end)[0]
        off = key_end + _COUNT.size


def unpack_counts(packed) -> Dict[bytes, int]:
    """A packed buffer as a dict (a key packed twice gets the sum)."""
    table = PyCountTable()
    table.merge(packed)
    return table.to_dict()


@cache
def special_split(specials: Tuple[bytes, ...]):
    """``re.split`` on the special tokens' bytes, longest first: at each position the
    longest token wins and scanning goes left to right, as ``pretokenize.SpecialSplitter``
    does on text.  That is the same split: a special token is UTF-8 that starts at a
    character and ends with one, so its bytes match exactly where its characters do in the
    text decoded with ``surrogateescape`` (every byte that is not UTF-8 decodes to a
    surrogate of its own)."""
    ordered = sorted(specials, key=len, reverse=True)
    return re.compile(b"(" + b"|".join(map(re.escape, ordered)) + b")").split


class PyCountTable:
    """The native ``CountTable`` in Python: the same results, errors and packed bytes."""

    def __init__(self):
        self._counts: Dict[bytes, int] = {}
        self.total = 0
        self.key_bytes = 0  # the sum of the keys' lengths (a batch's memory estimate)

    def __len__(self) -> int:
        return len(self._counts)

    def feed(self, data, pattern: str, max_bytes: int = 0) -> int:
        """Counts the pretokens of ``data`` for ``pattern`` (longer than ``max_bytes``: their
        pieces); returns how many there were."""
        tokens = scan_with_regex(data, pattern, max_bytes)
        for token in tokens:
            self.add(token)
        return len(tokens)

    def feed_between(self, data, pattern: str, max_bytes: int, specials: List[bytes]) -> Tuple[int, int]:
        """:meth:`feed` of each stretch of ``data`` between the special tokens ``specials``
        (found left to right, the longest at a position first; not counted); returns
        (pretokens, specials found).

        >>> PyCountTable().feed_between(b"a<|e|>b c<|e|>", "gpt2", 0, [b"<|e|>"])
        (3, 2)
        """
        if not all(isinstance(t, bytes) and t for t in specials):
            raise TypeError("specials must be non-empty bytes")
        parts = special_split(tuple(specials))(data) if specials else [data]
        pretokens = 0
        for stretch in parts[::2]:  # text, special, text, ..., text
            if stretch:
                pretokens += self.feed(stretch, pattern, max_bytes)
        return pretokens, len(parts) // 2

    def add(self, key, count: int = 1) -> None:
        key = bytes(memoryview(key))  # bytes-like only, as the native table
        if not isinstance(count, int):
            raise TypeError(f"count must be an int, not {type(count).__name__}")
        if count < 0:
            raise OverflowError("can't convert negative int to unsigned")
        if count > MAX_COUNT - self.total or len(key) > MAX_KEY_BYTES:
            raise OverflowError("count table limit: a pretoken over 4 GiB or counts over 2**64-1")
        held = self._counts.get(key)
        if held is None:
            self.key_bytes += len(key)
        self._counts[key] = (held or 0) + count
        self.total += count

    def merge(self, packed) -> None:
        """Adds the counts of a packed buffer (what :meth:`pack` gives)."""
        for key, count in iter_packed(packed):
            self.add(key, count)

    def pack(self, *, sorted: bool = False) -> bytes:  # noqa: A002 - the native keyword
        if sorted:
            items = list(self._counts.items())
            items.sort()  # (keys are distinct: the counts never decide)
            return pack_counts(dict(items))
        return pack_counts(self._counts)

    def to_dict(self) -> Dict[bytes, int]:
        return dict(self._counts)

    def sorted_items(self) -> Tuple[List[bytes], List[int]]:
        """The keys in increasing order and their counts: ``([b"a", b"ab"], [3, 1])``."""
        keys = sorted(self._counts)
        return keys, list(map(self._counts.__getitem__, keys))

    def clear(self) -> None:
        self._counts.clear()
        self.total = self.key_bytes = 0


def _run_entries(run) -> Iterator[Tuple[bytes, int]]:
    """The entries of one run, checked to be in strictly increasing key order."""
    previous = None
    try:
        for key, count in iter_packed(run):
            if previous is not None and key <= previous:
                raise ValueError
            previous = key
            yield key, count
    except ValueError:
        raise ValueError("a run of counts is malformed or not in increasing key order") from None


def py_merge_runs(runs: Sequence) -> Tuple[List[bytes], List[int]]:
    """The native ``merge_runs`` in Python (``heapq.merge``): the same lists and errors."""
    keys: List[bytes] = []
    counts: List[int] = []
    for key, count in _heap_merge(*map(_run_entries, runs)):
        if keys and keys[-1] == key:
            counts[-1] += count
        else:
            keys.append(key)
            counts.append(count)
        if counts[-1] > MAX_COUNT:
            raise OverflowError("count table limit: a pretoken over 4 GiB or counts over 2**64-1")
    return keys, counts


def py_merge_runs_packed(runs: Sequence, *, threads: int = 1) -> Tuple[bytes, int]:
    """The native ``merge_runs_packed`` in Python (``threads``: taken, unused)."""
    keys, counts = py_merge_runs(runs)
    return pack_counts(dict(zip(keys, counts))), len(keys)


# Runs smaller than this in all are merged on one thread: a thread's start and the walk that
# indexes the runs for the split would cost more than the few milliseconds saved.
PARALLEL_MERGE_BYTES = 4 << 20


def merge_threads(runs: Sequence) -> int:
    """The threads the native merge of ``runs`` uses: one per run up to the machine's CPUs (the
    key space is split between them), one for small runs."""
    if len(runs) < 2 or sum(map(len, runs)) < PARALLEL_MERGE_BYTES:
        return 1
    return min(len(runs), os.cpu_count() or 1)


def _native_merge_runs_packed(runs: Sequence) -> Tuple[bytes, int]:
    return _native.merge_runs_packed(runs, threads=merge_threads(runs))


CountTable = NativeCountTable if NativeCountTable is not None else PyCountTable
merge_runs = _native.merge_runs if _native is not None else py_merge_runs
merge_runs_packed = _native_merge_runs_packed if _native is not None else py_merge_runs_packed
