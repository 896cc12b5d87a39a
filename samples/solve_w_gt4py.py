"""icon4py's implicit solve for ``w`` (``solve_w``, the Thomas pair of the dycore) through gt4py, three ways.

``make solve-w`` (not in CI) installs icon4py's dycore package into the gt4py venv and runs this script.
The program is a one-line gt4py program around icon4py's own field operator ``solve_w`` (icon4py 0.4.1,
``vertically_implicit_dycore_solver.py``: the forward sweep under ``concat_where(K > 0, ...)`` and the
back substitution under ``concat_where(K < last_inner_level, ...)``), built by icon4py's DaCe CPU backend
(``make_custom_dace_backend``):

* ``stock``: as icon4py builds it;
* ``stock_strict``: the same SDFG with the IEEE-strict flags (``sdfg_scan.select.pin_flags``);
* ``sdfg_scan_exact``: ``sdfg_scan.gt4py.optimization_hooks(reproducibility="exact")``; its report says
  which transformations applied (``ScanPairToTridiagonal``: whether the pair became one
  ``TridiagonalSolve``).

Seeded inputs (a diagonally dominant system), ``SOLVE_W_CELLS`` x ``SOLVE_W_LEVELS`` (default 20480 x 66
half levels, ``last_inner_level`` = levels - 1), median of ``SOLVE_W_REPEAT`` calls after the build.
Without gt4py / icon4py's dycore (the main venv) :func:`main` says so and returns 0.
"""


import os
import sys
import time

os.environ.setdefault("GT4PY_BUILD_JOBS_MODE", "serial")   # translate in this process: the hooks' report is here
NCELLS = int(os.environ.get("SOLVE_W_CELLS", 20480))
NLEV = int(os.environ.get("SOLVE_W_LEVELS", 66))
REPEAT = int(os.environ.get("SOLVE_W_REPEAT", 20))


def _program():
    """A gt4py program whose body is icon4py's ``solve_w``: the dycore pair as icon4py composes it."""
    import gt4py.next as gtx
    from icon4py.model.atmosphere.dycore.stencils.vertically_implicit_dycore_solver import solve_w
    from icon4py.model.common import dimension as dims

    cell_k = gtx.Field[gtx.Dims[dims.CellDim, dims.KDim], gtx.float64]
    cell = gtx.Field[gtx.Dims[dims.CellDim], gtx.float64]

    @gtx.program
    def icon4py_solve_w(last_inner_level: gtx.int32, next_w: cell_k, vwind_impl_wgt: cell, theta_v_ic: cell_k,
                        ddqz_z_half: cell_k, z_alpha: cell_k, z_beta: cell_k, z_w_expl: cell_k,
                        z_exner_expl: cell_k, dtime: gtx.float64, cpd: gtx.float64, out: cell_k):
        solve_w(last_inner_level, next_w, vwind_impl_wgt, theta_v_ic, ddqz_z_half, z_alpha, z_beta, z_w_expl,
                z_exner_expl, dtime, cpd, out=out)

    return icon4py_solve_w


def _backend(variant: str):
    """``(backend, hooks or None)`` for ``variant`` (module docstring)."""
    from gt4py.next.program_processors.runners.dace.transformations import GT4PyAutoOptHook as Hook
    from icon4py.model.common import model_backends

    import sdfg_scan.gt4py as sg
    from sdfg_scan.select import pin_flags

    hooks = None
    if variant == "stock_strict":
        hooks = {Hook.TopLevelDataFlowPost: lambda sdfg: pin_flags(sdfg, "exact")}
    elif variant == "sdfg_scan_exact":
        hooks = sg.optimization_hooks(gpu=False, reproducibility="exact")
    args = {"optimization_hooks": hooks} if hooks is not None else {}
    return model_backends.make_custom_dace_backend(device=model_backends.CPU, optimization_args=args), hooks


def _inputs(rng, n: int, nk: int) -> dict:
    import gt4py.next as gtx
    import numpy as np
    from icon4py.model.common import dimension as dims

    def field(*shape, lo=0.1, hi=1.0):
        a = np.asfortranarray(rng.uniform(lo, hi, shape))   # cell-contiguous, as icon4py allocates
        return gtx.as_field([dims.CellDim, dims.KDim][:len(shape)], a, allocator=np)

    return dict(next_w=field(n, nk), vwind_impl_wgt=field(n, lo=0.4, hi=0.6), theta_v_ic=field(n, nk, lo=250, hi=320),
                ddqz_z_half=field(n, nk, lo=20, hi=400), z_alpha=field(n, nk), z_beta=field(n, nk, lo=0.01, hi=0.1),
                z_w_expl=field(n, nk, lo=-1, hi=1), z_exner_expl=field(n, nk, lo=-1e-3, hi=1e-3))


def run(ncells: int = NCELLS, nlev: int = NLEV, repeat: int = REPEAT) -> list[tuple]:
    import gt4py.next as gtx
    import numpy as np
    from icon4py.model.common import dimension as dims

    program, rows, outs = _program(), [], {}
    data = _inputs(np.random.default_rng(5), ncells, nlev)
    for variant in ("stock", "stock_strict", "sdfg_scan_exact"):
        backend, hooks = _backend(variant)
        prog = program.with_backend(backend)
        out = gtx.as_field([dims.CellDim, dims.KDim], np.zeros((ncells, nlev), order="F"), allocator=np)
        call = lambda prog=prog, out=out: prog(gtx.int32(nlev - 1), **data, dtime=10.0,  # noqa: E731
                                               cpd=1004.64, out=out, offset_provider={})
        t0 = time.perf_counter()
        call()   # builds
        build = time.perf_counter() - t0
        times = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            call()
            times.append(time.perf_counter() - t0)
        outs[variant] = out.asnumpy().copy()
        ref = outs.get("stock_strict")
        same = "-" if ref is None or variant == "stock_strict" else (
            "bitwise" if np.array_equal(ref.view(np.uint64), outs[variant].view(np.uint64)) else
            f"max rel {float(np.max(np.abs(outs[variant] - ref) / np.maximum(np.abs(ref), 1e-300))):.1e}")
        rows.append((variant, build, float(np.median(times)), same))
        print(f"{variant:16} build {build:6.1f} s  {1e3 * rows[-1][2]:8.2f} ms/call  vs stock_strict: {same}",
              flush=True)
        if hooks is not None and hasattr(hooks, "reports"):
            for report in hooks.reports:
                print("  sdfg_scan applied:", {k: v for k, v in report.applied.items() if v})
    base = rows[0][2]
    print("\n| variant | build s | ms per call | speed-up vs stock | vs stock_strict |\n|---|---:|---:|---:|---|")
    for variant, build, t, same in rows:
        print(f"| {variant} | {build:.0f} | {1e3 * t:.2f} | {base / t:.2f} | {same} |")
    return rows


def main() -> int:
    try:
        import gt4py.next  # noqa: F401
        from icon4py.model.atmosphere.dycore.stencils import vertically_implicit_dycore_solver  # noqa: F401
    except ImportError as e:
        print(f"solve_w_gt4py: skipped ({e}); run `make solve-w` (gt4py venv, Python >= 3.12)")
        return 0
    print(f"icon4py solve_w, {NCELLS} x {NLEV}, gt4py DaCe CPU backend, median of {REPEAT} calls")
    run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
