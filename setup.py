"""Builds the optional C extensions; everything else is in setup.cfg.

If they cannot be compiled (no C compiler), bpe-stream installs anyway: it trains with its
pure-Python trainer, which gives the same merges, only slower, and opens stores without
checking their structure first (``_storecheck``; see README, "Damaged stores").
"""
from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension("bpe_stream._fastbpe", ["bpe_stream/_fastbpe.c"], optional=True, extra_compile_args=["-O2"]),
        Extension("bpe_stream._storecheck", ["bpe_stream/_storecheck.c"], optional=True, extra_compile_args=["-O2"]),
    ]
)
