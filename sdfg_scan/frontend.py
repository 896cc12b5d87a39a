"""Functions usable inside ``@dace.program`` that lower to sdfg_scan library nodes.

Each public function is a plain NumPy implementation when called from Python (the reference), and a
``dace.frontend.common.op_repository`` replacement adds the library node when the DaCe frontend
parses a call to it. ``np.cumsum``/``np.cumprod`` and ``x.cumsum()``/``x.cumprod()`` inside a program
are lowered to ``CumulativeScan`` as well, with NumPy's semantics (instead of DaCe's default Python
callback). The cumulative scans live in :mod:`sdfg_scan.frontend_cumulative`, the windowed reduction
in :mod:`sdfg_scan.frontend_window`, the shared helpers in :mod:`sdfg_scan.frontend_common`.
"""

from __future__ import annotations

import dace
import numpy as np

from sdfg_scan import reference
from sdfg_scan.frontend_common import (  # noqa: F401
    add_node,
    axis_argument,
    input_desc,
    kless_init,
    literal,
    promoted,
    same_shape,
    unit_column_view,
)
from sdfg_scan.frontend_common import replaces as _replaces
from sdfg_scan.frontend_cumulative import cummax, cummin, cumprod, cumsum  # noqa: F401
from sdfg_scan.frontend_window import window_reduce  # noqa: F401
from sdfg_scan.nodes.linear_recurrence import LinearRecurrence

# -- linear recurrence -----------------------------------------------------------------------------

def linear_recurrence(a, b, axis: int = -1, reverse: bool = False, init=None):
    """``y[k] = a[k] * y[k-1] + b[k]``, ``y[-1] = init`` (``LinearRecurrence`` inside ``@dace.program``).

    ``init`` is None (0), a number, a scalar (a program argument such as ``s: dace.float64``: every column
    starts from it) or a K-less array (the shape of ``a`` without ``axis``).
    """
    return reference.linear_recurrence(a, b, axis, reverse, init)


@_replaces("sdfg_scan.linear_recurrence", "sdfg_scan.frontend.linear_recurrence")
def _lower_linear_recurrence(pv, sdfg, state, a, b, axis=-1, reverse=False, init=None):
    api = "linear_recurrence"
    desc = input_desc(sdfg, a, api)
    input_desc(sdfg, b, api)
    ax = axis_argument(axis, len(desc.shape), api)
    init = getattr(init, "value", init)
    has_init = isinstance(init, str)
    if has_init and init not in sdfg.arrays:
        raise TypeError(f"sdfg_scan.{api}: init must be a number, a scalar or a K-less array, got {init!r}")
    (a, b), produced, dtype = promoted(sdfg, state, [a, b])  # mixed dtypes: NumPy's result type, as the Python call
    result, _ = sdfg.add_temp_transient(desc.shape, dtype)
    inputs, outputs = {"a": a, "b": b}, {"_out": result}
    if has_init:
        if len(desc.shape) == 1:  # one column: a (1, K) problem, so that the node has a K-less init (one value)
            inputs = {"a": unit_column_view(pv, sdfg, a, state, produced),
                      "b": unit_column_view(pv, sdfg, b, state, produced)}
            outputs, ax = {"_out": unit_column_view(pv, sdfg, result)}, 1
        colshape = list(desc.shape[:ax]) + list(desc.shape[ax + 1:]) if len(desc.shape) > 1 else [1]
        inputs["init"], written = kless_init(sdfg, state, init, colshape, dtype)
        produced.update(written)
    node = LinearRecurrence(api, axis=ax, reverse=bool(literal(reverse, api)), has_init=has_init,
                            init_value=0.0 if (init is None or has_init) else float(init))
    add_node(sdfg, state, node, inputs, outputs, produced)
    return result


__all__ = ["cummax", "cummin", "cumprod", "cumsum", "linear_recurrence"]


# -- tridiagonal solve (TridiagonalSolve, TridiagonalFactor) -----------------------------------------

from sdfg_scan.nodes.tridiagonal_solve import TridiagonalFactor, TridiagonalSolve  # noqa: E402


def tridiagonal_solve(a, b, c, d, axis: int = -1):
    """Solve ``a[k]*x[k-1] + b[k]*x[k] + c[k]*x[k+1] = d[k]`` per column (``TridiagonalSolve``)."""
    return reference.tridiagonal_solve(a, b, c, d, axis)


def tridiagonal_factor(a, b, c, axis: int = -1):
    """Inverse pivots and modified upper coefficients ``(w, cp)`` (``TridiagonalFactor``)."""
    return reference.tridiagonal_factor(a, b, c, axis)


def tridiagonal_solve_prefactored(a, w, cp, d, axis: int = -1):
    """Solve with ``(w, cp)`` from :func:`tridiagonal_factor` (``TridiagonalSolve(prefactored=True)``)."""
    return reference.tridiagonal_solve_prefactored(a, w, cp, d, axis)


def _lower_tridiagonal(api: str, node_cls, ins: tuple[str, ...], outs: tuple[str, ...], **fixed):
    def lower(pv, sdfg, state, *args, axis=-1):
        if len(args) != len(ins):
            raise TypeError(f"sdfg_scan.{api}: expected {len(ins)} arrays ({', '.join(ins)}), got {len(args)}")
        descs = [input_desc(sdfg, name, api) for name in args]
        node = node_cls(api, axis=axis_argument(axis, len(descs[-1].shape), api), **fixed)
        args, produced, dtype = promoted(sdfg, state, list(args))  # mixed dtypes: NumPy's result type
        results = [sdfg.add_temp_transient(descs[-1].shape, dtype)[0] for _ in outs]
        add_node(sdfg, state, node, dict(zip(ins, args, strict=True)), dict(zip(outs, results, strict=True)),
                 produced)
        return results[0] if len(results) == 1 else tuple(results)

    return lower


_replaces("sdfg_scan.tridiagonal_solve", "sdfg_scan.frontend.tridiagonal_solve")(
    _lower_tridiagonal("tridiagonal_solve", TridiagonalSolve, ("a", "b", "c", "d"), ("x",)))
_replaces("sdfg_scan.tridiagonal_factor", "sdfg_scan.frontend.tridiagonal_factor")(
    _lower_tridiagonal("tridiagonal_factor", TridiagonalFactor, ("a", "b", "c"), ("w", "cp")))
_replaces("sdfg_scan.tridiagonal_solve_prefactored", "sdfg_scan.frontend.tridiagonal_solve_prefactored")(
    _lower_tridiagonal("tridiagonal_solve_prefactored", TridiagonalSolve, ("a", "w", "cp", "d"), ("x",),
                       prefactored=True))
__all__ += ["tridiagonal_factor", "tridiagonal_solve", "tridiagonal_solve_prefactored"]


# -- column reductions (ColumnReduce) -------------------------------------------------------------

from sdfg_scan.nodes.column_reduce import ColumnReduce  # noqa: E402


def column_reduce(x, op: str, axis: int = -1, mask=None, levels=None):
    """Reduce ``x`` along ``axis`` with ``op`` (``ColumnReduce`` inside ``@dace.program``).

    ``op`` is one of sum, prod, min, max, argmin, argmax, any, all; ``mask`` a bool array of the
    shape of ``x``; ``levels`` a K-less integer array (only levels ``k < levels`` count). Outside a
    program this is ``reference.column_fold`` (the sequential order). A 1-d ``x`` is one column: inside a
    program its result is an array of one element (the Python call returns a 0-d value).
    """
    return reference.column_fold(x, op, axis, mask, levels)


@_replaces("sdfg_scan.column_reduce", "sdfg_scan.frontend.column_reduce")
def _lower_column_reduce(pv, sdfg, state, x, op, axis=-1, mask=None, levels=None):
    api = "column_reduce"
    desc = input_desc(sdfg, x, api)
    op = literal(op, "op")
    if op not in reference.REDUCE_OPS:
        raise ValueError(f"sdfg_scan.{api}: op must be one of {reference.REDUCE_OPS}, got {op!r}")
    ax = axis_argument(axis, len(desc.shape), api)
    inputs = {"_in": x}
    if mask is not None:
        input_desc(sdfg, mask, api)
        inputs["_mask"] = mask
    if levels is not None:  # K-less: a scalar for a 1-d x
        if not isinstance(levels, str) or levels not in sdfg.arrays:
            raise TypeError(f"sdfg_scan.{api}: levels must be a K-less integer array, got {levels!r}")
        inputs["_levels"] = levels
    kless = list(desc.shape[:ax]) + list(desc.shape[ax + 1:])
    if len(desc.shape) == 1:  # one column: a (1, K) problem with one result (an array of one element)
        inputs.update({c: unit_column_view(pv, sdfg, inputs[c]) for c in ("_in", "_mask") if c in inputs})
        ax, kless = 1, [1]
    odt = dace.int64 if op.startswith("arg") else (dace.bool_ if op in ("any", "all") else desc.dtype)
    result, _ = sdfg.add_temp_transient(kless, odt)
    node = ColumnReduce(api, op=op, axis=ax, mask=mask is not None, levels=levels is not None)
    add_node(sdfg, state, node, inputs, {"_out": result})
    return result


__all__ += ["column_reduce"]


# -- general scan (Scan) ----------------------------------------------------------------------------

from sdfg_scan.nodes.scan import Scan  # noqa: E402


def scan(f, init, xs, axis: int = -1, reverse: bool = False, emit: str = "inclusive", final: bool = False,
         fill=0.0, carries=None):
    """General scan: ``scan :: (c -> x -> k -> (c, y)) -> c -> [x] -> (carry outputs..., ys..., finals...)``.

    Designed after ``jax.lax.scan``; ``Scan`` node inside ``@dace.program``. Reference loop (one
    column, forward, ``sdfg_scan.reference.scan``)::

        c = init
        for k in range(n):
            before = c
            c, y = f(c, x, k)            # x[i]: input i at level k; x[i, o]: at level k + o
            carry_out[k] = c             # "exclusive": before; "include_initial": n+1 slots
            ys[k] = y
        return (*carry_out, *ys, *(c if final))

    :param f: ``def f(c, x, k): ...; return new_c, ys`` with ``c`` and ``new_c`` tuples of one value
        per carry slot and ``ys`` a tuple of per-level outputs (may be empty). Elementwise code only
        (see :mod:`sdfg_scan.expansions.scan_body` for what a body may contain).
    :param init: one value per carry slot (tuple; a single value means one slot): a number, a scalar
        (a program argument: every column starts from it) or a K-less array (the input shape without ``axis``).
    :param xs: the per-level inputs, a tuple of arrays of one shape (a single array is one input); other
        shapes are refused.
    :param axis: the scan axis; every other index is an independent column.
    :param reverse: visit the levels from last to first; outputs stay index-aligned with the inputs.
    :param emit: ``"inclusive"`` (carry after level k), ``"exclusive"`` (before level k) or
        ``"include_initial"`` (``n + 1`` slots: ``[init, inclusive...]``; reversed: ``[inclusive..., init]``).
    :param final: also return the final carry (K-less arrays) after the ys.
    :param fill: value of offset reads outside the column (``x[i, -1]`` at the first level).
    :param carries: the carry slots (indices into ``init``) whose per-level values are returned, in
        slot order; default all. A slot the caller does not need (a first-level flag) is left out
        here rather than assigned and dropped, so that the program writes no array nobody reads.
    :returns: a tuple ``(*carry_outputs, *ys, *finals)``, or the only array when there is one.

    Unlike ``jax.lax.scan``: the body sees all columns at once (NumPy) or one column (inside a
    program), inputs are readable at constant level offsets, carry outputs per level are returned
    (``emit``), and a carry's dtype is the init array's dtype, or for a number the dtype of the first
    input where that is a floating type (else float64; bool for True/False); ys take the dtype of carry slot 0
    (or of the first input). Called from Python, a body whose control flow needs one value per column (``a if
    x[0] > 0 else b``, builtin ``min``, ``lo < x[0] < hi``) runs one column at a time.
    """
    xs_t = tuple(xs) if isinstance(xs, (tuple, list)) else (xs,)
    init_t = tuple(init) if isinstance(init, (tuple, list)) else (init,)
    dts = [_scan_carry_dtype(i, xs_t[0] if xs_t else None) for i in init_t]
    keep = _carry_slots(carries, len(init_t))
    outs, ys, fin = reference.scan(f, init_t, dict(enumerate(xs_t)), axis=axis, reverse=reverse, emit=emit,
                                   fill=fill, dtypes=dts)
    ydt = dts[0] if dts else np.asarray(xs_t[0]).dtype
    res = tuple(outs[j] for j in keep) + tuple(np.asarray(y, dtype=ydt) for y in ys) + (tuple(fin) if final else ())
    return res[0] if len(res) == 1 else res


def _carry_slots(carries, ncarry: int) -> list[int]:
    """``scan``'s ``carries`` argument as sorted slot indices (all slots for None), checked."""
    if carries is None:
        return list(range(ncarry))
    sel = [carries] if isinstance(carries, int) else list(carries)
    if any(not isinstance(j, int) or isinstance(j, bool) for j in sel):
        raise TypeError(f"sdfg_scan.scan: carries must be carry slot indices (ints), got {carries!r}")
    bad = [j for j in sel if not 0 <= j < ncarry]
    if bad or len(set(sel)) != len(sel):
        raise ValueError(f"sdfg_scan.scan: carries {carries!r} must be distinct slot indices in [0, {ncarry}) "
                         f"(init has {ncarry} slot(s))")
    return sorted(sel)


def _scan_carry_dtype(init, x0):
    if isinstance(init, np.generic):   # a NumPy scalar has its dtype (np.float64 subclasses float)
        return init.dtype
    if isinstance(init, bool):
        return np.dtype(np.bool_)
    if isinstance(init, (int, float)) and not isinstance(init, np.ndarray):
        if x0 is not None and np.issubdtype(np.asarray(x0).dtype, np.floating):
            return np.asarray(x0).dtype
        return np.dtype(np.float64)
    return np.asarray(init).dtype


@_replaces("sdfg_scan.scan", "sdfg_scan.frontend.scan")
def _lower_scan(pv, sdfg, state, f, init, xs, axis=-1, reverse=False, emit="inclusive", final=False, fill=0.0,
                carries=None):
    from sdfg_scan.expansions.scan_body import build_body, translate

    api = "scan"
    xs_t = tuple(xs) if isinstance(xs, (tuple, list)) else (xs,)
    init_t = tuple(init) if isinstance(init, (tuple, list)) else (init,)
    if not xs_t:
        raise ValueError("sdfg_scan.scan: inside a program the scan needs at least one per-level input")
    descs = [input_desc(sdfg, x, api) for x in xs_t]
    shape = list(descs[0].shape)
    for i, (x, d) in enumerate(zip(xs_t, descs, strict=True)):
        if not same_shape(d.shape, shape):
            raise ValueError(f"sdfg_scan.scan: xs[{i}] '{x}' has shape {tuple(d.shape)}, expected the shape of "
                             f"xs[0] '{xs_t[0]}' {tuple(shape)}; every per-level input has one shape (read other "
                             f"levels with offsets in the body, x[i, o])")
    ax = axis_argument(axis, len(shape), api)
    reverse, final = bool(literal(reverse, api)), bool(literal(final, api))
    emit, fill = literal(emit, "op"), literal(fill, api)
    if carries is not None and not isinstance(carries, int):
        carries = tuple(literal(c, api) for c in carries)
    keep = _carry_slots(carries, len(init_t))
    colshape = shape[:ax] + shape[ax + 1:]
    x0dt = descs[0].dtype
    inits, cdts = [], []
    for v in init_t:
        v = getattr(v, "value", v)
        if isinstance(v, str):
            d = sdfg.arrays[v]
            inits.append(d.dtype)
            cdts.append(d.dtype)
        else:
            inits.append(v)
            cdts.append(dace.bool_ if isinstance(v, bool) else
                        (x0dt if x0dt in (dace.float32, dace.float64) else dace.float64))
    code = translate(f, len(init_t), len(xs_t), fill, [d.dtype for d in descs])
    ydts = [cdts[0] if cdts else x0dt] * code.ny
    body, ins, outs = build_body(f"scan_{getattr(f, '__name__', 'body')}", code, [d.dtype for d in descs],
                                 inits, cdts, ydts, reverse, emit, final, set(keep))
    node = Scan("scan", body, ins, outs, columns="map", axis=ax, emit=emit)
    inputs = {f"xs{i}": x for i, x in enumerate(xs_t)}
    produced = {}
    for j, v in enumerate(init_t):
        if f"init{j}" in ins:  # an init array, or a scalar given to every column
            inputs[f"init{j}"], written = kless_init(sdfg, state, getattr(v, "value", v), colshape)
            produced.update(written)
    outputs, results = {}, []
    n = shape[ax]
    for conn in outs:
        kind, j = conn.rstrip("0123456789"), int(conn[len(conn.rstrip("0123456789")):])
        if kind in ("carry", "ys"):
            m = n + 1 if (kind == "carry" and emit == "include_initial") else n
            oshape = shape[:ax] + [m] + shape[ax + 1:]
            dt = cdts[j] if kind == "carry" else ydts[j]
        else:
            oshape, dt = (colshape or [1]), cdts[j]
        name, _ = sdfg.add_temp_transient(oshape, dt)
        outputs[conn] = name
    add_node(sdfg, state, node, inputs, outputs, produced)
    order = [c for c in outs if c.startswith("carry")] + [c for c in outs if c.startswith("ys")] + \
        [c for c in outs if c.startswith("final")]
    results = [outputs[c] for c in order]
    return results[0] if len(results) == 1 else tuple(results)


__all__ += ["scan", "window_reduce"]
