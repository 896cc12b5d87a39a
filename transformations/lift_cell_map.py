"""``LiftCellMap``: give a lifted scan the map over cells around it (``columns="single"`` -> ``"cells"``)."""

from __future__ import annotations

import copy

import dace
from dace import dtypes, properties
from dace.sdfg import nodes
from dace.sdfg import utils as sdutil
from dace.sdfg.propagation import propagate_subset
from dace.transformation import transformation as xf

from sdfg_scan.nodes.scan import Scan
from sdfg_scan.scan_structure import NotAScan, analyze_scan

SCHEDULES = (dtypes.ScheduleType.Default, dtypes.ScheduleType.CPU_Multicore, dtypes.ScheduleType.Sequential)


@properties.make_properties
class LiftCellMap(xf.SingleStateTransformation):
    """Move the map over cells that holds a lifted ``Scan`` into the node, which then owns the cell loop.

    An expansion replaces only its node, so a scan that stays inside gt4py's map over cells can only
    ever run one column per map iteration. With the map inside the node, every schedule over cells
    (per column, levels outside, cell-blocked) is an expansion the selection layer chooses::

        map i in R:                                    Scan[columns='cells', cell_params=[i],
          t = <const> -> s                                  cell_ranges=[R], cell_subsets={c: S_c(i)}]
          Scan[columns='single'](s -> init, ...)          body: entry state writes <const> to the carry
            memlets S_c(i)                                edges: S_c propagated over R

    The constant init tasklets gt4py puts in the map (``__tlet_out = 0.0`` -> scalar -> init
    connector) become constant inits in the body's entry state. The ``sequential`` expansion rebuilds
    exactly this map and these memlets around the body, so the result is bitwise the original.

    Legality checks (``can_be_applied``; a refusal changes nothing):

    - ``_scope``: the node is a ``columns="single"`` Scan directly inside a map with a CPU or default
      schedule; the part of the scope connected to it holds only the Scan and constant tasklets (inputs:
      none) writing transient scalars read only by the Scan, at an init connector that the body only
      copies into its carry; symbols such a tasklet reads (gt4py's ``__tlet_out = lower`` for an int argument
      its auto-optimize made a symbol, a map parameter) are passed into the body through the node's
      ``symbol_mapping``, and it is refused where one of them names a container of the body;
    - every edge in and out of the map scope that reaches that part connects an access node to the Scan
      (no ordering edges, no write-conflict resolution), one memlet path per connector;
    - the rest of the scope (other work of the map: the other parts ``ScanFission`` left there) writes no
      container the Scan reads or writes and reads none it writes (``_independent``). The Scan then leaves
      the map with its own copy of it, and the map keeps the rest.
    """

    scan = xf.PatternNode(Scan)

    @classmethod
    def expressions(cls):
        return [sdutil.node_path_graph(cls.scan)]

    def can_be_applied(self, graph, expr_index, sdfg, permissive=False):
        return _scope(graph, self.scan) is not None

    def apply(self, graph: dace.SDFGState, sdfg: dace.SDFG):
        node = self.scan
        found = _scope(graph, node)
        if found is None:
            raise ValueError(f"sdfg_scan.LiftCellMap: Scan '{node.label}' cannot take its map; "
                             "call can_be_applied first")
        me, inits, own = found
        mx = graph.exit_node(me)
        params, rng = list(me.map.params), me.map.range
        paths = {}
        for e in graph.in_edges(node):
            if e.dst_conn in inits:
                continue
            paths[e.dst_conn] = (graph.memlet_path(e)[0].src, copy.deepcopy(e.data), True)
        for e in graph.out_edges(node):
            paths[e.src_conn] = (graph.memlet_path(e)[-1].dst, copy.deepcopy(e.data), False)
        for conn, (tasklet, carry) in inits.items():
            _map_symbols(node, _tasklet_symbols(graph, node, tasklet) or {})   # checked by _scope
            if carry is None:
                _constant_input(node, conn, tasklet)
            else:
                _constant_init(node, conn, tasklet, carry)
        own = [n for n in own if n is not node]
        locals_ = {n.data for n in own if isinstance(n, nodes.AccessNode)}
        rest = [n for n in graph.scope_subgraph(me, include_entry=False, include_exit=False).nodes()
                if n is not node and n not in own]
        if rest:   # other work stays in the map (ScanFission's other parts): the node leaves it alone
            for e in graph.in_edges(node) + graph.out_edges(node):
                if e.src not in own:   # the paths through the map entry and exit
                    _detach(graph, e)
            for n in own:
                graph.remove_node(n)
        else:
            for n in own + [me, mx]:
                graph.remove_node(n)
        node.columns = "cells"
        node.cell_params = params
        node.cell_ranges = [_range_text(r) for r in rng]
        node.cell_subsets = {c: str(m.subset) for c, (_, m, _) in paths.items()}
        node.schedule = me.map.schedule if me.map.schedule != dtypes.ScheduleType.Sequential else node.schedule
        for conn, (access, memlet, is_input) in paths.items():
            desc = sdfg.arrays[memlet.data]
            outer = propagate_subset([memlet], desc, params, rng)
            if is_input:
                graph.add_edge(access, None, node, conn, dace.Memlet(data=memlet.data, subset=outer.subset))
            else:
                graph.add_edge(node, conn, access, None, dace.Memlet(data=memlet.data, subset=outer.subset))
        for name in locals_:
            if not any(n.data == name for st in sdfg.all_states() for n in st.data_nodes()):
                sdfg.remove_data(name, validate=False)
        return node


def _range_text(r) -> str:
    """A map dimension as ``begin:end[:step]``, end exclusive (Python / ``Range.from_string`` form)."""
    b, e, s = r
    return f"{b}:{dace.symbolic.symstr(e + 1)}" + ("" if str(s) == "1" else f":{s}")


def _scope(state: dace.SDFGState, node: Scan):
    """``(map entry, {init connector: (tasklet, carry)}, the part of the scope connected to node)`` when the
    map can move into ``node``, else None."""
    if node.columns != "single" or node.body is None:
        return None
    me = state.entry_node(node)
    if not isinstance(me, nodes.MapEntry) or me.map.schedule not in SCHEDULES:
        return None
    mx = state.exit_node(me)
    try:
        s = analyze_scan(node.body, prologue=True)
    except NotAScan:
        return None
    init_of = {c.init: c.name for c in s.carries.values() if c.init is not None}
    inits = {}
    own = _component(state, me, node)
    for n in own:
        if n is node:
            continue
        if isinstance(n, nodes.Tasklet):
            found = _init_tasklet(state, node, n, init_of)
            if found is None:
                return None
            inits[found[0]] = (n, found[1])
        elif not isinstance(n, nodes.AccessNode) or not state.sdfg.arrays[n.data].transient:
            return None
    for n in own:
        if isinstance(n, nodes.AccessNode) and not any(t[0] in state.predecessors(n) for t in inits.values()):
            return None
    if not _independent(state, me, own):
        return None
    for e in state.in_edges(me):
        if not isinstance(e.src, nodes.AccessNode) or e.data.data is None:
            return None
    for e in state.out_edges(mx):
        if not isinstance(e.dst, nodes.AccessNode) or e.data.data is None:
            return None
    if any(e.src in own and e.src is not node for e in state.in_edges(mx)):
        return None
    edges = list(state.scope_subgraph(me).edges()) + list(state.out_edges(mx)) + list(state.in_edges(me))
    if any(e.data.wcr is not None for e in edges):
        return None
    for e in state.in_edges(node):
        if e.dst_conn in inits:
            continue
        path = state.memlet_path(e)
        if len(path) != 2 or path[0].src not in state.predecessors(me) or e.data.data is None:
            return None
    for e in state.out_edges(node):
        path = state.memlet_path(e)
        if len(path) != 2 or e.data.data is None or e.data.wcr is not None:
            return None
    conns = [e.dst_conn for e in state.in_edges(node)] + [e.src_conn for e in state.out_edges(node)]
    if len(conns) != len(set(conns)) or set(conns) != set(node.in_connectors) | set(node.out_connectors):
        return None
    return me, inits, own


def _component(state: dace.SDFGState, me: nodes.MapEntry, node: Scan) -> list:
    """The nodes of ``me``'s scope connected to ``node`` by edges that do not pass the map entry or exit
    (``node``, its init tasklets and their scalars; the rest of the scope is other work of the map)."""
    mx = state.exit_node(me)
    seen, todo = [node], [node]
    while todo:
        n = todo.pop()
        for e in state.in_edges(n) + state.out_edges(n):
            other = e.src if e.dst is n else e.dst
            if other is not me and other is not mx and other not in seen:
                seen.append(other)
                todo.append(other)
    return seen


def _detach(state: dace.SDFGState, e) -> None:
    """Remove ``e`` (map entry -> node or node -> map exit) and the scope connector pair and outer edge
    it alone used (the node's own connectors stay)."""
    state.remove_edge(e)
    scope, conn = (e.src, e.src_conn) if isinstance(e.src, nodes.EntryNode) else (e.dst, e.dst_conn)
    inner = state.out_edges(scope) if scope is e.src else state.in_edges(scope)
    if conn is None or any((x.src_conn if scope is e.src else x.dst_conn) == conn for x in inner):
        return
    other = "IN_" + conn[4:] if scope is e.src else "OUT_" + conn[3:]
    for x in list(state.in_edges(scope) if scope is e.src else state.out_edges(scope)):
        if (x.dst_conn if scope is e.src else x.src_conn) == other:
            state.remove_edge(x)
    if scope is e.src:
        scope.remove_out_connector(conn)
        scope.remove_in_connector(other)
    else:
        scope.remove_in_connector(conn)
        scope.remove_out_connector(other)


def _independent(state: dace.SDFGState, me: nodes.MapEntry, own: list) -> bool:
    """No container the component ``own`` reads or writes through the map is written by the map's other
    work, and none it writes is read there (moving it out of the map leaves the two unordered, as they
    were inside it)."""
    mx = state.exit_node(me)
    reads: dict[bool, set] = {True: set(), False: set()}
    writes: dict[bool, set] = {True: set(), False: set()}
    for e in state.out_edges(me):
        if e.data.data is not None:
            reads[e.dst in own].add(e.data.data)
    for e in state.in_edges(mx):
        if e.data.data is not None:
            writes[e.src in own].add(e.data.data)
    return not (writes[False] & (reads[True] | writes[True]) or writes[True] & reads[False])


def _init_tasklet(state, node, t: nodes.Tasklet, init_of: dict) -> tuple[str, str | None] | None:
    """``(connector, carry)`` if ``t`` is a constant tasklet -> transient scalar -> ``node``'s init connector
    that the body only copies into its carry."""
    if any(not e.data.is_empty() for e in state.in_edges(t)) or len(t.out_connectors) != 1:
        return None
    if _tasklet_symbols(state, node, t) is None:
        return None
    if len(state.out_edges(t)) != 1:
        return None
    a = state.out_edges(t)[0].dst
    if not isinstance(a, nodes.AccessNode) or not isinstance(state.sdfg.arrays[a.data], dace.data.Scalar):
        return None
    outs = state.out_edges(a)
    if len(outs) != 1 or outs[0].dst is not node or state.in_degree(a) != 1:
        return None
    conn = outs[0].dst_conn
    if conn not in init_of:   # a read-only scalar input (gt4py: dt, flags): a constant in the body's entry
        desc = node.body.arrays.get(conn)
        if isinstance(desc, dace.data.Scalar) and not desc.transient and conn not in node.out_connectors:
            return conn, None
        return None
    uses = [st for st in node.body.all_states() for n in st.data_nodes() if n.data == conn]
    if len(uses) != 1:
        return None
    return conn, init_of[conn]


def _tasklet_symbols(state: dace.SDFGState, node: Scan, t: nodes.Tasklet) -> dict | None:
    """The symbols the constant tasklet ``t`` reads that are defined where it stands (gt4py's
    ``__tlet_out = lower`` for an int argument it made a symbol; a map parameter), name -> dtype; None
    when one of them is also the name of a container of ``node``'s body (inside the body the tasklet
    would read that container instead)."""
    defined = state.symbols_defined_at(t)
    found = {s: defined[s] for s in t.free_symbols if s in defined}
    if any(s in node.body.arrays for s in found):
        return None
    return found


def _map_symbols(node: Scan, found: dict) -> None:
    """Pass the symbols a tasklet moved into the body reads (``_tasklet_symbols``) through the node's
    symbol mapping under their own names (every expansion builds the body's nested SDFG from it)."""
    for s, dtype in found.items():
        node.symbol_mapping.setdefault(s, dace.symbol(s, dtype))
        if s not in node.body.symbols:
            node.body.add_symbol(s, dtype)


def _constant_input(node: Scan, conn: str, tasklet: nodes.Tasklet) -> None:
    """Make the read-only scalar input ``conn`` a body transient that ``tasklet`` writes in the first entry
    state (a new one if the body has none); drop ``conn``."""
    body = node.body
    s = analyze_scan(body, prologue=True)
    if s.entry_states:
        st = s.entry_states[0]
    else:
        old = body.start_block
        st = body.add_state(f"{conn}_constant", is_start_block=True)
        body.add_edge(st, old, dace.InterstateEdge())
    body.arrays[conn].transient = True
    t = copy.deepcopy(tasklet)
    st.add_node(t)
    st.add_edge(t, next(iter(t.out_connectors)), st.add_write(conn), None, dace.Memlet(data=conn, subset="0"))
    node.remove_in_connector(conn)


def _constant_init(node: Scan, conn: str, tasklet: nodes.Tasklet, carry: str) -> None:
    """Replace the body's ``conn -> carry`` copy by ``tasklet`` writing the carry; drop ``conn``."""
    body = node.body
    for st in body.all_states():
        for n in list(st.data_nodes()):
            if n.data != conn:
                continue
            for e in list(st.out_edges(n)):
                dst = e.dst
                st.remove_edge(e)
                t = copy.deepcopy(tasklet)
                st.add_node(t)
                out = next(iter(t.out_connectors))
                st.add_edge(t, out, dst, None, dace.Memlet(data=carry, subset="0"))
            st.remove_node(n)
    body.remove_data(conn, validate=False)
    node.remove_in_connector(conn)


__all__ = ["LiftCellMap"]
