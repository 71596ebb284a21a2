"""The pretoken count table against ``Counter(regex.findall(...))``, and its packed form.

Both tables -- the native one (``bpe_stream._fastbpe.CountTable``) and the fallback
(``count_table.PyCountTable``) -- must count what ``Counter`` counts of the ``regex``
pretokens for every pattern, merge packed counts into sums, pack byte for byte alike (so a
worker built with the extension and a parent without it still agree), and fail the same
way at their limits and on malformed packed input.
"""

from __future__ import annotations

import random
import struct
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from scanner_inputs import NAMES, corpus_slices, documents, reference

from bpe_stream.count import table as count_table
from bpe_stream.count.table import MAX_COUNT, PyCountTable, pack_counts, unpack_counts

REPO = Path(__file__).resolve().parent.parent
native = pytest.mark.skipif(count_table.NativeCountTable is None, reason="bpe_stream._fastbpe is not built")
TABLES = [
    pytest.param(lambda: count_table.NativeCountTable(), id="native", marks=native),
    pytest.param(PyCountTable, id="fallback"),
]


def expected_counts(docs, name) -> Counter:
    return sum((Counter(reference(doc, name)) for doc in docs), Counter())


@pytest.mark.parametrize("make", TABLES)
@pytest.mark.parametrize("name", NAMES)
@given(docs=st.lists(documents, max_size=4))
def test_feed_counts_what_counter_of_regex_counts(make, name, docs):
    table = make()
    fed = sum(table.feed(doc, name) for doc in docs)
    want = expected_counts(docs, name)
    assert table.to_dict() == want
    assert fed == table.total == sum(want.values()) and len(table) == len(want)


@pytest.mark.parametrize("make", TABLES)
@given(parts=st.lists(st.dictionaries(st.binary(max_size=6), st.integers(0, 1 << 40), max_size=20), max_size=5))
def test_merging_packed_tables_sums_them(make, parts):
    whole = make()
    for part in parts:
        table = make()
        for key, count in part.items():
            table.add(key, count)
        packed = table.pack()
        assert unpack_counts(packed) == part
        whole.merge(packed)
    want = sum((Counter(p) for p in parts), Counter())
    assert {k: v for k, v in whole.to_dict().items() if v} == +want
    assert whole.total == sum(want.values())


@native
@given(docs=st.lists(documents, max_size=4), name=st.sampled_from(NAMES))
def test_native_and_fallback_pack_the_same_bytes(docs, name):
    tables = count_table.NativeCountTable(), PyCountTable()
    for table in tables:
        for doc in docs:
            table.feed(doc, name)
        table.add(b"", 3)
    packed = [t.pack() for t in tables]
    assert packed[0] == packed[1] == pack_counts(tables[1].to_dict())
    assert tables[0].pack(sorted=True) == tables[1].pack(sorted=True)  # and as runs (test_count_runs.py)
    for table, other in ((tables[0], packed[1]), (tables[1], packed[0])):  # each merges the other's
        table.merge(other)
    assert tables[0].to_dict() == tables[1].to_dict()


def test_packed_layout_is_little_endian_length_bytes_count():
    table = count_table.CountTable()
    table.add(b"ab", 5)
    table.add(b"\xff", 1 << 40)
    assert table.pack() == struct.pack("<I", 2) + b"ab" + struct.pack("<Q", 5) + struct.pack("<I", 1) + b"\xff" + struct.pack("<Q", 1 << 40)


@pytest.mark.parametrize("make", TABLES)
def test_many_distinct_pretokens_grow_the_table(make):
    rng = random.Random(15)
    keys = [rng.randbytes(rng.randrange(0, 12)) for _ in range(60_000)]
    table, want = make(), Counter()
    for key in keys + keys[::3]:
        table.add(key)
        want[key] += 1
    assert table.to_dict() == want and len(table) == len(want)
    assert list(table.to_dict()) == list(want)  # insertion order
    table.clear()
    assert len(table) == 0 and table.total == 0 and table.pack() == b""
    table.add(b"x")
    assert table.to_dict() == {b"x": 1}


def near_keys(rng):
    """Keys of every length 0..40 that differ from each other in as little as can be: one
    byte at any position (the first 8, the last 8, an overlapping last word), a zero byte
    appended (b"a" and b"a\\0" share their first 8 bytes as a number) or one dropped."""
    keys = []
    for n in range(41):
        base = bytes(rng.randrange(256) for _ in range(n))
        keys += [base, base + b"\0", b"\0" * n]
        for i in range(n):
            keys += [base[:i] + bytes([base[i] ^ (1 << rng.randrange(8))]) + base[i + 1 :], base[:i]]
    return keys


@native
@pytest.mark.parametrize("seed", range(3))
def test_near_identical_keys_of_every_length(seed):
    """The native table hashes and compares a key by 8-byte words: keys that differ in one
    byte or in their length alone are distinct entries, in the fallback's insertion order."""
    rng = random.Random(seed)
    keys = near_keys(rng)
    keys = [k for k in keys for _ in range(rng.randrange(1, 4))]
    rng.shuffle(keys)
    tables = count_table.NativeCountTable(), PyCountTable()
    for table in tables:
        for key in keys:
            table.add(key, len(key) + 1)
    assert tables[0].to_dict() == tables[1].to_dict() == Counter({k: 0 for k in keys}) + Counter(
        {k: sum(len(x) + 1 for x in keys if x == k) for k in set(keys)}
    )
    assert tables[0].pack() == tables[1].pack()  # insertion order
    merged = count_table.NativeCountTable()  # merge hashes keys read from a packed buffer
    merged.merge(tables[1].pack())
    merged.merge(tables[0].pack())
    assert merged.pack() == pack_counts({k: 2 * v for k, v in tables[1].to_dict().items()})


@native
def test_fed_keys_of_every_length_near_the_end_of_the_data():
    """feed reads a pretoken's first 8 bytes as one word where 8 bytes remain in the data,
    byte by byte where fewer do; the last pretokens of a text of every length count alike."""
    rng = random.Random(7)
    for n in range(41):
        words = [bytes(rng.choice(b"ab") for _ in range(rng.randrange(1, 20))) for _ in range(5)]
        doc = b" ".join(words)[:n] + b"x" * rng.randrange(3)
        for name in ("words", "whitespace", "gpt2", "none"):
            tables = count_table.NativeCountTable(), PyCountTable()
            for table in tables:
                table.feed(doc, name)
            assert tables[0].pack() == tables[1].pack(), (doc, name)


# Runs long enough for the scanner's 8-bytes-a-step ASCII paths, broken at every offset by
# characters those paths hand back to the decoder: non-ASCII letters, marks, digits and
# spaces, a truncated or invalid sequence, CR/LF inside runs of spaces.
ASCII_RUNS = ["abcdefghijklmnopq", "ABCDEFGHIJKLMNOP", "HTTPServer", "0123456789012", " " * 13, "\t\t  \t",
              "\n" * 9, " \r\n  \n   ", "!!!...???;;;", "//////////", "don't", "DON'T", "x'll"]
BREAKS = [b"\xc3\xa9", b"\xc3\x89", "\u4e2d".encode(), "\u0301".encode(), "\u0663".encode(), b"\xc2\xa0",
          "\u3000".encode(), "\U0001f600".encode(), b"\xe4\xb8", b"\xff", b"\xed\xa0\x80", b"\xc2"]


@native
@pytest.mark.parametrize("name", NAMES)
def test_long_ascii_runs_broken_at_every_offset(name):
    rng = random.Random(name)
    docs = []
    for run_ in ASCII_RUNS:
        run_ = run_.encode()
        for cut in range(len(run_) + 1):
            for brk in rng.sample(BREAKS, 3):
                other = rng.choice(ASCII_RUNS).encode()
                docs.append(run_[:cut] + brk + run_[cut:] + other)
                docs.append((b" " if cut % 2 else b"") + run_[:cut] + brk)  # a break at the very end
    for _ in range(300):
        docs.append(b"".join(rng.choice([rng.choice(ASCII_RUNS).encode(), rng.choice(BREAKS)]) for _ in range(rng.randrange(8))))
    table = count_table.NativeCountTable()
    for doc in docs:
        table.feed(doc, name)
    want = expected_counts(docs, name)
    assert table.to_dict() == want
    for doc in docs[::5]:  # alone, as a whole text (the end of the text within 8 bytes)
        alone = count_table.NativeCountTable()
        alone.feed(doc, name)
        assert alone.to_dict() == Counter(reference(doc, name)), doc


@native
def test_a_table_grown_many_times_keeps_its_order():
    """Growing re-slots entries from the old slots: after 17 doublings every entry is found
    again and the entries stay in insertion order."""
    rng = random.Random(3)
    keys = list(dict.fromkeys(rng.randbytes(rng.randrange(1, 24)) for _ in range(150_000)))
    table = count_table.NativeCountTable()
    for i, key in enumerate(keys):
        table.add(key, i + 1)
        if i % 9_973 == 0:  # an early key is still found while the table grows
            table.add(keys[0])
    for key in keys[::7]:
        table.add(key, 1)
    want = {k: i + 1 for i, k in enumerate(keys)}
    want[keys[0]] += len(range(0, len(keys), 9_973))
    for key in keys[::7]:
        want[key] += 1
    assert list(table.to_dict().items()) == list(want.items())


@native
def test_arrays_past_the_huge_page_threshold_count_as_the_fallback_does():
    """hugepages.c maps an array of 4 MiB or more on its own: here the slots (512K of 8
    bytes), the entries (32 bytes each), the keys (9 MB of them) and the sort's items cross
    that line while the table grows, and after clear() the table is filled again in the
    arrays it kept.  Every count, the packed form and the key order stay the fallback's."""
    rng = random.Random(4)
    keys = list(dict.fromkeys(rng.randbytes(rng.randrange(1, 40)) for _ in range(150_000)))
    keys += [bytes([i % 256]) * 9 + rng.randbytes(rng.randrange(150, 450)) for i in range(20_000)]
    rng.shuffle(keys)
    native_table, fallback = count_table.NativeCountTable(), PyCountTable()
    for refill in range(2):
        for i, key in enumerate(keys[refill::2] if refill else keys):
            native_table.add(key, i % 5 + 1)
            fallback.add(key, i % 5 + 1)
        assert native_table.to_dict() == fallback.to_dict() and len(native_table) == len(fallback)
        assert native_table.pack() == fallback.pack()
        assert native_table.sorted_items() == fallback.sorted_items()
        native_table.clear()
        fallback.clear()
    assert len(native_table) == 0 and native_table.pack() == b""


@pytest.mark.parametrize("make", TABLES)
def test_limits_and_bad_input(make):
    table = make()
    table.add(b"a", MAX_COUNT - 1)
    table.add(b"b")
    assert table.total == MAX_COUNT
    with pytest.raises(OverflowError):
        table.add(b"a")  # the total, and so the count, would pass 2**64 - 1
    with pytest.raises(OverflowError):
        make().add(b"a", -1)
    with pytest.raises(OverflowError):
        make().add(b"a", 1 << 64)
    with pytest.raises(TypeError):
        make().add("text", 1)
    with pytest.raises(TypeError):
        make().add(b"a", 1.0)
    with pytest.raises(ValueError, match="no native scanner"):
        make().feed(b"abc", "regex:\\S+")
    assert table.to_dict() == {b"a": MAX_COUNT - 1, b"b": 1}  # failed steps change nothing


@pytest.mark.parametrize("make", TABLES)
def test_malformed_packed_counts(make):
    good = pack_counts({b"ok": 2})
    for bad in (b"\x01", good + b"\x05\x00\x00\x00ab", good + struct.pack("<I", 1) + b"x" + b"\x00" * 7):
        table = make()
        with pytest.raises(ValueError, match="malformed"):
            table.merge(bad)
        assert table.to_dict() == ({b"ok": 2} if bad.startswith(good) else {})  # what came before counts
    table = make()
    table.merge(b"")
    assert len(table) == 0


@native
@pytest.mark.parametrize("name", NAMES)
def test_shared_corpora_counts(name):
    for label, data in corpus_slices():
        table = count_table.NativeCountTable()
        assert table.feed(data, name) == len(reference(data, name)), label
        assert table.to_dict() == Counter(reference(data, name)), label


def test_without_the_extension_everything_falls_back_to_regex():
    # a fresh interpreter in which bpe_stream._fastbpe cannot be imported (as without a compiler)
    code = (
        "import sys; sys.modules['bpe_stream._fastbpe'] = None\n"
        "from bpe_stream.count import table as count_table; from bpe_stream.pretok import scan\n"
        "assert count_table.CountTable is count_table.PyCountTable and not scan.native_available()\n"
        "table = count_table.CountTable(); table.feed(b'a b a\\xff', 'gpt2')\n"
        "print(sorted(table.to_dict().items()), scan.scan(b'x  y', 'gpt2'))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True).stdout
    assert out.strip() == "[(b' a', 1), (b' b', 1), (b'a', 1), (b'\\xff', 1)] [b'x', b' ', b' y']"


@pytest.mark.parametrize("make", TABLES)
@given(counts=st.dictionaries(st.binary(max_size=12) | st.sampled_from([b"", b"\x00", b"a", b"a\x00", b"\xff" * 9]),
                              st.integers(1, 1 << 40), max_size=60))
def test_sorted_items_are_the_entries_in_bytes_order(make, counts):
    """Keys that share their first 8 bytes, a key before the longer ones it begins, bytes
    over 0x7f (unsigned order): what ``sorted`` of Python's bytes gives, and so LMDB's order."""
    table = make()
    for key, count in counts.items():
        table.add(key, count)
    keys, values = table.sorted_items()
    assert keys == sorted(counts) and values == [counts[k] for k in keys]
    assert table.to_dict() == counts  # unchanged


# The native sort is a radix sort on the keys' first 8 bytes (zero padded), then each run of
# equal first 8 bytes by the rest and the length: keys that tie there in every way they can.
def assert_sorted_items_in_bytes_order(table):
    keys, values = table.sorted_items()
    assert list(zip(keys, values)) == sorted(table.to_dict().items())


def filled(make, keys):
    table = make()
    for n, key in enumerate(keys):
        table.add(key, n + 1)
    return table


TIES = (
    [b"", b"\x00", b"\x7f", b"\x80", b"\xff", b"\xff" * 8, b"\xff" * 9, b"\xff" * 17]
    + [b"a" + b"\x00" * k for k in range(18)]  # b"a" < b"a\x00" < ... : equal heads up to 8 bytes
    + [b"\x00" * k for k in range(2, 18)]
    + [b"a\x00\x00\x00\x00\x00\x00\x00\x01", b"a\x00\x00\x00\x00\x00\x00\x01", b"a\x01"]
    + [b"abcdefgh" + tail for tail in (b"", b"\x00", b"\x00\x00", b"a", b"\x80", b"\xff", b"ijklmnop", b"ijklmnopq")]
    + [b"abc", b"abcdefg", b"abcdefg\x00", b"abcdefh", b"abcdefgg\xff"]
)


@pytest.mark.parametrize("make", TABLES)
@pytest.mark.parametrize("order", ["as_listed", "reversed", "shuffled"])
def test_sorted_items_resolve_ties_of_the_first_8_bytes(make, order):
    keys = list(TIES)
    if order == "reversed":
        keys.reverse()
    elif order == "shuffled":
        random.Random(7).shuffle(keys)
    assert_sorted_items_in_bytes_order(filled(make, keys))


@pytest.mark.parametrize("make", TABLES)
def test_sorted_items_of_no_entry_and_of_one(make):
    assert make().sorted_items() == ([], [])
    for key in (b"", b"\x00", b"\xff" * 9):
        assert filled(make, [key]).sorted_items() == ([key], [1])


@pytest.mark.parametrize("make", TABLES)
@pytest.mark.parametrize("head", [b"", b"prefix_8", b"\xff\xfe\xfd\xfc\xfb\xfa\xf9\xf8", b"\x00" * 8])
def test_sorted_items_of_keys_that_share_their_first_8_bytes(make, head):
    """Every key in one long run of equal heads (or, head b"", keys that differ first at
    their 9th or later byte); tails over an alphabet with 0x00 and bytes over 0x7f."""
    rng = random.Random(len(head))
    alphabet = b"\x00\x01a\x7f\x80\xff"
    keys = {head + bytes(rng.choice(alphabet) for _ in range(rng.randrange(12))) for _ in range(3000)}
    if not head:
        keys = {b"\x00" * 8 + key for key in keys} | {b"\x00" * k for k in range(9)}
    assert_sorted_items_in_bytes_order(filled(make, keys))


@pytest.mark.parametrize("make", TABLES)
@pytest.mark.parametrize("prefix", [b"\x00" * 16, b"0123456789abcdef", b"\xd0\xbf\xd1\x80" * 4])
def test_sorted_items_of_keys_that_share_their_first_16_bytes(make, prefix):
    """More keys than an insertion-sorted bucket holds that tie on all 16 bytes the sort's
    items carry (the rest of the keys decide), a few that tie on 15, and prefixes of them."""
    rng = random.Random(prefix)
    alphabet = b"\x00\x01a\x7f\x80\xff"
    keys = {prefix + bytes(rng.choice(alphabet) for _ in range(rng.randrange(1, 9))) for _ in range(400)}
    keys |= {prefix[:k] for k in range(17)} | {prefix[:15] + bytes([v]) for v in (0, 0x7f, 0xff)}
    assert_sorted_items_in_bytes_order(filled(make, keys))


@pytest.mark.parametrize("make", TABLES)
def test_sorted_items_of_keys_that_differ_in_one_byte_of_the_first_8(make):
    # all heads agree but at one byte: the radix sort's passes at the others move nothing
    for at in (0, 3, 7):
        keys = [b"x" * at + bytes([v]) + b"y" * (7 - at) + tail for v in (0xFF, 0x80, 0x00, 0x41) for tail in (b"", b"z")]
        assert_sorted_items_in_bytes_order(filled(make, keys))


@pytest.mark.parametrize("make", TABLES)
def test_sorted_items_of_a_large_random_set(make):
    rng = random.Random(2026)
    alphabet = b"\x00 ae\x7f\x80\xc3\xff"
    keys = set()
    while len(keys) < 30000:  # short keys of a small alphabet: many runs of equal heads, long and short
        keys.add(bytes(rng.choice(alphabet) for _ in range(rng.randrange(14))))
    keys |= {rng.randbytes(rng.randrange(30)) for _ in range(20000)}  # and heads that differ everywhere
    keys = list(keys)
    rng.shuffle(keys)
    assert_sorted_items_in_bytes_order(filled(make, keys))


@pytest.mark.parametrize("make", TABLES)
@given(keys=st.lists(st.lists(st.sampled_from(b"\x00\x01\x7f\x80\xff"), max_size=20).map(bytes)
                     | st.builds(bytes.__add__, st.sampled_from([b"", b"a" * 8, b"\x00" * 8, b"\xff" * 7]),
                                 st.binary(max_size=10)),
                     max_size=200))
def test_sorted_items_of_keys_with_long_common_prefixes(make, keys):
    assert_sorted_items_in_bytes_order(filled(make, keys))


# -- threads ------------------------------------------------------------------------------
@native
def test_tables_fed_on_threads_at_once_count_what_one_thread_counts():
    """Feeds and packs of large data release the GIL (counting's threads): tables fed on
    several threads at once hold exactly the counts of the same feeds one after another."""
    import threading

    text = b"".join(data for _, data in corpus_slices())
    parts = [text[i::4] for i in range(4)]  # four different byte strings, each over the GIL-free size
    assert all(len(p) >= 1 << 16 for p in parts)

    def count(part, out, i):
        table = count_table.NativeCountTable()
        table.feed(part, "gpt2", 64)
        out[i] = table.pack(sorted=True)

    alone = [None] * 4
    for i, part in enumerate(parts):
        count(part, alone, i)
    together = [None] * 4
    threads = [threading.Thread(target=count, args=(part, together, i)) for i, part in enumerate(parts)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert together == alone


@native
def test_a_table_in_use_on_another_thread_refuses_every_call():
    """A second thread's call on a table that a feed is using without the GIL is an error,
    not a race (the state ``_mark_in_use`` sets is the one that feed holds meanwhile)."""
    table = count_table.NativeCountTable()
    table.feed(b"hello world", "gpt2")
    table._mark_in_use(True)
    calls = [lambda: table.feed(b"x", "gpt2"), lambda: table.feed_between(b"x", "gpt2", 0, [b"<s>"]),
             lambda: table.add(b"x"), lambda: table.merge(b""), lambda: table.pack(), lambda: table.to_dict(),
             lambda: table.sorted_items(), lambda: table.clear(), lambda: len(table), lambda: table.total,
             lambda: table.key_bytes]
    for call in calls:
        with pytest.raises(RuntimeError, match="in use by another thread"):
            call()
    table._mark_in_use(False)
    assert table.to_dict() == {b"hello": 1, b" world": 1} and len(table) == 2
