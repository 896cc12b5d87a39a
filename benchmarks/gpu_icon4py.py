#!/usr/bin/env python
"""Real icon4py programs on a CUDA GPU: gt4py's optimized SDFG under DaCe's GPU transformation (the
baseline: one thread per cell running the level loop) against ``sdfg_scan.optimize(target="gpu")``,
checked against the CPU build and timed.

Programs: ``graupel`` (``graupel_run_dyn``, the muphys scan) and ``dycore_pair`` (the forward sweep and the
back substitution of icon4py's vertically implicit solver composed into one program,
``tests/tridiagonal_pairs.py``; sdfg_scan turns them into one ``TridiagonalSolve``).

Two steps, because the GPU machine has neither the icon4py fixtures nor gt4py:

- ``prepare`` (here, where ``../shared/fixtures/icon4py`` or the exporter's cache is): writes into
  ``--data`` (default ``.devdata/gpu_icon4py``, git-ignored), per program, both GPU SDFGs, seeded inputs
  at ``--check-cells`` x ``--nlev`` and the outputs of the CPU build under the IEEE-strict flags
  (``ExactArithmetic``: no contraction, no reciprocal math).
- ``run`` (on the GPU machine, with ``.devpkgs`` and ``.devdata`` carried: ``make gpu-icon4py``): builds
  every GPU SDFG in parallel (nvcc with ``select.exact_cuda_flags``: ``--fmad=false``, IEEE division and
  square root), then

  - checks each against the CPU outputs. CUDA's ``pow``/``exp``/``log`` are not glibc's, so for graupel
    the table gives issue 9's replay measures (share of entries beyond rtol 1e-6, largest relative
    difference) and the largest difference as a share of the output's largest magnitude; the check fails
    on a new NaN or Inf, on a difference beyond ``SCALED_LIMIT`` of that scale, or when a build's two
    calls differ. It also says whether the two GPU builds are bitwise equal to each other;
  - times both (best of ``--repeats``, CUDA events around the call only; in-place inputs are restored
    before every call) at each size of ``--ncells``. A size at which a build's kernel does not launch is
    reported as "launch failed": DaCe 2.0.0a10 lowers graupel's strided copies into ``q_out_0``/``q_out_1``
    to kernels with the cells on the grid's y axis, which CUDA caps at 65535 (both builds).

Usage: ``python benchmarks/gpu_icon4py.py prepare`` here, ``python benchmarks/gpu_icon4py.py run`` there.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import dace  # noqa: E402

import sdfg_scan  # noqa: E402
from sdfg_scan.gt4py_args import gt4py_arguments  # noqa: E402
from sdfg_scan.select import exact_cuda_flags  # noqa: E402

VARIANTS = ("base", "ours")
LABELS = {"base": "gt4py's SDFG, DaCe GPU transformation", "ours": 'sdfg_scan.optimize(target="gpu")'}
RTOL = 1e-6
SCALED_LIMIT = 1e-9
"""A difference beyond this share of the output's largest magnitude fails the check (a wrong result,
not a libm's last bits amplified by cancellation)."""


def _tests():
    sys.path.insert(0, str(ROOT / "tests"))
    import icon4py_fixtures as fx
    import tridiagonal_pairs as tp

    return fx, tp


def _programs() -> dict:
    """name -> (the original SDFG, its ``gt4py_arguments`` settings); only called by ``prepare``."""
    fx, tp = _tests()
    return {"graupel": (lambda: fx.load("graupel_run_dyn.opt_nohooks"), "graupel_run"),
            "dycore_pair": (tp.composed_dycore, "solve_tridiagonal_matrix_for_w_forward_sweep")}


def _settings(program: str) -> dict:
    """The tests' seeded physical ranges, icon4py's driver aliasing, sizes (``tests/icon4py_fixtures.py``)."""
    fx, _ = _tests()
    return fx.PROGRAMS[program]


def _arguments(sdfg: dace.SDFG, meta: dict, inputs: dict, ncells: int) -> dict:
    """``sdfg``'s call arguments at ``ncells`` x the prepared levels, the arrays filled from the prepared
    inputs, repeated along the cell axis (the GPU machine cannot import the tests' value ranges)."""
    kw = gt4py_arguments(sdfg, ncells, meta["nlev"], meta["seed"], **meta["arguments"])
    for k, arr in _buffers(kw).items():
        src = inputs[k]
        if arr.shape != src.shape:
            if arr.shape[1:] != src.shape[1:] or src.shape[0] != meta["check_cells"]:
                raise RuntimeError(f"gpu_icon4py: '{k}' is {arr.shape}, prepared as {src.shape}")
            src = np.concatenate([src] * -(-arr.shape[0] // src.shape[0]), axis=0)[:arr.shape[0]]
        arr[...] = src
    return kw


def _on_device(sdfg: dace.SDFG) -> dace.SDFG:
    """Program arguments in GPU memory, as gt4py's GPU backend passes them."""
    for d in sdfg.arrays.values():
        if not d.transient and isinstance(d, dace.data.Array):
            d.storage = dace.StorageType.GPU_Global
    return sdfg


def _is_array(v) -> bool:
    return hasattr(v, "__array_interface__") or hasattr(v, "__cuda_array_interface__")


def _bits(a: np.ndarray) -> np.ndarray:
    """The array's bit patterns, C-ordered (NaNs and signed zeros compare as bits)."""
    a = np.ascontiguousarray(a)
    return a.view(f"u{a.itemsize}") if a.dtype.kind == "f" else a


def _buffers(kw: dict) -> dict:
    """One name per distinct array of ``kw`` (the first in sorted order; aliases share it)."""
    seen: dict[int, str] = {}
    for k in sorted(kw):
        if _is_array(kw[k]) and id(kw[k]) not in seen:
            seen[id(kw[k])] = k
    return {k: kw[k] for k in seen.values()}


def prepare(args) -> int:
    from sdfg_scan.expansions.environments import ExactArithmetic

    flags = dace.Config.get("compiler", "cpu", "args") + " " + " ".join(ExactArithmetic.cmake_compile_flags)
    for name, (make, settings) in _programs().items():
        if args.only and name not in args.only.split(","):
            continue
        data = Path(args.data) / name
        data.mkdir(parents=True, exist_ok=True)
        original = make()
        meta: dict = {"program": name, "arguments": {k: v for k, v in _settings(settings).items() if k != "values"},
                      "nlev": args.nlev, "check_cells": args.check_cells,
                      "seed": args.seed, "cpu_flags": flags}

        base = _on_device(copy.deepcopy(original))
        base.name = f"gpu_{name}_base"
        base.apply_gpu_transformations()
        base.save(str(data / "base.sdfgz"), compress=True)

        ours = _on_device(copy.deepcopy(original))
        ours.name = f"gpu_{name}_ours"
        report = sdfg_scan.optimize(ours, target="gpu")
        ours.save(str(data / "ours.sdfgz"), compress=True)
        meta["ours"] = {"applied": {k: v for k, v in report.applied.items() if v},
                        "nodes": [f"{c.node} {c.implementation} ({c.reproducibility})" for c in report.nodes]}

        cpu = copy.deepcopy(original)
        cpu.name = f"gpu_{name}_cpu_reference"
        with dace.config.set_temporary("compiler", "cpu", "args", value=flags):
            compiled = cpu.compile()
        kw = gt4py_arguments(cpu, args.check_cells, args.nlev, args.seed, **_settings(settings))
        if any(a.shape[:1] != (args.check_cells,) for a in _buffers(kw).values()):
            raise RuntimeError(f"gpu_icon4py: {name}'s arrays are not all cell-first: "
                               f"{ {k: a.shape for k, a in _buffers(kw).items()} }")
        before = {k: v.copy() for k, v in _buffers(kw).items()}
        compiled(**kw)
        after = {k: v for k, v in _buffers(kw).items() if not np.array_equal(v, before[k], equal_nan=True)}
        np.savez_compressed(data / "inputs.npz", **before)
        np.savez_compressed(data / "cpu_outputs.npz", **after)
        meta["outputs"] = sorted(after)
        (data / "meta.json").write_text(json.dumps(meta, indent=1))
        size = sum(f.stat().st_size for f in data.iterdir())
        print(f"prepared {data}: {size / 2**20:.1f} MiB; sdfg_scan: {meta['ours']}", flush=True)
    return 0


def _build(path: str):
    exact_cuda_flags()
    sdfg = dace.SDFG.from_file(path)
    t = time.perf_counter()
    sdfg.compile(return_program_handle=False)
    return time.perf_counter() - t


def _to_device(kw: dict, cp) -> dict:
    """``kw`` with every array on the device in the same strides; aliased arrays stay aliased."""
    moved: dict[int, object] = {}
    out = {}
    for k, v in kw.items():
        if isinstance(v, np.ndarray):
            if id(v) not in moved:
                d = cp.asarray(v, order="F" if v.flags.f_contiguous and not v.flags.c_contiguous else "C")
                if d.strides != v.strides:
                    raise RuntimeError(f"gpu_icon4py: '{k}' changed strides on the device: {v.strides} -> {d.strides}")
                moved[id(v)] = d
            v = moved[id(v)]
        out[k] = v
    return out


def _compare(got: np.ndarray, want: np.ndarray) -> dict:
    if got.dtype.kind != "f":
        return {"bitwise": bool(np.array_equal(got, want)), "differ": int(np.sum(got != want))}
    fin = np.isfinite(want)
    new_bad = int(np.sum(~np.isfinite(got) & fin))
    diff = np.abs(got - want)
    scale = np.abs(want)
    rel = np.where(scale > 0, diff / np.where(scale > 0, scale, 1.0), np.where(diff > 0, np.inf, 0.0))
    rel = np.where(fin, rel, 0.0)
    beyond = float(np.mean(diff[fin] > RTOL * scale[fin])) if fin.any() else 0.0
    top = float(np.max(scale[fin])) if fin.any() else 0.0
    return {"bitwise": bool(np.array_equal(_bits(got), _bits(want))),
            "scaled": float(np.max(diff[fin]) / top) if top > 0 else float(np.max(diff[fin], initial=0.0)),
            "max_rel": float(rel.max()) if rel.size else 0.0, "beyond_rtol": beyond, "new_nan_inf": new_bad}


def _check(name: str, meta: dict, data: Path, inputs: dict, sdfgs: dict, progs: dict, cp) -> list[str]:
    """Each GPU build at the prepared size against the CPU build; the failures."""
    want = dict(np.load(data / "cpu_outputs.npz"))
    got: dict[str, dict] = {}
    failures = []
    for v, prog in progs.items():
        kw = _arguments(sdfgs[v], meta, inputs, meta["check_cells"])
        labels = {k: "=".join(n for n in sorted(kw) if kw[n] is a) for k, a in _buffers(kw).items()}
        runs = []
        for _ in range(2):
            dev = _to_device(kw, cp)
            prog(**dev)
            cp.cuda.Device().synchronize()
            runs.append({k: cp.asnumpy(a) for k, a in _buffers(dev).items()})
        got[v] = runs[0]
        same = all(np.array_equal(_bits(runs[0][k]), _bits(runs[1][k])) for k in runs[0])
        print(f"\n{name}: {LABELS[v]}, {meta['check_cells']} x {meta['nlev']}, against the CPU build "
              f"(g++ {meta['cpu_flags']}):")
        print(f"  two calls bitwise equal: {same}")
        failures += [] if same else [f"{name} {v}: two calls differ"]
        print(f"  {'output':<28} {'bitwise':>8} {'max rel':>10} {'> rtol 1e-6':>12} {'max/scale':>10} "
              f"{'new NaN/Inf':>12}")
        for k in sorted(runs[0]):
            label = labels[k]
            if k not in want:
                if not np.array_equal(_bits(runs[0][k]), _bits(inputs[k])):
                    failures.append(f"{name} {v}: '{label}' changed on the GPU but not on the CPU")
                continue
            c = _compare(runs[0][k], want[k])
            if "max_rel" in c:
                print(f"  {label:<28} {c['bitwise']!s:>8} {c['max_rel']:>10.2e} {100 * c['beyond_rtol']:>11.3f}% "
                      f"{c['scaled']:>10.2e} {c['new_nan_inf']:>12}")
                if c["new_nan_inf"] or c["scaled"] > SCALED_LIMIT:
                    failures.append(f"{name} {v}: '{label}' differs from the CPU build beyond {SCALED_LIMIT:g} "
                                    "of its scale, or has new NaN/Inf")
            else:
                print(f"  {label:<28} {c['bitwise']!s:>8} {c['differ']:>10} differ")
                if not c["bitwise"]:
                    failures.append(f"{name} {v}: '{label}' differs from the CPU build")
    pair = all(np.array_equal(_bits(got["base"][k]), _bits(got["ours"][k])) for k in want)
    print(f"\n{name}: sdfg_scan's GPU build bitwise equal to the baseline GPU build: {pair}")
    return failures


def _ms(t: float) -> str:
    return "launch failed" if t != t else f"{t * 1e3:.3f} ms"


def _best_call(prog, dev: dict, devbuf: dict, pristine: dict, repeats: int, cp) -> float:
    """Best of ``repeats`` calls (s), CUDA events around the call only, the arrays restored before each."""
    prog(**dev)   # initialises the build for these arguments (and warms up)
    callargs, initargs = prog.construct_arguments(**dev)
    start, stop = cp.cuda.Event(), cp.cuda.Event()
    best = float("inf")
    for _ in range(repeats):
        for k, a in devbuf.items():
            a[...] = pristine[k]
        start.record()
        prog.fast_call(callargs, initargs)
        stop.record()
        stop.synchronize()
        best = min(best, cp.cuda.get_elapsed_time(start, stop) / 1e3)
    return best


def _time(name: str, meta: dict, inputs: dict, sdfgs: dict, progs: dict, sizes: list[int], repeats: int,
          cp) -> list:
    """Best time per call of each build at each size (CUDA events around the call; inputs restored)."""
    rows = []
    for n in sizes:
        times = {}
        for v, prog in progs.items():
            kw = _arguments(sdfgs[v], meta, inputs, n)
            dev = _to_device(kw, cp)
            del kw
            devbuf = _buffers(dev)
            pristine = {k: a.copy() for k, a in devbuf.items()}
            try:   # a failed kernel launch: DaCe raises on a checked call, or reports it at finalize
                best = _best_call(prog, dev, devbuf, pristine, repeats, cp)
                prog.finalize()
            except RuntimeError as e:
                print(f"{name} {v} at {n} cells: {e}", flush=True)
                best = float("nan")
                try:
                    prog.finalize()
                except RuntimeError:
                    pass
            times[v] = best
            del dev, devbuf, pristine
        rows.append((n, times))
        print(f"{name} {n} x {meta['nlev']}: " + ", ".join(f"{v} {_ms(t)}" for v, t in times.items())
              + f", speed-up {times['base'] / times['ours']:.2f}x", flush=True)
    return rows


def run(args) -> int:
    import cupy as cp

    from sdfg_scan.harness import load_or_compile

    exact_cuda_flags()
    programs = sorted(p.name for p in Path(args.data).iterdir() if (p / "meta.json").is_file()
                      and (not args.only or p.name in args.only.split(",")))
    paths = {(p, v): str(Path(args.data) / p / f"{v}.sdfgz") for p in programs for v in VARIANTS}
    t0 = time.perf_counter()
    with ProcessPoolExecutor(len(paths)) as pool:
        build_s = dict(zip(paths, pool.map(_build, paths.values()), strict=True))
    print(f"built in {time.perf_counter() - t0:.0f} s (" + ", ".join(f"{p} {v} {s:.0f} s" for (p, v), s in
                                                                      build_s.items()) + ")", flush=True)
    failures: list[str] = []
    tables = []
    for p in programs:
        data = Path(args.data) / p
        meta = json.loads((data / "meta.json").read_text())
        print(f"\n== {p}: sdfg_scan {meta['ours']}")
        sdfgs = {v: dace.SDFG.from_file(paths[p, v]) for v in VARIANTS}
        progs = {v: load_or_compile(s) for v, s in sdfgs.items()}
        inputs = dict(np.load(data / "inputs.npz"))
        failures += _check(p, meta, data, inputs, sdfgs, progs, cp)
        sizes = [int(x) for x in args.ncells.split(",") if x]
        tables.append((p, meta["nlev"], _time(p, meta, inputs, sdfgs, progs, sizes, args.repeats, cp)))
    print(f"\n| program | cells x levels | {LABELS['base']} | {LABELS['ours']} | speed-up |")
    print("|---|---|---|---|---|")
    for p, nlev, rows in tables:
        for n, t in rows:
            print(f"| {p} | {n} x {nlev} | {_ms(t['base'])} | {_ms(t['ours'])} | {t['base'] / t['ours']:.2f}x |")
    for f in failures:
        print("FAILED", f)
    print("checks:", "FAILED" if failures else "passed")
    return 1 if failures else 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="step", required=True)
    pre = sub.add_parser("prepare", help="here: GPU SDFGs, inputs and CPU outputs into --data")
    pre.add_argument("--check-cells", type=int, default=2048)
    pre.add_argument("--nlev", type=int, default=65)
    pre.add_argument("--seed", type=int, default=7)
    dev = sub.add_parser("run", help="on the GPU machine: build, check, time")
    dev.add_argument("--ncells", default="20480,40960,61440",
                     help="comma-separated cell counts to time (graupel's builds launch DaCe's strided-copy "
                          "kernels with the cells on the grid's y axis: at most 65535 cells)")
    dev.add_argument("--repeats", type=int, default=20)
    for q in (pre, dev):
        q.add_argument("--only", default="", help="comma-separated programs among graupel, dycore_pair")
        q.add_argument("--data", default=str(ROOT / ".devdata" / "gpu_icon4py"))
    args = p.parse_args(argv)
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 20000))
    return prepare(args) if args.step == "prepare" else run(args)


if __name__ == "__main__":
    sys.exit(main())
