"""The errors a user can fix: one base class, so the command line can tell them from bugs.

Every exception the library raises for a mistake in what it was given -- an option value, an
input file, a store, a tokenizer file -- is a :class:`UserError`; ``bpe-stream`` turns exactly
those (and OS errors about files) into one ``Error: ...`` line and exit status 1.  Anything else
that escapes a command is a bug: a traceback and an "internal error" line, exit status 70.

The subclasses live beside the code that raises them (each module owns its failures):

- :class:`bpe_stream.store.lmdb_store.StoreError` -- a store that is missing, damaged, of other settings,
  or cannot be written (``WriteFailed``, ``NotWritable``; ``disk_engine.ScratchError``);
- :class:`bpe_stream.inputs.reader.InputError` -- an input that cannot be read (``sources.Refused``:
  a file changed since it was counted);
- :class:`bpe_stream.atomic.OutputError` -- an output path that cannot be written;
- :class:`bpe_stream.encode.tokenizer.TokenizerError` -- a tokenizer file or text it cannot handle;
- :class:`bpe_stream.pretok.pretokenize.PretokenizeError` -- counting settings or a custom pattern;
- :class:`bpe_stream.train.engine.TrainError` -- training settings that cannot work;
- :class:`bpe_stream.store.counts_file.CountsFormatError` -- a counts interchange file;
- :class:`SettingsError` (here) -- option values that do not go together (an engine that is
  not installed, ``--scheduler`` without ``--engine dask``, an unknown tie-break).

Those that were ``ValueError`` before stay ``ValueError`` too, so library callers that catch
``ValueError`` keep working; the command line catches ``UserError`` only.
"""


class UserError(Exception):
    """A mistake the user can fix; its message is the one line ``Error:`` shows."""


class SettingsError(UserError, ValueError):
    """Option values that cannot work (together, or on this installation)."""
