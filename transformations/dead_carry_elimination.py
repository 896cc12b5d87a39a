"""DeadCarryElimination: remove carry slots of a k-loop that carry nothing across levels."""

from __future__ import annotations

import re

import networkx as nx
from dace import data as dt
from dace import dtypes, properties, symbolic
from dace.memlet import Memlet
from dace.sdfg import SDFG, SDFGState, nodes
from dace.sdfg import utils as sdutil
from dace.sdfg.state import LoopRegion
from dace.transformation import transformation as xf

from sdfg_scan.scan_model import ScanStructure
from sdfg_scan.scan_structure import analyze_loop, used_in_control_flow

DEAD_KINDS = ("unused", "pass_through", "delay_line")


@properties.make_properties
@xf.explicit_cf_compatible
class DeadCarryElimination(xf.MultiStateTransformation):
    """Turn carry slots of a column k-loop that do not carry a recurrence into plain per-level values.

    Matched pattern: the k-loop of a column SDFG (gt4py's scan nested SDFG or a ``Scan`` node's
    ``body``: ``analyze_loop``) and a carry slot of the analysis (:mod:`sdfg_scan.scan_structure`)
    whose kind is ``unused``, ``pass_through`` or ``delay_line``, written in the loop body by one copy
    ``t -> c`` (gt4py's ``scan_update``). One slot per application, the first in name order:

    - **unused**: ``c`` is read nowhere. All writes of ``c`` (init copy, update copy) are removed::

          c = init; for k: ...; c = t            ->   for k: ...

    - **pass-through**: ``c`` is never read inside the loop, only after it (e.g. the surface value).
      The slot disappears: the init goes into ``t``, readers after the loop read ``t``::

          c = init; for k: t = f(k); c = t        ->   t = init; for k: t = f(k)
          last = c                                      last = t

    - **delay line**: every level copies an input element into the slot (``tmp = x[k]; c = tmp``)
      and the loop reads ``c`` only before that copy, so ``c`` is ``x[k - 1]`` (``x[k + 1]`` for a
      backward loop) except on the first level, where it is the init. The reads become a windowed
      read and the copy chain is removed::

          c = init; for k: y = g(c); c = x[k]     ->   c = init; for k: y = g(c if k == first else x[k - 1])

    - **dead**: a recurrence whose value reaches nothing the program keeps. Following the dataflow of
      the column SDFG (:func:`dead_containers`), ``c`` flows only into its own update, into other dead
      slots or into transients nobody reads (gt4py's per-level output of a scan tuple member the program
      drops). The slot and everything that only it feeds are removed, with the other slots of that dead
      set::

          c = init; for k: t = f(c); c = t; y[k] = g(x)      ->   for k: y[k] = g(x)

    Bitwise identical results (only copies, or computations whose values reach no output, are removed or
    redirected).

    Legality checks (``can_be_applied``; :func:`dead_carries`, which ``sdfg-scan inspect`` calls too):

    - ``analyze_loop``: the loop is the k-loop of a column scan (unit stride); the slot's kind
      (``CarrySlot.kind``) says which rewrite applies;
    - ``_carry_write``: exactly one write of ``c`` inside the loop, a copy from a transient
      single-element ``t`` of the same dtype, in a state directly in the loop body; ``c`` is a
      transient single-element container not touched by a nested SDFG connector;
    - ``used_in_control_flow``: neither ``c`` nor ``t`` appears in an interstate edge or condition;
    - unused: no reads of ``c`` anywhere (entry states included);
    - pass-through: no reads of ``c`` in the loop; ``t`` written only inside the loop; all accesses
      of ``c`` outside the loop are plain access-node copies (renamed to ``t``);
    - delay line (``_delay_source``): ``t``'s only write is a copy of one element of a read-only
      non-transient array ``x`` at an index that moves with the loop variable, in a body state; all
      reads of ``c`` are in body states that strictly precede the update state; ``c`` is not read
      after the loop.
    - dead (:func:`dead_containers`, checked after the kinds above): ``c`` is a transient that no
      non-transient container, interstate edge, branch or loop condition, or nested SDFG symbol depends
      on through any chain of reads and writes (nested SDFGs and map scopes taken as reading all their
      inputs into all their outputs); every node that writes a removed container writes nothing else and
      reads only access nodes, and none of them is a map scope, a library node or a tasklet with side
      effects.

    No options.
    """

    loop = xf.PatternNode(LoopRegion)

    @classmethod
    def expressions(cls):
        return [sdutil.node_path_graph(cls.loop)]

    def can_be_applied(self, graph, expr_index: int, sdfg: SDFG, permissive: bool = False) -> bool:
        s = analyze_loop(self.loop)
        return s is not None and bool(dead_carries(s))

    def apply(self, graph, sdfg: SDFG):
        s = analyze_loop(self.loop)
        cands = dead_carries(s) if s is not None else []
        if not cands:
            raise ValueError(f"sdfg_scan.DeadCarryElimination: loop '{self.loop.label}' has no dead carry slot; "
                             "call can_be_applied first")
        kind, c, info = cands[0]
        {"unused": _remove_unused, "pass_through": _remove_pass_through, "delay_line": _window_delay_line,
         "dead": _remove_dead}[kind](self.loop, c, info)


def classify(loop: LoopRegion) -> dict[str, str]:
    """``{carry: kind}`` for every slot this transformation would rewrite (for reports)."""
    s = analyze_loop(loop)
    return {c: kind for kind, c, _ in dead_carries(s)} if s is not None else {}


# ------------------------------------------------------------------------------------------------
# analysis
# ------------------------------------------------------------------------------------------------
def _single(desc) -> bool:
    return (isinstance(desc, dt.Scalar) or (isinstance(desc, dt.Array) and desc.total_size == 1)) and not isinstance(
        desc, dt.View)


def _accesses(sdfg: SDFG, name: str):
    for st in sdfg.all_states():
        for n in st.data_nodes():
            if n.data == name:
                yield st, n


def _inside(block, loop: LoopRegion) -> bool:
    g = block.parent_graph
    while g is not None and not isinstance(g, SDFG):
        if g is loop:
            return True
        g = g.parent_graph
    return False


def _plain_copy_edges(st: SDFGState, n: nodes.AccessNode) -> bool:
    """Every edge at ``n`` connects it to another access node (no tasklet / nested SDFG / map)."""
    return all(isinstance(e.src, nodes.AccessNode) and isinstance(e.dst, nodes.AccessNode) and e.data.wcr is None
               for e in st.all_edges(n))


def _carry_write(loop: LoopRegion, c: str):
    """``(state, t_node, c_node)`` of the single update copy ``t -> c`` in the loop body, or None."""
    sdfg = loop.sdfg
    writes = [(st, n) for st, n in _accesses(sdfg, c) if _inside(st, loop) and st.in_degree(n) > 0]
    if len(writes) != 1:
        return None
    st, n = writes[0]
    if st.parent_graph is not loop or st.in_degree(n) != 1:
        return None
    e = st.in_edges(n)[0]
    if not isinstance(e.src, nodes.AccessNode) or e.src.data == c or e.data.wcr is not None:
        return None
    t = e.src.data
    dt_, dc = sdfg.arrays[t], sdfg.arrays[c]
    if not (dt_.transient and _single(dt_)) or dt_.dtype != dc.dtype:
        return None
    return st, e.src, n


def dead_carries(s: ScanStructure) -> list[tuple[str, str, object]]:
    """``(kind, carry, rewrite plan)`` for every slot of ``s`` that ``DeadCarryElimination`` rewrites.

    The kind is the analysis' (``CarrySlot.kind`` in ``DEAD_KINDS``); the checks here are those of
    the rewrite (one update copy, plain accesses, a windowable input). ``can_be_applied`` is
    ``bool(dead_carries(analyze_loop(loop)))``; ``sdfg-scan inspect`` calls the same function.
    """
    loop, sdfg = s.loop, s.sdfg
    stride = 1 if s.direction == "forward" else -1
    first = s.first_level
    out: list[tuple[str, str, object]] = []
    for c in sorted(name for name, slot in s.carries.items() if slot.kind in DEAD_KINDS):
        kind = s.carries[c].kind
        desc = sdfg.arrays[c]
        if not (desc.transient and _single(desc)):
            continue
        w = _carry_write(loop, c)
        if w is None:
            continue
        upd, t_node, _ = w
        t = t_node.data
        if used_in_control_flow(sdfg, c) or used_in_control_flow(sdfg, t):
            continue
        acc = list(_accesses(sdfg, c))
        if any(isinstance(e.src, nodes.NestedSDFG) for st, n in acc for e in st.in_edges(n)):
            continue
        reads = [(st, n) for st, n in acc if st.out_degree(n) > 0]
        reads_in = [(st, n) for st, n in reads if _inside(st, loop)]
        if kind == "unused":
            if not reads:
                out.append(("unused", c, w))
            continue
        if kind == "pass_through":
            outside = [(st, n) for st, n in acc if not _inside(st, loop)]
            t_outside = [1 for st, n in _accesses(sdfg, t) if not _inside(st, loop)]
            if not reads_in and all(_plain_copy_edges(st, n) for st, n in outside) and not t_outside:
                out.append(("pass_through", c, w))
            continue
        src = _delay_source(loop, t, upd, stride)
        if src is None:
            continue
        if any(not _inside(st, loop) for st, _ in reads):
            continue
        if not all(st.parent_graph is loop and st is not upd and nx.has_path(loop.nx, st, upd)
                   and not nx.has_path(loop.nx, upd, st) for st, _ in reads_in):
            continue
        out.append(("delay_line", c, (w, src, first, stride)))
    if not out:
        dead = dead_containers(sdfg)
        out.extend(("dead", c, dead) for c in sorted(s.carries) if c in dead)
    return out


def _flows(st: SDFGState, a: nodes.AccessNode) -> set[str]:
    """Containers that the dataflow of ``st`` writes from ``a``'s data: the access nodes reached from ``a``
    through code nodes and scopes (each taken as reading all its inputs into all its outputs)."""
    seen, todo, out = {id(a)}, [a], set()
    while todo:
        n = todo.pop()
        for e in st.out_edges(n):
            d = e.dst
            if id(d) in seen:
                continue
            seen.add(id(d))
            if isinstance(d, nodes.AccessNode):
                out.add(d.data)
            else:
                todo.append(d)
    return out


def dead_containers(sdfg: SDFG) -> set[str]:
    """Transients of ``sdfg`` (a column SDFG) whose values reach nothing the program keeps, and which can be
    removed with every node that writes them (see the legality list of :class:`DeadCarryElimination`).

    Flow-insensitive liveness over containers: live are the non-transients, views and references, the
    containers control flow or a nested SDFG's symbol mapping reads, and everything any live container is
    computed from; a container written by a node that also writes a live container or that another code
    node feeds, or touched by a map scope, a library node or a tasklet with side effects, is live too (the
    node, or the one feeding it, could not be removed whole).
    """
    arrays = sdfg.arrays
    flows: dict[str, set[str]] = {}
    live = {n for n, d in arrays.items() if not d.transient or isinstance(d, (dt.View, dt.Reference))}
    live |= {n for n in arrays if used_in_control_flow(sdfg, n)}
    writers: dict[str, list] = {}
    for st in sdfg.all_states():
        for n in st.nodes():
            if isinstance(n, nodes.NestedSDFG):
                live |= {str(f) for v in n.symbol_mapping.values()
                         for f in symbolic.pystr_to_symbolic(str(v)).free_symbols} & set(arrays)
            if isinstance(n, nodes.AccessNode):
                for dst in _flows(st, n):
                    flows.setdefault(n.data, set()).add(dst)
                for e in st.in_edges(n):
                    writers.setdefault(n.data, []).append((st, e.src))
                if any(not isinstance(x, (nodes.AccessNode, nodes.Tasklet, nodes.NestedSDFG))
                       or (isinstance(x, nodes.Tasklet) and x.side_effects)
                       for e in st.all_edges(n) for x in (e.src, e.dst)):
                    live.add(n.data)
    while True:
        # backward closure: a container whose values flow into a live one is live
        changed = True
        while changed:
            changed = False
            for src, dsts in flows.items():
                if src not in live and dsts & live:
                    live.add(src)
                    changed = True
        grown = set()
        for name, ws in writers.items():
            if name in live:
                continue
            for st, w in ws:
                if isinstance(w, nodes.AccessNode):
                    continue
                outs = {e.dst.data for e in st.out_edges(w) if isinstance(e.dst, nodes.AccessNode)}
                fed_by_code = any(not isinstance(e.src, nodes.AccessNode) for e in st.in_edges(w))
                if outs & live or len(outs) != st.out_degree(w) or fed_by_code:
                    grown.add(name)
        if not grown:
            return set(arrays) - live
        live |= grown


def _delay_source(loop: LoopRegion, t: str, upd: SDFGState, stride):
    """``(state, edge)`` of the copy ``x[idx(k)] -> t`` that is ``t``'s only write, or None."""
    sdfg = loop.sdfg
    writes = [(st, n) for st, n in _accesses(sdfg, t) if st.in_degree(n) > 0]
    if len(writes) != 1:
        return None
    st, n = writes[0]
    if st.parent_graph is not loop or st.in_degree(n) != 1:
        return None
    if st is not upd and not nx.has_path(loop.nx, st, upd):
        return None
    e = st.in_edges(n)[0]
    if e.data.wcr is not None:
        return None
    if isinstance(e.src, nodes.Tasklet):  # an identity tasklet ``out = in`` (lowered gt4py)
        e = _identity_tasklet_input(st, e)
        if e is None:
            return None
    if not isinstance(e.src, nodes.AccessNode):
        return None
    x = e.src.data
    xd = sdfg.arrays[x]
    if xd.transient or not isinstance(xd, dt.Array) or isinstance(xd, dt.View):
        return None
    if any(st2.in_degree(n2) > 0 for st2, n2 in _accesses(sdfg, x)):
        return None  # x must be read-only
    subset = e.data.subset if e.data.data == x else e.data.src_subset
    if subset is None or subset.num_elements() != 1:
        return None
    var = symbolic.pystr_to_symbolic(loop.loop_variable)
    if not any(var in symbolic.pystr_to_symbolic(str(r[0])).free_symbols for r in subset.ndrange()):
        return None
    return st, e, x, subset


_IDENTITY = re.compile(r"^\s*(\w+)\s*=\s*(\w+)\s*;?\s*$")


def _identity_tasklet_input(st: SDFGState, out_edge):
    """The input edge of a tasklet ``out = in`` with one input and one output, or None."""
    tk = out_edge.src
    if len(tk.in_connectors) != 1 or len(tk.out_connectors) != 1 or st.in_degree(tk) != 1 or st.out_degree(tk) != 1:
        return None
    m = _IDENTITY.match(tk.code.as_string.strip())
    ie = st.in_edges(tk)[0]
    if m is None or m.group(1) != out_edge.src_conn or m.group(2) != ie.dst_conn or ie.data.wcr is not None:
        return None
    return ie


# ------------------------------------------------------------------------------------------------
# rewrites
# ------------------------------------------------------------------------------------------------
def _drop_node_edges(st: SDFGState, n: nodes.AccessNode) -> None:
    for e in list(st.in_edges(n)):
        st.remove_edge(e)
        if isinstance(e.src, nodes.AccessNode) and st.degree(e.src) == 0:
            st.remove_node(e.src)
    st.remove_node(n)


def _remove_unused(loop: LoopRegion, c: str, info) -> None:
    sdfg = loop.sdfg
    for st, n in list(_accesses(sdfg, c)):
        _drop_node_edges(st, n)
    sdfg.remove_data(c, validate=False)


def _remove_pass_through(loop: LoopRegion, c: str, info) -> None:
    sdfg = loop.sdfg
    upd, t_node, c_node = info
    t = t_node.data
    _drop_node_edges_keep_src(upd, c_node)
    for st, n in list(_accesses(sdfg, c)):
        n.data = t
        for e in st.all_edges(n):
            if e.data.data == c:
                e.data.data = t
    sdfg.remove_data(c, validate=False)


def _drop_node_edges_keep_src(st: SDFGState, n: nodes.AccessNode) -> None:
    for e in list(st.in_edges(n)):
        st.remove_edge(e)
        if st.degree(e.src) == 0:
            st.remove_node(e.src)
    st.remove_node(n)


def _window_delay_line(loop: LoopRegion, c: str, info) -> None:
    sdfg = loop.sdfg
    (upd, t_node, c_node), (wst, wedge, x, subset), first, stride = info
    t = t_node.data
    var = loop.loop_variable
    k = symbolic.pystr_to_symbolic(var)
    xd = sdfg.arrays[x]
    # the connector squeezes extent-1 dimensions (a constant single-level column: x[k - 1] is never read)
    index = ", ".join(symbolic.symstr(symbolic.pystr_to_symbolic(str(b)).subs(k, k - stride))
                      for (b, _, _), size in zip(subset.ndrange(), xd.shape, strict=True) if size != 1)
    first_str = symbolic.symstr(first).replace("Min(", "min(").replace("Max(", "max(")
    code = f"__win = __prev if ({var} == {first_str}) else __x{f'[{index}]' if index else ''}"
    for st, n in [(st, n) for st, n in _accesses(sdfg, c) if st.out_degree(n) > 0]:
        name = sdfg.add_scalar(f"{c}_window", xd.dtype, transient=True, find_new_name=True)[0]
        tasklet = st.add_tasklet(f"{c}_delay_window", {"__prev": None, "__x": None}, {"__win": None}, code,
                                 language=dtypes.Language.Python)
        st.add_edge(n, None, tasklet, "__prev", Memlet(f"{c}[0]"))
        xn = st.add_read(x)
        st.add_edge(xn, None, tasklet, "__x", Memlet.from_array(x, xd))
        win = st.add_access(name)
        st.add_edge(tasklet, "__win", win, None, Memlet(f"{name}[0]"))
        for e in list(st.out_edges(n)):
            if e.dst is tasklet:
                continue
            st.remove_edge(e)
            mem = e.data
            if mem.data == c:
                mem.data = name
            st.add_edge(win, e.src_conn, e.dst, e.dst_conn, mem)
    # the update copy and, if nothing else reads it, the element copy into t
    _drop_node_edges_keep_src(upd, c_node)
    if not any(st.out_degree(n) > 0 for st, n in _accesses(sdfg, t)):
        for st, n in list(_accesses(sdfg, t)):
            _drop_node_edges_keep_src(st, n)
        sdfg.remove_data(t, validate=False)


def _remove_dead(loop: LoopRegion, c: str, dead) -> None:
    """Remove every access to the containers of ``dead``, the code nodes that only write them, and what
    that leaves unconnected; then the containers."""
    sdfg = loop.sdfg
    for st in list(sdfg.all_states()):
        doomed = {n for n in st.data_nodes() if n.data in dead}
        if not doomed:
            continue
        grew = True
        while grew:   # code nodes whose every output goes to a removed node (chains of tasklets too)
            more = {n for n in st.nodes() if n not in doomed and not isinstance(n, nodes.AccessNode)
                    and st.out_degree(n) > 0 and all(e.dst in doomed for e in st.out_edges(n))}
            doomed |= more
            grew = bool(more)
        # what only fed the removed nodes goes too (reads left without readers)
        feeders = {e.src for n in doomed for e in st.in_edges(n)} - doomed
        st.remove_nodes_from(list(doomed))
        for n in feeders:
            if n in st.nodes() and st.degree(n) == 0:
                st.remove_node(n)
    for name in sorted(dead):
        sdfg.remove_data(name, validate=False)
