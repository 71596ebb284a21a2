"""The work each benchmark row times, run in a fresh interpreter by ``measure.measure_callable``.

Every function here is module-level, takes only picklable arguments (paths, numbers,
strings) and returns a dict whose ``"seconds"`` is the phase time taken *inside* the
process with ``time.perf_counter`` -- interpreter start-up, imports and loading the input
are outside it unless the row says otherwise -- and ``"cpu_seconds"`` the CPU time of the
same phase (``time.process_time``: all threads), which a busy machine inflates less.  Peers (``tokenizers``, ``tiktoken``,
``rustbpe``) are imported inside the functions, so this module imports without them.
"""

from __future__ import annotations

import hashlib
import os
import time
from array import array
from collections import Counter
from typing import Iterator, List, Sequence

SPECIAL = "<|endoftext|>"
SCAN_CHUNK_CHARS = 32_000_000  # the bare regex scan works on pieces of about this size


def ids_digest(ids) -> str:
    """SHA-256 of the ids as little-endian uint32 (the same bytes as ``encode --format u32``)."""
    arr = ids if isinstance(ids, array) else array("I", ids)
    if arr.itemsize != 4:
        arr = array("I", arr)
    return hashlib.sha256(arr.tobytes()).hexdigest()


def read_text(path: str) -> str:
    with open(path, "r", encoding="utf-8", errors="surrogateescape", newline="") as f:
        return f.read()


def safe_pieces(text: str, size: int) -> Iterator[str]:
    """Cuts ``text`` into pieces of about ``size`` characters at positions where a
    non-space is followed by a space: a pretoken boundary for the gpt2 pattern, so the
    pieces pretokenize exactly as the whole (see performance-notes.md)."""
    import regex

    cut = regex.compile(r"(?<=\S)\s")
    start = 0
    while len(text) - start > size:
        m = cut.search(text, start + size)
        if m is None:
            break
        yield text[start : m.start()]
        start = m.start()
    yield text[start:]


def split_specials(text: str, special: str = SPECIAL) -> List[str]:
    """The text as documents with each special token its own item (ids stay the same)."""
    out: List[str] = []
    parts = text.split(special)
    for i, part in enumerate(parts):
        if i:
            out.append(special)
        if part:
            out.append(part)
    return out


# -- pretokenization --------------------------------------------------------------------
def regex_scan(path: str) -> dict:
    """``Counter(regex.findall(GPT2_PATTERN, text))`` on one core; the read is not timed.
    Texts longer than SCAN_CHUNK_CHARS are scanned in pieces cut at safe boundaries (same
    counts, less memory for the list of matches)."""
    import regex

    from bpe_stream.pretok.pretokenize import GPT2_PATTERN

    text = read_text(path)
    regex.compile(GPT2_PATTERN)
    t0, c0 = time.perf_counter(), time.process_time()
    if len(text) <= SCAN_CHUNK_CHARS:
        counts = Counter(regex.findall(GPT2_PATTERN, text))
    else:
        counts = Counter()
        for piece in safe_pieces(text, SCAN_CHUNK_CHARS):
            counts.update(regex.findall(GPT2_PATTERN, piece))
    seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    return {"seconds": seconds, "cpu_seconds": cpu, "pretokens": sum(counts.values()), "unique": len(counts), "chunked": len(text) > SCAN_CHUNK_CHARS}


def store_write(path: str, parent_dir: str) -> dict:
    """The store write that ends a count, alone: the file's pretokens counted in a native
    table (not timed), then -- timed -- ``sorted_items`` (the sort and a bytes object per
    key) and ``Store.add_batch`` into a new store under ``parent_dir`` (py-lmdb's ``putmulti``,
    the commit and its sync), as ``count --workers 1`` does them.  With the CLI's start-up
    it is the part of a count that no scanner speeds up."""
    import shutil
    import tempfile

    from bpe_stream.count.table import NativeCountTable
    from bpe_stream.count.counting import make_settings
    from bpe_stream.store.lmdb_store import SortedCounts, Store

    with open(path, "rb") as f:
        data = f.read()
    settings = make_settings("gpt2", [SPECIAL])
    table = NativeCountTable()
    pretokens, documents = table.feed_between(data, "gpt2", 0, [SPECIAL.encode()])
    del data
    store_dir = tempfile.mkdtemp(prefix="store-write-", dir=parent_dir)
    with Store.open(store_dir, create=True) as store:
        t0, c0 = time.perf_counter(), time.process_time()
        counts = SortedCounts(*table.sorted_items())
        table.clear()
        new = store.add_batch(counts, {}, {"bytes": 0, "documents": documents, "pretokens": pretokens},
                              before=lambda txn: store.settings_in(txn, settings))
        seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    shutil.rmtree(store_dir, ignore_errors=True)
    return {"seconds": seconds, "cpu_seconds": cpu, "keys": new}


# -- training ---------------------------------------------------------------------------
def bpe_train_from_store(store_path: str, vocab_size: int) -> dict:
    """``bpe_stream.train.pipeline.train_from_store`` alone (opening the store is not timed)."""
    from bpe_stream import Store, TrainConfig, train_from_store

    with Store.open(store_path, readonly=True) as st:
        config = TrainConfig(vocab_size=vocab_size)
        t0, c0 = time.perf_counter(), time.process_time()
        tok, result = train_from_store(st, config)
        seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    return {"seconds": seconds, "cpu_seconds": cpu, "merges": len(result.merges), "vocab_size": tok.vocab_size}


def _reference_merges(path: str):
    from bpe_stream.formats.printable import from_printable

    out = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                left, right = line.rstrip("\n").split(" ")
                out.append((from_printable(left), from_printable(right)))
    return out


def bpe_train_bpe(path: str, vocab_size: int, specials: Sequence[str], reference_merges: str = "") -> dict:
    """``bpe_stream.train_bpe`` (CS336's shape: counts the file in memory, then merges)."""
    from bpe_stream import train_bpe

    t0, c0 = time.perf_counter(), time.process_time()
    vocab, merges = train_bpe(path, vocab_size, list(specials))
    seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    out = {"seconds": seconds, "cpu_seconds": cpu, "merges": len(merges), "vocab_size": len(vocab)}
    if reference_merges:
        out["matches_reference_merges"] = merges == _reference_merges(reference_merges)
    return out


def iter_documents(path: str, special: str = SPECIAL, block: int = 1 << 20) -> Iterator[str]:
    """The file's text between special tokens, read in blocks (the special token itself is
    dropped, as ``bpe-stream count --special-token`` drops it)."""
    with open(path, "r", encoding="utf-8", errors="surrogateescape", newline="") as f:
        pending = ""
        while True:
            data = f.read(block)
            if not data:
                break
            pending += data
            parts = pending.split(special)
            pending = parts.pop()
            for part in parts:
                if part:
                    yield part
        if pending:
            yield pending


def rustbpe_train(path: str, vocab_size: int, specials: Sequence[str]) -> dict:
    """rustbpe from an iterator of documents (the file split at the special token); its
    vocabulary has no special tokens, so it learns ``vocab_size - len(specials)`` tokens to
    make as many merges as the others.  Reading the file is timed (it is streamed)."""
    import rustbpe

    from bpe_stream.pretok.pretokenize import GPT2_PATTERN

    tok = rustbpe.Tokenizer()
    t0, c0 = time.perf_counter(), time.process_time()
    tok.train_from_iterator(iter_documents(path), vocab_size - len(specials), pattern=GPT2_PATTERN)
    seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    return {"seconds": seconds, "cpu_seconds": cpu, "vocab_size": tok.vocab_size, "merges": tok.vocab_size - 256}


def fast_bpe_train(path: str, vocab_size: int, specials: Sequence[str]) -> dict:
    """fast-bpe-rs ``BPE(GPT2).train`` from the list of documents (the file split at the
    special token: its ``train`` takes a sequence, so the documents are all in memory, as
    its README shows).  Like rustbpe it learns ``vocab_size - len(specials)`` tokens.  The
    read and split are timed (``read_seconds`` says how much of it they were)."""
    from fast_bpe_rs import BPE

    from bpe_stream.pretok.pretokenize import GPT2_PATTERN

    t0, c0 = time.perf_counter(), time.process_time()
    docs = list(iter_documents(path))
    read = time.perf_counter() - t0
    bpe = BPE(GPT2_PATTERN)
    bpe.train(vocab_size - len(specials), docs)
    seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    return {"seconds": seconds, "cpu_seconds": cpu, "read_seconds": read, "vocab_size": vocab_size - len(specials),
            "merges": vocab_size - len(specials) - 256}


def hf_train(paths: Sequence[str], vocab_size: int, specials: Sequence[str]) -> dict:
    """HF ``tokenizers``: BPE + ByteLevel pre-tokenizer (GPT-2 regex), BpeTrainer with the
    256 bytes as initial alphabet, trained from the files (HF reads them line by line)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(specials),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    t0, c0 = time.perf_counter(), time.process_time()
    tok.train(list(paths), trainer)
    seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    size = tok.get_vocab_size()
    return {"seconds": seconds, "cpu_seconds": cpu, "vocab_size": size, "merges": size - 256 - len(specials)}


# -- encoding ---------------------------------------------------------------------------
def bpe_encode(tokenizer: str, path: str, mode: str = "encode") -> dict:
    """``Tokenizer.encode(text)`` on the whole text already in memory (``mode="encode"``),
    or ``encode_iterable`` over the file's lines (``"iterable"``: the read is timed)."""
    from bpe_stream import Tokenizer

    tok = Tokenizer.load(tokenizer)
    if mode == "encode":
        text = read_text(path)
        t0, c0 = time.perf_counter(), time.process_time()
        ids = tok.encode(text)
        seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
        arr = array("I", ids)
    elif mode == "iterable":
        arr = array("I")
        t0, c0 = time.perf_counter(), time.process_time()
        with open(path, "r", encoding="utf-8", errors="surrogateescape", newline="") as f:
            arr.extend(tok.encode_iterable(f))
        seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    else:
        raise ValueError(f"unknown mode {mode!r}")
    return {"seconds": seconds, "cpu_seconds": cpu, "tokens": len(arr), "digest": ids_digest(arr)}


def tiktoken_encoding(tokenizer: str):
    """A ``tiktoken.Encoding`` with our vocabulary: ranks = our ids for the non-special
    tokens, our pattern, our special tokens."""
    import tiktoken

    from bpe_stream import Tokenizer

    tok = Tokenizer.load(tokenizer)
    special_ids = set(tok.special_ids.values())
    ranks = {data: tid for tid, data in tok.vocab.items() if tid not in special_ids}
    return tiktoken.Encoding(
        name="bpe-stream-bench",
        pat_str=tok.pretokenizer.pattern,
        mergeable_ranks=ranks,
        special_tokens=dict(tok.special_ids),
    )


def tiktoken_encode(tokenizer: str, path: str) -> dict:
    """tiktoken ``Encoding.encode`` (one thread) on the whole text in memory."""
    t0, c0 = time.perf_counter(), time.process_time()
    enc = tiktoken_encoding(tokenizer)
    build = time.perf_counter() - t0
    text = read_text(path)
    t0, c0 = time.perf_counter(), time.process_time()
    ids = enc.encode(text, allowed_special="all")
    seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    return {"seconds": seconds, "cpu_seconds": cpu, "build_seconds": build, "tokens": len(ids), "digest": ids_digest(ids)}


def hf_tokenizer(tokenizer: str):
    """An HF ``tokenizers.Tokenizer`` with our vocabulary and merges (GPT-2 printable form),
    the ByteLevel pre-tokenizer (the GPT-2 regex) and our special tokens."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

    from bpe_stream import Tokenizer as BpeTokenizer
    from bpe_stream.formats.printable import to_printable

    tok = BpeTokenizer.load(tokenizer)
    special_ids = set(tok.special_ids.values())
    vocab = {to_printable(data): tid for tid, data in tok.vocab.items() if tid not in special_ids}
    for text, sid in tok.special_ids.items():
        vocab.setdefault(text, sid)
    merges = [(to_printable(tok.vocab[a]), to_printable(tok.vocab[b])) for a, b, _ in tok.merges]
    hf = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    hf.decoder = decoders.ByteLevel()
    hf.add_special_tokens([AddedToken(text, special=True, normalized=False) for text in tok.special_ids])
    return hf


def hf_encode(tokenizer: str, path: str, batch: bool = False) -> dict:
    """HF ``encode`` per document in a loop (run it with RAYON_NUM_THREADS=1 for one
    thread), or ``encode_batch`` of all documents (``batch``: all cores)."""
    t0, c0 = time.perf_counter(), time.process_time()
    hf = hf_tokenizer(tokenizer)
    build = time.perf_counter() - t0
    docs = split_specials(read_text(path))
    arr = array("I")
    t0, c0 = time.perf_counter(), time.process_time()
    if batch:
        for enc in hf.encode_batch(docs, add_special_tokens=False):
            arr.extend(enc.ids)
    else:
        for doc in docs:
            arr.extend(hf.encode(doc, add_special_tokens=False).ids)
    seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    return {"seconds": seconds, "cpu_seconds": cpu, "build_seconds": build, "tokens": len(arr), "digest": ids_digest(arr)}


def tokie_encode(tokenizer: str, path: str, workdir: str) -> dict:
    """tokie (one call, ``Tokenizer.encode(text, add_special_tokens=False)``) on the whole
    text in memory, loaded from the HF ``tokenizer.json`` of our tokenizer (written by
    ``hf_tokenizer``); run it with RAYON_NUM_THREADS=1 for one core."""
    import tokie

    t0 = time.perf_counter()
    hf_json = os.path.join(workdir, "tokie-tokenizer.json")
    hf_tokenizer(tokenizer).save(hf_json)
    tok = tokie.Tokenizer.from_json(hf_json)
    build = time.perf_counter() - t0
    text = read_text(path)
    t0, c0 = time.perf_counter(), time.process_time()
    ids = tok.encode(text, add_special_tokens=False).ids
    seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    return {"seconds": seconds, "cpu_seconds": cpu, "build_seconds": build, "tokens": len(ids), "digest": ids_digest(ids)}


def stores_equal(a: str, b: str) -> bool:
    """Two stores hold the same words with the same counts and the same totals."""
    from bpe_stream.store.lmdb_store import Store

    def content(path):
        store = Store.open(path, readonly=True)
        try:
            with store.reader() as txn:
                h = hashlib.sha256()
                for word, n in store.iter_words(txn):
                    h.update(len(word).to_bytes(8, "little") + word + n.to_bytes(8, "little"))
                return h.hexdigest(), store.totals(txn)
        finally:
            store.close()

    return content(a) == content(b)


def file_digest(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


# -- where the time goes (the phases section) ---------------------------------------------
class _PhaseClock:
    """Wall and CPU seconds of each phase, summed over the calls of the functions timed as it,
    on whichever thread they run (``time.thread_time``: the calling thread's CPU).  Functions
    are replaced by timing wrappers in their modules for the length of one run; ``main`` is
    the main thread's CPU over the run: the work that is serial (the parent's)."""

    def __init__(self):
        import threading

        self.lock = threading.Lock()
        self.wall: dict = {}
        self.cpu: dict = {}
        self.undo: list = []

    def add(self, phase: str, wall: float, cpu: float) -> None:
        with self.lock:
            self.wall[phase] = self.wall.get(phase, 0.0) + wall
            self.cpu[phase] = self.cpu.get(phase, 0.0) + cpu

    def wrap(self, owner, name: str, phase: str) -> None:
        import functools
        import inspect

        real = getattr(owner, name)
        clock = self
        if inspect.isgeneratorfunction(real):
            @functools.wraps(real)
            def timed(*args, **kwargs):  # each step of the generator timed, on the thread that drives it
                it = real(*args, **kwargs)
                while True:
                    t, c = time.perf_counter(), time.thread_time()
                    try:
                        item = next(it)
                    except StopIteration:
                        clock.add(phase, time.perf_counter() - t, time.thread_time() - c)
                        return
                    clock.add(phase, time.perf_counter() - t, time.thread_time() - c)
                    yield item
        else:
            @functools.wraps(real)
            def timed(*args, **kwargs):
                t, c = time.perf_counter(), time.thread_time()
                try:
                    return real(*args, **kwargs)
                finally:
                    clock.add(phase, time.perf_counter() - t, time.thread_time() - c)
        setattr(owner, name, timed)
        self.undo.append((owner, name, real))

    def restore(self) -> None:
        for owner, name, real in reversed(self.undo):
            setattr(owner, name, real)

    def result(self, seconds: float, cpu: float, main_cpu: float) -> dict:
        return {"seconds": seconds, "cpu_seconds": cpu, "main_thread_cpu_seconds": main_cpu,
                "serial_fraction": main_cpu / cpu if cpu else None,
                "phases": {k: {"wall": self.wall[k], "cpu": self.cpu[k]} for k in sorted(self.wall)}}


def count_phases(path: str, workers: int, parent_dir: str) -> dict:
    """``count_sources`` of ``path`` into a new store (as ``count -wN`` runs it: threads for
    a plain file), its phases timed where they run: ``read`` (a range's bytes), ``scan``
    (scanned and counted into a table), ``sort`` (a worker's table packed in key order),
    ``merge`` (runs merged, and at each flush the batch taken: merged, or the one-worker
    table sorted), ``write`` (``Store.add_batch`` and the remap after it), ``hash`` (the file
    read again into its identity digest, beside or after the count).  A phase's wall is the
    sum over its calls (they overlap on several threads); ``serial_fraction`` is the main
    thread's CPU over the process's."""
    import shutil
    import tempfile

    from bpe_stream.count import counting, seen_files
    from bpe_stream.inputs.reader import Source
    from bpe_stream.store.lmdb_store import Store

    clock = _PhaseClock()
    for owner, name, phase in ((counting, "_read_range", "read"), (counting, "count_bytes", "scan"),
                               (counting, "_packed", "sort"), (counting._Batch, "_compact", "merge"),
                               (counting._Batch, "take_counts", "merge"), (Store, "add_batch", "write"),
                               (Store, "remap", "write"), (counting, "feed", "hash"), (seen_files, "feed", "hash")):
        clock.wrap(owner, name, phase)
    settings = counting.make_settings("gpt2", [SPECIAL])
    store_dir = tempfile.mkdtemp(prefix="count-phases-", dir=parent_dir)
    try:
        with Store.open(store_dir, create=True) as store:
            t, c, m = time.perf_counter(), time.process_time(), time.thread_time()
            summary = counting.count_sources(store, [Source.from_arg(path)], settings, workers=workers)
            seconds, cpu, main = time.perf_counter() - t, time.process_time() - c, time.thread_time() - m
    finally:
        clock.restore()
        shutil.rmtree(store_dir, ignore_errors=True)
    return dict(clock.result(seconds, cpu, main), workers=workers, bytes=summary.bytes, unique=summary.new_unique)


def encode_phases(tok_path: str, path: str, workers: int, parent_dir: str) -> dict:
    """``ParallelEncoder.write`` of ``path`` as ``encode -f u32 -wN -o FILE`` runs it, its
    phases timed where they run: ``read`` (the file read and cut into pieces at safe points,
    in the parent), ``encode`` (a piece scanned, merged and formatted: on the workers),
    ``write`` (the output written, in the parent).  As :func:`count_phases`."""
    import tempfile

    from bpe_stream.encode import parallel
    from bpe_stream.encode.tokenizer import Tokenizer

    tok = Tokenizer.load(tok_path)
    clock = _PhaseClock()
    clock.wrap(parallel, "byte_pieces", "read")
    clock.wrap(parallel, "_encode_bytes", "encode")

    class TimedOut:
        def __init__(self, f):
            self.f = f

        def write(self, data):
            t, c = time.perf_counter(), time.thread_time()
            try:
                return self.f.write(data)
            finally:
                clock.add("write", time.perf_counter() - t, time.thread_time() - c)

    digest = hashlib.sha256()
    try:
        with parallel.ParallelEncoder(tok, workers) as enc, tempfile.TemporaryFile(dir=parent_dir) as out, \
                open(path, "rb") as f:
            t, c, m = time.perf_counter(), time.process_time(), time.thread_time()
            tokens = enc.write(TimedOut(out), f, "u32")
            out.flush()
            seconds, cpu, main = time.perf_counter() - t, time.process_time() - c, time.thread_time() - m
            kids = os.times()
            out.seek(0)
            for block in iter(lambda: out.read(1 << 24), b""):
                digest.update(block)
    finally:
        clock.restore()
    # worker processes (the pretokenizers the C encoder does not cut): their CPU is the children's
    cpu += kids.children_user + kids.children_system
    return dict(clock.result(seconds, cpu, main), workers=workers, tokens=tokens, digest=digest.hexdigest())
