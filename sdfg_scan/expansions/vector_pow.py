"""An accurate ``pow`` for vectorised cell loops (``VectorizeCellMap(accurate_pow=True)``, replay), written
as plain C++ arithmetic.

Why not glibc's vector ``pow`` (libmvec) or ``exp(y * log(x))``: both differ from glibc's scalar ``pow`` in
the last bits of a large share of the results (``exp(y log x)`` by about ``|y log x|`` units in the last
place). icon4py's microphysics subtract nearly equal tendencies, so those bits become relative errors
far above 1e-6 wherever a species is used up: with either, graupel's ``q_out_1`` had 1.8 to 2.6 % of its
entries beyond rtol 1e-6 of the scalar build (benchmarks/HISTORY.md: "An accurate vector pow"). glibc's
scalar ``pow`` rounds correctly in all but about 1 in 1000 cases (its error bound is 0.52 ulp); this one is
accurate to about 2^-70 before its final rounding (the nearest double on every one of the tests' checks against
:mod:`decimal`), so the two agree on all but those, and differ there by 1 ulp: graupel's vectorised maps
then keep the scalar build's values where the program cancels (``q_out_1``: 0.005 % beyond rtol 1e-6).

How (textbook double-double arithmetic, tables computed here with :mod:`decimal`, the properties the
C++ relies on asserted by :func:`tables`):

- ``log|x|`` as ``hi + lo``: ``x = 2^k z``, ``z`` in [0.703125, 1.40625); the top 7 bits after that offset
  pick ``1/c`` and ``-log(c)`` from a 128-entry table. ``1/c`` has 8 significant bits, so ``r = z/c - 1``
  (``|r| <= 2^-7``) is a double, computed exactly by one FMA; ``-log(c)`` is split into a multiple of
  2^-42 (so that ``k ln2_hi - log(c)_hi`` is exact) and a low part; ``1/c`` and the high part are packed
  into one 64-bit entry (one gather instead of two). ``log1p(r)`` by its series to ``r^10`` (Estrin's
  form, explicit FMAs), ``r`` and ``-r^2/2`` added in double-double (fast two-sums, whose order
  conditions the table asserts); the two intervals next to 1 use ``c = 1``, so results near ``x = 1``
  keep their relative accuracy.
- ``y log|x|`` as ``zh + zl`` (FMAs for the product's error), then ``exp(zh + zl)``: ``zh = (k + j/128)
  ln 2 + r``, ``|r| <= ln2/256``, ``2^(j/128)`` as ``hi + lo`` from a table, ``exp(r) - 1 - r`` as a
  polynomial to ``r^6`` in plain doubles (below 2^-18, so its rounding stays below 2^-70), the products
  with the table's ``hi`` in double-double; the scale ``2^(k/128)`` is applied in two steps (exponent
  bits made with integer shifts), so results that overflow become ``inf`` and subnormal results are
  rounded from the 53-bit value.
- C's special cases select around that arithmetic without a branch: ``y = 0`` or ``x = 1`` give 1; a NaN
  gives NaN; ``x = +-0`` and ``+-inf``, a negative ``x`` with an integral ``y`` (odd: negative result) or
  with another finite ``y`` (NaN), ``y = +-inf``.

Everything is ``inline`` arithmetic, selects and table loads, so GCC vectorises a cell loop that calls it
(four gathers for the tables) under the flags of :data:`~sdfg_scan.expansions.scan_blocked.LOOP_FLAGS`:
``benchmarks/bench_vector_pow.py`` measures about 4.1 ns per value on this project's AVX-512 machine
(5.2 ns for the first version of stop 32, with five gathers, the two-sums of ``r`` and a longer series),
against about 8 ns for glibc's scalar ``pow``, 2.1 ns for libmvec's ``pow`` and 1.6 ns for
``exp(y log x)``; the gathers are about 40 % of it. ``tests/test_vector_pow.py`` checks the values
(benchmarks/HISTORY.md: "An accurate vector pow"). The products and polynomials are written as explicit FMAs
and the error-free sums need no reassociation, so DaCe's default flags and the IEEE-strict ones give the same
values. Deterministic for a given machine and build (``replay``): not bitwise glibc's ``pow``, which the
``exact`` class calls. ``__builtin_fma`` is one instruction where the CPU has FMA (x86-64 since Haswell,
every AArch64); without it GCC calls libm's ``fma``, the same values, slowly.
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
INV_BITS = 8
"""Significant bits of each ``1/c``: with so few, ``z (1/c) - 1`` is a double, computed exactly by one FMA."""
HI_QUANTUM = 42
"""``-log(c)``'s high part and ``ln 2``'s are multiples of 2^-42: ``k ln2_hi - log(c)_hi`` is exact."""
LOG_TERMS = 10
"""``log1p(r)`` to ``r^10`` (``|r| <= 2^-7``: the first term left out is below 2^-70 of the result)."""
CHECK_ULPS = 0.02
CHECK_PER_Z = 2.0 ** -13
"""The checked form (``_sdfg_scan_pow_core<true>``, what the ``exact`` class's vectorised loops use): a value
is *safe*, provably glibc's scalar ``pow``, where ``x > 0`` and finite, ``y`` finite, the result a normal
double, and the value before the final rounding lies farther than ``CHECK_ULPS + CHECK_PER_Z |y log x|``
units in the last place from a midpoint between two doubles. Why that suffices: glibc's ``pow`` (the
algorithm of its ``e_pow.c``, both its FMA and its plain variant) states its error as at most
``ulperr_exp + |y log x| relerr_log 2^53`` ulp with ``ulperr_exp`` <= 0.511 and ``relerr_log`` <= 1.5 2^-68,
that is 0.011 + 4.6e-5 |y log x| ulp beyond half an ulp; this value is within about 2^-70 relative (2^-17
ulp, and 2^-17 |y log x| ulp through ``y log x``) of the exact one. A value closer to a midpoint than
glibc's excess could round either way in glibc; farther, glibc's result can only be the double nearest
to the exact value, which is this one's. The margins here are about twice those (0.02 against 0.011;
2^-13 = 1.2e-4 against 4.6e-5 + 7.6e-6). Every other lane (about 4 % of graupel-like arguments) calls
glibc."""


def _double(bits: int) -> float:
    return struct.unpack("<d", struct.pack("<Q", bits))[0]


def _bits(v: float) -> int:
    return struct.unpack("<Q", struct.pack("<d", v))[0]


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


def _rounded(v: Fraction, bits: int) -> float:
    """``v`` rounded to ``bits`` significant bits."""
    _, e = math.frexp(float(v))
    return math.ldexp(round(v * Fraction(2) ** (bits - e)), e - bits)


def _decimal(v: Fraction) -> Decimal:
    return Decimal(v.numerator) / Decimal(v.denominator)


def _ulp(v: float) -> Fraction:
    return Fraction(2) ** (math.frexp(v)[1] - 53)


@cache
def tables() -> dict:
    """The tables and constants (computed once, 45 significant digits), with the properties the C++ relies
    on asserted here: ``r = z/c - 1`` exact in one FMA and within 2^-7, ``k ln2_hi - log(c)_hi`` exact, the
    fast two-sum of that and ``r`` valid, and the packed table decoding to the same values."""
    getcontext().prec = 45
    n = 1 << LOG_BITS
    quantum = Fraction(1, 1 << HI_QUANTUM)
    invc, logc_hi, logc_lo, packed = [], [], [], []
    one = _bits(1.0)
    rmax = Fraction(0)
    for i in range(n):
        lo_bits = OFFSET + (i << (52 - LOG_BITS))
        hi_bits = OFFSET + ((i + 1) << (52 - LOG_BITS))
        zlo, zhi = Fraction(_double(lo_bits)), Fraction(_double(hi_bits - 1))
        if lo_bits in (one - (1 << (52 - LOG_BITS)), one):   # the two intervals next to 1: c = 1
            ic = 1.0
        else:
            ic = _rounded(2 / (zlo + zhi), INV_BITS)
        r = max(abs(zlo * Fraction(ic) - 1), abs(zhi * Fraction(ic) - 1))
        # z ic - 1 is a multiple of ulp(z) ulp_8(ic): a double while below 2^53 such units
        unit = _ulp(float(zlo)) * Fraction(2) ** (math.frexp(ic)[1] - INV_BITS)
        assert ic == 1.0 or r < (1 << 53) * unit, (i, float(r))
        rmax = max(rmax, r)
        lc = -Decimal(ic).ln()
        h = round(Fraction(lc) / quantum) * quantum
        assert ic == 1.0 or math.frexp(float(h))[1] >= math.frexp(float(r))[1], i   # fast two-sum
        invc.append(ic)
        logc_hi.append(float(h))
        logc_lo.append(float(lc - _decimal(h)))
        c8 = (_bits(ic) >> 45) & 0xFF   # 1/c's exponent (2^-1 or 2^0) and 7 fraction bits
        assert _double(0x3FE0000000000000 | (c8 << 45)) == ic
        packed.append((c8 << HI_QUANTUM) | (int(h / quantum) + (1 << (HI_QUANTUM - 1))))
    assert rmax <= Fraction(1, 128), rmax
    ln2 = Decimal(2).ln()
    ln2_hi = round(Fraction(ln2) / quantum) * quantum
    m = 1 << EXP_BITS
    t_hi, t_lo = [], []
    for j in range(m):
        h, lo = _split((ln2 * j / m).exp())
        t_hi.append(h)
        t_lo.append(lo)
    ln2n_hi = _truncated(ln2 / m, 35)   # kd ln2/N exact for |kd| < 2^18
    return {"invc": invc, "logc_hi": logc_hi, "logc_lo": logc_lo, "packed": packed, "t_hi": t_hi, "t_lo": t_lo,
            "ln2_hi_q": float(ln2_hi / quantum), "ln2_lo": float(ln2 - _decimal(ln2_hi)),
            "inv_ln2n": float(m / ln2), "ln2n_hi": ln2n_hi, "ln2n_lo": float(ln2 / m - Decimal(ln2n_hi))}


def _array(name: str, values: list) -> str:
    """A C++ table: doubles as hexadecimal floats, integers as 64-bit unsigned literals."""
    ctype, lit = ("uint64_t", lambda v: f"0x{v:016x}ULL") if isinstance(values[0], int) else ("double", _hex)
    rows = [", ".join(lit(v) for v in values[i:i + 4]) for i in range(0, len(values), 4)]
    return f"alignas(64) static const {ctype} {name}[{len(values)}] = {{\n    " + ",\n    ".join(rows) + "};\n"


def _poly(coef: list[str], v: str, v2: str, v4: str) -> str:
    """``coef[0] + coef[1] v + ...`` (at most 8 coefficients) in Estrin's form with explicit FMAs: a short
    dependency chain, and the same values whether or not the build contracts."""
    pairs = [f"__builtin_fma({v}, {coef[i + 1]}, {coef[i]})" if i + 1 < len(coef) else coef[i]
             for i in range(0, len(coef), 2)]
    if len(pairs) == 1:
        return pairs[0]
    low = f"__builtin_fma({v2}, {pairs[1]}, {pairs[0]})"
    if len(pairs) == 2:
        return low
    high = f"__builtin_fma({v2}, {pairs[3]}, {pairs[2]})" if len(pairs) == 4 else pairs[2]
    return f"__builtin_fma({v4}, {high}, {low})"


@cache
def source() -> str:
    """The C++ of ``_sdfg_scan_pow_acc(double, double)`` and its tables (include-guarded)."""
    t = tables()
    # log1p(r) = r - r^2/2 + r^3 (1/3 - r/4 + ... - r^7/10); exp(r) = 1 + r + r^2 (1/2 + r/6 + ... + r^4/720)
    log_q = [_hex((1.0 if j % 2 else -1.0) / j) for j in range(3, LOG_TERMS + 1)]
    exp_q = [_hex(1.0 / math.factorial(j)) for j in range(2, 7)]
    lo_mask = (1 << HI_QUANTUM) - 1
    lc_bias = _hex(2.0 ** 52 + 2.0 ** (HI_QUANTUM - 1))
    return f"""
#ifndef SDFG_SCAN_ACCURATE_POW
#define SDFG_SCAN_ACCURATE_POW
#include <cstdint>
#include <cstring>
// sdfg_scan.expansions.vector_pow: pow(x, y) to about 2^-70 before its final rounding, as inline
// arithmetic, selects and table loads that GCC vectorises in a cell loop.
// _packed[i]: 1/c's exponent and 7 fraction bits (bits 42..49), -log(c)'s high part in units of 2^-42,
// biased by 2^41 (bits 0..41): one gather for both
{_array("_sdfg_scan_pw_packed", t["packed"])}{_array("_sdfg_scan_pw_logc_lo", t["logc_lo"])}\
{_array("_sdfg_scan_pw_t_hi", t["t_hi"])}{_array("_sdfg_scan_pw_t_lo", t["t_lo"])}
__attribute__((always_inline)) static inline double _sdfg_scan_pw_asd(uint64_t u) {{ double d; std::memcpy(&d, &u, 8); return d; }}
__attribute__((always_inline)) static inline uint64_t _sdfg_scan_pw_asu(double d) {{ uint64_t u; std::memcpy(&u, &d, 8); return u; }}
// CHECK: also whether the value is provably glibc's (safe = 1.0): see vector_pow.CHECK_ULPS
template <bool CHECK>
__attribute__((always_inline)) static inline double _sdfg_scan_pow_core(double x, double y, double& safe) {{
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
    const uint64_t u = _sdfg_scan_pw_packed[i];
    const double ic = _sdfg_scan_pw_asd(0x3FE0000000000000ULL | ((u >> {HI_QUANTUM}) << 45));
    const double lcq = _sdfg_scan_pw_asd((u & 0x{lo_mask:x}ULL) | 0x4330000000000000ULL) - {lc_bias};
    const double r = __builtin_fma(z, ic, -1.0);          // exact: 1/c has 8 significant bits
    const double t1 = __builtin_fma(kd, {_hex(t["ln2_hi_q"])}, lcq) * 0x1p-{HI_QUANTUM};   // exact
    const double t2 = t1 + r;                             // |t1| >= |r| or t1 = 0: fast two-sum
    const double e2 = (t1 - t2) + r;
    const double rr = r * r;
    const double rre = __builtin_fma(r, r, -rr);
    const double ar2 = -0.5 * rr;                         // -r^2/2 = ar2 - rre/2
    const double t3 = t2 + ar2;                           // |t2| >= |ar2|: fast two-sum
    const double e3 = (t2 - t3) + ar2;
    const double rr2 = rr * rr;
    const double poly = r * rr * {_poly(log_q, "r", "rr", "rr2")};
    const double lo = (e2 + e3) + (__builtin_fma(kd, {_hex(t["ln2_lo"])}, _sdfg_scan_pw_logc_lo[i])
                                   + __builtin_fma(-0.5, rre, poly));
    const double lh = t3 + lo;                            // log|x| = lh + ll
    const double ll = (t3 - lh) + lo;
    // y log|x| = zh + zl; C's special cases are chosen here, on the inputs of exp, so that every lane runs
    // the same loads and arithmetic (a select after them lets GCC sink the table loads into a branch, a
    // masked gather it may not vectorise)
    const bool one = (x == 1.0) | (y == 0.0) | ((ax == 1.0) & (__builtin_fabs(y) == inf));   // result 1
    const double ys = ax == 0.0 ? -y : y;                 // |x| = 0 or inf: exp(-+inf) or exp(+-inf)
    const double yl = y * lh;
    const double zh = one ? 0.0 : (regular ? yl : (ys > 0.0 ? inf : -inf));
    const double zl = (one | !regular) ? 0.0 : __builtin_fma(y, ll, __builtin_fma(y, lh, -yl));
    const double yh = 0.5 * y;
    const bool yint = y == __builtin_floor(y);           // +-inf counts as an even integer
    const bool yodd = y - 2.0 * __builtin_floor(yh) == 1.0;   // false for non-integers, +-inf, |y| >= 2^53
    const bool unordered = __builtin_isunordered(x, y);   // x or y NaN
    const bool nanres = (!one) & (unordered | ((x < 0.0) & (ax < inf) & !yint));
    const double zc = zh > 710.0 ? 710.0 : (zh < -746.0 ? -746.0 : zh);   // a NaN stays NaN
    const double zlc = (zc == zh) ? zl : 0.0;
    // exp(zc + zlc) = 2^(kk/N) exp(rh + rl): kk = round(zc N / ln2), |rh| <= ln2 / 2N
    const double kf = __builtin_fma(zc, {_hex(t["inv_ln2n"])}, 0x1.8p52);
    const uint64_t kk = _sdfg_scan_pw_asu(kf) - _sdfg_scan_pw_asu(0x1.8p52);   // two's complement
    const double kn = kf - 0x1.8p52;
    const double d0 = __builtin_fma(-kn, {_hex(t["ln2n_hi"])}, zc);   // exact
    const double d1 = __builtin_fma(-kn, {_hex(t["ln2n_lo"])}, zlc);
    const double rh = d0 + d1;                            // |d0| >= |d1| (or both tiny): fast two-sum
    const double rl = d1 - (rh - d0);
    const double r2 = rh * rh;
    const double p = r2 * {_poly(exp_q, "rh", "r2", "r2 * r2")};   // exp(rh) - 1 - rh
    const uint64_t j = kk & {(1 << EXP_BITS) - 1};
    const double th = _sdfg_scan_pw_t_hi[j];              // 2^(j/N) = th + tl
    const double tl = _sdfg_scan_pw_t_lo[j];
    const double q = th * rh;                             // (th + tl)(1 + rh + rl + p) = s + mlo
    const double qe = __builtin_fma(th, rh, -q);
    const double s = th + q;                              // |q| < 1 <= th: fast two-sum
    const double se = (th - s) + q;
    const double mlo = __builtin_fma(th, p + rl, (se + qe) + __builtin_fma(tl, rh, tl));
    const double m = s + mlo;
    // 2^ex, ex = (kk - j) / N, applied as 2^ex1 2^ex2 (each a normal double), so that results that
    // overflow become inf and subnormal results are rounded once; kk + 2^20 > 0, shifted right: floors
    const uint64_t kb = kk + (1ULL << 20);
    const uint64_t exb = kb >> {EXP_BITS};                 // ex + 2^13
    const uint64_t ex1b = kb >> {EXP_BITS + 1};            // floor(ex / 2) + 2^12
    const double sc1 = _sdfg_scan_pw_asd((ex1b + (1023 - 4096)) << 52);
    const double sc2 = _sdfg_scan_pw_asd((exb - ex1b + (1023 - 4096)) << 52);
    const double mag = (m * sc1) * sc2;
    if constexpr (CHECK) {{
        // m = s + mlo rounded once (|s| >= |mlo|: its error is exact); how far the value before that rounding
        // lies from a midpoint between two doubles, in units in the last place of m, against glibc's error
        // bound beyond half an ulp for this |y log x| (vector_pow.CHECK_ULPS); m a power of two is never safe
        // (the doubles below it are twice as dense as its ulp)
        const double tail = mlo - (m - s);
        const uint64_t mu = _sdfg_scan_pw_asu(m);
        const double ulp = _sdfg_scan_pw_asd(mu & 0x7FF0000000000000ULL) * 0x1p-52;
        const double bound = ({0.5 - CHECK_ULPS} - __builtin_fabs(zh) * {_hex(CHECK_PER_Z)}) * ulp;
        safe = ((x > 0.0) & regular & !one & !nanres & (zc == zh) & (__builtin_fabs(tail) < bound)
                & ((mu & 0xFFFFFFFFFFFFFULL) != 0) & (mag >= 0x1p-1022) & (mag < inf)) ? 1.0 : 0.0;
    }}
    // NaN where C's pow gives NaN; the sign of x where y is an odd integer (-0 too)
    return __builtin_copysign(mag + (nanres ? __builtin_nan("") : 0.0), yodd ? x : 1.0);
}}
__attribute__((always_inline)) static inline double _sdfg_scan_pow_acc(double x, double y) {{
    double unused;
    return _sdfg_scan_pow_core<false>(x, y, unused);
}}
#endif
"""


__all__ = ["source", "tables"]
