"""NumPy reference semantics of every sdfg_scan node: the test oracle.

Every function here is a plain loop over the scan axis, vectorised over the independent columns
(all other axes). The arithmetic of one level is exactly the arithmetic the sequential expansions
perform (no FMA, no reassociation), so sequential expansions are compared with these functions
bitwise.

Axis convention: ``axis`` may be negative (``-1`` = last axis). Backward scans (``reverse=True``)
run from the last level to the first and keep their outputs index-aligned with the inputs:
``out[..., k]`` always belongs to level ``k``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

EMIT_MODES = ("inclusive", "exclusive", "include_initial")
CUMULATIVE_OPS = ("sum", "prod", "min", "max")


def _axis(x: np.ndarray, axis: int) -> int:
    if not -x.ndim <= axis < x.ndim:
        raise ValueError(f"sdfg_scan.reference: axis {axis} is out of range for an array of rank {x.ndim}")
    return axis % x.ndim


def _level(x: np.ndarray, axis: int, k: int) -> np.ndarray:
    return np.take(x, k, axis=axis)


def _set_level(out: np.ndarray, axis: int, k: int, value: Any) -> None:
    idx: list[slice | int] = [slice(None)] * out.ndim
    idx[axis] = k
    out[tuple(idx)] = value


def identity(op: str, dtype: np.dtype) -> Any:
    """Identity element of a cumulative ``op`` for ``dtype`` (the first value of an exclusive scan)."""
    dtype = np.dtype(dtype)
    if op == "sum":
        return dtype.type(0)
    if op == "prod":
        return dtype.type(1)
    if op in ("min", "max"):
        if np.issubdtype(dtype, np.floating):
            return dtype.type(np.inf if op == "min" else -np.inf)
        info = np.iinfo(dtype)
        return dtype.type(info.max if op == "min" else info.min)
    raise ValueError(f"sdfg_scan.reference: unknown cumulative op '{op}'; expected one of {CUMULATIVE_OPS}")


def combine(op: str, a: Any, b: Any) -> Any:
    """``a (op) b`` elementwise, in the operand order the expansions use (carry first)."""
    if op == "sum":
        return a + b
    if op == "prod":
        return a * b
    if op == "min":
        return np.minimum(a, b)
    if op == "max":
        return np.maximum(a, b)
    raise ValueError(f"sdfg_scan.reference: unknown cumulative op '{op}'; expected one of {CUMULATIVE_OPS}")


def levels(n: int, reverse: bool) -> range:
    """The order in which a scan visits the levels ``0 .. n-1``."""
    return range(n - 1, -1, -1) if reverse else range(n)


def cumulative(x: np.ndarray, op: str = "sum", axis: int = -1, reverse: bool = False,
               exclusive: bool = False) -> np.ndarray:
    """Cumulative ``op`` along ``axis``.

    Reference loop (one column, forward, inclusive)::

        carry = x[0]; out[0] = carry
        for k in range(1, n): carry = carry (op) x[k]; out[k] = carry

    ``exclusive`` shifts by one level and starts from the identity of ``op`` (0, 1, +inf, -inf;
    the integer extremes for integer dtypes). ``reverse`` runs from the last level down.
    """
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
                      init: Any = None) -> np.ndarray:
    """``y[k] = a[k] * y[k-1] + b[k]`` with ``y[-1] = init`` (0 when ``init`` is None).

    ``init`` is a scalar or a K-less array (the shape of ``a`` without ``axis``). Backward
    (``reverse=True``): ``y[k] = a[k] * y[k+1] + b[k]`` with ``y[n] = init``. The product is
    rounded before the sum (no fused multiply-add).
    """
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
    slot ``k`` is always the interface above level ``k`` in the direction of travel.

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
        first = next(iter(arrays.values()))
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
    return carries, tuple(ys or ()), carry


# ---------------------------------------------------------------------------------------------
# TridiagonalSolve / TridiagonalFactor
# ---------------------------------------------------------------------------------------------

def _same_shapes(names: Sequence[str], arrays: Sequence[np.ndarray]) -> None:
    for name, arr in zip(names[1:], arrays[1:], strict=True):
        if arr.shape != arrays[0].shape:
            raise ValueError(f"sdfg_scan.reference: '{name}' has shape {arr.shape}, expected the shape of "
                             f"'{names[0]}' {arrays[0].shape}")


def tridiagonal_factor(a: np.ndarray, b: np.ndarray, c: np.ndarray, axis: int = -1
                       ) -> tuple[np.ndarray, np.ndarray]:
    """Factor the tridiagonal systems once: inverse pivots ``w`` and modified upper coefficients ``cp``.

    ``tridiagonal_factor :: ([a], [b], [c]) -> ([w], [cp])``. Reference loop (one column)::

        w[0] = 1 / b[0];                          cp[0] = c[0] * w[0]
        for k in range(1, n):
            w[k] = 1 / (b[k] - a[k] * cp[k-1]);   cp[k] = c[k] * w[k]

    ``a[0]`` is never read; ``cp[n-1]`` is computed (from the ignored ``c[n-1]``) but never used by
    :func:`tridiagonal_solve_prefactored`. Products are rounded before sums (no FMA).
    """
    a, b, c = (np.asarray(v) for v in (a, b, c))
    _same_shapes("abc", (a, b, c))
    ax = _axis(b, axis)
    dtype = np.result_type(a, b, c)
    one = dtype.type(1)
    w = np.empty(b.shape, dtype=dtype)
    cp = np.empty(b.shape, dtype=dtype)
    prev = None
    for k in range(b.shape[ax]):
        pivot = _level(b, ax, k) if prev is None else _level(b, ax, k) - _level(a, ax, k) * prev
        wk = one / pivot
        prev = _level(c, ax, k) * wk
        _set_level(w, ax, k, wk)
        _set_level(cp, ax, k, prev)
    return w, cp


def tridiagonal_solve_prefactored(a: np.ndarray, w: np.ndarray, cp: np.ndarray, d: np.ndarray,
                                  axis: int = -1) -> np.ndarray:
    """Solve with a factorisation from :func:`tridiagonal_factor`: the two cheap sweeps only.

    Reference loop (one column)::

        x[0] = d[0] * w[0]
        for k in range(1, n):      x[k] = (d[k] - a[k] * x[k-1]) * w[k]     # forward (x holds d')
        for k in range(n-2, -1, -1): x[k] = x[k] - cp[k] * x[k+1]            # backward
    """
    a, w, cp, d = (np.asarray(v) for v in (a, w, cp, d))
    _same_shapes(("a", "w", "cp", "d"), (a, w, cp, d))
    ax = _axis(d, axis)
    x = np.empty(d.shape, dtype=np.result_type(a, w, cp, d))
    n = d.shape[ax]
    prev = None
    for k in range(n):
        dk = _level(d, ax, k)
        prev = dk * _level(w, ax, k) if prev is None else (dk - _level(a, ax, k) * prev) * _level(w, ax, k)
        _set_level(x, ax, k, prev)
    for k in range(n - 2, -1, -1):
        prev = _level(x, ax, k) - _level(cp, ax, k) * prev
        _set_level(x, ax, k, prev)
    return x


def tridiagonal_solve(a: np.ndarray, b: np.ndarray, c: np.ndarray, d: np.ndarray, axis: int = -1) -> np.ndarray:
    """Batched tridiagonal solve along ``axis`` (Thomas algorithm, no pivoting).

    ``tridiagonal_solve :: ([a], [b], [c], [d]) -> [x]`` with, per column,
    ``a[k]*x[k-1] + b[k]*x[k] + c[k]*x[k+1] = d[k]``; ``a[0]`` and ``c[n-1]`` are ignored. Reference
    loop (one column; the pivot is inverted once and multiplied, as ICON does)::

        w = 1 / b[0];  cp[0] = c[0] * w;  x[0] = d[0] * w
        for k in range(1, n):
            w = 1 / (b[k] - a[k] * cp[k-1])
            cp[k] = c[k] * w
            x[k] = (d[k] - a[k] * x[k-1]) * w
        for k in range(n-2, -1, -1):
            x[k] = x[k] - cp[k] * x[k+1]

    Bitwise equal to ``tridiagonal_solve_prefactored(a, *tridiagonal_factor(a, b, c), d)``. Stable
    for diagonally dominant systems (no pivoting).
    """
    w, cp = tridiagonal_factor(a, b, c, axis)
    return tridiagonal_solve_prefactored(a, w, cp, d, axis)


# -- ColumnReduce / WindowReduce ------------------------------------------------------------------

REDUCE_OPS = ("sum", "prod", "min", "max", "argmin", "argmax", "any", "all")
REDUCE_ORDERS = ("sequential", "tree", "lanes")


def reduce_identity(op: str, dtype: np.dtype) -> Any:
    """Start value of a column reduction of ``op`` over ``dtype`` (the result for an empty column).

    ``sum`` starts from ``-0.0`` (the IEEE additive identity: ``-0.0 + x == x`` bitwise for every
    ``x``), so a sum is exactly the left-to-right fold of its terms and an empty float sum is
    ``-0.0`` (equal to 0). ``argmin``/``argmax`` of an empty column is ``-1``; ``any`` is False,
    ``all`` True.
    """
    dtype = np.dtype(dtype)
    if op == "sum" and np.issubdtype(dtype, np.floating):
        return dtype.type(-0.0)
    if op in ("sum", "prod", "min", "max"):
        return identity(op, dtype)
    if op in ("argmin", "argmax"):
        return np.int64(-1)
    if op in ("any", "all"):
        return np.bool_(op == "all")
    raise ValueError(f"sdfg_scan.reference: unknown reduction op '{op}'; expected one of {REDUCE_OPS}")


def _beats(op: str, cand: np.ndarray, cur: np.ndarray, later_wins_ties: bool) -> np.ndarray:
    """Whether ``cand`` replaces ``cur`` in a min/max/argmin/argmax selection (NaN is the extreme)."""
    cand_nan, cur_nan = cand != cand, cur != cur
    if later_wins_ties:  # a backward fold visits lower indices later: ties and NaNs go to them
        better = (cand <= cur) if op in ("min", "argmin") else (cand >= cur)
        return better | cand_nan
    better = (cand < cur) if op in ("min", "argmin") else (cand > cur)
    return better | (cand_nan & ~cur_nan)


def _reduce_inputs(x, op, axis, mask, levels):
    if op not in REDUCE_OPS:
        raise ValueError(f"sdfg_scan.reference: unknown reduction op '{op}'; expected one of {REDUCE_OPS}")
    x = np.asarray(x)
    ax = _axis(x, axis)
    n = x.shape[ax]
    colshape = x.shape[:ax] + x.shape[ax + 1:]
    valid = np.ones(x.shape, dtype=bool)
    if mask is not None:
        mask = np.asarray(mask)
        if mask.shape != x.shape or mask.dtype != np.bool_:
            raise ValueError(f"sdfg_scan.reference: mask must be a bool array of shape {x.shape}, "
                             f"got {mask.dtype} {mask.shape}")
        valid &= mask
    if levels is not None:
        levels = np.asarray(levels)
        if levels.shape != colshape or not np.issubdtype(levels.dtype, np.integer):
            raise ValueError(f"sdfg_scan.reference: levels must be an integer array of the K-less shape "
                             f"{colshape}, got {levels.dtype} {levels.shape}")
        if levels.size and (levels.min() < 0 or levels.max() > n):
            raise ValueError(f"sdfg_scan.reference: levels must lie in [0, {n}], got values in "
                             f"[{levels.min()}, {levels.max()}]")
        kk = np.arange(n).reshape([n if d == ax else 1 for d in range(x.ndim)])
        valid &= kk < np.expand_dims(levels, ax)
    return x, ax, n, colshape, valid


def _result_dtype(op: str, dtype: np.dtype) -> np.dtype:
    if op in ("argmin", "argmax"):
        return np.dtype(np.int64)
    return np.dtype(np.bool_) if op in ("any", "all") else np.dtype(dtype)


def column_fold(x: np.ndarray, op: str = "sum", axis: int = -1, mask: np.ndarray | None = None,
                levels: np.ndarray | None = None, reverse: bool = False) -> np.ndarray:
    """Order-pinned reduction of ``x`` along ``axis`` (the ``sequential`` expansions of ``ColumnReduce``).

    Reference loop (one column; ``valid(k) = mask[k] and k < levels``)::

        acc = reduce_identity(op); idx = -1
        for k in range(n):                    # reverse: range(n - 1, -1, -1)
            if not valid(k): continue
            sum/prod: acc = acc + x[k] / acc * x[k]
            any/all:  acc = acc or x[k] != 0 / acc and x[k] != 0
            min/max/argmin/argmax: if idx < 0 or beats(x[k], acc): acc, idx = x[k], k
        return idx if op is argmin/argmax else acc

    ``beats`` is ``<`` (``>`` for max) or "``x[k]`` is NaN and ``acc`` is not": the result is the
    *first* (lowest-index) extreme value, and the first NaN if there is one (like ``np.argmin``).
    ``min``/``max`` return the value at that index (so ``-0.0`` vs ``0.0`` ties keep the first).
    A backward fold lets ties go to the later-visited lower index, so only ``sum``/``prod`` bits
    depend on ``reverse``. Empty columns give :func:`reduce_identity`. ``levels`` values must lie in
    ``[0, n]`` (ValueError here; generated code treats larger values as ``n`` and negative ones as 0).
    """
    x, ax, n, colshape, valid = _reduce_inputs(x, op, axis, mask, levels)
    acc = np.full(colshape, reduce_identity(op if op not in ("argmin", "argmax") else op[3:], x.dtype),
                  dtype=x.dtype if op not in ("any", "all") else np.bool_)
    idx = np.full(colshape, -1, dtype=np.int64)
    for k in levels_order(n, reverse):
        xk, vk = _level(x, ax, k), _level(valid, ax, k)
        if op == "sum":
            acc = np.where(vk, acc + xk, acc)
        elif op == "prod":
            acc = np.where(vk, acc * xk, acc)
        elif op == "any":
            acc = acc | (vk & (xk != 0))
        elif op == "all":
            acc = acc & (~vk | (xk != 0))
        else:
            take = vk & ((idx < 0) | _beats(op, xk, acc, reverse))
            acc = np.where(take, xk, acc)
            idx = np.where(take, k, idx)
    return (idx if op in ("argmin", "argmax") else acc).astype(_result_dtype(op, x.dtype))


def _lanes_fold(x, op, axis, mask, levels, lanes: int) -> np.ndarray:
    if lanes < 1:
        raise ValueError(f"sdfg_scan.reference: lanes must be >= 1, got {lanes}")
    x, ax, n, colshape, valid = _reduce_inputs(x, op, axis, mask, levels)
    part = [np.full(colshape, reduce_identity(op, x.dtype), dtype=x.dtype) for _ in range(lanes)]
    for k in range(n):
        xk, vk = _level(x, ax, k), _level(valid, ax, k)
        lane = part[k % lanes]
        part[k % lanes] = np.where(vk, lane + xk if op == "sum" else lane * xk, lane)
    acc = part[0]
    for p in part[1:]:
        acc = acc + p if op == "sum" else acc * p
    return acc.astype(_result_dtype(op, x.dtype))


def levels_order(n: int, reverse: bool) -> range:
    """The order in which a fold visits the levels (alias of :func:`levels` for reductions)."""
    return levels(n, reverse)


def column_reduce(x: np.ndarray, op: str = "sum", axis: int = -1, mask: np.ndarray | None = None,
                  levels: np.ndarray | None = None, order: str = "tree", lanes: int = 8) -> np.ndarray:
    """Reduction of ``x`` along ``axis`` with ``op`` in :data:`REDUCE_OPS`, in a pinned ``order``.

    ``order="lanes"`` (the ``lanes`` expansions) folds level ``k`` into partial result ``k % lanes``
    (each lane a forward sequential fold from the identity, skipping invalid levels), then folds the
    lanes in lane order: ``((p0 (op) p1) (op) p2) ...``. Only sum/prod bits depend on it; the other ops
    give exactly the sequential fold.

    ``order="sequential"`` is :func:`column_fold`. ``order="tree"`` (the ``tree`` expansions) is the
    fixed pairwise tree whose shape depends only on the level count ``n``: the stack form of
    stride-doubling pairwise reduction. Reference loop (one column; invalid levels push the
    identity, so the tree shape never depends on the mask)::

        stack = []
        for k in range(n):
            stack.append(x[k] if valid(k) else identity)
            m = k + 1
            while m % 2 == 0:                       # merge the two top entries
                b = stack.pop(); a = stack.pop(); stack.append(a (op) b); m //= 2
        while len(stack) > 1:
            b = stack.pop(); a = stack.pop(); stack.append(a (op) b)
        return stack[0] if stack else identity

    (``n = 4``: ``(x0 + x1) + (x2 + x3)``; ``n = 3``: ``(x0 + x1) + x2``.) For min/max/argmin/argmax,
    any and all the tree gives exactly the fold's result (the selection keeps the first extreme).
    """
    if order not in REDUCE_ORDERS:
        raise ValueError(f"sdfg_scan.reference: order must be one of {REDUCE_ORDERS}, got '{order}'")
    if order == "sequential" or (order == "lanes" and op not in ("sum", "prod")):
        return column_fold(x, op, axis, mask, levels)
    if order == "lanes":
        return _lanes_fold(x, op, axis, mask, levels, lanes)
    x, ax, n, colshape, valid = _reduce_inputs(x, op, axis, mask, levels)
    sel = op if op not in ("min", "max") else "arg" + op
    ident = reduce_identity(sel[3:] if sel.startswith("arg") else op, x.dtype)
    vdtype = np.bool_ if op in ("any", "all") else x.dtype

    def combine2(a, b):
        (av, ai), (bv, bi) = a, b
        if op == "sum":
            return av + bv, ai
        if op == "prod":
            return av * bv, ai
        if op == "any":
            return av | bv, ai
        if op == "all":
            return av & bv, ai
        take = (bi >= 0) & ((ai < 0) | _beats(sel, bv, av, False))
        return np.where(take, bv, av), np.where(take, bi, ai)

    stack: list = []
    for k in range(n):
        xk, vk = _level(x, ax, k), _level(valid, ax, k)
        if op in ("any", "all"):
            val = np.where(vk, xk != 0, op == "all")
        else:
            val = np.where(vk, xk, np.asarray(ident, dtype=x.dtype))
        stack.append((val.astype(vdtype), np.where(vk, k, -1).astype(np.int64)))
        m = k + 1
        while m % 2 == 0:
            b = stack.pop()
            stack.append(combine2(stack.pop(), b))
            m //= 2
    while len(stack) > 1:
        b = stack.pop()
        stack.append(combine2(stack.pop(), b))
    if not stack:
        acc = np.full(colshape, ident if op not in ("any", "all") else op == "all", dtype=vdtype)
        idx = np.full(colshape, -1, dtype=np.int64)
    else:
        acc, idx = (np.asarray(v).reshape(colshape) for v in stack[0])
    return (idx if op in ("argmin", "argmax") else acc).astype(_result_dtype(op, x.dtype))


def window_reduce(x: np.ndarray, weights: Sequence[float], offsets: Sequence[int], axis: int = -1,
                  body: Callable[[list, list, int], Any] | None = None) -> np.ndarray:
    """``out[k] = sum_j w[j] * x[k + o[j]]`` along ``axis``, out-of-column terms skipped.

    Reference loop (one column)::

        for k in range(n):
            acc = -0.0                          # the IEEE additive identity
            for j in range(len(o)):             # in the given order of the offsets
                if 0 <= k + o[j] < n:
                    acc = acc + w[j] * x[k + o[j]]   # w[j] rounded to x's dtype; no FMA
            out[k] = acc

    A level whose whole window lies outside the column gets ``-0.0``. With ``body``, ``out[k] =
    body(vals, valid, k)`` instead, where ``vals[j]`` is ``x[k + o[j]]`` (0 outside the column; a
    K-less array) and ``valid[j]`` the bool ``0 <= k + o[j] < n``.
    """
    x = np.asarray(x)
    offsets = [int(o) for o in offsets]
    if not offsets:
        raise ValueError("sdfg_scan.reference.window_reduce: offsets must not be empty")
    if body is None and len(weights) != len(offsets):
        raise ValueError(f"sdfg_scan.reference.window_reduce: {len(weights)} weights for {len(offsets)} offsets; "
                         f"give one weight per offset")
    ax = _axis(x, axis)
    n = x.shape[ax]
    out = np.empty_like(x)
    zero = np.zeros(x.shape[:ax] + x.shape[ax + 1:], dtype=x.dtype)
    for k in range(n):
        inside = [0 <= k + o < n for o in offsets]
        if body is not None:
            vals = [_level(x, ax, k + o) if v else zero for o, v in zip(offsets, inside, strict=True)]
            _set_level(out, ax, k, body(vals, inside, k))
            continue
        acc = np.full(zero.shape, -0.0, dtype=x.dtype)
        for w, o, v in zip(weights, offsets, inside, strict=True):
            if v:
                acc = acc + x.dtype.type(w) * _level(x, ax, k + o)
        _set_level(out, ax, k, acc)
    return out
