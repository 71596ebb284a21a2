"""Builds the C extension ``bpe_stream._fastbpe`` from ``bpe_stream/csrc``; everything else is in setup.cfg.

If the extension cannot be compiled (no C compiler), bpe-stream installs anyway and runs
its pure-Python code, which gives the same results, only slower -- unless the environment
sets ``BPE_STREAM_REQUIRE_C=1`` (CI does), which makes a failed build an error.
"""
import os
from glob import glob

from setuptools import Extension, setup

CSRC = "bpe_stream/csrc"

setup(
    ext_modules=[
        Extension(
            "bpe_stream._fastbpe",
            sorted(glob(f"{CSRC}/*.c")),
            # (lmdb/: the vendored LMDB, compiled as one unit by lmdb_build.c; xxhash/: xxHash, by filedigest.c)
            depends=sorted(glob(f"{CSRC}/*.h") + glob(f"{CSRC}/lmdb/*") + glob(f"{CSRC}/xxhash/*")),
            include_dirs=[CSRC],
            optional=os.environ.get("BPE_STREAM_REQUIRE_C") != "1",
            extra_compile_args=["-O2"],
        ),
    ]
)
