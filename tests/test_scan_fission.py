"""ScanFission: independent carry groups become separate scans, bitwise; refused cases leave the SDFG unchanged."""

from __future__ import annotations

import copy
import json

import dace
import hand_columns as hc
import icon4py_fixtures as fx
import numpy as np
import pytest

from sdfg_scan.nodes.scan import Scan
from sdfg_scan.scan_sites import find_scans
from sdfg_scan.transformations import LiftCellMap, LiftScans, ScanFission, ScanFusion
from sdfg_scan.transformations.scan_fission import groups

N, K = dace.symbol("N"), dace.symbol("K")
ARRAYS = {"x": "X", "out": "OUT", "aux": "AUX"}
SCALARS = {"last": "LAST", "last2": "LAST2"}


def program(name: str, **col_kw) -> dace.SDFG:
    """``map i -> hand_columns.column(**col_kw)`` (gt4py-shaped), lifted to a ``Scan`` node."""
    sdfg = dace.SDFG(name)
    sdfg.using_explicit_control_flow = True
    for arr in ARRAYS.values():
        sdfg.add_array(arr, [N, K], dace.float64)
    for arr in list(SCALARS.values()) + ["INIT"]:
        sdfg.add_array(arr, [N], dace.float64)
    st = sdfg.add_state("main", is_start_block=True)
    col = hc.column(name + "_col", **col_kw)
    me, mx = st.add_map("cols", {"i": "0:N"})
    ns = st.add_nested_sdfg(col, {"x": None, "init": None}, {"out": None, "aux": None, "last": None, "last2": None},
                            symbol_mapping={"K": K})
    st.add_memlet_path(st.add_read("X"), me, ns, dst_conn="x", memlet=dace.Memlet("X[i, 0:K]"))
    st.add_memlet_path(st.add_read("INIT"), me, ns, dst_conn="init", memlet=dace.Memlet("INIT[i]"))
    for c, arr in ARRAYS.items():
        if c != "x":
            st.add_memlet_path(ns, mx, st.add_write(arr), src_conn=c, memlet=dace.Memlet(f"{arr}[i, 0:K]"))
    for c, arr in SCALARS.items():
        st.add_memlet_path(ns, mx, st.add_write(arr), src_conn=c, memlet=dace.Memlet(f"{arr}[i]"))
    sdfg.validate()
    assert sdfg.apply_transformations_repeated(LiftScans) == 1
    return sdfg


def _run(csdfg, nlev, ncol=4, seed=2):
    rng = np.random.default_rng(seed)
    args = {"X": rng.uniform(0.0, 1.0, (ncol, nlev)), "INIT": rng.uniform(0.0, 1.0, ncol)}
    args.update({a: np.full((ncol, nlev), -7.0) for a in ("OUT", "AUX")})
    args.update({a: np.full(ncol, -5.0) for a in ("LAST", "LAST2")})
    csdfg(**args, N=ncol, K=nlev)
    if nlev == 0:
        del args["LAST"]  # reads a never-written temporary in the original
    return args


def _scans(sdfg):
    return [n for n, _ in sdfg.all_nodes_recursive() if isinstance(n, Scan)]


def test_groups_of_hand_columns():
    assert len(groups(hc.column("g0"))) == 1
    g = groups(hc.column("g1", extra="delay_line"))
    assert len(g) == 2 and {"d", "v", "aux"} <= g[0] and {"c", "out", "last"} <= g[1]
    assert all("x" in grp for grp in g)  # the shared read-only input goes to both


@pytest.mark.parametrize("backward", [False, True], ids=["forward", "backward"])
def test_split_delay_line_group_bitwise_symbolic_k(backward):
    name = f"fission_{int(backward)}"
    sdfg = program(name, backward=backward, extra="delay_line")
    split = copy.deepcopy(sdfg)
    split.name = name + "_split"
    assert split.apply_transformations_repeated(ScanFission) == 1
    split.validate()
    parts = _scans(split)
    assert len(parts) == 2
    assert sorted(sorted(p.out_connectors) for p in parts) == [["aux", "last2"], ["last", "out"]]
    a, b = sdfg.compile(), split.compile()
    for nlev in (0, 1, 2, 9):
        want, got = _run(a, nlev), _run(b, nlev)
        for k in want:
            assert np.array_equal(want[k], got[k]), (k, nlev)


def test_split_scan_that_owns_its_cell_map_bitwise():
    """``columns="cells"`` (after ``LiftCellMap``): each part owns the same map over cells with its own
    connectors' per-cell subsets (the parts had none and did not validate). ``ScanFusion`` leaves such
    parts alone (it fused them into a node without a map over cells, which did not validate either)."""
    sdfg = program("fission_cells", extra="delay_line")
    split = copy.deepcopy(sdfg)
    split.name = "fission_cells_split"
    assert split.apply_transformations_repeated(LiftCellMap) == 1
    assert split.apply_transformations_repeated(ScanFission) == 1
    split.validate()
    parts = _scans(split)
    assert [(p.columns, p.cell_params, p.cell_ranges) for p in parts] == [("cells", ["i"], ["0:N"])] * 2
    assert all(set(p.cell_subsets) == set(p.in_connectors) | set(p.out_connectors) for p in parts)
    before = json.dumps(split.to_json(), sort_keys=True)
    assert split.apply_transformations_repeated(ScanFusion) == 0
    assert json.dumps(split.to_json(), sort_keys=True) == before
    a, b = sdfg.compile(), split.compile()
    for nlev in (0, 1, 9):
        want, got = _run(a, nlev), _run(b, nlev)
        for k in want:
            assert np.array_equal(want[k], got[k]), (k, nlev)


def _parts_in_one_map(name: str) -> dace.SDFG:
    """``program(name, extra="delay_line")`` split by ``ScanFission``: two parts inside gt4py's one map."""
    sdfg = program(name, extra="delay_line")
    assert sdfg.apply_transformations_repeated(ScanFission) == 1
    return sdfg


def test_parts_sharing_a_map_each_take_it_bitwise():
    """The parts ``ScanFission`` leaves inside gt4py's map over cells each take the map (``LiftCellMap``
    lifts a scan out of a map that holds other, independent work), so each gets a schedule over cells."""
    sdfg = program("fission_share", extra="delay_line")
    split = _parts_in_one_map("fission_share_split")
    assert split.apply_transformations_repeated(LiftCellMap) == 2
    split.validate()
    st = next(s for s in split.states() if _scans_in(s))
    assert not any(isinstance(n, dace.nodes.MapEntry) for n in st.nodes())
    assert [p.columns for p in _scans(split)] == ["cells", "cells"]
    a, b = sdfg.compile(), split.compile()
    for nlev in (0, 1, 9):
        want, got = _run(a, nlev), _run(b, nlev)
        for k in want:
            assert np.array_equal(want[k], got[k]), (k, nlev)


def test_part_reading_what_the_other_writes_keeps_the_map():
    """A part that reads a container the map's other work writes (here: the other part's ``aux`` redirected
    into ``X``) is not moved out of the map; the SDFG is untouched."""
    sdfg = _parts_in_one_map("fission_share_conflict")
    st = next(s for s in sdfg.states() if _scans_in(s))
    mx = next(n for n in st.nodes() if isinstance(n, dace.nodes.MapExit))
    inner = next(e for e in st.in_edges(mx) if e.data.data == "AUX")
    outer = next(e for e in st.out_edges(mx) if e.data.data == "AUX")
    inner.data.data, outer.data.data = "X", "X"
    st.remove_edge(outer)
    st.add_edge(mx, outer.src_conn, st.add_write("X"), None, outer.data)
    st.remove_node(outer.dst)
    sdfg.validate()
    before = json.dumps(sdfg.to_json(), sort_keys=True)
    assert sdfg.apply_transformations_repeated(LiftCellMap) == 0
    assert json.dumps(sdfg.to_json(), sort_keys=True) == before


def _scans_in(state) -> list:
    return [n for n in state.nodes() if isinstance(n, Scan)]


GUARDS = {
    "groups: one recurrence": dict(),
    "groups: the extra slot is used by the main recurrence": dict(extra="delay_line", s_read_after_n=True),
    "_plain_control_flow: an interstate assignment in the loop": dict(extra="delay_line", cf_uses="d"),
}


@pytest.mark.parametrize("kw", list(GUARDS.values()), ids=list(GUARDS))
def test_does_not_apply(kw):
    sdfg = program("fission_guard", **kw)
    before = json.dumps(sdfg.to_json(), sort_keys=True)
    assert sdfg.apply_transformations_repeated(ScanFission) == 0
    assert json.dumps(sdfg.to_json(), sort_keys=True) == before


def test_outer_aliasing_is_refused():
    """Two groups writing the same outer container: refused."""
    sdfg = program("fission_alias", extra="delay_line")
    st = next(s for s in sdfg.states() if any(isinstance(n, Scan) for n in s.nodes()))
    for e in st.edges():  # route LAST2 (group d) into LAST (group c)
        if e.data.data == "LAST2":
            e.data.data = "LAST"
    for n in st.data_nodes():
        if n.data == "LAST2":
            n.data = "LAST"
    before = json.dumps(sdfg.to_json(), sort_keys=True)
    assert sdfg.apply_transformations_repeated(ScanFission) == 0
    assert json.dumps(sdfg.to_json(), sort_keys=True) == before


@pytest.mark.fixtures
def test_graupel_groups_reported():
    """graupel's four species sit under one ``activated`` condition (an OR over all species) inside one
    nested SDFG: one group, so ScanFission refuses (see the report printed)."""
    sdfg = fx.load("graupel_run.opt_nohooks")
    (site,) = find_scans(sdfg)
    g = groups(site.node.sdfg)
    print(f"graupel_run.opt_nohooks: {len(g)} independent group(s), {len(site.structure.carries)} carries")
    assert len(g) == 1
    assert sdfg.apply_transformations_repeated(LiftScans) == 1
    assert sdfg.apply_transformations_repeated(ScanFission) == 0
