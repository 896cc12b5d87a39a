"""RemoveScanSelfCopies: drop identity copies of a nested SDFG's input into its output inside scan bodies."""

from __future__ import annotations

import networkx as nx
from dace import data as dt
from dace import properties
from dace.sdfg import SDFG, SDFGState, nodes
from dace.sdfg import utils as sdutil
from dace.sdfg.state import ControlFlowRegion, LoopRegion
from dace.transformation import transformation as xf

from sdfg_scan.identity_copies import ancestors, enclosing_loop, identity_copies, single_element, writes
from sdfg_scan.scan_model import ScanStructure, SelfCopy
from sdfg_scan.scan_structure import analyze_loop, used_in_control_flow


@properties.make_properties
@xf.explicit_cf_compatible
class RemoveScanSelfCopies(xf.SingleStateTransformation):
    """Remove an identity copy ``out = in`` inside a nested SDFG of a scan body by merging the output
    temporary into the input container.

    Matched pattern: a ``NestedSDFG`` ``N`` (gt4py's ``if_stmt_N``, or any nested SDFG) in a state
    ``S`` inside a ``LoopRegion`` (the k-loop of a column SDFG: gt4py's scan nested SDFG or a ``Scan``
    node's ``body``). Inside ``N`` some state copies input connector ``i`` straight into output
    connector ``o`` (typically the ``else`` branch of ``if activated:``). Outside, ``i`` reads the
    scalar ``s`` and ``o`` writes the scalar temporary ``t``, which is later read (e.g. copied back
    into the carry ``s`` in ``scan_update``)::

        before                                   after
        s ──i──► N ──o──► t ──► ...              s ──i──► N ──o──► s ──► ...
        N: if c: o = f(i) else: o = i            N: if c: o = f(i)        (else: nothing)
        scan_update: t ──► s                     scan_update: (copy s -> s removed)

    Because ``o`` now writes ``s`` itself, a branch that does not write ``o`` leaves ``s`` at the
    value ``i`` had, which is what the removed copy produced. Bitwise identical results.

    Legality checks (``can_be_applied``; :func:`removable_self_copies`, which ``sdfg-scan inspect``
    calls too):

    - ``analyze_loop``: ``S`` lies in the k-loop of a column scan, and the copy is one of the
      analysis' ``SelfCopy``s (``ScanStructure.self_copies``): an identity copy
      (:func:`sdfg_scan.identity_copies.identity_copies`: a state of ``N`` holds exactly one write of
      ``o``, an access-node copy from ``i``; ``i`` is never written and ``o`` never read in ``N``;
      every other state writing ``o`` lies in a different branch of a ``ConditionalBlock`` than the
      copy; ``i``/``o`` are single-element containers of one dtype) whose ``i`` reads a carry and
      whose ``o`` feeds that carry's update.
    - ``_outer_scalars``: ``i`` is fed by one access node of a transient single-element ``s``, ``o``
      writes one access node of a transient single-element ``t`` (``t != s``, same dtype).
    - ``_t_only_written_here``: ``t`` is written nowhere else in the column SDFG and appears only
      once in ``S``.
    - ``_s_ordered_before``: in ``S`` every other node touching ``s`` is an ancestor of ``N``.
    - ``_s_elsewhere``: inside the loop, outside ``S``, ``s`` is only written by copies from ``t``
      (they become identities); after the loop ``s`` is read only if such a copy exists in the loop.
    - ``used_in_control_flow``: neither ``s`` nor ``t`` appears in an interstate edge or a condition.

    No options. Copies whose output buffer is the input buffer only under the caller's aliasing
    (graupel's ``q_out_k``/``q_in_k`` pass-throughs) are handled by ``ScanOutputsInPlace(inplace=...)``
    (``transformations/scan_outputs_in_place.py``); run it first, then this transformation.
    """

    nsdfg = xf.PatternNode(nodes.NestedSDFG)

    @classmethod
    def expressions(cls):
        return [sdutil.node_path_graph(cls.nsdfg)]

    # --------------------------------------------------------------------------------------------
    def can_be_applied(self, graph: SDFGState, expr_index: int, sdfg: SDFG, permissive: bool = False) -> bool:
        return self._find_candidate(graph, graph.sdfg) is not None

    def apply(self, graph: SDFGState, sdfg: SDFG):
        cand = self._find_candidate(graph, graph.sdfg)
        if cand is None:
            raise ValueError(
                f"sdfg_scan.RemoveScanSelfCopies: nested SDFG '{self.nsdfg.label}' has no removable identity copy; "
                "call can_be_applied first"
            )
        _merge(graph, self.nsdfg, *cand)

    # --------------------------------------------------------------------------------------------
    def _find_candidate(self, state: SDFGState, col: SDFG):
        """The first legal ``(inner_state, copy_edge, s_node, in_edge, t_node, out_edge)``, or None."""
        loop = enclosing_loop(state)
        # cheap necessary condition first: every SelfCopy of the analysis is an identity copy
        if loop is None or not any(True for _ in identity_copies(self.nsdfg)):
            return None
        s = analyze_loop(loop)
        if s is None:
            return None
        for sc in s.self_copies:
            if sc.nsdfg is self.nsdfg and sc.host is state:
                plan = self_copy_plan(s, sc)
                if plan is not None:
                    return plan
        return None


def removable_self_copies(s: ScanStructure) -> list[SelfCopy]:
    """The self-copies of ``s`` (``s.self_copies``) that ``RemoveScanSelfCopies`` removes.

    ``can_be_applied`` on a nested SDFG is "one of its self-copies is in this list"; ``sdfg-scan
    inspect`` calls the same function.
    """
    return [sc for sc in s.self_copies if self_copy_plan(s, sc) is not None]


def self_copy_plan(s: ScanStructure, sc: SelfCopy):
    """``(inner_state, copy_edge, s_node, in_edge, t_node, out_edge)`` to remove ``sc``, or None when illegal."""
    state, nsdfg, col = sc.host, sc.nsdfg, s.sdfg
    if state is None or nsdfg is None or state.sdfg is not col or enclosing_loop(state) is not s.loop:
        return None
    outer = _outer_scalars(state, nsdfg, sc.src, sc.dst)
    if outer is None:
        return None
    s_node, in_edge, t_node, out_edge = outer
    if not _t_only_written_here(col, state, t_node):
        return None
    if not _s_ordered_before(state, nsdfg, s_node.data):
        return None
    if not _s_elsewhere(col, state, s.loop, s_node.data, t_node.data):
        return None
    if used_in_control_flow(col, s_node.data) or used_in_control_flow(col, t_node.data):
        return None
    return sc.state, sc.edge, s_node, in_edge, t_node, out_edge


# ------------------------------------------------------------------------------------------------
# legality helpers
# ------------------------------------------------------------------------------------------------
def _outer_scalars(state: SDFGState, nsdfg: nodes.NestedSDFG, i: str, o: str):
    col = state.sdfg
    ins = [e for e in state.in_edges(nsdfg) if e.dst_conn == i]
    outs = [e for e in state.out_edges(nsdfg) if e.src_conn == o]
    if len(ins) != 1 or len(outs) != 1:
        return None
    s_node, t_node = ins[0].src, outs[0].dst
    if not (isinstance(s_node, nodes.AccessNode) and isinstance(t_node, nodes.AccessNode)):
        return None
    if s_node.data == t_node.data or ins[0].data.data != s_node.data or outs[0].data.data != t_node.data:
        return None
    ds, dtd = col.arrays[s_node.data], col.arrays[t_node.data]
    for d in (ds, dtd):
        if not (d.transient and single_element(d)) or isinstance(d, dt.View):
            return None
    if ds.dtype != dtd.dtype or type(ds) is not type(dtd):
        return None
    return s_node, ins[0], t_node, outs[0]


def _t_only_written_here(col: SDFG, state: SDFGState, t_node: nodes.AccessNode) -> bool:
    t = t_node.data
    if state.in_degree(t_node) != 1:
        return False
    if any(n is not t_node and n.data == t for n in state.data_nodes()):
        return False
    return all(n is t_node for _, n in writes(col, t))


def _s_ordered_before(state: SDFGState, nsdfg: nodes.NestedSDFG, s: str) -> bool:
    g = state.nx
    for n in state.data_nodes():
        if n.data != s:
            continue
        for nb in list(state.predecessors(n)) + list(state.successors(n)):
            if nb is nsdfg:
                continue
            if not nx.has_path(g, nb, nsdfg):
                return False
        if not nx.has_path(g, n, nsdfg):
            return False
    return True


def _is_copy_from(state: SDFGState, node: nodes.AccessNode, src_data: str) -> bool:
    ins = state.in_edges(node)
    return bool(ins) and all(isinstance(e.src, nodes.AccessNode) and e.src.data == src_data for e in ins)


def _inside(block, region: ControlFlowRegion) -> bool:
    return any(x is region for x in ancestors(block))


def _s_elsewhere(col: SDFG, state: SDFGState, loop: LoopRegion, s: str, t: str) -> bool:
    synced = False
    reads_after = False
    for st in col.all_states():
        if st is state:
            continue
        in_loop = _inside(st, loop)
        for n in st.data_nodes():
            if n.data != s:
                continue
            if in_loop:
                if st.out_degree(n) > 0:
                    return False
                if not _is_copy_from(st, n, t):
                    return False
                synced = True
            elif st.out_degree(n) > 0:
                reads_after = reads_after or _reachable_after(loop, st)
    return synced or not reads_after


def _reachable_after(loop: LoopRegion, block) -> bool:
    """Whether ``block`` (outside ``loop``) can execute after ``loop``."""
    region = loop.parent_graph
    b = block
    while b is not None and b.parent_graph is not region:
        b = b.parent_graph
        if b is None or isinstance(b, SDFG) and b is not region:
            return True  # unknown placement: be conservative
    if b is None:
        return True
    return b is loop or nx.has_path(region.nx, loop, b)


# ------------------------------------------------------------------------------------------------
# rewrite
# ------------------------------------------------------------------------------------------------
def _merge(state: SDFGState, nsdfg: nodes.NestedSDFG, inner_state, edge, s_node, in_edge, t_node, out_edge):
    col = state.sdfg
    s, t = s_node.data, t_node.data
    # 1. drop the copy inside the nested SDFG
    src, dst = edge.src, edge.dst
    inner_state.remove_edge(edge)
    for n in (src, dst):
        if inner_state.degree(n) == 0:
            inner_state.remove_node(n)
    # 2. N's output now writes s
    t_node.data = s
    out_edge.data.data = s
    for e in state.out_edges(t_node):
        _rename_memlet(e, t, s)
    # 3. every other access of t reads s
    for st in col.all_states():
        for n in list(st.data_nodes()):
            if n.data != t:
                continue
            n.data = s
            for e in st.out_edges(n):
                _rename_memlet(e, t, s)
    # 4. copies s -> s (formerly t -> s) are identities
    for st in col.all_states():
        for e in list(st.edges()):
            if (
                isinstance(e.src, nodes.AccessNode)
                and isinstance(e.dst, nodes.AccessNode)
                and e.src.data == s
                and e.dst.data == s
                and e.data.wcr is None
            ):
                st.remove_edge(e)
                for n in (e.src, e.dst):
                    if n in st.nodes() and st.degree(n) == 0:
                        st.remove_node(n)
    if not any(n.data == t for st in col.all_states() for n in st.data_nodes()):
        col.remove_data(t, validate=False)


def _rename_memlet(e, old: str, new: str) -> None:
    if e.data.data == old:
        e.data.data = new
