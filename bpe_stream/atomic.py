"""Writing files so that a reader sees the old file or the whole new one, never half.

Write to a temporary file beside the target, flush and fsync it, then ``os.replace`` it
over the target (an atomic rename on POSIX); the directory is fsynced so the rename
survives a crash.  A failed or killed write leaves at most a ``.tmp`` file behind.
"""

from __future__ import annotations

import os
import tempfile
from contextlib import contextmanager


@contextmanager
def atomic_write(path, mode: str = "wb"):
    """``with atomic_write(path) as f: f.write(...)``; the file appears only if the block succeeds."""
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=directory, prefix="." + os.path.basename(path) + ".", suffix=".tmp")
    try:
        # mkstemp makes the file private (0600); give it the mode a plain open() would:
        # the old file's, or 0666 less the umask.
        try:
            perms = os.stat(path).st_mode & 0o7777
        except FileNotFoundError:
            umask = os.umask(0)
            os.umask(umask)
            perms = 0o666 & ~umask
        os.chmod(tmp, perms)
        with os.fdopen(fd, mode, **({} if "b" in mode else {"encoding": "utf-8", "newline": "\n"})) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    try:
        dfd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    except OSError:
        pass
