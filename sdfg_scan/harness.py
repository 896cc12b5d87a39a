"""One-node SDFGs in either memory layout: what tests, benchmarks and the demo compile.

``load_or_compile`` reuses the binary an earlier compile left in an SDFG's build folder (safely: see there).

``one_node_sdfg`` wraps a library node in an SDFG whose arrays have symbolic sizes (compile once,
call with any size) and the requested layout:

- ``"k"``: K-contiguous (each column's levels are adjacent; C order with the scan axis last);
- ``"cell"``: cell-contiguous (ICON's nproma layout; the scan axis has the largest stride).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import dace
import numpy as np

LAYOUTS = ("k", "cell")


def strides_for(shape: Sequence, axis: int | None, layout: str) -> list:
    """Strides of a dense array of ``shape`` whose ``axis`` is innermost (``"k"``) or outermost (``"cell"``).

    K-less operands (``axis`` None) are dense in C order.
    """
    if layout not in LAYOUTS:
        raise ValueError(f"sdfg_scan.harness: layout must be one of {LAYOUTS}, got '{layout}'")
    dims = list(range(len(shape)))
    if axis is not None:
        axis %= len(shape)
        dims.remove(axis)
        dims = dims + [axis] if layout == "k" else [axis] + dims
    strides: list = [None] * len(shape)
    acc = 1
    for d in reversed(dims):
        strides[d] = acc
        acc = acc * shape[d]
    return strides


def numpy_array(values: np.ndarray, axis: int | None, layout: str) -> np.ndarray:
    """A copy of ``values`` with the memory layout :func:`strides_for` describes."""
    if axis is None or values.ndim == 0:
        return np.ascontiguousarray(values)
    axis %= values.ndim
    dims = [d for d in range(values.ndim) if d != axis]
    order = dims + [axis] if layout == "k" else [axis] + dims
    if order == sorted(order):
        return np.ascontiguousarray(values)
    if order == sorted(order, reverse=True):
        return np.asfortranarray(values)
    # other permutations: a strided view of a dense buffer (DaCe wants owning arrays: copy the base)
    base = np.ascontiguousarray(np.transpose(values, order))
    return np.lib.stride_tricks.as_strided(base.copy(), shape=values.shape,
                                           strides=[base.strides[list(order).index(d)] for d in range(values.ndim)])


def copy_arguments(args: dict) -> dict:
    """The arguments with every array copied in its own memory order (strides kept); arrays that alias
    each other (the same object) stay aliased in the copy."""
    copies: dict[int, np.ndarray] = {}
    out = {}
    for k, v in args.items():
        if isinstance(v, np.ndarray):
            if id(v) not in copies:
                copies[id(v)] = v.copy(order="K")
            v = copies[id(v)]
        out[k] = v
    return out


def one_node_sdfg(name: str, node: dace.nodes.LibraryNode, inputs: dict[str, tuple], outputs: dict[str, tuple],
                  axis: int, layout: str) -> dace.SDFG:
    """An SDFG with one array per connector (``conn -> (shape, dtype, has_axis)``) around ``node``."""
    sdfg = dace.SDFG(name)
    state = sdfg.add_state("main", is_start_block=True)
    state.add_node(node)
    for conns, is_input in ((inputs, True), (outputs, False)):
        for conn, (shape, dtype, has_axis) in conns.items():
            strides = strides_for(shape, axis if has_axis else None, layout)
            sdfg.add_array(conn, shape, dtype, strides=strides)
            mem = dace.Memlet.from_array(conn, sdfg.arrays[conn])
            if is_input:
                state.add_edge(state.add_read(conn), None, node, conn, mem)
            else:
                state.add_edge(node, conn, state.add_write(conn), None, mem)
    sdfg.validate()
    return sdfg


def load_or_compile(sdfg: dace.SDFG):
    """The binary an earlier ``compile`` of an SDFG of this name left in ``sdfg.build_folder`` (another
    process's, say), loaded with the SDFG that was compiled; else ``sdfg.compile()``.

    Not DaCe's own ``compiler.use_cache``: in DaCe 2.0.0a10 it loads the binary with ``sdfg`` itself,
    whose library nodes are not expanded, and the argument list of such an SDFG can lack symbols only
    the expansions use (a one-node SDFG over ``[N, K]`` K-contiguous loses ``N``): every later argument
    is shifted and a GPU kernel reads out of bounds. The SDFG saved beside the binary
    (``program.sdfgz``) is the expanded one the binary was generated from.
    """
    from dace.codegen import compiler

    folder = Path(sdfg.build_folder)
    mode = compiler.get_folder_mode(folder, probe=True) if folder.is_dir() else None
    if mode is not None and any((folder / f).exists() for f in ("program.sdfgz", "program.sdfg")):
        if compiler.get_binary_name(object_folder=folder, sdfg_name=sdfg.name, folder_mode=mode).is_file():
            return compiler.load_precompiled_sdfg(folder)
    return sdfg.compile()


__all__ = ["LAYOUTS", "copy_arguments", "load_or_compile", "numpy_array", "one_node_sdfg", "strides_for"]
