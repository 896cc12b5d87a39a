"""``LinearRecurrence``: ``y[k] = a[k] * y[k-1] + b[k]`` along one axis."""

from __future__ import annotations

import dace
import dace.library
from dace import properties

from sdfg_scan.expansions import declare
from sdfg_scan.expansions.column_loop import (
    BlockedColumnExpansion,
    ColumnKernel,
    SequentialColumnExpansion,
)
from sdfg_scan.expansions.parallel_prefix_ops import ExpandLinearRecurrenceParallelPrefix
from sdfg_scan.nodes.base import AutoExpansion, ColumnNode


def kernel(node: LinearRecurrence, state: dace.SDFGState) -> ColumnKernel:
    """The per-column program: ``y = init``, then ``y = a[k] * y + b[k]`` (product rounded first)."""
    node.validate(state.sdfg, state)
    dtype = node.operand(state, "_out").dtype
    step = "y_ = a * y + b\n_out = y_"
    if node.has_init:
        return ColumnKernel(seq_in=["a", "b"], seq_out=["_out"], col_in=["init"], carries={"y": dtype},
                            init="y_ = init", step=step, reverse=node.reverse)
    return ColumnKernel(seq_in=["a", "b"], seq_out=["_out"], carries={"y": dtype},
                        init=f"y_ = {node.init_value!r}", step=step, reverse=node.reverse)


@dace.library.expansion
@declare(targets=("cpu", "gpu"), reproducibility="exact", efficiency={"cpu:cell": 0.03, "cpu:k": 0.36, "cpu:strided": 0.03,
                                                           "gpu:cell": 0.8, "gpu": 0.15})
class ExpandLinearRecurrenceSequential(SequentialColumnExpansion):
    """One column per map iteration, k-loop inside, ``y`` in a register."""

    kernel = staticmethod(kernel)


@dace.library.expansion
@declare(targets=("cpu",), reproducibility="exact", efficiency={"cpu:cell": 0.5, "cpu:k": 0.17, "cpu:strided": 0.17})
class ExpandLinearRecurrenceBlocked(BlockedColumnExpansion):
    """Blocks of ``block_size`` contiguous cells; k-loop around the vectorised cell loop."""

    kernel = staticmethod(kernel)


@dace.library.expansion
class ExpandLinearRecurrenceAuto(AutoExpansion):
    """``blocked`` for cell-contiguous data on CPU, else ``sequential``."""


@dace.library.node
class LinearRecurrence(ColumnNode):
    """First-order linear recurrence: ``linrec :: ([a], [b], init) -> [y]``.

    Reference loop (one column, forward; ``sdfg_scan.reference.linear_recurrence``)::

        y = init                     # the 'init' connector, or the init_value property (0)
        for k in range(n):
            y = a[k] * y + b[k]      # product rounded before the sum: no FMA
            out[k] = y

    ``reverse`` runs ``k = n-1 .. 0`` (``y[k] = a[k] * y[k+1] + b[k]``), outputs index-aligned.
    The recurrence is associative over ``(a, b)`` pairs, which a parallel-prefix expansion may use.

    Connectors: ``a``, ``b`` (N-d, same shape, any strides), optional ``init`` (K-less: the shape
    without ``axis``), ``_out`` (the shape of ``a``).

    ==============  =========  =============  =====================================================
    implementation  targets    reproducible   schedule
    ==============  =========  =============  =====================================================
    ``sequential``  cpu, gpu   exact          one column per map iteration (K-contiguous; GPU thread)
    ``blocked``     cpu        exact          blocks of contiguous cells, vectorised cell loop
    ``parallel_prefix`` cpu, gpu  replay  chunks of ``chunk_size`` levels: totals, offsets, rescan
    ``auto``        cpu, gpu   exact          ``blocked`` if cells are contiguous on CPU, else sequential
    ==============  =========  =============  =====================================================
    """

    implementations = {
        "sequential": ExpandLinearRecurrenceSequential,
        "blocked": ExpandLinearRecurrenceBlocked,
        "parallel_prefix": ExpandLinearRecurrenceParallelPrefix,
        "auto": ExpandLinearRecurrenceAuto,
    }
    default_implementation = "auto"

    reverse = properties.Property(dtype=bool, default=False, category="Semantics", desc="run from the last level")
    has_init = properties.Property(dtype=bool, default=False, category="Semantics",
                                   desc="read y[-1] per column from the K-less 'init' connector")
    init_value = properties.Property(dtype=float, default=0.0, category="Semantics",
                                     desc="y[-1] for every column when there is no 'init' connector")
    block_size = properties.Property(dtype=int, default=4096, category="Expansion",
                                     desc="cells per block of the 'blocked' expansion (4096 measured best for cumsum and the linear recurrence)")
    chunk_size = properties.Property(dtype=int, default=3001, category="Expansion",
                                     desc="levels per chunk of the 'parallel_prefix' expansion (pins its bits: "
                                          "never derived from the thread count; 3001: a group of 4 chunks of "
                                          "a and b, 192 KiB, stays in L2 between fold and rescan)")

    def __init__(self, name, axis=-1, reverse=False, has_init=False, init_value=0.0, **kwargs):
        inputs = {"a": None, "b": None}
        if has_init:
            inputs["init"] = None
        super().__init__(name, inputs=inputs, outputs={"_out": None}, **kwargs)
        self.axis, self.reverse, self.has_init, self.init_value = axis, reverse, has_init, float(init_value)

    def describe(self) -> str:
        return f"axis={self.axis}, {'reverse' if self.reverse else 'forward'}"

    def validate(self, sdfg, state):
        if self.block_size < 1:
            raise self.error(f"block_size must be positive, got {self.block_size}")
        if self.has_init != ("init" in self.in_connectors):
            raise self.error("has_init and the 'init' connector disagree; create the node with has_init=True "
                             "to read a per-column initial value")
        a, b, out = self.check_common(state, ["a", "b", "_out"])
        for op in (b, out):
            if op.dtype != a.dtype:
                raise self.error(f"connector '{op.connector}' has dtype {op.dtype.to_string()}, expected the dtype of 'a' "
                                 f"({a.dtype.to_string()})")
        if self.has_init:
            init = self.operand(state, "init")
            axis = self.resolved_axis(len(a.shape))
            want = a.shape[:axis] + a.shape[axis + 1:]
            if len(init.shape) != len(want) or any(
                    dace.symbolic.inequal_symbols(x, y) for x, y in zip(init.shape, want, strict=True)):
                raise self.error(f"connector 'init' has shape {init.shape}, expected the K-less shape {want} "
                                 f"(one value per column); broadcast a scalar to it first (sdfg_scan.linear_recurrence "
                                 f"does)")
            if init.dtype != a.dtype:
                raise self.error(f"connector 'init' has dtype {init.dtype.to_string()}, expected {a.dtype.to_string()}")



__all__ = ["ExpandLinearRecurrenceAuto", "ExpandLinearRecurrenceBlocked", "ExpandLinearRecurrenceSequential",
           "LinearRecurrence", "kernel"]
