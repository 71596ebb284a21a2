"""Counted once means once (issue 19, items 2 and 3).

* A file named several ways in one command, by two counts running at once, or by both stores
  of a merge is counted once (or the merge is refused, naming the file).
* A file that was touched is skipped; one that grew is counted on from where its committed
  counts end, so that the store equals a clean count of the grown file (checked against the
  textbook oracle, for every pretokenizer, with appends that continue the old last pretoken,
  special tokens and UTF-8 characters cut by the old end); any other change is refused with an
  ``Error:`` naming ``--recount``.

Moments where two processes meet are reached through the seams of
``tests/seams.py`` (a process waits after its first batch until the test
lets it go on), never through a delay.
"""

from __future__ import annotations

import os
import subprocess
from collections import Counter
from pathlib import Path

import pytest
import reliability_helpers as H
import textbook
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from reliability_helpers import EOT, Cmd
from test_interrupts import _wait_for
from test_store import SETTING_CHOICES, doc_st, oracle_counts

from bpe_stream import Store
from bpe_stream.count.counting import count_sources, make_settings
from bpe_stream.pretok.pretokenize import GPT2_PATTERN
from bpe_stream.inputs.reader import Source
from bpe_stream.count.seen_files import Refused

TEXT = b"The same words, the same file: counted once.<|endoftext|>And once only.\n"


def _ok(res):
    assert res.returncode == 0, res.stderr.decode("utf-8", "replace")
    return res


def _lines(res) -> list:
    return [line for line in res.stderr.decode("utf-8", "replace").splitlines() if line.strip()]


def _one_error(res, *fragments) -> str:
    lines = _lines(res)
    assert res.returncode == 1 and len(lines) == 1 and lines[0].startswith("Error:"), (res.returncode, lines)
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
    return lines[0]


def _count(store, *paths, cwd, knobs=None, extra=()):
    return H.run(Cmd("count", "--store", store, "--special-token", EOT, "-w", "1", *extra, *paths, knobs=knobs), cwd)


def _clean(texts, specials=(EOT,)) -> tuple:
    """(words, totals) of one clean count of ``texts`` (each a file), by the independent oracle."""
    words, n_special = H.oracle(texts, specials)
    return dict(words), {"bytes": sum(map(len, texts)), "documents": len(texts) + n_special,
                         "pretokens": sum(words.values()), "specials": n_special, "unique": len(words),
                         "unique_bytes": sum(map(len, words))}


def _state(store) -> tuple:
    snap = H.snapshot(store)
    return snap["words"], snap["totals"]


# -- one file, many names ------------------------------------------------------------------------
def test_a_file_named_five_ways_in_one_command_is_counted_once(tmp_path):
    f = tmp_path / "f.txt"
    f.write_bytes(TEXT)
    (tmp_path / "symlink").symlink_to(f)
    os.link(f, tmp_path / "hardlink")
    store = tmp_path / "store"
    res = _ok(_count(store, "f.txt", "./f.txt", f, "symlink", "hardlink", cwd=tmp_path))
    assert _state(store) == _clean([TEXT])
    assert sum("the same file as f.txt" in line for line in _lines(res)) == 4, _lines(res)
    assert len(H.snapshot(store)["sources"]) == 1


def test_a_hard_link_or_a_moved_file_counted_later_is_already_counted(tmp_path):
    f = tmp_path / "f.txt"
    f.write_bytes(TEXT)
    store = tmp_path / "store"
    _ok(_count(store, f, cwd=tmp_path))
    os.link(f, tmp_path / "hardlink")
    res = _ok(_count(store, tmp_path / "hardlink", cwd=tmp_path))
    assert any("already counted" in line for line in _lines(res)), _lines(res)
    f.rename(tmp_path / "moved.txt")
    (tmp_path / "hardlink").unlink()
    res = _ok(_count(store, tmp_path / "moved.txt", cwd=tmp_path))
    assert any("already counted" in line for line in _lines(res)), _lines(res)
    assert _state(store) == _clean([TEXT])
    # a new file that happens to get the inode of a deleted one is a new file
    (tmp_path / "moved.txt").unlink()
    other = tmp_path / "other.txt"
    other.write_bytes(b"entirely other words\n")
    _ok(_count(store, other, cwd=tmp_path))
    assert _state(store) == _clean([TEXT, other.read_bytes()])


# -- two counts at once --------------------------------------------------------------------------
@pytest.fixture
def three_files(tmp_path):
    return H.write_slices(tmp_path / "input", [
        ("en_100M.txt", 0, 150_000), ("code_25M.txt", 700_000, 90_000), ("multi_25M.txt", 3_000_001, 90_000),
    ])


def test_two_counts_at_once_on_one_store_never_count_a_file_twice(tmp_path, three_files):
    """The first count stops right after its first batch, holding the file it is in the middle
    of; the second count runs meanwhile on the same files: it skips that one and counts the
    others; the first then goes on and skips what the second finished."""
    store = tmp_path / "store"
    marker, go_on = tmp_path / "paused", tmp_path / "go-on"
    names = list(three_files)
    knobs = {"range_bytes": 32 << 10}
    first = H.start(Cmd("count", "--store", store, "--special-token", EOT, "--max-memory", "1M", "-w", "1", *names,
                        knobs=dict(knobs, pause_after_batch={"n": 1, "marker": str(marker), "until": str(go_on)})),
                    tmp_path, stderr=subprocess.PIPE)
    try:
        _wait_for(marker, first)
        second = _ok(_count(store, *names, cwd=tmp_path, knobs=knobs, extra=("--max-memory", "1M")))
        assert any("another count is counting it" in line and names[0] in line for line in _lines(second)), \
            _lines(second)
        go_on.write_text("")
        err = first.stderr.read().decode("utf-8", "replace")
        assert first.wait(timeout=120) == 0, err
    finally:
        H.kill_group(first)
    assert sum("already counted" in line for line in err.splitlines()) == 2, err
    assert _state(store) == _clean(list(three_files.values()))


def test_a_count_killed_while_holding_a_file_leaves_no_claim_behind(tmp_path, three_files):
    store = tmp_path / "store"
    marker = tmp_path / "paused"
    names = list(three_files)
    knobs = {"range_bytes": 32 << 10}
    proc = H.start(Cmd("count", "--store", store, "--special-token", EOT, "--max-memory", "1M", "-w", "1", *names,
                       knobs=dict(knobs, pause_after_batch={"n": 1, "marker": str(marker)})), tmp_path)
    try:
        _wait_for(marker, proc)
    finally:
        H.kill_group(proc)
    offsets = H.check_partial_state(H.snapshot(store), H.PrefixOracle(three_files))
    assert 0 < offsets[names[0]] < len(three_files[names[0]])
    res = _ok(_count(store, *names, cwd=tmp_path, knobs=knobs))
    assert any(f"resuming {names[0]}" in line for line in _lines(res)), _lines(res)
    assert _state(store) == _clean(list(three_files.values()))


# -- merge-stores --------------------------------------------------------------------------------
def test_merge_stores_refuses_a_file_counted_into_both_and_names_it(tmp_path):
    f, g, h = (tmp_path / name for name in ("f.txt", "g.txt", "h.txt"))
    for path, text in ((f, TEXT), (g, b"only in the first store\n"), (h, b"only in the second store\n")):
        path.write_bytes(text)
    one, two, three = tmp_path / "one", tmp_path / "two", tmp_path / "three"
    _ok(_count(one, f, g, cwd=tmp_path))
    _ok(_count(two, f, h, cwd=tmp_path))
    _ok(_count(three, h, cwd=tmp_path))
    dest = tmp_path / "dest"
    _one_error(H.run(Cmd("merge-stores", "--store", dest, one, two), tmp_path), str(f), "twice")
    assert not dest.exists(), "a refused merge created its destination"
    _ok(H.run(Cmd("merge-stores", "--store", dest, one, three), tmp_path))
    assert _state(dest) == _clean([TEXT, g.read_bytes(), h.read_bytes()])
    _one_error(H.run(Cmd("merge-stores", "--store", dest, two), tmp_path), str(f), "twice")
    res = _ok(_count(dest, f, cwd=tmp_path))
    assert any("already counted" in line for line in _lines(res))
    assert _state(dest) == _clean([TEXT, g.read_bytes(), h.read_bytes()])


def test_merge_stores_adds_different_files_that_share_a_path(tmp_path):
    """The same path on two machines holds two files: their first bytes differ, so both count."""
    f = tmp_path / "shard.txt"
    first, second = b"the shard of machine one\n" * 30, b"machine two has other words here\n" * 30
    one, two, dest = tmp_path / "one", tmp_path / "two", tmp_path / "dest"
    f.write_bytes(first)
    _ok(_count(one, f, cwd=tmp_path))
    f.write_bytes(second[:len(first)])
    _ok(_count(two, f, cwd=tmp_path))
    res = _ok(H.run(Cmd("merge-stores", "--store", dest, one, two), tmp_path))
    assert any("share a path" in line for line in _lines(res)), _lines(res)
    assert _state(dest) == _clean([first, second[:len(first)]])


# -- touched, grown, changed ---------------------------------------------------------------------
def test_a_touched_file_is_skipped_and_its_record_brought_up_to_date(tmp_path):
    f = tmp_path / "f.txt"
    f.write_bytes(TEXT)
    store = tmp_path / "store"
    _ok(_count(store, f, cwd=tmp_path))
    before = _state(store)
    st_ = f.stat()
    os.utime(f, ns=(st_.st_atime_ns, st_.st_mtime_ns + 10**9))
    res = _ok(_count(store, f, cwd=tmp_path))
    assert any("already counted (its content is unchanged)" in line for line in _lines(res)), _lines(res)
    assert _state(store) == before
    record = H.snapshot(store)["sources"][os.fsencode(os.path.realpath(f))]
    assert record["mtime_ns"] == f.stat().st_mtime_ns
    res = _ok(_count(store, f, cwd=tmp_path))
    assert any("use --recount" in line for line in _lines(res)), _lines(res)


@pytest.mark.parametrize("edit", ["same size, one byte changed", "shrunk", "rewritten longer"])
def test_a_file_changed_other_than_by_growing_is_refused_naming_recount(tmp_path, edit):
    f = tmp_path / "f.txt"
    f.write_bytes(TEXT * 3)
    store = tmp_path / "store"
    _ok(_count(store, f, cwd=tmp_path))
    before = H.snapshot(store), H.file_digest(store / "data.mdb")
    changed = {"same size, one byte changed": TEXT * 2 + TEXT.replace(b"once", b"ONCE", 1),
               "shrunk": TEXT * 2, "rewritten longer": b"X" + TEXT * 4}[edit]
    f.write_bytes(changed)
    _one_error(_count(store, f, cwd=tmp_path), str(f), "--recount")
    assert (H.snapshot(store), H.file_digest(store / "data.mdb")) == before
    _ok(_count(store, f, cwd=tmp_path, extra=("--recount",)))
    assert H.snapshot(store)["words"] == dict(Counter(_clean([TEXT * 3])[0]) + Counter(_clean([changed])[0]))


def test_a_store_without_digests_trusts_a_file_only_while_it_is_unchanged(tmp_path):
    """Records of an older bpe-stream hold size and time only: the file is skipped while both are
    the same, and any change is refused (it cannot be told from growth), naming --recount."""
    f = tmp_path / "f.txt"
    f.write_bytes(TEXT)
    store = tmp_path / "store"
    _ok(_count(store, f, cwd=tmp_path))
    with Store.open(store) as st_:
        key = os.fsencode(os.path.realpath(f))

        def strip(txn):
            record = st_.source(txn, key)
            st_.put_source(txn, key, {k: record[k] for k in ("size", "mtime_ns", "offset", "done")})

        st_.write(strip)
    res = _ok(_count(store, f, cwd=tmp_path))
    assert any("already counted" in line for line in _lines(res))
    with open(f, "ab") as out:
        out.write(b"more\n")
    _one_error(_count(store, f, cwd=tmp_path), str(f), "--recount", "older bpe-stream")


@pytest.mark.parametrize("old, new", [
    (b"hello", b"world"),  # the old last pretoken continues: must end as "helloworld"
    (b"hello ", b"world"),  # a space that joins " world"
    (b"hello", b" world\n"),  # the old end was a cut
    (b"a <|endof", b"text|> b"),  # a special token cut by the old end
    ("caf\u00e9".encode()[:-1], "\u00e9 ok".encode()[1:]),  # a character cut by the old end
    (b"12345", b"678 90"),
    (b"", b"fresh start"),
    (b"x" * 70_000, b"y" * 10 + b" z"),  # no cut at all in the old bytes
], ids=["word", "space", "cut", "special", "utf8", "digits", "empty", "no-cut"])
def test_an_appended_file_ends_as_a_clean_count_of_the_grown_file(tmp_path, old, new):
    f = tmp_path / "f.txt"
    f.write_bytes(old)
    store = tmp_path / "store"
    _ok(_count(store, f, cwd=tmp_path, knobs={"range_bytes": 4096}))
    with open(f, "ab") as out:
        out.write(new)
    res = _ok(_count(store, f, cwd=tmp_path, knobs={"range_bytes": 4096}))
    assert any("grew" in line for line in _lines(res)) or not old, _lines(res)
    assert _state(store) == _clean([old + new])
    assert H.snapshot(store)["sources"][os.fsencode(os.path.realpath(f))]["done"]


def _library_count(store_dir: Path, paths, settings_: dict, range_bytes: int):
    with Store.open(store_dir, create=True) as st_:
        count_sources(st_, [Source.from_arg(str(p)) for p in paths], settings_, range_bytes=range_bytes)
        with st_.reader() as txn:
            return dict(st_.iter_words(txn)), st_.totals(txn)


def _textbook_totals(docs, settings_: dict) -> dict:
    pattern = {"gpt2": textbook.GPT2_PATTERN, "whitespace": textbook.WHITESPACE_PATTERN,
               "words": textbook.WORDS_PATTERN, "none": None}.get(settings_["pretokenizer"], settings_["pattern"])
    specials = sum(special for doc in docs for special, _ in
                   textbook.pretokens(doc.decode("utf-8", "surrogateescape"), pattern, settings_["special_tokens"]))
    words = oracle_counts(docs, settings_)
    return {"bytes": sum(map(len, docs)), "documents": len(docs) + specials, "pretokens": sum(words.values()),
            "specials": specials, "unique": len(words), "unique_bytes": sum(map(len, words))}


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(parts=st.lists(doc_st, min_size=2, max_size=4), settings_=st.sampled_from(SETTING_CHOICES),
       range_bytes=st.sampled_from([8, 64, 1 << 20]))
def test_fuzz_a_file_grown_in_steps_is_counted_exactly_once(tmp_path_factory, parts, settings_, range_bytes):
    """Appends of random text (specials, partial specials, invalid UTF-8, spaces of every kind)
    counted after each step: the store always equals a clean count of the file as it is."""
    directory = tmp_path_factory.mktemp("grow")
    f = directory / "f.txt"
    f.write_bytes(b"")
    store = directory / "store"
    grown = b""
    for part in parts:
        grown += part
        with open(f, "ab") as out:
            out.write(part)
        words, totals = _library_count(store, [f], settings_, range_bytes)
        assert words == oracle_counts([grown], settings_), (parts, grown)
        assert totals == _textbook_totals([grown], settings_), (parts, grown)


def _killed_after_batch(store, f, n: int, knobs: dict, cwd) -> None:
    """Runs ``count f`` until right after its ``n``-th committed batch, then kill -9."""
    marker = cwd / "paused"
    proc = H.start(Cmd("count", "--store", store, "--special-token", EOT, "--max-memory", "1M", "-w", "1", f,
                       knobs=dict(knobs, pause_after_batch={"n": n, "marker": str(marker)})), cwd)
    try:
        _wait_for(marker, proc)
    finally:
        H.kill_group(proc)
    marker.unlink()


def test_a_grown_file_killed_mid_count_and_rerun_is_counted_exactly(tmp_path, three_files):
    """A nightly run over a growing file, killed after its first batch: the store holds exactly
    the counts of a prefix of the grown file (the take-back and the first batch were committed
    whole), and the rerun ends with a clean count of it."""
    name = list(three_files)[0]
    f = Path(name)
    data = three_files[name]
    f.write_bytes(data[:60_003])
    store = tmp_path / "store"
    knobs = {"range_bytes": 16 << 10}
    _ok(_count(store, f, cwd=tmp_path, knobs=knobs, extra=("--max-memory", "1M")))
    f.write_bytes(data)
    _killed_after_batch(store, f, 2, knobs, tmp_path)
    offsets = H.check_partial_state(H.snapshot(store), H.PrefixOracle({name: data}))
    assert 60_003 - 200 < offsets[name] < len(data), offsets
    _ok(_count(store, f, cwd=tmp_path, knobs=knobs))
    assert _state(store) == _clean([data])


def test_a_file_appended_to_after_a_killed_count_resumes_exactly(tmp_path, three_files):
    name = list(three_files)[0]
    f, data = Path(name), three_files[name]
    f.write_bytes(data[:100_000])
    store, knobs = tmp_path / "store", {"range_bytes": 16 << 10}
    _killed_after_batch(store, f, 1, knobs, tmp_path)
    f.write_bytes(data)
    _ok(_count(store, f, cwd=tmp_path, knobs=knobs))
    assert _state(store) == _clean([data])


@pytest.mark.parametrize("workers, function, pretokenizer, beside", [
    # in this process, into the batch's table: the range re-read after it was counted ...
    ("1", "_read_range", "gpt2", None),
    # ... or on a thread while it is counted
    ("1", "_read_range", "gpt2", 0),
    ("2", "count_range_shared", "gpt2", None),  # on threads: the bytes counted compared
    ("2", "count_range", "regex:" + GPT2_PATTERN, None),  # on worker processes: their checks compared
])
def test_a_file_written_to_while_it_is_counted_is_an_error_and_counted_right_later(tmp_path, workers, function,
                                                                                   pretokenizer, beside):
    """The parent hashes each range for the file's record; the worker hashed what it counted:
    a file changed in between (here: right after the first range was read by the worker) is
    one Error.  With one worker the range was counted into the batch already: the batch is
    dropped, not committed without the record that would say so."""
    f = tmp_path / "f.txt"
    f.write_bytes(TEXT * 2000)
    store, marker, go_on = tmp_path / "store", tmp_path / "paused", tmp_path / "go-on"
    knobs = {"range_bytes": 16 << 10,
             "pause_in_task": {"function": f"bpe_stream.count.counting.{function}", "n": 1, "after": True,
                               "marker": str(marker), "until": str(go_on)}}
    if beside is not None:
        knobs["beside_bytes"] = beside
    proc = H.start(Cmd("count", "--store", store, "--special-token", EOT, "-w", workers, "--pretokenizer", pretokenizer,
                       f, knobs=knobs), tmp_path, stderr=subprocess.PIPE)
    try:
        _wait_for(marker, proc)
        with open(f, "r+b") as out:
            out.write(b"CHANGED")
        go_on.write_text("")
        err = proc.stderr.read().decode("utf-8", "replace")
        rc = proc.wait(timeout=120)
    finally:
        H.kill_group(proc)
    lines = [line for line in err.splitlines() if line.strip()]
    assert rc == 1 and len(lines) == 1 and "changed while it was being counted" in lines[0], (rc, lines)
    _ok(_count(store, f, "--pretokenizer", pretokenizer, cwd=tmp_path))
    assert _state(store) == _clean([f.read_bytes()])


def test_library_refusal_is_an_input_error_naming_recount(tmp_path):
    f = tmp_path / "f.txt"
    f.write_bytes(b"one two three\n")
    gpt2 = make_settings("gpt2", [])
    with Store.open(tmp_path / "store", create=True) as st_:
        count_sources(st_, [Source.from_arg(str(f))], gpt2)
        f.write_bytes(b"one TWO three\n")
        with pytest.raises(Refused, match="--recount"):
            count_sources(st_, [Source.from_arg(str(f))], gpt2)


def test_a_grown_file_whose_old_counts_the_store_no_longer_holds_is_one_error(tmp_path):
    """Taking back the old tail needs its counts in the store; if they are not there (a store
    edited by hand or damaged), the count stops before writing anything, naming --recount."""
    f = tmp_path / "f.txt"
    f.write_bytes(b"some words and a tail")
    store = tmp_path / "store"
    _ok(_count(store, f, cwd=tmp_path))
    with Store.open(store) as st_:
        st_.write(lambda txn: st_.add_counts(txn, {b" tail": -1}))
    before = H.file_digest(store / "data.mdb")
    with open(f, "ab") as out:
        out.write(b"gate")
    _one_error(_count(store, f, cwd=tmp_path), str(store), "--recount")
    assert H.file_digest(store / "data.mdb") == before


@given(data=st.binary(max_size=3000), cuts=st.lists(st.integers(0, 3000), max_size=6), flip=st.integers(0, 2999))
def test_a_range_check_is_the_same_for_any_chunking_and_differs_after_a_byte_changes(data, cuts, flip):
    """The worker's and the parent's checks of one range (fed in different blocks) agree;
    after a changed byte they do not (CRC-32 catches every error within 32 bits)."""
    from bpe_stream.count.seen_files import RangeCheck

    whole, parts = RangeCheck(), RangeCheck()
    whole.update(data)
    at = 0
    for cut in sorted(c for c in cuts if c <= len(data)) + [len(data)]:
        parts.update(data[at:cut])
        at = cut
    assert whole.digest() == parts.digest() and len(whole.digest()) == 8
    if data:
        i = flip % len(data)
        changed = RangeCheck()
        changed.update(data[:i] + bytes([data[i] ^ 0x5A]) + data[i + 1:])
        assert changed.digest() != whole.digest()


@given(data=st.binary(max_size=3000), cuts=st.lists(st.integers(0, 3000), max_size=6), flip=st.integers(0, 2999))
def test_same_bytes_holds_for_any_blocks_of_the_bytes_counted_and_for_nothing_else(data, cuts, flip):
    """One worker's check (the bytes it counted, compared with the parent's blocks): any
    blocks of those bytes match; a changed byte, a byte less or a byte more does not."""
    from bpe_stream.count.seen_files import SameBytes

    def fed(blocks):
        check = SameBytes(data)
        for block in blocks:
            check.update(block)
        return check.matches(None)

    bounds = [0] + sorted(c for c in cuts if c <= len(data)) + [len(data)]
    assert fed([data[a:b] for a, b in zip(bounds, bounds[1:])])
    assert not fed([data + b"x"])
    if data:
        i = flip % len(data)
        assert not fed([data[:i], bytes([data[i] ^ 0x5A]), data[i + 1:]])
        assert not fed([data[:-1]])


@pytest.mark.parametrize("beside_bytes, on_a_thread", [(0, True), (1 << 30, False)])
def test_a_range_counted_in_this_process_is_hashed_beside_its_count(tmp_path, monkeypatch, beside_bytes, on_a_thread):
    """One worker's check (``HashedBeside``): the range re-read into the record's digest, on a
    thread while the count runs when the range is at least ``BESIDE_BYTES`` long, after it in
    this thread when shorter; the digest ends equal to a digest of the same bytes fed at once,
    and the check says whether the bytes re-read were the bytes counted."""
    import threading

    from bpe_stream.count import seen_files as sources

    monkeypatch.setattr(sources, "BESIDE_BYTES", beside_bytes)
    data = TEXT * 50
    f = tmp_path / "f.txt"
    f.write_bytes(b"head" + data + b"tail")
    fed_on, real_feed = [], sources.feed

    def recording_feed(*args, **kwargs):
        fed_on.append(threading.current_thread() is not threading.main_thread())
        return real_feed(*args, **kwargs)

    monkeypatch.setattr(sources, "feed", recording_feed)
    whole = sources.PrefixDigest()
    whole.update(b"head" + data)
    digest = sources.PrefixDigest()
    digest.update(b"head")
    check = sources.HashedBeside(str(f), 4, 4 + len(data), digest)
    with check.counting(data):
        pass
    assert fed_on == [on_a_thread] and check.matches()
    assert digest.length == whole.length and digest.digest() == whole.digest()

    other = sources.HashedBeside(str(f), 4, 4 + len(data), sources.PrefixDigest())
    with other.counting(data[:-1] + b"!"):  # not the bytes the file holds
        pass
    assert not other.matches()


@pytest.mark.parametrize("beside_bytes", [0, 1 << 30])
def test_a_failed_re_read_beside_a_count_is_raised_after_it_and_a_failed_count_wins(tmp_path, monkeypatch,
                                                                                     beside_bytes):
    """A file cut short under the count is the re-read's InputError, raised once the count is
    done; a count that raised (Ctrl-C, a full table) raises its own error, and with a thread
    the re-read was waited for."""
    from bpe_stream.count import seen_files as sources
    from bpe_stream.inputs.reader import InputError

    monkeypatch.setattr(sources, "BESIDE_BYTES", beside_bytes)
    f = tmp_path / "f.txt"
    f.write_bytes(b"short")
    check = sources.HashedBeside(str(f), 0, 100, sources.PrefixDigest())
    counted = []
    with pytest.raises(InputError, match="changed while being read"):
        with check.counting(b"x" * 100):
            counted.append(True)
    assert counted == [True] and not check.matches()

    f.write_bytes(b"x" * 100)
    digest = sources.PrefixDigest()
    check = sources.HashedBeside(str(f), 0, 100, digest)
    with pytest.raises(KeyboardInterrupt):
        with check.counting(b"x" * 100):
            raise KeyboardInterrupt
    assert digest.length == (100 if beside_bytes == 0 else 0) and not check.matches()
