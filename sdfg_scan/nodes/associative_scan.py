"""``AssociativeScan``: the inclusive scan of a combine function the caller declares associative."""

from __future__ import annotations

import dace
import dace.library
from dace import properties

from sdfg_scan.expansions import declare
from sdfg_scan.expansions.associative_combine import combine_problem, python_steps
from sdfg_scan.expansions.column_loop import (
    BlockedColumnExpansion,
    ColumnKernel,
    SequentialColumnExpansion,
)
from sdfg_scan.expansions.parallel_prefix_ops import ExpandAssociativeScanParallelPrefix
from sdfg_scan.nodes.base import AutoExpansion, ColumnNode


def kernel(node: AssociativeScan, state: dace.SDFGState) -> ColumnKernel:
    """The per-column program: ``s = x[first]``, then ``s = fn(s, x[k])`` (one carry per array)."""
    node.validate(state.sdfg, state)
    n = len(node.combine)
    dtype = node.operand(state, "_in0").dtype
    ins, carries = [f"_in{i}" for i in range(n)], [f"s{i}" for i in range(n)]
    steps = python_steps(list(node.combine), dtype.to_string(), carries, ins)
    first = [f"{c}_ = {x}" for c, x in zip(carries, ins, strict=True)]
    step = [f"{c}_ = {e}" for c, e in zip(carries, steps, strict=True)]
    emit = [f"{o} = s{o[len('_out'):]}_" for o in node.outputs()]
    return ColumnKernel(seq_in=ins, seq_out=node.outputs(), carries=dict.fromkeys(carries, dtype),
                        reverse=node.reverse, first="\n".join(first + emit), step="\n".join(step + emit))


@dace.library.expansion
@declare(targets=("cpu", "gpu"), reproducibility="exact", efficiency={"cpu:cell": 0.03, "cpu:k": 0.5, "cpu:strided": 0.03,
                                                           "gpu:cell": 0.8, "gpu": 0.15})
class ExpandAssociativeScanSequential(SequentialColumnExpansion):
    """One column per map iteration, k-loop inside, the carries in registers."""

    kernel = staticmethod(kernel)


@dace.library.expansion
@declare(targets=("cpu",), reproducibility="exact", efficiency={"cpu:cell": 0.45, "cpu:k": 0.16, "cpu:strided": 0.16})
class ExpandAssociativeScanBlocked(BlockedColumnExpansion):
    """Blocks of ``block_size`` contiguous cells; k-loop around the vectorised cell loop."""

    kernel = staticmethod(kernel)


@dace.library.expansion
class ExpandAssociativeScanAuto(AutoExpansion):
    """The cheapest expansion for the target and the reproducibility floor (``sdfg_scan.choice.choose``)."""


@dace.library.node
class AssociativeScan(ColumnNode):
    """Inclusive scan of an associative ``fn`` over ``n`` arrays: ``assoc_scan :: ((a, a) -> a) -> [a] -> [a]``.

    ``fn`` is held in its normal form, ``combine``: one Python expression per array over ``a0 .. a{n-1}``
    (the earlier value) and ``b0 .. b{n-1}`` (the later), e.g. ``["a0 * b0", "b0 * a1 + b1"]`` for the
    composition of affine maps (:mod:`sdfg_scan.expansions.associative_combine`; the frontend
    ``sdfg_scan.associative_scan`` translates a Python ``fn`` into it).

    Reference loop (one column, forward; ``sdfg_scan.reference.associative_scan``)::

        c = x[0]; out[0] = c                      # c, x[k]: tuples of n values
        for k in range(1, n_levels):
            c = fn(c, x[k]); out[k] = c           # fn(earlier, later)

    ``reverse`` visits the levels from the last down; outputs stay index-aligned. Unlike that loop,
    ``parallel_prefix`` regroups the combines, as the caller declared ``fn`` associative, in the pinned
    order of ``reference.associative_scan(..., order="chunked", chunk=chunk_size)`` (bitwise).

    Connectors: ``_in0 .. _in{n-1}`` (N-d, one shape and one dtype, any strides), ``_out0 .. _out{n-1}``
    (the same shape and dtype; outputs nobody reads may be missing, as DaCe's dead-dataflow elimination
    removes them: every carry is still computed, only the connected outputs are written). Dtypes: float32, float64, int32, int64 (integers: no ``/``, ``**``,
    float literals or ``math`` calls).

    ===================  =========  ============  =====================================================
    implementation       targets    reproducible  schedule
    ===================  =========  ============  =====================================================
    ``sequential``       cpu, gpu   exact         one column per map iteration (K-contiguous; GPU thread)
    ``blocked``          cpu        exact         blocks of contiguous cells, vectorised cell loop
    ``parallel_prefix``  cpu, gpu   replay        chunks of ``chunk_size`` levels: totals, offsets, rescan
    ``auto``             cpu, gpu   the chosen's  the cheapest that fits the target and the floor
    ===================  =========  ============  =====================================================
    """

    implementations = {
        "sequential": ExpandAssociativeScanSequential,
        "blocked": ExpandAssociativeScanBlocked,
        "parallel_prefix": ExpandAssociativeScanParallelPrefix,
        "auto": ExpandAssociativeScanAuto,
    }
    default_implementation = "auto"

    combine = properties.ListProperty(element_type=str, default=[], category="Semantics",
                                      desc="fn in normal form: one Python expression per array over a0.. (earlier) "
                                           "and b0.. (later)")
    reverse = properties.Property(dtype=bool, default=False, category="Semantics", desc="scan from the last level")
    block_size = properties.Property(dtype=int, default=4096, category="Expansion",
                                     desc="cells per block of the 'blocked' expansion")
    chunk_size = properties.Property(dtype=int, default=3001, category="Expansion",
                                     desc="levels per chunk of the 'parallel_prefix' expansion (pins its bits: "
                                          "never derived from the thread count; 3001 as LinearRecurrence's: a "
                                          "group of 4 chunks of two arrays stays in L2)")

    def __init__(self, name, combine=(), axis=-1, reverse=False, **kwargs):
        n = len(combine)
        super().__init__(name, inputs={f"_in{i}": None for i in range(n)},
                         outputs={f"_out{i}": None for i in range(n)}, **kwargs)
        self.combine, self.axis, self.reverse = list(combine), axis, reverse

    def describe(self) -> str:
        fn = ", ".join(self.combine)
        fn = fn if len(fn) <= 48 else fn[:45] + "..."
        return f"({fn}), axis={self.axis}, {'reverse' if self.reverse else 'forward'}"

    def outputs(self) -> list[str]:
        """The output connectors the node has (``_out{i}`` in array order; unread ones may be removed)."""
        return [f"_out{i}" for i in range(len(self.combine)) if f"_out{i}" in self.out_connectors]

    def validate(self, sdfg, state):
        n = len(self.combine)
        want_in, want_out = [f"_in{i}" for i in range(n)], [f"_out{i}" for i in range(n)]
        if set(self.in_connectors) != set(want_in) or not set(self.out_connectors) <= set(want_out) or (
                n and not self.out_connectors):
            raise self.error(f"connectors {sorted(self.in_connectors)} -> {sorted(self.out_connectors)} do not fit "
                             f"the {n} combine expression(s); expected {want_in} -> some of {want_out}")
        for name, value in (("block_size", self.block_size), ("chunk_size", self.chunk_size)):
            if value < 1:
                raise self.error(f"{name} must be positive, got {value}")
        if n == 0:
            raise self.error("combine is empty; expected one expression per array")
        ops = self.check_common(state, want_in + self.outputs())
        first = ops[0]
        for op in ops[1:]:
            if op.dtype != first.dtype:
                raise self.error(f"connector '{op.connector}' has dtype {op.dtype.to_string()}, expected the dtype "
                                 f"of '{first.connector}' ({first.dtype.to_string()}): all arrays of one scan share "
                                 "one dtype")
        problem = combine_problem(list(self.combine), first.dtype.to_string())
        if problem:
            raise self.error(problem)


__all__ = ["AssociativeScan", "ExpandAssociativeScanAuto", "ExpandAssociativeScanBlocked",
           "ExpandAssociativeScanSequential", "kernel"]
