"""The boundary of the C extension (``bpe_stream/csrc``, built as ``bpe_stream._fastbpe``).

* where CI requires it (``BPE_STREAM_REQUIRE_C=1``) the extension is built;
* the definitions both sides hold (tie-break names, the sequence table's row) agree, and a
  build that disagrees stops the import;
* the sequence table's rows are little-endian on both sides, their keys big-endian;
* every 32-bit count the C code grows is checked: past the limit (lowered by a test knob)
  it is a clean error -- the library's own "too large" error -- not a wrap-around;
* the algorithm files stand without Python.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

import pytest

from bpe_stream import bpe, native
from bpe_stream.train.disk import train_on_disk
from bpe_stream.encode.tokenizer import TokenizerError
from bpe_stream.train.trainer import TrainConfig, Trainer, TrainError

REPO = Path(__file__).resolve().parents[1]
CSRC = REPO / "bpe_stream" / "csrc"
fastbpe = native.fastbpe
needs_c = pytest.mark.skipif(fastbpe is None, reason="the C extension is not built")
BYTES = [bytes([i]) for i in range(256)]


def test_the_extension_is_built_where_it_is_required():
    """CI sets BPE_STREAM_REQUIRE_C=1 (setup.py then fails instead of installing without C):
    there, the pure-Python fallback must not be what the suite tested."""
    if os.environ.get("BPE_STREAM_REQUIRE_C") != "1":
        pytest.skip("BPE_STREAM_REQUIRE_C=1 is not set (CI sets it)")
    import bpe_stream._fastbpe  # noqa: F401  (the ImportError, if any, says why)

    assert native.fastbpe is not None


@needs_c
def test_c_and_python_hold_the_same_tie_breaks():
    assert fastbpe.TIE_BREAKS == bpe.TIE_BREAKS


@pytest.mark.parametrize("module, fake", [
    ("train.trainer", "TIE_BREAKS=('min-ids', 'max-bytes', 'min-bytes')"),
    ("train.trainer", ""),  # a build from before the constants existed
])
def test_an_extension_built_from_other_sources_stops_the_import(module, fake):
    code = (f"import types; from bpe_stream import bpe, native; native.fastbpe = types.SimpleNamespace({fake}); "
            f"import bpe_stream.{module}")
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert res.returncode != 0
    assert "NativeMismatch" in res.stderr and "rebuild it" in res.stderr, res.stderr


def test_agree_compares_with_the_loaded_extension_or_the_one_given():
    native.agree("TIE_BREAKS", bpe.TIE_BREAKS)  # the loaded one (or none built: nothing to check)
    with pytest.raises(native.NativeMismatch, match="TIE_BREAKS"):
        native.agree("TIE_BREAKS", bpe.TIE_BREAKS, native=type("Stale", (), {"TIE_BREAKS": ("max-bytes",)}))


def test_the_algorithm_files_include_no_python():
    """Only module.c includes Python.h; every .c file is in the build (setup.py globs csrc)."""
    sources = sorted(p.name for p in CSRC.glob("*.[ch]"))
    including = [name for name in sources if re.search(r"#\s*include\s*[<\"]Python\.h", (CSRC / name).read_text())]
    assert including == ["module.c"]
    assert {"common.h", "layout.h", "pairs.c", "merge_loop.c", "filearena.c", "encoder.c"} <= set(sources)


@needs_c
def test_the_algorithm_files_compile_as_plain_c(tmp_path):
    """The algorithms link into a C program without Python: a small one trains its merges,
    in memory and with its tables in a file arena (the same merges; nothing left on disk)."""
    cc = os.environ.get("CC", "cc")
    program = tmp_path / "train.c"
    program.write_text(r"""
#include <stdio.h>
#include "merge_loop.h"
#include "layout.h"
int main(int argc, char **argv) {
    int rc;
    FileArena *arena = NULL;
    if (argc > 1 && !(arena = file_arena_open(argv[1], 0))) return 9;
    MergeLoop *m = merge_loop_new(TB_MAX_BYTES, arena, &rc);
    if (!m) return 10;
    for (int b = 0; b < 256; b++) { uint8_t c = (uint8_t)b; if (merge_loop_add_token(m, &c, 1)) return 11; }
    const uint8_t symbols[] = "abababc";
    const uint64_t ends[] = {4, 7};
    const int64_t freqs[] = {3, 2};
    if ((rc = merge_loop_load(m, symbols, 1, 7, ends, freqs, 2)) || (rc = merge_loop_start(m))) return 12;
    uint32_t a, b;
    int64_t count;
    while ((rc = merge_loop_step(m, 1, NULL, &a, &b, &count)) == 1) printf("%u %u %lld\n", a, b, (long long)count);
    merge_loop_free(m);
    return rc < 0 ? 13 : 0;
}
""")
    sources = [str(p) for p in sorted(CSRC.glob("*.c")) if p.name != "module.c"]
    try:
        build = subprocess.run([cc, "-std=gnu11", "-O1", "-I", str(CSRC), str(program), *sources,
                                "-o", str(tmp_path / "train")], capture_output=True, text=True)
    except FileNotFoundError:
        pytest.skip(f"no C compiler {cc!r}")
    assert build.returncode == 0, build.stderr
    run = subprocess.run([str(tmp_path / "train")], capture_output=True, text=True)
    assert run.returncode == 0
    assert run.stdout.splitlines()[:3] == ["97 98 8", "256 256 3", "256 99 2"]
    (tmp_path / "arena").mkdir()
    on_disk = subprocess.run([str(tmp_path / "train"), str(tmp_path / "arena")], capture_output=True, text=True)
    assert on_disk.returncode == 0 and on_disk.stdout == run.stdout
    assert list((tmp_path / "arena").iterdir()) == []  # the scratch file had no name


# -- 32-bit counts -------------------------------------------------------------------------
@contextmanager
def limit32(limit: int):
    """The C code's limit on every count it holds in 32 bits, lowered for the block."""
    before = fastbpe._set_limit32(limit)
    try:
        yield
    finally:
        fastbpe._set_limit32(before)


def train_c(words, **kw):
    trainer = Trainer(TrainConfig(**kw))
    trainer.feed(words)
    return trainer.train(engine="c")


def train_disk(tmp_path, words, merges):
    cfg = TrainConfig(num_merges=merges)
    base = cfg.base_vocab()
    return train_on_disk(sorted(words), [base[i] for i in range(len(base))], None, "max-bytes", merges, 1, [],
                         str(tmp_path / "scratch"))


@needs_c
def test_the_limit_knob_takes_only_what_32_bits_hold():
    for bad in (0, 1 << 32, (1 << 32) - 1):
        with pytest.raises(ValueError):
            fastbpe._set_limit32(bad)


@needs_c
def test_positions_past_the_limit_are_too_large_for_the_memory_trainer():
    """300 positions fit a limit of 300, 301 do not (the loop indexes positions in 32 bits)."""
    with limit32(300):
        assert train_c([(b"ab" * 150, 1)], num_merges=3).merges == [(97, 98), (256, 256), (257, 257)]
        with pytest.raises(TrainError, match="too large for the merge loop"):
            train_c([(b"ab" * 150 + b"a", 1)], num_merges=3)


@needs_c
def test_tokens_past_the_limit_are_too_large_on_both_paths(tmp_path):
    """256 bytes and 4 merges fit a limit of 260 tokens; a fifth merge does not."""
    words = [(b"abcdefgh", 3), (b"hgfedcba", 2)]
    with limit32(260):
        assert len(train_c(words, num_merges=4).merges) == 4
        assert len(train_disk(tmp_path, words, 4)) == 4
        with pytest.raises(TrainError, match="too large"):
            train_c(words, num_merges=5)
        with pytest.raises(TrainError, match="too large for the merge loop"):
            train_disk(tmp_path, words, 5)
    assert len(train_c(words, num_merges=5).merges) == 5  # the limit restored, the same run works


@needs_c
def test_a_pretoken_past_the_limit_is_too_large_for_the_encoder(tmp_path):
    from bpe_stream.train.pipeline import tokenizer_from_result

    tok = tokenizer_from_result(train_c([(b"abab", 3)], num_merges=2), "none", "max-bytes")
    with limit32(300):
        assert tok.encode("ab" * 150) == [257] * 75
        with pytest.raises(TokenizerError, match="too large for the encoder"):
            tok.encode("ab" * 150 + "c")


@needs_c
def test_the_cli_says_too_large_in_one_line(cli, tmp_path):
    (tmp_path / "text.txt").write_text("abcdefgh hgfedcba " * 20)
    assert cli("count", "--store", "store", "text.txt").exit_code == 0
    with limit32(260):
        for path in ("memory", "disk"):
            res = cli("train", "--store", "store", "--num-merges", 10, "--path", path, "-o", f"{path}.json")
            assert res.exit_code == 1, res
            errors = [line for line in res.stderr.splitlines() if line.startswith("Error")]
            assert len(errors) == 1 and "too large for the merge loop" in errors[0], res.stderr
            assert "Traceback" not in res.stderr and not (tmp_path / f"{path}.json").exists()
