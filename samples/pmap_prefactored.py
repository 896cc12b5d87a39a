"""PMAP's Helmholtz line-relaxation preconditioner: factor once, apply ``nitr`` times, stride 2.

PMAP's vertical line operator couples level ``k`` with ``k-2`` and ``k+2`` (``ff[k-2]``, ``rp[k+2]``):
even and odd levels form two independent tridiagonal systems. Viewing a ``[nlev, cell]`` field as
``[nlev/2, 2, cell]`` makes them ordinary columns of a ``TridiagonalSolve`` along ``axis=0``.
The line operator ``L`` is factored once (``TridiagonalFactor``: inverse pivots ``w`` and modified
upper coefficients ``cp``); each of the ``nitr`` iterations of the splitting ``(L + diag(e)) x = r``

    x <- L^{-1} (r - e * x)

applies only the two cheap sweeps (``TridiagonalSolve(prefactored=True)``: multiplications, no
division). Checked bitwise against the same iteration written with ``sdfg_scan.reference`` and,
for convergence, against a direct ``scipy.linalg.solve_banded`` of ``L + diag(e)``.
Run: ``python samples/pmap_prefactored.py``.
"""

import dace
import numpy as np
import scipy.linalg

import sdfg_scan
from sdfg_scan import reference

TITLE = "PMAP pre-factored stride-2 preconditioner (nitr=8)"
IMPLEMENTATIONS = ["thomas", "auto"]
NITR = 8
SIZE = {"H": 40, "N": 8192}  # nlev = 2 * H = 80 levels
H, N = dace.symbol("H"), dace.symbol("N")


@dace.program
def precondition(a: dace.float64[H, 2, N], b: dace.float64[H, 2, N], c: dace.float64[H, 2, N],
                 e: dace.float64[H, 2, N], r: dace.float64[H, 2, N], x: dace.float64[H, 2, N]):
    w, cp = sdfg_scan.tridiagonal_factor(a, b, c, axis=0)
    x[:] = 0.0
    for _ in range(NITR):
        x[:] = sdfg_scan.tridiagonal_solve_prefactored(a, w, cp, r - e * x, axis=0)


def build(implementation: str) -> dace.SDFG:
    sdfg = precondition.to_sdfg(simplify=True)
    sdfg.name = f"sample_pmap_prefactored_{implementation}"
    for node, _ in sdfg.all_nodes_recursive():
        if isinstance(node, (sdfg_scan.TridiagonalSolve, sdfg_scan.TridiagonalFactor)):
            node.implementation = implementation
    return sdfg


def inputs(rng: np.random.Generator) -> dict:
    shape = (SIZE["H"], 2, SIZE["N"])
    a, c = -rng.random(shape), -rng.random(shape)           # Helmholtz-like: negative off-diagonals
    b = 2.2 + rng.random(shape)                             # diagonally dominant
    e = 0.2 * rng.standard_normal(shape)                    # the part the preconditioner leaves out
    return {"a": a, "b": b, "c": c, "e": e, "r": rng.standard_normal(shape), "x": np.zeros(shape), **SIZE}


def expected(args: dict) -> dict:
    a, b, c, e, r = (args[k] for k in "abcer")
    w, cp = reference.tridiagonal_factor(a, b, c, axis=0)
    x = np.zeros_like(r)
    for _ in range(NITR):
        x = reference.tridiagonal_solve_prefactored(a, w, cp, r - e * x, axis=0)
    # convergence: close to the direct solution of (L + diag(e)) x = r on a sample of columns
    for j in range(2):
        for i in range(0, args["N"], 811):
            ab = np.zeros((3, args["H"]))
            ab[0, 1:], ab[1], ab[2, :-1] = c[:-1, j, i], b[:, j, i] + e[:, j, i], a[1:, j, i]
            exact = scipy.linalg.solve_banded((1, 1), ab, r[:, j, i])
            if not np.allclose(x[:, j, i], exact, rtol=1e-3, atol=1e-3):
                raise AssertionError(f"{NITR} preconditioned iterations did not converge in column ({j}, {i})")
    return {"x": x}


if __name__ == "__main__":
    from sdfg_scan.demo import run_sample

    raise SystemExit(0 if run_sample(__import__(__name__)) else 1)
