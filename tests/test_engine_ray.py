"""Counting and encoding on a real local Ray (issue 37): ``count --engine ray`` and the Ray Data
recipes of ``examples/ray_recipes.py`` give the store one local ``count`` of the same documents
gives (compared as ``export-counts`` output, and with the file records for ``count``), also
when a worker is killed in the middle of a task (Ray retries it; nothing is counted twice);
the encode recipe's shards are the bytes ``bpe-stream encode`` writes.

Needs the ``ray`` extra (``pip install -e '.[ray]'``; skipped without it).  One local Ray of
2 CPUs serves the whole module (starting one takes several seconds).
"""

from __future__ import annotations

import sys

import pytest
from conftest import REPO, assert_user_error
from engine_helpers import EOT, exported, kill_in_task, local_count, record_texts, write_records
from test_scale import make_corpus, snapshot

import bpe_stream as bs

NO_RAY = "the ray extra is not installed (pip install -e '.[ray]')"


def ok(res):
    assert res.exit_code == 0, res
    return res


@pytest.fixture(scope="module")
def ray_session():
    ray = pytest.importorskip("ray", reason=NO_RAY)
    pytest.importorskip("ray.data", reason=NO_RAY)
    import engine_helpers

    sys.path.insert(0, str(REPO / "examples"))
    import ray_recipes

    for module in (engine_helpers, ray_recipes):  # the workers cannot import the tests' modules
        ray.cloudpickle.register_pickle_by_value(module)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    ray.data.DataContext.get_current().enable_progress_bars = False
    try:
        yield ray_recipes
    finally:
        ray.shutdown()
        sys.path.remove(str(REPO / "examples"))


def test_ray_missing_is_one_clear_error(cli, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # as if the extra were not installed
    (tmp_path / "f.txt").write_text("hello")
    res = cli("count", "--store", tmp_path / "st", "--engine", "ray", tmp_path / "f.txt")
    assert_user_error(res.stderr, res.exit_code)
    assert "pip install 'bpe-stream[ray]'" in res.stderr


def test_address_goes_with_ray(cli, tmp_path):
    (tmp_path / "f.txt").write_text("hello")
    res = cli("count", "--store", tmp_path / "st", "--address", "head:6379", tmp_path / "f.txt")
    assert_user_error(res.stderr, res.exit_code)
    assert res.stderr == "Error: --address goes with --engine ray\n"


def test_count_engine_ray_equals_local_count(cli, tmp_path, ray_session):
    files = make_corpus(tmp_path / "corpus", 4, 60_000, seed=21)
    args = ("--special-token", EOT, "--workers", "2", "--max-memory", "2M")
    ok(cli("count", "--store", tmp_path / "local", *args, *files))
    ok(cli("count", "--store", tmp_path / "ray", "--engine", "ray", *args, *files))  # the running Ray
    assert snapshot(tmp_path / "ray") == snapshot(tmp_path / "local")


def test_worker_killed_in_a_task_is_retried_and_counted_once(tmp_path, ray_session):
    from bpe_stream.count.counting import count_sources
    from bpe_stream.inputs.reader import Source
    from bpe_stream.parallel.ray_runner import RayRunner
    from bpe_stream.store.lmdb_store import Store

    files = make_corpus(tmp_path / "corpus", 2, 100_000, seed=22)
    settings = bs.count_settings("gpt2", [EOT])
    want = local_count(tmp_path / "local", files, settings)
    runner = RayRunner(2)
    kill_in_task(runner, 3, tmp_path / "killed")
    with Store.open(tmp_path / "ray", create=True) as st:
        count_sources(st, [Source.from_arg(str(p)) for p in files], settings, runner=runner, range_bytes=16_384)
    assert (tmp_path / "killed").exists()  # a worker did die after counting its 3rd task
    assert exported(tmp_path / "ray") == want


def test_ray_data_recipe_makes_the_local_store(tmp_path, ray_session):
    recipes = ray_session
    settings = bs.count_settings("gpt2", [EOT])
    files = make_corpus(tmp_path / "corpus", 3, 30_000, seed=23)
    jsonl, parquet = write_records(tmp_path / "records", record_texts(200, seed=24))
    inputs = [*files, jsonl, parquet]
    want = local_count(tmp_path / "local", inputs, settings)
    summary = recipes.count_into_store([str(p) for p in inputs], str(tmp_path / "ray"), settings,
                                       work_dir=str(tmp_path), range_bytes=8192)
    assert summary["files"] == 1
    assert exported(tmp_path / "ray") == want


def test_ray_data_recipe_with_a_worker_killed_counts_once(tmp_path, ray_session):
    """A worker dies inside the fused read -> count task (the map before the recipe's
    ``map_batches`` runs in the same task); Ray Data retries the task."""
    import functools

    import engine_helpers

    recipes = ray_session
    settings = bs.count_settings("gpt2", [EOT])
    files = make_corpus(tmp_path / "corpus", 3, 30_000, seed=25)
    want = local_count(tmp_path / "local", files, settings)
    ranges = recipes.file_ranges_dataset([str(p) for p in files], settings, 8192)
    assert ranges.count() > 6
    marker = str(tmp_path / "killed")
    doomed = ranges.map(functools.partial(engine_helpers.die_once, marker, lambda row: row))
    rows = doomed.map_batches(recipes.count_ranges, fn_kwargs={"settings": settings}, batch_format="pyarrow",
                              batch_size=1)
    recipes.write_counts_file(rows, settings, str(tmp_path / "c.tsv"))
    bs.import_counts(tmp_path / "ray", [tmp_path / "c.tsv"])
    assert (tmp_path / "killed").exists()
    assert exported(tmp_path / "ray") == want


def test_ray_encode_recipe_shards_equal_encode(cli, tmp_path, ray_session):
    recipes = ray_session
    files = make_corpus(tmp_path / "corpus", 5, 8_000, seed=26)
    ok(cli("count", "--store", tmp_path / "st", "--special-token", EOT, *files))
    ok(cli("train", "--store", tmp_path / "st", "--vocab-size", "600", "-o", tmp_path / "tok.json"))
    for dtype, fmt in (("uint16", "u16"), ("uint32", "u32")):
        shards = recipes.encode_files([str(f) for f in files], str(tmp_path / "tok.json"), str(tmp_path / fmt),
                                      dtype=dtype, files_per_task=2)
        assert [i for i, _, _ in shards] == list(range(len(files)))
        for (_, shard, n), f in zip(shards, files):
            want = ok(cli("encode", "-t", tmp_path / "tok.json", "--format", fmt, f, "-q")).stdout
            assert open(shard, "rb").read() == want and n * int(fmt[1:]) // 8 == len(want)
