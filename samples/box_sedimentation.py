"""COSMO/ICON box sedimentation as a bounded window (M = 3): the flux into level k gathers the
falling mass of the M levels above, ``F[k] = sum_{m=0..M} w[m] * q[k - m]`` (levels above the top
skipped). Cell-contiguous (nlev, ncol). Checked against NumPy; exits non-zero on a mismatch.
"""

import sys

import dace
import numpy as np

import sdfg_scan

NLEV, NCOL = dace.symbol("NLEV"), dace.symbol("NCOL")
M = 3
WEIGHTS = [0.4, 0.3, 0.2, 0.1]  # share of level k - m falling into level k within one time step
OFFSETS = [0, -1, -2, -3]


@dace.program
def sediment(q: dace.float64[NLEV, NCOL], flux: dace.float64[NLEV, NCOL]):
    flux[:] = sdfg_scan.window_reduce(q, [0.4, 0.3, 0.2, 0.1], [0, -1, -2, -3], axis=0)


def main() -> int:
    rng = np.random.default_rng(2)
    nlev, ncol = 40, 300
    q = rng.random((nlev, ncol)) * 1e-3
    flux = np.zeros_like(q)
    sediment(q=q, flux=flux, NLEV=nlev, NCOL=ncol)
    ref = np.zeros_like(q)
    for m, w in enumerate(WEIGHTS):  # NumPy: shifted slices, top levels skip the missing terms
        ref[m:] += w * q[:nlev - m]
    ok = np.allclose(flux, ref, rtol=1e-14, atol=0)
    print(f"box sedimentation M={M}: max flux {flux.max():.3e}:", "OK" if ok else "MISMATCH")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
