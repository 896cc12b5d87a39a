"""NumPy's own forms of cumsum/cumprod inside ``@dace.program`` (method form, keyword ``a=``, ``dtype=``,
``axis=None`` flattening, ``out=``) lower to ``CumulativeScan`` with NumPy's semantics, result dtype
included; checked bitwise against NumPy, both layouts (K-contiguous ``[N, K]`` along axis 1,
cell-contiguous ``[K, N]`` along axis 0)."""

import dace
import numpy as np
import pytest

import sdfg_scan

N, K = dace.symbol("N"), dace.symbol("K")
NK = N * K


@dace.program
def numpy_forms(x: dace.float64[N, K], xt: dace.float64[K, N], x32: dace.float32[N, K], xt32: dace.float32[K, N],
                xi: dace.int32[N, K], xti: dace.int32[K, N], xb: dace.bool_[N, K],
                m1: dace.float64[N, K], m2: dace.float64[K, N], m3: dace.float64[N, K], m4: dace.int64[K, N],
                k1: dace.float64[N, K], k2: dace.float64[K, N],
                d1: dace.float64[N, K], d2: dace.float64[K, N], d3: dace.float32[N, K],
                i1: dace.int64[N, K], i2: dace.int64[K, N], b1: dace.int64[N, K],
                f1: dace.float64[NK], f2: dace.float64[NK], f3: dace.int64[NK], f4: dace.float64[NK],
                o1: dace.float64[N, K], o2: dace.float64[K, N], o3: dace.int32[N, K], o4: dace.float64[N, K],
                c1: dace.float32[N, K], c2: dace.float32[K, N], c3: dace.float32[N, K], c4: dace.int64[N, K],
                c5: dace.float64[N, K], c6: dace.float32[NK], c7: dace.float32[N, K], c8: dace.float64[K, N],
                c9: dace.float64[N, K], bx: dace.bool_[N, K], bn: dace.bool_[N, K], ba: dace.bool_[N, K]):
    m1[:] = x.cumsum(axis=1)
    m2[:] = xt.cumprod(axis=0)
    m3[:] = x.cumsum(1)
    m4[:] = xti.cumsum(axis=0)  # int32 -> int64
    k1[:] = np.cumsum(a=x, axis=1)
    k2[:] = np.cumprod(a=xt, axis=0)
    d1[:] = np.cumsum(x32, axis=1, dtype=np.float64)  # convert, then accumulate in float64
    d2[:] = np.cumsum(xt32, axis=0, dtype=np.float64)
    d3[:] = np.cumsum(x, axis=1, dtype=np.float32)  # narrowing: each value rounded, then float32 sums
    i1[:] = np.cumsum(xi, axis=1)
    i2[:] = np.cumprod(xti, axis=0)
    b1[:] = np.cumsum(xb, axis=1)
    f1[:] = np.cumsum(x)  # axis=None: flattened, C order
    f2[:] = xt.cumsum()
    f3[:] = np.cumsum(xi)
    f4[:] = np.cumprod(a=x)
    np.cumsum(x, axis=1, out=o1)
    np.cumsum(xt32, axis=0, out=o2)  # out's dtype (float64) is the accumulation type, as in NumPy
    np.cumsum(xi, 1, None, o3)  # positional; int32 out: wraps around like NumPy
    x.cumprod(axis=1, out=o4)
    # out of another dtype: accumulate in NumPy's loop dtype (np.result_type of input and out), then cast
    np.cumsum(x, axis=1, out=c1)  # float64 sums, rounded into float32
    np.cumprod(xt, axis=0, out=c2)
    np.cumsum(xi, axis=1, out=c3)  # int32 and float32: float64 sums
    np.cumsum(x, axis=1, out=c4)  # float64 sums, truncated into int64
    np.cumsum(x, axis=1, dtype=np.float32, out=c5)  # dtype= wins: float32 sums, widened into float64
    np.cumsum(x, out=c6)  # flattened
    sdfg_scan.cumsum(x, axis=1, out=c7)  # sdfg_scan.cum*: the input's dtype, then cast (as its Python call)
    sdfg_scan.cumsum(xt32, axis=0, out=c8, reverse=True)
    sdfg_scan.cumprod(x, axis=1, dtype=np.float32, out=c9)
    bx[:] = sdfg_scan.cummax(xb, axis=1)  # bool: logical or / and, as np.maximum / np.minimum
    sdfg_scan.cummin(xb, axis=1, exclusive=True, reverse=True, out=bn)
    ba[:] = sdfg_scan.associative_scan(np.maximum, xb, axis=1)


def expected(x, xt, x32, xt32, xi, xti, xb):
    # note: o3 accumulates in int32 like NumPy (wrapping); NumPy warns nothing for integer overflow in cumsum
    return {
        "m1": x.cumsum(axis=1), "m2": xt.cumprod(axis=0), "m3": x.cumsum(1), "m4": xti.cumsum(axis=0),
        "k1": np.cumsum(a=x, axis=1), "k2": np.cumprod(a=xt, axis=0),
        "d1": np.cumsum(x32, axis=1, dtype=np.float64), "d2": np.cumsum(xt32, axis=0, dtype=np.float64),
        "d3": np.cumsum(x, axis=1, dtype=np.float32),
        "i1": np.cumsum(xi, axis=1), "i2": np.cumprod(xti, axis=0), "b1": np.cumsum(xb, axis=1),
        "f1": np.cumsum(x), "f2": xt.cumsum(), "f3": np.cumsum(xi), "f4": np.cumprod(a=x),
        "o1": np.cumsum(x, axis=1), "o2": np.cumsum(xt32, axis=0, out=np.zeros(xt32.shape)),
        "o3": np.cumsum(xi, 1, None, np.zeros(xi.shape, np.int32)), "o4": x.cumprod(axis=1),
        "c1": np.cumsum(x, axis=1, out=np.zeros(x.shape, np.float32)),
        "c2": np.cumprod(xt, axis=0, out=np.zeros(xt.shape, np.float32)),
        "c3": np.cumsum(xi, axis=1, out=np.zeros(xi.shape, np.float32)),
        "c4": np.cumsum(x, axis=1, out=np.zeros(x.shape, np.int64)),
        "c5": np.cumsum(x, axis=1, dtype=np.float32, out=np.zeros(x.shape)),
        "c6": np.cumsum(x, out=np.zeros(x.size, np.float32)),
        "c7": sdfg_scan.cumsum(x, axis=1, out=np.zeros(x.shape, np.float32)),
        "c8": sdfg_scan.cumsum(xt32, axis=0, out=np.zeros(xt32.shape), reverse=True),
        "c9": sdfg_scan.cumprod(x, axis=1, dtype=np.float32, out=np.zeros(x.shape)),
        "bx": np.maximum.accumulate(xb, axis=1),
        "bn": np.concatenate([np.minimum.accumulate(xb[:, ::-1], axis=1)[:, ::-1][:, 1:],
                              np.ones((xb.shape[0], 1), bool)], axis=1),  # exclusive: identity True last
        "ba": np.maximum.accumulate(xb, axis=1),
    }


@pytest.fixture(scope="module")
def compiled():
    sdfg = numpy_forms.to_sdfg()
    assert not any(isinstance(n, dace.nodes.Tasklet) and n.language == dace.Language.Python and st.entry_node(n) is None
                   for n, st in sdfg.all_nodes_recursive()), "no form may become a Python callback"  # (casts: maps)
    assert sum(isinstance(n, sdfg_scan.CumulativeScan) for n, _ in sdfg.all_nodes_recursive()) == 32
    return sdfg.compile()


@pytest.mark.parametrize("shape", [(1, 1), (7, 2), (3, 90), (65, 5)])
def test_numpy_forms_bitwise(compiled, shape):
    n, k = shape
    rng = np.random.default_rng(n * k)
    x = rng.random(shape) + 0.5
    x32 = (rng.random(shape) * 1e3).astype(np.float32)
    xi = rng.integers(2**30, 2**31 - 1, size=shape, dtype=np.int32)  # int32 sums overflow, int64 sums do not
    xi[:, ::2] = rng.integers(-3, 4, size=xi[:, ::2].shape)  # small factors keep some products in range
    xb = rng.random(shape) < 0.5
    ins = dict(x=x, xt=np.ascontiguousarray(x.T), x32=x32, xt32=np.ascontiguousarray(x32.T), xi=xi,
               xti=np.ascontiguousarray(xi.T), xb=xb)
    want = expected(**ins)
    outs = {name: np.zeros_like(value) for name, value in want.items()}
    compiled(**ins, **outs, N=n, K=k)
    for name, value in want.items():
        assert outs[name].dtype == value.dtype, name
        assert np.array_equal(outs[name], value), name


def _lowered(prog):
    sdfg = prog.to_sdfg()
    return [n for n, _ in sdfg.all_nodes_recursive() if isinstance(n, sdfg_scan.CumulativeScan)], sdfg


@pytest.mark.parametrize("dtype, want", [(dace.int32, dace.int64), (dace.bool_, dace.int64), (dace.uint8, dace.uint64),
                                         (dace.int16, dace.int64), (dace.float32, dace.float32),
                                         (dace.int64, dace.int64)])
def test_result_dtype_is_numpys(dtype, want):
    """The lowered node accumulates in NumPy's result type (a conversion map runs before it when needed)."""

    @dace.program
    def prog(x: dtype[N, K]):
        return np.cumsum(x, axis=1)

    nodes, sdfg = _lowered(prog)
    (node,) = nodes
    state = next(s for s in sdfg.states() if node in s.nodes())
    assert node.operand(state, "_in").dtype == want and node.operand(state, "_out").dtype == want
    assert np.cumsum(np.zeros((1, 1), dtype.as_numpy_dtype()), axis=1).dtype == want.as_numpy_dtype()


def test_sdfg_scan_cumsum_keeps_the_input_dtype_and_takes_dtype():
    @dace.program
    def prog(x: dace.int32[N, K], y: dace.int32[N, K], z: dace.float64[N, K]):
        y[:] = sdfg_scan.cumsum(x, axis=1)
        z[:] = sdfg_scan.cumsum(x, axis=1, dtype=np.float64, reverse=True)

    nodes, _ = _lowered(prog)
    assert len(nodes) == 2
    x = np.arange(12, dtype=np.int32).reshape(3, 4)
    y, z = np.zeros_like(x), np.zeros(x.shape)
    prog(x=x, y=y, z=z, N=3, K=4)
    assert np.array_equal(y, sdfg_scan.cumsum(x, axis=1)) and y.dtype == np.int32
    assert np.array_equal(z, sdfg_scan.cumsum(x, axis=1, dtype=np.float64, reverse=True))


@pytest.mark.parametrize("xdt, odt, dtype, acc", [
    (dace.float64, dace.float32, None, dace.float64), (dace.float32, dace.float64, None, dace.float64),
    (dace.int32, dace.float32, None, dace.float64), (dace.float64, dace.int64, None, dace.float64),
    (dace.int16, dace.int16, None, dace.int16), (dace.float64, dace.float64, np.float32, dace.float32),
], ids=str)
def test_out_of_another_dtype_accumulates_in_numpys_loop_dtype(xdt, odt, dtype, acc):
    """``np.cumsum(x, out=o)``: the node accumulates in ``np.result_type(x, o)`` (``dtype=`` if given), a map
    casts the result into ``o`` where the dtypes differ; NumPy's own loop, asked of NumPy's ``out=`` result."""

    @dace.program
    def prog(x: xdt[N, K], o: odt[N, K]):
        np.cumsum(x, axis=1, dtype=dtype, out=o)

    nodes, sdfg = _lowered(prog)
    (node,) = nodes
    state = next(s for s in sdfg.states() if node in s.nodes())
    assert node.operand(state, "_out").dtype == acc
    casts_after = [e.dst for e in state.out_edges(state.out_edges(node)[0].dst)]
    assert (odt != acc) == any(isinstance(n, dace.nodes.MapEntry) for n in casts_after)
    x = np.full((1, 3), 2**24 + 1 if xdt == dace.int32 else 1 / 3, xdt.as_numpy_dtype())
    loop = np.result_type(x.dtype, odt.as_numpy_dtype()) if dtype is None else np.dtype(dtype)
    assert np.array_equal(np.cumsum(x, axis=1, dtype=dtype, out=np.zeros(x.shape, odt.as_numpy_dtype())),
                          np.cumsum(x.astype(loop), axis=1, dtype=loop).astype(odt.as_numpy_dtype()))
    assert loop == acc.as_numpy_dtype()


def test_complex_min_max_refused_by_validate_after_associative_scan():
    """``associative_scan(np.maximum, x)`` lowers to ``CumulativeScan``: complex input is refused by validate()."""

    @dace.program
    def prog(x: dace.complex128[N, K], o: dace.complex128[N, K]):
        o[:] = sdfg_scan.associative_scan(np.maximum, x, axis=1)

    with pytest.raises(Exception, match="connector '_in' has dtype complex128, but op 'max' needs ordered values"):
        prog.to_sdfg().validate()
    with pytest.raises(TypeError, match="cumulative 'min' of complex128 values is not supported"):
        sdfg_scan.cummin(np.ones((2, 3), complex), axis=1)


@dace.program
def axis_sdfg_scan(x: dace.float64[N, K]):
    return sdfg_scan.cumsum(x, axis=5)


@dace.program
def axis_numpy(x: dace.float64[N, K]):
    return np.cumsum(x, axis=-3)


@dace.program
def axis_method(x: dace.float64[N, K]):
    return x.cumprod(axis=2)


@dace.program
def axis_linear_recurrence(x: dace.float64[N, K]):
    return sdfg_scan.linear_recurrence(x, x, axis=2)


@dace.program
def axis_window_reduce(x: dace.float64[N, K]):
    return sdfg_scan.window_reduce(x, [1.0], [0], axis=3)


@dace.program
def axis_tridiagonal(x: dace.float64[N, K]):
    return sdfg_scan.tridiagonal_solve(x, x, x, x, axis=-4)


@pytest.mark.parametrize("prog, axis", [(axis_sdfg_scan, 5), (axis_numpy, -3), (axis_method, 2),
                                        (axis_linear_recurrence, 2), (axis_window_reduce, 3),
                                        (axis_tridiagonal, -4)], ids=lambda p: getattr(p, "name", str(p)))
def test_axis_out_of_bounds_raises_at_lowering(prog, axis):
    """As NumPy and JAX do when called: numpy.exceptions.AxisError with NumPy's message, while parsing."""
    with pytest.raises(np.exceptions.AxisError) as numpy_err:
        np.cumsum(np.zeros((2, 3)), axis=axis)
    message = str(numpy_err.value)
    assert message == f"axis {axis} is out of bounds for array of dimension 2"
    with pytest.raises(np.exceptions.AxisError, match=message):
        prog.to_sdfg()


@dace.program
def err_no_axis(x: dace.float64[N, K], o: dace.float64[N, K]):
    o[:] = sdfg_scan.cumsum(x, axis=None)


@dace.program
def err_complex_max(x: dace.complex128[N, K], o: dace.complex128[N, K]):
    o[:] = sdfg_scan.cummax(x, axis=1)


@dace.program
def err_complex_into_real(x: dace.complex128[N, K], o: dace.float64[N, K]):
    np.cumsum(x, axis=1, out=o)


@dace.program
def err_out_shape(x: dace.float64[N, K], o: dace.float64[N, K]):
    np.cumsum(x, out=o)


@dace.program
def err_dtype(x: dace.float64[N, K], o: dace.float64[N, K]):
    o[:] = np.cumsum(x, axis=1, dtype="no_such_type")


@pytest.mark.parametrize("prog, message", [
    (err_no_axis, "sdfg_scan.cumsum: axis=None flattens an N-d array"),
    (err_complex_max, "sdfg_scan.CumulativeScan 'cummax': connector '_in' has dtype complex128, but op 'max' "
                      "needs ordered values"),
    (err_complex_into_real, "sdfg_scan.cumsum: the result is complex128 and out is float64"),
    (err_out_shape, r"sdfg_scan.cumsum: out='o' has shape \(N, K\), expected the result's shape \(K\*N,\)"),
    (err_dtype, "sdfg_scan.cumsum: dtype must be a NumPy or DaCe data type"),
], ids=lambda p: getattr(p, "name", "message"))
def test_clear_errors(prog, message):
    with pytest.raises((TypeError, ValueError), match=message):
        prog.to_sdfg()


def test_in_place_out():
    """``np.cumsum(x, axis=1, out=x)`` (NumPy allows it): the node reads a copy."""

    @dace.program
    def prog(x: dace.float64[N, K]):
        np.cumsum(x, axis=1, out=x)

    x = np.random.default_rng(1).random((4, 6))
    want = np.cumsum(x, axis=1)
    prog(x=x, N=4, K=6)
    assert np.array_equal(x, want)
