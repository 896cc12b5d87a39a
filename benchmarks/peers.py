"""numba and JAX peers for the benchmark scripts (issues 2 and 4: "ahead of numpy, numba and JAX").

:func:`peer_rows` times, for one case and one memory layout, a numba and a JAX implementation and
returns :class:`benchmarks.common.Row` s. Every array is passed in its *logical* shape ``(ncol, nlev)``
with the column (K) axis 1 and the memory layout of the benchmark (K-contiguous: C order; cell-contiguous:
Fortran order, ICON's nproma layout). Cases (the names the scripts use):

=====================  =====================================================================
``cumsum``             ``out[k] = out[k-1] + x[k]``
``linear recurrence``  ``y[k] = a[k] * y[k-1] + b[k]``, ``y[-1] = 0``
``tridiagonal solve``  Thomas, ICON form: ``w = 1/(b - a*cp)``, ``cp = c*w``, ``dp = (d - a*dp)*w``,
                       then ``x = dp - cp*x_below``
``column sum``         sequential fold over K
``column argmin``      first index of the minimum
``window M=3``         ``out[k] = sum_{m=0..3} w[m] * x[k-m]``, out-of-column terms skipped
=====================  =====================================================================

- numba: ``@numba.njit(parallel=True, fastmath=False)``, ``prange`` over columns with a sequential
  k-loop inside, written for the layout: cell-contiguous data is cut into blocks of
  :data:`CELL_BLOCK` cells (one block per prange iteration; k outside, a unit-stride loop over the
  block's cells inside), K-contiguous data runs one column per prange iteration.
- JAX (CPU, float64 via ``jax_enable_x64``): ``jax.jit`` of ``jnp.cumsum``/``jnp.sum``/``jnp.argmin``
  where JAX has the operation, ``jax.lax.scan`` over K otherwise. A JAX array is always row-major, so
  the physical array is handed over (cell-contiguous: ``x.T``, shape ``(nlev, ncol)``, K axis 0), the
  transfer is outside the timing, the compile is excluded by the warm-up call of ``best_time`` and every
  timed call ends with ``.block_until_ready()``. JAX allocates its outputs on each call (no ``out=``).

Before timing, each peer is checked against :mod:`sdfg_scan.reference` on the first
:data:`CHECK_COLS` columns (same layout): not ``allclose`` -> the row's variant says ``WRONG``.
Whether it was also bitwise equal is printed. A peer whose package is not importable is skipped
with a printed note, so the scripts run without numba and JAX.
"""

from __future__ import annotations

import functools
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import Row, best_time  # noqa: E402
from sdfg_scan import reference  # noqa: E402

CELL_BLOCK = 1024      # cells per prange iteration of the numba kernels for cell-contiguous data
CHECK_COLS = 1001      # columns of the correctness check (not a multiple of CELL_BLOCK: checks the tail block)
WINDOW_WEIGHTS = (0.4, 0.3, 0.2, 0.1)   # window M=3: weights of x[k], x[k-1], x[k-2], x[k-3]
CASES = ("cumsum", "linear recurrence", "tridiagonal solve", "column sum", "column argmin", "window M=3")
INPUTS = {"cumsum": ("x",), "linear recurrence": ("a", "b"), "tridiagonal solve": ("a", "b", "c", "d"),
          "column sum": ("x",), "column argmin": ("x",), "window M=3": ("x",)}

_NOTED: set[str] = set()

try:
    import numba
    from numba import prange
except ImportError as err:  # pragma: no cover - depends on the environment
    numba = None
    _NUMBA_ERROR = str(err)

try:
    import jax
    import jax.numpy as jnp
    from jax import lax

    jax.config.update("jax_enable_x64", True)
except ImportError as err:  # pragma: no cover - depends on the environment
    jax = None
    _JAX_ERROR = str(err)


def _note(key: str, text: str) -> None:
    if key not in _NOTED:
        _NOTED.add(key)
        print(f"(peers: {text})")


# ------------------------------------------------------------------------------------------------
# reference results (logical (ncol, nlev) arrays, axis 1)
# ------------------------------------------------------------------------------------------------

def _reference(case: str, ins: dict[str, np.ndarray]) -> np.ndarray:
    if case == "cumsum":
        return reference.cumulative(ins["x"], "sum", axis=1)
    if case == "linear recurrence":
        return reference.linear_recurrence(ins["a"], ins["b"], axis=1)
    if case == "tridiagonal solve":
        return reference.tridiagonal_solve(ins["a"], ins["b"], ins["c"], ins["d"], axis=1)
    if case == "column sum":
        return reference.column_reduce(ins["x"], "sum", axis=1, order="sequential")
    if case == "column argmin":
        return reference.column_reduce(ins["x"], "argmin", axis=1, order="sequential")
    if case == "window M=3":
        return reference.window_reduce(ins["x"], WINDOW_WEIGHTS, [0, -1, -2, -3], axis=1)
    raise ValueError(f"benchmarks.peers: unknown case '{case}', expected one of {CASES}")


# ------------------------------------------------------------------------------------------------
# numba kernels: *_k for K-contiguous (one column per prange iteration), *_cell for cell-contiguous
# (one block of CELL_BLOCK cells per prange iteration, k outside, cells inside)
# ------------------------------------------------------------------------------------------------

if numba is not None:
    _jit = numba.njit(parallel=True, fastmath=False, cache=False)

    @_jit
    def _cumsum_k(x, out):
        for i in prange(x.shape[0]):
            acc = x[i, 0]
            out[i, 0] = acc
            for k in range(1, x.shape[1]):
                acc = acc + x[i, k]
                out[i, k] = acc

    @_jit
    def _cumsum_cell(x, out):
        n, nk = x.shape
        for blk in prange((n + CELL_BLOCK - 1) // CELL_BLOCK):
            i0, i1 = blk * CELL_BLOCK, min(blk * CELL_BLOCK + CELL_BLOCK, n)
            acc = np.empty(i1 - i0)
            xk, ok = x[i0:i1, 0], out[i0:i1, 0]
            for j in range(i1 - i0):
                acc[j] = xk[j]
                ok[j] = acc[j]
            for k in range(1, nk):
                xk, ok = x[i0:i1, k], out[i0:i1, k]     # unit-stride level rows of the block
                for j in range(i1 - i0):
                    acc[j] = acc[j] + xk[j]
                    ok[j] = acc[j]

    @_jit
    def _linrec_k(a, b, out):
        for i in prange(a.shape[0]):
            y = 0.0
            for k in range(a.shape[1]):
                y = a[i, k] * y + b[i, k]
                out[i, k] = y

    @_jit
    def _linrec_cell(a, b, out):
        n, nk = a.shape
        for blk in prange((n + CELL_BLOCK - 1) // CELL_BLOCK):
            i0, i1 = blk * CELL_BLOCK, min(blk * CELL_BLOCK + CELL_BLOCK, n)
            y = np.zeros(i1 - i0)
            for k in range(nk):
                ak, bk, ok = a[i0:i1, k], b[i0:i1, k], out[i0:i1, k]
                for j in range(i1 - i0):
                    y[j] = ak[j] * y[j] + bk[j]
                    ok[j] = y[j]

    @_jit
    def _thomas_k(a, b, c, d, x):
        n, nk = a.shape
        for i in prange(n):
            cp = np.empty(nk)          # per-column scratch (numba hoists it to one per thread)
            w = 1.0 / b[i, 0]
            cp[0] = c[i, 0] * w
            dp = d[i, 0] * w
            x[i, 0] = dp
            for k in range(1, nk):
                w = 1.0 / (b[i, k] - a[i, k] * cp[k - 1])
                cp[k] = c[i, k] * w
                dp = (d[i, k] - a[i, k] * dp) * w
                x[i, k] = dp
            for k in range(nk - 2, -1, -1):
                x[i, k] = x[i, k] - cp[k] * x[i, k + 1]

    @_jit
    def _thomas_cell(a, b, c, d, x):
        n, nk = a.shape
        for blk in prange((n + CELL_BLOCK - 1) // CELL_BLOCK):
            i0, i1 = blk * CELL_BLOCK, min(blk * CELL_BLOCK + CELL_BLOCK, n)
            m = i1 - i0
            cp = np.empty((nk, m))      # per-block scratch, cells contiguous
            bk, ck, dk, xk = b[i0:i1, 0], c[i0:i1, 0], d[i0:i1, 0], x[i0:i1, 0]
            for j in range(m):
                w = 1.0 / bk[j]
                cp[0, j] = ck[j] * w
                xk[j] = dk[j] * w
            for k in range(1, nk):
                ak, bk, ck, dk = a[i0:i1, k], b[i0:i1, k], c[i0:i1, k], d[i0:i1, k]
                xk, xm = x[i0:i1, k], x[i0:i1, k - 1]
                for j in range(m):
                    w = 1.0 / (bk[j] - ak[j] * cp[k - 1, j])
                    cp[k, j] = ck[j] * w
                    xk[j] = (dk[j] - ak[j] * xm[j]) * w
            for k in range(nk - 2, -1, -1):
                xk, xp = x[i0:i1, k], x[i0:i1, k + 1]
                for j in range(m):
                    xk[j] = xk[j] - cp[k, j] * xp[j]

    @_jit
    def _sum_k(x, out):
        for i in prange(x.shape[0]):
            acc = 0.0
            for k in range(x.shape[1]):
                acc = acc + x[i, k]
            out[i] = acc

    @_jit
    def _sum_cell(x, out):
        n, nk = x.shape
        for blk in prange((n + CELL_BLOCK - 1) // CELL_BLOCK):
            i0, i1 = blk * CELL_BLOCK, min(blk * CELL_BLOCK + CELL_BLOCK, n)
            acc = np.zeros(i1 - i0)
            for k in range(nk):
                xk = x[i0:i1, k]
                for j in range(i1 - i0):
                    acc[j] = acc[j] + xk[j]
            out[i0:i1] = acc

    @_jit
    def _argmin_k(x, out):
        for i in prange(x.shape[0]):
            best = x[i, 0]
            idx = 0
            for k in range(1, x.shape[1]):
                if x[i, k] < best:
                    best = x[i, k]
                    idx = k
            out[i] = idx

    @_jit
    def _argmin_cell(x, out):
        n, nk = x.shape
        for blk in prange((n + CELL_BLOCK - 1) // CELL_BLOCK):
            i0, i1 = blk * CELL_BLOCK, min(blk * CELL_BLOCK + CELL_BLOCK, n)
            best = x[i0:i1, 0].copy()
            idx = np.zeros(i1 - i0, dtype=np.int64)
            for k in range(1, nk):
                xk = x[i0:i1, k]
                for j in range(i1 - i0):
                    if xk[j] < best[j]:
                        best[j] = xk[j]
                        idx[j] = k
            out[i0:i1] = idx

    @_jit
    def _window_k(x, w, out):
        # (a branch-free form with the top levels peeled measured 2x slower here: kept the plain loop)
        for i in prange(x.shape[0]):
            for k in range(x.shape[1]):
                acc = -0.0
                for m in range(w.shape[0]):
                    if k - m >= 0:                      # out-of-column terms skipped
                        acc = acc + w[m] * x[i, k - m]
                out[i, k] = acc

    @_jit
    def _window_cell(x, w, out):
        n, nk = x.shape
        for blk in prange((n + CELL_BLOCK - 1) // CELL_BLOCK):
            i0, i1 = blk * CELL_BLOCK, min(blk * CELL_BLOCK + CELL_BLOCK, n)
            for k in range(min(3, nk)):                 # top levels: out-of-column terms skipped
                for j in range(i0, i1):
                    acc = -0.0
                    for m in range(k + 1):
                        acc = acc + w[m] * x[j, k - m]
                    out[j, k] = acc
            for k in range(3, nk):                      # unit-stride level rows of the block
                x0, x1, x2, x3 = x[i0:i1, k], x[i0:i1, k - 1], x[i0:i1, k - 2], x[i0:i1, k - 3]
                ok = out[i0:i1, k]
                for j in range(i1 - i0):
                    ok[j] = (((-0.0 + w[0] * x0[j]) + w[1] * x1[j]) + w[2] * x2[j]) + w[3] * x3[j]

    _NUMBA = {"cumsum": (_cumsum_k, _cumsum_cell), "linear recurrence": (_linrec_k, _linrec_cell),
              "tridiagonal solve": (_thomas_k, _thomas_cell), "column sum": (_sum_k, _sum_cell),
              "column argmin": (_argmin_k, _argmin_cell), "window M=3": (_window_k, _window_cell)}


def _numba_call(case: str, ins: dict[str, np.ndarray], cell: bool):
    """A no-argument callable running the numba kernel of ``case`` into a preallocated output, and the output."""
    x0 = ins[INPUTS[case][0]]
    if case in ("column sum", "column argmin"):
        out = np.empty(x0.shape[0], dtype=np.int64 if case == "column argmin" else np.float64)
    else:
        out = np.empty_like(x0)   # keeps the layout (C or Fortran order)
    kernel = _NUMBA[case][1 if cell else 0]
    args = [ins[name] for name in INPUTS[case]]
    if case == "window M=3":
        args.append(np.asarray(WINDOW_WEIGHTS, dtype=np.float64))
    return (lambda: kernel(*args, out)), out


# ------------------------------------------------------------------------------------------------
# JAX: functions of the *physical* arrays, K along axis ``kax`` (1: K-contiguous, 0: cell-contiguous)
# ------------------------------------------------------------------------------------------------

if jax is not None:
    @functools.partial(jax.jit, static_argnames="kax")
    def _jax_cumsum(x, kax):
        return jnp.cumsum(x, axis=kax)

    @functools.partial(jax.jit, static_argnames="kax")
    def _jax_linrec(a, b, kax):
        def step(y, ab):
            y = ab[0] * y + ab[1]
            return y, y
        a0, b0 = jnp.moveaxis(a, kax, 0), jnp.moveaxis(b, kax, 0)
        _, ys = lax.scan(step, jnp.zeros_like(a0[0]), (a0, b0))
        return jnp.moveaxis(ys, 0, kax)

    @functools.partial(jax.jit, static_argnames="kax")
    def _jax_thomas(a, b, c, d, kax):
        a, b, c, d = (jnp.moveaxis(v, kax, 0) for v in (a, b, c, d))

        def forward(carry, abcd):
            cp_prev, dp_prev = carry
            ak, bk, ck, dk = abcd
            w = 1.0 / (bk - ak * cp_prev)
            cp = ck * w
            dp = (dk - ak * dp_prev) * w
            return (cp, dp), (cp, dp)

        def backward(x_below, cd):
            xk = cd[1] - cd[0] * x_below
            return xk, xk

        zero = jnp.zeros_like(b[0])
        _, (cp, dp) = lax.scan(forward, (zero, zero), (a, b, c, d))
        _, xs = lax.scan(backward, dp[-1], (cp[:-1], dp[:-1]), reverse=True)
        return jnp.moveaxis(jnp.concatenate([xs, dp[-1:]], axis=0), 0, kax)

    @functools.partial(jax.jit, static_argnames="kax")
    def _jax_sum(x, kax):
        return jnp.sum(x, axis=kax)

    @functools.partial(jax.jit, static_argnames="kax")
    def _jax_argmin(x, kax):
        return jnp.argmin(x, axis=kax)

    @functools.partial(jax.jit, static_argnames="kax")
    def _jax_window(x, kax):
        xk = jnp.moveaxis(x, kax, 0)
        n, depth = xk.shape[0], len(WINDOW_WEIGHTS) - 1
        parts = []
        for k in range(min(depth, n)):          # the top levels: only the terms inside the column
            row = WINDOW_WEIGHTS[0] * xk[k]
            for m in range(1, k + 1):
                row = row + WINDOW_WEIGHTS[m] * xk[k - m]
            parts.append(row[None])
        if n > depth:                           # the rest: all terms, as shifted slices
            body = WINDOW_WEIGHTS[0] * xk[depth:]
            for m in range(1, depth + 1):
                body = body + WINDOW_WEIGHTS[m] * xk[depth - m:n - m]
            parts.append(body)
        return jnp.moveaxis(jnp.concatenate(parts, axis=0), 0, kax)

    _JAX = {"cumsum": (_jax_cumsum, "jnp.cumsum"), "linear recurrence": (_jax_linrec, "lax.scan"),
            "tridiagonal solve": (_jax_thomas, "2 x lax.scan"), "column sum": (_jax_sum, "jnp.sum"),
            "column argmin": (_jax_argmin, "jnp.argmin"), "window M=3": (_jax_window, "shifted slices")}


def _jax_call(case: str, ins: dict[str, np.ndarray], cell: bool):
    """A no-argument callable running the jitted JAX function (ending in block_until_ready) and a
    function returning its last result as a logical NumPy array."""
    fn = _JAX[case][0]
    kax = 0 if cell else 1
    dev = [jnp.asarray(ins[name].T if cell else ins[name]) for name in INPUTS[case]]
    last = {}

    def call():
        last["y"] = fn(*dev, kax=kax).block_until_ready()

    def result():
        y = np.asarray(last["y"])
        return y.T if cell and y.ndim == 2 else y

    return call, result


# ------------------------------------------------------------------------------------------------
# rows
# ------------------------------------------------------------------------------------------------

def _subset(ins: dict[str, np.ndarray], cols: int, cell: bool) -> dict[str, np.ndarray]:
    order = np.asfortranarray if cell else np.ascontiguousarray
    return {k: order(v[:cols]) for k, v in ins.items()}


def _check(case: str, got: np.ndarray, want: np.ndarray) -> tuple[bool, bool]:
    """(allclose, bitwise equal)."""
    if got.shape != want.shape:
        return False, False
    if case == "column argmin":
        ok = bool(np.array_equal(got, want))
        return ok, ok
    return bool(np.allclose(got, want, rtol=1e-10, atol=1e-12)), bool(np.array_equal(got, want))


def peer_rows(case: str, layout: str, ins: dict[str, np.ndarray], nbytes: int,
              baseline: float | None) -> list[Row]:
    """numba and JAX rows for ``case`` on the logical ``(ncol, nlev)`` inputs ``ins`` (names: :data:`INPUTS`).

    The layout is read from the arrays (Fortran order = cell-contiguous); ``layout`` is only the label.
    """
    if case not in CASES:
        raise ValueError(f"benchmarks.peers: unknown case '{case}', expected one of {CASES}")
    missing = set(INPUTS[case]) - set(ins)
    if missing:
        raise ValueError(f"benchmarks.peers: case '{case}' needs inputs {INPUTS[case]}, got {sorted(ins)}")
    x0 = ins[INPUTS[case][0]]
    cell = not x0.flags.c_contiguous and x0.flags.f_contiguous
    small = _subset(ins, min(CHECK_COLS, x0.shape[0]), cell)
    want = _reference(case, small)
    rows: list[Row] = []
    peers = []
    if numba is None:
        _note("numba", f"numba is not importable ({_NUMBA_ERROR}): no numba rows")
    else:
        sched = f"prange over blocks of {CELL_BLOCK} cells" if cell else "prange over columns"
        peers.append((f"numba ({sched})", _numba_call))
    if jax is None:
        _note("jax", f"jax is not importable ({_JAX_ERROR}): no JAX rows")
    else:
        peers.append((f"jax (jit {_JAX[case][1]})", _jax_call))
    for label, make in peers:
        call, res = make(case, small, cell)
        call()
        got = res if isinstance(res, np.ndarray) else res()
        close, exact = _check(case, got, want)
        if not close:
            label = f"{label} WRONG (not allclose to the reference)"
        print(f"(peers: {case} / {layout} / {label}: {'bitwise equal to' if exact else 'differs from'} "
              f"the reference on {small[INPUTS[case][0]].shape[0]} columns)")
        call, _ = make(case, ins, cell)
        rows.append(Row(case, layout, label, best_time(call), nbytes, baseline))
    return rows


__all__ = ["CASES", "CELL_BLOCK", "INPUTS", "WINDOW_WEIGHTS", "peer_rows"]
