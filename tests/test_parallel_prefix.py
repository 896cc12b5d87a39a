"""``parallel_prefix`` of CumulativeScan and LinearRecurrence: bitwise against the pinned chunked order
(``reference.<fn>(order="chunked", chunk=C)``), within 1e-9 of the sequential reference, the same bits
for 1 and 2 OpenMP threads and from run to run; selection under ``exact`` never takes it."""

from __future__ import annotations

import ctypes
import ctypes.util
import itertools
import subprocess

import dace
import numpy as np
import pytest

import sdfg_scan
from sdfg_scan import reference
from sdfg_scan.expansions import parallel_prefix as pp
from sdfg_scan.expansions.parallel_prefix_ops import affine_op, cumulative_op
from sdfg_scan.harness import numpy_array, one_node_sdfg, strides_for
from sdfg_scan.nodes import CumulativeScan, LinearRecurrence
from sdfg_scan.select import select_expansions

N, K = dace.symbol("N"), dace.symbol("K")
F = ([N, K], dace.float64, True)
CHUNK = 5  # 4 chunks per CPU task: the sizes below cover full groups, partial groups and short chunks
SIZES = [(3, 37), (1, 1), (2, 2), (2, 40), (4, 23), (1, 5), (2, 0)]
VARIANTS = list(itertools.product(("sum", "min"), (False, True), (False, True)))  # prod/max: the same code paths


def _name(op, rev, exc):
    return f"y_{op}_{'rev' if rev else 'fwd'}_{'exc' if exc else 'inc'}"


def _cumulative_sdfg(layout: str) -> dace.SDFG:
    """One CumulativeScan per (op, reverse, exclusive), all ``parallel_prefix`` with chunk 5."""
    sdfg = dace.SDFG(f"test_pp_cumulative_{layout}")
    strides = strides_for([N, K], 1, layout)
    sdfg.add_array("x", [N, K], dace.float64, strides=strides)
    state = sdfg.add_state()
    read = state.add_read("x")
    for op, rev, exc in VARIANTS:
        out = _name(op, rev, exc)
        sdfg.add_array(out, [N, K], dace.float64, strides=strides)
        node = CumulativeScan(out, op=op, axis=1, reverse=rev, exclusive=exc)
        node.implementation = "parallel_prefix"
        node.chunk_size = CHUNK
        state.add_edge(read, None, node, "_in", dace.Memlet("x[0:N, 0:K]"))
        state.add_edge(node, "_out", state.add_write(out), None, dace.Memlet(f"{out}[0:N, 0:K]"))
    return sdfg


LINREC = list(itertools.product((False, True), (False, True)))  # (reverse, has_init)


def _linrec_sdfg(layout: str) -> dace.SDFG:
    """One LinearRecurrence per (reverse, has_init), all reading ``a``, ``b`` (and ``init``)."""
    sdfg = dace.SDFG(f"test_pp_linrec_{layout}")
    strides = strides_for([N, K], 1, layout)
    for name in ("a", "b"):
        sdfg.add_array(name, [N, K], dace.float64, strides=strides)
    sdfg.add_array("init", [N], dace.float64)
    state = sdfg.add_state()
    reads = {c: state.add_read(c) for c in ("a", "b", "init")}
    for rev, has_init in LINREC:
        out = f"y_{int(rev)}{int(has_init)}"
        sdfg.add_array(out, [N, K], dace.float64, strides=strides)
        node = LinearRecurrence(out, axis=1, reverse=rev, has_init=has_init, init_value=0.25)
        node.implementation, node.chunk_size = "parallel_prefix", CHUNK
        for c in ("a", "b") + (("init",) if has_init else ()):
            state.add_edge(reads[c], None, node, c, dace.Memlet.from_array(c, sdfg.arrays[c]))
        state.add_edge(node, "_out", state.add_write(out), None, dace.Memlet(f"{out}[0:N, 0:K]"))
    return sdfg


_COMPILED: dict = {}


def _compiled(key, make):
    if key not in _COMPILED:
        _COMPILED[key] = make().compile()
    return _COMPILED[key]


def _assert_close(got, want):
    """Within 1e-9 relative (plus 1e-12 of the largest magnitude, for values that cross zero)."""
    finite = np.abs(want[np.isfinite(want)])
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-12 * (finite.max() if finite.size else 0.0))


@pytest.mark.parametrize("layout", ["k", "cell"])
def test_cumulative_bitwise_chunked_order(layout):
    prog = _compiled(("cum", layout), lambda: _cumulative_sdfg(layout))
    rng = np.random.default_rng(1)
    for ncol, nlev in SIZES:
        x = rng.uniform(0.5, 1.5, (ncol, nlev))
        outs = {_name(*v): numpy_array(np.zeros((ncol, nlev)), 1, layout) for v in VARIANTS}
        prog(x=numpy_array(x, 1, layout), **outs, N=ncol, K=nlev)
        for (op, rev, exc) in VARIANTS:
            got = outs[_name(op, rev, exc)]
            want = reference.cumulative(x, op, 1, rev, exc, order="chunked", chunk=CHUNK)
            assert np.array_equal(got.view(np.uint64), want.view(np.uint64)), (op, rev, exc, ncol, nlev)
            seq = reference.cumulative(x, op, 1, rev, exc)
            _assert_close(got, seq)
            if op in ("min", "max") or nlev <= CHUNK:  # exactly associative, or one chunk: sequential bits
                assert np.array_equal(got, seq)


@pytest.mark.parametrize("layout", ["k", "cell"])
def test_min_max_signed_zeros_and_nans_bitwise(layout):
    """min/max of -0.0/+0.0 ties and NaNs (two payloads) across chunk boundaries: the chunk totals combine
    with ``reference_levels.combine``'s rule (the first NaN stays, a tie takes the later level), so the
    result is the sequential reference's bits."""
    prog = _compiled(("cum", layout), lambda: _cumulative_sdfg(layout))
    rng = np.random.default_rng(4)
    ncol, nlev = 3, 5 * CHUNK + 3
    nan2 = np.frombuffer(np.uint64(0x7FF8000000000123).tobytes(), np.float64)[0]
    x = rng.choice(np.array([-0.0, 0.0, -0.0, 0.0, np.nan, nan2, -1.0, 1.0]), (ncol, nlev))
    x[0] = rng.choice(np.array([-0.0, 0.0]), nlev)        # a column of signed zeros only
    outs = {_name(*v): numpy_array(np.zeros((ncol, nlev)), 1, layout) for v in VARIANTS}
    prog(x=numpy_array(x, 1, layout), **outs, N=ncol, K=nlev)
    for (op, rev, exc) in VARIANTS:
        if op not in ("min", "max"):
            continue
        got, want = outs[_name(op, rev, exc)], reference.cumulative(x, op, 1, rev, exc)
        assert np.array_equal(got.view(np.uint64), want.view(np.uint64)), (op, rev, exc)


@pytest.mark.parametrize("layout", ["k", "cell"])
def test_linear_recurrence_bitwise_chunked_order(layout):
    prog = _compiled(("lr", layout), lambda: _linrec_sdfg(layout))
    rng = np.random.default_rng(2)
    for ncol, nlev in SIZES:
        a, b = rng.uniform(-1.05, 1.05, (ncol, nlev)), rng.uniform(0.5, 1.0, (ncol, nlev))
        y0 = rng.uniform(-1, 1, ncol)
        outs = {f"y_{int(r)}{int(i)}": numpy_array(np.zeros((ncol, nlev)), 1, layout) for r, i in LINREC}
        prog(a=numpy_array(a, 1, layout), b=numpy_array(b, 1, layout), init=y0, **outs, N=ncol, K=nlev)
        for rev, has_init in LINREC:
            init = y0 if has_init else 0.25
            got = outs[f"y_{int(rev)}{int(has_init)}"]
            want = reference.linear_recurrence(a, b, 1, rev, init, order="chunked", chunk=CHUNK)
            assert np.array_equal(got.view(np.uint64), want.view(np.uint64)), (rev, has_init, ncol, nlev)
            _assert_close(got, reference.linear_recurrence(a, b, 1, rev, init))


def test_three_dimensional_middle_axis():
    """Columns over two axes around the scan axis (column index flattened, operand strides honoured)."""
    A, B = dace.symbol("A"), dace.symbol("B")
    node = CumulativeScan("cs3", axis=1, reverse=True, exclusive=True)
    node.implementation, node.chunk_size = "parallel_prefix", 3
    sdfg = one_node_sdfg("test_pp_3d", node, {"_in": ([A, K, B], dace.float64, True)},
                         {"_out": ([A, K, B], dace.float64, True)}, 1, "cell")
    x = np.random.default_rng(3).random((3, 11, 4))
    out = numpy_array(np.zeros_like(x), 1, "cell")
    sdfg(_in=numpy_array(x, 1, "cell"), _out=out, A=3, K=11, B=4)
    want = reference.cumulative(x, "sum", 1, True, True, order="chunked", chunk=3)
    assert np.array_equal(out, want)


def _libgomp():
    for name in ("gomp", "libgomp.so.1"):
        path = ctypes.util.find_library(name) or name
        try:
            return ctypes.CDLL(path)
        except OSError:
            continue
    pytest.skip("libgomp is not loadable: cannot set the OpenMP thread count in-process")


@pytest.mark.parametrize("kind", ["cumsum", "linrec"])
def test_same_bits_for_one_and_two_threads_and_every_run(kind):
    """The chunking is a node property: the OpenMP thread count (set through libgomp, which the compiled
    SDFG shares with this process) and the run change no bit, on columns long enough for many tasks.
    One column takes the one-pass schedule (a column per thread) on 1 thread and the three passes on 2;
    two columns take the one-pass schedule on both."""
    gomp = _libgomp()
    node = CumulativeScan("cs", axis=1) if kind == "cumsum" else LinearRecurrence("lr", axis=1)
    ins = {"_in": F} if kind == "cumsum" else {"a": F, "b": F}
    node.implementation, node.chunk_size = "parallel_prefix", 97
    prog = one_node_sdfg(f"test_pp_threads_{kind}", node, ins, {"_out": F}, 1, "k").compile()
    before = gomp.omp_get_max_threads()
    for ncol, nlev in ((1, 20011), (2, 20011), (3, 1000)):
        rng = np.random.default_rng(4)
        x, a = rng.random((ncol, nlev)), rng.uniform(0.9, 1.1, (ncol, nlev))
        if kind == "cumsum":
            kw, want = {"_in": x}, reference.cumulative(x, order="chunked", chunk=97)
        else:
            kw, want = {"a": a, "b": x}, reference.linear_recurrence(a, x, order="chunked", chunk=97)
        results = []
        try:
            for threads in (1, 2, 2, 1):
                gomp.omp_set_num_threads(threads)
                out = np.zeros((ncol, nlev))
                prog(**kw, _out=out, N=ncol, K=nlev)
                results.append(out)
        finally:
            gomp.omp_set_num_threads(before)
        for r in results:
            assert np.array_equal(r.view(np.uint64), want.view(np.uint64)), (ncol, nlev)


@pytest.mark.parametrize("ncol, nlev", [(2, 4 * 2**20), (81920, 90)])
def test_exact_selection_never_picks_parallel_prefix(ncol, nlev):
    for make in (lambda: CumulativeScan("cs", axis=1), lambda: LinearRecurrence("lr", axis=1)):
        node = make()
        ins = {"_in": ([ncol, nlev], dace.float64, True)} if isinstance(node, CumulativeScan) else \
            {"a": ([ncol, nlev], dace.float64, True), "b": ([ncol, nlev], dace.float64, True)}
        sdfg = one_node_sdfg("test_pp_select", node, ins, {"_out": ([ncol, nlev], dace.float64, True)}, 1, "k")
        (choice,) = select_expansions(sdfg, reproducibility="exact")
        assert choice.implementation != "parallel_prefix" and choice.reproducibility == "exact"


def test_declared_replay_on_cpu_and_gpu():
    for cls in (CumulativeScan, LinearRecurrence):
        exp = cls.implementations["parallel_prefix"]
        assert exp.reproducibility == "replay" and set(exp.targets) == {"cpu", "gpu"}


def test_chunk_size_must_be_positive():
    node = CumulativeScan("cs", axis=1)
    node.implementation, node.chunk_size = "parallel_prefix", 0
    sdfg = one_node_sdfg("test_pp_bad_chunk", node, {"_in": F}, {"_out": F}, 1, "k")
    with pytest.raises(ValueError, match="chunk_size must be a positive level count"):
        sdfg.expand_library_nodes()


def _emulated_block(node, layout: str, width: int, tmp_path) -> ctypes.CDLL:
    """The thread code of a one-kernel GPU schedule (``pp._in_block_passes``) as a C++ function
    ``run(<inputs>, _out, <totals>, N, K)`` that runs, block after block, every thread of the block
    through a pass before any thread starts the next one: what the barriers guarantee."""
    ins = {c: F for c in node.in_connectors}
    if "init" in ins:
        ins["init"] = ([N], dace.float64, False)
    sdfg = one_node_sdfg("emulated", node, ins, {"_out": F}, 1, layout)
    state = sdfg.start_state
    op = (cumulative_op if isinstance(node, CumulativeScan) else affine_op)(node, state)
    code = pp._Code(node, state, op, CHUNK, stream=False)
    head, passes = pp._in_block_passes(code, width)
    args = ", ".join([f"const double* p_{c}" for c in op.inputs + op.col_inputs] + ["double* p__out"]
                     + [f"double* p_tot{i}" for i in range(code.nc)] + ["int N", "int K"])
    per_block = pp.GPU_BLOCK // width
    threads = "".join(f"for (int _w = 0; _w < {pp.GPU_BLOCK}; ++_w) {{\n{head}{p}}}\n" for p in passes)
    tmp_path.mkdir(parents=True, exist_ok=True)
    src = tmp_path / "emulated.cpp"
    src.write_text(f'extern "C" void run({args}) {{\n'
                   f"for (int _b = 0; _b < (N + {per_block - 1}) / {per_block}; ++_b) {{\n{threads}}}\n}}\n")
    lib = tmp_path / "emulated.so"
    subprocess.run(["g++", "-O1", "-ffp-contract=off", "-shared", "-fPIC", str(src), "-o", str(lib)], check=True)
    return ctypes.CDLL(str(lib))


@pytest.mark.gpu
@pytest.mark.parametrize("width", [pp.GPU_WARP, pp.GPU_BLOCK], ids=["warp", "block"])
@pytest.mark.parametrize("kind", ["cumsum", "linrec"])
def test_in_block_thread_code_bitwise_on_cpu(kind, width, tmp_path):
    """The GPU warp- and block-per-column thread code, run on the CPU pass by pass, gives the chunked
    reference's bits: chunks shared round robin, padding warps past the last column, columns of more
    chunks than threads (kernels and launches: tests/test_gpu_codegen.py; on a GPU: benchmarks/gpu_check.py)."""
    rng = np.random.default_rng(7)
    for layout, rev, flag in itertools.product(("k", "cell"), (False, True), (False, True)):
        if kind == "cumsum":
            node = CumulativeScan("cs", axis=1, reverse=rev, exclusive=flag)
        else:
            node = LinearRecurrence("lr", axis=1, reverse=rev, has_init=flag, init_value=0.25)
        node.chunk_size = CHUNK
        run = _emulated_block(node, layout, width, tmp_path / f"{layout}{int(rev)}{int(flag)}")
        for ncol, nlev in [(0, 7), (1, 0), (1, 1), (3, 37), (9, 160), (17, 1400)]:
            x, a, y0 = rng.uniform(0.5, 1.5, (ncol, nlev)), rng.uniform(-1.05, 1.05, (ncol, nlev)), rng.random(ncol)
            if kind == "cumsum":
                vals = [x]
                want = reference.cumulative(x, "sum", 1, rev, flag, order="chunked", chunk=CHUNK)
            else:
                vals = [a, x] + ([y0] if flag else [])
                want = reference.linear_recurrence(a, x, 1, rev, y0 if flag else 0.25, order="chunked", chunk=CHUNK)
            arrs = [numpy_array(v, 1, layout) if v.ndim == 2 else v for v in vals]
            out = numpy_array(np.full((ncol, nlev), np.nan), 1, layout)
            tots = [np.full(max(ncol * -(-nlev // CHUNK), 1), np.nan) for _ in range(2 if kind == "linrec" else 1)]
            run.run(*[v.ctypes.data_as(ctypes.c_void_p) for v in arrs + [out] + tots], ncol, nlev)
            assert np.array_equal(out.view(np.uint64), want.view(np.uint64)), (layout, rev, flag, ncol, nlev)


# -- associative_scan ------------------------------------------------------------------------------

def _affine(p, q):
    return (q[0] * p[0], q[0] * p[1] + q[1])


@pytest.mark.parametrize("reverse", [False, True], ids=["forward", "backward"])
def test_associative_scan_python_reference(reverse):
    rng = np.random.default_rng(5)
    x, a, b = rng.random((3, 13)), rng.random((3, 13)), rng.random((3, 13))
    got = sdfg_scan.associative_scan(np.add, x, axis=1, reverse=reverse)
    assert np.array_equal(got, reference.cumulative(x, "sum", 1, reverse))
    # a pytree (tuple) of arrays: the affine pairs give the linear recurrence in the second slot
    A, B = sdfg_scan.associative_scan(_affine, (a, b), axis=-1, reverse=reverse)
    assert np.array_equal(B, reference.linear_recurrence(a, b, -1, reverse, init=0.0))
    chunked = reference.associative_scan(_affine, (a, b), reverse=reverse, order="chunked", chunk=4)
    assert np.array_equal(chunked[1], reference.linear_recurrence(a, b, -1, reverse, 0.0, order="chunked", chunk=4))
    assert sdfg_scan.associative_scan(np.add, x[:, :0]).shape == (3, 0)


def _program(fn):
    # explicit annotations: this module's postponed (string) annotations are unreadable to dace.program
    fn.__annotations__ = {"x": dace.float64[N, K], "y": dace.float64[N, K]}
    return dace.program(fn)


def test_associative_scan_lowers_to_cumulative_scan_in_a_program():
    def prog(x, y):
        y[:] = sdfg_scan.associative_scan(np.minimum, x, axis=1, reverse=True)

    sdfg = _program(prog).to_sdfg()
    (node,) = [n for n, _ in sdfg.all_nodes_recursive() if isinstance(n, CumulativeScan)]
    assert (node.op, node.reverse, node.axis) == ("min", True, 1)
    node.implementation, node.chunk_size = "parallel_prefix", 4
    x = np.random.default_rng(6).random((2, 19))
    y = np.zeros_like(x)
    sdfg(x=x, y=y, N=2, K=19)
    assert np.array_equal(y, sdfg_scan.associative_scan(np.minimum, x, axis=1, reverse=True))


def test_associative_scan_lowers_other_combines_to_associative_scan_in_a_program():
    """Other combine functions become an ``AssociativeScan`` (tests/test_associative_scan.py)."""
    def prog(x, y):
        y[:] = sdfg_scan.associative_scan(lambda p, q: p + 2 * q, x, axis=1)

    sdfg = _program(prog).to_sdfg()
    (node,) = [n for n, _ in sdfg.all_nodes_recursive() if isinstance(n, sdfg_scan.AssociativeScan)]
    assert list(node.combine) == ["a0 + 2 * b0"]
