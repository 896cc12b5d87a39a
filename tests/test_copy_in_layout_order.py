"""``CopyInLayoutOrder``: array copies on cell-contiguous layouts as maps walking the unit-stride dimension
innermost. Applied cases run before and after (bitwise, sentinels where nothing is copied); each guard has
a case that checks the SDFG is unchanged."""

from __future__ import annotations

import copy
import json

import dace
import gt4py_shaped as gs
import numpy as np
import pytest
from dace.sdfg import nodes

from sdfg_scan.transformations import CopyInLayoutOrder

N, K = dace.symbol("N"), dace.symbol("K")
F = (1, N)          # cell-contiguous [N, K]


def _copy(name: str, src_strides, dst_strides, src_box="0:N, 0:K-1", dst_box="0:N, 1:K") -> dace.SDFG:
    sdfg = dace.SDFG(name)
    sdfg.add_array("A", [N, K], dace.float64, strides=src_strides)
    sdfg.add_array("B", [N, K], dace.float64, strides=dst_strides)
    st = sdfg.add_state("s", is_start_block=True)
    st.add_nedge(st.add_read("A"), st.add_write("B"), dace.Memlet(data="A", subset=src_box, other_subset=dst_box))
    return sdfg


def _run(sdfg: dace.SDFG, order_a: str, order_b: str) -> np.ndarray:
    rng = np.random.default_rng(5)
    a = np.array(rng.uniform(size=(6, 5)), order=order_a)
    b = np.array(np.full((6, 5), -7.0), order=order_b)
    kw = {"A": a, "B": b, "N": 6, "K": 5}
    for s in sdfg.free_symbols:      # strides given as symbols of their own (gt4py's arguments)
        if s.startswith("sB"):
            kw[s] = b.strides[int(s[-1])] // 8
    gs.compile_exact(sdfg)(**kw)
    return b


@pytest.mark.parametrize("case", ["both_cell_contiguous", "symbolic_destination", "whole_into_cell_contiguous"])
def test_copy_walks_the_unit_stride_innermost(case):
    sym = (dace.symbol("sB0"), dace.symbol("sB1"))
    src, dst, order_a, boxes = {"both_cell_contiguous": (F, F, "F", {}),
                                "symbolic_destination": (F, sym, "F", {}),   # the source's unit stride decides
                                "whole_into_cell_contiguous": (None, F, "C", {"src_box": "0:N, 0:K",
                                                                               "dst_box": "0:N, 0:K"})}[case]
    orig = _copy(f"cio_{case}", src, dst, **boxes)
    new = copy.deepcopy(orig)
    new.name += "_new"
    assert new.apply_transformations_repeated(CopyInLayoutOrder, validate=True) == 1
    (entry,) = [n for n in new.start_block.nodes() if isinstance(n, nodes.MapEntry)]
    assert entry.map.params[-1] == "__cl0"      # the cell dimension (unit stride) innermost
    assert np.array_equal(_run(orig, order_a, "F"), _run(new, order_a, "F"))


def _unchanged(sdfg: dace.SDFG) -> None:
    before = json.dumps(sdfg.to_json(), sort_keys=True)
    assert sdfg.apply_transformations_repeated(CopyInLayoutOrder) == 0
    assert json.dumps(sdfg.to_json(), sort_keys=True) == before


def test_refuses_when_the_last_dimension_is_unit_stride():
    _unchanged(_copy("cio_c", None, None))
    _unchanged(_copy("cio_into_c", F, None, "0:N, 0:K", "0:N, 0:K"))   # the destination's unit stride decides


def test_refuses_a_whole_copy_between_identical_layouts():
    _unchanged(_copy("cio_memcpy", F, F, "0:N, 0:K", "0:N, 0:K"))


def test_refuses_without_a_known_unit_stride():
    _unchanged(_copy("cio_sym", (dace.symbol("sA0"), dace.symbol("sA1")), (dace.symbol("sB0"), dace.symbol("sB1"))))


def test_refuses_a_copy_inside_a_nested_sdfg():
    inner = _copy("cio_inner", F, F)
    outer = dace.SDFG("cio_outer")
    outer.add_array("A", [N, K], dace.float64, strides=F)
    outer.add_array("B", [N, K], dace.float64, strides=F)
    st = outer.add_state("s", is_start_block=True)
    ns = st.add_nested_sdfg(inner, {"A"}, {"B"}, symbol_mapping={"N": N, "K": K})
    st.add_edge(st.add_read("A"), None, ns, "A", dace.Memlet("A[0:N, 0:K]"))
    st.add_edge(ns, "B", st.add_write("B"), None, dace.Memlet("B[0:N, 0:K]"))
    _unchanged(outer)


def _on_gpu(sdfg: dace.SDFG, *names: str) -> dace.SDFG:
    for name in names:
        sdfg.arrays[name].storage = dace.StorageType.GPU_Global
    return sdfg


@pytest.mark.gpu
def test_a_copy_between_gpu_arrays_is_a_kernel_with_the_cells_along_x(tmp_path):
    """DaCe lowers a strided GPU copy itself to a kernel with the cells on the grid's y axis (CUDA caps it
    at 65535: graupel did not launch at 81920 cells); here the cells run along x, coalesced."""
    from conftest import cuda_code, launch_grids, nvcc_compile

    sdfg = _on_gpu(_copy("cio_gpu", F, F), "A", "B")
    assert sdfg.apply_transformations_repeated(CopyInLayoutOrder, validate=True) == 1
    (entry,) = [n for n in sdfg.start_block.nodes() if isinstance(n, nodes.MapEntry)]
    assert entry.map.schedule == dace.ScheduleType.GPU_Device and entry.map.params[-1] == "__cl0"
    code = cuda_code(sdfg)
    ((name, (x, y, _)),) = launch_grids(code).items()   # x: the cells (N), y: the levels
    assert name.startswith("copy_A_to_B_in_layout_order") and "N" in x and "N" not in y and "K" in y, (x, y)
    nvcc_compile(code, tmp_path)


def test_refuses_a_copy_between_host_and_gpu_memory():
    _unchanged(_on_gpu(_copy("cio_mixed", F, F), "B"))
    _unchanged(_on_gpu(_copy("cio_mixed_in", F, F), "A"))
