"""LinearRecurrence: every expansion x layout x dtype against ``reference.linear_recurrence``, bitwise."""

from __future__ import annotations

import itertools

import dace
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import sdfg_scan
from sdfg_scan import reference
from sdfg_scan.harness import numpy_array, strides_for
from sdfg_scan.nodes import LinearRecurrence

N, K = dace.symbol("N"), dace.symbol("K")
INITS = ("none", "value", "field")
VARIANTS = list(itertools.product((False, True), INITS))
CONFIGS = [("sequential", "k"), ("sequential", "cell"), ("blocked", "cell"), ("blocked", "k"), ("auto", "k"),
           ("auto", "cell")]
DTYPES = {"float64": dace.float64, "float32": dace.float32}
SIZES = [(1, 1), (7, 2), (1000, 65), (7, 90), (1, 90), (5, 0), (0, 3)]
INIT_VALUE = 0.25


def _name(rev, init):
    return f"y_{'rev' if rev else 'fwd'}_{init}"


def build(impl: str, layout: str, dtype) -> dace.SDFG:
    sdfg = dace.SDFG(f"test_linrec_{impl}_{layout}_{dtype.to_string()}")
    strides = strides_for([N, K], 1, layout)
    for name in ("a", "b"):
        sdfg.add_array(name, [N, K], dtype, strides=strides)
    sdfg.add_array("y0", [N], dtype)
    state = sdfg.add_state()
    a, b, y0 = state.add_read("a"), state.add_read("b"), state.add_read("y0")
    for rev, init in VARIANTS:
        out = _name(rev, init)
        sdfg.add_array(out, [N, K], dtype, strides=strides)
        node = LinearRecurrence(out, axis=1, reverse=rev, has_init=init == "field",
                                init_value=INIT_VALUE if init == "value" else 0.0)
        node.implementation = impl
        node.block_size = 64
        state.add_edge(a, None, node, "a", dace.Memlet("a[0:N, 0:K]"))
        state.add_edge(b, None, node, "b", dace.Memlet("b[0:N, 0:K]"))
        if init == "field":
            state.add_edge(y0, None, node, "init", dace.Memlet("y0[0:N]"))
        state.add_edge(node, "_out", state.add_write(out), None, dace.Memlet(f"{out}[0:N, 0:K]"))
    sdfg.validate()
    return sdfg


_COMPILED: dict = {}


def run_and_check(impl, layout, dtype_name, a, b, y0):
    key = (impl, layout, dtype_name)
    if key not in _COMPILED:
        _COMPILED[key] = build(impl, layout, DTYPES[dtype_name]).compile()
    a, b = numpy_array(a, 1, layout), numpy_array(b, 1, layout)
    outs = {_name(*v): numpy_array(np.full(a.shape, 7, a.dtype), 1, layout) for v in VARIANTS}
    _COMPILED[key](a=a, b=b, y0=y0, N=a.shape[0], K=a.shape[1], **outs)
    for rev, init in VARIANTS:
        init_arg = {"none": None, "value": INIT_VALUE, "field": y0}[init]
        want = reference.linear_recurrence(a, b, 1, rev, init_arg)
        got = outs[_name(rev, init)]
        assert got.dtype == want.dtype
        assert np.array_equal(got.view(f"u{got.itemsize}"), want.view(f"u{want.itemsize}")), (
            f"{impl}/{layout}/reverse={rev}/init={init}: not bitwise equal to the reference")


def _inputs(rng, shape, dtype):
    a = (rng.random(shape) * 1.8 - 0.9).astype(dtype)
    b = rng.standard_normal(shape).astype(dtype)
    y0 = rng.standard_normal(shape[0]).astype(dtype)
    return a, b, y0


@pytest.mark.parametrize("dtype_name", list(DTYPES))
@pytest.mark.parametrize("impl,layout", CONFIGS, ids=[f"{i}-{lay}" for i, lay in CONFIGS])
def test_all_sizes_bitwise(impl, layout, dtype_name):
    rng = np.random.default_rng(5)
    for shape in SIZES:
        run_and_check(impl, layout, dtype_name, *_inputs(rng, shape, dtype_name))


@settings(max_examples=15, deadline=None)
@given(ncol=st.integers(0, 300), nlev=st.integers(0, 100), seed=st.integers(0, 2**31),
       impl_layout=st.sampled_from(CONFIGS))
def test_hypothesis_shapes_and_values(ncol, nlev, seed, impl_layout):
    rng = np.random.default_rng(seed)
    run_and_check(*impl_layout, "float64", *_inputs(rng, (ncol, nlev), "float64"))


def test_init_shape_and_flag_errors():
    sdfg = dace.SDFG("test_linrec_bad_init")
    for name in ("a", "b", "y"):
        sdfg.add_array(name, [N, K], dace.float64)
    sdfg.add_array("y0", [K], dace.float64)
    state = sdfg.add_state()
    node = LinearRecurrence("lr", axis=0, has_init=True)
    state.add_edge(state.add_read("a"), None, node, "a", dace.Memlet("a[0:N, 0:K]"))
    state.add_edge(state.add_read("b"), None, node, "b", dace.Memlet("b[0:N, 0:K]"))
    state.add_edge(state.add_read("y0"), None, node, "init", dace.Memlet("y0[0:K]"))
    state.add_edge(node, "_out", state.add_write("y"), None, dace.Memlet("y[0:N, 0:K]"))
    sdfg.validate()  # axis 0: the K-less shape is (K,)
    node.axis = 1
    with pytest.raises(Exception, match="sdfg_scan.LinearRecurrence 'lr': connector 'init' has shape"):
        sdfg.validate()
    node.axis = 0
    node.has_init = False
    with pytest.raises(Exception, match="has_init and the 'init' connector disagree"):
        sdfg.validate()


M = dace.symbol("M")


def scalar_inits(a2, b2, a3, b3, a1, b1, s, s32, y2, y3, y1, y1r, y2c):
    y2[:] = sdfg_scan.linear_recurrence(a2, b2, axis=1, init=s)
    y3[:] = sdfg_scan.linear_recurrence(a3, b3, axis=1, reverse=True, init=s)
    y1[:] = sdfg_scan.linear_recurrence(a1, b1, init=s)
    y1r[:] = sdfg_scan.linear_recurrence(a1, b1, reverse=True, init=s32)  # converted to a's dtype
    y2c[:] = sdfg_scan.linear_recurrence(a2, b2, axis=0, init=s32)


# set here: DaCe does not read the postponed (string) annotations of this module
F64 = dace.float64
scalar_inits.__annotations__ = dict(a2=F64[N, K], b2=F64[N, K], a3=F64[N, K, M], b3=F64[N, K, M], a1=F64[K], b1=F64[K],
                                    s=F64, s32=dace.float32, y2=F64[N, K], y3=F64[N, K, M], y1=F64[K], y1r=F64[K],
                                    y2c=F64[N, K])
scalar_inits = dace.program(scalar_inits)


@pytest.fixture(scope="module")
def scalar_inits_compiled():
    return scalar_inits.to_sdfg().compile()


@pytest.mark.parametrize("n, k, m", [(1, 1, 1), (3, 4, 2), (7, 65, 3), (2, 0, 2)])
def test_scalar_init_is_given_to_every_column(scalar_inits_compiled, n, k, m):
    """A runtime scalar as init (2-d, 3-d, 1-d; float32 converted to float64): every column starts from it,
    bitwise ``reference.linear_recurrence`` with the same value."""
    rng = np.random.default_rng(n * 100 + k)
    ins = {"a2": rng.random((n, k)), "b2": rng.random((n, k)), "a3": rng.random((n, k, m)),
           "b3": rng.random((n, k, m)), "a1": rng.random(k), "b1": rng.random(k)}
    s, s32 = rng.random(), np.float32(rng.random())
    outs = {"y2": np.zeros((n, k)), "y3": np.zeros((n, k, m)), "y1": np.zeros(k), "y1r": np.zeros(k),
            "y2c": np.zeros((n, k))}
    scalar_inits_compiled(**ins, **outs, s=s, s32=s32, N=n, K=k, M=m)
    want = {"y2": reference.linear_recurrence(ins["a2"], ins["b2"], 1, init=s),
            "y3": reference.linear_recurrence(ins["a3"], ins["b3"], 1, reverse=True, init=s),
            "y1": reference.linear_recurrence(ins["a1"], ins["b1"], init=s),
            "y1r": reference.linear_recurrence(ins["a1"], ins["b1"], reverse=True, init=s32),
            "y2c": reference.linear_recurrence(ins["a2"], ins["b2"], 0, init=s32)}
    for name, value in want.items():
        assert np.array_equal(outs[name], value), name
