"""Call arguments for an SDFG that gt4py's DaCe backend produced, with plain DaCe (no gt4py needed).

gt4py passes a field ``f`` over dimensions ``(D0, D1, ...)`` as an array of shape
``(__f_D0_range_1 - __f_D0_range_0, ...)`` with strides ``(__f_D0_stride, ...)``: every extent and stride
is a symbol named after the field and the dimension (gt4py's ``sdfg_callable``). After ``gt_auto_optimize``
with a unit-stride horizontal dimension (icon4py's backends) the horizontal stride is the number 1, so the
arrays must be horizontal-first (column-major for ``[Cell, K]``). Scalar program arguments that gt4py did
not make static (``horizontal_start``, ``dt``, ...) are plain symbols or scalars.

:func:`gt4py_arguments` makes seeded arrays in that layout, derives every range and stride symbol from
them, and takes the remaining scalars from ``scalars`` (sizes such as ``horizontal_end`` follow ``ncells`` /
``nlev`` unless given). The exporter's fixtures (``sdfg-scan export``) and the tests' icon4py fixtures are
called this way.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping

import dace
import numpy as np

FIELD_SYMBOL = re.compile(r"^__(?P<field>.+)_(?P<dim>[A-Za-z][A-Za-z0-9]*)_(?P<what>range_0|range_1|stride)$")
"""``__<field>_<Dim>_range_0`` (origin), ``..._range_1`` (end), ``..._stride``."""

VERTICAL = ("K", "KHalf")
"""Dimension names taken as vertical (``nlev`` levels); any other named dimension gets ``ncells``."""


def _dims(desc: dace.data.Array) -> list[str | None]:
    """The gt4py dimension each extent of ``desc`` stands for (None: a number or another expression)."""
    out: list[str | None] = []
    for extent in desc.shape:
        found = None
        for s in dace.symbolic.pystr_to_symbolic(str(extent)).free_symbols:
            m = FIELD_SYMBOL.match(str(s))
            if m:
                found = m.group("dim")
                break
        out.append(found)
    return out


def gt4py_arguments(sdfg: dace.SDFG, ncells: int, nlev: int, seed: int = 0,
                    values: Callable[[np.random.Generator, str, tuple], np.ndarray] | None = None,
                    scalars: Mapping[str, object] | None = None, aliases: Mapping[str, str] | None = None,
                    extra_levels: Mapping[str, int] | None = None, vertical_start: int = 0) -> dict:
    """Keyword arguments to call the compiled ``sdfg`` on ``ncells`` x ``nlev``.

    :param values: ``values(rng, name, shape)`` -> the field's data (default: uniform in [0.1, 1)).
    :param scalars: values of scalar arguments and symbols (``dt``, ...); unnamed float scalars get 1.0,
        integer ones 1 (gt4py's ``gt_metrics_level`` 0, as gt4py calls, and ``nlev`` the level count).
    :param aliases: ``{output: input}`` buffers the caller passes as one array (icon4py's graupel driver
        aliases ``q_out_k`` with ``q_in_k``).
    :param extra_levels: fields with more levels than ``nlev`` (a half-level field: ``{"z_alpha": 1}``).
    :param vertical_start: the ``vertical_start`` size argument (``horizontal_start`` is 0).
    """
    rng = np.random.default_rng(seed)
    scalars = dict(scalars or {})
    aliases = dict(aliases or {})
    extra = dict(extra_levels or {})
    # gt4py's own scalars: its metrics level (gt4py passes 0; 1 turns on a timer per call) and a level count
    sizes = {"horizontal_start": 0, "horizontal_end": ncells, "vertical_start": vertical_start, "vertical_end": nlev,
             "gt_metrics_level": 0, "nlev": nlev}
    args = sdfg.arglist()
    free = {str(s) for s in sdfg.free_symbols} | set(args)
    kw: dict = {}
    arrays: dict[str, np.ndarray] = {}
    for name in sorted(args, key=lambda n: (n in aliases, n)):   # alias targets first
        desc = args[name]
        if not isinstance(desc, dace.data.Array) or isinstance(desc, dace.data.View):
            continue
        dims = _dims(desc)
        shape = tuple(int(e) if d is None else (nlev + extra.get(name, 0) if d in VERTICAL else ncells)
                      for d, e in zip(dims, desc.shape, strict=True))
        dtype = desc.dtype.as_numpy_dtype()
        if name in aliases and aliases[name] in arrays:
            arr = arrays[aliases[name]]
            if arr.shape != shape or arr.dtype != dtype:
                raise ValueError(f"sdfg_scan.gt4py_arguments: '{name}' cannot alias '{aliases[name]}': "
                                 f"{shape} {dtype} against {arr.shape} {arr.dtype}")
        else:
            data = values(rng, name, shape) if values is not None else rng.uniform(0.1, 1.0, shape)
            arr = np.asfortranarray(np.asarray(data).astype(dtype))
        arrays[name] = arr
        for d, n, st in zip(dims, shape, arr.strides, strict=True):
            if d is not None:
                kw[f"__{name}_{d}_range_0"] = 0
                kw[f"__{name}_{d}_range_1"] = n
                kw[f"__{name}_{d}_stride"] = st // arr.itemsize
    kw = {k: v for k, v in kw.items() if k in free}
    for name in sorted(free - set(kw) - set(arrays)):
        if name in scalars:
            kw[name] = scalars[name]
        elif name in sizes:
            kw[name] = sizes[name]
        elif name in args:
            kw[name] = 1.0 if args[name].dtype in (dace.float32, dace.float64) else 1
        else:
            kw[name] = 0   # a symbol no argument determines (a lowered SDFG's unused tuple temporaries)
    kw.update(arrays)
    return kw


__all__ = ["FIELD_SYMBOL", "VERTICAL", "gt4py_arguments"]
