"""Cumulative scans inside ``@dace.program``: ``sdfg_scan.cumsum/cumprod/cummin/cummax``, and NumPy's own
forms ``np.cumsum``/``np.cumprod`` and ``x.cumsum()``/``x.cumprod()``, lowered to ``CumulativeScan``.

NumPy's forms keep NumPy's semantics: ``np.cumsum(a, axis=None, dtype=None, out=None)``

* ``axis=None`` flattens an N-d input (C order) and returns a 1-d result;
* the accumulation (and result) dtype is ``dtype`` if given, else ``out``'s dtype if given, else NumPy's
  default (``np.cumsum(np.zeros(1, x.dtype)).dtype``: bool and integers narrower than 64 bits give int64,
  unsigned ones uint64, floats keep theirs);
* the input is converted to that dtype first (one map before the node, as ``x.astype(dtype)``), then
  accumulated in it;
* ``out=`` receives the result (its shape must be the result's; ``dtype`` and ``out`` of different
  dtypes are refused);
* an axis out of range raises ``numpy.exceptions.AxisError`` with NumPy's message while the program is
  parsed.

``sdfg_scan.cum*`` default to ``axis=-1`` and keep the input's dtype unless ``dtype=`` is given; they add
``reverse`` and ``exclusive``.
"""

from __future__ import annotations

import functools
import operator

import dace
import numpy as np

from sdfg_scan import reference
from sdfg_scan.frontend_common import (
    add_node,
    axis_argument,
    cast_copy,
    dtype_argument,
    input_desc,
    literal,
    replaces,
    replaces_method,
)
from sdfg_scan.nodes.cumulative_scan import CumulativeScan


def _python(x, op, axis, reverse, exclusive, dtype, out):
    x = np.asarray(x)
    result = reference.cumulative(x if dtype is None else x.astype(dtype), op, axis, reverse, exclusive)
    if out is None:
        return result
    out[...] = result
    return out


def cumsum(x, axis: int = -1, reverse: bool = False, exclusive: bool = False, dtype=None, out=None):
    """Cumulative sum along ``axis`` (``CumulativeScan(op="sum")`` inside ``@dace.program``); ``dtype``:
    convert the input first and accumulate in it; ``out``: write the result there."""
    return _python(x, "sum", axis, reverse, exclusive, dtype, out)


def cumprod(x, axis: int = -1, reverse: bool = False, exclusive: bool = False, dtype=None, out=None):
    """Cumulative product along ``axis`` (``CumulativeScan(op="prod")``)."""
    return _python(x, "prod", axis, reverse, exclusive, dtype, out)


def cummin(x, axis: int = -1, reverse: bool = False, exclusive: bool = False, dtype=None, out=None):
    """Running minimum along ``axis`` (``CumulativeScan(op="min")``; NaN propagates like np.minimum)."""
    return _python(x, "min", axis, reverse, exclusive, dtype, out)


def cummax(x, axis: int = -1, reverse: bool = False, exclusive: bool = False, dtype=None, out=None):
    """Running maximum along ``axis`` (``CumulativeScan(op="max")``; NaN propagates like np.maximum)."""
    return _python(x, "max", axis, reverse, exclusive, dtype, out)


def numpy_dtype(op: str, dtype: dace.typeclass) -> dace.typeclass:
    """The dtype NumPy's ``cumsum``/``cumprod`` give for an input of ``dtype`` (asked of NumPy itself)."""
    fn = np.cumsum if op == "sum" else np.cumprod
    return dace.dtypes.typeclass(fn(np.zeros(1, dtype.as_numpy_dtype())).dtype.type)


def lower_cumulative(sdfg: dace.SDFG, state: dace.SDFGState, api: str, op: str, x, axis, reverse=False,
                     exclusive=False, dtype=None, out=None, numpy: bool = False) -> str:
    """Add the ``CumulativeScan`` of ``x`` (and the conversion map before it when needed); the result's name.

    ``numpy``: NumPy's dtype rule and its ``axis=None`` (flatten); else the input's dtype and ``axis=None``
    only for a 1-d input."""
    desc = input_desc(sdfg, x, api)
    axis = literal(axis, api)
    flatten = axis is None and len(desc.shape) > 1
    if flatten and not numpy:
        raise ValueError(f"sdfg_scan.{api}: axis=None flattens an N-d array; sdfg_scan.{api} does not (np.{api} "
                         f"does); pass axis= explicitly (array '{x}' has rank {len(desc.shape)})")
    ax = 0 if axis is None else axis_argument(axis, len(desc.shape), api)
    shape = [functools.reduce(operator.mul, desc.shape, 1)] if flatten else list(desc.shape)
    want = dtype_argument(dtype, api)
    out = getattr(out, "value", out)
    if out is not None:
        odesc = input_desc(sdfg, out, api)
        if want is not None and want != odesc.dtype:
            raise TypeError(f"sdfg_scan.{api}: dtype={want.to_string()} and out='{out}' of dtype "
                            f"{odesc.dtype.to_string()} differ; give one of them, or the same type")
        want = odesc.dtype
        if len(odesc.shape) != len(shape) or any(dace.symbolic.inequal_symbols(a, b)
                                                 for a, b in zip(odesc.shape, shape, strict=True)):
            raise ValueError(f"sdfg_scan.{api}: out='{out}' has shape {tuple(odesc.shape)}, expected the result's "
                             f"shape {tuple(shape)}")
    if want is None:
        want = numpy_dtype(op, desc.dtype) if numpy else desc.dtype
    src, produced = x, {}
    if flatten or want != desc.dtype or out == x:  # convert (and flatten) first; in place: read a copy
        src, written = cast_copy(sdfg, state, x, want, flatten)
        produced[src] = written
    result = out if out is not None else sdfg.add_temp_transient(shape, want)[0]
    node = CumulativeScan(api, op=op, axis=ax, reverse=bool(literal(reverse, api)),
                          exclusive=bool(literal(exclusive, api)))
    add_node(sdfg, state, node, {"_in": src}, {"_out": result}, produced)
    return result


def _lower_sdfg_scan(op: str, api: str):
    def lower(pv, sdfg, state, x, axis=-1, reverse=False, exclusive=False, dtype=None, out=None):
        return lower_cumulative(sdfg, state, api, op, x, axis, reverse, exclusive, dtype, out)

    return lower


def _lower_numpy(op: str, api: str):
    def lower(pv, sdfg, state, a, axis=None, dtype=None, out=None):
        return lower_cumulative(sdfg, state, api, op, a, axis, dtype=dtype, out=out, numpy=True)

    return lower


for _fn, _op in ((cumsum, "sum"), (cumprod, "prod"), (cummin, "min"), (cummax, "max")):
    replaces(f"sdfg_scan.{_fn.__name__}", f"sdfg_scan.frontend.{_fn.__name__}",
             f"sdfg_scan.frontend_cumulative.{_fn.__name__}")(_lower_sdfg_scan(_op, _fn.__name__))
for _api, _op in (("cumsum", "sum"), ("cumprod", "prod")):
    replaces(f"numpy.{_api}")(_lower_numpy(_op, _api))
    replaces_method(_api)(_lower_numpy(_op, _api))  # x.cumsum(axis=None, dtype=None, out=None)

__all__ = ["cummax", "cummin", "cumprod", "cumsum", "lower_cumulative", "numpy_dtype"]
