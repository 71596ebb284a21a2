"""The identity digest of counted files: XXH3-128 in new records, BLAKE2b in older ones.

* ``_fastbpe.FileDigest`` is XXH3-128 as the ``xxhash`` package (the reference implementation's
  binding) computes it, for any data fed in any pieces, copies included;
* a record's digest is the block chain of ``seen_files.PrefixDigest`` over the file's bytes,
  checked here against the chain built from ``xxhash`` directly;
* records of the earlier kind (BLAKE2b, the seams' ``digest_kind`` knob writes them as the
  releases before this one did) go on as they were: a touched file is skipped, a grown one is
  counted on (its record keeping its kind), a moved one is known, an edited one refused;
* without the C extension an XXH3 record is judged by size and time alone, and merge-stores
  does not tell two files apart by heads of different kinds.
"""

from __future__ import annotations

import os

import pytest
import reliability_helpers as H
from hypothesis import given
from hypothesis import strategies as st
from reliability_helpers import EOT, Cmd
from test_source_identity import TEXT, _clean, _count, _lines, _ok, _one_error, _state

from bpe_stream import Store
from bpe_stream.count import seen_files
from bpe_stream.count.counting import count_sources, make_settings
from bpe_stream.inputs.reader import Source
from bpe_stream.native import fastbpe

xxhash = pytest.importorskip("xxhash")
needs_c = pytest.mark.skipif(fastbpe is None, reason="bpe_stream._fastbpe is not built")


@needs_c
@given(data=st.binary(max_size=5000), cuts=st.lists(st.integers(0, 5000), max_size=6), at=st.integers(0, 5000))
def test_file_digest_is_xxh3_128_for_any_pieces_and_copies(data, cuts, at):
    want = xxhash.xxh3_128(data).digest()
    d = fastbpe.FileDigest()
    bounds = [0, *sorted(c for c in cuts if c <= len(data)), len(data)]
    twin = None
    for a, b in zip(bounds, bounds[1:]):
        d.update(memoryview(data)[a:b])
        if twin is None and b >= min(at, len(data)):
            twin = d.copy()
            twin_at = b
    twin.update(data[twin_at:])
    assert d.digest() == twin.digest() == want
    assert fastbpe.FileDigest(data).digest() == want
    big = data * (70_000 // max(len(data), 1) + 1)  # past the size fed without the GIL
    assert fastbpe.FileDigest(big).digest() == xxhash.xxh3_128(big).digest()


def _chain(data: bytes) -> tuple:
    """(digest, [at, chain], head) of ``data`` as PrefixDigest's block chain, with xxhash."""
    chain, at = b"", 0
    while len(data) - at >= seen_files.DIGEST_BLOCK:
        chain = xxhash.xxh3_128(chain + data[at:at + seen_files.DIGEST_BLOCK]).digest()
        at += seen_files.DIGEST_BLOCK
    head = xxhash.xxh3_128(data[:seen_files.HEAD_BYTES]).digest()
    return xxhash.xxh3_128(chain + data[at:]).digest(), [at, chain], [min(len(data), seen_files.HEAD_BYTES), head]


@needs_c
def test_a_new_record_holds_the_xxh3_block_chain_of_the_file(tmp_path):
    data = (TEXT * 40_000)[:2 * seen_files.DIGEST_BLOCK + 12_345]
    f = tmp_path / "f.txt"
    f.write_bytes(data)
    with Store.open(tmp_path / "s", create=True) as st_:
        count_sources(st_, [Source.from_arg(str(f))], make_settings("gpt2", [EOT]), range_bytes=300_000)
        with st_.reader() as txn:
            record = st_.source(txn, os.fsencode(os.path.realpath(f)), digests=True)
    digest, chain, head = _chain(data)
    assert record["hash"] == "xxh3" and record["digest"] == digest and record["chain"] == chain
    assert record["head"] == head


@needs_c
@pytest.mark.parametrize("old_kind", ["blake2b", "xxh3"])
def test_records_of_either_kind_go_on_as_they_were(tmp_path, old_kind):
    f = tmp_path / "f.txt"
    f.write_bytes(TEXT * 3)
    store = tmp_path / "store"
    _ok(H.run(Cmd("count", "--store", store, "--special-token", EOT, "-w", "1", f,
                  knobs={"digest_kind": old_kind}), tmp_path))
    key = os.fsencode(os.path.realpath(f))

    def record():
        with Store.open(store, readonly=True) as st_, st_.reader() as txn:
            return st_.source(txn, key, digests=True)

    assert record().get("hash") == (None if old_kind == "blake2b" else "xxh3")
    st_ = f.stat()
    os.utime(f, ns=(st_.st_atime_ns, st_.st_mtime_ns + 10**9))  # touched: the digest says unchanged
    res = _ok(_count(store, f, cwd=tmp_path))
    assert any("its content is unchanged" in line for line in _lines(res)), _lines(res)
    with open(f, "ab") as out:  # grown: counted on, the record keeping its kind
        out.write(b" and then some more words\n")
    _ok(_count(store, f, cwd=tmp_path))
    assert record().get("hash") == (None if old_kind == "blake2b" else "xxh3")
    assert _state(store) == _clean([f.read_bytes()])
    moved = tmp_path / "moved.txt"
    f.rename(moved)  # moved: the committed bytes are there
    res = _ok(_count(store, moved, cwd=tmp_path))
    assert any("already counted" in line for line in _lines(res)), _lines(res)
    moved.write_bytes(b"X" + moved.read_bytes())  # edited: refused
    _one_error(_count(store, moved, cwd=tmp_path), "--recount")


def test_without_the_extension_an_xxh3_record_is_judged_by_size_and_time(tmp_path, monkeypatch):
    if fastbpe is None:
        pytest.skip("writing an xxh3 record needs the extension")
    f = tmp_path / "f.txt"
    f.write_bytes(TEXT)
    settings = make_settings("gpt2", [EOT])
    with Store.open(tmp_path / "s", create=True) as st_:
        count_sources(st_, [Source.from_arg(str(f))], settings)
    monkeypatch.setattr(seen_files, "_native", None)
    monkeypatch.setattr(seen_files, "NEW_KIND", "blake2b")
    assert seen_files.record_kind({"hash": "xxh3"}) is None and seen_files.record_kind({}) == "blake2b"
    with Store.open(tmp_path / "s") as st_:
        summary = count_sources(st_, [Source.from_arg(str(f))], settings)
        assert summary.bytes == 0  # unchanged: skipped
        with open(f, "ab") as out:
            out.write(b"more\n")
        with pytest.raises(seen_files.Refused, match="C extension"):
            count_sources(st_, [Source.from_arg(str(f))], settings)


@needs_c
def test_merge_stores_does_not_tell_files_apart_by_heads_of_two_kinds(tmp_path):
    """The same file counted into a store of each kind: its heads differ only by their kind, so
    the merge refuses it as counted twice instead of adding it up twice."""
    f = tmp_path / "f.txt"
    f.write_bytes(TEXT * 30)
    one, two, dest = tmp_path / "one", tmp_path / "two", tmp_path / "dest"
    _ok(H.run(Cmd("count", "--store", one, "--special-token", EOT, "-w", "1", f, knobs={"digest_kind": "blake2b"}),
              tmp_path))
    _ok(_count(two, f, cwd=tmp_path))
    _one_error(H.run(Cmd("merge-stores", "--store", dest, one, two), tmp_path), str(f), "twice")
