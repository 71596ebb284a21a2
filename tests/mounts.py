"""Mounts for tests that need a real file system condition (needs root and mount(8); a test
that cannot have it is skipped): a tiny tmpfs that fills up, a read-only bind mount."""

from __future__ import annotations

import os
import shutil
import subprocess
from contextlib import contextmanager

import pytest


@contextmanager
def mounted(point, *steps):
    """Runs each mount(8) argument list of ``steps`` (the mount point is appended), skips the
    test when one fails, and unmounts when done."""
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("needs root and mount(8)")
    os.makedirs(point, exist_ok=True)
    try:
        for args in steps:
            res = subprocess.run(["mount", *args, str(point)], capture_output=True, check=False)
            if res.returncode != 0:
                pytest.skip(f"cannot mount here ({' '.join(args)}): {res.stderr.decode().strip()}")
        yield point
    finally:
        subprocess.run(["umount", "-l", str(point)], capture_output=True, check=False)
