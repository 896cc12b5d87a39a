"""``sdfg_scan.associative_scan``: an inclusive scan with a combine function the caller declares
associative, after ``jax.lax.associative_scan``.

``associative_scan :: ((a, a) -> a) -> [a] -> [a]``, ``a`` one array or a tuple of arrays of one shape.
Reference loop (one column, forward; :func:`sdfg_scan.reference.associative_scan`)::

    c = x[0]; out[0] = c
    for k in range(1, n):
        c = fn(c, x[k]); out[k] = c            # fn(earlier, later)

Unlike that loop, the declared associativity lets an implementation regroup the combines (the
``parallel_prefix`` expansion does, in the pinned order of ``reference.associative_scan(...,
order="chunked", chunk=C)``), so results may differ from the loop in the last bits; ``reverse=True``
visits the levels from the last down and keeps outputs index-aligned.

Called from Python it runs the NumPy reference. Inside ``@dace.program``:

- the combines NumPy names as ufuncs (``np.add``, ``np.multiply``, ``np.minimum``, ``np.maximum``,
  and the ``operator`` functions ``add``/``mul``) on one array lower to a ``CumulativeScan`` node;
- any other ``fn`` -- a lambda or a ``def`` of elementwise code: arithmetic, comparisons,
  ``np.where``, ``np.minimum``/``np.maximum``, ``np.exp``/``np.log``/``np.sqrt``/..., local
  temporaries, unpacking of the tuple arguments -- on one array or a tuple of arrays of one shape
  and dtype lowers to an ``AssociativeScan`` node, which holds ``fn`` translated into one
  expression per array (:mod:`sdfg_scan.expansions.associative_combine`). ``fn`` that cannot be
  translated (a statement other than an assignment, an unknown call or name, a result of another
  arity than ``xs``) is refused with an error naming ``associative_scan`` and what was found.

Both nodes have a ``sequential`` expansion (exact: the reference loop) and a ``parallel_prefix`` one
(replay: the chunked order); selection under ``exact`` never takes ``parallel_prefix``. The result
has the structure of ``xs``: one array, or a tuple of arrays in the order of ``xs`` (a tuple of one,
``(x,)``, included: ``fn`` then takes and returns tuples of one, as in the Python call).
"""

from __future__ import annotations

import ast
import operator
from collections.abc import Callable

import numpy as np

from sdfg_scan import reference
from sdfg_scan.expansions.associative_combine import translate_combine
from sdfg_scan.frontend_common import add_node, axis_argument, input_desc, literal
from sdfg_scan.frontend_common import replaces as _replaces
from sdfg_scan.nodes.associative_scan import AssociativeScan
from sdfg_scan.nodes.cumulative_scan import CumulativeScan

COMBINES: dict[object, str] = {np.add: "sum", np.multiply: "prod", np.minimum: "min", np.maximum: "max",
                               operator.add: "sum", operator.mul: "prod"}
"""Combine functions lowered to a ``CumulativeScan`` inside a program, with the op they become."""

API = "associative_scan"


def associative_scan(fn: Callable, xs, axis: int = -1, reverse: bool = False):
    """Inclusive scan of ``fn`` along ``axis`` (module docstring); returns what ``xs`` is (an array or
    a tuple of arrays). ``fn`` must be associative: ``fn(fn(a, b), c) == fn(a, fn(b, c))`` up to rounding."""
    return reference.associative_scan(fn, xs, axis=axis, reverse=reverse)


def _cumulative_op(fn, xs) -> str | None:
    """The ``CumulativeScan`` op of ``fn`` on one array (:data:`COMBINES`), else None."""
    if isinstance(xs, (tuple, list)) or isinstance(fn, str):
        return None
    try:
        return COMBINES.get(fn)
    except TypeError:  # unhashable
        return None


def _program_constants(pv) -> dict:
    """Numbers of the program's scope (a lambda written in the program arrives as source text)."""
    scope = getattr(pv, "globals", None) or {}
    return {k: (v.item() if isinstance(v, np.generic) else v) for k, v in scope.items()
            if isinstance(v, (bool, int, float, np.number))}


def _xs_written_as_tuple(pv) -> bool:
    """Whether the call being lowered writes ``xs`` as a tuple or list (DaCe passes a one-element one as its
    element: ``(x,)`` arrives as ``x``)."""
    call = next((n for n in reversed(getattr(pv, "current_ast_stack", [])) if isinstance(n, ast.Call)), None)
    if call is None:
        return False
    xs = call.args[1] if len(call.args) > 1 else next((k.value for k in call.keywords if k.arg == "xs"), None)
    return isinstance(xs, (ast.Tuple, ast.List))


@_replaces("sdfg_scan.associative_scan", "sdfg_scan.associative.associative_scan")
def _lower_associative_scan(pv, sdfg, state, fn, xs, axis=-1, reverse=False):
    is_tuple = isinstance(xs, (tuple, list)) or _xs_written_as_tuple(pv)
    names = list(xs) if isinstance(xs, (tuple, list)) else [xs]
    if not names:
        raise ValueError(f"sdfg_scan.{API}: xs is an empty tuple; expected one array or a tuple of arrays")
    descs = [input_desc(sdfg, x, API) for x in names]
    for name, desc in zip(names[1:], descs[1:], strict=True):
        if list(desc.shape) != list(descs[0].shape) or desc.dtype != descs[0].dtype:
            raise ValueError(f"sdfg_scan.{API}: the arrays of xs must share one shape and dtype; '{name}' is "
                             f"{desc.dtype.to_string()}{list(desc.shape)}, '{names[0]}' is "
                             f"{descs[0].dtype.to_string()}{list(descs[0].shape)} (convert with astype first)")
    axis = axis_argument(axis, len(descs[0].shape), API)
    reverse = bool(literal(reverse, API))
    op = _cumulative_op(fn, xs)
    if op is not None:
        node = CumulativeScan(API, op=op, axis=axis, reverse=reverse)
        conns_in, conns_out = ["_in"], ["_out"]
    else:
        node = AssociativeScan(API, translate_combine(fn, len(names), _program_constants(pv), is_tuple), axis=axis,
                               reverse=reverse)
        conns_in = [f"_in{i}" for i in range(len(names))]
        conns_out = [f"_out{i}" for i in range(len(names))]
    results = [sdfg.add_temp_transient(descs[0].shape, descs[0].dtype)[0] for _ in names]
    add_node(sdfg, state, node, dict(zip(conns_in, names, strict=True)), dict(zip(conns_out, results, strict=True)))
    return tuple(results) if is_tuple else results[0]


__all__ = ["COMBINES", "associative_scan"]
