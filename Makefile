# bpe-stream: `make run` installs into .venv and runs the main job; `make test` runs the suite.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
BPE := $(VENV)/bin/bpe-stream
RUN_DIR ?= run
STDLIB := $(shell $(PYTHON) -c "import sysconfig; print(sysconfig.get_paths()['stdlib'])")

.PHONY: install run test bench stress lint clean

install: $(VENV)/.installed

$(VENV)/.installed: setup.cfg pyproject.toml setup.py bpe_stream/_fastbpe.c bpe_stream/_storecheck.c
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev,dask]'
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

bench: install
	$(PY) -m pip install -q -e '.[dev,bench]'
	$(PY) benchmarks/run_bench.py

# Kill/rerun, concurrency and creation races repeated for minutes (issue 7), outside make test.
stress: install
	$(PY) benchmarks/stress.py --minutes 5

lint: install
	$(PY) -m pip install -q ruff
	$(VENV)/bin/ruff check bpe_stream tests benchmarks

clean:
	rm -rf $(VENV) $(RUN_DIR) build *.egg-info .pytest_cache .hypothesis
