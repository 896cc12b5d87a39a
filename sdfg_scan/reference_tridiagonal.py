"""NumPy reference semantics of ``TridiagonalFactor`` / ``TridiagonalSolve``: the test oracle.

The batched Thomas algorithm along ``axis``, vectorised over the independent columns, with the
arithmetic of the sequential expansions (products rounded before sums, no FMA). Re-exported by
:mod:`sdfg_scan.reference`, whose axis convention and level helpers it uses.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from sdfg_scan.reference_levels import _axis, _level, _set_level


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
