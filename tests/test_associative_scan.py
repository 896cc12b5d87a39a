"""``AssociativeScan`` and ``sdfg_scan.associative_scan`` inside a program: every expansion against the NumPy
reference (``sequential``/``blocked`` bitwise the loop order, ``parallel_prefix`` bitwise the chunked order)
in both layouts, forward and reverse, on a tuple (affine pairs), a maximum and a ``def`` with temporaries;
the translation of ``fn`` and its errors; validation, selection and the lowering of a program."""

from __future__ import annotations

import itertools
import re

import dace
import numpy as np
import pytest

import sdfg_scan
from sdfg_scan import reference
from sdfg_scan.expansions.associative_combine import cpp_steps, python_steps, translate_combine
from sdfg_scan.harness import numpy_array, one_node_sdfg, strides_for
from sdfg_scan.nodes import AssociativeScan, CumulativeScan
from sdfg_scan.select import select_expansions

N, K = dace.symbol("N"), dace.symbol("K")
CHUNK = 5
SIZES = [(3, 37), (1, 1), (2, 2), (4, 23), (2, 0)]  # 37 levels: 8 chunks (full and partial groups of 4)
SCALE = 0.75


def affine(a, b):
    """Composition of ``y -> A*y + B`` (earlier) with ``y -> s*y + t`` (later)."""
    A, B = a
    s, t = b
    return s * A, s * B + t


def running_argmax(a, b):
    """(value, payload) of the first maximum: a ``def`` with a temporary and ``np.where`` (exactly associative)."""
    later = b[0] > a[0]
    value = np.where(later, b[0], a[0])
    return value, np.where(later, b[1], a[1])


def scaled_max(a, b):
    """A module constant and a temporary (not associative: translation only)."""
    m = np.maximum(a * SCALE, b)
    return m


FNS = {"affine": (affine, 2), "max": (lambda a, b: np.maximum(a, b), 1), "argmax": (running_argmax, 2),
       "f32": (lambda a, b: a * 0.1 + b, 1)}   # float32: the literal rounds to float32 first, as in NumPy
ARRAYS = {"affine": (1, 2), "max": (0,), "argmax": (0, 2), "f32": (3,)}  # x0 holds a NaN; x3 is float32
DTYPES = [dace.float64, dace.float64, dace.float64, dace.float32]
# (fn, reverse, implementation): the affine pairs in every combination, the others in one direction each
VARIANTS = [("affine", rev, impl) for rev, impl in itertools.product((False, True), ("sequential", "parallel_prefix"))] + [
    ("max", False, "sequential"), ("max", True, "parallel_prefix"), ("argmax", True, "sequential"),
    ("argmax", False, "parallel_prefix"), ("affine", True, "blocked"), ("argmax", False, "blocked"),
    ("f32", True, "sequential"), ("f32", False, "parallel_prefix")]


def _out(layout, fn, rev, impl, i):
    return f"y_{layout}_{fn}_{int(rev)}_{impl}_{i}"


def _sdfg() -> dace.SDFG:
    """Every variant in both layouts, one SDFG (one compilation), sizes symbolic."""
    sdfg = dace.SDFG("test_associative_scan_all")
    state = sdfg.add_state()
    for layout in ("k", "cell"):
        strides = strides_for([N, K], 1, layout)
        for j, dtype in enumerate(DTYPES):
            sdfg.add_array(f"x_{layout}_{j}", [N, K], dtype, strides=strides)
        reads = [state.add_read(f"x_{layout}_{j}") for j in range(len(DTYPES))]
        for fn, rev, impl in VARIANTS:
            f, n = FNS[fn]
            node = AssociativeScan(_out(layout, fn, rev, impl, "n"), translate_combine(f, n), axis=1, reverse=rev)
            node.implementation, node.chunk_size = impl, CHUNK
            for i, j in enumerate(ARRAYS[fn]):
                state.add_edge(reads[j], None, node, f"_in{i}", dace.Memlet(f"x_{layout}_{j}[0:N, 0:K]"))
                out = _out(layout, fn, rev, impl, i)
                sdfg.add_array(out, [N, K], DTYPES[j], strides=strides)
                state.add_edge(node, f"_out{i}", state.add_write(out), None, dace.Memlet(f"{out}[0:N, 0:K]"))
    sdfg.validate()
    return sdfg


@pytest.fixture(scope="module")
def compiled():
    return _sdfg().compile()


def _inputs(ncol, nlev, seed):
    """``x0`` for the maxima (one NaN in the last column of long ones); ``x1``, ``x2`` the affine pairs
    (factors around 1); ``x3`` float32."""
    rng = np.random.default_rng(seed)
    x0 = rng.uniform(-1.0, 1.0, (ncol, nlev))
    if ncol > 2 and nlev > 30:
        x0[-1, 30] = np.nan
    return [x0, rng.uniform(-1.05, 1.05, (ncol, nlev)), rng.uniform(0.5, 1.0, (ncol, nlev)),
            rng.uniform(-1.0, 1.0, (ncol, nlev)).astype(np.float32)]


def _want(fn, xs, rev, impl):
    f, n = FNS[fn]
    kw = {"order": "chunked", "chunk": CHUNK} if impl == "parallel_prefix" else {}
    arrays = [xs[j] for j in ARRAYS[fn]]
    got = reference.associative_scan(f, arrays[0] if n == 1 else tuple(arrays), axis=1, reverse=rev, **kw)
    return [got] if n == 1 else list(got)


@pytest.mark.parametrize("ncol, nlev", SIZES, ids=[f"{c}x{k}" for c, k in SIZES])
def test_every_expansion_bitwise_against_the_reference(compiled, ncol, nlev):
    """sequential/blocked: the reference loop order; parallel_prefix: the chunked order (several chunks)."""
    xs = _inputs(ncol, nlev, seed=ncol * 100 + nlev)
    args, outs = {}, {}
    for layout in ("k", "cell"):
        for j, x in enumerate(xs):
            args[f"x_{layout}_{j}"] = numpy_array(x, 1, layout)
        for fn, rev, impl in VARIANTS:
            for i, j in enumerate(ARRAYS[fn]):
                outs[_out(layout, fn, rev, impl, i)] = numpy_array(np.zeros_like(xs[j]), 1, layout)
    compiled(**args, **outs, N=ncol, K=nlev)
    for layout in ("k", "cell"):
        for fn, rev, impl in VARIANTS:
            want = _want(fn, xs, rev, impl)
            for i, w in enumerate(want):
                got = outs[_out(layout, fn, rev, impl, i)]
                assert got.dtype == w.dtype and got.tobytes() == w.tobytes(), (layout, fn, rev, impl, i)


def test_chunked_order_is_not_the_loop_order_for_the_affine_pair():
    """The parallel_prefix oracle regroups the products: bitwise tests of it are not the loop order again."""
    _, a, b, _ = _inputs(3, 37, seed=5)
    seq = reference.associative_scan(affine, (a, b), axis=1)
    chunked = reference.associative_scan(affine, (a, b), axis=1, order="chunked", chunk=CHUNK)
    assert not np.array_equal(seq[0], chunked[0])
    np.testing.assert_allclose(chunked[0], seq[0], rtol=1e-12)


# -- the frontend ---------------------------------------------------------------------------------------

def _program(fn, names):
    fn.__annotations__ = dict.fromkeys(names, dace.float64[N, K])  # postponed annotations are unreadable
    return dace.program(fn)


def _nodes(sdfg, cls):
    return [n for n, _ in sdfg.all_nodes_recursive() if isinstance(n, cls)]


def test_program_lowers_a_tuple_lambda_and_returns_the_structure_of_xs():
    def prog(x, z, y, w):
        A_, B_ = sdfg_scan.associative_scan(lambda p, q: (p[0] * q[0], q[0] * p[1] + q[1]), (x, z), axis=1,
                                            reverse=True)
        y[:] = A_
        w[:] = B_

    sdfg = _program(prog, ["x", "z", "y", "w"]).to_sdfg()
    (node,) = _nodes(sdfg, AssociativeScan)
    assert list(node.combine) == ["a0 * b0", "b0 * a1 + b1"] and (node.axis, node.reverse) == (1, True)
    node.implementation, node.chunk_size = "parallel_prefix", 4
    _, a, b, _ = _inputs(2, 19, seed=7)
    y, w = np.zeros_like(a), np.zeros_like(a)
    sdfg(x=a, z=b, y=y, w=w, N=2, K=19)
    want = reference.associative_scan(affine, (a, b), axis=1, reverse=True, order="chunked", chunk=4)
    assert np.array_equal(y, want[0]) and np.array_equal(w, want[1])


def test_program_one_array_in_a_tuple_takes_and_returns_tuples():
    """``xs=(x,)`` (or ``[x]``): ``fn`` takes and returns tuples of one, as the Python call (DaCe hands the
    lowering the one array, so the call's source tells the forms apart)."""
    def prog(x, y, w):
        r, = sdfg_scan.associative_scan(lambda p, q: (p[0] * 0.5 + q[0],), (x,), axis=1)
        y[:] = r
        (s,) = sdfg_scan.associative_scan(lambda p, q: (np.maximum(p[0], q[0]),), xs=[x], axis=1, reverse=True)
        w[:] = s

    sdfg = _program(prog, ["x", "y", "w"]).to_sdfg()
    assert sorted(list(n.combine) for n in _nodes(sdfg, AssociativeScan)) == [
        ["a0 * 0.5 + b0"], ["a0 if a0 > b0 or a0 != a0 else b0"]]
    _, a, _, _ = _inputs(3, 9, seed=5)
    y, w = np.zeros_like(a), np.zeros_like(a)
    sdfg(x=a, y=y, w=w, N=3, K=9)
    (want_y,) = reference.associative_scan(lambda p, q: (p[0] * 0.5 + q[0],), (a,), axis=1)
    (want_w,) = reference.associative_scan(lambda p, q: (np.maximum(p[0], q[0]),), [a], axis=1, reverse=True)
    assert np.array_equal(y, want_y) and np.array_equal(w, want_w)


def test_program_middle_axis_of_three_dimensions():
    """Columns over the two other axes; ``auto`` (selection) and a pinned ``parallel_prefix`` on one program;
    the unread first result of the pair is removed by DaCe (the node writes only the second)."""
    A, B = dace.symbol("A"), dace.symbol("B")

    def prog(x, y, w):
        y[:] = sdfg_scan.associative_scan(affine, (x, w), axis=1)[1]
        w[:] = sdfg_scan.associative_scan(lambda p, q: np.maximum(p, q), x, axis=1, reverse=True)

    prog.__annotations__ = dict.fromkeys(["x", "y", "w"], dace.float64[A, K, B])
    sdfg = dace.program(prog).to_sdfg()
    pair, single = sorted(_nodes(sdfg, AssociativeScan), key=lambda n: -len(n.combine))
    assert pair.outputs() == ["_out1"]
    pair.implementation, pair.chunk_size = "parallel_prefix", 3
    rng = np.random.default_rng(9)
    x, w0 = rng.uniform(0.5, 1.0, (3, 11, 4)), rng.uniform(-1.0, 1.0, (3, 11, 4))
    y, w = np.zeros_like(x), w0.copy()
    sdfg(x=x, y=y, w=w, A=3, K=11, B=4)
    assert np.array_equal(y, reference.associative_scan(affine, (x, w0), axis=1, order="chunked", chunk=3)[1])
    assert np.array_equal(w, reference.associative_scan(np.maximum, x, axis=1, reverse=True))


def test_program_ufuncs_on_one_array_still_lower_to_cumulative_scan():
    def prog(x, y):
        y[:] = sdfg_scan.associative_scan(np.maximum, x, axis=0)

    sdfg = _program(prog, ["x", "y"]).to_sdfg()
    assert not _nodes(sdfg, AssociativeScan)
    (node,) = _nodes(sdfg, CumulativeScan)
    assert (node.op, node.axis) == ("max", 0)


def _arity(x, y):
    y[:] = sdfg_scan.associative_scan(lambda p, q: (p, q), x, axis=1)


def _method(x, y):
    y[:] = sdfg_scan.associative_scan(lambda p, q: p.sum(), x, axis=1)


def _name(x, y):
    y[:] = sdfg_scan.associative_scan(lambda p, q: p + unknown_name, x, axis=1)  # noqa: F821


def _floordiv(x, y):
    y[:] = sdfg_scan.associative_scan(lambda p, q: p // q, x, axis=1)


def _index(x, y):
    y[:] = sdfg_scan.associative_scan(lambda p, q: p[0] + q, x, axis=1)


@pytest.mark.parametrize("prog, message", [
    (_arity, "fn returns a tuple of 2 value(s), but xs is one array"),
    (_method, "call 'p.sum()' is not supported in fn"),
    (_name, "reads 'unknown_name', which is no argument"),
    (_floordiv, "'p // q', which cannot be lowered"),
    (_index, "fn indexes its argument in 'p[0]', but xs is one array"),
], ids=["arity", "method", "name", "floordiv", "index"])
def test_program_refuses_what_cannot_be_translated(prog, message):
    with pytest.raises(Exception, match=r"sdfg_scan\.associative_scan: .*" + re.escape(message)):
        _program(prog, ["x", "y"]).to_sdfg()


def test_program_refuses_mixed_dtypes():
    def prog(x, z, y):
        y[:] = sdfg_scan.associative_scan(affine, (x, z), axis=1)[0]

    prog.__annotations__ = {"x": dace.float64[N, K], "z": dace.float32[N, K], "y": dace.float64[N, K]}
    with pytest.raises(Exception, match="must share one shape and dtype; 'z' is float32"):
        dace.program(prog).to_sdfg()


# -- translation -----------------------------------------------------------------------------------------

def test_translation_inlines_temporaries_and_renders_both_languages():
    assert translate_combine(affine, 2) == ["b0 * a0", "b0 * a1 + b1"]
    assert translate_combine(running_argmax, 2) == ["b0 if b0 > a0 else a0", "b1 if b0 > a0 else a1"]
    (expr,) = translate_combine(scaled_max, 1)
    # the constant inlined; NaN, the first NaN and ties as np.maximum (reference_levels.combine)
    assert expr == "a0 * 0.75 if a0 * 0.75 > b0 or a0 * 0.75 != a0 * 0.75 else b0"
    assert python_steps(["a0 + 0.1 * b0"], "float32", ["s0"], ["_in0"]) == ["s0 + dace.float32(0.1) * _in0"]
    assert cpp_steps(["a0 + 0.1 * b0"], "float32") == ["({c0} + (dace::float32(0.1) * {e0}))"]
    assert cpp_steps(["math.exp(a0) * b0"], "float64") == ["(dace::math::exp({c0}) * {e0})"]


@pytest.mark.parametrize("fn, n, message", [
    (lambda a, b: a + b, 2, "fn returns one value 'a + b', but xs has 2 arrays"),
    (lambda a, b: (a[0], b[1], a[1]), 2, "fn returns 3 value"),
    (lambda a, b: (a[2], b[0]), 2, "fn reads 'a[2]'; expected a[i] with an integer constant 0 <= i < 2"),
    (lambda a, b: (a, b[0]), 2, "uses its argument 'a' whole"),
    (np.logaddexp, 1, "cannot read the source of fn 'logaddexp'"),
], ids=["one-for-two", "three-for-two", "index", "whole", "ufunc"])
def test_translation_errors(fn, n, message):
    with pytest.raises(ValueError, match=r"sdfg_scan\.associative_scan: .*" + re.escape(message)):
        translate_combine(fn, n)


def test_translation_refuses_statements():
    def branchy(a, b):
        if a > b:
            return a
        return b

    with pytest.raises(ValueError, match="statement 'if a > b:' is not supported"):
        translate_combine(branchy, 1)


# -- validation and selection ---------------------------------------------------------------------------

F = ([N, K], dace.float64, True)


def _one(node, ins=None, outs=None, name="test_assoc_validate"):
    n = len(node.combine)
    return one_node_sdfg(name, node, ins or {f"_in{i}": F for i in range(n)},
                         outs or {f"_out{i}": F for i in range(n)}, 1, "k")


def test_validation_names_the_node_and_the_connector():
    with pytest.raises(Exception, match=r"AssociativeScan 's': connector '_in1' has dtype float32, expected the "
                       r"dtype of '_in0' \(float64\)"):
        _one(AssociativeScan("s", ["a0 * b0", "b0 * a1 + b1"], axis=1), ins={"_in0": F, "_in1": ([N, K], dace.float32, True)})
    with pytest.raises(Exception, match=r"AssociativeScan 's': combine\[0\] 'a0 \+ c7' reads 'c7'"):
        _one(AssociativeScan("s", ["a0 + c7"], axis=1))
    with pytest.raises(Exception, match=r"combine\[0\] 'a0 / b0' uses 'a0 / b0' on integer arrays \(int64\)"):
        I64 = ([N, K], dace.int64, True)
        _one(AssociativeScan("s", ["a0 / b0"], axis=1), ins={"_in0": I64}, outs={"_out0": I64})


@pytest.mark.parametrize("ncol, nlev", [(2, 4 * 2**20), (81920, 90)])
def test_exact_selection_never_picks_parallel_prefix(ncol, nlev):
    shape = ([ncol, nlev], dace.float64, True)
    node = AssociativeScan("s", ["a0 * b0", "b0 * a1 + b1"], axis=1)
    sdfg = _one(node, {"_in0": shape, "_in1": shape}, {"_out0": shape, "_out1": shape}, "test_assoc_select")
    (choice,) = select_expansions(sdfg, reproducibility="exact")
    assert choice.implementation != "parallel_prefix" and choice.reproducibility == "exact"
    node.implementation = "parallel_prefix"
    with pytest.raises(ValueError, match="pinned implementation 'parallel_prefix' is replay, below the floor 'exact'"):
        select_expansions(sdfg, reproducibility="exact")
    node.implementation = "auto"
    (choice,) = select_expansions(sdfg, reproducibility="replay")
    assert (choice.implementation == "parallel_prefix") == (ncol == 2), choice.reason


@pytest.mark.gpu
def test_gpu_code_generation():
    """On the GPU the combine is C++ inside the parallel_prefix kernels and the sequential thread per column."""
    for impl in ("parallel_prefix", "sequential"):
        node = AssociativeScan("s", translate_combine(scaled_max, 1), axis=1)
        node.implementation, node.chunk_size = impl, 64
        sdfg = _one(node, name=f"test_assoc_gpu_{impl}")
        sdfg.apply_gpu_transformations()
        sdfg.expand_library_nodes()
        code = [o for o in sdfg.generate_code() if o.language == "cu"][0].clean_code
        assert "__global__" in code and "0.75" in code
