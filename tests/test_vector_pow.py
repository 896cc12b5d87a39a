"""``sdfg_scan.expansions.vector_pow``: the replay class's vectorised ``pow`` against glibc's scalar ``pow``
(the IEEE-strict build's values) and against correctly rounded values computed with :mod:`decimal`.

One small C++ library per flag set (DaCe's default CPU flags and the IEEE-strict ones, each with the flags
a vectorised cell loop is built with), compiled once per module: an ``omp simd`` loop over the accurate
``pow`` and a scalar loop over glibc's."""

from __future__ import annotations

import ctypes
import math
import platform
import re
import shutil
import subprocess
from decimal import Decimal, getcontext
from pathlib import Path

import dace
import numpy as np
import pytest
from cxx_harness import build

from sdfg_scan.expansions import vector_pow
from sdfg_scan.expansions.environments import STRICT_HOST_FLAGS
from sdfg_scan.expansions.scan_blocked import LOOP_FLAGS

HARNESS = """
#include <cmath>
extern "C" void run_acc(const double* x, const double* y, double* r, long n) {
    #pragma omp simd
    for (long i = 0; i < n; ++i) r[i] = _sdfg_scan_pow_acc(x[i], y[i]);
}
__attribute__((optimize("no-tree-vectorize")))
extern "C" void run_glibc(const double* x, const double* y, double* r, long n) {
    for (long i = 0; i < n; ++i) r[i] = std::pow(x[i], y[i]);
}
"""

FLAG_SETS = {"dace-default": [], "ieee-strict": STRICT_HOST_FLAGS}


@pytest.fixture(scope="module")
def libs(tmp_path_factory):
    """flag set -> (library, GCC's vectorisation report)."""
    src = tmp_path_factory.mktemp("vector_pow") / "harness.cpp"
    src.write_text(vector_pow.source() + HARNESS)
    out = {}
    for name, extra in FLAG_SETS.items():
        out[name] = build(src, name, [*extra, *LOOP_FLAGS])
    return out


def _call(lib, fn: str, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    x, y = np.ascontiguousarray(x, dtype=np.float64), np.ascontiguousarray(y, dtype=np.float64)
    r = np.empty_like(x)
    ptr = ctypes.POINTER(ctypes.c_double)
    getattr(lib, fn)(x.ctypes.data_as(ptr), y.ctypes.data_as(ptr), r.ctypes.data_as(ptr), ctypes.c_long(x.size))
    return r


def _ulps(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Distance in units in the last place (doubles of the same sign; 0 where both are NaN)."""
    ia, ib = a.view(np.int64), b.view(np.int64)
    ord_a = np.where(ia < 0, np.int64(-(2 ** 63)) - ia, ia)
    ord_b = np.where(ib < 0, np.int64(-(2 ** 63)) - ib, ib)
    with np.errstate(over="ignore"):
        d = np.abs(ord_a - ord_b)   # exact in int64 (a float64 difference of values near 2^62 is not)
    d = np.where((ord_a < 0) != (ord_b < 0), np.int64(2 ** 62), d)   # opposite signs: far apart
    return np.where(np.isnan(a) & np.isnan(b), 0, d)


SPECIAL = [0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 2.0, -2.0, 3.0, -3.0, 0.25, 1e-310, -1e-310, 1e308, 1e-5,
           np.inf, -np.inf, np.nan, 2.0 ** 53, -(2.0 ** 53) - 2.0, 1.0 + 2 ** -52, 1.0 - 2 ** -53]


@pytest.mark.parametrize("flags", list(FLAG_SETS))
def test_special_cases_are_glibcs(libs, flags):
    """C's special cases (zeros of both signs, infinities, NaN, negative bases with integral, odd and
    non-integral exponents, subnormal bases, huge exponents): bitwise glibc's value, NaN for NaN."""
    lib, _ = libs[flags]
    x, y = (a.ravel() for a in np.meshgrid(SPECIAL, SPECIAL, indexing="ij"))
    ours, ref = _call(lib, "run_acc", x, y), _call(lib, "run_glibc", x, y)
    same = (ours.view(np.int64) == ref.view(np.int64)) | (np.isnan(ours) & np.isnan(ref))
    bad = [(a, b, o, r) for a, b, o, r, s in zip(x, y, ours, ref, same, strict=True) if not s]
    # a subnormal base or a result near the overflow threshold may round the other way (1 ulp)
    assert all(np.isfinite(r) and _ulps(np.array([o]), np.array([r]))[0] <= 1 for _, _, o, r in bad), bad[:5]
    assert not any(np.isnan(o) != np.isnan(r) or np.isinf(o) != np.isinf(r) for _, _, o, r in bad)
    assert len(bad) <= 8, bad


RANGES = {"small bases": (1e-12, 1e-2, -4.0, 4.0), "near 1": (0.999, 1.001, -50.0, 50.0),
          "wide": (1e-300, 1e300, -1.0, 1.0), "over/underflow": (1.0, 10.0, -330.0, 330.0),
          "microphysics": (1e-8, 1e3, -3.5, 3.0)}


@pytest.mark.parametrize("flags", list(FLAG_SETS))
@pytest.mark.parametrize("rng_name", list(RANGES))
def test_random_values_within_one_ulp_and_rarely_off_glibc(libs, flags, rng_name):
    """Random positive bases (log-uniform) and exponents: never more than 1 ulp from glibc's ``pow``, and
    a different value on fewer than 1 in 500 (the cases where glibc's own result is not the nearest
    double; 0.08 % here). libmvec's ``pow`` differs on about a quarter of such inputs."""
    lib, _ = libs[flags]
    lo, hi, ylo, yhi = RANGES[rng_name]
    rng = np.random.default_rng(sum(map(ord, rng_name)))
    x = np.exp(rng.uniform(np.log(lo), np.log(hi), 200_000))
    y = rng.uniform(ylo, yhi, x.size)
    ours, ref = _call(lib, "run_acc", x, y), _call(lib, "run_glibc", x, y)
    d = _ulps(ours, ref)
    assert d.max() <= 1, (x[d.argmax()], y[d.argmax()])
    assert np.mean(d > 0) < 2e-3
    # negative bases with integral exponents: the sign of an odd power
    xi = -x[:1000]
    yi = np.round(y[:1000])
    ours, ref = _call(lib, "run_acc", xi, yi), _call(lib, "run_glibc", xi, yi)
    assert _ulps(ours, ref).max() <= 1
    assert np.array_equal(np.signbit(ours), np.signbit(ref))


def test_correctly_rounded_on_random_inputs(libs):
    """Against ``decimal`` at 40 digits: the nearest double on every one of 3000 random inputs (the
    error before the final rounding is about 2^-70, so a wrong rounding needs the exact value within
    2^-17 ulp of a midpoint)."""
    lib, _ = libs["ieee-strict"]
    rng = np.random.default_rng(7)
    x = np.exp(rng.uniform(np.log(1e-10), np.log(1e10), 3000))
    y = rng.uniform(-4.0, 4.0, x.size)
    ours = _call(lib, "run_acc", x, y)
    getcontext().prec = 40
    exact = np.array([float(Decimal(float(a)) ** Decimal(float(b))) for a, b in zip(x, y, strict=True)])
    assert np.array_equal(ours, exact)


def _vector_isa() -> bool:
    if platform.machine() not in ("x86_64", "AMD64"):
        return False
    cpu = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    return bool(re.search(r"\bavx2\b", cpu)) and "-march=native" in dace.Config.get("compiler", "cpu", "args")


@pytest.mark.parametrize("flags", list(FLAG_SETS))
def test_the_loop_is_vectorised(libs, flags):
    """GCC vectorises the ``omp simd`` loop that calls it (table loads as gathers; only unsigned 64-bit
    integer arithmetic, which AVX2 has too), where the host has AVX2 or AVX-512."""
    if not _vector_isa():
        pytest.skip("no AVX2 (or not built with -march=native)")
    _, report = libs[flags]
    line = HARNESS.splitlines().index("    for (long i = 0; i < n; ++i) r[i] = _sdfg_scan_pow_acc(x[i], y[i]);")
    first = vector_pow.source().count("\n") + line + 1
    assert re.search(rf"harness\.cpp:{first}:\d+: optimized: loop vectorized", report), report


def test_same_values_under_both_flag_sets(libs):
    """The products and polynomials are explicit FMAs and the error-free sums need no reassociation: DaCe's
    default flags (FMA contraction allowed) and the IEEE-strict ones give bitwise the same values."""
    rng = np.random.default_rng(11)
    x = np.concatenate([np.exp(rng.uniform(np.log(1e-300), np.log(1e300), 50_000)),
                        rng.uniform(0.99, 1.01, 20_000), -np.exp(rng.uniform(-5.0, 5.0, 5000))])
    y = np.concatenate([rng.uniform(-3.0, 3.0, 70_000), np.round(rng.uniform(-9.0, 9.0, 5000))])
    a, b = (_call(libs[f][0], "run_acc", x, y) for f in FLAG_SETS)
    assert np.array_equal(a.view(np.int64), b.view(np.int64))


def test_packed_table_decodes_to_the_tables():
    """One 64-bit entry holds ``1/c`` (8 significant bits) and ``-log(c)``'s high part (a multiple of
    2^-42): the C++'s decoding, done here in Python, gives both back exactly."""
    import struct

    t = vector_pow.tables()
    for u, ic, hi in zip(t["packed"], t["invc"], t["logc_hi"], strict=True):
        dec_ic = struct.unpack("<d", struct.pack("<Q", 0x3FE0000000000000 | ((u >> 42) << 45)))[0]
        lcq = struct.unpack("<d", struct.pack("<Q", (u & ((1 << 42) - 1)) | 0x4330000000000000))[0]
        assert dec_ic == ic
        assert (lcq - (2.0 ** 52 + 2.0 ** 41)) * 2.0 ** -42 == hi
        assert abs(ic * 128 - round(ic * 128)) == 0 or abs(ic * 256 - round(ic * 256)) == 0


# -- the checked form: what the exact class's vectorised loops use ---------------------------------------

CHECKED_HARNESS = """
#include <cmath>
extern "C" { long exp_calls = 0; }   // glibc exp calls the lane form made (run_xexp)
namespace dace { namespace math {   // DaCe's functions as the program's build has them (errno-free entry points aside)
static inline double pow(double a, double b) { return std::pow(a, b); }
static inline double exp(double a) { ++exp_calls; return std::exp(a); }
static inline double log(double a) { return std::log(a); }
} }
""" + "{lane_math}" + """
extern "C" void run_xpow(const double* x, const double* y, double* r, long n) {
    #pragma omp simd
    for (long i = 0; i < n; ++i) r[i] = _sdfg_scan_xpow(true, x[i], y[i]);
}
extern "C" void run_xexp(const double* a, const double* x, double* r, long n) {   // -1 where a lane is idle
    #pragma omp simd
    for (long i = 0; i < n; ++i) { const bool on = a[i] != 0.0; const double e = _sdfg_scan_xexp(on, x[i]); r[i] = on ? e : -1.0; }
}
extern "C" void run_safe(const double* x, const double* y, double* r, long n) {
    #pragma omp simd
    for (long i = 0; i < n; ++i) { double s; r[i] = _sdfg_scan_pow_core<true>(x[i], y[i], s); r[i] = s != 0.0 ? r[i] : 0.0; }
}
__attribute__((optimize("no-tree-vectorize")))
extern "C" void run_glibc(const double* x, const double* y, double* r, long n) {
    for (long i = 0; i < n; ++i) r[i] = std::pow(x[i], y[i]);
}
"""


@pytest.fixture(scope="module")
def checked(tmp_path_factory):
    """(library, GCC's vectorisation report, first line of the harness): the exact lane form of ``pow``
    (``scan_blocked.SCALAR_LANE_MATH``) under the IEEE-strict flags and those of ``ScalarLaneLoops``."""
    from sdfg_scan.expansions.scan_blocked import SCALAR_LANE_MATH, ScalarLaneLoops

    src = tmp_path_factory.mktemp("checked_pow") / "checked.cpp"
    text = CHECKED_HARNESS.replace("{lane_math}", SCALAR_LANE_MATH)
    src.write_text(text)
    flags = " ".join(ScalarLaneLoops.cmake_compile_flags + [" ".join(STRICT_HOST_FLAGS)]).split()
    flags = [f for f in flags if not f.startswith("-DSDFG_SCAN_LIBM_FINITE")]   # the stub above is DaCe's math
    return (*build(src, "checked", [*STRICT_HOST_FLAGS, *flags]), text)


@pytest.mark.parametrize("rng_name", list(RANGES))
def test_the_exact_lane_form_is_bitwise_glibc(checked, rng_name):
    """``_sdfg_scan_xpow`` (the exact class's ``pow`` in a vectorised loop: the checked accurate value where
    it is provably glibc's, glibc's call elsewhere) equals glibc's ``pow`` bitwise on 200 000 random
    inputs per range, negative bases with integral exponents and C's special cases included."""
    lib = checked[0]
    lo, hi, ylo, yhi = RANGES[rng_name]
    rng = np.random.default_rng(100 + sum(map(ord, rng_name)))
    x = np.exp(rng.uniform(np.log(lo), np.log(hi), 200_000))
    y = rng.uniform(ylo, yhi, x.size)
    xs, ys = (a.ravel() for a in np.meshgrid(SPECIAL, SPECIAL, indexing="ij"))
    x = np.concatenate([x, -x[:2000], xs])
    y = np.concatenate([y, np.round(y[:2000]), ys])
    ours, ref = _call(lib, "run_xpow", x, y), _call(lib, "run_glibc", x, y)
    assert np.array_equal(ours.view(np.int64), ref.view(np.int64)), np.flatnonzero(ours.view(np.int64) != ref.view(np.int64))[:5]


def test_idle_vectors_call_nothing_and_active_lanes_call_glibc(checked):
    """The exact lane calls' vector variants (written in ``scan_blocked._lane_calls`` on x86-64 with GCC, so that a
    vector with no active lane returns at once): glibc's ``exp`` once per active lane and nowhere else, its
    values bitwise there, whole vectors idle and lanes active in any pattern; the loop calls those variants."""
    lib, report, text = checked
    n = 64 * 40
    rng = np.random.default_rng(8)
    x = rng.uniform(-30, 30, n)
    a = np.zeros(n)
    a[:64] = 1.0                                    # a whole block active
    a[128:2048] = rng.uniform(0, 1, 1920) < 0.05    # scattered lanes (most vectors idle)
    a[2048 + 3] = 1.0                               # one lane
    calls = ctypes.c_long.in_dll(lib, "exp_calls")
    calls.value = 0
    r = _call(lib, "run_xexp", a, x)
    on = a != 0.0
    assert calls.value == on.sum()
    glibc = np.array([math.exp(v) for v in x[on]])   # Python's math.exp is libm's (NumPy's exp is its own)
    assert np.array_equal(r[on].view(np.int64), glibc.view(np.int64)) and np.all(r[~on] == -1.0)
    if _vector_isa() and shutil.which("nm") and platform.machine() == "x86_64":
        syms = subprocess.run(["nm", lib._name], capture_output=True, text=True, check=True).stdout
        assert re.search(r"_ZGV[bcde]N\d+vv__sdfg_scan_xexp1_s", syms), "the hand-written variants are not built"
        line = next(i for i, t in enumerate(text.splitlines(), 1) if "_sdfg_scan_xexp(on, x[i])" in t)
        assert re.search(rf"checked\.cpp:{line}:\d+: optimized: loop vectorized", report), report


def test_most_lanes_skip_glibc_and_safe_ones_are_far_from_a_midpoint(checked):
    """On microphysics-like inputs more than 90 % of the lanes are safe (no glibc call); on a sample of safe
    ones, ``decimal`` at 50 digits puts the exact value farther than ``CHECK_ULPS`` from a midpoint between
    two doubles, and the value is the nearest double (the check's own tail arithmetic, independently of
    glibc)."""
    lib = checked[0]
    rng = np.random.default_rng(5)
    lo, hi, ylo, yhi = RANGES["microphysics"]
    x = np.exp(rng.uniform(np.log(lo), np.log(hi), 100_000))
    y = rng.uniform(ylo, yhi, x.size)
    safe = _call(lib, "run_safe", x, y)
    ok = safe != 0.0
    assert ok.mean() > 0.9, ok.mean()
    getcontext().prec = 50
    for i in np.flatnonzero(ok)[:1500]:
        v = Decimal(float(x[i])) ** Decimal(float(y[i]))
        d = float(safe[i])
        toward = np.nextafter(d, np.inf if v > Decimal(d) else -np.inf)   # the double on the exact value's side
        dist = abs(v - Decimal(d)) / abs(Decimal(float(toward)) - Decimal(d))
        assert dist < Decimal(0.5) - Decimal(vector_pow.CHECK_ULPS), (x[i], y[i], dist)


def test_the_exact_lane_loop_is_vectorised(checked):
    """GCC vectorises the ``omp simd`` loop over ``_sdfg_scan_xpow`` under the exact flags (the checked value
    inlined, the lane loop of glibc calls as a simd clone), where the host has AVX2 or AVX-512."""
    if not _vector_isa():
        pytest.skip("no AVX2 (or not built with -march=native)")
    _, report, text = checked
    line = text.splitlines().index("    for (long i = 0; i < n; ++i) r[i] = _sdfg_scan_xpow(true, x[i], y[i]);") + 1
    assert re.search(rf"checked\.cpp:{line}:\d+: optimized: loop vectorized", report), report


def test_importing_the_package_does_not_build_the_tables():
    """The accurate ``pow``'s tables (computed with :mod:`decimal`) are built when a kernel first asks for its
    code, not when ``sdfg_scan`` and its transformations are imported; the lazy module constants give the
    same text as the functions."""
    import sys

    probe = ("import sdfg_scan, sdfg_scan.transformations.vectorize_cell_map\n"
             "from sdfg_scan.expansions import scan_blocked, vector_pow\n"
             "assert vector_pow.source.cache_info().currsize == 0, 'built at import'\n"
             "assert scan_blocked.SCALAR_LANE_MATH == scan_blocked.scalar_lane_math()\n"
             "assert scan_blocked.ACCURATE_POW_MATH == scan_blocked.accurate_pow_math()\n"
             "assert vector_pow.source.cache_info().currsize == 1\n")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
