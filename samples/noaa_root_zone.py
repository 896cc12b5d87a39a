"""NOAA land-surface root zone: per-column masked reduction over the levels k < nroot[i].

Sum of soil moisture weighted by layer thickness over the root zone, and whether any root-zone layer
is frozen. K-contiguous fields (ncol, nsoil). Checked against NumPy; exits non-zero on a mismatch.
"""

import sys

import dace
import numpy as np

import sdfg_scan

NCOL, NSOIL = dace.symbol("NCOL"), dace.symbol("NSOIL")


@dace.program
def root_zone(smc: dace.float64[NCOL, NSOIL], dz: dace.float64[NCOL, NSOIL], frozen: dace.bool_[NCOL, NSOIL],
              nroot: dace.int32[NCOL], water: dace.float64[NCOL], anyfrozen: dace.bool_[NCOL]):
    wdz = smc * dz
    water[:] = sdfg_scan.column_reduce(wdz, "sum", axis=-1, levels=nroot)
    anyfrozen[:] = sdfg_scan.column_reduce(frozen, "any", axis=-1, levels=nroot)


def main() -> int:
    rng = np.random.default_rng(1)
    ncol, nsoil = 400, 9
    smc, dz = rng.random((ncol, nsoil)) * 0.4, rng.random((ncol, nsoil)) * 0.5 + 0.05
    frozen = rng.random((ncol, nsoil)) > 0.9
    nroot = rng.integers(0, nsoil + 1, ncol).astype(np.int32)
    water, anyfrozen = np.zeros(ncol), np.zeros(ncol, bool)
    root_zone(smc=smc, dz=dz, frozen=frozen, nroot=nroot, water=water, anyfrozen=anyfrozen, NCOL=ncol, NSOIL=nsoil)
    inside = np.arange(nsoil)[None, :] < nroot[:, None]
    ok = np.allclose(water, np.where(inside, smc * dz, 0).sum(1), rtol=1e-13, atol=0) and np.array_equal(
        anyfrozen, (frozen & inside).any(1))
    print(f"root-zone water {water.mean():.4f} m, frozen columns {anyfrozen.sum()}:", "OK" if ok else "MISMATCH")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
