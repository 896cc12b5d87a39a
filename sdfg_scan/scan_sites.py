"""Where the column scans of an SDFG are: :func:`find_scans` (above the node modules).

A scan is either a ``NestedSDFG`` whose SDFG has the column-scan structure
(:func:`sdfg_scan.scan_structure.analyze_scan`, strict) or a :class:`sdfg_scan.nodes.scan.Scan`
node (its ``body``, analysed with ``prologue=True``: levels peeled by ``PeelBoundaryLevels`` are
accepted). This module sits above ``sdfg_scan.nodes`` so that it may recognise a ``Scan`` by its
class; the analysis below it never imports a node.
"""

from __future__ import annotations

from dataclasses import dataclass

import dace
from dace.sdfg import nodes
from dace.sdfg.state import LoopRegion

from sdfg_scan.nodes.scan import Scan
from sdfg_scan.scan_model import ScanStructure
from sdfg_scan.scan_structure import NotAScan, analyze_scan


@dataclass
class ScanSite:
    """Where a scan lives: ``node`` (NestedSDFG or Scan) in ``state`` of ``parent``; ``structure`` of its body."""

    node: nodes.Node
    state: dace.SDFGState
    parent: dace.SDFG
    structure: ScanStructure


def find_scans(sdfg: dace.SDFG) -> list[ScanSite]:
    """Every scan in ``sdfg`` (recursively): NestedSDFG nodes with a column-scan SDFG and Scan nodes."""
    sites: list[ScanSite] = []

    def visit(g: dace.SDFG):
        for st in g.all_states():
            for n in st.nodes():
                if isinstance(n, Scan):
                    try:
                        sites.append(ScanSite(n, st, g, analyze_scan(n.body, prologue=True)))
                    except NotAScan:
                        pass
                elif isinstance(n, nodes.NestedSDFG):
                    if any(isinstance(b, LoopRegion) for b in n.sdfg.nodes()):
                        try:
                            sites.append(ScanSite(n, st, g, analyze_scan(n.sdfg)))
                            continue
                        except NotAScan:
                            pass
                    visit(n.sdfg)

    visit(sdfg)
    return sites


__all__ = ["ScanSite", "find_scans"]
