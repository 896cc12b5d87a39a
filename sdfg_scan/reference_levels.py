"""Level helpers shared by the reference modules (:mod:`sdfg_scan.reference`,
:mod:`sdfg_scan.reference_columns`, :mod:`sdfg_scan.reference_tridiagonal`): axis normalisation,
reading/writing one level, the identity and combine of the cumulative ops, the level order."""

from __future__ import annotations

from typing import Any

import numpy as np

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


def _check_ordered(op: str, dtype: np.dtype) -> None:
    """Refuse ``min``/``max`` of complex values (NumPy orders them lexicographically; sdfg_scan does not)."""
    if op in ("min", "max") and np.issubdtype(dtype, np.complexfloating):
        raise TypeError(f"sdfg_scan.reference: cumulative '{op}' of {dtype} values is not supported: complex "
                        f"numbers have no order here (NumPy orders them lexicographically); scan the real part, "
                        f"or use 'sum'/'prod'")


def identity(op: str, dtype: np.dtype) -> Any:
    """Identity element of a cumulative ``op`` for ``dtype`` (the first value of an exclusive scan).

    ``min``/``max``: ``+inf``/``-inf`` for floats, the integer extremes for integers, ``True``/``False``
    for bool (where ``min`` is logical and, ``max`` logical or); complex values are refused."""
    dtype = np.dtype(dtype)
    if op == "sum":
        return dtype.type(0)
    if op == "prod":
        return dtype.type(1)
    if op in ("min", "max"):
        _check_ordered(op, dtype)
        if dtype == np.bool_:
            return np.bool_(op == "min")
        if np.issubdtype(dtype, np.floating):
            return dtype.type(np.inf if op == "min" else -np.inf)
        info = np.iinfo(dtype)
        return dtype.type(info.max if op == "min" else info.min)
    raise ValueError(f"sdfg_scan.reference: unknown cumulative op '{op}'; expected one of {CUMULATIVE_OPS}")


def combine(op: str, a: Any, b: Any) -> Any:
    """``a (op) b`` elementwise, in the operand order the expansions use (carry ``a`` first).

    ``min``/``max`` keep the carry only where it is strictly smaller/larger than ``b`` or NaN, else take
    ``b``::

        max(a, b) = a if (a > b or a != a) else b        # min: a < b

    so NaN propagates and the first NaN stays (payload and sign bit included), and ties (``-0.0`` against
    ``0.0``) go to the later value: the bits of ``np.maximum``/``np.minimum`` on x86-64 (whose SSE/AVX
    ``max``/``min`` return the second operand on ties), written out so that the reference does not
    depend on NumPy's build (NumPy's own tie rule is left to the SIMD code of each platform). Exactly
    associative: the result is the first NaN, else the last extreme."""
    if op == "sum":
        return a + b
    if op == "prod":
        return a * b
    if op in ("min", "max"):
        a, b = np.asarray(a), np.asarray(b)
        _check_ordered(op, np.result_type(a, b))
        keep = ((a < b) if op == "min" else (a > b)) | (a != a)
        return np.where(keep, a, b)
    raise ValueError(f"sdfg_scan.reference: unknown cumulative op '{op}'; expected one of {CUMULATIVE_OPS}")


def levels(n: int, reverse: bool) -> range:
    """The order in which a scan visits the levels ``0 .. n-1``."""
    return range(n - 1, -1, -1) if reverse else range(n)
