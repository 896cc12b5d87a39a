"""``sdfg_scan.window_reduce`` inside ``@dace.program``: constant weights, closure arrays (weights and
offsets), runtime weight arguments (vector, per column, per column and level), both layouts, bitwise
against ``reference.window_reduce``."""

import dace
import numpy as np
import pytest

import sdfg_scan
from sdfg_scan import reference as R

N, K = dace.symbol("N"), dace.symbol("K")
W_CLOSURE = np.array([0.25, 0.5, 0.75, 1.0])  # box sedimentation shares, from the enclosing scope
O_CLOSURE = np.array([-3, -2, -1, 0])


@dace.program
def windows(x: dace.float64[N, K], xt: dace.float64[K, N], wv: dace.float64[3], wc: dace.float32[N, 3],
            wl: dace.float64[N, K, 3], wlt: dace.float64[K, N, 3], wk: dace.float64[1, K, 3],
            y1: dace.float64[N, K], y2: dace.float64[K, N], y3: dace.float64[N, K], y4: dace.float64[N, K],
            y5: dace.float64[N, K], y6: dace.float64[K, N], y7: dace.float64[N, K], y8: dace.float64[K, N]):
    y1[:] = sdfg_scan.window_reduce(x, W_CLOSURE, O_CLOSURE, axis=1)  # closure weights and offsets
    y2[:] = sdfg_scan.window_reduce(xt, W_CLOSURE, [0, -1, -2, -3], axis=0)
    y3[:] = sdfg_scan.window_reduce(x, wv, [-1, 0, 1], axis=-1)  # runtime (J,)
    y4[:] = sdfg_scan.window_reduce(x, wc, [-1, 0, 2], axis=1)  # per column, float32 weights
    y5[:] = sdfg_scan.window_reduce(x, wl, [0, -1, -2], axis=1)  # per column and level
    y6[:] = sdfg_scan.window_reduce(xt, wlt, [0, -1, -2], axis=0)
    y7[:] = sdfg_scan.window_reduce(x, wk, [1, 0, -1], axis=1)  # per level, broadcast over columns
    y8[:] = sdfg_scan.window_reduce(xt, [0.4, 0.3, 0.2, 0.1], [0, -1, -2, -3], axis=0)  # constants


@pytest.fixture(scope="module")
def compiled():
    sdfg = windows.to_sdfg()
    nodes = [n for n, _ in sdfg.all_nodes_recursive() if isinstance(n, sdfg_scan.WindowReduce)]
    assert sorted(n.weights_input for n in nodes) == [False] + [True] * 7
    return windows  # called as a program: DaCe passes the closure arrays (and compiles once)


def expected(x, xt, wv, wc, wl, wlt, wk):
    return {"y1": R.window_reduce(x, W_CLOSURE, O_CLOSURE, axis=1),
            "y2": R.window_reduce(xt, W_CLOSURE, [0, -1, -2, -3], axis=0),
            "y3": R.window_reduce(x, wv, [-1, 0, 1]),
            "y4": R.window_reduce(x, wc, [-1, 0, 2], axis=1),
            "y5": R.window_reduce(x, wl, [0, -1, -2], axis=1),
            "y6": R.window_reduce(xt, wlt, [0, -1, -2], axis=0),
            "y7": R.window_reduce(x, wk, [1, 0, -1], axis=1),
            "y8": R.window_reduce(xt, [0.4, 0.3, 0.2, 0.1], [0, -1, -2, -3], axis=0)}


def run(compiled, n, k, seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, k))
    ins = dict(x=x, xt=np.ascontiguousarray(x.T), wv=rng.standard_normal(3),
               wc=rng.standard_normal((n, 3)).astype(np.float32), wl=rng.standard_normal((n, k, 3)),
               wlt=rng.standard_normal((k, n, 3)), wk=rng.standard_normal((1, k, 3)))
    want = expected(**ins)
    outs = {name: np.zeros_like(v) for name, v in want.items()}
    compiled(**ins, **outs)
    return outs, want


@pytest.mark.parametrize("n, k", [(1, 1), (4, 2), (37, 65), (3, 90)])
def test_window_frontend_bitwise(compiled, n, k):
    outs, want = run(compiled, n, k, n * k)
    for name, value in want.items():
        assert np.array_equal(outs[name].view(np.uint64), value.view(np.uint64)), name


def test_closure_weights_are_read_at_every_call(compiled):
    """A closure weight array is passed like any closure array: a later change is seen (offsets, which
    shape the code, are read when the program is parsed)."""

    @dace.program
    def prog(x: dace.float64[N, K], y: dace.float64[N, K]):
        y[:] = sdfg_scan.window_reduce(x, W_CLOSURE, O_CLOSURE, axis=1)

    x = np.random.default_rng(5).standard_normal((3, 7))
    saved = W_CLOSURE.copy()
    try:
        for scale in (1.0, -2.0):
            W_CLOSURE[:] = saved * scale
            y = np.zeros_like(x)
            prog(x=x, y=y, N=3, K=7)
            assert np.array_equal(y, R.window_reduce(x, W_CLOSURE, O_CLOSURE, axis=1))
    finally:
        W_CLOSURE[:] = saved


@dace.program
def err_shape(x: dace.float64[N, K], w: dace.float64[K, 2], y: dace.float64[N, K]):
    y[:] = sdfg_scan.window_reduce(x, w, [-1, 0], axis=1)


@dace.program
def err_count(x: dace.float64[N, K], w: dace.float64[3], y: dace.float64[N, K]):
    y[:] = sdfg_scan.window_reduce(x, w, [-1, 0], axis=1)


@dace.program
def err_mixed(x: dace.float64[N, K], w: dace.float64[N, K], y: dace.float64[N, K]):
    y[:] = sdfg_scan.window_reduce(x, [w, 1.0], [-1, 0], axis=1)


@dace.program
def err_offsets(x: dace.float64[N, K], o: dace.int64[2], y: dace.float64[N, K]):
    y[:] = sdfg_scan.window_reduce(x, [1.0, 1.0], o, axis=1)


@pytest.mark.parametrize("prog, message", [
    (err_shape, r"connector '_weights' has shape \(K, 2\), expected \(N, 2\)"),
    (err_count, r"connector '_weights' has shape \(3,\), expected \(2,\)"),
    (err_mixed, "weights must be numbers or one array"),
    (err_offsets, "offsets must be a constant list of integers"),
], ids=lambda p: getattr(p, "name", "message"))
def test_window_frontend_errors(prog, message):
    with pytest.raises(ValueError, match=message):
        prog.to_sdfg()


@dace.program
def one_column(x: dace.float64[K], x2: dace.float64[K, 2], wv: dace.float64[4], wl: dace.float64[K, 3],
               y1: dace.float64[K], y2: dace.float64[K], y3: dace.float64[K], y4: dace.float64[K]):
    y1[:] = sdfg_scan.window_reduce(x, [0.4, 0.3, 0.2, 0.1], O_CLOSURE)  # closure offsets: compiled in
    y2[:] = sdfg_scan.window_reduce(x, wv, O_CLOSURE, axis=0)
    y3[:] = sdfg_scan.window_reduce(x, wl, [0, -1, 1])  # per level: (K, J)
    y4[:] = sdfg_scan.window_reduce(x2[:, 1], [1.0, -1.0], [0, -1])  # a strided column of a 2-d array


@pytest.fixture(scope="module")
def one_column_sdfg():
    sdfg = one_column.to_sdfg()
    return sdfg, sdfg.compile()


def test_closure_offsets_are_no_argument(one_column_sdfg):
    """Offsets from a closure array are compiled into the code: the array is no argument of the SDFG (called
    as compiled, without it), unless the program also reads it elsewhere."""
    assert sorted(one_column_sdfg[0].arglist()) == ["K", "wl", "wv", "x", "x2", "y1", "y2", "y3", "y4"]

    @dace.program
    def offsets_also_read(x: dace.float64[N, K], y: dace.float64[N, K], z: dace.int64[4]):
        y[:] = sdfg_scan.window_reduce(x, [1.0, 1.0, 1.0, 1.0], O_CLOSURE, axis=1)
        z[:] = O_CLOSURE

    assert any("O_CLOSURE" in a for a in offsets_also_read.to_sdfg().arglist())


@pytest.mark.parametrize("k", [1, 2, 5, 65])
def test_window_frontend_one_column(one_column_sdfg, k):
    """1-d input (one column) inside a program, bitwise ``reference.window_reduce``."""
    rng = np.random.default_rng(k)
    ins = {"x": rng.standard_normal(k), "x2": rng.standard_normal((k, 2)), "wv": rng.standard_normal(4),
           "wl": rng.standard_normal((k, 3))}
    outs = {f"y{i}": np.zeros(k) for i in range(1, 5)}
    one_column_sdfg[1](**ins, **outs, K=k)
    want = {"y1": R.window_reduce(ins["x"], [0.4, 0.3, 0.2, 0.1], O_CLOSURE),
            "y2": R.window_reduce(ins["x"], ins["wv"], O_CLOSURE, axis=0),
            "y3": R.window_reduce(ins["x"], ins["wl"], [0, -1, 1]),
            "y4": R.window_reduce(ins["x2"][:, 1], [1.0, -1.0], [0, -1])}
    for name, value in want.items():
        assert np.array_equal(outs[name].view(np.uint64), value.view(np.uint64)), name
