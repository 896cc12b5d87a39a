"""CopyInLayoutOrder: a copy between arrays whose unit-stride dimension is not the last one becomes a map
that walks that dimension innermost.

DaCe writes a copy it cannot ``memcpy`` as a loop nest over the copied box in dimension order, so the last
dimension runs innermost. On icon4py's cell-contiguous (``[Cell, K]``, strides ``(1, ncells)``) fields that
walks memory with a stride of one column per element: gt4py's copies of results into outputs and of
``concat_where`` parts ran 5-9x slower than streaming on graupel (20480 x 65).

Between two GPU global arrays the map is a ``GPU_Device`` kernel whose innermost parameter (the unit-stride
dimension) runs along the grid's x axis: coalesced, and without a limit that matters. DaCe 2.0.0a10 lowers
such a copy itself to a kernel with the cells on the grid's y axis, which CUDA caps at 65535: graupel after
``optimize(target="gpu")`` did not launch at 81920 cells.
"""

from __future__ import annotations

import dace
import sympy
from dace import dtypes, properties, subsets, symbolic
from dace.sdfg import nodes
from dace.sdfg import utils as sdutil
from dace.transformation import transformation as xf

HOST = (dtypes.StorageType.Default, dtypes.StorageType.CPU_Heap)
DEVICE = (dtypes.StorageType.GPU_Global,)


class Refuse(Exception):
    """The pattern does not match; the message says why."""


def _unit_dim(desc: dace.data.Array) -> int | None:
    """The one dimension whose stride is the number 1 (None: none or several)."""
    ones = [d for d, s in enumerate(desc.strides) if symbolic.pystr_to_symbolic(str(s)) == 1]
    return ones[0] if len(ones) == 1 else None


def _box(sub: subsets.Range) -> list[tuple]:
    out = []
    for b, e, st in sub.ndrange():
        if symbolic.pystr_to_symbolic(str(st)) != 1:
            raise Refuse("the copy has a step")
        b = symbolic.pystr_to_symbolic(str(b))
        out.append((b, sympy.simplify(symbolic.pystr_to_symbolic(str(e)) + 1 - b)))
    return out


def _whole(box: list, desc: dace.data.Array) -> bool:
    return all(b == 0 and sympy.simplify(n - symbolic.pystr_to_symbolic(str(s))) == 0
               for (b, n), s in zip(box, desc.shape, strict=True))


@properties.make_properties
@xf.explicit_cf_compatible
class CopyInLayoutOrder(xf.SingleStateTransformation):
    """Rewrite a top-level array-to-array copy as a map whose innermost parameter walks the unit-stride
    dimension (of the destination, else of the source)::

        before                                   after
        O[d0:d0+n0, d1:d1+n1] = T[s0:.., s1:..]   for j1 in range(n1):          # omp parallel
        (DaCe: for j0: for j1: ..., strided)          for j0 in range(n0):      # unit stride
                                                          O[d0+j0, d1+j1] = T[s0+j0, s1+j1]

    A copy moves the same values whatever the order: bitwise the original. Checks (``can_be_applied``):
    both ends are access nodes of distinct arrays (no views) of one dtype and rank, both in host memory or
    both in GPU global memory (the map is then a ``GPU_Device`` kernel), in the top-level SDFG outside any
    map;
    one edge without write-conflict resolution copies boxes of equal extents with unit steps; the
    destination (else the source) has exactly one dimension of stride 1, and it is not the last one
    (there DaCe's own loop order is already right); not a whole-array copy between arrays of identical
    strides (DaCe copies that with ``memcpy``).
    """

    src = xf.PatternNode(nodes.AccessNode)
    dst = xf.PatternNode(nodes.AccessNode)

    @classmethod
    def expressions(cls):
        return [sdutil.node_path_graph(cls.src, cls.dst)]

    def _plan(self, state: dace.SDFGState, sdfg: dace.SDFG):
        a, b = self.src, self.dst
        sd = state.scope_dict()
        if sdfg.parent_nsdfg_node is not None or sd[a] is not None or sd[b] is not None:
            raise Refuse("inside a map or a nested SDFG (runs once per iteration of something)")
        da, db = sdfg.arrays[a.data], sdfg.arrays[b.data]
        if type(da) is not dace.data.Array or type(db) is not dace.data.Array:
            raise Refuse("not an array (a view, a scalar, a stream)")
        if not (da.storage in HOST and db.storage in HOST or da.storage in DEVICE and db.storage in DEVICE):
            raise Refuse(f"not two host arrays nor two GPU global arrays ({da.storage.name} -> {db.storage.name})")
        if a.data == b.data or da.dtype != db.dtype or len(da.shape) != len(db.shape) or len(da.shape) < 2:
            raise Refuse("not a copy between two arrays of one dtype and rank (2 or more)")
        edges = state.edges_between(a, b)
        if len(edges) != 1 or edges[0].data.wcr is not None or edges[0].src_conn or edges[0].dst_conn \
                or edges[0].data.is_empty():
            raise Refuse("not one plain copy edge")
        e = edges[0]
        ssub, dsub = e.data.get_src_subset(e, state), e.data.get_dst_subset(e, state)
        if ssub is None or dsub is None or len(ssub) != len(da.shape) or len(dsub) != len(db.shape):
            raise Refuse("the copy does not name both boxes")
        sbox, dbox = _box(ssub), _box(dsub)
        if any(sympy.simplify(ns - nd) != 0 for (_, ns), (_, nd) in zip(sbox, dbox, strict=True)):
            raise Refuse("the boxes differ in extent")
        unit = _unit_dim(db)
        unit = _unit_dim(da) if unit is None else unit
        if unit is None or unit == len(da.shape) - 1:
            raise Refuse("no unit-stride dimension, or it is already walked innermost")
        same = all(sympy.simplify(symbolic.pystr_to_symbolic(str(x)) - symbolic.pystr_to_symbolic(str(y))) == 0
                   for x, y in zip(da.strides, db.strides, strict=True))
        if same and _whole(sbox, da) and _whole(dbox, db):
            raise Refuse("a whole-array copy between identical layouts (memcpy)")
        return e, sbox, dbox, unit

    def refusal(self, state: dace.SDFGState, sdfg: dace.SDFG) -> str | None:
        """Why the matched copy is left alone (None: it is rewritten)."""
        try:
            self._plan(state, sdfg)
        except Refuse as err:
            return str(err)
        return None

    def can_be_applied(self, graph, expr_index, sdfg, permissive=False) -> bool:
        return self.refusal(graph, sdfg) is None

    def apply(self, graph, sdfg):
        e, sbox, dbox, unit = self._plan(graph, sdfg)
        a, b = self.src, self.dst
        order = [d for d in range(len(sbox)) if d != unit] + [unit]
        params = {f"__cl{d}": f"0:{symbolic.symstr(sbox[d][1])}" for d in order}

        def index(box) -> str:
            return ", ".join(f"{symbolic.symstr(lo)} + __cl{d}" for d, (lo, _) in enumerate(box))

        on_gpu = sdfg.arrays[a.data].storage in DEVICE
        graph.remove_edge(e)
        graph.add_mapped_tasklet(f"copy_{a.data}_to_{b.data}_in_layout_order", params,
                                 {"__inp": dace.Memlet(f"{a.data}[{index(sbox)}]")}, "__out = __inp",
                                 {"__out": dace.Memlet(f"{b.data}[{index(dbox)}]")}, external_edges=True,
                                 input_nodes={a.data: a}, output_nodes={b.data: b},
                                 schedule=dtypes.ScheduleType.GPU_Device if on_gpu else dtypes.ScheduleType.Default)


__all__ = ["CopyInLayoutOrder"]
