"""``ScanLoopInterchange``: move a column scan's k-loop out of the map over columns.

This module holds the transformation, its legality check (``_plan``, ``can_interchange``), the
``levels_outside`` entry point (``interchange_single_map``) and the profitability test (``profitable``,
``cell_contiguous``, ``MIN_CELLS``). The rewrite that ``apply`` performs (``_interchange`` and its
helpers), the level-loop variable ``LEVEL`` (re-exported here) and the plan record ``_Plan`` live in
``scan_loop_interchange_rewrite.py`` beside it.
"""

from __future__ import annotations

import dace
from dace import dtypes, properties, symbolic
from dace.sdfg import SDFG, SDFGState, nodes
from dace.sdfg import utils as sdutil
from dace.transformation import transformation as xf

from sdfg_scan.scan_structure import NotAScan, ScanStructure, analyze_scan
from sdfg_scan.transformations.scan_loop_interchange_rewrite import LEVEL, _accessed, _interchange, _parts, _Plan

SCHEDULES = (dtypes.ScheduleType.Default, dtypes.ScheduleType.CPU_Multicore, dtypes.ScheduleType.Sequential)


@properties.make_properties
class ScanLoopInterchange(xf.SingleStateTransformation):
    """Interchange the map over columns and the k-loop of the column scan it holds.

    gt4py lowers a scan to a map over cells around a nested SDFG whose ``LoopRegion`` walks the
    levels of one column. On cell-contiguous (nproma) fields every level access of that column is a
    strided load; with the loop outside, each level is a unit-stride pass over all cells::

        before                                    after (one nested SDFG in place of the map)
        map i:                                    map i: init(i)              entry states, peeled levels
          NestedSDFG column(i)                    for k in levels:
            entry; for k: body(k); exit             map i: body(i, k)         the loop body, one level
                                                  map i: exit(i)              exit states

    Each of the three parts is the column SDFG cut to its blocks (the body keeps its ``LoopRegion``,
    narrowed to the one level ``k``), called with the original memlets and symbol mapping. Column
    transients that live from one part to the next or from one level to the next (the carries, and
    any container read in two parts) become per-cell arrays outside the maps; the others stay local
    to their part. Every cell runs the same operations in the same order: bitwise the original.

    Legality checks (``can_be_applied``, all structural):

    - the map is at the top level of its state, has unit steps and a CPU or default schedule;
    - its scope holds one ``NestedSDFG`` with the column-scan structure (``analyze_scan``; levels
      peeled by ``PeelBoundaryLevels`` go with the entry states), plus only tasklets and transient
      access nodes that feed it; every map output comes from it; no write-conflict resolution on the
      scope's memlets; the map's inputs and outputs are access nodes (no empty ordering edges);
    - the column SDFG's top-level edges carry no conditions or assignments; the loop variable is not
      used outside the loop; the level range does not depend on the map parameters;
    - hoisted containers have shapes that do not depend on the map parameters.

    Profitable on CPUs when the columns' fields are cell-contiguous; ``sdfg_scan.optimize`` applies it
    only then (:func:`profitable`). No options.
    """

    map_entry = xf.PatternNode(nodes.MapEntry)
    nsdfg = xf.PatternNode(nodes.NestedSDFG)

    @classmethod
    def expressions(cls):
        return [sdutil.node_path_graph(cls.map_entry, cls.nsdfg)]

    def can_be_applied(self, graph: SDFGState, expr_index: int, sdfg: SDFG, permissive: bool = False) -> bool:
        return can_interchange(graph, self.map_entry, self.nsdfg)

    def apply(self, graph: SDFGState, sdfg: SDFG):
        plan = _plan(graph, self.map_entry, self.nsdfg)
        if plan is None:
            raise ValueError(f"sdfg_scan.ScanLoopInterchange: map '{self.map_entry.map.label}' around nested SDFG "
                             f"'{self.nsdfg.label}' cannot be interchanged; call can_be_applied first")
        return _interchange(graph, self.nsdfg, plan)


# -- legality ------------------------------------------------------------------------------------

def _plan(state: SDFGState, me: nodes.MapEntry, nsdfg: nodes.Node) -> _Plan | None:
    """The interchange of ``me`` and the column scan ``nsdfg`` (a ``NestedSDFG``, or a lifted
    ``columns="single"`` ``Scan`` node, checked as the nested SDFG its expansion gives), or None."""
    if state.entry_node(me) is not None or me.map.schedule not in SCHEDULES or state.entry_node(nsdfg) is not me:
        return None
    if any(symbolic.inequal_symbols(st, 1) for _, _, st in me.map.range):
        return None
    mx = state.exit_node(me)
    scope = [n for n in state.scope_subgraph(me, include_entry=False, include_exit=False).nodes()]
    for n in scope:
        if n is nsdfg:
            continue
        if not isinstance(n, (nodes.Tasklet, nodes.AccessNode)):
            return None
        if isinstance(n, nodes.AccessNode) and not state.sdfg.arrays[n.data].transient:
            return None
    if any(e.src is not nsdfg for e in state.in_edges(mx)):
        return None
    # data flows through access nodes only (an empty ordering edge would be lost)
    if any(not isinstance(e.src, nodes.AccessNode) or e.data.data is None for e in state.in_edges(me)):
        return None
    if any(not isinstance(e.dst, nodes.AccessNode) or e.data.data is None for e in state.out_edges(mx)):
        return None
    edges = list(state.scope_subgraph(me).edges()) + list(state.out_edges(mx))
    if any(e.data.wcr is not None for e in edges):
        return None
    col = nsdfg.sdfg if isinstance(nsdfg, nodes.NestedSDFG) else getattr(nsdfg, "body", None)
    if col is None or (not isinstance(nsdfg, nodes.NestedSDFG) and getattr(nsdfg, "columns", None) != "single"):
        return None
    try:
        s = analyze_scan(col, prologue=True)   # levels peeled before the loop run with the entry part
    except NotAScan:
        return None
    if not set(s.outputs) <= set(nsdfg.out_connectors):   # written arguments leave through the map
        return None
    if any(not e.data.is_unconditional() or e.data.assignments for e in col.edges()):
        return None
    var = s.variable
    if LEVEL in s.loop.loop_condition.as_string or LEVEL in s.loop.init_statement.as_string:
        return None   # the one-level body this transformation made
    for b in s.entry_states + s.prologue + s.exit_states:
        if var in b.free_symbols:
            return None
    params = {symbolic.pystr_to_symbolic(p) for p in me.map.params}
    subs = {symbolic.pystr_to_symbolic(k): symbolic.pystr_to_symbolic(str(v)) for k, v in nsdfg.symbol_mapping.items()}

    def outer(expr):
        e = symbolic.pystr_to_symbolic(str(expr)).subs(subs)
        return None if e.free_symbols & params else e

    start, stop = outer(s.start), outer(s.stop)
    if start is None or stop is None:
        return None
    if s.direction == "forward":
        first, cond, step = start, f"{LEVEL} < {symbolic.symstr(stop)}", 1
    else:
        first, cond, step = stop - 1, f"{LEVEL} >= {symbolic.symstr(start)}", -1
    hoisted = _hoisted(s)
    for h in hoisted:
        if any(outer(d) is None for d in col.arrays[h].shape):
            return None
    return _Plan(me, mx, scope, s, first, cond, step, hoisted)


def _hoisted(s: ScanStructure) -> list[str]:
    """Transients read or written in more than one part, or carries (cross the level boundary)."""
    col = s.sdfg
    count: dict[str, int] = {}
    for blocks in _parts(s).values():
        for name in _accessed(col, blocks):
            count[name] = count.get(name, 0) + 1
    return sorted(n for n, d in col.arrays.items() if d.transient and (count.get(n, 0) > 1 or n in s.carries))


def can_interchange(state: SDFGState, me: nodes.MapEntry, nsdfg: nodes.Node) -> bool:
    """Whether ``ScanLoopInterchange`` applies to this map and nested column SDFG (its legality checks);
    for a lifted ``Scan`` node: whether it would apply once the node is expanded back."""
    return _plan(state, me, nsdfg) is not None


def interchange_single_map(sdfg: SDFG) -> str | None:
    """Interchange the one map + column scan of a one-state SDFG (``Scan``'s ``levels_outside``
    expansion); returns ``None`` when done, else why not."""
    state = sdfg.states()[0]
    pairs = [(me, n) for n in state.nodes() if isinstance(n, nodes.NestedSDFG)
             for me in [state.entry_node(n)] if isinstance(me, nodes.MapEntry)]
    if len(pairs) != 1:
        return f"expected one nested column SDFG inside one map, found {len(pairs)}"
    me, nsdfg = pairs[0]
    plan = _plan(state, me, nsdfg)
    if plan is None:
        try:
            analyze_scan(nsdfg.sdfg)
        except NotAScan as e:
            return f"the body is not a strict column scan ({e})"
        return "the body uses its loop variable outside the loop, or has conditional top-level edges"
    _interchange(state, nsdfg, plan)
    return None


MIN_CELLS = 2048
"""Below this many map iterations (a constant map range) the per-level parallel loops cost more than
the strided column walks they replace (diagnose_pressure, 100 cells: 0.15 ms against 0.12 ms)."""


def profitable(state: SDFGState, me: nodes.MapEntry, scan: nodes.Node) -> bool:
    """``cell_contiguous`` and not a constant map range smaller than :data:`MIN_CELLS`."""
    size = me.map.range.num_elements()
    if not symbolic.issymbolic(size) and int(size) < MIN_CELLS:
        return False
    return cell_contiguous(state, me, scan)


def cell_contiguous(state: SDFGState, me: nodes.MapEntry, nsdfg: nodes.Node) -> bool:
    """Whether every array the scan reads or writes through the map has unit stride along the map's
    (last) parameter: then the interchanged loop walks cells with unit stride."""
    param = symbolic.pystr_to_symbolic(me.map.params[-1])
    for e in list(state.in_edges(nsdfg)) + list(state.out_edges(nsdfg)):
        if e.data.data is None:
            continue
        desc = state.sdfg.arrays.get(e.data.data)
        if desc is None or isinstance(desc, dace.data.Scalar) or e.data.subset.num_elements() == 1:
            continue
        for (b, end, _), stride in zip(e.data.subset, desc.strides, strict=True):
            syms = symbolic.pystr_to_symbolic(str(b)).free_symbols | symbolic.pystr_to_symbolic(str(end)).free_symbols
            if param in syms and symbolic.inequal_symbols(stride, 1):
                return False
    return True


__all__ = ["LEVEL", "MIN_CELLS", "ScanLoopInterchange", "can_interchange", "cell_contiguous", "interchange_single_map", "profitable"]
