"""``ScanFission``: a ``Scan`` whose carries split into independent recurrences becomes several scans."""

from __future__ import annotations

import copy
import re

import dace
from dace import properties
from dace.sdfg import nodes
from dace.sdfg import utils as sdutil
from dace.sdfg.state import ConditionalBlock, ControlFlowRegion
from dace.transformation import transformation as xf

from sdfg_scan.nodes.scan import Scan, stride_symbol
from sdfg_scan.scan_structure import NotAScan, ScanStructure, analyze_scan


@properties.make_properties
class ScanFission(xf.SingleStateTransformation):
    """Split a ``Scan`` node into one ``Scan`` per independent group of carries and outputs.

    Supported form: :class:`sdfg_scan.Scan` nodes (``columns="single"`` lifted gt4py scans,
    ``columns="cells"`` ones that own their map over cells, each part then owning the same map with its
    connectors' per-cell subsets, and ``columns="map"`` frontend scans).

    Dependence analysis (:func:`groups`): containers of the body are joined when one statement
    touches both (a tasklet, a nested SDFG -- as one unit, every connector -- or a copy), when a
    ``ConditionalBlock`` of the loop holds both (a condition's inputs are dependencies of everything
    written under it, and everything written under one condition stays together). Read-only inputs
    join nothing: every group may read them. Each resulting group holds its carries, its per-level
    outputs and its temporaries; no value flows between groups within a level or across levels::

        before                                    after
        for k: a = f(a, x[k]); ya[k] = a          for k: a = f(a, x[k]); ya[k] = a
               b = g(b, x[k]); yb[k] = b          for k: b = g(b, x[k]); yb[k] = b

    Each new body is a copy of the original with the other groups' statements removed (same
    arithmetic, same order within the group): bitwise identical results.

    Legality checks (``can_be_applied``):

    - ``analyze_scan``: the body is a strict column scan (no peeled prologue);
    - ``_plain_control_flow``: no interstate edge of the body assigns symbols or has a condition
      (their dependences are not tracked);
    - ``groups``: at least two groups;
    - ``_outer_independent``: no container the node reads outside is written by it, and no two groups
      write the same outside container.

    No options.
    """

    scan = xf.PatternNode(Scan)

    @classmethod
    def expressions(cls):
        return [sdutil.node_path_graph(cls.scan)]

    def can_be_applied(self, graph, expr_index, sdfg, permissive=False):
        return _plan(graph, self.scan) is not None

    def apply(self, graph: dace.SDFGState, sdfg: dace.SDFG):
        node = self.scan
        parts = _plan(graph, node)
        assert parts is not None  # can_be_applied held
        scope = graph.entry_node(node)
        scope_exit = graph.exit_node(scope) if scope is not None else None
        new_nodes = []
        for i, conns in enumerate(parts):
            body = _pruned_body(node, conns)
            ins = [c for c in node.in_connectors if c in conns]
            outs = [c for c in node.out_connectors if c in conns]
            n = Scan(f"{node.label}_part{i}", body, ins, outs, symbol_mapping=dict(node.symbol_mapping),
                     columns=node.columns, axis=node.axis, emit=node.emit)
            n.implementation, n.schedule = node.implementation, node.schedule
            n.reproducibility, n.debuginfo = node.reproducibility, node.debuginfo
            if node.columns == "cells":   # every part runs over the node's map over cells
                n.cell_params, n.cell_ranges = list(node.cell_params), list(node.cell_ranges)
                n.cell_subsets = {c: v for c, v in node.cell_subsets.items() if c in ins or c in outs}
            graph.add_node(n)
            for e in graph.in_edges(node):
                if e.dst_conn is None or e.dst_conn in ins:
                    graph.add_edge(e.src, e.src_conn, n, e.dst_conn, copy.deepcopy(e.data))
            for e in graph.out_edges(node):
                if e.src_conn is None or e.src_conn in outs:
                    graph.add_edge(n, e.src_conn, e.dst, e.dst_conn, copy.deepcopy(e.data))
            if scope is not None and graph.in_degree(n) == 0:   # a part with no inputs stays in the map scope
                graph.add_nedge(scope, n, dace.Memlet())
            if scope_exit is not None and graph.out_degree(n) == 0:
                graph.add_nedge(n, scope_exit, dace.Memlet())
            new_nodes.append(n)
        graph.remove_node(node)
        sdfg.root_sdfg.reset_cfg_list()
        return new_nodes


# ------------------------------------------------------------------------------------------------
# dependence analysis
# ------------------------------------------------------------------------------------------------
class _UnionFind:
    def __init__(self) -> None:
        self.parent: dict = {}

    def find(self, x):
        self.parent.setdefault(x, x)
        while self.parent[x] != x:
            self.parent[x] = self.parent[self.parent[x]]
            x = self.parent[x]
        return x

    def union(self, *xs):
        xs = [x for x in xs if x is not None]
        for x in xs[1:]:
            ra, rb = self.find(xs[0]), self.find(x)
            if ra != rb:
                self.parent[rb] = ra


def _read_only_inputs(body: dace.SDFG) -> set[str]:
    written = set()
    for st in body.all_states():
        for n in st.data_nodes():
            if any(not e.data.is_empty() for e in st.in_edges(n)):
                written.add(n.data)
    return {k for k, d in body.arrays.items() if not d.transient and k not in written}


def _state_tokens(st: dace.SDFGState, uf: _UnionFind, inputs: set[str]) -> None:
    """Join, per edge, the containers and statements it connects (read-only inputs join nothing)."""
    def token(n):
        if isinstance(n, nodes.AccessNode):
            return None if n.data in inputs else ("data", n.data)
        return ("node", id(n))

    for n in st.nodes():
        uf.find(token(n)) if token(n) is not None else None
    for e in st.edges():
        uf.union(token(e.src), token(e.dst))


def _condition_names(blk: ConditionalBlock) -> set[str]:
    names = set()
    for cond, _ in blk.branches:
        if cond is not None:
            names |= set(re.findall(r"[A-Za-z_]\w*", cond.as_string))
    return names


def _block_tokens(blk, body, uf: _UnionFind, inputs: set[str]) -> None:
    if isinstance(blk, dace.SDFGState):
        _state_tokens(blk, uf, inputs)
        return
    members: list[tuple[str, int | str]] = [("block", id(blk))]
    for st in blk.all_states():
        _state_tokens(st, uf, inputs)
        members += [("data", n.data) for n in st.data_nodes() if n.data not in inputs]
    if isinstance(blk, ConditionalBlock):
        members += [("data", nm) for nm in _condition_names(blk) if nm in body.arrays and nm not in inputs]
    uf.union(*members)


def _dependence(body: dace.SDFG, s: ScanStructure) -> tuple[_UnionFind, set[str]]:
    uf, inputs = _UnionFind(), _read_only_inputs(body)
    for blk in list(s.entry_states) + list(s.body_blocks) + list(s.exit_states):
        _block_tokens(blk, body, uf, inputs)
    for name in body.arrays:
        if name not in inputs:
            uf.find(("data", name))
    return uf, inputs


def groups(body: dace.SDFG) -> list[set[str]]:
    """The independent groups of a column body: sets of containers (read-only inputs in every group
    that reads them). Groups without a non-transient container (dead code) join the first group.
    Raises :class:`NotAScan` when the body is not a strict column scan."""
    s = analyze_scan(body)
    uf, inputs = _dependence(body, s)
    comps: dict = {}
    for name in body.arrays:
        if name not in inputs:
            comps.setdefault(uf.find(("data", name)), set()).add(name)
    live = [c for c in comps.values() if any(not body.arrays[n].transient for n in c)]
    dead = [c for c in comps.values() if all(body.arrays[n].transient for n in c)]
    live.sort(key=lambda c: min(c))
    if live:
        for c in dead:
            live[0] |= c
    else:
        live = [set().union(*dead)] if dead else [set()]
    # the read-only inputs each group reads
    for st in body.all_states():
        for n in st.data_nodes():
            if n.data not in inputs:
                continue
            for e in st.out_edges(n):
                g = _group_of_token(uf, e.dst, inputs)
                for grp in live:
                    if g is not None and any(uf.find(("data", x)) == g for x in grp if x not in inputs):
                        grp.add(n.data)
    unused = inputs - set().union(*live)
    live[0] |= unused
    return live


def _group_of_token(uf: _UnionFind, n, inputs):
    if isinstance(n, nodes.AccessNode):
        return None if n.data in inputs else uf.find(("data", n.data))
    return uf.find(("node", id(n)))


def _plain_control_flow(body: dace.SDFG) -> bool:
    for e in body.all_interstate_edges():
        if e.data.assignments or not e.data.is_unconditional():
            return False
    return True


def _plan(state: dace.SDFGState, node: Scan) -> list[set[str]] | None:
    if node.body is None:
        return None
    try:
        analyze_scan(node.body)
    except NotAScan:
        return None
    if not _plain_control_flow(node.body):
        return None
    grps = groups(node.body)
    if len(grps) < 2:
        return None
    conns = set(node.in_connectors) | set(node.out_connectors)
    parts = [g & conns | {n for n in g if node.body.arrays[n].transient} for g in grps]
    if not _outer_independent(state, node, parts):
        return None
    return parts


def _outer_name(state, e, src: bool):
    n = state.memlet_path(e)[0 if src else -1]
    n = n.src if src else n.dst
    return n.data if isinstance(n, nodes.AccessNode) else e.data.data


def _outer_independent(state, node: Scan, parts) -> bool:
    written: dict[str, int] = {}
    for e in state.out_edges(node):
        if e.data.is_empty():
            continue
        owner = next(i for i, p in enumerate(parts) if e.src_conn in p)
        name = _outer_name(state, e, src=False)
        if written.setdefault(name, owner) != owner:
            return False
    for e in state.in_edges(node):
        if not e.data.is_empty() and _outer_name(state, e, src=True) in written:
            return False
    return True


# ------------------------------------------------------------------------------------------------
# apply: one pruned copy of the body per group
# ------------------------------------------------------------------------------------------------
def _pruned_body(node: Scan, keep: set[str]) -> dace.SDFG:
    body = copy.deepcopy(node.body)
    s = analyze_scan(body)
    uf, inputs = _dependence(body, s)
    mine = {uf.find(("data", n)) for n in keep if n not in inputs}

    def prune_state(st: dace.SDFGState):
        drop = [n for n in st.nodes()
                if not isinstance(n, nodes.AccessNode) or n.data not in inputs]
        drop = [n for n in drop if _group_of_token(uf, n, inputs) not in mine]
        st.remove_nodes_from(drop)
        st.remove_nodes_from([n for n in st.data_nodes() if n.data in inputs and st.degree(n) == 0])

    for blk in list(s.entry_states) + list(s.exit_states):
        prune_state(blk)
    for blk in list(s.body_blocks):
        if isinstance(blk, dace.SDFGState):
            prune_state(blk)
        elif uf.find(("block", id(blk))) not in mine:
            _replace_by_empty_state(s.loop, blk)
    used = {n.data for st in body.all_states() for n in st.data_nodes()}
    for blk in body.all_control_flow_blocks():
        if isinstance(blk, ConditionalBlock):
            used |= _condition_names(blk) & set(body.arrays)
    for name in [k for k in body.arrays if k not in used and not (k in keep and not body.arrays[k].transient)]:
        body.remove_data(name, validate=False)
        if stride_symbol(name) in body.symbols:
            body.remove_symbol(stride_symbol(name))
    for st in body.all_states():
        for n in st.nodes():
            if isinstance(n, nodes.NestedSDFG):
                n.sdfg.parent, n.sdfg.parent_sdfg, n.sdfg.parent_nsdfg_node = st, body, n
    body.reset_cfg_list()
    return body


def _replace_by_empty_state(region: ControlFlowRegion, blk) -> None:
    was_start = region.start_block is blk   # asked first: with the new, unconnected state there are two sources
    st = region.add_state(f"{blk.label}_elsewhere")
    for e in region.in_edges(blk):
        region.add_edge(e.src, st, e.data)
    for e in region.out_edges(blk):
        region.add_edge(st, e.dst, e.data)
    region.remove_node(blk)
    if was_start:
        region.start_block = region.node_id(st)


__all__ = ["ScanFission", "groups"]
