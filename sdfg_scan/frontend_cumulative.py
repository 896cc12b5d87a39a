"""Cumulative scans inside ``@dace.program``: ``sdfg_scan.cumsum/cumprod/cummin/cummax``, and NumPy's own
forms ``np.cumsum``/``np.cumprod`` and ``x.cumsum()``/``x.cumprod()``, lowered to ``CumulativeScan``.

NumPy's forms keep NumPy's semantics: ``np.cumsum(a, axis=None, dtype=None, out=None)``

* ``axis=None`` flattens an N-d input (C order) and returns a 1-d result;
* the accumulation dtype is ``dtype`` if given, else with ``out`` the promotion of the input's and
  ``out``'s dtypes (``np.result_type``, the loop NumPy's ufunc picks: float32 into a float64 ``out``
  accumulates in float64, float64 into float32 in float64), else NumPy's default
  (``np.cumsum(np.zeros(1, x.dtype)).dtype``: bool and integers narrower than 64 bits give int64,
  unsigned ones uint64, floats keep theirs);
* the input is converted to that dtype first (one map before the node, as ``x.astype(dtype)``), then
  accumulated in it;
* ``out=`` receives the result, cast by a second map where its dtype differs from the accumulation
  dtype (as NumPy casts into ``out``; its shape must be the result's);
* an axis out of range raises ``numpy.exceptions.AxisError`` with NumPy's message while the program is
  parsed.

``sdfg_scan.cum*`` default to ``axis=-1`` and accumulate in the input's dtype unless ``dtype=`` is given
(then as ``x.astype(dtype)``); an ``out=`` of another dtype receives the result cast, as their Python calls
do. They add ``reverse`` and ``exclusive``. ``cummin``/``cummax`` refuse complex input (NumPy orders
complex numbers lexicographically; sdfg_scan does not order them).
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
    out[...] = result  # accumulated in x's dtype (or dtype), then cast into out: what the program does
    return out


def cumsum(x, axis: int = -1, reverse: bool = False, exclusive: bool = False, dtype=None, out=None):
    """Cumulative sum along ``axis`` (``CumulativeScan(op="sum")`` inside ``@dace.program``); ``dtype``:
    convert the input first and accumulate in it; ``out``: write the result there (cast to its dtype)."""
    return _python(x, "sum", axis, reverse, exclusive, dtype, out)


def cumprod(x, axis: int = -1, reverse: bool = False, exclusive: bool = False, dtype=None, out=None):
    """Cumulative product along ``axis`` (``CumulativeScan(op="prod")``)."""
    return _python(x, "prod", axis, reverse, exclusive, dtype, out)


def cummin(x, axis: int = -1, reverse: bool = False, exclusive: bool = False, dtype=None, out=None):
    """Running minimum along ``axis`` (``CumulativeScan(op="min")``; NaN propagates like np.minimum, ties
    such as ``-0.0``/``0.0`` take the later value: ``reference.combine``; bool: logical and)."""
    return _python(x, "min", axis, reverse, exclusive, dtype, out)


def cummax(x, axis: int = -1, reverse: bool = False, exclusive: bool = False, dtype=None, out=None):
    """Running maximum along ``axis`` (``CumulativeScan(op="max")``; NaN propagates like np.maximum, ties
    take the later value; bool: logical or)."""
    return _python(x, "max", axis, reverse, exclusive, dtype, out)


def numpy_dtype(op: str, dtype: dace.typeclass) -> dace.typeclass:
    """The dtype NumPy's ``cumsum``/``cumprod`` give for an input of ``dtype`` (asked of NumPy itself)."""
    fn = np.cumsum if op == "sum" else np.cumprod
    return dace.dtypes.typeclass(fn(np.zeros(1, dtype.as_numpy_dtype())).dtype.type)


def _out_argument(sdfg: dace.SDFG, api: str, out, shape: list) -> dace.data.Data | None:
    """The descriptor of ``out=`` (None if not given), checked against the result's ``shape``."""
    if out is None:
        return None
    odesc = input_desc(sdfg, out, api)
    if len(odesc.shape) != len(shape) or any(dace.symbolic.inequal_symbols(a, b)
                                             for a, b in zip(odesc.shape, shape, strict=True)):
        raise ValueError(f"sdfg_scan.{api}: out='{out}' has shape {tuple(odesc.shape)}, expected the result's "
                         f"shape {tuple(shape)}")
    return odesc


def _accumulation_dtype(api: str, op: str, x: dace.data.Data, want: dace.typeclass | None,
                        odesc: dace.data.Data | None, numpy: bool) -> dace.typeclass:
    """``dtype=`` if given; else NumPy's loop dtype (with ``out``: the promotion of both dtypes) for NumPy's
    forms, the input's dtype for ``sdfg_scan.cum*``."""
    if want is None and numpy and odesc is not None:
        want = dace.dtypes.typeclass(np.result_type(x.dtype.as_numpy_dtype(), odesc.dtype.as_numpy_dtype()).type)
    if want is None:
        want = numpy_dtype(op, x.dtype) if numpy else x.dtype
    if odesc is not None and want.as_numpy_dtype().kind == "c" and odesc.dtype.as_numpy_dtype().kind != "c":
        raise TypeError(f"sdfg_scan.{api}: the result is {want.to_string()} and out is {odesc.dtype.to_string()}: "
                        f"casting complex values into a real out would drop the imaginary part; pass a complex "
                        f"out, or scan the real part")
    return want


def _cast_into(sdfg: dace.SDFG, state: dace.SDFGState, node: CumulativeScan, src: str, dst: str) -> None:
    """One map casting the node's result ``src`` into ``dst`` (C conversion, as NumPy casts into ``out``),
    reading the node's write of ``src`` so that it runs after the scan."""
    idx = [f"__out_i{d}" for d in range(len(sdfg.arrays[src].shape))]
    ranges = {i: f"0:{dace.symbolic.symstr(n)}" for i, n in zip(idx, sdfg.arrays[src].shape, strict=True)}
    state.add_mapped_tasklet("cast_out", ranges, {"_i": dace.Memlet(f"{src}[{', '.join(idx)}]")}, "_o = _i",
                             {"_o": dace.Memlet(f"{dst}[{', '.join(idx)}]")}, external_edges=True,
                             input_nodes={src: state.out_edges(node)[0].dst})


def lower_cumulative(sdfg: dace.SDFG, state: dace.SDFGState, api: str, op: str, x, axis, reverse=False,
                     exclusive=False, dtype=None, out=None, numpy: bool = False) -> str:
    """Add the ``CumulativeScan`` of ``x`` (with the conversion maps before and after it when needed); the
    result's name.

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
    out = getattr(out, "value", out)
    odesc = _out_argument(sdfg, api, out, shape)
    want = _accumulation_dtype(api, op, desc, dtype_argument(dtype, api), odesc, numpy)
    src, produced = x, {}
    if flatten or want != desc.dtype or out == x:  # convert (and flatten) first; in place: read a copy
        src, written = cast_copy(sdfg, state, x, want, flatten)
        produced[src] = written
    direct = odesc is not None and odesc.dtype == want
    result = out if direct else sdfg.add_temp_transient(shape, want)[0]
    node = CumulativeScan(api, op=op, axis=ax, reverse=bool(literal(reverse, api)),
                          exclusive=bool(literal(exclusive, api)))
    add_node(sdfg, state, node, {"_in": src}, {"_out": result}, produced)
    node.validate(sdfg, state)  # refuse what the node refuses (complex min/max) while the program is parsed
    if odesc is None or direct:
        return result
    _cast_into(sdfg, state, node, result, out)
    return out


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
