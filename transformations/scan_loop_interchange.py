"""``ScanLoopInterchange``: move a raw gt4py column scan's k-loop out of the map over columns.

The schedule itself (legality check ``plan``, rewrite, ``cell_contiguous``) lives in
:mod:`sdfg_scan.expansions.levels_outside`, where ``Scan``'s ``levels_outside`` expansion uses it;
``sdfg_scan.optimize`` chooses that expansion through the cost model and never applies this
transformation. It stays for SDFGs whose scans are not lifted (a map around a ``NestedSDFG``), with
:func:`profitable` as a rule of thumb for such direct use.
"""

from __future__ import annotations

from dace import properties, symbolic
from dace.sdfg import SDFG, SDFGState, nodes
from dace.sdfg import utils as sdutil
from dace.transformation import transformation as xf

from sdfg_scan.expansions.levels_outside import (
    LEVEL,
    can_interchange,
    cell_contiguous,
    interchange_single_map,
    plan,
)
from sdfg_scan.expansions.levels_outside_rewrite import _interchange


@properties.make_properties
class ScanLoopInterchange(xf.SingleStateTransformation):
    """Interchange the map over columns and the k-loop of the column scan it holds.

    gt4py lowers a scan to a map over cells around a nested SDFG whose ``LoopRegion`` walks the
    levels of one column. On cell-contiguous (nproma) fields every level access of that column is a
    strided load; with the loop outside, each level is a unit-stride pass over all cells::

        before                                    after (one nested SDFG in place of the map)
        map i:                                    map i: init(i)              entry states, peeled levels
          NestedSDFG column(i)                    for k in levels:
            entry; for k: body(k); exit             map i: body(i, k)         the loop body, one level
                                                  map i: exit(i)              exit states

    Each of the three parts is the column SDFG cut to its blocks (the body keeps its ``LoopRegion``,
    narrowed to the one level ``k``), called with the original memlets and symbol mapping. Column
    transients that live from one part to the next or from one level to the next (the carries, and
    any container read in two parts) become per-cell arrays outside the maps; the others stay local
    to their part. Every cell runs the same operations in the same order: bitwise the original.

    Legality checks (``can_be_applied``, all structural):

    - the map is at the top level of its state, has unit steps and a CPU or default schedule;
    - its scope holds one ``NestedSDFG`` with the column-scan structure (``analyze_scan``; levels
      peeled by ``PeelBoundaryLevels`` go with the entry states), plus only tasklets and transient
      access nodes that feed it; every map output comes from it; no write-conflict resolution on the
      scope's memlets; the map's inputs and outputs are access nodes (no empty ordering edges);
    - the column SDFG's top-level edges carry no conditions or assignments; the loop variable is not
      used outside the loop; the level range does not depend on the map parameters;
    - hoisted containers have shapes that do not depend on the map parameters.

    Profitable on CPUs when the columns' fields are cell-contiguous (:func:`profitable`); on lifted scans
    ``sdfg_scan.optimize`` gets the same schedule as the ``levels_outside`` expansion. No options.
    """

    map_entry = xf.PatternNode(nodes.MapEntry)
    nsdfg = xf.PatternNode(nodes.NestedSDFG)

    @classmethod
    def expressions(cls):
        return [sdutil.node_path_graph(cls.map_entry, cls.nsdfg)]

    def can_be_applied(self, graph: SDFGState, expr_index: int, sdfg: SDFG, permissive: bool = False) -> bool:
        return can_interchange(graph, self.map_entry, self.nsdfg)

    def apply(self, graph: SDFGState, sdfg: SDFG):
        made = plan(graph, self.map_entry, self.nsdfg)
        if made is None:
            raise ValueError(f"sdfg_scan.ScanLoopInterchange: map '{self.map_entry.map.label}' around nested SDFG "
                             f"'{self.nsdfg.label}' cannot be interchanged; call can_be_applied first")
        return _interchange(graph, self.nsdfg, made)


MIN_CELLS = 2048
"""Below this many map iterations (a constant map range) the per-level parallel loops cost more than
the strided column walks they replace (diagnose_pressure, 100 cells: 0.15 ms against 0.12 ms)."""


def profitable(state: SDFGState, me: nodes.MapEntry, scan: nodes.Node) -> bool:
    """``cell_contiguous`` and not a constant map range smaller than :data:`MIN_CELLS`."""
    size = me.map.range.num_elements()
    if not symbolic.issymbolic(size) and int(size) < MIN_CELLS:
        return False
    return cell_contiguous(state, me, scan)


__all__ = ["LEVEL", "MIN_CELLS", "ScanLoopInterchange", "can_interchange", "cell_contiguous", "interchange_single_map", "profitable"]
