"""Evaluation of a tokenizer on text: what its vocabulary buys.

For each merge-prefix asked for (``--merges 0,16,32``; the whole tokenizer by default)
it streams the files through the encoder and reports bytes, tokens, bytes per token,
the compression ratio ``8 * bytes / (tokens * ceil(log2(vocab_size)))`` (bits of raw
text per bit of fixed-width token ids), tokens per whitespace-separated word, the share
of the vocabulary the text uses, encode throughput and a byte-exact round-trip check
(SHA-256 of the input against SHA-256 of the decoded output, so memory stays flat).
:func:`compare` sets a row against a baseline's (``eval --baseline``: the tokenizer an
extension started from): the tokens saved on the same text.
A tokenizer with a word-end marker is lossy by design -- decoding turns each marker into
one space -- so its rows say ``lossy_by_design`` and a changed round trip is no failure.
"""

from __future__ import annotations

import hashlib
import math
import time
from typing import Dict, List, Optional, Sequence

from ..inputs.reader import CHUNK_BYTES, Source
from .tokenizer import Tokenizer, TokenizerError


def prefix(tok: Tokenizer, merges: int) -> Tokenizer:
    """``tok`` with its first ``merges`` merges only."""
    from ..formats import truncate

    if merges < 0 or merges > len(tok.merges):
        raise TokenizerError(f"--merges {merges}: the tokenizer has {len(tok.merges)} merges; use 0..{len(tok.merges)}")
    made = {new for _, _, new in tok.merges}
    base = sum(1 for tid in tok.vocab if tid not in made)
    distinct = len({new for _, _, new in tok.merges[:merges]})
    return truncate(tok, base + distinct)


class _Tee:
    """A binary reader that hashes what it reads and counts its bytes and words."""

    def __init__(self, stream):
        self.stream = stream
        self.digest = hashlib.sha256()
        self.size = 0
        self.words = 0
        self.in_word = False

    def read(self, n: int) -> bytes:
        data = self.stream.read(n)
        if data:
            self.digest.update(data)
            self.size += len(data)
            words = len(data.split())
            if words and self.in_word and not data[:1].isspace():
                words -= 1  # the word goes on from the previous read
            self.words += words
            self.in_word = not data[-1:].isspace()
        return data


def evaluate_one(tok: Tokenizer, sources: Sequence[Source], chunk_bytes: int = CHUNK_BYTES) -> Dict[str, object]:
    """The figures of ``tok`` on ``sources`` (each a document)."""
    n_bytes = n_tokens = n_words = 0
    used = bytearray(max(tok.vocab) + 1 if tok.vocab else 0)
    round_trip = True
    seconds = 0.0
    for source in sources:
        with source.reading() as stream:
            tee = _Tee(stream)
            encoded = tok.encode_stream(tee, chunk_bytes)

            def timed_batches(encoded=encoded):
                nonlocal seconds, n_tokens
                while True:
                    started = time.perf_counter()
                    ids = next(encoded, None)
                    seconds += time.perf_counter() - started
                    if ids is None:
                        return
                    n_tokens += len(ids)
                    for i in ids:
                        used[i] = 1
                    yield ids

            decoded = hashlib.sha256()
            for data in tok._decode_chunks(timed_batches()):
                decoded.update(data)
        n_bytes += tee.size
        n_words += tee.words
        round_trip = round_trip and tee.digest.digest() == decoded.digest()
    bits = math.ceil(math.log2(tok.vocab_size)) if tok.vocab_size > 1 else 1
    return {
        "vocab_size": tok.vocab_size,
        "merges": len(tok.merges),
        "bytes": n_bytes,
        "tokens": n_tokens,
        "bytes_per_token": n_bytes / n_tokens if n_tokens else None,
        "compression_ratio": 8 * n_bytes / (n_tokens * bits) if n_tokens else None,
        "words": n_words,
        "tokens_per_word": n_tokens / n_words if n_words else None,
        "vocab_used": sum(used),
        "vocab_used_share": sum(used) / tok.vocab_size if tok.vocab_size else 0.0,
        "encode_seconds": seconds,
        "encode_mb_per_s": n_bytes / 1e6 / seconds if seconds > 0 else None,
        "round_trip": round_trip,
        "lossy_by_design": tok.marker_id is not None,
    }


def evaluate(tok: Tokenizer, sources: Sequence[Source], merges: Optional[Sequence[int]] = None) -> List[Dict[str, object]]:
    """One result row per merge-prefix (the whole tokenizer when ``merges`` is None)."""
    targets = [tok] if not merges else [prefix(tok, k) for k in merges]
    return [evaluate_one(t, sources) for t in targets]


def compare(row: Dict[str, object], baseline: Dict[str, object]) -> Dict[str, object]:
    """What ``row`` saves against ``baseline``, two results on the same text."""
    before, after = baseline["tokens"], row["tokens"]
    return {
        "tokens_before": before,
        "tokens_after": after,
        "tokens_saved": before - after,
        "tokens_saved_share": (before - after) / before if before else None,
        "bytes_per_token_before": baseline["bytes_per_token"],
        "bytes_per_token_after": row["bytes_per_token"],
    }
