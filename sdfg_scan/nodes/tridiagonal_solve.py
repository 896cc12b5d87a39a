"""``TridiagonalSolve`` and ``TridiagonalFactor``: batched tridiagonal systems along one axis."""

from __future__ import annotations

import math

import dace
import dace.library
from dace import properties
from dace.transformation.transformation import ExpandTransformation

from sdfg_scan.context import context_of
from sdfg_scan.cost import machine, nbytes, size, stream_seconds
from sdfg_scan.expansions import declare
from sdfg_scan.expansions.cusparse_gtsv import build_cusparse
from sdfg_scan.expansions.environments import CuSparse, ExactArithmetic
from sdfg_scan.expansions.pcr import build_pcr
from sdfg_scan.expansions.thomas import (
    SweepKernel,
    backward,
    build_blocked,
    build_columns,
    first_level,
    forward,
)
from sdfg_scan.expansions.thomas_producer import build_blocked_with_producer
from sdfg_scan.nodes.base import AutoExpansion, ColumnNode

FLOAT_TYPES = (dace.float32, dace.float64)
BLOCK_CELLS = 2048
"""Default cells per block when cells are contiguous (measured best of 512..4096 at 81920 x 90 on the
2-core dev machine; scratch c' and x of a block, 2 x 1.4 MiB in float64 at 90 levels, stay in L2/L3)."""
BLOCK_COLUMNS = 64
"""Default columns per block when K is contiguous (the block is staged into cell-contiguous scratch)."""
PRODUCER_BLOCK_CELLS = 256
"""Default cells per block when the coefficients' producer runs inside the blocks (measured the same
from 256 to 10240 cells on the dycore pair; the block's ``c'`` and ``x`` rows stay in L2)."""

# -- kernels (C++; arithmetic exactly as in sdfg_scan.reference, products rounded before sums) ----

_BACK_SUBSTITUTION = backward("_x = _xk - _cpk * _xp;", [("_xk", "x", 0), ("_cpk", "cp", 0), ("_xp", "x", 1)],
                              [("_x", "x")])


def thomas_kernel(dtype: dace.typeclass) -> SweepKernel:
    """Factor and forward sweep fused (``c'`` into scratch, ``d'`` into ``x``), then back substitution."""
    return SweepKernel(
        inputs=["a", "b", "c", "d"], outputs=["x"], scratch=["cp"], dtype=dtype, loops=[
            first_level("T w = T(1) / _b;\n_cp = _c * w;\n_x = _d * w;",
                        [("_b", "b", 0), ("_c", "c", 0), ("_d", "d", 0)], [("_cp", "cp"), ("_x", "x")]),
            forward("T w = T(1) / (_b - _a * _cpm);\n_cp = _c * w;\n_x = (_d - _a * _xm) * w;",
                    [("_a", "a", 0), ("_b", "b", 0), ("_c", "c", 0), ("_d", "d", 0), ("_cpm", "cp", -1),
                     ("_xm", "x", -1)], [("_cp", "cp"), ("_x", "x")]),
            _BACK_SUBSTITUTION])


def factor_kernel(dtype: dace.typeclass) -> SweepKernel:
    """Inverse pivots ``w`` and modified upper coefficients ``cp`` (one forward sweep)."""
    return SweepKernel(
        inputs=["a", "b", "c"], outputs=["w", "cp"], dtype=dtype, loops=[
            first_level("_w = T(1) / _b;\n_cp = _c * _w;", [("_b", "b", 0), ("_c", "c", 0)],
                        [("_w", "w"), ("_cp", "cp")]),
            forward("_w = T(1) / (_b - _a * _cpm);\n_cp = _c * _w;",
                    [("_a", "a", 0), ("_b", "b", 0), ("_c", "c", 0), ("_cpm", "cp", -1)],
                    [("_w", "w"), ("_cp", "cp")])])


def prefactored_kernel(dtype: dace.typeclass) -> SweepKernel:
    """The two cheap sweeps with a factorisation: no division, no scratch."""
    return SweepKernel(
        inputs=["a", "w", "cp", "d"], outputs=["x"], dtype=dtype, loops=[
            first_level("_x = _d * _w;", [("_d", "d", 0), ("_w", "w", 0)], [("_x", "x")]),
            forward("_x = (_d - _a * _xm) * _w;", [("_a", "a", 0), ("_d", "d", 0), ("_w", "w", 0),
                                                   ("_xm", "x", -1)], [("_x", "x")]),
            _BACK_SUBSTITUTION])


def build_sweeps(node: ColumnNode, state: dace.SDFGState, kernel: SweepKernel) -> dace.SDFG:
    """``columns`` on GPUs, for 1-d operands and for ``block_size=1``; else ``blocked``, with the map that
    computes the coefficients inside the blocks where there is one (cells contiguous, ``absorb_producer``)."""
    ctx = context_of(node, state)
    cell, contiguous = ctx.layout.cell_axis, ctx.layout.cells_contiguous
    block = node.block_size or (BLOCK_CELLS if contiguous else BLOCK_COLUMNS)
    if ctx.target == "gpu" or cell is None or block == 1:
        return build_columns(node, state, kernel)
    if contiguous and node.absorb_producer:
        fused = build_blocked_with_producer(node, state, kernel, cell, node.block_size or PRODUCER_BLOCK_CELLS)
        if fused is not None:
            return fused
    return build_blocked(node, state, kernel, cell, block, stage=not contiguous)


# -- TridiagonalSolve expansions --------------------------------------------------------------------

GPU_LEVEL_LATENCY = 4e-7
"""Seconds per level of one GPU thread's dependent sweep (a global-memory round trip per level)."""


def _thomas_cost(node, ctx) -> float:
    """Bandwidth-bound over columns, but a thread per column cannot beat its two dependent sweeps."""
    eff = {"cpu:cell": 0.36, "cpu:k": 0.15, "gpu:cell": 0.7}.get(f"{ctx.target}:{ctx.layout.contiguity}", 0.2)
    t = stream_seconds(ctx, eff)
    if ctx.target == "gpu":
        t = max(t, 2 * size(ctx, ctx.layout.levels, "levels") * GPU_LEVEL_LATENCY)
    return t


@dace.library.expansion
@declare(targets=("cpu", "gpu"), reproducibility="exact")
class ExpandTridiagonalThomas(ExpandTransformation):
    """Thomas algorithm: CPU blocks of cells (vectorised when cells are contiguous, interleaved columns
    when K is contiguous), GPU one thread per column. With ``prefactored`` only the two sweeps."""

    environments = [ExactArithmetic]
    cost = staticmethod(_thomas_cost)

    @staticmethod
    def expansion(node, parent_state, parent_sdfg):
        dtype = node.check(parent_state)
        kernel = prefactored_kernel(dtype) if node.prefactored else thomas_kernel(dtype)
        return build_sweeps(node, parent_state, kernel)


@dace.library.expansion
@declare(targets=("cpu", "gpu"), reproducibility="replay")
class ExpandTridiagonalPCR(ExpandTransformation):
    """Parallel cyclic reduction: every level of every column in parallel, ``ceil(log2 n)`` steps.

    ``replay``: the operation order depends only on the level count (never on threads or hardware), but
    it is not Thomas' order, so the last bits differ from the ``exact`` expansions.
    """

    environments = [ExactArithmetic]

    @staticmethod
    def applies(node, ctx) -> str | None:
        return "needs the matrix (a, b, c), not a pre-factored node" if node.prefactored else None

    @staticmethod
    def cost(node, ctx) -> float:
        """``ceil(log2 n)`` passes over all levels of all columns, parallel over every element."""
        steps = max(1, math.ceil(math.log2(max(size(ctx, ctx.layout.levels, "levels"), 2))))
        bw = machine().gpu_bandwidth if ctx.target == "gpu" else machine().cpu_bandwidth
        return nbytes(ctx) * (steps + 1) / (bw * (0.5 if ctx.target == "gpu" else 0.06))

    @staticmethod
    def expansion(node, parent_state, parent_sdfg):
        dtype = node.check(parent_state)
        if node.prefactored:
            raise node.error("the 'pcr' expansion needs the matrix (a, b, c), got a pre-factored node; "
                             "use 'thomas'")
        return build_pcr(node, parent_state, dtype)


@dace.library.expansion
@declare(targets=("gpu",), reproducibility="replay", efficiency={"gpu": 0.08})   # unmeasured: never auto-chosen
class ExpandTridiagonalCuSPARSE(ExpandTransformation):
    """cuSPARSE: ``gtsvInterleavedBatch`` (cells contiguous) or ``gtsv2StridedBatch`` (K contiguous).

    ``replay`` (assumed, not verified on a GPU here): cuSPARSE documents no atomics for these solvers;
    the algorithm is NVIDIA's and may change between library versions.
    """

    environments = [CuSparse]

    @staticmethod
    def applies(node, ctx) -> str | None:
        return "needs the matrix (a, b, c), not a pre-factored node" if node.prefactored else None

    @staticmethod
    def expansion(node, parent_state, parent_sdfg):
        dtype = node.check(parent_state)
        if node.prefactored:
            raise node.error("the 'cusparse' expansion needs the matrix (a, b, c), got a pre-factored node; "
                             "use 'thomas'")
        return build_cusparse(node, parent_state, dtype)


@dace.library.expansion
class ExpandTridiagonalAuto(AutoExpansion):
    """The cheapest eligible expansion (:func:`sdfg_scan.choice.choose`): ``thomas``, except ``pcr`` on a
    GPU at ``replay`` where few columns leave a thread per column waiting on its dependent sweeps."""


# -- TridiagonalFactor expansions -------------------------------------------------------------------

@dace.library.expansion
@declare(targets=("cpu", "gpu"), reproducibility="exact", efficiency={"cpu:cell": 0.47, "cpu:k": 0.14})
class ExpandTridiagonalFactorThomas(ExpandTransformation):
    """The factor half of the Thomas forward sweep (same schedules as ``TridiagonalSolve.thomas``)."""

    environments = [ExactArithmetic]

    @staticmethod
    def expansion(node, parent_state, parent_sdfg):
        return build_sweeps(node, parent_state, factor_kernel(node.check(parent_state)))


# -- nodes --------------------------------------------------------------------------------------------

@properties.make_properties
class _TridiagonalBase(ColumnNode):
    block_size = properties.Property(dtype=int, default=0, category="Expansion",
                                     desc="cells per block on CPU; 0: automatic "
                                          f"({BLOCK_CELLS} cell-contiguous, {BLOCK_COLUMNS} K-contiguous); "
                                          "1: one column per map iteration")
    absorb_producer = properties.Property(
        dtype=bool, default=True, category="Expansion",
        desc="CPU thomas with cells contiguous: a pointwise map that computes the coefficients (and only "
             "them) runs inside the blocks, per level, instead of writing them to memory "
             "(sdfg_scan/expansions/thomas_producer.py); same values, bitwise")

    def _check(self, state: dace.SDFGState, inputs: list[str], outputs: list[str]) -> dace.typeclass:
        if self.block_size < 0:
            raise self.error(f"block_size must be >= 0 (0: automatic), got {self.block_size}")
        ops = self.check_common(state, inputs + outputs)
        dtype = ops[0].dtype
        if dtype not in FLOAT_TYPES:
            raise self.error(f"connector '{ops[0].connector}' has dtype {dtype.to_string()}, expected float32 or "
                             f"float64")
        for op in ops[1:]:
            if op.dtype != dtype:
                raise self.error(f"connector '{op.connector}' has dtype {op.dtype.to_string()}, expected the "
                                 f"dtype of '{ops[0].connector}' ({dtype.to_string()}); cast the operands to one dtype")
        return dtype


@dace.library.node
class TridiagonalSolve(_TridiagonalBase):
    """Batched tridiagonal solve along ``axis``: ``([a], [b], [c], [d]) -> [x]``.

    Per column: ``a[k]*x[k-1] + b[k]*x[k] + c[k]*x[k+1] = d[k]``, all operands of one shape;
    ``a[0]`` and ``c[n-1]`` are ignored. Reference loop (one column;
    ``sdfg_scan.reference.tridiagonal_solve``)::

        w = 1 / b[0];  cp[0] = c[0] * w;  x[0] = d[0] * w
        for k in range(1, n):
            w = 1 / (b[k] - a[k] * cp[k-1])
            cp[k] = c[k] * w
            x[k] = (d[k] - a[k] * x[k-1]) * w
        for k in range(n-2, -1, -1):
            x[k] = x[k] - cp[k] * x[k+1]

    Unlike ``scipy.linalg.solve_banded`` there is no pivoting (fine for diagonally dominant
    systems), and the pivot is inverted once and multiplied (ICON's formulation).

    ``prefactored=True``: the connectors are ``a, w, cp, d`` with ``w, cp`` from
    :class:`TridiagonalFactor` (``sdfg_scan.reference.tridiagonal_solve_prefactored``); bitwise equal
    to the unfactored solve.

    Connectors: ``a, b, c, d`` (or ``a, w, cp, d``) in, ``x`` out; N-d, any strides, float32/float64.

    ==============  =========  =============  ======================================================
    implementation  targets    reproducible   schedule
    ==============  =========  =============  ======================================================
    ``thomas``      cpu, gpu   exact          CPU blocks of cells, vectorised cell loop (K-contiguous
                                              blocks are staged cell-contiguous; with cells contiguous
                                              a pointwise map computing the coefficients runs inside
                                              the blocks: ``absorb_producer``); GPU one thread/column
    ``pcr``         cpu, gpu   replay         parallel cyclic reduction: (column, level) map per step,
                                              log2(n) steps; for few, long columns and GPUs
    ``cusparse``    gpu        replay         cuSPARSE gtsvInterleavedBatch (cells contiguous) or
                                              gtsv2StridedBatch (K contiguous); never chosen by ``auto``
    ``auto``        cpu, gpu   per request    ``thomas``; ``pcr`` on GPUs for few (< 2048), long (>= 256
                                              levels) columns when ``reproducibility`` allows ``replay``
    ==============  =========  =============  ======================================================
    """

    implementations = {
        "thomas": ExpandTridiagonalThomas,
        "pcr": ExpandTridiagonalPCR,
        "cusparse": ExpandTridiagonalCuSPARSE,
        "auto": ExpandTridiagonalAuto,
    }
    default_implementation = "auto"

    prefactored = properties.Property(dtype=bool, default=False, category="Semantics",
                                      desc="inputs are a, w, cp, d from TridiagonalFactor")

    def __init__(self, name, axis=-1, prefactored=False, block_size=0, **kwargs):
        ins = ("a", "w", "cp", "d") if prefactored else ("a", "b", "c", "d")
        super().__init__(name, inputs={c: None for c in ins}, outputs={"x": None}, **kwargs)
        self.axis, self.prefactored, self.block_size = axis, prefactored, block_size

    @property
    def matrix_connectors(self) -> list[str]:
        return ["a", "w", "cp"] if self.prefactored else ["a", "b", "c"]

    def describe(self) -> str:
        return f"axis={self.axis}{', prefactored' if self.prefactored else ''}"

    def check(self, state: dace.SDFGState) -> dace.typeclass:
        """Validate the connected operands; return their common dtype."""
        expected = set(self.matrix_connectors) | {"d"}
        if set(self.in_connectors) != expected:
            raise self.error(f"has input connectors {sorted(self.in_connectors)}, expected {sorted(expected)} "
                             f"(prefactored={self.prefactored})")
        return self._check(state, self.matrix_connectors + ["d"], ["x"])

    def validate(self, sdfg, state):
        self.check(state)


@dace.library.expansion
class ExpandTridiagonalFactorAuto(AutoExpansion):
    """``thomas`` (the only factorisation)."""


@dace.library.node
class TridiagonalFactor(_TridiagonalBase):
    """Factor batched tridiagonal systems once: ``([a], [b], [c]) -> ([w], [cp])``.

    Reference loop (one column; ``sdfg_scan.reference.tridiagonal_factor``)::

        w[0] = 1 / b[0];                          cp[0] = c[0] * w[0]
        for k in range(1, n):
            w[k] = 1 / (b[k] - a[k] * cp[k-1]);   cp[k] = c[k] * w[k]

    Feed ``w, cp`` (with ``a``) to ``TridiagonalSolve(prefactored=True)`` to solve for many right-hand
    sides with only multiplications (PMAP's line-relaxation preconditioner applied ``nitr`` times).

    ==============  =========  =============  ======================================================
    implementation  targets    reproducible   schedule
    ==============  =========  =============  ======================================================
    ``thomas``      cpu, gpu   exact          as ``TridiagonalSolve.thomas``
    ``auto``        cpu, gpu   exact          ``thomas``
    ==============  =========  =============  ======================================================
    """

    implementations = {"thomas": ExpandTridiagonalFactorThomas, "auto": ExpandTridiagonalFactorAuto}
    default_implementation = "auto"

    def __init__(self, name, axis=-1, block_size=0, **kwargs):
        super().__init__(name, inputs={"a": None, "b": None, "c": None}, outputs={"w": None, "cp": None}, **kwargs)
        self.axis, self.block_size = axis, block_size

    def describe(self) -> str:
        return f"axis={self.axis}"

    def check(self, state: dace.SDFGState) -> dace.typeclass:
        return self._check(state, ["a", "b", "c"], ["w", "cp"])

    def validate(self, sdfg, state):
        self.check(state)


__all__ = ["ExpandTridiagonalAuto", "ExpandTridiagonalFactorAuto", "ExpandTridiagonalFactorThomas",
           "ExpandTridiagonalCuSPARSE", "ExpandTridiagonalPCR", "ExpandTridiagonalThomas", "TridiagonalFactor", "TridiagonalSolve", "factor_kernel",
           "prefactored_kernel", "thomas_kernel"]
