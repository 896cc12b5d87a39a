"""``ColumnReduce``: sum / prod / min / max / argmin / argmax / any / all along one axis."""

from __future__ import annotations

import dace
import dace.library
import numpy as np
from dace import properties
from dace.transformation.transformation import ExpandTransformation

from sdfg_scan.context import context_of
from sdfg_scan.cost import stream_seconds
from sdfg_scan.expansions import declare
from sdfg_scan.expansions.column_loop import (
    ColumnKernel,
    SequentialColumnExpansion,
)
from sdfg_scan.expansions.column_reduce_fold import build_fold, build_kvector
from sdfg_scan.expansions.column_reduce_tree import build_lanes, build_tree, vector_column, vector_lanes
from sdfg_scan.expansions.environments import ExactArithmetic
from sdfg_scan.nodes.base import AutoExpansion, ColumnNode
from sdfg_scan.reference import REDUCE_OPS, reduce_identity

SELECT_OPS = ("min", "max", "argmin", "argmax")
INDEX_DTYPES = (dace.int32, dace.int64)


def literal(value) -> str:
    """A Python-tasklet literal of a NumPy scalar."""
    text = repr(value.item() if hasattr(value, "item") else value)
    return text  # the tasklet unparser writes the names inf / nan as INFINITY / NAN


def _valid(node: ColumnReduce) -> str | None:
    terms = (["_mask"] if node.has_mask else []) + (["(_k < nl)"] if node.has_levels else [])
    return " and ".join(terms) or None


def _select_test(op: str, reverse: bool, cand: str, cur: str) -> str:
    """C-expression text of "``cand`` replaces ``cur``" (see ``reference_columns._beats``)."""
    lt = "<" if op in ("min", "argmin") else ">"
    if reverse:
        return f"(({cand} {lt}= {cur}) or ({cand} != {cand}))"
    return f"(({cand} {lt} {cur}) or (({cand} != {cand}) and ({cur} == {cur})))"


def kernel(node: ColumnReduce, state: dace.SDFGState) -> ColumnKernel:
    """The per-column fold (``reference.column_fold``) as tasklet code for the column-loop builder."""
    node.validate(state.sdfg, state)
    dtype = node.operand(state, "_in").dtype
    out_dtype = node.operand(state, "_out").dtype
    op, valid = node.op, _valid(node)
    seq_in = ["_in"] + (["_mask"] if node.has_mask else [])
    col_in = ["_levels"] if node.has_levels else []
    carries: dict[str, dace.typeclass] = {}
    init, step = [], []
    if node.has_levels:
        carries["nl"] = dace.int64
        init.append("nl_ = _levels")
        step.append("nl_ = nl")
    if op in ("sum", "prod"):
        carries["acc"] = dtype
        init.append(f"acc_ = {literal(reduce_identity(op, dtype.as_numpy_dtype()))}")
        term = f"acc {'+' if op == 'sum' else '*'} _in"
        step.append(f"acc_ = ({term}) if ({valid}) else acc" if valid else f"acc_ = {term}")
        final = "_out = acc"
    elif op in ("any", "all"):
        carries["acc"] = dace.bool_
        init.append(f"acc_ = {op == 'all'}")
        if op == "any":
            step.append(f"acc_ = acc or (({valid}) and (_in != 0))" if valid else "acc_ = acc or (_in != 0)")
        else:
            step.append(f"acc_ = acc and ((not ({valid})) or (_in != 0))" if valid else "acc_ = acc and (_in != 0)")
        final = "_out = acc"
    else:
        carries["acc"] = dtype
        carries["idx"] = dace.int64
        base = op[3:] if op.startswith("arg") else op
        init += [f"acc_ = {literal(reduce_identity(base, dtype.as_numpy_dtype()))}", "idx_ = -1"]
        take = f"(idx < 0) or {_select_test(op, node.reverse, '_in', 'acc')}"
        step.append(f"take = ({valid}) and ({take})" if valid else f"take = {take}")
        step += ["acc_ = _in if take else acc", "idx_ = _k if take else idx"]
        final = "_out = idx" if op.startswith("arg") else "_out = acc"
    del out_dtype
    return ColumnKernel(step="\n".join(step), seq_in=seq_in, col_in=col_in, col_out=["_out"], carries=carries,
                        init="\n".join(init), final=final, reverse=node.reverse)


@dace.library.expansion
@declare(targets=("cpu", "gpu"), reproducibility="exact",
         efficiency={"cpu:k": 0.4, "cpu:cell": 0.05, "cpu:strided": 0.05, "gpu:cell": 0.8, "gpu": 0.15})
class ExpandColumnReduceSequential(SequentialColumnExpansion):
    """Order-pinned fold: one column per map iteration, k-loop inside, accumulator in a register."""

    kernel = staticmethod(kernel)


@dace.library.expansion
@declare(targets=("cpu",), reproducibility="exact", efficiency={"cpu:cell": 0.45, "cpu:k": 0.16, "cpu:strided": 0.16})
class ExpandColumnReduceBlocked(ExpandTransformation):
    """The same fold over blocks of ``block_size`` cells, in C++ (``column_reduce_fold.build_fold``):
    the level loop unrolled by ``unroll`` and jammed into the branch-free (vectorised) cell loop.

    Cell-contiguous data gives unit-stride cell loops over ``unroll`` concurrent level rows;
    K-contiguous data gets groups of at most 8 interleaved columns. Unmasked selection ops run a
    NaN-free pass with one ordered compare per level and redo a block that holds a NaN exactly.
    """

    environments = [ExactArithmetic]

    @staticmethod
    def expansion(node, parent_state, parent_sdfg):
        node.validate(parent_sdfg, parent_state)
        layout = context_of(node, parent_state).layout
        block = node.block_size if layout.cells_contiguous else min(node.block_size, 8)
        return build_fold(node, parent_state, layout.cell_axis, block, node.unroll)


@dace.library.expansion
@declare(targets=("cpu", "gpu"), reproducibility="exact")
class ExpandColumnReduceKVector(ExpandTransformation):
    """Selection ops only (min/max/argmin/argmax): ``lanes`` (value, index) carries per column along
    K, combined by the order-free (value, index) rule: bitwise the sequential result, vectorised
    along K-contiguous columns."""

    environments = [ExactArithmetic]

    @staticmethod
    def applies(node, ctx) -> str | None:
        return None if node.op in SELECT_OPS else f"needs a selection op {SELECT_OPS}, got '{node.op}'"

    @staticmethod
    def cost(node, ctx) -> float:
        fast = ctx.target == "cpu" and node.kvector_fast(ctx.state)
        return stream_seconds(ctx, 0.55 if fast else (0.03 if ctx.target == "cpu" else 0.1))

    @staticmethod
    def expansion(node, parent_state, parent_sdfg):
        node.validate(parent_sdfg, parent_state)
        if node.op not in SELECT_OPS:
            raise node.error(f"the 'kvector' expansion needs a selection op {SELECT_OPS}, got '{node.op}'; "
                             f"use 'sequential' or 'lanes'")
        return build_kvector(node, parent_state, node.lanes_select)


@dace.library.expansion
@declare(targets=("cpu", "gpu"), reproducibility="exact", efficiency={"cpu:cell": 0.15, "cpu:k": 0.12, "cpu": 0.1,
                                                                    "gpu": 0.1})
class ExpandColumnReduceTree(ExpandTransformation):
    """Fixed pairwise tree (``reference.column_reduce(order="tree")``), blocks of ``tree_block`` cells."""

    environments = [ExactArithmetic]

    @staticmethod
    def expansion(node, parent_state, parent_sdfg):
        node.validate(parent_sdfg, parent_state)
        block = node.tree_block
        ctx = context_of(node, parent_state)
        if ctx.target == "gpu":
            block = 1
        elif not ctx.layout.cells_contiguous:
            block = min(block, 16)  # interleaved columns: the block's columns stay in L1
        return build_tree(node, parent_state, ctx.layout.cell_axis, block)


@dace.library.expansion
@declare(targets=("cpu", "gpu"), reproducibility="replay")
class ExpandColumnReduceLanes(ExpandTransformation):
    """``lanes`` interleaved partial accumulators per column (level ``k`` goes to lane ``k % lanes``),
    combined in lane order at the end (``reference.column_reduce(order="lanes")``, bitwise). Fast for
    K-contiguous data: unmasked float sum/prod take a vector path (one vector of ``lanes`` partials,
    one load and one add per ``lanes`` levels). The sum/prod bits depend on the ``lanes`` setting, not
    only on the data: ``replay``.
    """

    environments = [ExactArithmetic]

    @staticmethod
    def cost(node, ctx) -> float:
        fast = ctx.target == "cpu" and node.lanes_fast(ctx.state)
        return stream_seconds(ctx, 0.7 if fast else (0.04 if ctx.target == "cpu" else 0.1))

    @staticmethod
    def expansion(node, parent_state, parent_sdfg):
        node.validate(parent_sdfg, parent_state)
        return build_lanes(node, parent_state, node.lanes)


@dace.library.expansion
class ExpandColumnReduceAuto(AutoExpansion):
    """The cheapest eligible expansion (:func:`sdfg_scan.choice.choose`): CPU, cells contiguous:
    ``blocked`` (unroll-and-jam C++ fold, vectorised cell loop); CPU, K contiguous: ``kvector`` where
    its vector fast path applies (unmasked float selection ops; 1 thread, ncol=81920, nlev=90:
    argmin 1.9 ms against 7.1 ms ``sequential``), at ``replay`` ``lanes`` where its vector path applies
    (unmasked float sum/prod; 2 threads: 0.68 ms against 0.93 ms), else ``sequential`` (consecutive
    columns' chains overlap out of order; measured faster than ``blocked``). GPU: ``sequential``."""


@dace.library.node
class ColumnReduce(ColumnNode):
    """Reduce ``x`` along ``axis``: ``reduce :: (op, [x], [mask], levels) -> x'`` (K-less output).

    Reference loop (one column, ``sdfg_scan.reference.column_fold``; ``valid(k) = mask[k] and
    k < levels``)::

        acc = identity(op); idx = -1
        for k in range(n):
            if valid(k):
                sum/prod: acc = acc (op) x[k]             any/all: acc = acc or/and x[k] != 0
                min/max/argmin/argmax: if idx < 0 or beats(x[k], acc): acc, idx = x[k], k
        out = idx if op is argmin/argmax else acc

    Unlike ``np.sum``, the order is part of the result: ``sequential``/``blocked`` fold from level 0
    (``reverse``: from the last level), ``tree`` uses the fixed pairwise tree of
    ``reference.column_reduce(order="tree")``. ``beats`` is strict ``<`` (``>``) or "NaN over
    non-NaN": argmin/argmax give the *first* index of the extreme value and the first NaN if any
    (like ``np.argmin``); min/max give the value at that index (NaN propagates). Empty columns
    (``n == 0``, ``levels == 0`` or all masked) give the identity: sum ``-0.0``, prod 1, min +inf,
    max -inf (integer extremes for integers), argmin/argmax ``-1``, any False, all True.
    ``levels`` outside ``[0, n]`` act as clamped (the reference raises).

    Connectors: ``_in`` (N-d, N >= 2, any strides), optional ``_mask`` (bool, shape of ``_in``),
    optional ``_levels`` (integer, K-less), ``_out`` (K-less: dtype of ``_in``; int32/int64 for
    argmin/argmax; bool for any/all).

    ==============  =========  =============  ==================================================
    implementation  targets    reproducible   schedule
    ==============  =========  =============  ==================================================
    ``sequential``  cpu, gpu   exact          one column per map iteration (GPU: per thread)
    ``blocked``     cpu        exact          blocks of ``block_size`` cells, ``unroll`` levels per
                                              vectorised cell pass (K-contiguous: 8 columns)
    ``tree``        cpu, gpu   exact          fixed pairwise tree (same bits as ``sequential``
                                              except for sum/prod), blocks of ``tree_block`` cells
                                              (K-contiguous: at most 16)
    ``lanes``       cpu, gpu   replay         ``lanes`` interleaved partial results per column
                                              (``reference`` ``order="lanes"``); CPU, unmasked
                                              float sum/prod, unit K stride: one vector of lanes
    ``kvector``     cpu, gpu   exact          min/max/argmin/argmax only: ``lanes_select``
                                              (value, index) lanes along K, order-free combine;
                                              CPU, unmasked float, unit K stride: one 64-byte
                                              vector of lanes, NaN columns redone sequentially
    ``auto``        cpu, gpu   (chosen)       cheapest eligible (:class:`ExpandColumnReduceAuto`)
    ==============  =========  =============  ==================================================
    """

    implementations = {
        "sequential": ExpandColumnReduceSequential,
        "blocked": ExpandColumnReduceBlocked,
        "tree": ExpandColumnReduceTree,
        "lanes": ExpandColumnReduceLanes,
        "kvector": ExpandColumnReduceKVector,
        "auto": ExpandColumnReduceAuto,
    }
    default_implementation = "auto"

    op = properties.Property(dtype=str, default="sum", category="Semantics", desc=f"one of {REDUCE_OPS}")
    reverse = properties.Property(dtype=bool, default=False, category="Semantics",
                                  desc="fold from the last level (changes sum/prod bits only)")
    has_mask = properties.Property(dtype=bool, default=False, category="Semantics",
                                   desc="a bool '_mask' connector selects the levels that count")
    has_levels = properties.Property(dtype=bool, default=False, category="Semantics",
                                     desc="a K-less integer '_levels' connector: only levels k < levels count")
    block_size = properties.Property(dtype=int, default=8192, category="Expansion",
                                     desc="cells per block of the 'blocked' expansion")
    tree_block = properties.Property(dtype=int, default=64, category="Expansion",
                                     desc="cells per block of the 'tree' expansion on CPU")
    lanes = properties.Property(dtype=int, default=8, category="Expansion",
                                desc="partial accumulators per column of the 'lanes' expansion (its sum/prod "
                                     "bits depend on it: reference.column_reduce(order='lanes', lanes=...))")
    lanes_select = properties.Property(dtype=int, default=8, category="Expansion",
                                       desc="(value, index) lanes per column of the 'kvector' expansion")
    unroll = properties.Property(dtype=int, default=4, category="Expansion",
                                 desc="levels folded per pass over a block's cells ('blocked')")

    def __init__(self, name, op="sum", axis=-1, mask=False, levels=False, reverse=False, **kwargs):
        inputs = {"_in": None}
        if mask:
            inputs["_mask"] = None
        if levels:
            inputs["_levels"] = None
        super().__init__(name, inputs=inputs, outputs={"_out": None}, **kwargs)
        self.op, self.axis, self.reverse, self.has_mask, self.has_levels = op, axis, reverse, mask, levels

    def describe(self) -> str:
        extra = "".join([", mask" if self.has_mask else "", ", levels" if self.has_levels else "",
                         ", reverse" if self.reverse else ""])
        return f"{self.op}, axis={self.axis}{extra}"

    def validate(self, sdfg, state):
        if self.op not in REDUCE_OPS:
            raise self.error(f"op must be one of {REDUCE_OPS}, got '{self.op}'")
        for name, value in (("block_size", self.block_size), ("tree_block", self.tree_block), ("lanes", self.lanes),
                            ("lanes_select", self.lanes_select), ("unroll", self.unroll)):
            if value < 1:
                raise self.error(f"{name} must be positive, got {value}")
        for conn, flag in (("_mask", self.has_mask), ("_levels", self.has_levels)):
            if flag != (conn in self.in_connectors):
                raise self.error(f"connector '{conn}' {'is missing' if flag else 'is unexpected'}; create the "
                                 f"node with {conn[1:]}={conn in self.in_connectors}")
        x = self.check_common(state, ["_in"] + (["_mask"] if self.has_mask else []))[0]
        if len(x.shape) < 2:
            raise self.error(f"connector '_in' has rank {len(x.shape)}, expected at least 2 (columns and levels); "
                             f"add a column axis of size 1")
        axis = self.resolved_axis(len(x.shape))
        kless = x.shape[:axis] + x.shape[axis + 1:]
        if self.has_mask and self.operand(state, "_mask").dtype != dace.bool_:
            raise self.error(f"connector '_mask' has dtype {self.operand(state, '_mask').dtype.to_string()}, expected bool")
        out = self.operand(state, "_out")
        for conn in ("_out",) + (("_levels",) if self.has_levels else ()):
            shape = self.operand(state, conn).shape
            if len(shape) != len(kless) or any(dace.symbolic.inequal_symbols(a, b) for a, b in zip(shape, kless, strict=True)):
                raise self.error(f"connector '{conn}' has shape {shape}, expected the K-less shape {kless} "
                                 f"(the shape of '_in' without axis {axis})")
        if self.has_levels and not np.issubdtype(self.operand(state, "_levels").dtype.as_numpy_dtype(), np.integer):
            raise self.error(f"connector '_levels' has dtype {self.operand(state, '_levels').dtype.to_string()}, "
                             f"expected an integer type")
        if self.op in ("argmin", "argmax"):
            want_dt = "int32 or int64"
            ok = out.dtype in INDEX_DTYPES
        elif self.op in ("any", "all"):
            want_dt, ok = "bool", out.dtype == dace.bool_
        else:
            want_dt, ok = f"the dtype of '_in' ({x.dtype.to_string()})", out.dtype == x.dtype
        if not ok:
            raise self.error(f"connector '_out' has dtype {out.dtype.to_string()}, expected {want_dt} for op '{self.op}'")

    def kvector_fast(self, state: dace.SDFGState) -> bool:
        """Whether ``kvector`` takes its CPU vector fast path here: an unmasked selection op on float
        columns with unit K stride (``column_reduce_fold._kvector_fast``)."""
        x = self.operand(state, "_in")
        return self.op in SELECT_OPS and vector_column(self, x, self.resolved_axis(len(x.shape)))

    def lanes_fast(self, state: dace.SDFGState) -> bool:
        """Whether ``lanes`` takes its CPU vector fast path here: unmasked float sum/prod, unit K
        stride, a power-of-two ``lanes`` up to 16 (``column_reduce_tree._lanes_fast``)."""
        x = self.operand(state, "_in")
        return (self.op in ("sum", "prod") and vector_lanes(self.lanes)
                and vector_column(self, x, self.resolved_axis(len(x.shape))))



__all__ = ["ColumnReduce", "ExpandColumnReduceAuto", "ExpandColumnReduceBlocked", "ExpandColumnReduceLanes",
           "ExpandColumnReduceKVector", "ExpandColumnReduceSequential", "ExpandColumnReduceTree", "kernel"]
