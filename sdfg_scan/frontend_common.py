"""Helpers of the ``@dace.program`` lowerings (:mod:`sdfg_scan.frontend` and its ``frontend_*`` modules).

A lowering is registered with :func:`replaces` and gets ``(pv, sdfg, state, *args, **kwargs)``:
arrays as data names, Python constants as values, string literals wrapped (``.value``).
"""

from __future__ import annotations

from collections.abc import Callable

import dace
import numpy as np
from dace.frontend.common import op_repository as oprepo


def replaces(*names: str) -> Callable:
    """Register one lowering under every name a program may call it by."""

    def wrap(fn: Callable) -> Callable:
        for name in names:
            oprepo.replaces(name)(fn)
        return fn

    return wrap


def replaces_method(method: str) -> Callable:
    """Register a lowering of the array method ``x.<method>(...)`` (arrays and views of arrays)."""

    def wrap(fn: Callable) -> Callable:
        for cls in ("Array", "View"):
            oprepo.replaces_method(cls, method)(fn)
        return fn

    return wrap


def literal(value, what: str):
    """A frontend argument as a Python value (string literals arrive wrapped, with ``.value``)."""
    value = getattr(value, "value", value)
    if isinstance(value, str) and what != "op":
        raise ValueError(f"sdfg_scan.{what}: expected a constant, got the data name '{value}'")
    return value


def input_desc(sdfg: dace.SDFG, name, api: str) -> dace.data.Data:
    """The descriptor of an array argument, with a clear error for anything else."""
    if not isinstance(name, str) or name not in sdfg.arrays:
        raise TypeError(f"sdfg_scan.{api}: expected an array, got {name!r}")
    desc = sdfg.arrays[name]
    if len(desc.shape) == 0 or isinstance(desc, dace.data.Scalar):
        raise TypeError(f"sdfg_scan.{api}: expected an array with the scan axis, got the scalar '{name}'")
    return desc


def axis_argument(axis, ndim: int, api: str) -> int:
    """``axis`` in ``[0, ndim)``; out of range raises NumPy's ``AxisError`` (its message, prefixed with the API),
    as ``np.cumsum`` and ``jnp.cumsum`` do when called."""
    axis = literal(axis, api)
    if isinstance(axis, bool) or not isinstance(axis, (int, np.integer)):
        raise TypeError(f"sdfg_scan.{api}: axis must be an integer constant, got {axis!r}")
    if not -ndim <= axis < ndim:
        raise np.exceptions.AxisError(int(axis), ndim, msg_prefix=f"sdfg_scan.{api}")
    return int(axis) % ndim


def dtype_argument(dtype, api: str) -> dace.typeclass | None:
    """A ``dtype=`` argument (``np.float64``, ``dace.float64``, ``"float64"``, ``float``) as a typeclass."""
    dtype = getattr(dtype, "value", dtype)
    if dtype is None:
        return None
    try:
        npdt = dtype.as_numpy_dtype() if isinstance(dtype, dace.typeclass) else np.dtype(dtype)
    except TypeError as err:
        raise TypeError(f"sdfg_scan.{api}: dtype must be a NumPy or DaCe data type, got {dtype!r}") from err
    return dace.dtypes.typeclass(npdt.type)


def add_node(sdfg: dace.SDFG, state: dace.SDFGState, node: dace.nodes.LibraryNode, inputs: dict[str, str],
             outputs: dict[str, str], produced: dict[str, dace.nodes.AccessNode] | None = None) -> None:
    """Add ``node`` with whole-array memlets from ``inputs`` and to ``outputs`` (connector -> data).

    ``produced``: access nodes written earlier in ``state`` (data -> node), read from so that ``node``
    runs after their writer."""
    state.add_node(node)
    produced = produced or {}
    for conn, data in inputs.items():
        src = produced[data] if data in produced else state.add_read(data)
        state.add_edge(src, None, node, conn, dace.Memlet.from_array(data, sdfg.arrays[data]))
    for conn, data in outputs.items():
        state.add_edge(node, conn, state.add_write(data), None, dace.Memlet.from_array(data, sdfg.arrays[data]))


def cast_copy(sdfg: dace.SDFG, state: dace.SDFGState, src: str, dtype: dace.typeclass,
              flatten: bool) -> tuple[str, dace.nodes.AccessNode]:
    """A new transient holding ``src`` converted to ``dtype`` (C conversion: as NumPy's ``astype``), of
    ``src``'s shape, or with ``flatten`` 1-d in C order (``src.ravel()``). One parallel map; returns the
    transient and its written access node (read the result from it: :func:`add_node` ``produced``)."""
    desc = sdfg.arrays[src]
    shape = list(desc.shape)
    idx = [f"__cast_i{d}" for d in range(len(shape))]
    if flatten:
        size = 1
        flat = []
        for d in reversed(range(len(shape))):
            flat.append(f"{idx[d]} * ({dace.symbolic.symstr(size)})" if size != 1 else idx[d])
            size = size * shape[d]
        dst, _ = sdfg.add_temp_transient([size], dtype)
        dst_index = " + ".join(reversed(flat))
    else:
        dst, _ = sdfg.add_temp_transient(shape, dtype)
        dst_index = ", ".join(idx)
    _, _, mx = state.add_mapped_tasklet("cast", {i: f"0:{dace.symbolic.symstr(s)}" for i, s in zip(idx, shape,
                                                                                                  strict=True)},
                                        {"_i": dace.Memlet(f"{src}[{', '.join(idx)}]")}, "_o = _i",
                                        {"_o": dace.Memlet(f"{dst}[{dst_index}]")}, external_edges=True)
    return dst, state.out_edges(mx)[0].dst


__all__ = ["add_node", "axis_argument", "cast_copy", "dtype_argument", "input_desc", "literal", "replaces",
           "replaces_method"]
