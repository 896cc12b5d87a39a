"""ScanLoopInterchange: map over columns + column k-loop -> k-loop + maps over columns.

Hand-built columns (``hand_columns.column``, wrapped in a map over ``N`` columns) and icon4py
fixtures are compiled before and after and compared bitwise; every guard of ``can_be_applied`` has a
"does not apply" case that checks the SDFG is left untouched.
"""

from __future__ import annotations

import json

import dace
import icon4py_fixtures as fx
import numpy as np
import pytest
from hand_columns import column

from sdfg_scan.transformations import ScanLoopInterchange
from sdfg_scan.transformations.scan_loop_interchange import LEVEL, MIN_CELLS, cell_contiguous, profitable

N = dace.symbol("N", dace.int32)
K = dace.symbol("K", dace.int32)


def mapped(col: dace.SDFG, name: str, schedule=dace.ScheduleType.Default, extra_output=False, wcr=False,
           nested_map=False, ordering_edge=False, cell=False) -> dace.SDFG:
    """``col`` (one column) called once per cell ``i`` of a map; fields [N, K], K-contiguous, or
    cell-contiguous with ``cell`` (the column's windows then get stride N)."""
    sdfg = dace.SDFG(name)
    sdfg.using_explicit_control_flow = True
    for a in ("x", "out", "aux"):
        sdfg.add_array(a, [N, K], dace.float64, strides=(1, N) if cell else None)
    if cell:
        col.add_symbol("N", dace.int32)
        for a in ("x", "out", "aux"):
            col.arrays[a].strides = (N,)
    for a in ("last", "last2", "init", "side"):
        sdfg.add_array(a, [N], dace.float64)
    st = sdfg.add_state("columns")
    outer = None
    if nested_map:
        outer = st.add_map("outer", {"j": "0:1"})
    me, mx = st.add_map("cells", {"i": "0:N"}, schedule=schedule)
    node = st.add_nested_sdfg(col, dict.fromkeys(["x", "init"]), dict.fromkeys(["out", "aux", "last", "last2"]),
                              symbol_mapping={"K": K, **({"N": N} if cell else {})})
    ins = {"x": "x[i, 0:K]", "init": "init[i]"}
    outs = {"out": "out[i, 0:K]", "aux": "aux[i, 0:K]", "last": "last[i]", "last2": "last2[i]"}
    for conn, sub in ins.items():
        path = [st.add_read(conn)] + ([outer[0]] if outer else []) + [me, node]
        st.add_memlet_path(*path, dst_conn=conn, memlet=dace.Memlet(sub))
    for conn, sub in outs.items():
        mem = dace.Memlet(sub, wcr="lambda a, b: a + b" if wcr and conn == "last" else None)
        path = [node, mx] + ([outer[1]] if outer else []) + [st.add_write(conn)]
        st.add_memlet_path(*path, src_conn=conn, memlet=mem)
    if ordering_edge:  # an empty memlet ordering the map after another node
        st.add_nedge(st.add_read("side"), me, dace.Memlet())
    if extra_output:  # a second computation in the map scope writing its own output
        t = st.add_tasklet("side", {"a": None}, {"b": None}, "b = a")
        st.add_memlet_path(st.add_read("init"), me, t, dst_conn="a", memlet=dace.Memlet("init[i]"))
        st.add_memlet_path(t, mx, st.add_write("side"), src_conn="b", memlet=dace.Memlet("side[i]"))
    return sdfg


def inputs(ncol: int, nlev: int, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    return dict(x=rng.uniform(0.0, 1.0, (ncol, nlev)), out=np.full((ncol, nlev), -7.0),
                aux=np.full((ncol, nlev), -3.0), last=np.full(ncol, -5.0), last2=np.full(ncol, -6.0),
                init=rng.uniform(0.0, 1.0, ncol), side=np.zeros(ncol), N=ncol, K=nlev)


def run(csdfg, kw: dict) -> dict:
    args = {k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in kw.items()}
    csdfg(**args)
    return {k: v for k, v in args.items() if isinstance(v, np.ndarray)}


def interchange(sdfg: dace.SDFG) -> int:
    return sdfg.apply_transformations_repeated(ScanLoopInterchange)


COLUMNS = {
    "forward": dict(),
    "backward": dict(backward=True),
    "flag_branch": dict(flag_conditional=True, extra="delay_line", extra_read_after=True),
}


@pytest.fixture(scope="module", params=sorted(COLUMNS))
def compiled_pair(request):
    col = lambda: column(f"col_{request.param}", **COLUMNS[request.param])  # noqa: E731
    base = mapped(col(), f"test_ix_base_{request.param}")
    new = mapped(col(), f"test_ix_new_{request.param}")
    assert interchange(new) == 1
    new.validate()
    return base.compile(), new.compile(), new


@pytest.mark.parametrize("ncol,nlev", [(7, 9), (5, 1), (3, 2), (1, 65), (0, 4)])
def test_bitwise(compiled_pair, ncol, nlev):
    base, new, _ = compiled_pair
    kw = inputs(ncol, nlev, seed=ncol * 100 + nlev)
    a, b = run(base, kw), run(new, kw)
    for k in a:
        assert np.array_equal(a[k].view(np.uint64), b[k].view(np.uint64)), k


def test_structure(compiled_pair):
    *_, new = compiled_pair
    outer = next(n for n, _ in new.all_nodes_recursive() if isinstance(n, dace.nodes.NestedSDFG))
    loops = [r for r in outer.sdfg.all_control_flow_regions() if isinstance(r, dace.sdfg.state.LoopRegion)]
    assert [loop.loop_variable for loop in loops] == [LEVEL]
    assert not [n for n in new.states()[0].nodes() if isinstance(n, dace.nodes.MapEntry)]
    carries = {name for name, d in outer.sdfg.arrays.items() if d.transient and name.startswith("_carry_")}
    assert {"_carry_c", "_carry_f"} <= carries        # the carry and the first-level flag


@pytest.mark.parametrize("case", ["gpu_schedule", "nested_map", "extra_output", "wcr", "ordering_edge",
                                  "var_used_after",
                                  "not_a_loop", "second_application"])
def test_does_not_apply(case):
    kw = {"var_used_after": dict(var_used_after=True), "not_a_loop": dict(in_loop=False)}.get(case, {})
    col = column(f"col_refuse_{case}", **kw)
    opts = {"gpu_schedule": dict(schedule=dace.ScheduleType.GPU_Device), "nested_map": dict(nested_map=True),
            "extra_output": dict(extra_output=True), "wcr": dict(wcr=True),
            "ordering_edge": dict(ordering_edge=True)}.get(case, {})
    sdfg = mapped(col, f"test_ix_refuse_{case}", **opts)
    if case == "second_application":
        assert interchange(sdfg) == 1
    before = json.dumps(sdfg.to_json(), sort_keys=True, default=str)
    assert interchange(sdfg) == 0
    assert json.dumps(sdfg.to_json(), sort_keys=True, default=str) == before


def test_apply_refused_match_raises():
    sdfg = mapped(column("col_raise", var_used_after=True), "test_ix_raise")
    st = sdfg.states()[0]
    me = next(n for n in st.nodes() if isinstance(n, dace.nodes.MapEntry))
    nsdfg = next(n for n in st.nodes() if isinstance(n, dace.nodes.NestedSDFG))
    xform = ScanLoopInterchange()
    xform.setup_match(sdfg, sdfg.cfg_id, sdfg.node_id(st), {ScanLoopInterchange.map_entry: st.node_id(me),
                                                           ScanLoopInterchange.nsdfg: st.node_id(nsdfg)}, 0)
    with pytest.raises(ValueError, match="map 'cells' around nested SDFG .* cannot be interchanged"):
        xform.apply(st, sdfg)


def test_profitability():
    sdfg = mapped(column("col_profit"), "test_ix_profit")
    st = sdfg.states()[0]
    me = next(n for n in st.nodes() if isinstance(n, dace.nodes.MapEntry))
    nsdfg = next(n for n in st.nodes() if isinstance(n, dace.nodes.NestedSDFG))
    assert not cell_contiguous(st, me, nsdfg)          # [N, K] C order: cells are K apart
    for a in ("x", "out", "aux"):
        sdfg.arrays[a].strides = (1, N)
    assert cell_contiguous(st, me, nsdfg) and profitable(st, me, nsdfg)
    me.map.range = dace.subsets.Range([(0, MIN_CELLS - 2, 1)])
    assert not profitable(st, me, nsdfg)                # small constant domain


# -- icon4py fixtures ------------------------------------------------------------------------------

@pytest.mark.fixtures
@pytest.mark.parametrize("form", ["diagnose_pressure.opt", "solve_tridiagonal_matrix_for_w_back_substitution.opt"])
def test_fixture_bitwise(form):
    fx.require()
    base, new = fx.load(form), fx.load(form)
    assert interchange(new) == 1
    new.validate()
    kw = fx.inputs(form, base)
    fx.assert_bitwise_equal(fx.run(form, base, kw), fx.run(form + ".interchanged", new, kw))


def test_peeled_levels_go_with_the_entry_part():
    """After PeelBoundaryLevels (first level peeled before the loop) the interchange still applies,
    the peeled level running in the entry map; bitwise the original."""
    from sdfg_scan.transformations import PeelBoundaryLevels

    sdfg = mapped(column("col_peel"), "test_ix_peeled")
    assert sdfg.apply_transformations_repeated(PeelBoundaryLevels) >= 1
    assert interchange(sdfg) == 1
    sdfg.validate()
    base, new = mapped(column("col_peel"), "test_ix_peeled_base").compile(), sdfg.compile()
    for ncol, nlev in ((6, 7), (3, 1), (2, 2)):
        kw = inputs(ncol, nlev, seed=ncol + nlev)
        a, b = run(base, kw), run(new, kw)
        for k in a:
            assert np.array_equal(a[k].view(np.uint64), b[k].view(np.uint64)), (k, ncol, nlev)


def test_optimize_leaves_a_refused_scan_lifted():
    """optimize(target="cpu") on cell-contiguous fields: the levels-outside schedule refuses a scan
    whose loop variable is read after the loop; selection says why and picks ``sequential``."""
    import sdfg_scan
    from sdfg_scan.nodes.scan import Scan

    sdfg = mapped(column("col_opt", var_used_after=True), "test_ix_optimize_refused", cell=True)
    report = sdfg_scan.optimize(sdfg, target="cpu")
    assert report.scans_lifted == 1
    from sdfg_scan.choice import refusal
    from sdfg_scan.context import context_of
    refused = []
    for scan, state in [(n, st) for n, st in sdfg.all_nodes_recursive() if isinstance(n, Scan)]:
        why = refusal(scan, "levels_outside", Scan.implementations["levels_outside"], context_of(scan, state))
        if why:
            assert ("loop variable" in why or "columns='single'" in why) and scan.implementation == "sequential"
            refused.append(scan)
    assert refused
    sdfg.validate()


def _frontend_columns(a, b, y, last):
    for i in dace.map[0:N]:
        c = 1.0
        for k in range(K):
            c = c * a[i, k] + b[i, k]
            y[i, k] = c
        last[i] = c


# set here: the module's postponed annotations (``from __future__``) would reach DaCe as strings
_frontend_columns.__annotations__ = dict(a=dace.float64[N, K], b=dace.float64[N, K], y=dace.float64[N, K],
                                         last=dace.float64[N])
_frontend_columns = dace.program(_frontend_columns)


def test_frontend_column_loop_bitwise():
    """A column loop written with DaCe's frontend declares its loop variable as a symbol of the column
    SDFG; the entry and exit parts, which have no loop, must not keep it (else they do not validate)."""
    base = _frontend_columns.to_sdfg()
    base.name = "test_ix_frontend_base"
    new = _frontend_columns.to_sdfg()
    new.name = "test_ix_frontend_new"
    assert interchange(new) == 1
    new.validate()
    base, new = base.compile(), new.compile()
    rng = np.random.default_rng(4)
    for ncol, nlev in ((6, 7), (3, 1), (0, 2)):
        kw = dict(a=rng.random((ncol, nlev)), b=rng.random((ncol, nlev)), y=np.zeros((ncol, nlev)),
                  last=np.zeros(ncol), N=ncol, K=nlev)
        got, want = run(new, kw), run(base, kw)
        for k in want:
            assert np.array_equal(got[k].view(np.uint64), want[k].view(np.uint64)), (k, ncol, nlev)
