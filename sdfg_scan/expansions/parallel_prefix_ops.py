"""The ``parallel_prefix`` expansions of ``CumulativeScan``, ``LinearRecurrence`` and ``AssociativeScan``:
each node's scan as a :class:`~sdfg_scan.expansions.parallel_prefix.PrefixOp` (associative step, start,
outputs), built by :func:`~sdfg_scan.expansions.parallel_prefix.build_parallel_prefix`.

- cumulative ``op``: the carry is the running value, ``step(c, e) = c (op) e``;
- linear recurrence ``y[k] = a[k] * y[k-1] + b[k]``: the carry is the affine map ``y -> A*y + B`` of
  the levels so far, ``step((A, B), (a, b)) = (a*A, a*B + b)``, started from ``(a, a*init + b)``; its
  ``B`` part is the sequential ``y`` operation for operation, and ``y`` is written;
- associative scan of ``fn``: the carry is one value per array, ``step(c, e) = fn(c, e)`` (the node's
  ``combine`` rendered as C++), started from the element itself; every carry slot is written.
"""

from __future__ import annotations

import dace
import dace.library
from dace.transformation.transformation import ExpandTransformation

from sdfg_scan.cost import GPU_COLUMNS_TO_FILL, machine, nbytes, size
from sdfg_scan.expansions import declare
from sdfg_scan.expansions.associative_combine import cpp_steps
from sdfg_scan.expansions.column_reduce_tree import cpp_literal
from sdfg_scan.expansions.environments import ExactArithmetic
from sdfg_scan.expansions.parallel_prefix import DEFAULT_CHUNK, PrefixOp, build_parallel_prefix
from sdfg_scan.reference import identity

CPP_STEP = {"sum": "{c0} + {e0}", "prod": "{c0} * {e0}",
            # reference_levels.combine's rule: the first NaN stays, a tie (-0 against +0) takes the later
            # level (exactly associative)
            "min": "((({c0}) < ({e0})) || (({c0}) != ({c0}))) ? ({c0}) : ({e0})",
            "max": "((({c0}) > ({e0})) || (({c0}) != ({c0}))) ? ({c0}) : ({e0})"}
"""C++ step of each cumulative op, carry first (the sequential expansions' operand order)."""


def chunk_of(node) -> int:
    """The node's ``chunk_size`` (levels per chunk), :data:`DEFAULT_CHUNK` where it has none."""
    return int(getattr(node, "chunk_size", DEFAULT_CHUNK))


def cumulative_op(node, state: dace.SDFGState) -> PrefixOp:
    """``CumulativeScan`` (op, exclusive, start_from_identity) as a :class:`PrefixOp`."""
    dtype = node.operand(state, "_in").dtype
    ident = cpp_literal(identity(node.op, dtype.as_numpy_dtype()), dtype)
    step = CPP_STEP[node.op]
    start = step.format(c0=ident, e0="{e0}") if node.start_from_identity else "{e0}"
    return PrefixOp(ctype=dtype.ctype, inputs=["_in"], step=[step], start=[start], outputs={"_out": 0},
                    exclusive_first=ident if node.exclusive else None)


def affine_op(node, state: dace.SDFGState) -> PrefixOp:
    """``LinearRecurrence`` as the scan of affine maps (module docstring)."""
    dtype = node.operand(state, "_out").dtype
    y0 = "col_init" if node.has_init else cpp_literal(node.init_value, dtype)
    return PrefixOp(ctype=dtype.ctype, inputs=["a", "b"], step=["{e0} * {c0}", "{e0} * {c1} + {e1}"],
                    start=["{e0}", "{e0} * " + y0 + " + {e1}"], outputs={"_out": 1},
                    col_inputs=["init"] if node.has_init else [])


def associative_op(node, state: dace.SDFGState) -> PrefixOp:
    """``AssociativeScan`` (``combine``, one expression per array over the earlier ``a{i}`` and the later
    ``b{i}``) as a :class:`PrefixOp`: carry slot ``i`` is array ``i``, written to ``_out{i}`` where the node
    has that output."""
    n = len(node.combine)
    dtype = node.operand(state, "_in0").dtype
    return PrefixOp(ctype=dtype.ctype, inputs=[f"_in{i}" for i in range(n)],
                    step=cpp_steps(list(node.combine), dtype.to_string()),
                    start=[f"{{e{i}}}" for i in range(n)],
                    outputs={f"_out{i}": i for i in range(n) if f"_out{i}" in node.out_connectors})


class _ParallelPrefixExpansion(ExpandTransformation):
    """What both ``parallel_prefix`` expansions share: the cost of the chunked scan and its builder;
    a subclass names its scanned operation (``op``) and its traffic relative to ``sequential``
    (``passes``)."""

    environments = [ExactArithmetic]
    passes = 1.5
    op = staticmethod(cumulative_op)

    @classmethod
    def cost(cls, node, ctx) -> float:
        """``passes`` x the sequential traffic (inputs read twice), parallel over (column, chunk) tasks,
        so few long columns are no dependent chain and fill the machine. On the GPU each of the three
        schedules gives every chunk a thread until the GPU is full (a block per column with more chunks
        than threads only where the columns' blocks fill it), so the fill stays columns x chunks."""
        cols = size(ctx, ctx.layout.columns, "columns")
        levels = size(ctx, ctx.layout.levels, "levels")
        tasks = cols * max(1.0, levels / max(chunk_of(node), 1))
        need = GPU_COLUMNS_TO_FILL if ctx.target == "gpu" else machine().threads
        fill = max(min(1.0, tasks / need), 1.0 / need)
        bw = machine().gpu_bandwidth if ctx.target == "gpu" else machine().cpu_bandwidth
        eff = {"cpu:k": 0.8, "cpu:cell": 0.3, "gpu:cell": 0.5}.get(f"{ctx.target}:{ctx.layout.contiguity}", 0.2)
        if levels < 4 * chunk_of(node):   # fewer chunks than a task interleaves: one chain per column
            eff /= 2
        return nbytes(ctx) * cls.passes / (bw * eff * fill)

    @classmethod
    def expansion(cls, node, parent_state, parent_sdfg):
        node.validate(parent_sdfg, parent_state)
        return build_parallel_prefix(node, parent_state, cls.op(node, parent_state), chunk_of(node))


@dace.library.expansion
@declare(targets=("cpu", "gpu"), reproducibility="replay")
class ExpandCumulativeScanParallelPrefix(_ParallelPrefixExpansion):
    """Chunked reduce-then-scan along the levels (:mod:`sdfg_scan.expansions.parallel_prefix`)."""

    passes = 3 / 2   # 3 words per level against 2
    op = staticmethod(cumulative_op)


@dace.library.expansion
@declare(targets=("cpu", "gpu"), reproducibility="replay")
class ExpandLinearRecurrenceParallelPrefix(_ParallelPrefixExpansion):
    """Chunked reduce-then-scan of the affine maps (:mod:`sdfg_scan.expansions.parallel_prefix`)."""

    passes = 5 / 3   # 5 words per level against 3
    op = staticmethod(affine_op)


@dace.library.expansion
@declare(targets=("cpu", "gpu"), reproducibility="replay")
class ExpandAssociativeScanParallelPrefix(_ParallelPrefixExpansion):
    """Chunked reduce-then-scan of ``fn`` (:mod:`sdfg_scan.expansions.parallel_prefix`); one dtype for all
    arrays (the chunk totals share one C++ type)."""

    passes = 3 / 2   # per array: 3 words per level against 2
    op = staticmethod(associative_op)


__all__ = ["CPP_STEP", "ExpandAssociativeScanParallelPrefix", "ExpandCumulativeScanParallelPrefix",
           "ExpandLinearRecurrenceParallelPrefix", "affine_op", "associative_op", "chunk_of", "cumulative_op"]
