"""The cost model: estimated seconds of an expansion from bytes moved, bandwidth and efficiency.

``seconds = max(bytes * passes / (bandwidth * efficiency * parallelism), chain) + overhead``

- ``bytes``: what the node reads and writes once (:attr:`sdfg_scan.context.Layout.bytes`), with
  symbolic sizes taken from the context's ``symbols`` or :data:`DEFAULT_SIZES`;
- ``bandwidth``: the machine's (:func:`machine`; ``SDFG_SCAN_BANDWIDTH_GBS`` overrides the CPU
  value, e.g. with the probe ``benchmarks/`` prints);
- ``efficiency``: the fraction of that bandwidth an expansion reaches in a layout, measured with
  ``benchmarks/`` and declared on the expansion (``@declare(efficiency=...)``; the calibration
  table is in the README, section "Choosing expansions");
- ``parallelism``: column-parallel schedules on fewer columns than the machine has threads (CPU)
  or than it needs to fill its SMs (GPU) run at that fraction;
- ``chain``: a level loop is a dependent chain (``levels`` x the operation latency per column);
  with at most a thread's share of columns it cannot overlap and bounds the time from below;
- ``overhead``: e.g. one fork/join per level for schedules with the level loop outside a parallel map.

A ``Scan`` body that calls libm's transcendental functions is compute-bound before it is memory-bound:
:func:`math_seconds` adds ``cells x levels x calls x ns / threads`` on the CPU, where ``calls`` counts
the calls written in the body (each branch's once: the body's static size, not a profile) and ``ns`` is
:data:`SCALAR_MATH_NS` per call, or :data:`VECTOR_MATH_NS` for an expansion that declares
``vector_math = True`` (libmvec calls across a block of cells). :func:`sdfg_scan.choice.cost_of` adds it
to every expansion's estimate, so it only changes the ranking between scalar and vector expansions.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass

from sdfg_scan.context import Context

DEFAULT_SIZES = {"columns": 20480.0, "levels": 80.0}
"""Sizes assumed where the SDFG leaves them symbolic (icon4py's typical cells x levels per rank)."""

CPU_BANDWIDTH_GBS = 50.0
"""CPU memory bandwidth assumed without ``SDFG_SCAN_BANDWIDTH_GBS`` (this project's 2-core machine: the
DaCe OpenMP copy probe of ``benchmarks/`` measures 48-58 GB/s). The declared CPU efficiencies are fractions
of this value, measured by ``benchmarks/bench_selection.py`` (``OMP_NUM_THREADS=1 ... --clock cpu``: one
thread's CPU time, robust on the shared machine; README, "Choosing expansions"); changing it scales every
estimate alike, so only the fixed terms (fork/join, dependent chain) move against the streaming ones."""

GPU_BANDWIDTH_GBS = 4000.0
GPU_COLUMNS_TO_FILL = 16384.0
"""Threads a GPU needs in flight before a thread-per-column schedule reaches its bandwidth."""

FORK_JOIN_SECONDS = 1.5e-6
"""One OpenMP parallel region (measured: diagnose_pressure's 65 levels x 100 cells, levels outside
the map 0.15 ms against 0.12 ms in place)."""

CELL_OUTER_SECONDS = 1e-4
"""Fixed cost per call of the schedules that put the cells inside the level loop (``levels_outside``,
``blocked``): per-cell carry arrays, too few cells to share out, and, what the bandwidth model does not
see, a small domain's columns are cache-resident, so ``sequential``'s strided walks cost little there.
Calibrated on diagnose_pressure (100 x 65, 2 threads, whole program): ``sequential`` 151 us,
``levels_outside`` 174 us, ``blocked`` 171 us (the model must pick ``sequential``); from ~500 cells on
the cell-outer schedules win (the old rule interchanged from 2048 cells)."""

CHAIN_NS = 1.5
"""Latency of one dependent floating-point operation (4 cycles at ~3 GHz, rounded up)."""


SCALAR_MATH_NS = 6.0
"""Mean cost of one scalar libm call of a scan body, per cell and level (graupel's lifted scan, 26 pow,
3 exp, 2 log, 7 sqrt written: the scalar ``blocked`` kernel takes about 40 ms more than the vectorised
one at 20480 x 65 on 2 threads, and gt4py's own body about 150 ms in all)."""

VECTOR_MATH_NS = 1.5
"""The same through libmvec, 8 cells per AVX-512 call (graupel: the vectorised scan kernel 135 ms in
all, most of it the body's memory traffic and selects)."""

MATH_CALL = re.compile(r"\b(pow|exp|exp2|expm1|log|log2|log10|log1p|sqrt|cbrt|tanh|sinh|cosh|sin|cos|tan|"
                       r"atan|atan2|asin|acos|erf|erfc)\s*\(")
"""The libm calls :func:`math_calls` counts (as written in a Python or C++ tasklet)."""

BRANCH_NS = 9.0
"""Cost of one conditional block of a ``Scan`` body per cell and level under ``levels_outside``, which
runs DaCe's code for the body per cell inside the per-level map: each ``if`` of gt4py's lowering is a
nested SDFG called per cell, which ``blocked``'s translator inlines into its loop over a block's cells.
Measured on graupel (22 conditional blocks, 20480 x 65, 2 threads, IEEE-strict flags):
``levels_outside`` 0.432 s against ``blocked`` 0.310 s, about 9 ns per block and point on one thread.
Bodies without branches (the Thomas sweeps) keep ``levels_outside``'s lead."""


def math_calls(node) -> int:
    """Calls of :data:`MATH_CALL` functions written in the tasklets of a node's ``body`` (0 for a node
    without one), nested SDFGs included."""
    import dace

    body = getattr(node, "body", None)
    if not isinstance(body, dace.SDFG):
        return 0
    return sum(len(MATH_CALL.findall(n.code.as_string or "")) for n, _ in body.all_nodes_recursive()
               if isinstance(n, dace.nodes.Tasklet))


def _per_point_seconds(ctx: Context, count: int, ns: float) -> float:
    """``count`` operations of ``ns`` each per cell and level, shared by the CPU threads (the callers
    return 0 on the GPU before counting)."""
    if not count:
        return 0.0
    points = size(ctx, ctx.layout.columns, "columns") * size(ctx, ctx.layout.levels, "levels")
    return points * count * ns * 1e-9 / (machine().threads * parallelism(ctx))


EPILOGUE_MATH_NS = 2 * SCALAR_MATH_NS
"""A libm call of an if-converted kernel's cells outside its full vectors (the loop's scalar epilogue): every
branch's call is made, one cell at a time, where the scalar kernels' mean (:data:`SCALAR_MATH_NS`) pays for
the branches a cell takes, about half of them on graupel."""


def vector_lane_ns(columns: float, threads: int, block: int, quantum: int) -> float:
    """Nanoseconds per level and libm call written in the body on the slowest thread of an if-converted
    vector kernel (``blocked_simd``, whose ``vector_blocks`` are ``(block, quantum)``) over ``columns`` cells:
    its blocks are those of ``sdfg_scan_block_size`` (multiples of ``quantum`` cells, at most ``block``),
    shared out by OpenMP's static schedule; a block's cells in whole vectors of ``quantum`` cells (the loop's
    vector factor) cost :data:`VECTOR_MATH_NS` each, the rest
    :data:`EPILOGUE_MATH_NS`. At 20480 cells this is ``columns / threads`` vector cells; at 100 cells on 2
    threads (blocks of 64 and 36) the 36 epilogue cells: ``graupel_run`` under replay ran 0.87x against gt4py's
    build with ``blocked_simd`` and 1.03x with ``blocked`` (benchmarks/HISTORY.md, "Stop 46")."""
    q = quantum
    n = int(math.ceil(columns))
    if n <= 0:
        return 0.0
    t = max(int(threads), 1)
    per_thread = math.ceil(n / t)
    b = min(block, max(q, math.ceil(per_thread / q) * q))
    nblk = math.ceil(n / b)
    sizes = [b] * (nblk - 1) + [n - (nblk - 1) * b]
    cost = [(s // q) * q * VECTOR_MATH_NS + (s % q) * EPILOGUE_MATH_NS for s in sizes]
    per, extra = divmod(nblk, t)   # OpenMP static: the first `extra` threads take one block more
    worst, start = 0.0, 0
    for j in range(min(t, nblk)):
        take = per + (1 if j < extra else 0)
        worst = max(worst, sum(cost[start:start + take]))
        start += take
    return worst


def math_seconds(node, ctx: Context, vector: bool = False, blocks: tuple[int, int] | None = None) -> float:
    """Seconds of the body's libm calls on the CPU (module docstring); 0 on the GPU and without calls.
    ``vector`` with ``blocks`` (an if-converted kernel's ``(block, quantum)``): on the slowest thread of its
    blocks (:func:`vector_lane_ns`)."""
    if ctx.target != "cpu":
        return 0.0
    if not vector or blocks is None:
        return _per_point_seconds(ctx, math_calls(node), VECTOR_MATH_NS if vector else SCALAR_MATH_NS)
    calls = math_calls(node)
    if not calls:
        return 0.0
    levels = size(ctx, ctx.layout.levels, "levels")
    lane = vector_lane_ns(size(ctx, ctx.layout.columns, "columns"), machine().threads, *blocks)
    return calls * levels * lane * 1e-9


def branch_blocks(node) -> int:
    """Conditional blocks of a node's ``body``, nested SDFGs included (0 for a node without one)."""
    import dace
    from dace.sdfg.state import ConditionalBlock

    body = getattr(node, "body", None)
    if not isinstance(body, dace.SDFG):
        return 0
    return sum(1 for sd in body.all_sdfgs_recursive() for b in sd.all_control_flow_blocks()
               if isinstance(b, ConditionalBlock))


def branch_seconds(node, ctx: Context) -> float:
    """Seconds of the body's conditional blocks run per cell (:data:`BRANCH_NS`); 0 on the GPU."""
    if ctx.target != "cpu":
        return 0.0
    return _per_point_seconds(ctx, branch_blocks(node), BRANCH_NS)


@dataclass(frozen=True)
class Machine:
    threads: int
    cpu_bandwidth: float   # bytes / s
    gpu_bandwidth: float   # bytes / s


def machine() -> Machine:
    threads = int(os.environ.get("OMP_NUM_THREADS") or os.cpu_count() or 1)
    bw = float(os.environ.get("SDFG_SCAN_BANDWIDTH_GBS") or CPU_BANDWIDTH_GBS) * 1e9
    return Machine(max(threads, 1), bw, GPU_BANDWIDTH_GBS * 1e9)


def size(ctx: Context, expr, kind: str) -> float:
    """A size of the layout as a number (``kind``: ``columns`` or ``levels`` default)."""
    v = ctx.layout.value(expr, ctx.symbols)
    if v is not None:
        return v
    return DEFAULT_SIZES[kind]


def nbytes(ctx: Context) -> float:
    """Bytes moved once, with symbols replaced by the assumed sizes (columns x levels scale)."""
    v = ctx.layout.value(ctx.layout.bytes, ctx.symbols)
    if v is not None:
        return v
    return size(ctx, ctx.layout.columns, "columns") * size(ctx, ctx.layout.levels, "levels") * \
        ctx.layout.itemsize * 3   # a typical node: two inputs and one output per level


def efficiency_of(exp_cls: type, ctx: Context, default: float = 0.1) -> float:
    """The declared efficiency of ``exp_cls`` for the context's target and contiguity."""
    table = getattr(exp_cls, "efficiency", {}) or {}
    key = f"{ctx.target}:{ctx.layout.contiguity}"
    return float(table.get(key, table.get(ctx.target, default)))


def parallelism(ctx: Context, over: str = "columns") -> float:
    """Fraction of the machine a schedule parallel over ``columns`` (or ``blocks`` of 4096 cells) fills."""
    cols = size(ctx, ctx.layout.columns, "columns")
    if over == "blocks":
        cols = math.ceil(cols / 4096.0)
    need = GPU_COLUMNS_TO_FILL if ctx.target == "gpu" else machine().threads
    return max(min(1.0, cols / need), 1.0 / need)


def chain_seconds(ctx: Context, ns_per_level: float = CHAIN_NS) -> float:
    """The dependent chain of one thread's share of columns, if they cannot overlap (<= 1 per thread)."""
    cols = size(ctx, ctx.layout.columns, "columns")
    threads = machine().threads if ctx.target == "cpu" else GPU_COLUMNS_TO_FILL
    if cols > threads:
        return 0.0
    return size(ctx, ctx.layout.levels, "levels") * ns_per_level * 1e-9


def stream_seconds(ctx: Context, efficiency: float, passes: float = 1.0, over: str = "columns",
                   overhead: float = 0.0, chain: bool = True) -> float:
    """``bytes * passes / (bandwidth * efficiency * parallelism)``, at least the dependent chain, plus
    ``overhead`` (see the module docstring)."""
    m = machine()
    bw = m.gpu_bandwidth if ctx.target == "gpu" else m.cpu_bandwidth
    t = nbytes(ctx) * passes / (bw * max(efficiency, 1e-6) * parallelism(ctx, over))
    return max(t, chain_seconds(ctx) if chain else 0.0) + overhead


def default_cost(exp_cls: type, node, ctx: Context) -> float:
    """Cost of an expansion without its own ``cost``: :func:`stream_seconds` at its declared efficiency."""
    return stream_seconds(ctx, efficiency_of(exp_cls, ctx))


__all__ = ["CELL_OUTER_SECONDS", "CHAIN_NS", "DEFAULT_SIZES", "FORK_JOIN_SECONDS", "Machine",
           "branch_blocks", "branch_seconds", "chain_seconds", "default_cost", "efficiency_of", "machine",
           "math_calls", "math_seconds", "nbytes", "parallelism", "size", "stream_seconds"]
