"""ScanToCumulative: gt4py's lifted cumulative sum -> one CumulativeScan, bitwise; refusals leave the SDFG as it is."""

from __future__ import annotations

import json

import dace
import icon4py_fixtures as fx
import numpy as np
import pytest

from sdfg_scan.choice import choose
from sdfg_scan.nodes.cumulative_scan import CumulativeScan
from sdfg_scan.nodes.scan import Scan
from sdfg_scan.transformations import LiftScans, ScanToCumulative

FORMS = ["minimal_cumsum_k.lowered", "minimal_cumsum_k.opt"]
NCELLS = 1000


def lifted(form: str):
    sdfg = fx.load(form)
    assert sdfg.apply_transformations_repeated(LiftScans) == 1
    return sdfg


def only(sdfg, cls):
    found = [(n, st) for n, st in sdfg.all_nodes_recursive() if isinstance(n, cls)]
    assert len(found) == 1, found
    return found[0]


def snapshot(sdfg) -> str:
    return json.dumps(sdfg.to_json(), sort_keys=True, default=str)


def assert_refused(sdfg) -> None:
    before = snapshot(sdfg)
    assert sdfg.apply_transformations_repeated(ScanToCumulative) == 0
    assert snapshot(sdfg) == before


@pytest.fixture(scope="module", params=FORMS)
def converted(request):
    form = request.param
    sdfg = lifted(form)
    assert sdfg.apply_transformations_repeated(ScanToCumulative) == 1
    sdfg.validate()
    return form, sdfg


def test_structure(converted):
    form, sdfg = converted
    node, state = only(sdfg, CumulativeScan)
    assert not any(isinstance(n, Scan) for n, _ in sdfg.all_nodes_recursive())
    assert node.op == "sum" and node.start_from_identity and not node.reverse and node.axis == 1
    if form.endswith(".opt"):  # cell-contiguous fields: the vectorised expansion
        assert choose(node, state).implementation == "blocked"


def test_bitwise(converted):
    form, sdfg = converted
    kw = fx.inputs(form, fx.load(form), ncells=NCELLS)
    x = kw["x"]
    x[::7, :] = -0.0  # 0.0 + -0.0 is +0.0 in gt4py's scan: start_from_identity must reproduce it
    x[3::11, :4] = -0.0
    ref = fx.run(f"{form}-original", fx.load(form), kw)
    got = fx.run(f"{form}-cumulative", sdfg, kw)
    fx.assert_bitwise_equal(ref, got)
    for k, v in ref.items():  # signed zeros too
        if v.dtype == np.float64:
            assert np.array_equal(v.view(np.uint64), got[k].view(np.uint64)), k
    assert np.any(np.signbit(x)) and np.any(ref["out"] == 0)


# ------------------------------------------------------------------------------------------------
# refusals: real programs that are not cumulative sums, and one mutation per guard
# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("form", ["diagnose_pressure.opt", "diagnose_pressure.lowered",
                                  pytest.param("graupel_run.lowered", marks=pytest.mark.long)])   # 25 s
def test_refuses_other_programs(form):
    sdfg = fx.load(form)
    assert sdfg.apply_transformations_repeated(LiftScans) >= 1
    assert_refused(sdfg)


def _opt():
    sdfg = lifted("minimal_cumsum_k.opt")
    scan, state = only(sdfg, Scan)
    return sdfg, state, scan


def _body_tasklet(scan):
    (t,) = [n for n, _ in scan.body.all_nodes_recursive() if isinstance(n, dace.nodes.Tasklet)]
    return t


def _init_tasklet(state):
    (t,) = [n for n in state.nodes() if isinstance(n, dace.nodes.Tasklet)]
    return t


def test_refuses_multi_column_scan():
    sdfg, _, scan = _opt()
    scan.columns = "map"
    assert_refused(sdfg)


@pytest.mark.parametrize("code", ["__tlet_out = -0.0", "__tlet_out = 1.0"])
def test_refuses_init_not_plus_zero(code):
    sdfg, state, _ = _opt()
    t = _init_tasklet(state)
    t.code.as_string = code
    assert_refused(sdfg)


@pytest.mark.parametrize("code", ["__tlet_result = (__tlet_arg1 + __tlet_arg0)",
                                  "__tlet_result = (__tlet_arg0 * __tlet_arg1)",
                                  "__tlet_result = (__tlet_arg0 - __tlet_arg1)"])
def test_refuses_other_update(code):
    sdfg, _, scan = _opt()
    _body_tasklet(scan).code.as_string = code
    assert_refused(sdfg)


def test_refuses_more_in_map():
    sdfg, state, scan = _opt()
    entry = state.entry_node(scan)
    extra = state.add_tasklet("extra", {}, {}, "pass")
    state.add_edge(entry, None, extra, None, dace.Memlet())
    state.add_edge(extra, None, state.exit_node(entry), None, dace.Memlet())
    assert_refused(sdfg)


def test_refuses_mismatched_strides():
    sdfg, _, scan = _opt()
    desc = scan.body.arrays["x_"]
    desc.strides = (desc.strides[1], desc.strides[0])
    assert_refused(sdfg)


def test_refuses_nonzero_inner_offset():
    sdfg, _, scan = _opt()
    scan.body.arrays["x_"].offset = (1, 0)
    assert_refused(sdfg)


def test_refuses_exit_state():
    sdfg, _, scan = _opt()
    body = scan.body
    last = [b for b in body.nodes() if body.out_degree(b) == 0][0]
    tail = body.add_state_after(last, "tail")
    tail.add_nedge(tail.add_read("state"), tail.add_write("__gtir_scan_input_state"),
                   dace.Memlet("state[0]"))
    assert_refused(sdfg)


def test_refuses_init_used_elsewhere():
    sdfg, state, _ = _opt()
    data = [n for n in state.data_nodes() if sdfg.arrays[n.data].transient][0].data
    other = sdfg.add_state_after(state, "other")
    sdfg.add_scalar("sink", dace.float64, transient=True)
    other.add_nedge(other.add_read(data), other.add_write("sink"), dace.Memlet(f"{data}[0]"))
    assert_refused(sdfg)


def test_refuses_aliased_operands():
    sdfg, state, scan = _opt()
    out_node = [n for n in state.data_nodes() if n.data == "out"][0]
    out_node.data = "x"  # the scan writes into its own input: not a plain cumulative sum any more
    for e in state.in_edges(out_node):
        for pe in state.memlet_tree(e):
            if pe.data.data == "out":
                pe.data.data = "x"
    assert_refused(sdfg)


# ------------------------------------------------------------------------------------------------
# a hand-built gt4py-shaped program (init 0.0 from a constant tasklet in the map), both directions
# ------------------------------------------------------------------------------------------------
def api_program(backward: bool, init: str = "0.0") -> dace.SDFG:
    from test_lift_scans import K, N, column_sdfg

    sdfg = dace.SDFG(f"stc_api_{'bwd' if backward else 'fwd'}")
    sdfg.using_explicit_control_flow = True
    sdfg.add_array("X", [N, K], dace.float64)
    sdfg.add_array("OUT", [N, K], dace.float64)
    sdfg.add_scalar("zero", dace.float64, transient=True)
    st = sdfg.add_state("main", is_start_block=True)
    me, mx = st.add_map("cols", {"i": "0:N"})
    ns = st.add_nested_sdfg(column_sdfg(backward=backward), {"x": None, "init": None}, {"out": None},
                            symbol_mapping={"K": K})
    t = st.add_tasklet("zero", {}, {"o": None}, f"o = {init}")
    z = st.add_access("zero")
    st.add_edge(me, None, t, None, dace.Memlet())
    st.add_edge(t, "o", z, None, dace.Memlet("zero[0]"))
    st.add_edge(z, None, ns, "init", dace.Memlet("zero[0]"))
    st.add_memlet_path(st.add_read("X"), me, ns, dst_conn="x", memlet=dace.Memlet("X[i, 0:K]"))
    st.add_memlet_path(ns, mx, st.add_write("OUT"), src_conn="out", memlet=dace.Memlet("OUT[i, 0:K]"))
    return sdfg


@pytest.mark.parametrize("backward", [False, True])
def test_api_program_bitwise(backward):
    original = api_program(backward)
    original.name += "_original"
    sdfg = api_program(backward)
    assert sdfg.apply_transformations_repeated(LiftScans) == 1
    assert sdfg.apply_transformations_repeated(ScanToCumulative) == 1
    sdfg.validate()
    node, state = only(sdfg, CumulativeScan)
    assert node.reverse == backward and node.axis == 1 and node.start_from_identity
    assert choose(node, state).implementation == "sequential"  # K-contiguous: one column per iteration
    rng = np.random.default_rng(7)
    x = rng.standard_normal((37, 19))
    x[::5] = -0.0
    ref, got = np.zeros_like(x), np.zeros_like(x)
    original(X=x, OUT=ref, N=37, K=19)
    sdfg(X=x, OUT=got, N=37, K=19)
    assert np.array_equal(ref.view(np.uint64), got.view(np.uint64))
    expect = np.cumsum(x[:, ::-1], axis=1)[:, ::-1] if backward else np.cumsum(x, axis=1)
    assert np.allclose(got, expect)


def test_refuses_api_program_with_nonzero_init():
    sdfg = api_program(False, init="2.0")
    assert sdfg.apply_transformations_repeated(LiftScans) == 1
    assert_refused(sdfg)
