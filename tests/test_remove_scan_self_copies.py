"""RemoveScanSelfCopies: removes identity copies in scan bodies, bitwise; refuses each broken precondition."""

from __future__ import annotations

import copy
import json

import hand_columns as hc
import icon4py_fixtures as fx
import pytest
from dace.sdfg import nodes

from sdfg_scan.transformations import RemoveScanSelfCopies


def _snapshot(sdfg) -> str:
    return json.dumps(sdfg.to_json(), sort_keys=True)


def _copies_in(sdfg, label: str) -> set[tuple[str, str]]:
    """``(src, dst)`` of every access-node copy inside the nested SDFGs labelled ``label``."""
    out = set()
    for n, _ in sdfg.all_nodes_recursive():
        if isinstance(n, nodes.NestedSDFG) and n.label == label:
            for st in n.sdfg.all_states():
                for e in st.edges():
                    if isinstance(e.src, nodes.AccessNode) and isinstance(e.dst, nodes.AccessNode):
                        out.add((e.src.data, e.dst.data))
    return out


# ------------------------------------------------------------------------------------------------
# hand-built column: applies and is bitwise equal (symbolic K, including an empty column)
# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("backward", [False, True], ids=["forward", "backward"])
def test_hand_column_bitwise(backward):
    sdfg = hc.column(f"rsc_col_{int(backward)}", backward=backward)
    xf = copy.deepcopy(sdfg)
    xf.name = sdfg.name + "_xf"
    assert xf.apply_transformations_repeated(RemoveScanSelfCopies, validate=False) == 1
    xf.validate()
    assert ("i", "o") not in _copies_in(xf, "if_stmt")
    assert "t" not in xf.arrays  # the temporary was merged into the carry
    a, b = sdfg.compile(), xf.compile()
    for nlev in (0, 1, 7):
        fx.assert_bitwise_equal(hc.run_column(a, nlev), hc.run_column(b, nlev))


# ------------------------------------------------------------------------------------------------
# one "does not apply" test per guard
# ------------------------------------------------------------------------------------------------
GUARDS = {
    "_enclosing_loop: not inside a LoopRegion": dict(in_loop=False),
    "_identity_copies: no identity copy in the nested SDFG": dict(else_identity=False),
    "_identity_copies: another write of o not exclusive with the copy": dict(extra_write=True),
    "_outer_scalars: o writes an array element, not a scalar temporary": dict(o_to_array=True),
    "_t_only_written_here: t is written elsewhere too": dict(t_written_twice=True),
    "_s_ordered_before: s is read after the nested SDFG": dict(s_read_after_n=True),
    "_s_elsewhere: s is read in another state of the loop": dict(s_read_in_update=True),
    "used_in_control_flow: t is read by an interstate edge": dict(cf_uses="t"),
}


@pytest.mark.parametrize("kw", list(GUARDS.values()), ids=list(GUARDS))
def test_does_not_apply(kw):
    sdfg = hc.column("rsc_guard", **kw)
    sdfg.validate()
    before = _snapshot(sdfg)
    assert sdfg.apply_transformations_repeated(RemoveScanSelfCopies, validate=False) == 0
    assert _snapshot(sdfg) == before


# ------------------------------------------------------------------------------------------------
# the real icon4py SDFGs
# ------------------------------------------------------------------------------------------------
# copies icon4py's graupel_dace_hooks.remove_self_copy_inside_scan removes inside the scan body that are
# scalar-to-scalar (the vc slots); the array pass-throughs (q species, t) need in-place buffers, see report
HOOK_VC_COPIES = {("gtir_var_94", "__output_1_2"), ("gtir_var_95", "__output_3_2")}
EXPECTED = {"graupel_run.opt_nohooks": 4, "graupel_run_dyn.opt_nohooks": 4}


@pytest.mark.fixtures
@pytest.mark.parametrize("form", [f for f in fx.FORMS if f not in fx.NO_COMPILE])  # lowered graupel: see
def test_fixture_applies_and_validates(form):  # test_dead_carry_elimination.test_lowered_graupel_all
    sdfg = fx.load(form)
    before_copies = _copies_in(sdfg, "if_stmt_88")
    count = sdfg.apply_transformations_repeated(RemoveScanSelfCopies, validate=False)
    sdfg.validate()
    print(f"{form}: RemoveScanSelfCopies removed {count} copies")
    if form in EXPECTED:
        assert count == EXPECTED[form]
        after = _copies_in(sdfg, "if_stmt_88")
        assert HOOK_VC_COPIES <= before_copies and not (HOOK_VC_COPIES & after)
        assert ("previous_level_4_1", "__output_4_1") not in after  # the eflx carry pass-through
    elif not form.startswith("graupel_run"):
        assert count == 0  # no identity copies in the other programs' scans


@pytest.mark.fixtures
@pytest.mark.long
@pytest.mark.parametrize("form", ["graupel_run.opt_nohooks"])
def test_fixture_bitwise(form):
    """Original vs transformed, same seeded inputs (``make test-long``: CI compiles graupel after the whole
    chain, this transformation included, in test_pipeline.py). graupel_run_dyn (where icon4py's hooks make
    NaNs) is compiled once, fully canonicalised, in test_dead_carry_elimination.py."""
    sdfg = fx.load(form)
    kw = fx.inputs(form, sdfg)
    original = fx.run(form, sdfg, kw)
    xf = copy.deepcopy(sdfg)
    assert xf.apply_transformations_repeated(RemoveScanSelfCopies, validate=False) == EXPECTED[form]
    result = fx.run(form + "+rsc", xf, kw)
    fx.assert_bitwise_equal(original, result)
    assert not any(v.dtype.kind == "f" and (v != v).any() for v in result.values())
