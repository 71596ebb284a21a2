"""Reading the files a tokenizer is made of, in bounded memory.

Every loader reads through :func:`read_tokenizer_file`: only a regular file (``-t /dev/zero``,
``/dev/urandom`` or a FIFO would be read until memory runs out, or block), and at most
``MAX_TOKENIZER_BYTES`` of it (1 GiB: o200k's rank file is 3.6 MB, the largest HF
``tokenizer.json`` files are tens of MB), counted as it is read, so a file that grows while
it is read is stopped too; JSON documents through :func:`read_json`.  Errors name the
file, never its contents.
"""

from __future__ import annotations

import json
import os
import stat
from typing import Optional

from ..atomic import file_kind
from ..encode.tokenizer import TokenizerError

MAX_TOKENIZER_BYTES = 1 << 30
_READ = 1 << 20


def read_tokenizer_file(path, what: str = "a tokenizer file", limit: Optional[int] = None) -> bytes:
    """The bytes of the regular file ``path`` (``what`` it should be, for the errors), at
    most ``limit`` (``MAX_TOKENIZER_BYTES``) of them."""
    path = os.fspath(path)
    limit = MAX_TOKENIZER_BYTES if limit is None else limit
    try:
        # O_NONBLOCK: opening a FIFO must not wait for a writer (regular files ignore it)
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise TokenizerError(f"{path}: cannot read it ({exc.strerror})") from None
    with os.fdopen(fd, "rb", buffering=0) as f:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise TokenizerError(f"{path} is {file_kind(st.st_mode)}, not {what}; check the -t argument")
        os.set_blocking(fd, True)
        size = st.st_size
        if size > limit:
            raise _too_large(path, what, limit)
        try:
            parts = [f.read(size + 1)]  # the size it has, in one buffer
            total = len(parts[0])
            while parts[-1] and total <= limit:  # a short read, or it grew meanwhile
                parts.append(f.read(min(_READ, limit + 1 - total)))
                total += len(parts[-1])
        except OSError as exc:
            raise TokenizerError(f"{path}: cannot read it ({exc.strerror})") from None
    if total > limit:
        raise _too_large(path, what, limit)
    return parts[0] if total == len(parts[0]) else b"".join(parts)


def _too_large(path: str, what: str, limit: int) -> TokenizerError:
    return TokenizerError(f"{path} is over {limit:,} bytes, too large for {what}; check the -t argument")


def read_json(path, what: str):
    """The JSON document in the file ``path`` (``what`` it should be, for the errors), read
    as :func:`read_tokenizer_file` reads."""
    data = read_tokenizer_file(path, what)
    try:
        return json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise TokenizerError(f"{path}: cannot read {what} ({exc})") from None
