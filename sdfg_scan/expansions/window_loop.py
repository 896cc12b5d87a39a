"""Builder of the ``WindowReduce`` expansions: (blocks of) columns -> nested SDFG -> k ``LoopRegion``.

``out[k] = sum_j w[j] * x[k + o[j]]`` (out-of-column terms skipped), or a user body. The weights are
constants (``node.weights``, literals in the code) or, with ``node.weights_input``, the runtime array
of the ``_weights`` connector: ``(J,)``, column shape + ``(J,)`` or input shape + ``(J,)`` (size-1
axes broadcast); the nested SDFG then also gets the block's or column's window of it (``wgt``) and
reads the weight of term ``j`` at the output level. Two schedules:

*blocked* (cells contiguous, CPU): the expansion SDFG maps over the other column axes and over
blocks of ``block`` cells of the cell axis. Inside, the ``LoopRegion`` over the levels holds an
inner *sequential* map over the block's cells (unit stride, so the C compiler vectorises it).

*per column* (K contiguous, or GPU: ``block == 1``): a map over every column; the nested SDFG has
no cell map, so the level loop itself is the innermost loop (unit stride along K: vectorised by
the C compiler for ``direct``; one thread per column on GPUs).

In both, the levels are split into a head ``[0, a)``, an interior ``[a, nk - b)`` and a tail
``[max(a, nk - b), nk)`` with ``a = max(0, -min(o))``, ``b = max(0, max(o))``: only head and tail
test "inside the column" and clamp their indices; the interior is branch-free.

``direct``
    every level reads its whole window: one tasklet with one input per offset, the memlet index
    clamped into the column (``Max(0, Min(nk - 1, k + o))``) and the term skipped in the tasklet
    when ``k + o`` lies outside. Blocked schedule with weights (not a body): the interior is
    *unroll-and-jammed* by ``U = node.unroll`` -- a loop over ``k = a, a + U, ...`` whose cell loop
    computes the ``U`` levels ``k .. k + U - 1`` from the rows ``x[k + min(o)] .. x[k + max(o) + U - 1]``,
    each loaded once per cell (instead of once per level and offset), then the ``< U`` remaining
    interior levels one per pass. Each output keeps its own accumulator and term order.
``kcached``
    a ring of ``W = max(o) - min(o) + 1`` transient ``[block]`` arrays holds ``x[k + min(o)] ..
    x[k + max(o)]``: per level the ring shifts by one and a single new value ``x[k + max(o)]`` is
    loaded; the first ``W - 1`` values are loaded before the loop (when the column is not empty).

Both evaluate the terms in the order of the offsets, starting from ``-0.0``, with the weights
rounded to the data type, exactly as ``reference.window_reduce``: they are bitwise identical
(with ``ExactArithmetic``: no FMA contraction).
"""

from __future__ import annotations

import dace
from dace import dtypes
from dace.sdfg.state import LoopRegion

from sdfg_scan.reference_columns import window_weight_kind


def _s(expr) -> str:
    return dace.symbolic.symstr(expr)


def weight_literal(w: float, dtype: dace.typeclass) -> str:
    """A Python-tasklet literal of ``w`` rounded to ``dtype`` (exact: the rounded value in hex-free repr)."""
    value = float(dtype.as_numpy_dtype().type(w))
    return f"dace.{dtype.to_string()}({value!r})"


def inside(offset: int) -> str:
    """Tasklet condition of "level ``_k + offset`` lies in the column" (``True`` for offset 0)."""
    if offset < 0:
        return f"(_k >= {-offset})"
    if offset > 0:
        return f"(_k < _nk - {offset})"
    return "True"


def level_code(offsets: list[int], weights: list[float], body: str, dtype: dace.typeclass,
               value: list[str], interior: bool = False, wvalue: list[str] | None = None) -> str:
    """Tasklet code computing ``_out`` from the window values ``value[j]`` (connector names).

    ``interior``: every offset lies inside the column (no tests). ``wvalue``: connector names of
    runtime weights (cast to ``dtype``), instead of the constants ``weights``."""

    def ins(o: int) -> str:
        return "True" if interior else inside(o)

    lines = []
    if body:
        for j, o in enumerate(offsets):
            lines.append(f"x{j} = {value[j]}" if ins(o) == "True" else
                         f"x{j} = {value[j]} if {ins(o)} else {weight_literal(0.0, dtype)}")
            lines.append(f"v{j} = {ins(o)}")
        return "\n".join(lines + [body])
    lines.append(f"acc = {weight_literal(-0.0, dtype)}")
    wexpr = weight_exprs(weights, dtype, wvalue)
    for j, o in enumerate(offsets):
        term = f"acc + {wexpr[j]} * {value[j]}"
        lines.append(f"acc = {term}" if ins(o) == "True" else f"acc = ({term}) if {ins(o)} else acc")
    return "\n".join(lines + ["_out = acc"])


def weight_exprs(weights: list[float], dtype: dace.typeclass, wvalue: list[str] | None) -> list[str]:
    """Tasklet expressions of the weights rounded to ``dtype``: literals, or casts of the connectors ``wvalue``."""
    if wvalue is None:
        return [weight_literal(w, dtype) for w in weights]
    return [f"dace.{dtype.to_string()}({w})" for w in wvalue]


class _WindowWeights:
    """The runtime ``_weights`` operand as seen by one block or column (inner array ``wgt``).

    ``x`` is the ``_in`` operand; the outer subset picks the block's or column's weights (index 0 on
    axes of length 1: broadcast) and the inner array keeps the cell axis (blocked schedule, unless
    broadcast), the level axis (``"levels"`` weights, unless broadcast) and the term axis ``J``."""

    def __init__(self, w, x, axis: int, cell_axis: int, per_column: bool, block: int):
        self.desc, self.shape, self.strides = w.desc, w.shape, w.strides
        self.kind = window_weight_kind(len(x.shape), len(w.shape))
        nterms = w.shape[-1]
        subset: list[str] = ["0"] * (len(w.shape) - 1) + [f"0:{_s(nterms)}"]
        inner, strides, self.index = [], [], []
        ncell = _s(x.shape[cell_axis])
        for d in range(len(x.shape)):
            wd = self.axis_of(d, axis)
            if wd is None or w.shape[wd] == 1:
                continue  # broadcast: index 0
            if d == axis:
                subset[wd] = f"0:{_s(x.shape[axis])}"
                inner.append(dace.symbol("_nk"))
                self.index.append("{level}")
            elif d == cell_axis and not per_column:
                subset[wd] = f"{block}*_b:Min({ncell}, {block}*_b + {block})"
                inner.append(dace.symbol("_nb"))
                self.index.append("_c")
            else:
                subset[wd] = f"_i{d}"
                continue
            strides.append(w.strides[wd])
        # the inner axes in the order of the outer ones (the cell and level axes may come either way)
        self.inner_shape = inner + [nterms]
        self.inner_strides = strides + [w.strides[-1]]
        self.subset = ", ".join(subset)
        self.per_level = "{level}" in self.index

    def axis_of(self, d: int, axis: int) -> int | None:
        """The weights axis matching axis ``d`` of ``x`` (None: absent)."""
        if self.kind == "vector" or (self.kind == "columns" and d == axis):
            return None
        return d if self.kind == "levels" or d < axis else d - 1

    def at(self, level: str, j: int) -> str:
        """Memlet text of the weight of term ``j`` for output level ``level`` and the current cell."""
        return "wgt[" + ", ".join([i.format(level=level) for i in self.index] + [str(j)]) + "]"

    def reads(self, level: str, nterms: int, prefix: str = "w") -> dict[str, str]:
        """Tasklet connectors ``{prefix}{j}`` -> memlets of the weights of ``level``."""
        return {f"{prefix}{j}": self.at(level, j) for j in range(nterms)}


class _WindowColumn:
    """The nested SDFG of one block of cells (``per_column``: of one column, no cell map)."""

    def __init__(self, name: str, x: dace.data.Data, out: dace.data.Data, strides_in, strides_out, block: int,
                 per_column: bool, weights: _WindowWeights | None = None):
        self.sdfg = dace.SDFG(name)
        self.sdfg.using_explicit_control_flow = True
        for sym in ("_nk",) + (() if per_column else ("_nb",)):
            self.sdfg.add_symbol(sym, dace.symbolic.DEFAULT_SYMBOL_TYPE)
        nk, nb = dace.symbol("_nk"), dace.symbol("_nb")
        if per_column:
            self.sdfg.add_array("xin", [nk], x.dtype, storage=x.storage, strides=strides_in[1:])
            self.sdfg.add_array("yout", [nk], out.dtype, storage=out.storage, strides=strides_out[1:])
        else:
            self.sdfg.add_array("xin", [nb, nk], x.dtype, storage=x.storage, strides=strides_in)
            self.sdfg.add_array("yout", [nb, nk], out.dtype, storage=out.storage, strides=strides_out)
        if weights is not None:
            self.sdfg.add_array("wgt", weights.inner_shape, weights.desc.dtype, storage=weights.desc.storage,
                                strides=weights.inner_strides)
        self.weights = weights
        self.dtype, self.block, self.last, self.per_column = x.dtype, block, None, per_column
        self.cell = "" if per_column else "_c, "

    def at(self, data: str, level: str) -> str:
        """Memlet text of ``data`` at ``level`` for the current cell."""
        return f"{data}[{self.cell}{level}]"

    def ring(self, t: int) -> str:
        return f"ring{t}[{'0' if self.per_column else '_c'}]"

    def chain(self, block) -> None:
        self.sdfg.add_node(block, is_start_block=self.last is None)
        if self.last is not None:
            self.sdfg.add_edge(self.last, block, dace.InterstateEdge())
        self.last = block

    def cells(self, state: dace.SDFGState, code: str, reads: dict[str, str], writes: dict[str, str]) -> None:
        """A tasklet (in a sequential map over the block's cells unless ``per_column``);
        ``reads``/``writes``: connector -> memlet."""
        tasklet = state.add_tasklet("level", dict.fromkeys(reads), dict.fromkeys(writes), code)
        if self.per_column:
            me = mx = None
        else:
            me, mx = state.add_map("cells", {"_c": "0:_nb"}, schedule=dtypes.ScheduleType.Sequential)
        nodes = {}
        for conn, mem in reads.items():
            data = mem.split("[")[0]
            if data not in nodes:
                nodes[data] = state.add_read(data)
            if me is None:
                state.add_edge(nodes[data], None, tasklet, conn, dace.Memlet(mem))
            else:
                state.add_memlet_path(nodes[data], me, tasklet, dst_conn=conn, memlet=dace.Memlet(mem))
        wnodes = {}
        for conn, mem in writes.items():
            data = mem.split("[")[0]
            if data not in wnodes:
                wnodes[data] = state.add_write(data)
            if mx is None:
                state.add_edge(tasklet, conn, wnodes[data], None, dace.Memlet(mem))
            else:
                state.add_memlet_path(tasklet, mx, wnodes[data], src_conn=conn, memlet=dace.Memlet(mem))

    def loop(self, label: str, init: str, cond: str, step: int = 1) -> dace.SDFGState:
        loop = LoopRegion(label, condition_expr=cond, loop_var="_k", initialize_expr=f"_k = {init}",
                          update_expr=f"_k = _k + {step}")
        body = loop.add_state(label + "_body", is_start_block=True)
        self.chain(loop)
        return body

    def x(self, offset: int, interior: bool) -> str:
        """Memlet of ``x[k + offset]``: clamped into the column outside the interior."""
        if interior:
            return self.at("xin", f"_k + ({offset})")
        return self.at("xin", f"Max(0, Min(_nk - 1, _k + ({offset})))")


def _level_ranges(offsets: list[int]) -> list[tuple[str, str, str, bool]]:
    """(label, first level, loop condition, interior?) of the head, interior and tail level loops."""
    a, b = max(0, -min(offsets)), max(0, max(offsets))
    ranges = []
    if a:
        ranges.append(("head", "0", f"_k < Min(_nk, {a})", False))
    ranges.append(("levels", f"{a}", f"_k < _nk - {b}", True))
    if b:
        ranges.append(("tail", f"Max({a}, _nk - {b})", "_k < _nk", False))
    return ranges


def _jammed(col: _WindowColumn, st: dace.SDFGState, offsets: list[int], weights: list[float],
            dtype: dace.typeclass, jam: int) -> None:
    """One tasklet per cell computing the ``jam`` interior levels ``_k .. _k + jam - 1``: each window row
    ``x[k + d]`` (``d`` in ``min(o) .. max(o) + jam - 1``) is loaded once and reused by up to ``jam``
    outputs (runtime weights: once per level when they vary along the levels, else once per cell).
    Every output keeps the reference order of its terms (bitwise equal)."""
    lo = min(offsets)
    rows = sorted({o + u for o in offsets for u in range(jam)})
    reads = {f"x{d - lo}": col.x(d, True) for d in rows}
    lines = []
    for u in range(jam):
        wvalue = None
        if col.weights is not None:
            prefix = f"w{u}_" if col.weights.per_level else "w"
            wreads = col.weights.reads(f"_k + {u}", len(offsets), prefix)
            reads.update(wreads)
            wvalue = list(wreads)
        wexpr = weight_exprs(weights, dtype, wvalue)
        lines.append(f"acc{u} = {weight_literal(-0.0, dtype)}")
        for j, o in enumerate(offsets):
            lines.append(f"acc{u} = acc{u} + {wexpr[j]} * x{o + u - lo}")
        lines.append(f"_out{u} = acc{u}")
    col.cells(st, "\n".join(lines), reads, {f"_out{u}": col.at("yout", f"_k + {u}") for u in range(jam)})


def build_window(node, state: dace.SDFGState, cell_axis: int, block: int, cached: bool) -> dace.SDFG:
    """The ``direct`` (``cached=False``) or ``kcached`` expansion SDFG of a ``WindowReduce`` node.

    ``block == 1`` or a non-unit cell stride selects the per-column schedule (module docstring)."""
    x, out = node.operand(state, "_in"), node.operand(state, "_out")
    axis = node.resolved_axis(len(x.shape))
    offsets, weights, body = list(node.offsets), list(node.weights), node.body
    cs = x.strides[cell_axis]
    per_column = block == 1 or dace.symbolic.issymbolic(cs) or cs != 1
    wop = node.operand(state, "_weights") if node.weights_input else None
    wgt = None if wop is None else _WindowWeights(wop, x, axis, cell_axis, per_column, block)
    ports = [("_in", x), ("_out", out)] + ([] if wop is None else [("_weights", wop)])
    outer = dace.SDFG(f"{node.label}_{'kcached' if cached else 'direct'}")
    outer.using_explicit_control_flow = True
    for sym, dt in state.sdfg.symbols.items():
        outer.add_symbol(sym, dt)
    for conn, op in ports:
        outer.add_array(conn, op.shape, op.dtype, storage=op.desc.storage, strides=op.strides)
    used = set()
    for d in outer.arrays.values():
        used |= {str(s) for s in d.free_symbols}
    for sym in list(outer.symbols):
        if sym not in used:
            outer.remove_symbol(sym)

    col = _WindowColumn(f"{node.label}_{'column' if per_column else 'block'}", x.desc, out.desc,
                        [x.strides[cell_axis], x.strides[axis]], [out.strides[cell_axis], out.strides[axis]], block,
                        per_column, wgt)
    ranges = _level_ranges(offsets)
    jam = node.unroll if not cached and not body and not per_column else 1
    if not cached:
        for label, first, cond, interior in ranges:
            if interior and jam > 1:  # unroll-and-jam: `jam` levels per pass, then the remainder levels
                a, b = max(0, -min(offsets)), max(0, max(offsets))
                jst = col.loop("levels_jam", first, f"_k < _nk - {b + jam - 1}", jam)
                _jammed(col, jst, offsets, weights, x.dtype, jam)
                first = f"{a} + {jam} * int_floor(Max(0, _nk - {a + b}), {jam})"
            st = col.loop(label, first, cond)
            reads = {f"x{j}": col.x(o, interior) for j, o in enumerate(offsets)}
            wreads = {} if wgt is None else wgt.reads("_k", len(offsets))
            code = level_code(offsets, weights, body, x.dtype, list(reads), interior, list(wreads) if wgt else None)
            col.cells(st, code, {**reads, **wreads}, {"_out": col.at("yout", "_k")})
    else:
        lo, hi = min(offsets), max(offsets)
        width = hi - lo + 1
        # ring{t} (t = 1 .. W-1) holds x[k + lo + t - 1] before level k; the newest value x[k + hi] is loaded
        for t in range(1, width):
            col.sdfg.add_array(f"ring{t}", [1 if per_column else block], x.dtype, transient=True,
                               storage=dtypes.StorageType.Register)
        if width > 1:  # prologue: the ring before level 0, only for non-empty columns
            st = col.loop("prologue", "0", "_k < Min(_nk, 1)")
            reads = {f"x{t}": col.x(lo + t - 1, False) for t in range(1, width)}
            col.cells(st, "\n".join(f"r{t}_ = x{t}" for t in range(1, width)), reads,
                      {f"r{t}_": col.ring(t) for t in range(1, width)})
        for label, first, cond, interior in ranges:
            st = col.loop(label, first, cond)
            reads = {f"r{t}": col.ring(t) for t in range(1, width)}
            reads["xn"] = col.x(hi, interior)
            wreads = {} if wgt is None else wgt.reads("_k", len(offsets))
            reads.update(wreads)
            writes = {f"r{t}_": col.ring(t) for t in range(1, width)}
            writes["_out"] = col.at("yout", "_k")
            shift = [f"r{t}_ = r{t + 1}" for t in range(1, width - 1)] + ([f"r{width - 1}_ = xn"] if width > 1 else [])
            value = ["xn" if o == hi else f"r{o - lo + 1}" for o in offsets]
            code = level_code(offsets, weights, body, x.dtype, value, interior, list(wreads) if wgt else None)
            col.cells(st, "\n".join(shift + [code]), reads, writes)

    st = outer.add_state("blocks", is_start_block=True)
    ncell = _s(x.shape[cell_axis])
    cols = [d for d in range(len(x.shape)) if d != axis]
    if per_column:
        ranges_map = {f"_i{d}": f"0:{_s(x.shape[d])}" for d in cols}
    else:
        ranges_map = {f"_i{d}": f"0:{_s(x.shape[d])}" for d in cols if d != cell_axis}
        ranges_map["_b"] = f"0:int_ceil({ncell}, {block})"
    me, mx = st.add_map(f"{node.label}_{'columns' if per_column else 'blocks'}", ranges_map)
    if per_column:
        me.map.gpu_block_size = [128, 1, 1]  # one thread per column when the map becomes a GPU kernel
    idx = []
    for d in range(len(x.shape)):
        if d == axis:
            idx.append(f"0:{_s(x.shape[axis])}")
        elif d == cell_axis and not per_column:
            idx.append(f"{block}*_b:Min({ncell}, {block}*_b + {block})")
        else:
            idx.append(f"_i{d}")
    subset = ", ".join(idx)
    mapping = {s: dace.symbol(s, outer.symbols[s]) for s in outer.symbols if s in col.sdfg.free_symbols}
    for sym in col.sdfg.free_symbols:
        if sym not in ("_nk", "_nb", "_k") and sym not in col.sdfg.symbols:
            col.sdfg.add_symbol(sym, outer.symbols.get(sym, dace.symbolic.DEFAULT_SYMBOL_TYPE))
            mapping[sym] = dace.symbol(sym, outer.symbols.get(sym, dace.symbolic.DEFAULT_SYMBOL_TYPE))
    mapping["_nk"] = x.shape[axis]
    if not per_column:
        mapping["_nb"] = dace.symbolic.pystr_to_symbolic(f"Min({block}, {ncell} - {block}*_b)")
    nsdfg = st.add_nested_sdfg(col.sdfg, {"xin": None} if wgt is None else {"xin": None, "wgt": None}, {"yout": None},
                               symbol_mapping=mapping)
    st.add_memlet_path(st.add_read("_in"), me, nsdfg, dst_conn="xin", memlet=dace.Memlet(f"_in[{subset}]"))
    if wgt is not None:
        st.add_memlet_path(st.add_read("_weights"), me, nsdfg, dst_conn="wgt",
                           memlet=dace.Memlet(f"_weights[{wgt.subset}]"))
    st.add_memlet_path(nsdfg, mx, st.add_write("_out"), src_conn="yout", memlet=dace.Memlet(f"_out[{subset}]"))
    return outer


__all__ = ["build_window", "inside", "level_code", "weight_exprs", "weight_literal"]
