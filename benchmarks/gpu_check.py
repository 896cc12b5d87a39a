#!/usr/bin/env python
"""The GPU check: numerics and speed of every GPU expansion, in one short run on a CUDA machine.

For each case (cumsum, linear recurrence, tridiagonal solve, column sum, column argmin, window M=3)
x layout (K-contiguous, cell-contiguous) x GPU expansion, a one-node SDFG with its arrays in GPU
global memory is built after ``apply_gpu_transformations()`` with the exact nvcc flags
(``sdfg_scan.select.exact_cuda_flags``), compiled, run on cupy arrays and compared with
``sdfg_scan.reference``:

- ``exact`` expansions: bitwise equal to the reference (NaN positions aside, there are none here);
- ``replay`` expansions: within 1e-12 relative of the reference, and bitwise equal to themselves
  over a second run (the replay promise); ``parallel_prefix`` bitwise equal to its pinned chunked
  reference (``order="chunked"``, the CPU expansion's bits), which the nvcc flags make possible.

Then each is timed (best of ``--repeats`` device-synchronised calls through ``fast_call``) and
reported as GB/s and as a fraction of a device copy probe (``cupy.copyto`` over a field).

Usage::

    python benchmarks/gpu_check.py [--ncol 327680] [--nlev 90] [--repeats 20] [--build-only]
                                   [--only "column sum,window M=3"] [--layouts k,cell] [--chunk C]
                                   [--prefix-schedules]

Few long columns (``parallel_prefix`` against ``sequential``)::

    python benchmarks/gpu_check.py --ncol 2 --nlev 4194304 --only "cumsum,linear recurrence" --layouts k --chunk 1024

Each GPU schedule of ``parallel_prefix`` (warp per column, block per column, three kernels: chosen at
run time from the sizes), at the sizes of :data:`PREFIX_SCHEDULES`, cumsum and linear recurrence::

    python benchmarks/gpu_check.py --prefix-schedules [--layouts k]

``--build-only`` compiles every SDFG (nvcc + host) and stops: it needs nvcc, not a GPU or cupy,
and is what the test suite runs where nvcc exists. Exit status 1 if any check fails.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import dace
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sdfg_scan import reference as R  # noqa: E402
from sdfg_scan.harness import numpy_array, one_node_sdfg  # noqa: E402
from sdfg_scan.nodes import ColumnReduce, CumulativeScan, LinearRecurrence, TridiagonalSolve, WindowReduce  # noqa: E402
from sdfg_scan.select import exact_cuda_flags  # noqa: E402

N, K = dace.symbol("N"), dace.symbol("K")
F64 = dace.float64
FIELD = ([N, K], F64, True)
WEIGHTS, OFFSETS = [0.4, 0.3, 0.2, 0.1], [0, -1, -2, -3]


PREFIX_SCHEDULES = [
    ("warp per column", 327680, 90, 8),        # 12 chunks per column: a warp per column
    ("block per column", 2, 4194304, 16384),   # 256 chunks: a block of 256 threads per column
    ("three kernels", 2, 4194304, 1024),       # 4096 chunks of 2 columns: a thread per (column, chunk)
]
"""``--prefix-schedules``: (schedule, columns, levels, chunk_size), sizes at which ``parallel_prefix``
takes each of its GPU schedules (``sdfg_scan/expansions/parallel_prefix.py``, chosen at run time)."""


def _cases():
    """(case, node factory, inputs, outputs, implementations, reference(ins) -> want, fields moved)."""
    tri_ins = {c: FIELD for c in "abcd"}
    col = {"_out": ([N], F64, False)}
    return [
        ("cumsum", lambda: CumulativeScan("cs", op="sum", axis=1), {"_in": FIELD}, {"_out": FIELD},
         ("sequential", "parallel_prefix"), lambda i, n: R.cumulative(i["_in"], "sum", axis=1, **_order(n)), 2),
        ("linear recurrence", lambda: LinearRecurrence("lr", axis=1), {"a": FIELD, "b": FIELD}, {"_out": FIELD},
         ("sequential", "parallel_prefix"), lambda i, n: R.linear_recurrence(i["a"], i["b"], axis=1, **_order(n)),
         3),
        ("tridiagonal solve", lambda: TridiagonalSolve("tri", axis=1), tri_ins, {"x": FIELD},
         ("thomas", "pcr", "cusparse"), lambda i, n: R.tridiagonal_solve(i["a"], i["b"], i["c"], i["d"], axis=1), 5),
        ("column sum", lambda: ColumnReduce("rs", op="sum", axis=1), {"_in": FIELD}, col,
         ("sequential", "tree", "lanes"), _reduce_ref("sum"), 1),
        ("column argmin", lambda: ColumnReduce("ra", op="argmin", axis=1), {"_in": FIELD},
         {"_out": ([N], dace.int64, False)}, ("sequential", "tree", "kvector", "lanes"), _reduce_ref("argmin"), 1),
        ("window M=3", lambda: WindowReduce("w", WEIGHTS, OFFSETS, axis=1), {"_in": FIELD}, {"_out": FIELD},
         ("direct", "kcached"), lambda i, n: R.window_reduce(i["_in"], WEIGHTS, OFFSETS, axis=1), 2),
    ]


def _order(node) -> dict:
    """The reference order of ``node``'s implementation: ``parallel_prefix`` pins the chunked one."""
    if node.implementation == "parallel_prefix":
        return {"order": "chunked", "chunk": node.chunk_size}
    return {}


def _reduce_ref(op):
    def ref(ins, node):
        order = {"tree": "tree", "lanes": "lanes"}.get(node.implementation, "sequential")
        return R.column_reduce(ins["_in"], op, axis=1, order=order, lanes=node.lanes)
    return ref


def build(case, factory, inputs, outputs, impl, layout, build_only, chunk=0):
    node = factory()
    node.implementation = impl
    if chunk and impl == "parallel_prefix":
        node.chunk_size = chunk
    name = f"gpu_check_{case.replace(' ', '_').replace('=', '')}_{impl}_{layout}"
    sdfg = one_node_sdfg(name, node, inputs, outputs, 1, layout)
    for desc in sdfg.arrays.values():
        desc.storage = dace.StorageType.GPU_Global   # device arrays in, device arrays out: no PCIe copies timed
    sdfg.apply_gpu_transformations()
    if build_only:
        sdfg.compile(return_program_handle=False)
        return None, node
    return sdfg.compile(), node


def _inputs(case, ncol, nlev, rng):
    """The case's input values (one draw, given to every layout)."""
    shape = (ncol, nlev)
    if case == "tridiagonal solve":
        return {"a": rng.uniform(-1, 1, shape), "b": 4.0 + rng.uniform(0, 1, shape), "c": rng.uniform(-1, 1, shape),
                "d": rng.uniform(-1, 1, shape)}
    if case == "linear recurrence":
        return {"a": rng.uniform(0, 0.9, shape), "b": rng.uniform(-1, 1, shape)}
    return {"_in": rng.standard_normal(shape)}


def _bitwise(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a.view(np.uint8), b.view(np.uint8))


def _check(prog, node, impl, raw, want, outputs, layout, ncol, nlev, nfields, repeats, cp):
    """Run ``prog`` on device copies of ``raw`` in ``layout``: (class, ok, seconds, GB/s)."""
    dev = {k: cp.asarray(numpy_array(v, 1, layout), order="F" if layout == "cell" else "C") for k, v in raw.items()}
    (oname, (_oshape, odt, has_axis)), = outputs.items()
    shape = (ncol, nlev) if has_axis else (ncol,)
    out = cp.zeros(shape, dtype=odt.as_numpy_dtype(), order="F" if layout == "cell" and has_axis else "C")
    kw = dict(dev, **{oname: out}, N=ncol, K=nlev)
    prog(**kw)
    cp.cuda.Device().synchronize()
    got = cp.asnumpy(out)
    cls = type(node).implementations[impl].reproducibility
    if cls == "exact":
        ok = _bitwise(np.ascontiguousarray(got), np.ascontiguousarray(want.astype(got.dtype)))
    else:
        first = got.copy()
        prog(**kw)
        cp.cuda.Device().synchronize()
        again = _bitwise(first, cp.asnumpy(out))
        if impl == "parallel_prefix":   # its pinned (chunked) order: the same bits as the CPU expansion
            ok = _bitwise(np.ascontiguousarray(got), np.ascontiguousarray(want.astype(got.dtype))) and again
        else:
            ok = np.allclose(got, want, rtol=1e-12, atol=1e-12) and again
    callargs, initargs = prog.construct_arguments(**kw)
    t = _best(lambda: prog.fast_call(callargs, initargs), repeats, cp)
    return cls, ok, t, (nfields * ncol * nlev * 8 + (0 if has_axis else ncol * 8)) / t / 1e9


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
    args = p.parse_args(argv)
    exact_cuda_flags()
    only = {s.strip() for s in args.only.split(",") if s.strip()}
    layouts = [x.strip() for x in args.layouts.split(",")]
    runs = ([(f"{name}: ", ncol, nlev, chunk, "parallel_prefix") for name, ncol, nlev, chunk in PREFIX_SCHEDULES]
            if args.prefix_schedules else [("", args.ncol, args.nlev, args.chunk, None)])
    failures, rows = [], []
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
        for case, factory, inputs, outputs, impls, ref, nfields in _cases():
            impls = tuple(i for i in impls if pick in (None, i))
            if (only and case not in only) or not impls:
                continue
            raw = None if args.build_only else _inputs(case, ncol, nlev, rng)
            wants: dict = {}   # per implementation: the reference does not depend on the layout
            for layout in layouts:
                for impl in impls:
                    label = f"{tag}{case} | {layout} | {impl}"
                    try:
                        prog, node = build(case, factory, inputs, outputs, impl, layout, args.build_only, chunk)
                    except Exception as e:  # noqa: BLE001 - report every case, fail at the end
                        failures.append(f"{label}: build failed: {type(e).__name__}: {str(e)[:300]}")
                        print(failures[-1])
                        continue
                    if prog is None:
                        print(f"built  {label}")
                        continue
                    if impl not in wants:
                        wants[impl] = ref(raw, node)
                    cls, ok, t, gbs = _check(prog, node, impl, raw, wants[impl], outputs, layout, ncol, nlev,
                                             nfields, args.repeats, cp)
                    rows.append(f"| {label} | {cls} | {'ok' if ok else 'FAIL'} | {t * 1e3:.3f} | "
                                f"{gbs:.0f} | {gbs / probe:.2f} |")
                    print(rows[-1])
                    if not ok:
                        failures.append(f"{label}: result check failed ({cls})")
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
