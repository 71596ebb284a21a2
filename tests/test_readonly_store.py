"""A store this process cannot write (issue 19, item 12): ``stats``, ``export-counts`` and
``train`` (into a tokenizer written elsewhere) work read-only; ``train`` then keeps no
checkpoints and says so on stderr; nothing in the store changes.

Two ways to be unable to write, both real: a read-only bind mount of the store's directory
(EROFS; needs root and mount(8)), and a directory and files without write permission read by
root that has dropped its power to override permissions (``setpriv``; EACCES).  Either is
skipped where the machine cannot do it.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
from pathlib import Path

import pytest
import reliability_helpers as H
from mounts import mounted
from reliability_helpers import EOT, Cmd

from bpe_stream import Tokenizer


@pytest.fixture(scope="module")
def writable(tmp_path_factory):
    """A store counted normally, and what each command gives on it (the reference)."""
    base = tmp_path_factory.mktemp("writable")
    files = H.write_slices(base / "input", [("en_100M.txt", 0, 120_000), ("code_25M.txt", 300_000, 60_000)])
    store = base / "rw" / "store"
    store.parent.mkdir()
    _ok(H.run(Cmd("count", "--store", store, "--special-token", EOT, "-w", "1", "-q", *files), base))
    return base, store, {name: _ok(H.run(Cmd(*args(store, base / f"ref-{name}")), base)) for name, args in COMMANDS.items()}


COMMANDS = {
    "stats": lambda store, out: ("stats", "--store", store, "--json"),
    "export-counts": lambda store, out: ("export-counts", "--store", store, "-o", out, "-q"),
    "train-memory": lambda store, out: ("train", "--store", store, "--vocab-size", "600", "--path", "memory",
                                        "--checkpoint-every", "50", "-o", out),
    "train-disk": lambda store, out: ("train", "--store", store, "--vocab-size", "600", "--path", "disk",
                                      "--checkpoint-every", "50", "-o", out),
}


def _ok(res):
    assert res.returncode == 0, res.stderr.decode("utf-8", "replace")
    return res


def _digests(directory: Path) -> dict:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(directory.iterdir())}


@pytest.fixture(params=["read-only-mount", "no-write-permission"])
def locked_out(request, writable, tmp_path):
    """(store path, how to run a command line) for a copy of the store that cannot be written."""
    base, store, _ = writable
    source = tmp_path / "src"
    shutil.copytree(store.parent, source)
    if request.param == "read-only-mount":
        with mounted(tmp_path / "ro", ["--bind", str(source)], ["-o", "remount,bind,ro"]) as point:
            yield point / "store", lambda cmd: H.run(cmd, tmp_path)
        return
    setpriv = shutil.which("setpriv")
    if setpriv is None or subprocess.run(["id", "-u"], capture_output=True).stdout.strip() != b"0":
        pytest.skip("needs root and setpriv(1) to read files without permission overrides")
    for path in (source / "store").iterdir():
        path.chmod(0o444)
    (source / "store").chmod(0o555)

    def run(cmd):
        return subprocess.run([setpriv, "--bounding-set=-dac_override,-dac_read_search", "--", *cmd.argv],
                              env=cmd.env, cwd=tmp_path, capture_output=True, timeout=300, check=False)
    try:
        yield source / "store", run
    finally:
        (source / "store").chmod(0o755)


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_store_that_cannot_be_written_is_read_and_trained_from_unchanged(writable, locked_out, tmp_path, command):
    base, _, reference = writable
    store, run = locked_out
    before = _digests(store)
    out = tmp_path / f"out-{command}"
    res = run(Cmd(*COMMANDS[command](store, out)))
    err = res.stderr.decode("utf-8", "replace")
    assert res.returncode == 0, err
    assert "Traceback" not in err
    assert _digests(store) == before, "the store changed"
    if command == "stats":
        import json

        got, want = json.loads(res.stdout), json.loads(reference[command].stdout)
        for doc in (got, want):
            doc.pop("store"), doc.pop("disk_bytes")  # a copy's files may take other blocks
        # the reference's stats ran before its trains; the copy holds the record of the last (on disk)
        assert want.pop("last_training") is None and got.pop("last_training")["path"] == "disk"
        assert got == want
    elif command == "export-counts":
        assert out.read_bytes() == (base / "ref-export-counts").read_bytes()
    else:
        assert "without checkpoints" in err, err
        ref = Tokenizer.load(base / f"ref-{command}")
        tok = Tokenizer.load(out)
        assert (tok.merges, tok.vocab) == (ref.merges, ref.vocab)
