"""Windowed reductions inside ``@dace.program``: ``sdfg_scan.window_reduce`` lowered to ``WindowReduce``."""

from __future__ import annotations

import ast
import weakref

import dace
import numpy as np

from sdfg_scan import reference
from sdfg_scan.frontend_common import add_node, axis_argument, input_desc, literal, replaces, unit_column_view
from sdfg_scan.nodes.window_reduce import WindowReduce

#: per program visitor, the closure names (AST ``Name`` nodes) read as offsets so far
_READ_OFFSETS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def window_reduce(x, weights, offsets, axis: int = -1):
    """``out[..., k] = sum_j w[..., j] * x[..., k + offsets[j]]``, out-of-column terms skipped (``WindowReduce``).

    ``offsets``: constant level offsets (a list, a tuple or a NumPy array from the enclosing scope, read
    when the program is parsed). ``weights``: constants (a list or tuple of numbers: compiled into the
    code) or an array -- a program argument or a NumPy array from the enclosing scope (passed at every
    call, like any closure array, so later changes to it are seen) -- of shape ``(J,)``, the column shape
    (``x.shape`` without ``axis``) then ``J``, or ``x.shape`` then ``J`` (the weight of term ``j`` of
    output level ``k``: ``w[..., k, j]``); axes of length 1 broadcast. A 1-d ``x`` is one column (the node
    sees a ``(1, K)`` view of it). A closure array of offsets is no argument of the program's SDFG unless the
    program also reads it elsewhere. See :func:`sdfg_scan.reference.window_reduce`.
    """
    return reference.window_reduce(x, weights, offsets, axis)


def _offsets(pv, sdfg, offsets, api: str) -> list[int]:
    """Constant level offsets: a list/tuple of integers, or a closure array (evaluated now)."""
    offsets = getattr(offsets, "value", offsets)
    closure = getattr(getattr(pv, "closure", None), "closure_arrays", {})
    if isinstance(offsets, str) and offsets in closure:
        name, offsets = offsets, closure[offsets][2]()  # the evaluator of the enclosing-scope value
        _drop_if_only_offsets(pv, sdfg, name)
    values = np.asarray(offsets) if isinstance(offsets, (list, tuple, np.ndarray)) else None
    if values is None or values.ndim != 1 or not np.issubdtype(values.dtype, np.integer):
        raise ValueError(f"sdfg_scan.{api}: offsets must be a constant list of integers (known when the program "
                         f"is parsed), got {offsets!r}")
    return [int(o) for o in values]


def _drop_if_only_offsets(pv, sdfg: dace.SDFG, name: str) -> None:
    """Remove the closure array ``name`` from the SDFG once every use of it in the program is the offsets of a
    ``window_reduce`` call lowered so far: the offsets are compiled into the code, so no code reads the array
    and it must not stay a required argument of the SDFG. A closure array the program also reads elsewhere
    stays (DaCe adds every closure array to the SDFG before parsing; one removed here is never re-added)."""
    call = next((n for n in reversed(getattr(pv, "current_ast_stack", [])) if isinstance(n, ast.Call)), None)
    program = getattr(pv, "program_ast", None)
    if call is None or program is None:
        return
    arg = call.args[2] if len(call.args) > 2 else next((k.value for k in call.keywords if k.arg == "offsets"), None)
    read = _READ_OFFSETS.setdefault(pv, set())
    read |= {n for n in ast.walk(arg) if isinstance(n, ast.Name) and n.id == name} if arg is not None else set()
    uses = [n for n in ast.walk(program) if isinstance(n, ast.Name) and n.id == name]
    in_graph = any(isinstance(n, dace.nodes.AccessNode) and n.data == name for n, _ in sdfg.all_nodes_recursive())
    if name in sdfg.arrays and not in_graph and all(n in read for n in uses):
        sdfg.remove_data(name, validate=False)


@replaces("sdfg_scan.window_reduce", "sdfg_scan.frontend.window_reduce", "sdfg_scan.frontend_window.window_reduce")
def _lower_window_reduce(pv, sdfg, state, x, weights, offsets, axis=-1):
    api = "window_reduce"
    desc = input_desc(sdfg, x, api)
    offs = _offsets(pv, sdfg, offsets, api)
    ax = axis_argument(axis, len(desc.shape), api)
    weights = getattr(weights, "value", weights)
    result, _ = sdfg.add_temp_transient(desc.shape, desc.dtype)
    src, dst = x, result
    if len(desc.shape) == 1:  # one column: the node works on it as a (1, K) array, its column axis of length 1
        src, dst, ax = unit_column_view(pv, sdfg, x), unit_column_view(pv, sdfg, result), 1
    if isinstance(weights, str):  # an array: the runtime '_weights' connector
        wdesc = input_desc(sdfg, weights, api)
        if len(desc.shape) == 1 and len(wdesc.shape) == 2:  # (K, J) per level: (1, K, J) for the (1, K) input
            weights = unit_column_view(pv, sdfg, weights)
        node = WindowReduce(api, offsets=offs, axis=ax, weights_input=True)
        add_node(sdfg, state, node, {"_in": src, "_weights": weights}, {"_out": dst})
    elif isinstance(weights, (list, tuple)):
        if any(isinstance(getattr(w, "value", w), str) for w in weights):
            raise ValueError(f"sdfg_scan.{api}: weights must be numbers or one array, got {weights!r}; put "
                             f"per-offset fields into one array with the offsets as its last axis")
        node = WindowReduce(api, [float(literal(w, api)) for w in weights], offs, axis=ax)
        add_node(sdfg, state, node, {"_in": src}, {"_out": dst})
    else:
        raise ValueError(f"sdfg_scan.{api}: weights must be a list of numbers or an array, got {weights!r}")
    node.validate(sdfg, state)  # shape and count errors now, while parsing, naming the call
    return result


__all__ = ["window_reduce"]
