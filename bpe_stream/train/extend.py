"""Extending a tokenizer the store did not train (``train --from`` GPT-2, an HF file, ranks).

Owns what makes such a run differ from a run from scratch: whether the tokenizer can be
extended on a store at all (:func:`incompatibility`: the same pretokenizer, special tokens
and word-end marker, else one sentence naming the difference and the ``count`` flags of a
store that would fit), and :class:`Extension`, the run's base -- the engine's tokens (the
whole existing vocabulary, id -> bytes), the store's words as the tokenizer encodes them,
the next free id, the merge limit, and the extended tokenizer made from the new merges.

The semantics: each pretoken of the store starts as the tokenizer encodes it (its own
ranks); training continues from there with the run's tie-break; merge ``r`` makes id
``max_id + 1 + r``; every existing token, id, merge and special keeps its place.  A new
merge whose bytes equal an existing token's still makes a new id (the engines number new
tokens in order; textbook BPE does the same); the exports keyed by bytes (HF, tiktoken)
refuse such a tokenizer, as they refuse any two tokens of one text.
"""

from __future__ import annotations

import shlex
from array import array
from dataclasses import dataclass
from typing import Dict, Iterable, Iterator, List, Optional, Sequence, Tuple

from ..formats.native import rules_digest
from .engine import Merge, TrainError, WordArrays
from ..inputs.reader import from_bytes
from ..encode.tokenizer import Tokenizer
from .trainer import TrainConfig, TrainResult

# The engine's bytes for an id the vocabulary does not use: no word holds it, so it is never
# part of a pair and never compared by a tie-break.
UNUSED_ID = b""


def _marker_text(tok: Tokenizer) -> Optional[str]:
    return next((text for _, role, text in tok.symbols if role == "end_of_word"), None)


def count_flags(tok: Tokenizer) -> str:
    """The ``bpe-stream count`` options of a store that ``tok`` can be extended on."""
    flags = [f"--pretokenizer {shlex.quote(tok.pretokenizer.name)}"]
    if tok.max_token_bytes is not None:
        flags.append(f"--max-token-bytes {tok.max_token_bytes}")
    flags += [f"--special-token {shlex.quote(s)}" for s in tok.special_tokens]
    marker = _marker_text(tok)
    if marker is not None:
        flags.append(f"--end-of-word {shlex.quote(marker)}")
    return " ".join(flags)


def _cap_said(cap: Optional[int]) -> str:
    return "no cap (--max-token-bytes 0)" if not cap else f"--max-token-bytes {cap}"


def _listed(texts: Sequence[str]) -> str:
    return ", ".join(repr(t) for t in texts)


def _marker_said(marker: Optional[str]) -> str:
    return "no word-end marker" if marker is None else f"the word-end marker {marker!r}"


def incompatibility(tok: Tokenizer, settings: dict, config: TrainConfig) -> Optional[str]:
    """Why ``tok`` cannot be extended on a store counted with ``settings`` (``config``: the
    run's effective settings, the store's special tokens first), or None."""
    fix = f"; a store counted with {count_flags(tok)} fits it"
    ours, theirs = settings["pretokenizer"], tok.pretokenizer.name
    if ours != theirs:
        return f"the tokenizer pretokenizes with {theirs!r}, the store was counted with {ours!r}{fix}"
    ours, theirs = settings.get("max_token_bytes"), tok.max_token_bytes
    # A tokenizer without a cap (GPT-2's files, HF, tiktoken: none can say one) takes the
    # store's: they differ only on pretokens longer than it.  A cap of its own must match.
    if theirs is not None and ours != theirs:
        return (f"the tokenizer cuts pretokens at {_cap_said(theirs)}, the store was counted with "
                f"{_cap_said(ours)}{fix}")
    has, wanted = tok.special_tokens, list(config.special_tokens)
    missing = [s for s in has if s not in wanted]
    if missing:
        return f"the tokenizer has the special tokens {_listed(missing)}, which the store was not counted with{fix}"
    extra = [s for s in wanted if s not in has]
    if extra:
        return (f"the store and --special-token have {_listed(extra)}, which the tokenizer has no token for "
                f"(an extended tokenizer keeps its special tokens){fix}")
    ours, theirs = settings.get("end_of_word"), _marker_text(tok)
    if ours != theirs:
        return f"the tokenizer has {_marker_said(theirs)}, the store was counted with {_marker_said(ours)}{fix}"
    if config.doc_boundaries and tok.doc_start_id is None:
        return "the tokenizer has no document boundaries; drop --doc-boundaries (an extended tokenizer keeps its symbols)"
    return None


@dataclass(frozen=True)
class Extension:
    """The base of a run that extends ``base``: see the module's docstring."""

    base: Tokenizer
    tokens: Tuple[bytes, ...]  # the engine's base tokens: ids 0..max_id (UNUSED_ID where none)
    first_id: int  # the id of the first new merge: the largest existing id + 1
    digest: str  # the base's rules (formats.native.rules_digest): part of a checkpoint's fingerprint
    max_token_bytes: Optional[int] = None  # the store's cap, which the extended tokenizer keeps

    @classmethod
    def of(cls, tok: Tokenizer, settings: dict, config: TrainConfig) -> "Extension":
        """The extension of ``tok`` on a store counted with ``settings``, or a ``TrainError``."""
        why = incompatibility(tok, settings, config)
        if why is not None:
            raise TrainError(f"--from: {why}")
        first = max(tok.vocab) + 1
        tokens = tuple(tok.vocab.get(i, UNUSED_ID) for i in range(first))
        return cls(base=tok, tokens=tokens, first_id=first, digest=rules_digest(tok),
                   max_token_bytes=settings.get("max_token_bytes"))

    def limit(self, config: TrainConfig) -> int:
        """The merges at most: up to ``--vocab-size`` tokens in all, and ``--num-merges``."""
        return config.max_merges(extending=len(self.base.vocab))

    def describe(self) -> str:
        return (f"extending a tokenizer of {len(self.base.vocab):,} tokens and {len(self.base.merges):,} merges: "
                f"each pretoken starts as it encodes, new merges take ids from {self.first_id:,}")

    def words(self, counts: Iterable[Tuple[bytes, int]]) -> Iterator[Tuple[array, int]]:
        """``(ids, count)`` of the store's ``(pretoken, count)`` pairs: each pretoken as the
        base tokenizer encodes it (its word-end marker included)."""
        encode = self.base._pretoken_ids  # one pretoken at a time: the ids of each word on their own
        for pretoken, n in counts:
            ids = array("I")
            ids.frombytes(encode([from_bytes(pretoken)]))
            yield ids, n

    def word_arrays(self, counts: Iterable[Tuple[bytes, int]]) -> WordArrays:
        """:meth:`words` as the in-memory engines' arrays (words of one token left out)."""
        arrays = WordArrays(wide=True)
        arrays.add(self.words(counts))
        return arrays

    def result(self, done: Iterable[Merge], tie_break: str) -> Tuple[Tokenizer, TrainResult]:
        """The extended tokenizer and the run's result (its new merges only) from the
        ``(left, right, count)`` merges in order."""
        base = self.base
        vocab: Dict[int, bytes] = dict(base.vocab)
        merges = list(base.merges)
        new: List[Tuple[int, int]] = []
        counts: List[int] = []
        for left, right, count in done:
            tid = self.first_id + len(new)
            vocab[tid] = vocab[left] + vocab[right]
            merges.append((left, right, tid))
            new.append((left, right))
            counts.append(count)
        tok = Tokenizer(vocab, merges, base.symbols, pretokenizer=base.pretokenizer.name, tie_break=tie_break,
                        max_token_bytes=self.max_token_bytes)
        symbols = [(role, text) for _, role, text in base.symbols]
        return tok, TrainResult(new, counts, vocab, symbols)
