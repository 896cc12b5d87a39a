"""Cumulative sum over the levels of every column (e.g. integrated mass above a level).

``np.cumsum(x, axis=1)`` inside a ``@dace.program`` lowers to a ``CumulativeScan`` node; this sample
builds it in ICON's cell-contiguous layout (``layout="cell"``) and checks it bitwise against NumPy.
Run: ``python samples/cumsum_column.py``.
"""

import dace
import numpy as np

from sdfg_scan.harness import numpy_array, one_node_sdfg
from sdfg_scan.nodes import CumulativeScan

TITLE = "cumsum over K (cell-contiguous)"
IMPLEMENTATIONS = ["sequential", "blocked", "auto"]
SIZE = {"N": 20480, "K": 65}
N, K = dace.symbol("N"), dace.symbol("K")


def build(implementation: str) -> dace.SDFG:
    node = CumulativeScan("cumsum_k", op="sum", axis=1)
    node.implementation = implementation
    return one_node_sdfg(f"sample_cumsum_{implementation}", node, {"_in": ([N, K], dace.float64, True)},
                         {"_out": ([N, K], dace.float64, True)}, 1, "cell")


def inputs(rng: np.random.Generator) -> dict:
    shape = (SIZE["N"], SIZE["K"])
    return {"_in": numpy_array(rng.random(shape), 1, "cell"), "_out": numpy_array(np.zeros(shape), 1, "cell"),
            **SIZE}


def expected(args: dict) -> dict:
    return {"_out": np.cumsum(args["_in"], axis=1)}


if __name__ == "__main__":
    from sdfg_scan.demo import run_sample

    raise SystemExit(0 if run_sample(__import__(__name__)) else 1)
