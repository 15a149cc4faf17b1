# Two entry points for a fresh machine: `make run` (the main job, base dependencies only: no torch) and
# `make test` (the whole suite, with the test extras: torch==2.13.0, pytest, ruff, and the clients whose Birder
# recipes it tests: lightning, accelerate).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP_RUN := $(VENV)/.installed-run
STAMP_TEST := $(VENV)/.installed-test
STAMP_TORCH := $(VENV)/.installed-torch

.PHONY: run test lint bench retry-bad-inputs clean gpu-check gpu-wheels

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
	$(BIN)/python -m pytest -q -p no:cacheprovider -n 2 --dist loadfile

lint: $(STAMP_TEST)
	$(BIN)/ruff check .

bench: $(STAMP_TORCH)
	for f in benchmarks/*.py; do $(BIN)/python $$f || exit 1; done

# bad inputs beyond the suites, each through the real console script (exit 1 unless every case is clean)
retry-bad-inputs: $(STAMP_TEST)
	$(BIN)/python tests/retry_new_bad_inputs.py

# The GPU check (docs/gpu_check.md): every CUDA figure in one command on a single-GPU machine, no network needed.
# `make gpu-wheels` (here, with PyPI) fills gpu_check/wheels/ with the pure-Python wheels a bare machine lacks;
# `make gpu-check` there runs from the checkout (no install) with the machine's python3 and torch, or this .venv's.
GPU_CHECK_OUT ?= gpu_check_out
GPU_CHECK_PYTHON ?= $(if $(wildcard $(BIN)/python),$(BIN)/python,python3)
gpu-wheels:
	$(GPU_CHECK_PYTHON) -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
		--platform manylinux2014_x86_64 --implementation cp -r gpu_check/wheels.txt -d gpu_check/wheels

gpu-check:
	PYTHONPATH=$(CURDIR) $(GPU_CHECK_PYTHON) -m gpu_check $(GPU_CHECK_OUT)

clean:
	rm -rf $(VENV) report .pytest_cache .hypothesis
