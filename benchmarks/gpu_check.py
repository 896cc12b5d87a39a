#!/usr/bin/env python
"""The GPU check: numerics and speed of every GPU expansion, in one short run on a CUDA machine.

For each case (cumsum, linear recurrence, associative scan, tridiagonal solve, tridiagonal factor,
prefactored solve, column sum, column argmin, window M=3, and a general ``Scan`` reading its input at
levels k-3..k, lowered by the frontend) x layout (K-contiguous, cell-contiguous) x GPU expansion, an
SDFG with its arrays in GPU global memory is built after ``apply_gpu_transformations()`` with the exact
nvcc flags (``sdfg_scan.select.exact_cuda_flags``), compiled, run on cupy arrays and compared with
``sdfg_scan.reference``:

- ``exact`` expansions: every output bitwise equal to the reference (NaN positions aside, there are
  none here);
- ``replay`` expansions: within 1e-12 relative of the reference, and bitwise equal to themselves
  over a second run (the replay promise); ``parallel_prefix`` bitwise equal to its pinned chunked
  reference (``order="chunked"``, the CPU expansion's bits), which the nvcc flags make possible.

Then each is timed (best of ``--repeats`` device-synchronised calls through ``fast_call``) and
reported as GB/s and as a fraction of a device copy probe (``cupy.copyto`` over a field).

Usage::

    python benchmarks/gpu_check.py [--ncol 327680] [--nlev 90] [--repeats 20] [--build-only]
                                   [--only "column sum,window M=3"] [--layouts k,cell] [--chunk C]
                                   [--prefix-schedules] [--jobs J]

Few long columns (``parallel_prefix`` against ``sequential``)::

    python benchmarks/gpu_check.py --ncol 2 --nlev 4194304 --only "cumsum,linear recurrence" --layouts k --chunk 1024

Each GPU schedule of ``parallel_prefix`` (warp per column, block per column, three kernels: chosen at
run time from the sizes), at the sizes of :data:`PREFIX_SCHEDULES`, for cumsum, linear recurrence
and associative scan::

    python benchmarks/gpu_check.py --prefix-schedules [--layouts k]

``--build-only`` compiles every SDFG (nvcc + host) and stops: it needs nvcc, not a GPU or cupy,
and is what the test suite runs where nvcc exists. ``--jobs J`` first builds every SDFG of the run in
J processes (each build is one nvcc + host compile of about 20 s), then loads them
(``sdfg_scan.harness.load_or_compile``; ``--reuse`` alone loads what an earlier run built): on a 16-core
GPU machine the 44 builds of the default run take a minute instead of fifteen. Exit status 1
if any check fails.
"""

from __future__ import annotations

import argparse
import multiprocessing
import re
import sys
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import dace
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import sdfg_scan  # noqa: E402
from sdfg_scan import reference as R  # noqa: E402
from sdfg_scan.harness import load_or_compile, numpy_array, one_node_sdfg  # noqa: E402
from sdfg_scan.nodes import (  # noqa: E402
    AssociativeScan,
    ColumnReduce,
    CumulativeScan,
    LinearRecurrence,
    TridiagonalFactor,
    TridiagonalSolve,
    WindowReduce,
)
from sdfg_scan.nodes.scan import Scan  # noqa: E402
from sdfg_scan.select import exact_cuda_flags  # noqa: E402

N, K = dace.symbol("N"), dace.symbol("K")
F64 = dace.float64
FIELD = ([N, K], F64, True)
WEIGHTS, OFFSETS = [0.4, 0.3, 0.2, 0.1], [0, -1, -2, -3]
AFFINE = ["a0 * b0", "b0 * a1 + b1"]   # composition of affine maps (earlier a, later b), as LinearRecurrence's


PREFIX_SCHEDULES = [
    ("warp per column", 327680, 90, 8),        # 12 chunks per column: a warp per column
    ("block per column", 2, 1048576, 4096),    # 256 chunks: a block of 256 threads per column
    ("three kernels", 2, 1048576, 256),        # 4096 chunks of 2 columns: a thread per (column, chunk)
]
"""``--prefix-schedules``: (schedule, columns, levels, chunk_size), sizes at which ``parallel_prefix``
takes each of its GPU schedules (``sdfg_scan/expansions/parallel_prefix.py``, chosen at run time)."""


@dataclass
class Case:
    """One node (or frontend program) checked on the GPU.

    ``make(impl, layout, chunk) -> (sdfg, node)`` builds it on the host (before the GPU transformation);
    ``inputs``/``outputs``: name -> has the level axis (outputs: and the numpy dtype);
    ``draw(rng, ncol, nlev)`` the input values; ``ref(raw, node)`` -> {output: wanted values};
    ``fields``: the [N, K] fields a call moves (for GB/s)."""
    name: str
    make: Callable
    impls: tuple
    inputs: dict
    outputs: dict
    draw: Callable
    ref: Callable
    fields: int


def _one_node(factory, inputs, outputs):
    def make(name, impl, layout, chunk):
        node = factory()
        node.implementation = impl
        if chunk and impl == "parallel_prefix":
            node.chunk_size = chunk
        return one_node_sdfg(name, node, inputs, outputs, 1, layout), node
    return make


def back3(c, x, k):
    """The windowed-scan regime: input 0 at levels k-3 .. k, input 1 at k (``kcached`` keeps a ring)."""
    (s,) = c
    s2 = s * 0.5 + x[0] + x[0, -1] * 1.5 - x[0, -2] + x[0, -3] * x[1]
    return (s2,), (x[0, -1] - x[0, -3],)


def _scan_program(name, impl, layout, chunk):
    def prog(a, b, y0, out, ys):
        r, ry = sdfg_scan.scan(back3, (y0,), (a, b), axis=1, fill=-2.5)
        out[:] = r
        ys[:] = ry

    prog.__annotations__ = dict(a=F64[N, K], b=F64[N, K], y0=F64[N], out=F64[N, K], ys=F64[N, K])
    sdfg = dace.program(prog).to_sdfg(simplify=True)
    sdfg.name = name
    if layout == "cell":
        for arr in ("a", "b", "out", "ys"):
            sdfg.arrays[arr].strides = (1, N)
    (node,) = [n for n, _ in sdfg.all_nodes_recursive() if isinstance(n, Scan)]
    node.implementation = impl
    return sdfg, node


def _diag_dominant(rng, shape):
    return {"a": rng.uniform(-1, 1, shape), "b": 4.0 + rng.uniform(0, 1, shape), "c": rng.uniform(-1, 1, shape),
            "d": rng.uniform(-1, 1, shape)}


def _prefactored_inputs(rng, shape):
    m = _diag_dominant(rng, shape)
    w, cp = R.tridiagonal_factor(m["a"], m["b"], m["c"], axis=1)
    return {"a": m["a"], "w": w, "cp": cp, "d": m["d"]}


def _normal(*names):
    return lambda rng, ncol, nlev: {n: rng.standard_normal((ncol, nlev)) for n in names}


def _cases() -> list[Case]:
    f64, i64 = np.float64, np.int64
    field, col = {"_out": (True, f64)}, {"_out": (False, f64)}
    tri = {c: FIELD for c in "abcd"}
    return [
        Case("cumsum", _one_node(lambda: CumulativeScan("cs", op="sum", axis=1), {"_in": FIELD}, {"_out": FIELD}),
             ("sequential", "parallel_prefix"), {"_in": True}, field, _normal("_in"),
             lambda i, n: {"_out": R.cumulative(i["_in"], "sum", axis=1, **_order(n))}, 2),
        Case("linear recurrence",
             _one_node(lambda: LinearRecurrence("lr", axis=1), {"a": FIELD, "b": FIELD}, {"_out": FIELD}),
             ("sequential", "parallel_prefix"), {"a": True, "b": True}, field,
             lambda rng, ncol, nlev: {"a": rng.uniform(0, 0.9, (ncol, nlev)), "b": rng.uniform(-1, 1, (ncol, nlev))},
             lambda i, n: {"_out": R.linear_recurrence(i["a"], i["b"], axis=1, **_order(n))}, 3),
        Case("associative scan",
             _one_node(lambda: AssociativeScan("as", AFFINE, axis=1), {"_in0": FIELD, "_in1": FIELD},
                       {"_out0": FIELD, "_out1": FIELD}),
             ("sequential", "parallel_prefix"), {"_in0": True, "_in1": True},
             {"_out0": (True, f64), "_out1": (True, f64)},
             lambda rng, ncol, nlev: {"_in0": rng.uniform(0, 0.9, (ncol, nlev)),
                                      "_in1": rng.uniform(-1, 1, (ncol, nlev))},
             _assoc_ref, 4),
        Case("tridiagonal solve", _one_node(lambda: TridiagonalSolve("tri", axis=1), tri, {"x": FIELD}),
             ("thomas", "pcr", "cusparse"), dict.fromkeys("abcd", True), {"x": (True, f64)},
             lambda rng, ncol, nlev: _diag_dominant(rng, (ncol, nlev)),
             lambda i, n: {"x": R.tridiagonal_solve(i["a"], i["b"], i["c"], i["d"], axis=1)}, 5),
        Case("tridiagonal factor",
             _one_node(lambda: TridiagonalFactor("trf", axis=1), {c: FIELD for c in "abc"},
                       {"w": FIELD, "cp": FIELD}),
             ("thomas",), dict.fromkeys("abc", True), {"w": (True, f64), "cp": (True, f64)},
             lambda rng, ncol, nlev: _diag_dominant(rng, (ncol, nlev)),
             lambda i, n: dict(zip(("w", "cp"), R.tridiagonal_factor(i["a"], i["b"], i["c"], axis=1), strict=True)),
             5),
        Case("prefactored solve",
             _one_node(lambda: TridiagonalSolve("trp", axis=1, prefactored=True),
                       {c: FIELD for c in ("a", "w", "cp", "d")}, {"x": FIELD}),
             ("thomas",), dict.fromkeys(("a", "w", "cp", "d"), True), {"x": (True, f64)},
             lambda rng, ncol, nlev: _prefactored_inputs(rng, (ncol, nlev)),
             lambda i, n: {"x": R.tridiagonal_solve_prefactored(i["a"], i["w"], i["cp"], i["d"], axis=1)}, 5),
        Case("column sum", _one_node(lambda: ColumnReduce("rs", op="sum", axis=1), {"_in": FIELD},
                                     {"_out": ([N], F64, False)}),
             ("sequential", "tree", "lanes"), {"_in": True}, col, _normal("_in"), _reduce_ref("sum"), 1),
        Case("column argmin", _one_node(lambda: ColumnReduce("ra", op="argmin", axis=1), {"_in": FIELD},
                                        {"_out": ([N], dace.int64, False)}),
             ("sequential", "tree", "kvector", "lanes"), {"_in": True}, {"_out": (False, i64)}, _normal("_in"),
             _reduce_ref("argmin"), 1),
        Case("window M=3", _one_node(lambda: WindowReduce("w", WEIGHTS, OFFSETS, axis=1), {"_in": FIELD},
                                     {"_out": FIELD}),
             ("direct", "kcached"), {"_in": True}, field, _normal("_in"),
             lambda i, n: {"_out": R.window_reduce(i["_in"], WEIGHTS, OFFSETS, axis=1)}, 2),
        Case("scan k-3..k", _scan_program, ("sequential", "kcached"), {"a": True, "b": True, "y0": False},
             {"out": (True, f64), "ys": (True, f64)},
             lambda rng, ncol, nlev: {"a": rng.standard_normal((ncol, nlev)), "b": rng.standard_normal((ncol, nlev)),
                                      "y0": rng.standard_normal(ncol)},
             _scan_ref, 4),
    ]


def _order(node) -> dict:
    """The reference order of ``node``'s implementation: ``parallel_prefix`` pins the chunked one."""
    if node.implementation == "parallel_prefix":
        return {"order": "chunked", "chunk": node.chunk_size}
    return {}


def _assoc_ref(ins, node):
    def fn(e, la):   # the AFFINE expressions, operation for operation
        return e[0] * la[0], la[0] * e[1] + la[1]
    out = R.associative_scan(fn, (ins["_in0"], ins["_in1"]), axis=1, **_order(node))
    return {"_out0": out[0], "_out1": out[1]}


def _scan_ref(ins, node):
    (c,), (y,), _ = R.scan(back3, (ins["y0"],), {0: ins["a"], 1: ins["b"]}, axis=1, fill=-2.5)
    return {"out": c, "ys": y}


def _reduce_ref(op):
    def ref(ins, node):
        order = {"tree": "tree", "lanes": "lanes"}.get(node.implementation, "sequential")
        return {"_out": R.column_reduce(ins["_in"], op, axis=1, order=order, lanes=node.lanes)}
    return ref


def _name(case: Case, impl, layout, chunk) -> str:
    tag = f"_c{chunk}" if chunk and impl == "parallel_prefix" else ""   # one build folder per chunk size
    return f"gpu_check_{re.sub('[^A-Za-z0-9]+', '_', case.name)}_{impl}_{layout}{tag}"


def build(case: Case, impl, layout, build_only, chunk=0, reuse=False):
    sdfg, node = case.make(_name(case, impl, layout, chunk), impl, layout, chunk)
    for desc in sdfg.arrays.values():
        if not desc.transient:   # device arrays in, device arrays out: no PCIe copies timed
            desc.storage = dace.StorageType.GPU_Global
    sdfg.apply_gpu_transformations()
    if build_only:
        sdfg.compile(return_program_handle=False)
        return None, node
    return (load_or_compile(sdfg) if reuse else sdfg.compile()), node


def _prebuild(job) -> str | None:
    """One build of ``--jobs`` (in a worker process): None, or why it failed."""
    case_name, impl, layout, chunk = job
    exact_cuda_flags()
    (case,) = [c for c in _cases() if c.name == case_name]
    try:
        build(case, impl, layout, True, chunk)
    except Exception as e:  # noqa: BLE001 - reported with the others; the check skips this build
        return f"{type(e).__name__}: {str(e)[:300]}"
    return None


def _bitwise(a, b):
    a, b = np.ascontiguousarray(a), np.ascontiguousarray(b)
    return a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a.view(np.uint8), b.view(np.uint8))


def _device(v, has_axis, layout, cp):
    if not has_axis:
        return cp.asarray(v)
    return cp.asarray(numpy_array(v, 1, layout), order="F" if layout == "cell" else "C")


def _check(prog, node, impl, case: Case, raw, want, layout, ncol, nlev, repeats, cp):
    """Run ``prog`` on device copies of ``raw`` in ``layout``: (class, ok, seconds, GB/s)."""
    dev = {k: _device(v, case.inputs[k], layout, cp) for k, v in raw.items()}
    outs = {}
    for oname, (has_axis, odt) in case.outputs.items():
        shape = (ncol, nlev) if has_axis else (ncol,)
        outs[oname] = cp.full(shape, np.nan if odt == np.float64 else -1, dtype=odt,
                              order="F" if layout == "cell" and has_axis else "C")   # poisoned: all must be written
    kw = dict(dev, **outs, N=ncol, K=nlev)
    prog(**kw)
    cp.cuda.Device().synchronize()
    got = {k: cp.asnumpy(v) for k, v in outs.items()}
    cls = type(node).implementations[impl].reproducibility
    ok = True
    for k, g in got.items():
        w = want[k].astype(g.dtype)
        if cls == "exact" or impl == "parallel_prefix":   # parallel_prefix: its pinned (chunked) order's bits
            ok &= _bitwise(g, w)
        else:
            ok &= bool(np.allclose(g, w, rtol=1e-12, atol=1e-12))
    if cls != "exact":
        prog(**kw)
        cp.cuda.Device().synchronize()
        ok &= all(_bitwise(got[k], cp.asnumpy(v)) for k, v in outs.items())
    callargs, initargs = prog.construct_arguments(**kw)
    t = _best(lambda: prog.fast_call(callargs, initargs), repeats, cp)
    nbytes = case.fields * ncol * nlev * 8 + sum(ncol * 8 for h in case.inputs.values() if not h) + sum(
        ncol * 8 for h, _ in case.outputs.values() if not h)
    return cls, ok, t, nbytes / t / 1e9


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--ncol", type=int, default=327680)
    p.add_argument("--nlev", type=int, default=90)
    p.add_argument("--repeats", type=int, default=20)
    p.add_argument("--build-only", action="store_true")
    p.add_argument("--only", default="", help="comma-separated case names to run (default: all)")
    p.add_argument("--layouts", default="k,cell", help="comma-separated layouts among k, cell")
    p.add_argument("--chunk", type=int, default=0, help="chunk_size of parallel_prefix (default: the node's)")
    p.add_argument("--prefix-schedules", action="store_true",
                   help="parallel_prefix only, at the sizes of PREFIX_SCHEDULES (one per GPU schedule); "
                        "replaces --ncol, --nlev and --chunk")
    p.add_argument("--jobs", type=int, default=0, help="build every SDFG first in this many processes")
    p.add_argument("--reuse", action="store_true",
                   help="load the binary an earlier run left in an SDFG's build folder instead of compiling")
    args = p.parse_args(argv)
    exact_cuda_flags()
    only = {s.strip() for s in args.only.split(",") if s.strip()}
    unknown = only - {c.name for c in _cases()}
    if unknown:
        p.error(f"--only names no case {sorted(unknown)}; the cases are {[c.name for c in _cases()]}")
    layouts = [x.strip() for x in args.layouts.split(",")]
    runs = ([(f"{name}: ", ncol, nlev, chunk, "parallel_prefix") for name, ncol, nlev, chunk in PREFIX_SCHEDULES]
            if args.prefix_schedules else [("", args.ncol, args.nlev, args.chunk, None)])

    def selected(pick):
        for case in _cases():
            impls = tuple(i for i in case.impls if pick in (None, i))
            if impls and (not only or case.name in only):
                yield case, impls

    failures, rows, broken = [], [], set()
    if args.jobs > 0:
        jobs = sorted({(case.name, impl, layout, chunk) for _t, _n, _k, chunk, pick in runs
                       for case, impls in selected(pick) for layout in layouts for impl in impls})
        t0 = time.perf_counter()
        with ProcessPoolExecutor(args.jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
            for (name, impl, layout, chunk), err in zip(jobs, pool.map(_prebuild, jobs), strict=True):
                label = f"{name} | {layout} | {impl}{f' (chunk {chunk})' if chunk else ''}"
                print(f"built  {label}" if err is None else f"{label}: build failed: {err}", flush=True)
                if err is not None:
                    broken.add((name, impl, layout, chunk))
                    failures.append(f"{label}: build failed: {err}")
        print(f"{len(jobs)} builds in {time.perf_counter() - t0:.0f} s ({args.jobs} processes)", flush=True)
        if args.build_only:
            return _summary([], failures)
        args.reuse = True   # the check loads what the workers built
    cp = None
    if not args.build_only:
        import cupy as cp
        print(f"device: {cp.cuda.runtime.getDeviceProperties(0)['name'].decode()}")
    rng = np.random.default_rng(0)
    for tag, ncol, nlev, chunk, pick in runs:
        probe = 0.0
        if cp is not None:
            field = ncol * nlev * 8
            src, dst = cp.zeros(field // 8), cp.empty(field // 8)
            probe = 2 * field / _best(lambda: cp.copyto(dst, src), args.repeats, cp) / 1e9
            del src, dst
            print(f"{tag}{ncol} x {nlev}: device copy probe {probe:.0f} GB/s")
        for case, impls in selected(pick):
            raw = None if args.build_only else {k: v for k, v in case.draw(rng, ncol, nlev).items() if k in case.inputs}
            wants: dict = {}   # per implementation: the reference does not depend on the layout
            for layout in layouts:
                for impl in impls:
                    label = f"{tag}{case.name} | {layout} | {impl}"
                    if (case.name, impl, layout, chunk) in broken:
                        continue   # reported by its build
                    try:
                        prog, node = build(case, impl, layout, args.build_only, chunk, args.reuse)
                    except Exception as e:  # noqa: BLE001 - report every case, fail at the end
                        failures.append(f"{label}: build failed: {type(e).__name__}: {str(e)[:300]}")
                        print(failures[-1], flush=True)
                        continue
                    if prog is None:
                        print(f"built  {label}", flush=True)
                        continue
                    if impl not in wants:
                        wants[impl] = case.ref(raw, node)
                    try:
                        cls, ok, t, gbs = _check(prog, node, impl, case, raw, wants[impl], layout, ncol, nlev,
                                                 args.repeats, cp)
                    except Exception as e:  # noqa: BLE001
                        failures.append(f"{label}: run failed: {type(e).__name__}: {str(e)[:300]}")
                        print(failures[-1], flush=True)
                        continue
                    rows.append(f"| {label} | {cls} | {'ok' if ok else 'FAIL'} | {t * 1e3:.3f} | "
                                f"{gbs:.0f} | {gbs / probe:.2f} |")
                    print(rows[-1], flush=True)
                    if not ok:
                        failures.append(f"{label}: result check failed ({cls})")
    return _summary(rows, failures)


def _summary(rows, failures) -> int:
    if rows:
        print("\n| case | layout | expansion | class | check | ms | GB/s | of probe |\n|---|---|---|---|---|---:|---:|---:|")
        print("\n".join(rows))
    for f in failures:
        print("FAILED:", f)
    return 1 if failures else 0


def _best(fn, repeats, cp) -> float:
    fn()
    cp.cuda.Device().synchronize()
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        cp.cuda.Device().synchronize()
        best = min(best, time.perf_counter() - t0)
    return best


if __name__ == "__main__":
    sys.exit(main())
