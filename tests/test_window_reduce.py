"""WindowReduce: direct and kcached against ``reference.window_reduce``, bitwise, both layouts and dtypes."""

import dace
import numpy as np
import pytest
from dace.sdfg.state import LoopRegion
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as hs

import sdfg_scan
from sdfg_scan import reference as R
from sdfg_scan.choice import choose
from tests.conftest import cuda_code, nvcc_compile

N, K = dace.symbol("N"), dace.symbol("K")
WINDOWS = {"back3": ([0.25, 0.5, 0.75, 1.0], [-3, -2, -1, 0]), "centred": ([0.3, -1.1, 0.7], [1, 0, -1]),
           "ahead": ([2.0, 1.0], [2, 5])}
BODY = "_out = x0 + x1 * x2 if v0 else x1 - x2"  # reference: body_ref
IMPLS = ("direct", "kcached")


def body_ref(vals, valid, k):
    return vals[0] + vals[1] * vals[2] if valid[0] else vals[1] - vals[2]


def add_window(sdfg, st, name, weights, offsets, impl, layout, body="", unroll=4):
    shape = sdfg.arrays["x"].shape
    sdfg.add_array(name, shape, sdfg.arrays["x"].dtype)
    node = sdfg_scan.WindowReduce(name, weights, offsets, axis=-1 if layout == "kcontig" else 0, body=body)
    node.implementation, node.block_size, node.unroll = impl, 16, unroll
    st.add_node(node)
    st.add_edge(st.add_read("x"), None, node, "_in", dace.Memlet.from_array("x", sdfg.arrays["x"]))
    st.add_edge(node, "_out", st.add_write(name), None, dace.Memlet.from_array(name, sdfg.arrays[name]))
    return node


def base(name, layout, dtype):
    sdfg = dace.SDFG(name)
    sdfg.add_array("x", [N, K] if layout == "kcontig" else [K, N], dace.typeclass(dtype))
    return sdfg, sdfg.add_state()


@pytest.fixture(scope="module", params=[(la, dt) for la in ("kcontig", "cellcontig") for dt in (np.float64, np.float32)],
                ids=lambda p: f"{p[0]}-{np.dtype(p[1]).name}")
def compiled(request):
    layout, dtype = request.param
    sdfg, st = base(f"test_window_reduce_{layout}_{np.dtype(dtype).name}", layout, dtype)
    for impl in IMPLS:
        for wname, (w, o) in WINDOWS.items():
            add_window(sdfg, st, f"o_{impl}_{wname}", w, o, impl, layout)
        add_window(sdfg, st, f"o_{impl}_body", [], [-1, 0, 1], impl, layout, BODY)
    sdfg.expand_library_nodes()
    return layout, dtype, sdfg, sdfg.compile()


@pytest.fixture(scope="module")
def unrolled():
    """Cell-contiguous ``direct`` with other unroll-and-jam depths (1: one level per pass)."""
    sdfg, st = base("test_window_reduce_unroll", "cellcontig", np.float64)
    for unroll in (1, 2, 3, 7):
        for wname, (w, o) in WINDOWS.items():
            add_window(sdfg, st, f"o_u{unroll}_{wname}", w, o, "direct", "cellcontig", unroll=unroll)
    add_window(sdfg, st, "o_u3_body", [], [-1, 0, 1], "direct", "cellcontig", BODY, unroll=3)
    sdfg.expand_library_nodes()
    return "cellcontig", np.float64, sdfg, sdfg.compile()


def run_check(compiled, x):
    layout, dtype, sdfg, fn = compiled
    n, k = x.shape
    x = x.astype(dtype)
    xa = x if layout == "kcontig" else np.array(x.T, order="C")
    outs = {name: np.zeros_like(xa) for name in sdfg.arrays if name.startswith("o_")}
    fn(x=xa, N=n, K=k, **outs)
    for name, got in outs.items():
        got = got if layout == "kcontig" else got.T
        _, impl, wname = name.split("_")
        if wname == "body":
            want = R.window_reduce(x, [], [-1, 0, 1], body=body_ref)
        else:
            want = R.window_reduce(x, *WINDOWS[wname])
        nan = np.isnan(want)
        assert np.array_equal(np.isnan(got), nan), name
        assert np.array_equal(got[~nan].view(np.uint8), want[~nan].view(np.uint8)), (name, got, want)


@pytest.mark.parametrize("nlev", [1, 2, 65, 90])
def test_against_reference(compiled, nlev):
    rng = np.random.default_rng(nlev)
    for ncol in (1, 21, 70):
        run_check(compiled, rng.standard_normal((ncol, nlev)))


def test_empty(compiled):
    run_check(compiled, np.zeros((4, 0)))


@pytest.mark.parametrize("nlev", [0, 1, 4, 5, 6, 9, 10, 11, 12, 13, 14, 90])
def test_unroll_remainders(unrolled, nlev):
    """Every remainder of the interior levels modulo the unroll depth, bitwise."""
    run_check(unrolled, np.random.default_rng(nlev).standard_normal((37, nlev)))


def test_unroll_schedule():
    """The jammed level loop exists for weights on cell-contiguous data only (not for a body, not K-contiguous)."""
    def loops(layout, body="", impl="direct"):
        sdfg, st = base(f"unroll_sched_{layout}", layout, np.float64)
        add_window(sdfg, st, "o", *(([], [-1, 0, 1]) if body else WINDOWS["back3"]), impl, layout, body)
        sdfg.expand_library_nodes()
        return {r.label for r, _ in sdfg.all_nodes_recursive() if isinstance(r, LoopRegion)}

    assert "levels_jam" in loops("cellcontig")
    assert "levels_jam" not in loops("cellcontig", BODY)
    assert "levels_jam" not in loops("kcontig")
    assert "levels_jam" not in loops("cellcontig", impl="kcached")


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ncol=hs.integers(1, 40), nlev=hs.integers(0, 30), seed=hs.integers(0, 2**16))
def test_hypothesis(compiled, ncol, nlev, seed):
    run_check(compiled, np.random.default_rng(seed).standard_normal((ncol, nlev)) * 1e3)


@pytest.mark.parametrize("kwargs, message", [
    (dict(weights=[], offsets=[]), "offsets is empty"),
    (dict(weights=[1.0], offsets=[-1, 0]), "1 weights for 2 offsets"),
    (dict(weights=[], offsets=[0], body="y = x0"), "body does not assign '_out'"),
    (dict(weights=[1.0], offsets=[0], unroll=0), "unroll must be positive, got 0"),
])
def test_errors(kwargs, message):
    sdfg, st = base("errors", "kcontig", np.float64)
    node = add_window(sdfg, st, "o", impl="direct", layout="kcontig", **kwargs)
    with pytest.raises(ValueError, match=message) as err:
        node.validate(sdfg, st)
    assert str(err.value).startswith("sdfg_scan.WindowReduce 'o': ")


def test_reference_errors():
    with pytest.raises(ValueError, match="must not be empty"):
        R.window_reduce(np.zeros((2, 3)), [], [])
    with pytest.raises(ValueError, match="one weight per offset"):
        R.window_reduce(np.zeros((2, 3)), [1.0], [0, 1])


@dace.program
def frontend_prog(xw: dace.float64[N, K], yw: dace.float64[N, K]):
    yw[:] = sdfg_scan.window_reduce(xw, [1.0, 0.5], [-1, 0], axis=-1)


def test_frontend():
    sdfg = frontend_prog.to_sdfg()
    assert [n.offsets for n, _ in sdfg.all_nodes_recursive() if isinstance(n, sdfg_scan.WindowReduce)] == [[-1, 0]]
    xv = np.random.default_rng(0).standard_normal((6, 9))
    yv = np.zeros_like(xv)
    sdfg(xw=xv, yw=yv, N=6, K=9)
    assert np.array_equal(yv, R.window_reduce(xv, [1.0, 0.5], [-1, 0]))


@pytest.fixture(scope="module")
def gpu_sdfg():
    sdfg, st = base("test_window_reduce_gpu", "cellcontig", np.float64)
    for impl in ("direct", "kcached", "auto"):
        add_window(sdfg, st, f"o_{impl}", *WINDOWS["back3"], impl, "cellcontig")
    sdfg.apply_gpu_transformations()
    sdfg.expand_library_nodes()
    return sdfg


@pytest.mark.gpu
def test_gpu_codegen(gpu_sdfg):
    assert cuda_code(gpu_sdfg).count("__global__") >= 3


@pytest.mark.gpu
@pytest.mark.slow
def test_gpu_nvcc(gpu_sdfg, tmp_path):
    nvcc_compile(cuda_code(gpu_sdfg), tmp_path)


@pytest.mark.parametrize("layout", ["kcontig", "cellcontig"])
def test_auto_choice(layout):
    """CPU: ``direct`` in both layouts (faster than the ring's shifts); GPU: ``kcached``."""
    sdfg, st = base(f"auto_{layout}", layout, np.float64)
    node = add_window(sdfg, st, "o", *WINDOWS["back3"], "auto", layout)
    assert choose(node, st).implementation == "direct"
