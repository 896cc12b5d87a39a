"""sdfg_scan inside gt4py's DaCe backend (``sdfg_scan.gt4py``), on gt4py programs with ``scan_operator``s.

Runs in the gt4py venv (``make test-gt4py``: Python >= 3.12, ``pip install -e '.[test,gt4py]'``); in the main
venv (no gt4py) the module skips. Every program is compiled once per backend (gt4py caches the compiled
program; sizes and strides are runtime symbols) and called on both layouts, down to 1 cell x 1 level:

* ``exact``: ``sdfg_scan.gt4py.make_backend(reproducibility="exact", stage="hooks")``; must equal the NumPy
  reference loop bit for bit, and stock gt4py built with the same IEEE-strict host flags;
* ``exact_final``: ``make_backend(reproducibility="exact")``, its CPU default ``stage="final"``; the same;
* ``stock_strict``: gt4py's ``run_dace_cpu`` toolchain with ``CXXFLAGS`` = gt4py's flags + the strict ones;
* ``stock``: gt4py's defaults (``-O3 -march=native``, FP contraction allowed): equal to rounding.

The backends and the memoised runs are in ``gt4py_helpers.py``; the backend's other routes (the final stage,
options, vectorised maps, in-place outputs) are tested in ``test_gt4py_backend.py``.
"""

from __future__ import annotations

import numpy as np
import pytest
from gt4py_helpers import SHAPE_IDS, SHAPES, bitwise, gtx_factory, run_program, sg, translate
from gt4py_programs.programs import PROGRAMS, K

from sdfg_scan.nodes.base import ColumnNode


@pytest.mark.parametrize("backend", ["exact", "exact_final"])
@pytest.mark.parametrize("shape", SHAPES, ids=SHAPE_IDS)
@pytest.mark.parametrize("program", sorted(PROGRAMS))
def test_exact_hooks_bitwise_equal_numpy_and_strict_stock(program, shape, backend):
    """``exact`` through the hooks and through ``stage="final"`` (``optimize`` on the SDFG gt4py compiles)."""
    got, ref = run_program(program, backend, shape)
    strict, _ = run_program(program, "stock_strict", shape)
    for name, want in zip(PROGRAMS[program].outputs, ref, strict=True):
        assert bitwise(got[name], want), f"'{name}' vs NumPy: max abs diff {np.nanmax(np.abs(got[name] - want))}"
        assert bitwise(got[name], strict[name]), f"'{name}' vs stock gt4py with IEEE-strict flags"


@pytest.mark.parametrize("shape", SHAPES[:2], ids=SHAPE_IDS[:2])
@pytest.mark.parametrize("program", sorted(PROGRAMS))
def test_exact_hooks_agree_with_stock_default_flags(program, shape):
    got, _ = run_program(program, "exact", shape)
    stock, _ = run_program(program, "stock", shape)
    for name in PROGRAMS[program].outputs:
        np.testing.assert_allclose(got[name], stock[name], rtol=1e-13, atol=1e-15)


@pytest.mark.parametrize("program", sorted(PROGRAMS))
def test_hooks_lift_every_scan_and_the_choice_survives_auto_optimize(program):
    """Every scan is lifted at ``TopLevelDataFlowPre``; after ``gt_auto_optimize`` (which ends with DaCe's
    ``set_fast_implementations``) no sdfg_scan node is left to be reset: they were expanded in the last hook,
    and the exact class pinned the program's host flags."""
    hooks = sg.optimization_hooks(gpu=False, reproducibility="exact")
    sdfg = translate(program, hooks)
    assert len(hooks.reports) == 1 and hooks.reports[0].scans_lifted >= 1, hooks.reports[0].table()
    if program == "backward_delay":   # the delay line becomes an offset read; the dead recurrence goes
        assert hooks.reports[0].applied["DeadCarryElimination"] == 2, hooks.reports[0].table()
        assert hooks.reports[0].carries_removed == 1, hooks.reports[0].table()
    assert not [n for n, _ in sdfg.all_nodes_recursive() if isinstance(n, ColumnNode)]
    assert any(sg.EXACT_ENV in getattr(n, "environments", ()) for n, _ in sdfg.all_nodes_recursive())
    sdfg.validate()


def test_concat_where_pair_becomes_one_tridiagonal_solve():
    """icon4py's solve_w shape (``thomas_concat``: the elimination under ``concat_where(K > 0, ..., zeros)``,
    the substitution on every level, coefficients computed pointwise) is recognised at the hooks' first
    stage; the bitwise runs of the matrix above check the result on every shape and layout."""
    hooks = sg.optimization_hooks(gpu=False, reproducibility="exact")
    sdfg = translate("thomas_concat", hooks)
    applied = hooks.reports[0].applied
    assert applied.get("ScanPairToTridiagonal") == 1 and applied.get("LiftScans") == 2, applied
    sdfg.validate()


def test_concat_where_pair_with_a_nonzero_fill_is_left_alone():
    """The same shape with ``z_q = 1`` on the top level is not a Thomas pair: both scans stay."""
    from gt4py_programs.programs import thomas_concat_ones

    hooks = sg.optimization_hooks(gpu=False, reproducibility="exact")
    translator = gtx_factory.make_dace_translator(gtx_factory.DaCeConfig(),
                                                  auto_optimize_args={"optimization_hooks": hooks})
    translator.generate_sdfg(thomas_concat_ones.gtir, {}, K).validate()
    applied = hooks.reports[0].applied
    assert applied.get("ScanPairToTridiagonal") == 0 and applied.get("LiftScans") == 2, applied


@pytest.mark.gpu
@pytest.mark.parametrize("program", ["precip_gated", "thomas_concat"])   # a flag-gated scan; solve_w's pair
def test_gpu_hooks_lift_expand_and_the_cuda_compiles(tmp_path, program):
    """The GPU path end to end up to the compiler: gt4py's GPU translator (``DaCeConfig(gpu=True)``) with
    the GPU hooks lifts at ``TopLevelDataFlowPre`` (the data are still in host memory there: the choice is
    made again at ``AfterToGPU``), expands every node in that last hook, and nvcc compiles the result."""
    from conftest import cuda_code, nvcc_compile

    hooks = sg.optimization_hooks(gpu=True, reproducibility="exact")
    translator = gtx_factory.make_dace_translator(gtx_factory.DaCeConfig(gpu=True),
                                                  auto_optimize_args={"optimization_hooks": hooks})
    sdfg = translator.generate_sdfg(PROGRAMS[program].program.gtir, {}, K)
    assert len(hooks.reports) == 1 and hooks.reports[0].scans_lifted >= 1, hooks.reports[0].table()
    assert not [n for n, _ in sdfg.all_nodes_recursive() if isinstance(n, ColumnNode)]
    code = cuda_code(sdfg)
    assert "__global__" in code
    nvcc_compile(code, tmp_path)
