"""Builder of the sweep family (Thomas algorithm, its factor and pre-factored solve).

A :class:`SweepKernel` is a list of :class:`LevelLoop` s run one after the other on every column:
each loop visits a range of levels ``_k`` (forward or backward) and runs C++ tasklet code that
reads arrays at constant level offsets (``x[k-1]``, ``cp[k+1]``) and writes arrays at level ``k``.
Unlike the single-carry :mod:`sdfg_scan.expansions.column_loop`, the sweeps communicate through
whole columns (Thomas' forward sweep leaves ``c'`` and ``d'`` for the backward sweep), so a kernel
may declare ``scratch`` arrays: per-column temporaries of the operands' shape.

Two schedules are built from the same kernel, with the same arithmetic per column (so bitwise
identical results):

``columns`` (:func:`build_columns`)
    map over all columns -> nested SDFG per column -> one ``LoopRegion`` per sweep. Scratch arrays
    are full-size transients of the expansion (cells innermost, so GPU threads coalesce on them).
    One thread per column on GPUs; on CPUs this is the naive schedule.

``blocked`` (:func:`build_blocked`)
    map over blocks of ``block`` cells along one column axis (and the other column axes) -> nested
    SDFG holding each sweep's ``LoopRegion`` around an inner *sequential* map over the block's cells.
    Scratch is a ``[nlev, block]`` transient per block (cells innermost) that stays in cache. With
    cells contiguous the inner loop is unit-stride and vectorised by the C compiler (ICON's nproma
    layout). With K contiguous (``stage=True``) the block's windows are first copied into
    cell-contiguous ``[nlev, block]`` scratch and the outputs copied back at the end, so the sweeps
    run on the same vectorised, interleaved cell loops (measured 2-3x faster than sweeping the
    strided columns in place).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, TypeAlias

import dace
from dace import dtypes
from dace.sdfg.state import LoopRegion

from sdfg_scan.expansions.environments import BLOCK_DEFAULT

ColumnNode: TypeAlias = Any  # the node type (duck-typed: an expansion never imports a node module)


NK, NB, K, CELL = "_nk", "_nb", "_k", "_cell"
GPU_BLOCK = 128


@dataclass
class LevelLoop:
    """One pass over levels ``begin, begin+step, ...`` while ``cond`` holds.

    ``reads`` are ``(connector, array, level offset)``, ``writes`` ``(connector, array)`` at level ``_k``;
    ``code`` is C++ using the connectors and the ``T`` type alias.
    """

    begin: str
    cond: str
    step: int
    code: str
    reads: list[tuple[str, str, int]]
    writes: list[tuple[str, str]]


def first_level(code, reads, writes) -> LevelLoop:
    """Level 0 alone (a 0-or-1-trip loop: empty when the column is empty)."""
    return LevelLoop("0", f"{K} < Min({NK}, 1)", 1, code, reads, writes)


def forward(code, reads, writes) -> LevelLoop:
    """Levels ``1 .. n-1``."""
    return LevelLoop("1", f"{K} < {NK}", 1, code, reads, writes)


def backward(code, reads, writes) -> LevelLoop:
    """Levels ``n-2 .. 0``."""
    return LevelLoop(f"{NK} - 2", f"{K} >= 0", -1, code, reads, writes)


@dataclass
class SweepKernel:
    """What one column computes: sweeps over inputs, outputs and per-column scratch arrays."""

    inputs: list[str]
    outputs: list[str]
    loops: list[LevelLoop]
    dtype: dace.typeclass
    scratch: list[str] = field(default_factory=list)


def _operands(node: ColumnNode, state: dace.SDFGState, kernel: SweepKernel):
    ops = {c: node.operand(state, c) for c in kernel.inputs + kernel.outputs}
    shape = ops[kernel.outputs[0]].shape
    return ops, shape, node.resolved_axis(len(shape))


def _outer(node: ColumnNode, state: dace.SDFGState, kernel: SweepKernel, name: str):
    """The expansion SDFG: one array per connector describing the node's memlet window."""
    ops, shape, axis = _operands(node, state, kernel)
    outer = dace.SDFG(name)
    outer.using_explicit_control_flow = True
    descs = {}
    for c, op in ops.items():
        descs[c] = outer.add_array(c, op.shape, op.dtype, storage=op.desc.storage, strides=op.strides)[1]
    used = set()
    for d in descs.values():
        used |= {str(s) for s in d.free_symbols}
    for sym, dt in state.sdfg.symbols.items():
        if sym in used and sym not in outer.symbols:
            outer.add_symbol(sym, dt)
    return outer, descs, shape, axis


class _Body:
    """The per-column (``block`` is None) or per-block nested SDFG of a kernel."""

    def __init__(self, kernel: SweepKernel, name: str, block: int | None):
        self.kernel, self.block = kernel, block
        self.staged: dict[str, str] = {}  # window -> its cell-contiguous copy in the block (K-contiguous data)
        self.sdfg = dace.SDFG(name)
        self.sdfg.using_explicit_control_flow = True
        self.sdfg.add_symbol(NK, dace.symbolic.DEFAULT_SYMBOL_TYPE)
        self.sdfg.add_symbol(K, dace.symbolic.DEFAULT_SYMBOL_TYPE)
        if block is not None:
            self.sdfg.add_symbol(NB, dace.symbolic.DEFAULT_SYMBOL_TYPE)
        self.last = None

    def add_window(self, name: str, desc: dace.data.Data, axis: int, cell_axis: int | None) -> None:
        if self.block is None:
            self.sdfg.add_array(name, [NK], desc.dtype, storage=desc.storage, strides=[desc.strides[axis]])
        else:
            self.sdfg.add_array(name, [NB, NK], desc.dtype, storage=desc.storage,
                                strides=[desc.strides[cell_axis], desc.strides[axis]])

    def add_block_scratch(self, name: str) -> None:
        self.sdfg.add_array(name, [self.block, NK], self.kernel.dtype, transient=True,
                            strides=[1, self.block], storage=dtypes.StorageType.CPU_Heap)

    def _index(self, offset: int) -> str:
        level = K if offset == 0 else f"{K} + ({offset})"
        return level if self.block is None else f"{CELL}, {level}"

    def add_loop(self, spec: LevelLoop, label: str) -> None:
        loop = LoopRegion(label, condition_expr=spec.cond, loop_var=K, initialize_expr=f"{K} = {spec.begin}",
                          update_expr=f"{K} = {K} + ({spec.step})")
        if self.last is None:
            self.sdfg.add_node(loop, is_start_block=True)
        else:
            self.sdfg.add_node(loop)
            self.sdfg.add_edge(self.last, loop, dace.InterstateEdge())
        self.last = loop
        st = loop.add_state(label + "_level", is_start_block=True)
        code = f"using T = {self.kernel.dtype.ctype};\n{spec.code}"
        tasklet = st.add_tasklet(label, {c: None for c, _, _ in spec.reads}, {c: None for c, _ in spec.writes},
                                 code, language=dtypes.Language.CPP)
        if self.block is not None:
            me, mx = st.add_map(label + "_cells", {CELL: f"0:{NB}"}, schedule=dtypes.ScheduleType.Sequential)
        reads: dict[str, dace.nodes.AccessNode] = {}
        for conn, arr, off in spec.reads:
            arr = self.staged.get(arr, arr)
            if arr not in reads:
                reads[arr] = st.add_read(arr)
            node = reads[arr]
            mem = dace.Memlet(f"{arr}[{self._index(off)}]")
            if self.block is None:
                st.add_edge(node, None, tasklet, conn, mem)
            else:
                st.add_memlet_path(node, me, tasklet, dst_conn=conn, memlet=mem)
        for conn, arr in spec.writes:
            arr = self.staged.get(arr, arr)
            node = st.add_write(arr)
            mem = dace.Memlet(f"{arr}[{self._index(0)}]")
            if self.block is None:
                st.add_edge(tasklet, conn, node, None, mem)
            else:
                st.add_memlet_path(tasklet, mx, node, src_conn=conn, memlet=mem)

    def stage(self) -> None:
        """Work on cell-contiguous copies of the windows (K-contiguous data: the cell loop vectorises)."""
        for name in self.kernel.inputs + self.kernel.outputs:
            self.staged[name] = f"{name}_staged"
            self.add_block_scratch(self.staged[name])

    def _copy_state(self, label: str, names: list[str], inward: bool) -> dace.SDFGState:
        st = self.sdfg.add_state(label)
        src = {n: (n if inward else self.staged[n]) for n in names}
        dst = {n: (self.staged[n] if inward else n) for n in names}
        st.add_mapped_tasklet(label, {CELL: f"0:{NB}", "_kk": f"0:{NK}"},
                              {f"_i{i}": dace.Memlet(f"{src[n]}[{CELL}, _kk]") for i, n in enumerate(names)},
                              "\n".join(f"_o{i} = _i{i};" for i in range(len(names))),
                              {f"_o{i}": dace.Memlet(f"{dst[n]}[{CELL}, _kk]") for i, n in enumerate(names)},
                              schedule=dtypes.ScheduleType.Sequential, external_edges=True,
                              language=dtypes.Language.CPP)
        return st

    def build(self) -> dace.SDFG:
        if self.staged:
            self.last = self._copy_state("stage_in", self.kernel.inputs, True)
        for i, spec in enumerate(self.kernel.loops):
            self.add_loop(spec, f"sweep{i}")
        if self.staged:
            out = self._copy_state("stage_out", self.kernel.outputs, False)
            self.sdfg.add_edge(self.last, out, dace.InterstateEdge())
        return self.sdfg


def levels(nk):
    """The level count a column loop runs: ``Max(0, nk)`` (a window over an empty level range of a
    symbolic program, ``stop - start < 0``, must give empty loops and empty scratch, not a negative size)."""
    return dace.symbolic.pystr_to_symbolic(f"Max(0, {dace.symbolic.symstr(nk)})")


def _symbol_mapping(outer: dace.SDFG, inner: dace.SDFG, extra: dict) -> dict:
    mapping = {s: dace.symbol(s, outer.symbols[s]) for s in outer.symbols if s in inner.free_symbols}
    mapping.update(extra)
    return mapping


def _connect(st, me, mx, nsdfg, conns_in, conns_out, index: dict[str, str]) -> None:
    for c in conns_in:
        st.add_memlet_path(st.add_read(c), me, nsdfg, dst_conn=c, memlet=dace.Memlet(f"{c}[{index[c]}]"))
    for c in conns_out:
        st.add_memlet_path(nsdfg, mx, st.add_write(c), src_conn=c, memlet=dace.Memlet(f"{c}[{index[c]}]"))


def _scratch_strides(shape, axis: int, levels_inner: bool) -> list:
    """Dense strides: the level axis innermost (``levels_inner``) or outermost (cells innermost)."""
    cols = [d for d in range(len(shape)) if d != axis][::-1]
    order = [axis] + cols if levels_inner else cols + [axis]
    strides, acc = [0] * len(shape), 1
    for d in order:
        strides[d] = acc
        acc = acc * shape[d]
    return strides


def build_columns(node: ColumnNode, state: dace.SDFGState, kernel: SweepKernel) -> dace.SDFG:
    """Map over every column, the sweeps inside (see the module docstring)."""
    outer, descs, shape, axis = _outer(node, state, kernel, f"{node.label}_columns")
    on_gpu = descs[kernel.outputs[0]].storage in (dtypes.StorageType.GPU_Global, dtypes.StorageType.GPU_Shared)
    storage = dtypes.StorageType.GPU_Global if on_gpu else dtypes.StorageType.CPU_Heap
    # like the output on CPU (K-contiguous stays K-contiguous); cells innermost on GPU (coalesced)
    x_stride = descs[kernel.outputs[0]].strides[axis]
    levels_inner = not on_gpu and not dace.symbolic.issymbolic(x_stride) and x_stride == 1
    for s in kernel.scratch:
        size = [levels(n) for n in shape]   # never negative (an empty window of a symbolic program)
        outer.add_array(s, size, kernel.dtype, transient=True, strides=_scratch_strides(size, axis, levels_inner),
                        storage=storage)
        descs[s] = outer.arrays[s]
    body = _Body(kernel, f"{node.label}_column", None)
    for name, desc in descs.items():
        body.add_window(name, desc, axis, None)
    inner = body.build()
    col_dims = [d for d in range(len(shape)) if d != axis]
    params = {d: f"_i{d}" for d in col_dims}
    st = outer.add_state("columns", is_start_block=True)
    ranges = {params[d]: f"0:{dace.symbolic.symstr(shape[d])}" for d in col_dims} or {"_i": "0:1"}
    me, mx = st.add_map(f"{node.label}_columns", ranges)
    me.map.gpu_block_size = [GPU_BLOCK, 1, 1]  # used only when the map becomes a GPU kernel
    nk = shape[axis]
    idx = ", ".join(f"0:{dace.symbolic.symstr(nk)}" if d == axis else params[d] for d in range(len(shape)))
    # the scratch columns are written before they are read inside: outputs only (as inputs too, the outer
    # transients would be read before anything wrote them, which DaCe rightly warns about)
    ins = kernel.inputs
    outs = kernel.outputs + kernel.scratch
    nsdfg = st.add_nested_sdfg(inner, dict.fromkeys(ins), dict.fromkeys(outs),
                               symbol_mapping=_symbol_mapping(outer, inner, {NK: levels(nk)}))
    _connect(st, me, mx, nsdfg, ins, outs, {c: idx for c in ins + outs})
    return outer


def block_map(st: dace.SDFGState, label: str, shape, axis: int, cell_axis: int, block: int):
    """The parallel map over blocks of ``block`` cells along ``cell_axis`` (and the other column axes):
    ``(entry, exit, a block's window as a subset string, {NK, NB}: the block body's level and cell counts)``."""
    ncs = dace.symbolic.symstr(shape[cell_axis])
    col_dims = [d for d in range(len(shape)) if d != axis]
    params = {d: f"_i{d}" for d in col_dims}
    ranges = {params[d]: f"0:{dace.symbolic.symstr(shape[d])}" for d in col_dims if d != cell_axis}
    ranges["_blk"] = f"0:int_ceil({ncs}, {block})"
    me, mx = st.add_map(f"{label}_blocks", ranges)
    me.map.gpu_block_size = list(BLOCK_DEFAULT)   # used only when the map becomes a GPU kernel
    params[cell_axis] = f"{block}*_blk:Min({ncs}, {block}*_blk + {block})"
    nk = shape[axis]
    idx = ", ".join(f"0:{dace.symbolic.symstr(nk)}" if d == axis else params[d] for d in range(len(shape)))
    extra = {NK: levels(nk), NB: dace.symbolic.pystr_to_symbolic(f"Min({block}, {ncs} - {block}*_blk)")}
    return me, mx, idx, extra


def build_blocked(node: ColumnNode, state: dace.SDFGState, kernel: SweepKernel, cell_axis: int,
                  block: int, stage: bool = False) -> dace.SDFG:
    """Map over blocks of ``block`` cells along ``cell_axis`` (and the other column axes).

    ``stage``: copy the block's windows into cell-contiguous scratch first and the outputs back last
    (for K-contiguous data: the sweeps then run on unit-stride, vectorisable cell loops).
    """
    outer, descs, shape, axis = _outer(node, state, kernel, f"{node.label}_blocked")
    body = _Body(kernel, f"{node.label}_block", block)
    for name, desc in descs.items():
        body.add_window(name, desc, axis, cell_axis)
    for s in kernel.scratch:
        body.add_block_scratch(s)
    if stage:
        body.stage()
    inner = body.build()
    st = outer.add_state("blocks", is_start_block=True)
    me, mx, idx, extra = block_map(st, node.label, shape, axis, cell_axis, block)
    nsdfg = st.add_nested_sdfg(inner, dict.fromkeys(kernel.inputs), dict.fromkeys(kernel.outputs),
                               symbol_mapping=_symbol_mapping(outer, inner, extra))
    _connect(st, me, mx, nsdfg, kernel.inputs, kernel.outputs, {c: idx for c in kernel.inputs + kernel.outputs})
    return outer


__all__ = ["LevelLoop", "SweepKernel", "backward", "build_blocked", "build_columns", "first_level",
           "forward"]
