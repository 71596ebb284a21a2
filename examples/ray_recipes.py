"""Ray Data recipes for bpe-stream: count a corpus into a store, and encode files into id shards.

Only the public names of ``bpe_stream`` are used (docs/scaling.md explains each step).
``tests/test_engine_ray.py`` runs these functions on a real local Ray and checks that the
store equals one local ``bpe-stream count`` of the same documents, and the shards equal
``bpe-stream encode``.  From the command line (``ray start --head`` first for a cluster, or
nothing for a Ray of this machine)::

    python examples/ray_recipes.py count --store st --special-token '<|endoftext|>' corpus/*.txt data.parquet
    python examples/ray_recipes.py encode -t tok.json --out shards/ corpus/*.txt

Counting: the documents become a Ray dataset (rows of Parquet/JSON Lines files, one document
each; plain files as the byte ranges ``count`` would cut them into), ``map_batches`` counts
each batch with ``count_text`` / ``count_file_range`` into rows ``(kind, word, count)`` --
kind 0 a pretoken, kind 1-4 one of the totals -- a ``groupby`` adds them up across the
cluster, and the driver streams the sums into a counts file (``write_counts``) that
``import_counts`` adds to the store in bounded memory.
"""

from __future__ import annotations

import argparse
import os

import bpe_stream as bs

TEXT_FORMATS = {".parquet": "read_parquet", ".jsonl": "read_json", ".json": "read_json"}


# -- counting ---------------------------------------------------------------------------------
def counts_table(counts):
    """A batch's ``Counts`` as an Arrow table of ``(kind, word, count)`` rows: kind 0 for each
    pretoken, kind ``i + 1`` for the total ``bs.TOTAL_KEYS[i]``."""
    import pyarrow as pa

    kinds = [0] * len(counts) + list(range(1, len(bs.TOTAL_KEYS) + 1))
    words = list(counts) + [b""] * len(bs.TOTAL_KEYS)
    values = list(counts.values()) + [counts.totals[k] for k in bs.TOTAL_KEYS]
    return pa.table({"kind": pa.array(kinds, pa.int8()), "word": pa.array(words, pa.binary()),
                     "count": pa.array(values, pa.int64())})


def count_texts(batch, settings: dict, column: str = "text"):
    """``map_batches`` function: each row's ``column`` one document (``str`` or ``bytes``)."""
    counts = bs.Counts()
    for doc in batch.column(column).to_pylist():
        if doc is not None:
            bs.add_counts(counts, bs.count_text(doc, settings) if isinstance(doc, str) else bs.count_bytes(doc, settings))
    return counts_table(counts)


def count_ranges(batch, settings: dict):
    """``map_batches`` function: each row a ``FileRange`` of a file every worker can read."""
    counts = bs.Counts()
    for row in batch.to_pylist():
        bs.add_counts(counts, bs.count_file_range(bs.FileRange(**row), settings))
    return counts_table(counts)


def file_ranges_dataset(paths, settings: dict, range_bytes: int = 8 << 20):
    """Plain text files (each one document, as ``count`` has them) as a dataset of their
    byte ranges, planned here: only a window around each cut is read."""
    import ray.data

    rows = [r._asdict() for p in paths for r in bs.file_ranges(os.path.abspath(p), settings, range_bytes)]
    return ray.data.from_items(rows)


def count_dataset(paths, settings: dict, column: str = "text", range_bytes: int = 8 << 20):
    """The ``(kind, word, count)`` rows of every document of ``paths``: Parquet and JSON Lines
    read by Ray Data (each row's ``column`` a document), other files by byte ranges."""
    import ray.data

    parts = []
    plain = [p for p in paths if os.path.splitext(p)[1] not in TEXT_FORMATS]
    if plain:
        parts.append(file_ranges_dataset(plain, settings, range_bytes)
                     .map_batches(count_ranges, fn_kwargs={"settings": settings}, batch_format="pyarrow",
                                  batch_size=1))
    for reader in sorted(set(TEXT_FORMATS.values())):
        mine = [os.path.abspath(p) for p in paths if TEXT_FORMATS.get(os.path.splitext(p)[1]) == reader]
        if mine:
            ds = getattr(ray.data, reader)(mine).select_columns([column])
            parts.append(ds.map_batches(count_texts, fn_kwargs={"settings": settings, "column": column},
                                        batch_format="pyarrow"))
    return parts[0].union(*parts[1:]) if len(parts) > 1 else parts[0]


def write_counts_file(rows_dataset, settings: dict, output: str, num_partitions: int = 8):
    """Adds up the ``(kind, word, count)`` rows across the cluster and streams the sums to the
    counts file ``output`` (the driver holds one block at a time); returns ``(lines, sum)``."""
    summed = rows_dataset.groupby(["kind", "word"], num_partitions=num_partitions).sum("count").materialize()
    totals = {bs.TOTAL_KEYS[r["kind"] - 1]: r["sum(count)"]
              for r in summed.filter(lambda r: r["kind"] > 0).take_all()}
    pairs = ((r["word"], r["sum(count)"]) for r in summed.filter(lambda r: r["kind"] == 0).iter_rows())
    return bs.write_counts(output, settings, pairs, totals)


def count_into_store(paths, store: str, settings: dict, column: str = "text", work_dir: str = ".",
                     range_bytes: int = 8 << 20) -> dict:
    """The whole recipe: ``paths`` counted on Ray, added into the store ``store``."""
    output = os.path.join(work_dir, "ray-counts.tsv.gz")
    write_counts_file(count_dataset(paths, settings, column, range_bytes), settings, output)
    return bs.import_counts(store, [output])


# -- encoding ---------------------------------------------------------------------------------
SUFFIX = {"uint16": ".u16", "uint32": ".u32"}


def encode_files_batch(batch, tokenizer: str, out_dir: str, dtype: str):
    """``map_batches`` function: each file (one document, as ``encode`` has it) into the shard
    ``out_dir/shard-INDEX.u16`` (or ``.u32``): the bytes ``bpe-stream encode --format u16 FILE``
    writes.  Written to a temporary name and renamed, so a retried task leaves one whole shard."""
    import pyarrow as pa

    rows = batch.to_pylist()
    docs = []
    for row in rows:
        with open(row["path"], "rb") as f:
            docs.append(f.read())
    arrays = bs.encode_batch(tokenizer, docs, dtype=dtype)  # any format -t reads
    names = []
    for row, ids in zip(rows, arrays):
        name = os.path.join(out_dir, f"shard-{row['index']:05d}{SUFFIX[str(ids.dtype)]}")
        tmp = f"{name}.tmp-{os.getpid()}"
        ids.astype(ids.dtype.newbyteorder("<")).tofile(tmp)
        os.replace(tmp, name)
        names.append(name)
    return pa.table({"index": [r["index"] for r in rows], "shard": names, "ids": [len(a) for a in arrays]})


def encode_files(paths, tokenizer: str, out_dir: str, dtype: str = "uint16", files_per_task: int = 16):
    """Encodes each file of ``paths`` into its shard in ``out_dir`` (a directory every worker
    can write) on Ray; returns ``[(index, shard path, number of ids)]`` in file order."""
    import ray.data

    os.makedirs(out_dir, exist_ok=True)
    items = [{"index": i, "path": os.path.abspath(p)} for i, p in enumerate(paths)]
    done = (ray.data.from_items(items)
            .map_batches(encode_files_batch, batch_format="pyarrow", batch_size=files_per_task,
                         fn_kwargs={"tokenizer": os.path.abspath(tokenizer), "out_dir": os.path.abspath(out_dir),
                                    "dtype": dtype})
            .take_all())
    return sorted((r["index"], r["shard"], r["ids"]) for r in done)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    count = sub.add_parser("count", help="count files into a store on Ray")
    count.add_argument("paths", nargs="+")
    count.add_argument("--store", required=True)
    count.add_argument("--pretokenizer", default="gpt2")
    count.add_argument("--special-token", action="append", default=[])
    count.add_argument("--column", default="text")
    encode = sub.add_parser("encode", help="encode files into id shards on Ray")
    encode.add_argument("paths", nargs="+")
    encode.add_argument("-t", "--tokenizer", required=True)
    encode.add_argument("--out", required=True)
    encode.add_argument("--dtype", default="uint16", choices=sorted(SUFFIX))
    parser.add_argument("--address", default=None, help="a running Ray cluster (head:6379); none starts one here")
    args = parser.parse_args(argv)

    import ray

    ray.init(address=args.address)
    if args.command == "count":
        settings = bs.count_settings(args.pretokenizer, args.special_token)
        print(count_into_store(args.paths, args.store, settings, args.column, work_dir=os.path.dirname(
            os.path.abspath(args.store))))
    else:
        for index, shard, n in encode_files(args.paths, args.tokenizer, args.out, args.dtype):
            print(f"{shard}\t{n} ids\t{args.paths[index]}")


if __name__ == "__main__":
    main()
