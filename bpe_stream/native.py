"""The optional C extension: ``bpe_stream/csrc``, built as ``bpe_stream._fastbpe``.

Owns loading it once.  ``fastbpe`` is the module, or None when it was not built (no C
compiler at install): every caller then runs its pure-Python code, which gives the same
results, slower.  The C code holds its own copy of a few definitions the Python code also
holds -- the tie-break names (``csrc/layout.h``) -- and
the Python module that owns each one checks at import, with :func:`agree`, that the built
extension says the same: a stale build then fails loudly instead of training by another
rule or misreading rows.
"""

from __future__ import annotations

try:
    from . import _fastbpe as fastbpe
except ImportError:  # pragma: no cover - depends on the build
    fastbpe = None


class NativeMismatch(ImportError):
    """The built extension disagrees with the Python code: it was built from other sources."""


def agree(name: str, ours, native=None) -> None:
    """Raises :class:`NativeMismatch` unless the extension's constant ``name`` equals
    ``ours`` (nothing to check when the extension is not built).  ``native``: the module
    to check instead of the loaded one (tests)."""
    native = fastbpe if native is None else native
    if native is None:
        return
    theirs = getattr(native, name, None)
    if theirs != ours:
        raise NativeMismatch(
            f"bpe_stream._fastbpe has {name} = {theirs!r} where the Python code has {ours!r}: the extension "
            "was built from other sources; rebuild it (make install, or python setup.py build_ext --inplace)"
        )
