"""``CumulativeScan``: cumulative sum / product / minimum / maximum along one axis."""

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
from sdfg_scan.expansions.parallel_prefix_ops import ExpandCumulativeScanParallelPrefix
from sdfg_scan.nodes.base import AutoExpansion, ColumnNode
from sdfg_scan.reference import CUMULATIVE_OPS, identity

# reference.combine: min/max keep the carry only where it is strictly better or NaN (the first NaN stays, a
# NaN input is taken, ties such as -0.0 against 0.0 go to the later value); on bool they are and/or
_COMBINE = {"sum": "{a} + {b}", "prod": "{a} * {b}",
            "min": "{a} if ({a} < {b} or {a} != {a}) else {b}",
            "max": "{a} if ({a} > {b} or {a} != {a}) else {b}"}


def _literal(value) -> str:
    text = repr(value.item() if hasattr(value, "item") else value)
    return {"inf": "inf", "-inf": "-inf"}.get(text, text)  # cppunparse writes INFINITY


def kernel(node: CumulativeScan, state: dace.SDFGState) -> ColumnKernel:
    """The per-column program: ``s = x[first]``, then ``s = s (op) x[k]`` (inclusive); exclusive scans
    (and ``start_from_identity``) start from ``s = identity (op) x[first]`` as the reference does."""
    node.validate(state.sdfg, state)
    dtype = node.operand(state, "_in").dtype
    op = _COMBINE[node.op].format(a="s", b="_in")
    ident = _literal(identity(node.op, dtype.as_numpy_dtype()))
    # the first level combined with the identity: 0.0 + x[0] is +0.0 for x[0] = -0.0
    from_identity = _COMBINE[node.op].format(a=ident, b="_in")
    if node.exclusive:
        return ColumnKernel(seq_in=["_in"], seq_out=["_out"], carries={"s": dtype}, reverse=node.reverse,
                            first=f"_out = {ident}\ns_ = {from_identity}", step=f"_out = s\ns_ = {op}")
    start = from_identity if node.start_from_identity else "_in"
    return ColumnKernel(seq_in=["_in"], seq_out=["_out"], carries={"s": dtype}, reverse=node.reverse,
                        first=f"s_ = {start}\n_out = {'s_' if node.start_from_identity else '_in'}", step=f"s_ = {op}\n_out = s_")


@dace.library.expansion
@declare(targets=("cpu", "gpu"), reproducibility="exact", efficiency={"cpu:cell": 0.03, "cpu:k": 0.5, "cpu:strided": 0.03,
                                                           "gpu:cell": 0.8, "gpu": 0.15})
class ExpandCumulativeScanSequential(SequentialColumnExpansion):
    """One column per map iteration, k-loop inside, carry in a register."""

    kernel = staticmethod(kernel)


@dace.library.expansion
@declare(targets=("cpu",), reproducibility="exact", efficiency={"cpu:cell": 0.45, "cpu:k": 0.16, "cpu:strided": 0.16})
class ExpandCumulativeScanBlocked(BlockedColumnExpansion):
    """Blocks of ``block_size`` contiguous cells; k-loop around the vectorised cell loop."""

    kernel = staticmethod(kernel)


@dace.library.expansion
class ExpandCumulativeScanAuto(AutoExpansion):
    """``blocked`` for cell-contiguous data on CPU, else ``sequential``."""


@dace.library.node
class CumulativeScan(ColumnNode):
    """Cumulative ``op`` along ``axis``: ``cumscan :: (op, [x]) -> [y]``.

    Reference loop (one column, forward, inclusive; ``sdfg_scan.reference.cumulative``)::

        s = x[0]; y[0] = s
        for k in range(1, n):
            s = s (op) x[k]; y[k] = s

    ``exclusive`` emits the carry *before* each level (the identity of ``op`` first, then
    ``s = identity (op) x[0]``: ``+0.0`` for ``x[0] = -0.0``); ``reverse`` runs from the last level
    down, outputs stay index-aligned. ``min``/``max`` follow ``reference.combine``: the first NaN
    stays, ties (``-0.0`` against ``0.0``) go to the later level; on bool they are logical and/or;
    complex operands are refused by ``validate()``.
    ``start_from_identity`` starts from ``s = identity (op) x[first]`` (what a scan from an init
    equal to the identity computes; differs from ``s = x[first]`` only for ``-0.0`` and NaN payloads).

    Connectors: ``_in`` (N-d, any strides), ``_out`` (same shape).

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
        "sequential": ExpandCumulativeScanSequential,
        "blocked": ExpandCumulativeScanBlocked,
        "parallel_prefix": ExpandCumulativeScanParallelPrefix,
        "auto": ExpandCumulativeScanAuto,
    }
    default_implementation = "auto"

    op = properties.Property(dtype=str, default="sum", category="Semantics", desc=f"one of {CUMULATIVE_OPS}")
    reverse = properties.Property(dtype=bool, default=False, category="Semantics", desc="scan from the last level")
    exclusive = properties.Property(dtype=bool, default=False, category="Semantics",
                                    desc="emit the carry before each level (identity first)")
    start_from_identity = properties.Property(
        dtype=bool, default=False, category="Semantics",
        desc="first level computes identity (op) x (as gt4py's scans from init 0) instead of taking x")
    block_size = properties.Property(dtype=int, default=4096, category="Expansion",
                                     desc="cells per block of the 'blocked' expansion (4096 measured best for cumsum and the linear recurrence)")
    chunk_size = properties.Property(dtype=int, default=15000, category="Expansion",
                                     desc="levels per chunk of the 'parallel_prefix' expansion (pins its bits: "
                                          "never derived from the thread count)")

    def __init__(self, name, op="sum", axis=-1, reverse=False, exclusive=False, **kwargs):
        super().__init__(name, inputs={"_in": None}, outputs={"_out": None}, **kwargs)
        self.op, self.axis, self.reverse, self.exclusive = op, axis, reverse, exclusive

    def describe(self) -> str:
        mode = ("exclusive " if self.exclusive else "") + ("reverse" if self.reverse else "forward")
        return f"{self.op}, axis={self.axis}, {mode}"

    def validate(self, sdfg, state):
        if self.op not in CUMULATIVE_OPS:
            raise self.error(f"op must be one of {CUMULATIVE_OPS}, got '{self.op}'")
        if self.block_size < 1:
            raise self.error(f"block_size must be positive, got {self.block_size}")
        src, dst = self.check_common(state, ["_in", "_out"])
        if src.dtype != dst.dtype:
            raise self.error(f"connector '_out' has dtype {dst.dtype.to_string()}, expected the dtype of '_in' ({src.dtype.to_string()})")
        if self.op in ("min", "max") and src.dtype.as_numpy_dtype().kind == "c":
            raise self.error(f"connector '_in' has dtype {src.dtype.to_string()}, but op '{self.op}' needs "
                             f"ordered values: complex numbers have no order here (NumPy orders them "
                             f"lexicographically); scan the real part, or use op 'sum' or 'prod'")


__all__ = ["CumulativeScan", "ExpandCumulativeScanAuto", "ExpandCumulativeScanBlocked",
           "ExpandCumulativeScanSequential", "kernel"]
