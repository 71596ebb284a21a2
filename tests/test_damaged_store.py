"""Damaged stores and full disks (issue 19, item 6): never a signal, one ``Error:`` line.

LMDB keeps no checksums and follows its file blindly: a flipped bit in a page number made it
read past the end of the file (SIGBUS) or fail an assertion (SIGABRT), and a new store on a
full file system died of SIGBUS in LMDB's lock file.  Here:

* bits of a small store's ``data.mdb`` are flipped -- a seeded sample over the whole file and
  every branch page's child pointers -- and ``stats``, ``export-counts`` and ``train`` run on
  each copy: each ends with exit 0 and a consistent result, or exit 1 and one ``Error:`` line
  naming the store, never a signal or a traceback;
* ``count`` creates a store on a tmpfs that is full, or has one to six pages left: exit 1
  with one ``Error:`` line, and the same command succeeds once space is freed.
"""

from __future__ import annotations

import json
import os
import random
import struct
import subprocess
import sys

import lmdb
import pytest
import reliability_helpers as H
from mounts import mounted
from reliability_helpers import EOT, Cmd


@pytest.fixture(scope="module")
def small_store(tmp_path_factory):
    """A store of ~20k pretokens (English, code, a few long base64 runs, so that the long-word
    table and overflow pages exist too), compacted so that every page is in use."""
    base = tmp_path_factory.mktemp("damaged")
    files = H.write_slices(base / "input", [("en_100M.txt", 0, 60_000), ("multi_25M.txt", 400_001, 40_000)])
    rng = random.Random(5)
    long_runs = base / "input" / "long.txt"
    long_runs.write_bytes(b"".join(rng.randbytes(n).hex().encode() + b" x\n" for n in (300, 2000, 5000)))
    counted = base / "counted"
    res = H.run(Cmd("count", "--store", counted, "--special-token", EOT, "-w", "1", "-q", *files, long_runs), base)
    assert res.returncode == 0, res.stderr.decode()
    store = base / "store"
    store.mkdir()
    env = lmdb.open(str(counted), readonly=True, lock=False, max_dbs=8)
    env.copy(str(store), compact=True)
    env.close()
    return store


def _branch_pointer_bits(data: bytes, psize: int = 4096) -> list:
    """Bit positions in the child page numbers of every branch node (an LMDB branch page:
    16-byte header with flags 0x01, then 2-byte node offsets; a node's first 6 bytes are its
    child's page number): the flips that made LMDB fail assertions or read past the file."""
    bits = []
    for pgno in range(2, len(data) // psize):
        page = data[pgno * psize:(pgno + 1) * psize]
        number, _, flags, lower, _ = struct.unpack_from("<QHHHH", page)
        if number != pgno or flags & 0x3F != 0x01:
            continue
        for i in range((lower - 16) // 2):
            node = pgno * psize + struct.unpack_from("<H", page, 16 + 2 * i)[0]
            bits += [8 * node + 0, 8 * node + 7, 8 * (node + 1) + 0, 8 * (node + 2) + 0]
    return bits


# Runs in one child process: for each flipped bit, a damaged copy of the store and the three
# commands in process (typer's app, stdout and stderr captured), one JSON line per copy on the
# real stdout.  A signal kills the child, and the test then names the bit it was at.
DRIVER = r"""
import contextlib, io, json, os, shutil, sys, traceback
from bpe_stream import Tokenizer
from bpe_stream.cli.commands import app
from bpe_stream.store.counts_file import check_counts

bits, source, work = json.loads(sys.argv[1]), sys.argv[2], sys.argv[3]
data = open(os.path.join(source, "data.mdb"), "rb").read()
real_stdout = sys.stdout
SAMPLE = "Hello world, the quick brown fox.\n def f(x): return x + 1  # \u00e9t\u00e9 \u4e2d\u6587\n"

def run(args):
    out, err = io.TextIOWrapper(io.BytesIO(), encoding="utf-8"), io.StringIO()  # stdout with a .buffer
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = app(args, standalone_mode=False, prog_name="bpe-stream")
        except SystemExit as exc:
            rc = exc.code
        except BaseException:
            rc, err = "traceback", io.StringIO(traceback.format_exc())
    out.flush()
    return rc or 0, out.buffer.getvalue().decode("utf-8", "replace"), err.getvalue()

for bit in bits:
    print(json.dumps({"at": bit}), file=real_stdout, flush=True)
    store = os.path.join(work, "store")
    shutil.rmtree(store, ignore_errors=True)
    os.makedirs(store)
    damaged = bytearray(data)
    damaged[bit // 8] ^= 1 << (bit % 8)
    with open(os.path.join(store, "data.mdb"), "wb") as f:
        f.write(damaged)
    counts, tok = os.path.join(work, "counts.tsv"), os.path.join(work, "tok.json")
    for path in (counts, tok):
        if os.path.exists(path):
            os.unlink(path)
    report = {"bit": bit, "runs": {}, "inconsistent": []}
    for name, args in (("stats", ["stats", "--store", store, "--json"]),
                       ("export-counts", ["export-counts", "--store", store, "-o", counts, "-q"]),
                       ("train", ["train", "--store", store, "--vocab-size", "300", "-o", tok, "-q"])):
        rc, out, err = run(args)
        report["runs"][name] = [rc, err]
        if rc != 0:
            continue
        try:
            if name == "stats":
                report["unique"] = json.loads(out)["unique_pretokens"]
            elif name == "export-counts":
                lines = check_counts(counts).lines
                if "unique" in report and lines != report["unique"]:
                    report["inconsistent"].append(f"stats says {report['unique']} pretokens, export wrote {lines}")
            else:
                t = Tokenizer.load(tok)
                if t.decode(t.encode(SAMPLE)) != SAMPLE:
                    report["inconsistent"].append("the tokenizer does not round-trip")
        except Exception as exc:
            report["inconsistent"].append(f"{name}: {type(exc).__name__}: {exc}")
    print(json.dumps(report), file=real_stdout, flush=True)
"""


def test_flipped_bits_in_a_store_end_in_a_result_or_one_error_line_never_a_signal(tmp_path, small_store):
    data = (small_store / "data.mdb").read_bytes()
    rng = random.Random(19)
    pointer_bits = _branch_pointer_bits(data)
    assert pointer_bits, "the store has no branch page: make it bigger"
    bits = sorted(set(rng.sample(range(8 * len(data)), 200) + rng.sample(pointer_bits, min(60, len(pointer_bits)))))
    work = tmp_path / "work"
    work.mkdir()
    proc = subprocess.run([sys.executable, "-c", DRIVER, json.dumps(bits), str(small_store), str(work)],
                          capture_output=True, timeout=1800, env=Cmd().env, check=False)
    lines = [json.loads(line) for line in proc.stdout.decode().splitlines()]
    reports = [line for line in lines if "runs" in line]
    if proc.returncode != 0:
        last = lines[-1] if lines else {}
        pytest.fail(f"the driver died (exit {proc.returncode}) at bit {last.get('at')}: "
                    f"{proc.stderr.decode('utf-8', 'replace')[-2000:]}")
    assert len(reports) == len(bits)
    bad, outcomes = [], {}
    store_named = str(work / "store")
    for report in reports:
        for name, (rc, err) in report["runs"].items():
            errors = [line for line in err.splitlines() if line.startswith("Error:")]
            fine = (rc == 0 and "Traceback" not in err) or (
                rc == 1 and len(errors) == 1 and store_named in errors[0] and "Traceback" not in err)
            outcomes[(name, rc)] = outcomes.get((name, rc), 0) + 1
            if not fine:
                bad.append((report["bit"], name, rc, err[-600:]))
        bad += [(report["bit"], "consistency", 0, what) for what in report["inconsistent"]]
    assert not bad, f"{len(bad)} bad outcomes of {len(bits)} flips ({outcomes}); first: {bad[:3]}"
    assert outcomes.get(("stats", 1), 0) > 0 and outcomes.get(("stats", 0), 0) > 0, outcomes


def test_export_counts_of_a_store_whose_totals_are_short_of_its_words_is_one_error(tmp_path, small_store):
    """A damaged totals record (its pretokens below what the words add up to: a bit flip there
    is not caught by the words' check record) makes a counts file that import would refuse:
    export-counts says the store is damaged instead, and leaves no file."""
    import shutil

    from bpe_stream import Store

    store = tmp_path / "store"
    shutil.copytree(small_store, store)
    with Store.open(store) as st_:
        with st_.reader() as txn:
            pretokens = st_.totals(txn)["pretokens"]
        st_.write(lambda txn: st_.bump_totals(txn, {"pretokens": -(pretokens // 2)}))
    res = H.run(Cmd("export-counts", "--store", store, "-o", tmp_path / "counts.tsv"), tmp_path)
    lines = res.stderr.decode().splitlines()
    assert res.returncode == 1 and len(lines) == 1 and lines[0].startswith("Error:") and "damaged" in lines[0], lines
    assert "add up to" in lines[0] and not (tmp_path / "counts.tsv").exists()


# -- full disk ---------------------------------------------------------------------------------
@pytest.fixture
def small_tmpfs(tmp_path):
    """A 256 kB tmpfs; yields its mount point."""
    with mounted(tmp_path / "tmpfs", ["-t", "tmpfs", "-o", "size=256k", "tmpfs"]) as point:
        yield point


def _fill(point, leave_pages: int):
    """Fills the file system but for ``leave_pages`` 4 kB pages; returns the filler's path."""
    filler = point / "filler"
    with open(filler, "wb", buffering=0) as f:
        while True:
            try:
                f.write(b"\0" * 4096)
            except OSError:
                break
    with open(filler, "r+b") as f:
        f.truncate(max(0, os.path.getsize(filler) - 4096 * leave_pages))
    return filler


@pytest.mark.parametrize("leave_pages", [0, 1, 2, 3, 4, 6])
def test_count_creating_a_store_on_a_full_disk_is_one_error_line_then_resumes(tmp_path, small_tmpfs, leave_pages):
    doc = tmp_path / "a.txt"
    doc.write_bytes(b"hello world, hello disk\n" * 200)
    store = small_tmpfs / "store"
    filler = _fill(small_tmpfs, leave_pages)
    cmd = Cmd("count", "--store", store, "-w", "1", doc)
    res = H.run(cmd, tmp_path)
    err = res.stderr.decode("utf-8", "replace")
    assert res.returncode == 1, f"exit {res.returncode} (a signal is negative): {err!r}"
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("Error:") and str(store) in lines[0], lines
    filler.unlink()
    res = H.run(cmd, tmp_path)
    assert res.returncode == 0, res.stderr.decode()
    assert H.snapshot(store)["words"] == dict(H.oracle([doc.read_bytes()], ())[0])
