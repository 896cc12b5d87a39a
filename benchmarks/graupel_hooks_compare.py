"""Time graupel built through gt4py with sdfg_scan's hooks against gt4py's own build (main venv).

``python benchmarks/graupel_hooks_compare.py SAMPLES SDFG...``: each SDFG written by
``benchmarks/graupel_hooks_sdfg.py`` is compiled, checked bitwise against the fixture's gt4py build
compiled IEEE-strict (``exact`` hooks; ``replay`` ones: their error against it), and timed at 20480 x 65 against that build with DaCe's default
flags (what icon4py runs) and IEEE-strict: min and median of ``SAMPLES`` interleaved calls, inputs aliased
as icon4py's graupel driver passes them.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from bench_icon4py import _compile_default_flags, _replay_error, fx, samples_of  # noqa: E402


def main(samples: int, paths: list[str]) -> None:
    import dace

    form = "graupel_run_dyn.opt_nohooks"
    kw = fx.inputs(form, fx.load(form), ncells=20480, nlev=65)
    variants = {"gt4py default flags": _compile_default_flags(fx.load(form)),
                "gt4py IEEE-strict": fx.compile_once("hooks_cmp_strict", fx.load(form))}
    for p in paths:
        variants[Path(p).stem] = fx.compile_once(f"hooks_cmp_{Path(p).stem}", dace.SDFG.from_file(p))
    outs = fx.outputs_of(variants, kw)
    for k in list(variants)[2:]:
        if k.endswith("_exact"):
            fx.assert_bitwise_equal(outs["gt4py IEEE-strict"], outs[k])
            print(f"{k}: bitwise equal to the IEEE-strict build")
        else:   # replay: against the strict build, per output (max relative difference, share beyond rtol)
            print("\n".join(_replay_error(k, outs["gt4py IEEE-strict"], outs[k])))
    times: dict[str, list[float]] = {k: [] for k in variants}
    for _ in range(samples):   # interleaved: load changes hit every variant alike
        for k, c in variants.items():
            times[k] += samples_of(c, kw, 1, 1)
    t0, m0 = min(times["gt4py default flags"]), np.median(times["gt4py default flags"])
    for k, t in times.items():
        print(f"{k:28} min {min(t):.3f} s  median {np.median(t):.3f} s  speed-up {t0 / min(t):.2f}x (min) "
              f"{m0 / np.median(t):.2f}x (median)")


if __name__ == "__main__":
    main(int(sys.argv[1]), sys.argv[2:])
