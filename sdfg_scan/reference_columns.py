"""NumPy reference semantics of ``ColumnReduce`` and ``WindowReduce``: the test oracle.

Column reductions in each pinned order (``sequential`` fold, pairwise ``tree``, ``lanes``) and
weighted windows along ``axis``, vectorised over the independent columns, with the arithmetic of
the expansions. Re-exported by :mod:`sdfg_scan.reference`, whose axis convention and level helpers
it uses.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from sdfg_scan.reference_levels import _axis, _level, _set_level, identity, levels

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


def window_weight_kind(x_ndim: int, w_ndim: int) -> str:
    """How a weights array of rank ``w_ndim`` maps onto an ``x`` of rank ``x_ndim`` (``window_reduce``).

    ``"vector"`` (``(J,)``), ``"columns"`` (the shape of ``x`` without the level axis, then ``J``) or
    ``"levels"`` (the shape of ``x``, then ``J``); anything else raises ``ValueError``."""
    kinds = {x_ndim + 1: "levels", x_ndim: "columns", 1: "vector"}  # a 1-d x: (J,) is the vector form
    if w_ndim not in kinds:
        raise ValueError(f"sdfg_scan.window_reduce: weights of rank {w_ndim} do not fit an input of rank {x_ndim}; "
                         f"expected rank 1 (J,), {x_ndim} (column shape + (J,)) or {x_ndim + 1} "
                         f"(input shape + (J,))")
    return kinds[w_ndim]


def window_reduce(x: np.ndarray, weights: Sequence[float] | np.ndarray, offsets: Sequence[int], axis: int = -1,
                  body: Callable[[list, list, int], Any] | None = None) -> np.ndarray:
    """``out[..., k] = sum_j w[..., j] * x[..., k + o[j]]`` along ``axis``, out-of-column terms skipped.

    Reference loop (one column)::

        for k in range(n):
            acc = -0.0                          # the IEEE additive identity
            for j in range(len(o)):             # in the given order of the offsets
                if 0 <= k + o[j] < n:
                    acc = acc + w[j] * x[k + o[j]]   # w[j] rounded to x's dtype; no FMA
            out[k] = acc

    ``weights`` is a sequence of ``J = len(offsets)`` numbers or an array whose last axis has length
    ``J`` and whose other axes select the weights of each output element (see
    :func:`window_weight_kind`): rank 1 ``(J,)`` (one weight per offset, as above); the column shape
    ``x.shape`` without ``axis``, then ``J`` (per-column weights ``w[c, j]``); or ``x.shape`` then
    ``J`` (per column and level: the weight of term ``j`` of output level ``k`` is ``w[c, k, j]``,
    taken at the *output* level). Axes of length 1 broadcast. Weights are rounded to ``x``'s dtype.

    A level whose whole window lies outside the column gets ``-0.0``. With ``body``, ``out[k] =
    body(vals, valid, k)`` instead, where ``vals[j]`` is ``x[k + o[j]]`` (0 outside the column; a
    K-less array) and ``valid[j]`` the bool ``0 <= k + o[j] < n``.
    """
    x = np.asarray(x)
    offsets = [int(o) for o in offsets]
    if not offsets:
        raise ValueError("sdfg_scan.reference.window_reduce: offsets must not be empty")
    ax = _axis(x, axis)
    n = x.shape[ax]
    w = None if body is not None else np.asarray(weights).astype(x.dtype)
    if w is not None and (w.ndim == 0 or w.shape[-1] != len(offsets)):
        raise ValueError(f"sdfg_scan.reference.window_reduce: {w.shape[-1] if w.ndim else 0} weights for "
                         f"{len(offsets)} offsets; give one weight per offset")
    if w is not None and w.ndim > 1:
        if window_weight_kind(x.ndim, w.ndim) == "columns":  # per column: put a level axis of length 1 back
            w = np.expand_dims(w, ax)
        w = np.broadcast_to(w, x.shape + (len(offsets),))
    out = np.empty_like(x)
    zero = np.zeros(x.shape[:ax] + x.shape[ax + 1:], dtype=x.dtype)
    for k in range(n):
        inside = [0 <= k + o < n for o in offsets]
        if body is not None:
            vals = [_level(x, ax, k + o) if v else zero for o, v in zip(offsets, inside, strict=True)]
            _set_level(out, ax, k, body(vals, inside, k))
            continue
        assert w is not None
        acc = np.full(zero.shape, -0.0, dtype=x.dtype)
        for j, (o, v) in enumerate(zip(offsets, inside, strict=True)):
            if v:
                wj = w[j] if w.ndim == 1 else _level(w[..., j], ax, k)
                acc = acc + wj * _level(x, ax, k + o)
        _set_level(out, ax, k, acc)
    return out
