"""``LiftScans``: raise gt4py's scan nested SDFGs to :class:`sdfg_scan.Scan` library nodes."""

from __future__ import annotations

import dace
from dace import properties
from dace.sdfg import nodes
from dace.sdfg import utils as sdutil
from dace.transformation import transformation as xf

from sdfg_scan.nodes.scan import Scan
from sdfg_scan.scan_structure import canonicalize_entry_copies, scan_mismatch


@properties.make_properties
class LiftScans(xf.SingleStateTransformation):
    """Replace a nested SDFG that computes one column of a scan by a ``Scan`` node holding it as body.

    Matched pattern: a ``NestedSDFG`` inside a map scope whose SDFG is a column scan by structure
    (:func:`sdfg_scan.scan_structure.analyze_scan`: entry states copying init connectors into carry
    containers, one unit-stride ``LoopRegion`` over the levels, forward or backward, optional exit
    states). Names, labels and the loop variable's spelling play no role.

    Before / after::

        map i:                                   map i:
          NestedSDFG scan_0(in..., out...)   ->    Scan[columns='single'](in..., out...)
            entry; loop k {...}; exit                body = the same SDFG, same symbol mapping

    The ``Scan`` node keeps the connectors, memlets and symbol mapping; its ``sequential``
    expansion puts the body back as a nested SDFG, so the result is bitwise the original.

    Legality checks (``can_be_applied``):

    - ``_in_map``: the nested SDFG is inside a map (each map iteration is one column);
    - ``scan_mismatch``: its SDFG has the column-scan structure; init copies written as tasklets
      ``out = in`` (how gt4py's compiled program holds them) count as copies, and ``apply`` rewrites
      them into access-node copies first (``canonicalize_entry_copies``);
    - ``_connectors_match``: its non-transient containers are exactly its connectors.
    """

    nsdfg = xf.PatternNode(nodes.NestedSDFG)

    @classmethod
    def expressions(cls):
        return [sdutil.node_path_graph(cls.nsdfg)]

    def can_be_applied(self, graph, expr_index, sdfg, permissive=False):
        node = self.nsdfg
        if not _in_map(graph, node):
            return False
        if node.sdfg is None or scan_mismatch(node.sdfg, copy_tasklets=True) is not None:
            return False
        return _connectors_match(node)

    def apply(self, graph: dace.SDFGState, sdfg: dace.SDFG):
        old = self.nsdfg
        canonicalize_entry_copies(old.sdfg)
        new = Scan.from_nested_sdfg(old)
        graph.add_node(new)
        sdutil.change_edge_dest(graph, old, new)
        sdutil.change_edge_src(graph, old, new)
        graph.remove_node(old)
        sdfg.root_sdfg.reset_cfg_list()
        return new


def _in_map(state: dace.SDFGState, node: nodes.Node) -> bool:
    scope = state.entry_node(node)
    while scope is not None:
        if isinstance(scope, nodes.MapEntry):
            return True
        scope = state.entry_node(scope)
    return False


def _connectors_match(node: nodes.NestedSDFG) -> bool:
    args = {k for k, d in node.sdfg.arrays.items() if not d.transient}
    return args == set(node.in_connectors) | set(node.out_connectors)


__all__ = ["LiftScans"]
