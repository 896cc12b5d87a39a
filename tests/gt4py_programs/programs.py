"""gt4py programs with ``scan_operator``s (the shapes of icon4py's scans) and their NumPy reference loops.

Each entry of :data:`PROGRAMS` is a :class:`Case`: the gt4py program, the names of its input and output
fields (all ``Field[[Cell, K], float64]``) and a NumPy function that computes the outputs from the
inputs with the same operations in the same order (so an IEEE-strict build matches it bit for bit).
Only ``+ - * /`` and comparisons are used in :data:`PROGRAMS`: no libm calls whose last bit could differ from
NumPy's (``RATE_POWER``'s reference calls glibc's ``pow`` through ``math.pow``).

Imported only where gt4py is installed (the gt4py venv, Python >= 3.12).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import gt4py.next as gtx
import numpy as np
from gt4py.next import astype, broadcast, exp, float64, power, where
from gt4py.next.experimental import concat_where

Cell = gtx.Dimension("Cell")
K = gtx.Dimension("K", kind=gtx.DimensionKind.VERTICAL)
CK = gtx.Field[gtx.Dims[Cell, K], gtx.float64]


# --- 1. cumulative sum (forward, scalar carry) -------------------------------------------------------
@gtx.scan_operator(axis=K, forward=True, init=0.0)
def _cumsum_scan(state: gtx.float64, x: gtx.float64) -> gtx.float64:
    return state + x


@gtx.field_operator
def _cumsum(x: CK) -> CK:
    return _cumsum_scan(x)


@gtx.program
def cumsum_k(x: CK, out: CK):
    _cumsum(x, out=out)


def cumsum_ref(x):
    out = np.empty_like(x)
    c = np.zeros(x.shape[0])
    for k in range(x.shape[1]):
        c = c + x[:, k]
        out[:, k] = c
    return (out,)


# --- 2. backward scan, tuple carry with a delay line (x of the level below) and a dead recurrence ------
# (a member the program drops that only updates itself: DeadCarryElimination removes it)
@gtx.scan_operator(axis=K, forward=False, init=(0.0, 0.0, 0.0))
def _backward_scan(state: tuple[gtx.float64, gtx.float64, gtx.float64], x: gtx.float64, w: gtx.float64
                   ) -> tuple[gtx.float64, gtx.float64, gtx.float64]:
    return state[0] * w + x * state[1], x, state[2] * w + 1.0


@gtx.field_operator
def _backward(x: CK, w: CK) -> CK:
    acc, _, _ = _backward_scan(x, w)
    return acc


@gtx.program
def backward_delay(x: CK, w: CK, out: CK):
    _backward(x, w, out=out)


def backward_delay_ref(x, w):
    out = np.empty_like(x)
    acc = np.zeros(x.shape[0])
    prev = np.zeros(x.shape[0])
    for k in range(x.shape[1] - 1, -1, -1):
        acc = acc * w[:, k] + x[:, k] * prev
        prev = x[:, k]
        out[:, k] = acc
    return (out,)


# --- 3. flag-gated two-species sedimentation (graupel's `_precip_and_t` shape) -------------------------
@gtx.scan_operator(axis=K, forward=True, init=(0.0, 0.0, 0.0, False))
def _precip_scan(state: tuple[gtx.float64, gtx.float64, gtx.float64, bool],
                 qr: gtx.float64, qs: gtx.float64, rho: gtx.float64, dz: gtx.float64
                 ) -> tuple[gtx.float64, gtx.float64, gtx.float64, bool]:
    activated = state[3] | (qr + qs > 0.5)
    r = (state[0] * 0.25 + qr * rho) / (rho + dz) if activated else qr
    s = (state[1] * 0.5 + qs * rho) / (rho + 2.0 * dz) if activated else qs
    flux = r * dz + s * (dz * 0.5) if activated else 0.0
    return r, s, flux, activated


@gtx.field_operator
def _precip(qr: CK, qs: CK, rho: CK, dz: CK) -> tuple[CK, CK, CK]:
    r, s, flux, _ = _precip_scan(qr, qs, rho, dz)
    return r, s, flux


@gtx.program
def precip_gated(qr: CK, qs: CK, rho: CK, dz: CK, qr_out: CK, qs_out: CK, flux: CK):
    _precip(qr, qs, rho, dz, out=(qr_out, qs_out, flux))


def precip_gated_ref(qr, qs, rho, dz):
    n, nk = qr.shape
    r, s, act = np.zeros(n), np.zeros(n), np.zeros(n, dtype=bool)
    outs = [np.empty_like(qr) for _ in range(3)]
    for k in range(nk):
        act = act | (qr[:, k] + qs[:, k] > 0.5)
        r = np.where(act, (r * 0.25 + qr[:, k] * rho[:, k]) / (rho[:, k] + dz[:, k]), qr[:, k])
        s = np.where(act, (s * 0.5 + qs[:, k] * rho[:, k]) / (rho[:, k] + 2.0 * dz[:, k]), qs[:, k])
        f = np.where(act, r * dz[:, k] + s * (dz[:, k] * 0.5), 0.0)
        outs[0][:, k], outs[1][:, k], outs[2][:, k] = r, s, f
    return tuple(outs)


@gtx.field_operator
def _precip_scaled(qr: CK, qs: CK, rho: CK, dz: CK) -> tuple[CK, CK, CK]:
    r, s, flux, _ = _precip_scan(qr * 2.0, qs, rho, dz)
    return r, s, flux


@gtx.program
def precip_scaled(qr: CK, qs: CK, rho: CK, dz: CK, qr_out: CK, qs_out: CK, flux: CK):
    """``precip_gated`` on ``qr * 2`` (exact): the scan reads a gt4py ``[Cell, K]`` temporary, whose strides gt4py
    sets only after the last CPU hook (``tests/test_gt4py_backend.py``, unit horizontal stride)."""
    _precip_scaled(qr, qs, rho, dz, out=(qr_out, qs_out, flux))


def precip_scaled_ref(qr, qs, rho, dz):
    return precip_gated_ref(qr * 2.0, qs, rho, dz)


@gtx.program
def precip_scaled_domain(qr: CK, qs: CK, rho: CK, dz: CK, qr_out: CK, qs_out: CK, flux: CK,
                         horizontal_start: gtx.int32, horizontal_end: gtx.int32, vertical_start: gtx.int32,
                         vertical_end: gtx.int32):
    """``precip_scaled`` on an explicit domain, as icon4py's programs bound theirs (one range for every
    output: what lets ``ResultWriteThrough`` prove that the scan writes only what is copied)."""
    _precip_scaled(qr, qs, rho, dz, out=(qr_out, qs_out, flux),
                   domain={Cell: (horizontal_start, horizontal_end), K: (vertical_start, vertical_end)})


# --- 4. the Thomas pair: forward sweep (tuple carry) + back substitution (backward) -------------------
@gtx.scan_operator(axis=K, forward=True, init=(0.0, 0.0))
def _sweep(state: tuple[gtx.float64, gtx.float64], a: gtx.float64, b: gtx.float64, c: gtx.float64,
           d: gtx.float64) -> tuple[gtx.float64, gtx.float64]:
    den = b - a * state[0]
    return c / den, (d - a * state[1]) / den


@gtx.scan_operator(axis=K, forward=False, init=0.0)
def _back(state: gtx.float64, cp: gtx.float64, dp: gtx.float64) -> gtx.float64:
    return dp - cp * state


@gtx.field_operator
def _thomas(a: CK, b: CK, c: CK, d: CK) -> CK:
    cp, dp = _sweep(a, b, c, d)
    return _back(cp, dp)


@gtx.program
def thomas_pair(a: CK, b: CK, c: CK, d: CK, x: CK):
    _thomas(a, b, c, d, out=x)


def thomas_pair_ref(a, b, c, d):
    n, nk = a.shape
    cp, dp = np.empty_like(a), np.empty_like(a)
    cprev, dprev = np.zeros(n), np.zeros(n)
    for k in range(nk):
        den = b[:, k] - a[:, k] * cprev
        cprev, dprev = c[:, k] / den, (d[:, k] - a[:, k] * dprev) / den
        cp[:, k], dp[:, k] = cprev, dprev
    x = np.empty_like(a)
    xn = np.zeros(n)
    for k in range(nk - 1, -1, -1):
        xn = dp[:, k] - cp[:, k] * xn
        x[:, k] = xn
    return (x,)


# --- 4b. the Thomas pair as icon4py's solve_w composes it: coefficients computed pointwise, the
# elimination (z_q = -c' convention) under concat_where(K > 0, ..., zeros), the substitution on all levels
# above CONCAT_LEVELS, the input below (a second concat_where, as solve_w keeps next_w below its last level)
CONCAT_LEVELS = 7
@gtx.scan_operator(axis=K, forward=True, init=(0.0, 0.0))
def _sweep_zq(state: tuple[gtx.float64, gtx.float64], a: gtx.float64, b: gtx.float64, c: gtx.float64,
              d: gtx.float64) -> tuple[gtx.float64, gtx.float64]:
    g = 1.0 / (b + a * state[0])
    return (0.0 - c) * g, (d - a * state[1]) * g


@gtx.scan_operator(axis=K, forward=False, init=0.0)
def _back_zq(state: gtx.float64, zq: gtx.float64, dp: gtx.float64) -> gtx.float64:
    return dp + state * zq


@gtx.field_operator
def _thomas_concat(p: CK, r: CK, s: CK) -> CK:
    a = p * r
    b = 4.0 + r * r
    c = s - p
    d = p + s
    zq, dp = concat_where(K > 0, _sweep_zq(a, b, c, d), (broadcast(0.0, (Cell,)), broadcast(0.0, (Cell,))))
    return concat_where(K < 7, _back_zq(zq, dp), p)   # 7 = CONCAT_LEVELS (gt4py takes no Python constant here)


@gtx.program
def thomas_concat(p: CK, r: CK, s: CK, x: CK):
    _thomas_concat(p, r, s, out=x)


@gtx.field_operator
def _thomas_concat_ones(p: CK, r: CK, s: CK) -> CK:
    a, b, c, d = p * r, 4.0 + r * r, s - p, p + s
    zq, dp = concat_where(K > 0, _sweep_zq(a, b, c, d), (broadcast(1.0, (Cell,)), broadcast(0.0, (Cell,))))
    return _back_zq(zq, dp)


@gtx.program
def thomas_concat_ones(p: CK, r: CK, s: CK, x: CK):
    """``thomas_concat`` whose top level of ``z_q`` is 1, not 0: not Thomas' pair (translated only)."""
    _thomas_concat_ones(p, r, s, out=x)


def thomas_concat_ref(p, r, s):
    x_all = p.copy()
    nk = min(CONCAT_LEVELS, p.shape[1])   # the system ends where the second concat_where takes p
    p, r, s = p[:, :nk], r[:, :nk], s[:, :nk]
    a, b, c, d = p * r, 4.0 + r * r, s - p, p + s
    n = p.shape[0]
    zq, dp = np.zeros_like(p), np.zeros_like(p)   # level 0: the concat_where's zeros
    zprev, dprev = np.zeros(n), np.zeros(n)
    for k in range(1, nk):
        g = 1.0 / (b[:, k] + a[:, k] * zprev)
        zprev, dprev = (0.0 - c[:, k]) * g, (d[:, k] - a[:, k] * dprev) * g
        zq[:, k], dp[:, k] = zprev, dprev
    x = np.empty_like(p)
    xn = np.zeros(n)
    for k in range(nk - 1, -1, -1):
        xn = dp[:, k] + xn * zq[:, k]
        x[:, k] = xn
    x_all[:, :nk] = x
    return (x_all,)


# --- 5. a damped cumulative sum with a scalar and explicit domain bounds (the exporter's static arguments) ---
@gtx.scan_operator(axis=K, forward=True, init=0.0)
def _damped_scan(state: gtx.float64, x: gtx.float64, alpha: gtx.float64) -> gtx.float64:
    return state * alpha + x


@gtx.field_operator
def _damped(x: CK, alpha: gtx.float64) -> CK:
    return _damped_scan(x, alpha)


@gtx.program
def damped_cumsum(x: CK, alpha: gtx.float64, out: CK, horizontal_start: gtx.int32, horizontal_end: gtx.int32,
                  vertical_start: gtx.int32, vertical_end: gtx.int32):
    _damped(x, alpha, out=out, domain={Cell: (horizontal_start, horizontal_end), K: (vertical_start, vertical_end)})


# --- 6. two scans reading the same input at other levels (forward: one below, backward: one above) -------
@gtx.scan_operator(axis=K, forward=False, init=0.0)
def _bwd_sum(state: gtx.float64, d: gtx.float64, w: gtx.float64) -> gtx.float64:
    return state * w + d


@gtx.field_operator
def _shifted_pair(x: CK, w: CK) -> tuple[CK, CK]:
    return _damped_scan(x(K - 1), w), _bwd_sum(x(K + 1) * 2.0, w)


@gtx.program
def shifted_pair(x: CK, w: CK, f_out: CK, b_out: CK, horizontal_start: gtx.int32, horizontal_end: gtx.int32,
                 vertical_start: gtx.int32, vertical_end: gtx.int32):
    """Called with ``f_out`` = ``x`` (``inplace={"f_out": "x"}``): ``b_out`` must still read the input ``x``."""
    _shifted_pair(x, w, out=(f_out, b_out),
                  domain={Cell: (horizontal_start, horizontal_end), K: (vertical_start, vertical_end)})


def shifted_pair_ref(x, w, k0, k1):
    """``(f, b)`` on levels ``[k0, k1)`` (``k0 >= 1``, ``k1 < nlev``), NaN elsewhere."""
    f, b = np.full_like(x, np.nan), np.full_like(x, np.nan)
    acc = np.zeros(x.shape[0])
    for k in range(k0, k1):
        acc = acc * w[:, k] + x[:, k - 1]
        f[:, k] = acc
    acc = np.zeros(x.shape[0])
    for k in range(k1 - 1, k0 - 1, -1):
        acc = acc * w[:, k] + x[:, k + 1] * 2.0
        b[:, k] = acc
    return f, b


# --- 7. a carry split into two independent recurrences, one of them under a condition (ScanFission) ------
@gtx.scan_operator(axis=K, forward=True, init=(0.0, 0))
def _sum_and_count(state: tuple[gtx.float64, gtx.int32], x: gtx.float64) -> tuple[gtx.float64, gtx.int32]:
    return state[0] + x, state[1] + 1 if x > 0.5 else state[1]


@gtx.field_operator
def _counted_sum(x: CK) -> tuple[CK, gtx.Field[gtx.Dims[Cell, K], gtx.int32]]:
    return _sum_and_count(x)


@gtx.program
def counted_sum(x: CK, s_out: CK, n_out: gtx.Field[gtx.Dims[Cell, K], gtx.int32]):
    _counted_sum(x, out=(s_out, n_out))


def counted_sum_ref(x):
    s, n = np.empty_like(x), np.empty(x.shape, dtype=np.int32)
    acc, cnt = np.zeros(x.shape[0]), np.zeros(x.shape[0], dtype=np.int32)
    for k in range(x.shape[1]):
        acc, cnt = acc + x[:, k], cnt + (x[:, k] > 0.5)
        s[:, k], n[:, k] = acc, cnt
    return s, n


# --- 8. guarded branches under ``replay`` (``blocked_simd`` if-converts them; not in PROGRAMS: libm calls) ---
CKb = gtx.Field[gtx.Dims[Cell, K], bool]
CKi = gtx.Field[gtx.Dims[Cell, K], gtx.int32]


@gtx.scan_operator(axis=K, forward=True, init=(0.0, False))
def _frozen_scan(state: tuple[gtx.float64, bool], x: gtx.float64) -> tuple[gtx.float64, bool]:
    # the first arm keeps the carry, the second updates it (``if frozen: keep, else: update``)
    return (state[0] if state[1] else state[0] + exp(-x)), state[1] | (x > 0.7)


@gtx.field_operator
def _frozen(x: CK) -> tuple[CK, CKb]:
    return _frozen_scan(x)


@gtx.program
def frozen(x: CK, acc: CK, fz: CKb):
    _frozen(x, out=(acc, fz))


def frozen_ref(x):
    a, f = np.zeros(x.shape[0]), np.zeros(x.shape[0], dtype=bool)
    acc, fz = np.empty_like(x), np.empty(x.shape, dtype=bool)
    for k in range(x.shape[1]):
        a = np.where(f, a, a + np.exp(-x[:, k]))
        f = f | (x[:, k] > 0.7)
        acc[:, k], fz[:, k] = a, f
    return acc, fz


@gtx.scan_operator(axis=K, forward=True, init=(0, 0.0))
def _guarded_division_scan(state: tuple[gtx.int32, gtx.float64], x: gtx.float64, m: gtx.int32
                           ) -> tuple[gtx.int32, gtx.float64]:
    if m > 0:   # the division runs only where m > 0 (m = 0 traps)
        q = 100 // m
        v = state[1] + exp(-x) * astype(q, gtx.float64)
    else:
        q = state[0]
        v = state[1]
    return q, v


@gtx.field_operator
def _guarded_division(x: CK, m: CKi) -> tuple[CKi, CK]:
    return _guarded_division_scan(x, m)


@gtx.program
def guarded_division(x: CK, m: CKi, q_out: CKi, v_out: CK):
    _guarded_division(x, m, out=(q_out, v_out))


def guarded_division_ref(x, m):
    q, v = np.zeros(x.shape[0], dtype=np.int32), np.zeros(x.shape[0])
    qs, vs = np.empty(x.shape, dtype=np.int32), np.empty_like(x)
    for k in range(x.shape[1]):
        pos = m[:, k] > 0
        q = np.where(pos, 100 // np.where(pos, m[:, k], 1), q).astype(np.int32)
        v = np.where(pos, v + np.exp(-x[:, k]) * q, v)
        qs[:, k], vs[:, k] = q, v
    return qs, vs


# --- 9. a level search on edges (the shape of icon4py's metric-field scans: an int counter and a bool flag,
#        int arguments in the conditions, an input also read at K + 1); not in PROGRAMS: Edge fields and an
#        input with one level more than the outputs -------------------------------------------------------
Edge = gtx.Dimension("Edge")
EK = gtx.Field[gtx.Dims[Edge, K], gtx.float64]
EKi = gtx.Field[gtx.Dims[Edge, K], gtx.int32]
EKb = gtx.Field[gtx.Dims[Edge, K], bool]


@gtx.scan_operator(axis=K, forward=True, init=(0, False))
def _level_search_scan(state: tuple[gtx.int32, bool], z: gtx.float64, upper: gtx.float64, below: gtx.float64,
                       lower: gtx.int32, top: gtx.int32) -> tuple[gtx.int32, bool]:
    level, found = state
    if level >= lower:
        if (level == top) | (z <= upper) & (z >= below):
            found = True
    return level + 1, found


@gtx.field_operator(grid_type=gtx.GridType.UNSTRUCTURED)
def _level_search(z: EK, z_ifc: EK, lower: gtx.int32, top: gtx.int32) -> tuple[EKi, EKb]:
    return _level_search_scan(z, z_ifc, z_ifc(K + 1), lower, top)


@gtx.program(grid_type=gtx.GridType.UNSTRUCTURED)
def level_search(z: EK, z_ifc: EK, lower: gtx.int32, top: gtx.int32, level: EKi, found: EKb):
    _level_search(z, z_ifc, lower, top, out=(level, found))


def level_search_ref(z, z_ifc, lower, top):
    """``z_ifc`` has one level more than ``z``."""
    n, nk = z.shape
    level, found = np.zeros(n, dtype=np.int32), np.zeros(n, dtype=bool)
    levels, founds = np.empty((n, nk), dtype=np.int32), np.empty((n, nk), dtype=bool)
    for k in range(nk):
        inside = (z[:, k] <= z_ifc[:, k]) & (z[:, k] >= z_ifc[:, k + 1])
        found = found | ((level >= lower) & ((level == top) | inside))
        level = level + 1
        levels[:, k], founds[:, k] = level, found
    return levels, founds


# --- 10. fields over K only: a scan over a single column (no horizontal dimension: gt4py lowers it without a
#         map over cells, so nothing is lifted), and a [Cell, K] scan that reads a K-only coefficient (the
#         same value for every cell of a level, as icon4py's vertical-grid coefficients) -----------------
KF = gtx.Field[gtx.Dims[K], gtx.float64]
KFi = gtx.Field[gtx.Dims[K], gtx.int32]


@gtx.scan_operator(axis=K, forward=True, init=(0.0, 0))
def _column_scan(state: tuple[gtx.float64, gtx.int32], x: gtx.float64) -> tuple[gtx.float64, gtx.int32]:
    acc, count = state
    return acc * 0.5 + x, count + 1


@gtx.field_operator
def _column(x: KF) -> tuple[KF, KFi]:
    return _column_scan(x)


@gtx.program
def single_column(x: KF, acc: KF, count: KFi):
    _column(x, out=(acc, count))


def single_column_ref(x):
    acc, accs = 0.0, np.empty(x.shape)
    for k in range(x.shape[0]):
        acc = acc * 0.5 + x[k]
        accs[k] = acc
    return accs, np.arange(1, x.shape[0] + 1, dtype=np.int32)


@gtx.scan_operator(axis=K, forward=False, init=0.0)
def _level_weighted_scan(state: gtx.float64, x: gtx.float64, w: gtx.float64) -> gtx.float64:
    return state * w + x


@gtx.field_operator
def _level_weighted(x: CK, w: KF) -> CK:
    return _level_weighted_scan(x, w)


@gtx.program
def level_weighted(x: CK, w: KF, out: CK):
    _level_weighted(x, w, out=out)


def level_weighted_ref(x, w):
    acc, out = np.zeros(x.shape[0]), np.empty(x.shape)
    for k in reversed(range(x.shape[1])):
        acc = acc * w[k] + x[:, k]
        out[:, k] = acc
    return out


# --- pointwise: a conversion rate with named constants (icon4py's muphys transitions) -------------------
@gtx.field_operator
def _rate_power(qr: CK, rho: CK) -> CK:
    A2 = float64(1.24e-3)   # a coefficient and an exponent named as icon4py names them (B2 = wpfloat(1.625)):
    B2 = float64(1.625)     # gt4py lowers each as a tasklet outside the map that writes a scalar
    return where(qr > float64(1.0e-4), A2 * power(rho * qr, B2), float64(0.0))


@gtx.program
def rate_power(qr: CK, rho: CK, rate: CK):
    _rate_power(qr, rho, out=rate)


def rate_power_ref(qr, rho):
    """``math.pow`` per element (glibc's ``pow``, what the program calls), not NumPy's vectorised power."""
    out = np.zeros_like(qr)
    for i, j in np.ndindex(qr.shape):
        if qr[i, j] > 1.0e-4:
            out[i, j] = 1.24e-3 * math.pow(rho[i, j] * qr[i, j], 1.625)
    return (out,)


@dataclass(frozen=True)
class Case:
    program: object
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    reference: Callable
    make_inputs: Callable[[np.random.Generator, int, int], dict[str, np.ndarray]]


def _uniform(names, lo=0.0, hi=1.0):
    return lambda rng, n, nk: {k: rng.uniform(lo, hi, (n, nk)) for k in names}


def _precip_inputs(rng, n, nk):
    return {"qr": rng.uniform(0, 0.6, (n, nk)), "qs": rng.uniform(0, 0.6, (n, nk)),
            "rho": rng.uniform(0.5, 1.3, (n, nk)), "dz": rng.uniform(50.0, 400.0, (n, nk))}


def _thomas_inputs(rng, n, nk):
    a, c = rng.uniform(-1, 0, (n, nk)), rng.uniform(-1, 0, (n, nk))
    return {"a": a, "b": 2.5 + rng.uniform(0, 1, (n, nk)), "c": c, "d": rng.uniform(-1, 1, (n, nk))}


PROGRAMS: dict[str, Case] = {
    "cumsum_k": Case(cumsum_k, ("x",), ("out",), cumsum_ref, _uniform(("x",))),
    "backward_delay": Case(backward_delay, ("x", "w"), ("out",), backward_delay_ref, _uniform(("x", "w"))),
    "precip_gated": Case(precip_gated, ("qr", "qs", "rho", "dz"), ("qr_out", "qs_out", "flux"),
                         precip_gated_ref, _precip_inputs),
    "thomas_pair": Case(thomas_pair, ("a", "b", "c", "d"), ("x",), thomas_pair_ref, _thomas_inputs),
    "thomas_concat": Case(thomas_concat, ("p", "r", "s"), ("x",), thomas_concat_ref,
                          lambda rng, n, nk: {"p": rng.uniform(-1, 1, (n, nk)), "r": rng.uniform(0, 1, (n, nk)),
                                              "s": rng.uniform(-1, 1, (n, nk))}),
}
# compiled with the unit-horizontal-stride backend only (one layout), outside the PROGRAMS matrix (RATE_POWER
# calls pow: its reference is glibc's pow per element)
RATE_POWER = Case(rate_power, ("qr", "rho"), ("rate",), rate_power_ref,
                  lambda rng, n, nk: {"qr": rng.uniform(0, 2e-4, (n, nk)), "rho": rng.uniform(0.5, 1.3, (n, nk))})
PRECIP_SCALED = Case(precip_scaled, ("qr", "qs", "rho", "dz"), ("qr_out", "qs_out", "flux"), precip_scaled_ref,
                     _precip_inputs)
