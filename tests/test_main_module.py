"""``python -m bpe_stream`` is the ``bpe-stream`` command, every command registered."""

import subprocess
import sys

from conftest import REPO


def test_python_dash_m_runs_the_command_line():
    res = subprocess.run([sys.executable, "-m", "bpe_stream", "--help"], capture_output=True, text=True, cwd=REPO)
    assert res.returncode == 0, res.stderr
    for command in ("count", "train", "encode", "decode", "export", "eval", "import-counts", "merge-stores"):
        assert command in res.stdout, (command, res.stdout)


def test_every_way_in_runs_the_entry_point():
    """The console script (setup.cfg), ``bin/bpe-stream`` and ``python -m bpe_stream`` all call
    ``bpe_stream.cli.entry.main``, which owns the start-up."""
    assert "bpe-stream = bpe_stream.cli.entry:main" in (REPO / "setup.cfg").read_text()
    assert "from bpe_stream.cli.entry import main" in (REPO / "bin" / "bpe-stream").read_text()
    assert "from .cli.entry import main" in (REPO / "bpe_stream" / "__main__.py").read_text()
    res = subprocess.run([sys.executable, str(REPO / "bin" / "bpe-stream"), "--version"], capture_output=True,
                         text=True, cwd=REPO)
    assert res.returncode == 0 and "0.1.0" in res.stdout, (res.returncode, res.stdout, res.stderr)


_WATCH_THE_COLLECTOR = """
import gc, sys
seen = {}

class Watch:
    def find_spec(self, name, path=None, target=None):
        seen.setdefault(name, gc.isenabled())
        return None

sys.meta_path.insert(0, Watch())
sys.argv = ["bpe-stream", "--version"]
from bpe_stream.cli import entry
try:
    entry.main()
except SystemExit as exc:
    assert not exc.code, exc.code
print(seen["bpe_stream.cli.commands"], seen["typer"], gc.isenabled())
"""


def test_the_command_line_is_imported_with_the_collector_off_and_run_with_it_on():
    res = subprocess.run([sys.executable, "-c", _WATCH_THE_COLLECTOR], capture_output=True, text=True, cwd=REPO)
    assert res.returncode == 0, res.stderr
    assert res.stdout.split()[-3:] == ["False", "False", "True"], res.stdout
