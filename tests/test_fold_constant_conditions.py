"""FoldConstantConditions: branch conditions on a value the program sets with a literal (gt4py's static
arguments) read the literal; the blocked translator then writes only the branch that runs. Bitwise the same
outputs (differential against the program as built, IEEE-strict flags)."""

from __future__ import annotations

import copy
import json

import dace
import gt4py_shaped as gs
import numpy as np
import pytest
from dace.properties import CodeBlock
from dace.sdfg.state import ConditionalBlock, ControlFlowRegion

import sdfg_scan
from sdfg_scan.expansions.scan_blocked_codegen import live_branches, static_condition
from sdfg_scan.nodes.scan import Scan
from sdfg_scan.transformations import FoldConstantConditions
from sdfg_scan.transformations.fold_constant_conditions import constant_of


def _program(values=("False",), computed=False, inner_writes=False, passed_out=False, cond="f") -> dace.SDFG:
    """``flag = <literal>`` (one tasklet per value; ``computed``: ``flag = x > 0``), then a nested SDFG
    ``if <cond>: out = 1 else: out = 2`` reading ``flag`` as ``f``."""
    inner = dace.SDFG("inner")
    inner.using_explicit_control_flow = True
    inner.add_scalar("f", dace.bool_)
    inner.add_array("out", [1], dace.float64)
    cb = ConditionalBlock("branch")
    inner.add_node(cb, is_start_block=True)
    for label, code, c in (("then", "o = 1.0", CodeBlock(cond)), ("else", "o = 2.0", None)):
        region = ControlFlowRegion(label, sdfg=inner)
        st = region.add_state(f"{label}_s", is_start_block=True)
        tk = st.add_tasklet(label, {}, {"o": None}, code)
        st.add_edge(tk, "o", st.add_write("out"), None, dace.Memlet("out[0]"))
        cb.add_branch(c, region)
    if inner_writes:
        after = inner.add_state_after(cb, "after")
        tk = after.add_tasklet("w", {}, {"o": None}, "o = True")
        after.add_edge(tk, "o", after.add_write("f"), None, dace.Memlet("f[0]"))
    outer = dace.SDFG("fold_outer")
    outer.using_explicit_control_flow = True
    outer.add_array("out", [1], dace.float64)
    outer.add_array("x", [1], dace.float64)
    outer.add_scalar("flag", dace.bool_, transient=True)
    first = last = outer.add_state("set", is_start_block=True)
    for j, v in enumerate(values):
        st = first if j == 0 else outer.add_state_after(last, f"set{j}")
        last = st
        if computed:
            tk = st.add_tasklet(f"lit{j}", {"a": None}, {"o": None}, "o = a > 0")
            st.add_edge(st.add_read("x"), None, tk, "a", dace.Memlet("x[0]"))
        else:
            tk = st.add_tasklet(f"lit{j}", {}, {"o": None}, f"o = {v}")
        st.add_edge(tk, "o", st.add_write("flag"), None, dace.Memlet("flag[0]"))
    use = outer.add_state_after(last, "use")
    outs = {"out": None, **({"f": None} if passed_out else {})}
    n = use.add_nested_sdfg(inner, {"f": None}, outs)
    use.add_edge(use.add_read("flag"), None, n, "f", dace.Memlet("flag[0]"))
    use.add_edge(n, "out", use.add_write("out"), None, dace.Memlet("out[0]"))
    if passed_out:
        use.add_edge(n, "f", use.add_write("flag"), None, dace.Memlet("flag[0]"))
    return outer


def _conditions(sdfg: dace.SDFG) -> list[str]:
    return [c.as_string for sd in sdfg.all_sdfgs_recursive() for b in sd.all_control_flow_blocks()
            if isinstance(b, ConditionalBlock) for c, _ in b.branches if c is not None]


@pytest.mark.parametrize("value,cond,want", [("False", "f", "False"), ("True", "f", "True"),
                                             ("True", "not f", "False"), ("1", "f", "True"), ("-1", "f < 0", "True")])
def test_a_literal_flag_is_written_into_the_condition(value, cond, want):
    sdfg = _program((value,), cond=cond)
    assert sdfg.apply_transformations_repeated(FoldConstantConditions) == 1
    assert _conditions(sdfg) == [want]
    sdfg.validate()


def test_a_condition_mixing_a_literal_and_data_keeps_the_data():
    sdfg = _program(("False",), cond="f or (out[0] > 1.0)")
    assert sdfg.apply_transformations_repeated(FoldConstantConditions) == 1
    assert _conditions(sdfg) == ["(False or (out[0] > 1.0))"]


@pytest.mark.parametrize("kw,why", [
    (dict(values=("False", "True")), "two writes of different literals"),
    (dict(computed=True), "a value computed from data"),
    (dict(inner_writes=True), "the nested SDFG writes its copy"),
    (dict(passed_out=True), "the nested SDFG passes it out"),
])
def test_refused_where_the_value_may_change_and_the_sdfg_is_untouched(kw, why):
    sdfg = _program(**kw)
    before = json.dumps(sdfg.to_json(), sort_keys=True)
    assert sdfg.apply_transformations_repeated(FoldConstantConditions) == 0, why
    assert json.dumps(sdfg.to_json(), sort_keys=True) == before, why
    inner = next(sd for sd in sdfg.all_sdfgs_recursive() if sd.name == "inner")
    assert constant_of(inner, "f") is None, why


def test_the_same_literal_written_twice_is_constant():
    sdfg = _program(("True", "True"))
    assert constant_of(sdfg, "flag") is True
    assert sdfg.apply_transformations_repeated(FoldConstantConditions) == 1


def test_live_branches_drop_false_arms_and_end_at_a_true_one():
    cb = ConditionalBlock("c")
    regions = [ControlFlowRegion(f"r{i}") for i in range(4)]
    for c, r in zip(("False", "x > 0", "True", None), regions, strict=True):
        cb.add_branch(None if c is None else CodeBlock(c), r)
    live = live_branches(cb)
    assert [r.label for _, r in live] == ["r1", "r2"]
    assert live[-1][0] is None and live[0][0].as_string == "(x > 0)"
    assert static_condition(CodeBlock("0")) is False and static_condition(CodeBlock("x")) is None


CONST_COLUMN = gs.Column((
    gs.Slot("recurrent", update="if_else", cond="const", form=0),          # kc0 = True
    gs.Slot("recurrent", update="if_copy", cond="const", form=1),          # kc1 = False
    gs.Slot("recurrent", update="if_else", cond="data", form=2),
), cell_contiguous=True)


def test_gt4py_shaped_static_arguments_fold_and_every_blocked_kernel_keeps_the_bits():
    """The column's two constant conditions fold after ``LiftCellMap`` brought their tasklets into the body;
    the blocked kernels (branches kept, if-converted exact, replay's if-converted) give the program's bits
    (replay: this body calls no libm function, so its values are the program's too)."""
    original = gs.program(CONST_COLUMN, "fold_const_col")
    optimized = copy.deepcopy(original)
    optimized.name = "fold_const_col_opt"
    report = sdfg_scan.optimize(optimized, target="cpu", reproducibility="exact")
    assert report.applied.get("FoldConstantConditions", 0) == 2, report.applied
    scans = [n for n, _ in optimized.all_nodes_recursive() if isinstance(n, Scan)]   # ScanFission: one per slot
    assert sorted(c for n in scans for c in _conditions(n.body) if c in ("True", "False")) == ["False", "True"]
    base = gs.compile_exact(original)
    ncells, nlev = 70, 5
    kw = gs.arguments(CONST_COLUMN, original, ncells, nlev, seed=3)
    want = gs._fresh(kw)
    base(**want)
    for impl in ("blocked", "blocked_simd_exact", "blocked_simd"):
        for n in scans:
            n.implementation = impl
        trial = copy.deepcopy(optimized)
        trial.name = f"fold_const_col_{impl}"
        got = gs._fresh(kw)
        gs.compile_exact(trial)(**got)
        for k, v in want.items():
            if isinstance(v, np.ndarray):
                assert np.array_equal(gs._bytes(v), gs._bytes(got[k])), f"{impl}: output '{k}' differs"
