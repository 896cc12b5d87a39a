"""``CopyTaskletToCopy``: a copy that DaCe's code generation lowered to a tasklet becomes a copy again."""

from __future__ import annotations

import dace
from dace import properties
from dace.sdfg import nodes
from dace.sdfg import utils as sdutil
from dace.transformation import transformation as xf

from sdfg_scan.identity_copies import copy_tasklet, replace_copy_tasklet


@properties.make_properties
class CopyTaskletToCopy(xf.SingleStateTransformation):
    """Replace a tasklet ``_cpy_out = _cpy_in`` between two access nodes by the access-node copy it stands for.

    DaCe's code generation writes an access-node copy of one element as such a tasklet, and the SDFG gt4py
    keeps with a compiled program (``program.sdfgz`` in its build cache) holds every copy of its nested SDFGs
    in that form: a scan's init copies, the identity arms of its ``if``\\ s. The analyses of this library read
    copies as access-node edges (``LiftScans``' init copies, ``RemoveScanSelfCopies``' self-copies, the
    carries ``DeadCarryElimination`` removes), so ``optimize`` applies this first.

    Before / after::

        a --[a[i]]--> tasklet(_cpy_out = _cpy_in) --[b[j]]--> b    ->    a --[a[i] -> b[j]]--> b

    Matched (``can_be_applied``, :func:`sdfg_scan.identity_copies.copy_tasklet`): a Python tasklet whose code
    is ``out = in`` on its only two connectors, one in-edge straight from an access node and one out-edge
    straight to an access node of another container, each memlet one element (no write-conflict resolution,
    not dynamic), both containers of one dtype. Anything else (a cast, an expression, a second connector, an
    edge through a map entry) is refused and left as it is. The values are the same: the copy moves the same
    element unchanged.
    """

    src = xf.PatternNode(nodes.AccessNode)
    tasklet = xf.PatternNode(nodes.Tasklet)
    dst = xf.PatternNode(nodes.AccessNode)

    @classmethod
    def expressions(cls):
        return [sdutil.node_path_graph(cls.src, cls.tasklet, cls.dst)]

    def can_be_applied(self, graph, expr_index, sdfg, permissive=False):
        found = copy_tasklet(sdfg, graph, self.tasklet)
        return found is not None and found[0] is self.src and found[1] is self.dst

    def apply(self, graph: dace.SDFGState, sdfg: dace.SDFG):
        found = copy_tasklet(sdfg, graph, self.tasklet)
        if found is None:
            raise ValueError(f"CopyTaskletToCopy: tasklet '{self.tasklet.label}' is not a copy '_cpy_out = _cpy_in' "
                             "of one element between two access nodes (can_be_applied refuses it)")
        replace_copy_tasklet(graph, self.tasklet, found)

    @staticmethod
    def apply_everywhere(sdfg: dace.SDFG) -> int:
        """Apply to every match in ``sdfg`` and its nested SDFGs in one walk (what ``optimize`` does:
        ``apply_transformations_repeated`` would search the whole SDFG again after each of the hundreds of
        copies of a compiled program); return how many."""
        done = 0
        for state in list(sdfg.all_states()):
            for n in list(state.nodes()):
                if isinstance(n, nodes.NestedSDFG):
                    done += CopyTaskletToCopy.apply_everywhere(n.sdfg)
                elif isinstance(n, nodes.Tasklet):
                    found = copy_tasklet(sdfg, state, n)
                    if found is not None:
                        replace_copy_tasklet(state, n, found)
                        done += 1
        return done


__all__ = ["CopyTaskletToCopy"]
