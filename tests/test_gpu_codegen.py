"""GPU code generation of the scan expansions (compile-only: never call a CUDA build here)."""

from __future__ import annotations

import dace
import pytest
from conftest import cuda_code, nvcc_compile

from sdfg_scan.harness import one_node_sdfg
from sdfg_scan.nodes import CumulativeScan, LinearRecurrence
from sdfg_scan.select import select_expansions

N, K = dace.symbol("N"), dace.symbol("K")
F = ([N, K], dace.float64, True)

pytestmark = pytest.mark.gpu


def _gpu_sdfg(kind: str, layout: str) -> dace.SDFG:
    if kind == "cumsum":
        node = CumulativeScan("cs", axis=1, reverse=True)
        sdfg = one_node_sdfg(f"gpu_cumsum_{layout}", node, {"_in": F}, {"_out": F}, 1, layout)
    else:
        node = LinearRecurrence("lr", axis=1, has_init=True)
        sdfg = one_node_sdfg(f"gpu_linrec_{layout}", node, {"a": F, "b": F, "init": ([N], dace.float64, False)},
                             {"_out": F}, 1, layout)
    sdfg.apply_gpu_transformations()
    return sdfg


@pytest.mark.parametrize("kind", ["cumsum", "linrec"])
@pytest.mark.parametrize("layout", ["k", "cell"])
def test_auto_picks_sequential_thread_per_column_on_gpu(kind, layout):
    sdfg = _gpu_sdfg(kind, layout)
    (choice,) = select_expansions(sdfg)
    assert choice.target == "gpu" and choice.implementation == "sequential"
    assert choice.reproducibility == "exact"
    sdfg.expand_library_nodes()
    code = cuda_code(sdfg)
    assert code.count("__global__") == 1
    assert "for (" in code  # the k-loop runs inside the kernel, one thread per column


def test_nvcc_compiles_sm90(tmp_path):
    sdfg = _gpu_sdfg("linrec", "cell")
    sdfg.expand_library_nodes()
    nvcc_compile(cuda_code(sdfg), tmp_path)
