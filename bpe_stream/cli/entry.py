"""The ``bpe-stream`` command's entry point: the console script, ``bin/bpe-stream`` and
``python -m bpe_stream`` call :func:`main`.

It owns one thing, the start-up: the command line's modules (typer, click and ours, about
150 modules) are imported with the garbage collector off.  Imports make objects in bursts
that start collections, and every one of them walks the modules loaded so far, which are
never garbage: 3-4 ms of a 55 ms start-up.  ``cli.main`` then runs with the collector as
it was.
"""

import gc


def main():
    """Imports ``bpe_stream.cli.commands`` with the collector off, then runs it (``cli.main``)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        from .commands import main as run
    finally:
        if enabled:
            gc.enable()
    run()


if __name__ == "__main__":  # python -m bpe_stream.cli.entry
    main()
