"""Reliability (issue 7): numbers.  Counts above 2**32 (and 2**53) are exact end to end --
in the store, in ``stats``, in the order of the merges on every training path, in the
checkpoints -- and no total or count is ever a float.
"""

from __future__ import annotations

import json

import pytest
import reliability_helpers as H
from conftest import ok
from reliability_helpers import EOT

from bpe_stream import Store, Tokenizer
from bpe_stream.count.counting import make_settings

BIG = {b"ab": 2 ** 53 + 1, b"cd": 2 ** 53, b"ef": 2 ** 32 + 1, b"gh": 7}
# exact order: ab, cd, ef, gh.  As doubles, ab and cd tie (max-bytes then picks cd first); cut
# to 32 bits, ab=1, cd=0, ef=1, gh=7 (gh first).


@pytest.fixture
def big_store(tmp_path):
    """A store holding counts above 2**32 (and one above 2**53), written as ``count`` writes
    them: counts, totals and a file record in one transaction."""
    path = tmp_path / "big-store"
    with Store.open(path, create=True) as st_:
        st_.ensure_settings(make_settings("gpt2", []))

        def txn_fn(txn):
            new, new_bytes = st_.add_counts(txn, BIG)
            st_.bump_totals(txn, {"bytes": 2 ** 40 + 3, "documents": 2 ** 33, "pretokens": sum(BIG.values()),
                                  "specials": 0, "unique": new, "unique_bytes": new_bytes})

        st_.write(txn_fn)
        st_.write(txn_fn)  # twice: sums above 2**54 too
    return path


def _no_floats(raw: bytes):
    return json.loads(raw, parse_float=lambda x: pytest.fail(f"a float {x} in {raw[:300]!r}"))


@pytest.mark.parametrize("path", ["memory", "disk"])
def test_counts_above_2_32_are_exact_end_to_end(cli, tmp_path, big_store, path):
    stats = json.loads(ok(cli("stats", "--store", big_store, "--json")).stdout)
    assert stats["bytes"] == 2 * (2 ** 40 + 3) and stats["documents"] == 2 ** 34
    assert stats["pretokens"] == 2 * sum(BIG.values())
    assert {row["pretoken"]: row["count"] for row in stats["top"]} == {k.decode(): 2 * v for k, v in BIG.items()}
    for key in ("documents", "bytes", "pretokens", "unique_pretokens", "unique_pretokens_bytes", "files",
                "special_tokens_seen"):
        assert type(stats[key]) is int, (key, stats[key])
    out = tmp_path / f"tok-{path}.json"
    res = ok(cli("train", "--store", big_store, "-o", out, "--num-merges", "4", "--path", path,
                 "--checkpoint-every", "1", "--checkpoint-seconds", "0"))
    tok = Tokenizer.load(out)
    assert [tok.vocab[m[2]] for m in tok.merges] == [b"ab", b"cd", b"ef", b"gh"], "merges not in exact 64-bit order"
    assert f"last pair count {2 * 7:,}" in res.stderr, res.stderr
    snap = H.snapshot(big_store)
    assert [m[2] for m in snap["checkpoint"]["merges"]] == [2 * v for v in BIG.values()]
    assert all(type(m[2]) is int for m in snap["checkpoint"]["merges"])
    # --min-count above 2**32: exactly the merges whose 64-bit count reaches it
    res = ok(cli("train", "--store", big_store, "-o", out, "--num-merges", "4", "--path", path,
                 "--min-count", str(2 * (2 ** 32 + 1))))
    assert [Tokenizer.load(out).vocab[m[2]] for m in Tokenizer.load(out).merges] == [b"ab", b"cd", b"ef"]
    info = _no_floats(ok(cli("info", "-t", out, "--json")).stdout)
    assert info["merges"] == 3


def test_counts_above_2_32_in_the_python_trainer_and_both_c_paths(big_store):
    from bpe_stream.train.pipeline import train_from_store
    from bpe_stream.train.trainer import TrainConfig

    results = []
    for engine, path in (("python", "memory"), ("c", "memory"), ("c", "disk")):
        with Store.open(big_store) as st_:
            _, result = train_from_store(st_, TrainConfig(num_merges=4), engine=engine, path=path)
        assert all(type(c) is int for c in result.merge_counts)
        results.append((result.merges, result.merge_counts))
    assert results[0][1] == [2 * v for v in BIG.values()]
    assert results[0] == results[1] == results[2]


def test_count_totals_are_ints_in_the_store_and_in_stats(cli, tmp_path, corpus_files):
    store = tmp_path / "store"
    ok(cli("count", "--store", store, "--special-token", EOT, "--max-memory", "1.5M", "-w", "1", *list(corpus_files)[:2]))
    snap = H.snapshot(store)
    H.check_totals_agree(snap)  # every total and count is an int
    for record in snap["sources"].values():
        assert all(type(v) is int for k, v in record.items() if k != "done"), record
    stats = _no_floats(ok(cli("stats", "--store", store, "--json")).stdout)
    assert stats["pretokens"] == snap["totals"]["pretokens"]

