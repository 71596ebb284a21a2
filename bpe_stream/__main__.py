"""``python -m bpe_stream``: the ``bpe-stream`` command line."""

from .cli.entry import main

if __name__ == "__main__":
    main()
