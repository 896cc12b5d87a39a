"""``blocked_simd``'s predicated vector math (``scan_blocked.PREDICATED_MATH``, replay): the ``exp``/``log``/``pow``
of an if-converted branch get the branch's lane predicate, and a vector none of whose lanes takes the branch
makes no libmvec call. The values are those of the calls without predicates (:data:`VECTOR_MATH`): bitwise,
lane by lane and in a whole program.

A small C++ harness (compiled once per module with the flags of ``VectorMath``) and a DaCe column loop
with a branch that calls all three functions, expanded with ``blocked_simd`` with and without predicates."""


import ctypes
import math
import platform
import re
import shutil
import subprocess

import dace
import numpy as np
import pytest
from cxx_harness import build

import sdfg_scan
from sdfg_scan.expansions import scan_blocked
from sdfg_scan.nodes.scan import Scan

HARNESS = """
#include <cfenv>
#include <cmath>
extern "C" void clear_flags() { std::feclearexcept(FE_ALL_EXCEPT); }
extern "C" int special_flags() { return std::fetestexcept(FE_DIVBYZERO | FE_INVALID | FE_OVERFLOW | FE_UNDERFLOW); }
extern "C" { long vector_calls = 0; }   // libmvec calls the written variants made
#define SDFG_SCAN_PREDICATED_CALL(lanes) (++vector_calls)
namespace dace { namespace math {
static inline double pow(double a, double b) { return std::pow(a, b); }
static inline double exp(double a) { return std::exp(a); }
static inline double log(double a) { return std::log(a); }
} }
{vector_math}
// one loop per call and form (pred: the branch's lanes given; plain: VECTOR_MATH's call); -1 where a lane is idle
#define LOOP(name, call) \\
extern "C" void name(const double* a, const double* x, const double* y, double* r, long n) { \\
    _Pragma("omp simd") \\
    for (long i = 0; i < n; ++i) { const bool on = a[i] != 0.0; const double v = call; r[i] = on ? v : -1.0; } }
LOOP(pred_exp, _sdfg_scan_pexp(on, x[i]))
LOOP(plain_exp, _sdfg_scan_vexp(x[i]))
LOOP(pred_log, _sdfg_scan_plog(on, x[i]))
LOOP(plain_log, _sdfg_scan_vlog(x[i]))
LOOP(pred_powc, _sdfg_scan_ppow(on, x[i], 0.37))   // a constant exponent: exp(y log x)
LOOP(plain_powc, _sdfg_scan_vpow(x[i], 0.37))
LOOP(pred_powb, _sdfg_scan_ppow(on, 10.0, y[i]))   // a constant positive base: exp(y log 10)
LOOP(plain_powb, _sdfg_scan_vpow(10.0, y[i]))
LOOP(pred_pow, _sdfg_scan_ppow(on, x[i], y[i]))
LOOP(plain_pow, _sdfg_scan_vpow(x[i], y[i]))
LOOP(pred_pow2, _sdfg_scan_ppow(on, x[i], 2.0))   // constant integral exponents: GCC's folding kept
LOOP(plain_pow2, _sdfg_scan_vpow(x[i], 2.0))
LOOP(pred_pow3, _sdfg_scan_ppow(on, x[i], -3.0))
LOOP(plain_pow3, _sdfg_scan_vpow(x[i], -3.0))
"""


def _x86_gcc() -> bool:
    return platform.machine() in ("x86_64", "AMD64")


@pytest.fixture(scope="module")
def harness(tmp_path_factory):
    """(library, GCC's vectorisation report, the harness's text)."""
    src = tmp_path_factory.mktemp("predicated") / "predicated.cpp"
    text = HARNESS.replace("{vector_math}", scan_blocked.PREDICATED_MATH)
    src.write_text(text)
    flags = [f for f in " ".join(scan_blocked.VectorMath.cmake_compile_flags).split()
             if not f.startswith("-DSDFG_SCAN_LIBM_FINITE")]
    return (*build(src, "predicated", flags, ("-lmvec",)), text)


def _run(lib, fn: str, a, x, y) -> np.ndarray:
    a, x, y = (np.ascontiguousarray(v, dtype=np.float64) for v in (a, x, y))
    r = np.empty_like(x)
    p = ctypes.POINTER(ctypes.c_double)
    getattr(lib, fn)(a.ctypes.data_as(p), x.ctypes.data_as(p), y.ctypes.data_as(p),
                     r.ctypes.data_as(p), ctypes.c_long(x.size))
    return r


@pytest.mark.parametrize("f", ["exp", "log", "powc", "powb", "pow", "pow2", "pow3"])
def test_active_lanes_get_the_unpredicated_values_and_idle_vectors_call_nothing(harness, f):
    """Each predicated call against the unpredicated one in the same loop: bitwise the same values in the
    active lanes (special arguments included) with no lane, every lane and scattered lanes active; no libmvec
    call where no lane is active, fewer than for every lane where few are; the loop vectorised."""
    lib, report, text = harness
    n = 64 * 40
    rng = np.random.default_rng(11 + len(f))
    x = rng.uniform(-30, 30, n) if f == "exp" else np.exp(rng.uniform(-20, 5, n))
    x[::97] = [0.0, -1.0, np.inf, np.nan, 1.0] * (len(x[::97]) // 5) + [0.0] * (len(x[::97]) % 5)   # special cases
    y = rng.uniform(-3, 3, n)
    y[5::97] = [0.0, np.inf, -np.inf, np.nan, -0.0] * (len(y[5::97]) // 5) + [0.0] * (len(y[5::97]) % 5)
    patterns = {"none": np.zeros(n), "all": np.ones(n)}
    scattered = np.zeros(n)
    scattered[:64] = 1.0                                   # one whole block
    scattered[128:2048] = rng.uniform(0, 1, 1920) < 0.05   # scattered lanes
    scattered[2048 + 3] = 1.0                              # one lane
    patterns["scattered"] = scattered
    calls = ctypes.c_long.in_dll(lib, "vector_calls")
    counts = {}
    for name, a in patterns.items():
        calls.value = 0
        got = _run(lib, f"pred_{f}", a, x, y)
        counts[name] = calls.value
        want = _run(lib, f"plain_{f}", a, x, y)
        assert np.array_equal(got.view(np.int64), want.view(np.int64)), name   # NaN payloads too
    if _x86_gcc():
        assert counts["none"] == 0, counts   # no lane takes the branch: no libmvec call at all
        if f not in ("pow2", "pow3"):   # those keep the unpredicated call (x * x for 2.0)
            assert 0 < counts["scattered"] < counts["all"], counts
        line = next(i for i, t in enumerate(text.splitlines(), 1) if t.startswith(f"LOOP(pred_{f},"))
        assert re.search(rf"predicated\.cpp:{line}:\d+: optimized: loop vectorized", report), report


@pytest.mark.parametrize("f, idle", [("exp", -1000.0), ("log", 0.0), ("log", -1.0), ("pow", -1.0)])
def test_idle_lanes_do_not_send_libmvec_to_its_special_path(harness, f, idle):
    """A lane that does not take the branch holds a special argument (``log(0)`` under ``q > qmin``): libmvec's
    special-case path would call the scalar function lane by lane, 4 to 7 times the vector call, and raise
    that call's floating-point exceptions. The predicated call gives those lanes quiet arguments
    (``scan_blocked._QUIET_ARGS``): no exception, the active lanes' values unchanged. The unpredicated loop
    (every lane's own argument) raises them: the check sees the path."""
    if not _x86_gcc():
        pytest.skip("the variants are written on x86-64 with GCC")
    lib, _, _ = harness
    n = 64 * 8
    rng = np.random.default_rng(5)
    a = (rng.uniform(0, 1, n) < 0.5).astype(np.float64)
    a[::8] = 1.0   # every vector of 8 lanes has an active lane: each makes its libmvec call
    x = np.where(a != 0.0, rng.uniform(0.5, 2.0, n), idle)
    y = np.full(n, 0.37)
    raised = {}
    for form in ("pred", "plain"):
        lib.clear_flags()
        got = _run(lib, f"{form}_{f}", a, x, y)
        raised[form] = lib.special_flags()
        ref = {"exp": np.exp, "log": np.log, "pow": lambda v: v ** 0.37}[f](x[a != 0.0])
        np.testing.assert_allclose(got[a != 0.0], ref, rtol=1e-14)
    assert raised["pred"] == 0, raised
    assert raised["plain"] != 0, raised


def test_the_written_variants_are_built(harness):
    if not (_x86_gcc() and shutil.which("nm")):
        pytest.skip("the variants are written on x86-64 with GCC")
    lib = harness[0]
    syms = subprocess.run(["nm", lib._name], capture_output=True, text=True, check=True).stdout
    for f, v in (("exp", "vv"), ("log", "vv"), ("pow", "vvv")):
        for isa in "bcde":
            assert re.search(rf"_ZGV{isa}N\d+{v}__sdfg_scan_p{f}1_s", syms), (f, isa)


K, N = dace.symbol("K"), dace.symbol("N")


@dace.program
def _gated(x: dace.float64[K, N], a0: dace.float64[N], oa: dace.float64[K, N]):
    for i in dace.map[0:N]:
        a = a0[i]
        for k in range(K):
            t = x[k, i] * 1.0
            c = t > 0.9
            if c:
                a = a + math.exp(t) + math.log(t) + t ** 0.37
            else:
                a = a * 0.5
            oa[k, i] = a


def _build(predicated: bool, monkeypatch):
    from test_blocked_register_conditions import _entry_copies

    monkeypatch.setattr(scan_blocked, "PREDICATED", predicated)
    sdfg = _gated.to_sdfg(simplify=True)
    sdfg.name = f"gated_math_{'pred' if predicated else 'plain'}"
    _entry_copies(sdfg)
    sdfg_scan.optimize(sdfg, reproducibility="replay")
    (node,) = [n for n, _ in sdfg.all_nodes_recursive() if isinstance(n, Scan)]
    node.implementation = "blocked_simd"
    return sdfg.compile()


def test_a_program_is_bitwise_the_same_with_and_without_predicates(monkeypatch):
    """A column loop whose branch (taken by about a tenth of the points) calls ``exp``, ``log`` and ``pow``:
    ``blocked_simd`` with predicated calls gives bitwise the values without them, close to NumPy's, and its
    cell loop calls the predicated variants."""
    rng = np.random.default_rng(3)
    nk, nc = 9, 700
    x = rng.random((nk, nc))
    out = {}
    for predicated in (True, False):
        csdfg = _build(predicated, monkeypatch)
        oa = np.zeros((nk, nc))
        csdfg(x=x.copy(), a0=np.zeros(nc), oa=oa, K=nk, N=nc)
        out[predicated] = (oa, csdfg)
    assert np.array_equal(out[True][0].view(np.int64), out[False][0].view(np.int64))
    want = np.zeros(nc)
    for k in range(nk):
        t = x[k]
        want = np.where(t > 0.9, want + np.exp(t) + np.log(t) + t ** 0.37, want * 0.5)
        np.testing.assert_allclose(out[True][0][k], want, rtol=1e-13, atol=0)
    if _x86_gcc() and shutil.which("objdump"):
        from disassembly import callers

        lib = out[True][1]._lib._library_filename
        assert callers(lib, r"_ZGV[bcde]N\d+vv__sdfg_scan_pexp1_s"), "the cell loop does not call the variants"
