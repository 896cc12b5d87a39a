"""Speed of the scan nodes against the memory-bandwidth limit (issue: scan foundation).

For cumsum and the linear recurrence at ``ncol x nlev`` (default 81920 x 90, float64), both
layouts: every expansion, ``auto``, NumPy, numba and JAX (``benchmarks/peers.py``), and the naive
Map->k-loop schedule (which is what the ``sequential`` expansion and gt4py's scan lowering generate),
timed in one run together with the bandwidth probe. Run: ``python benchmarks/bench_scans.py [ncol nlev]``.

Few long columns (``parallel_prefix`` against ``sequential``, 1 and 2 columns x ``nlev`` levels, each
with 1 and 2 OpenMP threads set through libgomp, outputs checked bitwise equal across the thread
counts; "vs sequential" is against ``sequential`` at the same thread count):
``python benchmarks/bench_scans.py long [nlev]`` (default 4M levels; cumsum, the linear recurrence, and
the same recurrence as ``associative_scan`` of affine pairs).

A windowed general scan (``y[k] = 0.5 y[k-1] + x[k] + x[k-1] + x[k-2] + x[k-3]``, the body reading
``x`` at offsets 0, -1, -2, -3), ``kcached`` against ``sequential`` in both layouts, outputs checked
bitwise equal: part of the main table, or alone with ``python benchmarks/bench_scans.py window [ncol nlev]``.

A compute-bound general scan over cell-contiguous ``[levels, cells]`` data whose body calls libm
(``y[k] = y[k-1] exp(-x[k]) + x[k] ** 0.7``, microphysics-like): ``sequential``, ``levels_outside``,
``blocked``, ``blocked_simd`` and ``auto`` under both floors, with the maximum relative difference to
``sequential`` (the exact rows must be 0): ``python benchmarks/bench_scans.py libm [ncol nlev]``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import dace
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import sdfg_scan  # noqa: E402
from benchmarks.common import Row, bandwidth_probe, best_time, compiled_call, print_table  # noqa: E402
from benchmarks.peers import peer_rows  # noqa: E402
from sdfg_scan.harness import numpy_array, one_node_sdfg  # noqa: E402
from sdfg_scan.nodes import AssociativeScan, CumulativeScan, LinearRecurrence, Scan  # noqa: E402

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


AFFINE = ["a0 * b0", "b0 * a1 + b1"]
"""The composition of affine maps ``y -> a*y + b`` (earlier ``a0, a1``, later ``b0, b1``): the linear
recurrence as ``sdfg_scan.associative_scan(lambda p, q: (p[0]*q[0], q[0]*p[1] + q[1]), (a, b))``."""


def assoc_sdfg(impl: str, layout: str) -> dace.SDFG:
    node = AssociativeScan("assoc", combine=AFFINE, axis=1)
    node.implementation = impl
    return one_node_sdfg(f"bench_assoc_{impl}_{layout}", node,
                         {"_in0": ([N, K], F64, True), "_in1": ([N, K], F64, True)},
                         {"_out0": ([N, K], F64, True), "_out1": ([N, K], F64, True)}, 1, layout)


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


def _window_body(c, x, k):
    (y,) = c
    y2 = y * 0.5 + x[0] + x[0, -1] + x[0, -2] + x[0, -3]
    return (y2,), ()


def window_scan_sdfg(impl: str, layout: str) -> dace.SDFG:
    """A general scan reading its input at level offsets 0, -1, -2, -3 (``kcached``'s case)."""

    def prog(x, y0, out):
        out[:] = sdfg_scan.scan(_window_body, (y0,), (x,), axis=1)

    prog.__annotations__ = dict(x=F64[N, K], y0=F64[N], out=F64[N, K])
    sdfg = dace.program(prog).to_sdfg(simplify=True)
    sdfg.name = f"bench_window_scan_{impl}_{layout}"
    if layout == "cell":
        for name in ("x", "out"):
            sdfg.arrays[name].strides = (1, N)
    for n, _ in sdfg.all_nodes_recursive():
        if isinstance(n, Scan):
            n.implementation = impl
    return sdfg


def window_rows(ncol: int = 81920, nlev: int = 90, layouts=("k", "cell")) -> list[Row]:
    """``sequential`` and ``kcached`` on the windowed scan; raises if their outputs differ in a bit."""
    rng = np.random.default_rng(0)
    field = ncol * nlev * 8
    rows: list[Row] = []
    for layout in layouts:
        x = numpy_array(rng.random((ncol, nlev)), 1, layout)
        y0 = np.zeros(ncol)
        base, first = None, None
        for impl in ("sequential", "kcached"):
            out = numpy_array(np.zeros((ncol, nlev)), 1, layout)
            prog = window_scan_sdfg(impl, layout).compile()
            t = best_time(compiled_call(prog, x=x, y0=y0, out=out, N=ncol, K=nlev))
            first = out.copy() if first is None else first
            if not np.array_equal(out.view(np.uint64), first.view(np.uint64)):
                raise AssertionError(f"windowed scan, {layout}: kcached differs from sequential")
            base = base or t
            rows.append(Row("general scan (window k-3..k)", layout, impl, t, 2 * field, base))
    return rows


def _libm_body(c, x, k):
    (y,) = c
    return (y * np.exp(-x[0]) + x[0] ** 0.7,), ()


def libm_scan_sdfg(impl: str, floor: str = "") -> dace.SDFG:
    """A frontend scan over ``[levels, cells]`` (cells unit-stride) whose body calls ``exp`` and ``pow``."""

    def prog(x, y0, out):
        out[:] = sdfg_scan.scan(_libm_body, (y0,), (x,), axis=0)

    prog.__annotations__ = dict(x=F64[K, N], y0=F64[N], out=F64[K, N])
    sdfg = dace.program(prog).to_sdfg(simplify=True)
    sdfg.name = f"bench_libm_scan_{impl}_{floor or 'pinned'}"
    for n, _ in sdfg.all_nodes_recursive():
        if isinstance(n, Scan):
            n.implementation = impl
            n.reproducibility = floor
    return sdfg


def libm_rows(ncol: int = 81920, nlev: int = 90) -> list[Row]:
    """Every CPU expansion of :func:`libm_scan_sdfg` on one input; raises if an exact one differs in a bit."""
    from sdfg_scan.choice import choose

    rng = np.random.default_rng(0)
    x, y0 = rng.random((nlev, ncol)), rng.random(ncol)
    field = ncol * nlev * 8
    rows: list[Row] = []
    base, first = None, None
    variants = [(impl, "") for impl in ("sequential", "levels_outside", "blocked", "blocked_simd")] + \
        [("auto", "exact"), ("auto", "replay")]
    for impl, floor in variants:
        sdfg = libm_scan_sdfg(impl, floor)
        label = impl
        if impl == "auto":
            node, state = next((n, st) for n, st in sdfg.all_nodes_recursive() if isinstance(n, Scan))
            label = f"auto ({floor}: {choose(node, state, floor=floor).implementation})"
        out = np.zeros((nlev, ncol))
        t = best_time(compiled_call(sdfg.compile(), x=x, y0=y0, out=out, N=ncol, K=nlev))
        first = out.copy() if first is None else first
        rel = float(np.max(np.abs(out - first) / np.abs(first)))
        if impl != "blocked_simd" and floor != "replay" and not np.array_equal(out.view(np.uint64),
                                                                              first.view(np.uint64)):
            raise AssertionError(f"libm scan: {label} (exact) differs from sequential")
        base = base or t
        rows.append(Row("general scan (exp, pow body)", "cell", f"{label} (rel {rel:.0e})", t, 2 * field, base))
    return rows


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
        for impl in ["sequential", "levels_outside", "blocked", "auto"] if layout == "cell" else ["sequential", "auto"]:
            prog = general_scan_sdfg(impl, layout).compile()
            t = best_time(compiled_call(prog, a=a, b=x, y0=y0, out=out, N=ncol, K=nlev))
            base = base or t
            label = "sequential (naive Map->k-loop)" if impl == "sequential" else impl
            rows.append(Row("general scan (linear recurrence body)", layout, label, t, 3 * field, base))
    rows += window_rows(ncol, nlev)
    rows += libm_rows(ncol, nlev)
    print_table(rows, probe, f"scans, float64, ncol={ncol}, nlev={nlev}")
    return rows


def _set_threads():
    """``omp_set_num_threads`` of the libgomp the compiled SDFGs share with this process."""
    import ctypes
    import ctypes.util

    gomp = ctypes.CDLL(ctypes.util.find_library("gomp") or "libgomp.so.1")
    return gomp.omp_set_num_threads


def long_columns(nlev: int = 4 * 2**20, repeats: int = 15) -> list[Row]:
    """``parallel_prefix`` vs ``sequential`` on 1 and 2 K-contiguous columns of ``nlev`` levels."""
    set_threads = _set_threads()
    rng = np.random.default_rng(0)
    probe = bandwidth_probe(2 * nlev * 8)
    rows: list[Row] = []
    builders = {"cumsum": cumsum_sdfg, "linrec": linrec_sdfg, "assoc": assoc_sdfg}
    names = {"cumsum": "cumsum", "linrec": "linear recurrence", "assoc": "associative_scan (affine)"}
    progs = {(kind, impl): builders[kind](impl, "k").compile()
             for kind in builders for impl in ("sequential", "parallel_prefix")}
    for ncol in (1, 2):
        x, a = rng.random((ncol, nlev)), rng.uniform(0.5, 1.0, (ncol, nlev))
        for kind in builders:
            ins = {"cumsum": {"_in": x}, "linrec": {"a": a, "b": x}, "assoc": {"_in0": a, "_in1": x}}[kind]
            # the affine scan also writes the products of a (its first output)
            extra = {"_out0": np.zeros((ncol, nlev))} if kind == "assoc" else {}
            out_name = "_out1" if kind == "assoc" else "_out"
            field = ncol * nlev * 8
            nbytes = (len(ins) + 1 + len(extra)) * field
            seq_out, bits = None, {}
            base: dict[int, float] = {}   # sequential at the same thread count
            for impl in ("sequential", "parallel_prefix"):
                for threads in (1, 2):
                    set_threads(threads)
                    out = np.zeros((ncol, nlev))
                    t = best_time(compiled_call(progs[kind, impl], **ins, **extra, **{out_name: out}, N=ncol, K=nlev),
                                  repeats)
                    base.setdefault(threads, t)
                    if impl == "sequential":
                        seq_out = out.copy()
                    else:
                        bits[threads] = out.copy()
                    rel = float(np.max(np.abs(out - seq_out) / np.abs(seq_out)))
                    rows.append(Row(f"{names[kind]} {ncol} x {nlev}",
                                    "k", f"{impl}, {threads} thread{'s' if threads > 1 else ''} (rel {rel:.0e})",
                                    t, nbytes, base[threads]))
            same = np.array_equal(bits[1].view(np.uint64), bits[2].view(np.uint64))
            print(f"{kind} {ncol} x {nlev}: parallel_prefix bitwise identical for 1 and 2 threads: {same}")
    set_threads(int(os.environ.get("OMP_NUM_THREADS") or os.cpu_count() or 1))
    print_table(rows, probe, f"few long columns, float64, nlev={nlev} (time: best of {repeats})")
    return rows


if __name__ == "__main__":
    if sys.argv[1:2] == ["long"]:
        long_columns(*(int(v) for v in sys.argv[2:3]))
    elif sys.argv[1:2] in (["libm"], ["window"]):
        ncol, nlev = ([int(v) for v in sys.argv[2:4]] + [81920, 90])[:2] if sys.argv[3:4] else (81920, 90)
        rows_of, what = {"libm": (libm_rows, "general scan calling libm"),
                         "window": (window_rows, "windowed general scan")}[sys.argv[1]]
        print_table(rows_of(ncol, nlev), bandwidth_probe(2 * 8 * ncol * nlev), f"{what}, float64, ncol={ncol}, nlev={nlev}")
    else:
        main(*(int(v) for v in sys.argv[1:3]))
