"""Windowed reductions inside ``@dace.program``: ``sdfg_scan.window_reduce`` lowered to ``WindowReduce``."""

from __future__ import annotations

import numpy as np

from sdfg_scan import reference
from sdfg_scan.frontend_common import add_node, axis_argument, input_desc, literal, replaces
from sdfg_scan.nodes.window_reduce import WindowReduce


def window_reduce(x, weights, offsets, axis: int = -1):
    """``out[..., k] = sum_j w[..., j] * x[..., k + offsets[j]]``, out-of-column terms skipped (``WindowReduce``).

    ``offsets``: constant level offsets (a list, a tuple or a NumPy array from the enclosing scope, read
    when the program is parsed). ``weights``: constants (a list or tuple of numbers: compiled into the
    code) or an array -- a program argument or a NumPy array from the enclosing scope (passed at every
    call, like any closure array, so later changes to it are seen) -- of shape ``(J,)``, the column shape
    (``x.shape`` without ``axis``) then ``J``, or ``x.shape`` then ``J`` (the weight of term ``j`` of
    output level ``k``: ``w[..., k, j]``); axes of length 1 broadcast. See
    :func:`sdfg_scan.reference.window_reduce`.
    """
    return reference.window_reduce(x, weights, offsets, axis)


def _offsets(pv, sdfg, offsets, api: str) -> list[int]:
    """Constant level offsets: a list/tuple of integers, or a closure array (evaluated now)."""
    offsets = getattr(offsets, "value", offsets)
    closure = getattr(getattr(pv, "closure", None), "closure_arrays", {})
    if isinstance(offsets, str) and offsets in closure:
        offsets = closure[offsets][2]()  # the evaluator of the enclosing-scope value
    values = np.asarray(offsets) if isinstance(offsets, (list, tuple, np.ndarray)) else None
    if values is None or values.ndim != 1 or not np.issubdtype(values.dtype, np.integer):
        raise ValueError(f"sdfg_scan.{api}: offsets must be a constant list of integers (known when the program "
                         f"is parsed), got {offsets!r}")
    return [int(o) for o in values]


@replaces("sdfg_scan.window_reduce", "sdfg_scan.frontend.window_reduce", "sdfg_scan.frontend_window.window_reduce")
def _lower_window_reduce(pv, sdfg, state, x, weights, offsets, axis=-1):
    api = "window_reduce"
    desc = input_desc(sdfg, x, api)
    offs = _offsets(pv, sdfg, offsets, api)
    ax = axis_argument(axis, len(desc.shape), api)
    weights = getattr(weights, "value", weights)
    result, _ = sdfg.add_temp_transient(desc.shape, desc.dtype)
    if isinstance(weights, str):  # an array: the runtime '_weights' connector
        input_desc(sdfg, weights, api)
        node = WindowReduce(api, offsets=offs, axis=ax, weights_input=True)
        add_node(sdfg, state, node, {"_in": x, "_weights": weights}, {"_out": result})
    elif isinstance(weights, (list, tuple)):
        if any(isinstance(getattr(w, "value", w), str) for w in weights):
            raise ValueError(f"sdfg_scan.{api}: weights must be numbers or one array, got {weights!r}; put "
                             f"per-offset fields into one array with the offsets as its last axis")
        node = WindowReduce(api, [float(literal(w, api)) for w in weights], offs, axis=ax)
        add_node(sdfg, state, node, {"_in": x}, {"_out": result})
    else:
        raise ValueError(f"sdfg_scan.{api}: weights must be a list of numbers or an array, got {weights!r}")
    node.validate(sdfg, state)  # shape and count errors now, while parsing, naming the call
    return result


__all__ = ["window_reduce"]
