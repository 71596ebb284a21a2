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
    the old set of files or the new set, never a mix."""
    import shutil

    path = os.path.abspath(os.fspath(path))
    tmp = tempfile.mkdtemp(dir=os.path.dirname(path), prefix="." + os.path.basename(path) + ".", suffix=".tmp")
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o777 & ~umask)
        yield tmp
        if not os.path.exists(path):
            os.rename(tmp, path)
        elif _exchange(tmp, path):
            shutil.rmtree(tmp, ignore_errors=True)  # tmp now holds the old directory
        else:  # no atomic exchange here: the window is the gap between two renames
            old = tmp + ".old"
            os.rename(path, old)
            os.rename(tmp, path)
            shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
