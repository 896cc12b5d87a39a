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
