"""icon4py's graupel (``graupel_run``) end to end through gt4py's DaCe CPU backend, four ways.

``make graupel`` (not in CI) installs icon4py's muphys package into the gt4py venv and runs this script:

* ``stock``: gt4py's DaCe CPU backend as icon4py builds it (``make_custom_dace_backend``), no hooks;
* ``stock_strict``: the same SDFG built with the IEEE-strict flags (a hook that only calls
  ``sdfg_scan.select.pin_flags(sdfg, "exact")``): what ``exact`` must equal bit for bit;
* ``icon4py_hooks``: plus icon4py's own graupel hooks (``remove_self_copy_inside_scan``,
  ``rename_intermediate_access_nodes``), as ``driver/run_graupel_only.py`` sets them;
* ``sdfg_scan_exact`` / ``sdfg_scan_replay``: plus ``sdfg_scan.gt4py.optimization_hooks`` instead;
* ``sdfg_scan_replay_vmaps``: ``replay`` with ``vectorize_maps=True`` (gt4py's pointwise maps vectorised too).
* ``sdfg_scan_exact_final`` / ``sdfg_scan_replay_final`` (not in the default list): no hooks;
  ``sdfg_scan.gt4py.make_backend(stage="final")`` with icon4py's backend options (cells unit-stride, the
  program's metrics): ``sdfg_scan.optimize`` on the SDFG gt4py's auto-optimize leaves, the program gt4py
  compiles (its own defaults, the maps vectorised); ``_final_inplace`` declares the driver's aliasing too.
* ``sdfg_scan_exact_inplace`` / ``sdfg_scan_replay_inplace`` (not in the default list): the hooks told the
  driver's aliasing (``inplace={"q_out": "q_in", "t_out": "te"}``), so the scan's results are written
  straight into the outputs.
* ``sdfg_scan_exact_noalias`` / ``sdfg_scan_replay_noalias`` (not in the default list): the hooks told that
  the caller passes no buffer twice (``assume_no_alias=True``; icon_graupel's granule passes its tendencies
  apart from its inputs), so results gt4py copies from a temporary into an output are written straight
  into it.

Same seeded inputs in physical ranges for all (dt=30, qnc=100, masking on, KOKKOS_MUPHYS, as the icon4py
driver); outputs compared with ``stock`` and with ``stock_strict`` (max relative difference, or
"bitwise"); time per call (median of
``REPEAT`` calls after a warm-up). Size: ``GRAUPEL_CELLS`` x ``GRAUPEL_LEVELS`` (default 20480 x 65);
``GRAUPEL_VARIANTS`` (comma-separated) runs a subset. ``GRAUPEL_PROGRAM=muphys_run`` runs icon4py's full
microphysics instead (``implementations/muphys.py``: saturation adjustment, the graupel scan, saturation adjustment
again), bound the same way. ``GRAUPEL_AES=1`` binds either with ``use_aes_graupel=True`` (the AES fall speeds and
ice/snow parameterisations; default False, as the driver). ``GRAUPEL_PROGRAM=icon_graupel`` runs the older
single-moment six-class graupel of icon4py's ``icon4py-atmosphere-microphysics`` package
(``stencils/graupel_stencils.py``: one forward scan with 28 carries, runtime int/bool options), bound as
``SingleMomentSixClassIconGraupel`` binds it: the config's defaults and the granule's own precomputed coefficients
as constants, ``ground_level`` = levels - 1, vertical domain ``GRAUPEL_KSTART`` (icon4py's ``kstart_moist``, default
0) to the levels; ``dtime`` = 30 at every call, ``qnc`` a seeded cell field (5e7 .. 2e8 /m3); all 15 outputs
compared (3-10 minutes per variant here). ``GRAUPEL_SHAPES`` (e.g. ``20480x65,7x1,33x2,300x10``) builds each variant
once with the domain (and ``ground_level``) given at every call instead of compiled in, and compares every shape
(timings: the first). Lowering and optimizing graupel takes gt4py about 25 minutes per variant on a 2-core machine:
with ``GT4PY_BUILD_CACHE_LIFETIME=persistent`` (and ``GT4PY_BUILD_CACHE_DIR``) the builds can be made by several
processes first (one subset each) and the table then comes from one process that finds every build in the cache.
Without gt4py / icon4py (the main venv), :func:`main` says so and returns 0.
"""

from __future__ import annotations

import os
import sys
import time

NCELLS = int(os.environ.get("GRAUPEL_CELLS", 20480))
NLEV = int(os.environ.get("GRAUPEL_LEVELS", 65))
REPEAT = int(os.environ.get("GRAUPEL_REPEAT", 5))
PROGRAM = os.environ.get("GRAUPEL_PROGRAM", "graupel_run")
AES = os.environ.get("GRAUPEL_AES", "0") not in ("", "0")   # graupel_run / muphys_run with use_aes_graupel=True
KSTART = int(os.environ.get("GRAUPEL_KSTART", 0))   # icon_graupel's vertical_start (icon4py: kstart_moist)
SHAPES = tuple(tuple(int(n) for n in s.split("x")) for s in os.environ.get("GRAUPEL_SHAPES", "").split(",") if s)
ICON_GRAUPEL_OUT = ("temperature_tendency", "qv_tendency", "qc_tendency", "qi_tendency", "qr_tendency", "qs_tendency",
                    "qg_tendency", "rhoqrv_old_kup", "rhoqsv_old_kup", "rhoqgv_old_kup", "rhoqiv_old_kup", "vnew_r",
                    "vnew_s", "vnew_g", "vnew_i")
VARIANTS = tuple(os.environ.get("GRAUPEL_VARIANTS", "stock,stock_strict,icon4py_hooks,sdfg_scan_exact,"
                                                     "sdfg_scan_replay,sdfg_scan_replay_vmaps").split(","))


def _inputs(rng, n, nk):
    import numpy as np

    f = lambda lo, hi: np.asfortranarray(rng.uniform(lo, hi, (n, nk)))  # noqa: E731  (cell-contiguous, as icon4py)
    data = {"dz": f(50.0, 500.0), "te": f(200.0, 310.0), "p": f(1.0e4, 1.0e5), "rho": f(0.2, 1.3),
            "q": [f(0.0, 1e-2) * (rng.uniform(0, 1, (n, nk)) > 0.3) for _ in range(6)]}
    data["qnc"] = rng.uniform(5.0e7, 2.0e8, n)   # icon_graupel's cloud number concentration [/m3] (drawn last)
    return data


def _icon_graupel_constants(nlev: int) -> dict:
    """``SingleMomentSixClassIconGraupel._initialize_gt4py_programs``'s ``constant_args``: the config's
    defaults and the coefficients the granule precomputes (its own ``_initialize_configurable_parameters``,
    run on an instance without grid or fields)."""
    from icon4py.model.atmosphere.subgrid_scale_physics.microphysics import (
        single_moment_six_class_gscp_graupel as granule,
    )

    config = granule.SingleMomentSixClassIconGraupelConfig()
    coef = granule.SingleMomentSixClassIconGraupel.__new__(granule.SingleMomentSixClassIconGraupel)
    coef.config = config
    coef._initialize_configurable_parameters()
    names = ("liquid_autoconversion_option", "snow_intercept_option", "use_constant_latent_heat",
             "ice_stickeff_min", "snow2graupel_riming_coeff", "power_law_coeff_for_ice_mean_fall_speed",
             "exponent_for_density_factor_in_ice_sedimentation", "power_law_coeff_for_snow_fall_speed")
    precomputed = (("precomputed_riming_coef", "precomputed_agg_coef", "precomputed_snow_sed_coef"),
                   ("power_law_exponent_for_rain_mean_fall_speed", "power_law_coeff_for_rain_mean_fall_speed",
                    "precomputed_evaporation_alpha_exp_coeff", "precomputed_evaporation_alpha_coeff",
                    "precomputed_evaporation_beta_exp_coeff", "precomputed_evaporation_beta_coeff"),
                   ("power_law_exponent_for_rain_mean_fall_speed_ln1o2",
                    "power_law_exponent_for_ice_mean_fall_speed_ln1o2",
                    "power_law_exponent_for_graupel_mean_fall_speed_ln1o2"))
    constants = {k: getattr(config, k) for k in names}
    for keys, values in zip(precomputed, (coef._ice_collision_precomputed_coef, coef._rain_precomputed_coef,
                                          coef._sed_dens_factor_coef), strict=True):
        constants.update(zip(keys, values, strict=True))
    if nlev:   # 0: ground_level given at every call (GRAUPEL_SHAPES)
        import gt4py.next as gtx

        constants["ground_level"] = gtx.int32(nlev - 1)
    return constants


def _program(variant: str, ncells: int, nlev: int, program: str = PROGRAM):
    """``graupel_run`` bound the way ``driver/run_graupel_only.setup_graupel`` binds it (that module needs
    netCDF4, so its set-up is repeated here), or ``muphys_run`` the same way."""
    from gt4py.next.program_processors.runners.dace.transformations import GT4PyAutoOptHook as Hook
    from icon4py.model.atmosphere.subgrid_scale_physics.muphys.implementations import (
        graupel,
        graupel_dace_hooks,
        muphys,
    )
    from icon4py.model.common import model_backends, model_options

    import sdfg_scan.gt4py as sg

    hooks = None
    descriptor: dict = {"backend_factory": model_backends.make_custom_dace_backend,
                        "device": model_backends.CPU, "optimization_args": {}}
    if variant == "icon4py_hooks":
        descriptor["optimization_args"]["optimization_hooks"] = {
            Hook.TopLevelDataFlowPre: graupel_dace_hooks.remove_self_copy_inside_scan,
            Hook.TopLevelDataFlowPost: graupel_dace_hooks.rename_intermediate_access_nodes}
    elif variant == "stock_strict":
        from sdfg_scan.select import pin_flags

        descriptor["optimization_args"]["optimization_hooks"] = {
            Hook.TopLevelDataFlowPost: lambda sdfg: pin_flags(sdfg, "exact")}
    elif variant.startswith("sdfg_scan"):
        # *_inplace: the driver's aliasing declared (q_out is q_in, t_out is te; no other two share memory)
        # *_noalias: the caller passes no buffer twice (icon_graupel's granule: tendencies apart from inputs)
        inplace = {"q_out": "q_in", "t_out": "te"} if variant.endswith("_inplace") else None
        repro = variant.removeprefix("sdfg_scan_")
        for suffix in ("_inplace", "_vmaps", "_noalias", "_final"):
            repro = repro.removesuffix(suffix)
        if "_final" in variant:   # optimize on the SDFG gt4py's auto-optimize leaves (make_backend(stage="final"))
            def final_backend(device, optimization_args=None, use_metrics=True, **_):
                # icon4py's per-program options (graupel_run's), as its own factory would get them
                opts = model_options.get_dace_options(program, device=device,
                                                      optimization_args=dict(optimization_args or {}))
                return sg.make_backend(gpu=False, reproducibility=repro, stage="final", inplace=inplace,
                                       unstructured_horizontal_has_unit_stride=True, use_metrics=use_metrics,
                                       auto_optimize_args=opts.get("optimization_args") or None)
            descriptor["backend_factory"] = final_backend
        else:
            descriptor["optimization_args"]["optimization_hooks"] = hooks = sg.optimization_hooks(
                gpu=False, reproducibility=repro, vectorize_maps=variant.endswith("_vmaps"), inplace=inplace,
                assume_no_alias=variant.endswith("_noalias"))
    if program == "muphys_run":   # masking is always on in muphys_run
        prog, constants = muphys.muphys_run, {"dt": 30.0, "qnc": 100.0, "use_aes_graupel": AES}
    elif program == "graupel_run":
        prog, constants = graupel.graupel_run, {"dt": 30.0, "qnc": 100.0, "enable_masking": True,
                                                "use_aes_graupel": AES}
    elif program == "icon_graupel":
        from icon4py.model.atmosphere.subgrid_scale_physics.microphysics.stencils import graupel_stencils

        prog, constants = graupel_stencils.icon_graupel, _icon_graupel_constants(0 if SHAPES else nlev)
    else:
        raise SystemExit("graupel_gt4py: GRAUPEL_PROGRAM must be graupel_run, muphys_run or icon_graupel, "
                         f"got {program!r}")
    kstart = KSTART if program == "icon_graupel" else 0
    bound = model_options.setup_program(   # with SHAPES the domain is given at every call (_call)
        backend=descriptor, program=prog, constant_args=constants,
        horizontal_sizes={} if SHAPES else {"horizontal_start": 0, "horizontal_end": ncells},
        vertical_sizes={} if SHAPES else {"vertical_start": kstart, "vertical_end": nlev}, offset_provider={})
    bound.reports = hooks.reports if hooks is not None else []   # empty when gt4py found the build in its cache
    return bound


def _call(prog, data, program: str = PROGRAM):
    import gt4py.next as gtx
    import numpy as np
    from icon4py.model.common import dimension as dims

    field = lambda a: gtx.as_field([dims.CellDim, dims.KDim], a.copy(order="F"), allocator=np)  # noqa: E731
    n, nk = data["te"].shape
    kstart = KSTART if program == "icon_graupel" else 0
    sizes = {"horizontal_start": 0, "horizontal_end": n, "vertical_start": min(kstart, nk - 1),
             "vertical_end": nk} if SHAPES else {}
    if program == "icon_graupel":
        if SHAPES:
            sizes["ground_level"] = gtx.int32(nk - 1)
        ins = {k: field(data[d]) for k, d in (("dz", "dz"), ("temperature", "te"), ("pressure", "p"),
                                              ("rho", "rho"))}
        ins.update({k: field(a) for k, a in zip(("qv", "qc", "qi", "qr", "qs", "qg"), data["q"], strict=True)})
        ins["qnc"] = gtx.as_field([dims.CellDim], data["qnc"].copy(), allocator=np)
        outs = {k: field(np.zeros_like(data["te"])) for k in ICON_GRAUPEL_OUT}
        t0 = time.perf_counter()
        prog(dtime=30.0, **ins, **outs, **sizes)
        seconds = time.perf_counter() - t0
        return {k: v.asnumpy() for k, v in outs.items()}, seconds
    from icon4py.model.atmosphere.subgrid_scale_physics.muphys.core.definitions import Q

    q_in = Q(*(field(a) for a in data["q"]))
    # icon4py's driver aliases the outputs with the inputs (use_inout_buffers): do the same
    outs = {"q_out": q_in, "t_out": field(data["te"])}
    te = outs["t_out"]
    fluxes = {k: field(np.zeros_like(data["te"])) for k in ("pflx", "pr", "ps", "pi", "pg", "pre")}
    args = dict(dz=field(data["dz"]), te=te, p=field(data["p"]), rho=field(data["rho"]), q_in=q_in, **outs, **fluxes)
    t0 = time.perf_counter()
    prog(**args, **sizes)
    seconds = time.perf_counter() - t0
    result = {"t": te.asnumpy(), **{f"q{i}": q.asnumpy() for i, q in enumerate(q_in)},
              **{k: v.asnumpy() for k, v in fluxes.items()}}
    return result, seconds


def run(ncells: int = NCELLS, nlev: int = NLEV, repeat: int = REPEAT, variants=VARIANTS) -> list[tuple]:
    import numpy as np

    shapes = SHAPES or ((ncells, nlev),)
    ncells, nlev = shapes[0]
    datas = [_inputs(np.random.default_rng(42), n, nk) for n, nk in shapes]
    data = datas[0]
    rows, outs = [], {}

    def versus(out, ref) -> str:
        """"bitwise", or the largest difference relative to the output's largest magnitude and the share
        of entries beyond rtol 1e-6 (worst output): near-zero residuals make a pointwise relative error
        meaningless (a cancellation leaves 1e-19 in one build and 0 in the other)."""
        if ref is None:
            return "-"
        if all(np.array_equal(out[k].view(np.uint64), ref[k].view(np.uint64)) for k in ref):
            return "bitwise"
        norm, share, new = 0.0, 0.0, 0
        for k in ref:
            new += int(np.sum(~np.isfinite(out[k]) & np.isfinite(ref[k])))
            diff = np.abs(out[k] - ref[k])
            norm = max(norm, float(np.nanmax(diff)) / max(float(np.nanmax(np.abs(ref[k]))), 1e-300))
            share = max(share, float(np.mean(diff > 1e-6 * np.abs(ref[k]))))
        return f"{norm:.1e} of max, {100 * share:.2f}% > rtol 1e-6" + (f", {new} new NaN/Inf" if new else "")

    for variant in variants:
        t0 = time.perf_counter()
        prog = _program(variant, ncells, nlev)
        out, _ = _call(prog, data)   # the first call builds
        build = time.perf_counter() - t0
        for report in prog.reports:
            print(f"{variant}: sdfg_scan report\n{report.table()}", flush=True)
        for (n, nk), d in zip(shapes[1:], datas[1:], strict=True):
            small = _call(prog, d)[0]
            outs[variant, n, nk] = small
            print(f"{variant:18} {n} x {nk}: vs stock: {versus(small, outs.get(('stock', n, nk))):30} "
                  f"vs stock_strict: {versus(small, outs.get(('stock_strict', n, nk)))}", flush=True)
        times = sorted(_call(prog, data)[1] for _ in range(repeat))
        outs[variant] = out
        row = (variant, build, times[len(times) // 2], versus(out, outs.get("stock")),
               versus(out, outs.get("stock_strict")))
        rows.append(row)
        print(f"{variant:18} build {build:7.1f} s  {1e3 * row[2]:9.2f} ms/call  vs stock: {row[3]:30} "
              f"vs stock_strict: {row[4]}", flush=True)
    base = rows[0][2]
    print("\n| variant | build s | ms per call | speed-up vs stock | vs stock | vs stock_strict |\n|---|---:|---:|---:|---|---|")
    for v, b, t, a, c in rows:
        print(f"| {v} | {b:.0f} | {1e3 * t:.1f} | {base / t:.2f} | {a} | {c} |")
    return rows


def main() -> int:
    try:
        import gt4py.next  # noqa: F401
        from icon4py.model.atmosphere.subgrid_scale_physics.muphys.implementations import graupel  # noqa: F401

        if PROGRAM == "icon_graupel":
            from icon4py.model.atmosphere.subgrid_scale_physics.microphysics.stencils import (  # noqa: F401
                graupel_stencils,
            )
    except ImportError as e:
        print(f"graupel_gt4py: skipped ({e}); run `make graupel` (gt4py venv, Python >= 3.13 for graupel)")
        return 0
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10**5))   # as icon4py's drivers
    where = f", vertical_start {KSTART}" if PROGRAM == "icon_graupel" else (", use_aes_graupel" if AES else "")
    shapes = f" (domain at every call; shapes {', '.join(f'{n} x {k}' for n, k in SHAPES)})" if SHAPES else ""
    size = " x ".join(map(str, SHAPES[0] if SHAPES else (NCELLS, NLEV)))
    print(f"{PROGRAM}, {size}{where}{shapes}, gt4py DaCe CPU backend, median of {REPEAT} calls")
    run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
