"""Builds the optional C merge loop; everything else is in setup.cfg.

If the extension cannot be compiled (no C compiler), bpe-stream installs anyway and
trains with its pure-Python trainer, which gives the same merges, only slower.
"""
from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension("bpe_stream._fastbpe", ["bpe_stream/_fastbpe.c"], optional=True, extra_compile_args=["-O2"]),
    ]
)
