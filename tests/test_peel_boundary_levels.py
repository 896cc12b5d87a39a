"""PeelBoundaryLevels: peels the first level and removes first-level-flag branches, bitwise, symbolic K."""

from __future__ import annotations

import copy
import json

import hand_columns as hc
import icon4py_fixtures as fx
import pytest
from dace.sdfg import nodes
from dace.sdfg.state import ConditionalBlock, LoopRegion

from sdfg_scan.transformations import PeelBoundaryLevels


def _snapshot(sdfg) -> str:
    return json.dumps(sdfg.to_json(), sort_keys=True)


def _branches_in_loops(sdfg) -> int:
    """ConditionalBlocks inside nested SDFGs of k-loop bodies (the steady state)."""
    count = 0
    for loop in [b for b in sdfg.all_control_flow_blocks(recursive=True) if isinstance(b, LoopRegion)]:
        for st in loop.all_states():
            for n in st.nodes():
                if isinstance(n, nodes.NestedSDFG):
                    count += sum(isinstance(b, ConditionalBlock) for b in n.sdfg.all_control_flow_blocks(True))
    return count


@pytest.mark.parametrize("backward", [False, True], ids=["forward", "backward"])
def test_hand_column_bitwise_symbolic_k(backward):
    sdfg = hc.column(f"peel_col_{int(backward)}", backward=backward)
    xf = copy.deepcopy(sdfg)
    xf.name = sdfg.name + "_xf"
    assert _branches_in_loops(xf) == 1
    assert xf.apply_transformations_repeated(PeelBoundaryLevels, validate=False) == 1
    xf.validate()
    assert _branches_in_loops(xf) == 0  # branch-free steady state
    a, b = sdfg.compile(), xf.compile()
    for nlev in (0, 1, 2, 9):  # an empty loop must stay empty
        fx.assert_bitwise_equal(hc.run_column(a, nlev), hc.run_column(b, nlev))


GUARDS = {
    "_loop_facts: stride 2": dict(stride=2),
    "_loop_facts: loop variable used after the loop": dict(var_used_after=True),
    "constant_flags: flag value computed from data": dict(flag_from_data=True),
    "constant_flags: flag set only conditionally": dict(flag_conditional=True),
    "flag_branch_users: flag connector also read as data": dict(cond_as_data=True),
    "flag_branch_users: condition not decided by the flag": dict(cond_expr="__cond and K > 3"),
}


@pytest.mark.parametrize("kw", list(GUARDS.values()), ids=list(GUARDS))
def test_does_not_apply(kw):
    sdfg = hc.column("peel_guard", **kw)
    sdfg.validate()
    before = _snapshot(sdfg)
    assert sdfg.apply_transformations_repeated(PeelBoundaryLevels, validate=False) == 0
    assert _snapshot(sdfg) == before


EXPECTED = {"diagnose_pressure.lowered": 1, "diagnose_pressure.opt": 1}


@pytest.mark.fixtures
@pytest.mark.parametrize("form", [f for f in fx.FORMS if f not in fx.NO_COMPILE])  # lowered graupel: see
def test_fixture_applies_and_validates(form):  # test_dead_carry_elimination.test_lowered_graupel_all
    sdfg = fx.load(form)
    before = _branches_in_loops(sdfg)
    count = sdfg.apply_transformations_repeated(PeelBoundaryLevels, validate=False)
    sdfg.validate()
    print(f"{form}: PeelBoundaryLevels peeled {count} loops, loop-body branches {before} -> {_branches_in_loops(sdfg)}")
    assert count == EXPECTED.get(form, 0)


@pytest.mark.fixtures
@pytest.mark.parametrize("form", ["diagnose_pressure.lowered", "diagnose_pressure.opt"])
def test_fixture_bitwise(form):
    sdfg = fx.load(form)
    kw = fx.inputs(form, sdfg)
    xf = copy.deepcopy(sdfg)
    assert xf.apply_transformations_repeated(PeelBoundaryLevels, validate=False) == 1
    fx.assert_bitwise_equal(fx.run(form, sdfg, kw), fx.run(form + "+peel", xf, kw))
