"""``ScanToTridiagonalFactor``: a scan computing Thomas' factorisation -> one ``TridiagonalFactor``."""

from __future__ import annotations

import itertools

import dace
from dace import properties
from dace.sdfg import nodes

from sdfg_scan.nodes.scan import Scan
from sdfg_scan.nodes.tridiagonal_solve import TridiagonalFactor
from sdfg_scan.scan_structure import NotAScan
from sdfg_scan.transformations.scan_pair_to_tridiagonal import (
    ValueMatched,
    float_operands,
    replace_scans,
    source_of,
)
from sdfg_scan.transformations.scan_pair_to_tridiagonal_algebra import (
    Refuse,
    factor_forms,
    leaves,
    same_arithmetic,
    same_value,
)
from sdfg_scan.transformations.scan_pair_to_tridiagonal_outer import column_of, outer_index, window


@properties.make_properties
class ScanToTridiagonalFactor(ValueMatched):
    """Replace a scan that factors a tridiagonal matrix by one ``TridiagonalFactor``.

    Matched (by the values computed, as :class:`ScanPairToTridiagonal`): a lifted ``columns="single"``
    forward scan alone in its map, one carry ``u`` (init 0), three inputs, two outputs::

        map i: F = Scan(fwd)(a, b, c -> W, CP)         # w = 1 / (b - a * u[k-1]);  u = c * w
              W[k] = w, CP[k] = u                       ->     TridiagonalFactor(a, b, c -> W, CP)

    ``W`` and ``CP`` are what ``TridiagonalFactor`` computes, in its order of operations: bitwise where
    the scan performs those operations (``exact``, the default), else within rounding (``exact=False``).
    The pre-factored solve that reads ``W`` and ``CP`` is :class:`ScanPairToTridiagonal`'s.
    """

    def can_be_applied(self, graph, expr_index, sdfg, permissive=False):
        try:
            _factor_plan(graph, sdfg, self.scan, self.exact)
        except (Refuse, NotAScan, ValueError, TypeError, KeyError, SyntaxError, ZeroDivisionError):
            return False
        return True

    def apply(self, graph: dace.SDFGState, sdfg: dace.SDFG):
        col, sources, outs, axis = _factor_plan(graph, sdfg, self.scan, self.exact)
        node = TridiagonalFactor(f"{self.scan.label}_factor", axis=axis)
        node.debuginfo = self.scan.debuginfo
        return replace_scans(graph, sdfg, node, sources, outs, col.removable, col.drop_data)


def _factor_plan(state, sdfg, scan: Scan, exact: bool):
    col = column_of(state, sdfg, scan)
    if len(col.carries) != 1 or col.structure.direction != "forward":
        raise Refuse("not a forward scan with one carry")
    (u,) = col.carries
    outs = {name: (sb, val) for name, sb, val in col.writes}
    if set(outs) != set(scan.out_connectors) or len(outs) != 2:
        raise Refuse("the scan does not write exactly two outputs")
    values = [col.values[u]] + [val for _, val in outs.values()]
    ins = sorted(set().union(*(leaves(v, "in") for v in values)))
    if len(ins) != 3 or any(leaves(v, "carry") - {("carry", u)} for v in values):
        raise Refuse("the scan does not read three inputs and its carry")
    for a, b, c in itertools.permutations(ins):
        w_t, cp_t = factor_forms(a, b, c, ("carry", u))
        if not same_value(col.values[u], cp_t):
            continue
        cp_conn = [n for n, (_, val) in outs.items() if val == col.values[u]]
        w_conn = [n for n, (_, val) in outs.items() if n not in cp_conn and same_value(val, w_t)]
        if len(cp_conn) != 1 or len(w_conn) != 1:
            continue
        ex = same_arithmetic(col.values[u], cp_t) and same_arithmetic(outs[w_conn[0]][1], w_t)
        if exact and not ex:
            raise Refuse("the scan is Thomas' factorisation but not its arithmetic (exact=True)")
        break
    else:
        raise Refuse("the carry update and outputs are not w = 1 / (b - a c'[k-1]), c' = c w")
    sources, dims = {}, None
    for role, leaf in zip(("a", "b", "c"), (a, b, c), strict=True):
        sources[role], d_ = source_of(state, sdfg, col, leaf, role)
        if dims is not None and d_ != dims:
            raise Refuse("operands order cells and levels differently")
        dims = d_
    targets = {}
    for role, conn in (("w", w_conn[0]), ("cp", cp_conn[0])):
        edge = col.out_edge(conn)
        dst = state.memlet_path(edge)[-1].dst
        if not isinstance(dst, nodes.AccessNode) or dst.data != edge.data.data:
            raise Refuse(f"output '{role}' is not written into an access node")
        win, d_ = window(outer_index(sdfg, col, edge, outs[conn][0]), col)
        if d_ != dims:
            raise Refuse("operands order cells and levels differently")
        targets[role] = (dst, win)
    if targets["w"][0].data == targets["cp"][0].data:
        raise Refuse("w and c' share a container")
    float_operands(sdfg, [n.data for n, _ in list(sources.values()) + list(targets.values())])
    assert dims is not None
    return col, sources, targets, dims.index("level")


__all__ = ["ScanToTridiagonalFactor"]
