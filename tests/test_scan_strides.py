"""A lifted scan whose containers change strides after lifting (gt4py's ``gt_change_strides`` at the end of
``gt_auto_optimize``) still reads and writes the right elements: the body's strides follow the containers
outside at selection and expansion (:mod:`sdfg_scan.scan_strides`). Checked bitwise against the original
program, for schedules that index through SDFG memlets and for the C++ ``blocked`` kernel."""

from __future__ import annotations

import copy

import gt4py_shaped as gs
import numpy as np
import pytest

import sdfg_scan
from sdfg_scan.nodes.scan import Scan
from sdfg_scan.scan_strides import sync_body_strides

COLUMN = gs.KITCHEN_SINK.__class__(gs.KITCHEN_SINK.slots, backward=True, start=1, cell_contiguous=False,
                                   init_in_map=True)
_BUILT: dict = {}


def _programs():
    """(original, optimized with its [N, K] fields switched to column-major after lifting)."""
    if not _BUILT:
        original = gs.program(COLUMN, "strides_after_lift")
        optimized = copy.deepcopy(original)
        optimized.name = "strides_after_lift_opt"
        sdfg_scan.optimize(optimized, target="cpu", reproducibility="exact")
        for desc in optimized.arrays.values():
            if len(desc.shape) == 2:
                desc.set_strides_from_layout(0, 1)   # what gt_change_strides does to gt4py's transients
        _BUILT.update(original=original, optimized=optimized)
    return _BUILT["original"], _BUILT["optimized"]


def _scan(sdfg):
    return next((n, st) for n, st in sdfg.all_nodes_recursive() if isinstance(n, Scan))


def test_sync_maps_the_new_strides_and_is_idempotent():
    _, optimized = _programs()
    sdfg = copy.deepcopy(optimized)
    node, state = _scan(sdfg)
    assert node.columns == "cells"
    assert sync_body_strides(node, state), "the switched fields' strides must be taken into the body"
    assert sync_body_strides(node, state) == []
    sdfg.validate()


@pytest.mark.parametrize("impl", ["levels_outside", "blocked", "sequential"])
def test_switched_layout_bitwise_after_expansion(impl):
    original, optimized = _programs()
    sdfg = copy.deepcopy(optimized)
    sdfg.name = f"strides_after_lift_{impl}"
    node, _ = _scan(sdfg)
    node.implementation = impl
    base, new = gs.compile_exact(original), gs.compile_exact(sdfg)
    kw = gs.arguments(COLUMN, original, 37, 6, seed=5)   # C order: the original layout
    a = gs._fresh(kw)
    b = {k: (np.asfortranarray(v) if isinstance(v, np.ndarray) and v.ndim == 2 else
             (v.copy() if isinstance(v, np.ndarray) else v)) for k, v in kw.items()}
    base(**a)
    new(**b)
    for k, v in a.items():
        if isinstance(v, np.ndarray):
            assert np.array_equal(gs._bytes(v), gs._bytes(np.ascontiguousarray(b[k]))), f"'{k}' differs ({impl})"


def _prefix_read(sdfg, name: str) -> None:
    """Give ``name`` the form gt4py gives a tuple field a scan reads (icon4py's graupel tracers): the map
    passes the cells ``0:i + 1`` and the column indexes the whole field with the cell index itself."""
    import dace

    nsdfg = next(n for n in sdfg.start_block.nodes() if isinstance(n, dace.nodes.NestedSDFG))
    inner, conn = nsdfg.sdfg, name.lower()
    outer = sdfg.arrays[name]
    inner.arrays[conn] = dace.data.Array(outer.dtype, outer.shape, strides=outer.strides)
    for sym in set().union(*(dace.symbolic.pystr_to_symbolic(str(x)).free_symbols
                             for x in (*outer.shape, *outer.strides))) | {dace.symbolic.symbol(gs.CELL)}:
        if str(sym) not in inner.symbols:
            inner.add_symbol(str(sym), sdfg.symbols.get(str(sym), dace.int64))
        nsdfg.symbol_mapping[str(sym)] = str(sym)
    for e, _ in inner.all_edges_recursive():
        m = e.data
        if isinstance(m, dace.Memlet) and m.data == conn:
            m.subset = dace.subsets.Range([(dace.symbolic.symbol(gs.CELL),) * 2 + (1,)] + list(m.subset.ndrange()))
    for e in sdfg.start_block.in_edges(nsdfg):
        if e.data.data == name:
            e.data.subset = dace.subsets.Range.from_string(f"0:{gs.CELL} + 1, " + str(e.data.subset).split(",", 1)[1])


@pytest.mark.parametrize("prefix", [False, True], ids=["cell", "prefix"])
def test_blocked_kernel_versioned_on_symbolic_cell_strides(prefix):
    """A field whose cell stride is a symbol of its own (gt4py's tracer tuples): the ``blocked`` kernel runs
    a copy with that stride written as 1 when it is 1 at run time (GCC vectorises that one) and the general
    copy otherwise; bitwise the original either way. ``prefix``: the field passed as gt4py passes a tuple
    field (cells ``0:i + 1``, the column indexing the cell itself); the kernel read its cell stride through
    the body's symbols in both copies, and GCC vectorised neither (graupel's ``replay`` through gt4py)."""
    import dace

    col = gs.KITCHEN_SINK
    original = gs.program(col, f"versioned_strides_{int(prefix)}")
    original.add_symbol("SX0", dace.int64)
    original.arrays["X0"].strides = (dace.symbol("SX0", dace.int64), original.arrays["X0"].strides[1])
    if prefix:
        _prefix_read(original, "X0")
        original.validate()
    optimized = copy.deepcopy(original)
    optimized.name = f"versioned_strides_opt_{int(prefix)}"
    sdfg_scan.optimize(optimized, target="cpu", reproducibility="exact")
    node, _ = _scan(optimized)
    node.implementation = "blocked"
    code = "\n".join(o.clean_code for o in copy.deepcopy(optimized).generate_code())
    assert "if ((SX0 == 1)) {" in code
    base, new = gs.compile_exact(original), gs.compile_exact(optimized)
    for unit in (True, False):
        kw = gs.arguments(col, original, 41, 7, seed=9)
        kw["SX0"] = 1 if unit else 287
        a, b = gs._fresh(kw), gs._fresh(kw)
        if not unit:   # [41, 7] with level stride N = 41 and cell stride 287: a view into a larger buffer
            for args in (a, b):
                view = np.lib.stride_tricks.as_strided(np.zeros(41 * 287), (41, 7), (287 * 8, 41 * 8))
                view[...] = kw["X0"]
                args["X0"] = view
        base(**a)
        new(**b)
        for k, v in a.items():
            if isinstance(v, np.ndarray):
                assert np.array_equal(gs._bytes(v), gs._bytes(b[k])), f"'{k}' differs (unit={unit})"
