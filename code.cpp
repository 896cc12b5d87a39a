/* DaCe AUTO-GENERATED FILE. DO NOT MODIFY */
#include <dace/dace.h>
#include "../../include/hash.h"
#include "/work/main/sdfg_scan/expansions/sdfg_scan_libm.h"

struct prog_state_t {

};


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
#pragma omp declare simd notinbranch
static inline double _sdfg_scan_vpow(double x, double y) {
    // a constant exponent that is not an integer (known once inlined at a call site): exp(y log x), two
    // fast vector calls instead of libmvec's pow (and one log for several powers of the same base).
    // A base that is not positive (a zero species in a branch computed for every lane) would send the
    // vector through libmvec's special-case path, which calls scalar log for each such lane: such lanes
    // take the log of 1 and get pow's value selected back (+0 or +inf for +-0, +inf or +0 for -inf, NaN
    // for a negative or NaN base: the values exp(y log x) gave them before)
    if (__builtin_constant_p(y) && y != __builtin_floor(y)) {
        const bool positive = x > 0.0;
        const double r = exp(y * log(positive ? x : 1.0));
        const double inf = __builtin_inf();
        return positive ? r : x == 0.0 ? (y > 0.0 ? 0.0 : inf) : x == -inf ? (y > 0.0 ? inf : 0.0)
    : (x - x) / (x - x); }
    // a constant base that is positive, finite and not 1 (icon4py's power(10, polynomial)): one vector exp
    // of y times the folded log (pow's values for y = 0, +-inf and NaN too)
    if (__builtin_constant_p(x) && x > 0.0 && x != 1.0 && x < __builtin_inf())
    return exp(y * log(x));
return pow(x, y); }
// other argument types (a float, an integral exponent: DaCe's integer power): DaCe's own function, as the
// program wrote it (a non-template overload wins for doubles)
template <typename T> static inline auto _sdfg_scan_vexp(T x) { return dace::math::exp(x); }
template <typename T> static inline auto _sdfg_scan_vlog(T x) { return dace::math::log(x); }
template <typename A, typename B> static inline auto _sdfg_scan_vpow(A x, B y) { return dace::math::pow(x, y); }
#include <type_traits>
#define SDFG_SCAN_QUIET(name, builtin, op)     template <typename A, typename B> static inline bool name(A a, B b) {         if constexpr (std::is_floating_point_v<A> || std::is_floating_point_v<B>) {             using T = std::common_type_t<A, B>; return builtin(T(a), T(b));         } else { return a op b; } }
SDFG_SCAN_QUIET(_sdfg_scan_gt, __builtin_isgreater, >)
SDFG_SCAN_QUIET(_sdfg_scan_ge, __builtin_isgreaterequal, >=)
SDFG_SCAN_QUIET(_sdfg_scan_lt, __builtin_isless, <)
SDFG_SCAN_QUIET(_sdfg_scan_le, __builtin_islessequal, <=)
#undef SDFG_SCAN_QUIET
#endif

static void __attribute__((noinline, optimize("no-tree-pre"))) _sdfg_scan_map_prog_10_0_0(double* _r_q, double* _r_rho, double* _r_t, double* _r_y, bool* _w_fl, double* _w_out, const int K, const int N) {
    const long long _b_k = 0, _e_k = (K - 1) + 1;
    const long long _b_c = 0, _e_c = (N - 1) + 1;
    const long long _nblk = (_e_c - _b_c + 255) / 256;
    const long long _ntask = (_e_k - _b_k > 0 ? _e_k - _b_k : 0) * _nblk;
    #pragma omp parallel for schedule(static)
    for (long long _task = 0; _task < _ntask; ++_task) {
        long long _r = _task;
        const long long _blk = _r % _nblk; _r /= _nblk;
        const long long _m_k = _b_k + _r % (_e_k - _b_k); _r /= (_e_k - _b_k);
        const long long _c0 = _b_c + _blk * 256;
        const long long _n = (_e_c - _c0) < 256 ? (_e_c - _c0) : 256;
        #pragma omp simd
        for (long long _l = 0; _l < _n; ++_l) {
            const long long _m_c = _c0 + _l;
            {
                double _n0_sel;
                double _n0_q_slice_pow_0_75;
                double _n0___tmp1;
                double _n0_sel_0;
                double _n0_q_slice_div_30_0;
                double _n0_q_slice_30_0_minus_y_slice;
                double _n0_m;
                {
                    double __out;
                    __out = 0.0;
                    _n0_sel = __out;
                }
                const auto _a1 = _sdfg_scan_gt((_r_q[(_m_k) * (N) + (_m_c) * (1)]), 1e-15);
                const bool _c2 = _a1;
                double _sel3 = _n0_q_slice_pow_0_75;
                double _sel4 = _n0___tmp1;
                double _sel5 = _n0_sel_0;
                double _sel6 = _n0_sel;
                {
                    {
                        double __in1 = _r_q[(_m_k) * (N) + (_m_c) * (1)];
                        double __out;
                        __out = _sdfg_scan_vpow(__in1, 0.75);
                        _sel3 = __out;
                    }
                    {
                        double __in2 = _sel3;
                        double __out;
                        __out = (4.0 * __in2);
                        _sel4 = __out;
                    }
                    {
                        double __in2 = _r_rho[(_m_k) * (N) + (_m_c) * (1)];
                        double __in1 = _sel4;
                        double __out;
                        __out = (__in1 / __in2);
                        _sel5 = __out;
                    }
                    {
                        double __inp = _sel5;
                        double __out;
                        __out = __inp;
                        _sel6 = __out;
                    }
                }
                _n0_q_slice_pow_0_75 = (_c2 ? _sel3 : _n0_q_slice_pow_0_75);
                _n0___tmp1 = (_c2 ? _sel4 : _n0___tmp1);
                _n0_sel_0 = (_c2 ? _sel5 : _n0_sel_0);
                _n0_sel = (_c2 ? _sel6 : _n0_sel);
                const auto _a7 = _sdfg_scan_lt((_r_t[(_m_k) * (N) + (_m_c) * (1)]), 273.15);
                const auto _a8 = _sdfg_scan_gt((_n0_sel), 0.0);
                const bool _c9 = (_a7 && _a8);
                double _sel10 = _n0_q_slice_div_30_0;
                double _sel11 = _n0_q_slice_30_0_minus_y_slice;
                double _sel12 = _n0_m;
                {
                    {
                        double __in1 = _r_q[(_m_k) * (N) + (_m_c) * (1)];
                        double __out;
                        __out = (__in1 / 30.0);
                        _sel10 = __out;
                    }
                    {
                        double __in2 = _r_y[(_m_k) * (N) + (_m_c) * (1)];
                        double __in1 = _sel10;
                        double __out;
                        __out = (__in1 - __in2);
                        _sel11 = __out;
                    }
                    {
                        double __in_a = _n0_sel;
                        double __in_b = _sel11;
                        double __out;
                        __out = min(__in_a, __in_b);
                        _sel12 = __out;
                    }
                }
                _n0_q_slice_div_30_0 = (_c9 ? _sel10 : _n0_q_slice_div_30_0);
                _n0_q_slice_30_0_minus_y_slice = (_c9 ? _sel11 : _n0_q_slice_30_0_minus_y_slice);
                _n0_m = (_c9 ? _sel12 : _n0_m);
                {
                    double __inp = _n0_m;
                    double __out;
                    __out = __inp;
                    _w_out[(_m_k) * (N) + (_m_c) * (1)] = __out;
                }
                {
                    bool __out;
                    __out = (_a7 && _a8);
                    _w_fl[(_m_k) * (N) + (_m_c) * (1)] = __out;
                }
            }
        }
    }
}

void __program_prog_internal(prog_state_t*__state, bool * __restrict__ fl, double * __restrict__ out, double * __restrict__ q, double * __restrict__ rho, double * __restrict__ t, double * __restrict__ y, int K, int N)
{

    {

        {
            double* _r_q = &q[0];
            double* _r_rho = &rho[0];
            double* _r_t = &t[0];
            double* _r_y = &y[0];
            bool* _w_fl = fl;
            double* _w_out = out;

            ///////////////////
            _sdfg_scan_map_prog_10_0_0(_r_q, _r_rho, _r_t, _r_y, _w_fl, _w_out, K, N);
            ///////////////////

        }

    }
}

DACE_EXPORTED void __program_prog(prog_state_t *__state, bool * __restrict__ fl, double * __restrict__ out, double * __restrict__ q, double * __restrict__ rho, double * __restrict__ t, double * __restrict__ y, int K, int N)
{
    __program_prog_internal(__state, fl, out, q, rho, t, y, K, N);
}

DACE_EXPORTED prog_state_t *__dace_init_prog(int K, int N)
{

    int __result = 0;
    prog_state_t *__state = new prog_state_t();

    if (__result) {
        delete __state;
        return nullptr;
    }

    if (__result) {
        delete __state;
        return nullptr;
    }

    return __state;
}

DACE_EXPORTED int __dace_exit_prog(prog_state_t *__state)
{

    int __err = 0;
    delete __state;
    return __err;
}

#include <dace/dace.h>
typedef void * progHandle_t;
extern "C" progHandle_t __dace_init_prog(int K, int N);
extern "C" int __dace_exit_prog(progHandle_t handle);
extern "C" void __program_prog(progHandle_t handle, bool * __restrict__ fl, double * __restrict__ out, double * __restrict__ q, double * __restrict__ rho, double * __restrict__ t, double * __restrict__ y, int K, int N);

#include <cstdlib>
#include "../include/prog.h"

int main(int argc, char **argv) {
    progHandle_t handle;
    int err;
    int K = 42;
    int N = 42;
    bool * __restrict__ fl = (bool*) calloc((K * N), sizeof(bool));
    double * __restrict__ out = (double*) calloc((K * N), sizeof(double));
    double * __restrict__ q = (double*) calloc((K * N), sizeof(double));
    double * __restrict__ rho = (double*) calloc((K * N), sizeof(double));
    double * __restrict__ t = (double*) calloc((K * N), sizeof(double));
    double * __restrict__ y = (double*) calloc((K * N), sizeof(double));


    handle = __dace_init_prog(K, N);
    __program_prog(handle, fl, out, q, rho, t, y, K, N);
    err = __dace_exit_prog(handle);

    free(fl);
    free(out);
    free(q);
    free(rho);
    free(t);
    free(y);


    return err;
}
