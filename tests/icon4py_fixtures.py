"""Test helper for the real gt4py/icon4py SDFGs in ``../shared/fixtures/icon4py``.

Loads a fixture (``../shared/fixtures/icon4py``, else the exporter's cache that ``make fixtures``
fills), builds seeded inputs in physical ranges in gt4py's calling convention
(:func:`sdfg_scan.gt4py_args.gt4py_arguments`, with the per-program settings below), compiles an SDFG
once per session (module-level cache keyed by a caller-given key), runs it and compares outputs bitwise
(NaNs by position). A test whose fixture is absent skips naming the command that produces it.

Both the original and the transformed SDFG are compiled with the same host flags: DaCe's defaults
plus :class:`sdfg_scan.expansions.environments.ExactArithmetic`'s flags (no FP contraction, no
reciprocal math), so that "bitwise equal" compares the transformation, not compiler flag choices.
"""

from __future__ import annotations

import copy
import fcntl
import hashlib
import json
import os
import sys
import tempfile
from pathlib import Path

import dace
import numpy as np
import pytest

from sdfg_scan.expansions.environments import ExactArithmetic
from sdfg_scan.export import find_fixture
from sdfg_scan.harness import copy_arguments, load_or_compile

SHARED = Path(__file__).resolve().parents[1].parent / "shared"
FIXTURES = SHARED / "fixtures" / "icon4py"
if not FIXTURES.is_dir():  # fall back to the exporter's cache (`make fixtures`, sdfg_scan.export)
    from sdfg_scan.export import fixture_dir as _cache

    FIXTURES = _cache()
SKIP_REASON = (f"the icon4py SDFG fixtures are absent (expected {FIXTURES}); produce them with "
               "`make fixtures` (sdfg-scan export MODULE:PROGRAM, gt4py venv)")


def _graupel_values(rng, name: str, shape: tuple) -> np.ndarray:
    """graupel's fields in physical ranges; most points hold some hydrometeor (the branches run)."""
    ranges = {"te": (230.0, 300.0), "t_out": (230.0, 300.0), "p": (2.0e4, 1.0e5), "rho": (0.3, 1.2),
              "dz": (50.0, 500.0), "q_in_0": (1.0e-4, 1.5e-2), "q_out_0": (1.0e-4, 1.5e-2)}
    if name in ranges:
        return rng.uniform(*ranges[name], shape)
    if name.startswith(("q_in_", "q_out_")):
        return np.where(rng.random(shape) < 0.3, 0.0, rng.uniform(0.0, 2.0e-3, shape))
    return np.zeros(shape)


def _pressure_values(rng, name: str, shape: tuple) -> np.ndarray:
    ranges = {"virtual_temperature": (250.0, 300.0), "surface_pressure": (9.0e4, 1.0e5),
              "ddqz_z_full": (50.0, 400.0)}
    return rng.uniform(*ranges[name], shape) if name in ranges else np.zeros(shape)


_GRAUPEL = dict(values=_graupel_values, scalars={"dt": 30.0, "qnc": 100.0, "enable_masking": True,
                                                 "use_aes_graupel": False},
                aliases={**{f"q_out_{i}": f"q_in_{i}" for i in range(6)}, "t_out": "te"})
# program -> gt4py_arguments settings (values, aliases as icon4py's drivers set them, half-level fields)
PROGRAMS: dict[str, dict] = {
    "graupel_run": _GRAUPEL, "graupel_run_dyn": _GRAUPEL,
    "diagnose_pressure": dict(values=_pressure_values),
    "solve_tridiagonal_matrix_for_w_forward_sweep": dict(vertical_start=1, scalars={"dtime": 8.0, "cpd": 7.0},
                                                         extra_levels={"z_alpha": 1, "z_w_expl": 1}),
    "solve_tridiagonal_matrix_for_w_back_substitution": dict(vertical_start=1),
}

NCELLS, NLEV, SEED = 23, 65, 42

# every (program, form) file stem; "lowered graupel" is lift+validate only (compiling it takes ~500 s)
FORMS = [
    "minimal_cumsum_k.lowered", "minimal_cumsum_k.opt",
    "diagnose_pressure.lowered", "diagnose_pressure.opt",
    "solve_tridiagonal_matrix_for_w_forward_sweep.lowered", "solve_tridiagonal_matrix_for_w_forward_sweep.opt",
    "solve_tridiagonal_matrix_for_w_back_substitution.lowered",
    "solve_tridiagonal_matrix_for_w_back_substitution.opt",
    "graupel_run.lowered", "graupel_run.opt_nohooks", "graupel_run.opt_hooks",
    "graupel_run_dyn.lowered", "graupel_run_dyn.opt_nohooks",
]
SLOW = {"graupel_run.opt_nohooks", "graupel_run.opt_hooks", "graupel_run_dyn.opt_nohooks"}
NO_COMPILE = {"graupel_run.lowered", "graupel_run_dyn.lowered"}

_LOADED: dict[str, dace.SDFG] = {}
_COMPILED: dict[str, object] = {}
_BY_DIGEST: dict[str, object] = {}
# shared by the pytest-xdist workers of one run: conftest.py sets the variable before they start
_BUILD = Path(os.environ.get("SDFG_SCAN_FIXTURE_BUILDS") or tempfile.mkdtemp(prefix="sdfg_scan_fixtures_"))


_OVERRIDES: dict[str, Path] = {}


def override(form: str, path: str | Path) -> None:
    """Serve ``form`` from the SDFG file ``path`` from now on (``bench_icon4py.py --graupel-sdfg``: another
    program with graupel's arguments, such as icon4py's ``muphys_run`` from gt4py's build cache)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"icon4py_fixtures.override: no SDFG file {path} for '{form}'")
    _OVERRIDES[form] = path
    _LOADED.pop(form, None)


def available(form: str | None = None) -> bool:
    """Whether the fixtures (or the one of ``form``) are there."""
    if form in _OVERRIDES:
        return True
    return FIXTURES.is_dir() and (form is None or _find(form) is not None)


def require(form: str | None = None) -> None:
    if not available(form):
        if form is not None and FIXTURES.is_dir():
            target = "make fixtures-graupel" if form.startswith("graupel_run") else "make fixtures"
            pytest.skip(f"the fixture '{form}' is absent from {FIXTURES}; produce it with `{target}` "
                        "(sdfg-scan export MODULE:PROGRAM, gt4py venv)")
        pytest.skip(SKIP_REASON)


def _find(form: str) -> Path | None:
    if form in _OVERRIDES:
        return _OVERRIDES[form]
    return find_fixture(form, roots=[FIXTURES])   # X.opt_nohooks is the exporter's X.opt


def path_of(form: str) -> Path:
    p = _find(form)
    if p is None:
        raise FileNotFoundError(f"no fixture file for '{form}' in {FIXTURES}")
    return p


def load(form: str) -> dace.SDFG:
    """A fresh deep copy of the fixture SDFG (the file is parsed once per session)."""
    require(form)
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 20000))
    if form not in _LOADED:
        _LOADED[form] = dace.SDFG.from_file(str(path_of(form)))
    return copy.deepcopy(_LOADED[form])


def inputs(form: str, sdfg: dace.SDFG | None = None, ncells: int = NCELLS, nlev: int = NLEV, seed: int = SEED):
    """Seeded keyword arguments for ``form`` (aliased in/out buffers as the icon4py driver sets them)."""
    from sdfg_scan.gt4py_args import gt4py_arguments

    sdfg = sdfg or load(form)
    cfg = PROGRAMS.get(form.split(".")[0], {})
    static = form.startswith(("diagnose_pressure", "graupel_run."))
    return gt4py_arguments(sdfg, 100 if static else ncells, 65 if static else nlev, seed, **cfg)


def fresh(kw: dict) -> dict:
    """Copies of the arrays in ``kw`` (aliased arrays stay aliased)."""
    return copy_arguments(kw)


def outputs_of(compiled: dict, kw: dict) -> dict:
    """``{name: {array: values}}``: each compiled SDFG of ``compiled`` called once on fresh copies of ``kw``."""
    outs = {}
    for name, c in compiled.items():
        a = fresh(kw)
        c(**a)
        outs[name] = {n: v for n, v in a.items() if isinstance(v, np.ndarray)}
    return outs


def compile_once(key: str, sdfg: dace.SDFG):
    """Compile ``sdfg`` once per test run under ``key`` (same exact host flags for every SDFG).

    Builds are keyed by the SDFG's content: the same SDFG compiled by several test modules, in this
    process or in another pytest-xdist worker of the same run (they share ``_BUILD``, see
    ``tests/conftest.py``), is compiled once and loaded from the shared build folder after that.
    """
    if key not in _COMPILED:
        sdfg = copy.deepcopy(sdfg)
        digest = hashlib.sha1(json.dumps(sdfg.to_json(), sort_keys=True, default=str).encode()).hexdigest()[:20]
        if digest not in _BY_DIGEST:
            sdfg.name = f"fx_{digest}"
            sdfg.build_folder = str(_BUILD / sdfg.name)
            args = dace.Config.get("compiler", "cpu", "args") + " " + " ".join(ExactArithmetic.cmake_compile_flags)
            with open(_BUILD / f"{sdfg.name}.lock", "w") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)  # another worker may be building the same SDFG
                with dace.config.set_temporary("compiler", "cpu", "args", value=args):
                    _BY_DIGEST[digest] = load_or_compile(sdfg)   # not use_cache: see load_or_compile
        _COMPILED[key] = _BY_DIGEST[digest]
    return _COMPILED[key]


def run(key: str, sdfg: dace.SDFG, kw: dict) -> dict[str, np.ndarray]:
    """Run the compiled ``sdfg`` on copies of ``kw``; return every array argument afterwards."""
    csdfg = compile_once(key, sdfg)
    args = fresh(kw)
    csdfg(**args)
    return {k: v for k, v in args.items() if isinstance(v, np.ndarray)}


def assert_bitwise_equal(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> None:
    """Every output equal bit for bit; NaNs must sit at the same positions."""
    assert set(a) == set(b), (sorted(a), sorted(b))
    for k in sorted(a):
        x, y = a[k], b[k]
        if x.dtype.kind == "f":
            assert np.array_equal(np.isnan(x), np.isnan(y)), f"'{k}': NaN positions differ"
            assert np.array_equal(x, y, equal_nan=True), f"'{k}': max abs diff {np.nanmax(np.abs(x - y))}"
        else:
            assert np.array_equal(x, y), f"'{k}': {int(np.sum(x != y))} elements differ"
