# Two entry points: `make demo` and `make test`. Both create .venv with python3 (>= 3.11) on first use.
PYTHON ?= python3
VENV := .venv
BIN := $(CURDIR)/$(VENV)/bin
STAMP := $(VENV)/.installed
# dace finds the pip-installed CMake (needed for CUDA builds) only with the venv first on PATH.
export PATH := $(BIN):$(PATH)

.PHONY: demo test lint bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[test]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/sdfg-scan demo

# mypy takes its files and options from [tool.mypy] in pyproject.toml
lint: $(STAMP)
	$(BIN)/ruff check sdfg_scan transformations tests samples benchmarks
	$(BIN)/mypy

test: lint
	$(BIN)/python -m pytest -q -n 2 --dist loadfile

# the benchmarks' numba and JAX peers (benchmarks/peers.py) come from the `bench` extra; demo/test stay lean
bench: $(STAMP)
	$(BIN)/python -m pip install -q -e '.[test,bench]'
	$(BIN)/python benchmarks/bench_scans.py
	$(BIN)/python benchmarks/bench_solvers.py
	$(BIN)/python benchmarks/bench_icon4py.py

clean:
	rm -rf $(VENV) .dacecache build *.egg-info
