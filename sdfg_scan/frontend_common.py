"""Helpers of the ``@dace.program`` lowerings (:mod:`sdfg_scan.frontend` and its ``frontend_*`` modules).

A lowering is registered with :func:`replaces` and gets ``(pv, sdfg, state, *args, **kwargs)``:
arrays as data names, Python constants as values, string literals wrapped (``.value``).
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Callable

import dace
import numpy as np
from dace.frontend.common import op_repository as oprepo


def replaces(*names: str) -> Callable:
    """Register one lowering under every name a program may call it by (its results cast where the call is
    assigned to an array of another dtype: :func:`cast_for_assignment`)."""

    def wrap(fn: Callable) -> Callable:
        for name in names:
            oprepo.replaces(name)(_casting(fn))
        return fn

    return wrap


def replaces_method(method: str) -> Callable:
    """Register a lowering of the array method ``x.<method>(...)`` (arrays and views of arrays)."""

    def wrap(fn: Callable) -> Callable:
        for cls in ("Array", "View"):
            oprepo.replaces_method(cls, method)(_casting(fn))
        return fn

    return wrap


def _casting(lower: Callable) -> Callable:
    @functools.wraps(lower)
    def lower_and_cast(pv, sdfg, state, *args, **kwargs):
        return cast_for_assignment(pv, sdfg, state, lower(pv, sdfg, state, *args, **kwargs))

    return lower_and_cast


def cast_for_assignment(pv, sdfg: dace.SDFG, state: dace.SDFGState, results):
    """``results`` of a lowered call, each converted by a map to the dtype of the array it is assigned to
    where that differs, as NumPy casts on assignment: ``o32[:] = sdfg_scan.cumsum(x64)``, ``w[:], cp[:] =
    sdfg_scan.tridiagonal_factor(...)``. DaCe would copy instead, and its simplification would then have the
    node write into the other dtype, which no node accepts (a converting copy does not compile either).

    A result bound to a name that the program later assigns to an array of another dtype (``y = ...;
    o32[:] = y``) is copied once by a map, which DaCe's simplification then lets write into that array
    (converting), as for the result of any elementwise expression."""
    names = list(results) if isinstance(results, (tuple, list)) else [results]
    targets, bound = _assignment_targets(pv, len(names))
    for i, (name, target, var) in enumerate(zip(names, targets, bound, strict=True)):
        desc = sdfg.arrays.get(name) if isinstance(name, str) else None
        if desc is None or not desc.transient:
            continue
        if target is not None and target.dtype != desc.dtype:
            dtype = target.dtype
        elif var is not None and _copied_to_other_dtype(pv, var, desc.dtype):
            dtype = desc.dtype
        else:
            continue
        writer = next((n for n in state.data_nodes() if n.data == name and state.in_degree(n) > 0), None)
        if writer is not None:
            names[i] = cast_copy(sdfg, state, name, dtype, False, writer)[0]
    return tuple(names) if isinstance(results, (tuple, list)) else names[0]


def _assignment_targets(pv, count: int) -> tuple[list[dace.data.Data | None], list[str | None]]:
    """Where the results of the call being lowered go, one entry per result in each list: the descriptor of
    the existing array it is assigned to, or the new name it is bound to (None where neither: the call is
    no direct right-hand side)."""
    stack = getattr(pv, "current_ast_stack", [])
    if len(stack) < 2 or not isinstance(stack[-2], ast.Assign) or stack[-2].value is not stack[-1]:
        return [None] * count, [None] * count
    target = stack[-2].targets[0]
    elts = target.elts if isinstance(target, (ast.Tuple, ast.List)) else [target]
    if len(stack[-2].targets) != 1 or len(elts) != count:
        return [None] * count, [None] * count
    arrays, bound = [], []
    for elt in elts:
        desc = _target_desc(pv, elt)
        arrays.append(desc)
        bound.append(elt.id if desc is None and isinstance(elt, ast.Name) else None)
    return arrays, bound


def _target_desc(pv, target: ast.AST) -> dace.data.Data | None:
    """The descriptor of the existing array an assignment target (``o``, ``o[:, 1:]``) writes, else None."""
    while isinstance(target, ast.Subscript):
        target = target.value
    if not isinstance(target, ast.Name):
        return None
    name = {**pv.variables, **pv.scope_vars}.get(target.id)
    return {**pv.scope_arrays, **pv.sdfg.arrays}.get(name) if name is not None else None


def _copied_to_other_dtype(pv, var: str, dtype: dace.typeclass) -> bool:
    """Whether the program assigns the name ``var`` as it is (``o[:] = var``) to an array of a dtype other
    than ``dtype``."""
    program = getattr(pv, "program_ast", None)
    for node in ast.walk(program) if program is not None else ():
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Name) and node.value.id == var:
            descs = [_target_desc(pv, t) for t in node.targets]
            if any(d is not None and d.dtype != dtype for d in descs):
                return True
    return False


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
    runs after their writer. A label another library node of the program has gets a suffix (``scan``,
    ``scan_1``, ...): reports, selection reasons and pins name nodes by label."""
    taken = {n.label for n, _ in sdfg.all_nodes_recursive() if isinstance(n, dace.nodes.LibraryNode)}
    label, i = node.label, 0
    while label in taken:
        i += 1
        label = f"{node.label}_{i}"
    node.label = label
    state.add_node(node)
    produced = produced or {}
    for conn, data in inputs.items():
        src = produced[data] if data in produced else state.add_read(data)
        state.add_edge(src, None, node, conn, dace.Memlet.from_array(data, sdfg.arrays[data]))
    for conn, data in outputs.items():
        state.add_edge(node, conn, state.add_write(data), None, dace.Memlet.from_array(data, sdfg.arrays[data]))


def cast_copy(sdfg: dace.SDFG, state: dace.SDFGState, src: str, dtype: dace.typeclass, flatten: bool,
              src_node: dace.nodes.AccessNode | None = None) -> tuple[str, dace.nodes.AccessNode]:
    """A new transient holding ``src`` converted to ``dtype`` (C conversion: as NumPy's ``astype``), of
    ``src``'s shape, or with ``flatten`` 1-d in C order (``src.ravel()``). One parallel map, reading
    ``src_node`` if given (the access node ``src`` was written to in ``state``: the map runs after its
    writer); returns the transient and its written access node (read the result from it: :func:`add_node`
    ``produced``)."""
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
                                        {"_o": dace.Memlet(f"{dst}[{dst_index}]")}, external_edges=True,
                                        input_nodes={src: src_node} if src_node is not None else None)
    return dst, state.out_edges(mx)[0].dst


def promoted(sdfg: dace.SDFG, state: dace.SDFGState, names: list[str]
             ) -> tuple[list[str], dict[str, dace.nodes.AccessNode], dace.typeclass]:
    """The arrays ``names`` converted to one dtype, ``np.result_type`` of theirs, as NumPy computes mixed
    operands. Each array of another dtype is converted by a map (:func:`cast_copy`); returns the names to
    read (the converted transients in place of those arrays), the ``produced`` map for :func:`add_node`, and
    the dtype."""
    dtype = dace.dtypes.typeclass(np.result_type(*(sdfg.arrays[n].dtype.as_numpy_dtype() for n in names)).type)
    out, produced = [], {}
    for name in names:
        if sdfg.arrays[name].dtype != dtype:
            cast, written = cast_copy(sdfg, state, name, dtype, False)
            name, produced[cast] = cast, written
        out.append(name)
    return out, produced, dtype


def broadcast_copy(sdfg: dace.SDFG, state: dace.SDFGState, src: str, shape: list, dtype: dace.typeclass
                   ) -> tuple[str, dace.nodes.AccessNode]:
    """A new transient of ``shape`` holding the one element of ``src`` (a scalar, or an array of one element)
    everywhere, converted to ``dtype`` (C conversion): a scalar ``init`` given to every column. One parallel
    map; returns the transient and its written access node (read the result from it: :func:`add_node`
    ``produced``)."""
    first = ", ".join("0" for _ in sdfg.arrays[src].shape)
    dst, _ = sdfg.add_temp_transient(list(shape), dtype)
    idx = [f"__bcast_i{d}" for d in range(len(shape))]
    _, _, mx = state.add_mapped_tasklet("broadcast", {i: f"0:{dace.symbolic.symstr(s)}" for i, s in zip(idx, shape,
                                                                                                      strict=True)},
                                        {"_i": dace.Memlet(f"{src}[{first}]")}, "_o = _i",
                                        {"_o": dace.Memlet(f"{dst}[{', '.join(idx)}]")}, external_edges=True)
    return dst, state.out_edges(mx)[0].dst


def is_single_element(desc: dace.data.Data) -> bool:
    """Whether ``desc`` is a scalar (a ``dace.float64`` argument) or an array whose every axis has length 1."""
    return isinstance(desc, dace.data.Scalar) or all(s == 1 for s in desc.shape)


def same_shape(a, b) -> bool:
    """Whether two shapes are equal (symbolic sizes compared as DaCe does)."""
    return len(a) == len(b) and not any(dace.symbolic.inequal_symbols(x, y) for x, y in zip(a, b, strict=True))


def kless_init(sdfg: dace.SDFG, state: dace.SDFGState, name: str, colshape: list,
               dtype: dace.typeclass | None = None) -> tuple[str, dict]:
    """The data ``init`` of a scan as its node's K-less operand, and the ``produced`` map for :func:`add_node`.

    A scalar (or an array of one element) is broadcast to ``colshape`` -- and converted to ``dtype`` when
    given -- by a map before the node (the node's K-less operand has one value per column); a K-less array
    is passed as it is (the node's ``validate`` checks it), converted to ``dtype`` by a map where that differs
    (as NumPy converts ``init``). An empty ``colshape`` (1-d operands: one column)
    takes a scalar as it is."""
    desc = sdfg.arrays[name]
    target = list(colshape) or [1]
    if not is_single_element(desc) and dtype not in (None, desc.dtype):  # a K-less array of another dtype
        dst, written = cast_copy(sdfg, state, name, dtype, False)
        return dst, {dst: written}
    if not is_single_element(desc) or (same_shape(desc.shape, target) and dtype in (None, desc.dtype)):
        return name, {}
    dst, written = broadcast_copy(sdfg, state, name, target, dtype or desc.dtype)
    return dst, {dst: written}


def unit_column_view(pv, sdfg: dace.SDFG, name: str, state: dace.SDFGState | None = None,
                     produced: dict[str, dace.nodes.AccessNode] | None = None) -> str:
    """A view of the array ``name`` with a leading axis of length 1: a 1-d operand seen as one column of a
    2-d one (``x[None, :]``), for the nodes that need a column axis besides the scan axis. The view is
    registered with the program visitor, which connects it to ``name`` when the program is parsed (as
    for ``np.reshape``); read it as an input or write it as an output. An input the lowering wrote in
    ``state`` (``name`` in ``produced``: a conversion map's result) is viewed from that write instead, and
    the view's access node added to ``produced``, so that the node reads it after the map."""
    desc = sdfg.arrays[name]
    shape = [1] + list(desc.shape)
    strides = [desc.strides[0] * desc.shape[0]] + list(desc.strides)
    view, vdesc = sdfg.add_view(name, shape, desc.dtype, storage=desc.storage, strides=strides,
                                offset=[0] + list(desc.offset), find_new_name=True)
    memlet = dace.Memlet(data=name, subset=dace.subsets.Range.from_array(desc),
                         other_subset=dace.subsets.Range.from_array(vdesc))
    if state is not None and produced is not None and name in produced:
        node = state.add_access(view)
        state.add_edge(produced[name], None, node, "views", memlet)
        produced[view] = node
    else:
        pv.views[view] = (name, memlet)
    return view


__all__ = ["add_node", "axis_argument", "broadcast_copy", "cast_copy", "cast_for_assignment", "dtype_argument",
           "input_desc", "is_single_element", "kless_init", "literal", "promoted", "replaces", "replaces_method",
           "same_shape", "unit_column_view"]
