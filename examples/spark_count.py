"""A PySpark recipe for bpe-stream: count documents on Spark into a counts file, then a store.

Only the public names of ``bpe_stream`` are used (docs/scaling.md explains each step);
``tests/test_engine_spark.py`` runs it on a real local Spark and checks that the store equals
one local ``bpe-stream count`` of the same documents.  bpe-stream must be installed on the
executors (PySpark is not one of its dependencies)::

    spark-submit examples/spark_count.py --store st --special-token '<|endoftext|>' hdfs:///corpus/*.txt
    spark-submit examples/spark_count.py --store st --parquet --column text s3a://bucket/data/*.parquet

Each partition's documents are counted into one ``Counts`` (``count_bytes`` / ``count_text``),
whose pairs -- ``((0, pretoken), n)``, and ``((i + 1, b""), total)`` for each of
``TOTAL_KEYS`` -- ``reduceByKey`` adds up across the cluster; the driver streams the sums into
the counts file (``toLocalIterator``: one partition at a time, never all collected), which
``import_counts`` adds to the store in bounded memory.
"""

from __future__ import annotations

import argparse
import operator
import os

import bpe_stream as bs


def count_partition(docs, settings: dict):
    """``mapPartitions`` function: the partition's documents (``str`` or ``bytes``, one
    document each) counted, as ``((kind, word), count)`` pairs."""
    counts = bs.Counts()
    for doc in docs:
        if doc is not None:
            bs.add_counts(counts, bs.count_text(doc, settings) if isinstance(doc, str) else bs.count_bytes(doc, settings))
    for word, n in counts.items():
        yield (0, word), n
    for i, key in enumerate(bs.TOTAL_KEYS):
        yield (i + 1, b""), counts.totals[key]


def write_counts_file(docs_rdd, settings: dict, output: str, partitions=None):
    """Counts the documents of ``docs_rdd`` on the cluster and streams the sums to the counts
    file ``output``; returns ``(lines, sum of counts)``."""
    summed = docs_rdd.mapPartitions(lambda docs: count_partition(docs, settings)) \
        .reduceByKey(operator.add, partitions).persist()
    try:
        totals = dict(summed.filter(lambda kv: kv[0][0] > 0)
                      .map(lambda kv: (bs.TOTAL_KEYS[kv[0][0] - 1], kv[1])).collect())
        pairs = summed.filter(lambda kv: kv[0][0] == 0).map(lambda kv: (bytes(kv[0][1]), kv[1])).toLocalIterator()
        return bs.write_counts(output, settings, pairs, totals)
    finally:
        summed.unpersist()


def file_documents(sc, paths):
    """Whole files, one document each (as ``count`` has a plain file): their bytes, so that
    invalid UTF-8 is kept as ``count`` keeps it.  For files too large to hold in an executor,
    plan ``bs.file_ranges`` on the driver and count ``bs.count_file_range`` of each instead
    (every executor must then see the files at the same path)."""
    return sc.binaryFiles(",".join(paths)).values()


def parquet_documents(spark, paths, column: str = "text"):
    """Each row's ``column`` one document (as ``count --column`` has a Parquet file's rows)."""
    return spark.read.parquet(*paths).select(column).rdd.map(lambda row: row[0])


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("paths", nargs="+")
    parser.add_argument("--store", required=True)
    parser.add_argument("--pretokenizer", default="gpt2")
    parser.add_argument("--special-token", action="append", default=[])
    parser.add_argument("--parquet", action="store_true", help="the paths are Parquet files, a document a row")
    parser.add_argument("--column", default="text")
    args = parser.parse_args(argv)

    from pyspark.sql import SparkSession

    spark = SparkSession.builder.appName("bpe-stream count").getOrCreate()
    settings = bs.count_settings(args.pretokenizer, args.special_token)
    docs = parquet_documents(spark, args.paths, args.column) if args.parquet else file_documents(spark.sparkContext, args.paths)
    output = os.path.join(os.path.dirname(os.path.abspath(args.store)), "spark-counts.tsv.gz")
    print(write_counts_file(docs, settings, output))
    print(bs.import_counts(args.store, [output]))
    spark.stop()


if __name__ == "__main__":
    main()
