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
