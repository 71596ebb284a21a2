"""``python -m bpe_stream``: the ``bpe-stream`` command line."""

from .entry import main

if __name__ == "__main__":
    main()
