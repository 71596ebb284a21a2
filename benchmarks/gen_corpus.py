"""Generate realistic web-like text with a long tail of distinct pretokens, deterministically.

    .venv/bin/python benchmarks/gen_corpus.py --bytes 400M [--seed 1] [--tail-rate 0.1] [-o FILE]

What it writes (UTF-8, LF line ends; documents separated by a line holding only
``<|endoftext|>``, as in ``../shared/data/corpora``):

* **English words, Zipf-distributed**: the vocabulary is the 60,000 most frequent words
  (letters, with an apostrophe ending such as ``don't``) of the first 16 MB of
  ``corpora/en_100M.txt`` (or, when that file is missing, synthetic syllable words, shortest
  first), ranked by frequency and drawn with probability ``1 / (rank + 2.7) ** 1.0``
  (Zipf-Mandelbrot), joined by spaces, commas, full stops, line and paragraph breaks;
  a document ends after 600 items on average (~3.5 KB).
* **A long tail of rare forms** (``--tail-rate`` of the items, 10 % by default): rare
  syllable words, identifiers (camelCase and snake_case), numbers (mostly short, some long),
  hex ids (``0x...`` and commit-like), URLs (host, TLD, path, query) and runs of CJK
  characters with no spaces (CJK punctuation inside).  Under the GPT-2 pattern the default
  gives ~18,000 distinct pretokens per MB in the first 20 MB, 1.45 million in 100 MB and
  over 5 million in 400 MB, about 13,000 more per further MB: the shape of the "generated
  web-like text" of ``../shared/data/README.md`` (400 MB, 5.25 million).

Deterministic: the same ``--seed``, ``--tail-rate`` and vocabulary give the same bytes,
whatever ``--workers``, and a shorter output is a prefix of a longer one (up to the cut at
the last whole line): chunk ``i`` (262,144 items, ~1.6 MB) is drawn by its own generator
seeded with ``(seed, i)``.  Fast: no Python object per item -- each kind is drawn as a byte
matrix with numpy, and the chunk is one gather through an index built with a cumulative
sum; about 30-40 MB per CPU-second, and ``--workers 2`` runs two chunks at a time.

Without ``-o`` the file goes to a new temporary directory (its path is printed on stdout);
writing inside the repository is refused.  Library use: :func:`generate`.
"""

from __future__ import annotations

import argparse
import collections
import itertools
import os
import re
import resource
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Iterator, List, Optional, Sequence

import numpy as np

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
DATA = REPO.parent / "shared" / "data"
DEFAULT_SOURCE = DATA / "corpora" / "en_100M.txt"
SPECIAL = "<|endoftext|>"
CHUNK_ITEMS = 1 << 18  # items drawn at a time (~1.6 MB of text; bigger arrays page-fault more)
VOCAB_SOURCE_BYTES = 16_000_000
VOCAB_WORDS = 60_000
ZIPF_S, ZIPF_Q = 1.0, 2.7
DOC_ITEMS = 600  # mean items per document (~3.5 KB)
WORD_TABLE_CELLS = 1 << 21
SMALL_TABLE_CELLS = 1 << 16

# separators written before an item: (text, weight)
SEPARATORS = [
    (" ", 820), (", ", 50), (". ", 50), (".\n", 20), ("\n", 20), ("\n\n", 15), (" (", 5), (") ", 5),
    (": ", 5), ("; ", 4), (" - ", 3), ('. "', 2), ('" ', 2), ("? ", 2), ("! ", 1), ("\n- ", 3), ("\n  ", 2),
]
# the tail kinds and their shares of the tail
TAIL_KINDS = [("rare_word", 0.25), ("identifier", 0.20), ("number", 0.25), ("hex", 0.08), ("url", 0.07), ("cjk", 0.15)]
CONSONANTS = "bbbccddddffgghhjkkllllmmmnnnnnnppqrrrrrrsssssstttttttvvwwxyyz"
VOWELS = "aaaaeeeeeeiiiiooooouuy"
HEX = "0123456789abcdef"
TLDS = ["com", "org", "net", "io", "de", "co.uk", "ru", "jp", "cn", "fr", "info", "dev", "edu", "gov"]
SCHEMES = ["https://", "http://", "https://www.", "http://www."]
PATH_SEPS = ["/", "/", "/", "-", "_", "."]
CJK_FIRST, CJK_COUNT = 0x4E00, 0x9FFF - 0x4E00 + 1
CJK_PUNCT = [0xFF0C, 0x3001, 0x3002]  # fullwidth comma, ideographic comma, ideographic full stop


def parse_size(text: str) -> int:
    m = re.fullmatch(r"\s*([\d.]+)\s*([kKmMgGtT]?)[bB]?\s*", str(text))
    if not m:
        raise ValueError(f"not a size: {text!r} (use e.g. 400M, 5G or a number of bytes)")
    return int(float(m.group(1)) * 1000 ** " KMGT".index(m.group(2).upper() or " "))


# -- the vocabulary ---------------------------------------------------------------------
def english_vocabulary(source: Optional[Path] = DEFAULT_SOURCE, words: int = VOCAB_WORDS, seed: int = 0) -> List[str]:
    """The ``words`` most frequent words (letters and an apostrophe ending, case kept) of the
    first 16 MB of ``source``, most frequent first (ties by the word); synthetic syllable
    words when the file is missing."""
    if source is not None and Path(source).exists():
        with open(source, "rb") as f:
            text = f.read(VOCAB_SOURCE_BYTES).decode("utf-8", "ignore")
        word = re.compile(r"[A-Za-z]+(?:'[a-z]+)?")
        counts: Counter = Counter()
        start = 0
        while start < len(text):  # in pieces cut at spaces: the list of matches stays small
            end = text.find(" ", start + (1 << 20))
            end = len(text) if end < 0 else end
            counts.update(word.findall(text, start, end))
            start = end
        ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
        return [w for w, c in ranked[:words] if c >= 2]
    rng = np.random.default_rng([seed, 7])
    codes, _ = _syllable_codes(rng, words * 2, 1, 10, 10)
    return sorted(dict.fromkeys(_strings(codes)), key=len)[:words]  # short words are the frequent ones


# -- vectorised byte building ------------------------------------------------------------
# Every kind is built as a matrix of bytes, one row per item, with zeros wherever there is
# nothing (at the end or inside); ``M[M != 0]`` is then the items' concatenation in order.
def _table(chars: str) -> np.ndarray:
    return np.frombuffer(chars.encode("ascii"), dtype=np.uint8)


_CONS, _VOW, _HEX = _table(CONSONANTS), _table(VOWELS), _table(HEX)


def _padded(strings: Sequence[str]) -> np.ndarray:
    """A small table of strings as a 0-padded byte matrix."""
    data = [x.encode("utf-8") for x in strings]
    out = np.zeros((len(data), max(len(d) for d in data)), dtype=np.uint8)
    for i, d in enumerate(data):
        out[i, : len(d)] = np.frombuffer(d, dtype=np.uint8)
    return out


_SCHEMES, _TLDS, _PATH_SEPS = _padded(SCHEMES), _padded(TLDS), _padded(PATH_SEPS)


def _strings(matrix: np.ndarray) -> List[str]:
    """Rows of a byte matrix as strings (for tests and a look at the output)."""
    return [bytes(row[row != 0]).decode("utf-8") for row in matrix]


def _syllable_codes(rng, n: int, lo: int, hi: int, width: int):
    """Letters alternating consonant / vowel, ``lo``..``hi`` long (``width`` >= hi)."""
    lens = rng.integers(lo, hi + 1, n)
    col = np.arange(width)
    start = rng.integers(0, 2, n)[:, None]
    cons = _CONS[rng.integers(0, len(_CONS), (n, width))]
    vows = _VOW[rng.integers(0, len(_VOW), (n, width))]
    codes = np.where((col + start) % 2 == 0, cons, vows)
    codes[col >= lens[:, None]] = 0
    return codes, lens


def rare_words(rng, n: int) -> np.ndarray:
    codes, _ = _syllable_codes(rng, n, 5, 12, 12)
    cap = rng.random(n) < 0.2
    codes[cap, 0] -= 32  # capitalised
    return codes


def identifiers(rng, n: int) -> np.ndarray:
    """camelCase (60 %) or snake_case, 6-18 letters."""
    codes, lens = _syllable_codes(rng, n, 6, 18, 18)
    camel = rng.random(n) < 0.6
    for _ in range(3):  # up to three humps / underscores, inside the word
        pos = 2 + (rng.random(n) * np.maximum(lens - 4, 1)).astype(np.int64)
        use = rng.random(n) < 0.7
        rows = np.nonzero(use & camel)[0]
        at = codes[rows, pos[rows]]
        codes[rows, pos[rows]] = np.where(at >= 97, at - 32, at)
        rows = np.nonzero(use & ~camel)[0]
        codes[rows, pos[rows]] = ord("_")
    return codes


def numbers(rng, n: int) -> np.ndarray:
    """Decimal integers: mostly 1-4 digits (they repeat), a tail of long ones (they do not)."""
    digits = rng.choice(np.arange(1, 11), size=n, p=[0.25, 0.22, 0.15, 0.12, 0.07, 0.06, 0.05, 0.04, 0.02, 0.02])
    codes = (48 + rng.integers(0, 10, (n, 10))).astype(np.uint8)
    codes[:, 0] = 49 + rng.integers(0, 9, n)  # no leading zero
    codes[np.arange(10) >= digits[:, None]] = 0
    return codes


def hex_ids(rng, n: int) -> np.ndarray:
    """``0x`` + 8 hex digits (40 %) or 7-16 bare hex digits (commit-like)."""
    lens = rng.integers(7, 17, n)
    codes = _HEX[rng.integers(0, 16, (n, 16))]
    prefixed = rng.random(n) < 0.4
    lens[prefixed] = 8
    codes[np.arange(16) >= lens[:, None]] = 0
    zero_x = np.zeros((n, 2), dtype=np.uint8)
    zero_x[prefixed] = (ord("0"), ord("x"))
    return np.hstack([zero_x, codes])


def urls(rng, n: int) -> np.ndarray:
    """scheme + host + TLD + path (+ a second segment) (+ ``?id=NUMBER``)."""
    shape = rng.integers(0, 4, n)
    path2 = _syllable_codes(rng, n, 3, 9, 9)[0]
    sep = _PATH_SEPS[rng.integers(0, len(_PATH_SEPS), n)]
    path2[shape < 1], sep[shape < 1] = 0, 0
    query = np.hstack([np.tile(_table("?id="), (n, 1)), numbers(rng, n)])
    query[shape < 2] = 0
    one = lambda c: np.full((n, 1), ord(c), dtype=np.uint8)  # noqa: E731
    return np.hstack([
        _SCHEMES[rng.integers(0, len(_SCHEMES), n)], _syllable_codes(rng, n, 4, 10, 10)[0], one("."),
        _TLDS[rng.integers(0, len(_TLDS), n)], one("/"), _syllable_codes(rng, n, 3, 9, 9)[0], sep, path2, query,
    ])


def _cjk_utf8_table(cells: int = 1 << 16) -> np.ndarray:
    """UTF-8 of the CJK characters a uniform uint16 picks: low code points (the common
    characters of the block) more likely (u ** 3)."""
    u = (np.arange(cells, dtype=np.float64) + 0.5) / cells
    cp = (CJK_FIRST + CJK_COUNT * u ** 3).astype(np.uint32)
    return _utf8_3(cp)


def _utf8_3(cp: np.ndarray) -> np.ndarray:
    """Code points of 3 UTF-8 bytes (U+0800..U+FFFF) -> their bytes, in a last axis of 3."""
    out = np.empty(cp.shape + (3,), dtype=np.uint8)
    out[..., 0] = 0xE0 | (cp >> 12)
    out[..., 1] = 0x80 | ((cp >> 6) & 0x3F)
    out[..., 2] = 0x80 | (cp & 0x3F)
    return out


_CJK_UTF8 = _cjk_utf8_table()
_CJK_PUNCT_UTF8 = _utf8_3(np.array(CJK_PUNCT, dtype=np.uint32))


def cjk_runs(rng, n: int) -> np.ndarray:
    """2-30 CJK characters with no spaces (common ones more likely), CJK punctuation inside
    (8 % of the characters after the first); UTF-8."""
    width = 30
    lens = rng.integers(2, width + 1, n)
    chars = _CJK_UTF8.view("V3").ravel()[rng.integers(0, len(_CJK_UTF8), (n, width), dtype=np.uint16)]
    punct = rng.integers(0, 100, (n, width), dtype=np.uint8) < 8
    punct[:, 0] = False
    chars[punct] = _CJK_PUNCT_UTF8.view("V3").ravel()[rng.integers(0, len(CJK_PUNCT), int(punct.sum()))]
    out = chars.view(np.uint8).reshape(n, width * 3)
    out[np.arange(width * 3) >= 3 * lens[:, None]] = 0
    return out


TAIL_MAKERS = {"rare_word": rare_words, "identifier": identifiers, "number": numbers, "hex": hex_ids, "url": urls,
               "cjk": cjk_runs}


def _ragged(strings: Sequence[str]):
    """Strings -> (concatenated bytes as uint8, start offsets, lengths)."""
    data = [x.encode("utf-8") for x in strings]
    lens = np.array([len(d) for d in data], dtype=np.int64)
    starts = np.concatenate([[0], np.cumsum(lens)[:-1]]).astype(np.int64)
    return np.frombuffer(b"".join(data), dtype=np.uint8), starts, lens


# -- the generator --------------------------------------------------------------------------
def _cells(probabilities: Sequence[float], cells: int) -> np.ndarray:
    """A look-up table for drawing from a categorical distribution with one random integer:
    ``table[rng.integers(0, cells)]`` is category ``i`` with probability ~``probabilities[i]``."""
    cdf = np.cumsum(np.asarray(probabilities, dtype=np.float64) / np.sum(probabilities))
    mids = (np.arange(cells, dtype=np.float64) + 0.5) / cells
    return np.minimum(np.searchsorted(cdf, mids, side="right"), len(cdf) - 1).astype(np.int32)


class Generator:
    """Chunk ``i`` of the text is drawn with its own random generator (seeded by
    ``(seed, i)``), so chunks can be made in any order or in parallel with the same bytes."""

    def __init__(self, seed: int = 1, tail_rate: float = 0.1, vocabulary: Optional[List[str]] = None,
                 chunk_items: int = CHUNK_ITEMS):
        if not 0 <= tail_rate < 1:
            raise ValueError("tail_rate must be in [0, 1)")
        self.seed, self.tail_rate, self.chunk_items = seed, tail_rate, chunk_items
        words = vocabulary if vocabulary is not None else english_vocabulary(seed=seed)
        # Zipf-Mandelbrot over the ranks; the rarest of 60,000 words has probability ~2e-6,
        # so even it spans several of the 2M cells of the table (uint16: 4 MB, cache-friendly)
        if len(words) > 65535:
            raise ValueError("at most 65,535 vocabulary words")
        ranks = np.arange(1, len(words) + 1, dtype=np.float64)
        self.word_table = _cells((ranks + ZIPF_Q) ** -ZIPF_S, WORD_TABLE_CELLS).astype(np.uint16)
        # separators, the last one ending a document (one item in DOC_ITEMS)
        seps = [s for s, _ in SEPARATORS] + [f".\n{SPECIAL}\n"]
        weights = np.array([w for _, w in SEPARATORS], dtype=np.float64)
        weights = np.append(weights / weights.sum() * (1 - 1 / DOC_ITEMS), 1 / DOC_ITEMS)
        self.doc_sep = len(SEPARATORS)
        self.sep_table = _cells(weights, SMALL_TABLE_CELLS)
        shares = np.array([share for _, share in TAIL_KINDS], dtype=np.float64)
        self.kind_table = _cells(np.append(1.0 - tail_rate, shares / shares.sum() * tail_rate), SMALL_TABLE_CELLS)
        # the fixed sources: words, then separators; each chunk's tail items follow them
        words_flat, self.word_start, self.word_len = _ragged(words)
        seps_flat, sep_start, self.sep_len = _ragged(seps)
        self.sep_start = sep_start + len(words_flat)
        self.fixed = np.concatenate([words_flat, seps_flat])

    def chunk(self, index: int) -> bytes:
        """The ``index``-th piece of the text (``chunk_items`` separators and items)."""
        n = self.chunk_items
        rng = np.random.default_rng([self.seed, index])
        draw = rng.integers(0, 1 << 32, n, dtype=np.uint32)  # 16 bits for the kind, 16 for the separator
        kinds = self.kind_table[draw & 0xFFFF]
        sep = self.sep_table[draw >> 16]
        if index == 0:
            sep[0] = 0  # the text starts with a word (after a space, dropped below)
        src = np.empty(2 * n, dtype=np.int64)  # where each segment (separator, item, ...) starts in `sources`
        seg_len = np.empty(2 * n, dtype=np.int64)
        src[0::2], seg_len[0::2] = self.sep_start[sep], self.sep_len[sep]
        head = np.nonzero(kinds == 0)[0]
        word = self.word_table[rng.integers(0, WORD_TABLE_CELLS, len(head), dtype=np.uint32)]
        src[2 * head + 1], seg_len[2 * head + 1] = self.word_start[word], self.word_len[word]
        parts, offset = [self.fixed], len(self.fixed)
        for k, (name, _) in enumerate(TAIL_KINDS, start=1):
            where = np.nonzero(kinds == k)[0]
            if not len(where):
                continue
            matrix = TAIL_MAKERS[name](rng, len(where))
            keep = matrix != 0
            lens = keep.sum(axis=1)
            flat = matrix[keep]
            src[2 * where + 1] = offset + np.cumsum(lens) - lens
            seg_len[2 * where + 1] = lens
            parts.append(flat)
            offset += len(flat)
        sources = np.concatenate(parts)
        # the gather index of every output byte: +1 inside a segment, a jump at each segment's
        # start (every segment is at least one byte long), summed up (int32: a chunk's sources
        # stay far below 2 GB)
        out_start = np.cumsum(seg_len) - seg_len
        step = np.ones(int(out_start[-1] + seg_len[-1]), dtype=np.int32)
        step[0] = src[0]
        step[out_start[1:]] = src[1:] - src[:-1] - seg_len[:-1] + 1
        data = sources[np.cumsum(step, dtype=np.int32)].tobytes()
        return data[1:] if index == 0 else data


_WORKER_GENERATOR: Optional[Generator] = None


def _worker_chunk(index: int) -> bytes:
    return _WORKER_GENERATOR.chunk(index)


def chunks(gen: Generator, workers: int = 1) -> Iterator[bytes]:
    """Chunks 0, 1, 2, ... for ever; with ``workers`` > 1 made by a fork pool, in order."""
    global _WORKER_GENERATOR
    if workers <= 1:
        yield from (gen.chunk(i) for i in itertools.count())
        return
    import multiprocessing

    _WORKER_GENERATOR = gen  # inherited by the forked workers
    # A window of 2 * workers chunks in flight, and the pool closed and joined -- the chunks
    # in flight finished -- once the caller has enough, never terminated: Pool.terminate
    # (what `with Pool()` does on exit) kills workers that may hold the pool's queue locks,
    # and its shutdown then hangs now and then (seen twice on 2026-12-05, first with imap
    # over an endless count, then with this window).
    pool = multiprocessing.get_context("fork").Pool(workers)
    try:
        ahead = collections.deque(pool.apply_async(_worker_chunk, (i,)) for i in range(2 * workers))
        for i in itertools.count(2 * workers):
            yield ahead.popleft().get()
            ahead.append(pool.apply_async(_worker_chunk, (i,)))
    finally:
        pool.close()
        pool.join()


def generate(path: str, nbytes: int, seed: int = 1, tail_rate: float = 0.1, vocabulary_source: Optional[str] = None,
             workers: int = 1, quiet: bool = True) -> dict:
    """Writes about ``nbytes`` bytes (cut back to a whole line) to ``path``; returns
    ``{"seconds", "cpu_seconds", "bytes", "documents", "mb_s", "path", "seed", ...}``
    (``seconds``: generating and writing, building the vocabulary excluded; ``cpu_seconds``
    includes the workers').  The bytes do not depend on ``workers``."""
    path = os.path.abspath(path)
    if is_inside_repo(path):
        raise ValueError(f"refusing to write {path}: generated corpora go to a temporary directory, not the repository")
    source = Path(vocabulary_source) if vocabulary_source else DEFAULT_SOURCE
    t0 = time.perf_counter()
    vocab = english_vocabulary(source, seed=seed)
    vocab_seconds = time.perf_counter() - t0
    gen = Generator(seed, tail_rate, vocab)
    written, docs, n_chunks = 0, 0, 0
    special_line = f"\n{SPECIAL}\n".encode()
    t0, c0, k0 = time.perf_counter(), time.process_time(), _children_cpu()
    stream = chunks(gen, workers)
    try:
        with open(path, "wb") as f:
            for data in stream:
                n_chunks += 1
                last = written + len(data) >= nbytes
                if last:
                    cut = data.rfind(b"\n", 0, nbytes - written)
                    data = data[: cut + 1] if cut >= 0 else data[: nbytes - written] + b"\n"
                    while data.endswith(special_line):  # no empty last document
                        data = data[: -len(special_line) + 1]
                f.write(data)
                docs += data.count(special_line)
                written += len(data)
                if last:
                    break
                if not quiet:
                    print(f"\r{written / 1e6:,.0f} MB", end="", file=sys.stderr, flush=True)
    finally:
        stream.close()  # stops the pool (its workers are reaped: their CPU time counts below)
    seconds = time.perf_counter() - t0
    cpu = time.process_time() - c0 + _children_cpu() - k0
    if not quiet:
        print(file=sys.stderr)
    return {"seconds": seconds, "cpu_seconds": cpu, "bytes": written, "documents": docs + 1, "chunks": n_chunks,
            "mb_s": written / 1e6 / seconds, "mb_per_cpu_second": written / 1e6 / cpu if cpu else None, "path": path,
            "seed": seed, "tail_rate": tail_rate, "workers": workers, "vocabulary_words": len(vocab),
            "vocabulary_source": str(source) if source.exists() else "synthetic", "vocabulary_seconds": vocab_seconds}


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def is_inside_repo(path: str) -> bool:
    try:
        Path(path).resolve().relative_to(REPO)
        return True
    except ValueError:
        return False


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--bytes", required=True, help="about how much to write: 400M, 5G, 20000000, ...")
    p.add_argument("-o", "--output", help="the file to write (default: corpus.txt in a new temporary directory)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--tail-rate", type=float, default=0.1, help="share of rare-form items (default 0.1)")
    p.add_argument("--vocabulary-source", default=None,
                   help=f"text to take the English words from (default {DEFAULT_SOURCE})")
    p.add_argument("--workers", "-w", type=int, default=1, help="processes drawing chunks (same bytes; default 1)")
    p.add_argument("--quiet", "-q", action="store_true")
    args = p.parse_args(argv)
    out = args.output or os.path.join(tempfile.mkdtemp(prefix="bpe-gen-"), "corpus.txt")
    try:
        info = generate(out, parse_size(args.bytes), args.seed, args.tail_rate, args.vocabulary_source,
                        workers=args.workers, quiet=args.quiet)
    except ValueError as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return 1
    if not args.quiet:
        print(f"wrote {info['bytes']:,} bytes, {info['documents']:,} documents in {info['seconds']:.1f} s "
              f"({info['mb_s']:.1f} MB/s, {info['mb_per_cpu_second']:.1f} MB per CPU-second; "
              f"vocabulary of {info['vocabulary_words']:,} words in "
              f"{info['vocabulary_seconds']:.1f} s)", file=sys.stderr)
    print(info["path"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
