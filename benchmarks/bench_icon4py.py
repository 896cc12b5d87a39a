#!/usr/bin/env python
"""CPU run time of the real icon4py SDFGs: icon4py's DaCe hooks vs sdfg_scan's transformations.

Rows (same process, same seeded inputs, same compiler flags: DaCe's defaults + ExactArithmetic):

- ``graupel_run`` (static 100 x 65): ``.opt_hooks`` (icon4py's ``remove_self_copy_inside_scan`` +
  in-place renaming) and ``.opt_nohooks`` vs ``.opt_nohooks`` after our canonicalising transformations; the call is
  repeated ``--repeat`` times per sample (the static domain cannot grow).
- ``graupel_run_dyn`` (symbolic domain) at ``--ncells`` x ``--nlev`` (default 20480 x 65):
  ``.opt_nohooks`` before/after our transformations (icon4py's hooks are wrong on this variant).
- ``diagnose_pressure.opt`` (static 100 x 65), repeated: before/after.
- the cumulative sum, the Thomas forward sweep and back substitution (runtime sizes) at
  ``--ncells`` x ``--nlev``: before/after.
- ``dycore pair`` at ``--ncells`` x ``--nlev``: the forward sweep and the back substitution as gt4py
  compiles them (two programs, times added; and both scans composed into one program,
  ``tests/tridiagonal_pairs.py``) vs the composed program after ``LiftScans`` +
  ``ScanPairToTridiagonal`` (one ``TridiagonalSolve``, ``auto`` expansion, which on the CPU runs gt4py's
  coefficient map inside its blocks), and the same with ``absorb_producer=False`` (``Tridiag. unfused``:
  the coefficients go through memory); min / median / max over the samples.

"Ours" is ``sdfg_scan.optimize`` (with graupel's driver aliasing declared as ``inplace``).

Every transformed SDFG's outputs are checked bitwise against its baseline before timing. The graupel rows
end with a ``perf`` profile summary of the default-flags, exact and replay builds (``--profile-seconds``).
Usage: ``python benchmarks/bench_icon4py.py [--ncells 20480] [--nlev 65] [--samples 7] [--repeat 50]
[--only graupel_blocked] [--graupel-rows "auto (exact),per-call"] [--buffers fresh,same,loop]``.
``--buffers same`` times ``graupel_run_dyn`` on the same buffers every call, its inputs copied back in before
each call outside the timing; ``loop`` the same, each variant alone in a process of its own (a model's time
loop: one program, its fields allocated once; stop 48); ``fresh`` (the default) on new copies every call.
``--only graupel_decisions`` compares the branch decisions ``graupel_run_dyn`` stores (its ``bool`` arrays, made
outputs) between the ``exact`` and ``replay`` builds. ``--graupel-sdfg FILE`` puts another program with
graupel's arguments in ``graupel_run_dyn``'s place, e.g. icon4py's ``muphys_run`` (saturation adjustment, the
graupel scan, saturation adjustment) as gt4py built it: the stock variant's ``program.sdfgz`` in gt4py's build
cache (``GRAUPEL_PROGRAM=muphys_run GRAUPEL_VARIANTS=stock samples/graupel_gt4py.py`` with a persistent cache).
"""

from __future__ import annotations

import argparse
import copy
import random
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import icon4py_fixtures as fx  # noqa: E402
import tridiagonal_pairs as tp  # noqa: E402
from common import PROBE_PARTS, bandwidth_probe, compiled_call  # noqa: E402

import sdfg_scan  # noqa: E402

GRAUPEL_LABEL = "graupel_run_dyn"
"""The name the graupel_run_dyn rows print (``--graupel-sdfg``: that file's)."""
# the buffers icon4py's graupel driver aliases (and fx.inputs aliases): outputs written in place
GRAUPEL_INPLACE = {**{f"q_out_{i}": f"q_in_{i}" for i in range(2, 6)}, "t_out": "te"}


def canonicalise(sdfg, form: str):
    """``sdfg_scan.optimize`` (lift -> canonicalise -> restructure -> select); returns ``{name: applications}``."""
    inplace = GRAUPEL_INPLACE if form.startswith("graupel_run") else None
    report = sdfg_scan.optimize(sdfg, target="cpu", inplace=inplace)
    return {k: v for k, v in report.applied.items() if v}


def timed(compiled: list, kw: dict, samples: int, repeat: int) -> list[float]:
    """Best-of-``samples`` mean time per call (s) of each compiled SDFG; samples interleaved so that
    load changes on the (shared) machine hit every variant alike."""
    args = [fx.fresh(kw) for _ in compiled]
    for c, a in zip(compiled, args, strict=True):
        c(**a)  # warm-up
    best = [float("inf")] * len(compiled)
    for _ in range(samples):
        for j, c in enumerate(compiled):
            a = fx.fresh(kw)
            t0 = time.perf_counter()
            for _ in range(repeat):
                c(**a)
            best[j] = min(best[j], (time.perf_counter() - t0) / repeat)
    return best


def bench(label: str, baselines: list[str], ours_form: str, size: tuple[int, int], samples: int, repeat: int,
          rows: list):
    ours = fx.load(ours_form)
    counts = canonicalise(ours, ours_form)
    ncells, nlev = size
    kw = fx.inputs(ours_form, fx.load(ours_form), ncells=ncells, nlev=nlev)
    compiled = [fx.compile_once(f"bench_{b}", fx.load(b)) for b in baselines]
    compiled.append(fx.compile_once(f"bench_{ours_form}+ours", ours))
    # same program: outputs must agree bit for bit with the untransformed form
    fx.assert_bitwise_equal(fx.run(f"bench_{ours_form}", fx.load(ours_form), kw),
                            fx.run(f"bench_{ours_form}+ours", ours, kw))
    times = timed(compiled, kw, samples, repeat)
    for b, t in zip(baselines, times[:-1], strict=True):
        rows.append((label, f"{ncells}x{nlev}", b.split(".", 1)[1], t, times[-1], counts))


def samples_of(compiled, kw: dict, samples: int, repeat: int) -> list[float]:
    """Mean time per call (s) of each of ``samples`` runs of ``repeat`` calls (after one warm-up call) on
    fresh copies of the inputs, called as gt4py calls a program (``common.compiled_call``: the argument
    vectors built once per sample, outside the timing)."""
    compiled_call(compiled, **fx.fresh(kw))()
    out = []
    for _ in range(samples):
        call = compiled_call(compiled, **fx.fresh(kw))
        t0 = time.perf_counter()
        for _ in range(repeat):
            call()
        out.append((time.perf_counter() - t0) / repeat)
    return out


def bench_dycore_pair(size: tuple[int, int], samples: int, repeat: int) -> list[str]:
    """The two dycore scans (separate programs / composed) vs one TridiagonalSolve; rows of text."""
    from sdfg_scan.nodes.tridiagonal_solve import TridiagonalSolve
    from sdfg_scan.transformations import LiftScans, ScanPairToTridiagonal

    ncells, nlev = size
    ours = tp.composed_dycore()
    ours.apply_transformations_repeated(LiftScans)
    assert ours.apply_transformations_repeated(ScanPairToTridiagonal) == 1
    kw = fx.inputs(tp.FWD, tp.composed_dycore(), ncells=ncells, nlev=nlev)
    fx.assert_bitwise_equal(fx.run("bench_pair", tp.composed_dycore(), kw), fx.run("bench_pair+ours", ours, kw))
    unfused = copy.deepcopy(ours)  # the coefficients written to memory by gt4py's map, then read by the solve
    for n, _ in unfused.all_nodes_recursive():
        if isinstance(n, TridiagonalSolve):
            n.absorb_producer = False
    progs = {"forward_sweep": (tp.FWD, fx.load(tp.FWD)), "back_substitution": (tp.BACK, fx.load(tp.BACK)),
             "composed pair": (tp.FWD, tp.composed_dycore()), "Tridiag. unfused": (tp.FWD, unfused),
             "TridiagonalSolve": (tp.FWD, ours)}
    times: dict[str, list[float]] = {k: [] for k in progs}
    compiled = {k: fx.compile_once(f"bench_pair_{k}", sd) for k, (_, sd) in progs.items()}
    kws = {k: fx.inputs(form, progs[k][1], ncells=ncells, nlev=nlev) for k, (form, _) in progs.items()}
    for _ in range(samples):  # interleaved: load changes on the shared machine hit every variant alike
        for k in progs:
            times[k] += samples_of(compiled[k], kws[k], 1, repeat)
    times["two programs"] = [f + b for f, b in zip(times["forward_sweep"], times["back_substitution"], strict=True)]
    ours_t = np.array(times["TridiagonalSolve"])
    rows = []
    for k in ("forward_sweep", "back_substitution", "two programs", "composed pair", "Tridiag. unfused",
              "TridiagonalSolve"):
        t = np.array(times[k])
        rows.append(f"{'dycore pair':16} {ncells}x{nlev:<6} {k:18} min {t.min():.3e} med {np.median(t):.3e} "
                    f"max {t.max():.3e}  speed-up of ours (min/med/max) {t.min() / ours_t.min():6.2f} "
                    f"{np.median(t) / np.median(ours_t):6.2f} {t.max() / ours_t.max():6.2f}")
    return rows + _pair_bandwidth_rows(ours, kw, ours_t.min(), min(times["two programs"]))


def _pair_bandwidth_rows(sdfg, kw: dict, ours_s: float, two_s: float) -> list[str]:
    """How close the fused solve is to the machine's memory bandwidth: the bytes it must move at least (every
    array argument it reads, read once; every one it writes, written once), its rate, the rate of a copy that
    streams as many bytes (``bandwidth_probe``, two arrays of half of them each), and the rate a 10x over
    gt4py's two programs would need."""
    reads, writes = set(), set()
    for state in sdfg.states():
        r, w = state.read_and_write_sets()
        reads |= r
        writes |= w
    size = {n: np.asarray(v).nbytes for n, v in kw.items()
            if n in sdfg.arrays and not sdfg.arrays[n].transient and np.asarray(v).size > 1}
    read, written = sorted(n for n in reads if n in size), sorted(n for n in writes if n in size)
    moved = sum(size[n] for n in read) + sum(size[n] for n in written)
    probe = bandwidth_probe(moved // 2)
    parts = ", ".join(f"{k} {v:.1f}" for k, v in PROBE_PARTS.items())
    return [f"dycore pair: TridiagonalSolve moves at least {moved / 1e6:.1f} MB (reads {', '.join(read)}; writes "
            f"{', '.join(written)}): {moved / ours_s / 1e9:.1f} GB/s at its best call, {moved / ours_s / 1e9 / probe:.2f} "
            f"of a copy streaming as many bytes, {probe:.1f} GB/s ({parts}); 10x over the two programs needs "
            f"{10 * moved / two_s / 1e9:.1f} GB/s"]


def _graupel_blocked(impl: str | None, reproducibility: str, vectorize_maps: bool | None = False,
                     persistent: bool = True, write_through: bool = True, fast_pow_maps: bool = False):
    """``graupel_run_dyn`` after ``optimize`` with its scan pinned to ``impl`` (None: ``optimize``'s choice);
    ``vectorize_maps``: as ``optimize``'s (None: its default, every map under replay, the staged ones under
    exact);
    ``persistent``: its top-level transients allocated once (``optimize``'s default on the CPU since stop 48,
    ``"grow"``: legal for any sizes; allocated again only where a call's sizes outgrow them, which the
    benchmark's one size never does); False: allocated on every call (the default of stops 1 to 47);
    ``write_through=False``: without ``ResultWriteThrough`` (the "before" row of that step);
    ``fast_pow_maps``: the pointwise maps vectorised after ``optimize`` by ``VectorizeCellMap`` with its fast
    ``pow`` (``exp(y log x)``, libmvec; what ``vectorize_maps=True`` applied under replay before stop 32)."""
    from sdfg_scan import pipeline
    from sdfg_scan.nodes.scan import Scan

    form = "graupel_run_dyn.opt_nohooks"
    sdfg = fx.load(form)
    step = pipeline.WRITE_THROUGH
    pipeline.WRITE_THROUGH = step if write_through else "(skipped)"   # an unknown name: optimize skips it
    try:
        sdfg_scan.optimize(sdfg, target="cpu", reproducibility=reproducibility, inplace=GRAUPEL_INPLACE,
                           vectorize_maps=vectorize_maps, persistent_transients=None if persistent else False)
    finally:
        pipeline.WRITE_THROUGH = step
    if fast_pow_maps:
        from sdfg_scan.transformations.vectorize_cell_map import vectorize_cell_maps

        assert vectorize_cell_maps(sdfg) > 0
    for n, _ in sdfg.all_nodes_recursive():
        if isinstance(n, Scan) and impl is not None:
            n.implementation = impl
    return sdfg


def _compile_default_flags(sdfg):
    """The SDFG built with DaCe's default CPU flags (what gt4py's own build uses)."""
    import copy
    import tempfile

    sdfg = copy.deepcopy(sdfg)
    sdfg.name = "graupel_default_flags"
    sdfg.build_folder = tempfile.mkdtemp(prefix="sdfg_scan_bench_")
    return sdfg.compile()


def _compile_libm_wrappers(sdfg, name: str):
    """``sdfg`` built with the IEEE-strict flags but without ``sdfg_scan_libm.h`` (the program's scalar
    ``pow``/``exp``/``log`` through glibc's errno wrappers, as before that header): the "before" row."""
    import tempfile

    import dace

    from sdfg_scan.expansions import environments as envs
    from sdfg_scan.expansions.scan_blocked import VectorMath

    sdfg = copy.deepcopy(sdfg)
    sdfg.name = name
    sdfg.build_folder = tempfile.mkdtemp(prefix="sdfg_scan_bench_")
    saved = envs.ExactArithmetic.cmake_compile_flags, VectorMath.cmake_compile_flags
    envs.ExactArithmetic.cmake_compile_flags = [f for f in saved[0] if f not in envs.libm_flags()]
    VectorMath.cmake_compile_flags = [f for f in saved[1] if f not in envs.libm_flags()]
    args = dace.Config.get("compiler", "cpu", "args") + " " + " ".join(envs.STRICT_HOST_FLAGS)
    try:
        with dace.config.set_temporary("compiler", "cpu", "args", value=args):
            return sdfg.compile()
    finally:
        envs.ExactArithmetic.cmake_compile_flags, VectorMath.cmake_compile_flags = saved


def _replay_error(label: str, ref: dict, rep: dict) -> list[str]:
    """Per output: max relative difference to the IEEE-strict build, share beyond rtol 1e-6, new NaN/Inf,
    flipped boolean (branch) outputs."""
    rows = []
    for n in sorted(ref):
        x, y = ref[n], rep[n]
        if np.array_equal(x, y, equal_nan=True):
            continue
        if x.dtype.kind != "f":
            rows.append(f"  {label} {n:8}: {int(np.sum(x != y))} entries differ")
            continue
        fin = np.isfinite(x)
        err = np.where(fin, np.abs(x - y), 0.0)
        rel = err / np.maximum(np.abs(x), np.finfo(float).tiny)
        scale = float(np.max(np.abs(np.where(fin, x, 0.0)), initial=0.0)) or 1.0
        rows.append(f"  {label} {n:8}: max rel {rel.max():.2e}, entries beyond rtol 1e-6 "
                    f"{100 * np.mean(rel > 1e-6):.4f}%, max abs / max |x| {err.max() / scale:.1e}, "
                    f"new NaN/Inf {int(np.sum(fin & ~np.isfinite(y)))}")
    return rows or [f"  {label}: every output bitwise equal to the IEEE-strict build"]


PROFILE_GROUPS = (("libm.so", "scalar libm (pow, exp, log)"), ("libmvec", "vector math (libmvec)"),
                  ("libgomp", "OpenMP runtime"), ("libc.so", "libc (memcpy, memset, malloc)"),
                  ("[kernel", "kernel (page faults, scheduling)"))
"""``perf``'s shared objects -> the groups :func:`profile_summary` prints; the program's own library, and
everything else, are the other two groups."""


def profile_summary(label: str, compiled, kw: dict, seconds: float) -> list[str]:
    """Where ``compiled``'s time goes: ``perf record`` on this process while it calls ``compiled`` for
    ``seconds``, summed per group of :data:`PROFILE_GROUPS` and the program's own code, plus the five
    heaviest symbols; one line saying why where ``perf`` is missing or refused."""
    import os
    import shutil
    import subprocess
    import tempfile

    if shutil.which("perf") is None:
        return [f"  profile {label}: skipped (no perf on PATH)"]
    data = os.path.join(tempfile.mkdtemp(prefix="sdfg_scan_perf_"), "perf.data")
    rec = subprocess.Popen(["perf", "record", "-q", "-F", "999", "-p", str(os.getpid()), "-o", data, "--",
                            "sleep", str(seconds)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    time.sleep(0.3)   # perf attaches
    while rec.poll() is None:
        compiled(**fx.fresh(kw))
    err = rec.stderr.read() if rec.stderr else ""
    out = subprocess.run(["perf", "report", "-i", data, "--no-children", "--sort", "dso,sym", "--stdio"],
                         capture_output=True, text=True)
    if rec.returncode != 0 or out.returncode != 0:
        why = (err or out.stderr).strip().splitlines()
        return [f"  profile {label}: skipped (perf failed: {why[0] if why else rec.returncode})"]
    program = os.path.basename(getattr(compiled, "filename", ""))
    groups: dict[str, float] = {}
    top: list[tuple[float, str]] = []
    for line in out.stdout.splitlines():
        parts = line.split()
        if len(parts) < 3 or line.lstrip().startswith("#") or not parts[0].endswith("%"):
            continue
        share, dso, sym = float(parts[0][:-1]), parts[1], " ".join(parts[3:] if parts[2] == "[.]" or
                                                                   parts[2] == "[k]" else parts[2:])
        name = next((g for key, g in PROFILE_GROUPS if dso.startswith(key)), None)
        if name is None:
            name = "the program's own code" if dso == program else "other (Python, NumPy, ...)"
        groups[name] = groups.get(name, 0.0) + share
        top.append((share, f"{sym} ({dso})"))
    rows = [f"  profile {label} (perf, {seconds:g} s of calls): " +
            ", ".join(f"{g} {v:.1f}%" for g, v in sorted(groups.items(), key=lambda kv: -kv[1]))]
    rows += [f"      {share:5.1f}%  {what}" for share, what in sorted(top, reverse=True)[:5]]
    return rows


class SameBuffers:
    """One compiled variant called on the same buffers every time, as a model's time loop calls a program
    (its fields allocated once): the inputs' values are copied back into them before each call, outside the
    timing (graupel writes some outputs in place; without the copy each call would start from the state the
    last one left)."""

    def __init__(self, compiled, kw: dict):
        self.args = fx.fresh(kw)
        # (buffer, its input) once per buffer: an aliased pair (graupel's q_in/q_out) is one buffer, copied once
        self.inputs = list({id(self.args[k]): (self.args[k], v) for k, v in kw.items()
                            if isinstance(v, np.ndarray)}.values())
        self.call = compiled_call(compiled, **self.args)
        self.reset()
        self.call()   # warm-up

    def reset(self) -> None:
        for buf, value in self.inputs:
            np.copyto(buf, value)

    def sample(self) -> float:
        self.reset()
        t0 = time.perf_counter()
        self.call()
        return time.perf_counter() - t0


BUFFERS = ("fresh", "same", "loop")
"""How ``bench_graupel_blocked`` times a call: on fresh copies of the inputs every call (``samples_of``: new
memory every sample, the rows of every stop before 47), on the same buffers every call (:class:`SameBuffers`),
or as ``same`` but each variant alone in a process of its own (:func:`loop_samples`, stop 48)."""


def loop_samples(compiled, kw: dict | Path, samples: int) -> tuple[list[float], list[int]]:
    """``samples`` calls of ``compiled`` timed as :class:`SameBuffers` does, in a new Python process that
    loads the compiled program from its build folder and holds nothing else: a model's time loop (its fields
    allocated once, one program called again and again), where what glibc's allocator does with the
    program's per-call transients depends on that process alone, not on the other variants' buffers.
    ``kw``: the arguments, or the path of a pickle of them (:func:`_pickled`; written once for many calls).
    Returns the times and the minor page faults of each call."""
    import json
    import subprocess
    import tempfile

    if not isinstance(kw, Path):
        with tempfile.TemporaryDirectory(prefix="sdfg_scan_loop_") as tmp:
            return loop_samples(compiled, _pickled(kw, Path(tmp)), samples)
    out = subprocess.run([sys.executable, __file__, "--loop-child", str(compiled.sdfg.build_folder), str(kw),
                          str(samples)], check=True, capture_output=True, text=True).stdout
    res = json.loads(out.strip().splitlines()[-1])
    return res["times"], res["faults"]


def _pickled(kw: dict, folder: Path) -> Path:
    """``kw`` pickled into ``folder``: the inputs of :func:`loop_samples`' processes."""
    import pickle

    path = folder / "kw.pickle"
    with open(path, "wb") as f:
        pickle.dump(kw, f, protocol=pickle.HIGHEST_PROTOCOL)
    return path


def _loop_child(folder: str, kw_path: str, samples: int) -> int:
    """The process of :func:`loop_samples`: prints one JSON line."""
    import json
    import pickle
    import resource

    from dace.codegen import compiler

    with open(kw_path, "rb") as f:
        kw = pickle.load(f)
    same = SameBuffers(compiler.load_precompiled_sdfg(folder), kw)   # (one warm-up call)
    times, faults = [], []
    for _ in range(samples):
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        times.append(same.sample())
        faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
    print(json.dumps({"times": times, "faults": faults}))
    return 0


def _interleaved_rows(variants: dict, kw: dict, samples: int, buffers: str = "fresh") -> list[str]:
    """One row per compiled variant: min and median of ``samples`` calls, interleaved (load changes on the
    shared machine hit every variant alike) in a new random order every round (seeded), so that no row has a
    fixed place (in a fixed order two identical builds of graupel measured 0.222 s and 0.199 s, min of 21, in
    one run); and the speed-up over the ``"gt4py default flags"`` variant. ``buffers``: one of
    :data:`BUFFERS`."""
    if buffers not in BUFFERS:
        raise ValueError(f"buffers must be one of {BUFFERS}, not {buffers!r}")
    times: dict[str, list[float]] = {k: [] for k in variants}
    faults: dict[str, list[int]] = {k: [] for k in variants}
    order = random.Random(0)
    if buffers == "loop":   # a process per variant and round; the rounds interleaved as the calls are below
        import tempfile

        rounds = min(3, samples)
        with tempfile.TemporaryDirectory(prefix="sdfg_scan_loop_") as tmp:
            path = _pickled(kw, Path(tmp))
            for r in range(rounds):
                keys = list(variants)
                order.shuffle(keys)
                for k in keys:
                    t, f = loop_samples(variants[k], path, samples // rounds + (r < samples % rounds))
                    times[k] += t
                    faults[k] += f
    else:
        same = {k: SameBuffers(c, kw) for k, c in variants.items()} if buffers == "same" else None
        for _ in range(samples):
            keys = list(variants)
            order.shuffle(keys)
            for k in keys:
                times[k] += [same[k].sample()] if same is not None else samples_of(variants[k], kw, 1, 1)
    base = min(times["gt4py default flags"])
    return [f"  {k:30} min {min(t):.3e} s  med {np.median(t):.3e} s  speed-up vs default flags {base / min(t):5.2f}"
            + (f"  minor page faults per call {int(np.median(faults[k]))}" if faults[k] else "")
            for k, t in times.items()]


def bench_graupel_blocked(size: tuple[int, int], samples: int, profile_seconds: float = 0.0,
                          only_rows: list[str] | None = None, buffers: tuple[str, ...] = ("fresh",)) -> list[str]:
    """``graupel_run_dyn`` at ``size``: gt4py's SDFG (DaCe default flags; IEEE-strict) vs the ``blocked``
    (exact) and ``blocked_simd`` (replay) expansions; exact is checked bitwise against the IEEE-strict
    build, replay against rtol 1e-6 on 99.9 % of every output's entries and for new NaN/Inf."""
    form = "graupel_run_dyn.opt_nohooks"
    ncells, nlev = size
    kw = fx.inputs(form, fx.load(form), ncells=ncells, nlev=nlev)
    wet = np.mean(np.any([kw[f"q_in_{i}"] > 0.0 for i in range(2, 6)], axis=0))
    makers = {"gt4py default flags": lambda: _compile_default_flags(fx.load(form)),
                "gt4py IEEE-strict": lambda: fx.compile_once("bench_graupel_strict", fx.load(form)),
                "auto (exact)": lambda: fx.compile_once("bench_graupel_auto_exact", _graupel_blocked(None, "exact", None)),
                "exact, maps vectorised": lambda: fx.compile_once("bench_graupel_exact_maps_vectorised",
                                                          _graupel_blocked(None, "exact", True)),
                "exact, maps scalar": lambda: fx.compile_once("bench_graupel_exact_maps_scalar",
                                                      _graupel_blocked(None, "exact", False)),
                "auto, libm errno wrappers": lambda: _compile_libm_wrappers(_graupel_blocked(None, "exact", None),
                                                                   "bench_graupel_auto_exact_wrapped"),
                "auto, no ResultWriteThrough": lambda: fx.compile_once(
                    "bench_graupel_auto_exact_nowt", _graupel_blocked(None, "exact", None, write_through=False)),
                "levels_outside (exact)": lambda: fx.compile_once("bench_graupel_levels_outside",
                                                          _graupel_blocked("levels_outside", "exact")),
                "blocked (exact)": lambda: fx.compile_once("bench_graupel_blocked", _graupel_blocked("blocked", "exact")),
                "blocked + vectorize_maps (exact)": lambda: fx.compile_once(
                    "bench_graupel_blocked_vm", _graupel_blocked("blocked", "exact", True)),
                "blocked_simd_exact (exact)": lambda: fx.compile_once(
                    "bench_graupel_blocked_simd_exact", _graupel_blocked("blocked_simd_exact", "exact")),
                "blocked_simd_exact + vectorize_maps (exact)": lambda: fx.compile_once(
                    "bench_graupel_blocked_simd_exact_vm", _graupel_blocked("blocked_simd_exact", "exact", True)),
                "blocked_kcached (exact)": lambda: fx.compile_once("bench_graupel_blocked_kc",
                                                           _graupel_blocked("blocked_kcached", "exact")),
                "auto, per-call transients (exact)": lambda: fx.compile_once(
                    "bench_graupel_auto_exact_pc", _graupel_blocked(None, "exact", None, persistent=False)),
                "auto (replay)": lambda: fx.compile_once("bench_graupel_auto_replay", _graupel_blocked(None, "replay", None)),
                "auto (replay), libm errno wrappers": lambda: _compile_libm_wrappers(
                    _graupel_blocked(None, "replay", None), "bench_graupel_auto_replay_wrapped"),
                "auto (replay), no ResultWriteThrough": lambda: fx.compile_once(
                    "bench_graupel_auto_replay_nowt", _graupel_blocked(None, "replay", None, write_through=False)),
                "auto, per-call transients (replay)": lambda: fx.compile_once(
                    "bench_graupel_auto_replay_pc", _graupel_blocked(None, "replay", None, persistent=False)),
                "replay, maps scalar": lambda: fx.compile_once("bench_graupel_blocked_simd",
                                                       _graupel_blocked("blocked_simd", "replay", False)),
                "+ vectorize_cell_maps, fast pow": lambda: fx.compile_once(
                    "bench_graupel_vmaps_fast", _graupel_blocked("blocked_simd", "replay", fast_pow_maps=True))}
    keep = [r for r in makers if only_rows is None or r in ("gt4py default flags", "gt4py IEEE-strict")
            or any(part[1:] == r if part.startswith("=") else part in r for part in only_rows)]
    variants = {r: makers[r]() for r in keep}
    outs = fx.outputs_of(variants, kw)

    def same(a: str, b: str) -> None:
        if a in outs and b in outs:
            fx.assert_bitwise_equal(outs[a], outs[b])

    same("gt4py IEEE-strict", "auto (exact)")
    same("gt4py IEEE-strict", "exact, maps vectorised")
    same("gt4py IEEE-strict", "exact, maps scalar")
    same("gt4py IEEE-strict", "auto, no ResultWriteThrough")
    same("gt4py IEEE-strict", "auto, libm errno wrappers")
    same("auto (replay)", "auto (replay), libm errno wrappers")
    same("auto (replay)", "auto (replay), no ResultWriteThrough")
    same("gt4py IEEE-strict", "levels_outside (exact)")
    same("gt4py IEEE-strict", "blocked (exact)")
    same("gt4py IEEE-strict", "blocked_kcached (exact)")
    same("gt4py IEEE-strict", "blocked_simd_exact (exact)")
    same("gt4py IEEE-strict", "blocked + vectorize_maps (exact)")
    same("gt4py IEEE-strict", "blocked_simd_exact + vectorize_maps (exact)")
    same("gt4py IEEE-strict", "auto, per-call transients (exact)")
    same("auto (replay)", "auto, per-call transients (replay)")
    rows = [f"{GRAUPEL_LABEL} {ncells}x{nlev}: {100 * wet:.0f}% of the (cell, level) points hold precipitation; "
            "every exact row (auto = optimize(reproducibility='exact'): blocked_timed (blocked or blocked_simd_exact, the faster after its first calls; SDFG_SCAN_TIMED_REPORT=1 prints which), the pointwise maps whose math "
            "calls are staged in their exact vectorised form (since stop 46; here all of them); exact, maps "
            "vectorised: vectorize_maps=True, every map; exact, maps scalar: vectorize_maps=False, gt4py's scalar "
            "code, the default of stops 42 to 45) bitwise equal to the IEEE-strict build; "
            "every optimized row allocates its transients once (optimize's default on the CPU since stop 48), "
            "but the per-call transients rows: optimize(persistent_transients=False); auto (replay) = "
            "optimize(reproducibility='replay'): blocked_simd and the pointwise maps vectorised with the accurate "
            "pow; replay, maps scalar: the same with vectorize_maps=False"]
    ref = outs["gt4py IEEE-strict"]
    labels = ["replay, maps scalar", "auto (replay)", "+ vectorize_cell_maps, fast pow"]
    if "auto (replay)" not in outs:   # (else it is bitwise auto (replay), checked above)
        labels.append("auto, per-call transients (replay)")
    for label in labels:
        if label in outs:
            rows += _replay_error(label, ref, outs[label])
    for b in buffers:
        if len(buffers) > 1 or b != "fresh":
            rows.append("timed on " + {"fresh": "fresh copies of the inputs every call:",
                                       "same": "the same buffers every call (the inputs copied back in before "
                                               "each call, outside the timing):",
                                       "loop": "the same buffers every call, each variant alone in a process of "
                                               "its own (a model's time loop):"}[b])
        rows += _interleaved_rows(variants, kw, samples, b)
    if profile_seconds > 0:
        for k in ("gt4py default flags", "auto (exact)", "exact, maps vectorised", "blocked + vectorize_maps (exact)",
                  "blocked_simd_exact (exact)", "replay, maps scalar",
                  "auto (replay)", "+ vectorize_cell_maps, fast pow", "auto, per-call transients (exact)",
                  "auto, per-call transients (replay)"):
            if k in variants:
                rows += profile_summary(k, variants[k], kw, profile_seconds)
    return rows


def _with_decisions(sdfg, names: list[str]):
    """``sdfg`` with its top-level ``bool`` transient arrays ``names`` (the branch decisions it stores: gt4py's
    masks, the per-level flags the scan reads) made arguments, so that a call returns them."""
    for n in names:
        sdfg.arrays[n].transient = False
    return sdfg


def _decision_arrays(sdfg) -> list[str]:
    import dace

    return sorted(n for n, d in sdfg.arrays.items()
                  if d.transient and type(d) is dace.data.Array and d.dtype == dace.bool_)


def _decision_buffers(sdfg, names: list[str], kw: dict) -> dict:
    """Zeroed buffers for the decision arrays, shaped and strided as ``sdfg`` declares them at ``kw``'s sizes."""
    import dace

    syms = {k: v for k, v in kw.items() if not isinstance(v, np.ndarray)}
    out = {}
    for n in names:
        d = sdfg.arrays[n]
        shape = tuple(int(dace.symbolic.evaluate(e, syms)) for e in d.shape)
        strides = tuple(int(dace.symbolic.evaluate(e, syms)) for e in d.strides)
        size = int(dace.symbolic.evaluate(d.total_size, syms))
        base = np.zeros(max(size, 1), dtype=np.bool_)
        out[n] = np.lib.stride_tricks.as_strided(base, shape, tuple(st * base.itemsize for st in strides))
    return out


def bench_graupel_decisions(size: tuple[int, int]) -> list[str]:
    """Whether replay flips a branch decision of ``graupel_run_dyn`` against exact: every ``bool`` array the
    optimised program stores at the top level (gt4py's masks and the per-level flags its scan branches on)
    made an output of both builds, then compared entry by entry, with the float outputs beside them."""
    import dace

    form = "graupel_run_dyn.opt_nohooks"
    ncells, nlev = size
    kw = fx.inputs(form, fx.load(form), ncells=ncells, nlev=nlev)
    sdfgs = {r: _graupel_blocked(None, r, None) for r in ("exact", "replay")}
    names = sorted(set(_decision_arrays(sdfgs["exact"])) & set(_decision_arrays(sdfgs["replay"])))
    outs = {}
    for r, sdfg in sdfgs.items():
        prog = fx.compile_once(f"bench_graupel_decisions_{r}", _with_decisions(sdfg, names))
        args = {**fx.fresh(kw), **_decision_buffers(prog.sdfg, names, kw)}
        with dace.config.set_temporary("compiler", "allow_view_arguments", value=True):   # strided bool buffers
            prog(**args)
        outs[r] = {n: np.array(v) for n, v in args.items() if isinstance(v, np.ndarray)}
    rows = [f"graupel_run_dyn {ncells}x{nlev}: the branch decisions stored in {len(names)} bool arrays "
            f"({', '.join(names)}), replay against exact (exact: bitwise the IEEE-strict build)"]
    for n in names:
        a, b = outs["exact"][n], outs["replay"][n]
        rows.append(f"  {n:16}: {int(np.sum(a != b))} of {a.size} entries flipped ({int(np.sum(a))} true in exact)")
    return rows + _replay_error("auto (replay) against auto (exact)",
                                {n: v for n, v in outs["exact"].items() if n not in names},
                                {n: v for n, v in outs["replay"].items() if n not in names})


def bench_graupel_static(samples: int) -> list[str]:
    """``graupel_run`` (the static-domain fixture, 100 cells x 65 levels): gt4py's SDFG (default flags,
    IEEE-strict) against ``optimize`` under ``exact`` and ``replay``, each with scalar and with vectorised
    maps; exact rows checked bitwise against the strict build. Min of ``samples`` interleaved calls."""
    form = "graupel_run.opt_nohooks"
    kw = fx.inputs(form, fx.load(form))

    def opt(rep: str, maps: bool):
        sdfg = fx.load(form)
        sdfg_scan.optimize(sdfg, target="cpu", reproducibility=rep, inplace=GRAUPEL_INPLACE, vectorize_maps=maps)
        return sdfg

    variants = {"gt4py default flags": _compile_default_flags(fx.load(form)),
                "gt4py IEEE-strict": fx.compile_once("bench_static_strict", fx.load(form))}
    for rep in ("exact", "replay"):
        for maps in (False, True):
            variants[f"{rep}, maps {'vectorised' if maps else 'scalar'}"] = fx.compile_once(
                f"bench_static_{rep}_{maps}", opt(rep, maps))
    outs = fx.outputs_of(variants, kw)
    for k in ("exact, maps scalar", "exact, maps vectorised"):
        fx.assert_bitwise_equal(outs["gt4py IEEE-strict"], outs[k])
    return (["graupel_run (static, 100 x 65): exact rows bitwise equal to the IEEE-strict build"]
            + _interleaved_rows(variants, kw, samples))


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--loop-child"]:   # loop_samples' process: --loop-child FOLDER KW_PICKLE SAMPLES
        return _loop_child(argv[1], argv[2], int(argv[3]))
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ncells", type=int, default=20480)
    ap.add_argument("--nlev", type=int, default=65)
    ap.add_argument("--samples", type=int, default=7)
    ap.add_argument("--repeat", type=int, default=50)
    ap.add_argument("--only", default="all",
                    choices=("all", "dycore_pair", "graupel_blocked", "graupel_static", "graupel_decisions"))
    ap.add_argument("--profile-seconds", type=float, default=4.0,
                    help="graupel rows: perf profile of each main variant for this long (0: none)")
    ap.add_argument("--graupel-rows", default="",
                    help="graupel: only the rows whose names contain one of these comma-separated parts, or "
                         "equal a part written with a leading '=' (the two gt4py baselines always run); default "
                         "every row")
    ap.add_argument("--buffers", default="fresh",
                    help="graupel_run_dyn rows: 'fresh' (new copies of the inputs every call), 'same' (the same "
                         "buffers every call, the inputs copied back in before each, outside the timing), 'loop' "
                         "(as same, each variant alone in a process of its own: a model's time loop; with its "
                         "minor page faults per call), or several, comma-separated (one table each, same builds)")
    ap.add_argument("--graupel-sdfg", default="",
                    help="graupel_run_dyn rows: time this SDFG file instead of the graupel_run_dyn fixture: another "
                         "program with graupel's arguments, e.g. icon4py's muphys_run as gt4py built it "
                         "(program.sdfgz in gt4py's build cache, stock variant)")
    a = ap.parse_args(argv)
    if a.graupel_sdfg:
        if not Path(a.graupel_sdfg).is_file():
            ap.error(f"--graupel-sdfg: no SDFG file {a.graupel_sdfg}")
        fx.override("graupel_run_dyn.opt_nohooks", a.graupel_sdfg)
        global GRAUPEL_LABEL
        GRAUPEL_LABEL = Path(a.graupel_sdfg).name if Path(a.graupel_sdfg).stem != "program" \
            else Path(a.graupel_sdfg).parent.name
    buffers = tuple(b.strip() for b in a.buffers.split(",") if b.strip())
    if not buffers or any(b not in BUFFERS for b in buffers):
        ap.error(f"--buffers: comma-separated parts of {BUFFERS}, got {a.buffers!r}")
    only_rows = [r.strip() for r in a.graupel_rows.split(",") if r.strip()] or None
    if not fx.available() and not (a.graupel_sdfg and a.only in ("graupel_blocked", "graupel_decisions")):
        print(fx.SKIP_REASON)
        return 0
    if a.only == "graupel_static":
        print("\n".join(bench_graupel_static(max(a.samples, 15))))
        return 0
    if a.only == "graupel_decisions":
        print("\n".join(bench_graupel_decisions((a.ncells, a.nlev))))
        return 0
    if a.only == "graupel_blocked":
        print("\n".join(bench_graupel_blocked((a.ncells, a.nlev), a.samples, a.profile_seconds, only_rows, buffers)))
        return 0
    pair_rows = bench_dycore_pair((a.ncells, a.nlev), a.samples, max(1, a.repeat // 10))
    if a.only == "dycore_pair":
        print("\n".join(pair_rows))
        return 0
    rows: list = []
    bench("graupel_run (static)", ["graupel_run.opt_hooks", "graupel_run.opt_nohooks"], "graupel_run.opt_nohooks",
          (100, 65), a.samples, a.repeat, rows)
    bench("graupel_run_dyn", ["graupel_run_dyn.opt_nohooks"], "graupel_run_dyn.opt_nohooks", (a.ncells, a.nlev),
          a.samples, max(1, a.repeat // 25), rows)
    bench("diagnose_pressure (static)", ["diagnose_pressure.opt"], "diagnose_pressure.opt", (100, 65), a.samples,
          a.repeat, rows)
    for form in ("minimal_cumsum_k.opt", "solve_tridiagonal_matrix_for_w_forward_sweep.opt",
                 "solve_tridiagonal_matrix_for_w_back_substitution.opt"):
        bench(form.split(".")[0], [form], form, (a.ncells, a.nlev), a.samples, max(1, a.repeat // 25), rows)
    print(f"{'program':28} {'cells x lev':>12} {'baseline':>14} {'baseline s':>11} {'ours s':>11} {'speed-up':>9}  applied")
    for label, size, base, tb, to, counts in rows:
        applied = ", ".join(f"{k}={v}" for k, v in counts.items())
        print(f"{label:28} {size:>12} {base:>14} {tb:11.3e} {to:11.3e} {tb / to:9.2f}  {applied}")
    print("\n".join(pair_rows))
    print("\n".join(bench_graupel_blocked((a.ncells, a.nlev), a.samples, a.profile_seconds, only_rows, buffers)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
