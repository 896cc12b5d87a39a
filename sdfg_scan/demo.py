"""``sdfg-scan demo``: build, compile and verify the samples, and print a table.

A sample module (``samples/*.py``) provides ``TITLE``, ``IMPLEMENTATIONS``, ``build(impl) -> SDFG``,
``inputs(rng) -> dict`` (call arguments, sizes included) and ``expected(args) -> dict`` (the NumPy
reference of each output); ``BITWISE_VS_NUMPY = False`` where the sample calls ``exp``/``sqrt``-like
functions, whose NumPy implementations round differently from the C library's. Each implementation is compiled, run, compared bitwise (``exact``) or
with a tolerance (other classes), and timed.
"""

from __future__ import annotations

import importlib.util
import sys
import time
from pathlib import Path
from types import ModuleType

import numpy as np

SAMPLES_DIR = Path(__file__).resolve().parents[1] / "samples"
DEMO_SAMPLES = ["cumsum_column", "linear_recurrence", "diagnose_pressure", "diagnose_pressure_scan"]


def load_sample(name: str) -> ModuleType:
    path = SAMPLES_DIR / f"{name}.py"
    if not path.is_file():
        raise FileNotFoundError(f"sdfg-scan demo: sample '{name}' not found at {path}; the demo runs from a "
                                "checkout of the repository (pip install -e .)")
    spec = importlib.util.spec_from_file_location(f"sdfg_scan_sample_{name}", path)
    assert spec is not None and spec.loader is not None  # a .py file always has a source loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _equal(got: np.ndarray, want: np.ndarray, exact: bool) -> bool:
    if exact:
        return got.shape == want.shape and np.array_equal(got, want, equal_nan=True)
    return bool(np.allclose(got, want, rtol=1e-10, atol=1e-12, equal_nan=True))


def progress(message: str) -> None:
    """One line on stderr per step of a long run (the table on stdout stays clean)."""
    print(f"sdfg-scan demo: {message}", file=sys.stderr, flush=True)


def run_sample(sample: ModuleType, out=sys.stdout) -> bool:
    """Compile, run and check every implementation of ``sample``; print one row each."""
    rng = np.random.default_rng(0)
    args = sample.inputs(rng)
    want = sample.expected(args)
    ok = True
    for impl in sample.IMPLEMENTATIONS:
        progress(f"{sample.TITLE} [{impl}]: building and compiling ...")
        sdfg = sample.build(impl)
        node = next(n for n, _ in sdfg.all_nodes_recursive() if hasattr(n, "implementations"))
        exp = type(node).implementations[impl]
        t0 = time.perf_counter()
        prog = sdfg.compile()
        compile_s = time.perf_counter() - t0
        progress(f"{sample.TITLE} [{impl}]: compiled in {compile_s:.1f} s; running and checking ...")
        call = {k: (v.copy(order="K") if isinstance(v, np.ndarray) else v) for k, v in args.items()}
        prog(**call)
        run_ms = float("inf")
        for _ in range(5):  # best of 5: the first calls of an OpenMP program on a busy machine stall
            t0 = time.perf_counter()
            prog(**call)
            run_ms = min(run_ms, (time.perf_counter() - t0) * 1e3)
        # bitwise unless the sample calls transcendental functions (NumPy's exp is not libm's)
        exact = exp.reproducibility == "exact" and getattr(sample, "BITWISE_VS_NUMPY", True)
        good = all(_equal(call[k], v, exact) for k, v in want.items())
        ok &= good
        check = ("bitwise equal" if exact else "allclose") if good else "MISMATCH"
        print(f"| {sample.TITLE} | `{impl}` | {exp.reproducibility} | {check} | {compile_s:.1f} | {run_ms:.2f} |",
              file=out)
    return ok


def main(names: list[str] | None = None) -> int:
    print("| sample | expansion | class | check vs NumPy | compile s | run ms |")
    print("|---|---|---|---|---:|---:|")
    ok = True
    for name in names or DEMO_SAMPLES:
        ok &= run_sample(load_sample(name))
    print("\nall checks passed" if ok else "\nSOME CHECKS FAILED")
    return 0 if ok else 1


__all__ = ["DEMO_SAMPLES", "load_sample", "main", "progress", "run_sample"]
