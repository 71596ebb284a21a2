"""The PySpark recipe (``examples/spark_count.py``, issue 37) on a real local Spark: the store
it makes equals one local ``count`` of the same documents (files whole, Parquet rows), also
when a Python worker is SIGKILLed in the middle of a task (``engine_helpers.die_once``; the
master ``local[2,3]`` lets Spark retry a failed task: nothing is counted twice).

Runs where ``pyspark`` and a Java runtime are present, and says why it skipped otherwise;
``make test-spark`` installs both and runs it.
"""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest
from conftest import REPO
from engine_helpers import EOT, exported, local_count, record_texts, write_records
from test_scale import make_corpus

import bpe_stream as bs


def _java_missing():
    java = shutil.which("java")
    if java is None:
        return "no Java runtime (java) on PATH; make test-spark installs one"
    if subprocess.run([java, "-version"], capture_output=True).returncode != 0:
        return f"{java} -version fails"
    return None


@pytest.fixture(scope="module")
def spark():
    pytest.importorskip("pyspark", reason="pyspark is not installed (pip install -e '.[spark]'; make test-spark)")
    why = _java_missing()
    if why:
        pytest.skip(why)
    from pyspark import cloudpickle
    from pyspark.sql import SparkSession

    import engine_helpers

    sys.path.insert(0, str(REPO / "examples"))
    import spark_count

    for module in (engine_helpers, spark_count):  # the Python workers cannot import the tests' modules
        cloudpickle.register_pickle_by_value(module)
    session = (SparkSession.builder.master("local[2,3]").appName("bpe-stream test")
               .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "4")
               .config("spark.executorEnv.PYTHONPATH", ":".join(sys.path))
               .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    try:
        yield session, spark_count
    finally:
        session.stop()
        sys.path.remove(str(REPO / "examples"))


def test_spark_recipe_makes_the_local_store(tmp_path, spark):
    session, recipe = spark
    settings = bs.count_settings("gpt2", [EOT])
    files = make_corpus(tmp_path / "corpus", 4, 30_000, seed=41)
    want = local_count(tmp_path / "local", files, settings)
    docs = recipe.file_documents(session.sparkContext, [str(p) for p in files])
    recipe.write_counts_file(docs, settings, str(tmp_path / "c.tsv.gz"), partitions=3)
    bs.import_counts(tmp_path / "spark", [tmp_path / "c.tsv.gz"])
    assert exported(tmp_path / "spark") == want

    _, parquet = write_records(tmp_path / "records", record_texts(300, seed=42))
    want = local_count(tmp_path / "local-parquet", [parquet], settings)
    recipe.write_counts_file(recipe.parquet_documents(session, [str(parquet)]), settings, str(tmp_path / "p.tsv"))
    bs.import_counts(tmp_path / "spark-parquet", [tmp_path / "p.tsv"])
    assert exported(tmp_path / "spark-parquet") == want


def test_spark_recipe_with_a_worker_killed_counts_once(tmp_path, spark):
    import functools

    import engine_helpers

    session, recipe = spark
    settings = bs.count_settings("gpt2", [EOT])
    files = make_corpus(tmp_path / "corpus", 4, 20_000, seed=43)
    want = local_count(tmp_path / "local", files, settings)
    marker = str(tmp_path / "killed")
    docs = recipe.file_documents(session.sparkContext, [str(p) for p in files]) \
        .map(functools.partial(engine_helpers.die_once, marker, bytes))  # in the task that counts them
    recipe.write_counts_file(docs, settings, str(tmp_path / "c.tsv"))
    bs.import_counts(tmp_path / "spark", [tmp_path / "c.tsv"])
    assert (tmp_path / "killed").exists()
    assert exported(tmp_path / "spark") == want
