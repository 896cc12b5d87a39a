"""icon4py's implicit vertical solve for ``w`` (``solve_tridiagonal_matrix_for_w_*``) as one node.

ICON's dycore (``mo_solve_nonhydro``) makes the vertical acoustic terms implicit: on the interior half
levels ``k = 1 .. nlev-1`` the new vertical wind solves, per cell,

    a[k] = -gamma[k] * beta[k-1] * alpha[k-1]
    c[k] = -gamma[k] * beta[k]   * alpha[k+1]
    b[k] = 1 + gamma[k] * alpha[k] * (beta[k-1] + beta[k])
    a[k]*w[k-1] + b[k]*w[k] + c[k]*w[k+1] = rhs[k]          (w = 0 at the top and at the ground)

icon4py writes it as two scans (a forward sweep with ``z_q = -c*z_g``, ``z_g = 1/(b + a*z_q[k-1])``,
then the back substitution). Here a ``@dace.program`` builds the coefficients with array expressions
and calls ``sdfg_scan.tridiagonal_solve``; the data is in ICON's nproma layout (cells contiguous:
arrays ``[level, cell]``, ``axis=0``). Checked bitwise against icon4py's two-scan loop in NumPy and
against ``scipy.linalg.solve_banded``. Run: ``python samples/implicit_w_solve.py``.
"""

import dace
import numpy as np
import scipy.linalg

import sdfg_scan

TITLE = "icon4py implicit w solve (nproma layout)"
IMPLEMENTATIONS = ["thomas", "auto"]
SIZE = {"N": 20480, "M": 64}
N, M = dace.symbol("N"), dace.symbol("M")


@dace.program
def implicit_w(alpha: dace.float64[M + 2, N], beta: dace.float64[M + 1, N], gamma: dace.float64[M, N],
               rhs: dace.float64[M, N], w: dace.float64[M, N]):
    a = -gamma * beta[0:M] * alpha[0:M]
    c = -gamma * beta[1:M + 1] * alpha[2:M + 2]
    b = 1.0 + gamma * alpha[1:M + 1] * (beta[0:M] + beta[1:M + 1])
    w[:] = sdfg_scan.tridiagonal_solve(a, b, c, rhs, axis=0)


def build(implementation: str) -> dace.SDFG:
    sdfg = implicit_w.to_sdfg(simplify=True)
    sdfg.name = f"sample_implicit_w_{implementation}"
    for node, _ in sdfg.all_nodes_recursive():
        if isinstance(node, sdfg_scan.TridiagonalSolve):
            node.implementation = implementation
    return sdfg


def inputs(rng: np.random.Generator) -> dict:
    n, m = SIZE["N"], SIZE["M"]
    return {"alpha": 0.5 + rng.random((m + 2, n)), "beta": 0.5 + rng.random((m + 1, n)),
            "gamma": 0.1 + rng.random((m, n)), "rhs": rng.standard_normal((m, n)), "w": np.zeros((m, n)), **SIZE}


def icon4py_two_scans(alpha, beta, gamma, rhs):
    """icon4py's formulation: forward sweep (z_q, z_g) then back substitution, vectorised over cells."""
    m = rhs.shape[0]
    a = -gamma * beta[0:m] * alpha[0:m]
    c = -gamma * beta[1:m + 1] * alpha[2:m + 2]
    b = 1.0 + gamma * alpha[1:m + 1] * (beta[0:m] + beta[1:m + 1])
    z_q, w = np.empty_like(rhs), np.empty_like(rhs)
    z_g = 1.0 / b[0]
    z_q[0], w[0] = -c[0] * z_g, rhs[0] * z_g
    for k in range(1, m):
        z_g = 1.0 / (b[k] + a[k] * z_q[k - 1])
        z_q[k] = -c[k] * z_g
        w[k] = (rhs[k] - a[k] * w[k - 1]) * z_g
    for k in range(m - 2, -1, -1):
        w[k] = w[k] + w[k + 1] * z_q[k]
    return w, (a, b, c)


def expected(args: dict) -> dict:
    w, (a, b, c) = icon4py_two_scans(args["alpha"], args["beta"], args["gamma"], args["rhs"])
    for i in range(0, args["N"], 997):  # SciPy (LU with pivoting) on a sample of columns
        ab = np.zeros((3, args["M"]))
        ab[0, 1:], ab[1], ab[2, :-1] = c[:-1, i], b[:, i], a[1:, i]
        exact = scipy.linalg.solve_banded((1, 1), ab, args["rhs"][:, i])
        if not np.allclose(w[:, i], exact, rtol=1e-12, atol=1e-14):
            raise AssertionError(f"icon4py two-scan solve differs from scipy in column {i}")
    return {"w": w}


if __name__ == "__main__":
    from sdfg_scan.demo import run_sample

    raise SystemExit(0 if run_sample(__import__(__name__)) else 1)
