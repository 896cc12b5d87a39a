"""``WindowReduce``: ``out[k] = sum_j w[j] * x[k + o[j]]`` along one axis (bounded vertical window)."""

from __future__ import annotations

import dace
import dace.library
import numpy as np
from dace import properties
from dace.transformation.transformation import ExpandTransformation

from sdfg_scan.context import context_of
from sdfg_scan.expansions import declare
from sdfg_scan.expansions.environments import ExactArithmetic
from sdfg_scan.expansions.window_loop import build_window
from sdfg_scan.nodes.base import AutoExpansion, ColumnNode
from sdfg_scan.reference_columns import window_weight_kind


def _build(node, state, cached: bool):
    ctx = context_of(node, state)
    cell = ctx.layout.cell_axis
    if cell is None:
        raise node.error("needs a column axis besides the scan axis (1-d operands have no column to block)")
    return build_window(node, state, cell, 1 if ctx.target == "gpu" else node.block_size, cached)


@dace.library.expansion
@declare(targets=("cpu", "gpu"), reproducibility="exact", efficiency={"cpu:cell": 0.42, "cpu:k": 0.56, "cpu": 0.3,
                                                                    "gpu": 0.3})
class ExpandWindowReduceDirect(ExpandTransformation):
    """Every level re-reads its window (one load per offset and level)."""

    environments = [ExactArithmetic]

    @staticmethod
    def expansion(node, parent_state, parent_sdfg):
        node.validate(parent_sdfg, parent_state)
        return _build(node, parent_state, False)


@dace.library.expansion
@declare(targets=("cpu", "gpu"), reproducibility="exact", efficiency={"cpu:cell": 0.35, "cpu:k": 0.38, "cpu": 0.25,
                                                                    "gpu:cell": 0.8, "gpu": 0.2})
class ExpandWindowReduceKCached(ExpandTransformation):
    """A register ring buffer of the window: one load per level."""

    environments = [ExactArithmetic]

    @staticmethod
    def expansion(node, parent_state, parent_sdfg):
        node.validate(parent_sdfg, parent_state)
        return _build(node, parent_state, True)


@dace.library.expansion
class ExpandWindowReduceAuto(AutoExpansion):
    """The cheapest eligible expansion (:func:`sdfg_scan.choice.choose`). CPU: ``direct`` (measured
    faster in both layouts: the re-read window rows/levels hit L1/L2, the branch-free interior
    vectorises, the ring's shifts do not; on cell-contiguous data its unroll-and-jam passes load each
    window row once per ``unroll`` levels: 10-12 % faster than one level per pass, 1 thread, 81920 x
    90/137 float64, M=3; ``unroll`` 2 ~ 3 > 4 > 1; 2 threads, block 8192: 3 beats 2 by 2-4 %, 2.35-2.41 ms
    against 2.46-2.48 ms). GPU: ``kcached`` (the ring lives in the thread's registers)."""


@dace.library.node
class WindowReduce(ColumnNode):
    """Bounded window along ``axis``: ``window :: ([w], [o], [x]) -> [y]`` (same shape as ``x``).

    Reference loop (one column, ``sdfg_scan.reference.window_reduce``)::

        for k in range(n):
            acc = -0.0
            for j in range(len(o)):
                if 0 <= k + o[j] < n:          # out-of-column terms are skipped
                    acc = acc + w[j] * x[k + o[j]]
            y[k] = acc

    The weights are rounded to the dtype of ``x``; no FMA. With ``weights_input`` they come at run time
    through the ``_weights`` connector instead of the ``weights`` property: ``(J,)``, the column shape
    then ``J`` (per column: ``w[c, j]``) or the shape of ``_in`` then ``J`` (per column and level: term
    ``j`` of output level ``k`` is weighted by ``w[c, k, j]``); axes of length 1 broadcast
    (``sdfg_scan.reference.window_reduce``). Every expansion accepts them. With ``body`` (Python tasklet code that
    assigns ``_out``) the weighted sum is replaced: the body reads ``x0 .. x{J-1}`` (the window
    values in offset order, 0 outside the column), ``v0 .. v{J-1}`` (inside the column?) and the
    level ``_k`` / level count ``_nk`` (reference: ``body(vals, valid, k)``).

    Connectors: ``_in`` (N-d, N >= 2, any strides), ``_out`` (same shape and dtype), optional
    ``_weights`` (``weights_input``; any real dtype, any strides).

    ==============  =========  =============  =================================================
    implementation  targets    reproducible   schedule
    ==============  =========  =============  =================================================
    ``direct``      cpu, gpu   exact          re-reads the window; blocks of cells (cell-contiguous,
                                              ``unroll`` levels per pass over the block: unroll-and-jam)
                                              or one column per iteration (K-contiguous, GPU)
    ``kcached``     cpu, gpu   exact          register ring buffer, one load per level
    ``auto``        cpu, gpu   exact          CPU ``direct``, GPU ``kcached``
    ==============  =========  =============  =================================================
    """

    implementations = {
        "direct": ExpandWindowReduceDirect,
        "kcached": ExpandWindowReduceKCached,
        "auto": ExpandWindowReduceAuto,
    }
    default_implementation = "auto"

    weights = properties.ListProperty(element_type=float, default=[], category="Semantics",
                                      desc="one weight per offset (ignored with a body)")
    offsets = properties.ListProperty(element_type=int, default=[], category="Semantics",
                                      desc="constant level offsets of the window, e.g. [-3, -2, -1, 0]")
    weights_input = properties.Property(dtype=bool, default=False, category="Semantics",
                                        desc="the weights are the runtime '_weights' connector: (J,), column "
                                             "shape + (J,) or input shape + (J,), size-1 axes broadcast")
    body = properties.Property(dtype=str, default="", category="Semantics",
                               desc="optional Python tasklet code assigning _out from x0.., v0.., _k")
    block_size = properties.Property(dtype=int, default=8192, category="Expansion",
                                     desc="cells per block (CPU)")
    unroll = properties.Property(dtype=int, default=3, category="Expansion",
                                 desc="levels per pass of the direct expansion on cell-contiguous data "
                                      "(unroll-and-jam; 1: one level per pass; weights only, not a body)")

    def __init__(self, name, weights=(), offsets=(), axis=-1, body="", weights_input=False, **kwargs):
        inputs = {"_in": None, "_weights": None} if weights_input else {"_in": None}
        super().__init__(name, inputs=inputs, outputs={"_out": None}, **kwargs)
        self.weights, self.offsets = [float(w) for w in weights], [int(o) for o in offsets]
        self.axis, self.body, self.weights_input = axis, body, weights_input

    def describe(self) -> str:
        what = "body" if self.body else ("_weights" if self.weights_input else "weights")
        return f"offsets={list(self.offsets)}, {what}, axis={self.axis}"

    def validate(self, sdfg, state):
        if not self.offsets:
            raise self.error("offsets is empty; give at least one level offset, e.g. offsets=[-1, 0]")
        if self.weights_input != ("_weights" in self.in_connectors):
            raise self.error(f"connector '_weights' {'is missing' if self.weights_input else 'is unexpected'}; "
                             f"create the node with weights_input={'_weights' in self.in_connectors}")
        if self.weights_input and (self.body or self.weights):
            raise self.error("weights_input=True takes the weights from the '_weights' connector; leave the "
                             "weights property empty and give no body")
        if not self.body and not self.weights_input and len(self.weights) != len(self.offsets):
            raise self.error(f"{len(self.weights)} weights for {len(self.offsets)} offsets; give one weight per "
                             f"offset")
        if self.body and "_out" not in self.body:
            raise self.error("body does not assign '_out'; write e.g. body='_out = x0 + x1'")
        if self.block_size < 1:
            raise self.error(f"block_size must be positive, got {self.block_size}")
        if self.unroll < 1:
            raise self.error(f"unroll must be positive, got {self.unroll}")
        x, out = self.check_common(state, ["_in", "_out"])
        if len(x.shape) < 2:
            raise self.error(f"connector '_in' has rank {len(x.shape)}, expected at least 2 (columns and levels); "
                             f"add a column axis of size 1")
        if x.dtype != out.dtype:
            raise self.error(f"connector '_out' has dtype {out.dtype.to_string()}, expected the dtype of '_in' ({x.dtype.to_string()})")
        if self.has_edge(state, "_in") and self.operand(state, "_in").edge.data.data == out.edge.data.data:
            raise self.error("'_in' and '_out' are the same container; the window reads levels the node writes")
        if self.weights_input:
            self._validate_weights(state, x)

    def _validate_weights(self, state, x) -> None:
        """The runtime weights: real dtype, rank 1 / rank of ``_in`` / one more, last axis ``J``, the others
        equal to the matching axes of ``_in`` or 1."""
        w = self.operand(state, "_weights")
        if w.edge.data.data == self.operand(state, "_out").edge.data.data:
            raise self.error("'_weights' and '_out' are the same container; give the weights in their own array")
        if not np.issubdtype(w.dtype.as_numpy_dtype(), np.integer) and \
                not np.issubdtype(w.dtype.as_numpy_dtype(), np.floating):
            raise self.error(f"connector '_weights' has dtype {w.dtype.to_string()}, expected an integer or floating type")
        try:
            kind = window_weight_kind(len(x.shape), len(w.shape))
        except ValueError as err:
            raise self.error(f"connector '_weights' has shape {w.shape}: {err}") from None
        axis = self.resolved_axis(len(x.shape))
        want = {"vector": [], "columns": list(x.shape[:axis] + x.shape[axis + 1:]), "levels": list(x.shape)}[kind]
        want.append(len(self.offsets))
        last = not dace.symbolic.inequal_symbols(w.shape[-1], want[-1])
        if not last or any(h != 1 and dace.symbolic.inequal_symbols(h, e) for h, e in zip(w.shape[:-1], want[:-1], strict=True)):
            raise self.error(f"connector '_weights' has shape {w.shape}, expected {tuple(want)} (one weight per "
                             f"offset last; axes of length 1 broadcast)")

    def layout_operands(self, state: dace.SDFGState):
        """``_in`` and ``_out`` (the weights may carry an extra offsets axis)."""
        return [self.operand(state, c) for c in ("_in", "_out")]



__all__ = ["ExpandWindowReduceAuto", "ExpandWindowReduceDirect", "ExpandWindowReduceKCached", "WindowReduce"]
