"""``sdfg_scan.optimize`` on every icon4py fixture: lift -> canonicalise -> restructure -> select.

Every form except the lowered graupel is compiled before and after and compared bitwise (all
outputs, NaNs by position; both sides built with ``sdfg_scan.compile_flags("exact")``); this is also
the one place where graupel is compiled after lifting and canonicalising (the per-transformation
test files compile only the small fixtures). ``optimize`` leaves every scan as an sdfg_scan node
(CPU and GPU), with a chosen implementation and a reason.
"""

from __future__ import annotations

import icon4py_fixtures as fx
import pytest

import sdfg_scan
from sdfg_scan.nodes.base import ColumnNode
from sdfg_scan.nodes.scan import Scan

# form -> report counts that must hold (lifted, copies removed, carry slots demoted, branches peeled,
# scans that took their map over cells)
EXPECTED = {
    "graupel_run.opt_nohooks": dict(scans_lifted=1, copies_removed=4, carries_demoted=2, branches_peeled=0,
                                    scans_with_cells=1),
    "graupel_run_dyn.opt_nohooks": dict(scans_lifted=1, copies_removed=4, carries_demoted=2, branches_peeled=0,
                                        scans_with_cells=1),
    "graupel_run.lowered": dict(scans_lifted=1, copies_removed=4, carries_demoted=2, branches_peeled=0),
    "graupel_run_dyn.lowered": dict(scans_lifted=1, copies_removed=4, carries_demoted=2, branches_peeled=0),
    "diagnose_pressure.opt": dict(scans_lifted=1, branches_peeled=2),
    "diagnose_pressure.lowered": dict(scans_lifted=1, branches_peeled=2),
    "minimal_cumsum_k.opt": dict(scans_lifted=1, scans_specialised=1),
    "minimal_cumsum_k.lowered": dict(scans_lifted=1, scans_specialised=1),
    "solve_tridiagonal_matrix_for_w_forward_sweep.opt": dict(scans_lifted=1, scans_with_cells=1),
    "solve_tridiagonal_matrix_for_w_back_substitution.opt": dict(scans_lifted=1, scans_with_cells=1),
    "solve_tridiagonal_matrix_for_w_back_substitution.lowered": dict(scans_lifted=1, scans_with_cells=1),
}
# form -> the implementation the cost model must choose for its scan (cell-contiguous fields and
# symbolic (large) domains: levels outside; K-contiguous temporaries: per column). The static
# 100-cell forms are near ties (diagnose_pressure: 0.12 ms per column, 0.15 ms levels outside) and
# left to the model.
CELLS_OUTER = {"levels_outside", "blocked"}   # schedules with the cells inside the level loop
CHOSEN = {
    "solve_tridiagonal_matrix_for_w_forward_sweep.opt": CELLS_OUTER,
    "solve_tridiagonal_matrix_for_w_back_substitution.opt": CELLS_OUTER,
    "solve_tridiagonal_matrix_for_w_back_substitution.lowered": {"sequential"},
}

# what icon4py's graupel driver aliases (fx.inputs aliases the same buffers); refused on the dyn form
GRAUPEL_INPLACE = {**{f"q_out_{i}": f"q_in_{i}" for i in range(2, 6)}, "t_out": "te"}
INPLACE = {"graupel_run.opt_nohooks": GRAUPEL_INPLACE, "graupel_run_dyn.opt_nohooks": GRAUPEL_INPLACE}
IN_PLACE_APPLIED = {"graupel_run.opt_nohooks": 5, "graupel_run_dyn.opt_nohooks": 0}

pytestmark = pytest.mark.fixtures


def _optimized(form: str):
    sdfg = fx.load(form)
    report = sdfg_scan.optimize(sdfg, target="cpu", inplace=INPLACE.get(form))
    assert report.outputs_in_place == IN_PLACE_APPLIED.get(form, 0)
    print(f"\n{form}\n{report.table()}")
    sdfg.validate()
    assert report.scans_lifted >= 1 and report.scans_after + report.scans_specialised == report.scans_before
    for key, value in EXPECTED.get(form, {}).items():
        assert getattr(report, key) == value, (form, key, getattr(report, key))
    scans = [n for n, _ in sdfg.all_nodes_recursive() if isinstance(n, Scan)]
    assert scans or report.scans_specialised
    nodes = [n for n, _ in sdfg.all_nodes_recursive() if isinstance(n, ColumnNode)]
    assert len(nodes) == len(report.nodes) >= 1 and all(n.implementation not in (None, "auto") for n in nodes)
    assert all(c.reason for c in report.nodes) and all(s.lifted for s in report.scans)
    assert report.flags[:len(sdfg_scan.compile_flags("exact"))] == sdfg_scan.compile_flags("exact") and "--fmad=false" not in report.flags
    if form in CHOSEN:
        assert len(scans) == 1 and scans[0].implementation in CHOSEN[form], (form, scans[0].selection_reason)
    return sdfg


LONG = {"graupel_run.opt_hooks", "graupel_run_dyn.opt_nohooks", "graupel_run_dyn.lowered"}
"""Forms whose checks only ``make test-long`` runs (each compiles or transforms a whole graupel; CI
keeps ``graupel_run.opt_nohooks`` and ``graupel_run.lowered``, the same scan)."""


def _forms(forms):
    return [pytest.param(f, marks=pytest.mark.long) if f in LONG else f for f in forms]


@pytest.mark.parametrize("form", _forms([f for f in fx.FORMS if f not in fx.NO_COMPILE]))
def test_optimize_is_bitwise_equal(form):
    original = fx.load(form)
    kw = fx.inputs(form, original)
    optimized = _optimized(form)
    fx.assert_bitwise_equal(fx.run(form, original, kw), fx.run(form + "+optimize", optimized, kw))


@pytest.mark.parametrize("form", _forms(["diagnose_pressure.opt", "solve_tridiagonal_matrix_for_w_back_substitution.opt",
                                         "graupel_run_dyn.opt_nohooks"]))
def test_optimize_then_simplify_is_bitwise_equal(form):
    """DaCe's ``simplify`` after ``optimize`` (which removes and renames transients, fuses states) leaves a
    program that builds (the transients ``optimize`` allocates once by default included) and computes the same
    bits."""
    import copy

    optimized = _optimized(form)
    simplified = copy.deepcopy(optimized)
    simplified.simplify()
    kw = fx.inputs(form, optimized)
    fx.assert_bitwise_equal(fx.run(form + "+optimize", optimized, kw), fx.run(form + "+simplify", simplified, kw))


@pytest.mark.parametrize("form", _forms(sorted(fx.NO_COMPILE)))
def test_optimize_lowered_graupel_validates(form):
    """The ~95-deep lowered graupel: optimised and validated, never compiled (~500 s)."""
    _optimized(form)


def test_bad_arguments_are_clear_errors():
    sdfg = fx.load("minimal_cumsum_k.opt")
    with pytest.raises(ValueError, match="sdfg_scan.optimize: target must be one of"):
        sdfg_scan.optimize(sdfg, target="tpu")
    with pytest.raises(ValueError, match="reproducibility must be one of"):
        sdfg_scan.optimize(sdfg, reproducibility="bitwise")


def _on_device(sdfg):
    """Program arguments in GPU memory, as gt4py's GPU backend passes them (DaCe's GPU transformation
    cannot copy graupel's symbolic-stride arguments in from the host)."""
    import dace

    for d in sdfg.arrays.values():
        if not d.transient and isinstance(d, dace.data.Array):
            d.storage = dace.StorageType.GPU_Global
    return sdfg


GPU_CODEGEN = [f for f in fx.FORMS if f.endswith((".opt", ".opt_nohooks")) and f != "graupel_run_dyn.opt_nohooks"]


@pytest.mark.gpu
@pytest.mark.parametrize("form", [pytest.param(f, marks=pytest.mark.long)
                                  if f.startswith(("graupel", "solve_tridiagonal_matrix_for_w_back")) else f
                                  for f in GPU_CODEGEN])   # CI: one backward (diagnose_pressure), one Thomas scan
def test_optimize_for_gpu_keeps_nodes_and_generates_a_kernel(form, tmp_path):
    """target="gpu": every scan stays an sdfg_scan node with a GPU expansion chosen (the lifted scans:
    one thread per column); the CUDA code is generated and nvcc compiles it (graupel included)."""
    from conftest import cuda_code, nvcc_compile

    sdfg = _on_device(fx.load(form))
    report = sdfg_scan.optimize(sdfg, target="gpu")
    assert report.scans_lifted >= 1
    nodes = [n for n, _ in sdfg.all_nodes_recursive() if isinstance(n, ColumnNode)]
    assert nodes and len(nodes) == len(report.nodes) and all(c.target == "gpu" for c in report.nodes)
    assert all(s.implementation in ("sequential", "kcached") for s in report.scans)
    code = cuda_code(sdfg)
    assert code.count("__global__") >= 1
    if not form.startswith("minimal"):
        nvcc_compile(code, tmp_path)


@pytest.mark.gpu
@pytest.mark.long
def test_dynamic_graupel_for_gpu_names_only_streams_its_context_has():
    """graupel_run_dyn after ``optimize(target="gpu")``, as it ran on an H200 (``benchmarks/gpu_icon4py.py``):

    - DaCe 2.0.0a10 sized its CUDA context for 2 streams while the code used 12 (a segmentation fault on
      the first call), through the nested SDFGs of DaCe's copies below; ``sdfg_scan.dace_fixes`` counts every
      stream and event the generated code names (since those copies are ``CopyInLayoutOrder`` kernels, DaCe's
      own count is right here too: ``test_the_cuda_context_holds_every_stream_the_code_uses`` keeps the
      defect under test);
    - DaCe's own kernels for the strided copies into ``q_out_0``/``q_out_1`` put the cells on the grid's y
      axis (capped at 65535: no launch at 81920 cells); ``CopyInLayoutOrder`` now writes every such copy
      (and the two parts of ``t_kp1``) as a kernel with the cells along x, so no launch puts them on y."""
    from conftest import launch_grids, streams_within_context

    sdfg = _on_device(fx.load("graupel_run_dyn.opt_nohooks"))
    report = sdfg_scan.optimize(sdfg, target="gpu")
    assert report.applied["CopyInLayoutOrder"] == 4
    code = "\n".join(o.clean_code for o in sdfg.generate_code())
    ctx, streams, events = streams_within_context(code)
    assert streams > 2 and ctx[0] >= streams and ctx[1] >= events, (ctx, streams, events)
    grids = launch_grids(code)
    assert len(grids) >= 5 and all("horizontal" not in y for _, y, _ in grids.values()), grids


@pytest.mark.gpu
@pytest.mark.parametrize("form", [f for f in fx.FORMS if f not in GPU_CODEGEN and not f.startswith("graupel_run")])
def test_optimize_for_gpu_keeps_the_scans_of_the_other_forms(form):
    """The lowered forms: optimised for the GPU, nodes kept, validated. Their CUDA code is not generated
    here: DaCe 2.0.0a10's code generator stops on the lowered forms after the GPU transformation ("no
    new targets were dynamically added": an IllegalCopy target it predicts is never dispatched). The
    lowered graupel (~95 nested SDFGs deep) is left out: DaCe's GPU transformation alone runs for many
    minutes on it."""
    sdfg = _on_device(fx.load(form))
    report = sdfg_scan.optimize(sdfg, target="gpu")
    assert report.scans_lifted >= 1 and report.nodes and all(c.target == "gpu" for c in report.nodes)
    sdfg.validate()


@pytest.mark.parametrize("form", ["solve_tridiagonal_matrix_for_w_back_substitution.opt"])
def test_optimized_file_is_reselected_for_another_target(form, tmp_path):
    """An optimized SDFG saved to a file loads with its nodes and is reselected for the GPU."""
    import dace

    sdfg = fx.load(form)
    sdfg_scan.optimize(sdfg, target="cpu")
    path = tmp_path / "opt.sdfg"
    sdfg.save(str(path))
    again = dace.SDFG.from_file(str(path))
    (scan,) = [n for n, _ in again.all_nodes_recursive() if isinstance(n, Scan)]
    assert scan.columns == "cells" and scan.implementation in CELLS_OUTER
    report = sdfg_scan.optimize(again, target="gpu")
    assert [c.implementation for c in report.nodes] == ["sequential"] and report.nodes[0].target == "gpu"


@pytest.mark.parametrize("form", ["graupel_run.opt_nohooks", "diagnose_pressure.opt"])
def test_carry_counts_of_a_row_agree_with_inspect(form):
    """A row's ``carries a->b`` counts one kind of slot on both sides, those that cross levels: ``a`` is
    what ``inspect`` lists for the original (graupel: 18 recurrent + 2 delay lines), ``b`` drops the slots
    removed and demoted; the cell map's constants that ``LiftCellMap`` brings into the body as invariant
    slots, and demoted delay lines (left as invariant slots), do not count."""
    from sdfg_scan.scan_sites import find_scans

    sdfg = fx.load(form)
    (site,) = find_scans(sdfg)
    level_carries = [c for c in site.structure.carries.values() if c.kind != "invariant"]
    report = sdfg_scan.optimize(sdfg, target="cpu", inplace=INPLACE.get(form))
    (row,) = report.scans
    assert row.carries_before == len(level_carries)
    assert row.carries_after == row.carries_before - report.carries_removed - report.carries_demoted
    assert f"{row.carries_before}->{row.carries_after}" in report.table()
    if form.startswith("graupel"):
        assert (row.carries_before, row.carries_after) == (20, 18)


def _count(c, x, k):
    (s,) = c
    return (s + x[0],), ()


def test_report_rows_follow_their_own_node_when_two_scans_share_a_label():
    """The frontend labels both scans of this program ``scan``; the second, pinned to ``levels_outside``,
    must not lend its implementation to the first one's row."""
    import dace

    n, k = dace.symbol("N"), dace.symbol("K")

    def two(a, b, c):
        b[:] = sdfg_scan.scan(_count, (0.0,), (a,), axis=1)
        c[:] = sdfg_scan.scan(_count, (1.0,), (a,), axis=1, reverse=True)   # not fused with the first

    two.__annotations__ = dict(a=dace.float64[n, k], b=dace.float64[n, k], c=dace.float64[n, k])
    sdfg = dace.program(two).to_sdfg()
    first, second = [node for node, _ in sdfg.all_nodes_recursive() if isinstance(node, Scan)]
    second.label = first.label
    second.implementation = "levels_outside"
    report = sdfg_scan.optimize(sdfg)
    rows = {r.direction: r for r in report.scans}
    assert rows["backward"].implementation == "levels_outside" and "pinned" in rows["backward"].reason
    assert rows["forward"].implementation == first.implementation == "sequential"
    assert rows["forward"].reason == first.selection_reason
