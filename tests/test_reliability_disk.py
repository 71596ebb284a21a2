"""Reliability (issue 7): a full disk.  A count whose store cannot grow -- the LMDB map cannot
be enlarged (in process), or the file system is full (a small tmpfs, where root can mount
one) -- stops with one clean error, leaves whole batches only, and the same command finishes
the count exactly once space is freed.
"""

from __future__ import annotations

import errno
import os
import shutil
import subprocess

import lmdb
import pytest
import reliability_helpers as H
from conftest import assert_clean_error, ok
from reliability_helpers import EOT, Cmd

from bpe_stream.store.lmdb_store import StoreError


class _CappedLmdb:
    """The ``lmdb`` module as ``bpe_stream.store.lmdb_store`` sees it, except that a map cannot grow past
    ``cap`` bytes: ``set_mapsize`` fails as it does when the address space or the disk runs out."""

    def __init__(self, cap):
        self.cap = cap

    def __getattr__(self, name):
        return getattr(lmdb, name)

    def open(self, *args, **kwargs):
        return _CappedEnv(lmdb.open(*args, **kwargs), self)


class _CappedEnv:
    def __init__(self, env, owner):
        self._env, self._owner = env, owner

    def set_mapsize(self, size):
        if self._owner.cap is not None and size > self._owner.cap:
            raise lmdb.Error("mdb_env_set_mapsize: Cannot allocate memory")
        return self._env.set_mapsize(size)

    def __getattr__(self, name):
        return getattr(self._env, name)


class _CappedWriter:
    """The native store writer (``_fastbpe.StoreWriter``) with the same cap as ``_CappedLmdb``:
    its ``set_map_size`` fails as LMDB's does (ENOMEM) past ``owner.cap``."""

    def __init__(self, real, owner):
        self._real, self._owner = real, owner

    def __call__(self, path, map_size):
        writer = self._real(path, map_size)
        owner, native = self._owner, __import__("bpe_stream.native", fromlist=["fastbpe"]).fastbpe

        class Capped:
            def set_map_size(self, size):
                if owner.cap is not None and size > owner.cap:
                    raise native.LmdbError(errno.ENOMEM, "Cannot allocate memory")
                return writer.set_map_size(size)

            def __getattr__(self, name):
                return getattr(writer, name)

        return Capped()


def _snapshot_unless_a_batch_is_unfinished(store):
    """The store's state after a write failed: whole batches only, or -- when the failure hit
    a staged batch in the middle of being applied, which a reader must finish before it can
    read and cannot on a full disk -- one clean error that says how to go on (None)."""
    try:
        return H.snapshot(store)
    except StoreError as exc:
        text = str(exc)
        assert "could not finish" in text and "free disk space" in text and "\n" not in text, text
        return None


def test_count_when_the_map_cannot_grow_stops_cleanly_and_finishes_later(cli, tmp_path, monkeypatch, corpus_files,
                                                                         corpus_oracle):
    from bpe_stream.store import lmdb_store as store_mod

    capped = _CappedLmdb(cap=512 << 10)
    monkeypatch.setattr(store_mod, "lmdb", capped)
    if store_mod._StoreWriter is not None:  # batches written by the native writer: its map capped too
        monkeypatch.setattr(store_mod, "_StoreWriter", _CappedWriter(store_mod._StoreWriter, capped))
    monkeypatch.setattr(store_mod, "_INITIAL_MAP_SIZE", 256 << 10)
    store = tmp_path / "store"
    args = ("count", "--store", store, "--special-token", EOT, "--max-memory", "1M", "-w", "1", *corpus_files)
    res = cli(*args)
    snap = _snapshot_unless_a_batch_is_unfinished(store)
    if snap is not None:
        offsets = H.check_partial_state(snap, corpus_oracle)  # consistent: whole batches only
        assert 0 < sum(offsets.values()) < sum(map(len, corpus_files.values())), offsets
    assert_clean_error(res)
    capped.cap = None  # space freed
    ok(cli(*args))
    final = H.snapshot(store)
    assert final["words"] == corpus_oracle.words() and final["totals"] == corpus_oracle.totals()


@pytest.fixture
def small_tmpfs(tmp_path):
    """A 700 kB tmpfs (needs root and a working mount); yields (mount point, resize function)."""
    point = tmp_path / "tmpfs"
    point.mkdir()
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("a small tmpfs needs root and mount(8); the in-process map-cap test covers a full store")
    res = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=700k", "tmpfs", str(point)], capture_output=True,
                         check=False)
    if res.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {res.stderr.decode().strip()}")

    def resize(size: str):
        subprocess.run(["mount", "-o", f"remount,size={size}", str(point)], check=True)

    try:
        yield point, resize
    finally:
        subprocess.run(["umount", "-l", str(point)], capture_output=True, check=False)


def test_count_on_a_full_disk_stops_cleanly_and_finishes_after_space_is_freed(tmp_path, small_tmpfs, corpus_files,
                                                                               corpus_oracle):
    point, resize = small_tmpfs
    store = point / "store"
    cmd = Cmd("count", "--store", store, "--special-token", EOT, "--max-memory", "1M", "-w", "1", *corpus_files)
    res = H.run(cmd, tmp_path)
    snap = _snapshot_unless_a_batch_is_unfinished(store)
    if snap is not None:
        offsets = H.check_partial_state(snap, corpus_oracle)
        assert sum(offsets.values()) < sum(map(len, corpus_files.values())), "the disk did not fill up"
    assert_clean_error(res)
    resize("64m")
    ok(H.run(cmd, tmp_path))
    final = H.snapshot(store)
    assert final["words"] == corpus_oracle.words() and final["totals"] == corpus_oracle.totals()


