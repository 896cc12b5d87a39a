"""``ScanFusion``: two ``Scan`` nodes over the same levels become one scan whose loop runs both bodies."""

from __future__ import annotations

import copy
import re

import dace
import networkx as nx
from dace import properties, symbolic
from dace.sdfg import nodes
from dace.sdfg.graph import OrderedDiGraph
from dace.sdfg.state import ConditionalBlock
from dace.transformation import transformation as xf

from sdfg_scan.names import body_names, fresh_name
from sdfg_scan.nodes.scan import LEVELS, Scan, stride_symbol
from sdfg_scan.scan_structure import NotAScan, ScanStructure, analyze_scan


@properties.make_properties
class ScanFusion(xf.SingleStateTransformation):
    """Fuse two ``Scan`` library nodes of one state into one ``Scan`` whose level loop runs both bodies.

    Supported form: two :class:`sdfg_scan.Scan` nodes (gt4py scans after ``LiftScans``, with
    ``columns="single"`` inside the same map over cells; or frontend scans, ``columns="map"``, in the
    same scope). gt4py's un-lifted scan nested SDFGs are not matched: lift them first (the
    ``optimize`` pipeline does). Scans that own their map over cells (``columns="cells"``, after
    ``LiftCellMap``) are not matched either: ``optimize`` fuses before it gives the scans their maps.

    Matched pattern: any two ``Scan`` nodes ``first`` and ``second`` of one state, either independent
    or producer -> consumer through access nodes (``first -> o -> second``, ``second`` reading the
    per-level output ``o`` of ``first`` only at the current level)::

        before                                    after
        for k in levels: c1, y1[k] = f(c1, x[k])  for k in levels:
        for k in levels: c2, y2[k] = g(c2, y1[k])     c1, y1[k] = f(c1, x[k])   # first's body
                                                      c2, y2[k] = g(c2, y1[k])  # second's body, same k

    The fused body is: first's entry states, second's entry states, one loop whose body is first's
    loop body followed by second's, first's exit states, second's exit states. Second's names that
    clash with first's are renamed; its loop variable becomes first's; a linked input becomes first's
    output container. Every original output stays an output. Bitwise identical results.

    Legality checks (``can_be_applied``):

    - ``_same_kind``: same ``columns`` (``"single"`` or ``"map"``), ``axis``, ``emit``, scope, the same
      pinned ``implementation`` and ``reproducibility`` (the fused node keeps one of each); both bodies
      are strict column scans (no peeled prologue) with one sink block in the loop;
    - ``_same_levels``: same direction and the same level range ``[start, stop)`` once the bodies'
      symbols are mapped to the enclosing SDFG (``columns="map"``: the same level count);
    - ``_links``: every access node between the two is written only by ``first`` and read by
      ``second`` with the same subset; ``first`` writes it only at the current level, ``second``
      reads it only at the current level inside the loop (not as a whole column, not at ``k +/- o``,
      not in its entry or exit states, not in control flow); same descriptor shape;
    - ``_no_other_dependence``: no other path between the two nodes in either direction, no
      container written by one and accessed by the other except through the links.

    No options.
    """

    first = xf.PatternNode(Scan)
    second = xf.PatternNode(Scan)

    @classmethod
    def expressions(cls):
        g = OrderedDiGraph()
        g.add_node(cls.first)
        g.add_node(cls.second)
        return [g]

    def can_be_applied(self, graph, expr_index, sdfg, permissive=False):
        return _plan(graph, self.first, self.second) is not None

    def apply(self, graph: dace.SDFGState, sdfg: dace.SDFG):
        plan = _plan(graph, self.first, self.second)
        assert plan is not None  # can_be_applied held
        return _fuse(graph, sdfg, plan)


# ------------------------------------------------------------------------------------------------
# legality
# ------------------------------------------------------------------------------------------------
class _Plan:
    def __init__(self, a, b, sa, sb, links):
        self.a, self.b, self.sa, self.sb = a, b, sa, sb
        self.links = links  # [(access node, a_out connector, b_in connector, edge A->AN, edge AN->B)]


def _plan(state: dace.SDFGState, a: Scan, b: Scan) -> _Plan | None:
    if a is b or not _same_kind(state, a, b):
        return None
    try:
        sa, sb = analyze_scan(a.body), analyze_scan(b.body)
    except NotAScan:
        return None
    if not all(_one_sink(s) for s in (sa, sb)):
        return None
    if not _same_levels(state, a, b, sa, sb):
        return None
    links = _links(state, a, b, sa, sb)
    if links is None:
        return None
    if not _no_other_dependence(state, a, b, links):
        return None
    return _Plan(a, b, sa, sb, links)


def _same_kind(state, a: Scan, b: Scan) -> bool:
    if a.body is None or b.body is None:
        return False
    if (a.columns, a.axis, a.emit) != (b.columns, b.axis, b.emit) or a.columns not in ("single", "map"):
        return False   # columns="cells": the fused node would need one map over cells for both
    if (a.implementation, a.reproducibility) != (b.implementation, b.reproducibility):
        return False   # the fused node has one pin and one class: a user's choice for either would be lost
    sd = state.scope_dict()
    if sd[a] is not sd[b]:
        return False
    if a.columns == "single":
        return isinstance(sd[a], nodes.MapEntry)
    return True


def _one_sink(s: ScanStructure) -> bool:
    return len([blk for blk in s.loop.nodes() if s.loop.out_degree(blk) == 0]) == 1


def _outer(node: Scan, expr):
    expr = symbolic.pystr_to_symbolic(str(expr))
    repl = {symbolic.pystr_to_symbolic(k): symbolic.pystr_to_symbolic(str(v)) for k, v in node.symbol_mapping.items()}
    return expr.subs(repl, simultaneous=True) if repl else expr


def _equal(x, y) -> bool:
    try:
        return symbolic.simplify(symbolic.pystr_to_symbolic(str(x)) - symbolic.pystr_to_symbolic(str(y))) == 0
    except (TypeError, ValueError):
        return False


def _same_levels(state, a, b, sa: ScanStructure, sb: ScanStructure) -> bool:
    if sa.direction != sb.direction:
        return False
    if a.columns == "map":
        try:
            if not _equal(a.levels(state), b.levels(state)):
                return False
        except (ValueError, KeyError):
            return False
        return _equal(sa.start, sb.start) and _equal(sa.stop, sb.stop)
    return _equal(_outer(a, sa.start), _outer(b, sb.start)) and _equal(_outer(a, sa.stop), _outer(b, sb.stop))


def _at_level(subset, var: str) -> bool:
    if subset is None or subset.dims() != 1 or subset.num_elements() != 1:
        return False
    return _equal(subset.min_element()[0], var)


def _loop_states(s: ScanStructure) -> set:
    return {st for st in s.loop.all_states()}


def _in_control_flow(body: dace.SDFG, name: str) -> bool:
    for e in body.all_interstate_edges():
        if name in e.data.free_symbols:
            return True
    for blk in body.all_control_flow_blocks():
        if isinstance(blk, ConditionalBlock):
            for cond, _ in blk.branches:
                if cond is not None and name in re.findall(r"[A-Za-z_]\w*", cond.as_string):
                    return True
    return False


def _accessed_only_at_level(s: ScanStructure, name: str, write: bool) -> bool:
    """``name`` is accessed only in the loop; its writes (``write``) or reads are all at ``[k]``."""
    inside = _loop_states(s)
    if _in_control_flow(s.sdfg, name):
        return False
    for st in s.sdfg.all_states():
        for n in st.data_nodes():
            if n.data != name:
                continue
            if st not in inside:
                return False
            ins = [e for e in st.in_edges(n) if not e.data.is_empty()]
            outs = [e for e in st.out_edges(n) if not e.data.is_empty()]
            if write:
                if not all(_at_level(e.data.get_dst_subset(e, st), s.variable) for e in ins):
                    return False
            else:
                if ins or not all(_at_level(e.data.get_src_subset(e, st), s.variable) for e in outs):
                    return False
    return True


def _links(state, a: Scan, b: Scan, sa, sb):
    links = []
    for e1 in state.out_edges(a):
        an = e1.dst
        if not isinstance(an, nodes.AccessNode) or not any(e.dst is b for e in state.out_edges(an)):
            continue
        if state.in_degree(an) != 1 or e1.data.is_empty():
            return None
        for e2 in state.out_edges(an):
            if e2.dst is not b:
                continue
            if e2.data.is_empty() or e2.dst_conn is None:
                return None
            s1, s2 = e1.data.get_dst_subset(e1, state), e2.data.get_src_subset(e2, state)
            if s1 is None or s2 is None or str(s1) != str(s2):
                return None
            ao, bi = e1.src_conn, e2.dst_conn
            da, db = a.body.arrays[ao], b.body.arrays[bi]
            if da.dtype != db.dtype or len(da.shape) != len(db.shape):
                return None
            if a.columns == "single" and not all(_equal(_outer(a, x), _outer(b, y))
                                                 for x, y in zip(list(da.shape) + list(da.strides),
                                                                 list(db.shape) + list(db.strides), strict=True)):
                return None
            if a.columns == "map" and not all(_equal(x, y) for x, y in zip(da.shape, db.shape, strict=True)):
                return None
            if not _accessed_only_at_level(sa, ao, write=True) or not _accessed_only_at_level(sb, bi, write=False):
                return None
            links.append((an, ao, bi, e1, e2))
    return links


def _outer_data(state, node) -> tuple[set, set]:
    reads, writes = set(), set()
    for e in state.in_edges(node):
        if not e.data.is_empty():
            src = state.memlet_path(e)[0].src
            reads.add(src.data if isinstance(src, nodes.AccessNode) else e.data.data)
    for e in state.out_edges(node):
        if not e.data.is_empty():
            dst = state.memlet_path(e)[-1].dst
            writes.add(dst.data if isinstance(dst, nodes.AccessNode) else e.data.data)
    return reads, writes


def _no_other_dependence(state, a, b, links) -> bool:
    link_nodes = {id(ln[0]) for ln in links}
    g = nx.DiGraph()
    g.add_nodes_from(state.nodes())
    for e in state.edges():
        if not (id(e.src) in link_nodes and e.dst is b):
            g.add_edge(e.src, e.dst)
    if nx.has_path(g, a, b) or nx.has_path(g, b, a):
        return False
    ra, wa = _outer_data(state, a)
    rb, wb = _outer_data(state, b)
    link_data = {ln[0].data for ln in links}
    if wa & wb or wb & ra:
        return False
    # the consumer may read the producer's containers only through the links
    for e in state.in_edges(b):
        if e.data.is_empty():
            continue
        src = state.memlet_path(e)[0].src
        data = src.data if isinstance(src, nodes.AccessNode) else e.data.data
        if data in wa and not (id(e.src) in link_nodes and data in link_data):
            return False
    return True


# ------------------------------------------------------------------------------------------------
# apply: merge the bodies
# ------------------------------------------------------------------------------------------------
def _names(body: dace.SDFG, s: ScanStructure) -> set[str]:
    return body_names(body) | {s.variable}


def _fresh(base: str, taken: set[str]) -> str:
    return fresh_name(base, taken, "_f", start=1)


def _renaming(plan: _Plan) -> dict[str, str]:
    """Names of the second body -> names in the fused body."""
    a, b, sa, sb = plan.a, plan.b, plan.sa, plan.sb
    names_a, names_b = _names(a.body, sa), _names(b.body, sb)
    taken = names_a | names_b
    fixed = {sb.variable: sa.variable}
    for _, ao, bi, _, _ in plan.links:
        fixed[bi] = ao
        if a.columns == "map":
            fixed[stride_symbol(bi)] = stride_symbol(ao)
    repl = dict(fixed)
    targets = set(fixed.values())
    strides = {stride_symbol(n) for n in b.body.arrays} if a.columns == "map" else set()
    for n in sorted(names_b):
        if n in repl or n in strides:
            continue
        shared = (a.columns == "map" and n == LEVELS) or (
            n in a.symbol_mapping and n in b.symbol_mapping
            and _equal(a.symbol_mapping[n], b.symbol_mapping[n]) and n in a.body.symbols)
        if shared and n not in targets:
            continue
        if n in names_a or n in targets:
            repl[n] = _fresh(n, taken)
            if a.columns == "map" and n in b.body.arrays and stride_symbol(n) in b.body.symbols:
                repl[stride_symbol(n)] = stride_symbol(repl[n])
    return repl


def _rename(body: dace.SDFG, repl: dict[str, str]) -> None:
    """Simultaneous renaming (through unique placeholders, so swaps and chains are safe)."""
    repl = {k: v for k, v in repl.items() if k != v}
    temp = {k: f"__sdfg_scan_fuse_{i}" for i, k in enumerate(sorted(repl))}
    dtypes = {k: body.symbols[k] for k in repl if k in body.symbols}
    _replace(body, temp)
    _replace(body, {temp[k]: v for k, v in repl.items()})
    for k, dt in dtypes.items():  # keep each renamed symbol's dtype
        body.symbols[repl[k]] = dt


def _replace(body: dace.SDFG, repl: dict[str, str]) -> None:
    # Symbolic replacement only for symbols: DaCe's replace_dict turns a renamed non-transient scalar
    # read as a symbol into a constant tasklet (dace/sdfg/replace.py); the dummy entry keeps the
    # explicit symrepl non-empty so it is not rebuilt from ``repl``.
    symrepl = {symbolic.symbol(k): symbolic.symbol(v) for k, v in repl.items() if k not in body.arrays}
    symrepl[symbolic.symbol("__sdfg_scan_unused_a")] = symbolic.symbol("__sdfg_scan_unused_b")
    body.replace_dict(repl, symrepl=symrepl)


def _fix_parents(sdfg: dace.SDFG) -> None:
    for st in sdfg.all_states():
        for n in st.nodes():
            if isinstance(n, nodes.NestedSDFG):
                n.sdfg.parent, n.sdfg.parent_sdfg, n.sdfg.parent_nsdfg_node = st, sdfg, n
    sdfg.reset_cfg_list()


def merge_bodies(plan: _Plan, repl: dict[str, str]) -> dace.SDFG:
    fused = copy.deepcopy(plan.a.body)
    other = copy.deepcopy(plan.b.body)
    _rename(other, repl)
    sa, sb = analyze_scan(fused), analyze_scan(other)
    for name, desc in other.arrays.items():
        if name not in fused.arrays:
            fused.add_datadesc(name, copy.deepcopy(desc))
    for name, dt in other.symbols.items():
        if name not in fused.symbols and name not in fused.arrays:
            fused.add_symbol(name, dt)
    # entry: first's entry states, then second's; loop body: first's then second's; exit likewise
    loop, oloop = sa.loop, sb.loop
    sink = next(blk for blk in loop.nodes() if loop.out_degree(blk) == 0)
    ostart = oloop.start_block
    oblocks, oedges = list(oloop.nodes()), list(oloop.edges())
    for blk in oblocks:
        oloop.remove_node(blk)
        loop.add_node(blk, ensure_unique_name=True)
    for e in oedges:
        loop.add_edge(e.src, e.dst, e.data)
    loop.add_edge(sink, ostart, dace.InterstateEdge())
    _splice(fused, sa.entry_states, sb.entry_states, other, before=loop)
    last = sa.exit_states[-1] if sa.exit_states else loop
    for st in sb.exit_states:
        other.remove_node(st)
        fused.add_node(st, ensure_unique_name=True)
        fused.add_edge(last, st, dace.InterstateEdge())
        last = st
    _fix_parents(fused)
    return fused


def _splice(fused, entry_a, entry_b, other, before) -> None:
    if not entry_b:
        return
    for e in fused.in_edges(before):
        fused.remove_edge(e)
    prev = entry_a[-1] if entry_a else None
    for st in entry_b:
        other.remove_node(st)
        fused.add_node(st, ensure_unique_name=True, is_start_block=prev is None)
        if prev is not None:
            fused.add_edge(prev, st, dace.InterstateEdge())
        prev = st
    fused.add_edge(prev, before, dace.InterstateEdge())


def _fuse(state: dace.SDFGState, sdfg: dace.SDFG, plan: _Plan) -> Scan:
    a, b = plan.a, plan.b
    repl = _renaming(plan)
    body = merge_bodies(plan, repl)
    linked_in = {bi for _, _, bi, _, _ in plan.links}
    ins = list(a.in_connectors) + [repl.get(c, c) for c in b.in_connectors if c not in linked_in]
    outs = list(a.out_connectors) + [repl.get(c, c) for c in b.out_connectors]
    mapping = dict(a.symbol_mapping)
    for k, v in b.symbol_mapping.items():
        mapping.setdefault(repl.get(k, k), v)
    mapping = {k: v for k, v in mapping.items() if k in body.symbols or k in body.free_symbols}
    fused = Scan(f"{a.label}_{b.label}", body, ins, outs, symbol_mapping=mapping, columns=a.columns, axis=a.axis,
                 emit=a.emit)
    fused.implementation, fused.schedule = a.implementation, a.schedule
    fused.reproducibility, fused.debuginfo = a.reproducibility, a.debuginfo
    state.add_node(fused)
    for e in list(state.in_edges(a)):
        state.add_edge(e.src, e.src_conn, fused, e.dst_conn, e.data)
    for e in list(state.out_edges(a)):
        state.add_edge(fused, e.src_conn, e.dst, e.dst_conn, e.data)
    link_edges = {id(ln[4]) for ln in plan.links}
    for e in list(state.in_edges(b)):
        if id(e) in link_edges:
            continue
        conn = None if e.dst_conn is None else repl.get(e.dst_conn, e.dst_conn)
        if any(x.src is e.src and x.dst is fused and conn is None and x.dst_conn is None
               for x in state.in_edges(fused)):
            continue  # an ordering edge that is already there
        state.add_edge(e.src, e.src_conn, fused, conn, e.data)
    for e in list(state.out_edges(b)):
        conn = None if e.src_conn is None else repl.get(e.src_conn, e.src_conn)
        state.add_edge(fused, conn, e.dst, e.dst_conn, e.data)
    state.remove_node(a)
    state.remove_node(b)
    for an, *_ in plan.links:  # a link node left without readers and not needed elsewhere stays an output
        if an in state.nodes() and state.degree(an) == 0:
            state.remove_node(an)
    sdfg.root_sdfg.reset_cfg_list()
    return fused


__all__ = ["ScanFusion", "merge_bodies"]
