"""How sdfg_scan nodes and what their expansions create are labelled in viewers.

A node's label (``str(node)``, the text DaCe's SDFG viewer draws and searches) names the node, its
kind, the semantics that distinguish it and the chosen implementation with its reproducibility
class (the requested floor while ``auto`` has not chosen yet)::

    cumsum: CumulativeScan(sum, axis=1, forward) [blocked, exact]
    scan_0: Scan(backward, i_K in [0, 64)) [sequential, exact]

The nested SDFG that an expansion puts in the node's place is labelled ``<name>_<implementation>``
(``cumsum_blocked``): labels of nested SDFGs and maps must be identifiers (DaCe validates them), so
brackets cannot be used there.
"""

from __future__ import annotations


def node_label(name: str, kind: str, details: str, implementation: str, klass: str) -> str:
    """``<name>: <kind>(<details>) [<implementation>, <klass>]`` (``[<implementation>]`` without a class)."""
    return f"{name}: {kind}({details}) [{implementation}{', ' + klass if klass else ''}]"


def expansion_label(name: str, implementation: str) -> str:
    """Label of the nested SDFG an expansion of node ``name`` creates: ``<name>_<implementation>``."""
    return f"{name}_{implementation}"


__all__ = ["expansion_label", "node_label"]
