"""The package's shape: every import seen (module level and inside functions), no import cycle
but the ones named here with their reason, the stage folders importing only downward along
``LAYERS``, every module importable first in a fresh interpreter, ``encode``/``decode`` without
LMDB, and the CLI's line between a user's mistake (one ``Error:`` line, exit 1) and a bug (a
traceback, exit 70)."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO, assert_user_error
from small_made import make_small

PACKAGE = REPO / "bpe_stream"


def _modules() -> dict:
    """``{dotted name: path}`` of every Python module of the package."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(REPO).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _top_level_imports(node, body_of: str, is_package: bool):
    """The package modules a module imports when it is loaded: its top-level import
    statements, also those inside a top-level ``if``/``try`` (not under TYPE_CHECKING), never
    those inside functions.  Importing ``a.b.c`` loads ``a`` and ``a.b`` first: they count."""
    base = body_of if is_package else body_of.rpartition(".")[0]
    for stmt in node.body:
        if isinstance(stmt, ast.If):
            if not _is_type_checking(stmt):
                yield from _top_level_imports(stmt, body_of, is_package)
                yield from _top_level_imports(ast.Module(body=stmt.orelse, type_ignores=[]), body_of, is_package)
        elif isinstance(stmt, ast.Try):
            for block in [stmt.body, stmt.orelse, stmt.finalbody] + [h.body for h in stmt.handlers]:
                yield from _top_level_imports(ast.Module(body=block, type_ignores=[]), body_of, is_package)
        elif isinstance(stmt, (ast.Import, ast.ImportFrom)):
            yield from _targets(stmt, base)


def _targets(stmt, base: str):
    """The modules one import statement names (``base``: the package it is in)."""
    if isinstance(stmt, ast.Import):
        for alias in stmt.names:
            yield alias.name
        return
    if stmt.level:
        anchor = base.split(".")
        anchor = anchor[: len(anchor) - (stmt.level - 1)]
        target = ".".join(anchor + ([stmt.module] if stmt.module else []))
    else:
        target = stmt.module
    yield target
    for alias in stmt.names:  # ``from . import cli_scale``: a submodule
        yield f"{target}.{alias.name}"


def _all_imports(node, body_of: str, is_package: bool):
    """Every package module a module imports, wherever the import statement is: at module
    level, inside a function or a method, under TYPE_CHECKING."""
    base = body_of if is_package else body_of.rpartition(".")[0]
    for stmt in ast.walk(node):
        if isinstance(stmt, (ast.Import, ast.ImportFrom)):
            yield from _targets(stmt, base)


def import_graph(everywhere: bool = False) -> dict:
    """``{module: modules it imports}``: those it imports when loaded, or (``everywhere``)
    all it imports anywhere in its code."""
    modules = _modules()
    find = _all_imports if everywhere else _top_level_imports
    graph = {}
    for name, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        edges = set()
        for target in find(tree, name, path.name == "__init__.py"):
            parts = target.split(".")
            for i in range(1, len(parts) + 1):  # the parents load first
                prefix = ".".join(parts[:i])
                if everywhere and i < len(parts) and name.startswith(prefix + "."):
                    continue  # a package of the importer itself: loaded before it, no edge of its own
                if prefix in modules and prefix != name:
                    edges.add(prefix)
        graph[name] = edges
    return graph


def _cycle(graph: dict):
    """One import cycle (a list of modules) or None."""
    state, stack = {}, []

    def visit(node):
        state[node] = "open"
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == "open":
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        stack.pop()
        state[node] = "done"
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def test_the_import_graph_sees_the_imports_it_should():
    """The checker itself: a relative import, a submodule imported by name, a parent package,
    an import inside a function (not counted)."""
    graph = import_graph()
    assert "bpe_stream.cli.common" in graph["bpe_stream.cli.commands"]
    assert "bpe_stream.cli.scale" in graph["bpe_stream.cli.commands"]  # from . import cli_scale
    assert "bpe_stream.store" in graph["bpe_stream.store.merge"]  # parent of store.counts_file
    assert "bpe_stream.store.lmdb_store" not in graph["bpe_stream.cli.commands"]  # imported inside the commands
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


def test_no_import_cycle_at_module_level():
    assert _cycle(import_graph()) is None


# -- every import: cycles and layers --------------------------------------------------------
# The units of the package bottom first: a unit imports only from the units below it.  Derived
# from the imports when the modules moved into stage folders (issue 34): the shared modules
# at the top of the package; pretokenizing; inputs and where they may be cut; the runners;
# the store; counting into it; the tokenizer; its files; training; the command line.
LAYERS = ("shared", "pretok", "inputs", "parallel", "store", "count", "encode", "formats", "train", "api", "cli")
SHARED = ("errors", "bpe", "native", "atomic", "progress")

# Imports that go against LAYERS or close a cycle, each with its reason.  A cycle is allowed
# only through one of these edges.
NAMED = {
    **{("bpe_stream.encode.tokenizer", f"bpe_stream.formats{sub}"): "the Tokenizer facade: Tokenizer.load, save, "
       "from_files, from_vocab_merges and to_vocab_merges call the format modules, which build Tokenizers "
       "(the one intended cycle, imported inside those methods)"
       for sub in ("", ".gpt2", ".native", ".vocab_merges")},
    ("bpe_stream.encode.evaluate", "bpe_stream.formats"): "eval --merges truncates the tokenizer with "
    "formats.truncate (inside the function); no cycle",
    ("bpe_stream.inputs.documents", "bpe_stream.count.counting"): "documents.count_pieces builds counting's tasks "
    "(inside the function), a cycle with counting; it moves into count/ after the reliability work on "
    "documents.py (issue 39) lands",
    ("bpe_stream.formats.hf", "bpe_stream.formats.hf_like"): "export --format hf --like hands over to hf_like, "
    "which reads the original with hf's loaders (inside the function), a cycle within formats/; left to the "
    "work on formats/ (issue 38)",
    ("bpe_stream.store.lmdb_store", "bpe_stream.train.estimate"): "Store.stats reports the training memory "
    "estimate (inside the method); the estimate and stats are being reworked on the training disk path's "
    "branch, where the estimate moves down",
}


def named(a: str, b: str) -> bool:
    """Whether NAMED names the import of ``b`` by ``a`` (or of a module under ``b``: its
    packages load first)."""
    return any(x == a and (y == b or y.startswith(b + ".")) for x, y in NAMED)


def unit(module: str) -> str:
    """The layer unit of a module: its stage folder, ``shared`` or the package itself."""
    parts = module.split(".")
    if len(parts) == 1:
        return "package"  # bpe_stream/__init__.py: a parent every module loads; no layer
    if parts[1] in SHARED:
        return "shared"
    return "cli" if parts[1] == "__main__" else parts[1]


def upward_imports(graph: dict) -> list:
    """``(importer, imported)`` of every import against LAYERS that NAMED does not name."""
    bad = []
    for a, targets in sorted(graph.items()):
        for b in sorted(targets):
            ua, ub = unit(a), unit(b)
            if "package" in (ua, ub) or ua == ub or named(a, b):
                continue
            if LAYERS.index(ua) < LAYERS.index(ub):
                bad.append((a, b))
    return bad


def test_every_import_is_seen_and_the_checks_can_fail():
    """Imports inside functions count for the full graph; a unit below importing one above
    is reported, a named edge is not; a cycle through unnamed edges is found."""
    graph = import_graph(everywhere=True)
    assert "bpe_stream.store.lmdb_store" in graph["bpe_stream.cli.commands"]  # imported inside the commands
    assert "bpe_stream.formats" in graph["bpe_stream.encode.tokenizer"]  # inside Tokenizer.load
    assert unit("bpe_stream.count.counting") == "count" and unit("bpe_stream.bpe") == "shared"
    assert upward_imports({"bpe_stream.pretok.x": {"bpe_stream.count.y"}}) == [("bpe_stream.pretok.x",
                                                                                   "bpe_stream.count.y")]
    assert upward_imports({"bpe_stream.encode.evaluate": {"bpe_stream.formats"}}) == []
    assert set(LAYERS) >= {unit(m) for m in graph} - {"package"}, "a unit with no place in LAYERS"


def test_no_import_cycle_but_the_named_ones():
    graph = import_graph(everywhere=True)
    for (a, b), reason in NAMED.items():
        assert b in graph[a], f"named but gone: {a} -> {b} ({reason}); remove it from NAMED"
    graph = {a: {b for b in targets if not named(a, b)} for a, targets in graph.items()}
    assert _cycle(graph) is None


def test_stages_import_only_downward():
    assert upward_imports(import_graph(everywhere=True)) == []


def test_cli_and_cli_scale_do_not_import_each_other():
    graph = import_graph()
    assert "bpe_stream.cli.commands" not in graph["bpe_stream.cli.scale"]
    assert "bpe_stream.cli.commands" not in graph["bpe_stream.cli.common"]


def test_one_streaming_layer_and_runners_that_only_run_tasks():
    """``count`` (plain files, stdin, decompressed streams) and ``encode`` cut their inputs and
    keep their tasks in flight through ``streaming``; the runners import nothing of what they
    run (not even inside a function, as the Dask engine once did to rewrite count_range's path)."""
    graph = import_graph()
    for user in ("bpe_stream.count.counting", "bpe_stream.encode.parallel", "bpe_stream.inputs.documents"):
        assert "bpe_stream.inputs.streaming" in graph[user], user
    for runner in ("parallel/runner.py", "parallel/dask_runner.py"):
        tree = ast.parse((PACKAGE / runner).read_text(encoding="utf-8"))
        imported = {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
        imported |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        assert not any(m.split(".")[-1] in ("counting", "encoding", "documents") for m in imported), (runner, imported)


def test_every_module_imports_first_in_a_fresh_interpreter():
    """Each module imported before any other of the package: a cycle that the order of
    imports happens to hide elsewhere fails here."""
    names = [n for n in _modules() if not n.endswith("__main__")]
    script = (
        "import importlib, subprocess, sys\n"
        "bad = []\n"
        "for name in sys.argv[1:]:\n"
        "    r = subprocess.run([sys.executable, '-c', 'import importlib, sys; importlib.import_module(sys.argv[1])',"
        " name], capture_output=True, text=True)\n"
        "    if r.returncode:\n"
        "        bad.append((name, r.stderr.strip().splitlines()[-1:]))\n"
        "print(bad)\n"
    )
    res = subprocess.run([sys.executable, "-c", script, *names], capture_output=True, text=True, cwd=REPO,
                         env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "[]", res.stdout


def _modules_after(tmp_path: Path, *args: str, stdin: bytes = b"") -> tuple:
    """Runs the CLI with ``args`` in a fresh interpreter; ``(exit status, modules loaded)``."""
    out = tmp_path / "modules.json"
    script = (
        "import json, sys\n"
        "from bpe_stream.cli.commands import app\n"
        "try:\n"
        "    app(sys.argv[2:], prog_name='bpe-stream')\n"
        "except SystemExit as exc:\n"
        "    code = exc.code\n"
        "with open(sys.argv[1], 'w') as f:\n"
        "    json.dump([code, sorted(sys.modules)], f)\n"
    )
    res = subprocess.run([sys.executable, "-c", script, str(out), *args], input=stdin, capture_output=True,
                         cwd=tmp_path, env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert res.returncode == 0, res.stderr
    code, modules = json.loads(out.read_text())
    return code, set(modules)


def test_encode_and_decode_do_not_load_lmdb(tmp_path):
    small = make_small(tmp_path)
    code, modules = _modules_after(tmp_path, "encode", "-t", str(small["tok"]), "-o", str(tmp_path / "ids.txt"),
                                   str(small["text"]))
    assert code == 0
    assert "lmdb" not in modules and "bpe_stream.store.lmdb_store" not in modules, sorted(m for m in modules if "store" in m)
    code, modules = _modules_after(tmp_path, "decode", "-t", str(small["tok"]), "-o", str(tmp_path / "back.txt"),
                                   str(tmp_path / "ids.txt"))
    assert code == 0
    assert "lmdb" not in modules and "bpe_stream.store.lmdb_store" not in modules
    assert (tmp_path / "back.txt").read_bytes() == small["text"].read_bytes()
    # ... while a command that opens a store does load it (the check above can fail)
    code, modules = _modules_after(tmp_path, "stats", "--store", str(small["store"]))
    assert code == 0 and "lmdb" in modules


# -- user errors and bugs ----------------------------------------------------------------------
def test_a_value_error_from_a_bug_is_not_a_user_error(cli, tmp_path, monkeypatch):
    """A ValueError that no input should cause (here: a library function patched to raise
    one) is a traceback and an "internal error" line with exit status 70, not an ``Error:``
    line with status 1 that would blame the user."""
    from bpe_stream.cli import common as cli_common

    small = make_small(tmp_path)

    def broken(*args, **kwargs):
        raise ValueError("an index that cannot happen")

    monkeypatch.setattr("bpe_stream.encode.parallel.ParallelEncoder.write", broken)
    res = cli("encode", "-t", small["tok"], small["text"])
    assert res.exit_code == cli_common.INTERNAL_ERROR == 70, res
    assert "Traceback" in res.stderr and "an index that cannot happen" in res.stderr
    assert "internal error (ValueError" in res.stderr and "please report" in res.stderr
    assert not any(line.startswith("Error:") for line in res.stderr.splitlines()), res.stderr


@pytest.mark.parametrize("exc", [RuntimeError("boom"), OverflowError("boom"), KeyError("boom")])
def test_other_unexpected_exceptions_are_internal_errors_too(cli, tmp_path, monkeypatch, exc):
    small = make_small(tmp_path)

    def broken(*args, **kwargs):
        raise exc

    monkeypatch.setattr("bpe_stream.store.lmdb_store.Store.stats", broken)
    res = cli("stats", "--store", small["store"])
    assert res.exit_code == 70, res
    assert f"internal error ({type(exc).__name__}" in res.stderr


def test_user_errors_are_one_error_line(cli, tmp_path, monkeypatch):
    """Each UserError subclass the library raises, and LMDB's own errors, are one line."""
    import lmdb

    from bpe_stream.errors import SettingsError, UserError
    from bpe_stream.store.lmdb_store import StoreError

    small = make_small(tmp_path)
    for exc in (StoreError("the store is odd"), SettingsError("these options do not go together"),
                UserError("a mistake"), lmdb.MapFullError("mdb_put: MDB_MAP_FULL")):
        def broken(*args, _exc=exc, **kwargs):
            raise _exc

        monkeypatch.setattr("bpe_stream.store.lmdb_store.Store.stats", broken)
        res = cli("stats", "--store", small["store"])
        assert_user_error(res.stderr, res.exit_code)
        assert str(exc).splitlines()[0] in res.stderr


def test_every_user_error_class_of_the_library_is_a_user_error():
    from bpe_stream.atomic import OutputError
    from bpe_stream.errors import SettingsError, UserError
    from bpe_stream.store.counts_file import CountsFormatError
    from bpe_stream.train.engine import TrainError
    from bpe_stream.pretok.pretokenize import PretokenizeError
    from bpe_stream.inputs.reader import InputError
    from bpe_stream.train.disk import ScratchError
    from bpe_stream.count.seen_files import Refused
    from bpe_stream.store.lmdb_store import NotWritable, StoreError, WriteFailed
    from bpe_stream.encode.tokenizer import TokenizerError

    for cls in (OutputError, SettingsError, CountsFormatError, TrainError, PretokenizeError, InputError,
                ScratchError, Refused, NotWritable, StoreError, WriteFailed, TokenizerError):
        assert issubclass(cls, UserError), cls
    # those that were ValueErrors stay ValueErrors for library callers
    for cls in (OutputError, SettingsError, CountsFormatError, TrainError, PretokenizeError, TokenizerError):
        assert issubclass(cls, ValueError), cls


def test_engine_options_that_do_not_go_together_are_user_errors(cli, tmp_path):
    (tmp_path / "a.txt").write_text("hello")
    res = cli("count", "--store", tmp_path / "st", "--scheduler", "tcp://nowhere:1", tmp_path / "a.txt")
    assert_user_error(res.stderr, res.exit_code)
    assert "--scheduler goes with --engine dask" in res.stderr
    res = cli("count", "--store", tmp_path / "st", "--engine", "spark", tmp_path / "a.txt")
    assert_user_error(res.stderr, res.exit_code)
    assert "unknown engine 'spark'" in res.stderr
