"""CumulativeScan: every expansion x layout x dtype against ``reference.cumulative``, bitwise."""

from __future__ import annotations

import itertools
import platform

import dace
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sdfg_scan import reference
from sdfg_scan.harness import numpy_array, strides_for
from sdfg_scan.nodes import CumulativeScan

N, K = dace.symbol("N"), dace.symbol("K")
VARIANTS = list(itertools.product(reference.CUMULATIVE_OPS, (False, True), (False, True)))
CONFIGS = [("sequential", "k"), ("sequential", "cell"), ("blocked", "cell"), ("blocked", "k"), ("auto", "k"),
           ("auto", "cell")]
DTYPES = {"float64": dace.float64, "float32": dace.float32}
TYPES = {**DTYPES, "bool": dace.bool_}  # every dtype compiled() builds; DTYPES: those of the random-size test
EXACT = [("sequential", "k"), ("blocked", "cell")]  # the exact expansions, each on its own layout
SIZES = [(1, 1), (7, 2), (1000, 65), (7, 90), (1, 90), (1000, 1), (5, 0), (0, 4)]


def _name(op, rev, exc):
    return f"y_{op}_{'rev' if rev else 'fwd'}_{'exc' if exc else 'inc'}"


def build(impl: str, layout: str, dtype) -> dace.SDFG:
    """One SDFG with a CumulativeScan per (op, reverse, exclusive), all reading ``x``."""
    sdfg = dace.SDFG(f"test_cumulative_{impl}_{layout}_{dtype.to_string()}")
    strides = strides_for([N, K], 1, layout)
    sdfg.add_array("x", [N, K], dtype, strides=strides)
    state = sdfg.add_state()
    read = state.add_read("x")
    for op, rev, exc in VARIANTS:
        out = _name(op, rev, exc)
        sdfg.add_array(out, [N, K], dtype, strides=strides)
        node = CumulativeScan(out, op=op, axis=1, reverse=rev, exclusive=exc)
        node.implementation = impl
        node.block_size = 64  # several blocks and a partial last block at the test sizes
        state.add_edge(read, None, node, "_in", dace.Memlet("x[0:N, 0:K]"))
        state.add_edge(node, "_out", state.add_write(out), None, dace.Memlet(f"{out}[0:N, 0:K]"))
    sdfg.validate()
    return sdfg


_COMPILED: dict = {}


def compiled(impl, layout, dtype_name):
    key = (impl, layout, dtype_name)
    if key not in _COMPILED:
        _COMPILED[key] = build(impl, layout, TYPES[dtype_name]).compile()
    return _COMPILED[key]


def _bitwise(got: np.ndarray, want: np.ndarray, nan_payloads: bool) -> bool:
    """Bitwise equality; without ``nan_payloads`` a NaN matches any NaN (C compilers may commute the operands
    of ``+`` and ``*``, which picks the other NaN's payload: IEEE 754 does not pin it)."""
    if not nan_payloads and got.dtype.kind == "f":
        nan = np.isnan(want)
        if not np.array_equal(np.isnan(got), nan):
            return False
        got, want = got[~nan], want[~nan]
    return np.array_equal(got.view(f"u{got.itemsize}"), want.view(f"u{want.itemsize}"))


def run_and_check(impl, layout, dtype_name, x):
    prog = compiled(impl, layout, dtype_name)
    x = numpy_array(x, 1, layout)
    outs = {_name(*v): numpy_array(np.full(x.shape, 7, x.dtype), 1, layout) for v in VARIANTS}
    prog(x=x, N=x.shape[0], K=x.shape[1], **outs)
    for op, rev, exc in VARIANTS:
        with np.errstate(invalid="ignore"):  # inf - inf
            want = reference.cumulative(x, op, 1, rev, exc)
        got = outs[_name(op, rev, exc)]
        assert got.dtype == want.dtype
        assert _bitwise(got, want, nan_payloads=op in ("min", "max")), (
            f"{impl}/{layout}/{op}/reverse={rev}/exclusive={exc}: not bitwise equal to the reference")


@pytest.mark.parametrize("dtype_name", list(DTYPES))
@pytest.mark.parametrize("impl,layout", CONFIGS, ids=[f"{i}-{lay}" for i, lay in CONFIGS])
def test_all_sizes_bitwise(impl, layout, dtype_name):
    rng = np.random.default_rng(1)
    for shape in SIZES:
        x = (rng.random(shape) * 2 - 0.5).astype(dtype_name)
        run_and_check(impl, layout, dtype_name, x)


@settings(max_examples=15, deadline=None)
@given(ncol=st.integers(0, 300), nlev=st.integers(0, 100), seed=st.integers(0, 2**31),
       impl_layout=st.sampled_from(CONFIGS))
def test_hypothesis_shapes_and_values(ncol, nlev, seed, impl_layout):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((ncol, nlev)) * 10.0 ** rng.integers(-3, 4)
    run_and_check(*impl_layout, "float64", x)


def test_nan_propagates_like_numpy():
    x = np.random.default_rng(2).random((4, 6))
    x[1, 2] = np.nan
    x[2, 0] = np.nan
    run_and_check("blocked", "cell", "float64", x)
    run_and_check("sequential", "k", "float64", x)


def _bits(value: float, dtype: str) -> np.ndarray:
    return np.array([value], dtype)


def _nan(sign: int, payload: int, dtype: str) -> np.ndarray:
    """A quiet NaN with ``payload`` in its low mantissa bits and the sign bit ``sign``."""
    width = np.dtype(dtype).itemsize * 8
    exp = {64: 0x7FF8 << 48, 32: 0x7FC0 << 16}[width]
    return np.array([(sign << (width - 1)) | exp | payload], f"u{width // 8}").view(dtype)


def special_values(dtype: str, shape: tuple[int, int], seed: int) -> np.ndarray:
    """Columns drawn from signed zeros, NaNs of several payloads and signs, infinities and a few numbers,
    led by the columns of the report ([-0, 0, -0] and its mirror) and NaN-only columns."""
    pool = np.concatenate([_bits(v, dtype) for v in (-0.0, 0.0, -0.0, 0.0, 1.0, -1.0, np.inf, -np.inf)]
                          + [_nan(0, 0, dtype), _nan(1, 0, dtype), _nan(0, 5, dtype), _nan(1, 3, dtype)])
    rng = np.random.default_rng(seed)
    x = pool[rng.integers(0, pool.size, shape)]
    x[0, :3] = _bits(-0.0, dtype)[0], 0.0, _bits(-0.0, dtype)[0]
    x[1, :3] = 0.0, _bits(-0.0, dtype)[0], 0.0
    x[2, :4] = _nan(0, 5, dtype)[0], _nan(1, 3, dtype)[0], -0.0, _nan(0, 0, dtype)[0]
    return x


@pytest.mark.parametrize("dtype_name", list(DTYPES))
@pytest.mark.parametrize("impl,layout", CONFIGS, ids=[f"{i}-{lay}" for i, lay in CONFIGS])
def test_signed_zeros_and_nans_bitwise(impl, layout, dtype_name):
    """Ties of -0.0 and 0.0 go to the later level in min/max, the first NaN stays (payload and sign), an
    exclusive scan starts from identity (op) x[0] (0.0 + -0.0 = +0.0): bitwise the reference, every variant
    (NaN payloads of sum/prod excepted: see _bitwise)."""
    for shape in [(3, 4), (40, 23)]:
        run_and_check(impl, layout, dtype_name, special_values(dtype_name, shape, seed=shape[1]))


@pytest.mark.skipif(platform.machine().lower() not in ("x86_64", "amd64"),
                    reason="NumPy's own min/max tie rule comes from each platform's SIMD code; the reference's is "
                           "that of x86-64")
@pytest.mark.parametrize("op", ["min", "max"])
def test_reference_min_max_is_numpys_accumulate(op):
    """The reference's explicit rule gives NumPy's np.minimum/np.maximum.accumulate bits (x86-64)."""
    ufunc = np.minimum if op == "min" else np.maximum
    for dtype in DTYPES:
        x = special_values(dtype, (40, 23), seed=1)
        for axis in (0, 1):
            want = ufunc.accumulate(x, axis=axis)
            got = reference.cumulative(x, op, axis)
            assert np.array_equal(got.view(f"u{got.itemsize}"), want.view(f"u{want.itemsize}")), (dtype, axis)


@pytest.mark.parametrize("impl,layout", EXACT, ids=[f"{i}-{lay}" for i, lay in EXACT])
def test_bool_bitwise(impl, layout):
    """Bool columns: min is logical and (identity True), max logical or (identity False), as NumPy's
    np.minimum/np.maximum; sum/prod as NumPy's bool add/multiply (or/and); every variant."""
    rng = np.random.default_rng(5)
    for shape in [(1, 1), (9, 13), (70, 5)]:
        x = rng.random(shape) < 0.3
        run_and_check(impl, layout, "bool", x)
    assert np.array_equal(reference.cumulative(x, "max", 1), np.maximum.accumulate(x, axis=1))
    assert np.array_equal(reference.cumulative(x, "min", 1), np.minimum.accumulate(x, axis=1))


def test_complex_min_max_refused():
    """NumPy orders complex numbers lexicographically; CumulativeScan refuses them for min/max (validate()
    names the node, the connector and the dtype), the reference too; sum and prod are accepted."""
    sdfg = dace.SDFG("test_cumulative_complex")
    sdfg.add_array("x", [N, K], dace.complex128)
    sdfg.add_array("y", [N, K], dace.complex128)
    state = sdfg.add_state()
    node = CumulativeScan("cmax", op="max", axis=1)
    state.add_edge(state.add_read("x"), None, node, "_in", dace.Memlet("x[0:N, 0:K]"))
    state.add_edge(node, "_out", state.add_write("y"), None, dace.Memlet("y[0:N, 0:K]"))
    with pytest.raises(Exception, match="sdfg_scan.CumulativeScan 'cmax': connector '_in' has dtype complex128, "
                                        "but op 'max' needs ordered values"):
        sdfg.validate()
    node.op = "sum"
    sdfg.validate()
    for op in ("min", "max"):
        with pytest.raises(TypeError, match=f"cumulative '{op}' of complex128 values is not supported"):
            reference.cumulative(np.ones((2, 3), complex), op, 1)


def test_middle_axis_of_3d_window_with_strides():
    """N-d operand, scan axis in the middle, a strided window of a larger container."""
    a, b, c = dace.symbol("A"), dace.symbol("B"), dace.symbol("C")
    sdfg = dace.SDFG("test_cumulative_3d_window")
    sdfg.add_array("x", [a, b, c], dace.float64)
    sdfg.add_array("y", [a, b, c], dace.float64)
    state = sdfg.add_state()
    node = CumulativeScan("cs", axis=1, reverse=True)
    node.implementation = "sequential"
    state.add_edge(state.add_read("x"), None, node, "_in", dace.Memlet("x[1:A, 0:B, 0:C:2]"))
    state.add_edge(node, "_out", state.add_write("y"), None, dace.Memlet("y[0:A - 1, 0:B, 0:C:2]"))
    sdfg.validate()
    x = np.random.default_rng(4).random((5, 9, 6))
    y = np.zeros_like(x)
    sdfg(x=x, y=y, A=5, B=9, C=6)
    assert np.array_equal(y[:4, :, ::2], reference.cumulative(x[1:, :, ::2], "sum", 1, reverse=True))
    assert not y[:, :, 1::2].any() and not y[4].any()


def test_3d_middle_axis():
    a, b, c = dace.symbol("A"), dace.symbol("B"), dace.symbol("C")
    sdfg = dace.SDFG("test_cumulative_3d")
    sdfg.add_array("x", [a, b, c], dace.float64)
    sdfg.add_array("y", [a, b, c], dace.float64)
    state = sdfg.add_state()
    node = CumulativeScan("cs", axis=1, reverse=True)
    node.implementation = "sequential"
    state.add_edge(state.add_read("x"), None, node, "_in", dace.Memlet("x[1:A, 0:B, 0:C]"))
    state.add_edge(node, "_out", state.add_write("y"), None, dace.Memlet("y[0:A - 1, 0:B, 0:C]"))
    sdfg.validate()
    x = np.random.default_rng(3).random((5, 9, 4))
    y = np.zeros_like(x)
    sdfg(x=x, y=y, A=5, B=9, C=4)
    assert np.array_equal(y[:4], reference.cumulative(x[1:], "sum", 1, reverse=True))
    assert not y[4].any()


@pytest.mark.parametrize("bad,message", [
    (dict(op="mean"), "op must be one of"),
    (dict(axis=2), "axis 2 is out of range"),
    (dict(block_size=0), "block_size must be positive"),
])
def test_validation_errors_name_the_node(bad, message):
    sdfg = dace.SDFG("test_cumulative_bad")
    sdfg.add_array("x", [N, K], dace.float64)
    sdfg.add_array("y", [N, K], dace.float64)
    state = sdfg.add_state()
    node = CumulativeScan("my_scan")
    for k, v in bad.items():
        setattr(node, k, v)
    state.add_edge(state.add_read("x"), None, node, "_in", dace.Memlet("x[0:N, 0:K]"))
    state.add_edge(node, "_out", state.add_write("y"), None, dace.Memlet("y[0:N, 0:K]"))
    with pytest.raises(Exception, match="sdfg_scan.CumulativeScan 'my_scan'.*" + message):
        sdfg.validate()


def test_dtype_and_shape_mismatch():
    sdfg = dace.SDFG("test_cumulative_mismatch")
    sdfg.add_array("x", [N, K], dace.float64)
    sdfg.add_array("y", [N, K], dace.float32)
    sdfg.add_array("z", [N, K + 1], dace.float64)
    state = sdfg.add_state()
    node = CumulativeScan("m")
    state.add_edge(state.add_read("x"), None, node, "_in", dace.Memlet("x[0:N, 0:K]"))
    state.add_edge(node, "_out", state.add_write("y"), None, dace.Memlet("y[0:N, 0:K]"))
    # NumPy's dtype names, as the README documents the message (not the C types "float" and "double")
    with pytest.raises(Exception, match=r"'_out' has dtype float32, expected the dtype of '_in' \(float64\)"):
        sdfg.validate()
    state.remove_node(next(n for n in state.data_nodes() if n.data == "y"))
    state.add_edge(node, "_out", state.add_write("z"), None, dace.Memlet("z[0:N, 0:K + 1]"))
    with pytest.raises(Exception, match="'_out' has shape"):
        sdfg.validate()
