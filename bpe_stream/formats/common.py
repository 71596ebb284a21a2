"""What the exports to other tools' formats share: token texts and the refusals.

``hf`` and ``gpt2`` write a token -> id table keyed by GPT-2's printable form of the
bytes (:func:`printable_keys`); ``hf``, ``gpt2`` and ``tiktoken_file`` refuse what their
format cannot hold -- a word-end marker, and (but for ``hf``) document boundaries -- with
the same words.  Reading the files is ``files``' part, the pattern dialects ``patterns``'.
"""

from __future__ import annotations

from typing import Dict

from ..encode.tokenizer import Tokenizer, TokenizerError
from .printable import to_printable


def printable_keys(tok: Tokenizer, what: str) -> Dict[int, str]:
    """id -> the token's text in GPT-2's printable form (symbols as their own text),
    checking that no two ids share one text (``what`` names the table for the error)."""
    symbol_text = {sid: text for sid, _, text in tok.symbols}
    keys: Dict[int, str] = {}
    seen: Dict[str, int] = {}
    for tid in sorted(tok.vocab):
        key = symbol_text[tid] if tid in symbol_text else to_printable(tok.vocab[tid])
        other = seen.get(key)
        if other is not None:
            raise TokenizerError(
                f"ids {other} and {tid} are both {key!r} in {what}'s token -> id table, which holds each text once; "
                "this tokenizer cannot be exported to that format"
            )
        seen[key] = tid
        keys[tid] = key
    return keys


def reject_end_of_word(tok: Tokenizer, what: str) -> None:
    """A ``TokenizerError`` when ``tok`` has a word-end marker, which format ``what`` cannot hold."""
    if tok.marker_id is not None:
        raise TokenizerError(
            f"{what} has no word-end marker like this tokenizer's; export it with --format native "
            "or train without --end-of-word"
        )


def reject_doc_boundaries(tok: Tokenizer, what: str) -> None:
    """A ``TokenizerError`` when ``tok`` adds document boundaries, which format ``what`` cannot."""
    if tok.doc_start_id is not None or tok.doc_end_id is not None:
        raise TokenizerError(f"{what} cannot add document boundaries; export with --format hf (or native)")
