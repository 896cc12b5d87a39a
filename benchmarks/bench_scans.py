"""Speed of the scan nodes against the memory-bandwidth limit (issue: scan foundation).

For cumsum and the linear recurrence at ``ncol x nlev`` (default 81920 x 90, float64), both
layouts: every expansion, ``auto``, NumPy, numba and JAX (``benchmarks/peers.py``), and the naive
Map->k-loop schedule (which is what the ``sequential`` expansion and gt4py's scan lowering generate),
timed in one run together with the bandwidth probe. Run: ``python benchmarks/bench_scans.py [ncol nlev]``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import dace
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import sdfg_scan  # noqa: E402
from benchmarks.common import Row, bandwidth_probe, best_time, compiled_call, print_table  # noqa: E402
from benchmarks.peers import peer_rows  # noqa: E402
from sdfg_scan.harness import numpy_array, one_node_sdfg  # noqa: E402
from sdfg_scan.nodes import CumulativeScan, LinearRecurrence, Scan  # noqa: E402

N, K = dace.symbol("N"), dace.symbol("K")
F64 = dace.float64


def cumsum_sdfg(impl: str, layout: str) -> dace.SDFG:
    node = CumulativeScan("cumsum", op="sum", axis=1)
    node.implementation = impl
    return one_node_sdfg(f"bench_cumsum_{impl}_{layout}", node, {"_in": ([N, K], F64, True)},
                         {"_out": ([N, K], F64, True)}, 1, layout)


def linrec_sdfg(impl: str, layout: str) -> dace.SDFG:
    node = LinearRecurrence("linrec", axis=1)
    node.implementation = impl
    return one_node_sdfg(f"bench_linrec_{impl}_{layout}", node,
                         {"a": ([N, K], F64, True), "b": ([N, K], F64, True)}, {"_out": ([N, K], F64, True)}, 1,
                         layout)


def _linrec_body(c, x, k):
    (y,) = c
    y2 = x[0] * y + x[1]
    return (y2,), ()


def general_scan_sdfg(impl: str, layout: str) -> dace.SDFG:
    """The linear recurrence as a general ``sdfg_scan.scan`` body (a ``Scan`` node, not the fixed-op node)."""

    def prog(a, b, y0, out):
        out[:] = sdfg_scan.scan(_linrec_body, (y0,), (a, b), axis=1)

    # explicit annotations: this module uses postponed (string) annotations, which dace.program cannot read
    prog.__annotations__ = dict(a=F64[N, K], b=F64[N, K], y0=F64[N], out=F64[N, K])
    sdfg = dace.program(prog).to_sdfg(simplify=True)
    sdfg.name = f"bench_scan_{impl}_{layout}"
    if layout == "cell":
        for name in ("a", "b", "out"):
            sdfg.arrays[name].strides = (1, N)
    for n, _ in sdfg.all_nodes_recursive():
        if isinstance(n, Scan):
            n.implementation = impl
    return sdfg


def linrec_numpy(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> None:
    y = np.zeros(a.shape[0])
    for k in range(a.shape[1]):
        y = a[:, k] * y + b[:, k]
        out[:, k] = y


def main(ncol: int = 81920, nlev: int = 90) -> list[Row]:
    rng = np.random.default_rng(0)
    field = ncol * nlev * 8
    probe = bandwidth_probe(field)
    rows: list[Row] = []
    for layout in ("k", "cell"):
        x = numpy_array(rng.random((ncol, nlev)), 1, layout)
        a = numpy_array(rng.random((ncol, nlev)) * 0.5, 1, layout)
        out = numpy_array(np.zeros((ncol, nlev)), 1, layout)
        impls = ["sequential", "blocked", "auto"] if layout == "cell" else ["sequential", "auto"]
        base = None
        for impl in impls:
            prog = cumsum_sdfg(impl, layout).compile()
            t = best_time(compiled_call(prog, _in=x, _out=out, N=ncol, K=nlev))
            base = base or t
            label = "sequential (naive Map->k-loop)" if impl == "sequential" else impl
            rows.append(Row("cumsum", layout, label, t, 2 * field, base))
        rows.append(Row("cumsum", layout, "numpy", best_time(lambda: np.cumsum(x, axis=1, out=out)),
                        2 * field, base))
        rows += peer_rows("cumsum", layout, {"x": x}, 2 * field, base)
        base = None
        for impl in impls:
            prog = linrec_sdfg(impl, layout).compile()
            t = best_time(compiled_call(prog, a=a, b=x, _out=out, N=ncol, K=nlev))
            base = base or t
            label = "sequential (naive Map->k-loop)" if impl == "sequential" else impl
            rows.append(Row("linear recurrence", layout, label, t, 3 * field, base))
        rows.append(Row("linear recurrence", layout, "numpy (k-loop of vector ops)",
                        best_time(lambda: linrec_numpy(a, x, out)), 3 * field, base))
        rows += peer_rows("linear recurrence", layout, {"a": a, "b": x}, 3 * field, base)
        base = None
        y0 = np.zeros(ncol)
        for impl in ["sequential", "levels_outside", "auto"] if layout == "cell" else ["sequential", "auto"]:
            prog = general_scan_sdfg(impl, layout).compile()
            t = best_time(compiled_call(prog, a=a, b=x, y0=y0, out=out, N=ncol, K=nlev))
            base = base or t
            label = "sequential (naive Map->k-loop)" if impl == "sequential" else impl
            rows.append(Row("general scan (linear recurrence body)", layout, label, t, 3 * field, base))
    print_table(rows, probe, f"scans, float64, ncol={ncol}, nlev={nlev}")
    return rows


if __name__ == "__main__":
    main(*(int(v) for v in sys.argv[1:3]))
