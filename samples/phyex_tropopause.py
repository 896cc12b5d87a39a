"""PHYEX-style tropopause: argmin of temperature over K, then the height gathered at that level.

Cell-contiguous fields (nlev, ncol). Checked against NumPy; exits non-zero on a mismatch.
"""

import sys

import dace
import numpy as np

import sdfg_scan

NLEV, NCOL = dace.symbol("NLEV"), dace.symbol("NCOL")


@dace.program
def tropopause(t: dace.float64[NLEV, NCOL], z: dace.float64[NLEV, NCOL], ktrop: dace.int64[NCOL],
               ztrop: dace.float64[NCOL]):
    ktrop[:] = sdfg_scan.column_reduce(t, "argmin", axis=0)
    for i in dace.map[0:NCOL]:
        ztrop[i] = z[ktrop[i], i]


def main() -> int:
    rng = np.random.default_rng(0)
    nlev, ncol = 60, 500
    z = np.linspace(15000.0, 0.0, nlev)[:, None] + rng.random((nlev, ncol)) * 10
    t = 288.0 - 6.5e-3 * np.minimum(z, 11000.0 + rng.random(ncol) * 3000) + 2e-3 * np.maximum(z - 12000.0, 0)
    ktrop, ztrop = np.zeros(ncol, np.int64), np.zeros(ncol)
    tropopause(t=t, z=z, ktrop=ktrop, ztrop=ztrop, NLEV=nlev, NCOL=ncol)
    k_ref = np.argmin(t, axis=0)
    ok = np.array_equal(ktrop, k_ref) and np.array_equal(ztrop, z[k_ref, np.arange(ncol)])
    print(f"tropopause level range {ktrop.min()}..{ktrop.max()}, height {ztrop.mean():.0f} m:",
          "OK" if ok else "MISMATCH")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
