"""Helpers of ``ScanOutputsInPlace`` (``transformations/scan_outputs_in_place.py``): the symbolic index
utilities and the read-point and ordering analyses its legality check (``_plan_pair``) relies on, and the
rewrite (``_rewrite``) that ``apply`` performs once a pair ``out -> inp`` is found legal.
"""

from __future__ import annotations

import ast
import itertools

import networkx as nx
import sympy
from dace import data as dt
from dace import dtypes, symbolic
from dace.memlet import Memlet
from dace.sdfg import SDFG, SDFGState, nodes

from sdfg_scan.identity_copies import mutually_exclusive
from sdfg_scan.scan_structure import used_in_control_flow


# ------------------------------------------------------------------------------------------------
def _sym(e):
    return symbolic.pystr_to_symbolic(str(e))


def _eq(a, b) -> bool:
    return sympy.simplify(_sym(a) - _sym(b)) == 0


def _unify(a: dt.Array, b: dt.Array):
    """Symbol renaming ``sigma`` with ``sigma(a.shape) == b.shape`` and ``sigma(a.strides) == b.strides``."""
    if len(a.shape) != len(b.shape):
        return None
    sigma: dict = {}
    for ea, eb in list(zip(a.shape, b.shape, strict=True)) + list(zip(a.strides, b.strides, strict=True)):
        ea, eb = _sym(ea), _sym(eb)
        if sympy.simplify(ea.subs(sigma, simultaneous=True) - eb) == 0:
            continue
        fa = sorted((s for s in ea.free_symbols if s not in sigma), key=str)
        fb = sorted((s for s in eb.free_symbols if s not in sigma.values()), key=str)
        if not fa and eb.is_Symbol and eb not in sigma.values():
            continue  # a runtime stride of inp that the aliasing declaration fixes to ea
        if len(fa) != len(fb) or len(fa) > 4:
            return None
        for perm in itertools.permutations(fb):
            trial = dict(sigma)
            trial.update(zip(fa, perm, strict=True))
            if sympy.simplify(ea.subs(trial, simultaneous=True) - eb) == 0:
                sigma = trial
                break
        else:
            return None
    return sigma


def _point(subset):
    """The index tuple of a single-element subset, else None."""
    if subset is None or subset.num_elements() != 1:
        return None
    return tuple(_sym(r[0]) for r in subset.ndrange())


def _begin(subset):
    return tuple(_sym(r[0]) for r in subset.ndrange())


def _access_nodes(sdfg: SDFG, name: str):
    return [(st, n) for st in sdfg.states() for n in st.data_nodes() if n.data == name]


def _read_points(edge):
    """Every element (index tuple, absolute in the connector) ``edge`` reads, or None when unknown.

    A point memlet reads its point. A Python tasklet that receives a window of the connector reads
    ``window begin + index`` for every subscript of its input connector in the code (parsed, not run);
    any other use of that connector name (passed whole to a call, C++ code) is unknown.
    """
    pt = _point(edge.data.subset)
    if pt is not None:
        return [pt]
    t = edge.dst
    if not isinstance(t, nodes.Tasklet) or t.language != dtypes.Language.Python or edge.dst_conn is None:
        return None
    begin = _begin(edge.data.subset)
    conn, found = edge.dst_conn, []
    for stmt in t.code.code:
        for node in ast.walk(stmt):
            if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and node.value.id == conn:
                idx = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
                if len(idx) != len(begin) or any(isinstance(i, ast.Slice) for i in idx):
                    return None
                found.append(tuple(b + _sym(ast.unparse(i)) for b, i in zip(begin, idx, strict=True)))
    uses = sum(1 for stmt in t.code.code for node in ast.walk(stmt) if isinstance(node, ast.Name) and node.id == conn)
    return found if found and uses == len(found) else None


def _level_read(pt, cell, k, last):
    """``"later"`` when ``pt`` is the own column at a level step ``k`` has not written yet and never
    reaches before the loop ends (``k + v``, ``v > 0``, or a constant level above ``last``), ``"k"`` when
    it may be level ``k`` itself (``k``, or the constant ``last``), None otherwise (a level already
    overwritten in place, another column, unknown)."""
    if len(pt) != 2 or not _eq(pt[0], cell):
        return None
    v = sympy.simplify(pt[1] - k)
    if v.is_Integer:
        return "k" if v == 0 else ("later" if v > 0 else None)
    lev = sympy.simplify(pt[1])
    if lev.free_symbols or not lev.is_Integer:
        return None
    diff = sympy.simplify(lev - _sym(last))
    if not diff.is_Integer or diff < 0:
        return None
    return "k" if diff == 0 else "later"


def _where_order(w: nodes.NestedSDFG, wo: str, copy_state, copy_edge, winp: set[str]):
    """Inside ``W``, once its output ``wo`` is stored straight into ``inp[c, k]``: every read of a connector
    in ``winp`` (bound to ``inp``) must happen before ``wo`` is written. Returns the empty-memlet edges
    ``(state, reader, writer)`` that order the readers before the write, or None when that is impossible
    (a reader after the write, in another state that can run after it, or in control flow)."""
    inner = w.sdfg
    if any(used_in_control_flow(inner, c) for c in winp | {wo}):
        return None
    writes = [(st, n) for st, n in _all_nodes(inner) if n.data == wo and st.in_degree(n) > 0 and st is not copy_state]
    reads = [(st, n) for st, n in _all_nodes(inner) if n.data in winp and st.out_degree(n) > 0]
    if any(st.in_degree(n) > 0 for st, n in _all_nodes(inner) if n.data in winp):
        return None
    order = []
    for sw, wn in writes:
        for sr, rn in reads:
            if sr is copy_state and rn is copy_edge.src:
                continue  # the copy that is removed
            if sr is not sw:
                if mutually_exclusive(sr, sw):
                    continue
                return None
            for reader in sr.successors(rn):
                if reader is wn or nx.has_path(sr.nx, reader, wn):
                    continue
                if nx.has_path(sr.nx, wn, reader):
                    return None
                order.append((sr, reader, wn))
    return order


def zout_subset(state, z, y):
    e = [e for e in state.out_edges(z) if e.src_conn == y][0]
    return e.data.get_dst_subset(e, state)


def _all_nodes(sdfg: SDFG):
    for st in sdfg.all_states():
        for n in st.data_nodes():
            yield st, n


def _inside(block, region) -> bool:
    g = block.parent_graph
    while g is not None:
        if g is region:
            return True
        if isinstance(g, SDFG):
            return False
        g = g.parent_graph
    return False


def _reads_only_at(state, edge, target) -> bool:
    """Whether the memlet ``edge`` (out of a map entry) reads only the element ``target``, also inside the
    nested SDFG it feeds (arrays passed from their origin, indexed by the same symbols)."""
    pt = _point(edge.data.subset)
    if pt is not None:
        return all(_eq(pt[d], target[d]) for d in range(len(target)))
    dst = edge.dst
    if not isinstance(dst, nodes.NestedSDFG) or any(b != 0 for b in _begin(edge.data.subset)):
        return False
    conn = edge.dst_conn
    smap = {_sym(s): _sym(v) for s, v in dst.symbol_mapping.items()}
    for st in dst.sdfg.all_states():
        for n in st.data_nodes():
            if n.data != conn:
                continue
            if st.in_degree(n) > 0:
                return False
            for e in st.out_edges(n):
                ipt = _point(e.data.subset)
                if ipt is not None:
                    ipt = tuple(v.subs(smap, simultaneous=True) for v in ipt)
                    if not all(_eq(ipt[d], target[d]) for d in range(len(target))):
                        return False
                elif not _reads_only_at_nested(st, e, target, smap):
                    return False
    return True


def _reads_only_at_nested(st, e, target, smap) -> bool:
    if not isinstance(e.dst, nodes.NestedSDFG) or any(b != 0 for b in _begin(e.data.subset)):
        return False
    inner_target = target  # symbols pass through unchanged when the nested mapping is the identity
    dst = e.dst
    for s, v in dst.symbol_mapping.items():
        if _sym(s) in set().union(*(t.free_symbols for t in target)) and not _eq(s, v):
            return False
    return _reads_only_at(st, e, inner_target)


# ------------------------------------------------------------------------------------------------
def _rewrite(state: SDFGState, z: nodes.NestedSDFG, plan: dict) -> None:
    root = state.sdfg
    inp, sigma, T, delta = plan["inp"], plan["sigma"], plan["T"], plan["delta"]

    def shift(subset):
        return subset.__class__([(r[0] + delta[d], r[1] + delta[d], r[2]) for d, r in enumerate(subset.ndrange())])

    # 1. out -> inp on the scan's write path (sigma renames out's symbols to inp's)
    plan["out_node"].data = inp
    for e in plan["out_path"]:
        e.data.data = inp
        e.data.subset = e.data.subset.__class__(
            [tuple(_sym(v).subs(sigma, simultaneous=True) for v in r) for r in e.data.subset.ndrange()])
    for s, v in list(z.symbol_mapping.items()):
        z.symbol_mapping[s] = _sym(v).subs(sigma, simultaneous=True)
    for reader in plan["order"]:  # inp[c, k] is read before the map iteration stores its new value
        state.add_edge(reader, None, plan["w"], None, Memlet())
    # 2. T -> inp (shifted by delta) on the producer and consumer paths
    for _, tn in plan["tnodes"]:
        for e in list(state.in_edges(tn)) + list(state.out_edges(tn)):
            for pe in [t.edge for t in state.memlet_tree(e).root().traverse_children(include_self=True)]:
                if pe.data.data == T:
                    pe.data.data = inp
                    pe.data.subset = shift(pe.data.subset)
                elif pe.data.other_subset is not None:
                    pe.data.other_subset = shift(pe.data.other_subset)
        tn.data = inp
    dinp = root.arrays[inp]
    for conn in plan["tconns"]:
        desc = z.sdfg.arrays[conn]
        for s in set().union(*(_sym(v).free_symbols for v in dinp.strides)):
            if str(s) not in z.sdfg.symbols:
                z.sdfg.add_symbol(str(s), root.symbols.get(str(s), dtypes.int32))
            z.symbol_mapping.setdefault(str(s), s)
        desc.strides = tuple(_sym(v) for v in dinp.strides)
    if not _access_nodes(root, T):
        root.remove_data(T, validate=False)
    # 3. the scan output is written inside N, only where N does not copy its input through
    yedge = plan["yedge"]
    if yedge.src is plan["n"]:  # o writes y[k] directly: drop the copy, the element keeps its value
        _remove_edge_and_isolated(plan["copy_state"], plan["copy_edge"])
        yedge.data.dynamic = True
    else:
        _write_y_in_branches(plan)
    # 4. the where map stores W's output straight into inp[c, k]; W's identity else branch is dropped
    _where_in_place(state, plan)


def _remove_edge_and_isolated(st, edge) -> None:
    st.remove_edge(edge)
    for node in (edge.src, edge.dst):
        if node in st.nodes() and st.degree(node) == 0:
            st.remove_node(node)


def _where_in_place(state: SDFGState, plan: dict) -> None:
    root, w, wedge, l_edge, lnode = state.sdfg, plan["w"], plan["wedge"], plan["l_edge"], plan["lnode"]
    for st, reader, writer in plan["w_order"]:
        st.add_edge(reader, None, writer, None, Memlet())
    _remove_edge_and_isolated(*plan["w_copy"])
    target = l_edge.data.get_dst_subset(l_edge, state)
    state.add_edge(w, wedge.src_conn, l_edge.dst, l_edge.dst_conn, Memlet(data=plan["inp"], subset=str(target),
                                                                           dynamic=True))
    state.remove_node(lnode)
    for e in state.out_edges(plan["m1_exit"]):
        if e.src_conn == "OUT_" + l_edge.dst_conn[3:]:
            e.data.dynamic = True
    if not _access_nodes(root, lnode.data):
        root.remove_data(lnode.data, validate=False)


def _write_y_in_branches(plan: dict) -> None:
    body, yw, yedge, n, o, y = plan["body"], plan["yw"], plan["yedge"], plan["n"], plan["o"], plan["y"]
    ysub = yedge.data.get_dst_subset(yedge, body)
    body.remove_edge(yedge)
    inner = n.sdfg
    yname = inner.add_datadesc(y, dt.Scalar(inner.arrays[o].dtype), find_new_name=True)
    n.add_out_connector(yname)
    for st, wnode in plan["other_writes"]:
        st.add_edge(wnode, None, st.add_access(yname), None, Memlet(data=o, subset="0", other_subset="0"))
    body.add_edge(n, yname, yw, None, Memlet(data=y, subset=str(ysub), dynamic=True))
