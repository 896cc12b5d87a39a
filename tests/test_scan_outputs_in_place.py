"""ScanOutputsInPlace: in-place scan outputs under a declared aliasing, bitwise; refuses unchanged otherwise."""

from __future__ import annotations

import copy
import json

import icon4py_fixtures as fx
import pytest
from dace import Memlet, dtypes
from dace.sdfg import nodes
from dace.sdfg.state import LoopRegion

from sdfg_scan.transformations import RemoveScanSelfCopies
from sdfg_scan.transformations.scan_outputs_in_place import ScanOutputsInPlace

# the aliasing icon4py's driver (and run_sdfg_fixture.py) sets up for graupel
DRIVER = {"q_out_2": "q_in_2", "q_out_3": "q_in_3", "q_out_4": "q_in_4", "q_out_5": "q_in_5", "t_out": "te"}
FORM = "graupel_run.opt_nohooks"


def _snapshot(sdfg) -> str:
    return json.dumps(sdfg.to_json(), sort_keys=True, default=str)


def _apply(sdfg, inplace):
    return sdfg.apply_transformations_repeated(ScanOutputsInPlace, options={"inplace": inplace}, validate=False)


def _accessed(sdfg, name) -> bool:
    return any(n.data == name for st in sdfg.states() for n in st.data_nodes())


def _nested(sdfg):
    return [n for n, _ in sdfg.all_nodes_recursive() if isinstance(n, nodes.NestedSDFG)]


def _identity_copies(nsdfg) -> set:
    """Access-node copies input connector -> output connector (single element) inside ``nsdfg``."""
    out = set()
    for st in nsdfg.sdfg.all_states():
        for e in st.edges():
            if (isinstance(e.src, nodes.AccessNode) and isinstance(e.dst, nodes.AccessNode)
                    and e.src.data in nsdfg.in_connectors and e.dst.data in nsdfg.out_connectors
                    and nsdfg.sdfg.arrays[e.src.data].total_size == 1):
                out.add((e.src.data, e.dst.data))
    return out


def self_copies(sdfg) -> int:
    """Structural count of self-copies: every identity copy inside a nested SDFG (``where``/``if`` else
    branches), plus every scan output that is stored from a nested-SDFG output having such a copy (the
    pass-through chain ``input -> N -> y[k] -> out`` that an in-place aliasing makes redundant)."""
    count = 0
    for n in _nested(sdfg):
        copies = _identity_copies(n)
        count += len(copies)
        if not any(isinstance(r, LoopRegion) for r in n.sdfg.all_control_flow_regions()):
            continue
        for st in n.sdfg.all_states():
            for yw in st.data_nodes():
                if yw.data not in n.out_connectors or st.in_degree(yw) != 1:
                    continue
                src = st.in_edges(yw)[0].src
                if isinstance(src, nodes.AccessNode) and st.in_degree(src) == 1:
                    src_edge = st.in_edges(src)[0]
                else:
                    src_edge = st.in_edges(yw)[0]
                if isinstance(src_edge.src, nodes.NestedSDFG):
                    cp = _identity_copies(src_edge.src)
                    count += any(o == src_edge.src_conn for _, o in cp)
    return count


def _in_place(sdfg):
    a = _apply(sdfg, DRIVER)
    b = sdfg.apply_transformations_repeated(RemoveScanSelfCopies, validate=False)
    return a, b


# ------------------------------------------------------------------------------------------------
# graupel (static domain): at least every copy icon4py's hooks remove, bitwise equal
# ------------------------------------------------------------------------------------------------
@pytest.mark.fixtures
def test_graupel_removes_at_least_the_hooks_copies():
    original = fx.load(FORM)
    xf = copy.deepcopy(original)
    assert _in_place(xf) == (5, 4)  # q species and t in place; vc/eflx carries merged
    xf.validate()
    before, ours, hook = self_copies(original), self_copies(xf), self_copies(fx.load("graupel_run.opt_hooks"))
    print(f"self-copies: original {before}, after ours {ours} (removed {before - ours}), "
          f"after icon4py's hooks {hook} (removed {before - hook})")
    assert before - ours >= before - hook
    for out in DRIVER:
        assert not _accessed(xf, out)  # results are written in place into q_in_k / te
    for t in ("gtir_tmp_1670", "gtir_tmp_2271", "gtir_tmp_2273", "gtir_tmp_2275", "gtir_tmp_2277"):
        assert t not in xf.arrays  # the Cell x K where-temporaries are gone
    where = [n for n in _nested(xf) if n.label == "if_stmt_86"][0]
    assert len(_identity_copies(where)) == 2  # only q_in_0/q_in_1 (not aliased) still pass through


@pytest.mark.fixtures
@pytest.mark.long
def test_graupel_static_bitwise():
    """``make test-long``: CI compiles graupel after the whole chain with the driver's aliasing, this
    transformation included (five outputs in place), in test_pipeline.py."""
    sdfg = fx.load(FORM)
    xf = copy.deepcopy(sdfg)
    assert _in_place(xf) == (5, 4)
    kw = fx.inputs(FORM, sdfg)  # q_out_k aliases q_in_k, t_out aliases te
    result = fx.run(FORM + "+inplace+rsc", xf, kw)
    fx.assert_bitwise_equal(fx.run(FORM, sdfg, kw), result)
    assert not any(v.dtype.kind == "f" and (v != v).any() for v in result.values())


@pytest.mark.fixtures
def test_graupel_dyn_refuses_unchanged():
    """The symbolic-domain variant writes the scan outputs into fresh temporaries that are copied into
    q_out/t_out with a level offset (where icon4py's hooks produce NaNs): _out_written_by_scan refuses."""
    sdfg = fx.load("graupel_run_dyn.opt_nohooks")
    before = _snapshot(sdfg)
    assert _apply(sdfg, DRIVER) == 0
    assert _snapshot(sdfg) == before


# ------------------------------------------------------------------------------------------------
# one "does not apply" test per guard
# ------------------------------------------------------------------------------------------------
def _kp1_tasklet(sdfg):
    return [n for n, _ in sdfg.all_nodes_recursive()
            if isinstance(n, nodes.Tasklet) and n.label == "concat_where_tasklet_t_kp1"][0]


def _read_level_below(sdfg):  # t(K-1): already overwritten in place when step k reads it
    t = _kp1_tasklet(sdfg)
    t.code.as_string = t.code.as_string.replace("(1 + (((- __t_kp1_K_range_0)", "(-1 + (((- __t_kp1_K_range_0)")


def _read_other_cell(sdfg):
    t = _kp1_tasklet(sdfg)
    t.code.as_string = t.code.as_string.replace("(0 + (((- __t_kp1_Cell_range_0)", "(1 + (((- __t_kp1_Cell_range_0)", 1)


def _cpp_tasklet(sdfg):  # code that is not parsed: unknown reads
    t = _kp1_tasklet(sdfg)
    t.code.as_string, t.code.language = "__out = __in0[0] + __in1[0];", dtypes.Language.CPP


def _whole_array_use(sdfg):
    t = _kp1_tasklet(sdfg)
    t.code.as_string = t.code.as_string.replace("__out = (", "__out = 0 * len(__in0) + (")


def _where_reads_after_write(sdfg):  # W reads te[c, k] in a state after its branches
    w = [n for n in _nested(sdfg) if n.label == "if_stmt_86"][0]
    inner = w.sdfg
    last = [b for b in inner.nodes() if inner.out_degree(b) == 0][0]
    st = inner.add_state_after(last, "late_read")
    inner.add_scalar("late_tmp", inner.arrays["__arg2_"].dtype, transient=True, find_new_name=False)
    st.add_edge(st.add_access("__arg2_"), None, st.add_access("late_tmp"), None, Memlet("__arg2_[0]"))


def _t_output_used_twice(sdfg):  # N's t output also feeds another node: it cannot become a dynamic write
    for n, st in sdfg.all_nodes_recursive():
        if isinstance(n, nodes.NestedSDFG) and n.label == "if_stmt_88":
            st.sdfg.add_scalar("t_copy", n.sdfg.arrays["__output_4_0"].dtype, transient=True)
            st.add_edge(n, "__output_4_0", st.add_access("t_copy"), None, Memlet("t_copy[0]"))
            return


GUARDS = {
    "no option: does nothing": ({}, None),
    "_producer: the where copies q_in_5, not the declared q_in_4": ({"q_out_5": "q_in_4"}, None),
    "_declared: unknown container": ({"q_out_5": "nope"}, None),
    "_declared: input is the output": ({"q_out_5": "q_out_5"}, None),
    "_level_read: the scan reads te at level k-1": ({"t_out": "te"}, _read_level_below),
    "_level_read: the scan reads te of another cell": ({"t_out": "te"}, _read_other_cell),
    "_read_points: C++ tasklet code is not analysed": ({"t_out": "te"}, _cpp_tasklet),
    "_read_points: the whole-array connector is used outside a subscript": ({"t_out": "te"}, _whole_array_use),
    "_body_write: N's output that writes t_out[k] has another use": ({"t_out": "te"}, _t_output_used_twice),
    "_where_order: W reads te after storing its output": ({"t_out": "te"}, _where_reads_after_write),
}


_PRISTINE: list = []


@pytest.mark.fixtures
@pytest.mark.parametrize("inplace,edit", list(GUARDS.values()), ids=list(GUARDS))
def test_does_not_apply(inplace, edit):
    if not _PRISTINE:
        _PRISTINE.append(fx.load(FORM))
    sdfg = copy.deepcopy(_PRISTINE[0])   # a deep copy costs a third of loading graupel
    if edit is not None:
        edit(sdfg)
    before = _snapshot(sdfg)
    assert _apply(sdfg, inplace) == 0
    assert _snapshot(sdfg) == before


def test_other_fixtures_untouched():
    fx.require()
    sdfg = fx.load("diagnose_pressure.opt")
    before = _snapshot(sdfg)
    outs = [a for a, d in sdfg.arrays.items() if not d.transient]
    assert _apply(sdfg, {outs[0]: outs[1]}) == 0
    assert _snapshot(sdfg) == before
