#!/usr/bin/env python
"""What the ``exact`` contract's whole-program IEEE-strict flags cost on a real program.

``sdfg_scan.compile_flags("exact")`` (no FMA contraction, no reciprocal math, signed zeros) is applied
to the whole program, not only to the code our expansions generate. This measures the price on
``graupel_run_dyn`` (20480 x 65 by default): gt4py's optimized SDFG built with DaCe's default flags
(what icon4py runs today) against the same SDFG built IEEE-strict, and the ``sdfg_scan.optimize``d
program built IEEE-strict (bitwise equal to the strict original, checked here). Samples interleave
the variants so that load changes on a shared machine hit them alike.

Usage: ``python benchmarks/bench_flags.py [--form graupel_run_dyn.opt_nohooks] [--ncells 20480] [--samples 5]``
"""

from __future__ import annotations

import argparse
import copy
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

import dace  # noqa: E402
import icon4py_fixtures as fx  # noqa: E402

import sdfg_scan  # noqa: E402


def build(sdfg: dace.SDFG, name: str, flags: list[str]):
    sdfg = copy.deepcopy(sdfg)
    sdfg.name = name
    args = dace.Config.get("compiler", "cpu", "args") + " " + " ".join(flags)
    with dace.config.set_temporary("compiler", "cpu", "args", value=args):
        return sdfg.compile()


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--form", default="graupel_run_dyn.opt_nohooks")
    p.add_argument("--ncells", type=int, default=20480)
    p.add_argument("--nlev", type=int, default=65)
    p.add_argument("--samples", type=int, default=5)
    a = p.parse_args(argv)
    if not fx.available():
        print(f"skipped: {fx.SKIP_REASON}")
        return 0
    original = fx.load(a.form)
    kw = fx.inputs(a.form, original, ncells=a.ncells, nlev=a.nlev)
    optimized = fx.load(a.form)
    sdfg_scan.optimize(optimized, target="cpu")
    strict = sdfg_scan.compile_flags("exact")
    variants = {"original, DaCe default flags": build(original, "flags_default", []),
                "original, IEEE-strict": build(original, "flags_strict", strict),
                "optimized, IEEE-strict": build(optimized, "flags_optimized", strict)}
    outs = {}
    for name, c in variants.items():
        args = fx.fresh(kw)
        c(**args)
        outs[name] = {k: v for k, v in args.items() if hasattr(v, "dtype")}
    fx.assert_bitwise_equal(outs["original, IEEE-strict"], outs["optimized, IEEE-strict"])
    best = dict.fromkeys(variants, float("inf"))
    for _ in range(a.samples):
        for name, c in variants.items():
            args = fx.fresh(kw)
            t = time.perf_counter()
            c(**args)
            best[name] = min(best[name], time.perf_counter() - t)
    base = best["original, DaCe default flags"]
    print(f"{a.form} at {a.ncells} x {a.nlev}, best of {a.samples} (optimized == strict original: bitwise)")
    print(f"{'variant':34} {'ms':>9} {'vs default flags':>17}")
    for name, t in best.items():
        print(f"{name:34} {t * 1e3:9.2f} {base / t:16.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
