// sdfg_scan: glibc's errno-free entry points for the scalar double pow, exp and log of a program.
//
// glibc's pow@GLIBC_2.29 (and exp, log) is a wrapper: it calls the implementation (__ieee754_pow, chosen
// by ifunc for the CPU, the FMA variant on x86-64 with FMA) and then inspects the result to set errno.
// The implementation itself is exported as __pow_finite (a compat symbol since glibc 2.31, reachable
// with .symver). Calling it skips the wrapper: the same function on the same arguments, so the same
// bits (sdfg_scan's tests compare both builds bitwise), without errno, which no DaCe program reads.
// On graupel the wrapper was 11 % of the `exact` build's run time.
//
// The overloads below are more specific than DaCe's templates dace::math::pow/exp/log (a non-template
// function wins a tie), so every dace::math::pow(double, double) of the program's tasklets and of
// sdfg_scan's exact kernels calls the entry point. Calls with an integral exponent keep DaCe's ipow.
// Off under -ffast-math (the compiler may then rewrite pow(x, 0.5) as sqrt(x) and the like: keep that).
// sdfg_scan defines SDFG_SCAN_LIBM_FINITE (215: the symbols carry version GLIBC_2.15, 217: GLIBC_2.17)
// only where it found the symbols in this machine's libm (sdfg_scan.expansions.environments); without it
// this header declares nothing.
#ifndef SDFG_SCAN_LIBM_H
#define SDFG_SCAN_LIBM_H
#if defined(SDFG_SCAN_LIBM_FINITE) && defined(__GLIBC__) && !defined(__CUDACC__) && !defined(__FAST_MATH__)
#if SDFG_SCAN_LIBM_FINITE == 215
#define SDFG_SCAN_LIBM_VERSION "GLIBC_2.15"
#elif SDFG_SCAN_LIBM_FINITE == 217
#define SDFG_SCAN_LIBM_VERSION "GLIBC_2.17"
#endif
#ifdef SDFG_SCAN_LIBM_VERSION
extern "C" double __pow_finite(double, double) noexcept;
extern "C" double __exp_finite(double) noexcept;
extern "C" double __log_finite(double) noexcept;
__asm__(".symver __pow_finite,__pow_finite@" SDFG_SCAN_LIBM_VERSION);
__asm__(".symver __exp_finite,__exp_finite@" SDFG_SCAN_LIBM_VERSION);
__asm__(".symver __log_finite,__log_finite@" SDFG_SCAN_LIBM_VERSION);
namespace dace {
namespace math {
// What the compiler folds stays with it: constant arguments (evaluated at compile time), and constant
// integral exponents (GCC writes pow(x, 2.0) as x * x and pow(x, -1.0) as 1 / x even under IEEE flags).
#define SDFG_SCAN_FOLDED(x) __builtin_constant_p(x)
__attribute__((always_inline)) static inline double pow(double a, double b) {
    if ((SDFG_SCAN_FOLDED(a) && SDFG_SCAN_FOLDED(b)) || (SDFG_SCAN_FOLDED(b) && b == __builtin_trunc(b)))
        return std::pow(a, b);
    return __pow_finite(a, b);
}
__attribute__((always_inline)) static inline double exp(double a) {
    return SDFG_SCAN_FOLDED(a) ? std::exp(a) : __exp_finite(a);
}
__attribute__((always_inline)) static inline double log(double a) {
    return SDFG_SCAN_FOLDED(a) ? std::log(a) : __log_finite(a);
}
#undef SDFG_SCAN_FOLDED
}  // namespace math
}  // namespace dace
#endif
#endif
#endif
