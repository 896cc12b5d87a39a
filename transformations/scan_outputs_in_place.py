"""ScanOutputsInPlace: under a declared output/input aliasing, write a scan's output in place and drop its copy.

This module holds the transformation and its legality analysis (``_plan_pair``, one section per check in
the class docstring); the index utilities, read/ordering analyses and the rewrite ``apply`` performs live
in ``scan_outputs_in_place_rewrite.py`` beside it.
"""

from __future__ import annotations

import networkx as nx
import sympy
from dace import data as dt
from dace import properties
from dace.sdfg import SDFG, SDFGState, nodes
from dace.sdfg import utils as sdutil
from dace.sdfg.state import LoopRegion
from dace.transformation import transformation as xf
from dace.transformation.passes.analysis import loop_analysis

from sdfg_scan.identity_copies import identity_copies
from sdfg_scan.transformations.scan_outputs_in_place_rewrite import (
    _access_nodes,
    _all_nodes,
    _begin,
    _eq,
    _inside,
    _level_read,
    _point,
    _read_points,
    _reads_only_at,
    _rewrite,
    _sym,
    _unify,
    _where_order,
    zout_subset,
)


@properties.make_properties
@xf.explicit_cf_compatible
class ScanOutputsInPlace(xf.SingleStateTransformation):
    """Write a scan output straight into the input buffer it is declared to alias, and drop the identity
    copies of that input into the output: the ``where`` else branch before the scan and the scan body's
    "level not activated" pass-through.

    gt4py's graupel computes ``T = where(mask, f(inp), inp)`` in a Cell x K map ``M1`` (nested SDFG ``W``),
    then a scan (nested SDFG ``Z`` in a Cell map ``M2``) reads ``T`` and writes ``out[c, k]``; in levels
    that are not activated the scan copies ``T[c, k]`` through ``N`` (``if_stmt``) into ``out``. When the
    caller passes the same buffer for ``out`` and ``inp`` (icon4py's driver does), both copies rewrite a
    value the buffer already holds once ``T`` also lives in that buffer.

    Matched pattern: the scan nested SDFG ``Z`` (contains a forward ``LoopRegion``) inside a map in a state
    of the top-level SDFG, for one declared pair ``out -> inp`` of ``inplace``::

        before                                          after
        M1: W: if m: o = f(inp[c,k]) else: o = inp[c,k]  M1: W: if m: inp[c,k] = f(inp[c,k])
            L = o; T[c,k] = L                                  (else: nothing; L and T removed)
        M2/Z: x = T[c,k]; N: if a: o = g(x) else: o = x  M2/Z: x = inp[c,k]; N: if a: out[k] = g(x)
              (t = o; carry <- t;) out[k] = o/t                (else: nothing); carry <- t as before
              reads T[c, k+1] (tasklet on the whole T)          reads inp[c, k+1]
        out: written by Z                                out: never accessed (results are in inp)

    Same semantics as the original program called with ``out`` and ``inp`` aliased (same buffer, same
    field origin); ``out`` stays in the signature, never accessed, as in icon4py's hooks. ``N``'s and
    ``W``'s outputs become dynamic: a branch that does not write them leaves the element as it is.

    Legality checks (``can_be_applied``), one pair at a time; any failure leaves the SDFG unchanged:

    - ``_declared``: ``out`` and ``inp`` are non-transient arrays of the top-level SDFG with the same dtype
      whose shapes and strides are equal up to a renaming of symbols (``_unify``).
    - ``_out_written_by_scan``: ``out`` has exactly one access node in the SDFG, written only by ``Z``'s
      connector ``y`` through ``M2``'s exit, never read.
    - ``_body_write``: inside ``Z`` the forward loop (stride 1) writes ``y`` exactly once, at ``[k]``, from
      output ``o`` of a nested SDFG ``N``, directly (``o`` has no other use) or through a scalar ``t``
      written only there; ``N``'s other states write ``o`` once each; ``N`` copies its input ``i`` into
      ``o`` in a branch exclusive with those writes.
    - ``_source``: ``i`` reads ``X[c, k]`` (point), ``X`` a connector of ``Z`` bound to a transient ``T``
      (window from its origin), and ``X[c, k]`` and ``y[k]`` name the same element up to a constant
      offset ``delta`` (no map or loop index in it).
    - ``_producer``: ``T`` is written only in this state by ``M1`` through a scalar ``L`` fed by nested
      SDFG ``W``'s output, at ``T[c1, k1]``; ``W`` copies input ``inp[c1, k1] + delta`` into that output
      (the ``where`` else branch); ``T`` is read only by ``M2``.
    - ``_inp_reads``: ``inp`` is never written and read only by ``M1``, only at that same point (checked
      through nested SDFGs that receive the array); readers that are not ancestors of ``W`` get an
      empty-memlet edge to ``W`` (refused if ``W`` reaches them: they would read the new value).
    - ``_scan_reads`` (``_read_points``, ``_level_read``): every element of ``T`` that ``Z`` reads is the
      own column at level ``k + v`` (``v >= 0`` constant) or at a constant level ``>=`` the loop's last
      ``k``: levels step ``k`` has not overwritten yet. Point memlets give the element directly; a Python
      tasklet that receives a window of ``T`` (graupel's ``concat_where_tasklet_t_kp1``,
      ``__in0[c, 1 + k] if k <= 63 else __in1[c, k]``) is parsed and every subscript of its connector
      checked; any other use of that connector (whole-array argument, C++ code) refuses. Reads that may
      hit level ``k`` itself must feed ``N`` (they run before ``y[k]`` is stored); connectors bound to
      ``T`` are passed into nested SDFGs only as scalars.
    - ``_where_order``: inside ``W`` every read of a connector bound to ``inp`` happens before ``W``'s
      output is written: in the same state (empty-memlet edges are added from readers that are not yet
      ancestors; refused if the write reaches a reader) or in a branch exclusive with it; ``inp``-bound
      connectors and the output do not appear in ``W``'s control flow.

    Options: ``inplace`` (dict ``out -> inp``, empty = does nothing): the caller's aliasing declaration.
    """

    nsdfg = xf.PatternNode(nodes.NestedSDFG)
    inplace = properties.DictProperty(key_type=str, value_type=str, default={},
                                      desc="output -> input container the caller passes the same buffer for")

    @classmethod
    def expressions(cls):
        return [sdutil.node_path_graph(cls.nsdfg)]

    def can_be_applied(self, graph: SDFGState, expr_index: int, sdfg: SDFG, permissive: bool = False) -> bool:
        return self._plan(graph) is not None

    def apply(self, graph: SDFGState, sdfg: SDFG):
        plan = self._plan(graph)
        if plan is None:
            raise ValueError(f"sdfg_scan.ScanOutputsInPlace: '{self.nsdfg.label}' has no legal in-place pair; "
                             "call can_be_applied first")
        _rewrite(graph, self.nsdfg, plan)

    def _plan(self, state: SDFGState):
        if not self.inplace:
            return None
        for out, inp in sorted(self.inplace.items()):
            try:
                plan = _plan_pair(state, self.nsdfg, out, inp)
            except (ValueError, KeyError, TypeError, AttributeError, IndexError):
                plan = None
            if plan is not None:
                return plan
        return None


# ------------------------------------------------------------------------------------------------
def _plan_pair(state: SDFGState, z: nodes.NestedSDFG, out: str, inp: str):
    root = state.sdfg
    if root.parent_nsdfg_node is not None or out not in root.arrays or inp not in root.arrays or out == inp:
        return None
    dout, dinp = root.arrays[out], root.arrays[inp]
    # _declared
    if not (type(dout) is dt.Array and type(dinp) is dt.Array) or dout.transient or dinp.transient:
        return None
    if dout.dtype != dinp.dtype:
        return None
    sigma = _unify(dout, dinp)
    if sigma is None:
        return None
    # _out_written_by_scan
    outs = _access_nodes(root, out)
    if len(outs) != 1 or outs[0][0] is not state:
        return None
    out_node = outs[0][1]
    if state.out_degree(out_node) != 0 or state.in_degree(out_node) != 1:
        return None
    out_path = state.memlet_path(state.in_edges(out_node)[0])
    if len(out_path) != 2 or out_path[0].src is not z or not isinstance(out_path[1].src, nodes.MapExit):
        return None
    y = out_path[0].src_conn
    m2_entry = state.entry_node(z)
    if m2_entry is None or state.exit_node(m2_entry) is not out_path[1].src:
        return None
    cell = _sym(m2_entry.map.params[0]) if len(m2_entry.map.params) == 1 else None
    if cell is None:
        return None
    inner = z.sdfg
    loops = [r for r in inner.all_control_flow_regions() if isinstance(r, LoopRegion)]
    if len(loops) != 1 or loop_analysis.get_loop_stride(loops[0]) != 1:
        return None
    loop = loops[0]
    k = _sym(loop.loop_variable)
    last = loop_analysis.get_loop_end(loop)  # inclusive last value of k
    if last is None:
        return None
    # _body_write
    ywrites = [(st, n) for st in inner.all_states() for n in st.data_nodes() if n.data == y]
    if len(ywrites) != 1:
        return None
    body, yw = ywrites[0]
    if not _inside(body, loop) or body.out_degree(yw) != 0 or body.in_degree(yw) != 1:
        return None
    yedge = body.in_edges(yw)[0]
    ypt = _point(yedge.data.get_dst_subset(yedge, body))
    if ypt is None or len(ypt) != 1 or not _eq(ypt[0], k) or yedge.data.wcr is not None:
        return None
    if isinstance(yedge.src, nodes.NestedSDFG):  # direct: N's output o writes y[k] itself
        n, o = yedge.src, yedge.src_conn
        if len([e for e in body.out_edges(n) if e.src_conn == o]) != 1:
            return None
    else:  # through a scalar t (that may also feed the carry)
        tnode = yedge.src
        if not isinstance(tnode, nodes.AccessNode) or body.in_degree(tnode) != 1:
            return None
        tdesc = inner.arrays[tnode.data]
        if not (tdesc.transient and tdesc.total_size == 1):
            return None
        if any(n is not tnode and n.data == tnode.data and st.in_degree(n) > 0 for st, n in _all_nodes(inner)):
            return None
        nedge = body.in_edges(tnode)[0]
        n = nedge.src
        if not isinstance(n, nodes.NestedSDFG):
            return None
        o = nedge.src_conn
    cands = [(ist, ie) for ist, ie in identity_copies(n) if ie.dst.data == o]
    if len(cands) != 1:
        return None
    copy_state, copy_edge = cands[0]
    i = copy_edge.src.data
    other_writes = [(st, w) for st, w in _all_nodes(n.sdfg) if w.data == o and st.in_degree(w) > 0 and st is not copy_state]
    if not other_writes or len({id(st) for st, _ in other_writes}) != len(other_writes):
        return None
    # _source
    iedges = [e for e in body.in_edges(n) if e.dst_conn == i]
    if len(iedges) != 1 or not isinstance(iedges[0].src, nodes.AccessNode):
        return None
    x = iedges[0].src.data
    if x not in z.in_connectors or not isinstance(n.sdfg.arrays[i], dt.Scalar):
        return None
    xpt = _point(iedges[0].data.src_subset or iedges[0].data.subset)
    zmap = {_sym(s): _sym(v) for s, v in z.symbol_mapping.items()}
    if xpt is None or len(xpt) != 2:
        return None
    xpt = tuple(e.subs(zmap, simultaneous=True) for e in xpt)
    zin = [e for e in state.in_edges(z) if e.dst_conn == x]
    if len(zin) != 1:
        return None
    xpath = state.memlet_path(zin[0])
    tn = xpath[0].src
    if len(xpath) != 2 or not isinstance(tn, nodes.AccessNode) or xpath[0].dst is not m2_entry:
        return None
    T = tn.data
    dT = root.arrays[T]
    if not dT.transient or type(dT) is not dt.Array or len(dT.shape) != 2:
        return None
    xbeg = _begin(zin[0].data.subset)
    if any(b != 0 for b in xbeg):
        return None
    t_abs = tuple(xbeg[d] + xpt[d] for d in range(2))
    if not _eq(t_abs[0], cell) or not _eq(t_abs[1], k):
        return None
    ybeg = _begin(out_path[1].data.subset)  # out window in the map exit -> out edge (outer)
    ywin = _begin(zout_subset(state, z, y))
    out_abs = (ywin[0], ywin[1] + k)
    delta = tuple(sympy.simplify(out_abs[d] - t_abs[d]) for d in range(2))
    params = {cell, k} | {_sym(p) for p in m2_entry.map.params}
    if any(d.free_symbols & params for d in delta):
        return None
    del ybeg
    delta_inp = tuple(d.subs(sigma, simultaneous=True) for d in delta)
    # _producer
    tnodes = _access_nodes(root, T)
    if any(st is not state for st, _ in tnodes):
        return None
    writes = [(nn, e) for _, nn in tnodes for e in state.in_edges(nn)]
    if len(writes) != 1:
        return None
    t_write_node, t_write = writes[0]
    for _, nn in tnodes:
        for e in state.out_edges(nn):
            if e.dst is not m2_entry:
                return None
    m1_exit = t_write.src
    if not isinstance(m1_exit, nodes.MapExit) or m1_exit is out_path[1].src:
        return None
    m1_entry = state.entry_node(m1_exit)
    inner_w = [e for e in state.in_edges(m1_exit) if e.dst_conn == "IN_" + t_write.src_conn[4:]]
    if len(inner_w) != 1 or not isinstance(inner_w[0].src, nodes.AccessNode):
        return None
    lnode = inner_w[0].src
    if root.arrays[lnode.data].total_size != 1 or state.in_degree(lnode) != 1 or state.out_degree(lnode) != 1:
        return None
    wpt = _point(inner_w[0].data.get_dst_subset(inner_w[0], state))
    if wpt is None or len(wpt) != 2:
        return None
    wedge = state.in_edges(lnode)[0]
    w = wedge.src
    if not isinstance(w, nodes.NestedSDFG) or state.entry_node(w) is not m1_entry:
        return None
    wc = [(ist, ie) for ist, ie in identity_copies(w) if ie.dst.data == wedge.src_conn]
    if len(wc) != 1:
        return None
    iw = wc[0][1].src.data
    iwe = [e for e in state.in_edges(w) if e.dst_conn == iw]
    if len(iwe) != 1:
        return None
    iwpath = state.memlet_path(iwe[0])
    if iwpath[0].data.data != inp or not isinstance(iwpath[0].src, nodes.AccessNode):
        return None
    p = _point(iwe[0].data.subset)
    target = tuple(sympy.simplify(wpt[d] + delta_inp[d]) for d in range(2))
    if p is None or any(not _eq(p[d], target[d]) for d in range(2)):
        return None
    # _inp_reads
    for st, nn in _access_nodes(root, inp):
        if st is not state or state.in_degree(nn) != 0:
            return None
        for e in state.out_edges(nn):
            if e.dst is not m1_entry:
                return None
    order = []  # readers not yet ordered before W (which will store inp[c, k]): the rewrite adds empty edges
    for e in state.out_edges(m1_entry):
        if e.data.data != inp:
            continue
        if e.dst is not w and not nx.has_path(state.nx, e.dst, w):
            if nx.has_path(state.nx, w, e.dst) or isinstance(e.dst, nodes.EntryNode):
                return None
            order.append(e.dst)
        if not _reads_only_at(state, e, target):
            return None
    # _scan_reads
    tconns = {e.dst_conn for e in state.in_edges(z) if state.memlet_path(e)[0].src.data == T}
    for st in inner.all_states():
        for e in st.edges():
            if e.data.data not in tconns:
                continue
            if not _inside(st, loop):
                return None
            pts = _read_points(e)
            if pts is None:
                return None
            for pt in pts:
                pt = tuple(_sym(v).subs(zmap, simultaneous=True) for v in pt)
                level = _level_read(pt, cell, k, last)
                if level is None:
                    return None
                if level == "k" and not (st is body and (e.dst is n or nx.has_path(st.nx, e.dst, n))):
                    return None  # may read level k: must happen before N writes y[k]
            if isinstance(e.dst, nodes.NestedSDFG) and not isinstance(e.dst.sdfg.arrays[e.dst_conn], dt.Scalar):
                return None
    # _where_reads_first
    winp = {e.dst_conn for e in state.in_edges(w) if state.memlet_path(e)[0].data.data == inp}
    w_order = _where_order(w, wedge.src_conn, wc[0][0], wc[0][1], winp)
    if w_order is None:
        return None
    return dict(out=out, inp=inp, sigma=sigma, out_node=out_node, out_path=out_path, y=y, body=body, yw=yw,
                w=w, wedge=wedge, w_copy=wc[0], w_order=w_order, l_edge=inner_w[0],
                yedge=yedge, n=n, o=o, copy_state=copy_state, copy_edge=copy_edge, other_writes=other_writes,
                T=T, tconns=tconns, order=order, lnode=lnode, delta=delta_inp, m1_exit=m1_exit, m2_entry=m2_entry, tnodes=tnodes)
