"""ScanPairToTridiagonal: Thomas' two scans (icon4py's dycore pair, hand-built pairs) -> one TridiagonalSolve.

Differential: the program before and after, compiled with the same flags (DaCe's defaults plus
ExactArithmetic's, ``icon4py_fixtures.compile_once``), bitwise where the transformation claims it,
within 1e-12 relative for the ``exact=False`` forms. Refusals leave the SDFG unchanged (JSON compare).
"""

from __future__ import annotations

import copy
import json

import dace
import icon4py_fixtures as fx
import numpy as np
import pytest
import tridiagonal_pairs as tp

from sdfg_scan.nodes.scan import Scan
from sdfg_scan.nodes.tridiagonal_solve import TridiagonalSolve
from sdfg_scan.transformations import LiftScans, ScanPairToTridiagonal


def lifted(sdfg):
    assert sdfg.apply_transformations_repeated(LiftScans) == 2
    return sdfg


def snapshot(sdfg) -> str:
    return json.dumps(sdfg.to_json(), sort_keys=True, default=str)


def assert_refused(sdfg, exact: bool = True) -> None:
    before = snapshot(sdfg)
    assert sdfg.apply_transformations_repeated(ScanPairToTridiagonal, options={"exact": exact}) == 0
    assert snapshot(sdfg) == before


def converted(sdfg, exact: bool = True):
    assert sdfg.apply_transformations_repeated(ScanPairToTridiagonal, options={"exact": exact}) == 1
    sdfg.validate()
    assert not any(isinstance(n, Scan) for n, _ in sdfg.all_nodes_recursive())
    (node,) = [n for n, _ in sdfg.all_nodes_recursive() if isinstance(n, TridiagonalSolve)]
    return node


def assert_close(ref: dict, got: dict, bitwise: bool) -> None:
    if bitwise:
        fx.assert_bitwise_equal(ref, got)
        return
    for k in ref:
        np.testing.assert_allclose(got[k], ref[k], rtol=1e-12, atol=0, err_msg=k)


# ------------------------------------------------------------------------------------------------
# icon4py's dycore pair: the two fixtures composed into one program
# ------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def dycore():
    fx.require()
    sdfg = lifted(tp.composed_dycore())
    node = converted(sdfg)
    assert node.axis == 1 and set(node.in_connectors) == {"a", "b", "c", "d"}
    assert "z_q" not in sdfg.arrays  # the intermediate c' is gone
    return sdfg


@pytest.mark.parametrize("ncells,nlev", [(23, 65), (7, 2), (5, 3), (600, 65)])
def test_dycore_bitwise(dycore, ncells, nlev):
    orig = tp.composed_dycore()
    kw = fx.inputs(tp.FWD, orig, ncells=ncells, nlev=nlev)
    ref = fx.run("dycore-pair-original", orig, kw)
    got = fx.run("dycore-pair-tridiagonal", dycore, kw)
    fx.assert_bitwise_equal(ref, got)
    assert np.isfinite(ref["w"]).all()


def test_dycore_expansion_takes_in_the_coefficient_map(dycore):
    """gt4py's map computing a, b, c, d (from six fields at k-1..k+1) runs inside the CPU blocks: its four
    [cells, levels] transients are gone once expanded (the bitwise runs above use this expansion)."""
    sdfg = copy.deepcopy(dycore)
    node, state = next((n, s) for n, s in sdfg.all_nodes_recursive() if isinstance(n, TridiagonalSolve))
    coefficients = {e.data.data for e in state.in_edges(node)}
    maps_before = sum(isinstance(n, dace.nodes.MapEntry) for n in state.nodes())
    sdfg.expand_library_nodes()
    assert not coefficients & set(sdfg.arrays), coefficients & set(sdfg.arrays)
    assert sum(isinstance(n, dace.nodes.MapEntry) for n in state.nodes()) == maps_before - 1  # the blocks are nested
    sdfg.validate()


def test_dycore_refuses_observable_z_q():
    fx.require()
    assert_refused(lifted(tp.composed_dycore(z_q_argument=True)))


def test_dycore_refuses_single_scans():
    fx.require()
    for form in (tp.FWD, tp.BACK):
        sdfg = fx.load(form)
        assert sdfg.apply_transformations_repeated(LiftScans) == 1
        assert_refused(sdfg, exact=False)


# ------------------------------------------------------------------------------------------------
# hand-built pairs: both layouts, both elimination directions, exact and algebraic forms
# ------------------------------------------------------------------------------------------------
CASES = {  # id: (pair options, exact option, bitwise)
    "icon-cell": (dict(layout="cell", elimination="icon"), True, True),
    "icon-k": (dict(layout="k", elimination="icon"), True, True),
    "textbook-k": (dict(layout="k", elimination="textbook"), True, True),
    "divide-cell": (dict(layout="cell", elimination="divide"), False, False),
    "backward-cell": (dict(layout="cell", elimination="icon", backward=True), False, False),
    "backward-k": (dict(layout="k", elimination="textbook", backward=True), False, False),
}


@pytest.mark.parametrize("case", list(CASES))
def test_hand_pair(case):
    opts, exact, bitwise = CASES[case]
    sdfg = lifted(tp.pair(**opts))
    node = converted(sdfg, exact=exact)
    assert node.axis == 1
    for ncells, nlev in [(9, 1), (9, 2), (37, 40)]:
        kw = tp.pair_inputs(ncells, nlev, opts["layout"], seed=nlev)
        ref = fx.run(f"pair-{case}-original", tp.pair(**opts), kw)
        got = fx.run(f"pair-{case}-tridiagonal", sdfg, kw)
        assert_close(ref, got, bitwise)


@pytest.mark.parametrize("opts", [dict(elimination="divide"), dict(backward=True)], ids=["divide", "backward"])
def test_exact_refuses_other_arithmetic(opts):
    assert_refused(lifted(tp.pair(**opts)), exact=True)


@pytest.mark.parametrize("opts", [
    dict(elimination="other"),  # a different recurrence: d' = (d + a d'[k-1]) / ...
    dict(back_reads="c"),       # the back substitution reads another c'
    dict(back_sign=1),          # ... reads z_q = -c' as if it were c'
    dict(cp_argument=True),     # the intermediate c' is a program output
], ids=["other-recurrence", "other-cp", "sign-mismatch", "cp-observable"])
@pytest.mark.parametrize("exact", [True, False])
def test_refuses(opts, exact):
    assert_refused(lifted(tp.pair(**opts)), exact=exact)


def test_refuses_extra_reader_of_intermediate():
    sdfg = lifted(tp.pair())
    state = sdfg.start_state
    cp = next(n for n in state.data_nodes() if n.data == "cp")
    state.add_edge(cp, None, state.add_write("d"), None, state.sdfg.make_array_memlet("cp"))
    assert_refused(sdfg)


# ------------------------------------------------------------------------------------------------
# the factored form: TridiagonalFactor + a pre-factored TridiagonalSolve
# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("factor_in_program", [True, False], ids=["factor-scan", "factor-given"])
@pytest.mark.parametrize("layout", ["cell", "k"])
def test_factored_form_becomes_factor_and_prefactored_solve(layout, factor_in_program):
    """A factorisation scan (``w = 1/(b - a c'[k-1]); c' = c w``) becomes ``TridiagonalFactor``; the
    forward substitution that reads its ``w`` and the back substitution that reads its ``c'`` become one
    ``TridiagonalSolve(prefactored=True)``; bitwise the three scans (or two, with ``w, c'`` given)."""
    from sdfg_scan.nodes.tridiagonal_solve import TridiagonalFactor
    from sdfg_scan.transformations import ScanToTridiagonalFactor

    sdfg = tp.factored(layout, "exact", factor_in_program)
    assert sdfg.apply_transformations_repeated(LiftScans) == 2 + factor_in_program
    assert sdfg.apply_transformations_repeated(ScanPairToTridiagonal) == 1
    assert sdfg.apply_transformations_repeated(ScanToTridiagonalFactor) == int(factor_in_program)
    sdfg.validate()
    assert not any(isinstance(n, Scan) for n, _ in sdfg.all_nodes_recursive())
    (solve,) = [n for n, _ in sdfg.all_nodes_recursive() if isinstance(n, TridiagonalSolve)]
    assert solve.prefactored and solve.axis == 1
    assert len([n for n, _ in sdfg.all_nodes_recursive() if isinstance(n, TridiagonalFactor)]) == factor_in_program
    for ncells, nlev in [(9, 1), (9, 2), (37, 40)]:
        kw = tp.factored_inputs(ncells, nlev, layout, seed=nlev)
        if factor_in_program:
            kw = {k: v for k, v in kw.items() if k not in ("w", "cp")}
        name = f"factored-{layout}-{factor_in_program}"
        ref = fx.run(f"{name}-original", tp.factored(layout, "exact", factor_in_program), kw)
        fx.assert_bitwise_equal(ref, fx.run(f"{name}-prefactored", sdfg, kw))


def test_factored_form_other_arithmetic_only_without_exact():
    """``d' = (d - a d'[k-1]) / (1 / w)``: the pre-factored algebra with other rounding; refused under
    ``exact``, converted otherwise and within 1e-12; the pair is also refused when the back substitution
    reads ``-c'`` (the pre-factored solve takes ``c'``)."""
    sdfg = lifted_n(tp.factored("cell", "divide", False), 2)
    assert_refused(sdfg, exact=True)
    assert sdfg.apply_transformations_repeated(ScanPairToTridiagonal, options={"exact": False}) == 1
    kw = tp.factored_inputs(13, 30, "cell", seed=3)
    ref = fx.run("factored-divide-original", tp.factored("cell", "divide", False), kw)
    assert_close(ref, fx.run("factored-divide-prefactored", sdfg, kw), bitwise=False)
    neg = tp.factored("cell", "exact", False)
    (back,) = [n for n, _ in neg.all_nodes_recursive() if isinstance(n, dace.nodes.NestedSDFG)
               and n.sdfg.name == "substitution"]
    (t,) = [n for n, _ in back.sdfg.all_nodes_recursive() if isinstance(n, dace.nodes.Tasklet)]
    t.code = dace.properties.CodeBlock(tp.SUBSTITUTIONS[-1])   # x = d' + x * p: p holds -c'
    assert_refused(lifted_n(neg, 2), exact=False)


def lifted_n(sdfg, n: int):
    assert sdfg.apply_transformations_repeated(LiftScans) == n
    return sdfg


def test_optimize_recognises_the_factored_form():
    import sdfg_scan

    sdfg = tp.factored("k", "exact", True)
    report = sdfg_scan.optimize(sdfg, target="cpu", reproducibility="exact")
    assert report.applied["ScanPairToTridiagonal"] == 1 and report.applied["ScanToTridiagonalFactor"] == 1
    assert report.scans_specialised == 3 and not [n for n, _ in sdfg.all_nodes_recursive() if isinstance(n, Scan)]
    kw = {k: v for k, v in tp.factored_inputs(5, 17, "k", seed=1).items() if k not in ("w", "cp")}
    fx.assert_bitwise_equal(fx.run("factored-k-True-original", tp.factored("k", "exact", True), kw),
                            fx.run("factored-optimized", sdfg, kw))


def test_levels_agree_decides_min_max_ranges_on_a_grid():
    """What the concat_where form's cover check relies on: gt4py's level bounds are Min/Max expressions."""
    import sympy

    from sdfg_scan.transformations.scan_pair_to_tridiagonal_concat import levels_agree

    k0, k1, last = sympy.symbols("K0 K1 L", integer=True)
    end = sympy.Min(k1, last)
    skipped = (k0, sympy.Max(k0, sympy.Min(sympy.Max(1, k0), end)))   # levels before the elimination's first
    assert levels_agree(skipped, (k0, sympy.Min(1, k1, last)))         # what gt4py's zero fill writes
    assert not levels_agree(skipped, (k0, sympy.Min(2, k1, last)))
    assert levels_agree((3, 1), (5, 0))                                 # two empty ranges
