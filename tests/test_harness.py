"""``sdfg_scan.harness.load_or_compile``: an earlier build is loaded with the SDFG it was generated from."""

import copy

import dace
import numpy as np
import pytest

from sdfg_scan.harness import load_or_compile, numpy_array, one_node_sdfg
from sdfg_scan.nodes import CumulativeScan

N, K = dace.symbol("N"), dace.symbol("K")
FIELD = ([N, K], dace.float64, True)


def test_load_or_compile_calls_an_earlier_build_with_every_symbol(tmp_path):
    """A one-node SDFG over [N, K], K-contiguous: before expansion its argument list has no ``N`` (only
    the expansion's map uses it), so DaCe's ``use_cache`` would load the build with shifted arguments.
    ``load_or_compile`` loads it with the saved, expanded SDFG; the sums are NumPy's, bit for bit."""
    sdfg = one_node_sdfg("harness_cached_cumsum", CumulativeScan("cs", op="sum", axis=1), {"_in": FIELD},
                         {"_out": FIELD}, 1, "k")
    sdfg.build_folder = str(tmp_path / sdfg.name)
    fresh = copy.deepcopy(sdfg)
    assert "N" not in sdfg.arglist()   # the pitfall load_or_compile avoids
    sdfg.compile()                     # an earlier build
    fresh.compile = lambda *a, **k: pytest.fail("compiled again instead of loading the earlier build")
    prog = load_or_compile(fresh)      # loaded, not compiled again
    assert "N" in prog.sdfg.arglist()
    x = numpy_array(np.random.default_rng(1).standard_normal((5, 7)), 1, "k")
    out = np.zeros_like(x)
    prog(_in=x, _out=out, N=5, K=7)
    assert np.array_equal(out, np.cumsum(x, axis=1))
