"""The ``bpe-stream`` command line: parsing, calling the library, reporting."""
