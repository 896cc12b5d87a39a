"""Builders of the ``blocked`` and ``kvector`` expansions of ``ColumnReduce``.

``blocked`` (:func:`build_fold`) is the sequential fold over blocks of cells; ``kvector``
(:func:`build_kvector`) runs the selection ops in per-column lanes along K. Both reuse the block
tasklet machinery of :mod:`sdfg_scan.expansions.column_reduce_tree`.

``blocked`` and ``kvector`` have NaN-free fast paths for unmasked selection ops: an ordered compare
(one instruction) replaces the NaN-aware rule, a cheap NaN detector (a running sum, an unordered
compare) flags the blocks/columns to redo with the exact rule. Without NaNs the ordered compare
takes exactly the levels the exact rule takes.
"""

from __future__ import annotations

import dace
import numpy as np

from sdfg_scan.context import target_of
from sdfg_scan.expansions.column_reduce_tree import _Block, _code_parts, _tasklet_map, cpp_literal, vector_column
from sdfg_scan.reference import reduce_identity


def _fold_parts(node, blk: _Block, reverse: bool):
    """C++ pieces of the sequential fold (``reference.column_fold``) of one cell ``c`` at level ``k``:
    carry declarations, per-level step (on the register copies ``a``/``ai``) and the result.

    The selection ops use the exact rule of the sequential kernel: forward, ``v`` replaces ``a``
    when ``!(v >= a) & (a == a)`` (``v < a``, or ``v`` NaN and ``a`` not; the same predicate as
    ``(v < a) | (v != v & a == a)`` for every input, with one compare less), backward when
    ``(v <= a) | (v != v)``. ``min``/``max`` need no index: starting from the identity (+-inf, the
    integer extremes), the first valid value is taken or equals it bitwise.
    """
    x = blk.x
    op = node.op
    conds = []
    if node.has_mask:
        conds.append(blk.seq("_mask", "c", "k"))
    if node.has_levels:
        conds.append(f"(k < {blk.col('_levels', 'c')})")
    valid = " & ".join(f"({c_})" for c_ in conds)
    xv = blk.seq("_in", "c", "k")
    vt = "bool" if op in ("any", "all") else x.dtype.ctype
    arg = op in ("argmin", "argmax")
    if op in ("any", "all"):
        ident = "true" if op == "all" else "false"
    else:
        base = op[3:] if arg else op
        ident = cpp_literal(reduce_identity(base, x.dtype.as_numpy_dtype()), x.dtype)
    if op in ("sum", "prod"):
        sym = "+" if op == "sum" else "*"
        step = f"{{ const {vt} v = {xv}; a = " + (f"({valid}) ? (a {sym} v) : a; }}" if valid else f"a {sym} v; }}")
    elif op == "any":
        step = f"a = a | ({valid + ' & ' if valid else ''}({xv} != 0));"
    elif op == "all":
        step = f"a = a & ({'!(' + valid + ') | ' if valid else ''}({xv} != 0));"
    else:
        ge, le = (">=", "<=") if op in ("min", "argmin") else ("<=", ">=")
        # logical && / || (not & / |): GCC if-converts and vectorises the unrolled chain only so
        beats = f"((v {le} a) || (v != v))" if reverse else f"(!(v {ge} a) && (a == a))"
        take = beats
        if arg:
            take = f"((ai < 0) || {beats})" if valid else beats
        if valid:
            take = f"({valid}) && {take}"
        upd = "a = t_ ? v : a;" + (" ai = t_ ? (long long)k : ai;" if arg else "")
        step = f"{{ const {vt} v = {xv}; const bool t_ = {take}; {upd} }}"
    return vt, ident, arg, step, bool(valid)


def _fast_select_step(node, blk: _Block, reverse: bool) -> str | None:
    """The fast step of an unmasked selection op (``None`` otherwise): one ordered compare, ``v < a``
    forward (``v <= a`` backward; ``>``/``>=`` for max/argmax), plus ``ns += v`` for floats. ``ns``
    turns NaN for every NaN operand (and for some inf/-inf pairs); a block whose ``ns`` is NaN
    anywhere is redone with the exact step. Without NaNs both steps take the same levels."""
    if node.op not in ("min", "max", "argmin", "argmax") or node.has_mask or node.has_levels:
        return None
    lt = "<" if node.op in ("min", "argmin") else ">"
    upd = "a = t_ ? v : a;" + (" ai = t_ ? (long long)k : ai;" if node.op.startswith("arg") else "")
    nan = " ns = ns + v;" if np.issubdtype(blk.x.dtype.as_numpy_dtype(), np.floating) else ""
    return (f"{{ const {blk.x.dtype.ctype} v = {blk.seq('_in', 'c', 'k')}; "
            f"const bool t_ = (v {lt}{'=' if reverse else ''} a); {upd}{nan} }}")


def build_fold(node, state: dace.SDFGState, cell_axis: int, block: int, unroll: int) -> dace.SDFG:
    """The ``blocked`` expansion: the sequential fold over blocks of ``block`` cells, in C++.

    Per block, the carries live in ``[block]`` arrays; the level loop is unrolled by ``unroll`` and
    jammed into the cell loop (each pass over the cells loads a cell's carries once, folds
    ``unroll`` levels in registers, stores them back): ``unroll`` concurrent row streams and a
    branch-free, vectorisable cell loop. Every cell still folds its levels one by one in the
    visiting order of ``sequential``, so the result is bitwise the same.
    """
    blk = _Block(node, state, cell_axis)
    reverse = node.reverse
    vt, ident, arg, step, masked = _fold_parts(node, blk, reverse)
    plain_sel = arg and not masked
    out = "idx[c]" if arg else "acc[c]"
    level = "(nk - 1 - (j))" if reverse else "(j)"

    fast = _fast_select_step(node, blk, reverse)
    nan = fast is not None and "ns = ns" in fast

    def body(js: list[str], stp: str, ns: bool) -> str:
        lines = [f"{vt} a = acc[c];"] + (["long long ai = idx[c];"] if arg else []) + ([f"{vt} ns = nsum[c];"] if ns else [])
        for j in js:
            lines.append(f"{{ const int k = {level.replace('j', j)}; {stp} }}")
        lines += ["acc[c] = a;"] + (["idx[c] = ai;"] if arg else []) + (["nsum[c] = ns;"] if ns else [])
        return "\n            ".join(lines)

    # plain argmin/argmax: the carries start as (identity, first visited level), so no "idx < 0" test
    # is needed: the first level replaces the identity unless it equals it (same value, same index).
    # Empty columns are fixed at the output; no branch around the loops (a branch between the carry
    # initialisation and the level loops keeps GCC from vectorising them inside OpenMP loops).
    first_k = level.replace("j", "0")
    # unit-stride cells: force the vectorisation GCC's cost model refuses for the unrolled select chain
    cstride = blk.x.strides[cell_axis]
    simd = "#pragma omp simd" if not dace.symbolic.issymbolic(cstride) and cstride == 1 else ""
    idx0 = f" idx[c] = {first_k if plain_sel else '-1'};" if arg else ""
    result = f"(nk > 0 ? {out} : -1)" if plain_sel else out

    def loops(stp: str, ns: bool) -> str:
        return f"""for (int c = 0; c < nc; ++c) {{ acc[c] = {ident};{idx0}{' nsum[c] = 0;' if ns else ''} }}
int j = 0;
for (; j + {unroll} <= nk; j += {unroll}) {{
    {simd}
    for (int c = 0; c < nc; ++c) {{
            {body([f'j + {u}' for u in range(unroll)], stp, ns)}
    }}
}}
for (; j < nk; ++j) {{
    for (int c = 0; c < nc; ++c) {{
            {body(['j'], stp, ns)}
    }}
}}"""

    if fast is None:
        main = loops(step, False)
    elif not nan:
        main = loops(fast, False)
    else:  # NaN-free fast pass; a block with a NaN (or an inf/-inf pair) is redone with the exact step
        main = f"""{vt} nsum[{block}];
{loops(fast, True)}
bool redo = false;
for (int c = 0; c < nc; ++c) redo |= (nsum[c] != nsum[c]);
if (redo) {{
{loops(step, False)}
}}"""
    code = f"""
{vt} acc[{block}];
{f'long long idx[{block}];' if arg else ''}
{main}
for (int c = 0; c < nc; ++c) {blk.col('_out', 'c')} = {result};
"""
    return _tasklet_map(node, state, f"{node.label}_blocked", cell_axis, block, code)


VECTOR_BYTES = 64
"""Width of the GCC/Clang vector-extension registers of the CPU ``kvector`` fast path (one AVX-512
register, two AVX2 ones)."""


def _kvector_fast(node, blk: _Block) -> str | None:
    """C++ of the CPU ``kvector`` fast path for unmasked float columns with unit K stride (``None``
    otherwise): one ``VECTOR_BYTES`` vector of lanes walks the column; lane ``l`` keeps the first
    index of its extreme value with the ordered compare, an unordered compare flags NaNs; the lanes
    combine as (value, index) pairs (the lower index wins ties) in a log2 shuffle tree. A column
    with a NaN is redone with the exact sequential step (first NaN wins)."""
    x = blk.x
    npdt = x.dtype.as_numpy_dtype()
    if not vector_column(node, x, blk.axis):
        return None
    width = VECTOR_BYTES // npdt.itemsize
    vt, it = x.dtype.ctype, ("int" if npdt.itemsize == 4 else "long long")
    lt = "<" if node.op in ("min", "argmin") else ">"
    ident = cpp_literal(reduce_identity(node.op[3:] if node.op.startswith("arg") else node.op, npdt), x.dtype)
    shuffles = []
    half = width // 2
    while half >= 1:
        perm = [(lane ^ half) for lane in range(width)]
        plist = ", ".join(str(q) for q in perm)
        shuffles.append(f"""    {{
#if defined(__clang__)
        const vv_ m2 = __builtin_shufflevector(m, m, {plist}); const vi_ i2 = __builtin_shufflevector(mi, mi, {plist});
#else
        const vv_ m2 = __builtin_shuffle(m, (vi_){{{plist}}}); const vi_ i2 = __builtin_shuffle(mi, (vi_){{{plist}}});
#endif
        const vi_ t = (m2 {lt} m) | ((m2 == m) & (i2 < mi)); m = t ? m2 : m; mi = t ? i2 : mi;
    }}""")
        half //= 2
    lanes_init = ", ".join(str(q) for q in range(width))
    exact = _select_test(node.op, "v", "a")
    out = "ri" if node.op.startswith("arg") else f"(nk > 0 ? p_in[ri] : {ident})"
    return f"""
typedef {vt} vv_ __attribute__((vector_size({VECTOR_BYTES})));
typedef {it} vi_ __attribute__((vector_size({VECTOR_BYTES})));
const {vt}* __restrict__ p = p_in;  // the column's window, unit K stride
vv_ m; vi_ mi = {{0}}; vi_ bad = {{0}};
for (int l = 0; l < {width}; ++l) m[l] = {ident};
vi_ kk = (vi_){{{lanes_init}}};
int k = 0;
for (; k + {width} <= nk; k += {width}) {{
    vv_ v; __builtin_memcpy(&v, p + k, sizeof(v));
    const vi_ t = v {lt} m; m = t ? v : m; mi = t ? kk : mi; bad |= (v != v); kk += {width};
}}
bool nan_ = false;
for (int l = 0; l < {width}; ++l) nan_ |= (bad[l] != 0);
{chr(10).join(shuffles)}
{vt} mm = m[0]; long long ri = mi[0];
for (; k < nk; ++k) {{ const {vt} v = p[k]; if (v {lt} mm) {{ mm = v; ri = k; }} nan_ |= (v != v); }}
if (nan_) {{
    {vt} a = {ident}; ri = -1;
    for (int k = 0; k < nk; ++k) {{ const {vt} v = p[k]; if ((ri < 0) || {exact}) {{ a = v; ri = k; }} }}
}}
if (nk <= 0) ri = -1;
{blk.col('_out', '0')} = {out};
(void)nc; (void)mm;
"""


def _select_test(op: str, cand: str, cur: str) -> str:
    """C++ of the forward "``cand`` replaces ``cur``" rule (``reference_columns._beats``)."""
    lt = "<" if op in ("min", "argmin") else ">"
    return f"(({cand} {lt} {cur}) || (({cand} != {cand}) && ({cur} == {cur})))"


def build_kvector(node, state: dace.SDFGState, lanes: int) -> dace.SDFG:
    """The ``kvector`` expansion of the selection ops: one column per map iteration, ``lanes``
    (value, index) carries along K (level ``k`` goes to lane ``k % lanes``; the fixed-width lane
    loop vectorises), combined with the order-free (value, index) rule of :func:`_code_parts`.

    Each lane keeps the first index of its extreme value (first NaN); the combine keeps the NaN,
    else the extreme value, ties to the lower index: the first index of the column's extreme value
    whatever the lane count, i.e. bitwise the sequential result (``min``/``max``: its value).
    """
    x = node.operand(state, "_in")
    axis = node.resolved_axis(len(x.shape))
    cell_axis = [d for d in range(len(x.shape)) if d != axis][-1]
    blk = _Block(node, state, cell_axis)
    fast = _kvector_fast(node, blk) if target_of(node, state) == "cpu" else None
    if fast is not None:
        return _tasklet_map(node, state, f"{node.label}_kvector", cell_axis, 1, fast)
    vt, ident, _valid, value, _arg, combine = _code_parts(node, blk)
    value = value.replace("[(c) *", "[(0) *")
    masked = node.has_mask or node.has_levels
    valid = _valid.replace("[(c) *", "[(0) *")
    L = lanes
    cmp = "<" if node.op in ("min", "argmin") else ">"
    # inside a lane the indices grow, so strict "beats" keeps the first; once a lane holds a valid
    # entry (index >= 0) the identity never replaces it
    if masked:
        take = (f"(({valid}) & ((ai[l] < 0) | (v {cmp} a[l]) | ((v != v) & (a[l] == a[l]))))")
        val = value
    else:
        take = f"((v {cmp} a[l]) | ((v != v) & (a[l] == a[l])))"
        val = blk.seq("_in", "0", "k")
    step = f"const {vt} v = {val}; const bool t_ = {take}; a[l] = t_ ? v : a[l]; ai[l] = t_ ? (long long)k : ai[l];"
    merge = combine.format(vt=vt, a="a[0]", b="a[l]", ai="ai[0]", bi="ai[l]")
    out = "ai[0]" if node.op in ("argmin", "argmax") else "a[0]"
    if masked:
        start = f"for (int l = 0; l < {L}; ++l) {{ a[l] = {ident}; ai[l] = -1; }}\nint k0 = 0;"
    else:
        first = blk.seq("_in", "0", "l")
        start = (f"for (int l = 0; l < {L}; ++l) {{ a[l] = l < nk ? {first} : {ident}; ai[l] = l < nk ? l : -1; }}\n"
                 f"int k0 = nk < {L} ? nk : {L};")
    code = f"""
{vt} a[{L}];
long long ai[{L}];
{start}
int kb = k0;
for (; kb + {L} <= nk; kb += {L}) {{
    for (int l = 0; l < {L}; ++l) {{
        const int k = kb + l;
        {step}
    }}
}}
for (int l = 0; l < {L}; ++l) {{
    const int k = kb + l;
    if (k < nk) {{ {step} }}
}}
for (int l = 1; l < {L}; ++l) {merge}
{blk.col('_out', '0')} = ({out});
(void)nc;
"""
    return _tasklet_map(node, state, f"{node.label}_kvector", cell_axis, 1, code)


__all__ = ["VECTOR_BYTES", "build_fold", "build_kvector"]
