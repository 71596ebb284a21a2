"""Shared fixtures: where the reference data is, temporary stores, two ways to run the CLI,
the inputs the reliability tests share, and the suite's one hypothesis profile.

* ``cli``: typer's ``CliRunner`` on ``bpe_stream.cli.commands.app`` (fast, in process; stdin as bytes).
* ``bpe``: the real entry point in a subprocess (``python -m bpe_stream.cli.commands``), for checks on
  the exact bytes written to stdout and on the exit status a shell sees.

Hypothesis runs every property test with ``BPE_STREAM_HYPOTHESIS_EXAMPLES`` examples (150
unless set; a few tests whose examples are costly run a share of them, ``fewer_examples``)
and ``derandomize=True``: the same examples on every run and every machine, no example
database, no deadline (a loaded machine must not fail a test).  For a longer, random search:
``BPE_STREAM_HYPOTHESIS_EXAMPLES=5000 pytest --hypothesis-profile=random`` (a new seed each
run; failures are saved in ``.hypothesis/`` and printed with a blob that reproduces them).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import reliability_helpers as H
from hypothesis import HealthCheck, settings
from typer.testing import CliRunner

REPO = Path(__file__).resolve().parent.parent
DATA = REPO.parent / "shared" / "data"
CS336 = DATA / "cs336"

TIKTOKEN_GPT2_ENCODER = "6c7ea1a7e38e3a7f062df639a5b80947f075ffe6"
TIKTOKEN_GPT2_BPE = "6d1cbeee0f20b3d9449abfede4726ed8212e3aee"

# -- hypothesis ------------------------------------------------------------------------------
DEFAULT_EXAMPLES = 150
EXAMPLES = int(os.environ.get("BPE_STREAM_HYPOTHESIS_EXAMPLES", DEFAULT_EXAMPLES))
_EVERY_PROFILE = dict(
    max_examples=EXAMPLES, deadline=None,
    # too_slow depends on the machine's speed; the function-scoped fixtures that property
    # tests take are scratch directories in which each example makes its own
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
settings.register_profile("deterministic", derandomize=True, database=None, **_EVERY_PROFILE)
settings.register_profile("random", print_blob=True, **_EVERY_PROFILE)
settings.load_profile("deterministic")


def _import_the_whole_package() -> None:
    """Hypothesis mixes the literals of the (non-test) local modules imported so far into its
    examples, so what a property test draws would depend on which tests ran before it, or
    were selected at all; with every module of the package imported up front, it does not."""
    import importlib
    import pkgutil

    import bpe_stream

    for module in pkgutil.walk_packages(bpe_stream.__path__, "bpe_stream."):
        if module.name.endswith("__main__"):  # runs the CLI
            continue
        try:
            importlib.import_module(module.name)
        except ImportError:  # an extra that is not installed (dask)
            pass


_import_the_whole_package()


def fewer_examples(n: int) -> settings:
    """``@fewer_examples(40)`` on a property test whose examples are costly (a store each,
    files written and loaded): ``n`` examples where the suite runs its default 150, scaled
    with ``BPE_STREAM_HYPOTHESIS_EXAMPLES``."""
    assert n < DEFAULT_EXAMPLES, n
    return settings(max_examples=max(1, round(n * EXAMPLES / DEFAULT_EXAMPLES)))


@pytest.fixture(scope="session")
def data_dir() -> Path:
    if not CS336.is_dir():
        pytest.fail(f"reference data missing at {DATA} (expected ../shared/data from the repo root)")
    return DATA


@pytest.fixture(scope="session")
def cs336(data_dir) -> Path:
    return data_dir / "cs336"


@pytest.fixture
def store_dir(tmp_path) -> Path:
    """A path for a new store (not created yet)."""
    return tmp_path / "store"


class CliResult:
    def __init__(self, exit_code: int, stdout: bytes, stderr: str, exception=None):
        self.exit_code = exit_code
        self.stdout = stdout
        self.stderr = stderr
        self.exception = exception

    def __repr__(self):
        return f"CliResult(exit={self.exit_code}, stdout={self.stdout[:200]!r}, stderr={self.stderr[:500]!r}, exc={self.exception!r})"


@pytest.fixture
def cli(tmp_path, monkeypatch):
    """``cli(*args, input=b"...")`` runs the CLI in process (cwd = a temp dir)."""
    from bpe_stream.cli.commands import app

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("BPE_STREAM_STORE", raising=False)
    runner = CliRunner()

    def run(*args, input: bytes = b"", env=None) -> CliResult:
        res = runner.invoke(app, [str(a) for a in args], input=input, env=env)
        return CliResult(res.exit_code, res.stdout_bytes, res.stderr, res.exception)

    return run


@pytest.fixture
def bpe(tmp_path):
    """``bpe(*args, input=b"...")`` runs ``python -m bpe_stream.cli.commands`` in a subprocess."""

    def run(*args, input: bytes = b"", cwd=None, env=None) -> subprocess.CompletedProcess:
        full_env = dict(os.environ)
        full_env.pop("BPE_STREAM_STORE", None)
        full_env["PYTHONPATH"] = str(REPO) + os.pathsep + full_env.get("PYTHONPATH", "")
        if env:
            full_env.update(env)
        return subprocess.run(
            [sys.executable, "-m", "bpe_stream.cli.commands", *[str(a) for a in args]],
            input=input, capture_output=True, cwd=str(cwd or tmp_path), env=full_env, timeout=H.HANG_TIMEOUT,
        )

    return run


def assert_user_error(stderr, exit_code):
    """Exit 1 with exactly one ``Error: ...`` line and no traceback."""
    text = stderr.decode("utf-8", "replace") if isinstance(stderr, bytes) else stderr
    assert exit_code == 1, (exit_code, text)
    lines = [line for line in text.splitlines() if line.strip()]
    assert len(lines) == 1, text
    assert lines[0].startswith("Error: "), text
    assert "Traceback" not in text


@pytest.fixture(scope="session")
def tiktoken_gpt2(tmp_path_factory, cs336):
    """tiktoken's ``gpt2`` loaded offline from the CS336 files (see ../shared/data/README.md)."""
    tiktoken = pytest.importorskip("tiktoken")
    cache = tmp_path_factory.mktemp("tiktoken-cache")
    (cache / TIKTOKEN_GPT2_ENCODER).write_bytes((cs336 / "gpt2_vocab.json").read_bytes())
    (cache / TIKTOKEN_GPT2_BPE).write_bytes(b"#version: 0.2\n" + (cs336 / "gpt2_merges.txt").read_bytes())
    old = os.environ.get("TIKTOKEN_CACHE_DIR")
    os.environ["TIKTOKEN_CACHE_DIR"] = str(cache)
    try:
        enc = tiktoken.get_encoding("gpt2")
    finally:
        if old is None:
            os.environ.pop("TIKTOKEN_CACHE_DIR", None)
        else:
            os.environ["TIKTOKEN_CACHE_DIR"] = old
    return enc


@pytest.fixture(scope="session")
def gpt2_tokenizer(cs336):
    from bpe_stream import Tokenizer

    return Tokenizer.from_files(cs336 / "gpt2_vocab.json", cs336 / "gpt2_merges.txt", ["<|endoftext|>"])


def tiktoken_pattern(name: str) -> str:
    """tiktoken's ``pat_str`` for ``cl100k_base``/``o200k_base`` without loading the ranks (no network)."""
    import tiktoken_ext.openai_public as public

    original = public.load_tiktoken_bpe
    public.load_tiktoken_bpe = lambda *a, **k: {}
    try:
        return getattr(public, name)()["pat_str"]
    finally:
        public.load_tiktoken_bpe = original


# -- what the reliability tests share ------------------------------------------------------------
def ok(res):
    """``res`` (in process or a subprocess) after asserting that it exited 0."""
    code = getattr(res, "returncode", getattr(res, "exit_code", None))
    assert code == 0, res
    return res


def stderr_text(res) -> str:
    err = res.stderr
    return err.decode("utf-8", "replace") if isinstance(err, bytes) else err


def assert_clean_error(res, *fragments):
    """One ``Error:`` line naming the problem, exit 1, no traceback (CLI in process or not)."""
    exc = getattr(res, "exception", None)
    assert exc is None or isinstance(exc, SystemExit), f"an exception escaped: {exc!r}\n{res}"
    assert_user_error(res.stderr, getattr(res, "exit_code", getattr(res, "returncode", None)))
    for fragment in fragments:
        assert fragment in stderr_text(res), (fragment, stderr_text(res))


@pytest.fixture(scope="session")
def corpus_files(tmp_path_factory):
    """Five slices of the three reference corpora (1.1 MB of English, code and many scripts;
    <|endoftext|> between their documents; slices may end inside a UTF-8 character)."""
    directory = tmp_path_factory.mktemp("corpus")
    return H.write_slices(directory, [
        ("en_100M.txt", 0, 300_000), ("code_25M.txt", 1_000_000, 200_000), ("multi_25M.txt", 2_000_001, 200_000),
        ("en_100M.txt", 5_000_000, 250_000), ("multi_25M.txt", 9_000_003, 150_000),
    ])


@pytest.fixture(scope="session")
def corpus_oracle(corpus_files):
    return H.PrefixOracle(corpus_files)


@pytest.fixture(scope="session")
def train_base(tmp_path_factory):
    """A store of 1.2 MB of English and code (26k distinct pretokens), counted by the library,
    the tokenizer that one uninterrupted ``train ... TRAIN_ARGS`` writes from it, and how many
    checkpoints that run commits.  Tests copy the store before they change it."""
    from bpe_stream import Store
    from bpe_stream.count.counting import count_sources, make_settings
    from bpe_stream.inputs.reader import Source

    work = tmp_path_factory.mktemp("train")
    files = H.write_slices(work / "in", [("en_100M.txt", 20_000_000, 800_000), ("code_25M.txt", 5_000_000, 400_000)])
    base = work / "base"
    with Store.open(base, create=True) as st_:
        count_sources(st_, [Source.from_arg(p) for p in files], make_settings("gpt2", [H.EOT]))
    ref_store = work / "ref-store"
    shutil.copytree(base, ref_store)
    cmd = H.Cmd("train", "--store", ref_store, "-o", work / "ref.json", *H.TRAIN_ARGS, "--path", "memory")
    return base, work / "ref.json", H.points(cmd, work)["checkpoint"]


@pytest.fixture(scope="session")
def small_tok_file(tmp_path_factory):
    """A small native tokenizer (300 merges, <|endoftext|>) trained in process."""
    from bpe_stream.train.pipeline import tokenizer_from_result
    from bpe_stream.train.trainer import TrainConfig, Trainer

    work = tmp_path_factory.mktemp("small-tok")
    text = (CS336 / "tinystories_sample.txt").read_bytes()[:60_000]
    counts, _ = H.oracle([text])
    trainer = Trainer(TrainConfig(num_merges=300, special_tokens=[H.EOT]))
    trainer.feed(sorted(counts.items()))
    tok = tokenizer_from_result(trainer.train(), "gpt2", "max-bytes")
    path = work / "small.json"
    tok.save(path)
    return path
