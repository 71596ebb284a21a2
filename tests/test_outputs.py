"""Outputs (issue 19, items 1 and 11): ``-o PATH`` never replaces what the path points at --
a FIFO or a character device is written directly, a symlink is written through (atomically
at its target) -- a path that cannot be written is refused before the work, naming the path
the user gave, ``-`` is stdout, and a killed write leaves a temporary file that says what it
is and is removed by the next write to the same path."""

from __future__ import annotations

import os
import socket
import stat
import subprocess
import sys
import threading

import pytest
import reliability_helpers as H
from conftest import assert_user_error
from reliability_helpers import Cmd
from small_made import make_small, run_cli


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    made = make_small(tmp_path_factory.mktemp("outputs"))
    ids = made["dir"] / "ids.txt"
    code, _, err = run_cli("encode", "-t", made["tok"], "-o", ids, made["text"])
    assert code == 0, err
    made["ids"] = ids
    return made


def command(made, name: str, out) -> list:
    """The command line of ``name`` writing its output to ``out``."""
    return {
        "encode": ["encode", "-t", made["tok"], "-o", out, made["text"]],
        "decode": ["decode", "-t", made["tok"], "-o", out, made["ids"]],
        "train": ["train", "--store", made["store"], "--num-merges", "40", "-o", out, "-q"],
        "export hf": ["export", "-t", made["tok"], "-f", "hf", "-o", out, "-q"],
        "export native": ["export", "-t", made["tok"], "-f", "native", "-o", out, "-q"],
        "export-counts": ["export-counts", "--store", made["store"], "-o", out, "-q"],
    }[name]


COMMANDS = ["encode", "decode", "train", "export hf", "export native", "export-counts"]


def expected(made, name: str, tmp_path) -> bytes:
    """What the command writes into a plain new file."""
    out = tmp_path / "plain.out"
    code, _, err = run_cli(*command(made, name, out))
    assert code == 0, err
    data = out.read_bytes()
    out.unlink()
    return data


def partials(directory) -> list:
    return sorted(p.name for p in directory.iterdir() if p.name.endswith(".tmp"))


# -- 1. FIFOs, character devices, symlinks ------------------------------------------------------
def read_from_fifo(fifo, run):
    """Runs ``run()`` while a thread reads ``fifo``; returns ``(run's result, bytes read)``.
    The test holds a writer end open until ``run`` returns, so the reader sees end-of-file
    only then whatever ``run`` does (a command that never opens the FIFO cannot hang it)."""
    r = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # no writer yet: must not wait for one
    os.set_blocking(r, True)
    w = os.open(fifo, os.O_WRONLY)  # does not block: there is a reader
    chunks = []

    def reader():
        while True:
            data = os.read(r, 1 << 16)
            if not data:
                return
            chunks.append(data)

    thread = threading.Thread(target=reader)
    thread.start()
    try:
        result = run()
    finally:
        os.close(w)
        thread.join()
        os.close(r)
    return result, b"".join(chunks)


@pytest.mark.parametrize("name", COMMANDS)
def test_output_onto_a_fifo_is_written_into_it(made, tmp_path, name):
    want = expected(made, name, tmp_path)
    fifo = tmp_path / "out.fifo"
    os.mkfifo(fifo)
    (code, _, err), got = read_from_fifo(fifo, lambda: run_cli(*command(made, name, fifo)))
    assert code == 0, err
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode), f"{name} -o FIFO replaced the FIFO with a regular file"
    assert got == want
    assert partials(tmp_path) == []


@pytest.mark.parametrize("name", COMMANDS)
def test_output_onto_a_symlink_is_written_through_it(made, tmp_path, name):
    want = expected(made, name, tmp_path)
    target_dir = tmp_path / "elsewhere"
    target_dir.mkdir()
    target = target_dir / "real.out"
    target.write_bytes(b"old contents\n")
    link = tmp_path / "link.out"
    link.symlink_to(os.path.join("elsewhere", "real.out"))  # relative, as users make them
    code, _, err = run_cli(*command(made, name, link))
    assert code == 0, err
    assert link.is_symlink() and os.readlink(link) == os.path.join("elsewhere", "real.out"), (
        f"{name} -o SYMLINK replaced the link")
    assert target.read_bytes() == want
    assert partials(tmp_path) == [] and partials(target_dir) == []


def test_output_onto_a_dangling_symlink_creates_its_target(made, tmp_path):
    want = expected(made, "encode", tmp_path)
    link = tmp_path / "link.out"
    link.symlink_to(tmp_path / "sub" / "made.out")
    (tmp_path / "sub").mkdir()
    code, _, err = run_cli(*command(made, "encode", link))
    assert code == 0, err
    assert link.is_symlink() and (tmp_path / "sub" / "made.out").read_bytes() == want


def test_a_symlink_to_a_gpt2_directory_stays_a_symlink(made, tmp_path):
    real = tmp_path / "real-gpt2"
    real.mkdir()
    link = tmp_path / "gpt2"
    link.symlink_to(real)
    code, _, err = run_cli("export", "-t", made["tok"], "-f", "gpt2", "-o", link, "-q")
    assert code == 0, err
    assert link.is_symlink() and sorted(p.name for p in real.iterdir()) == ["merges.txt", "special_tokens_map.json",
                                                                        "tokenizer_config.json", "vocab.json"]


def test_character_devices_and_fifos_are_written_directly(tmp_path):
    """The write path chosen for what ``os.stat`` calls a character device or a FIFO (no
    write happens here)."""
    from bpe_stream.atomic import output_target

    fifo = tmp_path / "f"
    os.mkfifo(fifo)
    assert output_target(fifo) == (str(fifo), True)
    if stat.S_ISCHR(os.stat("/dev/null").st_mode):
        assert output_target("/dev/null") == ("/dev/null", True)
    regular = tmp_path / "r"
    assert output_target(regular) == (str(regular), False)


@pytest.mark.skipif(not stat.S_ISCHR(os.stat("/dev/null").st_mode), reason="/dev/null is not a character device here")
@pytest.mark.parametrize("name", COMMANDS)
def test_output_onto_dev_null_leaves_the_device(made, name):
    from bpe_stream.atomic import output_target

    assert output_target("/dev/null")[1], "a write to /dev/null would not be direct"
    code, _, err = run_cli(*command(made, name, "/dev/null"))
    assert code == 0, err
    assert stat.S_ISCHR(os.lstat("/dev/null").st_mode), f"{name} -o /dev/null replaced /dev/null"


def test_a_full_device_is_one_error_naming_it(made):
    from bpe_stream.atomic import output_target  # (before the fix this import fails: /dev/full is never written)

    if not os.path.exists("/dev/full") or not stat.S_ISCHR(os.stat("/dev/full").st_mode):
        pytest.skip("no /dev/full here")
    assert output_target("/dev/full")[1], "a write to /dev/full would not be direct"
    code, _, err = run_cli(*command(made, "encode", "/dev/full"))
    assert_user_error(err, code)
    assert "/dev/full" in err and "No space left" in err


# -- 11. the output path is checked first, and named as given ------------------------------------
@pytest.mark.parametrize("name", COMMANDS)
def test_output_into_a_missing_directory_fails_first_naming_the_path(made, tmp_path, name):
    out = tmp_path / "missing" / "out.file"
    code, _, err = run_cli(*[a for a in command(made, name, out) if a != "-q"])
    assert_user_error(err, code)  # one line: train did not say "training in memory ..." first
    assert f"cannot write {out}" in err and "does not exist" in err
    assert ".tmp" not in err


@pytest.mark.parametrize("name", COMMANDS)
def test_output_onto_a_directory_fails_first_naming_the_path(made, tmp_path, name):
    if name == "export hf":
        pytest.skip("export --format hf -o DIRECTORY writes DIRECTORY/tokenizer.json")
    out = tmp_path / "a-directory"
    out.mkdir()
    code, _, err = run_cli(*command(made, name, out))
    assert_user_error(err, code)
    assert f"cannot write {out}: it is a directory" in err
    assert list(out.iterdir()) == [] and partials(tmp_path) == []


def test_train_checks_the_output_before_training(made, tmp_path):
    """Not quiet: train says "training ..." once it starts, so one Error line means it never did."""
    code, _, err = run_cli("train", "--store", made["store"], "--num-merges", "40", "-o", tmp_path / "no" / "t.json")
    assert_user_error(err, code)


@pytest.mark.parametrize("fmt", ["hf", "native"])
def test_export_to_dash_is_stdout(made, tmp_path, fmt, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli("export", "-t", made["tok"], "-f", fmt, "-o", "-", "-q")
    assert code == 0, err
    assert out == expected(made, f"export {fmt}", tmp_path)
    assert not (tmp_path / "-").exists()


@pytest.mark.parametrize("fmt", ["gpt2", "tiktoken"])
def test_export_of_several_files_to_dash_is_an_error(made, tmp_path, fmt, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli("export", "-t", made["tok"], "-f", fmt, "-o", "-")
    assert_user_error(err, code)
    assert "stdout" in err and out == b"" and list(tmp_path.iterdir()) == []


def test_train_to_dash_is_stdout(made, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli("train", "--store", made["store"], "--num-merges", "40", "-o", "-", "-q")
    assert code == 0, err
    assert out == made["tok"].read_bytes() and not (tmp_path / "-").exists()


# -- 11. temporary files of killed writes ---------------------------------------------------
def test_a_killed_write_leaves_a_named_partial_file_that_the_next_write_removes(made, tmp_path):
    out = tmp_path / "ids.txt"
    res = H.run(Cmd("encode", "-t", made["tok"], "-o", out, made["text"], knobs={"sigkill_at": "replace:1"}), tmp_path)
    assert res.returncode == -9, res
    left = partials(tmp_path)
    assert len(left) == 1, left
    assert left[0].startswith(".ids.txt.bpe-stream-partial-" + socket.gethostname() + "-"), left
    code, _, err = run_cli(*command(made, "encode", out))
    assert code == 0, err
    assert partials(tmp_path) == [], "the partial file of the killed write was not removed"
    assert out.read_bytes() == expected(made, "encode", tmp_path)


def test_partial_files_of_live_processes_and_other_hosts_are_kept(made, tmp_path):
    from bpe_stream.atomic import PARTIAL_TAG

    host = socket.gethostname()
    live = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    try:
        dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                              check=True).stdout.decode().strip()
        names = {
            "live": f".ids.txt.{PARTIAL_TAG}-{host}-{live.pid}.tmp",
            "other host": f".ids.txt.{PARTIAL_TAG}-another-machine-{dead}.tmp",
            "other output": f".other.txt.{PARTIAL_TAG}-{host}-{dead}.tmp",
            "dead": f".ids.txt.{PARTIAL_TAG}-{host}-{dead}.tmp",
        }
        for name in names.values():
            (tmp_path / name).write_bytes(b"partial")
        code, _, err = run_cli(*command(made, "encode", tmp_path / "ids.txt"))
        assert code == 0, err
        assert partials(tmp_path) == sorted(names[k] for k in ("live", "other host", "other output"))
    finally:
        live.stdin.close()
        live.wait()


# -- 12. write-behind of large outputs ------------------------------------------------------
@pytest.mark.parametrize("linux_call", [True, False])
def test_a_large_output_starts_its_writeback_as_it_is_written(tmp_path, monkeypatch, linux_call):
    """Every WRITE_BEHIND_BYTES written, what was written since the last start is flushed to
    the file and its writeback started (the ranges follow each other from byte 0); the output
    is the same bytes, renamed into place, with or without the call."""
    from bpe_stream import atomic

    started = []

    def start(fd, offset, nbytes, flags):
        started.append((offset, nbytes, os.fstat(fd).st_size, flags))
        return 0

    monkeypatch.setattr(atomic, "WRITE_BEHIND_BYTES", 1000)
    monkeypatch.setattr(atomic, "_sync_file_range", lambda: start if linux_call else None)
    out = tmp_path / "ids.u32"
    pieces = [bytes([i % 251]) * (137 * i) for i in range(1, 40)]
    with atomic.atomic_write(out) as f:
        assert isinstance(f, atomic.WriteBehind)
        for piece in pieces:
            f.write(piece)
        assert f.started > 0 and f.written == sum(map(len, pieces))
    assert out.read_bytes() == b"".join(pieces)
    if not linux_call:
        assert started == []
        return
    assert started and started[0][0] == 0
    for (offset, nbytes, size, flags), following in zip(started, started[1:] + [None]):
        assert nbytes >= 1000 and size >= offset + nbytes and flags == atomic.SYNC_FILE_RANGE_WRITE
        if following is not None:
            assert following[0] == offset + nbytes


@pytest.mark.parametrize("name", ["encode", "decode", "export-counts"])
def test_the_commands_binary_outputs_start_their_writeback_as_they_are_written(made, tmp_path, monkeypatch, name):
    """encode, decode and export-counts -o go through the write-behind: the same bytes as
    without it, their writeback started along the way."""
    from bpe_stream import atomic

    want = expected(made, name, tmp_path)
    started = []
    monkeypatch.setattr(atomic, "WRITE_BEHIND_BYTES", 64)
    monkeypatch.setattr(atomic, "_sync_file_range", lambda: lambda fd, offset, n, flags: started.append((offset, n)))
    out = tmp_path / "out"
    code, _, err = run_cli(*command(made, name, out))
    assert code == 0, err
    assert out.read_bytes() == want and len(want) >= 64
    assert started and started[0][0] == 0 and sum(n for _, n in started) <= len(want)


def test_text_outputs_are_written_as_before(tmp_path):
    from bpe_stream import atomic

    out = tmp_path / "report.md"
    with atomic.atomic_write(out, "w") as f:
        assert not isinstance(f, atomic.WriteBehind)
        f.write("é\n" * 10)
    assert out.read_text(encoding="utf-8") == "é\n" * 10


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="sync_file_range is Linux's")
def test_the_writeback_is_started_by_the_c_librarys_sync_file_range(tmp_path):
    from bpe_stream import atomic

    start = atomic._sync_file_range()
    assert start is not None
    with open(tmp_path / "f", "wb") as f:
        f.write(b"x" * 10_000)
        f.flush()
        assert start(f.fileno(), 0, 10_000, atomic.SYNC_FILE_RANGE_WRITE) == 0
        assert start(-1, 0, 10_000, atomic.SYNC_FILE_RANGE_WRITE) == -1  # (the errors are the fsync's to report)


def test_a_failed_write_behind_is_one_error_naming_the_output_and_leaves_nothing(tmp_path, monkeypatch):
    import errno

    from bpe_stream import atomic

    def full(self):  # (the flush before the writeback's start, on a full disk)
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(atomic, "WRITE_BEHIND_BYTES", 10)
    monkeypatch.setattr(atomic.WriteBehind, "start_writeback", full)
    out = tmp_path / "ids.u32"
    with pytest.raises(atomic.OutputError, match=f"cannot write {out}: No space left on device"):
        with atomic.atomic_write(out) as f:
            f.write(b"x" * 100)
    assert not out.exists() and partials(tmp_path) == []
