"""An accurate ``pow`` for vectorised cell loops (``VectorizeCellMap(accurate_pow=True)``, replay), written
as plain C++ arithmetic.

Why not glibc's vector ``pow`` (libmvec) or ``exp(y * log(x))``: both differ from glibc's scalar ``pow`` in
the last bits of a large share of the results (``exp(y log x)`` by about ``|y log x|`` units in the last
place). icon4py's microphysics subtract nearly equal tendencies, so those bits become relative errors
far above 1e-6 wherever a species is used up: with either, graupel's ``q_out_1`` had 1.8 to 2.6 % of its
entries beyond rtol 1e-6 of the scalar build (README: "An accurate vector pow"). glibc's scalar ``pow`` rounds
correctly in all but about 1 in 1000 cases (its error bound is 0.52 ulp); this one is accurate to about
2^-70 before its final rounding (the nearest double on every one of the tests' checks against
:mod:`decimal`), so the two agree on all but those, and differ there by 1 ulp: graupel's vectorised maps
then keep the scalar build's values where the program cancels (``q_out_1``: 0.005 % beyond rtol 1e-6).

How (textbook double-double arithmetic, tables computed here with :mod:`decimal`):

- ``log|x|`` as ``hi + lo``: ``x = 2^k z``, ``z`` in [0.703125, 1.40625); the top 7 bits after that offset
  pick ``1/c`` and ``-log(1/c)`` (``hi + lo``) from a 128-entry table; ``r = z/c - 1`` exactly (an FMA
  splits the product), ``log1p(r)`` by its series to ``r^12`` (``|r| <= 2^-7``), the two leading terms in
  double-double; the two intervals next to 1 use ``c = 1``, so results near ``x = 1`` keep their relative
  accuracy.
- ``y log|x|`` as ``zh + zl`` (an FMA for the product's error), then ``exp(zh + zl)``: ``zh = (k + j/128)
  ln 2 + r``, ``|r| <= ln2/256``, ``2^(j/128)`` as ``hi + lo`` from a table, ``expm1(r)`` by its series to
  ``r^6``, the leading terms in double-double; the scale ``2^(k/128)`` is applied in two steps, so
  results that overflow become ``inf`` and subnormal results are rounded from the 53-bit value.
- C's special cases select around that arithmetic without a branch: ``y = 0`` or ``x = 1`` give 1; a NaN
  gives NaN; ``x = +-0`` and ``+-inf``, a negative ``x`` with an integral ``y`` (odd: negative result) or
  with another finite ``y`` (NaN), ``y = +-inf``.

Everything is ``inline`` arithmetic, selects and table loads, so GCC vectorises a cell loop that calls it
(gathers for the tables) under the flags of :data:`~sdfg_scan.expansions.scan_blocked.LOOP_FLAGS`: about
7.5 ns per value on this project's AVX-512 machine, against about 4 ns for libmvec's ``pow`` and 1 ns for
``exp(y log x)`` (``tests/test_vector_pow.py`` checks the values; README: "An accurate vector pow", the cost). It
needs no reassociation: DaCe's default flags and the IEEE-strict ones both keep the error-free sums; an
FMA contraction of the other products changes bits only far below the final rounding. Deterministic for
a given machine and build (``replay``): not bitwise glibc's ``pow``, which the ``exact`` class calls.
``__builtin_fma`` is one instruction where the CPU has FMA (x86-64 since Haswell, every AArch64); without
it GCC calls libm's ``fma``, the same values, slowly.
"""

from __future__ import annotations

import math
import struct
from decimal import Decimal, getcontext
from fractions import Fraction
from functools import cache

OFFSET = 0x3FE6800000000000
"""Bits of 0.703125: ``x``'s bits minus this pick the exponent ``k`` and the table index."""
LOG_BITS = 7
EXP_BITS = 7


def _double(bits: int) -> float:
    return struct.unpack("<d", struct.pack("<Q", bits))[0]


def _hex(v: float) -> str:
    return float.hex(v)


def _split(v: Decimal) -> tuple[float, float]:
    """``v`` as ``hi + lo``: two doubles, ``hi`` the nearest to ``v``."""
    hi = float(v)
    return hi, float(v - Decimal(hi))


def _truncated(v: Decimal, bits: int) -> float:
    """``v`` (as a double) with its significand cut to ``bits`` bits (products with small integers stay
    exact; the constant's low part is taken from ``v`` itself)."""
    m, e = math.frexp(float(v))
    return math.ldexp(math.floor(math.ldexp(m, bits)), e - bits)


@cache
def tables() -> dict:
    """The tables and constants (computed once, 40 significant digits)."""
    getcontext().prec = 40
    n = 1 << LOG_BITS
    invc, logc_hi, logc_lo = [], [], []
    one = 0x3FF0000000000000
    rmax = Fraction(0)
    for i in range(n):
        lo_bits = OFFSET + (i << (52 - LOG_BITS))
        hi_bits = OFFSET + ((i + 1) << (52 - LOG_BITS))
        zlo, zhi = Fraction(_double(lo_bits)), Fraction(_double(hi_bits))
        if lo_bits in (one - (1 << (52 - LOG_BITS)), one):   # the two intervals next to 1: c = 1
            ic = 1.0
        else:
            ic = float(2 / (zlo + zhi))
        rmax = max(rmax, abs(zlo * Fraction(ic) - 1), abs(zhi * Fraction(ic) - 1))
        invc.append(ic)
        lc = -Decimal(ic).ln()
        h, lo = _split(lc)
        logc_hi.append(h)
        logc_lo.append(lo)
    assert rmax <= Fraction(1, 128), rmax
    ln2 = Decimal(2).ln()
    m = 1 << EXP_BITS
    t_hi, t_lo = [], []
    for j in range(m):
        h, lo = _split((ln2 * j / m).exp())
        t_hi.append(h)
        t_lo.append(lo)
    ln2_hi = _truncated(ln2, 42)     # k ln2_hi exact for |k| < 2^11
    ln2n_hi = _truncated(ln2 / m, 35)   # kd ln2/N exact for |kd| < 2^18
    return {"invc": invc, "logc_hi": logc_hi, "logc_lo": logc_lo, "t_hi": t_hi, "t_lo": t_lo,
            "ln2_hi": ln2_hi, "ln2_lo": float(ln2 - Decimal(ln2_hi)),
            "inv_ln2n": float(m / ln2), "ln2n_hi": ln2n_hi, "ln2n_lo": float(ln2 / m - Decimal(ln2n_hi))}


def _array(name: str, values: list[float]) -> str:
    rows = [", ".join(_hex(v) for v in values[i:i + 4]) for i in range(0, len(values), 4)]
    return f"alignas(64) static const double {name}[{len(values)}] = {{\n    " + ",\n    ".join(rows) + "};\n"


@cache
def source() -> str:
    """The C++ of ``_sdfg_scan_pow_acc(double, double)`` and its tables (include-guarded)."""
    t = tables()
    # log1p(r) = r - r^2/2 + r^3 (1/3 - r/4 + ... - r^9/12); expm1(r) = r + r^2/2 + r^3 (1/6 + r/24 + ...)
    log_q = [_hex((1.0 if j % 2 else -1.0) / j) for j in range(3, 13)]
    exp_q = [_hex(1.0 / math.factorial(j)) for j in range(3, 7)]

    def horner(coef: list[str], var: str) -> str:
        expr = coef[-1]
        for c in reversed(coef[:-1]):
            expr = f"({c} + {var} * {expr})"
        return expr

    return f"""
#ifndef SDFG_SCAN_ACCURATE_POW
#define SDFG_SCAN_ACCURATE_POW
#include <cstdint>
#include <cstring>
// sdfg_scan.expansions.vector_pow: pow(x, y) to about 2^-70 before its final rounding, as inline
// arithmetic, selects and table loads that GCC vectorises in a cell loop
{_array("_sdfg_scan_pw_invc", t["invc"])}{_array("_sdfg_scan_pw_logc_hi", t["logc_hi"])}\
{_array("_sdfg_scan_pw_logc_lo", t["logc_lo"])}{_array("_sdfg_scan_pw_t_hi", t["t_hi"])}\
{_array("_sdfg_scan_pw_t_lo", t["t_lo"])}
__attribute__((always_inline)) static inline double _sdfg_scan_pw_asd(uint64_t u) {{ double d; std::memcpy(&d, &u, 8); return d; }}
__attribute__((always_inline)) static inline uint64_t _sdfg_scan_pw_asu(double d) {{ uint64_t u; std::memcpy(&u, &d, 8); return u; }}
__attribute__((always_inline)) static inline double _sdfg_scan_pow_acc(double x, double y) {{
    const double inf = __builtin_inf();
    const double ax = __builtin_fabs(x);
    const bool regular = (ax > 0.0) & (ax < inf);            // |x| positive and finite (not NaN)
    const bool sub = regular & (ax < 0x1p-1022);            // subnormal |x|: scaled into the normal range
    const double xs = (regular ? ax : 1.0) * (sub ? 0x1p52 : 1.0);
    // log(xs) = k ln2 + log(c) + log1p(r), r = z / c - 1
    const uint64_t ix = _sdfg_scan_pw_asu(xs);
    const uint64_t tmp = ix - 0x{OFFSET:x}ULL;
    // only unsigned 64-bit integer arithmetic and no integer <-> double conversion (AVX2 has neither a
    // 64-bit arithmetic shift nor a conversion): k's 12 bits sign-extended, then 1.5 2^52 + k as a double
    const uint64_t k = ((tmp >> 52) ^ 0x800) - 0x800;
    const uint64_t i = (tmp >> {52 - LOG_BITS}) & {(1 << LOG_BITS) - 1};
    const double z = _sdfg_scan_pw_asd(ix - (k << 52));
    const double kd = (_sdfg_scan_pw_asd(0x4338000000000000ULL + k) - 0x1.8p52) - (sub ? 52.0 : 0.0);
    const double ic = _sdfg_scan_pw_invc[i];
    const double p = z * ic;
    const double pe = __builtin_fma(z, ic, -p);           // z ic = p + pe exactly
    const double p1 = p - 1.0;                            // exact (p within 2^-7 of 1)
    const double rh = p1 + pe;                            // r = rh + rl (two-sum)
    const double rb = rh - p1;
    const double rl = (p1 - (rh - rb)) + (pe - rb);
    const double sq = rh * rh;
    const double sql = __builtin_fma(rh, rh, -sq);
    const double ah = -0.5 * sq;                          // -r^2/2 = ah + al
    const double al = -0.5 * sql - rh * rl;
    const double th = rh + ah;                            // |ah| <= |rh|: fast two-sum
    const double tl = (rh - th) + ah + (rl + al + rh * sq * {horner(log_q, "rh")});
    const double a = kd * {_hex(t["ln2_hi"])};             // exact
    const double b = _sdfg_scan_pw_logc_hi[i];
    const double s1 = a + b;                              // two-sum
    const double s1b = s1 - a;
    const double e1 = (a - (s1 - s1b)) + (b - s1b);
    const double s2 = s1 + th;                            // two-sum
    const double s2b = s2 - s1;
    const double e2 = (s1 - (s2 - s2b)) + (th - s2b);
    const double lsum = e1 + e2 + tl + _sdfg_scan_pw_logc_lo[i] + kd * {_hex(t["ln2_lo"])};
    const double lh = s2 + lsum;                          // log|x| = lh + ll
    const double ll = lsum - (lh - s2);
    // y log|x| = zh + zl; C's special cases are chosen here, on the inputs of exp, so that every lane runs
    // the same loads and arithmetic (a select after them lets GCC sink the table loads into a branch, a
    // masked gather it may not vectorise)
    const bool one = (x == 1.0) | (y == 0.0) | ((ax == 1.0) & (__builtin_fabs(y) == inf));   // result 1
    const double ys = ax == 0.0 ? -y : y;                 // |x| = 0 or inf: exp(-+inf) or exp(+-inf)
    const double zh = one ? 0.0 : (regular ? y * lh : (ys > 0.0 ? inf : -inf));
    const double zl = (one | !regular) ? 0.0 : __builtin_fma(y, lh, -y * lh) + y * ll;
    const double yh = 0.5 * y;
    const bool yint = y == __builtin_floor(y);           // +-inf counts as an even integer
    const bool yodd = y - 2.0 * __builtin_floor(yh) == 1.0;   // false for non-integers, +-inf, |y| >= 2^53
    const bool nanres = !one & ((x != x) | (y != y) | ((x < 0.0) & (ax < inf) & !yint));
    const double zc = y != y ? 0.0 : (zh > 710.0 ? 710.0 : (zh < -746.0 ? -746.0 : zh));
    const double zlc = (zc == zh) ? zl : 0.0;
    // exp(zc + zlc) = 2^(kk/N) exp(r): kk = round(zc N / ln2)
    const double kf = zc * {_hex(t["inv_ln2n"])} + 0x1.8p52;
    const uint64_t kk = _sdfg_scan_pw_asu(kf) - _sdfg_scan_pw_asu(0x1.8p52);   // two's complement
    const double kn = kf - 0x1.8p52;
    const double d0 = zc - kn * {_hex(t["ln2n_hi"])};          // exact
    const double d1 = zlc - kn * {_hex(t["ln2n_lo"])};
    const double eh = d0 + d1;                            // r = eh + el (two-sum)
    const double eb = eh - d0;
    const double el = (d0 - (eh - eb)) + (d1 - eb);
    const double hr = 0.5 * eh;
    const double qh = hr * eh;                            // r^2/2 = qh + ql
    const double ql = __builtin_fma(hr, eh, -qh);
    const double uh = eh + qh;                            // expm1(r) = uh + ul (|qh| <= |eh|)
    const double ul = (eh - uh) + qh + (ql + el + eh * el + eh * eh * eh * {horner(exp_q, "eh")});
    const uint64_t j = kk & {(1 << EXP_BITS) - 1};
    const double ex = __builtin_floor(kn * {_hex(1.0 / (1 << EXP_BITS))});   // kk = {1 << EXP_BITS} ex + j
    const double tth = _sdfg_scan_pw_t_hi[j];
    const double ttl = _sdfg_scan_pw_t_lo[j];
    const double mh = tth * uh;                           // t (1 + u) = fh + rest
    const double ml = __builtin_fma(tth, uh, -mh);
    const double fh = tth + mh;                           // |mh| < 1 <= tth: fast two-sum
    const double fl = (tth - fh) + mh;
    const double m = fh + (fl + ml + ttl + tth * ul + ttl * uh);
    const double ex1 = __builtin_floor(0.5 * ex);
    const double ex2 = ex - ex1;                          // 2^ex = 2^ex1 2^ex2, each a normal double
    const double sc1 = _sdfg_scan_pw_asd((_sdfg_scan_pw_asu(ex1 + 0x1.8p52) + 1023) << 52);
    const double sc2 = _sdfg_scan_pw_asd((_sdfg_scan_pw_asu(ex2 + 0x1.8p52) + 1023) << 52);
    const double mag = (m * sc1) * sc2;                   // one rounding where the result is subnormal
    // NaN where C's pow gives NaN; the sign of x where y is an odd integer (-0 too)
    return __builtin_copysign(mag + (nanres ? __builtin_nan("") : 0.0), yodd ? x : 1.0);
}}
#endif
"""


__all__ = ["source", "tables"]
