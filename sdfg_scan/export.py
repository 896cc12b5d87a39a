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

import contextlib
import importlib
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import dace

from sdfg_scan.lineinfo import no_stack_lineinfo

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


def _translate(gtir: Any, column_axis: Any, auto_optimize: bool, hooks: dict | None) -> dace.SDFG:
    from gt4py.next.program_processors.runners.dace.workflow import factory as gtx_factory

    cfg = gtx_factory.DaCeConfig(auto_optimize=auto_optimize, unstructured_horizontal_has_unit_stride=auto_optimize)
    args = {"optimization_hooks": hooks} if hooks else None
    translator = gtx_factory.make_dace_translator(cfg, auto_optimize_args=args, use_metrics=False,
                                                  async_sdfg_call=False)
    return translator.generate_sdfg(gtir, {}, column_axis)


def _with_static_args(program: Any, static: dict) -> Any:
    """The program's GTIR with the scalar parameters in ``static`` replaced by literals of their declared
    type, as gt4py does for the static arguments of ``program.compile(...)`` (icon4py's
    ``model_options.setup_program`` binds ``dt``, ``qnc``, ... and the domain bounds that way)."""
    ir = program.gtir
    if not static:
        return ir
    from gt4py.next.iterator import ir as itir
    from gt4py.next.iterator.ir_utils import ir_makers as im
    from gt4py.next.iterator.transforms.remap_symbols import RemapSymbolRefs
    from gt4py.next.type_system import type_specifications as ts

    params = {str(p.id): p.type for p in program.past_stage.past_node.params}
    literals = {}
    for name, value in static.items():
        if name not in params:
            raise ValueError(f"sdfg_scan.export: program '{program.__name__}' has no parameter '{name}' to make "
                             f"static; its parameters are {sorted(params)}")
        t = params[name]
        if not isinstance(t, ts.ScalarType) or isinstance(value, (list, tuple, dict)):
            raise ValueError(f"sdfg_scan.export: static argument '{name}' of '{program.__name__}' must be a scalar "
                             f"parameter given a scalar value; the parameter is {t}, the value {value!r}")
        kind = t.kind.name
        if kind == "BOOL":
            text = str(bool(value))
        elif kind.startswith("FLOAT"):
            text = repr(float(value))
        else:
            text = str(int(value))
        literals[name] = im.literal(text, t)
    body = RemapSymbolRefs().visit(ir.body, symbol_map=literals)
    return itir.Program(id=ir.id, function_definitions=ir.function_definitions, params=ir.params,
                        declarations=ir.declarations, body=body)


def _column_axis(program: Any) -> Any:
    """The vertical dimension of the program's fields (gt4py's scan axis)."""
    import gt4py.next as gtx

    for p in program.past_stage.past_node.params:
        for dim in getattr(p.type, "dims", []) or []:
            if dim.kind == gtx.DimensionKind.VERTICAL:
                return dim
    raise ValueError(f"sdfg_scan.export: program '{program.__name__}' has no field with a vertical dimension "
                     "(the scan axis); expected a Field over [..., K] with K of kind VERTICAL")


VARIANTS = ("lowered", "opt", "opt_hooks", "opt_sdfg_scan")


def export(ref: str | Any, out: Path | None = None, name: str | None = None,
           hooks: str | dict | Callable[[], dict] | None = None, note: str = "", static: dict | None = None,
           variants: list[str] | tuple[str, ...] | None = None, lineinfo: bool = False) -> Path:
    """Write the fixture files of one gt4py program; returns the ``NAME.meta.json`` path.

    :param ref: the program or ``"module:attr"`` (a ``gt4py.next`` ``@program``).
    :param out: folder (default :func:`fixture_dir`).
    :param hooks: extra ``optimization_hooks`` (a mapping, a factory, or ``"module:attr"`` of either) for
        the ``opt_hooks`` variant.
    :param static: scalar parameters bound at compile time (``{"dt": 30.0, "vertical_end": 65}``), as
        ``program.compile(...)`` binds them; recorded in the metadata.
    :param variants: a subset of :data:`VARIANTS` to write (default: all that apply). A later export of
        other variants to the same folder keeps the files and metadata of the earlier ones.
    :param lineinfo: keep DaCe's ``compiler.lineinfo`` as it is (by default ``"inspect"``: every node
        records the Python line that created it). By default the translation runs with it ``"none"``
        (:mod:`sdfg_scan.lineinfo`): the nodes carry no source lines, the SDFGs are otherwise the same, and
        gt4py's lowering does not walk its deep Python stack once per node it adds (on aes graupel most of
        the translation is SymPy inside gt4py's lowering either way). Recorded in the metadata.
    """
    import gt4py
    import gt4py.next as gtx

    from sdfg_scan.gt4py import optimization_hooks

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10**5))   # as icon4py's drivers: graupel's GTIR is deep
    program = resolve(ref) if isinstance(ref, str) else ref
    if not isinstance(program, gtx.ffront.decorator.Program):
        raise TypeError(f"sdfg_scan.export: expected a gt4py.next @program, got {type(program).__name__} ({ref})")
    name = name or program.__name__
    out = Path(out or fixture_dir())
    extra = resolve(hooks) if isinstance(hooks, str) else hooks
    extra = extra() if callable(extra) and not isinstance(extra, dict) else extra
    unknown = sorted(set(variants or ()) - set(VARIANTS))
    if unknown:
        raise ValueError(f"sdfg_scan.export: unknown variant(s) {unknown}; expected some of {list(VARIANTS)}")
    if variants and "opt_hooks" in variants and not extra:
        raise ValueError("sdfg_scan.export: the 'opt_hooks' variant needs hooks= (the extra optimization hooks)")
    static = dict(static or {})
    gtir = _with_static_args(program, static)   # checked before anything is written; shared by every variant
    axis = _column_axis(program)
    out.mkdir(parents=True, exist_ok=True)
    todo: dict[str, tuple[bool, Any]] = {"lowered": (False, None), "opt": (True, None)}
    if extra:
        todo["opt_hooks"] = (True, dict(extra))
    todo["opt_sdfg_scan"] = (True, {"sdfg_scan": True})  # our hooks, made per variant below
    todo = {k: v for k, v in todo.items() if not variants or k in variants}
    path = out / f"{name}.meta.json"
    meta: dict[str, Any] = {"name": name, "program": f"{program.definition.__module__}.{program.__name__}",
                            "note": note, "static_args": static,
                            "versions": {"gt4py": gt4py.__version__, "dace": dace.__version__},
                            "files": {}, "variants": {}, "calling_convention": {}}
    if variants and path.is_file():   # keep what an earlier export of other variants wrote
        old = json.loads(path.read_text())
        if old.get("program") == meta["program"] and old.get("static_args") == static:
            for key in ("files", "variants", "calling_convention"):
                meta[key] = {k: v for k, v in old.get(key, {}).items() if k not in todo}
    for variant, (opt, hk) in todo.items():
        reports: list = []
        if hk == {"sdfg_scan": True}:
            hk = optimization_hooks(gpu=False, reproducibility="exact")
            reports = hk.reports
        t0 = time.perf_counter()
        with contextlib.nullcontext() if lineinfo else no_stack_lineinfo():
            sdfg = _translate(gtir, axis, opt, hk)
        seconds = time.perf_counter() - t0
        fname = f"{name}.{variant}.sdfg"
        sdfg.save(str(out / fname))
        meta["files"][variant] = fname
        meta["variants"][variant] = {
            "auto_optimize": opt, "unstructured_horizontal_has_unit_stride": opt,
            "optimization_hooks": sorted(str(k) for k in (hk or {})), "t_translate_s": round(seconds, 2),
            "lineinfo": dace.Config.get("compiler", "lineinfo") if lineinfo else "none",
            "sdfg_scan_reports": [r.table() for r in reports]}
        meta["calling_convention"][variant] = calling_convention(sdfg)
    path.write_text(json.dumps(meta, indent=1))
    return path


def stems(stem: str) -> list[str]:
    """The file stems that hold ``stem``: the shared fixtures call the optimized form of a program that
    also has a hooks variant ``NAME.opt_nohooks``, the exporter always ``NAME.opt``."""
    return [stem, stem.removesuffix(".opt_nohooks") + ".opt"] if stem.endswith(".opt_nohooks") else [stem]


def find_fixture(stem: str, roots: list[Path] | None = None) -> Path | None:
    """``stem`` (``NAME.variant``) as ``.sdfg``/``.sdfgz`` in the shared fixtures, else the exporter cache."""
    shared = Path(__file__).resolve().parents[2] / "shared" / "fixtures" / "icon4py"
    for root in roots or [shared, fixture_dir()]:
        for s in stems(stem):
            for ext in (".sdfg", ".sdfgz"):
                if (root / (s + ext)).is_file():
                    return root / (s + ext)
    return None


__all__ = ["VARIANTS", "cache_root", "calling_convention", "export", "find_fixture", "fixture_dir", "resolve",
           "stems"]
