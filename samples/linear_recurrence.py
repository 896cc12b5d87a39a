"""A first-order linear recurrence over K: ``y[k] = a[k] * y[k-1] + b[k]`` (relaxation, implicit decay).

Lowered from ``sdfg_scan.linear_recurrence(a, b, axis=1, init=y0)`` semantics to a
``LinearRecurrence`` node with a per-column initial value; checked bitwise against the NumPy loop.
Run: ``python samples/linear_recurrence.py``.
"""

import dace
import numpy as np

from sdfg_scan import reference
from sdfg_scan.harness import numpy_array, one_node_sdfg
from sdfg_scan.nodes import LinearRecurrence

TITLE = "linear recurrence y = a*y + b (cell-contiguous)"
IMPLEMENTATIONS = ["sequential", "blocked", "auto"]
SIZE = {"N": 20480, "K": 65}
N, K = dace.symbol("N"), dace.symbol("K")


def build(implementation: str) -> dace.SDFG:
    node = LinearRecurrence("linrec_k", axis=1, has_init=True)
    node.implementation = implementation
    f = ([N, K], dace.float64, True)
    return one_node_sdfg(f"sample_linrec_{implementation}", node,
                         {"a": f, "b": f, "init": ([N], dace.float64, False)}, {"_out": f}, 1, "cell")


def inputs(rng: np.random.Generator) -> dict:
    shape = (SIZE["N"], SIZE["K"])
    return {"a": numpy_array(rng.random(shape) * 0.9, 1, "cell"),
            "b": numpy_array(rng.standard_normal(shape), 1, "cell"),
            "init": rng.standard_normal(SIZE["N"]), "_out": numpy_array(np.zeros(shape), 1, "cell"), **SIZE}


def expected(args: dict) -> dict:
    return {"_out": reference.linear_recurrence(args["a"], args["b"], 1, init=args["init"])}


if __name__ == "__main__":
    from sdfg_scan.demo import run_sample

    raise SystemExit(0 if run_sample(__import__(__name__)) else 1)
