"""Builder of the sequential expansion family: a map over columns around a k-loop.

A :class:`ColumnKernel` says what one column does: an optional ``init`` step (per-column values
into the carries), an optional ``first`` step for the first visited level (peeled), a ``step`` for
every other level, and an optional ``final`` step (carries into per-column outputs). Steps are
Python tasklet code; connector names are the node's connector names, carries are read under their
own name and written under ``<name>_`` (``"s_ = s + x"``). The ``first`` step reads the carries only
when there is an ``init`` step (otherwise it must set them); ``step`` always reads them.

Two schedules are built from the same kernel:

``sequential`` (:func:`build_sequential`)
    map over all columns -> nested SDFG per column -> ``LoopRegion`` over K, carries in scalars.
    Right for K-contiguous data, and one thread per column on GPUs (the map inherits
    ``GPU_Device`` after ``sdfg.apply_gpu_transformations()``).

``blocked`` (:func:`build_blocked`)
    map over blocks of ``block`` contiguous cells (and the remaining column axes) -> nested SDFG
    with the ``LoopRegion`` over K around an inner *sequential* map over the block's cells; carries
    are ``[block]`` arrays that stay in cache. With cells contiguous the inner loop is unit-stride
    and vectorised by the C compiler; this is ICON's nproma layout.

Both visit the levels in the same order and do the same arithmetic per column, so they are
bitwise identical. Operands are the windows the node's memlets select (any strides); K-less
operands (``col_in``/``col_out``) have the operand rank minus one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeAlias

import dace
from dace import dtypes
from dace.sdfg.state import LoopRegion
from dace.transformation.transformation import ExpandTransformation

from sdfg_scan.context import context_of
from sdfg_scan.expansions.environments import BLOCK_DEFAULT, ExactArithmetic

ColumnNode: TypeAlias = Any  # the node type (duck-typed: an expansion never imports a node module)
"""Type of the nodes these builders take (duck-typed: ``operand``, ``resolved_axis``, ``label``; an
expansion never imports a node module)."""


@dataclass
class ColumnKernel:
    """What one column computes (see the module docstring for the code conventions)."""

    step: str
    seq_in: list[str] = field(default_factory=list)
    seq_out: list[str] = field(default_factory=list)
    col_in: list[str] = field(default_factory=list)
    col_out: list[str] = field(default_factory=list)
    carries: dict[str, dace.typeclass] = field(default_factory=dict)
    init: str | None = None
    first: str | None = None
    final: str | None = None
    reverse: bool = False


def _data(connector: str) -> str:
    """Name of a connector's (or carry's) container inside the column SDFG: tasklet connectors keep
    the plain names, so containers must not shadow them in the generated C++."""
    return f"__{connector}"


class _Column:
    """Builds the per-column (or per-block) nested SDFG of a kernel."""

    def __init__(self, kernel: ColumnKernel, descs: dict[str, dace.data.Data], axis: int, blocked: bool,
                 cell_axis: int | None, block: int, name: str):
        self.k, self.blocked, self.block = kernel, blocked, block
        self.sdfg = dace.SDFG(name)
        self.sdfg.using_explicit_control_flow = True
        self.sdfg.add_symbol("_nk", dace.symbolic.DEFAULT_SYMBOL_TYPE)
        nk = dace.symbol("_nk")
        if blocked:
            self.sdfg.add_symbol("_nb", dace.symbolic.DEFAULT_SYMBOL_TYPE)
        nb = dace.symbol("_nb")
        for conn, desc in descs.items():
            strides = desc.strides
            if conn in kernel.seq_in or conn in kernel.seq_out:
                shape, st = [nk], [strides[axis]]
                if blocked:
                    shape, st = [nb, nk], [strides[cell_axis], strides[axis]]
            else:
                kless_cell = None if cell_axis is None else (cell_axis if cell_axis < axis else cell_axis - 1)
                shape, st = ([nb], [strides[kless_cell]]) if blocked else ([1], [1])
            self.sdfg.add_array(_data(conn), shape, desc.dtype, storage=desc.storage, strides=st)
        for c, dt in kernel.carries.items():
            if blocked:
                self.sdfg.add_array(_data(c), [block], dt, transient=True, storage=dtypes.StorageType.Register)
            else:
                self.sdfg.add_scalar(_data(c), dt, transient=True)
        self.last = None

    def _chain(self, block) -> None:
        if self.last is None:
            self.sdfg.add_node(block, is_start_block=True)
        else:
            self.sdfg.add_node(block)
            self.sdfg.add_edge(self.last, block, dace.InterstateEdge())
        self.last = block

    def _fill(self, state: dace.SDFGState, code: str, ins: list[str], outs: list[str], level: str | None) -> None:
        """One tasklet running ``code`` (inside a sequential map over the block's cells when blocked)."""
        seq = set(self.k.seq_in) | set(self.k.seq_out)
        carries = set(self.k.carries)

        def index(conn: str) -> str | None:
            cell = "_c" if self.blocked else "0"
            if conn in seq:
                return f"_c, {level}" if self.blocked else level
            return cell

        t_in = {c: None for c in ins}
        t_out = {(c + "_" if c in carries else c): None for c in outs}
        tasklet = state.add_tasklet("level" if level else "column", t_in, t_out, code)
        if self.blocked:
            me, mx = state.add_map("cells", {"_c": "0:_nb"}, schedule=dtypes.ScheduleType.Sequential)
        if self.blocked and not ins:
            state.add_edge(me, None, tasklet, None, dace.Memlet())
        reads: dict[str, dace.nodes.AccessNode] = {}
        for c in ins:
            node = reads.setdefault(c, state.add_read(_data(c)))
            mem = dace.Memlet(f"{_data(c)}[{index(c)}]")
            if self.blocked:
                state.add_memlet_path(node, me, tasklet, dst_conn=c, memlet=mem)
            else:
                state.add_edge(node, None, tasklet, c, mem)
        for c in outs:
            node = state.add_write(_data(c))
            mem = dace.Memlet(f"{_data(c)}[{index(c)}]")
            conn = c + "_" if c in carries else c
            if self.blocked:
                state.add_memlet_path(tasklet, mx, node, src_conn=conn, memlet=mem)
            else:
                state.add_edge(tasklet, conn, node, None, mem)

    def _state(self, label: str, code: str, ins, outs, level=None) -> dace.SDFGState:
        st = dace.SDFGState(label)
        self._chain(st)
        self._fill(st, code, list(ins), list(outs), level)
        return st

    def _loop(self, label: str, code: str, begin: str, end_cond: str, step: int, read_carries: bool = True) -> None:
        loop = LoopRegion(label, condition_expr=end_cond, loop_var="_k",
                          initialize_expr=f"_k = {begin}", update_expr=f"_k = _k + ({step})")
        self._chain(loop)
        body = loop.add_state(label + "_body", is_start_block=True)
        k = self.k
        carries_in = list(k.carries) if read_carries else []
        self._fill(body, code, carries_in + k.seq_in, list(k.carries) + k.seq_out, "_k")

    def build(self) -> dace.SDFG:
        k = self.k
        if k.init:
            self._state("init", k.init, k.col_in, k.carries)
        rest_begin = ("_nk - 1" if k.reverse else "0")
        if k.first:
            # a 0-or-1-trip loop: peels the first visited level and is empty for empty columns
            if k.reverse:
                self._loop("first_level", k.first, "_nk - 1", "_k >= Max(_nk - 1, 0)", -1, bool(k.init))
                rest_begin = "_nk - 2"
            else:
                self._loop("first_level", k.first, "0", "_k < Min(_nk, 1)", 1, bool(k.init))
                rest_begin = "1"
        if k.reverse:
            self._loop("levels", k.step, rest_begin, "_k >= 0", -1)
        else:
            self._loop("levels", k.step, rest_begin, "_k < _nk", 1)
        if k.final:
            self._state("final", k.final, k.carries, k.col_out)
        return self.sdfg


def window_sdfg(node: ColumnNode, state: dace.SDFGState, connectors: list[str], name: str,
                keep_symbols: tuple = ()) -> tuple[dace.SDFG, dict[str, dace.data.Data]]:
    """An empty expansion SDFG with one array per connector describing the node's memlet window
    (shape = subset size, strides = container strides times the subset step; a scalar window is a
    one-element array). Only the symbols these arrays (and ``keep_symbols``) use are declared, so
    the nested SDFG does not require unrelated ones."""
    outer = dace.SDFG(name)
    outer.using_explicit_control_flow = True
    for sym, dt in state.sdfg.symbols.items():
        outer.add_symbol(sym, dt)
    descs = {}
    for c in connectors:
        op = node.operand(state, c)
        descs[c] = outer.add_array(c, list(op.shape) or [1], op.dtype, storage=op.desc.storage,
                                   strides=list(op.strides) or [1])[1]
    used = {str(s) for s in keep_symbols}
    for d in descs.values():
        used |= {str(s) for s in d.free_symbols}
    for sym in list(outer.symbols):
        if sym not in used:
            outer.remove_symbol(sym)
    return outer, descs


def _outer(node: ColumnNode, state: dace.SDFGState, kernel: ColumnKernel, name: str):
    """The expansion SDFG for ``kernel``'s connectors, the operand shape and the resolved axis."""
    conns = kernel.seq_in + kernel.col_in + kernel.seq_out + kernel.col_out
    outer, descs = window_sdfg(node, state, conns, name)
    shape = node.operand(state, (kernel.seq_in or kernel.seq_out)[0]).shape
    return outer, descs, shape, node.resolved_axis(len(shape))


def _column_index(dims: list[int], axis: int, params: dict[int, str], seq: bool, nk_range: str) -> str:
    idx = []
    for d in dims:
        if d == axis:
            if seq:
                idx.append(nk_range)
        else:
            idx.append(params[d])
    return ", ".join(idx)


def build_sequential(node: ColumnNode, state: dace.SDFGState, kernel: ColumnKernel) -> dace.SDFG:
    """Map over every column, k-loop inside (see the module docstring)."""
    outer, descs, shape, axis = _outer(node, state, kernel, f"{node.label}_sequential")
    col_dims = [d for d in range(len(shape)) if d != axis]
    params = {d: f"_i{d}" for d in col_dims}
    inner = _Column(kernel, descs, axis, False, None, 1, f"{node.label}_column").build()
    st = outer.add_state("columns", is_start_block=True)
    ranges = {params[d]: f"0:{dace.symbolic.symstr(shape[d])}" for d in col_dims} or {"_i": "0:1"}
    me, mx = st.add_map(f"{node.label}_columns", ranges)
    me.map.gpu_block_size = [128, 1, 1]  # one thread per column when the map becomes a GPU kernel
    nk = shape[axis]
    mapping = {s: dace.symbol(s, outer.symbols[s]) for s in outer.symbols if s in inner.free_symbols}
    mapping["_nk"] = nk
    nsdfg = st.add_nested_sdfg(inner, {_data(c): None for c in kernel.seq_in + kernel.col_in},
                               {_data(c): None for c in kernel.seq_out + kernel.col_out}, symbol_mapping=mapping)
    _connect(st, me, mx, nsdfg, kernel, shape, axis, col_dims, params, f"0:{dace.symbolic.symstr(nk)}")
    return outer


def build_blocked(node: ColumnNode, state: dace.SDFGState, kernel: ColumnKernel, cell_axis: int,
                  block: int = 2048) -> dace.SDFG:
    """Map over blocks of ``block`` cells along ``cell_axis`` (and the other column axes)."""
    outer, descs, shape, axis = _outer(node, state, kernel, f"{node.label}_blocked")
    ncell = shape[cell_axis]
    col_dims = [d for d in range(len(shape)) if d != axis]
    params = {d: f"_i{d}" for d in col_dims}
    inner = _Column(kernel, descs, axis, True, cell_axis, block, f"{node.label}_block").build()
    st = outer.add_state("blocks", is_start_block=True)
    ncs = dace.symbolic.symstr(ncell)
    ranges = {params[d]: f"0:{dace.symbolic.symstr(shape[d])}" for d in col_dims if d != cell_axis}
    ranges["_b"] = f"0:int_ceil({ncs}, {block})"
    me, mx = st.add_map(f"{node.label}_blocks", ranges)
    me.map.gpu_block_size = list(BLOCK_DEFAULT)   # used only when the map becomes a GPU kernel
    params[cell_axis] = f"{block}*_b:Min({ncs}, {block}*_b + {block})"
    nk = shape[axis]
    mapping = {s: dace.symbol(s, outer.symbols[s]) for s in outer.symbols if s in inner.free_symbols}
    mapping["_nk"] = nk
    mapping["_nb"] = dace.symbolic.pystr_to_symbolic(f"Min({block}, {ncs} - {block}*_b)")
    nsdfg = st.add_nested_sdfg(inner, {_data(c): None for c in kernel.seq_in + kernel.col_in},
                               {_data(c): None for c in kernel.seq_out + kernel.col_out}, symbol_mapping=mapping)
    _connect(st, me, mx, nsdfg, kernel, shape, axis, col_dims, params, f"0:{dace.symbolic.symstr(nk)}")
    return outer


def _connect(st, me, mx, nsdfg, kernel, shape, axis, col_dims, params, nk_range) -> None:
    dims = list(range(len(shape)))
    kless = [d for d in dims if d != axis]
    for c in kernel.seq_in + kernel.col_in:
        seq = c in kernel.seq_in
        idx = _column_index(dims if seq else kless, axis, params, seq, nk_range)
        st.add_memlet_path(st.add_read(c), me, nsdfg, dst_conn=_data(c), memlet=dace.Memlet(f"{c}[{idx}]"))
    for c in kernel.seq_out + kernel.col_out:
        seq = c in kernel.seq_out
        idx = _column_index(dims if seq else kless, axis, params, seq, nk_range)
        st.add_memlet_path(nsdfg, mx, st.add_write(c), src_conn=_data(c), memlet=dace.Memlet(f"{c}[{idx}]"))
    if not kernel.seq_in and not kernel.col_in:
        st.add_edge(me, None, nsdfg, None, dace.Memlet())


class SequentialColumnExpansion(ExpandTransformation):
    """Base of ``sequential`` expansions: a node's per-column program (``kernel(node, state)``, a
    :class:`ColumnKernel`) built by :func:`build_sequential`. Subclasses set ``kernel``."""

    environments = [ExactArithmetic]
    kernel: Callable[..., ColumnKernel] | None = None  # staticmethod(node, state) -> ColumnKernel

    @classmethod
    def expansion(cls, node, parent_state, parent_sdfg):
        return build_sequential(node, parent_state, cls.kernel(node, parent_state))


INTERLEAVE = 8
"""Columns per block of the ``blocked`` schedule on K-contiguous data: independent recurrence chains
interleaved in one inner loop, which hides the latency of each column's dependent chain."""


class BlockedColumnExpansion(ExpandTransformation):
    """Base of ``blocked`` expansions: the same program over blocks of columns (:func:`build_blocked`).

    Cell-contiguous data: blocks of ``node.block_size`` contiguous cells, vectorised inner loop.
    K-contiguous data: blocks of :data:`INTERLEAVE` columns whose dependent chains run interleaved.
    The blocked axis is taken from connector ``operand``."""

    environments = [ExactArithmetic]
    kernel: Callable[..., ColumnKernel] | None = None  # staticmethod(node, state) -> ColumnKernel

    @staticmethod
    def applies(node, ctx) -> str | None:
        return None if ctx.layout.cell_axis is not None else "needs a column axis to block (1-d operands)"

    @classmethod
    def expansion(cls, node, parent_state, parent_sdfg):
        layout = context_of(node, parent_state).layout
        block = node.block_size if layout.cells_contiguous else min(node.block_size, INTERLEAVE)
        return build_blocked(node, parent_state, cls.kernel(node, parent_state), layout.cell_axis, block)


__all__ = ["INTERLEAVE", "BlockedColumnExpansion", "ColumnKernel", "SequentialColumnExpansion", "build_blocked",
           "build_sequential", "window_sdfg"]
