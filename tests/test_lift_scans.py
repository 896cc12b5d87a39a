"""LiftScans: lifts every scan of the real gt4py/icon4py SDFGs, bitwise; refuses what it must refuse."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
import textwrap

import dace
import icon4py_fixtures as fx
import numpy as np
import pytest
from dace.sdfg.state import LoopRegion
from dace.sdfg.validation import InvalidSDFGError

import sdfg_scan
from sdfg_scan.nodes.scan import Scan
from sdfg_scan.scan_sites import find_scans
from sdfg_scan.scan_structure import analyze_scan
from sdfg_scan.transformations import LiftScans

# ------------------------------------------------------------------------------------------------
# a small gt4py-shaped program built with the API: map i -> nested SDFG (entry copy, k-loop)
# ------------------------------------------------------------------------------------------------
N, K = dace.symbol("N"), dace.symbol("K")


def column_sdfg(*, stride=1, inverted=False, two_loops=False, entry_tasklet=False, cond_edge=False,
                unconnected=False, backward=False, init_tasklet=None, init_dtype=dace.float64) -> dace.SDFG:
    """``out[k] = c = c + x[k]`` for one column, written like gt4py's scan nested SDFG."""
    s = dace.SDFG("column")
    s.using_explicit_control_flow = True
    s.add_symbol("K", dace.int32)
    s.add_array("x", [K], dace.float64)
    s.add_array("out", [K], dace.float64)
    s.add_scalar("init", init_dtype)
    s.add_scalar("c", dace.float64, transient=True)
    s.add_scalar("t", dace.float64, transient=True)
    if unconnected:
        s.add_array("extra", [K], dace.float64)
    entry = s.add_state("entry", is_start_block=True)
    if init_tasklet is None:
        entry.add_nedge(entry.add_read("init"), entry.add_write("c"), dace.Memlet("init[0]"))
    else:  # the init copy as the tasklet DaCe's code generation lowers it to (gt4py's compiled program.sdfgz)
        tk = entry.add_tasklet("copy_init", {"_cpy_in": None}, {"_cpy_out": None}, init_tasklet)
        entry.add_edge(entry.add_read("init"), None, tk, "_cpy_in", dace.Memlet("init[0]"))
        entry.add_edge(tk, "_cpy_out", entry.add_write("c"), None, dace.Memlet("c[0]"))
    if entry_tasklet:
        tk = entry.add_tasklet("work", {"a": None}, {"b": None}, "b = a * 2")
        entry.add_edge(entry.add_read("x"), None, tk, "a", dace.Memlet("x[0]"))
        entry.add_edge(tk, "b", entry.add_write("t"), None, dace.Memlet("t[0]"))
    if backward:
        loop = LoopRegion("lp", "k >= 0", "k", "k = K - 1", "k = k - 1", inverted=inverted)
    else:
        loop = LoopRegion("lp", "k < K", "k", "k = 0", f"k = k + {stride}", inverted=inverted)
    s.add_node(loop)
    s.add_edge(entry, loop, dace.InterstateEdge(condition="K > 0" if cond_edge else None))
    body = loop.add_state("compute", is_start_block=True)
    tk = body.add_tasklet("add", {"a": None, "b": None}, {"o": None}, "o = a + b")
    body.add_edge(body.add_read("c"), None, tk, "a", dace.Memlet("c[0]"))
    body.add_edge(body.add_read("x"), None, tk, "b", dace.Memlet("x[k]"))
    tw = body.add_write("t")
    body.add_edge(tk, "o", tw, None, dace.Memlet("t[0]"))
    body.add_nedge(tw, body.add_write("out"), dace.Memlet("t[0] -> [k]"))
    upd = loop.add_state("update")
    loop.add_edge(body, upd, dace.InterstateEdge())
    upd.add_nedge(upd.add_read("t"), upd.add_write("c"), dace.Memlet("t[0]"))
    if two_loops:
        loop2 = LoopRegion("lp2", "k2 < K", "k2", "k2 = 0", "k2 = k2 + 1")
        s.add_node(loop2)
        s.add_edge(loop, loop2, dace.InterstateEdge())
        loop2.add_state("nothing", is_start_block=True)
    return s


def program(in_map=True, **kw) -> dace.SDFG:
    sdfg = dace.SDFG("lift_prog")
    sdfg.using_explicit_control_flow = True
    sdfg.add_array("X", [N, K], dace.float64)
    sdfg.add_array("OUT", [N, K], dace.float64)
    sdfg.add_array("INIT", [N], dace.float64)
    st = sdfg.add_state("main", is_start_block=True)
    col = column_sdfg(**kw)
    ins, outs = {"x": None, "init": None}, {"out": None}
    if in_map:
        me, mx = st.add_map("cols", {"i": "0:N"})
        ns = st.add_nested_sdfg(col, ins, outs, symbol_mapping={"K": K})
        st.add_memlet_path(st.add_read("X"), me, ns, dst_conn="x", memlet=dace.Memlet("X[i, 0:K]"))
        st.add_memlet_path(st.add_read("INIT"), me, ns, dst_conn="init", memlet=dace.Memlet("INIT[i]"))
        st.add_memlet_path(ns, mx, st.add_write("OUT"), src_conn="out", memlet=dace.Memlet("OUT[i, 0:K]"))
    else:
        ns = st.add_nested_sdfg(col, ins, outs, symbol_mapping={"K": K})
        st.add_edge(st.add_read("X"), None, ns, "x", dace.Memlet("X[0, 0:K]"))
        st.add_edge(st.add_read("INIT"), None, ns, "init", dace.Memlet("INIT[0]"))
        st.add_edge(ns, "out", st.add_write("OUT"), None, dace.Memlet("OUT[0, 0:K]"))
    return sdfg


def lift(sdfg: dace.SDFG) -> int:
    return sdfg.apply_transformations_repeated(LiftScans)


def _lifted_and_run(name: str, ncols: int, nlev: int, seed: int, **kw):
    """``program(**kw)`` lifted (one Scan) and validated; both run on the same random inputs:
    ``(scan node, x, init, original's OUT, lifted's OUT)``."""
    sdfg = program(**kw)
    ref = copy.deepcopy(sdfg)
    assert lift(sdfg) == 1
    sdfg.validate()
    (node,) = [n for n, _ in sdfg.all_nodes_recursive() if isinstance(n, Scan)]
    rng = np.random.default_rng(seed)
    x, init = rng.random((ncols, nlev)), rng.random(ncols)
    a, b = np.zeros((ncols, nlev)), np.zeros((ncols, nlev))
    ref.name, sdfg.name = f"{name}_ref", f"{name}_lifted"
    ref(X=x, OUT=a, INIT=init, N=ncols, K=nlev)
    sdfg(X=x, OUT=b, INIT=init, N=ncols, K=nlev)
    return node, x, init, a, b


def test_lift_api_program_bitwise():
    node, x, init, a, b = _lifted_and_run("lift_prog", 7, 65, 0)
    assert (node.columns, node.direction, node.loop_variable, str(node.start), str(node.stop)) == (
        "single", "forward", "k", "0", "K")
    assert np.array_equal(a, b)
    assert np.array_equal(b, init[:, None] + np.cumsum(x, axis=1)) or np.allclose(b, init[:, None] + np.cumsum(x, 1))


def test_init_copy_written_as_a_tasklet_is_lifted_bitwise():
    """gt4py's compiled program holds a scan's init copies as tasklets ``_cpy_out = _cpy_in``: LiftScans
    accepts them, rewrites them into access-node copies, and the lifted program is bitwise the original."""
    node, _, _, a, b = _lifted_and_run("lift_cpy", 5, 9, 1, init_tasklet="_cpy_out = _cpy_in")
    assert not any(isinstance(n, dace.nodes.Tasklet) for n in node.body.start_block.nodes())
    assert analyze_scan(node.body).carries["c"].init == "init"
    assert np.array_equal(a, b)


@pytest.mark.parametrize("breaks", [
    pytest.param(dict(in_map=False), id="not_in_map"),
    pytest.param(dict(stride=2), id="stride_2"),
    pytest.param(dict(inverted=True), id="inverted_loop"),
    pytest.param(dict(two_loops=True), id="two_loops"),
    pytest.param(dict(entry_tasklet=True), id="entry_computes"),
    pytest.param(dict(cond_edge=True), id="conditional_entry_edge"),
    pytest.param(dict(unconnected=True), id="unconnected_container"),
    pytest.param(dict(init_tasklet="_cpy_out = _cpy_in * 2"), id="init_tasklet_computes"),
    pytest.param(dict(init_tasklet="_cpy_out = _cpy_in", init_dtype=dace.float32), id="init_tasklet_converts"),
])
def test_does_not_apply(breaks):
    sdfg = program(**breaks)
    before = json.dumps(sdfg.to_json(), sort_keys=True)
    assert lift(sdfg) == 0
    assert json.dumps(sdfg.to_json(), sort_keys=True) == before


def test_backward_structure():
    s = analyze_scan(column_sdfg(backward=True))
    assert (s.direction, str(s.start), str(s.stop), str(s.first_level)) == ("backward", "0", "K", "K - 1")
    assert s.carries["c"].kind == "recurrent" and s.carries["c"].init == "init"


def test_round_trip_fresh_process(tmp_path):
    sdfg = program()
    lift(sdfg)
    (node,) = [n for n, _ in sdfg.all_nodes_recursive() if isinstance(n, Scan)]
    node.implementation = "sequential"
    path = tmp_path / "lifted.sdfg"
    sdfg.save(str(path))
    code = textwrap.dedent(f"""
        import json, dace
        sdfg = dace.SDFG.from_file({str(path)!r})
        (n,) = [n for n, _ in sdfg.all_nodes_recursive() if type(n).__name__ in ("Scan", "UnregisteredLibraryNode")]
        print(json.dumps(dict(cls=type(n).__module__ + "." + type(n).__name__, impl=n.implementation,
            columns=n.columns, direction=n.direction, var=n.loop_variable, start=str(n.start), stop=str(n.stop),
            mapping={{k: str(v) for k, v in n.symbol_mapping.items()}}, body=sorted(n.body.arrays), ins=sorted(n.in_connectors), outs=sorted(n.out_connectors))))
        sdfg.validate()
    """)
    out = subprocess.run([sys.executable, "-c", "import sdfg_scan\n" + code], capture_output=True, text=True,
                         check=True).stdout.strip().splitlines()[-1]
    got = json.loads(out)
    assert got == dict(cls="sdfg_scan.nodes.scan.Scan", impl="sequential", columns="single", direction="forward",
                       var="k", start="0", stop="K", mapping={"K": "K"}, body=sorted(node.body.arrays),
                       ins=["init", "x"], outs=["out"])


# ------------------------------------------------------------------------------------------------
# the real fixtures
# ------------------------------------------------------------------------------------------------
def _scan_nsdfgs(sdfg):
    return [n for n, _ in sdfg.all_nodes_recursive()
            if isinstance(n, dace.nodes.NestedSDFG) and any(isinstance(b, LoopRegion) for b in n.sdfg.nodes())]


# the lowered graupel forms (30 s each) only in make test-long: CI lifts graupel_run.lowered in
# test_pipeline's optimize, which checks the same count
@pytest.mark.fixtures
@pytest.mark.parametrize("form", [pytest.param(f, marks=pytest.mark.long) if f in fx.NO_COMPILE else f
                                  for f in fx.FORMS])
def test_lift_every_fixture(form):
    sdfg = fx.load(form)
    before = len(find_scans(sdfg))
    assert before >= 1
    assert lift(sdfg) == before
    sdfg.validate()
    assert not _scan_nsdfgs(sdfg), "a k-loop nested SDFG was left unlifted"
    scans = [n for n, _ in sdfg.all_nodes_recursive() if isinstance(n, Scan)]
    assert len(scans) == before and all(s.columns == "single" for s in scans)


@pytest.mark.fixtures
@pytest.mark.parametrize("form", [f for f in fx.FORMS if f not in fx.NO_COMPILE | fx.SLOW])
def test_lifted_fixture_bitwise(form):
    """Lifting alone, bitwise; the graupel forms are compiled lifted + canonicalised once, in
    tests/test_pipeline.py (each graupel compile costs 20-40 s)."""
    sdfg = fx.load(form)
    kw = fx.inputs(form, sdfg)
    original = fx.run(form, sdfg, kw)
    lifted = fx.load(form)
    assert lift(lifted) >= 1
    fx.assert_bitwise_equal(original, fx.run(form + "+lifted", lifted, kw))


def test_package_exports_scan():
    assert sdfg_scan.Scan is Scan


@pytest.mark.fixtures
def test_peeled_scan_body_validates_and_is_bitwise():
    """PeelBoundaryLevels on a lifted ``Scan.body`` puts peeled levels before the loop: still a valid Scan."""
    from sdfg_scan.transformations import PeelBoundaryLevels

    form = "diagnose_pressure.opt"
    sdfg = fx.load(form)
    kw = fx.inputs(form, sdfg)
    original = fx.run(form, sdfg, kw)
    assert lift(sdfg) == 1
    (node,) = [n for n, _ in sdfg.all_nodes_recursive() if isinstance(n, Scan)]
    assert node.body.apply_transformations_repeated(PeelBoundaryLevels, validate=False) == 1
    with pytest.raises(InvalidSDFGError, match="call node.sync_from_body"):
        sdfg.validate()
    node.sync_from_body()
    sdfg.validate()
    s = analyze_scan(node.body, prologue=True)
    assert s.prologue, "the peeled level should sit between the entry states and the loop"
    fx.assert_bitwise_equal(original, fx.run(form + "+lifted+peeled", sdfg, kw))


def test_broken_scan_body_is_still_refused():
    sdfg = program()
    lift(sdfg)
    (node,) = [n for n, _ in sdfg.all_nodes_recursive() if isinstance(n, Scan)]
    loop = next(b for b in node.body.nodes() if isinstance(b, LoopRegion))
    node.body.add_node(LoopRegion("second", "k2 < K", "k2", "k2 = 0", "k2 = k2 + 1"))
    node.body.add_edge(loop, node.body.nodes()[-1], dace.InterstateEdge())
    with pytest.raises(InvalidSDFGError, match="the body is not a column scan: expected exactly one top-level"):
        sdfg.validate()


def _branch_temporary_column(with_else: bool) -> dace.SDFG:
    """``for k: if x[k] > 0.5: tmp = 2 x[k] [else: tmp = x[k] + 1]; c = c + tmp; out[k] = c`` (gt4py writes a
    scan's per-level temporaries in both arms of its ``if``s, then reads them after)."""
    from dace.properties import CodeBlock
    from dace.sdfg.state import ConditionalBlock, ControlFlowRegion, LoopRegion

    s = dace.SDFG(f"branch_tmp_{int(with_else)}")
    s.using_explicit_control_flow = True
    s.add_symbol("K", dace.int32)
    s.add_array("x", ["K"], dace.float64)
    s.add_array("out", ["K"], dace.float64)
    s.add_scalar("init", dace.float64)
    for name in ("c", "tmp"):
        s.add_scalar(name, dace.float64, transient=True)
    s.add_scalar("q", dace.bool_, transient=True)
    entry = s.add_state("scan_entry", is_start_block=True)
    entry.add_nedge(entry.add_read("init"), entry.add_write("c"), dace.Memlet("init[0] -> [0]"))
    loop = LoopRegion("scan", "k < K", "k", "k = 0", "k = k + 1")
    s.add_node(loop)
    s.add_edge(entry, loop, dace.InterstateEdge())
    test = loop.add_state("test", is_start_block=True)
    tk = test.add_tasklet("cmp", {"a": None}, {"r": None}, "r = a > 0.5")
    test.add_edge(test.add_read("x"), None, tk, "a", dace.Memlet("x[k]"))
    test.add_edge(tk, "r", test.add_write("q"), None, dace.Memlet("q[0]"))
    cb = ConditionalBlock("if_q")
    loop.add_node(cb)
    loop.add_edge(test, cb, dace.InterstateEdge())
    arms = [("q", "r = a * 2.0")] + ([(None, "r = a + 1.0")] if with_else else [])
    for i, (cond, code) in enumerate(arms):
        br = ControlFlowRegion(f"arm_{i}", sdfg=s)
        st = br.add_state(f"arm_{i}_s", is_start_block=True)
        tk = st.add_tasklet(f"arm_{i}_t", {"a": None}, {"r": None}, code)
        st.add_edge(st.add_read("x"), None, tk, "a", dace.Memlet("x[k]"))
        st.add_edge(tk, "r", st.add_write("tmp"), None, dace.Memlet("tmp[0]"))
        cb.add_branch(CodeBlock(cond) if cond is not None else None, br)
    acc = loop.add_state("acc")
    loop.add_edge(cb, acc, dace.InterstateEdge())
    tk = acc.add_tasklet("add", {"a": None, "b": None}, {"r": None}, "r = a + b")
    acc.add_edge(acc.add_read("c"), None, tk, "a", dace.Memlet("c[0]"))
    acc.add_edge(acc.add_read("tmp"), None, tk, "b", dace.Memlet("tmp[0]"))
    cw = acc.add_access("c")
    acc.add_edge(tk, "r", cw, None, dace.Memlet("c[0]"))
    acc.add_nedge(cw, acc.add_write("out"), dace.Memlet("c[0] -> [k]"))
    return s


def test_a_temporary_every_arm_writes_before_it_is_read_is_no_carry():
    """With an ``else`` exactly one arm runs, so ``tmp`` is written on every level before it is read: not a
    carry (icon4py's old graupel had 63 such temporaries counted as carries, 90 slots where the scan has
    27). Without the ``else`` the value of the level before reaches the read: a carry."""
    from sdfg_scan.scan_structure import analyze_scan

    assert sorted(analyze_scan(_branch_temporary_column(True)).carries) == ["c"]
    assert sorted(analyze_scan(_branch_temporary_column(False)).carries) == ["c", "tmp"]
    for with_else in (True, False):   # the analysis describes the program: run it against NumPy
        sdfg = _branch_temporary_column(with_else)
        x = np.random.default_rng(3).uniform(0, 1, 9)
        x[0] = 0.9   # without the else, tmp is first written at level 0
        out = np.zeros(9)
        sdfg(x=x, out=out, init=np.float64(0.25), K=9)
        tmp, c, want = 0.0, 0.25, np.zeros(9)
        for k in range(9):
            tmp = x[k] * 2.0 if x[k] > 0.5 else (x[k] + 1.0 if with_else else tmp)
            c = c + tmp
            want[k] = c
        np.testing.assert_array_equal(out, want)
