"""``python -m bpe_stream`` is the ``bpe-stream`` command, every command registered."""

import subprocess
import sys

from conftest import REPO


def test_python_dash_m_runs_the_command_line():
    res = subprocess.run([sys.executable, "-m", "bpe_stream", "--help"], capture_output=True, text=True, cwd=REPO)
    assert res.returncode == 0, res.stderr
    for command in ("count", "train", "encode", "decode", "export", "eval", "import-counts", "merge-stores"):
        assert command in res.stdout, (command, res.stdout)
