"""Builds the optional C merge loop; everything else is in setup.cfg.

If the extension cannot be compiled (no C compiler), bpe-stream installs anyway and
trains with its pure-Python trainer, which gives the same merges, only slower.
"""
from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension("bpe_stream._fastbpe", ["bpe_stream/_fastbpe.c"], optional=True, extra_compile_args=["-O2"]),
        # the native pretokenizer scanner and count table; without them bpe_stream.scan and
        # bpe_stream.count_table fall back to regex and Counter
        Extension(
            "bpe_stream._scan",
            ["bpe_stream/csrc/scan_module.c", "bpe_stream/csrc/scan.c", "bpe_stream/csrc/counttable.c"],
            depends=["bpe_stream/csrc/scan.h", "bpe_stream/csrc/unicode_tables.h", "bpe_stream/csrc/counttable.h"],
            optional=True,
            extra_compile_args=["-O2"],
        ),
    ]
)
