"""A lifted column scan seen from the program: its map, its init constants and outer element indices.

Helpers of :class:`sdfg_scan.transformations.ScanPairToTridiagonal` (private to it). Outer indices are
sympy expressions in the program's symbols plus two stand-ins: ``CELL`` for the map parameter
and ``LEVEL`` for the body's level index, so that two scans in two maps can be compared.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

import dace
import sympy
from dace import subsets, symbolic
from dace.sdfg import nodes

from sdfg_scan.nodes.scan import Scan
from sdfg_scan.scan_structure import ScanStructure, analyze_scan
from sdfg_scan.transformations.scan_pair_to_tridiagonal_algebra import Refuse, level_values

CELL, LEVEL = sympy.Symbol("__sptt_cell"), sympy.Symbol("__sptt_level")


def _sym(expr) -> sympy.Expr:
    e = symbolic.pystr_to_symbolic(str(expr))
    # sizes gt4py passes as Max(0, n): the domain is non-empty wherever a level is computed
    return e.replace(lambda x: isinstance(x, sympy.Max) and len(x.args) == 2 and 0 in x.args,
                     lambda x: next(a for a in x.args if a != 0))


def _subs(expr, repl: dict) -> sympy.Expr:
    e = _sym(expr)
    return e.subs({s: repl[str(s)] for s in e.free_symbols if str(s) in repl}, simultaneous=True)


def same(x, y) -> bool:
    """Whether two expressions (or equal-length tuples of them) are equal symbolically."""
    if isinstance(x, tuple):
        return len(x) == len(y) and all(same(a, b) for a, b in zip(x, y, strict=True))
    return sympy.simplify(_sym(x) - _sym(y)) == 0


@dataclass
class Column:
    """One scan in its map: structure, symbolic level values, outer ranges and what removing it removes."""

    scan: Scan
    structure: ScanStructure
    state: dace.SDFGState
    carries: list
    values: dict
    writes: list
    reads: dict
    range: tuple
    levels: tuple
    inner: dict
    outer: dict
    removable: list
    drop_data: list

    def in_edge(self, conn: str):
        edges = [e for e in self.state.in_edges(self.scan) if e.dst_conn == conn]
        if len(edges) != 1:
            raise Refuse(f"connector '{conn}' is not fed by one edge")
        return edges[0]

    def out_edge(self, conn: str):
        edges = [e for e in self.state.out_edges(self.scan) if e.src_conn == conn]
        if len(edges) != 1:
            raise Refuse(f"connector '{conn}' does not feed one edge")
        return edges[0]


def _zero_constant(code: str) -> bool:
    tree = ast.parse(code.strip())
    if len(tree.body) != 1 or not isinstance(tree.body[0], ast.Assign):
        return False
    v = tree.body[0].value
    while isinstance(v, ast.UnaryOp) and isinstance(v.op, (ast.USub, ast.UAdd)):
        v = v.operand
    return isinstance(v, ast.Constant) and type(v.value) in (int, float) and v.value == 0


def _init_nodes(state, sdfg, scan, conn, entry) -> list:
    """The constant-zero tasklet and one-element transient feeding ``conn``, inside the map (gt4py's
    optimised form) or outside it, through the map entry (the lowered form gt4py's first hooks see);
    refuses otherwise."""
    edges = [e for e in state.in_edges(scan) if e.dst_conn == conn]
    if len(edges) != 1:
        raise Refuse("an init value does not come from one edge")
    outside = edges[0].src is entry
    acc = state.memlet_path(edges[0])[0].src if outside else edges[0].src
    desc = sdfg.arrays.get(acc.data) if isinstance(acc, nodes.AccessNode) else None
    if desc is None or not desc.transient or desc.total_size != 1:
        raise Refuse("an init value is not a one-element transient")
    uses = [n for st in sdfg.states() for n in st.data_nodes() if n.data == acc.data]
    if uses != [acc] or state.in_degree(acc) != 1 or state.out_degree(acc) != 1:
        raise Refuse("an init transient is used elsewhere")
    if any(acc.data in e.data.free_symbols for e in sdfg.all_interstate_edges()):
        raise Refuse("an init transient is used in control flow")
    t = state.in_edges(acc)[0].src
    if not isinstance(t, nodes.Tasklet) or state.out_degree(t) != 1 or t.language != dace.Language.Python:
        raise Refuse("an init value is not a tasklet's")
    if outside and (state.entry_node(t) is not None or state.in_degree(t) != 0):
        raise Refuse("an init tasklet outside the map has inputs")
    if not outside and any(not e.data.is_empty() or e.src is not entry for e in state.in_edges(t)):
        raise Refuse("an init tasklet has inputs")
    if not _zero_constant(t.code.as_string):
        raise Refuse("a carry does not start from zero")
    return [t, acc]


def _map_of(state, scan):
    entry = state.entry_node(scan)
    if not isinstance(entry, nodes.MapEntry) or state.entry_node(entry) is not None:
        raise Refuse("the scan is not directly in a top-level map")
    if len(entry.map.params) != 1 or entry.map.range[0][2] != 1:
        raise Refuse("the map is not one unit-step parameter")
    exit_ = state.exit_node(entry)
    for e in state.out_edges(entry):
        if e.dst is not scan and not e.data.is_empty():
            raise Refuse("the map feeds something besides the scan")
    if any(e.src is not scan for e in state.in_edges(exit_)):
        raise Refuse("the map writes something besides the scan")
    for e in state.in_edges(scan) + state.out_edges(scan):
        if e.data.is_empty() or e.data.wcr is not None:
            raise Refuse("empty or WCR memlet at the scan")
    return entry, exit_


def column_of(state: dace.SDFGState, sdfg: dace.SDFG, scan: Scan) -> Column:
    if scan.columns != "single" or scan.body is None:
        raise Refuse("not a lifted single-column scan")
    s = analyze_scan(scan.body, prologue=True)
    if s.prologue or s.exit_states or s.branches or s.self_copies:
        raise Refuse("prologue, exit states or boundary branches")
    entry, exit_ = _map_of(state, scan)
    extra = []
    for c in s.carries.values():
        if c.kind != "recurrent" or c.init is None or c.init not in scan.in_connectors:
            raise Refuse(f"carry '{c.name}' is not a recurrence initialised from a connector")
        if scan.body.arrays[c.name].total_size != 1:
            raise Refuse(f"carry '{c.name}' is not one element")
        extra += _init_nodes(state, sdfg, scan, c.init, entry)
    if set(state.scope_children()[entry]) != {scan, exit_} | {n for n in extra if state.entry_node(n) is entry}:
        raise Refuse("the map holds more than the scan and its init constants")
    carries = sorted(s.carries)
    values, writes, reads = level_values(scan.body, s.loop, set(carries))
    param = entry.map.params[0]
    outer = {param: CELL}
    inner = {k: _subs(v, outer) for k, v in scan.symbol_mapping.items()}
    inner[s.variable] = LEVEL
    b, e, _ = entry.map.range[0]
    levels = (_subs(s.start, inner), _subs(s.stop, inner))
    return Column(scan, s, state, carries, values, writes, reads, (_sym(b), _sym(e)), levels, inner, outer,
                  [entry, exit_, scan] + extra, [n.data for n in extra if isinstance(n, nodes.AccessNode)])


def outer_index(sdfg: dace.SDFG, col: Column, edge, inner_subset) -> tuple:
    """The outer element index (one expression per outer dimension) of body element ``conn[inner_subset]``."""
    conn = edge.dst_conn if edge.dst is col.scan else edge.src_conn
    outer, inner = sdfg.arrays[edge.data.data], col.scan.body.arrays[conn]
    osub = edge.data.subset
    if any(_sym(o) != 0 for o in inner.offset):
        raise Refuse(f"'{conn}' has an offset")
    if len(inner.shape) == len(outer.shape):
        kept = list(range(len(outer.shape)))
    else:
        kept = [d for d, n in enumerate(osub.size()) if _sym(n) != 1]
    if len(kept) != len(inner.shape) or len(inner_subset) != len(inner.shape):
        raise Refuse(f"cannot match the dimensions of '{conn}' to '{edge.data.data}'")
    for j, d in enumerate(kept):
        if not same(_subs(inner.strides[j], col.inner), outer.strides[d]):
            raise Refuse(f"'{conn}' has other strides than '{edge.data.data}'")
    idx = []
    for d, (rb, _, _) in enumerate(osub.ndrange()):
        ex = _subs(rb, col.outer)
        if d in kept:
            ib, ie, _ = inner_subset[kept.index(d)]
            if _sym(ib) != _sym(ie):
                raise Refuse(f"access to '{conn}' is not a point")
            ex = ex + _subs(ib, col.inner)
        idx.append(sympy.expand(ex))
    return tuple(idx)


def _role(expr):
    cp, ck = sympy.diff(expr, CELL), sympy.diff(expr, LEVEL)
    rest = sympy.expand(expr - cp * CELL - ck * LEVEL)
    if rest.free_symbols & {CELL, LEVEL}:
        raise Refuse("non-linear index")
    if (cp, ck) == (1, 0):
        return "cell", rest
    if (cp, ck) == (0, 1):
        return "level", rest
    raise Refuse(f"index {expr} is neither cell + const nor level + const")


def window(idx: tuple, col: Column) -> tuple[subsets.Range, list[str]]:
    """The outer window an operand covers over all cells and levels, and the role of each dimension."""
    roles = [_role(e) for e in idx]
    dims = [r for r, _ in roles]
    if sorted(dims) != ["cell", "level"]:
        raise Refuse("an operand is not a (cell, level) field")
    (b, e), (start, stop) = col.range, col.levels
    rng = [(b + c, e + c, 1) if r == "cell" else (start + c, stop - 1 + c, 1) for r, c in roles]
    return subsets.Range(rng), dims


def intermediate_ok(state, sdfg, node: nodes.AccessNode, dst: nodes.AccessNode | None, w_idx, x_idx) -> None:
    """``node`` (written by the elimination, read by the substitution) may disappear: refuse otherwise."""
    if state.in_degree(node) != 1 or state.out_degree(node) != 1:
        raise Refuse(f"intermediate '{node.data}' has other producers or readers")
    if dst is not None and node.data == dst.data:  # in place: d' overwritten by x element by element
        if not same(w_idx, x_idx):
            raise Refuse(f"'{node.data}' holds d' and x at different elements")
        if [n for n in state.data_nodes() if n.data == node.data and n not in (node, dst)]:
            raise Refuse(f"'{node.data}' is accessed elsewhere in the state")
        return
    desc = sdfg.arrays[node.data]
    if not desc.transient:
        raise Refuse(f"intermediate '{node.data}' is a program argument (observable)")
    if [n for st in sdfg.states() for n in st.data_nodes() if n.data == node.data] != [node]:
        raise Refuse(f"intermediate '{node.data}' is used elsewhere")
    if any(node.data in e.data.free_symbols for e in sdfg.all_interstate_edges()):
        raise Refuse(f"intermediate '{node.data}' is used in control flow")


__all__ = ["CELL", "Column", "LEVEL", "column_of", "intermediate_ok", "outer_index", "same", "window"]
