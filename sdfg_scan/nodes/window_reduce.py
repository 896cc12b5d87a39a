"""``WindowReduce``: ``out[k] = sum_j w[j] * x[k + o[j]]`` along one axis (bounded vertical window)."""

from __future__ import annotations

import dace
import dace.library
from dace import properties
from dace.transformation.transformation import ExpandTransformation

from sdfg_scan.expansions import declare
from sdfg_scan.expansions.environments import ExactArithmetic
from sdfg_scan.expansions.window_loop import build_window
from sdfg_scan.nodes.base import AutoExpansion, ColumnNode


def _block(node, state) -> int:
    return 1 if node.target(state) == "gpu" else node.block_size


@dace.library.expansion
@declare(targets=("cpu", "gpu"), reproducibility="exact")
class ExpandWindowReduceDirect(ExpandTransformation):
    """Every level re-reads its window (one load per offset and level)."""

    environments = [ExactArithmetic]

    @staticmethod
    def expansion(node, parent_state, parent_sdfg):
        node.validate(parent_sdfg, parent_state)
        return build_window(node, parent_state, node.cell_axis(parent_state), _block(node, parent_state), False)


@dace.library.expansion
@declare(targets=("cpu", "gpu"), reproducibility="exact")
class ExpandWindowReduceKCached(ExpandTransformation):
    """A register ring buffer of the window: one load per level."""

    environments = [ExactArithmetic]

    @staticmethod
    def expansion(node, parent_state, parent_sdfg):
        node.validate(parent_sdfg, parent_state)
        return build_window(node, parent_state, node.cell_axis(parent_state), _block(node, parent_state), True)


@dace.library.expansion
class ExpandWindowReduceAuto(AutoExpansion):
    """CPU: ``direct``; GPU: ``kcached`` (see :meth:`WindowReduce.choose_implementation`)."""


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

    The weights are rounded to the dtype of ``x``; no FMA. With ``body`` (Python tasklet code that
    assigns ``_out``) the weighted sum is replaced: the body reads ``x0 .. x{J-1}`` (the window
    values in offset order, 0 outside the column), ``v0 .. v{J-1}`` (inside the column?) and the
    level ``_k`` / level count ``_nk`` (reference: ``body(vals, valid, k)``).

    Connectors: ``_in`` (N-d, N >= 2, any strides), ``_out`` (same shape and dtype).

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
    body = properties.Property(dtype=str, default="", category="Semantics",
                               desc="optional Python tasklet code assigning _out from x0.., v0.., _k")
    block_size = properties.Property(dtype=int, default=8192, category="Expansion",
                                     desc="cells per block (CPU)")
    unroll = properties.Property(dtype=int, default=3, category="Expansion",
                                 desc="levels per pass of the direct expansion on cell-contiguous data "
                                      "(unroll-and-jam; 1: one level per pass; weights only, not a body)")

    def __init__(self, name, weights=(), offsets=(), axis=-1, body="", **kwargs):
        super().__init__(name, inputs={"_in": None}, outputs={"_out": None}, **kwargs)
        self.weights, self.offsets = [float(w) for w in weights], [int(o) for o in offsets]
        self.axis, self.body = axis, body

    def __str__(self):
        what = "body" if self.body else "weights"
        return f"WindowReduce(offsets={list(self.offsets)}, {what}, axis={self.axis})"

    def validate(self, sdfg, state):
        if not self.offsets:
            raise self.error("offsets is empty; give at least one level offset, e.g. offsets=[-1, 0]")
        if not self.body and len(self.weights) != len(self.offsets):
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
            raise self.error(f"connector '_out' has dtype {out.dtype}, expected the dtype of '_in' ({x.dtype})")
        if self.has_edge(state, "_in") and self.operand(state, "_in").edge.data.data == out.edge.data.data:
            raise self.error("'_in' and '_out' are the same container; the window reads levels the node writes")

    def cell_axis(self, state: dace.SDFGState) -> int:
        """The column axis that is blocked: the unit-stride one, else the one with the smallest stride."""
        x = self.operand(state, "_in")
        axis = self.resolved_axis(len(x.shape))
        cols = [d for d in range(len(x.shape)) if d != axis]
        known = [d for d in cols if not dace.symbolic.issymbolic(x.strides[d])]
        return min(known, key=lambda d: x.strides[d]) if known else cols[-1]

    def choose_implementation(self, state):
        """CPU: ``direct`` (measured faster in both layouts: the re-read window rows/levels hit L1/L2, the
        branch-free interior vectorises, the ring's shifts do not; on cell-contiguous data its
        unroll-and-jam passes load each window row once per ``unroll`` levels: 10-12 % faster than one
        level per pass, 1 thread, 81920 x 90/137 float64, M=3; ``unroll`` 2 ~ 3 > 4 > 1; 2 threads,
        block 8192: 3 beats 2 by 2-4 %, 2.35-2.41 ms against 2.46-2.48 ms). GPU: ``kcached`` (the ring
        lives in the thread's registers)."""
        want = "kcached" if self.target(state) == "gpu" else "direct"
        if want in self.candidates(state):
            return want
        return super().choose_implementation(state)


__all__ = ["ExpandWindowReduceAuto", "ExpandWindowReduceDirect", "ExpandWindowReduceKCached", "WindowReduce"]
