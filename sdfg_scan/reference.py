"""NumPy reference semantics of the sdfg_scan scan nodes: the test oracle.

Every function here is a plain loop over the scan axis, vectorised over the independent columns
(all other axes). The arithmetic of one level is exactly the arithmetic the sequential expansions
perform (no FMA, no reassociation), so sequential expansions are compared with these functions
bitwise.

Axis convention: ``axis`` may be negative (``-1`` = last axis). Backward scans (``reverse=True``)
run from the last level to the first and keep their outputs index-aligned with the inputs:
``out[..., k]`` always belongs to level ``k``.

This module holds the scans (``cumulative``, ``linear_recurrence``, ``scan``); the level helpers
they share with the others are in :mod:`sdfg_scan.reference_levels`. The column-pattern references live beside it and are re-exported here, so
``reference.<name>`` stays the one oracle namespace: :mod:`sdfg_scan.reference_tridiagonal`
(``tridiagonal_factor``, ``tridiagonal_solve_prefactored``, ``tridiagonal_solve``) and
:mod:`sdfg_scan.reference_columns` (``column_reduce``, ``column_fold``, ``window_reduce``, ...).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

# the column patterns' references, reachable as ``reference.<name>`` (the code base and tests use them so)
from sdfg_scan.reference_columns import (  # noqa: F401
    REDUCE_OPS,
    REDUCE_ORDERS,
    column_fold,
    column_reduce,
    levels_order,
    reduce_identity,
    window_reduce,
)
from sdfg_scan.reference_levels import (  # noqa: F401
    CUMULATIVE_OPS,
    _axis,
    _level,
    _set_level,
    combine,
    identity,
    levels,
)
from sdfg_scan.reference_prefix import (  # noqa: F401
    associative_scan,
    cumulative_chunked,
    linear_recurrence_chunked,
)
from sdfg_scan.reference_tridiagonal import (  # noqa: F401
    tridiagonal_factor,
    tridiagonal_solve,
    tridiagonal_solve_prefactored,
)

EMIT_MODES = ("inclusive", "exclusive", "include_initial")
ORDERS = ("sequential", "chunked")


def _chunked(order: str, chunk: int | None) -> bool:
    if order not in ORDERS:
        raise ValueError(f"sdfg_scan.reference: order must be one of {ORDERS}, got '{order}'")
    if order == "chunked" and chunk is None:
        raise ValueError("sdfg_scan.reference: order='chunked' needs chunk= (levels per chunk)")
    return order == "chunked"


def cumulative(x: np.ndarray, op: str = "sum", axis: int = -1, reverse: bool = False,
               exclusive: bool = False, order: str = "sequential", chunk: int | None = None) -> np.ndarray:
    """Cumulative ``op`` along ``axis``.

    Reference loop (one column, forward, inclusive)::

        carry = x[0]; out[0] = carry
        for k in range(1, n): carry = carry (op) x[k]; out[k] = carry

    ``exclusive`` shifts by one level and starts from the identity of ``op`` (0, 1, +inf, -inf;
    the integer extremes for integer dtypes). ``reverse`` runs from the last level down.
    ``order="chunked"`` with ``chunk=C`` is the pinned order of the ``parallel_prefix`` expansion
    (:mod:`sdfg_scan.reference_prefix`).
    """
    if _chunked(order, chunk):
        return cumulative_chunked(x, op, axis, reverse, exclusive, chunk=chunk)  # type: ignore[arg-type]
    x = np.asarray(x)
    ax = _axis(x, axis)
    out = np.empty_like(x)
    n = x.shape[ax]
    carry = None
    for k in levels(n, reverse):
        xk = _level(x, ax, k)
        if exclusive:
            prev = np.full_like(xk, identity(op, x.dtype)) if carry is None else carry
            _set_level(out, ax, k, prev)
            carry = combine(op, prev, xk)
        else:
            carry = xk.copy() if carry is None else combine(op, carry, xk)
            _set_level(out, ax, k, carry)
    return out


def linear_recurrence(a: np.ndarray, b: np.ndarray, axis: int = -1, reverse: bool = False,
                      init: Any = None, order: str = "sequential", chunk: int | None = None) -> np.ndarray:
    """``y[k] = a[k] * y[k-1] + b[k]`` with ``y[-1] = init`` (0 when ``init`` is None).

    ``init`` is a scalar or a K-less array (the shape of ``a`` without ``axis``). Backward
    (``reverse=True``): ``y[k] = a[k] * y[k+1] + b[k]`` with ``y[n] = init``. The product is
    rounded before the sum (no fused multiply-add). ``order="chunked"`` with ``chunk=C``: the pinned
    order of the ``parallel_prefix`` expansion (:mod:`sdfg_scan.reference_prefix`).
    """
    if _chunked(order, chunk):
        return linear_recurrence_chunked(a, b, axis, reverse, init, chunk=chunk)  # type: ignore[arg-type]
    a = np.asarray(a)
    b = np.asarray(b)
    if a.shape != b.shape:
        raise ValueError(f"sdfg_scan.reference: a and b must have the same shape, got {a.shape} and {b.shape}")
    ax = _axis(a, axis)
    dtype = np.result_type(a, b)
    out = np.empty(a.shape, dtype=dtype)
    colshape = a.shape[:ax] + a.shape[ax + 1:]
    y = np.zeros(colshape, dtype=dtype)
    if init is not None:
        y = np.broadcast_to(np.asarray(init, dtype=dtype), colshape).copy()
    for k in levels(a.shape[ax], reverse):
        prod = _level(a, ax, k) * y
        y = prod + _level(b, ax, k)
        _set_level(out, ax, k, y)
    return out


class LevelInputs(Mapping):
    """What a general scan body sees of its inputs at level ``k``.

    ``x["t"]`` is input ``t`` at level ``k``; ``x["t", -1]`` is ``t`` at level ``k - 1``. An
    offset read outside the column (``k + o < 0`` or ``k + o >= n``) is *skipped*: it returns the
    scan's ``fill`` value (0 unless given), so that sums skip the missing term. Bodies that need
    another boundary rule branch on the level index ``k`` they are given.
    """

    def __init__(self, xs: Mapping[str, np.ndarray], axis: int, k: int, n: int, fill: Any):
        self._xs, self._axis, self._k, self._n, self._fill = xs, axis, k, n, fill

    def __getitem__(self, key):
        name, off = key if isinstance(key, tuple) else (key, 0)  # names may be str or int positions
        arr = self._xs[name]
        lvl = self._k + off
        if 0 <= lvl < self._n:
            return _level(arr, self._axis, lvl)
        return np.full(arr.shape[:self._axis] + arr.shape[self._axis + 1:], self._fill, dtype=arr.dtype)

    def __iter__(self):
        return iter(self._xs)

    def __len__(self):
        return len(self._xs)


def scan(f: Callable[[tuple, LevelInputs, int], tuple[tuple, tuple]], init: Sequence[Any],
         xs: Mapping[Any, np.ndarray], *, axis: int = -1, reverse: bool = False, emit: str = "inclusive",
         fill: Any = 0, num_levels: int | None = None, dtypes: Sequence[Any] | None = None
         ) -> tuple[tuple[np.ndarray, ...], tuple[np.ndarray, ...], tuple[np.ndarray, ...]]:
    """General scan with a carry: ``scan :: (c -> x -> k -> (c, y)) -> c -> [x] -> ([c], [y], c)``.

    Reference loop (one column, forward)::

        carry = init
        for k in range(n):
            before = carry
            carry, y = f(carry, x_at(k), k)
            carries[k] = carry            # emit="inclusive"
            # emit="exclusive": carries[k] = before; "include_initial": n+1 slots, init first
            ys[k] = y
        return carries, ys, carry         # the final carry (fold form)

    Unlike that loop, this function works on all columns at once (``f`` gets column vectors:
    write it with elementwise NumPy operations) and ``reverse=True`` visits ``k = n-1 .. 0``
    while keeping every output index-aligned with its level. For ``include_initial`` the
    ``n + 1`` slots are ``[init, inclusive...]`` forward and ``[inclusive..., init]`` backward, so
    slot ``k`` is always the interface above level ``k`` in the direction of travel. Over no level
    (``n == 0``) the ys are empty arrays, as many as ``f`` returns (it is called once to count them).

    :param f: body ``f(carry, x, k) -> (new_carry, ys)``; ``carry`` and ``ys`` are tuples.
    :param init: one value per carry slot: scalar or K-less array.
    :param xs: named inputs, all of the same shape (the scan axis included).
    :param fill: value of offset reads outside the column (see :class:`LevelInputs`).
    :param num_levels: level count when ``xs`` is empty.
    :param dtypes: dtype per carry slot (default: the dtype of ``init``).
    :returns: ``(carry_outputs, y_outputs, final_carry)``.
    """
    if emit not in EMIT_MODES:
        raise ValueError(f"sdfg_scan.reference.scan: unknown emit mode '{emit}'; expected one of {EMIT_MODES}")
    arrays = {k: np.asarray(v) for k, v in xs.items()}
    if arrays:
        name0, first = next(iter(arrays.items()))
        for name, arr in arrays.items():
            if arr.shape != first.shape:
                raise ValueError(f"sdfg_scan.reference.scan: input {name!r} has shape {arr.shape}, expected the "
                                 f"shape {first.shape} of input {name0!r}; every input has one shape")
        ax = _axis(first, axis)
        n = first.shape[ax]
        colshape = first.shape[:ax] + first.shape[ax + 1:]
    else:
        if num_levels is None:
            raise ValueError("sdfg_scan.reference.scan: without inputs, num_levels is required")
        n, ax = num_levels, 0
        colshape = np.broadcast_shapes(*(np.shape(i) for i in init))
    if dtypes is None:
        dtypes = [np.asarray(i).dtype for i in init]
    try:
        return _scan_levels(f, init, arrays, ax, n, colshape, reverse, emit, fill, dtypes)
    except ValueError as e:   # a body written for one column (``a if x[0] > 0 else b``, ``min``, chains)
        if not colshape or "truth value of an" not in str(e):
            raise
        return _scan_per_column(f, init, arrays, ax, n, colshape, reverse, emit, fill, dtypes)


def _scan_per_column(f: Callable, init: Sequence[Any], arrays: Mapping[Any, np.ndarray], ax: int, n: int,
                     colshape: tuple, reverse: bool, emit: str, fill: Any, dtypes: Sequence[Any]):
    """:func:`scan` one column at a time, for bodies whose Python control flow needs one value per
    column (a conditional expression, builtin ``min``/``max``, a chained comparison): the same loop, the
    body given 0-d values. The results are assembled in the shapes the all-columns loop gives."""
    def column(col):
        if col is None:   # no column: one of zeros tells the results' dtypes
            xs1 = {name: np.zeros(n, dtype=arr.dtype) for name, arr in arrays.items()}
            init1 = [np.zeros((), dtype=dt) for dt in dtypes]
        else:
            xs1 = {name: arr[col[:ax] + (slice(None),) + col[ax:]] for name, arr in arrays.items()}
            init1 = [np.broadcast_to(np.asarray(i, dtype=dt), colshape)[col] for i, dt in zip(init, dtypes, strict=True)]
        with np.errstate(all="ignore") if col is None else contextlib.nullcontext():
            return _scan_levels(f, init1, xs1, 0, n, (), reverse, emit, fill, dtypes)

    cols = list(np.ndindex(*colshape))
    first = column(cols[0] if cols else None)
    results = tuple([np.empty(colshape[:ax] + a.shape + colshape[ax:], dtype=a.dtype) for a in part]
                    for part in first[:2]) + ([np.empty(colshape, dtype=a.dtype) for a in first[2]],)
    for i, col in enumerate(cols):
        for part_all, part_one in zip(results, first if i == 0 else column(col), strict=True):
            for dst, src in zip(part_all, part_one, strict=True):
                dst[col[:ax] + (slice(None),) * src.ndim + col[ax:]] = src
    return tuple(results[0]), tuple(results[1]), tuple(results[2])


def _scan_levels(f: Callable, init: Sequence[Any], arrays: Mapping[Any, np.ndarray], ax: int, n: int,
                 colshape: tuple, reverse: bool, emit: str, fill: Any, dtypes: Sequence[Any]):
    """:func:`scan`'s loop over the levels, every column at once."""
    carry = tuple(np.broadcast_to(np.asarray(i, dtype=dt), colshape).copy() for i, dt in zip(init, dtypes, strict=True))
    nout = n + 1 if emit == "include_initial" else n
    outshape = colshape[:ax] + (nout,) + colshape[ax:]
    carries = tuple(np.empty(outshape, dtype=c.dtype) for c in carry)
    if emit == "include_initial":
        for slot, c in zip(carries, carry, strict=True):
            _set_level(slot, ax, n if reverse else 0, c)
    ys: list[np.ndarray] | None = None
    for k in levels(n, reverse):
        before = carry
        new, y = f(carry, LevelInputs(arrays, ax, k, n, fill), k)
        carry = tuple(np.broadcast_to(np.asarray(v, dtype=c.dtype), colshape).copy()
                      for v, c in zip(new, before, strict=True))
        if ys is None:
            ys = [np.empty(colshape[:ax] + (n,) + colshape[ax:], dtype=np.asarray(v).dtype) for v in y]
        for out, v in zip(ys, y, strict=True):
            _set_level(out, ax, k, v)
        for slot, c, b in zip(carries, carry, before, strict=True):
            if emit == "inclusive":
                _set_level(slot, ax, k, c)
            elif emit == "exclusive":
                _set_level(slot, ax, k, b)
            else:
                _set_level(slot, ax, k if reverse else k + 1, c)
    if ys is None:
        ys = _no_level_ys(f, carry, arrays, ax, colshape, fill)
    return carries, tuple(ys), carry


def _no_level_ys(f: Callable, carry: tuple, arrays: Mapping[Any, np.ndarray], ax: int, colshape: tuple,
                 fill: Any) -> list[np.ndarray]:
    """The per-level outputs of a scan over no level: one empty array per ``y`` of ``f`` (``(..., 0, ...)``
    along the axis, its dtype), so that the results do not depend on the level count. ``f`` is asked once,
    on the initial carry and ``fill`` inputs; what it computes is dropped."""
    with np.errstate(all="ignore"):
        _, y = f(carry, LevelInputs(arrays, ax, 0, 0, fill), 0)
    return [np.empty(colshape[:ax] + (0,) + colshape[ax:], dtype=np.asarray(v).dtype) for v in y]
