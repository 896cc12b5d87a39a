"""icon4py's ``diagnose_pressure`` as a backward scan with a first-level boundary.

From the surface (last level) upwards, hydrostatic interface pressure decays level by level::

    p_ifc[nlev] = p_sfc                                     # the first visited level (boundary)
    p_ifc[k]    = p_ifc[k+1] * exp(-g * dz[k] / (rd * t[k]))
    p[k]        = sqrt(p_ifc[k] * p_ifc[k+1])

icon4py carries an ``is_first_level`` flag to treat the surface level; here the surface pressure is
the scan's per-column ``init`` and the recurrence is a backward ``LinearRecurrence`` (``b = 0``) on
the decay factors, so no level branches. Checked bitwise against the NumPy loop.
Run: ``python samples/diagnose_pressure.py``.
"""

import dace
import numpy as np

from sdfg_scan import reference
from sdfg_scan.harness import numpy_array, one_node_sdfg
from sdfg_scan.nodes import LinearRecurrence

TITLE = "diagnose_pressure-like backward scan from the surface"
IMPLEMENTATIONS = ["sequential", "blocked", "auto"]
SIZE = {"N": 20480, "K": 65}
N, K = dace.symbol("N"), dace.symbol("K")
GRAV, RD = 9.80665, 287.04


def build(implementation: str) -> dace.SDFG:
    node = LinearRecurrence("pressure_ifc", axis=1, reverse=True, has_init=True)
    node.implementation = implementation
    f = ([N, K], dace.float64, True)
    return one_node_sdfg(f"sample_diagnose_pressure_{implementation}", node,
                         {"a": f, "b": f, "init": ([N], dace.float64, False)}, {"_out": f}, 1, "cell")


def inputs(rng: np.random.Generator) -> dict:
    n, k = SIZE["N"], SIZE["K"]
    temp = 200.0 + 100.0 * rng.random((n, k))
    dz = 50.0 + 400.0 * rng.random((n, k))
    decay = np.exp(-GRAV * dz / (RD * temp))
    return {"a": numpy_array(decay, 1, "cell"), "b": numpy_array(np.zeros((n, k)), 1, "cell"),
            "init": 95000.0 + 10000.0 * rng.random(n), "_out": numpy_array(np.zeros((n, k)), 1, "cell"), **SIZE}


def expected(args: dict) -> dict:
    # the plain loop: p_ifc[k] = p_ifc[k+1] * decay[k] (+ 0), starting from the surface pressure
    p_ifc = args["init"].copy()
    out = np.empty_like(args["a"])
    for k in range(args["a"].shape[1] - 1, -1, -1):
        p_ifc = args["a"][:, k] * p_ifc + args["b"][:, k]
        out[:, k] = p_ifc
    assert np.array_equal(out, reference.linear_recurrence(args["a"], args["b"], 1, True, args["init"]))
    return {"_out": out}


if __name__ == "__main__":
    from sdfg_scan.demo import run_sample

    raise SystemExit(0 if run_sample(__import__(__name__)) else 1)
