"""The general Scan node and ``sdfg_scan.scan``: bitwise against ``reference.scan``."""


import copy
import warnings

import dace
import numpy as np
import pytest
from conftest import cuda_code, nvcc_compile
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import sdfg_scan
from sdfg_scan import reference
from sdfg_scan.choice import choose
from sdfg_scan.nodes.scan import Scan
from sdfg_scan.scan_structure import analyze_scan

N, K, M = dace.symbol("N"), dace.symbol("K"), dace.symbol("M")
NLEVS, NCOLS = (1, 2, 65, 90), (1, 7, 1000)


def body(c, x, k):
    """Two carries, an offset read (x[1] at k-1) and one per-level output."""
    s, m = c
    s2 = s * x[0] + x[1, -1]
    m2 = np.maximum(m, x[0])
    return (s2, m2), (s2 - x[1],)


def _program(reverse: bool, emit: str, dtype, name: str, strided: bool = True) -> dace.SDFG:
    T = dace.float32 if dtype == np.float32 else dace.float64

    m = K + 1 if emit == "include_initial" else K

    def prog(a, b, i0, c0, c1, y, f0, f1):
        r0, r1, ry, g0, g1 = sdfg_scan.scan(body, (i0, -1.0), (a, b), axis=1, reverse=reverse, emit=emit,
                                            final=True)
        c0[:] = r0
        c1[:] = r1
        y[:] = ry
        f0[:] = g0
        f1[:] = g1

    prog.__annotations__ = dict(a=T[N, K], b=T[N, K], i0=T[N], c0=T[N, m], c1=T[N, m], y=T[N, K], f0=T[N], f1=T[N])
    prog = dace.program(prog)
    sdfg = prog.to_sdfg(simplify=True)
    sdfg.name = name
    # symbolic strides: one compiled SDFG serves K-contiguous and cell-contiguous layouts
    for arr in ("a", "b", "c0", "c1", "y") if strided else ():
        d = sdfg.arrays[arr]
        for i in (0, 1):
            sdfg.add_symbol(f"s_{arr}_{i}", dace.int64)
        d.strides = (dace.symbol(f"s_{arr}_0", dace.int64), dace.symbol(f"s_{arr}_1", dace.int64))
        d.total_size = d.shape[0] * d.shape[1] * 2
    return sdfg


_COMPILED: dict = {}


def compiled(reverse, emit, dtype, impl="auto"):
    key = (reverse, emit, np.dtype(dtype).name, impl)
    if key not in _COMPILED:
        sdfg = _program(reverse, emit, dtype, "scan_" + "_".join(map(str, key)))
        for n, _ in sdfg.all_nodes_recursive():
            if isinstance(n, Scan):
                n.implementation = impl
        sdfg.validate()
        _COMPILED[key] = (sdfg, sdfg.compile())
    return _COMPILED[key][1]


def run(csdfg, a, b, i0, emit, order):
    n, k = a.shape
    m = k + 1 if emit == "include_initial" else k
    outs = {nm: np.zeros((n, m if nm in ("c0", "c1") else k), dtype=a.dtype, order=order) for nm in ("c0", "c1", "y")}
    f0, f1 = np.zeros(n, a.dtype), np.zeros(n, a.dtype)
    a, b = np.asarray(a, order=order), np.asarray(b, order=order)
    syms = {}
    for nm, arr in {"a": a, "b": b, **outs}.items():
        syms[f"s_{nm}_0"], syms[f"s_{nm}_1"] = (s // arr.itemsize for s in arr.strides)
    csdfg(a=a, b=b, i0=i0, f0=f0, f1=f1, N=n, K=k, **outs, **syms)
    return outs["c0"], outs["c1"], outs["y"], f0, f1


def expected(a, b, i0, reverse, emit):
    (c0, c1), (y,), (f0, f1) = reference.scan(body, (i0, a.dtype.type(-1.0)), {0: a, 1: b}, axis=1, reverse=reverse,
                                              emit=emit)
    return c0, c1, y, f0, f1


def _same(got, want):
    for g, w in zip(got, want, strict=True):
        assert g.shape == w.shape
        assert np.array_equal(np.isnan(g), np.isnan(w)) and np.array_equal(g, w, equal_nan=True)


CONFIGS = [(r, e, np.float64) for r in (False, True) for e in reference.EMIT_MODES] + [
    (False, "inclusive", np.float32), (True, "exclusive", np.float32)]


@pytest.mark.parametrize("reverse,emit,dtype", CONFIGS,
                         ids=[f"{'bwd' if r else 'fwd'}-{e}-{np.dtype(d).name}" for r, e, d in CONFIGS])
def test_scan_matches_reference_bitwise(reverse, emit, dtype):
    csdfg = compiled(reverse, emit, dtype)
    rng = np.random.default_rng(1)
    for nlev in NLEVS:
        for ncol in NCOLS:
            a = rng.uniform(0.5, 1.0, (ncol, nlev)).astype(dtype)
            b = rng.uniform(-1.0, 1.0, (ncol, nlev)).astype(dtype)
            i0 = rng.uniform(-1.0, 1.0, ncol).astype(dtype)
            want = expected(a, b, i0, reverse, emit)
            for order in ("C", "F"):  # K-contiguous, cell-contiguous
                _same(run(csdfg, a, b, i0, emit, order), want)
    # np.maximum on signed zeros and NaNs of two payloads (the body's running maximum)
    nan2 = np.frombuffer(np.uint64(0x7FF8000000000123).tobytes(), np.float64)[0].astype(dtype)
    special = np.array([-0.0, 0.0, -0.0, 0.0, np.nan, nan2, -1.0, 1.0], dtype)
    a = rng.choice(special, (5, 13))
    a[0] = rng.choice(special[:4], 13)
    b, i0 = rng.choice(special, (5, 13)), rng.choice(special, 5)
    got, want = run(csdfg, a, b, i0, emit, "F"), expected(a, b, i0, reverse, emit)
    _same(got, want)
    for i in (1, 4):   # the running maximum and its final value: bit for bit (NumPy's tie and NaN rule)
        assert np.array_equal(got[i].view(f"u{got[i].itemsize}"), want[i].view(f"u{want[i].itemsize}")), i


LEVELS_OUTSIDE = [(False, "inclusive", np.float64), (True, "exclusive", np.float64),
                  (False, "include_initial", np.float64), (True, "inclusive", np.float32)]


@pytest.mark.parametrize("reverse,emit,dtype", LEVELS_OUTSIDE,
                         ids=[f"{'bwd' if r else 'fwd'}-{e}-{np.dtype(d).name}" for r, e, d in LEVELS_OUTSIDE])
def test_levels_outside_matches_reference_bitwise(reverse, emit, dtype):
    """The level loop outside the map over columns (ScanLoopInterchange inside the expansion)."""
    csdfg = compiled(reverse, emit, dtype, "levels_outside")
    rng = np.random.default_rng(2)
    for nlev in (1, 2, 65):
        for ncol in (1, 7, 1000):
            a = rng.uniform(0.5, 1.0, (ncol, nlev)).astype(dtype)
            b = rng.uniform(-1.0, 1.0, (ncol, nlev)).astype(dtype)
            i0 = rng.uniform(-1.0, 1.0, ncol).astype(dtype)
            want = expected(a, b, i0, reverse, emit)
            for order in ("C", "F"):
                _same(run(csdfg, a, b, i0, emit, order), want)


def test_auto_picks_levels_outside_for_cell_contiguous_data():
    sdfg = _program(False, "inclusive", np.float64, "scan_auto_choice", strided=False)
    node, state = next((n, st) for n, st in sdfg.all_nodes_recursive() if isinstance(n, Scan))
    # [N, K] C order: K-contiguous; the body reads x at k and k-1: the ring buffer saves a load per level
    assert choose(node, state).implementation == "kcached"
    for arr in ("a", "b", "c0", "c1", "y"):
        d = sdfg.arrays[arr]
        d.strides = (1, d.shape[0])
    assert choose(node, state).implementation == "levels_outside"


@settings(max_examples=25, deadline=None)
@given(hnp.arrays(np.float64, st.tuples(st.integers(1, 9), st.integers(1, 12)),
                  elements=st.floats(allow_nan=True, allow_infinity=True, width=64)),
       st.booleans())
def test_scan_hypothesis_values(a, reverse):
    csdfg = compiled(reverse, "inclusive", np.float64)
    b = a[:, ::-1].copy()
    i0 = a[:, 0].copy()
    _same(run(csdfg, a, b, i0, "inclusive", "C"), expected(a, b, i0, reverse, "inclusive"))


def test_python_call_is_the_reference():
    a, b, i0 = np.ones((3, 4)), np.arange(12.0).reshape(3, 4), np.zeros(3)
    got = sdfg_scan.scan(body, (i0, -1.0), (a, b), axis=1, final=True)
    want = expected(a, b, i0, False, "inclusive")
    _same(got, want)


# -- a diagnose_pressure-like backward scan with a first-level flag -------------------------------------

def pressure(c, x, k):
    ifc, p, first = c
    new_ifc = ifc * x[0]
    new_p = np.where(first, ifc * 0.5 + new_ifc * 0.5, np.sqrt(ifc * new_ifc))
    return (new_ifc, new_p, False), ()


def test_pressure_like_backward_flag_scan():
    @dace.program
    def prog(fac: dace.float64[N, K], ps: dace.float64[N], pifc: dace.float64[N, K], p: dace.float64[N, K]):
        r0, r1 = sdfg_scan.scan(pressure, (ps, 0.0, True), (fac,), axis=1, reverse=True, carries=(0, 1))
        pifc[:] = r0
        p[:] = r1

    with warnings.catch_warnings(record=True) as caught:   # no array written that nobody reads
        warnings.simplefilter("always")
        sdfg = prog.to_sdfg(simplify=True)
    assert not [w for w in caught if "Tried to remove" in str(w.message)]
    (node,) = [n for n, _ in sdfg.all_nodes_recursive() if isinstance(n, Scan)]
    s = analyze_scan(node.body)
    assert s.direction == "backward" and s.carries["_c2"].dtype == dace.bool_
    rng = np.random.default_rng(3)
    fac, ps = rng.uniform(0.9, 1.0, (7, 65)), rng.uniform(9e4, 1e5, 7)
    pifc, p = np.zeros((7, 65)), np.zeros((7, 65))
    sdfg(fac=fac, ps=ps, pifc=pifc, p=p, N=7, K=65)
    (w_ifc, w_p, _), _, _ = reference.scan(pressure, (ps, 0.0, True), {0: fac}, axis=1, reverse=True,
                                           dtypes=[np.float64, np.float64, np.bool_])
    assert np.array_equal(pifc, w_ifc) and np.array_equal(p, w_p)


def test_carries_selects_the_returned_slots():
    """``carries=(1,)``: only slot 1's per-level values are returned (with ``include_initial`` and the
    final carries, which stay complete), the same as the Python call; bad selections are refused."""
    @dace.program
    def prog(fac: dace.float64[N, K], ps: dace.float64[N], p: dace.float64[N, K + 1], f0: dace.float64[N],
             f1: dace.float64[N], f2: dace.bool_[N]):
        r1, g0, g1, g2 = sdfg_scan.scan(pressure, (ps, 0.0, True), (fac,), axis=1, reverse=True,
                                        emit="include_initial", final=True, carries=(1,))
        p[:] = r1
        f0[:] = g0
        f1[:] = g1
        f2[:] = g2

    sdfg = prog.to_sdfg(simplify=True)
    (node,) = [n for n, _ in sdfg.all_nodes_recursive() if isinstance(n, Scan)]
    assert sorted(c for c in node.out_connectors if c.startswith("carry")) == ["carry1"]
    rng = np.random.default_rng(5)
    for n, nk in ((1, 1), (7, 2), (5, 65)):
        fac, ps = rng.uniform(0.9, 1.0, (n, nk)), rng.uniform(9e4, 1e5, n)
        out = {"p": np.zeros((n, nk + 1)), "f0": np.zeros(n), "f1": np.zeros(n), "f2": np.zeros(n, dtype=bool)}
        sdfg(fac=fac, ps=ps, **out, N=n, K=nk)
        want = sdfg_scan.scan(pressure, (ps, 0.0, True), (fac,), axis=1, reverse=True, emit="include_initial",
                              final=True, carries=(1,))
        for got, w in zip(out.values(), want, strict=True):
            assert np.array_equal(got, w)
    with pytest.raises(ValueError, match=r"carries \(0, 3\) must be distinct slot indices in \[0, 3\)"):
        sdfg_scan.scan(pressure, (ps, 0.0, True), (fac,), axis=1, carries=(0, 3))
    with pytest.raises(TypeError, match="carries must be carry slot indices"):
        sdfg_scan.scan(pressure, (ps, 0.0, True), (fac,), axis=1, carries=("a",))


# -- structure, validation, GPU ---------------------------------------------------------------------

def test_body_is_a_column_scan_and_round_trips(tmp_path):
    sdfg = _program(True, "include_initial", np.float64, "scan_rt")
    (node,) = [n for n, _ in sdfg.all_nodes_recursive() if isinstance(n, Scan)]
    s = analyze_scan(node.body)
    assert (s.direction, node.columns, node.emit) == ("backward", "map", "include_initial")
    assert {c.kind for c in s.carries.values()} == {"recurrent"}
    node.implementation = "sequential"
    path = tmp_path / "s.sdfg"
    sdfg.save(str(path))
    back = dace.SDFG.from_file(str(path))
    (n2,) = [n for n, _ in back.all_nodes_recursive() if isinstance(n, Scan)]
    assert (n2.emit, n2.axis, n2.columns, n2.direction, n2.implementation) == (
        "include_initial", 1, "map", "backward", "sequential")
    back.validate()


def test_unknown_emit_mode_is_refused():
    @dace.program
    def prog(a: dace.float64[N, K], o: dace.float64[N, K]):
        o[:] = sdfg_scan.scan(body, (0.0, 0.0), (a, a), axis=1, emit="both")[0]

    with pytest.raises(ValueError, match="unknown emit mode 'both'"):
        prog.to_sdfg()


def test_axis_out_of_range_is_refused():
    @dace.program
    def prog(a: dace.float64[N, K], o: dace.float64[N, K]):
        o[:] = sdfg_scan.scan(body, (0.0, 0.0), (a, a), axis=2)[0]

    with pytest.raises(np.exceptions.AxisError, match="sdfg_scan.scan: axis 2 is out of bounds for array of dimension 2"):
        prog.to_sdfg()


def test_validation_names_node_and_connector():
    sdfg = _program(False, "inclusive", np.float64, "scan_val")
    state = next(st for st in sdfg.states() if any(isinstance(n, Scan) for n in st.nodes()))
    node = next(n for n in state.nodes() if isinstance(n, Scan))
    bad = copy.deepcopy(sdfg)
    bstate = next(st for st in bad.states() if any(isinstance(n, Scan) for n in st.nodes()))
    bnode = next(n for n in bstate.nodes() if isinstance(n, Scan))
    bnode.body.arrays["init0"].dtype = dace.float32
    with pytest.raises(ValueError, match=r"sdfg_scan.Scan 'scan': connector 'init0' \(carry init\) has dtype"):
        bnode.validate(bad, bstate)
    node.emit = "sideways"
    with pytest.raises(ValueError, match="unknown emit mode 'sideways'"):
        node.validate(sdfg, state)
    node.emit = "inclusive"
    node.axis = 5
    with pytest.raises(ValueError, match="axis 5 is out of range"):
        node.validate(sdfg, state)
    node.axis = 1
    node.direction = "backward"
    with pytest.raises(ValueError, match="sync_from_body"):
        node.validate(sdfg, state)


def test_invalid_body_edge_in_the_loop_is_named():
    """A body edge inside the level loop that DaCe refuses: the node's error carries DaCe's message (DaCe's own
    ``str()`` of the error looks the state up among the body's top-level blocks and raised IndexError)."""
    sdfg = _program(False, "inclusive", np.float64, "scan_bad_body", strided=False)
    node, state = next((n, st) for n, st in sdfg.all_nodes_recursive() if isinstance(n, Scan))
    xs = node.body.arrays["xs1"]
    xs.shape, xs.strides, xs.total_size = (xs.shape[0], 2), (xs.strides[0], 1), xs.total_size * 2
    with pytest.raises(ValueError, match=r"sdfg_scan.Scan 'scan': the body does not validate: InvalidSDFGEdgeError: "
                                         r"Memlet subset does not match node dimension \(expected 2, got 1\)$"):
        node.validate(sdfg, state)


def test_rank_mismatch_is_refused():
    @dace.program
    def prog(a: dace.float64[N, K], b: dace.float64[K], o: dace.float64[N, K]):
        o[:] = sdfg_scan.scan(body, (0.0, 0.0), (a, b), axis=-1)[0]

    with pytest.raises(ValueError, match=r"sdfg_scan.scan: xs\[1\] 'b' has shape \(K,\), expected the shape of "
                                         r"xs\[0\] 'a' \(N, K\)"):
        prog.to_sdfg()


def test_shape_mismatch_is_refused():
    """Inputs of one rank but other level counts: refused while parsing, by validate() and by the reference
    (they would read out of bounds)."""
    @dace.program
    def prog(a: dace.float64[N, K], b: dace.float64[N, 2], o: dace.float64[N, K]):
        o[:] = sdfg_scan.scan(body, (0.0, 0.0), (a, b), axis=1)[0]

    with pytest.raises(ValueError, match=r"sdfg_scan.scan: xs\[1\] 'b' has shape \(N, 2\), expected the shape of "
                                         r"xs\[0\] 'a' \(N, K\)"):
        prog.to_sdfg()
    with pytest.raises(ValueError, match=r"input 1 has shape \(3, 2\), expected the shape \(3, 6\) of input 0"):
        sdfg_scan.scan(body, (0.0, 0.0), (np.ones((3, 6)), np.ones((3, 2))), axis=1)

    sdfg = _program(False, "include_initial", np.float64, "scan_shapes", strided=False)
    node, state = next((n, st) for n, st in sdfg.all_nodes_recursive() if isinstance(n, Scan))
    node.validate(sdfg, state)  # carries of K + 1 slots beside inputs of K levels
    edge = next(e for e in state.in_edges(node) if e.dst_conn == "xs1")
    good = edge.data.subset
    edge.data.subset = dace.subsets.Range.from_string("0:N, 0:2")
    with pytest.raises(ValueError, match=r"sdfg_scan.Scan 'scan': connector 'xs1' has shape \(N, 2\), expected the "
                                         r"shape of 'xs0' \(N, K\)"):
        node.validate(sdfg, state)
    edge.data.subset = good
    out = next(e for e in state.out_edges(node) if e.src_conn == "carry0")
    out.data.subset = dace.subsets.Range.from_string("0:N, 0:K")
    with pytest.raises(ValueError, match=r"connector 'carry0' has shape \(N, K\), expected \(N, K \+ 1\) \(the "
                                         r"shape of 'xs0' \(N, K\), 1 more along axis 1\)"):
        node.validate(sdfg, state)


def scalar_init_body(c, x, k):
    s = c[0] * 0.5 + x[0]
    return (s,), (s - x[0],)


@dace.program
def scalar_inits(x2: dace.float64[N, K], x3: dace.float64[N, K, M], x1: dace.float64[K], s: dace.float64,
                 c2: dace.float64[N, K], y2: dace.float64[N, K], c3: dace.float64[N, K, M], y3: dace.float64[N, K, M],
                 c1: dace.float64[K], y1: dace.float64[K], g2: dace.float64[N, K], f2: dace.float64[K]):
    c2[:], y2[:] = sdfg_scan.scan(scalar_init_body, (s,), (x2,), axis=1)
    c3[:], y3[:] = sdfg_scan.scan(scalar_init_body, (s,), (x3,), axis=1, reverse=True)
    c1[:], y1[:] = sdfg_scan.scan(scalar_init_body, (s,), (x1,))
    g2[:], f2[:] = sdfg_scan.scan(scalar_init_body, (s,), (x2,), axis=0, emit="exclusive", carries=(), final=True)


@pytest.fixture(scope="module")
def scalar_inits_compiled():
    return scalar_inits.to_sdfg().compile()


@pytest.mark.parametrize("n, k, m", [(1, 1, 1), (3, 4, 2), (7, 65, 3), (2, 0, 2)])
def test_scalar_init_is_given_to_every_column(scalar_inits_compiled, n, k, m):
    """A runtime scalar as init (a program argument): the carry of every column starts from it, bitwise as
    the reference given the same value as a 0-d array (2-d, 3-d and 1-d inputs)."""
    rng = np.random.default_rng(n * 100 + k)
    x2, x3, x1 = rng.random((n, k)), rng.random((n, k, m)), rng.random(k)
    s = np.array(rng.random())
    outs = {"c2": np.zeros((n, k)), "y2": np.zeros((n, k)), "c3": np.zeros((n, k, m)), "y3": np.zeros((n, k, m)),
            "c1": np.zeros(k), "y1": np.zeros(k), "g2": np.zeros((n, k)), "f2": np.zeros(k)}
    scalar_inits_compiled(x2=x2, x3=x3, x1=x1, s=float(s), N=n, K=k, M=m, **outs)
    want = {}
    want["c2"], want["y2"] = sdfg_scan.scan(scalar_init_body, (s,), (x2,), axis=1)
    want["c3"], want["y3"] = sdfg_scan.scan(scalar_init_body, (s,), (x3,), axis=1, reverse=True)
    want["c1"], want["y1"] = sdfg_scan.scan(scalar_init_body, (s,), (x1,))
    want["g2"], want["f2"] = sdfg_scan.scan(scalar_init_body, (s,), (x2,), axis=0, emit="exclusive", carries=(),
                                            final=True)
    for name, value in want.items():
        assert np.array_equal(outs[name], value), name


DECAY = 0.3   # a number of the module: inlined into the body as a Python float (weak, as in NumPy)


def literal_body(c, x, k):
    """Python numbers beside float32 values: in products, sums of numbers only, comparisons, np.where."""
    s, = c
    t = s * 0.9 + x[0] * (0.1 + 0.2) - DECAY
    h = 0.7
    return (np.where(x[0, -1] > 0.1, t + h, t * 1.1),), (np.maximum(t, 0.25) + k / 3,)


def int_division_body(c, x, k):
    """``/`` of integers (an int input, the level index) is true division, as in NumPy."""
    return (c[0] + x[0] / 4 + k / 2,), ()


def chained_body(c, x, k):
    """A tuple assignment and a chained comparison (C++ read ``a < b <= c`` as ``(a < b) <= c``)."""
    s, = c
    lo, hi = 0.05, s * 0.0 + 0.15
    return (s + np.where(lo < x[0] <= hi, x[0], 0.0),), ()


def test_body_types_follow_numpy():
    """NumPy (NEP 50) computes ``x32 * 0.1`` in float32 with 0.1 rounded to float32; the C++ tasklet
    promoted the expression to double (``auto t = s * 0.9 + ...`` was a double). ``k / 2`` and ``x / 4`` on
    int64 were C++'s integer divisions; ``lo < x <= hi`` compared a bool with ``hi``; ``a, b = p, q``
    failed inside DaCe's tasklet parser."""
    @dace.program
    def prog(a: dace.float32[N, K], c0: dace.float32[N, K], y: dace.float32[N, K], b: dace.int64[N, K],
             c1: dace.float64[N, K], c2: dace.float32[N, K]):
        c0[:], y[:] = sdfg_scan.scan(literal_body, (0.5,), (a,), axis=1)
        c1[:] = sdfg_scan.scan(int_division_body, (0.0,), (b,), axis=1)
        c2[:] = sdfg_scan.scan(chained_body, (0.5,), (a,), axis=1)

    csdfg = prog.to_sdfg().compile()
    rng = np.random.default_rng(7)
    a = rng.uniform(0.0, 0.2, (9, 40)).astype(np.float32)
    a[0, :4] = np.float32(0.1)   # x == 0.1 in float32: not above 0.1 in NumPy, above it in double
    b = rng.integers(-9, 9, (9, 40))
    c0, y, c1, c2 = np.zeros_like(a), np.zeros_like(a), np.zeros((9, 40)), np.zeros_like(a)
    csdfg(a=a, c0=c0, y=y, b=b, c1=c1, c2=c2, N=9, K=40)
    w0, wy = sdfg_scan.scan(literal_body, (0.5,), (a,), axis=1)
    assert w0.dtype == np.float32 and np.array_equal(c0, w0) and np.array_equal(y, wy)
    assert np.array_equal(c1, sdfg_scan.scan(int_division_body, (0.0,), (b,), axis=1))
    # a chained comparison is Python's ``and``: the reference runs such a body one column at a time
    assert np.array_equal(c2, sdfg_scan.scan(chained_body, (0.5,), (a,), axis=1))


def one_column_body(c, x, k):
    """Python control flow that needs one value per column: a conditional expression and builtin min."""
    s, = c
    t = s + x[0] if x[0] > 0.3 else s * 0.5
    return (min(t, 2.0),), (t - k,)


@pytest.mark.parametrize("axis, shape", [(1, (4, 6)), (0, (6, 3, 2)), (1, (0, 6)), (1, (3, 0))])
def test_reference_runs_one_column_bodies_column_by_column(axis, shape):
    """A body the README allows whose Python control flow needs one value per column (``a if x > 0 else b``,
    ``min``, chained comparisons): NumPy refuses the truth value of a column vector, so the Python call runs
    the columns one at a time, with the results of the all-columns loop's shapes and dtypes."""
    x = np.random.default_rng(3).random(shape)
    got = sdfg_scan.scan(one_column_body, 0.25, x, axis=axis, emit="include_initial", final=True)
    assert [g.shape for g in got] == [shape[:axis] + (shape[axis] + 1,) + shape[axis + 1:], shape,
                                      shape[:axis] + shape[axis + 1:]]
    assert all(g.dtype == np.float64 for g in got)
    carries, ys, final = np.moveaxis(got[0], axis, -1), np.moveaxis(got[1], axis, -1), got[2]
    xm = np.moveaxis(x, axis, -1)
    for col in np.ndindex(*xm.shape[:-1]):   # the README's loop, one column
        s = 0.25
        assert carries[col][0] == s
        for k, v in enumerate(xm[col]):
            t = s + v if v > 0.3 else s * 0.5
            s = min(t, 2.0)
            assert carries[col][k + 1] == s and ys[col][k] == t - k
        assert final[col] == s


def _remainder(c, x, k):
    return (c[0] + x[0] % 2.0,), ()


def _floored(c, x, k):
    t = np.floor(x[0] * 7.0) - np.ceil(c[0] * 0.5)
    return (c[0] * 0.5 + t,), (np.floor(x[0, -1]),)


@dace.program
def floored_columns(a: dace.float64[K, N], i0: dace.float64[N], c0: dace.float64[K, N], y0: dace.float64[K, N],
                    a32: dace.float32[K, N], j0: dace.float32[N], c1: dace.float32[K, N], y1: dace.float32[K, N]):
    c0[:], y0[:] = sdfg_scan.scan(_floored, (i0,), (a,), axis=0)
    c1[:], y1[:] = sdfg_scan.scan(_floored, (j0,), (a32,), axis=0)


def test_bodies_cxx_cannot_build_are_refused_while_parsing():
    """``%`` on floats, which the generated C++ would get wrong (it rounds toward zero, NumPy toward minus
    infinity), is refused while the program is parsed, with the reason."""
    @dace.program
    def prog(a: dace.float64[N, K], c0: dace.float64[N, K]):
        c0[:] = sdfg_scan.scan(_remainder, (0.0,), (a,), axis=1)

    with pytest.raises(ValueError, match=r"sdfg_scan.scan: 'x\[0\] % 2.0' is not supported in a scan body: NumPy's "
                                         r"'%' rounds toward minus infinity"):
        prog.to_sdfg()


@pytest.mark.parametrize("impl", ["sequential", "blocked", "blocked_simd", "blocked_simd_exact"])
def test_floor_and_ceil_in_a_body_match_numpy(impl):
    """``np.floor``/``np.ceil`` in a scan body: DaCe 2.0.0a10 lowers them to ``dace::math::floor``/``ceil``,
    which take no float or double, so the program did not compile (they were refused); the body now calls
    C's ``floor``/``ceil``. Bitwise NumPy's values in float64 and float32 (C's double overload is cast back),
    signed zeros, infinities and NaN included, in the per-cell and the blocked kernels."""
    sdfg = floored_columns.to_sdfg(simplify=True)
    sdfg.name = f"floored_columns_{impl}"
    for n, _ in sdfg.all_nodes_recursive():
        if isinstance(n, Scan):
            n.implementation = impl
    rng = np.random.default_rng(5)
    nlev, ncol = 9, 300
    args = {}
    for dt, (x, i, c, y) in ((np.float64, ("a", "i0", "c0", "y0")), (np.float32, ("a32", "j0", "c1", "y1"))):
        a = rng.uniform(-3.0, 3.0, (nlev, ncol)).astype(dt)
        a[0, :4] = [-0.0, np.inf, -np.inf, np.nan]
        args.update({x: a, i: rng.uniform(-3.0, 3.0, ncol).astype(dt), c: np.zeros_like(a), y: np.zeros_like(a)})
    with np.errstate(invalid="ignore"):
        want = {dt: sdfg_scan.scan(_floored, (args[i],), (args[x],), axis=0)
                for dt, x, i in ((np.float64, "a", "i0"), (np.float32, "a32", "j0"))}
    sdfg(**args, N=ncol, K=nlev)
    for dt, outs in ((np.float64, ("c0", "y0")), (np.float32, ("c1", "y1"))):
        for o, w in zip(outs, want[dt], strict=True):
            assert args[o].dtype == w.dtype and np.array_equal(args[o], w, equal_nan=True), (impl, o)


@pytest.mark.parametrize("emit", reference.EMIT_MODES)
def test_reference_over_no_level_keeps_its_outputs(emit):
    """Zero levels: as many results as for K > 0 (the ys empty along the axis), with the same dtypes."""
    def two_ys(c, x, k):
        s = c[0] + x[0]
        return (s,), (s * 2.0, s > 0.0)

    for k in (3, 0):
        a = np.ones((2, k), np.float32)
        got = sdfg_scan.scan(two_ys, (0.0,), (a,), axis=1, emit=emit, final=True)
        carry, y0, y1, fin = got
        assert carry.shape == (2, k + 1 if emit == "include_initial" else k) and fin.shape == (2,)
        assert y0.shape == y1.shape == (2, k) and y0.dtype == y1.dtype == np.float32
        outs, ys, _ = reference.scan(two_ys, (0.0,), {0: a}, axis=1, emit=emit, dtypes=[np.float32])
        assert [(y.shape, y.dtype) for y in ys] == [((2, k), np.float32), ((2, k), np.bool_)]


@pytest.mark.gpu
def test_gpu_codegen_has_the_column_kernel(tmp_path):
    sdfg = _program(False, "inclusive", np.float64, "scan_gpu", strided=False)
    sdfg.apply_gpu_transformations()
    code = cuda_code(sdfg)
    assert "__global__" in code and "for (_k = 0" in code.replace("int64_t ", "").replace("long long ", "")
    nvcc_compile(code, tmp_path)


@dace.program
def _one_constant_level(a: dace.float64[N, 1], b: dace.float64[N, 1], y: dace.float64[N, 1]):
    """A column loop over one constant level: DaCe's frontend squeezes the columns to scalar connectors
    that the loop reads and writes as ``a[i, k]``."""
    for i in dace.map[0:N]:
        c = 1.0
        for k in range(1):
            c = c * a[i, k] + b[i, k]
            y[i, k] = c


@pytest.mark.parametrize("impl", ["sequential", "levels_outside"])
def test_lifted_scan_over_one_constant_level_compiles(impl):
    """The lifted scan's expansions put the body back as a nested SDFG after DaCe gave the program's
    copies nodes of their own: a copy from a scalar connector at ``[k]`` must still compile."""
    sdfg = _one_constant_level.to_sdfg()
    sdfg.name = f"scan_one_constant_level_{impl}"
    report = sdfg_scan.optimize(sdfg, target="cpu", reproducibility="exact")
    assert report.scans_lifted == 1
    (node,) = [n for n, _ in sdfg.all_nodes_recursive() if isinstance(n, Scan)]
    node.implementation = impl
    rng = np.random.default_rng(3)
    a, b = rng.random((5, 1)), rng.random((5, 1))
    y = np.zeros((5, 1))
    sdfg.compile()(a=a, b=b, y=y, N=5)
    assert np.array_equal(y, 1.0 * a + b)


def test_levels_outside_runs_each_level_in_parallel_when_compile_expands_it():
    """DaCe's code generator expands a node it is handed (as ``optimize`` leaves it) after inferring
    schedules, and every ``Default`` map one nested SDFG below the expansion then became ``Sequential``:
    the levels-outside maps (init, each level, exit) ran on one thread. Each is an OpenMP loop now."""
    sdfg = _program(False, "inclusive", np.float64, "scan_levels_outside_parallel", strided=False)
    node = next(n for n, _ in sdfg.all_nodes_recursive() if isinstance(n, Scan))
    node.implementation = "levels_outside"
    code = "\n".join(o.clean_code for o in sdfg.generate_code() if o.language == "cpp")
    level_loop = code.index("_scan_level < K")
    assert code.count("#pragma omp parallel for") == 3   # init, level, exit (final carries)
    assert "#pragma omp parallel for" in code[level_loop:level_loop + 400]


BLOCKED_FRONTEND = [("blocked", False, "inclusive"), ("blocked", True, "include_initial"),
                    ("blocked_kcached", False, "exclusive"), ("blocked_simd", True, "inclusive"),
                    ("blocked_simd_exact", True, "include_initial")]


@pytest.mark.parametrize("impl,reverse,emit", BLOCKED_FRONTEND)
def test_blocked_expansions_build_frontend_scans(impl, reverse, emit):
    """``sdfg_scan.scan`` on 2-d operands (``columns="map"``) gets the cell-blocked kernel too, its one
    column index the blocked cells: ``blocked`` and ``blocked_kcached`` bitwise the reference (exact
    flags), ``blocked_simd`` within rounding (replay: vector math and contraction allowed); both layouts
    through the one build (symbolic strides: the kernel's unit-stride and strided versions), from 1 level
    and 1 column, a block edge crossed."""
    csdfg = compiled(reverse, emit, np.float64, impl)
    rng = np.random.default_rng(11)
    for nlev, ncol in ((1, 1), (2, 7), (65, 300), (3, 0)):
        a = rng.uniform(0.5, 1.0, (ncol, nlev))
        b = rng.uniform(-1.0, 1.0, (ncol, nlev))
        i0 = rng.uniform(-1.0, 1.0, ncol)
        want = expected(a, b, i0, reverse, emit)
        for order in ("C", "F"):
            got = run(csdfg, a, b, i0, emit, order)
            if impl == "blocked_simd":
                for g, w in zip(got, want, strict=True):
                    np.testing.assert_allclose(g, w, rtol=1e-13, atol=1e-15)
            else:
                _same(got, want)


def libm_body(c, x, k):
    (y,) = c
    return (y * np.exp(-x[0]) + x[0] ** 0.7,), ()


@dace.program
def libm_columns(x: dace.float64[K, N], y0: dace.float64[N], out: dace.float64[K, N], x3: dace.float64[K, N, M],
                 z0: dace.float64[N, M], out3: dace.float64[K, N, M]):
    out[:] = sdfg_scan.scan(libm_body, (y0,), (x,), axis=0)
    out3[:] = sdfg_scan.scan(libm_body, (z0,), (x3,), axis=0)


def test_replay_picks_blocked_simd_for_a_frontend_scan_with_libm_calls():
    """A frontend scan over cell-contiguous 2-d data whose body calls libm: ``auto`` under ``replay`` picks
    ``blocked_simd`` (vector calls), under ``exact`` an exact expansion. With two column dimensions the
    blocked kernels are refused with the reason (they block one)."""
    from sdfg_scan.choice import refusal
    from sdfg_scan.context import context_of

    sdfg = libm_columns.to_sdfg(simplify=True)
    (two, st2), (three, st3) = sorted(((n, st) for n, st in sdfg.all_nodes_recursive() if isinstance(n, Scan)),
                                      key=lambda p: len(p[0].operand(p[1], next(iter(p[0].in_connectors))).shape))
    assert choose(two, st2, floor="replay").implementation == "blocked_simd"
    assert choose(two, st2, floor="exact").reproducibility == "exact"
    why = refusal(three, "blocked", Scan.implementations["blocked"], context_of(three, st3, "exact"))
    assert why is not None and "blocks one cell dimension, the operands have 2 column dimensions" in why


def test_a_numpy_scalar_init_keeps_its_dtype():
    """``np.float64(0.3)`` subclasses Python's float: it was typed like a number (the float32 input's dtype).
    A NumPy scalar gives its own dtype, as a 0-d array and a ``dace.float64`` argument in a program do."""
    def body(c, x, k):
        return (c[0] * 0.5 + x[0],), ()

    f = np.ones((3, 2), np.float32)
    assert sdfg_scan.scan(body, (np.float64(0.3),), (f,), axis=0).dtype == np.float64
    assert sdfg_scan.scan(body, (np.array(0.3),), (f,), axis=0).dtype == np.float64
    assert sdfg_scan.scan(body, (0.3,), (f,), axis=0).dtype == np.float32
