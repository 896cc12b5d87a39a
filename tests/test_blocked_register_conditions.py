"""``blocked`` / ``blocked_simd`` on a hand-written DaCe column loop whose branch condition reads a one-element
array (DaCe's frontend: ``t = x[k, i] * 1.0; c = t > 0.5`` assigns ``c = (t[0] > 0.5)`` on an interstate
edge). The kernel keeps ``t`` in a register; the condition indexed the register (``_t_t[0]``: did not
compile, and ``optimize`` picks ``blocked`` by default). Found by a helper's frontend probe."""

import dace
import numpy as np
import pytest

import sdfg_scan
from sdfg_scan.nodes.scan import Scan

K, N = dace.symbol("K"), dace.symbol("N")


@dace.program
def _gated_sum(x: dace.float64[K, N], a0: dace.float64[N], oa: dace.float64[K, N]):
    for i in dace.map[0:N]:
        a = a0[i]
        for k in range(K):
            t = x[k, i] * 1.0
            c = t > 0.5
            if c:
                a = a + t
            oa[k, i] = a


def _entry_copies(sdfg: dace.SDFG) -> None:
    """``o = i`` tasklets between two access nodes -> direct copies (the entry copy gt4py's columns have,
    which LiftScans matches for the carry's init)."""
    for n, st in list(sdfg.all_nodes_recursive()):
        if not isinstance(n, dace.nodes.Tasklet) or len(n.in_connectors) != 1 or len(n.out_connectors) != 1:
            continue
        (i,), (o,) = n.in_connectors, n.out_connectors
        if n.code.as_string.replace(" ", "").strip() != f"{o}={i}":
            continue
        (ie,), (oe,) = st.in_edges(n), st.out_edges(n)
        if isinstance(ie.src, dace.nodes.AccessNode) and isinstance(oe.dst, dace.nodes.AccessNode):
            st.add_edge(ie.src, None, oe.dst, None,
                        dace.Memlet(data=ie.data.data, subset=ie.data.subset, other_subset=oe.data.subset))
            st.remove_node(n)


@pytest.mark.parametrize("impl", ["blocked", "blocked_simd", "blocked_simd_exact"])
def test_a_condition_on_a_one_element_array_compiles_and_is_bitwise(impl):
    sdfg = _gated_sum.to_sdfg(simplify=True)
    sdfg.name = f"gated_sum_{impl}"
    _entry_copies(sdfg)
    sdfg_scan.optimize(sdfg, reproducibility="replay")
    (node,) = [n for n, _ in sdfg.all_nodes_recursive() if isinstance(n, Scan)]
    node.implementation = impl
    x = np.random.default_rng(0).random((7, 300))
    oa = np.zeros((7, 300))
    sdfg(x=x, a0=np.zeros(300), oa=oa, K=7, N=300)
    want = np.zeros(300)
    for k in range(7):   # the loop's own order of additions
        want = np.where(x[k] > 0.5, want + x[k], want)
        assert np.array_equal(oa[k], want), k
