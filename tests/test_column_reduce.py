"""ColumnReduce: every op x expansion x layout x dtype against ``reference.column_reduce``.

One SDFG per (layout, dtype) holds a node per (op, expansion, variant) and is compiled once with
symbolic sizes; every expansion is compared bitwise with its pinned order (``lanes``, replay, with
``reference.column_reduce(order="lanes", lanes=...)``).
"""


import dace
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as hs

import sdfg_scan
from sdfg_scan import reference as R
from sdfg_scan.choice import choose
from tests.conftest import cuda_code, nvcc_compile

N, K = dace.symbol("N"), dace.symbol("K")
OPS = R.REDUCE_OPS
IMPLS = ("sequential", "blocked", "tree", "lanes")
SELECT = ("min", "max", "argmin", "argmax")
EXACT = {"sequential": "sequential", "blocked": "sequential", "tree": "tree", "kvector": "sequential"}
VARIANTS = ("plain", "masked")  # masked: mask and per-column levels
LAYOUTS = ("kcontig", "cellcontig")
DTYPES = (np.float64, np.float32)


def _out_dtype(op, dt):
    return np.int64 if op.startswith("arg") else (np.bool_ if op in ("any", "all") else dt)


def add_reduce(sdfg, st, name, op, impl, layout, masked, reverse=False, **props):
    """Add a ColumnReduce node reading x (and m, lev) and writing a new output ``name``."""
    axis = -1 if layout == "kcontig" else 0
    sdfg.add_array(name, [N], dace.typeclass(_out_dtype(op, sdfg.arrays["x"].dtype.as_numpy_dtype().type)))
    node = sdfg_scan.ColumnReduce(name, op=op, axis=axis, mask=masked, levels=masked, reverse=reverse)
    node.implementation = impl
    for key, value in props.items():
        setattr(node, key, value)
    st.add_node(node)
    conns = {"_in": "x"} | ({"_mask": "m", "_levels": "lev"} if masked else {})
    for conn, data in conns.items():
        st.add_edge(st.add_read(data), None, node, conn, dace.Memlet.from_array(data, sdfg.arrays[data]))
    st.add_edge(node, "_out", st.add_write(name), None, dace.Memlet.from_array(name, sdfg.arrays[name]))
    return node


def base_sdfg(name, layout, dtype):
    sdfg = dace.SDFG(name)
    shape = [N, K] if layout == "kcontig" else [K, N]
    sdfg.add_array("x", shape, dace.typeclass(dtype))
    sdfg.add_array("m", shape, dace.bool_)
    sdfg.add_array("lev", [N], dace.int32)
    return sdfg, sdfg.add_state("reduce")


def out_name(op, impl, variant, reverse=False):
    return f"o_{op}_{impl}_{variant}" + ("_rev" if reverse else "")


# the full op matrix in one configuration, the layout/dtype-sensitive ops in the others (compile time)
CONFIGS = [("kcontig", np.float64, OPS), ("cellcontig", np.float64, ("sum", "argmin", "all")),
           ("kcontig", np.float32, ("prod", "argmax")), ("cellcontig", np.float32, ("sum", "min", "any"))]


@pytest.fixture(scope="module", params=CONFIGS, ids=lambda p: f"{p[0]}-{np.dtype(p[1]).name}")
def compiled(request):
    layout, dtype, ops = request.param
    sdfg, st = base_sdfg(f"test_column_reduce_{layout}_{np.dtype(dtype).name}", layout, dtype)
    for op in ops:
        for impl in IMPLS + (("kvector",) if op in SELECT else ()):
            add_reduce(sdfg, st, out_name(op, impl, "masked"), op, impl, layout, True, block_size=64, tree_block=16)
        add_reduce(sdfg, st, out_name(op, "sequential", "masked", True), op, "sequential", layout, True,
                   reverse=True)
    for impl in ("blocked", "tree"):
        add_reduce(sdfg, st, out_name(ops[0], impl, "plain"), ops[0], impl, layout, False, block_size=64,
                   tree_block=16)
    for op in [o for o in ops if o in ("sum", "prod")]:  # lanes: vector path (8, 4 lanes), generic (3 lanes)
        for lanes in (8, 4, 3):
            add_reduce(sdfg, st, out_name(op, "lanes", "plain") + f"_L{lanes}", op, "lanes", layout, False, lanes=lanes)
    for op in [o for o in ops if o in SELECT]:  # the unmasked fast paths (no "idx < 0" test), both directions
        for impl in ("blocked", "kvector"):
            add_reduce(sdfg, st, out_name(op, impl, "plain"), op, impl, layout, False, block_size=64)
        add_reduce(sdfg, st, out_name(op, "blocked", "plain", True), op, "blocked", layout, False, reverse=True,
                   block_size=64)
    sdfg.expand_library_nodes()
    return layout, dtype, sdfg, sdfg.compile()


def run(compiled, x, m, lev):
    """x, m: (ncol, nlev) in logical layout; returns {output name: array}."""
    layout, dtype, sdfg, fn = compiled
    n, k = x.shape
    xa, ma = (x, m) if layout == "kcontig" else (np.array(x.T, order="C"), np.array(m.T, order="C"))
    outs = {name: np.zeros(n, dtype=desc.dtype.as_numpy_dtype()) for name, desc in sdfg.arrays.items()
            if name.startswith("o_")}
    fn(x=xa.astype(dtype), m=ma, lev=lev.astype(np.int32), N=n, K=k, **outs)
    return outs


def check(outs, x, m, lev):
    for name, got in outs.items():
        _, op, impl, variant, *tags = name.split("_")
        mm, ll = (m, lev) if variant == "masked" else (None, None)
        lanes = next((int(t[1:]) for t in tags if t.startswith("L")), 8)
        if impl == "lanes":
            want = R.column_reduce(x, op, -1, mm, ll, order="lanes", lanes=lanes)
        elif "rev" in tags:
            want = R.column_fold(x, op, -1, mm, ll, reverse=True)
        else:
            want = R.column_reduce(x, op, -1, mm, ll, order=EXACT[impl])
        assert got.dtype == want.dtype, name
        assert bitwise_equal(got, want), (name, got[:6], want[:6])


def bitwise_equal(a, b):
    """Bitwise equality; NaNs only need to sit at the same places (payloads are not specified)."""
    if a.dtype.kind == "f":
        nan = np.isnan(a)
        if not np.array_equal(nan, np.isnan(b)):
            return False
        a, b = a[~nan], b[~nan]
    return np.array_equal(a.view(np.uint8), b.view(np.uint8))


def data(rng, n, k, dtype, special=False):
    x = rng.standard_normal((n, k)).astype(dtype)
    if special and x.size:
        flat = x.reshape(-1)
        pick = rng.integers(0, flat.size, size=max(1, flat.size // 7))
        flat[pick] = rng.choice(np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1.0], dtype=dtype), size=pick.size)
    m = rng.random((n, k)) > 0.3
    lev = rng.integers(0, k + 1, n)
    return x, m, lev


@pytest.mark.parametrize("nlev", [1, 2, 65, 90])
def test_against_reference(compiled, nlev):
    rng = np.random.default_rng(nlev)
    for ncol in (1, 37, 130):
        x, m, lev = data(rng, ncol, nlev, compiled[1])
        check(run(compiled, x, m, lev), x, m, lev)


def test_empty_columns(compiled):
    x, m, lev = data(np.random.default_rng(0), 5, 0, compiled[1])
    outs = run(compiled, x, m, lev)
    check(outs, x, m, lev)
    if "o_argmin_sequential_masked" in outs:
        assert (outs["o_argmin_sequential_masked"] == -1).all()


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_special_values_and_ties(compiled):
    rng = np.random.default_rng(7)
    x, m, lev = data(rng, 64, 33, compiled[1], special=True)
    x[:, 3] = x[:, 9] = -5.0  # ties: the first index wins
    check(run(compiled, x, m, lev), x, m, lev)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ncol=hs.integers(1, 70), nlev=hs.integers(0, 40), seed=hs.integers(0, 2**16), special=hs.booleans())
def test_hypothesis(compiled, ncol, nlev, seed, special):
    x, m, lev = data(np.random.default_rng(seed), ncol, nlev, compiled[1], special)
    check(run(compiled, x, m, lev), x, m, lev)


def test_tree_is_order_free_for_selection_ops():
    """tree == sequential bitwise for every op but sum/prod (reference level)."""
    x, m, lev = data(np.random.default_rng(3), 50, 45, np.float64, special=True)
    for op in OPS:
        if op not in ("sum", "prod"):
            a = R.column_reduce(x, op, -1, m, lev, order="tree")
            b = R.column_fold(x, op, -1, m, lev)
            assert bitwise_equal(a, b), op


def test_lanes_reference():
    """order="lanes": one lane is the sequential fold; lanes are folded in lane order; only sum/prod
    depend on it; a hand-written 3-lane sum of one column."""
    x, m, lev = data(np.random.default_rng(4), 40, 23, np.float64, special=True)
    for op in OPS:
        a = R.column_reduce(x, op, -1, m, lev, order="lanes", lanes=1 if op in ("sum", "prod") else 5)
        assert bitwise_equal(a, R.column_fold(x, op, -1, m, lev)), op
    col = np.random.default_rng(5).standard_normal(8)
    lane = [-0.0, -0.0, -0.0]
    for k, v in enumerate(col):
        lane[k % 3] = lane[k % 3] + v
    want = (lane[0] + lane[1]) + lane[2]
    assert bitwise_equal(R.column_reduce(col[None], "sum", order="lanes", lanes=3), np.array([want]))
    with pytest.raises(ValueError, match="lanes must be >= 1"):
        R.column_reduce(col[None], "sum", order="lanes", lanes=0)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("nlev", [7, 90])
def test_special_values_without_nan(compiled, nlev):
    """The NaN-free fast passes (blocked: one compare, kvector: vector lanes) see +-0, +-inf and ties;
    NaN-free blocks next to a block with one NaN (the block redone exactly)."""
    rng = np.random.default_rng(11 + nlev)
    x, m, lev = data(rng, 200, nlev, compiled[1])
    flat = x.reshape(-1)
    pick = rng.integers(0, flat.size, size=flat.size // 5)
    # no -inf among the scattered values: a cell with +inf and -inf is redone like one with a NaN
    flat[pick] = rng.choice(np.array([0.0, -0.0, np.inf, 1.0, -1.0], dtype=x.dtype), size=pick.size)
    x[:, nlev // 2] = x[:, nlev - 1] = -7.0  # ties: the first index wins
    x[5, :] = np.inf
    x[6, :] = -np.inf
    x[7, :] = 0.0
    x[7, ::2] = -0.0
    check(run(compiled, x, m, lev), x, m, lev)
    x[150, nlev - 1] = np.nan  # one NaN: its block (cells 128..191) is redone, the others are not
    x[151, 0] = np.nan
    check(run(compiled, x, m, lev), x, m, lev)


@pytest.mark.parametrize("layout, op, want", [("cellcontig", "sum", "blocked"), ("cellcontig", "argmin", "blocked"),
                                               ("kcontig", "sum", "sequential"), ("kcontig", "argmin", "kvector"),
                                               ("kcontig", "max", "kvector")])
def test_auto_choice(layout, op, want):
    sdfg, st = base_sdfg(f"auto_{layout}", layout, np.float64)
    node = add_reduce(sdfg, st, "o", op, "auto", layout, False)
    assert choose(node, st).implementation == want
    node.reproducibility = "replay"  # lanes' vector path (K-contiguous sum) beats the exact choice
    assert choose(node, st).implementation == ("lanes" if (layout, op) == ("kcontig", "sum") else want)
    node.lanes = 6  # no vector path: the exact choice again
    assert choose(node, st).implementation == want
    masked = add_reduce(sdfg, st, "om", op, "auto", layout, True)  # kvector's fast path needs no mask
    assert choose(masked, st).implementation == ("blocked" if layout == "cellcontig" else "sequential")


@pytest.mark.parametrize("mutate, message", [
    (lambda s, n: setattr(n, "op", "median"), "op must be one of"),
    (lambda s, n: s.arrays["o"].__setattr__("dtype", dace.float32), "expected int32 or int64"),
    (lambda s, n: s.arrays["lev"].__setattr__("dtype", dace.float64), "expected an integer type"),
    (lambda s, n: s.arrays["m"].__setattr__("dtype", dace.int32), "expected bool"),
    (lambda s, n: setattr(n, "axis", 2), "out of range"),
])
def test_errors(mutate, message):
    sdfg, st = base_sdfg("errors", "kcontig", np.float64)
    node = add_reduce(sdfg, st, "o", "argmin", "sequential", "kcontig", True)
    mutate(sdfg, node)
    with pytest.raises(ValueError, match=message) as err:
        node.validate(sdfg, st)
    assert str(err.value).startswith("sdfg_scan.ColumnReduce 'o': ")


def test_levels_wrong_rank():
    sdfg = dace.SDFG("levels_rank")
    sdfg.add_array("x", [N, K], dace.float64)
    sdfg.add_array("lev", [N, K], dace.int32)
    sdfg.add_array("o", [N], dace.float64)
    st = sdfg.add_state()
    node = sdfg_scan.ColumnReduce("r", levels=True)
    st.add_edge(st.add_read("x"), None, node, "_in", dace.Memlet("x[0:N, 0:K]"))
    st.add_edge(st.add_read("lev"), None, node, "_levels", dace.Memlet("lev[0:N, 0:K]"))
    st.add_edge(node, "_out", st.add_write("o"), None, dace.Memlet("o[0:N]"))
    with pytest.raises(ValueError, match="expected the K-less shape"):
        node.validate(sdfg, st)


def test_reference_errors():
    x = np.zeros((3, 4))
    with pytest.raises(ValueError, match="levels must lie in"):
        R.column_fold(x, "sum", levels=np.array([0, 5, 1]))
    with pytest.raises(ValueError, match="unknown reduction op"):
        R.column_fold(x, "mean")


@dace.program
def frontend_prog(xf: dace.float64[N, K], mf: dace.bool_[N, K], lf: dace.int32[N], af: dace.int64[N],
                  sf: dace.float64[N]):
    af[:] = sdfg_scan.column_reduce(xf, "argmin", axis=-1)
    sf[:] = sdfg_scan.column_reduce(xf, "sum", axis=1, mask=mf, levels=lf)


def test_frontend():
    sdfg = frontend_prog.to_sdfg()
    nodes = [n for n, _ in sdfg.all_nodes_recursive() if isinstance(n, sdfg_scan.ColumnReduce)]
    assert sorted(n.op for n in nodes) == ["argmin", "sum"]
    xv, mv, lv = data(np.random.default_rng(1), 9, 13, np.float64)  # not x/m: the program would close over them
    av, sv = np.zeros(9, np.int64), np.zeros(9)
    sdfg(xf=xv, mf=mv, lf=lv.astype(np.int32), af=av, sf=sv, N=9, K=13)
    assert np.array_equal(av, np.argmin(xv, axis=1))
    assert np.array_equal(sv, R.column_fold(xv, "sum", -1, mv, lv))
    assert np.array_equal(sdfg_scan.column_reduce(xv, "argmin"), np.argmin(xv, axis=1))


@dace.program
def one_column(x1: dace.float64[K], m1: dace.bool_[K], l1: dace.int32, x2: dace.float64[K, 3], s1: dace.float64[1],
               a1: dace.int64[1], r1: dace.float64[1], b1: dace.bool_[1], c1: dace.float64[1]):
    s1[:] = sdfg_scan.column_reduce(x1, "sum", axis=0)
    a1[0] = sdfg_scan.column_reduce(x1, "argmax")
    r1[:] = sdfg_scan.column_reduce(x1, "min", mask=m1, levels=l1)
    b1[:] = sdfg_scan.column_reduce(x1, "any", mask=m1)
    c1[:] = sdfg_scan.column_reduce(x2[:, 1], "prod")  # a strided column of a 2-d array


@pytest.fixture(scope="module")
def one_column_compiled():
    return one_column.to_sdfg().compile()


@pytest.mark.parametrize("k", [0, 1, 2, 65])
def test_frontend_one_column(one_column_compiled, k):
    """1-d input (one column) inside a program, bitwise ``reference.column_fold``: the result has one element."""
    rng = np.random.default_rng(k)
    x1, m1, x2 = rng.standard_normal(k), rng.random(k) < 0.6, rng.uniform(0.5, 1.5, (k, 3))
    l1 = np.int32(k // 2)
    outs = {"s1": np.zeros(1), "a1": np.zeros(1, np.int64), "r1": np.zeros(1), "b1": np.zeros(1, bool),
            "c1": np.zeros(1)}
    one_column_compiled(x1=x1, m1=m1, l1=l1, x2=x2, K=k, **outs)
    want = {"s1": R.column_fold(x1, "sum", 0), "a1": R.column_fold(x1, "argmax"),
            "r1": R.column_fold(x1, "min", -1, m1, l1), "b1": R.column_fold(x1, "any", -1, m1),
            "c1": R.column_fold(x2[:, 1], "prod")}
    for name, value in want.items():
        assert np.shape(value) == () and np.array_equal(outs[name], np.reshape(value, 1)), name


@pytest.fixture(scope="module")
def gpu_sdfg():
    sdfg, st = base_sdfg("test_column_reduce_gpu", "cellcontig", np.float64)
    for impl in ("sequential", "tree", "lanes", "auto"):
        add_reduce(sdfg, st, f"o_argmin_{impl}", "argmin", impl, "cellcontig", True)
        add_reduce(sdfg, st, f"o_sum_{impl}", "sum", impl, "cellcontig", False)
    sdfg.apply_gpu_transformations()
    sdfg.expand_library_nodes()
    return sdfg


@pytest.mark.gpu
def test_gpu_codegen(gpu_sdfg):
    cu = cuda_code(gpu_sdfg)
    assert cu.count("__global__") >= 8
    # the GPU tree works on one column per thread
    assert "st[34][1]" in cu


@pytest.mark.gpu
@pytest.mark.slow
def test_gpu_nvcc(gpu_sdfg, tmp_path):
    nvcc_compile(cuda_code(gpu_sdfg), tmp_path)


def test_mask_of_another_dtype_is_refused_naming_numpys_dtype():
    """The message names NumPy's dtype (``int32``), not the C type (``int``)."""
    n, k = dace.symbol("N"), dace.symbol("K")

    @dace.program
    def prog(x: dace.float64[n, k], m: dace.int32[n, k], s: dace.float64[n]):
        s[:] = sdfg_scan.column_reduce(x, "sum", axis=1, mask=m)

    with pytest.raises(Exception, match="ColumnReduce 'column_reduce': connector '_mask' has dtype int32, expected bool"):
        prog.to_sdfg().validate()
