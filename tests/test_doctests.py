"""The worked examples in the core's docstrings are doctests, and they hold.

``bpe``, ``pretokenize``, ``memory_engines`` (the Python engine), ``streaming``, ``count_table``
and ``estimate`` (its calibration points) examples stand alone.  ``tokenizer``'s methods
continue the example of the ``Tokenizer`` class docstring (its ``tok``), so that one runs
first and its names are given to the others.
"""

from __future__ import annotations

import doctest

import pytest

from bpe_stream import bpe
from bpe_stream.count import table as count_table, seen_files as sources
from bpe_stream.train import estimate, memory as memory_engines
from bpe_stream.pretok import pretokenize
from bpe_stream.inputs import cuts, streaming
from bpe_stream.encode import tokenizer

FLAGS = doctest.ELLIPSIS


def _tests(module):
    tests = [t for t in doctest.DocTestFinder().find(module) if t.examples]
    assert tests, f"{module.__name__} has no doctests"
    return tests


def _run(test, runner):
    runner.run(test, clear_globs=False)
    return runner


@pytest.mark.parametrize("module", [bpe, pretokenize, memory_engines, streaming, cuts, count_table, sources, estimate],
                         ids=lambda m: m.__name__)
def test_standalone_examples(module):
    runner = doctest.DocTestRunner(optionflags=FLAGS)
    for test in _tests(module):
        _run(test, runner)
    failed, attempted = runner.summarize(verbose=False)
    assert failed == 0 and attempted > 0


def test_tokenizer_examples_continue_the_class_example():
    tests = _tests(tokenizer)
    (first,) = [t for t in tests if t.name == "bpe_stream.encode.tokenizer.Tokenizer"]
    runner = _run(first, doctest.DocTestRunner(optionflags=FLAGS))
    assert runner.failures == 0
    shared = {"tok": first.globs["tok"]}
    for test in tests:
        if test is not first:
            test.globs.update(shared)
            _run(test, runner)
    assert runner.failures == 0, f"{runner.failures} of {runner.tries} tokenizer examples failed (see the output above)"
    documented = {t.name.rsplit(".", 1)[-1] for t in tests}
    public = {"encode", "encode_bytes", "encode_iterable", "encode_stream", "decode", "decode_bytes", "load",
              "from_files", "vocab_size", "special_tokens", "token_bytes"}
    assert public <= documented, f"public methods without an example: {sorted(public - documented)}"


def test_every_bpe_function_has_an_example():
    functions = {name for name, obj in vars(bpe).items() if callable(obj) and getattr(obj, "__module__", "") == bpe.__name__
                 and not name.startswith("_")}
    documented = {t.name.rsplit(".", 1)[-1] for t in _tests(bpe)}
    assert functions <= documented, f"bpe functions without an example: {sorted(functions - documented)}"
