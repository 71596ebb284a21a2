"""The fast paths against the plain ones: every engine, path and resume gives the same merges.

* the C merge loop (occurrence lists) against the pure-Python plain trainer;
* the out-of-core path (the C loop with its tables in a scratch file) against in-memory;
* training with the first k merges forced (resume, --from) against one uninterrupted run;
* the C encoder against the Python encoder (bpe.encode_by_rank), long pretokens included.
"""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import tempfile

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bpe_stream import Store, Tokenizer
from bpe_stream.count.counting import count_sources, make_settings
from bpe_stream.train.pipeline import tokenizer_from_result, train_from_store
from bpe_stream.inputs.reader import Source
from bpe_stream.train.disk import DiskEngine, ScratchError, train_on_disk
from bpe_stream.train.trainer import TrainConfig, Trainer, _fastbpe

pytestmark = pytest.mark.skipif(_fastbpe is None, reason="the C extension is not built")

TIE_BREAKS = ["max-bytes", "min-bytes", "min-ids"]

# Words with long runs (aaaa, abab) and multi-byte characters, where overlapping
# occurrences and left-to-right replacement matter.
words_st = st.dictionaries(
    st.one_of(
        st.binary(min_size=1, max_size=12),
        st.builds(lambda c, n: c * n, st.sampled_from([b"a", b"ab", b"aab", "é".encode()]), st.integers(2, 20)),
        st.text(alphabet="abcé中", min_size=1, max_size=15).map(lambda t: t.encode()),
    ),
    st.integers(1, 2**40),
    min_size=1,
    max_size=25,
)


def config(**kw) -> TrainConfig:
    return TrainConfig(**kw)


def train(words, engine, forced=(), **kw):
    t = Trainer(config(**kw))
    t.feed(words.items())
    return t.train(forced=forced, engine=engine)


@given(words=words_st, tie=st.sampled_from(TIE_BREAKS), n=st.integers(0, 40), eow=st.sampled_from([None, "</w>"]),
       min_count=st.sampled_from([1, 1, 2, 5]))
def test_c_engine_equals_python_engine(words, tie, n, eow, min_count):
    kw = dict(num_merges=n, tie_break=tie, end_of_word=eow, min_count=min_count, special_tokens=["<s>"])
    py, c = train(words, "python", **kw), train(words, "c", **kw)
    assert c.merges == py.merges
    assert c.merge_counts == py.merge_counts


@given(words=words_st, tie=st.sampled_from(TIE_BREAKS), n=st.integers(0, 40), data=st.data())
def test_forced_prefix_resumes_exactly(words, tie, n, data):
    full = train(words, "c", num_merges=n, tie_break=tie)
    k = data.draw(st.integers(0, len(full.merges)))
    engine = data.draw(st.sampled_from(["c", "python"]))
    resumed = train(words, engine, forced=full.merges[:k], num_merges=n, tie_break=tie)
    assert resumed.merges == full.merges


@given(words=words_st, tie=st.sampled_from(TIE_BREAKS), n=st.integers(0, 40), eow=st.sampled_from([None, "</w>"]))
def test_disk_path_equals_memory(tmp_path, words, tie, n, eow):
    cfg = config(num_merges=n, tie_break=tie, end_of_word=eow)
    memory = train(words, "c", num_merges=n, tie_break=tie, end_of_word=eow)
    base = cfg.base_vocab()
    done = train_on_disk(
        sorted(words.items()), [base[i] for i in range(len(base))], cfg.marker_id(), tie, cfg.max_merges(),
        1, [], str(tmp_path / f"scratch{random.random()}"),
    )
    assert [(a, b) for a, b, _ in done] == memory.merges
    assert [c for _, _, c in done] == memory.merge_counts


def test_disk_engine_keeps_its_tables_in_an_unnamed_scratch_file(tmp_path):
    """Long occurrence lists (large blocks of the arena, freed and reused as merges take them)
    give the in-memory merges; the tables are in the scratch file (it grows, it has no name,
    its directory goes with the engine)."""
    rng = random.Random(7)
    words = {bytes(rng.choice(b"abcab") for _ in range(rng.randint(2, 14))): rng.randint(1, 9) for _ in range(30_000)}
    tokens = [bytes([i]) for i in range(256)]
    for tie in TIE_BREAKS:
        memory = train(words, "c", num_merges=300, tie_break=tie)
        scratch = tmp_path / f"s-{tie}"
        engine = DiskEngine(tokens, None, tie, str(scratch))
        try:
            engine.load(sorted(words.items()))
            stats = engine.memory()
            assert stats["disk_bytes"] >= 30_000 * 4 and list(scratch.iterdir()) == []
            done = engine.merge_best(300, 1)
            assert engine.memory()["peak_disk_bytes"] >= stats["disk_bytes"]
        finally:
            engine.close()
        assert [(a, b) for a, b, _ in done] == memory.merges and [c for _, _, c in done] == memory.merge_counts
        assert not scratch.exists()


def test_disk_engine_refuses_a_scratch_directory_it_cannot_make(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(ScratchError, match="scratch directory"):
        DiskEngine([bytes([i]) for i in range(256)], None, "max-bytes", str(tmp_path / "file" / "scratch"))


def test_rare_pairs_kept_out_of_the_heap_are_merged_exactly(tmp_path):
    """Pairs far rarer than the best one wait outside the heap (the C trainer's cold list)
    and come back when the heap's counts fall to theirs, several times over: every merge,
    down to count 1, equals the pure-Python trainer's, in memory and on disk."""
    rng = random.Random(11)
    words = {bytes(rng.choice(b"abcdxyz") for _ in range(rng.randint(2, 9))): rng.randint(1, 6) for _ in range(400)}
    words[b"qrstuvw" * 3] = 2**40  # makes the first threshold 2**24: everything else starts cold
    for tie in TIE_BREAKS:
        py, c = train(words, "python", num_merges=2000, tie_break=tie), train(words, "c", num_merges=2000, tie_break=tie)
        assert c.merges == py.merges and c.merge_counts == py.merge_counts
        assert c.merge_counts[-1] == 1  # ran until every pair was merged
        cfg = config(num_merges=2000, tie_break=tie)
        base = cfg.base_vocab()
        done = train_on_disk(sorted(words.items()), [base[i] for i in range(256)], None, tie, 2000, 1, [],
                             str(tmp_path / f"cold-{tie}"))
        assert [(a, b) for a, b, _ in done] == c.merges


def test_disk_path_on_a_full_disk_is_a_clean_error_and_leaves_no_scratch(bpe, tmp_path):
    """The scratch file is reserved before use, so a full disk is one clean error (not
    SIGBUS), the scratch directory is removed, and training works once space is free."""
    point = tmp_path / "tmpfs"
    point.mkdir()
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("a small tmpfs needs root and mount(8)")
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(point)], capture_output=True).returncode:
        pytest.skip("cannot mount a tmpfs here")
    try:
        rng = random.Random(5)
        words = ["".join(rng.choice("abcdefghij") for _ in range(rng.randint(1, 9))) for _ in range(60_000)]
        (tmp_path / "text.txt").write_text(" ".join(words))
        store = point / "store"
        assert bpe("count", "--store", store, "text.txt").returncode == 0
        res = bpe("train", "--store", store, "--vocab-size", 400, "--path", "disk", "-o", "d.json")
        assert res.returncode == 1, res.stderr
        lines = [line for line in res.stderr.decode().splitlines() if line.startswith("Error")]
        assert len(lines) == 1 and "scratch file" in lines[0] and "free disk space" in lines[0], res.stderr
        assert not (store / "train-scratch").exists() and not (tmp_path / "d.json").exists()
        subprocess.run(["mount", "-o", "remount,size=64m", str(point)], check=True)
        assert bpe("train", "--store", store, "--vocab-size", 400, "--path", "disk", "-o", "d.json").returncode == 0
        assert bpe("train", "--store", store, "--vocab-size", 400, "--path", "memory", "-o", "m.json").returncode == 0
        assert (tmp_path / "d.json").read_bytes() == (tmp_path / "m.json").read_bytes()
    finally:
        subprocess.run(["umount", "-l", str(point)], capture_output=True)


def test_store_paths_and_resume_agree_on_corpus(tmp_path):
    """count + train through the store: memory path, disk path, and a resume from a
    checkpoint of half the merges all write the same tokenizer."""
    from pathlib import Path

    corpus = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "cs336" / "corpus.en"
    store_dir = tmp_path / "store"
    settings_ = make_settings("gpt2", ["<|endoftext|>"])
    with Store.open(store_dir, create=True) as st_:
        count_sources(st_, [Source.from_arg(str(corpus))], settings_)
    results = {}
    for path in ("memory", "disk"):
        with Store.open(store_dir) as st_:
            tok, _ = train_from_store(st_, TrainConfig(vocab_size=700), path=path, checkpoint_every=50,
                                      checkpoint_seconds=1e9)
        results[path] = tok
    assert results["memory"].merges == results["disk"].merges
    # a checkpoint of the first 100 merges, then --resume
    with Store.open(store_dir) as st_:
        from bpe_stream.train.pipeline import read_checkpoint, write_checkpoint

        cp = read_checkpoint(st_)
        assert [tuple(m[:2]) for m in cp["merges"]] == [m[:2] for m in results["disk"].merges]
        write_checkpoint(st_, cp["fingerprint"], cp["merges"][:100])
        messages = []
        tok, _ = train_from_store(st_, TrainConfig(vocab_size=700), resume=True, on_message=messages.append)
    assert any("resuming after 100" in m for m in messages)
    assert tok.merges == results["memory"].merges


# -- the C encoder --------------------------------------------------------------------
def random_tokenizer(rng: random.Random, pretokenizer: str, n_merges: int, eow=None) -> Tokenizer:
    words = {}
    for _ in range(60):
        w = bytes(rng.choice(b"abc \xc3\xa9") for _ in range(rng.randint(1, 10)))
        words[w] = rng.randint(1, 20)
    words[b"a" * 30] = 5
    cfg = TrainConfig(num_merges=n_merges, tie_break="min-ids", end_of_word=eow)
    t = Trainer(cfg)
    t.feed(words.items())
    return tokenizer_from_result(t.train(), pretokenizer, "min-ids")


@given(text=st.text(alphabet=st.sampled_from(list("abc é\n\t中") + ["\udcff"]), max_size=300),
       seed=st.integers(0, 10**6), pre=st.sampled_from(["gpt2", "whitespace", "none"]),
       eow=st.sampled_from([None, "</w>"]))
def test_c_encoder_equals_python_encoder(text, seed, pre, eow):
    if eow is not None and pre == "none":
        pre = "whitespace"
    tok = random_tokenizer(random.Random(seed), pre, 40, eow)
    assert tok._encoder is not None
    fast = tok.encode(text)
    tok._encoder = None
    tok._cache.clear()
    assert tok.encode(text) == fast
    if eow is None:  # lossless pretokenizers without a marker round-trip byte for byte
        assert tok.decode_bytes(fast) == text.encode("utf-8", "surrogateescape")


@pytest.mark.skipif(bool(os.environ.get("BPE_STREAM_ASAN_EXT")),
                    reason="AddressSanitizer reserves terabytes of shadow memory: no ulimit -v of a few GiB holds it")
def test_disk_engine_trains_under_an_address_space_limit(tmp_path):
    """With ``ulimit -v`` below the arena's 1 TiB reservation the arena reserves less (halving
    down to 1 GiB) and the disk path gives the in-memory merges; without that it cannot start."""
    import resource
    import sys

    code = (
        "import resource, sys\n"
        "resource.setrlimit(resource.RLIMIT_AS, (6 << 30, 6 << 30))\n"
        "from bpe_stream.train.disk import train_on_disk\n"
        "words = [(b'abababcab', 5), (b'cabbage', 3), (b'abc', 2)]\n"
        "done = train_on_disk(words, [bytes([i]) for i in range(256)], None, 'max-bytes', 6, 1, [], sys.argv[1])\n"
        "print([(a, b, c) for a, b, c in done])\n"
    )
    hard = resource.getrlimit(resource.RLIMIT_AS)[1]
    if hard != resource.RLIM_INFINITY and hard < 6 << 30:
        pytest.skip("the address space is limited below 6 GiB already")
    res = subprocess.run([sys.executable, "-c", code, str(tmp_path / "scratch")], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    memory = train({b"abababcab": 5, b"cabbage": 3, b"abc": 2}, "c", num_merges=6)
    assert res.stdout.strip() == str([(a, b, c) for (a, b), c in zip(memory.merges, memory.merge_counts)])


@given(words=st.lists(st.tuples(st.binary(max_size=6), st.integers(0, 50)), max_size=40),
       min_count=st.integers(0, 10), split=st.integers(0, 40))
def test_word_arrays_from_columns_equal_word_by_word(words, min_count, split):
    """WordArrays.add_columns (C loops) builds the arrays that add does pair by pair, over
    any number of blocks: words of one byte and counts below min_count left out."""
    from bpe_stream.train.engine import WordArrays

    one, columns = WordArrays(), WordArrays()
    one.add(words, min_count)
    for block in (words[:split], words[split:]):
        columns.add_columns([w for w, _ in block], [n for _, n in block], min_count)
    assert (bytes(columns.symbols), list(columns.ends), list(columns.freqs)) == \
        (bytes(one.symbols), list(one.ends), list(one.freqs))


# -- the disk engine's anonymous quota (the budget before the disk) ---------------------
@given(words=words_st, tie=st.sampled_from(TIE_BREAKS), n=st.integers(0, 40), eow=st.sampled_from([None, "</w>"]),
       quota=st.sampled_from([0, 1 << 12, 40 << 10, 1 << 17, 1 << 20, 64 << 20]))
def test_disk_path_with_a_quota_equals_memory(tmp_path, words, tie, n, eow, quota):
    """Whatever share of the tables the quota keeps in anonymous memory, the merges and their
    counts are the in-memory engine's (tie-breaks, end of word, a special token), and the
    arena never holds more than the quota there."""
    kw = dict(num_merges=n, tie_break=tie, end_of_word=eow, special_tokens=["<s>"])
    memory = train(words, "c", **kw)
    cfg = config(**kw)
    base = cfg.base_vocab()
    engine = DiskEngine([base[i] for i in range(len(base))], cfg.marker_id(), tie,
                        tempfile.mkdtemp(dir=tmp_path), quota)
    try:
        engine.load(sorted(words.items()))
        from bpe_stream.train.driver import drive

        done = list(drive(engine, cfg.max_merges(), 1, []))
        stats = engine.memory()
    finally:
        engine.close()
    assert [(a, b) for a, b, _ in done] == memory.merges
    assert [c for _, _, c in done] == memory.merge_counts
    assert stats["anon_quota"] == quota // 4096 * 4096
    assert stats["anon_bytes"] <= stats["peak_anon_bytes"] <= quota
    if quota == 0:  # today's arena: every block in the file
        assert stats["peak_anon_bytes"] == 0 and stats["moved_to_file"] == stats["moved_to_anon"] == 0


def quota_words():
    rng = random.Random(7)
    return {bytes(rng.choice(b"abcab") for _ in range(rng.randint(2, 14))): rng.randint(1, 9) for _ in range(30_000)}


@pytest.mark.parametrize("quota, run_quota", [(1 << 20, None), (1 << 20, 3 << 20), (5 << 20, None)])
def test_disk_engine_quota_splits_the_tables_and_moves_blocks_exactly(tmp_path, quota, run_quota):
    """Quotas below the tables' size (positions 1.45 MB, the rest about 4 MB): the positions
    take the quota first -- split between memory and the file when they do not fit, and moved
    further into memory when the quota is raised after the load --, the other tables fill what
    is left, growing blocks move from memory to the file (and back once a freed table made
    room); the peak stays within the quota and every merge is the in-memory engine's."""
    words = quota_words()
    tokens = [bytes([i]) for i in range(256)]
    top = max(quota, run_quota or 0)
    moved = [0, 0]
    for tie in TIE_BREAKS:
        memory = train(words, "c", num_merges=400, tie_break=tie)
        engine = DiskEngine(tokens, None, tie, str(tmp_path / f"s-{tie}"), quota, run_quota)
        try:
            engine.load(sorted(words.items()))
            loaded = engine.memory()
            done = engine.merge_best(400, 1)
            stats = engine.memory()
        finally:
            engine.close()
        assert [(a, b) for a, b, _ in done] == memory.merges and [c for _, _, c in done] == memory.merge_counts
        # both sides hold blocks; memory holds the quota, or all the positions when they fit
        assert loaded["disk_bytes"] > 0 and min(top, 1_450_000) - (64 << 10) <= loaded["anon_bytes"] <= top
        assert stats["peak_anon_bytes"] <= top and stats["anon_bytes"] <= top and stats["anon_quota"] == top
        moved[0] += stats["moved_to_file"]
        moved[1] += stats["moved_to_anon"]
    if quota == 1 << 20 and run_quota is None:  # the positions alone hold the quota: nothing else moves
        assert moved == [0, 0]
    else:
        assert moved[0] > 0 and (moved[1] > 0 or run_quota is None)


def _scratch_file_bytes(scratch) -> int:
    """Bytes the file system holds for the engine's unnamed scratch file (found among this
    process's open files by its directory)."""
    found = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{fd}").startswith(str(scratch) + "/"):
                found.append(os.stat(f"/proc/self/fd/{fd}").st_blocks * 512)
        except OSError:
            continue
    assert len(found) == 1, found
    return found[0]


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="finds the unnamed scratch file through /proc")
def test_the_scratch_bytes_reported_are_the_files_as_blocks_are_freed_and_reused(tmp_path):
    """What training reports of its scratch file (``scratch file: N MB``) is what the file
    system holds for it: freed large blocks are punched out in whole 2 MiB runs only, and a
    reused one reserves exactly what was punched (filearena.c: punch_span).  Lists of a million
    entries grow, are taken by their merge and freed, and their blocks taken again."""
    words = {b"ab" * k + bytes([c]): 1 + k % 3 for k in range(1, 400) for c in range(99, 123)}
    engine = DiskEngine([bytes([i]) for i in range(256)], None, "max-bytes", str(tmp_path / "s"))
    try:
        engine.load(sorted(words.items()))
        assert abs(engine.memory()["disk_bytes"] - _scratch_file_bytes(tmp_path / "s")) <= 64 << 10
        engine.merge_best(40, 1)
        stats = engine.memory()
        assert abs(stats["disk_bytes"] - _scratch_file_bytes(tmp_path / "s")) <= 64 << 10
        assert stats["disk_bytes"] < stats["peak_disk_bytes"]  # (something was punched out)
    finally:
        engine.close()


def test_disk_engine_with_room_for_every_table_keeps_them_all_in_memory(tmp_path):
    """A quota larger than the tables: the file holds the frequencies alone (written once,
    read for rare huge counts) and no block moves to it."""
    words = quota_words()
    engine = DiskEngine([bytes([i]) for i in range(256)], None, "max-bytes", str(tmp_path / "s"), 256 << 20)
    try:
        engine.load(sorted(words.items()))
        engine.merge_best(400, 1)
        stats = engine.memory()
    finally:
        engine.close()
    assert stats["moved_to_file"] == 0 and 0 < stats["peak_anon_bytes"] <= 256 << 20
    assert stats["peak_disk_bytes"] == 16 << 20  # one extent: 30,000 frequencies


def test_tokens_longer_than_a_near_link_merge_exactly(tmp_path):
    """A position links to its word's neighbours by 16-bit distances; a token spanning 65,535
    symbols or more (a store without --max-token-bytes) keeps its links in the far table.  A run
    of 140,000 'a' doubles its longest token with each merge, past that distance after 16
    merges, beside a run that ends its word at such a distance; every engine gives the plain
    trainer's merges."""
    words = {b"a" * 140_001 + b"b": 3, b"x" + b"a" * 66_000: 1, b"ba": 5}
    tokens = [bytes([i]) for i in range(256)]
    for tie in TIE_BREAKS:
        py = train(words, "python", num_merges=30, tie_break=tie)
        c = train(words, "c", num_merges=30, tie_break=tie)
        disk = train_on_disk(sorted(words.items()), tokens, None, tie, 30, 1, [], str(tmp_path / f"s-{tie}"))
        assert c.merges == py.merges and c.merge_counts == py.merge_counts
        assert [(a, b) for a, b, _ in disk] == py.merges and [n for _, _, n in disk] == py.merge_counts
        assert max(len(t) for t in c.vocab.values()) >= 1 << 16  # the far links were used


@pytest.fixture
def compact_early():
    """The disk path compacts its positions from the smallest input on (by default only past a
    million positions)."""
    previous = _fastbpe._set_compact_min(1)
    yield
    _fastbpe._set_compact_min(previous)


@given(words=words_st, tie=st.sampled_from(TIE_BREAKS), n=st.integers(0, 60), eow=st.sampled_from([None, "</w>"]),
       quota=st.sampled_from([0, 1 << 16, 1 << 20]))
def test_the_disk_path_compacting_its_positions_equals_memory(tmp_path_factory, compact_early, words, tie, n, eow,
                                                             quota):
    """Once a third of the positions are dead the disk path moves the live ones to the front, and a
    merge renumbers the list it takes through every compaction since its record was born
    (``compact_positions``, ``renumber_list`` in csrc/merge_loop.c): the merges and their counts
    stay the in-memory engine's, whatever the quota."""
    kw = dict(num_merges=n, tie_break=tie, end_of_word=eow, special_tokens=["<s>"])
    memory = train(words, "c", **kw)
    cfg = config(**kw)
    base = cfg.base_vocab()
    engine = DiskEngine([base[i] for i in range(len(base))], cfg.marker_id(), tie,
                        str(tmp_path_factory.mktemp("c") / "s"), quota)
    try:
        engine.load(sorted(words.items()))
        from bpe_stream.train.driver import drive

        done = list(drive(engine, cfg.max_merges(), 1, []))
    finally:
        engine.close()
    assert [(a, b) for a, b, _ in done] == memory.merges and [c for _, _, c in done] == memory.merge_counts


def test_compaction_runs_and_keeps_far_links_and_forced_merges_exact(tmp_path, compact_early):
    words = {b"a" * 140_001 + b"b": 3, b"x" + b"a" * 66_000: 1, b"ba": 5, **quota_words()}
    tokens = [bytes([i]) for i in range(256)]
    for tie in TIE_BREAKS:
        py = train(words, "c", num_merges=300, tie_break=tie)
        engine = DiskEngine(tokens, None, tie, str(tmp_path / f"s-{tie}"), 1 << 20)
        try:
            engine.load(sorted(words.items()))
            given_ = engine.merge_given(py.merges[:40])  # a forced prefix (resume), then learned
            done = engine.merge_best(260, 1)
            stats = engine.memory()
        finally:
            engine.close()
        assert given_ == py.merge_counts[:40]
        assert [(a, b) for a, b, _ in done] == py.merges[40:] and [c for _, _, c in done] == py.merge_counts[40:]
        assert stats["compactions"] >= 2
