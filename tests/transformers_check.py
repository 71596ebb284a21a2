"""Run inside a transformers venv (build/tf4, build/tf5; ``make test-transformers``), not by pytest:
loads exported tokenizer folders with transformers' own classes and writes what they give.

``python transformers_check.py SPEC OUT``: SPEC is a JSON list of ``{"name", "path", "classes",
"texts"}`` (texts: a list of strings); OUT receives ``{"version", "results": {name: {class:
{"ids": [...], "decoded": [...], "eos": ..., "bos": ..., "pad": ..., "unk": ..., "len": N} or
{"error": "..."}}}}``.  bpe_stream is not imported here: the comparison is the test's.
"""

import json
import sys
import warnings

import transformers
from transformers import AutoTokenizer, GPT2Tokenizer, GPT2TokenizerFast

CLASSES = {"AutoTokenizer": AutoTokenizer, "GPT2Tokenizer": GPT2Tokenizer, "GPT2TokenizerFast": GPT2TokenizerFast}


def run(case):
    out = {}
    for name in case["classes"]:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                tok = CLASSES[name].from_pretrained(case["path"])
            ids = [tok.encode(text) for text in case["texts"]]
            out[name] = {
                "type": type(tok).__name__,
                "ids": ids,
                "decoded": [tok.decode(i) for i in ids],
                "len": len(tok),
                **{role: getattr(tok, f"{role}_token") for role in ("eos", "bos", "pad", "unk")},
            }
        except Exception as exc:  # noqa: BLE001 - the test reports what failed to load
            out[name] = {"error": f"{type(exc).__name__}: {exc}"[:500]}
    return out


def main():
    with open(sys.argv[1], encoding="utf-8") as f:
        spec = json.load(f)
    results = {case["name"]: run(case) for case in spec}
    with open(sys.argv[2], "w", encoding="utf-8") as f:
        json.dump({"version": transformers.__version__, "results": results}, f)


if __name__ == "__main__":
    main()
