"""Tokenizer files that lie or are not files (issue 19, items 4, 9 and 10): a special token
whose stored bytes are not its text, ``-t`` naming a device, a FIFO or a huge file, and a
tiktoken sidecar whose ``ranks_file`` reaches outside its directory.  Each is one ``Error:``
line that never shows the contents of a file that is not a tokenizer."""

from __future__ import annotations

import json
import os
import stat

import pytest
from conftest import assert_user_error
from small_made import EOT, make_small, run_cli

from bpe_stream import Tokenizer
from bpe_stream.encode.tokenizer import TokenizerError

SECRET = "root:x:0:0:TOPSECRET-7f3a"


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    return make_small(tmp_path_factory.mktemp("hostile"))


def info(path):
    return run_cli("info", "-t", path)


# -- 4. a special token's bytes are its text ------------------------------------------------
def test_native_special_token_stored_as_other_bytes_is_refused(made, tmp_path):
    doc = json.loads(made["tok"].read_text())
    (sid,) = [s["id"] for s in doc["symbols"] if s["text"] == EOT]
    doc["vocab"] = [[tid, b"<|other|>".hex() if tid == sid else hexed] for tid, hexed in doc["vocab"]]
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc))
    for args in (("info", "-t", bad), ("encode", "-t", bad, made["text"]), ("decode", "-t", bad, made["text"])):
        code, out, err = run_cli(*args)
        assert_user_error(err, code)
        assert "special token" in err and EOT in err and out == b""


def test_native_word_end_marker_stored_as_other_bytes_is_refused(tmp_path):
    vocab = {i: bytes([i]) for i in range(256)}
    vocab[256] = b"</x>"
    with pytest.raises(TokenizerError, match="word-end marker"):
        Tokenizer(vocab, [], [(256, "end_of_word", "</w>")])


def test_hf_added_token_on_an_id_the_vocab_gives_another_token_is_refused(made, tmp_path):
    hf = tmp_path / "tokenizer.json"
    code, _, err = run_cli("export", "-t", made["tok"], "-f", "hf", "-o", hf, "-q")
    assert code == 0, err
    doc = json.loads(hf.read_text())
    doc["added_tokens"][0]["content"] = "<|other|>"  # the model's vocab still gives its id to <|endoftext|>
    hf.write_text(json.dumps(doc))
    code, _, err = info(hf)
    assert_user_error(err, code)
    assert "<|other|>" in err and EOT in err


@pytest.mark.parametrize("fmt", ["native", "hf", "gpt2", "tiktoken"])
def test_every_loader_gives_specials_their_text(made, tmp_path, fmt):
    """Every format's loader builds the ``Tokenizer`` that checks it: the special token's
    bytes are its text, so encode -> decode gives the special back."""
    out = tmp_path / {"gpt2": "gpt2-dir", "tiktoken": "t.tiktoken"}.get(fmt, "t.json")
    code, _, err = run_cli("export", "-t", made["tok"], "-f", fmt, "-o", out, "-q")
    assert code == 0, err
    tok = Tokenizer.load(out)
    sid = tok.special_ids[EOT]
    assert tok.vocab[sid] == EOT.encode() and tok.decode_bytes(tok.encode("a" + EOT)) == ("a" + EOT).encode()
    vocab = {**tok.vocab, sid: b"<|other|>"}
    with pytest.raises(TokenizerError, match="special token"):
        Tokenizer(vocab, tok.merges, tok.symbols, pretokenizer=tok.pretokenizer.name)


# -- 9. -t reads only regular files, and at most MAX_TOKENIZER_BYTES ---------------------------------
@pytest.mark.parametrize("device", ["/dev/zero", "/dev/urandom"])
def test_a_device_as_tokenizer_is_refused_unread(device):
    from bpe_stream.formats.files import read_tokenizer_file

    if not stat.S_ISCHR(os.stat(device).st_mode):
        pytest.skip(f"{device} is not a character device here")
    with pytest.raises(TokenizerError, match="character device"):
        read_tokenizer_file(device)
    code, _, err = info(device)
    assert_user_error(err, code)
    assert f"{device} is a character device" in err


def test_a_fifo_as_tokenizer_is_refused_without_waiting_for_a_writer(tmp_path):
    from bpe_stream.formats.files import read_tokenizer_file

    fifo = tmp_path / "tok.fifo"
    os.mkfifo(fifo)
    with pytest.raises(TokenizerError, match="FIFO"):
        read_tokenizer_file(fifo)
    code, _, err = info(fifo)
    assert_user_error(err, code)
    assert "is a FIFO" in err


def test_a_file_over_the_limit_is_refused(made, tmp_path, monkeypatch):
    import bpe_stream.formats.files as files

    size = made["tok"].stat().st_size
    monkeypatch.setattr(files, "MAX_TOKENIZER_BYTES", size - 1)
    code, _, err = info(made["tok"])
    assert_user_error(err, code)
    assert "too large" in err
    monkeypatch.setattr(files, "MAX_TOKENIZER_BYTES", size)
    code, _, err = info(made["tok"])
    assert code == 0, err


@pytest.mark.parametrize("part", ["tokenizer.json", "vocab.json", "merges.txt"])
def test_a_device_inside_a_tokenizer_directory_is_refused(made, tmp_path, part):
    """HF and GPT-2 directories are read through the same reader: a member that is a
    symlink to /dev/zero is refused, not read."""
    from bpe_stream.formats.files import read_tokenizer_file  # noqa: F401  (before the fix: fails here, unread)

    if not stat.S_ISCHR(os.stat("/dev/zero").st_mode):
        pytest.skip("/dev/zero is not a character device here")
    directory = tmp_path / "d"
    directory.mkdir()
    fmt = "hf" if part == "tokenizer.json" else "gpt2"
    code, _, err = run_cli("export", "-t", made["tok"], "-f", fmt, "-o", directory if fmt == "gpt2" else directory / part, "-q")
    assert code == 0, err
    (directory / part).unlink()
    (directory / part).symlink_to("/dev/zero")
    code, _, err = info(directory / part if fmt == "hf" else directory)
    assert_user_error(err, code)
    assert "character device" in err


# -- 10. a sidecar's ranks_file is a file name beside it --------------------------------------
@pytest.fixture
def exported_tiktoken(made, tmp_path):
    ranks = tmp_path / "tok.tiktoken"
    code, _, err = run_cli("export", "-t", made["tok"], "-f", "tiktoken", "-o", ranks, "-q")
    assert code == 0, err
    return ranks, json.loads((tmp_path / "tok.tiktoken.json").read_text())


def _secret_file(path):
    # its first line looks like a rank line, so it is read as a rank file; the second is the secret
    path.write_text("aGVsbG8= 0\n" + SECRET + "\n")
    return path


@pytest.mark.parametrize("where", ["absolute", "parent", "subdirectory", "dotdot"])
def test_a_sidecar_cannot_name_a_ranks_file_elsewhere(exported_tiktoken, tmp_path, where):
    _, meta = exported_tiktoken
    outside = tmp_path / "outside"
    outside.mkdir()
    secret = _secret_file(outside / "passwd")
    (tmp_path / "side").mkdir()
    named = {"absolute": str(secret), "parent": "../outside/passwd", "subdirectory": "sub/passwd", "dotdot": ".."}[where]
    (tmp_path / "side" / "sub").mkdir()
    _secret_file(tmp_path / "side" / "sub" / "passwd")
    sidecar = tmp_path / "side" / "evil.json"
    sidecar.write_text(json.dumps(dict(meta, ranks_file=named)))
    code, _, err = info(sidecar)
    assert_user_error(err, code)
    assert "ranks_file must be the name of a file beside the sidecar" in err
    assert "TOPSECRET" not in err
    from bpe_stream.formats.tiktoken_file import tiktoken_encoding

    with pytest.raises(TokenizerError, match="beside the sidecar"):
        tiktoken_encoding(sidecar)


def test_a_ranks_file_beside_the_sidecar_loads(exported_tiktoken, tmp_path):
    ranks, meta = exported_tiktoken
    (tmp_path / "renamed.tiktoken").write_bytes(ranks.read_bytes())
    sidecar = tmp_path / "other.json"
    sidecar.write_text(json.dumps(dict(meta, ranks_file="renamed.tiktoken")))
    code, _, err = info(sidecar)
    assert code == 0, err


def test_errors_never_show_the_contents_of_a_file_that_is_not_a_tokenizer(exported_tiktoken, tmp_path):
    _, meta = exported_tiktoken
    _secret_file(tmp_path / "notes.txt")
    sidecar = tmp_path / "notes.txt.json"
    sidecar.write_text(json.dumps(dict(meta, ranks_file="notes.txt")))
    for target in (sidecar, tmp_path / "notes.txt"):
        code, _, err = info(target)
        assert_user_error(err, code)
        assert "TOPSECRET" not in err, err
