# Two entry points for a fresh machine: `make run` (the main job, base dependencies only: no torch) and
# `make test` (the whole suite, with the test extras: torch==2.13.0, pytest, ruff, and the clients whose Birder
# recipes it tests: lightning, accelerate).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP_RUN := $(VENV)/.installed-run
STAMP_TEST := $(VENV)/.installed-test
STAMP_TORCH := $(VENV)/.installed-torch

.PHONY: run test lint bench retry-bad-inputs clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

$(STAMP_RUN): pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e .
	touch $@

$(STAMP_TORCH): pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e ".[torch]"
	touch $@ $(STAMP_RUN)

$(STAMP_TEST): pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e ".[test,lightning,accelerate]"
	touch $@ $(STAMP_RUN) $(STAMP_TORCH)

run: $(STAMP_RUN)
	$(BIN)/birder report

test: $(STAMP_TEST)
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -q -p no:cacheprovider

lint: $(STAMP_TEST)
	$(BIN)/ruff check .

bench: $(STAMP_TORCH)
	for f in benchmarks/*.py; do $(BIN)/python $$f || exit 1; done

# bad inputs beyond the suites, each through the real console script (exit 1 unless every case is clean)
retry-bad-inputs: $(STAMP_TEST)
	$(BIN)/python tests/retry_new_bad_inputs.py

clean:
	rm -rf $(VENV) report .pytest_cache .hypothesis
