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

Called from Python it runs the NumPy reference. Inside ``@dace.program`` the combines NumPy names
as ufuncs (``np.add``, ``np.multiply``, ``np.minimum``, ``np.maximum``, and the ``operator``
functions ``add``/``mul``) on one array lower to a ``CumulativeScan`` node, whose expansions
include ``sequential`` (exact) and ``parallel_prefix`` (replay); other combine functions are
refused there with an error that says so (they are not lowered yet).
"""

from __future__ import annotations

import operator
from collections.abc import Callable

import numpy as np

from sdfg_scan import reference
from sdfg_scan.frontend_common import add_node, input_desc, literal
from sdfg_scan.frontend_common import replaces as _replaces
from sdfg_scan.nodes.cumulative_scan import CumulativeScan

COMBINES: dict[object, str] = {np.add: "sum", np.multiply: "prod", np.minimum: "min", np.maximum: "max",
                               operator.add: "sum", operator.mul: "prod"}
"""Combine functions lowered to a ``CumulativeScan`` inside a program, with the op they become."""


def associative_scan(fn: Callable, xs, axis: int = -1, reverse: bool = False):
    """Inclusive scan of ``fn`` along ``axis`` (module docstring); returns what ``xs`` is (an array or
    a tuple of arrays). ``fn`` must be associative: ``fn(fn(a, b), c) == fn(a, fn(b, c))`` up to rounding."""
    return reference.associative_scan(fn, xs, axis=axis, reverse=reverse)


@_replaces("sdfg_scan.associative_scan", "sdfg_scan.associative.associative_scan")
def _lower_associative_scan(pv, sdfg, state, fn, xs, axis=-1, reverse=False):
    api = "associative_scan"
    op = COMBINES.get(fn) if not isinstance(fn, (str, tuple, list)) else None
    if op is None or isinstance(xs, (tuple, list)):
        raise NotImplementedError(
            f"sdfg_scan.associative_scan: inside a program only one array combined with one of "
            f"np.add, np.multiply, np.minimum, np.maximum, operator.add, operator.mul is lowered "
            f"(to CumulativeScan), got fn={getattr(fn, '__name__', fn)!r} on "
            f"{'a tuple of arrays' if isinstance(xs, (tuple, list)) else 'one array'}; call it outside the "
            f"program (NumPy reference) or write the scan with sdfg_scan.scan")
    desc = input_desc(sdfg, xs, api)
    axis, reverse = int(literal(axis, api)), bool(literal(reverse, api))
    if not -len(desc.shape) <= axis < len(desc.shape):
        raise ValueError(f"sdfg_scan.associative_scan: axis {axis} is out of range for '{xs}' of rank "
                         f"{len(desc.shape)}")
    result, _ = sdfg.add_temp_transient(desc.shape, desc.dtype)
    add_node(sdfg, state, CumulativeScan(api, op=op, axis=axis, reverse=reverse), {"_in": xs}, {"_out": result})
    return result


__all__ = ["COMBINES", "associative_scan"]
