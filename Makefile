# bpe-stream: `make run` installs into .venv and runs the main job; `make test` runs the suite.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
BPE := $(VENV)/bin/bpe-stream
RUN_DIR ?= run
STDLIB := $(shell $(PYTHON) -c "import sysconfig; print(sysconfig.get_paths()['stdlib'])")

.PHONY: install run test test-transformers test-spark asan bench bench-scale stress lint clean

# Byte code written as a wheel's install writes it (an editable install does not, and with
# PYTHONDONTWRITEBYTECODE nothing else does): every command would compile its modules on
# start (~0.07 s of a 0.5 s count).  Modules edited later are recompiled here, stale ones ignored.
install: $(VENV)/.installed
	@$(PY) -m compileall -q bpe_stream

# Any change to the C sources (bpe_stream/csrc: every .c and .h) rebuilds the extension.
$(VENV)/.installed: setup.cfg pyproject.toml setup.py $(wildcard bpe_stream/csrc/*) $(wildcard bpe_stream/csrc/lmdb/*) $(wildcard bpe_stream/csrc/xxhash/*)
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev,dask,ray,zstd,parquet]'
	touch $@

# The main job on a corpus every machine with Python has: the standard library's own
# top-level sources (about 5 MB).  Count, train 4,096 tokens, show info and stats, and
# check a byte-exact encode/decode round trip.
run: install
	rm -rf $(RUN_DIR) && mkdir -p $(RUN_DIR)
	$(BPE) count --store $(RUN_DIR)/store --special-token '<|endoftext|>' $(STDLIB)/*.py
	$(BPE) train --store $(RUN_DIR)/store --vocab-size 4096 -o $(RUN_DIR)/tokenizer.json
	$(BPE) info -t $(RUN_DIR)/tokenizer.json
	$(BPE) stats --store $(RUN_DIR)/store
	$(BPE) encode -t $(RUN_DIR)/tokenizer.json $(STDLIB)/textwrap.py > $(RUN_DIR)/textwrap.ids
	$(BPE) decode -t $(RUN_DIR)/tokenizer.json $(RUN_DIR)/textwrap.ids | cmp - $(STDLIB)/textwrap.py
	@echo "round trip of $(STDLIB)/textwrap.py: byte-exact ($$(wc -w < $(RUN_DIR)/textwrap.ids) tokens for $$(wc -c < $(STDLIB)/textwrap.py) bytes)"

test: install
	$(PY) -m pytest

# The exports loaded by transformers 4 and 5 (issue 38), each in its own venv: transformers
# (119 MB installed, with numpy 73 MB more) is no dependency of bpe-stream, and one venv holds
# one major version.  No torch: the tokenizer classes need none.
TF_VENVS := build/tf4 build/tf5
build/tf4/.installed: ; $(PYTHON) -m venv build/tf4 && build/tf4/bin/pip install -q 'transformers>=4.57,<5' tokenizers tiktoken && touch $@
build/tf5/.installed: ; $(PYTHON) -m venv build/tf5 && build/tf5/bin/pip install -q 'transformers>=5,<6' tokenizers tiktoken && touch $@
test-transformers: install $(TF_VENVS:%=%/.installed)
	BPE_STREAM_REQUIRE_TRANSFORMERS=1 $(PY) -m pytest -p no:cacheprovider tests/test_transformers_exports.py

# The PySpark recipe on a real local Spark (tests/test_engine_spark.py; make test runs it only
# where pyspark and Java are present): installs a Java runtime from Debian's packages when
# there is none (as root), and pyspark (a 435 MB download) into the venv.
test-spark: install
	@command -v java >/dev/null 2>&1 || { apt-get update -q && apt-get install -y -q --no-install-recommends default-jre-headless; }
	$(PY) -c "import pyspark" 2>/dev/null || $(PY) -m pip install -q -e '.[spark]'
	$(PY) -m pytest -p no:cacheprovider -rs tests/test_engine_spark.py

# The engine and encoder tests against the extension built with AddressSanitizer and
# UBSan, in build/asan (the in-place build that make test uses stays as it is).  Python
# itself is not instrumented, so the sanitizer runtime is preloaded; CPython keeps
# memory to the end by design, so leaks are not reported; any UBSan report fails the run.
ASAN_DIR := build/asan
ASAN_TESTS ?= tests/test_engines.py tests/test_trainer.py tests/test_tokenizer.py tests/test_encode_stream.py tests/test_native.py \
	tests/test_encode_native.py tests/test_count_table.py tests/test_count_runs.py tests/test_count_specials.py \
	tests/test_store_native.py
ASAN_FLAGS := -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined -fno-wrapv -g
EXT_SUFFIX = $(shell $(PY) -c "import sysconfig; print(sysconfig.get_config_var('EXT_SUFFIX'))")
asan: install
	rm -rf $(ASAN_DIR)
	CFLAGS="$(ASAN_FLAGS)" LDFLAGS="$(ASAN_FLAGS)" $(PY) setup.py -q build_ext --force \
		--build-lib $(ASAN_DIR)/lib --build-temp $(ASAN_DIR)/temp
	BPE_STREAM_ASAN_EXT=$(CURDIR)/$(ASAN_DIR)/lib/bpe_stream/_fastbpe$(EXT_SUFFIX) \
	PYTHONPATH=$(CURDIR)/tests/asan LD_PRELOAD="$$($${CC:-gcc} -print-file-name=libasan.so)" \
	ASAN_OPTIONS=detect_leaks=0 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
		sh -c '$(PY) -c "import bpe_stream._fastbpe as f; assert \"$(ASAN_DIR)\" in f.__file__, f.__file__" && \
		$(PY) -m pytest -p no:cacheprovider $(ASAN_TESTS)'

bench: install
	$(PY) -m pip install -q -e '.[dev,bench]'
	$(PY) benchmarks/run_bench.py
	$(PY) benchmarks/count_budget.py --dir build/count-budget

# The scale benchmark (issue 35), apart from make bench: generated web text as .jsonl.zst counted
# with every core and trained within budgets; JSON records and an RSS plot in build/scale.
# SCALE_ARGS picks sizes, vocabulary, budgets (see benchmarks/bench_scale.py).
SCALE_ARGS ?= --size 2G --vocab 65536 --budgets 2G,1G --memory-path --rustbpe-timeout 1800
bench-scale: install
	$(PY) -m pip install -q -e '.[dev,bench,zstd]'
	$(PY) benchmarks/bench_scale.py $(SCALE_ARGS)

# Kill/rerun, concurrency and creation races repeated for minutes (issue 7), outside make test.
stress: install
	$(PY) benchmarks/stress.py --minutes 5

lint: install
	$(PY) -m pip install -q ruff==0.17.6
	$(VENV)/bin/ruff check bpe_stream tests benchmarks tools examples

clean:
	rm -rf $(VENV) $(RUN_DIR) build *.egg-info .pytest_cache .hypothesis
