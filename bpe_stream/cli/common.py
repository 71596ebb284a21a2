"""What every ``bpe-stream`` command shares: the common options, the translation of library
errors into one ``Error:`` line (:func:`user_errors`), sizes, the store path, progress and
messages on stderr.  No command is defined here and nothing heavy is imported, so that
:mod:`bpe_stream.cli.commands` (where every command registers) and :mod:`bpe_stream.cli.scale` both use it
without importing each other, and ``encode`` never loads LMDB.
"""

from __future__ import annotations

import math
import os
import sys
import traceback
from contextlib import contextmanager
from typing import Optional

import typer

from .. import __version__
from ..errors import UserError
from ..progress import STYLES, make_progress

INTERNAL_ERROR = 70  # EX_SOFTWARE (sysexits.h): a bug in bpe-stream, not a mistake of the user's (1)
# typer's usage errors (BadParameter and its kin, exit status 2) are click's ClickException,
# which typer 0.28 vendors (typer._click): found through the class typer exports, any version.
_USAGE_ERROR = next(c for c in typer.BadParameter.__mro__ if c.__name__ == "ClickException")

StoreOpt = typer.Option(None, "--store", help="Store directory \\[default: $BPE_STREAM_STORE or ./bpe-store].")
QuietOpt = typer.Option(False, "--quiet", "-q", help="No progress bar or summary on stderr.")
EveryOpt = typer.Option(
    None, "--progress-every", min=0.0,
    help="When stderr is not a terminal: a progress line every S seconds, and one at the end (0: none) \\[default: 60].",
)


def _check_style(value: str) -> str:
    if value not in STYLES:  # refused before any work (a store created, a file read)
        raise typer.BadParameter(f"must be one of {', '.join(STYLES)}, not {value!r}")
    return value


ProgressOpt = typer.Option("text", "--progress", callback=_check_style, help="text (a bar on a terminal, else plain lines) or json (one JSON object per line).")
TokOpt = typer.Option(..., "--tokenizer", "-t", help="Tokenizer file (or GPT-2 vocab.json+merges.txt directory).")


def fail(message: str) -> None:
    # One line, whatever it quotes: a file name may hold a newline ('no<newline>such.txt')
    message = message.replace("\r", "\\r").replace("\n", "\\n")
    typer.echo(f"Error: {message}", err=True)
    raise typer.Exit(1)


@contextmanager
def user_errors():
    """Turns the library's errors for user mistakes (:class:`~bpe_stream.errors.UserError`, OS
    errors, LMDB's) into one ``Error:`` line, exit 1; a closed stdout ends quietly; anything
    else is a bug (:func:`internal_error`), never disguised as a user error."""
    try:
        yield
    except (typer.Exit, typer.Abort, _USAGE_ERROR):  # typer's own exits and usage errors
        raise
    except KeyboardInterrupt:  # Ctrl-C: one line and the shell's status for SIGINT, no traceback
        typer.echo("interrupted", err=True)
        raise typer.Exit(130) from None
    except UserError as exc:
        fail(str(exc) or type(exc).__name__)  # (its file names' newlines shown as \n: ``fail``)
    except BrokenPipeError:
        try:
            sys.stdout = None  # the reader went away (`| head`); nothing more to say
        finally:
            os._exit(0)
    except OSError as exc:
        fail(f"{exc.filename + ': ' if getattr(exc, 'filename', None) else ''}{exc.strerror or exc}")
    except MemoryError:
        fail("out of memory; lower --max-memory or free memory")
    except Exception as exc:  # noqa: BLE001 - what is left is LMDB's own words, or a bug
        lmdb = sys.modules.get("lmdb")  # loaded only by the commands that open a store
        if lmdb is not None and isinstance(exc, lmdb.Error):  # whatever the store layer did not word itself
            fail(_first_line(exc))
        internal_error(exc)


def _first_line(exc: BaseException) -> str:
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


def internal_error(exc: BaseException) -> None:
    """A bug (an exception no user input should cause): the traceback, one line asking for a
    report, and exit status :data:`INTERNAL_ERROR` -- not 1, so scripts and tests can tell a
    bug from a mistake of the user's."""
    traceback.print_exception(type(exc), exc, exc.__traceback__, file=sys.stderr)
    typer.echo(
        f"bpe-stream {__version__}: internal error ({type(exc).__name__}: {_first_line(exc)}); "
        "this is a bug, please report it with the command and the traceback above",
        err=True,
    )
    raise typer.Exit(INTERNAL_ERROR)


def parse_size(text: str) -> int:
    """``512M``, ``2G``, ``1.5G``, ``100000`` (bytes) -> bytes."""
    units = {"": 1, "B": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
    t = text.strip().upper().removesuffix("IB").removesuffix("B") if text.strip().upper() not in ("", "B") else text
    unit = t[-1:] if t[-1:] in units and not t[-1:].isdigit() else ""
    number = t[: len(t) - len(unit)] if unit else t
    try:
        value = float(number)
    except ValueError:
        raise typer.BadParameter(f"{text!r} is not a size; write e.g. 512M or 2G") from None
    if not math.isfinite(value * units[unit]):  # nan, inf, 1e400
        raise typer.BadParameter(f"{text!r} is not a size; write a finite number, e.g. 512M or 2G")
    if value <= 0:
        raise typer.BadParameter(f"{text!r}: a size must be positive")
    if int(value * units[unit]) < 1:  # 0.1 is not a budget of 0 bytes
        raise typer.BadParameter(f"{text!r} is less than one byte; write e.g. 512M or 2G")
    return int(value * units[unit])


def store_path(store: Optional[str]) -> str:
    path = store or os.environ.get("BPE_STREAM_STORE") or "bpe-store"
    try:
        os.stat(path)
    except PermissionError as exc:  # a directory above it cannot be entered: say so, not "no store at"
        raise PermissionError(exc.errno, exc.strerror, path) from None
    except OSError:
        pass
    return path


def progress_bar(quiet: bool, desc: str = "", unit: str = "bytes", total=None, *, every=None, style: str = "text",
                 unit_scale: bool = False):
    """The progress of a command on stderr (:func:`bpe_stream.progress.make_progress`): a bar
    on a terminal, log lines in a file, nothing with ``--quiet``."""
    return make_progress(quiet, desc, unit, total, every=every, style=style, unit_scale=unit_scale)


def say(quiet: bool, message: str) -> None:
    if not quiet:
        typer.echo(message, err=True)
