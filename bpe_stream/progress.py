"""Progress of a long command on stderr, in the form the reader of stderr can use.

Owns: choosing the form (a tqdm bar on a terminal, plain log lines or JSON lines when stderr
is a file or a pipe, nothing with ``--quiet``), the rate and ETA arithmetic, messages said
while a bar is drawn (through the bar, so no line is torn), the one-line summaries of
encode and decode, and a reader that reports the bytes read.  Knows nothing of typer or of
what is being counted: the commands call ``update``, ``set_total`` and ``write``.

Log lines come at most every ``every`` seconds of the injectable ``clock`` (checked when
progress is reported, so no timer thread), and one last line at the end when the option was
given explicitly or when any line was written: a log then always ends with the final figures.
"""

from __future__ import annotations

import json
import sys
import time
from typing import BinaryIO, Callable, Optional, TextIO

DEFAULT_EVERY = 60.0  # seconds between log lines when stderr is not a terminal
STYLES = ("text", "json")
_BAR_UNITS = {"bytes": "B", "merges": "merge"}  # tqdm's names: it adds the "s" and scales "B"

Clock = Callable[[], float]


def rate_and_eta(done: int, total: Optional[int], elapsed: float):
    """``(units per second, seconds left)``; either is None when it cannot be known yet
    (nothing done, no time passed, or no total)."""
    rate = done / elapsed if elapsed > 0 and done > 0 else None
    if rate is None or total is None:
        return rate, None
    return rate, max(total - done, 0) / rate


def clock_text(seconds: float) -> str:
    """``0:01:05`` for 65 seconds (hours grow past 99)."""
    whole = int(round(seconds))
    return f"{whole // 3600}:{whole // 60 % 60:02d}:{whole % 60:02d}"


def rate_text(rate: Optional[float], unit: str) -> str:
    if rate is None:
        return f"? {unit}/s"
    if unit == "bytes":
        return f"{rate / 1e6:.2f} MB/s"
    return f"{rate:,.1f} {unit}/s"


class _Progress:
    """What every form does with what the command reports (the silent form, as it is)."""

    def __init__(self, desc: str, unit: str, total: Optional[int] = None):
        self.desc, self.unit, self.total = desc, unit, total
        self.done = 0

    def update(self, n: int = 1) -> None:
        self.done += n

    def set_total(self, total: Optional[int]) -> None:
        self.total = total

    def set_postfix(self, *args, **kwargs) -> None:
        pass

    def write(self, message: str) -> None:
        """A message said while the progress is shown (the silent form says nothing)."""

    def close(self, finished: bool = True) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, exc_type, *exc) -> None:
        self.close(finished=exc_type is None)


class Silent(_Progress):
    """``--quiet``: no progress and no messages."""


class LogLines(_Progress):
    """A line every ``every`` seconds (``every`` 0: none), plain or JSON, for a log file."""

    def __init__(self, desc: str, unit: str, total: Optional[int] = None, *, every: float = DEFAULT_EVERY,
                 style: str = "text", final: bool = False, stream: Optional[TextIO] = None, clock: Clock = time.monotonic):
        super().__init__(desc, unit, total)
        self.every, self.style, self.final = every, style, final
        self.stream = sys.stderr if stream is None else stream
        self.clock = clock
        self.started = self.last = clock()
        self.lines = 0

    def update(self, n: int = 1) -> None:
        self.done += n
        if self.every > 0 and self.clock() - self.last >= self.every:
            self._line(final=False)

    def write(self, message: str) -> None:
        print(message, file=self.stream, flush=True)

    def close(self, finished: bool = True) -> None:
        # The last figures when they were asked for or the log has earlier lines; not after
        # an error, whose own line is then the last.
        if finished and self.every > 0 and (self.final or self.lines):
            self._line(final=True)
        self.every = 0  # closed: nothing more

    def _line(self, final: bool) -> None:
        now = self.clock()
        self.last = now
        self.lines += 1
        print(self.render(now - self.started, final), file=self.stream, flush=True)

    def render(self, elapsed: float, final: bool) -> str:
        rate, eta = rate_and_eta(self.done, self.total, elapsed)
        share = self.done / self.total if self.total else (1.0 if self.total == 0 else None)
        if self.style == "json":
            return json.dumps({
                "command": self.desc, "unit": self.unit, "done": self.done, "total": self.total,
                "percent": None if share is None else round(100 * share, 1),
                "rate_per_s": None if rate is None else round(rate, 3),
                "eta_s": None if eta is None else round(eta, 1),
                "elapsed_s": round(elapsed, 3), "final": final,
            })
        amount = f"{self.done:,} of {self.total:,} {self.unit} ({share:.1%})" if share is not None else f"{self.done:,} {self.unit}"
        parts = [f"{self.desc}: {amount}", rate_text(rate, self.unit)]
        if eta is not None and not final:
            parts.append(f"ETA {clock_text(eta)}")
        parts.append(f"{'done in' if final else 'elapsed'} {clock_text(elapsed)}")
        return ", ".join(parts)


class Bar(_Progress):
    """A tqdm bar on a terminal: percentage, rate and ETA once the total is known; cleared
    when it closes, so the summary or the ``Error:`` line that follows stands on its own."""

    def __init__(self, desc: str, unit: str, total: Optional[int] = None, *, stream: Optional[TextIO] = None,
                 unit_scale: bool = False):
        from tqdm import tqdm  # only here: ~4 MB of RSS for a bar nobody sees otherwise

        self.stream = sys.stderr if stream is None else stream
        self._tqdm = tqdm
        self.desc, self.unit, self.done = desc, unit, 0
        self.bar = tqdm(total=total, desc=desc, unit=_BAR_UNITS.get(unit, unit), unit_scale=unit_scale,
                        file=self.stream, dynamic_ncols=True, leave=False)

    def update(self, n: int = 1) -> None:
        self.done += n
        self.bar.update(n)

    @property
    def total(self) -> Optional[int]:
        return self.bar.total

    @total.setter
    def total(self, total: Optional[int]) -> None:
        self.bar.total = total

    def set_total(self, total: Optional[int]) -> None:
        if total != self.bar.total:
            self.bar.total = total
            self.bar.refresh()

    def set_postfix(self, *args, **kwargs) -> None:
        self.bar.set_postfix(*args, **kwargs)

    def write(self, message: str) -> None:
        self._tqdm.write(message, file=self.stream)  # clears the bar, says the line, draws the bar again

    def close(self, finished: bool = True) -> None:
        if finished and not self.bar.disable:
            self.bar.refresh()  # the last figures (updates within tqdm's mininterval are not drawn), then cleared
        self.bar.close()


def make_progress(quiet: bool, desc: str, unit: str, total: Optional[int] = None, *, every: Optional[float] = None,
                  style: str = "text", unit_scale: bool = False, stream: Optional[TextIO] = None,
                  clock: Clock = time.monotonic) -> _Progress:
    """The form for this stderr: nothing with ``quiet``; JSON lines with ``style`` json; a bar
    on a terminal; else plain lines every ``every`` seconds (None: the default, and no final
    line unless others were written; given: a final line at the end too)."""
    stream = sys.stderr if stream is None else stream
    if quiet:
        return Silent(desc, unit, total)
    if style not in STYLES:
        raise ValueError(f"--progress must be one of {', '.join(STYLES)}, not {style!r}")
    if style == "text" and _is_terminal(stream):
        return Bar(desc, unit, total, stream=stream, unit_scale=unit_scale)
    explicit = every is not None or style == "json"
    return LogLines(desc, unit, total, every=DEFAULT_EVERY if every is None else every, style=style,
                    final=explicit, stream=stream, clock=clock)


def _is_terminal(stream) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # a closed or odd stream: no bar
        return False


class CountingReader:
    """A binary stream that reports the bytes read from it (``on_bytes``), for a bar over
    the input of encode and decode; only ``read`` is offered, all they use."""

    def __init__(self, stream: BinaryIO, on_bytes: Callable[[int], None]):
        self._stream, self._on_bytes = stream, on_bytes
        self.bytes = 0

    def read(self, n: int = -1) -> bytes:
        data = self._stream.read(n)
        if data:
            self.bytes += len(data)
            self._on_bytes(len(data))
        return data


def summary_line(verb: str, bytes_: int, documents: int, tokens: int, seconds: float, *, tokens_first: bool = False) -> str:
    """``encoded 1,000 bytes, 1 document into 250 tokens (4.000 bytes/token) in 0.01 s
    (0.1 MB/s)``; ``tokens_first`` for decode: ``decoded 250 tokens of 1 file into 1,000 bytes ...``."""
    per_token = f"{bytes_ / tokens:.3f}" if tokens else "-"
    mb_s = bytes_ / 1e6 / seconds if seconds > 0 else 0.0
    plural = "" if documents == 1 else "s"
    if tokens_first:
        head = f"{verb} {tokens:,} tokens of {documents:,} file{plural} into {bytes_:,} bytes"
    else:
        head = f"{verb} {bytes_:,} bytes, {documents:,} document{plural} into {tokens:,} tokens"
    return f"{head} ({per_token} bytes/token) in {seconds:.2f} s ({mb_s:.1f} MB/s)"
