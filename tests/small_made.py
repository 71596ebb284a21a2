"""A small store and the tokenizer trained on it, made once per test module through the CLI
(tests/test_outputs.py, test_hostile_inputs.py, test_option_values.py, test_messages.py)."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

EOT = "<|endoftext|>"
TEXT = ("hello world, the quick brown fox jumps over the lazy dog. " * 20 + EOT + "a second document\n") * 5


def run_cli(*args):
    """The CLI in process; ``(exit_code, stdout bytes, stderr)``."""
    from bpe_stream.cli.commands import app

    res = CliRunner().invoke(app, [str(a) for a in args])
    return res.exit_code, res.stdout_bytes, res.stderr


def make_small(directory: Path) -> dict:
    """``{"dir", "text", "store", "tok"}``: a store counted from ``text.txt`` and a
    tokenizer of 40 merges trained on it."""
    text = directory / "text.txt"
    text.write_bytes(TEXT.encode())
    store, tok = directory / "store", directory / "tok.json"
    for args in (("count", "--store", store, "--special-token", EOT, "-q", text),
                 ("train", "--store", store, "--num-merges", "40", "-o", tok, "-q")):
        code, _, err = run_cli(*args)
        assert code == 0, err
    return {"dir": directory, "text": text, "store": store, "tok": tok}
