"""PeelBoundaryLevels: peel the first level of a k-loop so that first-level branches leave the steady state."""

from __future__ import annotations

import copy

import sympy
from dace import properties, symbolic
from dace.sdfg import SDFG, InterstateEdge, SDFGState, nodes
from dace.sdfg import utils as sdutil
from dace.sdfg.state import ConditionalBlock, ControlFlowRegion, LoopRegion
from dace.transformation import transformation as xf

from sdfg_scan.scan_model import ScanStructure
from sdfg_scan.scan_structure import analyze_loop


@properties.make_properties
@xf.explicit_cf_compatible
class PeelBoundaryLevels(xf.MultiStateTransformation):
    """Peel the first iteration of a column k-loop and drop the branches on first-level flags from
    the remaining (steady-state) loop.

    Matched pattern: a unit-stride ``LoopRegion`` (a scan's k-loop, in gt4py's scan nested SDFG or a
    ``Scan`` node's ``body``) whose body reads a *first-level flag*: a transient boolean scalar ``f``
    that every iteration sets, unconditionally, to the same constant ``c`` (diagnose_pressure's
    ``is_first_level``: init ``True``, ``f = False`` in ``scan_update``), and that selects a branch
    of a ``ConditionalBlock`` inside a nested SDFG (gt4py's ``if_stmt_N``: ``f -> __cond``). From the
    second iteration on, ``f == c``, so those branches are decided::

        before                                   after
        for k in range(first, stop):             if first < stop:          # the loop's condition at k = first
            if f: a(k) else: b(k)                    k = first
            f = False                                if f: a(k) else: b(k)   # peeled level, unchanged
                                                     f = False
                                                 for k in range(first + 1, stop):
                                                     b(k)                    # branch-free steady state
                                                     f = False

    Works with symbolic bounds (the peeled level is a ``ConditionalBlock`` guarded by the loop
    condition at the first level, ``k = first`` assigned on its first edge, so an empty loop stays
    empty) and for backward loops (``first = stop - 1``, ``k - 1``). When the guard is statically true
    (literal bounds) the peeled level is plain blocks with ``k`` substituted by ``first``.
    Bitwise identical results.

    Applied to a ``Scan`` node's body, call ``node.sync_from_body()`` afterwards (the node's
    ``start``/``stop`` then describe the steady-state loop); ``sdfg_scan.optimize`` does this.

    Legality checks (``can_be_applied``; :func:`peel_plan`, which ``sdfg-scan inspect`` calls too):

    - ``analyze_loop``: the loop is the k-loop of a column scan (pre-tested, init ``k = first``,
      stride +1 or -1); ``_loop_facts``: its condition reads ``k`` and ``k`` is not used after it.
    - the flag is a ``flag`` carry slot of the analysis (:func:`sdfg_scan.scan_flags.constant_flags`:
      a transient bool scalar; every write inside the loop is a constant, directly or through one
      scalar copy, with the same value, at least one of them in a state directly in the loop body,
      and no nested SDFG writes it).
    - ``flag_users``: at least one nested SDFG in a body state holds flag ``BoundaryBranch``es of the
      analysis and receives the flag straight from an access node, on a connector that is used only
      in conditions of its ``ConditionalBlock``s, each of which becomes ``True``/``False`` when the
      flag is replaced by ``c``.

    No options.
    """

    loop = xf.PatternNode(LoopRegion)

    @classmethod
    def expressions(cls):
        return [sdutil.node_path_graph(cls.loop)]

    def can_be_applied(self, graph, expr_index: int, sdfg: SDFG, permissive: bool = False) -> bool:
        s = analyze_loop(self.loop)
        return s is not None and bool(peel_plan(s))

    def apply(self, graph: ControlFlowRegion, sdfg: SDFG):
        loop = self.loop
        s = analyze_loop(loop)
        plan = peel_plan(s) if s is not None else []
        if s is None or not plan:
            raise ValueError(f"sdfg_scan.PeelBoundaryLevels: loop '{loop.label}' has no branch on a first-level "
                             "flag to peel; call can_be_applied first")
        var, first, stride = _loop_facts(s)
        # 1. the peeled level: a guarded copy of the body with k = first
        peeled = _peeled_iteration(loop, var, first)
        was_start = graph.start_block is loop
        if peeled.branches[0][0].as_string == "True":  # statically non-empty loop: no guard, k substituted
            region = peeled.branches[0][1]
            init = region.start_block
            start = region.out_edges(init)[0].dst
            region.remove_node(init)
            blocks, edges = list(region.nodes()), list(region.edges())
            sinks = [b for b in blocks if region.out_degree(b) == 0]
            for b in blocks:
                graph.add_node(b)
                b.replace_dict({var: symbolic.symstr(first)})
            for e in edges:
                graph.add_edge(e.src, e.dst, e.data)
            first_block, last_blocks = start, sinks
        else:
            graph.add_node(peeled)
            first_block, last_blocks = peeled, [peeled]
        for e in graph.in_edges(loop):
            graph.add_edge(e.src, first_block, e.data)
            graph.remove_edge(e)
        for b in last_blocks:
            graph.add_edge(b, loop, InterstateEdge())
        if was_start:
            graph.start_block = graph.node_id(first_block)
        for b in [first_block] if first_block is peeled else blocks:
            _fix_nested_parents(b)
        # 2. the steady-state loop starts one level later and has the flag branches decided
        loop.init_statement = properties.CodeBlock(f"{var} = {symbolic.symstr(first + stride)}")
        for _, value, users in plan:
            for state, edge, inner_blocks in users:
                _decide(state, edge, inner_blocks, value)
        sdfg.reset_cfg_list()


# ------------------------------------------------------------------------------------------------
def _loop_facts(s: ScanStructure):
    """``(var, first, stride)`` of the scan's k-loop when its condition reads ``k`` and ``k`` is dead after it."""
    loop, var, first = s.loop, s.variable, s.first_level
    stride = 1 if s.direction == "forward" else -1
    if loop.loop_condition is None:
        return None
    if var not in {str(s) for s in symbolic.pystr_to_symbolic(loop.loop_condition.as_string).free_symbols}:
        return None
    region = loop.parent_graph
    after = _blocks_after(loop)
    for b in after:
        if var in b.free_symbols or var in _read_symbols_of_edges(b):
            return None
    for e in region.out_edges(loop):
        if var in e.data.read_symbols():
            return None
    return var, first, stride


def _blocks_after(loop: LoopRegion) -> list:
    region = loop.parent_graph
    seen: list = []
    todo = [e.dst for e in region.out_edges(loop)]
    while todo:
        b = todo.pop()
        if b is loop or any(b is s for s in seen):
            continue
        seen.append(b)
        todo.extend(e.dst for e in region.out_edges(b))
    return seen


def _read_symbols_of_edges(block) -> set:
    out = set()
    if isinstance(block, ControlFlowRegion):
        for e in block.all_interstate_edges():
            out |= set(e.data.read_symbols())
    return out


def _peeled_iteration(loop: LoopRegion, var: str, first) -> ConditionalBlock:
    """``if cond(first): k = first; <body>`` as a ConditionalBlock holding a copy of the loop body."""
    cond = symbolic.pystr_to_symbolic(loop.loop_condition.as_string)
    guard = cond.subs(symbolic.pystr_to_symbolic(var), first)
    guard_str = "True" if guard is sympy.true else "False" if guard is sympy.false else symbolic.symstr(guard)
    cb = ConditionalBlock(f"{loop.label}_peel_first")
    body = ControlFlowRegion(f"{loop.label}_peeled_level", sdfg=loop.sdfg)
    cb.add_branch(properties.CodeBlock(guard_str), body)
    body_copy = copy.deepcopy(loop)
    init = body.add_state(f"{loop.label}_peel_init", is_start_block=True)
    for b in body_copy.nodes():
        body.add_node(b)
    for e in body_copy.edges():
        body.add_edge(e.src, e.dst, e.data)
    body.add_edge(init, body_copy.start_block, InterstateEdge(assignments={var: symbolic.symstr(first)}))
    return cb


def _fix_nested_parents(block) -> None:
    states = [block] if isinstance(block, SDFGState) else block.all_states()
    for st in states:
        for n in st.nodes():
            if isinstance(n, nodes.NestedSDFG):
                n.sdfg.parent = st
                n.sdfg.parent_sdfg = st.sdfg
                n.sdfg.parent_nsdfg_node = n


def _decide(state: SDFGState, edge, inner_blocks, value: bool) -> None:
    """Remove the flag connector ``edge.dst_conn`` of the nested SDFG and inline the decided branches."""
    nsdfg: nodes.NestedSDFG = edge.dst
    conn = edge.dst_conn
    for cb, region in inner_blocks:
        _inline_branch(cb, region)
    src = edge.src
    state.remove_edge(edge)
    nsdfg.remove_in_connector(conn)
    if conn in nsdfg.sdfg.arrays:
        nsdfg.sdfg.remove_data(conn, validate=False)
    if isinstance(src, nodes.AccessNode) and state.degree(src) == 0:
        state.remove_node(src)


def _inline_branch(cb: ConditionalBlock, region: ControlFlowRegion | None) -> None:
    """Replace ``cb`` by the blocks of ``region`` (or by an empty state when no branch is taken)."""
    parent = cb.parent_graph
    was_start = parent.start_block is cb
    if region is None:
        region = ControlFlowRegion(f"{cb.label}_none", sdfg=parent.sdfg)
        region.add_state(f"{cb.label}_none_state", is_start_block=True)
    blocks = list(region.nodes())
    edges = list(region.edges())
    start = region.start_block
    sinks = [b for b in blocks if region.out_degree(b) == 0]
    for b in blocks:
        parent.add_node(b)
    for e in edges:
        parent.add_edge(e.src, e.dst, e.data)
    if len(sinks) != 1:
        exit_state = parent.add_state(f"{cb.label}_exit")
        for s in sinks:
            parent.add_edge(s, exit_state, InterstateEdge())
        sinks = [exit_state]
    for e in parent.in_edges(cb):
        parent.add_edge(e.src, start, e.data)
    for e in parent.out_edges(cb):
        parent.add_edge(sinks[0], e.dst, e.data)
    parent.remove_node(cb)
    if was_start:
        parent.start_block = parent.node_id(start)


# ------------------------------------------------------------------------------------------------
# first-level flags and the branches they decide (from the analysis)
# ------------------------------------------------------------------------------------------------
def peel_plan(s: ScanStructure) -> list[tuple[str, bool, list]]:
    """``[(flag, value, users)]``: what ``PeelBoundaryLevels`` decides in the steady state of ``s``.

    Flags are the analysis' ``flag`` carry slots (``CarrySlot.flag_value``); users are
    ``(state, edge, [(cb, taken_region_or_None)])`` for each nested SDFG holding flag
    ``BoundaryBranch``es whose flag connector ``flag_users`` can remove. ``can_be_applied`` is
    ``bool(peel_plan(analyze_loop(loop)))``; ``sdfg-scan inspect`` calls the same function.
    """
    if _loop_facts(s) is None:
        return []
    plan = []
    for c in s.slots("flag"):
        if c.flag_value is None:
            continue
        users = flag_users(s, c.name, c.flag_value)
        if users:
            plan.append((c.name, c.flag_value, users))
    return plan


def flag_users(s: ScanStructure, flag: str, value: bool) -> list:
    """``[(state, edge, [(cb, taken_region_or_None)])]`` for nested SDFGs of the loop body holding flag
    branches of ``flag`` (``s.branches``) that are all decided when the flag is ``value``.

    The nested SDFG must sit in a state of the column SDFG and receive the flag straight from an
    access node; its connector may be used only in conditions, each decided by ``value``.
    """
    users: list = []
    seen: list = []
    for b in s.branches:
        if b.kind != "flag" or b.carry != flag or b.nsdfg is None or b.host is None or b.connector is None:
            continue
        if b.host.sdfg is not s.sdfg or any(n is b.nsdfg and conn == b.connector for n, conn in seen):
            continue
        seen.append((b.nsdfg, b.connector))
        edges = [e for e in b.host.in_edges(b.nsdfg) if e.dst_conn == b.connector
                 and isinstance(e.src, nodes.AccessNode) and e.src.data == flag]
        if len(edges) != 1:
            continue
        decided = _decided_blocks(b.nsdfg.sdfg, b.connector, value)
        if decided:
            users.append((b.host, edges[0], decided))
    return users


def _decided_blocks(inner: SDFG, conn: str, value: bool):
    if conn not in inner.arrays:
        return None
    for st in inner.all_states():
        if any(n.data == conn for n in st.data_nodes()):
            return None
    for e in inner.all_interstate_edges():
        if conn in e.data.read_symbols():
            return None
    for b in inner.all_control_flow_blocks():
        if isinstance(b, LoopRegion) and conn in b.loop_condition.get_free_symbols():
            return None
    sym = symbolic.pystr_to_symbolic(conn)
    decided = []
    for b in inner.all_control_flow_blocks():
        if not isinstance(b, ConditionalBlock):
            continue
        conds = [c for c, _ in b.branches if c is not None]
        if not any(conn in c.get_free_symbols() for c in conds):
            continue
        taken = None
        chosen = False
        for c, region in b.branches:
            if c is None:
                taken, chosen = region, True
                break
            r = symbolic.pystr_to_symbolic(c.as_string).subs(sym, sympy.true if value else sympy.false)
            r = sympy.simplify(r) if not isinstance(r, (bool, sympy.logic.boolalg.BooleanAtom)) else r
            if r is sympy.true or r is True:
                taken, chosen = region, True
                break
            if not (r is sympy.false or r is False):
                return None
        decided.append((b, taken if chosen else None))
    return decided or None
