"""Removing outputs nobody reads from a column body (a ``Scan`` body or a nested SDFG).

DaCe's dead-dataflow elimination drops a library node's output connector when the caller never
reads it (``p, p_ifc, _flag = sdfg_scan.scan(...)``), but the node's body still writes the
container behind it. Keeping that container as a per-column transient costs a heap allocation of
``_nk`` elements in every map iteration (DaCe warns "Variable-length array ... allocated on the
heap") and stores that nothing reads. :func:`drop_unread_outputs` removes such writes instead.
"""

from __future__ import annotations

import dace
from dace.sdfg import nodes


def _removable(body: dace.SDFG, name: str) -> bool:
    """``name`` is never read (dataflow or interstate edge) and only copied into from access nodes."""
    for state in body.all_states():
        for n in state.data_nodes():
            if n.data == name and (state.out_degree(n) > 0 or any(
                    not isinstance(e.src, nodes.AccessNode) for e in state.in_edges(n))):
                return False
    return not any(name in e.data.free_symbols for e in body.all_interstate_edges())


def drop_unread_outputs(body: dace.SDFG, names: set[str]) -> set[str]:
    """Remove the write-only containers ``names`` (non-transient, never read in ``body``) and the
    access nodes that write them; access nodes left without any edge are removed too.

    Containers the body also reads (gt4py re-reads a carry from its output) or that a tasklet or
    nested SDFG writes directly (its connector would dangle) are kept. Returns the names removed.
    """
    removed = set()
    for name in sorted(names):
        if name not in body.arrays or body.arrays[name].transient or not _removable(body, name):
            continue
        for state in body.all_states():
            for n in [n for n in state.data_nodes() if n.data == name]:
                sources = [e.src for e in state.in_edges(n)]
                state.remove_node(n)
                for src in sources:
                    if isinstance(src, nodes.AccessNode) and state.degree(src) == 0:
                        state.remove_node(src)
        body.remove_data(name, validate=False)
        removed.add(name)
    return removed


__all__ = ["drop_unread_outputs"]
