"""PeelBoundaryLevels: peel the first level of a k-loop so that first-level branches leave the steady state."""

from __future__ import annotations

import copy
import re

import networkx as nx
import numpy as np
import sympy
from dace import properties, symbolic
from dace.sdfg import SDFG, InterstateEdge, SDFGState, nodes
from dace.sdfg import utils as sdutil
from dace.sdfg.state import ConditionalBlock, ControlFlowRegion, LoopRegion
from dace.transformation import transformation as xf
from dace.transformation.passes.analysis import loop_analysis


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

    Legality checks (``can_be_applied``):

    - ``_loop_facts``: the loop is pre-tested with an init ``k = first``, a stride of +1 or -1 and a
      condition on ``k``; the loop variable is not used after the loop.
    - ``constant_flags``: the flag is a transient bool scalar; every write inside the loop is a
      constant (a constant tasklet, directly or through one scalar copy) with the same value, at
      least one of them in a state directly in the loop body (executed every iteration), and no
      nested SDFG writes it.
    - ``flag_branch_users``: at least one nested SDFG in a body state receives the flag on a
      connector that is used only in conditions of its ``ConditionalBlock``s, and each of those
      conditions becomes ``True``/``False`` when the flag is replaced by ``c``.

    No options.
    """

    loop = xf.PatternNode(LoopRegion)

    @classmethod
    def expressions(cls):
        return [sdutil.node_path_graph(cls.loop)]

    def can_be_applied(self, graph, expr_index: int, sdfg: SDFG, permissive: bool = False) -> bool:
        facts = _loop_facts(self.loop)
        if facts is None:
            return False
        return any(flag_branch_users(self.loop, f, c) for f, c in constant_flags(self.loop).items())

    def apply(self, graph: ControlFlowRegion, sdfg: SDFG):
        loop = self.loop
        var, first, stride = _loop_facts(loop)
        flags = {f: c for f, c in constant_flags(loop).items() if flag_branch_users(loop, f, c)}
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
        for f, c in flags.items():
            for state, edge, inner_blocks in flag_branch_users(loop, f, c):
                _decide(state, edge, inner_blocks, c)
        sdfg.reset_cfg_list()


# ------------------------------------------------------------------------------------------------
def _loop_facts(loop: LoopRegion):
    """``(var, first, stride)`` of a pre-tested unit-stride loop whose variable is dead after it."""
    if loop.inverted or not loop.loop_variable:
        return None
    var = loop.loop_variable
    first = loop_analysis.get_init_assignment(loop)
    stride = loop_analysis.get_loop_stride(loop)
    if first is None or stride is None or loop.loop_condition is None:
        return None
    stride = symbolic.simplify(stride)
    if stride not in (1, -1):
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
# first-level flags
# ------------------------------------------------------------------------------------------------
_BOOL_CONST = re.compile(r"^\s*(\w+)\s*=\s*\(?\s*(True|False)\s*\)?\s*;?\s*$")


def _constant_of(state: SDFGState, node: nodes.AccessNode):
    """The bool written into ``node`` by a constant tasklet (no inputs, ``out = True|False``), or None."""
    ins = state.in_edges(node)
    if len(ins) != 1 or not isinstance(ins[0].src, nodes.Tasklet):
        return None
    t = ins[0].src
    if t.in_connectors or len(t.out_connectors) != 1 or t.code.language.name != "Python":
        return None
    m = _BOOL_CONST.match(t.code.as_string.strip())
    if m is None or m.group(1) != ins[0].src_conn:
        return None
    return m.group(2) == "True"


def _direct_body_state(loop: LoopRegion, state: SDFGState) -> bool:
    return state.parent_graph is loop


def _bool_scalar(sdfg: SDFG, name: str) -> bool:
    desc = sdfg.arrays.get(name)
    return desc is not None and desc.transient and desc.total_size == 1 and desc.dtype.type in (bool, np.bool_)


def _write_value(loop: LoopRegion, state: SDFGState, node: nodes.AccessNode):
    """``(value, unconditional)`` of a write of a flag, or None when it is not a constant write."""
    c = _constant_of(state, node)
    if c is not None:
        return c, _direct_body_state(loop, state)
    ins = state.in_edges(node)
    if len(ins) != 1 or not isinstance(ins[0].src, nodes.AccessNode):
        return None
    g = ins[0].src.data
    if not _bool_scalar(loop.sdfg, g) or state.in_degree(ins[0].src) != 0:
        return None
    # g: every write is a constant tasklet in a direct body state that runs before this copy
    values = set()
    for st in loop.sdfg.all_states():
        for n in st.data_nodes():
            if n.data != g or st.in_degree(n) == 0:
                continue
            v = _constant_of(st, n)
            if v is None or not _direct_body_state(loop, st) or not _direct_body_state(loop, state):
                return None
            if st is state or not _precedes(loop, st, state):
                return None
            values.add(v)
    if len(values) != 1:
        return None
    return values.pop(), _direct_body_state(loop, state)


def _precedes(loop: LoopRegion, a, b) -> bool:
    return a is not b and nx.has_path(loop.nx, a, b) and not nx.has_path(loop.nx, b, a)


def constant_flags(loop: LoopRegion) -> dict:
    """``{flag: value}``: transient bool scalars that every iteration of ``loop`` sets to ``value``."""
    sdfg = loop.sdfg
    found: dict = {}
    bad: set = set()
    for st in loop.all_states():
        for n in st.data_nodes():
            if st.in_degree(n) == 0 or not _bool_scalar(sdfg, n.data):
                continue
            w = _write_value(loop, st, n)
            if w is None:
                bad.add(n.data)
                continue
            found.setdefault(n.data, []).append(w)
    out = {}
    for f, ws in found.items():
        if f in bad or len({v for v, _ in ws}) != 1 or not any(u for _, u in ws):
            continue
        out[f] = ws[0][0]
    return out


def flag_branch_users(loop: LoopRegion, flag: str, value: bool) -> list:
    """``[(state, edge, [(cb, taken_region_or_None)])]`` for nested SDFGs whose ConditionalBlocks the flag decides."""
    users = []
    for st in loop.all_states():
        for n in st.data_nodes():
            if n.data != flag:
                continue
            for e in st.out_edges(n):
                if not isinstance(e.dst, nodes.NestedSDFG) or e.dst_conn is None:
                    continue
                decided = _decided_blocks(e.dst.sdfg, e.dst_conn, value)
                if decided:
                    users.append((st, e, decided))
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
