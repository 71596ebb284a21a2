"""Exports as transformers reads them (issue 38): ``export --format hf -o DIR`` and
``--format gpt2`` loaded by ``AutoTokenizer``, ``GPT2TokenizerFast`` and ``GPT2Tokenizer`` of
transformers 4 and 5 give bpe-stream's ids and decode byte-exactly; ``tokenizers`` and
``tiktoken`` read the same exports here.

transformers is no dependency of bpe-stream: ``make test-transformers`` makes the venvs
``build/tf4`` (transformers 4.57+) and ``build/tf5`` (5.x), and the checks run there through
``tests/transformers_check.py``; each venv missing is a skip that says so (a failure under
``BPE_STREAM_REQUIRE_TRANSFORMERS=1``, as the make target sets).  The tokenizers: 0, 1 and 3
special tokens trained here, and GPT-2 extended with new merges (``train --from``).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from bpe_stream.count.counting import make_settings
from bpe_stream.formats import export_tokenizer, load_any
from bpe_stream.formats.tiktoken_file import tiktoken_encoding
from bpe_stream.train.pipeline import count_file, tokenizer_from_result
from bpe_stream.train.trainer import TrainConfig, Trainer

tokenizers = pytest.importorskip("tokenizers")
tiktoken = pytest.importorskip("tiktoken")

REPO = Path(__file__).resolve().parents[1]
DATA = REPO.parent / "shared" / "data"
CS336 = DATA / "cs336"
EOT = "<|endoftext|>"
VENVS = {"tf4": REPO / "build" / "tf4", "tf5": REPO / "build" / "tf5"}
REQUIRE = os.environ.get("BPE_STREAM_REQUIRE_TRANSFORMERS") == "1"
SPECIALS = {"s0": [], "s1": [EOT], "s3": ["<|pad|>", EOT, "<|fim|>"]}


def _texts():
    """The CS336 texts, a slice of each shared corpus, and texts full of special tokens."""
    out = [(CS336 / name).read_text(encoding="utf-8") for name in
           ("tinystories_sample.txt", "german.txt", "address.txt", "special_token_double_newlines_non_whitespace.txt")]
    for name in ("en_100M.txt", "multi_25M.txt", "code_25M.txt"):
        with open(DATA / "corpora" / name, "rb") as f:
            f.seek(3_000_000)
            out.append(f.read(40_000).decode("utf-8", "ignore"))
    out += ["a<|pad|>b<|endoftext|>c", "x<|endoftext|>y", "<|fim|><|pad|> <|endoftext|>\n\n<|pad", " .  , 's  ?! don't",
            "日本語 한국어\t\r\n  end  "]
    return out


TEXTS = _texts()


def _train(tmp: Path, specials, pretokenizer="gpt2"):
    text = tmp / "train.txt"
    if not text.exists():
        parts = [(CS336 / "corpus.en").read_text(encoding="utf-8")]
        with open(DATA / "corpora" / "multi_25M.txt", "rb") as f:
            parts.append(f.read(100_000).decode("utf-8", "ignore"))
        text.write_text(f"\n{EOT}\n".join(parts), encoding="utf-8")
    trainer = Trainer(TrainConfig(vocab_size=1200, special_tokens=list(specials)))
    trainer.feed(count_file(text, make_settings(pretokenizer, list(specials), None)).items())
    return tokenizer_from_result(trainer.train(), pretokenizer, "max-bytes")


@pytest.fixture(scope="module")
def tokenizers_under_test(tmp_path_factory):
    """name -> (bpe-stream Tokenizer, its roles): trained with 0, 1, 3 specials, and GPT-2 + 60 new merges."""
    from typer.testing import CliRunner

    from bpe_stream.cli.commands import app

    tmp = tmp_path_factory.mktemp("trained")
    out = {name: (_train(tmp, specials), {"eos": EOT} if EOT in specials else {}) for name, specials in SPECIALS.items()}
    out["s3"] = (out["s3"][0], {"eos": EOT, "pad": "<|pad|>"})
    runner = CliRunner()
    for args in (("count", "--store", tmp / "st", "--special-token", EOT, "-q", tmp / "train.txt"),
                 ("train", "--store", tmp / "st", "--from", CS336 / "gpt2_vocab.json", "--num-merges", 60,
                  "-o", tmp / "ext.json", "-q")):
        res = runner.invoke(app, [str(a) for a in args])
        assert res.exit_code == 0, res.output
    ext = load_any(tmp / "ext.json")
    assert ext.vocab_size == 50_257 + 60
    out["gpt2_extended"] = (ext, {"eos": EOT, "bos": EOT, "unk": EOT})
    return out


@pytest.fixture(scope="module")
def exports(tokenizers_under_test, tmp_path_factory):
    """name -> {"tok", "roles", "hf" (folder), "gpt2" (folder), "tiktoken" (rank file)}."""
    base = tmp_path_factory.mktemp("exports")
    out = {}
    for name, (tok, roles) in tokenizers_under_test.items():
        hf_dir, gpt2_dir = base / f"{name}_hf", base / f"{name}_gpt2"
        hf_dir.mkdir()
        export_tokenizer(tok, "hf", hf_dir, roles=roles)
        export_tokenizer(tok, "gpt2", gpt2_dir, roles=roles)
        export_tokenizer(tok, "tiktoken", base / f"{name}.tiktoken")
        out[name] = {"tok": tok, "roles": roles, "hf": hf_dir, "gpt2": gpt2_dir, "tiktoken": base / f"{name}.tiktoken"}
    return out


@pytest.fixture(scope="module")
def expected(exports):
    return {name: [e["tok"].encode(text) for text in TEXTS] for name, e in exports.items()}


# -- what needs no transformers --------------------------------------------------------------
def test_tokenizers_and_tiktoken_read_every_export_as_bpe_stream(exports, expected):
    for name, e in exports.items():
        hf = tokenizers.Tokenizer.from_file(str(e["hf"] / "tokenizer.json"))
        enc = tiktoken_encoding(e["tiktoken"])
        for text, ids in zip(TEXTS, expected[name]):
            assert hf.encode(text).ids == ids, name
            assert hf.decode(ids, skip_special_tokens=False) == text, name
            assert enc.encode(text, allowed_special="all") == ids, name
            assert enc.decode(ids) == text, name
        assert max(max(ids) for ids in expected[name]) > 256, name  # the merges are used


def test_the_configs_name_every_special_at_its_id_and_no_role_unless_asked(exports):
    # F1, F2, F3 as files: what transformers needs beside tokenizer.json / vocab.json.
    for name, e in exports.items():
        tok = e["tok"]
        for folder, cls in ((e["hf"], "PreTrainedTokenizerFast"), (e["gpt2"], "GPT2Tokenizer")):
            config = json.loads((folder / "tokenizer_config.json").read_text())
            assert config["tokenizer_class"] == cls  # F3: AutoTokenizer needs a class
            assert {int(k): v["content"] for k, v in config["added_tokens_decoder"].items()} == \
                {sid: text for sid, _, text in tok.symbols}  # F1: every special, at its id
            assert all(v["special"] and not v["normalized"] for v in config["added_tokens_decoder"].values())
            for role in ("bos", "eos", "pad", "unk"):  # F2: null, not GPT2Tokenizer's default <|endoftext|>
                assert config[f"{role}_token"] == e["roles"].get(role), (name, role)
            assert config["clean_up_tokenization_spaces"] is False
            tokens_map = json.loads((folder / "special_tokens_map.json").read_text())
            assert {k: v["content"] for k, v in tokens_map.items() if k.endswith("_token")} == \
                {f"{role}_token": text for role, text in e["roles"].items()}
        assert load_any(e["gpt2"]).encode(TEXTS[-4]) == tok.encode(TEXTS[-4])  # bpe-stream reads its folder back


def test_role_options_are_checked_and_need_a_folder(cli, tmp_path, exports):
    tok_path = tmp_path / "s3.json"
    exports["s3"]["tok"].save(tok_path)
    res = cli("export", "-t", tok_path, "-f", "gpt2", "-o", tmp_path / "g", "--eos", "<|nope|>")
    assert res.exit_code == 1 and "--eos '<|nope|>' is not a special token of this tokenizer" in res.stderr
    assert "<|pad|>, <|endoftext|>, <|fim|>" in res.stderr and not (tmp_path / "g").exists()
    res = cli("export", "-t", tok_path, "-f", "hf", "-o", tmp_path / "t.json", "--pad", "<|pad|>")
    assert res.exit_code == 1 and "give a directory as -o" in res.stderr and not (tmp_path / "t.json").exists()
    res = cli("export", "-t", tok_path, "-f", "tiktoken", "-o", tmp_path / "t.tiktoken", "--eos", EOT)
    assert res.exit_code == 1 and "are for transformers" in res.stderr
    res = cli("export", "-t", tok_path, "-f", "hf", "-o", f"{tmp_path / 'new'}/", "--bos", "<|fim|>", "--pad", "<|pad|>")
    assert res.exit_code == 0, res
    assert sorted(os.listdir(tmp_path / "new")) == ["special_tokens_map.json", "tokenizer.json", "tokenizer_config.json"]
    config = json.loads((tmp_path / "new" / "tokenizer_config.json").read_text())
    assert (config["bos_token"], config["eos_token"], config["pad_token"]) == ("<|fim|>", None, "<|pad|>")
    assert config["additional_special_tokens"] == [EOT]
    # a file stays one file, as before
    assert cli("export", "-t", tok_path, "-f", "hf", "-o", tmp_path / "one.json").exit_code == 0
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("one")) == ["one.json"]


def test_an_extension_of_a_folder_keeps_its_files(cli, tmp_path, exports):
    """``--like`` a transformers folder: its own configs come along, vocab.json + merges.txt are
    written anew, a model's files are named as left out."""
    ext = exports["gpt2_extended"]["tok"]
    orig = tmp_path / "orig"
    orig.mkdir()
    gpt2 = load_any(CS336 / "gpt2_vocab.json")
    export_tokenizer(gpt2, "hf", orig, roles={"eos": EOT})
    export_tokenizer(gpt2, "gpt2", orig, roles={"eos": EOT})
    config = json.loads((orig / "tokenizer_config.json").read_text())
    config["model_max_length"] = 1024  # a setting of the user's, kept
    (orig / "tokenizer_config.json").write_text(json.dumps(config))
    (orig / "config.json").write_text("{}")
    ext.save(tmp_path / "ext.json")
    (tmp_path / "out").mkdir()
    res = cli("export", "-t", tmp_path / "ext.json", "-f", "hf", "--like", orig, "-o", tmp_path / "out", "--pad", EOT)
    assert res.exit_code == 0, res
    assert "not copied from" in res.stderr and "config.json" in res.stderr and "50,317 tokens" in res.stderr
    out = tmp_path / "out"
    assert sorted(os.listdir(out)) == ["merges.txt", "special_tokens_map.json", "tokenizer.json",
                                       "tokenizer_config.json", "vocab.json"]
    kept = json.loads((out / "tokenizer_config.json").read_text())
    assert kept["model_max_length"] == 1024 and kept["pad_token"] == EOT and kept["eos_token"] == EOT
    for path in (out, out / "vocab.json"):
        assert load_any(path).encode(TEXTS[0]) == ext.encode(TEXTS[0])
    assert len(json.loads((out / "vocab.json").read_text())) == 50_257 + 60


# -- transformers, in its venvs --------------------------------------------------------------
def _cases(exports):
    cases = []
    for name, e in exports.items():
        cases.append({"name": f"{name}/hf", "path": str(e["hf"]), "classes": ["AutoTokenizer", "GPT2TokenizerFast"],
                      "texts": TEXTS})
        cases.append({"name": f"{name}/gpt2", "path": str(e["gpt2"]),
                      "classes": ["AutoTokenizer", "GPT2TokenizerFast", "GPT2Tokenizer"], "texts": TEXTS})
    return cases


def _run_in(venv: str, exports, tmp_path) -> dict:
    python = VENVS[venv] / "bin" / "python"
    if not python.exists():
        message = f"no {VENVS[venv]} venv with transformers: run 'make test-transformers' to make it"
        if REQUIRE:
            pytest.fail(message)
        pytest.skip(message)
    spec, out = tmp_path / "spec.json", tmp_path / "out.json"
    spec.write_text(json.dumps(_cases(exports)), encoding="utf-8")
    proc = subprocess.run([str(python), str(REPO / "tests" / "transformers_check.py"), str(spec), str(out)],
                          capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1",
                                                               "TRANSFORMERS_OFFLINE": "1"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(out.read_text(encoding="utf-8"))


@pytest.mark.parametrize("venv", sorted(VENVS))
def test_transformers_reads_every_export_as_bpe_stream(venv, exports, expected, tmp_path):
    got = _run_in(venv, exports, tmp_path)
    major = got["version"].split(".")[0]
    assert major == venv[-1], got["version"]
    checked = 0
    for case in _cases(exports):
        name = case["name"].split("/")[0]
        roles = exports[name]["roles"]
        for cls, res in got["results"][case["name"]].items():
            where = f"transformers {got['version']} {cls} on {case['name']}"
            assert "error" not in res, (where, res)
            assert res["len"] == exports[name]["tok"].vocab_size, where  # F2: no token added
            for text, ids, theirs, decoded in zip(TEXTS, expected[name], res["ids"], res["decoded"]):
                assert theirs == ids, (where, text[:60])  # F1: every special kept whole
                assert decoded == text, (where, text[:60])
            for role in ("eos", "bos", "pad", "unk"):  # F3: the eos token (and only the roles given)
                assert res[role] == roles.get(role), (where, role)
            checked += 1
    assert checked == len(exports) * 5
