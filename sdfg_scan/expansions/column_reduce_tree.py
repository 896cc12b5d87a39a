"""Builders of the ``tree`` and ``lanes`` expansions of ``ColumnReduce``.

Both are a map over blocks of cells (one cell per block on GPUs) around one C++ tasklet that
receives the block's windows of the operands as pointers and walks them with the operands'
strides (symbolic strides stay symbols):

``tree``
    the fixed pairwise tree of ``reference.column_reduce(order="tree")`` in its stack form: push
    level ``k``, then merge the two top entries ``ctz(k + 1)`` times, finally merge what is left
    from the top. The shape depends only on the level count, so the bits are the same for any
    block size, thread count or device. Levels outer, cells inner (unit stride when cells are
    contiguous).
``lanes``
    per column, ``L`` partial results; level ``k`` goes to lane ``k % L``; the lanes are combined
    in lane order. Cells outer, levels inner (unit stride when K is contiguous).

The selection ops (min/max/argmin/argmax) carry (value, index) pairs and combine them so that the
first index of the extreme value wins (NaN first), whatever the order: they are bitwise equal to
the sequential fold. ``min``/``max`` are computed as argmin/argmax and return the value.

The shared block-tasklet helpers (:func:`cpp_literal`, ``_Block``, ``_code_parts``, ``_tasklet_map``)
live here too. The ``blocked`` and ``kvector`` builders (``build_fold``, ``build_kvector``) are in
:mod:`sdfg_scan.expansions.column_reduce_fold`.
"""

from __future__ import annotations

import dace
import numpy as np
from dace import dtypes

from sdfg_scan.context import target_of
from sdfg_scan.expansions.environments import BLOCK_DEFAULT
from sdfg_scan.reference import reduce_identity

STACK_DEPTH = 34
"""Entries of the tree stack: enough for any int32 level count (popcount(k) + 1 <= 32)."""


def cpp_literal(value, dtype: dace.typeclass) -> str:
    """An exact C++ literal of ``value`` in ``dtype`` (hex floats, ``INFINITY``)."""
    npdt = dtype.as_numpy_dtype()
    if npdt == np.bool_:
        return "true" if value else "false"
    if np.issubdtype(npdt, np.integer):
        return f"(({dtype.ctype}){int(value)}LL)"
    v = float(npdt.type(value))
    if np.isinf(v):
        return f"(({dtype.ctype})({'-' if v < 0 else ''}INFINITY))"
    return f"(({dtype.ctype}){v.hex()})"


def _s(expr) -> str:
    return dace.symbolic.symstr(expr)


class _Block:
    """Index expressions of the operands inside one block tasklet."""

    def __init__(self, node, state, cell_axis: int):
        self.node, self.state = node, state
        self.x = node.operand(state, "_in")
        self.axis = node.resolved_axis(len(self.x.shape))
        self.cell_axis = cell_axis
        self.kless_cell = cell_axis if cell_axis < self.axis else cell_axis - 1

    def seq(self, conn: str, cell: str, level: str) -> str:
        st = self.node.operand(self.state, conn).strides
        return f"p{conn}[({cell}) * ({_s(st[self.cell_axis])}) + ({level}) * ({_s(st[self.axis])})]"

    def col(self, conn: str, cell: str) -> str:
        st = self.node.operand(self.state, conn).strides
        return f"p{conn}[({cell}) * ({_s(st[self.kless_cell])})]"


def _code_parts(node, blk: _Block):
    """Shared pieces: value type, identity, the pushed value of (cell c, level k), the combiner."""
    x = blk.x
    op = node.op
    sel = ("arg" + op) if op in ("min", "max") else op
    if op in ("any", "all"):
        vt, ident = "bool", ("true" if op == "all" else "false")
    else:
        base = sel[3:] if sel.startswith("arg") else op
        vt, ident = x.dtype.ctype, cpp_literal(reduce_identity(base, x.dtype.as_numpy_dtype()), x.dtype)
    conds = []
    if node.has_mask:
        conds.append(blk.seq("_mask", "c", "k"))
    if node.has_levels:
        conds.append(f"(k < {blk.col('_levels', 'c')})")
    valid = " && ".join(conds) or "true"
    xv = blk.seq("_in", "c", "k")
    if op == "any":
        value = f"(({valid}) && ({xv} != 0))"
    elif op == "all":
        value = f"(!({valid}) || ({xv} != 0))"
    else:
        value = f"(({valid}) ? {xv} : {ident})"
    arg = sel.startswith("arg")
    if arg:
        lt = "<" if sel == "argmin" else ">"

        def beats(b, a):
            return f"(({b} {lt} {a}) | (({b} != {b}) & ({a} == {a})))"

        # branch-free (if-converted, so the cell loop vectorises); same result as the reference
        combine = ("{{ const {vt} av_ = {a}, bv_ = {b}; const long long ai_ = {ai}, bi_ = {bi};\n"
                   "  const bool t_ = (bi_ >= 0) & ((ai_ < 0) | " + beats("bv_", "av_") + " | (!" +
                   beats("av_", "bv_") + " & (bi_ < ai_)));\n"
                   "  {a} = t_ ? bv_ : av_; {ai} = t_ ? bi_ : ai_; }}")
    else:
        sym = {"sum": "+", "prod": "*", "any": "||", "all": "&&"}[op]
        combine = "{a} = {a} " + sym + " {b};"
    return vt, ident, valid, value, arg, combine


def _tasklet_map(node, state, name: str, cell_axis: int, block: int, code: str) -> dace.SDFG:
    """Expansion SDFG: map over (other column axes, blocks of ``cell_axis``) -> one C++ tasklet."""
    x = node.operand(state, "_in")
    axis = node.resolved_axis(len(x.shape))
    conns = ["_in"] + (["_mask"] if node.has_mask else []) + (["_levels"] if node.has_levels else [])
    sdfg = dace.SDFG(name)
    for sym, dt in state.sdfg.symbols.items():
        sdfg.add_symbol(sym, dt)
    for conn in conns + ["_out"]:
        op = node.operand(state, conn)
        sdfg.add_array(conn, op.shape, op.dtype, storage=op.desc.storage, strides=op.strides)
    used = set()
    for d in sdfg.arrays.values():
        used |= {str(s) for s in d.free_symbols}
    for sym in list(sdfg.symbols):
        if sym not in used:
            sdfg.remove_symbol(sym)
    st = sdfg.add_state("blocks", is_start_block=True)
    ncell = _s(x.shape[cell_axis])
    cols = [d for d in range(len(x.shape)) if d != axis]
    ranges = {f"_i{d}": f"0:{_s(x.shape[d])}" for d in cols if d != cell_axis}
    ranges["_b"] = f"0:int_ceil({ncell}, {block})"
    cells = f"{block}*_b:Min({ncell}, {block}*_b + {block})"
    me, mx = st.add_map(f"{node.label}_blocks", ranges)
    me.map.gpu_block_size = list(BLOCK_DEFAULT)   # used only when the map becomes a GPU kernel

    def index(conn: str) -> str:
        op = node.operand(state, conn)
        dims = range(len(op.shape))
        kdims = list(range(len(x.shape))) if len(op.shape) == len(x.shape) else cols
        out = []
        for d, xd in zip(dims, kdims, strict=True):
            out.append(f"0:{_s(op.shape[d])}" if xd == axis else (cells if xd == cell_axis else f"_i{xd}"))
        return ", ".join(out)

    full = (f"const int nrem = ({ncell}) - {block} * _b;\nconst int nc = nrem < {block} ? nrem : {block};"
            f"\nconst int nk = {_s(x.shape[axis])};\n") + code
    tasklet = st.add_tasklet(name, {"p" + c: dtypes.pointer(node.operand(state, c).dtype) for c in conns},
                             {"p_out": dtypes.pointer(node.operand(state, "_out").dtype)}, full,
                             language=dtypes.Language.CPP)
    for c in conns:
        st.add_memlet_path(st.add_read(c), me, tasklet, dst_conn="p" + c, memlet=dace.Memlet(f"{c}[{index(c)}]"))
    st.add_memlet_path(tasklet, mx, st.add_write("_out"), src_conn="p_out",
                       memlet=dace.Memlet(f"_out[{index('_out')}]"))
    return sdfg


def build_tree(node, state: dace.SDFGState, cell_axis: int, block: int) -> dace.SDFG:
    """The ``tree`` expansion (module docstring).

    Levels outer, cells inner: every level is one pass over the block's cells that pushes the value
    (odd ``k + 1``) or merges it straight into the top entry, followed by the remaining
    ``ctz(k + 1) - 1`` merges, each one pass over the cells. The stack rows are ``__restrict__``
    pointers and the combiner is branch-free, so every pass is a vectorisable loop.
    """
    blk = _Block(node, state, cell_axis)
    vt, ident, _valid, value, arg, combine = _code_parts(node, blk)
    merge_top = combine.format(vt=vt, a="a[c]", b="bv", ai="ai[c]", bi="bi")
    merge = combine.format(vt=vt, a="a[c]", b="b[c]", ai="ai[c]", bi="bi[c]")
    out = "si[0][c]" if node.op in ("argmin", "argmax") else "st[0][c]"
    empty = "-1" if node.op in ("argmin", "argmax") else ident
    si_decl = f"long long si[{STACK_DEPTH}][{block}];" if arg else "long long si[2][1];"
    row = "sp_"  # the stack rows of one pass
    rows = ("    {vt}* __restrict__ a = st[{r} - 1]; const {vt}* __restrict__ b = st[{r}];\n"
            "    long long* __restrict__ ai = si[{i} - 1]; const long long* __restrict__ bi = si[{i}];\n"
            "    (void)ai; (void)bi;\n")
    rows_arg = rows.format(vt=vt, r=row, i=row)
    rows_noarg = rows.format(vt=vt, r=row, i="1")
    rows_pass = rows_arg if arg else rows_noarg
    bi_val = f"(({_valid}) ? (long long)k : -1LL)" if arg else "0LL"
    code = f"""
{vt} st[{STACK_DEPTH}][{block}];
{si_decl}
int sp = 0;
for (int k = 0; k < nk; ++k) {{
    int merges = 0;
    for (int m = k + 1; (m & 1) == 0; m >>= 1) ++merges;
    if (merges == 0) {{
        {vt}* __restrict__ a = st[sp];
        long long* __restrict__ ai = si[{'sp' if arg else '0'}];
        (void)ai;
        for (int c = 0; c < nc; ++c) {{
            a[c] = {value};
            {'ai[c] = ' + bi_val + ';' if arg else ''}
        }}
        ++sp;
        continue;
    }}
    {{
        {vt}* __restrict__ a = st[sp - 1];
        long long* __restrict__ ai = si[{'sp - 1' if arg else '0'}];
        (void)ai;
        for (int c = 0; c < nc; ++c) {{
            const {vt} bv = {value};
            const long long bi = {bi_val};
            (void)bi;
            {merge_top if arg else combine.format(vt=vt, a="a[c]", b="bv", ai="", bi="")}
        }}
    }}
    for (int j = 1; j < merges; ++j) {{
        --sp;
        const int {row} = sp;
{rows_pass}        for (int c = 0; c < nc; ++c) {merge}
    }}
}}
while (sp > 1) {{
    --sp;
    const int {row} = sp;
{rows_pass}    for (int c = 0; c < nc; ++c) {merge}
}}
for (int c = 0; c < nc; ++c) {blk.col('_out', 'c')} = sp ? {out} : {empty};
(void)si;
"""
    return _tasklet_map(node, state, f"{node.label}_tree", cell_axis, block, code)


def vector_column(node, x, axis: int) -> bool:
    """Whether a CPU vector path can walk the columns of ``x`` (the ``_in`` operand, K along ``axis``):
    no mask, no level bounds, float32/float64 values, unit K stride. Shared by the ``kvector`` and
    ``lanes`` fast paths and by ``auto``'s choice of them."""
    npdt = x.dtype.as_numpy_dtype()
    k_stride = x.strides[axis]
    return (not node.has_mask and not node.has_levels and np.issubdtype(npdt, np.floating)
            and npdt.itemsize in (4, 8) and not dace.symbolic.issymbolic(k_stride) and k_stride == 1)


def vector_lanes(lanes: int) -> bool:
    """Whether ``lanes`` partials fit the ``lanes`` vector path (a power of two, 2..16)."""
    return 2 <= lanes <= 16 and not lanes & (lanes - 1)


def _lanes_fast(node, blk: _Block, lanes: int) -> str | None:
    """C++ of the CPU ``lanes`` fast path for unmasked float sum/prod with unit K stride and a power of
    two ``lanes`` (``None`` otherwise): the column's partial results are one GCC/Clang vector of
    ``lanes`` elements, level ``k`` lands in element ``k % lanes`` (vector loads, one add per
    ``lanes`` levels), the tail levels go to elements 0, 1, ..., and the elements fold in lane order:
    the same operations, in the same order, as the generic loop."""
    x = blk.x
    npdt = x.dtype.as_numpy_dtype()
    if node.op not in ("sum", "prod") or not vector_lanes(lanes) or not vector_column(node, x, blk.axis):
        return None
    vt, opc = x.dtype.ctype, ("+" if node.op == "sum" else "*")
    ident = cpp_literal(reduce_identity(node.op, npdt), x.dtype)
    return f"""
typedef {vt} vl_ __attribute__((vector_size({lanes * npdt.itemsize})));
const {vt}* __restrict__ p = p_in;  // the column's window, unit K stride
vl_ a;
for (int l = 0; l < {lanes}; ++l) a[l] = {ident};
int k = 0;
for (; k + {lanes} <= nk; k += {lanes}) {{ vl_ v; __builtin_memcpy(&v, p + k, sizeof(v)); a = a {opc} v; }}
{vt} t[{lanes}];  // scalar tail and lane-order fold on a copy (element access would spill the vector)
__builtin_memcpy(t, &a, sizeof(a));
for (int l = 0; k < nk; ++k, ++l) t[l] = t[l] {opc} p[k];
{vt} r = t[0];
for (int l = 1; l < {lanes}; ++l) r = r {opc} t[l];
{blk.col('_out', '0')} = r;
(void)nc;
"""


def build_lanes(node, state: dace.SDFGState, lanes: int) -> dace.SDFG:
    """The ``lanes`` expansion (module docstring): one column per map iteration."""
    x = node.operand(state, "_in")
    axis = node.resolved_axis(len(x.shape))
    cell_axis = [d for d in range(len(x.shape)) if d != axis][-1]
    blk = _Block(node, state, cell_axis)
    fast = _lanes_fast(node, blk, lanes) if target_of(node, state) == "cpu" else None
    if fast is not None:
        return _tasklet_map(node, state, f"{node.label}_lanes", cell_axis, 1, fast)
    vt, ident, _valid, value, arg, combine = _code_parts(node, blk)
    value = value.replace("[(c) *", "[(0) *")
    valid = _valid.replace("[(c) *", "[(0) *")
    L = lanes
    push = combine.format(vt=vt, a="a[l]", b="v", ai="ai[l]", bi="vi")
    merge = combine.format(vt=vt, a="a[0]", b="a[l]", ai="ai[0]", bi="ai[l]")
    out = "ai[0]" if node.op in ("argmin", "argmax") else "a[0]"
    code = f"""
{vt} a[{L}];
long long ai[{L}];
for (int l = 0; l < {L}; ++l) {{ a[l] = {ident}; ai[l] = -1; }}
int k = 0;
for (; k + {L} <= nk; k += {L}) {{
    for (int l = 0; l < {L}; ++l) {{
        const int kk = k + l;
        {{ const int k = kk; const {vt} v = {value}; const long long vi = ({valid}) ? (long long)k : -1LL; (void)vi;
          {push} }}
    }}
}}
for (int l = 0; k < nk; ++k, ++l) {{
    const {vt} v = {value}; const long long vi = ({valid}) ? (long long)k : -1LL; (void)vi;
    {push}
}}
for (int l = 1; l < {L}; ++l) {merge}
{blk.col('_out', '0')} = {out};
(void)nc; (void)ai;
"""
    if not arg:
        code = code.replace("long long ai[", "long long ai_unused[").replace(
            "ai[l] = -1;", "ai_unused[l] = -1;").replace("(void)ai;", "(void)ai_unused;")
    return _tasklet_map(node, state, f"{node.label}_lanes", cell_axis, 1, code)


__all__ = ["STACK_DEPTH", "build_lanes", "build_tree", "cpp_literal", "vector_column", "vector_lanes"]
