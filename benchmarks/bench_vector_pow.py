#!/usr/bin/env python
"""What one ``pow`` costs in a vectorised cell loop: the accurate ``pow`` of
``sdfg_scan.expansions.vector_pow`` (replay's ``vectorize_maps``) against glibc's scalar ``pow`` (what
``exact`` calls), libmvec's vector ``pow`` and ``exp(y log x)`` (the fast form), and how often each differs
from glibc's value.

One C++ file built with DaCe's default CPU flags plus the flags of a vectorised cell loop
(``LOOP_FLAGS``), as a program's maps are; each loop runs over ``--n`` values (in cache) ``--reps``
times, best of 5, timed in C++. Two loop shapes: one ``pow`` per iteration (a dependency chain the
out-of-order window overlaps only in part) and four independent ``pow`` per iteration (as in a
microphysics map, where many independent ``pow`` share one loop).

Usage: ``python benchmarks/bench_vector_pow.py [--n 4096] [--reps 2000]``
"""

from __future__ import annotations

import argparse
import ctypes
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import dace
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sdfg_scan.expansions import vector_pow  # noqa: E402
from sdfg_scan.expansions.scan_blocked import LOOP_FLAGS  # noqa: E402

HARNESS = """
#include <chrono>
#include <cmath>
#pragma omp declare simd notinbranch
extern "C" double pow(double, double) noexcept;
#pragma omp declare simd notinbranch
extern "C" double exp(double) noexcept;
#pragma omp declare simd notinbranch
extern "C" double log(double) noexcept;
static inline double fast_pow(double x, double y) { return exp(y * log(x)); }
__attribute__((optimize("no-tree-vectorize"))) static double glibc_pow(double x, double y) { return std::pow(x, y); }
#define LOOPS(NAME, F, SIMD)                                                                                 \\
extern "C" double NAME##_1(const double* x, const double* y, const double* x2, double* r, long n, long reps) {\\
    double best = 1e30;                                                                                       \\
    for (int s = 0; s < 5; ++s) {                                                                            \\
        auto t0 = std::chrono::steady_clock::now();                                                           \\
        for (long k = 0; k < reps; ++k) {                                                                     \\
            SIMD for (long i = 0; i < n; ++i) r[i] = F(x[i], y[i]);                                           \\
            asm volatile("" ::: "memory"); }                                                                  \\
        double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();              \\
        best = t < best ? t : best; }                                                                         \\
    return best / (double(n) * reps); }                                                                       \\
extern "C" double NAME##_4(const double* x, const double* y, const double* x2, double* r, long n, long reps) {\\
    double best = 1e30;                                                                                       \\
    for (int s = 0; s < 5; ++s) {                                                                            \\
        auto t0 = std::chrono::steady_clock::now();                                                           \\
        for (long k = 0; k < reps; ++k) {                                                                     \\
            SIMD for (long i = 0; i < n; ++i) r[i] = F(x[i], y[i]) + F(x2[i], 0.16666666666666666)             \\
                                                   + F(1.5 * x2[i], 0.7 * y[i]) + F(x[i] + 1e-3, 1.5 - y[i]);  \\
            asm volatile("" ::: "memory"); }                                                                  \\
        double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();              \\
        best = t < best ? t : best; }                                                                         \\
    return best / (4.0 * double(n) * reps); }                                                                 \\
extern "C" void NAME##_values(const double* x, const double* y, double* r, long n) {                         \\
    SIMD for (long i = 0; i < n; ++i) r[i] = F(x[i], y[i]); }
#define SIMD _Pragma("omp simd")
LOOPS(accurate, _sdfg_scan_pow_acc, SIMD)
LOOPS(libmvec, pow, SIMD)
LOOPS(fast, fast_pow, SIMD)
LOOPS(glibc, glibc_pow, )
"""

KINDS = {"accurate": "vector_pow (replay's maps)", "glibc": "glibc scalar pow (exact)",
         "libmvec": "libmvec vector pow", "fast": "exp(y log x), libmvec"}


def build(folder: Path) -> ctypes.CDLL:
    cxx = shutil.which("g++") or shutil.which("c++")
    if cxx is None:
        raise SystemExit("bench_vector_pow: no C++ compiler on PATH")
    src = folder / "bench_pow.cpp"
    src.write_text(vector_pow.source() + HARNESS)
    so = folder / "bench_pow.so"
    flags = dace.Config.get("compiler", "cpu", "args").split() + ["-O3", "-std=c++17", "-fPIC", "-shared"]
    subprocess.run([cxx, *flags, *LOOP_FLAGS, str(src), "-o", str(so), "-lmvec"], check=True)
    return ctypes.CDLL(str(so))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=4096)
    ap.add_argument("--reps", type=int, default=2000)
    a = ap.parse_args(argv)
    lib = build(Path(tempfile.mkdtemp(prefix="sdfg_scan_bench_pow_")))
    rng = np.random.default_rng(1)
    x = np.exp(rng.uniform(np.log(1e-8), np.log(1e2), a.n))   # microphysics-like bases and exponents
    x2 = np.exp(rng.uniform(np.log(1e-8), np.log(1e2), a.n))
    y = rng.uniform(-2.0, 3.0, a.n)
    r = np.empty_like(x)
    ptr = ctypes.POINTER(ctypes.c_double)
    args = [v.ctypes.data_as(ptr) for v in (x, y, x2, r)]
    glibc = np.empty_like(x)
    lib.glibc_values(args[0], args[1], glibc.ctypes.data_as(ptr), ctypes.c_long(a.n))
    print(f"pow(x, y) in an omp simd cell loop, {a.n} values in cache, best of 5 x {a.reps} passes; "
          f"x log-uniform in [1e-8, 1e2], y uniform in [-2, 3]")
    print(f"{'':34} {'1 pow/iter':>12} {'4 pow/iter':>12} {'values != glibc':>16}")
    for kind, label in KINDS.items():
        for fn in (f"{kind}_1", f"{kind}_4"):
            getattr(lib, fn).restype = ctypes.c_double
        t1 = getattr(lib, f"{kind}_1")(*args, ctypes.c_long(a.n), ctypes.c_long(a.reps)) * 1e9
        t4 = getattr(lib, f"{kind}_4")(*args, ctypes.c_long(a.n), ctypes.c_long(a.reps)) * 1e9
        getattr(lib, f"{kind}_values")(args[0], args[1], args[3], ctypes.c_long(a.n))
        differ = 100.0 * np.mean(r.view(np.int64) != glibc.view(np.int64))
        print(f"{label:34} {t1:9.2f} ns {t4:9.2f} ns {differ:15.3f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
