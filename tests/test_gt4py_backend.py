"""sdfg_scan's gt4py backend beyond the hooks' matrix of ``test_gt4py.py``: existing hooks and pickling, the
deprecated and the unit-stride backends, K-only fields, vectorised maps, declared in-place outputs, the
``final`` stage, bad options, fission and replay's blocked kernel, and ``optimize`` after gt4py's
auto-optimize. Runs in the gt4py venv; in the main venv (no gt4py) the module skips (``gt4py_helpers``)."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
from gt4py_helpers import BACKENDS, Hook, bitwise, gtx, gtx_backend, gtx_factory, sg, translate
from gt4py_programs import programs as gp
from gt4py_programs.programs import PRECIP_SCALED, PROGRAMS, RATE_POWER, Cell, K

from sdfg_scan.nodes.base import ColumnNode


def test_set_fast_implementations_would_reset_an_unexpanded_choice():
    """Why the last hook expands: DaCe's ``set_fast_implementations`` on GPU forces ``pure`` on
    sequential-scheduled library nodes, an implementation sdfg_scan nodes do not have."""
    import dace
    from dace.transformation.auto.auto_optimize import set_fast_implementations

    hooks = {Hook.TopLevelDataFlowPre: sg.optimization_hooks()[Hook.TopLevelDataFlowPre]}
    sdfg = translate("cumsum_k", hooks)   # lifted, never expanded (no last stage)
    nodes = [n for n, _ in sdfg.all_nodes_recursive() if isinstance(n, ColumnNode)]
    assert nodes
    for n in nodes:
        n.schedule = dace.ScheduleType.Sequential
    set_fast_implementations(sdfg, dace.DeviceType.GPU)
    assert all(n.implementation == "pure" and "pure" not in n.implementations for n in nodes)


def test_existing_hooks_are_chained_not_dropped_and_pickle():
    calls: list[str] = []
    existing = {Hook.TopLevelDataFlowPre: _Record("pre", calls), Hook.TopLevelDataFlowStep: _Record("step", calls),
                Hook.TopLevelDataFlowPost: _Record("post", calls)}
    hooks = sg.optimization_hooks(existing=existing)
    assert set(hooks) == {Hook.TopLevelDataFlowPre, Hook.TopLevelDataFlowStep, Hook.TopLevelDataFlowPost}
    assert hooks[Hook.TopLevelDataFlowStep] is existing[Hook.TopLevelDataFlowStep]
    again = pickle.loads(pickle.dumps(hooks))
    assert again.reports is not None and set(again) == set(hooks)
    translate("cumsum_k", hooks)
    assert calls[0] == "pre" and calls[-1] == "post" and len(hooks.reports) == 1
    gpu = sg.optimization_hooks(gpu=True, existing=existing)
    assert Hook.AfterToGPU in gpu and gpu[Hook.TopLevelDataFlowPost] is existing[Hook.TopLevelDataFlowPost]
    with pytest.raises(ValueError, match="reproducibility must be one of"):
        sg.optimization_hooks(reproducibility="fast")


class _Record:
    def __init__(self, name: str, calls: list[str]) -> None:
        self.name, self.calls = name, calls

    def __call__(self, sdfg) -> None:
        self.calls.append(self.name)


def test_deprecated_make_dace_backend_path():
    """icon4py 0.4.1's ``make_custom_dace_backend`` path: ``make_dace_backend(optimization_args=...)``."""
    with pytest.warns(DeprecationWarning):
        be = gtx_backend.make_dace_backend(gpu=False, optimization_args={
            "optimization_hooks": sg.optimization_hooks(gpu=False, reproducibility="exact")})
    case = PROGRAMS["cumsum_k"]
    x = np.asfortranarray(np.random.default_rng(3).uniform(0, 1, (4, 6)))
    out = gtx.as_field([Cell, K], np.zeros_like(x), allocator=np)
    case.program.with_backend(be)(gtx.as_field([Cell, K], x, allocator=np), out, offset_provider={})
    assert bitwise(out.asnumpy(), case.reference(x)[0])


def test_unit_stride_backend_chooses_for_the_final_strides_and_is_bitwise():
    """icon4py's backends (``unstructured_horizontal_has_unit_stride=True``): gt4py makes its ``[Cell, K]``
    temporaries column-major only after ``TopLevelDataFlowPost``. The last CPU hook applies that first, so
    a scan reading a temporary (``qr * 2``) gets a schedule with the cells inside the level loop (it got a
    per-column one when the temporary still looked K-contiguous), its body follows the new strides, and
    ``reports`` shows the final choice; the program stays bitwise the reference."""
    hooks = sg.optimization_hooks(gpu=False, reproducibility="exact")
    translator = gtx_factory.make_dace_translator(gtx_factory.DaCeConfig(unstructured_horizontal_has_unit_stride=True),
                                                  auto_optimize_args={"optimization_hooks": hooks})
    sdfg = translator.generate_sdfg(PRECIP_SCALED.program.gtir, {}, K)
    assert [d for d in sdfg.arrays.values() if d.transient and len(d.shape) == 2], "expected a [Cell, K] temporary"
    (row,) = hooks.reports[0].scans
    assert row.implementation in {"levels_outside", "blocked"}, row.reason
    be = sg.make_backend(gpu=False, reproducibility="exact", unstructured_horizontal_has_unit_stride=True,
                         stage="hooks")
    ins = {k: np.asfortranarray(v) for k, v in PRECIP_SCALED.make_inputs(np.random.default_rng(11), 6, 9).items()}
    outs = {k: gtx.as_field([Cell, K], np.full((6, 9), np.nan, order="F"), allocator=np) for k in PRECIP_SCALED.outputs}
    PRECIP_SCALED.program.with_backend(be)(**{k: gtx.as_field([Cell, K], v, allocator=np) for k, v in ins.items()},
                                           **outs, offset_provider={})
    for name, want in zip(PRECIP_SCALED.outputs, PRECIP_SCALED.reference(*ins.values()), strict=True):
        assert bitwise(outs[name].asnumpy(), want), name


@pytest.mark.parametrize("nk", [1, 2, 9])
def test_a_scan_over_a_single_column_is_bitwise_the_reference(nk):
    """Fields over K only: gt4py lowers the scan without a map over cells; the hooks leave it as it is (nothing
    to lift) and the program stays bitwise the reference, int carry included."""
    x = np.random.default_rng(nk).uniform(-1, 1, nk)
    acc = gtx.as_field([K], np.full(nk, np.nan), allocator=np)
    count = gtx.as_field([K], np.zeros(nk, dtype=np.int32), allocator=np)
    gp.single_column.with_backend(BACKENDS["exact"][0])(gtx.as_field([K], x, allocator=np), acc, count,
                                                         offset_provider={})
    want_acc, want_count = gp.single_column_ref(x)
    assert bitwise(acc.asnumpy(), want_acc)
    assert np.array_equal(count.asnumpy(), want_count)


def test_a_coefficient_over_k_only_in_a_lifted_scan_is_bitwise_the_reference():
    """A ``[Cell, K]`` scan reading a K-only field (one value per level for every cell) through icon4py's
    unit-stride backend: lifted, given a schedule with the cells inside the level loop, bitwise the
    reference down to one level and one cell."""
    hooks = sg.optimization_hooks(gpu=False, reproducibility="exact")
    config = gtx_factory.DaCeConfig(unstructured_horizontal_has_unit_stride=True)
    translator = gtx_factory.make_dace_translator(config, auto_optimize_args={"optimization_hooks": hooks})
    translator.generate_sdfg(gp.level_weighted.gtir, {}, K)
    (row,) = hooks.reports[0].scans
    assert row.lifted and row.implementation in {"levels_outside", "blocked"}, row.reason
    be = sg.make_backend(gpu=False, reproducibility="exact", unstructured_horizontal_has_unit_stride=True,
                         stage="hooks")
    rng = np.random.default_rng(5)
    for n, nk in ((1, 1), (5, 2), (6, 9)):
        x, w = np.asfortranarray(rng.uniform(-1, 1, (n, nk))), rng.uniform(0, 1, nk)
        out = gtx.as_field([Cell, K], np.full((n, nk), np.nan, order="F"), allocator=np)
        gp.level_weighted.with_backend(be)(gtx.as_field([Cell, K], x, allocator=np), gtx.as_field([K], w, allocator=np),
                                           out, offset_provider={})
        assert bitwise(out.asnumpy(), gp.level_weighted_ref(x, w)), (n, nk)


def test_exact_vectorised_maps_through_the_backend_are_bitwise():
    """``make_backend(vectorize_maps=True)`` under ``exact``: gt4py's pointwise maps as vectorised loops with the
    program's scalar ``pow``/``exp`` per lane (``VectorizeCellMap(exact=True)``): bitwise the reference."""
    import dace

    hooks = sg.optimization_hooks(gpu=False, reproducibility="exact", vectorize_maps=True)
    translator = gtx_factory.make_dace_translator(gtx_factory.DaCeConfig(unstructured_horizontal_has_unit_stride=True),
                                                  auto_optimize_args={"optimization_hooks": hooks})
    sdfg = translator.generate_sdfg(PRECIP_SCALED.program.gtir, {}, K)
    loops = [n for n, _ in sdfg.all_nodes_recursive() if isinstance(n, dace.nodes.Tasklet) and
             n.label.endswith("_vectorized")]
    assert any(t.label.startswith("map_") for t in loops), [t.label for t in loops]   # gt4py's pointwise map
    assert all(any(e.endswith("ScalarLaneLoops") for e in t.environments) for t in loops)
    be = sg.make_backend(gpu=False, reproducibility="exact", vectorize_maps=True, stage="hooks",
                         unstructured_horizontal_has_unit_stride=True)
    assert be.name.endswith("_sdfg_scan_exact_vmaps"), be.name
    ins = {k: np.asfortranarray(v) for k, v in PRECIP_SCALED.make_inputs(np.random.default_rng(13), 300, 9).items()}
    outs = {k: gtx.as_field([Cell, K], np.full((300, 9), np.nan, order="F"), allocator=np)
            for k in PRECIP_SCALED.outputs}
    PRECIP_SCALED.program.with_backend(be)(**{k: gtx.as_field([Cell, K], v, allocator=np) for k, v in ins.items()},
                                           **outs, offset_provider={})
    for name, want in zip(PRECIP_SCALED.outputs, PRECIP_SCALED.reference(*ins.values()), strict=True):
        assert bitwise(outs[name].asnumpy(), want), name


@pytest.mark.parametrize("reproducibility", ["exact", "replay"])
def test_vectorised_maps_read_the_program_constants_as_literals(reproducibility):
    """icon4py names its constants (``B2 = wpfloat(1.625)``; ``power(rho * qr, B2)``): gt4py lowers each as a
    tasklet outside the map writing a scalar, and moves it into the map only after the last CPU hook. The hook
    moves them first (``constants_into_maps``), so the vectorised map reads the two fields only and its
    ``pow`` has the literal exponent (the staged call of the base alone, not the one taking the exponent per
    lane). ``exact``: bitwise glibc's ``pow`` per element."""
    import dace

    hooks = sg.optimization_hooks(gpu=False, reproducibility=reproducibility, vectorize_maps=True)
    translator = gtx_factory.make_dace_translator(gtx_factory.DaCeConfig(unstructured_horizontal_has_unit_stride=True),
                                                  auto_optimize_args={"optimization_hooks": hooks})
    sdfg = translator.generate_sdfg(RATE_POWER.program.gtir, {}, K)
    (loop,) = [n for n, _ in sdfg.all_nodes_recursive() if isinstance(n, dace.nodes.Tasklet) and
               n.label.endswith("_vectorized")]
    assert sorted(loop.in_connectors) == ["_r_qr", "_r_rho"], sorted(loop.in_connectors)
    code = loop.code_global.as_string
    assert "1.625" in code and "_sdfg_scan_pw_exact(" not in code, "the exponent is not a literal in the loop"
    if reproducibility == "exact":
        be = sg.make_backend(gpu=False, reproducibility="exact", vectorize_maps=True, stage="hooks",
                             unstructured_horizontal_has_unit_stride=True)
        ins = {k: np.asfortranarray(v) for k, v in RATE_POWER.make_inputs(np.random.default_rng(17), 300, 5).items()}
        out = gtx.as_field([Cell, K], np.full((300, 5), np.nan, order="F"), allocator=np)
        RATE_POWER.program.with_backend(be)(**{k: gtx.as_field([Cell, K], v, allocator=np) for k, v in ins.items()},
                                            rate=out, offset_provider={})
        (want,) = RATE_POWER.reference(*ins.values())
        assert bitwise(out.asnumpy(), want)


def test_declared_inplace_pairs_write_results_through_and_stay_bitwise_when_aliased():
    """By default the hooks assume any two arguments may share memory, so a result the scan computes while
    it reads other arguments (``rho``, ``dz``) stays in its temporary and is copied. ``inplace={"qr_out":
    "qr"}`` declares the only aliasing the caller does (icon4py's graupel driver: ``q_out`` = ``q_in``):
    the three results are written through, and a call passing ``qr`` as ``qr_out`` still gives the
    reference bitwise (``qr`` is read by the map computing ``qr * 2`` before the scan writes)."""
    import functools

    from gt4py_programs.programs import precip_scaled_domain

    declared = sg.optimization_hooks(gpu=False, reproducibility="exact", inplace={"qr_out": "qr"})
    be = gtx_backend.make_dace_toolchain(
        gtx_factory.DaCeConfig(), name_postfix="_sdfg_scan_inplace",
        translation=functools.partial(gtx_factory.make_dace_translator,
                                      auto_optimize_args={"optimization_hooks": declared}))
    n, nk = 7, 9
    ins = {k: np.asfortranarray(v) for k, v in PRECIP_SCALED.make_inputs(np.random.default_rng(5), n, nk).items()}
    want = PRECIP_SCALED.reference(*ins.values())
    fields = {k: gtx.as_field([Cell, K], v.copy(order="F"), allocator=np) for k, v in ins.items()}
    outs = {"qr_out": fields["qr"], **{k: gtx.as_field([Cell, K], np.full((n, nk), np.nan, order="F"), allocator=np)
                                     for k in ("qs_out", "flux")}}
    precip_scaled_domain.with_backend(be)(**fields, **outs, horizontal_start=0, horizontal_end=n, vertical_start=0,
                                          vertical_end=nk, offset_provider={})
    assert declared.reports[0].applied.get("ResultWriteThrough") == 3, declared.reports[0].applied
    for name, ref in zip(PRECIP_SCALED.outputs, want, strict=True):
        assert bitwise(outs[name].asnumpy(), ref), name


def test_the_default_stage_is_final_on_the_cpu_and_the_hooks_on_the_gpu():
    """``make_backend()`` without ``stage`` (since stop 57): ``sdfg_scan.optimize`` after gt4py's optimizer on the
    CPU (``stage="final"``), the hooks on the GPU (the only stage there)."""
    cpu = sg.make_backend(gpu=False)
    assert cpu.name.endswith("_sdfg_scan_exact_final"), cpu.name
    assert cpu.executor.translation.step.final_stage.reproducibility == "exact"
    gpu = sg.make_backend(gpu=True, reproducibility="replay")
    assert gpu.name.endswith("_sdfg_scan_replay"), gpu.name
    assert isinstance(gpu.executor.translation.step.auto_optimize_args["optimization_hooks"], sg.OptimizationHooks)


def test_bad_options_are_refused_naming_what_is_wrong():
    """Misspelt or mistyped options fail where they are given, naming the option (before: ``inplace="q_out"``
    gave Python's "dictionary update sequence element #0 has length 1", ``make_backend(vectorize_maps=True)``
    gt4py's "make_dace_translator() got an unexpected keyword argument", ``gpu="cpu"`` built for the GPU and
    ``make_backend(auto_optimize=False)`` silently did nothing: the hooks run only inside gt4py's auto-optimize,
    so it was not even IEEE-strict)."""
    cases = [(dict(inplace="q_out"), TypeError, "inplace must be a mapping"),
             (dict(inplace=[("q_out", "q_in")]), TypeError, "inplace must be a mapping"),
             (dict(existing=[Hook.TopLevelDataFlowPre]), TypeError, "existing must be a mapping"),
             (dict(existing={"TopLevelDataFlowPre": print}), TypeError, "existing must map GT4PyAutoOptHook"),
             (dict(existing={Hook.TopLevelDataFlowPre: 1}), TypeError, "to callables"),
             (dict(gpu="cpu"), TypeError, "gpu must be True or False, got 'cpu'"),
             (dict(horizontal_unit_stride=1), TypeError, "horizontal_unit_stride must be True, False or None"),
             (dict(vectorize_maps=True, gpu=True), ValueError, "on the CPU, got gpu=True"),
             (dict(vectorize_maps=True, reproducibility="replay", gpu=True), ValueError, "got gpu=True")]
    for kwargs, error, message in cases:
        with pytest.raises(error, match=message):
            sg.optimization_hooks(**kwargs)
    with pytest.raises(TypeError, match="make_backend: unknown keyword 'unstructured_horizontal_has_unit_strid' "
                                        r"\(did you mean 'unstructured_horizontal_has_unit_stride'\?\)"):
        sg.make_backend(unstructured_horizontal_has_unit_strid=True)
    with pytest.raises(TypeError, match="unknown keyword 'bind_func_name'"):   # a DaCeConfig ClassVar, not a field
        sg.make_backend(bind_func_name="f")
    with pytest.raises(ValueError, match="auto_optimize=False skips gt4py's gt_auto_optimize, where the hooks run"):
        sg.make_backend(auto_optimize=False)   # the build would have been neither lifted nor strict
    with pytest.raises(ValueError, match=r"stage must be one of \('hooks', 'final'\), got 'last'"):
        sg.make_backend(stage="last")
    with pytest.raises(ValueError, match="stage='final' optimizes the CPU program gt4py compiles; for gpu=True use"):
        sg.make_backend(gpu=True, stage="final")
    with pytest.raises(TypeError, match="vectorize_maps must be True, False or None, got 'yes'"):
        sg.make_backend(vectorize_maps="yes")
    with pytest.raises(TypeError, match=r"make_backend: auto_optimize_args\['optimization_hooks'\] must map "):
        sg.make_backend(auto_optimize_args={"optimization_hooks": {"TopLevelDataFlowPre": print}})
    with pytest.raises(ValueError, match="make_backend: assume_no_alias=True says no two arguments share memory"):
        sg.make_backend(assume_no_alias=True, inplace={"q_out": "q_in"})
    with pytest.raises(ValueError, match="make_backend: assume_no_alias=True says"):
        sg.make_backend(assume_no_alias=True, inplace={"q_out": "q_in"}, stage="hooks")
    for stage in ("hooks", "final"):   # the argument the caller gave is named, in either stage
        with pytest.raises(TypeError, match=r"make_backend: auto_optimize_args\['optimization_hooks'\] must be a "
                                            "mapping"):
            sg.make_backend(auto_optimize_args={"optimization_hooks": [print]}, stage=stage)
    with pytest.raises(TypeError, match="is not a backend of sdfg_scan.gt4py.make_backend"):
        sg.reports_of(BACKENDS["stock"][0])


@pytest.mark.parametrize("reproducibility", ["exact", "replay"])
def test_the_final_stage_optimizes_the_program_gt4py_compiles(reproducibility):
    """``make_backend(stage="final")``: gt4py's translation runs unchanged (a hook given in ``auto_optimize_args``
    still runs, once), then ``optimize`` lifts the scan from the SDFG it returns and vectorises the pointwise
    maps (its default), and every sdfg_scan node is expanded before gt4py compiles; ``reports_of`` gives the
    report. Under ``exact`` bitwise the reference, under ``replay`` within rtol 1e-12 (no ``pow`` of the program
    differs here beyond rounding of the vector ``exp``)."""
    import dace

    calls = []
    be = sg.make_backend(gpu=False, reproducibility=reproducibility, stage="final",
                         unstructured_horizontal_has_unit_stride=True,
                         auto_optimize_args={"optimization_hooks": {Hook.TopLevelDataFlowPost: calls.append}})
    assert be.name.endswith(f"_sdfg_scan_{reproducibility}_final"), be.name
    step = be.executor.translation.step
    sdfg = step.generate_sdfg(PRECIP_SCALED.program.gtir, {}, K)
    assert len(calls) == 1
    (report,) = sg.reports_of(be)
    assert report.scans_lifted == 1 and report.maps_vectorized >= 1, report.table()
    assert not [n for n, _ in sdfg.all_nodes_recursive() if isinstance(n, ColumnNode)], "left unexpanded"
    assert any(isinstance(n, dace.nodes.Tasklet) and n.label.endswith("_vectorized")
               for n, _ in sdfg.all_nodes_recursive())
    n, nk = 7, 9
    ins = {k: np.asfortranarray(v) for k, v in PRECIP_SCALED.make_inputs(np.random.default_rng(3), n, nk).items()}
    outs = {k: gtx.as_field([Cell, K], np.full((n, nk), np.nan, order="F"), allocator=np) for k in PRECIP_SCALED.outputs}
    PRECIP_SCALED.program.with_backend(be)(**{k: gtx.as_field([Cell, K], v, allocator=np) for k, v in ins.items()},
                                           **outs, offset_provider={})
    for name, want in zip(PRECIP_SCALED.outputs, PRECIP_SCALED.reference(*ins.values()), strict=True):
        if reproducibility == "exact":
            assert bitwise(outs[name].asnumpy(), want), name
        else:
            np.testing.assert_allclose(outs[name].asnumpy(), want, rtol=1e-12, atol=0, err_msg=name)


def test_make_backend_passes_every_hook_option_through():
    """``make_backend`` takes the hooks' ``vectorize_maps`` and ``assume_no_alias`` (they went to gt4py's
    translator, which refused them), and names the backend after them."""
    be = sg.make_backend(gpu=False, reproducibility="replay", vectorize_maps=True, assume_no_alias=True, stage="hooks",
                         unstructured_horizontal_has_unit_stride=True, use_metrics=False)
    assert be.name.endswith("_sdfg_scan_replay_vmaps_noalias"), be.name
    step = be.executor.translation.step
    hooks = step.auto_optimize_args["optimization_hooks"]
    lift, expand = hooks[Hook.TopLevelDataFlowPre], hooks[Hook.TopLevelDataFlowPost]
    assert lift.assume_no_alias and expand.vectorize_maps and expand.horizontal_unit_stride
    assert not step.use_metrics


def test_report_flags_name_the_final_expansions():
    """The report's compiler flags are those of the expansions the last hook chose, not the lifting stage's
    (``replay`` on the unit-stride backend: lifted ``sequential``, expanded ``blocked``; the line named
    ``sequential``)."""
    hooks = sg.optimization_hooks(gpu=False, reproducibility="replay")
    translator = gtx_factory.make_dace_translator(gtx_factory.DaCeConfig(unstructured_horizontal_has_unit_stride=True),
                                                  auto_optimize_args={"optimization_hooks": hooks})
    translator.generate_sdfg(PRECIP_SCALED.program.gtir, {}, K)
    (report,) = hooks.reports
    final = {row.label: row.implementation for row in report.scans}
    named = [who for whos in report.flags_from.values() for who in whos if who.startswith("Scan ")]
    assert named, report.flags_line()
    for who in named:
        label, impl = who.split("'")[1], who.rsplit("(", 1)[1].rstrip(")")
        assert final[label] == impl, (report.flags_line(), final)


def test_hooks_given_again_as_existing_are_replaced_not_run_twice():
    """``optimization_hooks(existing=<an earlier optimization_hooks>)``, e.g. to change the class: the earlier
    stages are dropped, the user's own hooks kept (before, the earlier ``exact`` lifting ran before the new
    ``replay`` one, pinning the strict flags, and a CPU mapping given to the GPU hooks kept its CPU expansion
    at ``TopLevelDataFlowPost``)."""
    from sdfg_scan.gt4py_stages import Chained, ExpandStage, LiftStage

    calls: list[str] = []
    inner = sg.optimization_hooks(reproducibility="exact", existing={Hook.TopLevelDataFlowPre: _Record("pre", calls)})
    outer = sg.optimization_hooks(reproducibility="replay", existing=inner)
    pre = outer[Hook.TopLevelDataFlowPre]
    assert isinstance(pre, Chained) and isinstance(pre.first, _Record) and isinstance(pre.then, LiftStage)
    assert pre.then.reproducibility == "replay" and outer[Hook.TopLevelDataFlowPost].reproducibility == "replay"
    translate("cumsum_k", outer)
    assert calls == ["pre"] and not inner.reports and [r.reproducibility for r in outer.reports] == ["replay"]
    gpu = sg.optimization_hooks(gpu=True, existing=inner)
    assert Hook.TopLevelDataFlowPost not in gpu and isinstance(gpu[Hook.AfterToGPU], ExpandStage)
    assert gpu[Hook.AfterToGPU].target == "gpu" and gpu[Hook.TopLevelDataFlowPre].first is pre.first


def test_declared_inplace_is_not_used_where_the_input_is_read_unordered_with_the_output_written():
    """``inplace={"f_out": "x"}`` on a program whose second scan reads ``x`` one level above (``b``) while the
    first writes ``f_out`` (= ``x``): gt4py's dataflow does not order the copy into ``f_out`` after the map
    reading ``x`` for ``b``. With the declaration used, ``b``'s result was written through into ``b_out`` (its
    copy gone), DaCe emitted ``f_out``'s copy first and ``b`` read the overwritten ``x`` (wrong by up to 9 on
    37 x 12). Such a program is optimized as without the declaration (``unordered_pairs``), as the report says;
    the default hooks, with the same aliasing, are right on both outputs (stock gt4py is wrong on ``f_out``)."""
    from gt4py_programs.programs import shifted_pair, shifted_pair_ref

    hooks = sg.optimization_hooks(reproducibility="exact", inplace={"f_out": "x"}, horizontal_unit_stride=True)
    translator = gtx_factory.make_dace_translator(gtx_factory.DaCeConfig(unstructured_horizontal_has_unit_stride=True),
                                                  auto_optimize_args={"optimization_hooks": hooks})
    translator.generate_sdfg(shifted_pair.gtir, {}, K)
    assert [r.skipped for r in hooks.reports] == [[
        "inplace {'f_out': 'x'} (a read of the input is not ordered before a write of its output: optimized as "
        "without inplace)"]]
    be = sg.make_backend(gpu=False, reproducibility="exact", inplace={"f_out": "x"}, stage="hooks",
                         unstructured_horizontal_has_unit_stride=True)
    for n, nk in ((37, 12), (5, 4), (3, 2)):
        rng = np.random.default_rng(nk)
        x, w = (np.asfortranarray(rng.uniform(0, 1, (n, nk))) for _ in range(2))
        f_want, b_want = shifted_pair_ref(x, w, 1, nk - 1)
        xf = gtx.as_field([Cell, K], x.copy(order="F"), allocator=np)
        b_out = gtx.as_field([Cell, K], np.full((n, nk), np.nan, order="F"), allocator=np)
        shifted_pair.with_backend(be)(xf, gtx.as_field([Cell, K], w, allocator=np), xf, b_out, horizontal_start=0,
                                      horizontal_end=n, vertical_start=1, vertical_end=nk - 1, offset_provider={})
        lv = slice(1, nk - 1)
        assert bitwise(xf.asnumpy()[:, lv], f_want[:, lv]), ("f_out", n, nk)
        assert bitwise(b_out.asnumpy(), b_want), ("b_out", n, nk)


def test_fission_of_a_scan_with_a_conditional_recurrence():
    """A scan whose carry is two independent recurrences, one under a condition (``n + 1 if x > 0.5 else n``):
    ``ScanFission`` splits it, dropping the other part's conditional block from each body. It raised DaCe's
    "Ambiguous or undefined starting block", which aborts gt4py's build with the hooks. Both parts then
    take gt4py's map over cells (``LiftCellMap`` lifts a scan out of a map holding other work)."""
    from gt4py_programs.programs import counted_sum, counted_sum_ref

    hooks = sg.optimization_hooks(gpu=False, reproducibility="exact")
    translator = gtx_factory.make_dace_translator(gtx_factory.DaCeConfig(), auto_optimize_args={"optimization_hooks": hooks})
    translator.generate_sdfg(counted_sum.gtir, {}, K).validate()
    assert hooks.reports[0].applied.get("ScanFission") == 1, hooks.reports[0].applied
    # both parts leave gt4py's one map over cells, each with its own (a schedule over cells to choose)
    assert hooks.reports[0].applied.get("LiftCellMap") == 2, hooks.reports[0].applied
    x = np.asfortranarray(np.random.default_rng(4).uniform(0, 1, (37, 9)))
    outs = [gtx.as_field([Cell, K], np.zeros((37, 9), dtype=dt, order="F"), allocator=np) for dt in (np.float64, np.int32)]
    counted_sum.with_backend(BACKENDS["exact"][0])(gtx.as_field([Cell, K], x, allocator=np), *outs, offset_provider={})
    for got, want in zip(outs, counted_sum_ref(x), strict=True):
        assert np.array_equal(got.asnumpy(), want)


@pytest.mark.parametrize("name", ["frozen", "guarded_division"])
def test_replay_blocked_simd_keeps_what_a_branch_does_not_write_and_divides_only_where_guarded(name):
    """``replay`` on icon4py's unit-stride backend gives these scans ``blocked_simd``, which if-converts their
    branches. ``if frozen: keep else: update`` took the update in every lane (wrong on most entries). An
    integer division guarded by ``m > 0`` would trap in the lanes where ``m == 0`` if computed for every lane
    (GCC happened to keep a branch there): that conditional now stays a plain ``if``
    (``test_vectorize_cell_map.py`` checks the rule). Against NumPy, on 300 cells (two blocks) and small shapes."""
    program, ref = getattr(gp, name), getattr(gp, f"{name}_ref")
    be = sg.make_backend(gpu=False, reproducibility="replay", unstructured_horizontal_has_unit_stride=True,
                         stage="hooks")
    hooks = be.executor.translation.step.auto_optimize_args["optimization_hooks"]
    for n, nk in ((300, 5), (2, 1), (3, 9)):
        rng = np.random.default_rng(n * nk)
        x = np.asfortranarray(rng.uniform(0.0, 1.0, (n, nk)))
        ins = {"x": x} if name == "frozen" else {"x": x, "m": np.asfortranarray(rng.integers(-2, 4, (n, nk), dtype=np.int32))}
        want = ref(*ins.values())
        names = ("acc", "fz") if name == "frozen" else ("q_out", "v_out")
        fields = {k: gtx.as_field([Cell, K], np.asfortranarray(np.zeros_like(w)), allocator=np)
                  for k, w in zip(names, want, strict=True)}
        program.with_backend(be)(**{k: gtx.as_field([Cell, K], v, allocator=np) for k, v in ins.items()}, **fields,
                                 offset_provider={})
        for k, w in zip(names, want, strict=True):
            o = fields[k].asnumpy()
            if w.dtype.kind == "f":
                np.testing.assert_allclose(o, w, rtol=1e-13, err_msg=f"{name} {k} {n}x{nk}")
            else:
                assert np.array_equal(o, w), f"{name} {k} {n}x{nk}"
    assert [row.implementation for r in hooks.reports for row in r.scans] == ["blocked_simd"]


def test_optimize_after_auto_optimize_passes_int_arguments_gt4py_made_symbols():
    """The non-hook route on a scan shaped like icon4py's metric-field level searches (Edge x K, an int
    counter and a bool flag, int arguments ``lower``/``top`` in the conditions, an input read at K + 1).
    gt4py's auto-optimize makes those arguments symbols and feeds them to the scan through tasklets
    (``__tlet_out = lower``) inside its map; ``LiftCellMap`` moves the tasklets into the body, and did not
    pass the symbols through the node's symbol mapping: every expansion over cells failed with DaCe's
    "Missing symbols on nested SDFG". Each eligible exact expansion, compiled, against NumPy."""
    import copy

    from gt4py_programs.programs import level_search, level_search_ref

    import sdfg_scan
    from sdfg_scan.choice import refusal, specs
    from sdfg_scan.context import context_of
    from sdfg_scan.gt4py_args import gt4py_arguments
    from sdfg_scan.nodes.scan import Scan

    translator = gtx_factory.make_dace_translator(gtx_factory.DaCeConfig())
    original = translator.generate_sdfg(level_search.gtir, {}, K)
    assert {"lower", "top"} <= set(original.symbols), sorted(original.symbols)   # the shape under test
    optimized = copy.deepcopy(original)
    report = sdfg_scan.optimize(optimized, target="cpu", reproducibility="exact")
    assert report.applied["LiftCellMap"] == 1, report.table()
    (node, state), = [(n, s) for n, s in optimized.all_nodes_recursive() if isinstance(n, Scan)]
    ctx = context_of(node, state, "exact")
    eligible = [k for k, cls in specs(node).items() if refusal(node, k, cls, ctx) is None]
    assert {"sequential", "levels_outside"} <= set(eligible), eligible
    builds = {"original": original}
    for impl in eligible:
        variant = copy.deepcopy(optimized)
        variant.name = f"{optimized.name}_{impl}"
        (pinned,) = [n for n, _ in variant.all_nodes_recursive() if isinstance(n, Scan)]
        pinned.implementation = impl
        builds[impl] = variant
    compiled = {k: sd.compile() for k, sd in builds.items()}
    for n, nk, lower, top in ((7, 1, 0, 0), (9, 6, 2, 4), (40, 9, 0, 20)):
        kw = gt4py_arguments(original, n, nk, seed=n, scalars={"lower": lower, "top": top},
                             extra_levels={"z_ifc": 1})
        want = level_search_ref(kw["z"], kw["z_ifc"], lower, top)
        for name, prog in compiled.items():
            args = {k: (v.copy(order="K") if isinstance(v, np.ndarray) else v) for k, v in kw.items()}
            prog(**args)
            for out, w in zip(("level", "found"), want, strict=True):
                assert np.array_equal(args[out], w), (name, out, n, nk, lower, top)
