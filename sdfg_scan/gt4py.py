"""sdfg_scan inside gt4py's DaCe backend: optimization hooks for ``gt_auto_optimize``.

Recipe (icon4py's ``make_custom_dace_backend`` passes the same ``optimization_args``)::

    from sdfg_scan.gt4py import optimization_hooks
    hooks = optimization_hooks(gpu=False, reproducibility="exact")
    backend = make_dace_backend(gpu=False, optimization_args={"optimization_hooks": hooks})

or ``sdfg_scan.gt4py.make_backend(gpu=False, reproducibility="exact", stage="hooks")``, which builds the same
backend through gt4py's current ``make_dace_toolchain(DaCeConfig(...), translation=partial(make_dace_translator,
auto_optimize_args=...))``. ``make_backend``'s default on the CPU is ``stage="final"`` (since stop 57):
``sdfg_scan.optimize`` after gt4py's whole optimizer, on the program gt4py compiles (faster on icon4py's
microphysics than the hooks, which run before gt4py's inner-dataflow stage).

Where each stage runs (``gt_auto_optimize`` of gt4py 1.2.3, hooks ``GT4PyAutoOptHook``):

* ``TopLevelDataFlowPre`` (after the initial simplify and constant-symbol substitution, before the
  top-level map fusion): ``sdfg_scan.optimize`` (lift every scan to a ``Scan`` node, canonicalise its
  body, fuse/split/specialise, select). Lifting sees gt4py's lowering unchanged here (the scan is a
  nested SDFG inside a 1-D map over the cells), and the self-copies the canonicalisers remove are gone
  before gt4py's fusion decides what to fuse. gt4py's own scan passes (``ScanLoopUnrolling``, the
  inner-map simplify, tasklet fusion inside the scan) no longer see inside a lifted scan: they only see
  the opaque node (what it costs: ``scan_loop_unrolling=True`` has no effect on a lifted scan; what it
  gains: gt4py's passes cannot undo the canonical form and the body is not re-simplified).
* the last hook of the build (``TopLevelDataFlowPost`` on CPU, ``AfterToGPU`` on GPU, which gt4py only
  calls for GPU builds): every sdfg_scan node is re-selected for the final layout and **expanded** to its
  chosen implementation. ``AfterToGPU`` comes after gt4py has set the strides of its temporaries;
  ``TopLevelDataFlowPost`` comes before (``_gt_auto_configure_maps_and_strides`` makes every
  multi-dimensional temporary column-major when the horizontal dimension has unit stride, as in icon4py's
  backends). There the hook applies gt4py's ``gt_change_strides`` itself first, and each lifted scan's
  body takes the new strides (gt4py's stride propagation does not enter library nodes); gt4py's own
  later call sets the same strides. Without this, a scan reading gt4py's ``[Cell, K]`` temporaries
  (graupel's masks and temperatures) saw them K-contiguous and was given a per-column schedule.
  The final choices replace the lifting stage's in ``reports``. DaCe's
  ``set_fast_implementations``, which ends ``gt_auto_optimize``, resets the ``implementation`` of every
  library node (on GPU it forces ``pure`` on sequential-scheduled nodes, an implementation our nodes
  do not have); an expanded node is a plain nested SDFG, so the choice survives.
* ``reproducibility="exact"``: the program is compiled IEEE-strict (no FP contraction, no reciprocal
  math): the hook attaches :class:`sdfg_scan.expansions.environments.ExactArithmetic` to a code node
  of the SDFG, which DaCe adds to the whole program's compile flags, whether or not a scan was lifted.

gt4py sets ``optimizer.match_exception=True`` while hooks run: a transformation that does not apply
must refuse in ``can_be_applied`` (ours do); an exception in a hook aborts the build.

The mapping is picklable (gt4py compiles in a process pool by default): ``reports`` collects the
``OptimizeReport`` of every SDFG processed *in the process that ran the translation*; set
``GT4PY_BUILD_JOBS_MODE=serial`` (or ``thread``) to see them in the calling process.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any

import dace

from sdfg_scan.expansions import REPRODUCIBILITY
from sdfg_scan.gt4py_stages import EXACT_ENV, ExpandStage, LiftStage, chain_after, without_stages

__all__ = ["EXACT_ENV", "STAGES", "OptimizationHooks", "make_backend", "optimization_hooks", "reports_of"]


class OptimizationHooks(dict):
    """``{GT4PyAutoOptHook: callable}`` for ``gt_auto_optimize``, plus ``reports`` (one per SDFG)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.reports: list = []

    def __reduce__(self):  # keep ``reports`` shared with the stages after a pickle round trip
        return (_rebuild, (dict(self), self.reports))


def _rebuild(items: dict, reports: list) -> OptimizationHooks:
    hooks = OptimizationHooks(items)
    hooks.reports = reports
    return hooks


def _hook_enum():
    try:
        from gt4py.next.program_processors.runners.dace.transformations import GT4PyAutoOptHook
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError("sdfg_scan.gt4py: gt4py is not installed; install the 'gt4py' extra "
                          "(pip install 'sdfg_scan[gt4py]', Python >= 3.12)") from e
    return GT4PyAutoOptHook


def _checked_options(who: str, gpu, reproducibility, existing, horizontal_unit_stride, vectorize_maps,
                     assume_no_alias, inplace, existing_name: str = "existing"):
    """The checks of :func:`optimization_hooks`' arguments (``who`` names the function in the errors,
    ``existing_name`` the argument that gave ``existing``); gt4py's ``GT4PyAutoOptHook``."""
    if reproducibility not in REPRODUCIBILITY:
        raise ValueError(f"sdfg_scan.gt4py.{who}: reproducibility must be one of "
                         f"{REPRODUCIBILITY}, got '{reproducibility}'")
    for name, value in (("gpu", gpu), ("vectorize_maps", vectorize_maps), ("assume_no_alias", assume_no_alias)):
        if not isinstance(value, bool):
            raise TypeError(f"sdfg_scan.gt4py.{who}: {name} must be True or False, got {value!r}")
    if horizontal_unit_stride is not None and not isinstance(horizontal_unit_stride, bool):
        raise TypeError(f"sdfg_scan.gt4py.{who}: horizontal_unit_stride must be True, False or None, "
                        f"got {horizontal_unit_stride!r}")
    if vectorize_maps and gpu:
        raise ValueError(f"sdfg_scan.gt4py.{who}: vectorize_maps=True vectorises gt4py's pointwise maps on "
                         "the CPU, got gpu=True")
    if inplace is not None:
        if not isinstance(inplace, Mapping):
            raise TypeError(f"sdfg_scan.gt4py.{who}: inplace must be a mapping of output parameter "
                            f"names to input parameter names, e.g. {{'q_out': 'q_in'}}, got "
                            f"{type(inplace).__name__} {inplace!r}")
        bad = [(k, v) for k, v in dict(inplace).items() if not isinstance(k, str) or not isinstance(v, str) or k == v]
        if bad:
            raise ValueError(f"sdfg_scan.gt4py.{who}: inplace must map output parameter names to "
                             f"other input parameter names (str -> str), got {bad!r}")
        if assume_no_alias and inplace:
            raise ValueError(f"sdfg_scan.gt4py.{who}: assume_no_alias=True says no two arguments share "
                             f"memory, inplace={dict(inplace)!r} says some do: give one of them")
    hook = _hook_enum()
    if existing is not None:
        if not isinstance(existing, Mapping):
            raise TypeError(f"sdfg_scan.gt4py.{who}: {existing_name} must be a mapping of GT4PyAutoOptHook "
                            f"members to callables (gt4py's optimization_hooks), got {type(existing).__name__}")
        bad = [f"{k!r}: {v!r}" for k, v in existing.items() if not isinstance(k, hook) or not callable(v)]
        if bad:
            raise TypeError(f"sdfg_scan.gt4py.{who}: {existing_name} must map GT4PyAutoOptHook members "
                            f"({', '.join(h.name for h in hook)}) to callables, got {', '.join(bad)}")
    return hook


def optimization_hooks(gpu: bool = False, reproducibility: str = "exact",
                       existing: Mapping[Any, Callable[[dace.SDFG], None]] | None = None,
                       horizontal_unit_stride: bool | None = None,
                       vectorize_maps: bool = False, assume_no_alias: bool = False,
                       inplace: Mapping[str, str] | None = None) -> OptimizationHooks:
    """The ``optimization_hooks`` mapping for gt4py's ``gt_auto_optimize`` with sdfg_scan installed.

    :param gpu: whether the backend builds for GPU (selects the final hook, ``AfterToGPU`` vs
        ``TopLevelDataFlowPost``, and the expansion target).
    :param reproducibility: weakest class an expansion may have (``exact``, ``replay``, ``approx``).
    :param existing: hooks already given (e.g. icon4py's graupel hooks); gt4py allows one callable per
        key, so ours run after theirs under the same key; none is dropped (the stages of an earlier
        ``optimization_hooks`` mapping given here are replaced by the new ones, not run twice).
    :param horizontal_unit_stride: whether the backend has ``unstructured_horizontal_has_unit_stride``
        (icon4py's backends do); None reads it from each SDFG (gt4py then made the fields' horizontal
        strides the number 1). On the CPU the last hook then gives gt4py's temporaries their final
        (column-major) strides before choosing.
    :param vectorize_maps: CPU: the last hook also writes gt4py's top-level pointwise maps as vectorised loop
        nests (``VectorizeCellMap``; opt-in here, unlike ``sdfg_scan.optimize`` under ``replay``: through gt4py
        the vectorised maps measured slower than ``replay`` alone, README). Under ``replay`` with libmvec's
        ``exp``/``log`` and the accurate ``pow`` (within the replay contract on graupel), under ``approx``
        with the fast vector math, under ``exact`` in its exact form (the program's scalar
        ``exp``/``log``/``pow`` per lane, bitwise).
    :param assume_no_alias: the caller never passes one buffer as two arguments. Then a result gt4py
        computes into a temporary and copies into an output is written into the output directly
        (``ResultWriteThrough``) wherever the rest of the state allows; by default (False) only where no
        other argument is accessed while or after the result is computed, which is safe when arguments
        share memory (icon4py's graupel driver passes ``q_out`` = ``q_in``).
    :param inplace: ``output -> input`` parameter pairs the caller always passes as one buffer, and the
        promise that it passes no other two arguments as one buffer: icon4py's graupel driver,
        ``{"q_out": "q_in", "t_out": "te"}`` (a tuple parameter pairs member by member). Then the first hook
        runs ``optimize(..., inplace=<the pairs>)``: those outputs are written in place where legal
        (``ScanOutputsInPlace``), and results are written through into outputs (``ResultWriteThrough``)
        where the declared pairs allow, as for ``assume_no_alias=True``. Pairs a program lacks are skipped
        (the hooks see every program the backend translates), so declare only pairs every call aliases.
    """
    hook = _checked_options("optimization_hooks", gpu, reproducibility, existing, horizontal_unit_stride,
                            vectorize_maps, assume_no_alias, inplace)
    hooks = OptimizationHooks(dict(existing or {}))
    target = "gpu" if gpu else "cpu"
    stages: dict[Any, Callable[[dace.SDFG], None]] = {hook.TopLevelDataFlowPre: LiftStage(
                  target, reproducibility, hooks.reports, assume_no_alias=assume_no_alias,
                  inplace=None if inplace is None else dict(inplace)),
              (hook.AfterToGPU if gpu else hook.TopLevelDataFlowPost): ExpandStage(
                  target, reproducibility, hooks.reports, horizontal_unit_stride, vectorize_maps)}
    for key in list(hooks):   # hooks of an earlier optimization_hooks given as ``existing``: replaced, not run twice
        theirs = without_stages(hooks[key])
        if theirs is None:
            del hooks[key]
        else:
            hooks[key] = theirs
    for key, stage in stages.items():
        hooks[key] = stage if key not in hooks else chain_after(hooks[key], stage)
    return hooks


STAGES = ("hooks", "final")
"""Where :func:`make_backend` runs sdfg_scan: ``"hooks"``, inside ``gt_auto_optimize`` (:func:`optimization_hooks`);
``"final"``, on the SDFG ``gt_auto_optimize`` leaves (CPU; ``sdfg_scan.gt4py_stages.FinalStage``)."""


def make_backend(gpu: bool = False, reproducibility: str = "exact", inplace: Mapping[str, str] | None = None,
                 vectorize_maps: bool | None = None, assume_no_alias: bool = False, stage: str | None = None,
                 **kwargs: Any):
    """gt4py's DaCe backend (``make_dace_toolchain``) with sdfg_scan installed.

    :param stage: ``"hooks"``: :func:`optimization_hooks`, inside gt4py's ``gt_auto_optimize`` (what icon4py's
        own backend factory can take, through its ``optimization_args``; the only stage for ``gpu=True``).
        ``"final"`` (CPU only): gt4py's translation runs unchanged (any hooks of ``auto_optimize_args``
        included), and ``sdfg_scan.optimize`` then runs on the SDFG it returns, the program gt4py compiles,
        as on an SDFG exported from gt4py's build cache; every sdfg_scan node is expanded there. On icon4py's
        ``muphys_run`` built through gt4py that stage measured 1.58x to 1.64x (``exact``) and 2.99x to 3.13x
        (``replay``) over stock gt4py, where the hooks gave 1.08x to 1.16x and 1.26x (README, "Using
        sdfg_scan from gt4py"). None (the default, since stop 57): ``"final"`` on the CPU, ``"hooks"`` on
        the GPU.
    :param vectorize_maps: as :func:`optimization_hooks`' (None: False) for ``stage="hooks"``; as
        ``sdfg_scan.optimize``'s (None: its default) for ``stage="final"``.
    :param inplace, assume_no_alias: as :func:`optimization_hooks`'.
    :param kwargs: ``DaCeConfig`` fields (``unstructured_horizontal_has_unit_stride``, ...; ``auto_optimize``
        must stay True: the hooks run inside gt4py's auto-optimize) and ``make_dace_translator`` keywords (``use_metrics``, ``async_sdfg_call``, ...);
        ``auto_optimize_args`` are merged, their ``optimization_hooks`` chained before ours. Any other
        keyword is refused here, naming the ones accepted (gt4py would refuse it only when it builds).
    """
    import dataclasses
    import difflib
    import inspect

    from gt4py.next.program_processors.runners.dace.workflow import backend as gtx_backend
    from gt4py.next.program_processors.runners.dace.workflow import factory as gtx_factory

    cfg_fields = {f.name for f in dataclasses.fields(gtx_factory.DaCeConfig)} - {"gpu"}
    tr_fields = {n for n, p in inspect.signature(gtx_factory.make_dace_translator).parameters.items()
                 if p.kind is inspect.Parameter.KEYWORD_ONLY}
    own = {"gpu", "reproducibility", "inplace", "vectorize_maps", "assume_no_alias", "stage"}
    for k in kwargs:
        if k not in cfg_fields | tr_fields:
            close = difflib.get_close_matches(k, sorted(cfg_fields | tr_fields | own), n=1)
            raise TypeError(f"sdfg_scan.gt4py.make_backend: unknown keyword '{k}'"
                            + (f" (did you mean '{close[0]}'?)" if close else "")
                            + f"; besides {sorted(own)} it takes gt4py's DaCeConfig fields {sorted(cfg_fields)} "
                            f"and make_dace_translator keywords {sorted(tr_fields)}")
    if not kwargs.get("auto_optimize", True):
        raise ValueError("sdfg_scan.gt4py.make_backend: auto_optimize=False skips gt4py's gt_auto_optimize, where the "
                         "hooks run: nothing would be lifted and reproducibility='exact' would not pin the strict "
                         "flags; use gt4py's own backend for an unoptimized build")
    if stage is None:
        stage = "hooks" if gpu else "final"
    if stage not in STAGES:
        raise ValueError(f"sdfg_scan.gt4py.make_backend: stage must be one of {STAGES}, got {stage!r}")
    if stage == "final" and gpu:
        raise ValueError("sdfg_scan.gt4py.make_backend: stage='final' optimizes the CPU program gt4py compiles; for "
                         "gpu=True use stage='hooks' (the AfterToGPU hook)")
    if vectorize_maps is not None and not isinstance(vectorize_maps, bool):
        raise TypeError(f"sdfg_scan.gt4py.make_backend: vectorize_maps must be True, False or None, got {vectorize_maps!r}")
    cfg_kw = {k: v for k, v in kwargs.items() if k in cfg_fields}
    tr_kw = {k: v for k, v in kwargs.items() if k not in cfg_fields}
    ao_args = dict(tr_kw.pop("auto_optimize_args", None) or {})
    cfg = gtx_factory.DaCeConfig(gpu=gpu, **cfg_kw)
    postfix = (f"_sdfg_scan_{reproducibility}" + ("_inplace" if inplace else "") + ("_vmaps" if vectorize_maps else "")
               + ("_noalias" if assume_no_alias else ""))
    # both stages: a bad option is refused naming make_backend and the argument the caller gave
    _checked_options("make_backend", gpu, reproducibility, ao_args.get("optimization_hooks"),
                     cfg.unstructured_horizontal_has_unit_stride, bool(vectorize_maps), assume_no_alias, inplace,
                     existing_name="auto_optimize_args['optimization_hooks']")
    if stage == "hooks":
        ao_args["optimization_hooks"] = optimization_hooks(
            gpu, reproducibility, ao_args.get("optimization_hooks"), cfg.unstructured_horizontal_has_unit_stride,
            vectorize_maps=bool(vectorize_maps), assume_no_alias=assume_no_alias, inplace=inplace)
        return gtx_backend.make_dace_toolchain(
            cfg, name_postfix=postfix,
            translation=functools.partial(gtx_factory.make_dace_translator, auto_optimize_args=ao_args, **tr_kw))
    from sdfg_scan.gt4py_stages import FinalStage
    from sdfg_scan.gt4py_translator import make_final_stage_translator

    theirs = {k: v for k, v in ((k, without_stages(v)) for k, v in (ao_args.get("optimization_hooks") or {}).items())
              if v is not None}   # an earlier optimization_hooks mapping given there: not run inside as well
    if "optimization_hooks" in ao_args:
        ao_args["optimization_hooks"] = theirs
    final = FinalStage(reproducibility, [], vectorize_maps=vectorize_maps,
                       assume_no_alias=assume_no_alias, inplace=None if inplace is None else dict(inplace))
    postfix += "_final" + ("_scalar_maps" if vectorize_maps is False else "")
    return gtx_backend.make_dace_toolchain(
        cfg, name_postfix=postfix,
        translation=functools.partial(make_final_stage_translator, final_stage=final, auto_optimize_args=ao_args,
                                      **tr_kw))


def reports_of(backend: Any) -> list:
    """The ``OptimizeReport`` of every program ``backend`` (:func:`make_backend`, either stage) translated in
    this process, oldest first (``GT4PY_BUILD_JOBS_MODE=serial`` or ``thread`` to translate in this process)."""
    step = getattr(getattr(getattr(backend, "executor", None), "translation", None), "step", None)
    final = getattr(step, "final_stage", None)
    if final is not None:
        return final.reports
    hooks = (getattr(step, "auto_optimize_args", None) or {}).get("optimization_hooks")
    if isinstance(hooks, OptimizationHooks):
        return hooks.reports
    raise TypeError(f"sdfg_scan.gt4py.reports_of: {getattr(backend, 'name', type(backend).__name__)!r} is not a "
                    "backend of sdfg_scan.gt4py.make_backend")
