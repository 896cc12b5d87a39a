"""ScanFusion: two scans over the same levels become one loop, bitwise; refused cases leave the SDFG unchanged."""

from __future__ import annotations

import copy
import json

import dace
import numpy as np
import pytest
from dace.sdfg.state import LoopRegion

import sdfg_scan
from sdfg_scan.nodes.scan import Scan
from sdfg_scan.transformations import LiftScans, ScanFusion

N, K = dace.symbol("N"), dace.symbol("K")


# ------------------------------------------------------------------------------------------------
# gt4py-shaped pairs: map i -> two scan nested SDFGs (lifted to Scan nodes, columns="single")
# ------------------------------------------------------------------------------------------------
def column(name: str, w: float, *, backward=False, start=0, read="k", write_x=False) -> dace.SDFG:
    """``c = init; for k: c = c * w + x[k]; out[k] = c`` for one column, like gt4py's scan nested SDFG.

    ``read``: how x is read -- ``"k"``, ``"km1"`` (x[k-1], clamped), ``"column"`` (a whole-column copy),
    ``"exit"`` (also read after the loop). ``write_x``: the body also writes ``w[k]`` (a second output).
    """
    s = dace.SDFG(name)
    s.using_explicit_control_flow = True
    s.add_symbol("K", dace.int32)
    s.add_array("x", [K], dace.float64)
    s.add_array("out", [K], dace.float64)
    s.add_scalar("init", dace.float64)
    s.add_scalar("c", dace.float64, transient=True)
    s.add_scalar("t", dace.float64, transient=True)
    entry = s.add_state("entry", is_start_block=True)
    entry.add_nedge(entry.add_read("init"), entry.add_write("c"), dace.Memlet("init[0]"))
    if backward:
        loop = LoopRegion("lp", f"k >= {start}", "k", "k = K - 1", "k = k - 1")
    else:
        loop = LoopRegion("lp", "k < K", "k", f"k = {start}", "k = k + 1")
    s.add_node(loop)
    s.add_edge(entry, loop, dace.InterstateEdge())
    comp = loop.add_state("compute", is_start_block=True)
    tk = comp.add_tasklet("step", {"a": None, "b": None}, {"o": None}, f"o = a * {w} + b")
    comp.add_edge(comp.add_read("c"), None, tk, "a", dace.Memlet("c[0]"))
    if read == "column":
        s.add_array("col", [K], dace.float64, transient=True)
        colnode = comp.add_access("col")
        comp.add_nedge(comp.add_read("x"), colnode, dace.Memlet("x[0:K]"))
        comp.add_edge(colnode, None, tk, "b", dace.Memlet("col[k]"))
    else:
        idx = "max(k - 1, 0)" if read == "km1" else "k"
        comp.add_edge(comp.add_read("x"), None, tk, "b", dace.Memlet(f"x[{idx}]"))
    tw = comp.add_access("t")
    comp.add_edge(tk, "o", tw, None, dace.Memlet("t[0]"))
    comp.add_nedge(tw, comp.add_write("out"), dace.Memlet("t[0] -> [k]"))
    if write_x:
        s.add_array("w", [K], dace.float64)
        comp.add_nedge(tw, comp.add_write("w"), dace.Memlet("t[0] -> [k]"))
    upd = loop.add_state_after(comp, "update")
    upd.add_nedge(upd.add_read("t"), upd.add_write("c"), dace.Memlet("t[0]"))
    if read == "exit":
        ex = s.add_state_after(loop, "exit")
        tk = ex.add_tasklet("last", {"a": None}, {"o": None}, "o = a")
        ex.add_edge(ex.add_read("x"), None, tk, "a", dace.Memlet("x[0]"))
        ex.add_edge(tk, "o", ex.add_write("out"), None, dace.Memlet("out[0]"))
    return s


def pair(name: str, *, link: bool, backward=False, b_kw=None, via_tasklet=False, two_maps=False,
         b_writes_x=False) -> dace.SDFG:
    """``map i``: scan A (X -> T), scan B (Y or T -> OUT2); T is copied to OUT1.

    ``link``: B reads A's output T (producer -> consumer), else B reads Y (independent).
    ``via_tasklet``: B reads T through a tasklet (another dependency path). ``two_maps``: B in its own map.
    ``b_writes_x``: B (reading Y) also writes X, which A reads.
    """
    sdfg = dace.SDFG(name)
    sdfg.using_explicit_control_flow = True
    for arr in ("X", "Y", "OUT1", "OUT2"):
        sdfg.add_array(arr, [N, K], dace.float64)
    sdfg.add_array("INIT", [N], dace.float64)
    sdfg.add_array("T", [N, K], dace.float64, transient=True)
    sdfg.add_array("T2", [N, K], dace.float64, transient=True)
    st = sdfg.add_state("main", is_start_block=True)
    b_kw = dict(b_kw or {})
    b_kw.setdefault("backward", backward)
    col_a = column("scan_a", 0.5, backward=backward)
    col_b = column("scan_b", 0.25, write_x=b_writes_x, **b_kw)
    me, mx = st.add_map("cols", {"i": "0:N"})
    a = st.add_nested_sdfg(col_a, {"x": None, "init": None}, {"out": None}, symbol_mapping={"K": K})
    st.add_memlet_path(st.add_read("X"), me, a, dst_conn="x", memlet=dace.Memlet("X[i, 0:K]"))
    init = st.add_read("INIT")
    st.add_memlet_path(init, me, a, dst_conn="init", memlet=dace.Memlet("INIT[i]"))
    t = st.add_access("T")
    st.add_edge(a, "out", t, None, dace.Memlet("T[i, 0:K]"))
    st.add_memlet_path(t, mx, st.add_write("OUT1"), memlet=dace.Memlet("T[i, 0:K] -> [i, 0:K]"))
    if two_maps:
        me, mx = st.add_map("cols2", {"i": "0:N"})
    b_out = {"out": None, "w": None} if b_writes_x else {"out": None}
    b = st.add_nested_sdfg(col_b, {"x": None, "init": None}, b_out, symbol_mapping={"K": K})
    if link and via_tasklet:
        tk = st.add_tasklet("twice", {"a": None}, {"o": None}, "o = 2.0 * a")
        st.add_edge(t, None, tk, "a", dace.Memlet("T[i, 0]"))
        t2 = st.add_access("T2")
        st.add_edge(tk, "o", t2, None, dace.Memlet("T2[i, 0]"))
        st.add_edge(t, None, b, "x", dace.Memlet("T[i, 0:K]"))
        st.add_edge(t2, None, b, "init", dace.Memlet("T2[i, 0]"))
    else:
        if link:
            st.add_edge(t, None, b, "x", dace.Memlet("T[i, 0:K]"))
        else:
            st.add_memlet_path(st.add_read("Y"), me, b, dst_conn="x", memlet=dace.Memlet("Y[i, 0:K]"))
        st.add_memlet_path(init if not two_maps else st.add_read("INIT"), me, b, dst_conn="init",
                           memlet=dace.Memlet("INIT[i]"))
    st.add_memlet_path(b, mx, st.add_write("OUT2"), src_conn="out", memlet=dace.Memlet("OUT2[i, 0:K]"))
    if b_writes_x:
        st.add_memlet_path(b, mx, st.add_write("X"), src_conn="w", memlet=dace.Memlet("X[i, 0:K]"))
    sdfg.validate()
    assert sdfg.apply_transformations_repeated(LiftScans) == 2
    return sdfg


def _scans(sdfg) -> list[Scan]:
    return [n for n, _ in sdfg.all_nodes_recursive() if isinstance(n, Scan)]


def _run(csdfg, nlev: int, ncol: int = 5, seed: int = 1) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    args = {nm: rng.uniform(-1.0, 1.0, (ncol, nlev)) for nm in ("X", "Y")}
    args.update({nm: np.full((ncol, nlev), -9.0) for nm in ("OUT1", "OUT2")})
    args["INIT"] = rng.uniform(0.0, 1.0, ncol)
    csdfg(**args, N=ncol, K=nlev)
    return args


CASES = [(link, backward) for link in (False, True) for backward in (False, True)]


@pytest.mark.parametrize("link,backward", CASES,
                         ids=[f"{'producer_consumer' if lk else 'independent'}-{'bwd' if bw else 'fwd'}"
                              for lk, bw in CASES])
def test_gt4py_like_pair_bitwise_symbolic_k(link, backward):
    name = f"fuse_{int(link)}{int(backward)}"
    sdfg = pair(name, link=link, backward=backward)
    fused = copy.deepcopy(sdfg)
    fused.name = name + "_fused"
    assert fused.apply_transformations_repeated(ScanFusion) == 1
    fused.validate()
    (node,) = _scans(fused)
    assert node.direction == ("backward" if backward else "forward")
    assert len([b for b in node.body.nodes() if isinstance(b, LoopRegion)]) == 1
    # producer -> consumer: B's input x is A's output inside the fused body, no longer a connector
    assert len(node.in_connectors) == (3 if link else 4) and len(node.out_connectors) == 2
    a, b = sdfg.compile(), fused.compile()
    for nlev in (0, 1, 2, 9):
        want, got = _run(a, nlev), _run(b, nlev)
        for k in want:
            assert np.array_equal(want[k], got[k]), (k, nlev)


# ------------------------------------------------------------------------------------------------
# the frontend: two sdfg_scan.scan calls in one program (columns="map")
# ------------------------------------------------------------------------------------------------
def b1(c, x, k):
    (s,) = c
    s2 = s + x[0]
    return (s2,), (s2 * 2.0,)


def b2(c, x, k):
    (s,) = c
    s2 = s * 0.5 + x[0]
    return (s2,), (s2 - x[1],)


def _frontend(name: str, reverse: bool = False, emit2: str = "inclusive", reverse2: bool | None = None):
    reverse2 = reverse if reverse2 is None else reverse2

    def prog(a, b, y1, y2, y3):
        r1, q1 = sdfg_scan.scan(b1, (0.0,), (a,), axis=1, reverse=reverse)
        r2, q2 = sdfg_scan.scan(b2, (1.0,), (q1, b), axis=1, reverse=reverse2, emit=emit2)
        y1[:] = r1
        y2[:] = q2
        y3[:] = r2

    prog.__annotations__ = {nm: dace.float64[N, K] for nm in ("a", "b", "y1", "y2", "y3")}
    sdfg = dace.program(prog).to_sdfg(simplify=True)
    sdfg.name = name
    return sdfg


@pytest.mark.parametrize("reverse", [False, True], ids=["forward", "backward"])
def test_frontend_pair_bitwise(reverse):
    sdfg = _frontend(f"fuse_fe_{int(reverse)}", reverse)
    fused = copy.deepcopy(sdfg)
    fused.name = sdfg.name + "_fused"
    assert len(_scans(sdfg)) == 2
    assert fused.apply_transformations_repeated(ScanFusion) == 1
    fused.validate()
    assert len(_scans(fused)) == 1
    a, b = sdfg.compile(), fused.compile()
    rng = np.random.default_rng(3)
    for nlev in (1, 2, 9):
        args = dict(a=rng.random((4, nlev)), b=rng.random((4, nlev)))
        outs = [{nm: np.zeros((4, nlev)) for nm in ("y1", "y2", "y3")} for _ in range(2)]
        a(**args, **outs[0], N=4, K=nlev)
        b(**args, **outs[1], N=4, K=nlev)
        for nm in outs[0]:
            assert np.array_equal(outs[0][nm], outs[1][nm]), (nm, nlev)


# ------------------------------------------------------------------------------------------------
# guards: one "does not apply" test each, the SDFG unchanged
# ------------------------------------------------------------------------------------------------
GUARDS = {
    "_links: consumer reads the producer's output at k-1": lambda: pair("g1", link=True, b_kw=dict(read="km1")),
    "_links: consumer reads the producer's output as a whole column":
        lambda: pair("g2", link=True, b_kw=dict(read="column")),
    "_links: consumer reads the producer's output after its loop":
        lambda: pair("g3", link=True, b_kw=dict(read="exit")),
    "_same_levels: level ranges differ": lambda: pair("g4", link=False, b_kw=dict(start=1)),
    "_same_levels: directions differ": lambda: pair("g5", link=False, b_kw=dict(backward=True)),
    "_no_other_dependence: a second path through a tasklet":
        lambda: pair("g6", link=True, via_tasklet=True),
    "_no_other_dependence: consumer writes what the producer reads": lambda: pair("g7", link=False, b_writes_x=True),
    "_same_kind: different map scopes": lambda: pair("g8", link=False, two_maps=True),
    "_same_kind: emit modes differ": lambda: _frontend("g9", emit2="exclusive"),
    "_same_levels: frontend directions differ": lambda: _frontend("g10", reverse2=True),
    "_same_kind: one scan pinned by the user": lambda: _pinned("g12", implementation="levels_outside"),
    "_same_kind: one scan asks for a stricter class": lambda: _pinned("g13", reproducibility="exact"),
}


def _pinned(name: str, **pin) -> dace.SDFG:
    """``_frontend``'s pair with the second scan's ``implementation`` or ``reproducibility`` set by the user
    (the fused node would keep only the first's)."""
    sdfg = _frontend(name)
    for key, value in pin.items():
        setattr(_scans(sdfg)[1], key, value)
    return sdfg


@pytest.mark.parametrize("build", list(GUARDS.values()), ids=list(GUARDS))
def test_does_not_apply(build):
    sdfg = build()
    before = json.dumps(sdfg.to_json(), sort_keys=True)
    assert sdfg.apply_transformations_repeated(ScanFusion) == 0
    assert json.dumps(sdfg.to_json(), sort_keys=True) == before


def test_peeled_body_is_not_fused():
    """A body with levels before its loop (peeled) has a different loop range: not fused."""
    sdfg = pair("g11", link=False)
    node = _scans(sdfg)[0]
    pre = node.body.add_state_before(node.body.nodes()[1], "peeled")
    tk = pre.add_tasklet("w", {"a": None}, {"o": None}, "o = 2.0 * a")
    pre.add_edge(pre.add_read("init"), None, tk, "a", dace.Memlet("init[0]"))
    pre.add_edge(tk, "o", pre.add_write("t"), None, dace.Memlet("t[0]"))
    node.sync_from_body()
    sdfg.validate()
    before = json.dumps(sdfg.to_json(), sort_keys=True)
    assert sdfg.apply_transformations_repeated(ScanFusion) == 0
    assert json.dumps(sdfg.to_json(), sort_keys=True) == before
