"""gt4py's ``gt_auto_optimize`` on the lowered ``graupel_run_dyn`` fixture with sdfg_scan's hooks (gt4py venv).

``.venv-gt4py/bin/python benchmarks/graupel_hooks_sdfg.py MODE [REPRODUCIBILITY] [OUT_DIR]``, ``MODE``:

* ``default``: ``optimization_hooks(gpu=False, reproducibility=...)`` (any two arguments may share memory);
* ``declared``: plus ``inplace={"q_out": "q_in", "t_out": "te"}`` (icon4py's graupel driver's aliasing).

Writes ``OUT_DIR/graupel_<MODE>_<REPRODUCIBILITY>.sdfg`` (default ``/tmp``) and prints what the hooks
applied; ``benchmarks/graupel_hooks_compare.py`` (main venv) compiles and times it. Takes gt4py's
auto-optimize time (10-25 minutes on 2 cores). Needs ``../shared/fixtures/icon4py``.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

FIXTURES = Path(__file__).resolve().parents[2] / "shared" / "fixtures" / "icon4py"


def main(mode: str, reproducibility: str = "exact", out_dir: str = "/tmp") -> None:
    import dace
    from gt4py.next import common as gtx_common
    from gt4py.next.program_processors.runners.dace import transformations as gtx_tr

    import sdfg_scan.gt4py as sg

    if mode not in ("default", "declared"):
        raise SystemExit(f"graupel_hooks_sdfg: MODE must be 'default' or 'declared', got {mode!r}")
    meta = json.loads((FIXTURES / "graupel_run_dyn.meta.json").read_text())
    args = dict(meta["variants"]["opt_nohooks"]["auto_optimize_args"])   # how the fixture's gt4py build ran
    args.pop("make_persistent", None)
    args["unit_strides_kind"] = gtx_common.DimensionKind.HORIZONTAL
    sdfg = dace.SDFG.from_file(str(FIXTURES / "graupel_run_dyn.lowered.sdfgz"))
    kw = {"inplace": {"q_out": "q_in", "t_out": "te"}} if mode == "declared" else {}
    hooks = sg.optimization_hooks(gpu=False, reproducibility=reproducibility, horizontal_unit_stride=True, **kw)
    t0 = time.perf_counter()
    gtx_tr.gt_auto_optimize(sdfg, optimization_hooks=hooks, **args)
    print(f"gt_auto_optimize with the hooks: {time.perf_counter() - t0:.0f} s")
    for report in hooks.reports:
        print({k: v for k, v in report.applied.items() if v})
    out = Path(out_dir) / f"graupel_{mode}_{reproducibility}.sdfg"
    sdfg.save(str(out))
    print(f"wrote {out}")


if __name__ == "__main__":
    main(*sys.argv[1:])
