"""The levels-outside schedule of a column scan: the level loop outside, per level a map over all cells.

gt4py lowers a scan to a map over cells around a nested SDFG whose ``LoopRegion`` walks the levels of
one column. On cell-contiguous (nproma) fields every level access of that column is a strided load;
with the loop outside, each level is a unit-stride pass over all cells::

    before                                    after (one nested SDFG in place of the map)
    map i:                                    map i: init(i)              entry states, peeled levels
      NestedSDFG column(i)                    for k in levels:
        entry; for k: body(k); exit             map i: body(i, k)         the loop body, one level
                                              map i: exit(i)              exit states

Each part is the column SDFG cut to its blocks, called with the original memlets and symbol mapping;
column transients that live across parts or levels (the carries) become per-cell arrays. Every cell
runs the same operations in the same order: bitwise the original.

``Scan``'s ``levels_outside`` expansion builds its map over columns and calls :func:`interchange_single_map`;
the ``ScanLoopInterchange`` transformation applies the same rewrite to a raw gt4py map + nested SDFG.
:func:`plan` is the legality check both use; the rewrite lives in ``levels_outside_rewrite.py``.
"""

from __future__ import annotations

import dace
from dace import dtypes, symbolic
from dace.sdfg import SDFG, SDFGState, nodes

from sdfg_scan.expansions.levels_outside_rewrite import LEVEL, _accessed, _interchange, _parts, _Plan
from sdfg_scan.scan_structure import NotAScan, ScanStructure, analyze_scan

SCHEDULES = (dtypes.ScheduleType.Default, dtypes.ScheduleType.CPU_Multicore, dtypes.ScheduleType.Sequential)


# -- legality ------------------------------------------------------------------------------------

def plan(state: SDFGState, me: nodes.MapEntry, nsdfg: nodes.Node) -> _Plan | None:
    """The interchange of ``me`` and the column scan ``nsdfg`` (a ``NestedSDFG``, or a lifted
    ``columns="single"`` ``Scan`` node, checked as the nested SDFG its expansion gives), or None."""
    made = plan_or_reason(state, me, nsdfg)
    return made if isinstance(made, _Plan) else None


def plan_or_reason(state: SDFGState, me: nodes.MapEntry, nsdfg: nodes.Node) -> _Plan | str:
    """:func:`plan`, or one sentence saying why the level loop cannot move out."""
    if state.entry_node(me) is not None or me.map.schedule not in SCHEDULES or state.entry_node(nsdfg) is not me:
        return "the map is nested, not on the CPU, or does not hold the scan directly"
    if any(symbolic.inequal_symbols(st, 1) for _, _, st in me.map.range):
        return "the map over cells has a non-unit step"
    mx = state.exit_node(me)
    scope = [n for n in state.scope_subgraph(me, include_entry=False, include_exit=False).nodes()]
    for n in scope:
        if n is nsdfg:
            continue
        if not isinstance(n, (nodes.Tasklet, nodes.AccessNode)):
            return f"the map scope holds a {type(n).__name__} besides the scan"
        if isinstance(n, nodes.AccessNode) and not state.sdfg.arrays[n.data].transient:
            return f"the map scope accesses the argument '{n.data}' besides the scan"
    if any(e.src is not nsdfg for e in state.in_edges(mx)):
        return "the map writes results that do not come from the scan"
    # data flows through access nodes only (an empty ordering edge would be lost)
    if any(not isinstance(e.src, nodes.AccessNode) or e.data.data is None for e in state.in_edges(me)):
        return "the map has an input that is not an access node (an ordering edge)"
    if any(not isinstance(e.dst, nodes.AccessNode) or e.data.data is None for e in state.out_edges(mx)):
        return "the map has an output that is not an access node (an ordering edge)"
    edges = list(state.scope_subgraph(me).edges()) + list(state.out_edges(mx))
    if any(e.data.wcr is not None for e in edges):
        return "a memlet of the map scope has write-conflict resolution"
    col = nsdfg.sdfg if isinstance(nsdfg, nodes.NestedSDFG) else getattr(nsdfg, "body", None)
    if col is None or (not isinstance(nsdfg, nodes.NestedSDFG) and getattr(nsdfg, "columns", None) != "single"):
        return "the scope does not hold a column scan"
    made = body_plan(col, nsdfg.symbol_mapping, me.map.params, set(nsdfg.out_connectors))
    if isinstance(made, str):
        return made
    s, first, cond, step, hoisted = made
    return _Plan(me, mx, scope, s, first, cond, step, hoisted)


def body_plan(col: SDFG, symbol_mapping: dict, params, out_connectors: set[str]) -> tuple | str:
    """The body's part of the legality check: ``(structure, first, cond, step, hoisted)``, or why not.

    The column SDFG must be a column scan (levels peeled before the loop run with the entry part)
    whose written arguments are all outputs, with unconditional top-level edges, the loop variable
    used only in the loop, and a level range and hoisted shapes that do not depend on ``params``
    (the map over cells) once ``symbol_mapping`` is applied.
    """
    try:
        s = analyze_scan(col, prologue=True)   # levels peeled before the loop run with the entry part
    except NotAScan as e:
        return f"the body is not a column scan ({e})"
    if not set(s.outputs) <= set(out_connectors):   # written arguments leave through the map
        return "the body writes an argument that is not an output connector"
    if any(not e.data.is_unconditional() or e.data.assignments for e in col.edges()):
        return "the body has conditional or assigning top-level edges"
    var = s.variable
    if LEVEL in s.loop.loop_condition.as_string or LEVEL in s.loop.init_statement.as_string:
        return "the body is already one level of a levels-outside schedule"
    for b in s.entry_states + s.prologue + s.exit_states:
        if var in b.free_symbols:
            return f"the body uses its loop variable '{var}' outside the loop"
    ps = {symbolic.pystr_to_symbolic(p) for p in params}
    subs = {symbolic.pystr_to_symbolic(k): symbolic.pystr_to_symbolic(str(v)) for k, v in symbol_mapping.items()}

    def outer(expr):
        e = symbolic.pystr_to_symbolic(str(expr)).subs(subs)
        return None if e.free_symbols & ps else e

    start, stop = outer(s.start), outer(s.stop)
    if start is None or stop is None:
        return "the level range depends on the cell"
    if s.direction == "forward":
        first, cond, step = start, f"{LEVEL} < {symbolic.symstr(stop)}", 1
    else:
        first, cond, step = stop - 1, f"{LEVEL} >= {symbolic.symstr(start)}", -1
    hoisted = _hoisted(s)
    for h in hoisted:
        if any(outer(d) is None for d in col.arrays[h].shape):
            return f"the shape of the carried container '{h}' depends on the cell"
    return s, first, cond, step, hoisted


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
    return plan(state, me, nsdfg) is not None


def interchange_single_map(sdfg: SDFG) -> str | None:
    """Interchange the one map + column scan of a one-state SDFG (``Scan``'s ``levels_outside``
    expansion); returns ``None`` when done, else why not."""
    state = sdfg.states()[0]
    pairs = [(me, n) for n in state.nodes() if isinstance(n, nodes.NestedSDFG)
             for me in [state.entry_node(n)] if isinstance(me, nodes.MapEntry)]
    if len(pairs) != 1:
        return f"expected one nested column SDFG inside one map, found {len(pairs)}"
    me, nsdfg = pairs[0]
    made = plan_or_reason(state, me, nsdfg)
    if isinstance(made, str):
        return made
    _interchange(state, nsdfg, made)
    return None


def parallel_levels(sdfg: SDFG, schedule: dtypes.ScheduleType) -> int:
    """Give the per-part maps (init, each level, exit) that :func:`interchange_single_map` built in
    ``sdfg`` the schedule of the library node they expand; returns how many maps changed.

    DaCe's code generator expands a library node after inferring schedules: the expansion's own top-level
    scopes take the node's schedule, but every ``Default`` map one nested SDFG further down becomes
    ``Sequential`` (the default inside a parallel scope). The levels-outside maps sit in the nested SDFG the
    interchange made, so a node kept to ``compile()`` ran each level's map over all columns on one thread.
    Only a node scheduled ``CPU_Multicore`` (a top-level scope) passes it on; ``Default`` (an explicit
    ``expand_library_nodes`` before inference) leaves inference to place the maps, ``Sequential`` (the node
    inside a parallel map) keeps them sequential."""
    if schedule != dtypes.ScheduleType.CPU_Multicore:
        return 0
    changed = 0
    for n in sdfg.states()[0].nodes():
        if not isinstance(n, nodes.NestedSDFG):
            continue
        for st in n.sdfg.all_states():
            for me in st.nodes():
                if isinstance(me, nodes.MapEntry) and st.entry_node(me) is None and \
                        me.map.schedule == dtypes.ScheduleType.Default:
                    me.map.schedule = schedule
                    changed += 1
    return changed


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




__all__ = ["LEVEL", "SCHEDULES", "body_plan", "can_interchange", "cell_contiguous", "interchange_single_map",
           "parallel_levels", "plan", "plan_or_reason"]
