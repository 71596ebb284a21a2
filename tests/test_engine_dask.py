"""Counting on a real Dask ``LocalCluster`` (issue 37, beside the Dask tests of
``test_scale.py``): the store equals one local ``count`` of the same documents for any number
of workers, and after a worker is SIGKILLed in the middle of a task (right after computing its
counts, before handing them back: ``engine_helpers.die_once``), which the scheduler retries on
another worker -- nothing is counted twice.  Needs the ``dask`` extra; skipped without it."""

from __future__ import annotations

import pytest
from engine_helpers import EOT, exported, kill_in_task, local_count
from test_scale import make_corpus, snapshot

import bpe_stream as bs

NO_DASK = "the dask extra is not installed (pip install -e '.[dask]')"


def ok(res):
    assert res.exit_code == 0, res
    return res


@pytest.mark.parametrize("workers", [1, 3])
def test_count_engine_dask_equals_local_for_any_number_of_workers(cli, tmp_path, workers):
    pytest.importorskip("distributed", reason=NO_DASK)
    files = make_corpus(tmp_path / "corpus", 3, 50_000, seed=31)
    args = ("--special-token", EOT, "--max-memory", "2M")
    ok(cli("count", "--store", tmp_path / "local", *args, "--workers", "2", *files))
    ok(cli("count", "--store", tmp_path / "dask", "--engine", "dask", "--workers", str(workers), *args, *files))
    assert snapshot(tmp_path / "dask") == snapshot(tmp_path / "local")


def test_worker_killed_in_a_task_is_retried_and_counted_once(tmp_path):
    distributed = pytest.importorskip("distributed", reason=NO_DASK)
    import logging

    import cloudpickle
    import engine_helpers

    from bpe_stream.count.counting import count_sources
    from bpe_stream.inputs.reader import Source
    from bpe_stream.parallel.dask_runner import DaskRunner
    from bpe_stream.store.lmdb_store import Store

    cloudpickle.register_pickle_by_value(engine_helpers)  # the workers cannot import the tests' modules
    files = make_corpus(tmp_path / "corpus", 2, 100_000, seed=32)
    settings = bs.count_settings("gpt2", [EOT])
    want = local_count(tmp_path / "local", files, settings)
    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                       dashboard_address=None, silence_logs=logging.CRITICAL)
    try:
        runner = DaskRunner(2, cluster.scheduler_address)
        kill_in_task(runner, 3, tmp_path / "killed")
        with Store.open(tmp_path / "dask", create=True) as st:
            count_sources(st, [Source.from_arg(str(p)) for p in files], settings, runner=runner, range_bytes=16_384)
    finally:
        cluster.close()
    assert (tmp_path / "killed").exists()  # a worker did die after counting its 3rd task
    assert exported(tmp_path / "dask") == want
