# Two entry points for a fresh machine: `make run` (the main job) and `make test` (the whole suite).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP_RUN := $(VENV)/.installed-run
STAMP_TEST := $(VENV)/.installed-test

.PHONY: run test lint bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

$(STAMP_RUN): pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e ".[torch]"
	touch $@

$(STAMP_TEST): pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e ".[test]"
	touch $@ $(STAMP_RUN)

run: $(STAMP_RUN)
	$(BIN)/birder report

test: $(STAMP_TEST)
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -q -p no:cacheprovider

bench: $(STAMP_RUN)
	for f in benchmarks/*.py; do $(BIN)/python $$f || exit 1; done

clean:
	rm -rf $(VENV) report .pytest_cache .hypothesis
