"""Frontend: sdfg_scan functions and np.cumsum inside @dace.program lower to our library nodes."""

import dace
import numpy as np
import pytest

import sdfg_scan
from sdfg_scan import reference

N, K = dace.symbol("N"), dace.symbol("K")


@dace.program
def scans(x: dace.float64[N, K], a: dace.float64[N, K], y0: dace.float64[N], c1: dace.float64[N, K],
          c2: dace.float64[N, K], c3: dace.float64[N, K], c4: dace.float64[N, K], c5: dace.float64[N, K],
          lr1: dace.float64[N, K], lr2: dace.float64[N, K], lr3: dace.float64[N, K]):
    c1[:] = np.cumsum(x, axis=1)
    c2[:] = sdfg_scan.cumsum(x, axis=1, reverse=True, exclusive=True)
    c3[:] = sdfg_scan.cumprod(x, axis=-1)
    c4[:] = sdfg_scan.cummax(x, axis=1, reverse=True)
    c5[:] = sdfg_scan.cummin(x, axis=0)
    lr1[:] = sdfg_scan.linear_recurrence(a, x, axis=1)
    lr2[:] = sdfg_scan.linear_recurrence(a, x, axis=1, reverse=True, init=y0)
    lr3[:] = sdfg_scan.linear_recurrence(a, x, axis=1, init=0.5)


@pytest.fixture(scope="module")
def compiled():
    sdfg = scans.to_sdfg()
    kinds = sorted(type(n).__name__ for n, _ in sdfg.all_nodes_recursive()
                   if isinstance(n, dace.nodes.LibraryNode))
    assert kinds == ["CumulativeScan"] * 5 + ["LinearRecurrence"] * 3
    assert not any(isinstance(n, dace.nodes.Tasklet) and n.language == dace.Language.Python
                   for n, _ in sdfg.all_nodes_recursive()), "np.cumsum must not become a Python callback"
    return sdfg.compile()


@pytest.mark.parametrize("shape", [(1, 1), (7, 2), (100, 65), (3, 90)])
def test_frontend_matches_reference_bitwise(compiled, shape):
    rng = np.random.default_rng(7)
    x, a, y0 = rng.random(shape), rng.random(shape) * 0.9, rng.random(shape[0])
    outs = {n: np.zeros(shape) for n in ("c1", "c2", "c3", "c4", "c5", "lr1", "lr2", "lr3")}
    compiled(x=x, a=a, y0=y0, N=shape[0], K=shape[1], **outs)
    want = {
        "c1": np.cumsum(x, axis=1),
        "c2": reference.cumulative(x, "sum", 1, reverse=True, exclusive=True),
        "c3": reference.cumulative(x, "prod", -1),
        "c4": reference.cumulative(x, "max", 1, reverse=True),
        "c5": reference.cumulative(x, "min", 0),
        "lr1": reference.linear_recurrence(a, x, 1),
        "lr2": reference.linear_recurrence(a, x, 1, reverse=True, init=y0),
        "lr3": reference.linear_recurrence(a, x, 1, init=0.5),
    }
    for name, value in want.items():
        assert np.array_equal(outs[name], value), name


def test_python_call_is_the_reference():
    x = np.random.default_rng(8).random((4, 5))
    assert np.array_equal(sdfg_scan.cumsum(x, axis=0), np.cumsum(x, axis=0))
    assert np.array_equal(sdfg_scan.linear_recurrence(x, x), reference.linear_recurrence(x, x))


def test_cumsum_without_axis_on_2d():
    """np.cumsum flattens (as NumPy: tests/test_frontend_numpy.py); sdfg_scan.cumsum(axis=None) refuses N-d."""
    @dace.program
    def flat(x: dace.float64[N, K], y: dace.float64[N * K]):
        y[:] = np.cumsum(x)

    @dace.program
    def bad(x: dace.float64[N, K], y: dace.float64[N, K]):
        y[:] = sdfg_scan.cumsum(x, axis=None)

    assert [n.axis for n, _ in flat.to_sdfg().all_nodes_recursive() if isinstance(n, sdfg_scan.CumulativeScan)] == [0]
    with pytest.raises(ValueError, match="sdfg_scan.cumsum: axis=None flattens an N-d array"):
        bad.to_sdfg()


def test_scalar_argument_is_a_clear_error():
    @dace.program
    def bad(x: dace.float64, y: dace.float64[N]):
        y[:] = sdfg_scan.cumsum(x)

    with pytest.raises(Exception, match="sdfg_scan.cumsum: expected an array"):
        bad.to_sdfg()


def _axis_programs(axis):
    """One program per sdfg_scan function, each called with ``axis`` (a constant from this closure)."""
    def body(c, x, k):
        return (c[0] + x[0],), ()

    def cumsum(a: dace.float64[N, K], o: dace.float64[N, K]):
        o[:] = sdfg_scan.cumsum(a, axis=axis)

    def linear_recurrence(a: dace.float64[N, K], o: dace.float64[N, K]):
        o[:] = sdfg_scan.linear_recurrence(a, a, axis=axis)

    def column_reduce(a: dace.float64[N, K], o: dace.float64[N]):
        o[:] = sdfg_scan.column_reduce(a, "sum", axis=axis)

    def scan(a: dace.float64[N, K], o: dace.float64[N, K]):
        o[:] = sdfg_scan.scan(body, (0.0,), (a,), axis=axis)

    def window_reduce(a: dace.float64[N, K], o: dace.float64[N, K]):
        o[:] = sdfg_scan.window_reduce(a, [1.0, 1.0], [0, -1], axis=axis)

    return [dace.program(f) for f in (cumsum, linear_recurrence, column_reduce, scan, window_reduce)]


@pytest.mark.parametrize("axis, error, message", [
    (5, np.exceptions.AxisError, "axis 5 is out of bounds for array of dimension 2"),
    (-3, np.exceptions.AxisError, "axis -3 is out of bounds for array of dimension 2"),
    (1.9, TypeError, "axis must be an integer constant, got 1.9"),
    (True, TypeError, "axis must be an integer constant, got True"),
], ids=["5", "-3", "1.9", "True"])
def test_axis_errors_are_numpys(axis, error, message):
    """Every function: an axis out of range raises NumPy's AxisError with its message, a non-integer axis
    (bool included) a TypeError, while the program is parsed, prefixed with the API."""
    for prog in _axis_programs(axis):
        with pytest.raises(error, match=f"sdfg_scan.{prog.f.__name__}: {message}"):
            prog.to_sdfg()


@dace.program
def other_dtypes(x: dace.float64[N, K], xi: dace.int32[N, K], a32: dace.float32[N, K], y0: dace.float32[N],
                 v32: dace.float32[K], s: dace.float64, o1: dace.float32[N, K], o2: dace.int32[N, K],
                 o3: dace.float32[N, K], o4: dace.float32[N, K], o5: dace.int32[N], w: dace.float32[N, K],
                 cp: dace.float32[N, K], o6: dace.float32[N, K], o7: dace.float64[N, K], o8: dace.float64[N, K],
                 o9: dace.float64[K]):
    o1[:] = sdfg_scan.cumsum(x, axis=1)  # float64 sums, rounded into float32 (NumPy casts on assignment)
    o2[:] = np.cumsum(xi, axis=1)  # int64 sums (NumPy's), wrapped into int32
    o3[:, 1:] = sdfg_scan.cumprod(x[:, 1:], axis=1)
    y = sdfg_scan.linear_recurrence(x, x, axis=1)
    o4[:] = y  # through a name
    o5[:] = sdfg_scan.column_reduce(x, "argmax", axis=1)  # int64 indices into int32
    w[:], cp[:] = sdfg_scan.tridiagonal_factor(a32, x, a32, axis=1)  # float64 (mixed), into float32
    o6[:] = sdfg_scan.window_reduce(x, [0.5, 0.25], [0, -1], axis=1)
    # mixed operand dtypes: computed in NumPy's result type (float64), as the Python calls do
    o7[:] = sdfg_scan.linear_recurrence(a32, x, axis=1, init=y0)
    o8[:] = sdfg_scan.tridiagonal_solve(a32, x, a32, x, axis=1)
    o9[:] = sdfg_scan.linear_recurrence(v32, x[0], init=s)  # one column (a (1, K) view of the converted input)


@pytest.fixture(scope="module")
def compiled_other_dtypes():
    return other_dtypes.to_sdfg().compile()


def test_results_assigned_to_other_dtypes_and_mixed_operands(compiled_other_dtypes):
    """``o32[:] = sdfg_scan.cumsum(x64)`` casts as NumPy does (DaCe's simplification made the node write into
    the float32 array, which its validation refused); operands of mixed dtypes are computed in NumPy's
    result type (the node refused them); each compared with the Python call (the reference) bitwise."""
    n, k = 5, 7
    rng = np.random.default_rng(11)
    x = rng.random((n, k)) + 4.0  # diagonally dominant for the tridiagonal calls
    xi = rng.integers(2**30, 2**31 - 1, size=(n, k), dtype=np.int32)  # int64 sums leave int32's range
    a32, y0, v32 = (rng.random(shape).astype(np.float32) for shape in ((n, k), n, k))
    want = {
        "o1": sdfg_scan.cumsum(x, axis=1).astype(np.float32),
        "o2": np.cumsum(xi, axis=1).astype(np.int32),
        "o3": np.concatenate([np.zeros((n, 1), np.float32), sdfg_scan.cumprod(x[:, 1:], axis=1)], axis=1,
                             dtype=np.float32),
        "o4": sdfg_scan.linear_recurrence(x, x, axis=1).astype(np.float32),
        "o5": sdfg_scan.column_reduce(x, "argmax", axis=1).astype(np.int32),
        "w": sdfg_scan.tridiagonal_factor(a32, x, a32, axis=1)[0].astype(np.float32),
        "cp": sdfg_scan.tridiagonal_factor(a32, x, a32, axis=1)[1].astype(np.float32),
        "o6": sdfg_scan.window_reduce(x, [0.5, 0.25], [0, -1], axis=1).astype(np.float32),
        "o7": sdfg_scan.linear_recurrence(a32, x, axis=1, init=y0),
        "o8": sdfg_scan.tridiagonal_solve(a32, x, a32, x, axis=1),
        "o9": sdfg_scan.linear_recurrence(v32, x[0], init=0.25),
    }
    outs = {name: np.zeros_like(value) for name, value in want.items()}
    compiled_other_dtypes(x=x, xi=xi, a32=a32, y0=y0, v32=v32, s=0.25, **outs, N=n, K=k)
    for name, value in want.items():
        assert outs[name].dtype == value.dtype and np.array_equal(outs[name], value), name


def _running_sum(c, x, k):
    s, = c
    return (s + x[0],), (s,)


def test_calls_of_one_function_get_distinct_labels():
    """Two ``scan`` and two ``cumsum`` calls: labels ``scan``, ``scan_1``, ``cumsum``, ``cumsum_1`` (reports,
    selection reasons and pins name nodes by label; both scans were ``scan``)."""
    @dace.program
    def prog(x: dace.float64[N, K], s0: dace.float64[N], o: dace.float64[N, K], o2: dace.float64[N, K],
             o3: dace.float64[N, K]):
        o[:] = sdfg_scan.scan(_running_sum, (s0,), (x,), axis=1, carries=())
        o2[:] = sdfg_scan.scan(_running_sum, (s0,), (x,), axis=1, reverse=True, carries=())
        o3[:] = sdfg_scan.cumsum(x, axis=1) + sdfg_scan.cumsum(o2, axis=1)

    sdfg = prog.to_sdfg(simplify=False)
    labels = sorted(n.label for n, _ in sdfg.all_nodes_recursive() if isinstance(n, dace.nodes.LibraryNode))
    assert labels == ["cumsum", "cumsum_1", "scan", "scan_1"]
