"""TridiagonalSolve / TridiagonalFactor: every expansion x layout x dtype against ``reference`` and SciPy.

One SDFG per (layout, dtype) holds every CPU configuration side by side (all reading the same
``a, b, c, d``), so the whole matrix costs four compiles. ``exact`` outputs are compared bitwise
with the reference loop (and therefore with each other); every output is compared with
``scipy.linalg.solve_banded`` within a tolerance.
"""

import subprocess
from pathlib import Path

import dace
import numpy as np
import pytest
import scipy.linalg
from hypothesis import given, settings
from hypothesis import strategies as st

import sdfg_scan
from sdfg_scan import reference
from sdfg_scan.choice import choose
from sdfg_scan.harness import numpy_array, strides_for
from sdfg_scan.nodes import TridiagonalFactor, TridiagonalSolve

N, K = dace.symbol("N"), dace.symbol("K")
DTYPES = {"float64": dace.float64, "float32": dace.float32}
LAYOUTS = ("k", "cell")
# output name -> (implementation, block_size); all exact
EXACT = {"x_blocked": ("thomas", 64), "x_columns": ("thomas", 1), "x_auto": ("auto", 0)}
APPROX = {"x_pcr": ("pcr", 0)}  # replay
SIZES = [(1, 1), (3, 2), (130, 65), (64, 90), (1, 90), (77, 1)]


def build(layout: str, dtype) -> dace.SDFG:
    sdfg = dace.SDFG(f"test_tridiagonal_{layout}_{dtype.to_string()}")
    strides = strides_for([N, K], 1, layout)
    for name in ["a", "b", "c", "d", "w", "cp", "x_pre", *EXACT, *APPROX]:
        sdfg.add_array(name, [N, K], dtype, strides=strides)
    state = sdfg.add_state()
    reads = {c: state.add_read(c) for c in "abcd"}

    def add(node, ins: dict[str, str], outs: dict[str, str]):
        state.add_node(node)
        for conn, data in ins.items():
            src = reads[data] if data in reads else state.add_read(data)
            state.add_edge(src, None, node, conn, dace.Memlet(f"{data}[0:N, 0:K]"))
        for conn, data in outs.items():
            state.add_edge(node, conn, state.add_write(data), None, dace.Memlet(f"{data}[0:N, 0:K]"))

    for out, (impl, block) in {**EXACT, **APPROX}.items():
        node = TridiagonalSolve(out, axis=1, block_size=block)
        node.implementation = impl
        add(node, {c: c for c in "abcd"}, {"x": out})
    # factor blocked, then the pre-factored solve one column per iteration (a mixed schedule)
    fac = TridiagonalFactor("factor", axis=1, block_size=64)
    add(fac, {c: c for c in "abc"}, {"w": "w", "cp": "cp"})
    w_read, cp_read = state.add_access("w"), state.add_access("cp")
    for e in list(state.out_edges(fac)):
        target = w_read if e.src_conn == "w" else cp_read
        state.remove_node(e.dst)
        state.add_edge(fac, e.src_conn, target, None, e.data)
    pre = TridiagonalSolve("pre", axis=1, prefactored=True, block_size=1)
    state.add_node(pre)
    state.add_edge(reads["a"], None, pre, "a", dace.Memlet("a[0:N, 0:K]"))
    state.add_edge(reads["d"], None, pre, "d", dace.Memlet("d[0:N, 0:K]"))
    state.add_edge(w_read, None, pre, "w", dace.Memlet("w[0:N, 0:K]"))
    state.add_edge(cp_read, None, pre, "cp", dace.Memlet("cp[0:N, 0:K]"))
    state.add_edge(pre, "x", state.add_write("x_pre"), None, dace.Memlet("x_pre[0:N, 0:K]"))
    sdfg.validate()
    return sdfg


_COMPILED: dict = {}


def compiled(layout: str, dtype_name: str):
    key = (layout, dtype_name)
    if key not in _COMPILED:
        _COMPILED[key] = build(layout, DTYPES[dtype_name]).compile()
    return _COMPILED[key]


def system(rng, shape, dtype_name):
    """A random diagonally dominant system (random signs and scales)."""
    scale = 10.0 ** rng.integers(-3, 4)
    a, c, d = (rng.standard_normal(shape) * scale for _ in range(3))
    b = (np.abs(a) + np.abs(c) + rng.random(shape) * scale + scale / 2) * rng.choice([-1.0, 1.0], shape)
    return tuple(v.astype(dtype_name) for v in (a, b, c, d))


def scipy_solve(a, b, c, d):
    x = np.empty(d.shape, dtype=np.float64)
    for i in range(d.shape[0]):
        ab = np.zeros((3, d.shape[1]))
        ab[0, 1:], ab[1], ab[2, :-1] = c[i, :-1], b[i], a[i, 1:]
        x[i] = scipy.linalg.solve_banded((1, 1), ab, d[i].astype(np.float64))
    return x


def bits(x):
    return x.view(f"u{x.itemsize}")


def run_and_check(layout, dtype_name, a, b, c, d):
    prog = compiled(layout, dtype_name)
    args = {name: numpy_array(v, 1, layout) for name, v in zip("abcd", (a, b, c, d), strict=True)}
    outs = {name: numpy_array(np.full(d.shape, 7, d.dtype), 1, layout)
            for name in ["w", "cp", "x_pre", *EXACT, *APPROX]}
    prog(**args, **outs, N=d.shape[0], K=d.shape[1])
    want = reference.tridiagonal_solve(a, b, c, d, axis=1)
    w, cp = reference.tridiagonal_factor(a, b, c, axis=1)
    assert np.array_equal(bits(outs["w"]), bits(w)) and np.array_equal(bits(outs["cp"]), bits(cp)), "factor"
    for name in ["x_pre", *EXACT]:
        assert np.array_equal(bits(outs[name]), bits(want)), f"{name}/{layout}/{dtype_name}: not bitwise"
    tol = 1e-9 if dtype_name == "float64" else 2e-3
    exact = scipy_solve(a, b, c, d)
    scale = np.abs(exact).max(initial=0) + 1e-30
    assert np.abs(want - exact).max(initial=0) <= tol * scale, "reference vs scipy"
    for name in APPROX:
        assert np.abs(outs[name] - exact).max(initial=0) <= tol * scale, f"{name}/{layout}/{dtype_name}"


@pytest.mark.parametrize("dtype_name", list(DTYPES))
@pytest.mark.parametrize("layout", LAYOUTS)
def test_every_expansion_all_sizes(layout, dtype_name):
    rng = np.random.default_rng(1)
    for shape in SIZES:
        run_and_check(layout, dtype_name, *system(rng, shape, dtype_name))


@settings(max_examples=12, deadline=None)
@given(ncol=st.integers(1, 200), nlev=st.integers(1, 100), seed=st.integers(0, 2**31),
       layout=st.sampled_from(LAYOUTS), dtype_name=st.sampled_from(list(DTYPES)))
def test_hypothesis_shapes_and_values(ncol, nlev, seed, layout, dtype_name):
    rng = np.random.default_rng(seed)
    run_and_check(layout, dtype_name, *system(rng, (ncol, nlev), dtype_name))


def test_ignored_corner_coefficients():
    """``a[0]`` and ``c[n-1]`` never influence the solution (even when they are inf or nan)."""
    rng = np.random.default_rng(5)
    a, b, c, d = system(rng, (70, 90), "float64")
    a2, c2 = a.copy(), c.copy()
    a2[:, 0], c2[:, -1] = np.nan, np.inf
    prog = compiled("cell", "float64")
    outs = {name: numpy_array(np.zeros(d.shape), 1, "cell") for name in ["w", "cp", "x_pre", *EXACT, *APPROX]}
    args = {n: numpy_array(v, 1, "cell") for n, v in zip("abcd", (a2, b, c2, d), strict=True)}
    prog(**args, **outs, N=70, K=90)
    want = reference.tridiagonal_solve(a, b, c, d, axis=1)
    for name in ["x_pre", *EXACT]:
        assert np.array_equal(outs[name], want), name


def test_middle_axis_of_strided_3d_window():
    """N-d operands, solve axis in the middle, a strided window of a larger container."""
    sa, sb, sc = dace.symbol("A"), dace.symbol("B"), dace.symbol("C")
    sdfg = dace.SDFG("test_tridiagonal_3d_window")
    for name in "abcdx":
        sdfg.add_array(name, [sa, sb, sc], dace.float64)
    state = sdfg.add_state()
    node = TridiagonalSolve("tri3d", axis=1, block_size=2)
    node.implementation = "thomas"
    for name in "abcd":
        state.add_edge(state.add_read(name), None, node, name, dace.Memlet(f"{name}[1:A, 0:B, 0:C:2]"))
    state.add_edge(node, "x", state.add_write("x"), None, dace.Memlet("x[0:A - 1, 0:B, 0:C:2]"))
    sdfg.validate()
    a, b, c, d = system(np.random.default_rng(3), (5, 9, 7), "float64")
    x = np.zeros_like(d)
    sdfg(a=a, b=b, c=c, d=d, x=x, A=5, B=9, C=7)
    win = (slice(1, None), slice(None), slice(None, None, 2))
    want = reference.tridiagonal_solve(a[win], b[win], c[win], d[win], axis=1)
    assert np.array_equal(x[:4, :, ::2], want)
    assert not x[:, :, 1::2].any() and not x[4].any()


def test_frontend_solve_factor_and_prefactored():
    @dace.program
    def prog(a: dace.float64[N, K], b: dace.float64[N, K], c: dace.float64[N, K], d: dace.float64[N, K],
             x: dace.float64[N, K], y: dace.float64[N, K]):
        x[:] = sdfg_scan.tridiagonal_solve(a, b, c, d, axis=1)
        w, cp = sdfg_scan.tridiagonal_factor(a, b, c, axis=1)
        y[:] = sdfg_scan.tridiagonal_solve_prefactored(a, w, cp, d + 1.0, axis=1)

    va, vb, vc, vd = system(np.random.default_rng(7), (33, 12), "float64")
    vx, vy = np.zeros_like(vd), np.zeros_like(vd)
    prog(a=va, b=vb, c=vc, d=vd, x=vx, y=vy, N=33, K=12)
    assert np.array_equal(vx, sdfg_scan.tridiagonal_solve(va, vb, vc, vd, axis=1))
    assert np.array_equal(vy, sdfg_scan.tridiagonal_solve(va, vb, vc, vd + 1.0, axis=1))


# -- errors ---------------------------------------------------------------------------------------

def _bad_sdfg(shapes=None, dtypes=None, axis=1, prefactored=False, block_size=0):
    shapes = shapes or {}
    dtypes = dtypes or {}
    sdfg = dace.SDFG("test_tridiagonal_bad")
    ins = ("a", "w", "cp", "d") if prefactored else ("a", "b", "c", "d")
    state = sdfg.add_state()
    node = TridiagonalSolve("my_solve", axis=axis, prefactored=prefactored, block_size=block_size)
    for name in (*ins, "x"):
        shape = shapes.get(name, [N, K])
        sdfg.add_array(name, shape, dtypes.get(name, dace.float64))
        mem = dace.Memlet.from_array(name, sdfg.arrays[name])
        if name == "x":
            state.add_edge(node, "x", state.add_write("x"), None, mem)
        else:
            state.add_edge(state.add_read(name), None, node, name, mem)
    return sdfg, node


@pytest.mark.parametrize("kwargs,message", [
    (dict(shapes={"c": [N, K + 1]}), r"connector 'c' has shape \(N, K \+ 1\), expected the shape of 'a'"),
    (dict(shapes={"x": [K, N]}), "connector 'x' has shape"),
    (dict(dtypes={"d": dace.float32}), r"connector 'd' has dtype float32, expected the dtype of 'a' \(float64\)"),
    (dict(dtypes={c: dace.int32 for c in "abcdx"}), "expected float32 or float64"),
    (dict(axis=2), "axis 2 is out of range"),
    (dict(axis=-3), "axis -3 is out of range"),
    (dict(block_size=-1), "block_size must be >= 0"),
], ids=["shape", "output-shape", "dtype", "int-dtype", "axis", "negative-axis", "block-size"])
def test_validation_errors_name_the_node(kwargs, message):
    sdfg, _ = _bad_sdfg(**kwargs)
    with pytest.raises(Exception, match="sdfg_scan.TridiagonalSolve 'my_solve': .*" + message):
        sdfg.validate()


def test_prefactored_flag_must_match_connectors():
    sdfg, node = _bad_sdfg(prefactored=True)
    sdfg.validate()
    node.prefactored = False
    with pytest.raises(Exception, match=r"input connectors \['a', 'cp', 'd', 'w'\], expected \['a', 'b', 'c', 'd'\]"):
        sdfg.validate()


def test_unconnected_connector():
    sdfg, node = _bad_sdfg()
    state = sdfg.states()[0]
    state.remove_edge(next(e for e in state.in_edges(node) if e.dst_conn == "b"))
    with pytest.raises(Exception, match="connector 'b' is not connected"):
        sdfg.validate()


def test_reference_rejects_mismatched_shapes():
    with pytest.raises(ValueError, match="'c' has shape"):
        reference.tridiagonal_solve(np.ones((2, 3)), np.ones((2, 3)), np.ones((3, 3)), np.ones((2, 3)))


def test_pcr_repeats_bitwise_across_layouts_and_runs():
    """``replay`` honestly: the PCR operation order depends on the level count only."""
    a, b, c, d = system(np.random.default_rng(11), (50, 90), "float64")
    results = []
    for layout in LAYOUTS * 2:
        args = {n: numpy_array(v, 1, layout) for n, v in zip("abcd", (a, b, c, d), strict=True)}
        outs = {n: numpy_array(np.zeros(d.shape), 1, layout) for n in ["w", "cp", "x_pre", *EXACT, *APPROX]}
        compiled(layout, "float64")(**args, **outs, N=50, K=90)
        results.append(outs["x_pcr"])
    assert all(np.array_equal(bits(r), bits(results[0])) for r in results[1:])


def _one_node(name, impl, layout, shape=(N, K), window=None, gpu=False, **kwargs):
    sdfg = dace.SDFG(name)
    strides = strides_for(list(shape), 1, layout)
    for arr in "abcdx":
        sdfg.add_array(arr, list(shape), dace.float64, strides=strides)
    state = sdfg.add_state()
    node = TridiagonalSolve("tri", axis=1, **kwargs)
    node.implementation = impl
    sub = window or ", ".join(f"0:{s}" for s in shape)
    for arr in "abcd":
        state.add_edge(state.add_read(arr), None, node, arr, dace.Memlet(f"{arr}[{sub}]"))
    state.add_edge(node, "x", state.add_write("x"), None, dace.Memlet(f"x[{sub}]"))
    if gpu:
        sdfg.apply_gpu_transformations()
    return sdfg


def _find(sdfg, cls):
    return next((n, st) for n, st in sdfg.all_nodes_recursive() if isinstance(n, cls))


def test_pcr_and_cusparse_refuse_prefactored():
    for impl in ("pcr", "cusparse"):
        sdfg = dace.SDFG(f"test_tridiagonal_pre_{impl}")
        for arr in ("a", "w", "cp", "d", "x"):
            sdfg.add_array(arr, [N, K], dace.float64)
        state = sdfg.add_state()
        node = TridiagonalSolve("pre", axis=1, prefactored=True)
        node.implementation = impl
        for arr in ("a", "w", "cp", "d"):
            state.add_edge(state.add_read(arr), None, node, arr, dace.Memlet(f"{arr}[0:N, 0:K]"))
        state.add_edge(node, "x", state.add_write("x"), None, dace.Memlet("x[0:N, 0:K]"))
        with pytest.raises(ValueError, match=f"the '{impl}' expansion needs the matrix"):
            sdfg.expand_library_nodes()


def test_cusparse_rejects_layouts_it_cannot_batch():
    sdfg = _one_node("test_tridiagonal_cusparse_window", "cusparse", "cell", window="1:N, 0:K", gpu=True)
    with pytest.raises(ValueError, match="'cusparse' expansion needs every operand either cell-contiguous"):
        sdfg.expand_library_nodes()


@pytest.mark.gpu
def test_auto_picks_pcr_for_few_long_columns_on_gpu_only_when_replay_is_allowed():
    sdfg = _one_node("test_tridiagonal_auto_gpu", "auto", "cell", shape=(100, 512), gpu=True)
    node, state = _find(sdfg, TridiagonalSolve)
    assert choose(node, state).implementation == "thomas"
    node.reproducibility = "replay"
    assert choose(node, state).implementation == "pcr"
    cpu = _one_node("test_tridiagonal_auto_cpu", "auto", "cell", shape=(100, 512))
    node, state = _find(cpu, TridiagonalSolve)
    node.reproducibility = "replay"
    assert choose(node, state).implementation == "thomas"


# -- GPU code generation (never executed here) -------------------------------------------------------

@pytest.mark.gpu
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("impl,kernels", [("thomas", 1), ("pcr", 4), ("cusparse", 0)])
def test_gpu_codegen(impl, kernels, layout, tmp_path):
    from conftest import cuda_code, nvcc_compile

    sdfg = _one_node(f"test_tridiagonal_gpu_{impl}_{layout}", impl, layout, gpu=True)
    sdfg.expand_library_nodes()
    sdfg.validate()
    code = cuda_code(sdfg)
    assert code.count("__global__") == kernels
    if impl == "thomas":  # one thread per column, the exact arithmetic of the reference
        assert "T(1) / (_b - _a * _cpm)" in code
    if impl == "cusparse":
        host = next(o.clean_code for o in sdfg.generate_code() if o.language == "cpp")
        call = "cusparseDgtsvInterleavedBatch(" if layout == "cell" else "cusparseDgtsv2StridedBatch("
        assert call in host and "cusparseSetStream" in host
    elif layout == "cell":
        nvcc_compile(code, tmp_path)


@pytest.mark.gpu
@pytest.mark.slow
# CI builds icon4py's cell layout (cusparseDgtsvInterleavedBatch); the k layout's build only in make test-long
@pytest.mark.parametrize("layout", [pytest.param(lay, marks=pytest.mark.long) if lay == "k" else lay
                                    for lay in LAYOUTS])
def test_cusparse_build(layout):
    """The whole CUDA build (host + device code, linked against cuSPARSE) of both batched calls. The
    ``test`` extra installs the ``nvidia-cusparse`` wheel, so this runs wherever nvcc is."""
    import shutil

    from sdfg_scan.expansions.environments import cusparse_available
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc is not on PATH: the cusparse expansion is code-generated only")
    if not cusparse_available():
        pytest.skip("no cuSPARSE (CUDA toolkit or the nvidia-cusparse wheel of the test extra)")
    sdfg = _one_node(f"test_tridiagonal_cusparse_build_{layout}", "cusparse", layout, gpu=True)
    sdfg.expand_library_nodes()
    with dace.config.set_temporary("compiler", "cuda", "backend", value="cuda"):
        sdfg.compile(return_program_handle=False)
    lib = Path(sdfg.build_folder, "build", f"lib{sdfg.name}.so")
    assert "libcusparse" in subprocess.run(["ldd", str(lib)], capture_output=True, text=True).stdout
