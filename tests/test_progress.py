"""Progress a person can read (issue 20): the bar under a pseudo-terminal, the plain and JSON
log lines in a file, messages and errors never glued to a bar, the encode/decode summaries.

The log cadence is tested on :mod:`bpe_stream.progress` with a fake clock; the CLI tests
check the final line, which is always written when ``--progress-every`` or ``--progress
json`` is given (nothing here depends on how long anything takes).
"""

from __future__ import annotations

import fcntl
import io
import json
import os
import pty
import re
import struct
import subprocess
import sys
import termios
from pathlib import Path

import pytest
import reliability_helpers as H
from tqdm import tqdm

from bpe_stream.progress import (
    Bar, CountingReader, LogLines, Silent, clock_text, make_progress, rate_and_eta, summary_line,
)

REPO = Path(__file__).resolve().parent.parent
TEXT_A = ("The quick brown fox jumps over the lazy dog. " * 4000).encode()  # 180,000 bytes
TEXT_B = ("def f(x):\n    return x + 1\n" * 5000).encode()  # 135,000 bytes


class FakeClock:
    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _env() -> dict:
    env = dict(os.environ)
    env.pop("BPE_STREAM_STORE", None)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def _command(*args) -> list:
    return [sys.executable, "-m", "bpe_stream.cli.commands", *map(str, args)]


def under_terminal(cwd: Path, *args, stdin: bytes = b""):
    """Runs the CLI with stderr on a pseudo-terminal (150 columns); ``(exit status, what the
    terminal got)``.  Stdout is a pipe: data and progress stay apart."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 150, 0, 0))
    proc = subprocess.Popen(_command(*args), cwd=cwd, env=_env(), stdin=subprocess.PIPE,
                            stdout=subprocess.DEVNULL, stderr=slave)
    os.close(slave)
    proc.stdin.write(stdin)
    proc.stdin.close()
    got = bytearray()
    while True:
        try:
            data = os.read(master, 1 << 16)
        except OSError:  # EIO: the child closed the terminal
            break
        if not data:
            break
        got += data
    os.close(master)
    return proc.wait(timeout=H.HANG_TIMEOUT), got.decode("utf-8", "replace")


def to_file(cwd: Path, *args, stdin: bytes = b""):
    """Runs the CLI with stderr to a file, as cron does; ``(exit status, stderr lines)``."""
    log = cwd / "stderr.log"
    with open(log, "wb") as err:
        proc = subprocess.run(_command(*args), cwd=cwd, env=_env(), input=stdin, stdout=subprocess.DEVNULL,
                              stderr=err, timeout=H.HANG_TIMEOUT)
    return proc.returncode, log.read_text().splitlines()


@pytest.fixture
def corpus(tmp_path):
    (tmp_path / "a.txt").write_bytes(TEXT_A)
    (tmp_path / "b.txt").write_bytes(TEXT_B)
    return tmp_path


@pytest.fixture
def trained(corpus):
    code, lines = to_file(corpus, "count", "--store", "st", "a.txt", "b.txt")
    assert code == 0, lines
    code, lines = to_file(corpus, "train", "--store", "st", "-o", "tok.json", "--vocab-size", "300")
    assert code == 0, lines
    return corpus


def _sized(n: int) -> str:
    return tqdm.format_sizeof(n)  # as the bar writes a total with unit_scale: 315k, 4.00M


def _frames(screen: str) -> list:
    return [f for f in re.split(r"[\r\n]", screen) if f.strip()]


def _percentages(screen: str, total: int) -> list:
    return [int(m.group(1)) for m in re.finditer(r"(\d+)%\|[^|]*\| *\S+/" + re.escape(_sized(total)) + r" ", screen)]


def _alone(screen: str, line: str) -> bool:
    """Every time ``line`` is written, it starts a line of the terminal (not glued to a bar frame)."""
    at = [m.start() for m in re.finditer(re.escape(line), screen)]
    return bool(at) and all(i == 0 or screen[i - 1] in "\r\n" for i in at)


# -- the arithmetic and the forms, with a fake clock -------------------------------------------
def test_rate_and_eta():
    assert rate_and_eta(25, 100, 10.0) == (2.5, 30.0)
    assert rate_and_eta(25, None, 10.0) == (2.5, None)
    assert rate_and_eta(0, 100, 10.0) == (None, None)
    assert rate_and_eta(5, 100, 0.0) == (None, None)
    assert rate_and_eta(120, 100, 10.0) == (12.0, 0.0)  # more than the total (a growing file): no negative ETA
    assert clock_text(65) == "0:01:05" and clock_text(3 * 3600 + 7) == "3:00:07"


def test_log_lines_every_n_seconds_of_the_clock_and_a_final_line():
    clock, out = FakeClock(), io.StringIO()
    log = LogLines("count", "bytes", 100_000_000, every=10, final=True, stream=out, clock=clock)
    clock.now += 5
    log.update(10_000_000)
    assert out.getvalue() == ""  # not yet 10 s
    clock.now += 5
    log.update(15_000_000)
    assert out.getvalue() == "count: 25,000,000 of 100,000,000 bytes (25.0%), 2.50 MB/s, ETA 0:00:30, elapsed 0:00:10\n"
    clock.now += 9
    log.update(1)
    assert out.getvalue().count("\n") == 1  # 9 s since the last line
    log.write("a message")
    clock.now += 1
    log.update(24_999_999)
    log.close()
    assert out.getvalue().splitlines()[1:] == [
        "a message",
        "count: 50,000,000 of 100,000,000 bytes (50.0%), 2.50 MB/s, ETA 0:00:20, elapsed 0:00:20",
        "count: 50,000,000 of 100,000,000 bytes (50.0%), 2.50 MB/s, done in 0:00:20",
    ]


def test_json_lines_hold_the_same_figures():
    clock, out = FakeClock(), io.StringIO()
    with LogLines("train", "merges", None, every=2, style="json", stream=out, clock=clock) as log:
        log.set_total(1000)
        clock.now += 4
        log.update(250)
    first, last = (json.loads(line) for line in out.getvalue().splitlines())
    assert first == {"command": "train", "unit": "merges", "done": 250, "total": 1000, "percent": 25.0,
                     "rate_per_s": 62.5, "eta_s": 12.0, "elapsed_s": 4.0, "final": False}
    assert last == dict(first, final=True)  # a final line because an earlier one was written


def test_without_a_total_only_done_and_rate():
    clock, out = FakeClock(), io.StringIO()
    log = LogLines("encode", "bytes", None, every=1, stream=out, clock=clock)
    clock.now += 2
    log.update(3_000_000)
    assert out.getvalue() == "encode: 3,000,000 bytes, 1.50 MB/s, elapsed 0:00:02\n"


def test_every_zero_and_default_and_failure_write_no_final_line():
    clock, out = FakeClock(), io.StringIO()
    off = LogLines("count", "bytes", 10, every=0, final=True, stream=out, clock=clock)
    clock.now += 1000
    off.update(5)
    off.close()
    quiet_default = make_progress(False, "count", "bytes", 10, stream=out, clock=clock)  # no option given
    quiet_default.update(5)
    quiet_default.close()
    assert out.getvalue() == ""
    with pytest.raises(RuntimeError):
        with LogLines("count", "bytes", 10, every=5, final=True, stream=out, clock=clock) as failing:
            failing.update(5)
            raise RuntimeError("the error's own line is the last")
    assert out.getvalue() == ""


class Terminal(io.StringIO):
    def isatty(self):
        return True


def test_the_form_follows_stderr():
    assert isinstance(make_progress(True, "count", "bytes", stream=Terminal()), Silent)
    assert isinstance(make_progress(False, "count", "bytes", stream=io.StringIO()), LogLines)
    bar = make_progress(False, "count", "bytes", stream=Terminal())
    assert isinstance(bar, Bar)
    bar.close()
    as_json = make_progress(False, "count", "bytes", stream=Terminal(), style="json")
    assert isinstance(as_json, LogLines) and as_json.style == "json" and as_json.final
    with pytest.raises(ValueError):
        make_progress(False, "count", "bytes", stream=io.StringIO(), style="xml")
    silent = Silent("count", "bytes")
    silent.write("not said")
    silent.update(3)
    assert silent.done == 3


def test_a_message_through_the_bar_clears_it_first():
    out = Terminal()
    bar = Bar("train", "merges", 10, stream=out)
    bar.update(3)
    bar.write("training with the sequence table on disk")
    bar.set_total(20)
    bar.close()
    screen = out.getvalue()
    assert _alone(screen, "training with the sequence table on disk")
    assert "/20" in screen and screen.endswith("\r")  # the total moved; cleared at the end


def test_counting_reader_and_summary_line():
    seen = []
    reader = CountingReader(io.BytesIO(b"x" * 10), seen.append)
    assert reader.read(4) == b"xxxx" and reader.read() == b"x" * 6 and reader.read() == b""
    assert seen == [4, 6] and reader.bytes == 10
    assert summary_line("encoded", 1000, 1, 250, 0.5) == (
        "encoded 1,000 bytes, 1 document into 250 tokens (4.000 bytes/token) in 0.50 s (0.0 MB/s)")
    assert summary_line("decoded", 3_000_000, 2, 0, 2.0, tokens_first=True) == (
        "decoded 0 tokens of 2 files into 3,000,000 bytes (- bytes/token) in 2.00 s (1.5 MB/s)")


# -- under a terminal --------------------------------------------------------------------------
def test_count_bar_over_the_bytes_of_all_files(corpus):
    code, screen = under_terminal(corpus, "count", "--store", "st", "a.txt", "b.txt")
    assert code == 0, screen
    total = len(TEXT_A) + len(TEXT_B)
    percentages = _percentages(screen, total)
    assert percentages and percentages[-1] == 100, screen
    assert _alone(screen, "counted 315,000 bytes")
    assert screen.endswith("\r\n") and "%|" not in _frames(screen)[-1]  # the bar was cleared before the summary


def test_count_leaves_skipped_files_out_of_the_total(corpus):
    assert under_terminal(corpus, "count", "--store", "st", "a.txt")[0] == 0
    code, screen = under_terminal(corpus, "count", "--store", "st", "a.txt", "b.txt")
    assert code == 0, screen
    assert _percentages(screen, len(TEXT_B))[-1] == 100, screen
    assert _sized(len(TEXT_A) + len(TEXT_B)) not in screen
    assert _alone(screen, "skipped a.txt: already counted")


def test_count_of_stdin_shows_bytes_and_rate_without_a_total(corpus):
    code, screen = under_terminal(corpus, "count", "--store", "st", stdin=TEXT_A)
    assert code == 0, screen
    assert re.search(r"count: [\d.]+k?B \[", screen) and "%|" not in screen, screen


def test_encode_bar_and_summary(trained):
    code, screen = under_terminal(trained, "encode", "-t", "tok.json", "-o", "ids", "a.txt", "b.txt")
    assert code == 0, screen
    assert _percentages(screen, len(TEXT_A) + len(TEXT_B))[-1] == 100, screen
    assert re.search(r"(?:^|[\r\n])encoded 315,000 bytes, 2 documents into [\d,]+ tokens \([\d.]+ bytes/token\) in "
                     r"[\d.]+ s \([\d.]+ MB/s\)\r\n$", screen), screen


def test_decode_summary_under_a_terminal(trained):
    assert to_file(trained, "encode", "-t", "tok.json", "-o", "ids", "a.txt")[0] == 0
    code, screen = under_terminal(trained, "decode", "-t", "tok.json", "-o", "back.txt", "ids")
    assert code == 0, screen
    tokens = len((trained / "ids").read_text().split())
    assert _percentages(screen, (trained / "ids").stat().st_size)[-1] == 100, screen
    assert _alone(screen, f"decoded {tokens:,} tokens of 1 file into {len(TEXT_A):,} bytes")
    assert (trained / "back.txt").read_bytes() == TEXT_A


def test_train_message_is_not_glued_to_the_bar(corpus):
    assert under_terminal(corpus, "count", "--store", "st", "a.txt")[0] == 0
    code, screen = under_terminal(corpus, "train", "--store", "st", "-o", "tok.json", "--vocab-size", "300",
                                  "--path", "disk")
    assert code == 0, screen
    assert "train:" in screen and _alone(screen, "training with the sequence table on disk"), screen
    assert _alone(screen, "learned ")


def test_an_error_is_never_glued_to_the_bar(trained):
    (trained / "bad.txt").write_bytes(TEXT_A + b"\xff" + TEXT_B)
    code, screen = under_terminal(trained, "encode", "-t", "tok.json", "-o", "ids", "--strict-utf8", "bad.txt")
    assert code == 1
    assert "%|" in screen and _alone(screen, "Error: bad.txt: invalid UTF-8"), screen
    assert screen.endswith("drop --strict-utf8 to keep such bytes as they are\r\n")


def test_quiet_under_a_terminal_is_silent(trained):
    for args in (("encode", "-t", "tok.json", "-o", "ids", "a.txt"), ("decode", "-t", "tok.json", "-o", "back", "ids"),
                 ("count", "--store", "st2", "a.txt")):
        assert under_terminal(trained, *args, "--quiet") == (0, "")


# -- stderr to a file: plain and JSON lines ----------------------------------------------------
def _final_plain(lines, command: str, total: int, unit: str = "bytes") -> bool:
    return any(re.fullmatch(rf"{command}: {total:,} of {total:,} {unit} \(100\.0%\), [\d.,]+ (MB|{unit})/s, "
                            r"done in \d+:\d\d:\d\d", line) for line in lines)


def test_plain_lines_in_a_file_for_each_command(trained):
    total = len(TEXT_A) + len(TEXT_B)
    code, lines = to_file(trained, "count", "--store", "st2", "a.txt", "b.txt", "--progress-every", "0.001")
    assert code == 0 and _final_plain(lines, "count", total), lines
    code, lines = to_file(trained, "encode", "-t", "tok.json", "-o", "ids", "a.txt", "b.txt", "--progress-every", "0.001")
    assert code == 0 and _final_plain(lines, "encode", total), lines
    assert lines[-1].startswith("encoded 315,000 bytes, 2 documents into ")
    size = (trained / "ids").stat().st_size
    code, lines = to_file(trained, "decode", "-t", "tok.json", "-o", "back", "ids", "--progress-every", "0.001")
    assert code == 0 and _final_plain(lines, "decode", size), lines
    assert lines[-1].startswith("decoded ") and " of 1 file into 315,000 bytes" in lines[-1]
    code, lines = to_file(trained, "train", "--store", "st", "-o", "t2.json", "--vocab-size", "300", "--progress-every", "5")
    merges = json.loads((trained / "t2.json").read_text())
    assert code == 0 and any(re.fullmatch(r"train: (\d+) of \1 merges \(100\.0%\), .*done in .*", line) for line in lines), lines
    assert merges


def test_json_lines_in_a_file(trained):
    total = len(TEXT_A) + len(TEXT_B)
    code, lines = to_file(trained, "count", "--store", "st2", "a.txt", "b.txt", "--progress", "json")
    assert code == 0, lines
    objects = [json.loads(line) for line in lines if line.startswith("{")]
    assert objects[-1]["final"] and objects[-1]["done"] == objects[-1]["total"] == total
    assert objects[-1]["command"] == "count" and objects[-1]["unit"] == "bytes" and objects[-1]["percent"] == 100.0
    code, lines = to_file(trained, "encode", "-t", "tok.json", "--progress", "json", stdin=TEXT_A)
    last = json.loads(next(line for line in lines if line.startswith("{")))
    assert code == 0 and last["done"] == len(TEXT_A) and last["total"] is None and last["eta_s"] is None


def test_progress_every_zero_writes_no_progress_lines(trained):
    code, lines = to_file(trained, "encode", "-t", "tok.json", "-o", "ids", "a.txt", "--progress-every", "0")
    assert code == 0 and len(lines) == 1 and lines[0].startswith("encoded "), lines
    code, lines = to_file(trained, "decode", "-t", "tok.json", "ids", "--quiet", "--progress", "json")
    assert code == 0 and lines == []


def test_bad_progress_options_are_usage_errors(trained):
    code, lines = to_file(trained, "count", "--store", "st3", "a.txt", "--progress", "xml")
    assert code == 2 and not (trained / "st3").exists()
    assert any("must be one of text, json" in line for line in lines)
    code, lines = to_file(trained, "encode", "-t", "tok.json", "a.txt", "--progress-every", "-1")
    assert code == 2
