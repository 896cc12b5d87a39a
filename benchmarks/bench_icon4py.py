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

"Ours" is ``sdfg_scan.optimize`` (with graupel's driver aliasing declared as ``inplace``).

Every transformed SDFG's outputs are checked bitwise against its baseline before timing.
Usage: ``python benchmarks/bench_icon4py.py [--ncells 20480] [--nlev 65] [--samples 7] [--repeat 50]``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

import icon4py_fixtures as fx  # noqa: E402

import sdfg_scan  # noqa: E402

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


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ncells", type=int, default=20480)
    ap.add_argument("--nlev", type=int, default=65)
    ap.add_argument("--samples", type=int, default=7)
    ap.add_argument("--repeat", type=int, default=50)
    a = ap.parse_args(argv)
    if not fx.available():
        print(fx.SKIP_REASON)
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
    return 0


if __name__ == "__main__":
    sys.exit(main())
