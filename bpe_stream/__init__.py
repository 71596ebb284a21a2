"""bpe-stream: byte-level BPE tokenizers trained on corpora larger than RAM.

Library entry points: :class:`Tokenizer` (encode/decode, load/save), :func:`train_bpe`
(CS336 shape), :class:`Store` (the LMDB word-frequency store) and
:func:`train_from_store` (and :func:`train_from_iterator` for texts in memory); and the engine
API of :mod:`bpe_stream.api` (``count_settings``, ``count_text``, ``add_counts``,
``write_counts``, ``encode_batch``, ...) that Ray, Spark and Dask jobs call.  They are imported on first use, so that ``bpe-stream encode``
does not load the store and trainer modules it never calls.
"""

__version__ = "0.1.0"
__all__ = ["Tokenizer", "Store", "TrainConfig", "Trainer", "train_bpe", "train_from_store", "train_from_iterator",
           "__version__"]

# The public engine API (``bpe_stream.api``): what Ray, Spark and Dask jobs call.
API_NAMES = ("TOTAL_KEYS", "Counts", "FileRange", "count_settings", "count_text", "count_bytes", "count_file",
             "file_ranges", "count_file_range", "add_counts", "write_counts", "read_counts", "read_counts_header",
             "import_counts", "encode_batch")
__all__ += list(API_NAMES)

_LAZY = {
    "Tokenizer": "encode.tokenizer",
    "Store": "store.lmdb_store",
    "TrainConfig": "train.trainer",
    "Trainer": "train.trainer",
    "train_bpe": "train.pipeline",
    "train_from_store": "train.pipeline",
    "train_from_iterator": "train.pipeline",
    **dict.fromkeys(API_NAMES, "api"),
}


def __getattr__(name):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from importlib import import_module

    value = getattr(import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_LAZY))
