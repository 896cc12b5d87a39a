"""The cell-blocked, vectorised schedule of a lifted gt4py scan (``Scan(columns="cells")``).

gt4py's scan is a parallel map over cells around a column SDFG whose ``LoopRegion`` walks the levels.
On cell-contiguous (nproma) fields, this schedule runs blocks of ``B`` contiguous cells::

    before (``sequential``)                     after (``blocked``: one C++ tasklet, one parallel region)
    map i in cells:                             parallel for each block [c0, c0 + B):
      entry(i)                                    for l < B:  entry(c0 + l)        carries -> [B] arrays
      for k in levels: body(i, k)                 for k in levels:
      exit(i)                                       simd for l < B: body(c0 + l, k)  (inlined, unit stride)
                                                  for l < B:  exit(c0 + l)

The body is written as C++ by :mod:`sdfg_scan.expansions.scan_blocked_codegen` (DaCe's own tasklet
unparser, so each cell runs the same operations in the same order as the original program). Two
classes:

- ``blocked`` (**exact**): scalar libm calls, per-cell ``if``; bitwise the original program compiled
  with the same IEEE-strict flags (:class:`~sdfg_scan.expansions.environments.ExactArithmetic`).
- ``blocked_simd`` (**replay**): branches that only assign per-cell values are if-converted (every
  branch computed, results selected) and ``exp``/``log``/``pow`` are declared ``omp declare simd`` so
  that GCC calls glibc's vector math (libmvec) in the vectorised cell loop (:class:`VectorMath` adds
  ``-fopenmp-simd`` and ``-lmvec``); in an if-converted branch the calls skip the vectors none of whose
  cells take it (:data:`PREDICATED_MATH`). Deterministic for a given machine and build; not bitwise the
  scalar libm results (documented error: README).

``blocked_kcached`` (**exact**) is ``blocked`` on the body that ``kcached`` rewrote
(:func:`sdfg_scan.expansions.scan_kcached.cache_levels`): every input read at level offsets (a delay
line after ``DeadCarryElimination``, a window ``x[k-1], x[k-2], ...``) is loaded once per level into a
ring of ``W`` slots. The ring's slots live across levels, so the kernel keeps them like carries, one
``[B]`` array each: a ``[W, B]`` ring per block. Only copies change: bitwise ``blocked``.
"""

from __future__ import annotations

import platform
import re
from dataclasses import dataclass

import dace
import dace.library
from dace import data as dt
from dace import subsets, symbolic
from dace.codegen.targets.cpp import sym2cpp
from dace.sdfg.state import ConditionalBlock, ControlFlowRegion
from dace.transformation.transformation import ExpandTransformation

from sdfg_scan.cost import CELL_OUTER_SECONDS, efficiency_of, math_calls, stream_seconds
from sdfg_scan.expansions import declare, vector_pow
from sdfg_scan.expansions import scan_blocked_codegen as codegen
from sdfg_scan.expansions.environments import (
    LIBM_HEADER,
    STRICT_HOST_FLAGS,
    ExactArithmetic,
    gather_flags,
    libm_flags,
)
from sdfg_scan.expansions.scan_blocked_codegen import LANE, BodyWriter, Ref, Scope, Unsupported, Writer, storage_type
from sdfg_scan.expansions.scan_columns import body_copy, mapped_symbols, per_level
from sdfg_scan.names import body_names, fresh_name
from sdfg_scan.scan_structure import NotAScan, analyze_scan

BLOCK = 256
"""Cells per block: 20 carries x 8 B x 256 = 40 KiB of block arrays stay in L1/L2 per thread."""
IF_CONVERTED_QUANTUM = 64
"""Cells per block of an if-converted blocked kernel are a multiple of this (``BLOCK_SIZE_CODE`` says why)."""

QUIET_COMPARE = """
#ifndef SDFG_SCAN_QUIET_COMPARE
#define SDFG_SCAN_QUIET_COMPARE
#include <type_traits>
#define SDFG_SCAN_QUIET(name, builtin, op) \
    template <typename A, typename B> static inline bool name(A a, B b) { \
        if constexpr (std::is_floating_point_v<A> || std::is_floating_point_v<B>) { \
            using T = std::common_type_t<A, B>; return builtin(T(a), T(b)); \
        } else { return a op b; } }
SDFG_SCAN_QUIET(_sdfg_scan_gt, __builtin_isgreater, >)
SDFG_SCAN_QUIET(_sdfg_scan_ge, __builtin_isgreaterequal, >=)
SDFG_SCAN_QUIET(_sdfg_scan_lt, __builtin_isless, <)
SDFG_SCAN_QUIET(_sdfg_scan_le, __builtin_islessequal, <=)
#undef SDFG_SCAN_QUIET
#endif
"""
"""Comparisons of if-converted code (the truth values of ``>``, ``>=``, ``<``, ``<=``, NaN included, without
the invalid-operation trap of an ordered comparison, so that GCC if-converts around them)."""

VECTOR_MATH = """
#ifndef SDFG_SCAN_VECTOR_MATH
#define SDFG_SCAN_VECTOR_MATH
#include <cmath>
#pragma omp declare simd notinbranch
extern "C" double exp(double) noexcept;
#pragma omp declare simd notinbranch
extern "C" double log(double) noexcept;
#pragma omp declare simd notinbranch
extern "C" double pow(double, double) noexcept;
#pragma omp declare simd notinbranch
static inline double _sdfg_scan_vexp(double x) { return exp(x); }
#pragma omp declare simd notinbranch
static inline double _sdfg_scan_vlog(double x) { return log(x); }
// pow(x, y) through EXP and LOG (callables of one double) where a constant makes that cheaper, else falls
// through; the one dispatch of _sdfg_scan_vpow (exp, log) and _sdfg_scan_ppow (their predicated calls).
// A constant exponent that is not an integer (known once inlined at a call site): exp(y log x), two fast
// vector calls instead of libmvec's pow (and one log for several powers of the same base). A base that is
// not positive (a zero species in a branch computed for every lane) would send the vector through
// libmvec's special-case path, which calls scalar log for each such lane: such lanes take the log of 1 and
// get pow's value selected back (+0 or +inf for +-0, +inf or +0 for -inf, NaN for a negative or NaN base:
// the values exp(y log x) gave them before). A constant base that is positive, finite and not 1 (icon4py's
// power(10, polynomial)): one exp of y times the folded log (pow's values for y = 0, +-inf and NaN too)
#define SDFG_SCAN_POW_BY_EXP_LOG(x, y, EXP, LOG) \
    if (__builtin_constant_p(y) && y != __builtin_floor(y)) { \
        const bool positive = x > 0.0; \
        const double r = EXP(y * LOG(positive ? x : 1.0)); \
        const double inf = __builtin_inf(); \
        return positive ? r : x == 0.0 ? (y > 0.0 ? 0.0 : inf) : x == -inf ? (y > 0.0 ? inf : 0.0) \
                                                                               : (x - x) / (x - x); } \
    if (__builtin_constant_p(x) && x > 0.0 && x != 1.0 && x < __builtin_inf()) \
        return EXP(y * log(x));
#pragma omp declare simd notinbranch
static inline double _sdfg_scan_vpow(double x, double y) {
    SDFG_SCAN_POW_BY_EXP_LOG(x, y, exp, log)
    return pow(x, y); }
// other argument types (a float, an integral exponent: DaCe's integer power): DaCe's own function, as the
// program wrote it (a non-template overload wins for doubles)
template <typename T> static inline auto _sdfg_scan_vexp(T x) { return dace::math::exp(x); }
template <typename T> static inline auto _sdfg_scan_vlog(T x) { return dace::math::log(x); }
template <typename A, typename B> static inline auto _sdfg_scan_vpow(A x, B y) { return dace::math::pow(x, y); }
#endif
""" + QUIET_COMPARE

_ACCURATE_POW_CALL = """
#ifndef SDFG_SCAN_ACCURATE_POW_CALL
#define SDFG_SCAN_ACCURATE_POW_CALL
// VectorizeCellMap(accurate_pow=True) (what optimize applies under replay by default): pow as
// sdfg_scan.expansions.vector_pow's accurate pow (glibc's scalar value on all but about 1 in 1000 arguments,
// 1 ulp off there), where libmvec's pow and exp(y log x) differ on about a quarter. Inlined at every call
// site: constants stay in registers across the cell loop and a constant base or exponent folds its part
// (graupel 0.197 s; as one simd clone 0.256 s). AccurateVectorMath raises GCC's function growth limit,
// which graupel's 25 inlined copies pass (GCC then left DaCe's min/max as calls, and the loop scalar).
__attribute__((always_inline)) static inline double _sdfg_scan_apow(double x, double y) noexcept {
    return _sdfg_scan_pow_acc(x, y); }
template <typename A, typename B> static inline auto _sdfg_scan_apow(A x, B y) { return dace::math::pow(x, y); }
#endif
"""

_LANE_ISAS = (("b", 2, "__m128d", "sse2", "_mm_movemask_pd(_mm_cmpneq_pd(a, _mm_setzero_pd()))"),
              ("c", 4, "__m256d", "avx", "_mm256_movemask_pd(_mm256_cmp_pd(a, _mm256_setzero_pd(), _CMP_NEQ_UQ))"),
              ("d", 4, "__m256d", "avx2", "_mm256_movemask_pd(_mm256_cmp_pd(a, _mm256_setzero_pd(), _CMP_NEQ_UQ))"),
              ("e", 8, "__m512d", "avx512f", "_mm512_cmp_pd_mask(a, _mm512_setzero_pd(), _CMP_NEQ_UQ)"))
"""x86-64's vector function ABI variants of a ``declare simd notinbranch`` function (GCC expects all four of an
external one): ISA letter, lanes of doubles, vector type, target, "some lane is active" (``a != 0``, NaN
included, as the scalar test)."""


_MATH_ARGS = (("exp", ("x",)), ("log", ("x",)), ("pow", ("x", "y")))
"""The functions a cell loop's vector math covers, and their arguments."""


def _scalar_entry(name: str, params: str, body: str) -> str:
    """``name_s`` (``extern "C"``, hidden, not inlined: the loop's remainder calls it) and ``name`` declared
    ``simd notinbranch``, bound to it, so that GCC calls ``name_s``'s vector variants (:func:`_variant`)."""
    return (f'extern "C" __attribute__((noinline, visibility("hidden"))) double {name}_s({params}) '
            f"noexcept {{\n    {body} }}\n#pragma omp declare simd notinbranch\n"
            f'extern "C" __attribute__((const)) double {name}({params}) noexcept __asm__("{name}_s");')


def _variant(name: str, isa: str, n: int, vt: str, target: str, args: tuple[str, ...], body: str) -> str:
    """The x86-64 vector function ABI's variant of ``name_s(a, args...)`` for one row of :data:`_LANE_ISAS`
    (hidden: two programs in one process keep their own)."""
    vparams = ", ".join(f"{vt} {a}" for a in ("a", *args))
    return (f'extern "C" __attribute__((target("{target}"), visibility("hidden"))) {vt} '
            f"_ZGV{isa}N{n}{'v' * (len(args) + 1)}_{name}_s({vparams}) {{\n{body} }}")


def _x86_gcc_or(own: list[str], generic: list[str], head: str = "") -> str:
    """``own`` (written variants) on x86-64 with GCC, ``generic`` elsewhere."""
    return ("#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)\n#include <immintrin.h>\n" + head
            + "\n".join(own) + "\n#else\n" + "\n".join(generic) + "\n#endif\n")


def _lane_calls() -> str:
    """The C++ of ``_sdfg_scan_x{exp,log,pow}1(a, ...)``: glibc's scalar call where ``a != 0``, else +0, as a
    ``declare simd`` function GCC calls from a vectorised loop once per vector of lanes.

    On x86-64 with GCC the vector variants are written here, not generated: GCC's own clone of such a function
    stores the lanes, loops over them and returns the results through memory, also when no lane is active
    (most calls: a branch the vector's points do not take, or a ``pow`` every lane of which the checked value
    covers); the cost was about 9 % of ``graupel_run_dyn`` under ``exact`` in a profile, most of it in the
    reload of the result (a store-forwarding stall). These return zeros at once when no lane is active and
    otherwise call the scalar function in the active lanes, the same calls on the same arguments as GCC's
    clone (bitwise the same program). The scalar entry point (the loop's remainder) and the variants are
    hidden symbols of the program's library; elsewhere GCC's clones of a static function, as before."""
    own, generic = [], []
    for f, args in _MATH_ARGS:
        params = ", ".join(f"double {a}" for a in ("a", *args))
        call = f"a != 0.0 ? _sdfg_scan_x{f}0({', '.join(args)}) : 0.0"
        generic.append(f"#pragma omp declare simd notinbranch\n__attribute__((noinline, const)) static double "
                       f"_sdfg_scan_x{f}1({params}) noexcept {{\n    return {call}; }}")
        own.append(_scalar_entry(f"_sdfg_scan_x{f}1", params, f"return {call};"))
        for isa, n, vt, target, any_active in _LANE_ISAS:
            lanes = ", ".join(f"{a}[i]" for a in args)
            own.append(_variant(f"_sdfg_scan_x{f}1", isa, n, vt, target, args,
                                f"    {vt} r = {vt}{{}};\n    if ({any_active} == 0) return r;\n"
                                f"    for (int i = 0; i < {n}; ++i) if (a[i] != 0.0) r[i] = _sdfg_scan_x{f}0({lanes});\n"
                                f"    return r;"))
    return _x86_gcc_or(own, generic)


_LANE_CALLS = _lane_calls()


_QUIET_ARGS = {"exp": ("0.0",), "log": ("1.0",), "pow": ("1.0", "1.0")}
"""The arguments a predicated call gives libmvec in the lanes that do not take its branch: values on the
vector functions' main path. The program's own values there (an if-converted ``log(q)`` under ``q > qmin``
sees ``q = 0`` in the lanes that skip it) send libmvec to its special-case path, which calls the scalar
function lane by lane: 4 to 7 times the vector call (AVX-512, glibc 2.36: ``log`` 13 ns a vector, 54 ns with
one lane 0; ``exp`` 8 ns, 46 to 57 ns with one lane -inf or -800; ``pow`` 31 ns, 72 ns with one lane's base
0 or negative). libmvec computes each lane from that lane's arguments alone, so the lanes that take the
branch get the same values; the others are never selected."""


def _predicated_calls() -> str:
    """The C++ of ``_sdfg_scan_p{exp,log,pow}(a, ...)``: :data:`VECTOR_MATH`'s ``exp``/``log``/``pow`` of an
    if-converted branch, given the branch's lane predicate ``a`` (``blocked_simd``, replay).

    On x86-64 with GCC the vector variants of ``_sdfg_scan_p{f}1`` are written here: zeros at once where no
    lane of the vector takes the branch (its values are never selected), else libmvec's variant of the same
    width, which is what the loop calls without predicates: the same values in the lanes that take the branch;
    the other lanes' arguments are replaced first (:data:`_QUIET_ARGS`). The scalar entry
    (the loop's remainder) calls glibc's scalar function, as the remainder does without predicates. Graupel's
    if-converted scan loop calls about 50 of these per vector of cells, many in branches that few cells take.
    Elsewhere the calls are :data:`VECTOR_MATH`'s, without the predicate."""
    own, generic = [], []
    for f, args in _MATH_ARGS:
        params = ", ".join(f"double {a}" for a in ("a", *args))
        own.append(_scalar_entry(f"_sdfg_scan_p{f}1", params, f"(void)a; return {f}({', '.join(args)});"))
        generic.append(f"static inline double _sdfg_scan_p{f}1({params}) noexcept {{\n"
                       f"    (void)a; return _sdfg_scan_v{f}({', '.join(args)}); }}")
        for isa, n, vt, target, any_active in _LANE_ISAS:
            vargs = "v" * len(args)
            own.append(f'extern "C" __attribute__((target("{target}"))) {vt} _ZGV{isa}N{n}{vargs}_{f}('
                       f"{', '.join([vt] * len(args))});\n"
                       + _variant(f"_sdfg_scan_p{f}1", isa, n, vt, target, args,
                                  f"    if ({any_active} == 0) return {vt}{{}};\n"
                                  f"    SDFG_SCAN_PREDICATED_CALL({n});\n"
                                  + "".join(f"    {x} = a != 0.0 ? {x} : {vt}{{}} + {b};\n"
                                            for x, b in zip(args, _QUIET_ARGS[f], strict=True))
                                  + f"    return _ZGV{isa}N{n}{vargs}_{f}({', '.join(args)});"))
    return _x86_gcc_or(own, generic, "#ifndef SDFG_SCAN_PREDICATED_CALL\n#define SDFG_SCAN_PREDICATED_CALL(lanes)"
                                     "   // a vector call made (tests count them)\n#endif\n")


PREDICATED_MATH = VECTOR_MATH + """
#ifndef SDFG_SCAN_PREDICATED_MATH
#define SDFG_SCAN_PREDICATED_MATH
""" + _predicated_calls() + """// the calls of an if-converted branch (a: the lanes that take it), the same values as _sdfg_scan_v*: what
// the compiler folds stays folded, and pow is _sdfg_scan_vpow's, each of its calls predicated
static inline double _sdfg_scan_pexp(bool a, double x) {
    return __builtin_constant_p(x) ? _sdfg_scan_vexp(x) : _sdfg_scan_pexp1(a ? 1.0 : 0.0, x); }
static inline double _sdfg_scan_plog(bool a, double x) {
    return __builtin_constant_p(x) ? _sdfg_scan_vlog(x) : _sdfg_scan_plog1(a ? 1.0 : 0.0, x); }
__attribute__((always_inline)) static inline double _sdfg_scan_ppow(bool a, double x, double y) {
    // folded, or a constant integral exponent (GCC writes pow(x, 2.0) as x * x): _sdfg_scan_vpow's call as is
    if ((__builtin_constant_p(x) && __builtin_constant_p(y)) || (__builtin_constant_p(y) && y == __builtin_floor(y)))
        return _sdfg_scan_vpow(x, y);
    const auto pexp = [a](double v) __attribute__((always_inline)) { return _sdfg_scan_pexp(a, v); };
    const auto plog = [a](double v) __attribute__((always_inline)) { return _sdfg_scan_plog(a, v); };
    SDFG_SCAN_POW_BY_EXP_LOG(x, y, pexp, plog)
    return _sdfg_scan_ppow1(a ? 1.0 : 0.0, x, y); }
template <typename T> static inline auto _sdfg_scan_pexp(bool, T x) { return _sdfg_scan_vexp(x); }
template <typename T> static inline auto _sdfg_scan_plog(bool, T x) { return _sdfg_scan_vlog(x); }
template <typename A, typename B> static inline auto _sdfg_scan_ppow(bool, A x, B y) { return _sdfg_scan_vpow(x, y); }
#endif
"""
"""``code_global`` of ``blocked_simd``: :data:`VECTOR_MATH` and its calls predicated by their branch's lanes."""

_SCALAR_LANE = """
#ifndef SDFG_SCAN_SCALAR_LANE_MATH
#define SDFG_SCAN_SCALAR_LANE_MATH
#include <cmath>
// exact vectorised loops: the loop's arithmetic in vectors, exp/log/pow the program's own scalar calls, one
// per lane whose branch the program takes. GCC vectorises a call only through a simd clone:
// _sdfg_scan_x*1's vector variants return zeros when no lane is active and otherwise call _sdfg_scan_x*0
// in the active lanes (on x86-64 with GCC written below, not GCC's clones: scan_blocked._lane_calls). No simd
// declaration reaches _sdfg_scan_x*0 (noipa: not inlined, no caller's constant propagated into it), so
// glibc's scalar function (or its errno-free entry point, sdfg_scan_libm.h) computes every value the
// program selects, on the program's arguments. noexcept and const: no exception edge and no memory effect,
// so GCC neither keeps the loop scalar nor sinks the call into a branch. The active flag is a double, as
// wide as the lanes (a byte beside doubles is a mask GCC 12 does not convert).
__attribute__((noipa)) static double _sdfg_scan_xexp0(double x) noexcept { return dace::math::exp(x); }
__attribute__((noipa)) static double _sdfg_scan_xlog0(double x) noexcept { return dace::math::log(x); }
__attribute__((noipa)) static double _sdfg_scan_xpow0(double x, double y) noexcept { return dace::math::pow(x, y); }
""" + _LANE_CALLS + """// what the compiler folds stays folded as in the program: DaCe's function inlined at the call site for
// constant arguments, and for the constant exponents GCC rewrites under IEEE flags (0, 1, 2, -1: 1, x, x * x,
// 1 / x); any other exponent, integral or not, reaches glibc's pow in the program too
static inline double _sdfg_scan_xexp(bool a, double x) {
    return __builtin_constant_p(x) ? dace::math::exp(x) : _sdfg_scan_xexp1(a ? 1.0 : 0.0, x); }
static inline double _sdfg_scan_xlog(bool a, double x) {
    return __builtin_constant_p(x) ? dace::math::log(x) : _sdfg_scan_xlog1(a ? 1.0 : 0.0, x); }
// pow: the checked accurate pow of sdfg_scan.expansions.vector_pow in vectors, and glibc's scalar call only
// in the lanes where that value is not provably glibc's (about 4 %: vector_pow.CHECK_ULPS says why the others
// are); the two are combined by their bits (one of them is +0: the other's bits, -0 and NaN included).
// SDFG_SCAN_EXACT_LIBM_POW: glibc's call in every active lane. Always inlined (GCC otherwise calls it, large as
// it is, and the cell loop stays scalar)
__attribute__((always_inline)) static inline double _sdfg_scan_xpow(bool a, double x, double y) {
    if ((__builtin_constant_p(x) && __builtin_constant_p(y))
        || (__builtin_constant_p(y) && (y == 0.0 || y == 1.0 || y == 2.0 || y == -1.0)))
        return dace::math::pow(x, y);
#ifdef SDFG_SCAN_EXACT_LIBM_POW
    return _sdfg_scan_xpow1(a ? 1.0 : 0.0, x, y);
#else
    double safe;
    const double v = _sdfg_scan_pow_core<true>(x, y, safe);
    const double g = _sdfg_scan_xpow1(a ? 1.0 - safe : 0.0, x, y);
    const double vs = safe != 0.0 ? v : 0.0;
    return _sdfg_scan_pw_asd(_sdfg_scan_pw_asu(g) | _sdfg_scan_pw_asu(vs));
#endif
}
template <typename T> static inline auto _sdfg_scan_xexp(bool, T x) { return dace::math::exp(x); }
template <typename T> static inline auto _sdfg_scan_xlog(bool, T x) { return dace::math::log(x); }
template <typename A, typename B> static inline auto _sdfg_scan_xpow(bool, A x, B y) { return dace::math::pow(x, y); }
#endif
""" + QUIET_COMPARE


def accurate_pow_math() -> str:
    """``code_global`` of ``VectorizeCellMap(accurate_pow=True)``: the accurate ``pow``'s tables and code
    (:func:`sdfg_scan.expansions.vector_pow.source`, built with :mod:`decimal` when first asked for, not at
    import) and ``_sdfg_scan_apow``."""
    return vector_pow.source() + _ACCURATE_POW_CALL


def scalar_lane_math() -> str:
    """``code_global`` of the exact vectorised loops (``blocked_simd_exact``, ``VectorizeCellMap(exact=True)``):
    the checked ``pow`` and the lane wrappers of glibc's scalar calls (built when first asked for)."""
    return vector_pow.source() + _SCALAR_LANE


def __getattr__(name: str) -> str:
    # ACCURATE_POW_MATH and SCALAR_LANE_MATH: module constants in name, built on first use (PEP 562), so that
    # importing sdfg_scan does not compute the accurate pow's tables
    if name == "ACCURATE_POW_MATH":
        return accurate_pow_math()
    if name == "SCALAR_LANE_MATH":
        return scalar_lane_math()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


PREDICATED = True
"""``blocked_simd``'s vector calls in if-converted branches take the branch's lane predicate
(:data:`PREDICATED_MATH`); off: every vector computes every branch's calls."""

LOOP_FLAGS = ["-fopenmp-simd", "-fno-math-errno", "-fno-trapping-math", "-fno-thread-jumps"] + \
    (["-mprefer-vector-width=512"] if platform.machine() in ("x86_64", "AMD64") else []) + gather_flags()
"""What GCC needs to vectorise an if-converted cell loop (:class:`VectorMath` says why, flag by flag), and
gathers where GCC's tuning of an Intel CPU it does not know would leave them out
(:func:`~sdfg_scan.expansions.environments.gather_flags`; no flag changes a value)."""

REPLAY_ARITHMETIC = [" ".join(STRICT_HOST_FLAGS)]
"""The arithmetic of a replay build: IEEE-strict, as ``exact``'s (one string: see ``STRICT_HOST_FLAGS``).
Replay's vector ``exp``/``log``/``pow`` then are its only difference from ``exact``. Under DaCe's default
``-ffast-math`` GCC contracts, reassociates and replaces divisions by whatever the code's shape allows, and
icon4py's ``muphys_run`` (saturation adjustment, graupel, saturation adjustment) amplifies such bits: its replay
build had 3.25 % of ``q_out_4`` beyond rtol 1e-6 of ``exact`` (as gt4py's own default build has), against
0.0155 % with these flags, at the same speed (0.2999 s with them, 0.2975 s without, interleaved, stop 54). No flag here stops a
vectorisation: the exact vectorised loops build under the same ones."""


@dace.library.environment
class VectorMath:
    """glibc's vector math library (libmvec) for the ``blocked_simd`` (replay) expansion.

    The generated code declares ``exp``, ``log`` and ``pow`` with ``#pragma omp declare simd``;
    ``-fopenmp-simd`` makes GCC honour those declarations and the ``omp simd`` loop over the cells
    of a block, so a vectorised loop calls ``_ZGVdN4v_exp`` and friends from ``libmvec``.
    """

    cmake_minimum_version = None
    cmake_packages: list[str] = []
    cmake_variables: dict[str, str] = {}
    cmake_includes: list[str] = []
    cmake_libraries: list[str] = ["mvec"]
    # after the program's flags: ``-fno-fast-math`` (ExactArithmetic) turns errno-setting math and
    # trapping math back on. A call that may set errno is never vectorised, and under trapping math GCC
    # does not if-convert a block whose arithmetic "could trap" unless the target has masked arithmetic
    # (AVX-512): on AVX2 graupel's block loop stayed scalar. Neither changes a value (errno and the FP
    # exception flags are not results). On x86-64, 512-bit vectors where the CPU has AVX-512:
    # ``-march=native`` prefers 256 bits on most AVX-512 CPUs, and at that width GCC 12 cannot convert a
    # byte bool's mask to a double's (AVX-512 mask registers) and leaves graupel's if-converted block loop
    # scalar (no effect without AVX-512). ``-fno-thread-jumps``: GCC 12's jump threading turns a bool
    # computed from a value that an if-converted branch selects (``f = t < t0 && x > 0`` after
    # ``x = c ? v : 0``) into a select between two of its vector masks of different widths, which the
    # vectorizer rejects ("relevant stmt not supported"): graupel's first map stayed scalar (no value changes).
    # ``-fno-tree-pre -fno-tree-sink``: the predicated calls (PREDICATED_MATH) are not built-ins, and GCC
    # if-converts a call under a branch only if it is one; partial redundancy elimination (code hoisting
    # included) and sinking place copies of such calls under branches: graupel_run_dyn's scan loop stayed
    # scalar, 0.26 s against 0.10 s
    # and IEEE-strict arithmetic (REPLAY_ARITHMETIC): the vector math is replay's only difference from exact
    cmake_compile_flags = REPLAY_ARITHMETIC + LOOP_FLAGS + ["-fno-tree-pre", "-fno-tree-sink"] + libm_flags()
    cmake_link_flags: list[str] = []
    cmake_files: list[str] = []
    # the scalar pow/exp/log left in the program (gt4py's own maps) skip glibc's errno wrapper too
    headers = {"frame": [LIBM_HEADER]}
    state_fields: list[str] = []
    init_code = ""
    finalize_code = ""
    dependencies: list[type] = []


INLINED_POW_FLAGS = ["-fno-tree-sink", "-fno-unswitch-loops", "--param=large-function-growth=10000",
                     "--param=large-function-insns=100000"]
"""What a cell loop with the accurate ``pow`` inlined at every call needs (:class:`AccurateVectorMath` says why,
flag by flag); :class:`ScalarLaneLoops` inlines its checked form."""


@dace.library.environment
class AccurateVectorMath(VectorMath):
    """:class:`VectorMath` for ``VectorizeCellMap(accurate_pow=True)``, with ``-fno-tree-sink`` (GCC sinks
    what one if-converted branch uses into that branch, and the accurate ``pow``'s table loads under a branch
    become masked gathers GCC 12 does not vectorise on this tuning) and GCC's function growth limits raised
    (``large-function-growth``, ``large-function-insns``: graupel's map function, with 25 inlined copies
    of the accurate ``pow``, passed them, and GCC stopped inlining DaCe's ``min``/``max``, which kept the
    cell loop scalar), and ``-fno-unswitch-loops`` (GCC copied graupel's if-converted map loop once per
    loop-invariant condition, a 290 KB function; without the copies graupel under replay ran 0.101 s
    against 0.110 s, bitwise the same values, ``benchmarks/bench_icon4py.py``). No flag changes a value but
    :data:`REPLAY_ARITHMETIC`'s, which make the arithmetic IEEE-strict."""

    cmake_compile_flags = REPLAY_ARITHMETIC + LOOP_FLAGS + INLINED_POW_FLAGS + libm_flags()


@dace.library.environment
class ScalarLaneLoops(VectorMath):
    """Flags for exact vectorised loops (``VectorizeCellMap(exact=True)``; no flag changes a value): those of
    :class:`VectorMath` (``-fopenmp-simd`` for the ``omp simd`` loop and the wrappers' simd clones, no
    trapping or errno math, 512-bit vectors on x86-64, ``-fno-thread-jumps``) and ``-fno-tree-sink`` (GCC
    sinks a call that one branch uses into that branch, and a call under a branch keeps the loop scalar),
    ``-fno-unswitch-loops`` and the raised growth limits of :class:`AccurateVectorMath` (the exact ``pow`` inlines
    the checked accurate ``pow``: graupel's 26 copies in one loop passed GCC's limits, GCC left ``min``/``max``
    as calls and the loop scalar, 0.52 s against 0.21 s for ``blocked``) and ``-fno-tree-pre`` (partial
    redundancy elimination found a lane call computed in one branch and placed a copy of it under the
    other: a call under a branch, and the loop scalar), after the IEEE flags of ``ExactArithmetic`` (no
    contraction, no reciprocal math). No libmvec."""

    cmake_libraries: list[str] = []
    cmake_compile_flags = LOOP_FLAGS + INLINED_POW_FLAGS + ["-fno-tree-pre"] + libm_flags()
    dependencies: list[type] = [ExactArithmetic]


def _outer(mapping: dict, expr) -> symbolic.SymExpr:
    subs = {symbolic.pystr_to_symbolic(k): symbolic.pystr_to_symbolic(str(v)) for k, v in mapping.items()}
    return symbolic.pystr_to_symbolic(str(expr)).subs(subs)


CELL = "_sdfg_scan_cell"
"""The cell index of a ``columns="map"`` scan's kernel (the frontend's nodes have no map parameter)."""


@dataclass(frozen=True)
class Cells:
    """The one cell dimension the kernel blocks, as the node sees it.

    ``param`` and ``range`` (``begin:end``, end exclusive) are the map's; ``subsets`` the subset of its
    container each connector reads or writes for one cell, in the container's indices; ``mapping`` body
    symbol -> expression in the enclosing SDFG. ``columns="cells"``: the node's own properties.
    ``columns="map"`` (the frontend's ``sdfg_scan.scan``): the single non-axis index of 2-d operands,
    per-level connectors at the window's first level (the body indexes them with its level count and
    ``_st_<connector>`` strides, which ``mapping`` gives), K-less ones at the cell's element.
    """

    param: str
    range: str
    subsets: dict
    mapping: dict


def cells(node, state: dace.SDFGState) -> Cells | str:
    """The node's cell dimension (:class:`Cells`), or why the kernel cannot block it."""
    if node.columns == "cells":
        if len(node.cell_params) != 1:
            return f"blocks one cell dimension, the node's map has {len(node.cell_params)}"
        return Cells(node.cell_params[0], node.cell_ranges[0], dict(node.cell_subsets), dict(node.symbol_mapping))
    if node.columns != "map":
        return "needs the map over cells in the node (columns='cells'; LiftCellMap)"
    levels = per_level(node)
    if not levels:
        return "no per-level connector"
    ref = node.operand(state, levels[0])
    nd = len(ref.shape)
    axis = node.resolved_axis(nd)
    if nd != 2:
        return f"blocks one cell dimension, the operands have {nd - 1} column dimensions"
    col = 1 - axis
    cell = symbolic.pystr_to_symbolic(CELL)
    ops = {c: node.operand(state, c) for c in list(node.in_connectors) + list(node.out_connectors)}
    subs = {}
    for c, op in ops.items():
        steps = [r[2] for r in op.edge.data.subset.ndrange()]
        if c in levels:
            idx = [op.offset[d] + (steps[d] * cell if d == col else 0) for d in range(nd)]
        elif len(op.shape) == 1 and not isinstance(op.desc, dt.Scalar):
            idx = [op.offset[0] + steps[0] * cell]   # one value per column
        else:
            idx = list(op.offset)                     # one value for every column
        subs[c] = ", ".join(symbolic.symstr(i) for i in idx)
    mapping = mapped_symbols(node, node.body, node.levels(state), {c: ops[c].strides[axis] for c in levels},
                             state.sdfg.symbols)
    return Cells(CELL, f"0:{symbolic.symstr(ref.shape[col])}", subs, mapping)


def _parts(s) -> tuple[list, list, list]:
    """Top-level blocks before the loop, the loop's blocks' region, after the loop."""
    chain, b = [], s.sdfg.start_block
    while b is not None:
        chain.append(b)
        out = s.sdfg.out_edges(b)
        if len(out) > 1 or (out and (not out[0].data.is_unconditional() or out[0].data.assignments)):
            raise Unsupported("the body has branching, conditional or assigning top-level edges")
        b = out[0].dst if out else None
    i = chain.index(s.loop)
    return chain[:i], [s.loop], chain[i + 1:]


def _accessed(blocks) -> set[str]:
    names = set()
    for b in blocks:
        for st in ([b] if isinstance(b, dace.SDFGState) else b.all_states()):
            names |= {n.data for n in st.data_nodes()}
    return names


def check(node, state: dace.SDFGState, kcached: bool = False) -> str | None:
    """Why the blocked expansions cannot build ``node`` (None: they can; ``kcached``: with its
    level-offset reads served by rings)."""
    view = cells(node, state)
    if isinstance(view, str):
        return view
    if state is not None and state.sdfg.parent_nsdfg_node is not None:
        return "the node sits in a nested SDFG (the kernel reads the symbols of the top-level program)"
    try:
        kernel(node, state, if_convert=True, kcached=kcached)
    except (Unsupported, NotAScan) as e:
        return f"the body cannot be written as a block kernel: {e}"
    return None


def kernel(node, state: dace.SDFGState, if_convert: bool, block: int = BLOCK,
           kcached: bool = False, exact_math: bool = False) -> tuple[str, dict]:
    """The C++ of the block kernel and the connector types (pointers) of the tasklet; ``kcached``: of
    the body whose level-offset reads come from rings (module docstring); ``exact_math`` (with
    ``if_convert``): ``exp``/``log``/``pow`` in their exact lane form (:data:`SCALAR_LANE_MATH`)."""
    view = cells(node, state)
    if isinstance(view, str):
        raise Unsupported(view)
    body = body_copy(node)
    if kcached:
        from sdfg_scan.expansions.scan_kcached import cache_levels

        plan = cache_levels(body)
        if isinstance(plan, str):
            raise Unsupported(f"no level-offset reads to cache ({plan})")
    s = analyze_scan(body, prologue=True)
    pre, loop, post = _parts(s)
    var = s.variable
    for b in pre + post:
        if var in b.free_symbols:
            raise Unsupported(f"the body uses its loop variable '{var}' outside the loop")
    param = view.param
    cell = symbolic.pystr_to_symbolic(param)
    rng = subsets.Range.from_string(view.range)
    (cb, ce, cs), = rng.ndrange()
    if symbolic.inequal_symbols(cs, 1):
        raise Unsupported("the map over cells has a non-unit step")
    start, stop = _outer(view.mapping, s.start), _outer(view.mapping, s.stop)
    if cell in start.free_symbols | stop.free_symbols:
        raise Unsupported("the level range depends on the cell")

    syms = {k: f"_s_{k}" for k in view.mapping}
    syms[var] = f"_s_{var}"
    top = Scope(body, {}, syms)
    conn_types = {}
    ptrs = []
    unit: list[str] = []   # stride symbols along the cells, known only at run time: the kernel is versioned
    for c in list(node.in_connectors) + list(node.out_connectors):
        op = node.operand(state, c)
        conn_types[c] = dace.pointer(op.dtype)
        inner = body.arrays[c]
        if isinstance(op.desc, dt.Scalar):
            off = "0"
        else:
            sub = subsets.Range.from_string(view.subsets[c])
            if len(sub) != len(op.desc.shape):
                raise Unsupported(f"connector '{c}': per-cell subset rank differs from its container's")
            unit += codegen.unknown_cell_strides(op.desc, codegen.cell_dims(sub, cell))
            off = sym2cpp(sum(((b - o) * st for (b, _, _), o, st in zip(sub.ndrange(), op.offset, op.desc.strides,
                                                                          strict=True)), 0))
        ptrs.append(f"{op.dtype.ctype}* const _p_{c} = {c} + ({off});")
        if isinstance(inner, dt.Scalar):
            top.data[c] = Ref(inner.dtype.ctype, lvalue=f"_p_{c}[0]", memory=True)
        else:
            if any(str(o) != "0" for o in inner.offset):
                raise Unsupported(f"body array '{c}' has a non-zero offset")
            top.data[c] = Ref(inner.dtype.ctype, base=f"_p_{c}", strides=[top.expr(x) for x in inner.strides],
                              memory=True)
    parts = {"pre": pre, "loop": list(loop[0].nodes()), "post": post}
    count: dict[str, int] = {}
    for blocks in parts.values():
        for n in _accessed(blocks):
            count[n] = count.get(n, 0) + 1
    hoisted = sorted(n for n, d in body.arrays.items() if d.transient and (count.get(n, 0) > 1 or n in s.carries))
    w = Writer()
    hoist_lines = []
    for h in hoisted:
        d = body.arrays[h]
        if not isinstance(d, dt.Scalar) and d.total_size != 1:
            raise Unsupported(f"carried transient '{h}' is not a scalar")
        hoist_lines.append(f"alignas(64) {storage_type(d.dtype.ctype, if_convert)} _h_{h}[{block}];")
        top.data[h] = Ref(d.dtype.ctype, lvalue=f"_h_{h}[{LANE}]")

    def part(blocks, simd: bool) -> list[str]:
        pw = Writer()
        pw._ids = w._ids
        bw = BodyWriter(pw, if_convert, exact_math, predicated=PREDICATED)
        pw.depth = 1
        scope = Scope(body, dict(top.data), syms)
        for name, d in body.arrays.items():
            if d.transient and name not in top.data and name in _accessed(blocks):
                scope.data[name] = bw.local(f"_t_{name}", d, scope)
        for b in blocks:
            if isinstance(b, dace.SDFGState):
                bw.state(b, scope)
            elif isinstance(b, ConditionalBlock):
                bw.conditional(b, scope)
            elif isinstance(b, ControlFlowRegion):   # the level loop: its blocks (the loop is written below)
                bw.region(b, scope)
            else:
                raise Unsupported(f"top-level block '{b.label}' is a {type(b).__name__}")
        head = ["#pragma omp simd"] if simd else []
        return head + [f"for (long long {LANE} = 0; {LANE} < _n; ++{LANE}) {{",
                       f"    const long long {param} = _c0 + {LANE};", "    __CELL_PRELUDE__"] + pw.lines + ["}"]

    lines_pre = part(pre, False) if pre else []
    lines_loop = part(loop, True)
    lines_post = part(post, False) if post else []
    used = _used(syms, lines_pre + lines_loop + lines_post)
    prelude = [f"    const auto {syms[k]} = {sym2cpp(symbolic.pystr_to_symbolic(str(v)))};"
               for k, v in view.mapping.items() if syms[k] in used] + ["    " + p for p in ptrs]

    def fill(lines):
        out = []
        for ln in lines:
            out += prelude if ln.strip() == "__CELL_PRELUDE__" else [ln]
        return out

    if s.direction == "forward":
        head = f"for (long long {syms[var]} = {sym2cpp(start)}; {syms[var]} < {sym2cpp(stop)}; ++{syms[var]}) {{"
    else:
        head = f"for (long long {syms[var]} = {sym2cpp(stop)} - 1; {syms[var]} >= {sym2cpp(start)}; --{syms[var]}) {{"
    code = [f"const long long _cb = {sym2cpp(cb)};", f"const long long _ce = {sym2cpp(ce)} + 1;",
            # cells per block: up to the block arrays' capacity, fewer where there are fewer cells than threads
            # times the capacity (a multiple of 8, so that every thread gets a block; of 64 if-converted:
            # BLOCK_SIZE_CODE says why)
            f"const long long _bs = sdfg_scan_block_size(_ce - _cb, {block}, {IF_CONVERTED_QUANTUM if if_convert else 8});",
            "const long long _nblk = (_ce - _cb + _bs - 1) / _bs;"]
    blocks = ["#pragma omp parallel for schedule(static)",
              "for (long long _blk = 0; _blk < _nblk; ++_blk) {",
              "    const long long _c0 = _cb + _blk * _bs;",
              "    const long long _n = (_ce - _c0) < _bs ? (_ce - _c0) : _bs;"]
    blocks += ["    " + h for h in hoist_lines]
    blocks += ["    " + ln for ln in fill(lines_pre)]
    blocks += ["    " + head] + ["        " + ln for ln in fill(lines_loop)] + ["    }"]
    blocks += ["    " + ln for ln in fill(lines_post)] + ["}"]
    code += codegen.versioned(blocks, unit)
    return "\n".join(code), conn_types


def _used(syms: dict[str, str], lines: list[str]) -> set[str]:
    words = set(re.findall(r"[A-Za-z_][A-Za-z_0-9]*", "\n".join(lines)))
    return {c for c in syms.values() if c in words}




# -- the expansions -------------------------------------------------------------------------------

def _applies(node, ctx, kcached: bool = False) -> str | None:
    if ctx.layout.contiguity != "cell":
        return f"vectorises over cells; the operands are {ctx.layout.contiguity}-contiguous, not cell-contiguous"
    return check(node, ctx.state, kcached)


BLOCK_SIZE_CODE = """
#ifndef SDFG_SCAN_BLOCK_SIZE
#define SDFG_SCAN_BLOCK_SIZE
#ifdef _OPENMP
#include <omp.h>
#endif
// cells per block of a blocked kernel: the block arrays' capacity, or fewer (a multiple of q) where the cells
// would give some threads no block (100 cells and 2 threads, q = 8: two blocks of 56 and 44, not one of 100).
// q is 64 for an if-converted cell loop: it keeps its bools as bytes, so GCC vectorises it 64 cells at a time
// at 512 bits (32 at 256), and a block of fewer cells never enters the vector loop: it runs in the loop's
// epilogue, partly one cell at a time with every branch computed (graupel_run, 100 cells, under replay:
// blocks of 56 and 44 0.77x, of 64 and 36 1.01x to 1.04x against gt4py's build, two runs)
static inline long long sdfg_scan_block_size(long long n, long long cap, long long q) {
#ifdef _OPENMP
    const long long t = omp_get_max_threads() > 0 ? omp_get_max_threads() : 1;
#else
    const long long t = 1;
#endif
    long long b = ((n + t - 1) / t + q - 1) / q * q;
    if (b < q) b = q;
    return b > cap ? cap : b;
}
#endif
"""
"""The block size of a blocked kernel at run time (any block size gives the same values: cells are independent)."""


def _unshadowed(node, state) -> None:
    """Rename the connectors of ``node`` that are also names of the enclosing SDFG (a container, a symbol,
    a constant, an enclosing map's parameter). A C++ tasklet declares each connector as a local
    (``double* c = &c[0];`` when connector and container share a name, as in gt4py's compiled programs): the
    local would shadow the name it is initialised from."""
    sdfg = state.sdfg
    taken = set(sdfg.arrays) | set(sdfg.symbols) | set(sdfg.constants)
    scope = state.entry_node(node)
    while scope is not None:
        taken |= {str(p) for p in getattr(getattr(scope, "map", None), "params", ())}
        scope = state.entry_node(scope)
    clash = sorted(c for c in set(node.in_connectors) | set(node.out_connectors) if c in taken)
    if not clash:
        return
    used = taken | set(node.in_connectors) | set(node.out_connectors) | body_names(node.body)
    node.rename_connectors(state, {c: fresh_name(c, used, "_c") for c in clash})


def _prepare(node, state, name: str, kcached: bool = False) -> None:
    """Connectors renamed where they would shadow (:func:`_unshadowed`), the node validated, and a clear error
    naming expansion ``name`` where the blocked kernels cannot build it."""
    _unshadowed(node, state)
    node.validate(state.sdfg, state)
    why = check(node, state, kcached)
    if why is not None:
        raise node.error(f"the {name} expansion cannot build this scan: {why}; use 'levels_outside' or 'sequential'")


def _cpp_tasklet(node, code: str, types: dict, code_global: str) -> dace.nodes.Tasklet:
    """The C++ tasklet that replaces ``node``: its connectors typed as :func:`kernel` says."""
    ins = {c: types[c] for c in node.in_connectors}
    outs = {c: types[c] for c in node.out_connectors}
    return dace.nodes.Tasklet(f"{node.label}_blocked", ins, outs, code, language=dace.Language.CPP,
                              code_global=code_global)


def _tasklet(node, state, if_convert: bool, kcached: bool = False, exact_math: bool = False) -> dace.nodes.Tasklet:
    _prepare(node, state, "blocked_kcached" if kcached else "blocked" if not if_convert
             else "blocked_simd_exact" if exact_math else "blocked_simd", kcached)
    code, types = kernel(node, state, if_convert, kcached=kcached, exact_math=exact_math)
    return _cpp_tasklet(node, code, types, BLOCK_SIZE_CODE + ((scalar_lane_math() if exact_math
                                                               else PREDICATED_MATH if PREDICATED else VECTOR_MATH)
                                                              if if_convert else ""))


class _BlockedExpansion(ExpandTransformation):
    """What both blocked expansions share: the same check, a cost without a fork per level, one tasklet."""

    if_convert = False
    kcached = False
    exact_math = False

    @classmethod
    def applies(cls, node, ctx) -> str | None:
        return _applies(node, ctx, cls.kcached)

    @classmethod
    def cost(cls, node, ctx) -> float:
        return stream_seconds(ctx, efficiency_of(cls, ctx), chain=False) + CELL_OUTER_SECONDS   # one region

    @classmethod
    def expansion(cls, node, parent_state, parent_sdfg):
        return _tasklet(node, parent_state, if_convert=cls.if_convert, kcached=cls.kcached, exact_math=cls.exact_math)


@dace.library.expansion
@declare(targets=("cpu",), reproducibility="exact", efficiency={"cpu:cell": 0.45})   # below levels_outside: 7.5 vs 5.9 ms (forward sweep, 20480 x 65)
class ExpandScanBlocked(_BlockedExpansion):
    """``columns="cells"`` on the CPU: blocks of :data:`BLOCK` contiguous cells in one parallel region;
    per block the level loop around a loop over the block's cells that runs the inlined body (carries in
    ``[B]`` arrays, per-cell ``if``). Scalar libm calls, the original operation order: bitwise the
    ``sequential`` result under :class:`ExactArithmetic`'s flags."""

    environments = [ExactArithmetic]


@dace.library.expansion
@declare(targets=("cpu",), reproducibility="replay", efficiency={"cpu:cell": 0.3})
class ExpandScanBlockedSIMD(_BlockedExpansion):
    """``blocked`` with branches if-converted (both arms computed, results selected) and vector
    ``exp``/``log``/``pow`` from glibc's libmvec (:class:`VectorMath`), so GCC vectorises the loop over a
    block's cells; each call of an if-converted branch gets the branch's lane predicate, and a vector none of
    whose cells takes the branch makes no libmvec call (:data:`PREDICATED_MATH`, the same values).
    Replay: deterministic for one machine and build, within rounding of the scalar libm.
    Its streaming efficiency (0.3) is that of a body without libm calls, whose selects cost more than
    ``blocked``'s branches; with libm calls the body's vector calls (``vector_math``, see
    :func:`sdfg_scan.cost.math_seconds`) outweigh that, so ``auto`` under ``replay`` picks it for
    graupel (20480 x 65: 0.349 / 0.450 s against ``blocked`` 0.393 / 0.482 s, two runs)."""

    environments = [VectorMath]
    if_convert = True
    vector_math = True
    vector_blocks = (BLOCK, IF_CONVERTED_QUANTUM)   # the cost model's view of its blocks (cost.vector_lane_ns)


@dace.library.expansion
@declare(targets=("cpu",), reproducibility="exact", efficiency={"cpu:cell": 0.3})
class ExpandScanBlockedExactSIMD(_BlockedExpansion):
    """``blocked_simd``'s if-converted loop over a block's cells, exact: the arithmetic in vectors under the
    IEEE-strict flags (each lane the program's operations in the program's order), ``exp``/``log`` glibc's
    scalar calls per lane whose branch the program takes, ``pow`` the checked accurate ``pow`` with glibc's
    call in the lanes where its value is not provably glibc's (:data:`SCALAR_LANE_MATH`,
    ``vector_pow.CHECK_ULPS``). Bitwise ``blocked`` and the strict build. Ranked below ``blocked`` (the
    cost model counts its libm calls as scalar ones and its selects like ``blocked_simd``'s): if-converted,
    every lane computes every branch's ``pow``, which on graupel outweighs what the checked ``pow`` saves
    (0.248 s against 0.202 s for ``blocked``, benchmarks/HISTORY.md, "Exact vectorised loops"); pin it for
    bodies whose ``pow`` calls are not under branches."""

    environments = [ScalarLaneLoops]
    if_convert = True
    exact_math = True


TIMED_TRIALS = 3
"""Calls of each kernel ``blocked_timed`` times before it keeps the faster one (the minimum of each kernel's)."""

TIMED_KERNELS = ("blocked", "blocked_simd_exact")
"""``blocked_timed``'s two kernels, in the order of its choice index (0, 1)."""

TIMED_CHOICE_CODE = """
#ifndef SDFG_SCAN_TIMED_CHOICE
#define SDFG_SCAN_TIMED_CHOICE
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
// blocked_timed: two kernels of one scan that give bitwise the same values (blocked: the body per cell,
// glibc's calls where the program's branches take them; blocked_simd_exact: if-converted and vectorised, the
// checked pow in every lane). Which is faster depends on the machine (glibc's scalar pow against the
// vector arithmetic) and on the data (how many cells take each branch), so the scan's first calls run them
// alternately, TRIALS each, and every later call runs the one with the smaller minimum. The choice changes
// the time, never a value. SDFG_SCAN_TIMED_KERNEL=blocked or =blocked_simd_exact runs that one (no timing);
// SDFG_SCAN_TIMED_REPORT=1 prints the choice to stderr when it is made.
struct sdfg_scan_timed_choice {
    const char* label;
    double best[2] = {1e300, 1e300};
    int calls = 0;
    int chosen = -1;
    explicit sdfg_scan_timed_choice(const char* l) : label(l) {}
    bool warned = false;
    int next() {
        const char* f = std::getenv("SDFG_SCAN_TIMED_KERNEL");
        if (f != nullptr && std::strcmp(f, "blocked") == 0) return 2;
        if (f != nullptr && std::strcmp(f, "blocked_simd_exact") == 0) return 3;
        if (f != nullptr && f[0] != '\\0' && !warned) {
            warned = true;
            std::fprintf(stderr, "sdfg_scan: %s: SDFG_SCAN_TIMED_KERNEL='%s' is neither 'blocked' nor "
                         "'blocked_simd_exact'; blocked_timed times both and keeps the faster\\n", label, f);
        }
        return chosen >= 0 ? chosen : calls % 2;
    }
    void record(int k, double seconds, int trials) {
        if (k > 1 || chosen >= 0) return;
        if (seconds < best[k]) best[k] = seconds;
        if (++calls < 2 * trials) return;
        chosen = best[1] < best[0] ? 1 : 0;
        const char* r = std::getenv("SDFG_SCAN_TIMED_REPORT");
        if (r != nullptr && r[0] != '\\0' && std::strcmp(r, "0") != 0)
            std::fprintf(stderr, "sdfg_scan: %s: blocked_timed keeps %s (%.4g s; %s %.4g s), min of %d calls each\\n",
                         label, chosen ? "blocked_simd_exact" : "blocked", best[chosen],
                         chosen ? "blocked" : "blocked_simd_exact", best[1 - chosen], trials);
    }
};
#endif
"""
"""``code_global`` of ``blocked_timed``'s choice between its kernels (:class:`ExpandScanBlockedTimed`)."""


def _timed_tasklet(node, state) -> dace.nodes.Tasklet:
    """``blocked_timed``'s tasklet: both kernels, the choice per call (:data:`TIMED_CHOICE_CODE`)."""
    _prepare(node, state, "blocked_timed")
    plain, types = kernel(node, state, if_convert=False)
    simd, _ = kernel(node, state, if_convert=True, exact_math=True)
    label = node.label.replace("\\", "\\\\").replace('"', '\\"')
    code = "\n".join([f'static sdfg_scan_timed_choice _sdfg_scan_tc("{label}");',
                      "const int _sdfg_scan_k = _sdfg_scan_tc.next();",
                      "const auto _sdfg_scan_t0 = std::chrono::steady_clock::now();",
                      "if (_sdfg_scan_k % 2 == 0) {", plain, "} else {", simd, "}",
                      "_sdfg_scan_tc.record(_sdfg_scan_k, std::chrono::duration<double>("
                      f"std::chrono::steady_clock::now() - _sdfg_scan_t0).count(), {TIMED_TRIALS});"])
    return _cpp_tasklet(node, code, types, BLOCK_SIZE_CODE + scalar_lane_math() + TIMED_CHOICE_CODE)


@dace.library.expansion
@declare(targets=("cpu",), reproducibility="exact", efficiency={"cpu:cell": 0.45})
class ExpandScanBlockedTimed(_BlockedExpansion):
    """``blocked`` and ``blocked_simd_exact`` in one tasklet, the faster kept at run time
    (:data:`TIMED_CHOICE_CODE`): the first ``2 x`` :data:`TIMED_TRIALS` calls alternate, every later call runs
    the kernel with the smaller minimum. The two give bitwise the same values (both are bitwise the strict
    build), so the choice is a matter of time only, and the class stays exact. Which one wins depends on the
    machine and the data: graupel_run_dyn (20480 x 65) ran ``blocked_simd_exact`` 0.400 s against ``blocked``
    0.519 s on an Intel Xeon (model 207) whose glibc ``pow`` takes 19 ns a call, and 0.344 s against 0.293 s
    on another (model 167, stop 42; benchmarks/HISTORY.md, "Stop 59"). Applies where both apply and the body
    makes libm calls (without them the two differ by if-conversion only, and ``blocked`` serves); costed just
    below ``blocked``, so ``auto`` prefers it there. The program builds with :class:`ScalarLaneLoops`' flags
    (no flag changes a value) and holds both kernels' code."""

    environments = [ScalarLaneLoops]

    @classmethod
    def applies(cls, node, ctx) -> str | None:
        if not math_calls(node):
            return "the body makes no libm call (exp, log, pow): 'blocked' serves it without a second kernel"
        return _applies(node, ctx)

    @classmethod
    def cost(cls, node, ctx) -> float:
        return 0.999 * super().cost(node, ctx)   # never slower than blocked but for its trial calls

    @classmethod
    def expansion(cls, node, parent_state, parent_sdfg):
        return _timed_tasklet(node, parent_state)


@dace.library.expansion
@declare(targets=("cpu",), reproducibility="exact", efficiency={"cpu:cell": 0.45})   # blocked's: ties go to blocked
class ExpandScanBlockedKCached(_BlockedExpansion):
    """``blocked`` with the body's level-offset input reads served by ``[W, B]`` rings (module
    docstring); applies only where ``kcached`` finds such reads. Bitwise ``blocked``."""

    environments = [ExactArithmetic]
    kcached = True


__all__ = ["BLOCK", "REPLAY_ARITHMETIC", "TIMED_CHOICE_CODE", "TIMED_KERNELS", "TIMED_TRIALS", "ExpandScanBlockedTimed", "VECTOR_MATH", "PREDICATED_MATH", "accurate_pow_math", "scalar_lane_math", "AccurateVectorMath", "ExpandScanBlocked", "ExpandScanBlockedKCached",
           "ExpandScanBlockedExactSIMD", "ExpandScanBlockedSIMD", "ScalarLaneLoops", "VectorMath", "check", "kernel"]
