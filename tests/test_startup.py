"""What a command imports: each command starts with the modules it uses, not every module's.

``count`` of a file with a named pretokenizer and the C extension scans, cuts and splits
off special tokens in bytes: no ``regex`` (its import and the patterns' compiles cost ~20
ms); one worker runs inline: no ``multiprocessing``; plain files: no decompressors.  These
tests look at ``sys.modules`` after the command ran in a fresh interpreter (no timing).
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import regex
from conftest import REPO

from bpe_stream.pretok import pretokenize
from bpe_stream.native import fastbpe

needs_c = pytest.mark.skipif(fastbpe is None, reason="the C extension is not built")

# Runs the command line in this interpreter (as the bpe-stream script does), then prints
# the modules loaded by the end, as JSON, on stdout.
_RUN = (
    "import json, sys\n"
    "{prelude}\n"
    "from bpe_stream.cli.commands import main\n"
    "sys.argv = ['bpe-stream'] + json.loads(sys.argv[1])\n"
    "try:\n"
    "    main()\n"
    "except SystemExit as exc:\n"
    "    assert not exc.code, exc.code\n"
    "print(json.dumps(sorted(sys.modules)))\n"
)


def modules_after(args, cwd, prelude: str = ""):
    """The modules loaded after ``bpe-stream ARGS`` ran in a fresh interpreter (its stderr too)."""
    res = subprocess.run([sys.executable, "-c", _RUN.format(prelude=prelude), json.dumps(args)],
                         capture_output=True, text=True, cwd=cwd)
    assert res.returncode == 0, res.stderr
    return set(json.loads(res.stdout)), res.stderr


# A budget this small cuts a file into ranges of 64 KiB (counting.range_for).
SMALL_RANGES = ["--max-memory", "16M"]
TEXT = "Hello wörld, café <|endoftext|> 日本語のテキスト  and\tmore 42 words\n" * 50


@needs_c
@pytest.mark.parametrize("extra", [[], ["--special-token", "<|endoftext|>"], ["--pretokenizer", "o200k"]])
def test_count_of_a_file_with_one_worker_imports_no_regex_or_multiprocessing(tmp_path, extra):
    (tmp_path / "a.txt").write_text(TEXT, encoding="utf-8")
    loaded, err = modules_after(["count", "a.txt", "--store", "st", "-w", "1", *extra], tmp_path)
    assert "counted 3," in err, err  # it did count
    for name in ("regex", "multiprocessing", "multiprocessing.connection", "gzip", "pickle", "socket"):
        assert name not in loaded, name


@needs_c
def test_count_cuts_a_file_into_ranges_without_regex(tmp_path):
    # several ranges (find_byte_cut on non-ASCII text), one worker
    (tmp_path / "a.txt").write_text(TEXT * 400, encoding="utf-8")
    loaded, err = modules_after(["count", "a.txt", "--store", "st", "-w", "1", *SMALL_RANGES], tmp_path)
    assert "counted 1,560,000 bytes" in err, err
    assert "regex" not in loaded and "multiprocessing" not in loaded


@needs_c
def test_count_with_workers_still_uses_them(tmp_path):
    (tmp_path / "a.txt").write_text(TEXT * 400, encoding="utf-8")
    loaded, err = modules_after(["count", "a.txt", "--store", "st", "-w", "2", *SMALL_RANGES], tmp_path)
    assert "2 workers" in err, err
    # plain files on threads (their C code without the GIL), no worker process
    assert "concurrent.futures.thread" in loaded and "multiprocessing.connection" not in loaded
    assert "regex" not in loaded


def test_without_the_extension_count_imports_regex_and_counts_the_same(tmp_path):
    (tmp_path / "a.txt").write_text(TEXT * 400, encoding="utf-8")
    args = ["count", "a.txt", "-w", "1", "--special-token", "<|endoftext|>", *SMALL_RANGES, "--store"]
    loaded, _ = modules_after(args + ["without"], tmp_path, prelude="sys.modules['bpe_stream._fastbpe'] = None")
    assert "regex" in loaded  # the fallback scans with it
    modules_after(args + ["with"], tmp_path)
    stats = []
    for store in ("without", "with"):
        res = subprocess.run([sys.executable, "-m", "bpe_stream", "stats", "--store", store, "--json", "--top", "1000"],
                             capture_output=True, text=True, cwd=tmp_path, check=True)
        data = json.loads(res.stdout)
        stats.append((data["top"], data["unique_pretokens"], data["pretokens"], data["bytes"], data["documents"]))
    assert stats[0] == stats[1]


def test_space_chars_are_what_regex_takes_for_a_space():
    # find_byte_cut tells a space before a cut by SPACE_CHARS, not by regex's \s
    everything = "".join(map(chr, range(0x110000)))
    assert pretokenize.SPACE_CHARS == frozenset(regex.findall(r"\s", everything))


def test_named_pretokenizers_and_special_tokens_compile_no_pattern_until_used():
    code = (
        "import sys\n"
        "from bpe_stream.pretok.pretokenize import Pretokenizer, SpecialSplitter, find_byte_cut\n"
        "from bpe_stream.count import counting\n"
        "counting.make_settings('gpt2', ['<|endoftext|>'])\n"
        "gpt2 = Pretokenizer.from_name('gpt2')\n"
        "assert find_byte_cut('Hello café again'.encode(), 6, gpt2, []) == 11\n"  # after a non-ASCII letter
        "assert find_byte_cut('Hello café\\u3000 again'.encode(), 6, gpt2, []) == -1\n"  # after a non-ASCII space
        "assert 'regex' not in sys.modules\n"
        "assert list(SpecialSplitter(['<a>']).split('x<a>y')) == [(False, 'x'), (True, '<a>'), (False, 'y')]\n"
        "assert 'regex' in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], cwd=REPO, check=True)


def test_the_script_leaves_the_objects_of_the_run_to_the_exit(tmp_path):
    # main() freezes what is alive when the command is done: the collections at interpreter
    # shutdown skip it (the exit is 20-60 ms shorter).  Outputs and exit status are as ever.
    (tmp_path / "a.txt").write_text(TEXT, encoding="utf-8")
    code = (
        "import gc, sys\n"
        "from bpe_stream.cli.commands import main\n"
        "sys.argv = ['bpe-stream', 'count', 'a.txt', '--store', 'st', '-w', '1']\n"
        "try:\n"
        "    main()\n"
        "except SystemExit as exc:\n"
        "    print(exc.code, gc.get_freeze_count() > 1000)\n"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path)
    assert res.stdout.split() == ["0", "True"] and "counted 3," in res.stderr, (res.stdout, res.stderr)
    res = subprocess.run([sys.executable, "-m", "bpe_stream", "stats", "--store", "nowhere"], capture_output=True,
                         text=True, cwd=tmp_path)
    assert res.returncode == 1 and res.stderr.count("Error:") == 1, res.stderr


def test_the_modules_imported_before_a_command_are_frozen_while_it_runs(tmp_path, monkeypatch):
    # main() freezes what the imports made before it runs the command: the collector's full
    # passes during a train (its merges, its tokenizer document) then skip typer, click and ours.
    import gc

    from bpe_stream.cli import commands as cli

    seen = []
    monkeypatch.setattr(cli, "app_for", lambda args: lambda prog_name: seen.append(gc.get_freeze_count()))
    gc.unfreeze()
    try:
        cli.main()
    finally:
        gc.unfreeze()
    assert seen and seen[0] > 1000


def _command_names():
    from bpe_stream.cli.commands import app

    return [c.name or c.callback.__name__.replace("_", "-") for c in app.registered_commands]


def test_a_command_runs_on_an_app_that_holds_it_alone():
    from bpe_stream.cli.commands import app, app_for

    names = _command_names()
    assert len(names) == 13 and "eval" in names and "export-counts" in names
    for name in names:
        assert [c.name or c.callback.__name__.replace("_", "-") for c in app_for([name, "x"]).registered_commands] == [name]
    for args in ([], ["--help"], ["-h"], ["--version"], ["cont"], ["eval_"], ["--store", "count"]):
        assert app_for(args) is app, args
    assert len(app.registered_commands) == 13  # the app itself is left as it was


@pytest.mark.parametrize("args", [["--help"], ["--workers", "0"], ["--no-such-option"], ["-t"]])
def test_a_command_says_the_same_on_its_own_app(args):
    from typer.testing import CliRunner

    from bpe_stream.cli.commands import app, app_for

    runner = CliRunner()
    for name in _command_names():
        whole = runner.invoke(app, [name, *args], prog_name="bpe-stream")
        alone = runner.invoke(app_for([name, *args]), [name, *args], prog_name="bpe-stream")
        assert (alone.exit_code, alone.output) == (whole.exit_code, whole.output), (name, args)
        assert whole.exit_code in (0, 2), (name, args, whole.output)


@needs_c
def test_encode_and_decode_with_the_native_encoder_import_no_regex(tmp_path):
    from small_made import make_small

    small = make_small(tmp_path)
    (tmp_path / "u.txt").write_text(TEXT, encoding="utf-8")
    for text in (small["text"], tmp_path / "u.txt"):
        loaded, _ = modules_after(["encode", "-t", str(small["tok"]), "-o", "ids.txt", "--append-special",
                                   "<|endoftext|>", str(text)], tmp_path)
        assert "regex" not in loaded and "multiprocessing" not in loaded
        loaded, _ = modules_after(["decode", "-t", str(small["tok"]), "-o", "back.txt", "ids.txt"], tmp_path)
        assert "regex" not in loaded
        assert (tmp_path / "back.txt").read_bytes() == text.read_bytes() + b"<|endoftext|>"


def test_gpt2_split_is_the_regex_pretokens_also_when_re_may_not_take_ascii(monkeypatch):
    text = "Hello world's 42  café!\n\tx  " * 3
    want = pretokenize.Pretokenizer.from_name("gpt2").split(text)
    monkeypatch.setattr(pretokenize, "_re_on_ascii", False)
    assert pretokenize.gpt2_split(text) == want and pretokenize.gpt2_split("abc def") == ["abc", " def"]
    monkeypatch.setattr(pretokenize, "_re_on_ascii", None)  # found again at the first split
    assert pretokenize.gpt2_split(text) == want and pretokenize._re_on_ascii is True
