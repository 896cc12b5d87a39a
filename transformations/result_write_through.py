"""ResultWriteThrough: a result computed into a temporary that is then only copied whole into an output
array is computed into the output directly, and the copy goes.

gt4py lowers every field a program returns as a temporary ``T`` that the computation writes, followed by
one copy ``T -> out``. On graupel (20480 x 65) the six copies out of the lifted scan's temporaries cost
about as much as a tenth of the program; the temporaries also cost a page-faulting allocation per call.
"""

from __future__ import annotations

import copy
import itertools

import dace
import networkx as nx
import sympy
from dace import properties, subsets, symbolic
from dace.sdfg import nodes
from dace.sdfg import utils as sdutil
from dace.transformation import transformation as xf

from sdfg_scan.nodes.scan import Scan
from sdfg_scan.scan_strides import sync_body_strides

GRID = (0, 1, 2, 3, 5, 9)
"""Values each free symbol of the index ranges takes in the cover check (gt4py's ranges are piecewise
linear with breaks at small constants: ``Min(vertical_start, vertical_end - 1)``)."""

MAX_SYMBOLS = 5
"""Most free symbols a range check enumerates (6 ** 5 grid points)."""


class Refuse(Exception):
    """The pattern does not match; the message says why."""


def _sym(expr) -> sympy.Expr:
    return symbolic.pystr_to_symbolic(str(expr))


def _t_side(state: dace.SDFGState, e, name: str) -> subsets.Range:
    """The subset of ``name`` (an access node at one end of ``e``) that the edge moves."""
    end = e.src if isinstance(e.src, nodes.AccessNode) and e.src.data == name else e.dst
    sub = e.data.get_src_subset(e, state) if end is e.src else e.data.get_dst_subset(e, state)
    if sub is None:
        raise Refuse(f"an edge of '{name}' has no subset on its side")
    return sub


def _boxes(subs: list) -> list[list[tuple]]:
    out = []
    for sub in subs:
        box = []
        for b, e, st in sub.ndrange():
            if _sym(st) != 1:
                raise Refuse("an access of the temporary or its copy has a step")
            box.append((_sym(b), _sym(e) + 1))
        out.append(box)
    return out


def _numeric(exprs: list, syms: list):
    """``exprs`` as one Python function of ``syms`` (integer Min/Max and DaCe's int_floor/int_ceil; a call of
    anything else fails when evaluated, and is refused there)."""
    try:
        f = sympy.lambdify(syms, exprs, modules=[{"Min": min, "Max": max, "int_floor": lambda a, b: a // b,
                                                  "int_ceil": lambda a, b: -(-a // b)}, "math"])
    except Exception as err:  # noqa: BLE001 - any expression lambdify cannot take is refused
        raise Refuse(f"cannot evaluate the index ranges ({err})") from err
    return f


def check_cover(shape: tuple, written: list, read: list, copied: subsets.Range) -> None:
    """Every element the writers write and the other readers read lies in the copied box, for every value
    of the symbols on :data:`GRID` at which the original program stays inside the temporary (where it
    does not, the original is undefined). Raises :class:`Refuse` otherwise.

    Containment in a box is containment in each dimension, so the dimensions are checked in groups that
    share no symbol (gt4py names the cell range and the level range with symbols of their own), each group
    on the grid of its own symbols, at the values where the accesses are non-empty and inside the temporary
    in that group's dimensions (a superset of the points where they are in every dimension: stricter)."""
    boxes = _boxes(written + read + [copied])
    nd = len(shape)
    dim_syms = [set(_sym(shape[d]).free_symbols).union(*(x.free_symbols for box in boxes for x in box[d]))
                for d in range(nd)]
    groups: list[tuple[list[int], set]] = []
    for d in range(nd):
        dims, syms = [d], set(dim_syms[d])
        for g in [g for g in groups if g[1] & syms]:
            groups.remove(g)
            dims, syms = sorted(dims + g[0]), syms | g[1]
        groups.append((dims, syms))
    for dims, syms in groups:
        _check_cover_dims([_sym(shape[d]) for d in dims], [[box[d] for d in dims] for box in boxes],
                          sorted(syms, key=str))


def _check_cover_dims(ext_exprs: list, boxes: list, syms: list) -> None:
    """:func:`check_cover` for the dimensions of one group (``boxes`` restricted to them, the copy last)."""
    if len(syms) > MAX_SYMBOLS:
        raise Refuse(f"too many symbols in the index ranges to check them ({len(syms)})")
    flat = [x for box in boxes for pair in box for x in pair] + list(ext_exprs)
    f = _numeric(flat, syms)
    nd = len(ext_exprs)
    for vals in itertools.product(GRID, repeat=len(syms)):
        try:
            v = [int(x) for x in f(*vals)]
        except Exception as err:  # noqa: BLE001 - a function lambdify left symbolic (int_floor, ...) is refused
            raise Refuse(f"cannot evaluate the index ranges ({err})") from err
        ext = v[-nd:]
        got = [[(v[2 * (i * nd + d)], v[2 * (i * nd + d) + 1]) for d in range(nd)] for i in range(len(boxes))]
        live = [b for b in got if all(lo < hi for lo, hi in b)]
        if not all(0 <= lo and hi <= n for b in live for (lo, hi), n in zip(b, ext, strict=True)):
            continue   # the original accesses T out of bounds here
        box = got[-1]
        for b in live:
            if not all(c0 <= lo and hi <= c1 for (lo, hi), (c0, c1) in zip(b, box, strict=True)):
                raise Refuse(f"at {dict(zip(map(str, syms), vals, strict=True))} the temporary is accessed "
                             "outside the part that is copied")


def _unit(state: dace.SDFGState, e) -> nodes.Node:
    """The node whose execution writes through ``e``: a map's entry, or the node itself."""
    n = e.src
    return state.entry_node(n) if isinstance(n, nodes.ExitNode) else n


def check_order(state: dace.SDFGState, units: list, aliased: set[str]) -> None:
    """Every access of an array the output may alias (``aliased``) happens before any writer starts: its
    access nodes and their neighbours are strict ancestors of every writer (the copy ran after all of
    them; the writers now write the output earlier)."""
    g = state.nx
    before = None
    for u in units:
        anc = nx.ancestors(g, u)
        before = anc if before is None else before & anc
    before = before or set()
    for n in state.data_nodes():
        if n.data not in aliased:
            continue
        near = {n} | set(state.predecessors(n)) | set(state.successors(n))
        if not near <= before:
            raise Refuse(f"'{n.data}' may share memory with the output and is accessed while or after the "
                         "temporary is written")


def memlet_edges(state: dace.SDFGState, t_nodes: list) -> list:
    """Every edge of every memlet tree through ``t_nodes`` (once each)."""
    edges, seen = [], set()
    for n in t_nodes:
        for e in state.in_edges(n) + state.out_edges(n):
            for t in state.memlet_tree(e):
                if id(t) not in seen:
                    seen.add(id(t))
                    edges.append(t)
    return edges


def _plain_endpoints(state: dace.SDFGState, t_nodes: list, name: str) -> list:
    """:func:`memlet_edges`; refuses endpoints that keep ``name``'s layout in a descriptor of their own (a
    nested SDFG's array, a view)."""
    edges = memlet_edges(state, t_nodes)
    for t in edges:
        for end, conn in ((t.src, t.src_conn), (t.dst, t.dst_conn)):
            if isinstance(end, nodes.NestedSDFG):
                inner = end.sdfg.arrays.get(conn)
                if isinstance(inner, dace.data.Array) and any(symbolic.inequal_symbols(s, 1) for s in inner.shape):
                    raise Refuse(f"nested SDFG '{end.label}' holds '{name}' as an array of its own "
                                 f"('{conn}', with the temporary's strides)")
            if isinstance(end, nodes.AccessNode) and isinstance(end.desc(state.sdfg), dace.data.View):
                raise Refuse(f"a view of '{name}'")
    return edges


def _retarget(state: dace.SDFGState, e, old: str, new: str, shift: list) -> None:
    """``e``'s memlet, which reads or writes ``old`` on one side, reads or writes ``new`` shifted by ``shift``."""
    m = e.data
    if m.data == old:
        m.subset = copy.deepcopy(m.subset)
        m.subset.offset(shift, False)
        m.data = new
        return
    ends = [x for x in (state.memlet_path(e)[0].src, state.memlet_path(e)[-1].dst) if isinstance(x, nodes.AccessNode)]
    if any(x.data == old for x in ends):   # a copy: ``old``'s side is other_subset, or subset when unset
        m.other_subset = copy.deepcopy(m.subset if m.other_subset is None else m.other_subset)
        m.other_subset.offset(shift, False)


def rewire(state: dace.SDFGState, sdfg: dace.SDFG, t_nodes: list, cp, edges: list) -> None:
    """Remove the copy ``cp`` (``T -> O``) and ``O``'s node; ``t_nodes`` become ``O``'s nodes and every edge
    of ``edges`` (the memlet trees through them) accesses ``O`` at the copy's offset. Every ``Scan`` at an
    end of those edges takes ``O``'s strides in its body; one that owns its cells shifts its per-cell
    subsets alike."""
    name, target = cp.src.data, cp.dst.data
    src_sub, dst_sub = cp.data.get_src_subset(cp, state), cp.data.get_dst_subset(cp, state)
    shift = [sympy.expand(_sym(d[0]) - _sym(s[0])) for s, d in zip(src_sub.ndrange(), dst_sub.ndrange(), strict=True)]
    state.remove_edge(cp)
    edges = [e for e in edges if e is not cp]
    state.remove_node(cp.dst)
    scans: dict[int, tuple[Scan, set[str]]] = {}
    for e in edges:
        _retarget(state, e, name, target, shift)
        for end, conn in ((e.src, e.src_conn), (e.dst, e.dst_conn)):
            if isinstance(end, Scan):
                scans.setdefault(id(end), (end, set()))[1].add(conn)
    for n in t_nodes:
        n.data = target
    for node, conns in scans.values():
        if node.columns != "cells":
            continue
        subs = dict(node.cell_subsets)
        for c in conns & set(subs):
            r = subsets.Range.from_string(subs[c])
            r.offset(shift, False)
            subs[c] = str(r)
        node.cell_subsets = subs
    sdfg.remove_data(name, validate=False)
    for node, _ in scans.values():
        sync_body_strides(node, state)


@properties.make_properties
@xf.explicit_cf_compatible
class ResultWriteThrough(xf.SingleStateTransformation):
    """Write a result straight into the output it is copied to, and drop the copy.

    Matched pattern, in a state of the top-level SDFG: an access node of a transient array ``T`` with one
    edge that copies a part of ``T`` into an access node of a non-transient array ``O``::

        before                                   after
        T = empty(...)                           (T removed)
        T[...] = f(...)      # writers           O[s + shift] = f(...)
        y = g(T[...])        # other readers     y = g(O[s + shift])
        O[d0:d1] = T[s0:s1]  # the copy          (removed)

    The result is the original program's wherever the original is defined (below); the arithmetic does not
    change, so this is *exact*. Checks (``can_be_applied``; on refusal nothing changes):

    - ``T`` is a transient array (not a view, not a stream) accessed only in this state, not on interstate
      edges; ``O`` is a non-transient array of the top-level SDFG whose only access node in this state is
      the copy's target (nothing else in the state reads or writes it); the copy has no write-conflict
      resolution and moves equal extents with unit steps.
    - Nothing keeps ``T``'s layout in a descriptor of its own: no nested SDFG holds it as a multi-element
      array, no view of it (a lifted ``Scan`` body takes ``O``'s strides after the rewrite).
    - ``check_cover``: what the writers write and what other readers read of ``T`` lies in the copied part,
      for every value of the index symbols on a small grid at which the original stays inside ``T``
      (gt4py's level ranges: ``Min(vertical_start, vertical_end - 1)`` makes the temporaries one level
      longer than the copy for an empty domain; such a temporary is refused).
    - ``check_order``: the output may share memory with the arrays named in ``inplace`` (those the caller
      declares aliased, as ``sdfg_scan.optimize(inplace=...)``), or with every other non-transient array
      when ``assume_no_alias`` is False. Every access of such an array then happens before the first writer
      of ``T`` starts (its access nodes and their neighbours are strict ancestors of each writer), since the
      writers now write the output where the copy wrote it after them.

    :param inplace: output -> input pairs the caller aliases (the output's inputs are checked as above).
    :param assume_no_alias: DaCe's model (distinct non-transient arrays do not overlap) for the pairs not in
        ``inplace``; False (gt4py's hooks, where callers such as icon4py's graupel driver pass the same
        buffer twice) treats every other non-transient array as possibly aliased.
    """

    src = xf.PatternNode(nodes.AccessNode)
    dst = xf.PatternNode(nodes.AccessNode)

    inplace = properties.DictProperty(key_type=str, value_type=str, default={},
                                      desc="output -> input pairs the caller aliases")
    assume_no_alias = properties.Property(dtype=bool, default=True,
                                          desc="distinct non-transient arrays do not overlap unless in inplace")

    @classmethod
    def expressions(cls):
        return [sdutil.node_path_graph(cls.src, cls.dst)]

    def _plan(self, state: dace.SDFGState, sdfg: dace.SDFG):
        t, o = self.src, self.dst
        if sdfg.parent_nsdfg_node is not None:
            raise Refuse("only in the top-level SDFG (a nested SDFG's arrays may share memory)")
        tdesc, odesc = sdfg.arrays[t.data], sdfg.arrays[o.data]
        if not tdesc.transient or type(tdesc) is not dace.data.Array:
            raise Refuse(f"'{t.data}' is not a transient array")
        if odesc.transient or type(odesc) is not dace.data.Array:
            raise Refuse(f"'{o.data}' is not a non-transient array")
        if tdesc.dtype != odesc.dtype or len(tdesc.shape) != len(odesc.shape):
            raise Refuse(f"'{t.data}' and '{o.data}' differ in type or rank")
        cps = state.edges_between(t, o)
        if len(cps) != 1 or cps[0].data.wcr is not None or cps[0].src_conn or cps[0].dst_conn:
            raise Refuse(f"'{t.data}' reaches '{o.data}' other than through one plain copy")
        cp = cps[0]
        if state.in_degree(o) != 1 or state.out_degree(o) != 0 or \
                [n for n in state.data_nodes() if n.data == o.data] != [o]:
            raise Refuse(f"'{o.data}' is accessed in this state other than by the copy")
        t_nodes = [n for n in state.data_nodes() if n.data == t.data]
        others = [n for st in sdfg.states() if st is not state for n in st.data_nodes() if n.data == t.data]
        if others or any(t.data in e.data.free_symbols for e in sdfg.all_interstate_edges()):
            raise Refuse(f"'{t.data}' is used outside this state")
        src_sub, dst_sub = cp.data.get_src_subset(cp, state), cp.data.get_dst_subset(cp, state)
        if src_sub is None or dst_sub is None or len(src_sub) != len(tdesc.shape) or len(dst_sub) != len(tdesc.shape):
            raise Refuse("the copy does not name a subset of each side with the arrays' rank")
        sbox, dbox = _boxes([src_sub, dst_sub])
        if any(sympy.simplify(se - sb - (de - db)) != 0 for (sb, se), (db, de) in zip(sbox, dbox, strict=True)):
            raise Refuse("the copy moves unequal extents")
        edges = _plain_endpoints(state, t_nodes, t.data)
        written = [_t_side(state, e, t.data) for n in t_nodes for e in state.in_edges(n)]
        read = [_t_side(state, e, t.data) for n in t_nodes for e in state.out_edges(n) if e is not cp]
        if not written:
            raise Refuse(f"'{t.data}' is not written in this state")
        check_cover(tuple(tdesc.shape), written, read, src_sub)
        aliased = set(v for k, v in self.inplace.items() if k == o.data)
        if not self.assume_no_alias:
            aliased |= {n.data for n in state.data_nodes()
                        if not sdfg.arrays[n.data].transient and n.data != o.data}
        units = [_unit(state, e) for n in t_nodes for e in state.in_edges(n)]
        check_order(state, units, aliased)
        return t_nodes, cp, edges

    def can_be_applied(self, graph, expr_index, sdfg, permissive=False) -> bool:
        return _reason(self, graph, sdfg) is None

    def apply(self, graph, sdfg):
        t_nodes, cp, edges = self._plan(graph, sdfg)
        rewire(graph, sdfg, t_nodes, cp, edges)


def refusal(state: dace.SDFGState, sdfg: dace.SDFG, src: nodes.AccessNode, dst: nodes.AccessNode,
            **options) -> str | None:
    """Why :class:`ResultWriteThrough` does not apply to ``src -> dst`` (None: it applies)."""
    xform = ResultWriteThrough()
    region = state.parent_graph
    xform.setup_match(sdfg, region.cfg_id, region.node_id(state),
                      {ResultWriteThrough.src: state.node_id(src), ResultWriteThrough.dst: state.node_id(dst)}, 0)
    for k, v in options.items():
        setattr(xform, k, v)
    return _reason(xform, state, sdfg)


def _reason(xform: ResultWriteThrough, state: dace.SDFGState, sdfg: dace.SDFG) -> str | None:
    try:
        xform._plan(state, sdfg)
    except Refuse as err:
        return str(err)
    return None


__all__ = ["ResultWriteThrough", "check_cover", "memlet_edges", "refusal", "rewire"]
