"""The counting settings a store records when it is created and checks on every later run:
the pretokenizer (name, pattern, cap on pretoken length), the special tokens and the word-end
marker.  Below the store and the counting that both need them."""

from __future__ import annotations

from typing import Iterable, Optional, Union

from .pretokenize import DEFAULT_MAX_TOKEN_BYTES, Pretokenizer, SpecialSplitter, check_end_of_word


def make_settings(pretokenizer: str = "gpt2", special_tokens: Iterable[str] = (), end_of_word: Optional[str] = None,
                  max_token_bytes: Union[int, None, str] = "default") -> dict:
    """The counting settings recorded in a store (and checked on every later run).
    ``max_token_bytes`` (``count --max-token-bytes``; None or 0: no cap; ``"default"``:
    :func:`default_max_token_bytes`, as ``count`` has it) is recorded only when there is a
    cap, so a store made before the setting existed, which has none, keeps its meaning."""
    if max_token_bytes == "default":
        max_token_bytes = default_max_token_bytes(pretokenizer)
    pre = Pretokenizer.from_name(pretokenizer, max_token_bytes)
    specials = list(dict.fromkeys(special_tokens))
    SpecialSplitter(specials)  # validates
    check_end_of_word(end_of_word, specials)
    settings = {"pretokenizer": pre.name, "pattern": pre.pattern, "special_tokens": specials, "end_of_word": end_of_word}
    if pre.max_bytes:
        settings["max_token_bytes"] = pre.max_bytes
    return settings


def default_max_token_bytes(pretokenizer: str) -> Optional[int]:
    """The cap of a new store: ``DEFAULT_MAX_TOKEN_BYTES``, but none for ``none``, whose
    pretokens are whole documents by choice."""
    return None if pretokenizer == "none" else DEFAULT_MAX_TOKEN_BYTES


def pretokenizer_of(settings: dict) -> Pretokenizer:
    """The pretokenizer of a store's counting settings, its cap included."""
    return Pretokenizer.from_name(settings["pretokenizer"], settings.get("max_token_bytes"))


def resolve_settings(given: dict, recorded: Optional[dict] = None) -> dict:
    """The counting settings of a run: the options given (``pretokenizer``, ``special_tokens``,
    ``end_of_word``, ``max_token_bytes``; None where not given), the store's recorded ones for the others (defaults
    in a new store), checked (:func:`make_settings`).  ``max_token_bytes``: a new store gets
    the default cap; one recorded without the setting (older) has none."""
    merged = {k: (recorded.get(k) if v is None and recorded is not None else v) for k, v in given.items()}
    if "max_token_bytes" not in given and recorded is not None:  # a caller that does not name it
        merged["max_token_bytes"] = recorded.get("max_token_bytes")
    cap = merged.get("max_token_bytes")
    return make_settings(
        "gpt2" if merged["pretokenizer"] is None else merged["pretokenizer"],
        merged["special_tokens"] or [], merged["end_of_word"],
        "default" if cap is None and recorded is None else cap,
    )


__all__ = ["DEFAULT_MAX_TOKEN_BYTES", "default_max_token_bytes", "make_settings", "pretokenizer_of", "resolve_settings"]
