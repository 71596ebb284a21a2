"""The in-memory shape of CS336's ``train_bpe`` (``vocab: dict[int, bytes]``, ``merges:
list[tuple[bytes, bytes]]``) to a ``Tokenizer`` and back, and the special tokens of a
vocabulary that comes without them marked (shared with GPT-2's ``vocab.json``).
"""

from __future__ import annotations

from typing import Callable, Dict, List, Optional, Sequence, Tuple

from ..encode.tokenizer import Tokenizer, TokenizerError
from .common import reject_doc_boundaries, reject_end_of_word


def special_symbols(vocab: Dict[int, bytes], merges: Sequence[Tuple[int, int, int]],
                    special_tokens: Optional[Sequence[str]], id_of: Callable[[str], Optional[int]],
                    text_of: Callable[[int], str]) -> List[Tuple[int, str, str]]:
    """The ``(id, "special", text)`` symbols of ``special_tokens``, each at its id in the
    vocabulary (``id_of``) or a new one after the largest; ``None``: every multi-byte token
    that no merge makes, in id order (``text_of`` its text).  Writes their texts into
    ``vocab`` (a special token's bytes are its text)."""
    if special_tokens is None:
        made = {new for _, _, new in merges}
        special_tokens = [text_of(tid) for tid in sorted(vocab) if len(vocab[tid]) > 1 and tid not in made]
    symbols = []
    next_id = max(vocab, default=-1) + 1
    for special in special_tokens:
        tid = id_of(special)
        if tid is None:
            tid = next_id
            next_id += 1
        vocab[tid] = special.encode("utf-8")
        symbols.append((tid, "special", special))
    return symbols


def from_vocab_merges(vocab: Dict[int, bytes], merges: Sequence[Tuple[bytes, bytes]],
                      special_tokens: Optional[Sequence[str]] = None, pretokenizer: str = "gpt2") -> Tokenizer:
    """A ``Tokenizer`` from ids -> bytes and the merges as byte pairs in rank order; merge
    ``left + right`` makes the (lowest) id of those bytes.  Special tokens as in
    :func:`special_symbols` (by their UTF-8 bytes)."""
    vocab = {int(tid): bytes(data) for tid, data in vocab.items()}
    id_of: Dict[bytes, int] = {}
    for tid in sorted(vocab):
        id_of.setdefault(vocab[tid], tid)
    triples = []
    for rank, (left, right) in enumerate(merges):
        ids = [id_of.get(bytes(left)), id_of.get(bytes(right)), id_of.get(bytes(left) + bytes(right))]
        if None in ids:
            missing = next(t for t, i in zip((left, right, bytes(left) + bytes(right)), ids) if i is None)
            raise TokenizerError(f"merge {rank} ({bytes(left)!r}, {bytes(right)!r}): {missing!r} is not in the vocabulary")
        triples.append(tuple(ids))

    def text_of(tid: int) -> str:
        try:
            return vocab[tid].decode("utf-8")
        except UnicodeDecodeError:
            raise TokenizerError(
                f"token {tid} ({vocab[tid][:40]!r}) is made by no merge and is not UTF-8 text, so it cannot be a "
                "special token; give special_tokens"
            ) from None

    symbols = special_symbols(vocab, triples, special_tokens, lambda s: id_of.get(s.encode("utf-8")), text_of)
    return Tokenizer(vocab, triples, symbols, pretokenizer=pretokenizer)


def to_vocab_merges(tok: Tokenizer) -> Tuple[Dict[int, bytes], List[Tuple[bytes, bytes]]]:
    """``tok`` as ``(vocab, merges)``: what :func:`from_vocab_merges` takes back (with
    ``tok.special_tokens``); a word-end marker or document boundaries have no place in it."""
    reject_end_of_word(tok, "the (vocab, merges) shape")
    reject_doc_boundaries(tok, "the (vocab, merges) shape")
    return dict(tok.vocab), [(tok.vocab[left], tok.vocab[right]) for left, right, _ in tok.merges]
