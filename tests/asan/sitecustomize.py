"""``make asan`` only: makes every Python process of the run import ``bpe_stream._fastbpe``
from the sanitized build named by ``BPE_STREAM_ASAN_EXT`` instead of the in-place one.

``make asan`` puts this directory on PYTHONPATH, so Python imports this file at start-up
in pytest and in every CLI subprocess the tests start (they keep PYTHONPATH); the in-place
extension that ``make test`` uses is never replaced.
"""

import importlib.util
import os
import sys

_PATH = os.environ.get("BPE_STREAM_ASAN_EXT", "")
if not os.path.isfile(_PATH):
    raise ImportError(f"BPE_STREAM_ASAN_EXT={_PATH!r} is not the sanitized extension (run make asan)")


class _SanitizedExtension:
    @staticmethod
    def find_spec(name, path=None, target=None):
        if name != "bpe_stream._fastbpe":
            return None
        return importlib.util.spec_from_file_location(name, _PATH)


sys.meta_path.insert(0, _SanitizedExtension)
