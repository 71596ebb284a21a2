"""Option values and numbers at their limits (issue 19, item 7): sizes that are not finite,
vocabulary sizes and counts past what 32- and 64-bit fields hold, negative counts, a NaN
time, counts at or above 2**63 in the interchange format or adding up past it in a store,
ids of thousands of digits, and a closed stdout.  Each is one ``Error:`` line (bad usage: a
usage error, exit 2), never a traceback, and nothing is written."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from conftest import REPO, assert_user_error
from small_made import make_small, run_cli

TOP = (1 << 63) - 1  # the largest count the store and the merge loop keep
HEADER = json.dumps({"format": "bpe-stream-counts", "version": 1, "settings": {"pretokenizer": "gpt2"}})


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    return make_small(tmp_path_factory.mktemp("options"))


def assert_usage_error(code, err, fragment):
    assert code == 2, (code, err)
    assert fragment in err and "Traceback" not in err, err


# -- sizes, limits and times ---------------------------------------------------------------
@pytest.mark.parametrize("size", ["nan", "inf", "-inf", "1e400", "NaNM"])
def test_a_size_that_is_not_finite_is_a_usage_error(made, tmp_path, size):
    for args in (("count", "--store", tmp_path / "s", "--max-memory", size, made["text"]),
                 ("train", "--store", made["store"], "--num-merges", "5", "--max-memory", size, "-o", tmp_path / "t.json"),
                 ("import-counts", "--store", tmp_path / "s", "--max-memory", size, made["text"])):
        code, _, err = run_cli(*args)
        assert_usage_error(code, err, "not a size")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("option, value, fragment", [
    ("--vocab-size", str(1 << 63), "32-bit ids"),
    ("--vocab-size", str(1 << 32), "32-bit ids"),
    ("--num-merges", str(1 << 63), "32-bit ids"),
    ("--num-merges", str(10 ** 30), "32-bit ids"),
    ("--min-count", "-1", "--min-count -1 is not a count"),
    ("--min-count", str(1 << 63), "is not a count"),
    ("--min-word-count", "-3", "--min-word-count -3 is not a count"),
    ("--checkpoint-seconds", "nan", "--checkpoint-seconds nan is not a time"),
])
def test_train_option_values_out_of_range_are_one_error(made, tmp_path, option, value, fragment):
    args = ["train", "--store", made["store"], "-o", tmp_path / "t.json", option, value]
    if option not in ("--vocab-size", "--num-merges"):
        args += ["--num-merges", "5"]
    code, _, err = run_cli(*args)
    assert_user_error(err, code)
    assert fragment in err
    assert not (tmp_path / "t.json").exists()


def test_train_limits_that_fit_still_train(made, tmp_path):
    code, _, err = run_cli("train", "--store", made["store"], "-o", tmp_path / "t.json", "--num-merges", "5",
                           "--min-count", "0", "--min-word-count", "0", "--checkpoint-seconds", "inf", "-q")
    assert code == 0, err


# -- counts at the limits of 64 bits ----------------------------------------------------------
def counts_file(path, *lines, header=HEADER):
    path.write_bytes((header + "\n" + "".join(f"{w}\t{n}\n" for w, n in lines)).encode())
    return path


@pytest.mark.parametrize("n", [str(1 << 63), str((1 << 64) - 1), str(1 << 64), "7" * 5000],
                         ids=["2**63", "2**64-1", "2**64", "5000 digits"])
def test_import_of_a_count_of_2_to_the_63_or_more_is_refused(tmp_path, n):
    bad = counts_file(tmp_path / "big.tsv", ("ab", 5), ("cd", n))
    code, _, err = run_cli("import-counts", "--store", tmp_path / "store", bad)
    assert_user_error(err, code)
    assert "line 3" in err and "out of range (1 to 2**63-1)" in err
    assert not (tmp_path / "store").exists()


def test_import_of_counts_adding_up_past_2_to_the_63_is_refused(tmp_path):
    bad = counts_file(tmp_path / "sum.tsv", ("ab", TOP), ("cd", 1))
    code, _, err = run_cli("import-counts", "--store", tmp_path / "store", bad)
    assert_user_error(err, code)
    assert "add up" in err and not (tmp_path / "store").exists()


def test_import_of_a_header_total_past_2_to_the_63_is_refused(tmp_path):
    header = json.dumps({"format": "bpe-stream-counts", "settings": {"pretokenizer": "gpt2"},
                         "totals": {"bytes": 1 << 63}})
    bad = counts_file(tmp_path / "h.tsv", ("ab", 1), header=header)
    code, _, err = run_cli("import-counts", "--store", tmp_path / "store", bad)
    assert_user_error(err, code)
    assert "2**63-1" in err


def test_imports_adding_up_past_2_to_the_63_in_one_store_are_refused_and_change_nothing(tmp_path):
    from reliability_helpers import snapshot

    store = tmp_path / "store"
    first = counts_file(tmp_path / "a.tsv", ("ab", TOP - 10))
    second = counts_file(tmp_path / "b.tsv", ("ab", 11))
    code, _, err = run_cli("import-counts", "--store", store, first)
    assert code == 0, err
    before = snapshot(store)
    code, _, err = run_cli("import-counts", "--store", store, second)
    assert_user_error(err, code)
    assert "past 2**63-1" in err
    assert snapshot(store) == before
    # ... and so are stores that add up past it
    other = tmp_path / "other"
    assert run_cli("import-counts", "--store", other, second)[0] == 0
    code, _, err = run_cli("merge-stores", store, other, "--store", tmp_path / "merged")
    assert_user_error(err, code)
    assert "past 2**63-1" in err


def test_a_count_at_the_limit_round_trips(tmp_path):
    good = counts_file(tmp_path / "top.tsv", ("ab", TOP))
    code, _, err = run_cli("import-counts", "--store", tmp_path / "store", good)
    assert code == 0, err
    code, _, err = run_cli("export-counts", "--store", tmp_path / "store", "-o", tmp_path / "back.tsv", "-q")
    assert code == 0, err
    assert f"ab\t{TOP}\n" in (tmp_path / "back.tsv").read_text()


def test_the_store_refuses_a_count_past_2_to_the_63_whole(tmp_path):
    """The store's own guard (a batch from any source): the transaction is refused whole."""
    from bpe_stream import Store
    from bpe_stream.count.counting import make_settings
    from bpe_stream.store.lmdb_store import StoreError

    with Store.open(str(tmp_path / "s"), create=True) as st:
        st.ensure_settings(make_settings())
        st.add_batch({b"ab": TOP - 1}, {}, {"pretokens": TOP - 1})
        with pytest.raises(StoreError, match="2\\*\\*63-1"):
            st.add_batch({b"ab": 2, b"cd": 1}, {b"file": {"done": True}}, {"pretokens": 3})
        assert st.count_of(b"ab") == TOP - 1 and st.count_of(b"cd") == 0
        with st.reader() as txn:
            assert list(st.iter_sources(txn)) == [] and st.totals(txn)["pretokens"] == TOP - 1


def test_pair_counts_past_2_to_the_63_are_one_error_not_a_wrong_merge(tmp_path):
    """Each pretoken's count fits, but "aaaa" holds the pair (a, a) three times: 3 * 2**62."""
    store = tmp_path / "store"
    code, _, err = run_cli("import-counts", "--store", store, counts_file(tmp_path / "a.tsv", ("aaaa", 1 << 62)))
    assert code == 0, err
    for path in ("memory", "disk"):
        code, _, err = run_cli("train", "--store", store, "--num-merges", "3", "--path", path, "-q",
                               "-o", tmp_path / f"{path}.json")
        assert_user_error(err, code)
        assert "pass 2**63-1" in err


def test_the_python_merge_loop_refuses_the_same(tmp_path):
    from bpe_stream.train.trainer import MergeLog, TrainError

    log = MergeLog([(97, 97, TOP)])
    with pytest.raises(TrainError, match="pass 2\\*\\*63-1"):
        log.extend([(97, 98, TOP + 1)])
    assert len(log) == 1


# -- decode: ids of any length ----------------------------------------------------------------
@pytest.mark.parametrize("text, fragment", [
    (b"1 " + b"7" * 5000 + b"\n", "(5,000 digits)"),
    (b"1 2 " + b"9" * 25, "9" * 25),
    (b"1 +5\n", "'+5' is not a token id"),
    (b"1 1_0\n", "'1_0' is not a token id"),
])
def test_decode_of_ids_that_are_not_ids_is_one_error(made, tmp_path, text, fragment):
    ids = tmp_path / "ids.txt"
    ids.write_bytes(text)
    code, out, err = run_cli("decode", "-t", made["tok"], ids)
    assert_user_error(err, code)
    assert fragment in err and len(err) < 300


# -- a closed stdout ----------------------------------------------------------------------
def run_with_stdout_closed(*args, cwd):
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.run([sys.executable, "-m", "bpe_stream.cli.commands", *map(str, args)], cwd=str(cwd), env=env,
                          stdin=subprocess.DEVNULL, stderr=subprocess.PIPE, preexec_fn=lambda: os.close(1))


@pytest.mark.parametrize("name", ["encode", "decode", "export-counts", "export", "info", "stats", "eval"])
def test_a_closed_stdout_is_one_error_not_a_silent_success(made, tmp_path, name):
    ids = tmp_path / "ids.txt"
    ids.write_bytes(b"1 2 3\n")
    args = {
        "encode": ["encode", "-t", made["tok"], made["text"]],
        "decode": ["decode", "-t", made["tok"], ids],
        "export-counts": ["export-counts", "--store", made["store"], "-o", "-"],
        "export": ["export", "-t", made["tok"], "-f", "hf", "-o", "-"],
        "info": ["info", "-t", made["tok"]],
        "stats": ["stats", "--store", made["store"]],
        "eval": ["eval", "-t", made["tok"], made["text"]],
    }[name]
    res = run_with_stdout_closed(*args, cwd=tmp_path)
    assert_user_error(res.stderr, res.returncode)
    assert b"stdout is closed" in res.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ids.txt"]


def test_a_closed_stdout_does_not_matter_with_an_output_file(made, tmp_path):
    res = run_with_stdout_closed("encode", "-t", made["tok"], "-o", tmp_path / "ids.txt", made["text"], cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert (tmp_path / "ids.txt").stat().st_size > 0
