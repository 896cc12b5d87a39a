"""Speed of the tridiagonal solver nodes against the memory-bandwidth limit (issue 4).

At ``ncol x nlev`` (default 81920 x 90, float64), both layouts, in one run with the bandwidth probe:

- ``TridiagonalSolve`` ``thomas`` with the naive schedule (``block_size=1``: map over columns, k-loops
  inside, scratch c' a full field; what gt4py's two-scan formulation generates) as the baseline,
  ``auto``, and a few explicit block sizes; ``pcr``; the factor and the pre-factored solve;
- peers: NumPy (the reference arithmetic as a k-loop of in-place vector operations over all columns) and
  ``scipy.linalg.solve_banded`` per column (too slow for every column: a subset is timed and scaled
  to ``ncol``, marked ``scaled``); numba and JAX (``benchmarks/peers.py``, also for the reduction cases).

Bytes counted: every operand once (solve: a, b, c, d read + x written = 5 fields). The cases of the
reduction/window nodes (``benchmarks/bench_reduction_cases.py``, another module's ``cases()``) are
appended when that module exists. Run: ``python benchmarks/bench_solvers.py [ncol nlev]``.
"""

from __future__ import annotations

import importlib
import inspect
import sys
import time
from pathlib import Path

import dace
import numpy as np
import scipy.linalg

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import Row, bandwidth_probe, best_time, compiled_call, print_table  # noqa: E402
from benchmarks.peers import peer_rows  # noqa: E402
from sdfg_scan import reference  # noqa: E402
from sdfg_scan.harness import numpy_array, one_node_sdfg  # noqa: E402
from sdfg_scan.nodes import TridiagonalFactor, TridiagonalSolve  # noqa: E402

N, K = dace.symbol("N"), dace.symbol("K")
F64 = dace.float64
FIELD = ([N, K], F64, True)
BLOCKS = {"cell": (512, 4096), "k": (16, 128)}
SCIPY_SUBSET = 2048


def solve_sdfg(impl: str, layout: str, block: int = 0, prefactored: bool = False) -> dace.SDFG:
    node = TridiagonalSolve("tri", axis=1, block_size=block, prefactored=prefactored)
    node.implementation = impl
    ins = ("a", "w", "cp", "d") if prefactored else ("a", "b", "c", "d")
    name = f"bench_tri_{impl}_{layout}_{block}{'_pre' if prefactored else ''}"
    return one_node_sdfg(name, node, dict.fromkeys(ins, FIELD), {"x": FIELD}, 1, layout)


def factor_sdfg(layout: str) -> dace.SDFG:
    node = TridiagonalFactor("factor", axis=1)
    return one_node_sdfg(f"bench_tri_factor_{layout}", node, dict.fromkeys("abc", FIELD),
                         {"w": FIELD, "cp": FIELD}, 1, layout)


def thomas_numpy(a, b, c, d, x, cp) -> None:
    """NumPy peer: the reference arithmetic as a k-loop of in-place vector operations over all columns."""
    w = 1.0 / b[:, 0]
    np.multiply(c[:, 0], w, out=cp[:, 0])
    np.multiply(d[:, 0], w, out=x[:, 0])
    for k in range(1, d.shape[1]):
        w = 1.0 / (b[:, k] - a[:, k] * cp[:, k - 1])
        np.multiply(c[:, k], w, out=cp[:, k])
        np.multiply(d[:, k] - a[:, k] * x[:, k - 1], w, out=x[:, k])
    for k in range(d.shape[1] - 2, -1, -1):
        x[:, k] -= cp[:, k] * x[:, k + 1]


def scipy_per_column(a, b, c, d, x, count: int) -> None:
    ab = np.zeros((3, d.shape[1]))
    for i in range(count):
        ab[0, 1:], ab[1], ab[2, :-1] = c[i, :-1], b[i], a[i, 1:]
        x[i] = scipy.linalg.solve_banded((1, 1), ab, d[i], check_finite=False)


def solver_rows(ncol: int, nlev: int) -> list[Row]:
    rng = np.random.default_rng(0)
    field = ncol * nlev * 8
    rows: list[Row] = []
    a0, c0, d0 = (rng.standard_normal((ncol, nlev)) for _ in range(3))
    b0 = np.abs(a0) + np.abs(c0) + 1.0 + rng.random((ncol, nlev))
    want = reference.tridiagonal_solve(a0, b0, c0, d0, axis=1)
    for layout in ("k", "cell"):
        a, b, c, d = (numpy_array(v, 1, layout) for v in (a0, b0, c0, d0))
        x = numpy_array(np.zeros((ncol, nlev)), 1, layout)
        w, cp = (numpy_array(np.zeros((ncol, nlev)), 1, layout) for _ in range(2))
        base = None
        variants = [("thomas", 1, "thomas naive (Map->k-loop, block_size=1)"), ("auto", 0, "auto (thomas)")]
        variants += [("thomas", blk, f"thomas block_size={blk}") for blk in BLOCKS[layout]]
        variants += [("pcr", 0, "pcr")] if "pcr" in TridiagonalSolve.implementations else []
        for impl, block, label in variants:
            prog = solve_sdfg(impl, layout, block).compile()
            t = best_time(compiled_call(prog, a=a, b=b, c=c, d=d, x=x, N=ncol, K=nlev))
            base = base or t
            if impl != "pcr" and not np.array_equal(x, want):
                raise AssertionError(f"{label}/{layout}: result differs from the reference")
            rows.append(Row("tridiagonal solve", layout, label, t, 5 * field, base))
        prog = factor_sdfg(layout).compile()
        t = best_time(compiled_call(prog, a=a, b=b, c=c, w=w, cp=cp, N=ncol, K=nlev))
        rows.append(Row("tridiagonal factor", layout, "thomas (auto)", t, 5 * field, None))
        prog = solve_sdfg("auto", layout, 0, prefactored=True).compile()
        t = best_time(compiled_call(prog, a=a, w=w, cp=cp, d=d, x=x, N=ncol, K=nlev))
        if not np.array_equal(x, want):
            raise AssertionError(f"prefactored/{layout}: result differs from the reference")
        rows.append(Row("tridiagonal solve", layout, "prefactored: 2 sweeps (auto)", t, 5 * field, base))
        t = best_time(lambda: thomas_numpy(a, b, c, d, x, w))
        if not np.array_equal(x, want):
            raise AssertionError(f"numpy peer/{layout}: result differs from the reference")
        rows.append(Row("tridiagonal solve", layout, "numpy (k-loop of vector ops)", t, 5 * field, base))
        count = min(SCIPY_SUBSET, ncol)
        t0 = time.perf_counter()
        scipy_per_column(a, b, c, d, x, count)
        t = (time.perf_counter() - t0) * ncol / count
        rows.append(Row("tridiagonal solve", layout, f"scipy solve_banded per column (scaled from {count})",
                        t, 5 * field, base))
        rows += peer_rows("tridiagonal solve", layout, {"a": a, "b": b, "c": c, "d": d}, 5 * field, base)
    return rows


def reduction_rows(ncol: int, nlev: int) -> list[Row]:
    """The rows of ``benchmarks/bench_reduction_cases.py`` (owned by the reduction/window nodes), if present."""
    try:
        module = importlib.import_module("benchmarks.bench_reduction_cases")
    except ModuleNotFoundError as err:
        if err.name != "benchmarks.bench_reduction_cases":
            raise
        print("(benchmarks/bench_reduction_cases.py is absent: no reduction/window rows)")
        return []
    params = inspect.signature(module.cases).parameters
    kwargs = {k: v for k, v in {"ncol": ncol, "nlev": nlev}.items() if k in params}
    return with_reduction_peers(list(module.cases(**kwargs)), getattr(module, "LAYOUTS", {}), ncol, nlev)


def with_reduction_peers(rows: list[Row], layouts: dict, ncol: int, nlev: int) -> list[Row]:
    """``rows`` with the numba/JAX peer rows inserted after each (case, layout) group of the reduction module.

    The input is drawn like the module's (``standard_normal`` with seed 0, K axis ``layouts[layout][1]``);
    nbytes and the baseline are taken from the group's own rows.
    """
    out: list[Row] = []
    for i, row in enumerate(rows):
        out.append(row)
        last = i + 1 == len(rows) or (rows[i + 1].case, rows[i + 1].layout) != (row.case, row.layout)
        if not last or row.layout not in layouts or row.case not in ("window M=3", "column sum", "column argmin"):
            continue
        axis = layouts[row.layout][1]
        x = np.random.default_rng(0).standard_normal((nlev, ncol) if axis == 0 else (ncol, nlev))
        group = [r for r in rows if (r.case, r.layout) == (row.case, row.layout)]
        out += peer_rows(row.case, row.layout, {"x": x.T if axis == 0 else x}, group[0].nbytes, group[0].baseline)
    return out


def main(ncol: int = 81920, nlev: int = 90) -> list[Row]:
    probe = bandwidth_probe(ncol * nlev * 8)
    rows = solver_rows(ncol, nlev) + reduction_rows(ncol, nlev)
    print_table(rows, probe, f"solvers and reductions, float64, ncol={ncol}, nlev={nlev}")
    return rows


if __name__ == "__main__":
    main(*(int(v) for v in sys.argv[1:3]))
