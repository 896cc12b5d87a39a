"""NumPy references of the associative scans: the general ``associative_scan`` and the pinned
*chunked* order of the ``parallel_prefix`` expansions.

Chunked order (chunk size ``C``, a node property; never the thread count). The levels are taken
in visiting order (``reverse`` visits ``n-1 .. 0``) and cut into chunks of ``C`` (the last one may
be shorter). With ``combine(c, e)`` the scan's associative step (carry first)::

    T[0] = the sequential scan of chunk 0, from its usual start      # pass 1: chunk totals
    T[j] = e[first of j]; T[j] = combine(T[j], e[k]) for the rest     # (j > 0)
    P[0] = T[0]; P[j] = combine(P[j-1], T[j])                         # pass 2: chunk offsets
    chunk 0: the sequential scan; chunk j > 0: c = P[j-1], then       # pass 3: rescan
             c = combine(c, e[k]) for every level k of the chunk

Chunk 0 is therefore bitwise the sequential scan; every other level differs only by the
reassociation at the chunk boundaries. Exactly associative ops (min/max) give the sequential bits
everywhere.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from sdfg_scan.reference_levels import _axis, _level, _set_level, combine, identity, levels

Carry = tuple


def _chunks(n: int, reverse: bool, chunk: int) -> list[list[int]]:
    if chunk < 1:
        raise ValueError(f"sdfg_scan.reference: chunk must be a positive level count, got {chunk}")
    order = list(levels(n, reverse))
    return [order[j:j + chunk] for j in range(0, n, chunk)]


def chunked_scan(elem: Callable[[int], Carry], step: Callable[[Carry, Carry], Carry],
                 start: Callable[[Carry], Carry], n: int, reverse: bool, chunk: int
                 ) -> list[tuple[int, Carry | None, Carry]]:
    """The chunked order (module docstring) of a scan with element ``elem(k)``, associative
    ``step(c, e)`` and ``start(e)`` (the carry after the first visited level).

    :returns: per visited level ``(k, carry before or None at the very first level, carry after)``.
    """
    parts = _chunks(n, reverse, chunk)
    totals = []
    for j, ks in enumerate(parts):
        c = start(elem(ks[0])) if j == 0 else elem(ks[0])
        for k in ks[1:]:
            c = step(c, elem(k))
        totals.append(c)
    prefix = totals[:1]
    for t in totals[1:]:
        prefix.append(step(prefix[-1], t))
    out: list[tuple[int, Carry | None, Carry]] = []
    for j, ks in enumerate(parts):
        before: Carry | None = prefix[j - 1] if j else None
        for k in ks:
            after = step(before, elem(k)) if before is not None else start(elem(k))
            out.append((k, before, after))
            before = after
    return out


def cumulative_chunked(x: np.ndarray, op: str = "sum", axis: int = -1, reverse: bool = False,
                       exclusive: bool = False, chunk: int = 1, start_from_identity: bool = False) -> np.ndarray:
    """``reference.cumulative`` in the chunked order of ``parallel_prefix`` (module docstring)."""
    x = np.asarray(x)
    ax = _axis(x, axis)
    out = np.empty_like(x)
    ident = identity(op, x.dtype)

    def start(e: Carry) -> Carry:
        return (combine(op, np.full_like(e[0], ident), e[0]),) if start_from_identity else (e[0].copy(),)

    for k, before, after in chunked_scan(lambda k: (_level(x, ax, k),), lambda c, e: (combine(op, c[0], e[0]),),
                                         start, x.shape[ax], reverse, chunk):
        if exclusive:
            _set_level(out, ax, k, np.full_like(after[0], ident) if before is None else before[0])
        else:
            _set_level(out, ax, k, after[0])
    return out


def affine_step(c: Carry, e: Carry) -> Carry:
    """Composition of ``y -> A*y + B`` (earlier, ``c``) with ``y -> a*y + b`` (later, ``e``):
    ``(a*A, a*B + b)``, products rounded before the sum."""
    return (e[0] * c[0], e[0] * c[1] + e[1])


def linear_recurrence_chunked(a: np.ndarray, b: np.ndarray, axis: int = -1, reverse: bool = False,
                              init: Any = None, chunk: int = 1) -> np.ndarray:
    """``reference.linear_recurrence`` in the chunked order: the scan of :func:`affine_step` over
    ``(a[k], b[k])`` pairs, started from ``(a, a*init + b)``; the output is the ``B`` part."""
    a, b = np.asarray(a), np.asarray(b)
    ax = _axis(a, axis)
    dtype = np.result_type(a, b)
    out = np.empty(a.shape, dtype=dtype)
    colshape = a.shape[:ax] + a.shape[ax + 1:]
    y0 = np.broadcast_to(np.asarray(0 if init is None else init, dtype=dtype), colshape)
    for k, _before, after in chunked_scan(lambda k: (_level(a, ax, k), _level(b, ax, k)), affine_step,
                                          lambda e: (e[0], e[0] * y0 + e[1]), a.shape[ax], reverse, chunk):
        _set_level(out, ax, k, after[1])
    return out


def _as_tuple(xs) -> tuple[tuple[np.ndarray, ...], bool]:
    if isinstance(xs, (tuple, list)):
        return tuple(np.asarray(x) for x in xs), True
    return (np.asarray(xs),), False


def associative_scan(fn: Callable, xs, axis: int = -1, reverse: bool = False, order: str = "sequential",
                     chunk: int | None = None):
    """Inclusive scan of ``fn`` along ``axis``; ``fn(earlier, later)`` is declared associative.

    Reference loop (one column, forward; ``xs`` one array or a tuple of arrays of one shape)::

        c = x[0]; out[0] = c
        for k in range(1, n): c = fn(c, x[k]); out[k] = c

    With a tuple ``xs``, ``fn`` takes and returns tuples of that length. ``reverse`` visits the
    levels from the last down (outputs index-aligned), like ``jax.lax.associative_scan``.
    ``order="chunked"`` follows the pinned order of the ``parallel_prefix`` expansion.
    """
    arrays, is_tuple = _as_tuple(xs)
    if not arrays or any(x.shape != arrays[0].shape for x in arrays):
        raise ValueError("sdfg_scan.associative_scan: xs must be one array or a tuple of arrays of one shape, "
                         f"got shapes {[x.shape for x in arrays]}")
    ax = _axis(arrays[0], axis)
    n = arrays[0].shape[ax]

    def step(c: Carry, e: Carry) -> Carry:
        r = fn(c if is_tuple else c[0], e if is_tuple else e[0])
        r = tuple(r) if is_tuple else (r,)
        if len(r) != len(arrays):
            raise ValueError(f"sdfg_scan.associative_scan: fn returned {len(r)} values, expected {len(arrays)}")
        return tuple(np.asarray(v, dtype=x.dtype) for v, x in zip(r, arrays, strict=True))

    outs = tuple(np.empty_like(x) for x in arrays)
    if order not in ("sequential", "chunked"):
        raise ValueError(f"sdfg_scan.associative_scan: order must be 'sequential' or 'chunked', got '{order}'")
    size = n if order == "sequential" or chunk is None else chunk
    for k, _before, after in chunked_scan(lambda k: tuple(_level(x, ax, k) for x in arrays), step,
                                          lambda e: tuple(v.copy() for v in e), n, reverse, max(size, 1)):
        for o, v in zip(outs, after, strict=True):
            _set_level(o, ax, k, v)
    return outs if is_tuple else outs[0]


__all__ = ["affine_step", "associative_scan", "chunked_scan", "cumulative_chunked", "linear_recurrence_chunked"]
