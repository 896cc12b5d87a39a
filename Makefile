# Two entry points: `make demo` and `make test`. Both create .venv with python3 (>= 3.11) on first use.
PYTHON ?= python3
VENV := .venv
BIN := $(CURDIR)/$(VENV)/bin
STAMP := $(VENV)/.installed
# dace finds the pip-installed CMake (needed for CUDA builds) only with the venv first on PATH.
export PATH := $(BIN):$(PATH)

.PHONY: demo test test-long test-gt4py fixtures fixtures-small fixtures-graupel graupel solve-w lint bench fuzz clean \
	devpkgs gpu-check gpu-icon4py-data gpu-icon4py

# gt4py 1.2.3 needs Python >= 3.12: a second venv for sdfg_scan.gt4py's tests, the exporter and the graupel run.
# GT4PY_PYTHON is the command that runs such an interpreter (pyenv shims need PYENV_VERSION); empty if none.
GT4PY_VENV := .venv-gt4py
GT4PY_BIN := $(CURDIR)/$(GT4PY_VENV)/bin
GT4PY_STAMP := $(GT4PY_VENV)/.installed
GT4PY_PYTHON ?= $(shell for v in 3.13 3.12; do \
	  for pv in $$(pyenv versions --bare 2>/dev/null | grep -E "^$$v(\.|$$)" | sort -rV) ""; do \
	    if env $${pv:+PYENV_VERSION=$$pv} python$$v -c "import sys; sys.exit(sys.version_info < (3, 12))" 2>/dev/null; then \
	      echo "env $${pv:+PYENV_VERSION=$$pv} python$$v"; exit 0; fi; done; done)
NO_GT4PY_PYTHON := no Python >= 3.12 found (tried python3.13, python3.12, with PYENV_VERSION from pyenv versions --bare); set GT4PY_PYTHON=...

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[test]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/sdfg-scan demo

# mypy takes its files and options from [tool.mypy] in pyproject.toml
# mypy checks the package as installed: transformations/ is sdfg_scan.transformations (package-dir), so it
# runs on build/mypy/sdfg_scan, a link tree rebuilt here (sdfg_scan/* plus transformations/), and resolves
# sdfg_scan.transformations.* like Python does; files and options come from [tool.mypy] in pyproject.toml
MYPY_TREE := build/mypy/sdfg_scan
lint: $(STAMP)
	$(BIN)/ruff check sdfg_scan transformations tests samples benchmarks
	rm -rf $(MYPY_TREE) && mkdir -p $(MYPY_TREE)
	ln -s $(CURDIR)/sdfg_scan/* $(MYPY_TREE)/ && ln -s $(CURDIR)/transformations $(MYPY_TREE)/transformations
	$(BIN)/mypy

# the main suite (its tests/test_gt4py*.py skip without gt4py), then the gt4py tests in the gt4py venv
test: lint
	$(BIN)/python -m pytest -q -n 2 --dist loadfile -m "not long" --durations=15
	$(MAKE) test-gt4py

# not in CI: the whole-graupel checks (marker `long`: hooked and dynamic-domain graupel forms bitwise after
# optimize, graupel bitwise after one transformation, graupel's CUDA build) and CUDA builds CI covers with
# a twin; about 7 minutes on a 2-core VM (stop 44: 6:27, stop 45: 7:18, 21 passed)
test-long: $(STAMP)
	$(BIN)/python -m pytest -q -n 2 --dist loadfile -m long

$(GT4PY_STAMP): pyproject.toml
	@test -n "$(GT4PY_PYTHON)" || { echo "$(NO_GT4PY_PYTHON)"; exit 1; }
	$(GT4PY_PYTHON) -m venv $(GT4PY_VENV)
	$(GT4PY_BIN)/python -m pip install -q --upgrade pip
	$(GT4PY_BIN)/python -m pip install -q -e '.[test,gt4py]'
	touch $(GT4PY_STAMP)

# test_gt4py.py (the hooks' matrix) and test_gt4py_backend.py (the backend's other routes) are about even, so
# that --dist loadfile keeps both workers busy (stop 60: 3:39 against 5:57 as one module); pytest-xdist's
# loadgroup would split one module by xdist_group marks, but here (pytest 9.2, xdist 3.8) it did not group them
test-gt4py:
	@if [ -z "$(GT4PY_PYTHON)" ]; then echo "SKIPPED the gt4py tests: $(NO_GT4PY_PYTHON)"; else \
	  $(MAKE) $(GT4PY_STAMP) && $(GT4PY_BIN)/python -m pytest -q -n 2 --dist loadfile tests/test_gt4py*.py; fi

# regenerate the gt4py SDFG fixtures (the exporter's cache, used by the tests when ../shared is absent):
# all of them (about two hours, graupel's forms), or fixtures-small (minutes) and fixtures-graupel
fixtures: fixtures-small fixtures-graupel

fixtures-small: $(GT4PY_STAMP)
	PYTHONPATH=$(CURDIR) $(GT4PY_BIN)/sdfg-scan export tests.gt4py_programs.programs:cumsum_k=minimal_cumsum_k \
	  tests.gt4py_programs.programs:thomas_pair tests.gt4py_programs.programs:precip_gated
	-$(GT4PY_BIN)/python -m pip install -q --no-deps icon4py-common==0.4.1 icon4py-atmosphere-dycore==0.4.1 \
	  && $(GT4PY_BIN)/python -m pip install -q cattrs pyyaml \
	  && $(GT4PY_BIN)/sdfg-scan export \
	  icon4py.model.common.diagnostic_calculations.stencils.diagnose_pressure:diagnose_pressure \
	  icon4py.model.atmosphere.dycore.stencils.solve_tridiagonal_matrix_for_w_forward_sweep:solve_tridiagonal_matrix_for_w_forward_sweep \
	  icon4py.model.atmosphere.dycore.stencils.solve_tridiagonal_matrix_for_w_back_substitution:solve_tridiagonal_matrix_for_w_back_substitution

# about two hours on 2 cores: the graupel fixtures the tests read, into the exporter's cache:
# graupel_run_dyn (runtime domain; lowered, opt) and graupel_run (static 100 x 65 domain, as the shared
# set; lowered, opt, opt_hooks with icon4py's graupel hooks), bound as icon4py's graupel driver binds them
GRAUPEL_PROGRAM := icon4py.model.atmosphere.subgrid_scale_physics.muphys.implementations.graupel:graupel_run
GRAUPEL_STATIC := --static dt=30.0 --static qnc=100.0 --static enable_masking=True --static use_aes_graupel=False
fixtures-graupel: $(GT4PY_STAMP)
	$(GT4PY_BIN)/python -m pip install -q --no-deps icon4py-common==0.4.1 icon4py-atmosphere-muphys==0.4.1
	$(GT4PY_BIN)/python -m pip install -q cattrs pyyaml
	PYTHONPATH=$(CURDIR) $(GT4PY_BIN)/sdfg-scan export $(GRAUPEL_PROGRAM)=graupel_run_dyn $(GRAUPEL_STATIC) \
	  --variants lowered,opt
	PYTHONPATH=$(CURDIR) $(GT4PY_BIN)/sdfg-scan export $(GRAUPEL_PROGRAM)=graupel_run $(GRAUPEL_STATIC) \
	  --static horizontal_start=0 --static horizontal_end=100 --static vertical_start=0 --static vertical_end=65 \
	  --hooks tests.gt4py_programs.icon4py_hooks:graupel_hooks --variants lowered,opt,opt_hooks

# not in CI: icon4py's graupel through gt4py's DaCe CPU backend, stock / icon4py hooks / sdfg_scan hooks
# (GRAUPEL_PROGRAM=icon_graupel: the older microphysics package's graupel)
graupel: $(GT4PY_STAMP)
	$(GT4PY_BIN)/python -m pip install -q --no-deps icon4py-common==0.4.1 icon4py-atmosphere-muphys==0.4.1 \
	  icon4py-atmosphere-microphysics==0.4.1
	$(GT4PY_BIN)/python -m pip install -q cattrs pyyaml
	$(GT4PY_BIN)/python samples/graupel_gt4py.py

# not in CI: icon4py's dycore solve_w (the Thomas pair as icon4py composes it) stock vs sdfg_scan (minutes)
solve-w: $(GT4PY_STAMP)
	$(GT4PY_BIN)/python -m pip install -q --no-deps icon4py-common==0.4.1 icon4py-atmosphere-dycore==0.4.1
	$(GT4PY_BIN)/python -m pip install -q cattrs pyyaml
	$(GT4PY_BIN)/python samples/solve_w_gt4py.py

# not in CI: the randomised differential test of optimize with many random (not derandomised) examples;
# FUZZ_EXAMPLES=n to change the count; failures are shrunk and kept in .hypothesis/ (rerun replays them)
FUZZ_EXAMPLES ?= 300
fuzz: $(STAMP)
	SDFG_SCAN_FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) $(BIN)/python -m pytest -q -x -W ignore::UserWarning \
	  tests/test_optimize_random.py --hypothesis-show-statistics

# the benchmarks' numba and JAX peers (benchmarks/peers.py) come from the `bench` extra; demo/test stay lean
bench: $(STAMP)
	$(BIN)/python -m pip install -q -e '.[test,bench]'
	$(BIN)/python benchmarks/bench_scans.py
	$(BIN)/python benchmarks/bench_solvers.py
	$(BIN)/python benchmarks/bench_icon4py.py

clean:
	rm -rf $(VENV) $(GT4PY_VENV) .dacecache build *.egg-info

# not in CI: the GPU check on a CUDA machine without DaCe (the device tool's): DaCe and its pure-Python
# needs copied from .venv (no bytecode, no web viewer) into .devpkgs, which the call carries; then on
# that machine: bash benchmarks/gpu_device_run.sh (logs in $$OUT)
DEVPKGS := dace astunparse fparser ordered_set ply dill six.py
devpkgs: $(STAMP)
	rm -rf .devpkgs && mkdir .devpkgs
	sp=$$($(BIN)/python -c "import sysconfig; print(sysconfig.get_paths()['purelib'])") && \
	  for p in $(DEVPKGS); do cp -a $$sp/$$p .devpkgs/; done
	find .devpkgs -name __pycache__ -prune -exec rm -rf {} +
	rm -rf .devpkgs/dace/viewer/webclient

# on a machine with a CUDA GPU and DaCe importable (or .devpkgs beside): every GPU expansion checked and timed
gpu-check:
	bash benchmarks/gpu_device_run.sh

# the real icon4py programs on a GPU (graupel, the dycore pair): here, where the fixtures are, the GPU
# SDFGs, seeded inputs and CPU outputs go into .devdata (git-ignored); there, with .devpkgs and .devdata
# carried, `make gpu-icon4py` builds, checks and times them (benchmarks/gpu_icon4py.py)
gpu-icon4py-data: $(STAMP)
	$(BIN)/python benchmarks/gpu_icon4py.py prepare

gpu-icon4py:
	PYTHONPATH=$(CURDIR)/.devpkgs:$(CURDIR) python3 -W ignore benchmarks/gpu_icon4py.py run
