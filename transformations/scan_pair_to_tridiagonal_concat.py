"""The Thomas pair as icon4py composes it: ``concat_where`` between the two scans.

Helpers of :class:`sdfg_scan.transformations.ScanPairToTridiagonal` (private to it). icon4py's ``solve_w``
runs the elimination under ``concat_where(K > 0, sweep(...), (0.0, 0.0))`` and the back substitution over
all levels, so gt4py lowers each intermediate ``N`` (what the substitution reads) as two writes::

    T[:, 0:L-S]   = elimination output on levels S..L-1          (S = Max(1, K0): the scan starts one level in)
    N[:, S-K0:]   = T                                            (a copy, shifted)
    N[:, 0:S-K0]  = 0.0                                          (a map writing the constant: the top levels)
    x             = back substitution over levels K0..L-1, reading N

On the levels the elimination skips the substitution computes ``x = 0 - 0 * x[k+1]``: +0, or NaN where
``x[k+1]`` is not finite. The pair becomes one ``TridiagonalSolve`` over the elimination's levels plus
that row, written by a small map from the solve's first level (:func:`add_skipped_levels`), so the
values are the original's bit for bit.

Level ranges here are ``Min``/``Max`` expressions of the program's symbols; that the fill and the copy
together cover what the substitution reads is checked on a grid of symbol values
(:func:`levels_agree`), where sympy cannot decide the ``Min``/``Max`` identities.
"""

from __future__ import annotations

import ast
import itertools
from dataclasses import dataclass

import dace
import sympy
from dace import symbolic
from dace.sdfg import nodes

from sdfg_scan.transformations.result_write_through import GRID, MAX_SYMBOLS, memlet_edges, rewire
from sdfg_scan.transformations.scan_pair_to_tridiagonal_algebra import Refuse
from sdfg_scan.transformations.scan_pair_to_tridiagonal_outer import CELL, LEVEL, Column, _sym, _zero_constant


@dataclass
class Concat:
    """An intermediate written by a shifted copy of the elimination's output and a constant-zero fill."""

    node: nodes.AccessNode       # N: what the back substitution reads
    source: nodes.AccessNode     # T: what the elimination wrote
    shift: tuple                 # N index - T index, per dimension
    fill_levels: tuple           # (first, last + 1) of N's level indices the fill writes
    fill_cells: tuple            # (first, last + 1) of N's cell indices the fill writes
    level_dim: int
    removable: list
    drop: list
    fill_exit: nodes.MapExit
    fill_inputs: list            # access nodes the fill map reads: dead once it is gone (prune_dead)


def _used_only_in(sdfg: dace.SDFG, name: str, allowed) -> bool:
    uses = [n for st in sdfg.states() for n in st.data_nodes() if n.data == name]
    return set(uses) <= set(allowed) and not any(name in e.data.free_symbols for e in sdfg.all_interstate_edges())


def _one_point(subset, params: list) -> list[tuple]:
    """Per dimension ``(parameter, offset)`` of a one-element subset ``p + offset`` (coefficient 1)."""
    out = []
    for b, e, _ in subset.ndrange():
        ex = _sym(b)
        used = [p for p in params if p in ex.free_symbols]
        if _sym(e) != ex or len(used) != 1 or sympy.diff(ex, used[0]) != 1:
            raise Refuse("the fill does not write one element per iteration")
        out.append((used[0], sympy.expand(ex - used[0])))
    return out


def _span(entry, param, off) -> tuple:
    rb, re_, rs = entry.map.range[[symbolic.symbol(p) for p in entry.map.params].index(param)]
    if rs != 1:
        raise Refuse("a fill map has a step")
    return _sym(rb) + off, _sym(re_) + 1 + off


def _copy_code(t: nodes.Tasklet) -> bool:
    """``out = inp``: the tasklet copies its one input to its one output."""
    tree = ast.parse(t.code.as_string.strip())
    if len(tree.body) != 1 or not isinstance(tree.body[0], ast.Assign) or len(tree.body[0].targets) != 1:
        return False
    target, value = tree.body[0].targets[0], tree.body[0].value
    return (isinstance(target, ast.Name) and isinstance(value, ast.Name) and list(t.in_connectors) == [value.id]
            and list(t.out_connectors) == [target.id])


def _zero_value(state: dace.SDFGState, edge, depth: int = 0) -> bool:
    """Whether the value ``edge`` carries is the constant 0, traced back through copy tasklets, access
    nodes with one writer and map entries and exits to a tasklet without inputs that assigns 0
    (gt4py's ``broadcast(0.0, ...)``: a constant, copied into a per-cell array, copied again)."""
    src = edge.src
    if depth > 16:
        return False
    if isinstance(src, nodes.Tasklet):
        ins = [e for e in state.in_edges(src) if not e.data.is_empty()]
        if not ins:
            return src.language == dace.Language.Python and _zero_constant(src.code.as_string)
        return len(ins) == 1 and src.language == dace.Language.Python and _copy_code(src) and \
            _zero_value(state, ins[0], depth + 1)
    if isinstance(src, nodes.AccessNode):
        prods = state.in_edges(src)
        return len(prods) == 1 and prods[0].data.wcr is None and _zero_value(state, prods[0], depth + 1)
    if isinstance(src, (nodes.MapExit, nodes.MapEntry)) and (edge.src_conn or "").startswith("OUT_"):
        inner = list(state.in_edges_by_connector(src, "IN_" + edge.src_conn[4:]))
        return len(inner) == 1 and inner[0].data.wcr is None and _zero_value(state, inner[0], depth + 1)
    return False


def _fill(state: dace.SDFGState, mx: nodes.MapExit, node: nodes.AccessNode):
    """The fill map's nodes and, per dimension of ``node``, the index range it writes there with 0: a
    tasklet writing the constant, or copying a zero broadcast read through the map entry."""
    entry = _entry_of(state, mx)
    if state.entry_node(entry) is not None or len(entry.map.params) != 2:
        raise Refuse("the fill is not a top-level two-parameter map")
    params = [symbolic.symbol(p) for p in entry.map.params]
    writes = [e for e in state.in_edges(mx) if e.data.data == node.data]
    if len(writes) != 1 or writes[0].data.wcr is not None or not isinstance(writes[0].src, nodes.Tasklet):
        raise Refuse("the fill does not write the intermediate from one tasklet")
    w = writes[0]
    t = w.src
    if t.language != dace.Language.Python or state.entry_node(t) is not entry:
        raise Refuse("the fill tasklet is not a Python tasklet of the map")
    point = _one_point(w.data.subset, params)
    spans = [_span(entry, p, off) for p, off in point]
    if not _zero_value(state, w):
        raise Refuse("the fill does not write the constant 0")
    scope = [n for n in state.scope_children()[entry] if n is not mx]
    return [entry, mx, *scope], spans


def concat_of(state: dace.SDFGState, sdfg: dace.SDFG, node: nodes.AccessNode) -> Concat | None:
    """``node`` as a shifted copy plus a zero fill (module docstring); None when it has one producer (the
    direct form); :class:`Refuse` when it is neither."""
    ins = state.in_edges(node)
    if len(ins) == 1:
        return None
    if len(ins) != 2:
        raise Refuse(f"intermediate '{node.data}' has {len(ins)} producers")
    copies = [e for e in ins if isinstance(e.src, nodes.AccessNode)]
    fills = [e for e in ins if isinstance(e.src, nodes.MapExit)]
    if len(copies) != 1 or len(fills) != 1:
        raise Refuse(f"intermediate '{node.data}' is not a copy plus a fill")
    cp = copies[0]
    src = cp.src
    for n in (node, src):
        desc = sdfg.arrays[n.data]
        if not desc.transient or type(desc) is not dace.data.Array or len(desc.shape) != 2:
            raise Refuse(f"'{n.data}' is not a 2-d transient array")
    if state.in_degree(src) != 1 or state.out_degree(src) != 1 or state.out_degree(node) != 1:
        raise Refuse("the copy's source or target has other uses in the state")
    if cp.data.wcr is not None or cp.data.data != src.data or cp.data.other_subset is None:
        raise Refuse("the copy is not a plain shifted copy")
    if [_sym(a) for a in cp.data.subset.size()] != [_sym(a) for a in cp.data.other_subset.size()]:
        raise Refuse("the copy changes the shape")
    shift = tuple(sympy.expand(_sym(o[0]) - _sym(s[0]))
                  for s, o in zip(cp.data.subset.ndrange(), cp.data.other_subset.ndrange(), strict=True))
    fill_nodes, spans = _fill(state, fills[0].src, node)
    if not _used_only_in(sdfg, node.data, {node}) or not _used_only_in(sdfg, src.data, {src}):
        raise Refuse("an intermediate is used elsewhere")
    moving = [d for d, s in enumerate(shift) if s != 0]
    level_dim = moving[0] if len(moving) == 1 else None
    if level_dim is None:
        raise Refuse("the copy does not shift exactly one dimension (the levels)")
    cell_dim = 1 - level_dim
    fill_inputs = [e.src for e in state.in_edges(fill_nodes[0]) if not e.data.is_empty()]
    return Concat(node, src, shift, spans[level_dim], spans[cell_dim], level_dim,
                  fill_nodes + [src], [src.data], fills[0].src, fill_inputs)


def _grid_values(exprs) -> list[dict]:
    syms = sorted({s for e in exprs for s in _sym(e).free_symbols}, key=str)
    if len(syms) > MAX_SYMBOLS:
        raise Refuse("too many symbols in the level ranges to check them")
    return [dict(zip(syms, vals, strict=True)) for vals in itertools.product(GRID, repeat=len(syms))]


def levels_agree(a: tuple, b: tuple) -> bool:
    """Whether the index ranges ``a = (first, end)`` and ``b`` hold the same indices for every value of
    their symbols on :data:`GRID` (empty ranges agree whatever their bounds; the ranges are piecewise linear
    with breaks at small constants: ``Max(1, K0)``, ``Min(1, K1, L)``)."""
    for env in _grid_values(a + b):
        ra = range(int(_sym(a[0]).subs(env)), int(_sym(a[1]).subs(env)))
        rb = range(int(_sym(b[0]).subs(env)), int(_sym(b[1]).subs(env)))
        if set(ra) != set(rb):
            return False
    return True


def check_cover(c: Concat, elim: Column, back: Column, r_idx: tuple) -> None:
    """The fill writes, over the substitution's cells, exactly the elements it reads on the levels the
    elimination skips: ``back.levels[0] .. elim.levels[0] - 1``."""
    ld = c.level_dim
    lev_off = sympy.expand(r_idx[ld] - LEVEL)
    cell_off = sympy.expand(r_idx[1 - ld] - CELL)
    if lev_off.free_symbols & {CELL, LEVEL} or cell_off.free_symbols & {CELL, LEVEL}:
        raise Refuse("the substitution reads its intermediate at other than (cell, level) + const")
    skipped = (back.levels[0] + lev_off, sympy.Max(back.levels[0], sympy.Min(elim.levels[0], back.levels[1])) + lev_off)
    if not levels_agree(skipped, c.fill_levels):
        raise Refuse("the fill does not write exactly the levels the elimination skips")
    if not levels_agree((back.range[0] + cell_off, back.range[1] + 1 + cell_off), c.fill_cells):
        raise Refuse("the fill does not cover the substitution's cells")


def add_skipped_levels(state: dace.SDFGState, solved: nodes.AccessNode, dst: nodes.AccessNode, x_idx: tuple,
                       elim: Column, back: Column) -> None:
    """Write ``x = 0 - 0 * x[first solved level]`` (``0 - 0 * 0`` where no level is solved: the
    substitution's carry starts at 0) on the levels the elimination skips, reading ``solved`` (the
    solve's output) and writing ``dst``: one map, so that ``dst`` keeps one writer (gt4py's passes
    after the hooks expect that)."""
    first, last_end = elim.levels
    top, back_end = back.levels
    skipped_end = sympy.Min(first, back_end)                 # <= top: nothing skipped, the map is empty
    cells = f"{symbolic.symstr(back.range[0])}:{symbolic.symstr(back.range[1])} + 1"

    def index(level) -> str:
        return ", ".join(symbolic.symstr(sympy.expand(e.subs({CELL: sympy.Symbol("_c"), LEVEL: level})))
                         for e in x_idx)

    me, mx = state.add_map("skipped_levels", {"_c": cells, "_l": f"{symbolic.symstr(top)}:"
                                                              f"{symbolic.symstr(skipped_end)}"})
    # where the solve has no level, the element read (the last level, inside this map's range) is not
    # used: the carry is 0 there
    code = f"_x = 0.0 - 0.0 * ((({symbolic.symstr(last_end)}) > ({symbolic.symstr(first)})) ? _xs : 0.0);"
    t = state.add_tasklet("skipped_level", {"_xs"}, {"_x"}, code, language=dace.Language.CPP)
    state.add_memlet_path(solved, me, t, dst_conn="_xs",
                          memlet=dace.Memlet(f"{solved.data}[{index(sympy.Min(first, back_end - 1))}]"))
    state.add_memlet_path(t, mx, dst, src_conn="_x", memlet=dace.Memlet(f"{dst.data}[{index(sympy.Symbol('_l'))}]"))


def _drop_connector_tree(state: dace.SDFGState, edge) -> list:
    """Remove ``edge`` (a map exit's outer edge) and the inner edges feeding its connector; return the
    inner edges' sources."""
    mx, conn = edge.src, edge.src_conn
    inner = list(state.in_edges_by_connector(mx, "IN_" + conn[4:]))
    state.remove_edge(edge)
    mx.remove_out_connector(conn)
    for e in inner:
        state.remove_edge(e)
    mx.remove_in_connector("IN_" + conn[4:])
    return [e.src for e in inner]


def _entry_of(state: dace.SDFGState, mx: nodes.MapExit) -> nodes.MapEntry:
    return next(n for n in state.nodes() if isinstance(n, nodes.MapEntry) and n.map is mx.map)


def prune_dead(state: dace.SDFGState, sdfg: dace.SDFG, candidates) -> None:
    """Remove what only fed removed nodes: transient access nodes nothing reads any more (used nowhere
    else), tasklets without outputs, and maps left without outputs, back through their inputs. (gt4py's
    passes after the hooks assume every transient a map writes is read.)"""
    work = list(candidates)
    while work:
        n = work.pop()
        if n not in state.nodes() or state.out_degree(n) > 0:
            continue
        if isinstance(n, nodes.AccessNode):
            desc = sdfg.arrays[n.data]
            if not desc.transient or not _used_only_in(sdfg, n.data, {n}):
                continue
            for e in list(state.in_edges(n)):
                if not isinstance(e.src, nodes.MapExit):
                    state.remove_edge(e)
                    work.append(e.src)
                    continue
                entry = _entry_of(state, e.src)
                scope = list(state.scope_subgraph(entry, include_entry=True, include_exit=True).nodes())
                inner = _drop_connector_tree(state, e)
                if state.out_degree(e.src) == 0:   # the map wrote only this: it goes, its inputs may follow
                    work += [x.src for x in state.in_edges(entry) if not x.data.is_empty()]
                    state.remove_nodes_from(scope)
                else:
                    work += inner
            state.remove_node(n)
            sdfg.remove_data(n.data, validate=False)
        elif isinstance(n, nodes.Tasklet):
            work += [e.src for e in state.in_edges(n) if not isinstance(e.src, nodes.EntryNode)]
            state.remove_node(n)


def write_through(state: dace.SDFGState, sdfg: dace.SDFG, dst: nodes.AccessNode) -> bool:
    """Where the solve's result temporary ``T`` (written in parts: the solve, the skipped levels, gt4py's
    ``concat_where`` copy of ``next_w``) is only copied whole into one array ``O`` that nothing else in
    the state touches, every write of ``T`` goes to ``O`` directly and the copy disappears (icon4py's
    ``solve_w``: the copy cost as much as the solve). Returns whether it did; refusals change nothing."""
    name = dst.data
    desc = sdfg.arrays[name]
    if not desc.transient or type(desc) is not dace.data.Array or state.out_degree(dst) != 1:
        return False
    (cp,) = state.out_edges(dst)
    target = cp.dst
    if not isinstance(target, nodes.AccessNode) or cp.data.wcr is not None or target.data == name:
        return False
    if state.in_degree(target) != 1 or state.out_degree(target) != 0:
        return False
    if [n for n in state.data_nodes() if n.data == target.data] != [target]:
        return False
    src_sub, dst_sub = cp.data.get_src_subset(cp, state), cp.data.get_dst_subset(cp, state)
    if src_sub is None or dst_sub is None or len(src_sub) != len(desc.shape) or len(dst_sub) != len(desc.shape):
        return False
    for (b, e, st), n in zip(src_sub.ndrange(), desc.shape, strict=True):
        if st != 1 or _sym(b) != 0 or sympy.simplify(_sym(e) + 1 - _sym(n)) != 0:
            return False
    mine = [n for n in state.data_nodes() if n.data == name]
    if not _used_only_in(sdfg, name, set(mine)):
        return False
    rewire(state, sdfg, mine, cp, memlet_edges(state, mine))
    return True


__all__ = ["Concat", "add_skipped_levels", "check_cover", "concat_of", "levels_agree", "prune_dead",
           "write_through"]
