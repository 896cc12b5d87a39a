"""Regenerable SDFG fixtures: a gt4py program as gt4py's DaCe backend lowers and optimizes it.

``export("pkg.module:program", out)`` writes, beside each other (the layout of ``../shared/fixtures/icon4py``):

* ``NAME.lowered.sdfg``: right after GTIR -> SDFG lowering (``auto_optimize=False``);
* ``NAME.opt.sdfg``: after gt4py's CPU ``gt_auto_optimize`` (horizontal unit stride, as icon4py builds);
* ``NAME.opt_hooks.sdfg``: the same with the hooks named by ``hooks=`` (e.g. icon4py's graupel hooks),
  only when given;
* ``NAME.opt_sdfg_scan.sdfg``: the same with :func:`sdfg_scan.gt4py.optimization_hooks` (``exact``);
* ``NAME.meta.json``: program, versions, the auto-optimizer options, timings, and the calling convention
  (every argument of ``sdfg.arglist()`` with its kind, dtype, shape and strides per variant).

The translation is gt4py's own (``make_dace_translator(DaCeConfig(...)).generate_sdfg``), without metrics
instrumentation or the asynchronous-call epilogue, so the files compile and run with plain DaCe.
Needs gt4py (the ``gt4py`` extra, Python >= 3.12); this module imports it only when exporting.
"""

from __future__ import annotations

import importlib
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import dace

CACHE_ENV = "SDFG_SCAN_CACHE"


def cache_root() -> Path:
    """The exporter's cache (``$SDFG_SCAN_CACHE`` or ``~/.cache/sdfg_scan``); fixtures go to
    ``<root>/fixtures/icon4py`` like the shared ones."""
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "sdfg_scan")


FIXTURES_ENV = "SDFG_SCAN_FIXTURES"


def fixture_dir() -> Path:
    """``$SDFG_SCAN_FIXTURES``, else ``<cache_root()>/fixtures/icon4py``."""
    env = os.environ.get(FIXTURES_ENV)
    return Path(env) if env else cache_root() / "fixtures" / "icon4py"


def resolve(ref: str) -> Any:
    """``"pkg.module:attr"`` or ``"pkg.module.attr"`` -> the object."""
    mod, _, attr = ref.partition(":") if ":" in ref else ref.rpartition(".")
    if not mod or not attr:
        raise ValueError(f"sdfg_scan.export: expected 'module:attribute' or 'module.attribute', got '{ref}'")
    obj: Any = importlib.import_module(mod)
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj


def calling_convention(sdfg: dace.SDFG) -> dict[str, dict]:
    """Every argument of ``sdfg.arglist()``: kind, dtype, shape and strides (as strings)."""
    conv = {}
    for name, desc in sdfg.arglist().items():
        entry: dict[str, Any] = {"kind": "array" if isinstance(desc, dace.data.Array) else "scalar",
                                 "dtype": str(desc.dtype)}
        if isinstance(desc, dace.data.Array):
            entry["shape"] = [str(s) for s in desc.shape]
            entry["strides"] = [str(s) for s in desc.strides]
        conv[name] = entry
    return conv


def _translate(program: Any, column_axis: Any, auto_optimize: bool, hooks: dict | None) -> dace.SDFG:
    from gt4py.next.program_processors.runners.dace.workflow import factory as gtx_factory

    cfg = gtx_factory.DaCeConfig(auto_optimize=auto_optimize, unstructured_horizontal_has_unit_stride=auto_optimize)
    args = {"optimization_hooks": hooks} if hooks else None
    translator = gtx_factory.make_dace_translator(cfg, auto_optimize_args=args, use_metrics=False,
                                                  async_sdfg_call=False)
    return translator.generate_sdfg(program.gtir, {}, column_axis)


def _column_axis(program: Any) -> Any:
    """The vertical dimension of the program's fields (gt4py's scan axis)."""
    import gt4py.next as gtx

    for p in program.past_stage.past_node.params:
        for dim in getattr(p.type, "dims", []) or []:
            if dim.kind == gtx.DimensionKind.VERTICAL:
                return dim
    raise ValueError(f"sdfg_scan.export: program '{program.__name__}' has no field with a vertical dimension "
                     "(the scan axis); expected a Field over [..., K] with K of kind VERTICAL")


def export(ref: str | Any, out: Path | None = None, name: str | None = None,
           hooks: str | dict | Callable[[], dict] | None = None, note: str = "") -> Path:
    """Write the fixture files of one gt4py program; returns the ``NAME.meta.json`` path.

    :param ref: the program or ``"module:attr"`` (a ``gt4py.next`` ``@program``).
    :param out: folder (default :func:`fixture_dir`).
    :param hooks: extra ``optimization_hooks`` (a mapping, a factory, or ``"module:attr"`` of either) for
        the ``opt_hooks`` variant.
    """
    import gt4py
    import gt4py.next as gtx

    from sdfg_scan.gt4py import optimization_hooks

    program = resolve(ref) if isinstance(ref, str) else ref
    if not isinstance(program, gtx.ffront.decorator.Program):
        raise TypeError(f"sdfg_scan.export: expected a gt4py.next @program, got {type(program).__name__} ({ref})")
    name = name or program.__name__
    out = Path(out or fixture_dir())
    out.mkdir(parents=True, exist_ok=True)
    extra = resolve(hooks) if isinstance(hooks, str) else hooks
    extra = extra() if callable(extra) and not isinstance(extra, dict) else extra
    axis = _column_axis(program)
    variants: dict[str, tuple[bool, Any]] = {"lowered": (False, None), "opt": (True, None)}
    if extra:
        variants["opt_hooks"] = (True, dict(extra))
    variants["opt_sdfg_scan"] = (True, {"sdfg_scan": True})  # our hooks, made per variant below
    meta: dict[str, Any] = {"name": name, "program": f"{program.definition.__module__}.{program.__name__}",
                            "note": note, "static_args": {},
                            "versions": {"gt4py": gt4py.__version__, "dace": dace.__version__},
                            "files": {}, "variants": {}, "calling_convention": {}}
    for variant, (opt, hk) in variants.items():
        reports: list = []
        if hk == {"sdfg_scan": True}:
            hk = optimization_hooks(gpu=False, reproducibility="exact")
            reports = hk.reports
        t0 = time.perf_counter()
        sdfg = _translate(program, axis, opt, hk)
        seconds = time.perf_counter() - t0
        fname = f"{name}.{variant}.sdfg"
        sdfg.save(str(out / fname))
        meta["files"][variant] = fname
        meta["variants"][variant] = {
            "auto_optimize": opt, "unstructured_horizontal_has_unit_stride": opt,
            "optimization_hooks": sorted(str(k) for k in (hk or {})), "t_translate_s": round(seconds, 2),
            "sdfg_scan_reports": [r.table() for r in reports]}
        meta["calling_convention"][variant] = calling_convention(sdfg)
    path = out / f"{name}.meta.json"
    path.write_text(json.dumps(meta, indent=1))
    return path


def find_fixture(stem: str, roots: list[Path] | None = None) -> Path | None:
    """``stem`` (``NAME.variant``) as ``.sdfg``/``.sdfgz`` in the shared fixtures, else the exporter cache."""
    shared = Path(__file__).resolve().parents[2] / "shared" / "fixtures" / "icon4py"
    for root in roots or [shared, fixture_dir()]:
        for ext in (".sdfg", ".sdfgz"):
            if (root / (stem + ext)).is_file():
                return root / (stem + ext)
    return None


__all__ = ["cache_root", "calling_convention", "export", "find_fixture", "fixture_dir", "resolve"]
