"""``ScanPairToTridiagonal``: a Thomas forward sweep + back substitution (two lifted scans) -> one ``TridiagonalSolve``."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import dace
import sympy
from dace import properties, subsets
from dace.sdfg import nodes
from dace.sdfg import utils as sdutil
from dace.transformation import transformation as xf

from sdfg_scan.nodes.scan import Scan
from sdfg_scan.nodes.tridiagonal_solve import TridiagonalSolve
from sdfg_scan.scan_structure import NotAScan
from sdfg_scan.transformations.scan_pair_to_tridiagonal_algebra import (
    Refuse,
    back_form,
    leaves,
    same_arithmetic,
    same_value,
    substitution_form,
    thomas_forms,
)
from sdfg_scan.transformations.scan_pair_to_tridiagonal_concat import (
    add_skipped_levels,
    check_cover,
    concat_of,
    prune_dead,
    write_through,
)
from sdfg_scan.transformations.scan_pair_to_tridiagonal_outer import (
    Column,
    column_of,
    intermediate_ok,
    outer_index,
    same,
    window,
)

_ROLES = ("a", "b", "c", "d")
_PREFACTORED_ROLES = ("a", "w", "cp", "d")


@dataclass
class _Plan:
    removable: list
    drop_data: list
    sources: dict  # role -> (access node, window)
    dst: nodes.AccessNode
    out_window: subsets.Range
    axis: int
    exact: bool
    swap: bool = False
    notes: list = field(default_factory=list)
    prefactored: bool = False   # the forward substitution of a factored solve: (a, w, cp, d) -> x
    skipped: tuple | None = None   # icon4py's concat_where form: (x index, elimination, substitution)
    dead: list = field(default_factory=list)   # what fed only the removed fill maps (concat_where form)


@properties.make_properties
class ValueMatched(xf.SingleStateTransformation):
    """What the Thomas recognisers (this module's and ``ScanToTridiagonalFactor``) share: the pattern (one
    lifted ``Scan``) and the ``exact`` option."""

    scan = xf.PatternNode(Scan)
    exact = properties.Property(dtype=bool, default=True, desc="accept only bitwise-equal replacements")

    def __init__(self, *args, exact: bool = True, **kwargs):
        super().__init__(*args, **kwargs)
        self.exact = exact

    @classmethod
    def expressions(cls):
        return [sdutil.node_path_graph(cls.scan)]


@properties.make_properties
class ScanPairToTridiagonal(ValueMatched):
    """Replace the two scans of a Thomas solve (elimination, then back substitution) by one ``TridiagonalSolve``.

    Matched pattern (recognised by the values computed, names play no role): two lifted
    ``columns="single"`` :class:`sdfg_scan.Scan` nodes in one state, each alone in a one-parameter map
    over the same cells and the same level range, in opposite directions, connected only through two
    intermediate access nodes::

        map i: E = Scan(dir)(a, b, c, d -> U, V)      # elimination, carries u, v (init 0)
            u = s * c / (b - a * s*u[k-1])              # u holds s*c' (s = +1 or -1: icon4py's z_q = -c')
            v = (d - a * v[k-1]) / (b - a * s*u[k-1])   # v holds d'
        map i: B = Scan(-dir)(U, V -> X)               # back substitution, carry x (init 0)
            x = V - s*U * x[k-+1]
                                       ->     TridiagonalSolve(axis=K)(a, b, c, d -> X)

    Each carry update and output is interpreted symbolically (tasklets traced back to the inputs
    at level k and the carries of the previous level) and compared with the forms above up to
    algebraic identity (sympy), for every assignment of the elimination's four inputs to the roles
    ``a, b, c, d`` and both signs ``s``.

    **Pre-factored form.** When ``d'`` comes from a one-carry forward substitution that reads the
    inverse pivots ``w`` of a factorisation (``v = (d - a * v[k-1]) * w``, carry init 0), and the back
    substitution reads ``c'`` (sign ``s = +1``) from any access node (a program argument, or the output of
    a factorisation scan that :class:`ScanToTridiagonalFactor` replaces), the two scans become one
    ``TridiagonalSolve(prefactored=True)(a, w, cp, d -> X)``; ``c'`` and ``w`` stay where they are::

        map i: S = Scan(fwd)(a, d, w -> V)             # v = (d - a * v[k-1]) * w
        map i: B = Scan(bwd)(CP, V -> X)               # x = V - CP * x[k+1]
                                       ->     TridiagonalSolve(prefactored=True)(a, w, CP, d -> X)

    Reproducibility: **bitwise** equal to the two scans when the body performs Thomas' operations
    (``w = 1/(b - a*c'); c' = c*w; d' = (d - a*d')*w; x = d' - c'*x``) up to rounding-neutral rewrites
    (commuted operands, moved signs, ``0 - y == -y``: icon4py's form), for finite operands (the sign of a
    zero result may differ). Any other algebraically identical form (e.g. ``c / p`` instead of
    ``c * (1/p)``), and an elimination running backward (solved forward with ``a`` and ``c`` swapped),
    agree within 1e-12 relative on diagonally dominant systems; they are only accepted with
    ``exact=False``.

    **icon4py's concat_where form** (``solve_w`` in icon4py 0.4.1): the elimination runs under
    ``concat_where(K > 0, ..., zeros)``, so each intermediate is a shifted copy of the elimination's output
    plus a map writing the constant 0 on the levels it skips (traced back through gt4py's broadcast
    copies), and the substitution covers those levels too. The pair then becomes one ``TridiagonalSolve``
    over the elimination's levels, and a map writes the skipped levels as the substitution computed them
    there, ``x = 0 - 0 * x[first solved level]`` (``0 - 0 * 0`` where no level is solved): bitwise the
    original. The level ranges are ``Min``/``Max`` expressions; that the fill covers exactly the skipped
    levels is checked on a grid of symbol values (``scan_pair_to_tridiagonal_concat.levels_agree``). Carry
    inits may come from constant tasklets outside the maps (the lowered form gt4py's first hook sees).
    Where the substitution's result temporary is then only copied whole into one array that nothing else
    in the state touches (``solve_w``: ``out``, after a second ``concat_where`` with ``next_w``), all its
    writers write that array directly and the copy goes (``write_through``; on ``solve_w`` the copy
    cost as much as the solve).

    Legality checks (``can_be_applied`` runs the same analysis as ``apply``; refused => unchanged):

    - ``column_of``: each scan is alone in a top-level, unit-step, one-parameter map (constant-init
      tasklets aside); no prologue, exit states or branches; every carry recurrent, initialised to the
      constant zero;
    - ``_elimination`` / ``_substitution``: the values above, the elimination's outputs are its new
      carries, the substitution's output its new carry; four / two distinct inputs read at level k;
    - ``intermediate_ok``: ``U`` flows only into ``B`` through a transient used nowhere else; ``V`` likewise,
      or is ``X``'s own container (icon4py writes ``w`` in place); ``B`` reads exactly what ``E`` wrote;
    - ``outer_index``: every operand's element is ``(cell + const, level + const)`` in one order,
      inner strides equal the outer ones; same map range and level range for both scans.

    :param exact: accept only pairs whose result is bitwise the original's (default True).
    """

    def can_be_applied(self, graph, expr_index, sdfg, permissive=False):
        return _plan_or_none(graph, sdfg, self.scan, self.exact) is not None

    def apply(self, graph: dace.SDFGState, sdfg: dace.SDFG):
        plan = _plan(graph, sdfg, self.scan, self.exact)
        node = TridiagonalSolve(f"{self.scan.label}_tridiagonal", axis=plan.axis, prefactored=plan.prefactored)
        node.debuginfo = self.scan.debuginfo
        ins = {role: plan.sources[role] for role in (_PREFACTORED_ROLES if plan.prefactored else _ROLES)}
        solved = plan.dst if plan.skipped is None else graph.add_access(plan.dst.data)
        node = replace_scans(graph, sdfg, node, ins, {"x": (solved, plan.out_window)}, plan.removable,
                             plan.drop_data)
        if plan.skipped is not None:
            add_skipped_levels(graph, solved, plan.dst, *plan.skipped)
            prune_dead(graph, sdfg, plan.dead)
            write_through(graph, sdfg, plan.dst)
            sdfg.root_sdfg.reset_cfg_list()
        return node


def replace_scans(graph: dace.SDFGState, sdfg: dace.SDFG, node, ins: dict, outs: dict, removable: list,
                  drop: list):
    """Put ``node`` in the place of the matched scans: connector -> (access node, window) for its inputs
    and outputs, then remove the scans' nodes and the data only they used."""
    graph.add_node(node)
    for conn, (src, win) in ins.items():
        graph.add_edge(src, None, node, conn, dace.Memlet(data=src.data, subset=win))
    for conn, (dst, win) in outs.items():
        graph.add_edge(node, conn, dst, None, dace.Memlet(data=dst.data, subset=win))
    for n in removable:
        graph.remove_node(n)
    for name in drop:
        sdfg.remove_data(name, validate=False)
    sdfg.root_sdfg.reset_cfg_list()
    return node


def _plan_or_none(state, sdfg, scan, exact) -> _Plan | None:
    try:
        return _plan(state, sdfg, scan, exact)
    except (Refuse, NotAScan, ValueError, TypeError, KeyError, SyntaxError, ZeroDivisionError):
        return None


def _substitution(col: Column):
    """``(P leaf, Q leaf, s, exact)`` for a body ``x = Q - s*P*x``; the output is the new carry."""
    (x,) = col.carries
    if len(col.writes) != 1 or col.writes[0][2] != col.values[x]:
        raise Refuse("the back substitution's only output is not its new carry")
    ins = sorted(leaves(col.values[x], "in"))
    if len(ins) != 2 or leaves(col.values[x], "carry") != {("carry", x)}:
        raise Refuse("the back substitution does not read two inputs and its carry")
    for p, q in itertools.permutations(ins):
        for s in (1, -1):
            target = back_form(p, q, ("carry", x), s)
            if same_value(col.values[x], target):
                return p, q, s, same_arithmetic(col.values[x], target)
    raise Refuse("the carry update is not x = d' - c' * x")


def _elimination(col: Column, s: int):
    """``(roles {a,b,c,d: leaf}, u carry, v carry, exact)`` for the elimination with sign ``s``."""
    if len(col.carries) != 2:
        raise Refuse("the elimination does not keep two carries")
    ins = sorted(leaves(col.values[col.carries[0]], "in") | leaves(col.values[col.carries[1]], "in"))
    if len(ins) != 4:
        raise Refuse(f"the elimination reads {len(ins)} inputs, expected four (a, b, c, d)")
    for u, v in itertools.permutations(col.carries):
        uc, vc = ("carry", u), ("carry", v)
        for perm in itertools.permutations(ins):
            a, b, c, d = perm
            tu, tv = thomas_forms(a, b, c, d, uc, vc, s)
            if same_value(col.values[u], tu) and same_value(col.values[v], tv):
                ex = same_arithmetic(col.values[u], tu) and same_arithmetic(col.values[v], tv)
                return dict(zip(_ROLES, perm, strict=True)), u, v, ex
    raise Refuse("the carry updates are not Thomas' forward elimination")


def _plan(state: dace.SDFGState, sdfg: dace.SDFG, scan: Scan, exact: bool) -> _Plan:
    back = column_of(state, sdfg, scan)
    if len(back.carries) != 1:
        raise Refuse("not a one-carry back substitution")
    p, q, s, ex_back = _substitution(back)
    p_edge, q_edge = back.in_edge(p[1]), back.in_edge(q[1])
    p_node, q_node = state.memlet_path(p_edge)[0].src, state.memlet_path(q_edge)[0].src
    if not isinstance(p_node, nodes.AccessNode) or not isinstance(q_node, nodes.AccessNode) or p_node is q_node:
        raise Refuse("the back substitution's inputs are not two access nodes")
    first = _producer_scan(state, q_node)
    if first is not None and first is not scan:
        sub = column_of(state, sdfg, first)
        if len(sub.carries) == 1:   # a forward substitution: the pre-factored form
            return _prefactored_plan(state, sdfg, back, p, q, s, ex_back, p_node, q_node, sub, exact)
    concats = {n: concat_of(state, sdfg, n) for n in (p_node, q_node)}
    if (concats[p_node] is None) != (concats[q_node] is None):
        raise Refuse("one intermediate is a concat_where, the other not")
    written = {n: (c.source if c is not None else n) for n, c in concats.items()}
    producers = {e.src for n in written.values() for e in state.in_edges(n)}
    if len(producers) != 1 or not isinstance(next(iter(producers)), nodes.MapExit):
        raise Refuse("c' and d' do not come from one map")
    elim_scan = next((e.src for e in state.in_edges(next(iter(producers))) if isinstance(e.src, Scan)), None)
    if elim_scan is None:
        raise Refuse("c' and d' do not come from a scan")
    elim = column_of(state, sdfg, elim_scan)
    if elim.structure.direction == back.structure.direction:
        raise Refuse("the two scans run in the same direction")
    roles, u, v, ex_elim = _elimination(elim, s)
    swap = elim.structure.direction == "backward"
    is_exact = ex_back and ex_elim and not swap
    if exact and not is_exact:
        raise Refuse("the pair is Thomas' algebra but not its arithmetic (exact=True)")
    outs = {name: (sub, val) for name, sub, val in elim.writes}
    if set(outs) != set(elim.scan.out_connectors) or len(outs) != 2:
        raise Refuse("the elimination does not write exactly its two outputs")
    conn_of = {}
    for carry in (u, v):
        hits = [nm for nm, (_, val) in outs.items() if val == elim.values[carry]]
        if len(hits) != 1:
            raise Refuse("an elimination output is not its new carry")
        conn_of[carry] = hits[0]
    concat = concats[p_node] is not None
    if not same(elim.range, back.range):
        raise Refuse("the scans cover different cells")
    if not concat and not same(elim.levels, back.levels):
        raise Refuse("the scans cover different levels")
    if concat and (swap or not same(elim.levels[1], back.levels[1])):
        raise Refuse("a concat_where pair must eliminate forward down to the substitution's last level")

    # where U and V go: B reads at level k exactly what E wrote there
    x_conn = back.writes[0][0]
    x_edge = back.out_edge(x_conn)
    dst = state.memlet_path(x_edge)[-1].dst
    if not isinstance(dst, nodes.AccessNode) or dst.data != x_edge.data.data:
        raise Refuse("the back substitution does not write into an access node")
    x_idx = outer_index(sdfg, back, x_edge, back.writes[0][1])
    for carry, leaf, node in ((u, p, p_node), (v, q, q_node)):
        w_edge = elim.out_edge(conn_of[carry])
        if state.memlet_path(w_edge)[-1].dst is not written[node]:
            raise Refuse("c' or d' does not reach the back substitution")
        w_idx = outer_index(sdfg, elim, w_edge, outs[conn_of[carry]][0])
        r_idx = outer_index(sdfg, back, back.in_edge(leaf[1]), back.reads[leaf])
        c = concats[node]
        if c is not None:   # through the copy: N index = T index + shift
            w_idx = tuple(sympy.expand(wi + sh) for wi, sh in zip(w_idx, c.shift, strict=True))
        if not same(w_idx, r_idx):
            raise Refuse("the back substitution reads other elements than the elimination wrote")
        if c is None:
            intermediate_ok(state, sdfg, node, dst if carry == v else None, w_idx, x_idx)
        else:
            if node.data == dst.data:
                raise Refuse("a concat_where intermediate is also the output")
            check_cover(c, elim, back, r_idx)
    if len(state.out_edges(p_node)) != 1 or len(state.out_edges(q_node)) != 1:
        raise Refuse("an intermediate is read elsewhere")

    sources, dims = {}, None
    for role, leaf in roles.items():
        edge = elim.in_edge(leaf[1])
        src = state.memlet_path(edge)[0].src
        if not isinstance(src, nodes.AccessNode) or src.data != edge.data.data:
            raise Refuse(f"input '{role}' is not read from an access node")
        win, d = window(outer_index(sdfg, elim, edge, elim.reads[leaf]), elim)
        dims = dims or d
        if d != dims:
            raise Refuse("operands order cells and levels differently")
        sources[role] = (src, win)
    out_win, d = window(x_idx, elim)
    if d != dims:
        raise Refuse("operands order cells and levels differently")
    dtypes = {sdfg.arrays[n.data].dtype for n, _ in sources.values()} | {sdfg.arrays[dst.data].dtype}
    if len(dtypes) != 1 or next(iter(dtypes)) not in (dace.float32, dace.float64):
        raise Refuse("operands of mixed or non-float dtype")
    if swap:
        sources["a"], sources["c"] = sources["c"], sources["a"]
    removable = elim.removable + back.removable + [p_node, q_node]
    drop = [n.data for n in (p_node, q_node) if n.data != dst.data] + elim.drop_data + back.drop_data
    dead: list = []
    for c in concats.values():
        if c is not None:
            if {e.dst for e in state.out_edges(c.fill_exit)} - {p_node, q_node}:
                raise Refuse("a fill map writes more than the two intermediates")
            removable += c.removable
            drop += c.drop
            dead += c.fill_inputs
    removable = list(dict.fromkeys(removable))   # one fill map may write both intermediates
    return _Plan(removable, sorted(set(drop)), sources, dst, out_win, dims.index("level"), is_exact, swap,
                 skipped=(x_idx, elim, back) if concat else None, dead=dead)


def _producer_scan(state: dace.SDFGState, node: nodes.AccessNode) -> Scan | None:
    """The scan whose map alone writes ``node`` (None if it is not so written)."""
    prods = [e.src for e in state.in_edges(node)]
    if len(prods) != 1 or not isinstance(prods[0], nodes.MapExit):
        return None
    return next((e.src for e in state.in_edges(prods[0]) if isinstance(e.src, Scan)), None)


def _back_target(state: dace.SDFGState, sdfg: dace.SDFG, back: Column):
    """Where the back substitution writes ``x``: ``(access node, outer index of the element)``."""
    x_conn = back.writes[0][0]
    x_edge = back.out_edge(x_conn)
    dst = state.memlet_path(x_edge)[-1].dst
    if not isinstance(dst, nodes.AccessNode) or dst.data != x_edge.data.data:
        raise Refuse("the back substitution does not write into an access node")
    return dst, outer_index(sdfg, back, x_edge, back.writes[0][1])


def source_of(state: dace.SDFGState, sdfg: dace.SDFG, col: Column, leaf, role: str):
    """The access node and outer window an input leaf of ``col`` is read from, and its dimension roles."""
    edge = col.in_edge(leaf[1])
    src = state.memlet_path(edge)[0].src
    if not isinstance(src, nodes.AccessNode) or src.data != edge.data.data:
        raise Refuse(f"input '{role}' is not read from an access node")
    win, dims = window(outer_index(sdfg, col, edge, col.reads[leaf]), col)
    return (src, win), dims


def float_operands(sdfg: dace.SDFG, names) -> None:
    dtypes = {sdfg.arrays[n].dtype for n in names}
    if len(dtypes) != 1 or next(iter(dtypes)) not in (dace.float32, dace.float64):
        raise Refuse("operands of mixed or non-float dtype")


def _prefactored_plan(state, sdfg, back: Column, p, q, s: int, ex_back: bool, p_node, q_node, sub: Column,
                      exact: bool) -> _Plan:
    """The forward substitution ``sub`` (``v = (d - a*v) * w``) and ``back`` as one pre-factored solve."""
    if s != 1:
        raise Refuse("the back substitution reads -c'; the pre-factored solve takes c'")
    if sub.structure.direction != "forward" or back.structure.direction != "backward":
        raise Refuse("the pre-factored form substitutes forward, then back")
    (v,) = sub.carries
    ins = sorted(leaves(sub.values[v], "in"))
    if len(ins) != 3 or leaves(sub.values[v], "carry") != {("carry", v)}:
        raise Refuse("the forward substitution does not read three inputs and its carry")
    for a, d, w in itertools.permutations(ins):
        target = substitution_form(a, d, w, ("carry", v))
        if same_value(sub.values[v], target):
            roles, ex_sub = {"a": a, "w": w, "d": d}, same_arithmetic(sub.values[v], target)
            break
    else:
        raise Refuse("the carry update is not d' = (d - a * d'[k-1]) * w")
    is_exact = ex_back and ex_sub
    if exact and not is_exact:
        raise Refuse("the pair is the pre-factored algebra but not its arithmetic (exact=True)")
    outs = {name: (sb, val) for name, sb, val in sub.writes}
    if set(outs) != set(sub.scan.out_connectors) or len(outs) != 1 or next(iter(outs.values()))[1] != sub.values[v]:
        raise Refuse("the forward substitution's only output is not its new carry")
    if not same(sub.range, back.range) or not same(sub.levels, back.levels):
        raise Refuse("the scans cover different cells or levels")
    dst, x_idx = _back_target(state, sdfg, back)
    (conn,) = outs
    w_edge = sub.out_edge(conn)
    if state.memlet_path(w_edge)[-1].dst is not q_node:
        raise Refuse("d' does not reach the back substitution")
    w_idx = outer_index(sdfg, sub, w_edge, outs[conn][0])
    if not same(w_idx, outer_index(sdfg, back, back.in_edge(q[1]), back.reads[q])):
        raise Refuse("the back substitution reads other elements than the forward substitution wrote")
    intermediate_ok(state, sdfg, q_node, dst, w_idx, x_idx)
    if state.out_degree(q_node) != 1:
        raise Refuse("d' is read elsewhere")
    if p_node.data == dst.data:
        raise Refuse("c' and x share a container")
    sources, dims = {}, None
    for role, leaf in roles.items():
        sources[role], d_ = source_of(state, sdfg, sub, leaf, role)
        if dims is not None and d_ != dims:
            raise Refuse("operands order cells and levels differently")
        dims = d_
    sources["cp"], d_ = source_of(state, sdfg, back, p, "cp")
    out_win, d_x = window(x_idx, back)
    if d_ != dims or d_x != dims:
        raise Refuse("operands order cells and levels differently")
    float_operands(sdfg, [n.data for n, _ in sources.values()] + [dst.data])
    removable = sub.removable + back.removable + [q_node]
    drop = ([q_node.data] if q_node.data != dst.data else []) + sub.drop_data + back.drop_data
    return _Plan(removable, sorted(set(drop)), sources, dst, out_win, dims.index("level"), is_exact,
                 prefactored=True)


__all__ = ["ScanPairToTridiagonal"]
