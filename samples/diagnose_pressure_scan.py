"""icon4py's ``diagnose_pressure`` written as icon4py writes it: a general backward scan whose carry
holds ``(pressure, pressure_ifc, is_first_level)`` (``sdfg_scan.scan`` -> ``Scan`` node).

From the surface (last level) upwards::

    below = p_sfc if is_first_level else pressure_ifc          # the first-level boundary
    p_ifc = below * exp(-g * dz[k] / (rd * t[k]))
    p     = sqrt(p_ifc * below)
    carry = (p, p_ifc, False)

``PeelBoundaryLevels`` removes the flag branch from such a loop; ``samples/diagnose_pressure.py``
writes the same recurrence as a branch-free ``LinearRecurrence``. Checked against the
plain NumPy loop (allclose: NumPy's exp rounds differently from libm's). Run: ``python samples/diagnose_pressure_scan.py``.
"""

import dace
import numpy as np

import sdfg_scan

TITLE = "diagnose_pressure as a general Scan (first-level flag)"
IMPLEMENTATIONS = ["sequential", "auto"]
BITWISE_VS_NUMPY = False  # np.exp/np.sqrt vs the C library: compared with allclose (rtol 1e-10)
SIZE = {"N": 20480, "K": 65}
N, K = dace.symbol("N"), dace.symbol("K")
GRAV_O_RD = 9.80665 / 287.04


def pressure_body(c, x, k):
    p, p_ifc, first = c
    below = np.where(first, x[2], p_ifc)
    p_ifc_new = below * np.exp(-GRAV_O_RD * x[0] / x[1])
    return (np.sqrt(p_ifc_new * below), p_ifc_new, False), ()


def build(implementation: str) -> dace.SDFG:
    @dace.program
    def diagnose_pressure(dz: dace.float64[N, K], temp: dace.float64[N, K], p_sfc: dace.float64[N, K],
                          pressure: dace.float64[N, K], pressure_ifc: dace.float64[N, K]):
        p, p_ifc = sdfg_scan.scan(pressure_body, (0.0, 0.0, True), (dz, temp, p_sfc), axis=1, reverse=True,
                                  carries=(0, 1))   # the flag slot stays inside the scan
        pressure[:] = p
        pressure_ifc[:] = p_ifc

    sdfg = diagnose_pressure.to_sdfg(simplify=True)
    sdfg.name = f"sample_diagnose_pressure_scan_{implementation}"
    for node, _ in sdfg.all_nodes_recursive():
        if isinstance(node, sdfg_scan.Scan):
            node.implementation = implementation
    return sdfg


def inputs(rng: np.random.Generator) -> dict:
    n, k = SIZE["N"], SIZE["K"]
    p_sfc = np.repeat((95000.0 + 10000.0 * rng.random(n))[:, None], k, axis=1)
    return {"dz": 50.0 + 400.0 * rng.random((n, k)), "temp": 200.0 + 100.0 * rng.random((n, k)), "p_sfc": p_sfc,
            "pressure": np.zeros((n, k)), "pressure_ifc": np.zeros((n, k)), **SIZE}


def expected(args: dict) -> dict:
    n, k = args["dz"].shape
    p, p_ifc = np.empty((n, k)), np.empty((n, k))
    below = args["p_sfc"][:, -1].copy()
    for lev in range(k - 1, -1, -1):
        p_ifc[:, lev] = below * np.exp(-GRAV_O_RD * args["dz"][:, lev] / args["temp"][:, lev])
        p[:, lev] = np.sqrt(p_ifc[:, lev] * below)
        below = p_ifc[:, lev]
    return {"pressure": p, "pressure_ifc": p_ifc}


if __name__ == "__main__":
    from sdfg_scan.demo import run_sample

    raise SystemExit(0 if run_sample(__import__(__name__)) else 1)
