"""Encoding documents on several processes with exactly the ids of one process.

The parent reads each document, decodes it and cuts it where the pretokens of the parts
equal the pretokens of the whole (``StreamSplitter(raw=True)``: special tokens and safe
cuts); workers pretokenize and encode the pieces; the ids come back in order.  With one
worker everything runs in this process.
"""

from __future__ import annotations

from array import array
from typing import BinaryIO, Iterator, List, Optional

from .pretokenize import StreamSplitter
from .reader import CHUNK_BYTES, decode_chunks
from .runner import LocalRunner
from .tokenizer import Tokenizer

PIECE_CHARS = 1 << 22  # text sent to a worker at a time

_TOKENIZER: Optional[Tokenizer] = None  # the workers' copy, inherited through fork


def _encode_items(items) -> array:
    return array("I", _TOKENIZER.encode_raw_items(items))  # pickles as one buffer


class ParallelEncoder:
    """``encode_stream(stream)`` like ``Tokenizer.encode_stream``, on ``workers`` processes."""

    def __init__(self, tok: Tokenizer, workers: int):
        global _TOKENIZER
        self.tok = tok
        self.workers = workers
        _TOKENIZER = tok
        self.runner = LocalRunner(workers) if workers > 1 else None

    def close(self) -> None:
        if self.runner is not None:
            self.runner.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def encode_stream(self, stream: BinaryIO, chunk_bytes: int = CHUNK_BYTES, strict: bool = False) -> Iterator[List[int]]:
        tok = self.tok
        if self.runner is None:
            yield from tok.encode_stream(stream, chunk_bytes, strict)
            return
        if tok.doc_start_id is not None:
            yield [tok.doc_start_id]
        splitter = StreamSplitter(tok.pretokenizer, tok.splitter, raw=True)
        items: list = []
        size = 0
        for text, _, _, final in decode_chunks(stream, chunk_bytes, strict):
            for item in splitter.feed(text, final=final):
                items.append(item)
                size += len(item[1])
            if size >= PIECE_CHARS:
                for _, ids in self.runner.submit(_encode_items, (items,), None):
                    yield ids.tolist()
                items, size = [], 0
        if items:
            for _, ids in self.runner.submit(_encode_items, (items,), None):
                yield ids.tolist()
        for _, ids in self.runner.drain():
            yield ids.tolist()
        if tok.doc_end_id is not None:
            yield [tok.doc_end_id]
