"""GPU code generation of the scan expansions (compile-only: never call a CUDA build here)."""

from __future__ import annotations

import re

import dace
import pytest
from conftest import cuda_code, nvcc_compile, streams_within_context

from sdfg_scan.cost import GPU_COLUMNS_TO_FILL
from sdfg_scan.expansions.parallel_prefix import GPU_BLOCK, GPU_WARP
from sdfg_scan.harness import one_node_sdfg, strides_for
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


# -- parallel_prefix: warp per column, block per column, three kernels -----------------------------

PREFIX_CHUNK = 256


def _prefix_sdfg(layout: str) -> dace.SDFG:
    """A CumulativeScan and a LinearRecurrence, ``parallel_prefix``: over the two layouts, each node in
    both directions and the recurrence with and without ``init`` (cell: reverse exclusive cumsum, forward
    recurrence with init; k: forward cumsum, reverse recurrence from a constant)."""
    cell = layout == "cell"
    sdfg = dace.SDFG(f"gpu_prefix_{layout}")
    for name in ("x", "a", "b", "y_cs", "y_lr"):
        sdfg.add_array(name, [N, K], dace.float64, strides=strides_for([N, K], 1, layout))
    sdfg.add_array("init", [N], dace.float64)
    state = sdfg.add_state()
    nodes = {"cs": (CumulativeScan("cs", axis=1, reverse=cell, exclusive=cell), {"_in": "x"}, "y_cs"),
             "lr": (LinearRecurrence("lr", axis=1, reverse=not cell, has_init=cell),
                    {"a": "a", "b": "b"} | ({"init": "init"} if cell else {}), "y_lr")}
    for node, ins, out in nodes.values():
        node.implementation, node.chunk_size = "parallel_prefix", PREFIX_CHUNK
        for conn, name in ins.items():
            state.add_edge(state.add_read(name), None, node, conn, dace.Memlet.from_array(name, sdfg.arrays[name]))
        state.add_edge(node, "_out", state.add_write(out), None, dace.Memlet.from_array(out, sdfg.arrays[out]))
    sdfg.apply_gpu_transformations()
    return sdfg


def _kernels(code: str) -> dict[str, str]:
    """Kernel name -> the text from its ``__global__`` line to the next kernel (its launch included)."""
    parts = code.split("__global__ void")[1:]
    return {re.search(r"__launch_bounds__\(\d+\)\s+(\w+)\(", p).group(1): p for p in parts}


@pytest.mark.parametrize("layout", ["cell", "k"])
def test_parallel_prefix_in_block_schedules(layout, tmp_path):
    """Per node, the warp-per-column and block-per-column kernels (one launch each, barriers in the
    tasklet, no return before them) and the three-kernel pass, chosen by the host from N and K; the
    translation unit compiles with nvcc for sm_90 (numerics: tests/test_parallel_prefix.py runs the same
    thread code on the CPU, benchmarks/gpu_check.py on a GPU)."""
    sdfg = _prefix_sdfg(layout)
    sdfg.expand_library_nodes()
    sdfg.validate()
    objs = sdfg.generate_code()
    host = next(o.clean_code for o in objs if o.language == "cpp" and "__dace_runkernel" in o.clean_code)
    code = next(o.clean_code for o in objs if o.language == "cu")
    kernels = _kernels(code)
    assert len(kernels) == 10
    for label in ("cs", "lr"):
        mine = {re.sub(r"(_\d+)+$", "", k)[len(label) + 1:]: v for k, v in kernels.items()
                if k.startswith(label + "_")}
        assert set(mine) == {"warp_per_column", "block_per_column", "totals", "offsets", "rescan"}
        warp, block = mine["warp_per_column"], mine["block_per_column"]
        assert warp.count("__syncwarp();") == 2 and "__syncthreads" not in warp
        assert block.count("__syncthreads();") == 2 and "__syncwarp" not in block
        for k in (warp, block):
            assert k.lstrip().startswith(f"__launch_bounds__({GPU_BLOCK})") and f"dim3({GPU_BLOCK}, 1, 1)" in k
            assert "return" not in k[:k.index("DACE_EXPORTED")]  # every thread reaches the barriers
        assert f"dim3(int_ceil(N, {GPU_BLOCK // GPU_WARP}), 1, 1)" in warp and "dim3(N, 1, 1)" in block
        assert all("__sync" not in mine[p] for p in ("totals", "offsets", "rescan"))
    nch = f"int_ceil(K, {PREFIX_CHUNK})"
    assert host.count(f"if (({nch} <= {GPU_WARP}))") == 2
    assert host.count(f"else if ((({nch} <= {GPU_BLOCK}) || (N >= {int(GPU_COLUMNS_TO_FILL) // GPU_BLOCK})))") == 2
    nvcc_compile(code, tmp_path)


def _chain_of_gpu_maps() -> tuple[dace.SDFG, dace.nodes.MapEntry]:
    """x -> map -> y -> map -> z on the GPU; returns the SDFG and the second map's entry."""
    sdfg = dace.SDFG("stream_count")
    for name in "xyz":
        sdfg.add_array(name, [N], dace.float64, storage=dace.StorageType.GPU_Global)
    state = sdfg.add_state()
    entries = []
    for src, dst in (("x", "y"), ("y", "z")):
        _, me, _ = state.add_mapped_tasklet(f"{src}{dst}", {"i": "0:N"}, {"_a": dace.Memlet(f"{src}[i]")},
                                            "_b = _a + 1.0", {"_b": dace.Memlet(f"{dst}[i]")},
                                            schedule=dace.ScheduleType.GPU_Device, external_edges=True)
        entries.append(me)
    return sdfg, entries[1]


def test_the_cuda_context_holds_every_stream_the_code_uses():
    """DaCe 2.0.0a10 lowers its running stream counter to a host-level nested SDFG's count (a strided
    GPU copy's), so the context can hold fewer streams than the nodes were given: graupel after
    ``optimize(target="gpu")`` synchronised ``streams[11]`` of a 2-stream context and crashed on a GPU.
    A node that keeps a high stream number stands for that case here; ``sdfg_scan.dace_fixes`` returns
    counts that cover it. The same SDFG under DaCe's own function shows the defect."""
    from dace.codegen.targets.cuda import CUDACodeGen

    class Codegen:   # the function only recurses through self
        pass

    fixed = CUDACodeGen._compute_cudastreams
    assert hasattr(fixed, "__wrapped__"), "sdfg_scan.dace_fixes is not installed"
    for fn, enough in ((fixed, True), (fixed.__wrapped__, False)):
        sdfg, entry = _chain_of_gpu_maps()
        entry._cuda_stream, entry._cs_childpath = 7, False   # what DaCe's reset counter leaves behind
        Codegen._compute_cudastreams = fn
        streams, _ = fn(Codegen(), sdfg)
        assert (streams >= 8) is enough, (fn, streams)
    # and a whole program: the generated context covers every stream and event the code names
    sdfg, _ = _chain_of_gpu_maps()
    ctx, used_s, used_e = streams_within_context("\n".join(o.clean_code for o in sdfg.generate_code()))
    assert ctx[0] >= used_s and ctx[1] >= used_e, (ctx, used_s, used_e)
