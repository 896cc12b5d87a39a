"""What selection and every expansion know about a node where it stands: target, layout, sizes.

This is the bottom of the selection layer (it imports no node, expansion or transformation).
:func:`context_of` is the one place that works out

- the **target** (``"cpu"`` or ``"gpu"``: the node's schedule, its enclosing scope, or the storage of
  the data it touches), and
- the **layout** (:class:`Layout`: scan axis, cell axis, contiguity, column and level counts, bytes
  moved) from the node's operands,

so that nothing below re-derives them. Nodes describe their operands through two duck-typed hooks:
``node.layout_operands(state) -> list[Operand]`` (operands with the scan axis; K-less ones are
ignored for the layout) and, for scans that own or sit in a map over cells,
``node.cell_map(state) -> CellMap | None``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import dace
from dace import dtypes, symbolic
from dace.sdfg.scope import is_devicelevel_gpu

TARGETS = ("cpu", "gpu")
REPRODUCIBILITY = ("exact", "replay", "approx")
CONTIGUITY = ("cell", "k", "strided")

GPU_SCHEDULES = (dtypes.ScheduleType.GPU_Device, dtypes.ScheduleType.GPU_ThreadBlock,
                 dtypes.ScheduleType.GPU_Persistent, dtypes.ScheduleType.GPU_ThreadBlock_Dynamic)
GPU_STORAGE = (dtypes.StorageType.GPU_Global, dtypes.StorageType.GPU_Shared)


def rank(reproducibility: str) -> int:
    """Order of the classes: exact (0) is stronger than replay (1), which is stronger than approx (2)."""
    if reproducibility not in REPRODUCIBILITY:
        raise ValueError(f"sdfg_scan: reproducibility must be one of {REPRODUCIBILITY}, got '{reproducibility}'")
    return REPRODUCIBILITY.index(reproducibility)


@dataclass(frozen=True)
class Operand:
    """One connected connector of a node: its edge, the outer container and the accessed window.

    ``shape`` is the size of the memlet subset (the window the node works on; all dimensions kept),
    ``strides`` the window's strides (container strides times the subset step), ``offset`` the
    subset's first index per dimension.
    """

    connector: str
    edge: dace.sdfg.graph.MultiConnectorEdge
    desc: dace.data.Data

    @property
    def shape(self) -> tuple:
        return tuple(self.edge.data.subset.size())

    @property
    def offset(self) -> tuple:
        return tuple(r[0] for r in self.edge.data.subset.ndrange())

    @property
    def strides(self) -> tuple:
        """Element strides of the window: container strides times the subset's step."""
        return tuple(s * r[2] for s, r in zip(self.desc.strides, self.edge.data.subset.ndrange(), strict=True))

    @property
    def dtype(self) -> dace.typeclass:
        return self.desc.dtype


@dataclass(frozen=True)
class CellMap:
    """A map over cells that a scan owns (``Scan(columns="cells")``) or sits in (``columns="single"``).

    ``params`` are the map parameters, ``size`` the number of iterations, ``unit_stride`` whether every
    array the scan touches through the map is unit-stride along the last parameter (cell-contiguous).
    """

    params: tuple[str, ...]
    size: object
    unit_stride: bool


@dataclass(frozen=True)
class Layout:
    """Where a node's data lie: computed once by :func:`layout_of`.

    ``axis``: the scan axis of the principal operands (None for scans over a map of cells);
    ``cell_axis``: the column axis a blocked schedule blocks (the unit-stride column axis if there is
    one, else the column axis with the smallest constant stride, else the last one; None without
    column axes); ``contiguity``: ``"cell"`` (cells unit-stride: ICON's nproma layout), ``"k"`` (levels
    unit-stride) or ``"strided"``; ``columns`` / ``levels``: counts (symbolic where the SDFG is);
    ``bytes``: bytes the node reads and writes once (symbolic); ``itemsize``: of the principal operand.
    """

    axis: int | None
    cell_axis: int | None
    contiguity: str
    columns: object
    levels: object
    bytes: object
    itemsize: int = 8
    dims: tuple = field(default=())

    @property
    def cells_contiguous(self) -> bool:
        return self.contiguity == "cell"

    @property
    def k_contiguous(self) -> bool:
        return self.contiguity == "k"

    def value(self, expr, symbols: dict | None = None, default: float | None = None) -> float | None:
        """``expr`` as a number: constants directly, symbols from ``symbols``; else ``default``."""
        e = symbolic.pystr_to_symbolic(str(expr))
        if symbols:
            e = e.subs({symbolic.pystr_to_symbolic(k): v for k, v in symbols.items()})
        try:
            return float(e)
        except (TypeError, ValueError):
            return default


@dataclass(frozen=True)
class Context:
    """What an expansion is chosen and built for: ``target``, the reproducibility ``floor``, the
    node's :class:`Layout`, and the sizes to assume for symbols (``symbols``; autotuning passes the
    real ones)."""

    target: str
    floor: str
    layout: Layout
    symbols: dict = field(default_factory=dict)
    state: dace.SDFGState | None = field(default=None, compare=False)


# -- target ------------------------------------------------------------------------------------------

def target_of(node: dace.nodes.Node, state: dace.SDFGState) -> str:
    """``"gpu"`` when the node runs on the GPU (schedule, enclosing scope or data storage), else ``"cpu"``."""
    if node.schedule in GPU_SCHEDULES or is_devicelevel_gpu(state.sdfg, state, node):
        return "gpu"
    for e in list(state.in_edges(node)) + list(state.out_edges(node)):
        if e.data.data is not None and state.sdfg.arrays[e.data.data].storage in GPU_STORAGE:
            return "gpu"
    return "cpu"


# -- layout ------------------------------------------------------------------------------------------

def _constant(x) -> int | None:
    return None if symbolic.issymbolic(x) else int(x)


def _product(values) -> object:
    out = 1
    for v in values:
        out = out * v
    return out


def _bytes(ops: list[Operand]) -> object:
    return sum((_product(op.shape) * op.dtype.bytes for op in ops), 0)


def cell_axis(shape: tuple, strides: tuple, axis: int) -> tuple[int | None, bool]:
    """The column axis to block over and whether it is unit-stride.

    The unit-stride column axis if there is one; otherwise the column axis with the smallest
    constant stride (the last column axis when strides are symbolic); None for 1-d operands.
    """
    cols = [d for d in range(len(shape)) if d != axis]
    if not cols:
        return None, False
    for d in cols:
        if _constant(strides[d]) == 1:
            return d, True
    numeric = [d for d in cols if _constant(strides[d]) is not None]
    if numeric:
        return min(numeric, key=lambda d: int(strides[d])), False
    return cols[-1], False


def _operand_layout(ops: list[Operand], axis_of) -> Layout:
    principal = ops[0]
    nd = len(principal.shape)
    axis = axis_of(nd)
    cells = [cell_axis(op.shape, op.strides, axis)[1] for op in ops]
    cell, _ = cell_axis(principal.shape, principal.strides, axis)
    if cells and all(cells) and cell is not None:
        contiguity = "cell"
    elif all(_constant(op.strides[axis]) == 1 for op in ops):
        contiguity = "k"
    else:
        contiguity = "strided"
    columns = _product(s for d, s in enumerate(principal.shape) if d != axis)
    return Layout(axis, cell, contiguity, columns, principal.shape[axis], _bytes(ops), principal.dtype.bytes,
                  tuple(principal.shape))


def layout_of(node, state: dace.SDFGState) -> Layout:
    """The :class:`Layout` of ``node`` in ``state`` (the one function every choice reads)."""
    cmap = node.cell_map(state) if hasattr(node, "cell_map") else None
    if cmap is not None:
        ops = [node.operand(state, c) for c in list(node.in_connectors) + list(node.out_connectors)
               if node.has_edge(state, c)]
        ops = [op for op in ops if op.edge.data.data is not None]
        return Layout(None, None, "cell" if cmap.unit_stride else "strided", cmap.size,
                      node.level_count() if hasattr(node, "level_count") else 1, _bytes(ops) if ops else 0,
                      ops[0].dtype.bytes if ops else 8, ())
    ops = node.layout_operands(state)
    if not ops:
        raise node.error("has no operand with the scan axis; connect its inputs and outputs")
    return _operand_layout(ops, node.resolved_axis)


def context_of(node, state: dace.SDFGState, floor: str | None = None, symbols: dict | None = None) -> Context:
    """Target, floor and layout of ``node``: what selection and expansions read (never re-derived).

    ``floor``: the requested class; the node's own ``reproducibility`` (when set) can only make it
    stronger; ``exact`` when neither says."""
    own = getattr(node, "reproducibility", "") or ""
    fl = floor or own or "exact"
    if own and rank(own) < rank(fl):
        fl = own
    return Context(target_of(node, state), fl, layout_of(node, state), dict(symbols or {}), state)


__all__ = ["CONTIGUITY", "GPU_SCHEDULES", "REPRODUCIBILITY", "TARGETS", "CellMap", "Context", "Layout", "Operand",
           "cell_axis", "context_of", "layout_of", "rank", "target_of"]
