"""Benchmark cases of ColumnReduce and WindowReduce (rows for ``benchmarks/bench_solvers.py``).

At ``ncol x nlev`` float64, both layouts: window M=3 (``out[k] = sum_{m=0..3} w[m] x[k-m]``),
column sum and column argmin; every expansion, the NumPy peer, and the naive Map -> k-loop schedule
(the ``sequential`` expansion: one column per map iteration). Bytes: x read once + output written.
Standalone: ``python benchmarks/bench_reduction_cases.py [ncol nlev]`` prints its own table with the probe.
"""

from __future__ import annotations

import sys
from pathlib import Path

import dace
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import sdfg_scan  # noqa: E402
from benchmarks.common import Row, bandwidth_probe, best_time, compiled_call, print_table  # noqa: E402

NC, NK = dace.symbol("NC"), dace.symbol("NK")
WEIGHTS, OFFSETS = [0.4, 0.3, 0.2, 0.1], [0, -1, -2, -3]
LAYOUTS = {"cell-contiguous": ([NK, NC], 0), "K-contiguous": ([NC, NK], 1)}


def reduction_sdfg(kind: str, op: str, impl: str, layout: str, prefix: str = "bench_red") -> dace.SDFG:
    """One ``WindowReduce`` (``kind="window"``) or ``ColumnReduce`` node on ``x`` -> ``y``, unexpanded."""
    shape, axis = LAYOUTS[layout]
    sdfg = dace.SDFG(f"{prefix}_{kind}_{op}_{impl}_{layout.split('-')[0]}")
    sdfg.add_array("x", shape, dace.float64)
    st = sdfg.add_state()
    if kind == "window":
        sdfg.add_array("y", shape, dace.float64)
        node = sdfg_scan.WindowReduce("w", WEIGHTS, OFFSETS, axis=axis)
    else:
        sdfg.add_array("y", [NC], dace.int64 if op == "argmin" else dace.float64)
        node = sdfg_scan.ColumnReduce("r", op=op, axis=axis)
    node.implementation = impl
    st.add_node(node)
    st.add_edge(st.add_read("x"), None, node, "_in", dace.Memlet.from_array("x", sdfg.arrays["x"]))
    st.add_edge(node, "_out", st.add_write("y"), None, dace.Memlet.from_array("y", sdfg.arrays["y"]))
    return sdfg


def _program(kind: str, op: str, impl: str, layout: str):
    sdfg = reduction_sdfg(kind, op, impl, layout)
    sdfg.expand_library_nodes()
    return sdfg.compile(), sdfg.arrays["y"].dtype.as_numpy_dtype()


def _numpy_window(x, axis):
    out = np.multiply(x, WEIGHTS[0])
    n = x.shape[axis]
    for w, o in zip(WEIGHTS[1:], OFFSETS[1:], strict=True):
        dst = [slice(None)] * 2
        src = [slice(None)] * 2
        dst[axis], src[axis] = slice(-o, n), slice(0, n + o)
        out[tuple(dst)] += w * x[tuple(src)]
    return out


def cases(ncol: int = 81920, nlev: int = 90) -> list[Row]:
    rows = []
    field = ncol * nlev * 8
    specs = [("window M=3", "window", "sum", ("direct", "kcached"), field),
             ("column sum", "reduce", "sum", ("blocked", "tree", "lanes"), ncol * 8),
             ("column argmin", "reduce", "argmin", ("blocked", "tree", "lanes", "kvector"), ncol * 8)]
    for layout, (_, axis) in LAYOUTS.items():
        x = np.random.default_rng(0).standard_normal((nlev, ncol) if axis == 0 else (ncol, nlev))
        for case, kind, op, impls, out_bytes in specs:
            nbytes = field + out_bytes
            base = None
            for impl in ("sequential",) + impls if kind == "reduce" else ("direct",) + impls[1:]:
                prog, odt = _program(kind, op, impl, layout)
                y = np.empty(x.shape if kind == "window" else ncol, dtype=odt)
                t = best_time(compiled_call(prog, x=x, y=y, NC=ncol, NK=nlev))
                label = {"sequential": "naive Map->k-loop (sequential)"}.get(impl, impl)
                if base is None:
                    base = t
                rows.append(Row(case, layout, label, t, nbytes, base))
            if kind == "window":
                peer = lambda: _numpy_window(x, axis)  # noqa: E731
            elif op == "sum":
                peer = lambda: np.sum(x, axis=axis)  # noqa: E731
            else:
                peer = lambda: np.argmin(x, axis=axis)  # noqa: E731
            rows.append(Row(case, layout, "numpy", best_time(peer), nbytes, base))
    return rows


def main(ncol: int = 81920, nlev: int = 90) -> list[Row]:
    probe = bandwidth_probe(ncol * nlev * 8)
    rows = cases(ncol, nlev)
    print_table(rows, probe, f"column reductions and windows, float64, ncol={ncol}, nlev={nlev}")
    return rows


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:3]))
