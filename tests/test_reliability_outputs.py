"""Reliability (issue 7): outputs are never half a file.

Every output (ids, tokenizer files in each format, a train's tokenizer) is written to a
temporary file and renamed over the target.  The tests SIGKILL the real CLI at a seam of
``tests/seams.py`` -- in the middle of writing the temporary file, or just before one of the
renames of a command that writes several files -- and check that the target holds the old
file or the whole new one, never a part or a mix.
"""

from __future__ import annotations

import os
import shutil
import signal

import pytest
import reliability_helpers as H
from conftest import ok
from reliability_helpers import TRAIN_ARGS, Cmd

from bpe_stream import Tokenizer


def test_encode_output_killed_while_the_ids_are_written_is_the_old_file(tmp_path, train_base, corpus_files):
    """SIGKILL right after a seeded one of the writes into the temporary file (every write but
    the last): the target is still the old file, and the temporary file left behind holds a
    prefix of the new one under a name that says whose it is."""
    ref = train_base[1]
    src = tmp_path / "in.txt"
    src.write_bytes(b"".join(corpus_files.values()) * 4)  # 4.4 MB: the ids are written in several pieces
    out = tmp_path / "ids.txt"
    with open(src, "rb") as f:
        ids = [i for batch in Tokenizer.load(ref).encode_stream(f) for i in batch]
    whole = (" ".join(map(str, ids)) + "\n").encode()
    cmd = Cmd("encode", "-t", ref, "-o", out, src)
    writes = H.points(Cmd("encode", "-t", ref, "-o", tmp_path / "probe.txt", src), tmp_path)["output"]
    assert writes > 1, writes
    moment = f"output:{H.seeded(9).randint(1, writes - 1)}"
    out.write_bytes(b"1 2 3\n")
    res = H.run(Cmd(*cmd.args, knobs={"sigkill_at": moment}), tmp_path)
    assert res.returncode == -signal.SIGKILL, (moment, res)
    assert out.read_bytes() == b"1 2 3\n", f"encode killed at {moment} changed its output file"
    leftovers = [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
    assert [p.name[:9] for p in leftovers] == [".ids.txt."], leftovers
    part = leftovers[0].read_bytes()
    assert len(part) < len(whole) and whole.startswith(part), f"the temporary file is not a prefix ({moment})"
    ok(H.run(cmd, tmp_path))
    assert out.read_bytes() == whole


def _same_tokenizer(a: Tokenizer, b: Tokenizer) -> bool:
    return a.vocab == b.vocab and a.merges == b.merges and a.special_ids == b.special_ids


@pytest.mark.parametrize("command, kill_at", [
    ("export gpt2", 1), ("export tiktoken", 2), ("export hf", 1), ("export native", 1), ("train", 1),
])
def test_outputs_killed_between_writes_are_the_old_or_the_new_whole(tmp_path, train_base, command, kill_at):
    """SIGKILL just before the N-th rename of the command (for the formats that are two files,
    between their two writes): what is at the output path must load as the old tokenizer or
    as the new one, never as a mix of both.  The old one is the full tokenizer, the new one
    its first 1,000 tokens (``export --vocab-size 1000``), as when an export is redone."""
    from bpe_stream.formats import export_tokenizer, load_any, truncate
    from bpe_stream.encode.tokenizer import TokenizerError

    base, ref, _ = train_base
    full = Tokenizer.load(ref)
    small = truncate(full, 1000)
    kind = command.split()[-1]
    out = tmp_path / {"gpt2": "gpt2-dir", "tiktoken": "tok.tiktoken", "hf": "tokenizer.json"}.get(kind, "tok.json")
    knobs = {"sigkill_at": f"replace:{kill_at}"}
    if command == "train":
        old, new = small, full
        store = tmp_path / "store"
        shutil.copytree(base, store)
        export_tokenizer(old, "native", out)
        cmd = Cmd("train", "--store", store, "-o", out, *TRAIN_ARGS, knobs=knobs)
    else:
        old, new = full, small
        export_tokenizer(old, kind, out)
        cmd = Cmd("export", "-t", ref, "-f", kind, "-o", out, "--vocab-size", "1000", knobs=knobs)
    assert _same_tokenizer(load_any(out), old)
    res = H.run(cmd, tmp_path)
    assert res.returncode == -signal.SIGKILL, res
    try:
        loaded = load_any(out)
    except TokenizerError as exc:
        raise AssertionError(f"{command} killed before rename {kill_at} left {out} unloadable: {exc}") from None
    assert _same_tokenizer(loaded, old) or _same_tokenizer(loaded, new), (
        f"{command} killed before rename {kill_at} left {out} holding neither the old tokenizer nor the new one: "
        f"it loads with {loaded.vocab_size} tokens, {len(loaded.merges)} merges and {len(loaded.special_ids)} "
        f"special tokens (old: {old.vocab_size}/{len(old.merges)}/{len(old.special_ids)}, "
        f"new: {new.vocab_size}/{len(new.merges)}/{len(new.special_ids)})")


def test_new_output_files_follow_the_umask(cli, tmp_path, train_base):
    """Files written atomically must get the permissions a plain open() gives (0666 & ~umask),
    not the 0600 of a temporary file."""
    ref = train_base[1]
    src = tmp_path / "in.txt"
    src.write_bytes(b"hello world\n")
    old_umask = os.umask(0o022)
    try:
        ok(cli("encode", "-t", ref, "-o", tmp_path / "ids.txt", src))
        ok(cli("export", "-t", ref, "-f", "hf", "-o", tmp_path / "tokenizer.json"))
        (tmp_path / "plain.txt").write_bytes(b"")
    finally:
        os.umask(old_umask)
    expected = (tmp_path / "plain.txt").stat().st_mode & 0o777
    modes = {name: oct((tmp_path / name).stat().st_mode & 0o777) for name in ("ids.txt", "tokenizer.json")}
    assert set(modes.values()) == {oct(expected)}, f"{modes}, expected {oct(expected)} as for any new file"


