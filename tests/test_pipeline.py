"""``sdfg_scan.optimize`` on every icon4py fixture: lift -> canonicalise -> restructure -> select.

Every form except the lowered graupel is compiled before and after and compared bitwise (all
outputs, NaNs by position); this is also the one place where graupel is compiled after lifting
and canonicalising (the per-transformation test files compile only the small fixtures).
"""

from __future__ import annotations

import icon4py_fixtures as fx
import pytest

import sdfg_scan
from sdfg_scan.nodes.scan import Scan

# form -> report counts that must hold (lifted, copies removed, carry slots demoted, branches peeled)
EXPECTED = {
    "graupel_run.opt_nohooks": dict(scans_lifted=1, copies_removed=4, carries_demoted=2, branches_peeled=0,
                                    scans_interchanged=0),   # 100 cells: below MIN_CELLS
    "graupel_run_dyn.opt_nohooks": dict(scans_lifted=1, copies_removed=4, carries_demoted=2, branches_peeled=0,
                                        scans_interchanged=1),
    "graupel_run.lowered": dict(scans_lifted=1, copies_removed=4, carries_demoted=2, branches_peeled=0),
    "graupel_run_dyn.lowered": dict(scans_lifted=1, copies_removed=4, carries_demoted=2, branches_peeled=0),
    "diagnose_pressure.opt": dict(scans_lifted=1, branches_peeled=2),
    "diagnose_pressure.lowered": dict(scans_lifted=1, branches_peeled=2),
    "minimal_cumsum_k.opt": dict(scans_lifted=1, scans_specialised=1),
    "minimal_cumsum_k.lowered": dict(scans_lifted=1, scans_specialised=1),
    # cell-contiguous fields (opt forms): the k-loop moves outside the map; K-contiguous temporaries: it stays
    "solve_tridiagonal_matrix_for_w_forward_sweep.opt": dict(scans_lifted=1, scans_interchanged=1),
    "solve_tridiagonal_matrix_for_w_back_substitution.opt": dict(scans_lifted=1, scans_interchanged=1),
    "solve_tridiagonal_matrix_for_w_back_substitution.lowered": dict(scans_lifted=1, scans_interchanged=0),
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
    assert scans or report.scans_specialised or report.scans_interchanged
    assert all(s.implementation == "sequential" for s in scans)
    print(f"{form}: interchanged {report.scans_interchanged}")
    return sdfg


@pytest.mark.parametrize("form", [f for f in fx.FORMS if f not in fx.NO_COMPILE])
def test_optimize_is_bitwise_equal(form):
    original = fx.load(form)
    kw = fx.inputs(form, original)
    optimized = _optimized(form)
    fx.assert_bitwise_equal(fx.run(form, original, kw), fx.run(form + "+optimize", optimized, kw))


@pytest.mark.parametrize("form", sorted(fx.NO_COMPILE))
def test_optimize_lowered_graupel_validates(form):
    """The ~95-deep lowered graupel: optimised and validated, never compiled (~500 s)."""
    _optimized(form)


def test_bad_arguments_are_clear_errors():
    sdfg = fx.load("minimal_cumsum_k.opt")
    with pytest.raises(ValueError, match="sdfg_scan.optimize: target must be one of"):
        sdfg_scan.optimize(sdfg, target="tpu")
    with pytest.raises(ValueError, match="reproducibility must be one of"):
        sdfg_scan.optimize(sdfg, reproducibility="bitwise")


@pytest.mark.gpu
@pytest.mark.parametrize("form", ["diagnose_pressure.opt", "minimal_cumsum_k.opt"])
def test_optimize_for_gpu_generates_a_kernel(form, tmp_path):
    """target="gpu": the lifted scan runs in a CUDA kernel (one thread per column); nvcc compiles it."""
    from conftest import cuda_code, nvcc_compile

    sdfg = fx.load(form)
    report = sdfg_scan.optimize(sdfg, target="gpu")
    assert report.scans_lifted == 1
    assert all(s.implementation == "sequential" for s in report.scans)
    code = cuda_code(sdfg)
    assert code.count("__global__") >= 1
    if form.startswith("diagnose"):
        nvcc_compile(code, tmp_path)
