"""Writing outputs: a reader sees the old file or the whole new one, never half, and a
write never replaces what the path points at.

Where a write goes is decided by :func:`output_target` from what ``-o PATH`` is now:

* a regular file, or nothing yet: a temporary file beside it is written, flushed and
  fsynced, then renamed over it (``os.replace``, atomic on POSIX) and the directory is
  fsynced so the rename survives a crash.  A binary output's writeback is started as it is
  written, every ``WRITE_BEHIND_BYTES`` (:class:`WriteBehind`), so that the fsync at its end
  does not wait for the whole file to reach the disk;
* a symlink: the same, at the file it points to (the link stays a link);
* a character device (``/dev/null``) or a FIFO: written directly -- renaming over it would
  replace the device node or the pipe with a regular file;
* a directory, block device or socket, or a path whose directory is missing: an
  :class:`OutputError` naming the path the user gave, before any work is done
  (:func:`check_output`).

The temporary file is ``.NAME.bpe-stream-partial-HOST-PID.tmp``, so a user who finds one
left by a killed write knows what it is; the next write to the same path removes those
of processes of this host that are gone.
"""

from __future__ import annotations

import errno
import functools
import io
import os
import shutil
import stat
import sys
from contextlib import contextmanager
from typing import BinaryIO, Optional, Tuple

from .errors import UserError

PARTIAL_TAG = "bpe-stream-partial"
_NAME_MAX = 255
# Errors of writing the data itself (no file name attached): reported with the output's path.
_WRITE_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO, errno.EROFS}


class OutputError(UserError, ValueError):
    """An output path that cannot be written (one line naming the path the user gave)."""


_KINDS = ((stat.S_ISREG, "a regular file"), (stat.S_ISDIR, "a directory"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"))


def file_kind(mode: int) -> str:
    """What a file of ``st_mode`` ``mode`` is, in words ("a FIFO"), for messages."""
    return next((words for test, words in _KINDS if test(mode)), "not a regular file")


def output_target(path, directory: bool = False) -> Tuple[str, bool]:
    """``(target, direct)``: where a write to ``path`` goes, and whether it goes there
    directly (a character device or a FIFO) rather than by a rename.  ``directory``: the
    output is a directory (the gpt2 export), which may exist already."""
    path = os.fspath(path)
    try:
        mode = os.stat(path).st_mode  # follows symlinks: what the path really names
    except FileNotFoundError:
        mode = None
    except OSError as exc:  # a symlink loop, a file used as a directory, no permission
        raise OutputError(f"cannot write {path}: {exc.strerror}") from None
    if mode is not None:
        direct = stat.S_ISCHR(mode) or stat.S_ISFIFO(mode)
        if directory and not stat.S_ISDIR(mode):
            raise OutputError(f"cannot write {path}: it is {file_kind(mode)}, and this output is a directory")
        if direct:
            return path, True
        if not (stat.S_ISREG(mode) or directory):
            hint = "give a file name" if stat.S_ISDIR(mode) else "bpe-stream writes to files, character devices and FIFOs"
            raise OutputError(f"cannot write {path}: it is {file_kind(mode)}; {hint}")
    target = os.path.realpath(path) if os.path.islink(path) else path
    parent = os.path.dirname(os.path.abspath(target))
    via = f" (a symlink to {target})" if target != path else ""
    if not os.path.isdir(parent):
        shown = parent if via else (os.path.dirname(path) or ".")
        raise OutputError(f"cannot write {path}{via}: the directory {shown} does not exist")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise OutputError(f"cannot write {path}{via}: no permission to create files in {parent}")
    return target, False


def check_output(path, directory: bool = False) -> None:
    """Raises :class:`OutputError` now if a write to ``path`` could not succeed later."""
    output_target(path, directory)


def stdout_binary() -> BinaryIO:
    """The binary stdout, or an :class:`OutputError` when stdout is closed (``>&-``): Python
    then has no ``sys.stdout``, and whatever is printed would vanish with exit status 0."""
    if sys.stdout is None:
        raise OutputError("stdout is closed, so the output would be lost; run the command with stdout open "
                          "(or with -o PATH where it has one)")
    return sys.stdout.buffer


# -- temporary names ----------------------------------------------------------------------
def _host() -> str:
    import socket  # (only for a temporary name: its import is 1 ms of every command's start-up)

    return socket.gethostname().replace("/", "_") or "localhost"


def _partial_prefix(name: str) -> str:
    """``.NAME.bpe-stream-partial`` (NAME shortened so the whole name fits NAME_MAX)."""
    room = _NAME_MAX - len(f"..{PARTIAL_TAG}-old-{_host()}-4294967295.tmp")
    while len(os.fsencode(name)) > room:
        name = name[:-1]
    return f".{name}.{PARTIAL_TAG}"


def partial_name(name: str, old: bool = False) -> str:
    """The temporary file (or directory) name of a write to ``name`` by this process."""
    return f"{_partial_prefix(name)}{'-old' if old else ''}-{_host()}-{os.getpid()}.tmp"


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return False  # ours cannot exist yet: one left by an earlier process with this pid
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_stale(directory: str, name: str) -> None:
    """Removes the temporary files of writes to ``name`` whose process (on this host) is gone."""
    prefix = _partial_prefix(name)
    host = _host()
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return
    for entry in entries:
        if not (entry.name.startswith(prefix + "-") and entry.name.endswith(".tmp")):
            continue
        middle = entry.name[len(prefix) + 1:-len(".tmp")].removeprefix("old-")
        their_host, _, pid = middle.rpartition("-")
        if their_host != host or not pid.isdigit() or _alive(int(pid)):
            continue
        try:
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path, ignore_errors=True)
            else:
                os.unlink(entry.path)
        except OSError:
            pass


def _new_file_mode(existing: str) -> int:
    """The mode a plain ``open()`` would leave: the old file's, or 0666 less the umask."""
    try:
        return os.stat(existing).st_mode & 0o7777
    except FileNotFoundError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask


def _fsync_directory(directory: str) -> None:
    try:
        dfd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    except OSError:
        pass


def _text_kwargs(mode: str) -> dict:
    return {} if "b" in mode else {"encoding": "utf-8", "newline": "\n"}


def _as_output_error(path: str, exc: OSError) -> OutputError:
    return OutputError(f"cannot write {path}: {exc.strerror or exc}")


@contextmanager
def _naming(path: str):
    """Errors of writing the data (a full disk) name the output, which the OS leaves out."""
    try:
        yield
    except OSError as exc:
        if exc.filename is None and exc.errno in _WRITE_ERRNOS:
            raise _as_output_error(path, exc) from None
        raise


# -- writing ------------------------------------------------------------------------------
# How many bytes a binary output takes between two starts of its writeback (WriteBehind).
# Measured 2026-12-06 (2 cores, ext4): encode -f u32 -o of 200 MB of English wrote 187 MB,
# whose fsync at the end waited 72 ms for the disk, serial after the whole encode.
WRITE_BEHIND_BYTES = 16 << 20
SYNC_FILE_RANGE_WRITE = 2  # <fcntl.h>: start writing the range's dirty pages, do not wait


@functools.cache
def _sync_file_range():
    """Linux's ``sync_file_range(fd, offset, nbytes, flags)`` (through ``ctypes``, which
    releases the GIL for the call), or None where the C library has none."""
    try:
        import ctypes

        fn = ctypes.CDLL(None, use_errno=True).sync_file_range
    except (OSError, AttributeError, ImportError):
        return None
    fn.argtypes = (ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint)
    fn.restype = ctypes.c_int
    return fn


class WriteBehind(io.BufferedWriter):
    """A buffered binary file that starts the writeback of what it has written every
    ``every`` bytes (``sync_file_range(SYNC_FILE_RANGE_WRITE)``: a hint that waits for
    nothing, its errors left to the fsync), as PostgreSQL's ``backend_flush_after`` does.
    The disk then writes while the output is still being made, and the fsync that ends an
    atomic write finds little left to do.  The bytes written are the same; where the C
    library has no such call it is a plain ``BufferedWriter``.

    >>> import tempfile
    >>> with tempfile.TemporaryFile() as raw:
    ...     f = WriteBehind(io.FileIO(raw.fileno(), "wb", closefd=False), every=4)
    ...     _ = f.write(b"hello "), f.write(b"world"); f.flush()
    ...     _ = raw.seek(0); raw.read(), f.started
    (b'hello world', 11)
    """

    def __init__(self, raw, every: Optional[int] = None):
        super().__init__(raw)
        self.every = every or WRITE_BEHIND_BYTES
        self.written = 0  # bytes written through this object
        self.started = 0  # writeback started for [0, started)

    def write(self, data) -> int:
        n = super().write(data)
        self.written += n
        if self.written - self.started >= self.every:
            self.start_writeback()
        return n

    def start_writeback(self) -> None:
        """Starts the writeback of the bytes written since the last start."""
        self.flush()
        start = _sync_file_range()
        if start is not None:
            start(self.raw.fileno(), self.started, self.written - self.started, SYNC_FILE_RANGE_WRITE)
        self.started = self.written


@contextmanager
def atomic_write(path, mode: str = "wb"):
    """``with atomic_write(path) as f: f.write(...)``; a regular file appears only if the block
    succeeds (see the module docstring for devices, FIFOs and symlinks)."""
    path = os.fspath(path)
    target, direct = output_target(path)
    if direct:
        with _direct(path, mode) as f:
            yield f
        return
    directory = os.path.dirname(os.path.abspath(target))
    name = os.path.basename(target)
    remove_stale(directory, name)
    tmp = os.path.join(directory, partial_name(name))
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    except OSError as exc:
        raise _as_output_error(path, exc) from None
    try:
        os.fchmod(fd, _new_file_mode(target))
        with (WriteBehind(io.FileIO(fd, "wb")) if mode == "wb" else os.fdopen(fd, mode, **_text_kwargs(mode))) as f:
            with _naming(path):
                yield f
            try:
                f.flush()
                os.fsync(f.fileno())
            except OSError as exc:
                raise _as_output_error(path, exc) from None
        try:
            os.replace(tmp, target)
        except OSError as exc:
            raise _as_output_error(path, exc) from None
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    _fsync_directory(directory)


@contextmanager
def _direct(path: str, mode: str):
    """Writes to a character device or FIFO as it is (no rename, no truncation, no fsync)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)  # no O_CREAT: never a new regular file here
    except OSError as exc:
        raise _as_output_error(path, exc) from None
    mode_now = os.fstat(fd).st_mode
    if not (stat.S_ISCHR(mode_now) or stat.S_ISFIFO(mode_now)):
        os.close(fd)
        raise OutputError(f"cannot write {path}: it was replaced while being opened; run the command again")
    with _naming(path), os.fdopen(fd, mode, **_text_kwargs(mode)) as f:
        yield f


def _exchange(a: str, b: str) -> bool:
    """Swaps two paths atomically (Linux renameat2 RENAME_EXCHANGE); False where unsupported."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    at_fdcwd, rename_exchange = -100, 2
    return renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0


@contextmanager
def atomic_directory(path):
    """``with atomic_directory(path) as tmp: write files into tmp``; then ``path`` becomes that
    directory in one step (the old one, if any, is swapped out and removed), so readers see
    the old set of files or the new set, never a mix.  A symlink to a directory is written
    through: its target is replaced, the link stays."""
    given = os.fspath(path)
    target, _ = output_target(given, directory=True)
    path = os.path.abspath(target)
    parent, name = os.path.split(path)
    remove_stale(parent, name)
    tmp = os.path.join(parent, partial_name(name))
    try:
        os.mkdir(tmp, 0o777)  # the umask applies, as for any new directory
    except OSError as exc:
        raise _as_output_error(given, exc) from None
    try:
        yield tmp
        if not os.path.exists(path):
            os.rename(tmp, path)
        elif _exchange(tmp, path):
            shutil.rmtree(tmp, ignore_errors=True)  # tmp now holds the old directory
        else:  # no atomic exchange here: the window is the gap between two renames
            old = os.path.join(parent, partial_name(name, old=True))
            os.rename(path, old)
            os.rename(tmp, path)
            shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
