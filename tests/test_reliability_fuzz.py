"""Reliability (issue 7): fuzzed readers, pretokenizers, encoders and loaders.

Random bytes and text (invalid UTF-8, lone surrogates, special tokens cut anywhere) in any
chunking must read, pretokenize and encode exactly as the whole does; mutated and random
tokenizer files of every format must load as a working tokenizer or raise
``TokenizerError`` -- never another exception.  The number of examples is the suite's
(``BPE_STREAM_HYPOTHESIS_EXAMPLES``, see ``tests/conftest.py``).
"""

from __future__ import annotations

import json
import shutil
from collections import Counter
from pathlib import Path

import pytest
import reliability_helpers as H
from hypothesis import given
from hypothesis import strategies as st
from reliability_helpers import EOT

from bpe_stream import Tokenizer

text_piece = st.sampled_from([
    "hello", " world", " ", "  ", "\n", "\r\n", "\t", "'ll", "don't", "123456", "中文", "😀", "!!", " é", "\u00a0",
    "\u3000", "x", "\x00", "\udcff", "\udc80", "<|endoftext|>", "<|a|>", "<|a|><|b|>", "<|a", "|>", "<|", "a|>",
]) | st.text(max_size=4)
fuzz_text = st.lists(text_piece, max_size=40).map("".join)
byte_piece = st.sampled_from([b"\xff", b"\xe4", b"\xe4\xb8", b"\xc0\xaf", b"\xed\xa0\x80", b"\xf0\x9f\x98", b"\x80"])
fuzz_bytes = st.lists(text_piece.map(lambda t: t.encode("utf-8", "surrogateescape")) | byte_piece | st.binary(max_size=4),
                      max_size=40).map(b"".join)


class _ShortReads:
    """A stream that returns at most ``n`` bytes per read, as a pipe may."""

    def __init__(self, data: bytes, sizes):
        self.data, self.pos, self.sizes, self.i = data, 0, sizes, 0

    def read(self, n: int) -> bytes:
        k = min(n, self.sizes[self.i % len(self.sizes)])
        self.i += 1
        out = self.data[self.pos:self.pos + k]
        self.pos += len(out)
        return out


@given(fuzz_bytes, st.integers(1, 9), st.lists(st.integers(1, 7), min_size=1, max_size=5), st.booleans())
def test_fuzz_chunked_reader_is_byte_exact_and_strict_names_the_first_bad_byte(data, chunk, reads, strict):
    from bpe_stream.inputs.reader import InputError, decode_chunks, to_bytes

    try:
        data.decode("utf-8")
        first_bad = None
    except UnicodeDecodeError as exc:
        first_bad = exc.start
    out = []
    try:
        for text, _, _, _ in decode_chunks(_ShortReads(data, reads), chunk, strict):
            out.append(text)
    except InputError as exc:
        assert strict and first_bad is not None, exc
        assert f"offset {first_bad};" in str(exc), (str(exc), first_bad)
        return
    assert not (strict and first_bad is not None), "invalid UTF-8 passed --strict-utf8"
    assert b"".join(to_bytes(t) for t in out) == data


@given(fuzz_text, st.sampled_from(["gpt2", "cl100k", "o200k", "whitespace", "words", "none", r"regex:\S+|\s+"]),
       st.sampled_from([[], [EOT], ["<|a|>", "<|a|><|b|>", "<|a", "|>"]]), st.lists(st.integers(0, 12), max_size=8))
def test_fuzz_pretokenizers_stream_like_the_whole_and_lose_nothing(text, name, specials, cuts):
    from bpe_stream.pretok.pretokenize import Pretokenizer, SpecialSplitter, StreamSplitter

    pre = Pretokenizer.from_name(name)
    splitter = SpecialSplitter(specials)
    whole = []
    for is_special, piece in splitter.split(text):
        whole.extend([("special", piece)] if is_special else [("pretoken", p) for p in pre.split(piece)])
    stream, pos = StreamSplitter(pre, SpecialSplitter(specials)), 0
    got = []
    for c in cuts + [len(text)]:
        chunk, pos = text[pos:pos + c], pos + c
        for kind, value in stream.feed(chunk):
            got.extend([("special", value)] if kind == "special" else [("pretoken", p) for p in pre.split(value)])
    for kind, value in stream.end_document():
        got.extend([("special", value)] if kind == "special" else [("pretoken", p) for p in pre.split(value)])
    assert got == whole
    if pre.lossless:
        assert "".join(v for _, v in whole) == text
    if name == "gpt2" and len(specials) <= 1:
        counts, n_special = H.oracle([text.encode("utf-8", "surrogateescape")], specials)
        assert Counter(v.encode("utf-8", "surrogateescape") for k, v in whole if k == "pretoken") == counts
        assert sum(k == "special" for k, _ in whole) == n_special


@pytest.fixture(scope="module")
def small_tok(small_tok_file):
    return Tokenizer.load(small_tok_file)


@given(data=fuzz_bytes, chunk=st.integers(1, 9), cuts=st.lists(st.integers(0, 9), max_size=8))
def test_fuzz_encode_in_any_chunking_and_decode_are_byte_exact(small_tok, data, chunk, cuts):
    import io

    text = data.decode("utf-8", "surrogateescape")
    whole = small_tok.encode(text)
    streamed = [i for batch in small_tok.encode_stream(io.BytesIO(data), chunk_bytes=chunk) for i in batch]
    assert streamed == whole
    pieces, pos = [], 0
    for c in cuts + [len(text)]:
        pieces.append(text[pos:pos + c])
        pos += c
    assert list(small_tok.encode_iterable(pieces)) == whole
    assert small_tok.decode_bytes(whole) == data
    assert b"".join(small_tok._decode_chunks([whole[:k] for k in range(0, len(whole), 3)] and
                                            [whole[k:k + 3] for k in range(0, len(whole), 3)])) == data


json_value = st.recursive(
    st.none() | st.booleans() | st.integers(-300, 70_000) | st.floats(allow_nan=False) | st.text(max_size=12),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=12,
)


def _mutate(doc, draw):
    """A copy of ``doc`` with one random change somewhere inside it."""
    doc = json.loads(json.dumps(doc))
    holder, key = None, None
    node = doc
    while isinstance(node, (dict, list)) and node and draw(st.integers(0, 3)) > 0:
        keys = list(node) if isinstance(node, dict) else list(range(len(node)))
        holder, key = node, keys[draw(st.integers(0, len(keys) - 1))]
        node = holder[key]
    op = draw(st.sampled_from(["replace", "delete", "truncate", "duplicate", "retype"]))
    if holder is None:
        return draw(json_value) if op == "replace" else doc
    if op == "replace":
        holder[key] = draw(json_value)
    elif op == "delete":
        del holder[key]
    elif op == "truncate" and isinstance(node, list):
        holder[key] = node[: draw(st.integers(0, max(0, len(node) - 1)))]
    elif op == "truncate" and isinstance(node, str):
        holder[key] = node[: draw(st.integers(0, len(node)))]
    elif op == "duplicate" and isinstance(holder, list):
        holder.insert(draw(st.integers(0, len(holder))), json.loads(json.dumps(node)))
    elif op == "retype":
        holder[key] = {int: str, str: lambda v: [v], list: lambda v: {"0": v}, dict: lambda v: list(v.values()),
                       bool: int, float: int, type(None): lambda v: 0}[type(node)](node)
    return doc


def _export_small(small_tok_path, work: Path) -> dict:
    """The small tokenizer (40 merges) in every format: kind -> {file name: bytes}."""
    from bpe_stream.formats import export_tokenizer, truncate

    tok = truncate(Tokenizer.load(small_tok_path), 256 + 1 + 40)
    export_tokenizer(tok, "native", work / "tok.json")
    export_tokenizer(tok, "hf", work / "tokenizer.json")
    export_tokenizer(tok, "gpt2", work / "gpt2")
    export_tokenizer(tok, "tiktoken", work / "tok.tiktoken")
    return {
        "native": {"tok.json": (work / "tok.json").read_bytes()},
        "hf": {"tokenizer.json": (work / "tokenizer.json").read_bytes()},
        "gpt2": {name: (work / "gpt2" / name).read_bytes() for name in ("vocab.json", "merges.txt")},
        "tiktoken": {name: (work / name).read_bytes() for name in ("tok.tiktoken", "tok.tiktoken.json")},
    }


@pytest.fixture(scope="session")
def exported_small(small_tok_file, tmp_path_factory):
    """``exported_small()``: the files of ``_export_small`` (behind a call, so that hypothesis
    does not print them with every failing example)."""
    files = _export_small(small_tok_file, tmp_path_factory.mktemp("exported"))
    return lambda: files


def _write_and_load(files: dict, kind: str, entry: str = "tok.tiktoken"):
    import tempfile

    work = Path(tempfile.mkdtemp(prefix="bpe-fuzz-"))
    try:
        for fname, content in files.items():
            (work / fname).write_bytes(content)
        target = {"native": work / "tok.json", "hf": work / "tokenizer.json", "gpt2": work,
                  "tiktoken": work / entry}[kind]
        _load_must_be_clean(target)
    finally:
        shutil.rmtree(work)


def _json_paths(node, path=()):
    """Paths into a JSON document: every key of small objects, and the first two and the last
    entries of lists and of large objects (a vocabulary)."""
    yield path
    if isinstance(node, dict):
        keys = list(node)
        if len(keys) > 12:
            keys = keys[:2] + keys[-1:]
        for key in keys:
            yield from _json_paths(node[key], path + (key,))
    elif isinstance(node, list):
        for i in sorted({0, 1, len(node) - 1} & set(range(len(node)))):
            yield from _json_paths(node[i], path + (i,))


_REPLACEMENTS = [None, True, 0, -1, 1.5, 70_000, "", "x", [], [[]], {}, {"a": 1}]


@pytest.mark.parametrize("kind, name", [("native", "tok.json"), ("hf", "tokenizer.json"), ("gpt2", "vocab.json"),
                                        ("tiktoken", "tok.tiktoken.json")])
def test_every_field_of_a_tokenizer_file_edited_gives_tokenizer_error_or_a_tokenizer(exported_small, kind, name):
    """Systematic hand edits: each field (and the first, second and last item of each list)
    deleted or replaced by a value of every JSON type -- TokenizerError or a working Tokenizer."""
    files = exported_small()[kind]
    doc = json.loads(files[name])
    failures = []
    for path in _json_paths(doc):
        if not path:
            continue
        for replacement in ["<delete>"] + _REPLACEMENTS:
            edited = json.loads(files[name])
            holder = edited
            for key in path[:-1]:
                holder = holder[key]
            if replacement == "<delete>":
                del holder[path[-1]]
            else:
                holder[path[-1]] = replacement
            try:
                _write_and_load(dict(files, **{name: json.dumps(edited).encode()}), kind, name)
            except Exception as exc:  # noqa: BLE001 - collected and reported below
                failures.append(f"{'/'.join(map(str, path))} = {replacement!r}: {type(exc).__name__}: {exc}")
    assert not failures, f"{len(failures)} edits raised something other than TokenizerError:\n" + "\n".join(failures[:15])


def _load_must_be_clean(path):
    from bpe_stream.formats import load_any
    from bpe_stream.pretok.pretokenize import PretokenizeError
    from bpe_stream.encode.tokenizer import TokenizerError

    try:
        tok = load_any(path)
    except TokenizerError:
        return
    try:
        ids = tok.encode("hello world <|endoftext|> \udcff!")
        tok.decode_bytes(ids)
    except (TokenizerError, PretokenizeError):  # a loaded custom pattern may not cover the text: a user error
        pass


@given(data=st.data(), kind=st.sampled_from(["native", "hf", "gpt2", "tiktoken"]))
def test_fuzz_tokenizer_loaders_raise_only_tokenizer_error(exported_small, data, kind):
    """Mutated files of every format (one change deep inside the JSON, a line of a text file
    changed, dropped or doubled, a prefix of the file, random bytes): load_any gives a
    Tokenizer that encodes, or TokenizerError -- never another exception.  (Ids stay below
    70,000 here: one huge id costs a table of its size, see
    test_tokenizer_file_with_one_huge_id_builds_no_table_of_that_size.)"""
    files = dict(exported_small()[kind])
    name = data.draw(st.sampled_from(sorted(files)))
    raw = files[name]
    how = data.draw(st.sampled_from(["json", "lines", "prefix", "random"]))
    if how == "json" and name.endswith(".json"):
        files[name] = json.dumps(_mutate(json.loads(raw), data.draw), ensure_ascii=data.draw(st.booleans())).encode()
    elif how in ("json", "lines"):
        lines = raw.split(b"\n")
        i = data.draw(st.integers(0, len(lines) - 1))
        change = data.draw(st.sampled_from(["drop", "double", "garble", "swap"]))
        if change == "drop":
            del lines[i]
        elif change == "double":
            lines.insert(i, lines[i])
        elif change == "garble":
            lines[i] = data.draw(st.binary(max_size=12) | st.sampled_from([b"", b" ", b"a b c", b"QUFB 5", b"#version: 0.2"]))
        else:
            j = data.draw(st.integers(0, len(lines) - 1))
            lines[i], lines[j] = lines[j], lines[i]
        files[name] = b"\n".join(lines)
    elif how == "prefix":
        files[name] = raw[: data.draw(st.integers(0, len(raw)))]
    else:
        files[name] = data.draw(st.binary(max_size=200))
    _write_and_load(files, kind, data.draw(st.sampled_from(["tok.tiktoken", "tok.tiktoken.json"])))


@given(json_value)
def test_fuzz_random_json_documents_load_or_raise_tokenizer_error(doc):
    raw = json.dumps(doc).encode()
    _write_and_load({"tok.json": raw}, "native")
    _write_and_load({"tokenizer.json": raw}, "hf")
    _write_and_load({"tok.tiktoken.json": raw}, "tiktoken", "tok.tiktoken.json")


