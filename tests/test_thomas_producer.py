"""The CPU ``thomas`` expansion takes in the map that computes its coefficients (thomas_producer.py).

One SDFG per layout holds several solves (and a factorisation), each fed by its own gt4py-like map
over (level, cell) that reads its inputs at level offsets: the ones that may absorb their map (default
and small blocks, a map computing only some coefficients, a ``TridiagonalFactor``) and the ones that
must not (a coefficient read elsewhere, a map that also writes another array, a map reading the
solve's own output, a map not covering the last level). Every output is compared bitwise with
``reference.tridiagonal_solve`` (``tridiagonal_factor``) on the coefficients computed by NumPy, and
the expanded SDFG shows which maps were absorbed (their coefficient arrays are gone).
"""

from __future__ import annotations

import copy

import dace
import numpy as np
import pytest

from sdfg_scan import reference
from sdfg_scan.expansions.thomas_producer import find_producer
from sdfg_scan.harness import numpy_array, strides_for
from sdfg_scan.nodes import TridiagonalFactor, TridiagonalSolve
from sdfg_scan.nodes.tridiagonal_solve import factor_kernel, thomas_kernel

N, K = dace.symbol("N"), dace.symbol("K")
# solve -> (block_size, what its map does differently); "absorbed": whether the map may be taken in
CASES = {
    "fused": (0, None, True),
    "fused_block64": (64, None, True),
    "fused_two": (0, "two", True),          # the map computes a and b; c and d are program inputs
    "shared": (0, "shared", False),         # b is also copied to an output
    "extra": (0, "extra", False),           # the map also writes another array
    "own_output": (0, "own_output", False),  # the map reads the solve's output
    "factor": (0, "factor", True),          # a TridiagonalFactor: the map computes a, b, c
}
SHORT = {"short": (0, "short", False)}      # the map skips the last level (found only: never run)
SIZES = [(1, 1), (3, 2), (130, 65), (64, 1), (5, 3)]


def _coefficients(p, q, r, s):
    """The map's arithmetic in NumPy (levels of p and r are shifted by one: p[:, k] is level k - 1)."""
    a = p[:, :-1] * s[:, None]
    b = 4.0 + q * q
    c = r[:, 1:] - p[:, 1:]
    d = p[:, 1:] + r[:, :-1]
    return a, b, c, d


def _add_case(sdfg: dace.SDFG, state: dace.SDFGState, name: str, block: int, variant: str | None, layout: str):
    coefs = {"two": "ab", "factor": "abc"}.get(variant or "", "abcd")
    strides = strides_for([N, K], 1, layout)
    tmp = {}
    for c in coefs:
        tmp[c] = f"{name}_{c}"
        sdfg.add_array(tmp[c], [N, K], dace.float64, strides=strides, transient=True)
    outputs = {"w": f"w_{name}", "cp": f"cp_{name}"} if variant == "factor" else {"x": f"x_{name}"}
    for out in outputs.values():
        sdfg.add_array(out, [N, K], dace.float64, strides=strides)
    sdfg.add_scalar(f"{name}_t", dace.float64, transient=True)
    last = "K - 1" if variant == "short" else "K"
    me, mx = state.add_map(f"{name}_map", {"k": f"0:{last}", "i": "0:N"})
    ins = {"p": ["p[i, k]", "p[i, k + 1]"], "q": ["q[i, k]"], "r": ["r[i, k]", "r[i, k + 1]"], "s": ["s[i]"]}
    if variant == "own_output":
        ins["x_" + name] = [f"x_{name}[i, k]"]
    reads = {arr: state.add_read(arr) for arr in ins}
    pre = state.add_tasklet(f"{name}_pre", ["_p", "_s"], ["_t"], "_t = _p * _s")
    body = ("_a = _t\n_b = 4.0 + _q * _q\n_c = _r1 - _p1\n_d = _p1 + _r0" if variant != "own_output" else
            "_a = _t\n_b = 4.0 + _q * _q + 0.0 * _x\n_c = _r1 - _p1\n_d = _p1 + _r0")
    body = "\n".join(line for line in body.split("\n") if line[1] in coefs)
    outs = sorted({"_" + c for c in coefs} | ({"_e"} if variant == "extra" else set()))
    if variant == "extra":
        body += "\n_e = _q"
    conns = sorted({"_t", "_q", "_r0", "_r1", "_p1"} | ({"_x"} if variant == "own_output" else set()))
    coef = state.add_tasklet(f"{name}_coef", conns, outs, body)
    tscal = state.add_access(f"{name}_t")
    state.add_memlet_path(reads["p"], me, pre, dst_conn="_p", memlet=dace.Memlet("p[i, k]"))
    state.add_memlet_path(reads["s"], me, pre, dst_conn="_s", memlet=dace.Memlet("s[i]"))
    state.add_edge(pre, "_t", tscal, None, dace.Memlet(f"{name}_t[0]"))
    state.add_edge(tscal, None, coef, "_t", dace.Memlet(f"{name}_t[0]"))
    for conn, mem in (("_q", "q[i, k]"), ("_r0", "r[i, k]"), ("_r1", "r[i, k + 1]"), ("_p1", "p[i, k + 1]")) + (
            (("_x", f"x_{name}[i, k]"),) if variant == "own_output" else ()):
        state.add_memlet_path(reads[mem.split("[")[0]], me, coef, dst_conn=conn, memlet=dace.Memlet(mem))
    node = TridiagonalFactor(name, axis=1) if variant == "factor" else TridiagonalSolve(name, axis=1, block_size=block)
    node.implementation = "thomas"
    state.add_node(node)
    for c in ("abc" if variant == "factor" else "abcd"):
        if c in tmp:
            acc = state.add_access(tmp[c])
            state.add_memlet_path(coef, mx, acc, src_conn="_" + c, memlet=dace.Memlet(f"{tmp[c]}[i, k]"))
            state.add_edge(acc, None, node, c, dace.Memlet(f"{tmp[c]}[0:N, 0:K]"))
            if variant == "shared" and c == "b":
                sdfg.add_array(f"b_{name}", [N, K], dace.float64, strides=strides)
                state.add_nedge(acc, state.add_write(f"b_{name}"), dace.Memlet(f"{tmp[c]}[0:N, 0:K]"))
        else:
            state.add_edge(state.add_read(c), None, node, c, dace.Memlet(f"{c}[0:N, 0:K]"))
    if variant == "extra":
        sdfg.add_array(f"e_{name}", [N, K], dace.float64, strides=strides)
        state.add_memlet_path(coef, mx, state.add_write(f"e_{name}"), src_conn="_e", memlet=dace.Memlet(f"e_{name}[i, k]"))
    for conn, out in outputs.items():
        state.add_edge(node, conn, state.add_write(out), None, dace.Memlet(f"{out}[0:N, 0:K]"))


def build(layout: str, cases: dict = CASES) -> dace.SDFG:
    sdfg = dace.SDFG(f"test_thomas_producer_{layout}")
    for name, shape in (("p", [N, K + 1]), ("q", [N, K]), ("r", [N, K + 1]), ("c", [N, K]), ("d", [N, K])):
        sdfg.add_array(name, shape, dace.float64, strides=strides_for(shape, 1, layout))
    sdfg.add_array("s", [N], dace.float64)
    state = sdfg.add_state()
    for name, (block, variant, _) in cases.items():
        _add_case(sdfg, state, name, block, variant, layout)
    sdfg.validate()
    return sdfg


def _find(sdfg, name):
    return next((n, st) for n, st in sdfg.all_nodes_recursive()
                if isinstance(n, (TridiagonalSolve, TridiagonalFactor)) and n.label == name)


@pytest.mark.parametrize("layout", ["cell", "k"])
def test_which_maps_are_found(layout):
    cases = {**CASES, **SHORT}
    sdfg = build(layout, cases)
    for name, (_, _, absorbed) in cases.items():
        node, state = _find(sdfg, name)
        kernel = (factor_kernel if isinstance(node, TridiagonalFactor) else thomas_kernel)(dace.float64)
        found = find_producer(node, state, kernel, 1)
        assert (found is not None) == absorbed, name   # find_producer itself does not look at the layout
    before = copy.deepcopy(sdfg).to_json()
    sdfg.expand_library_nodes()
    left = {n for n in sdfg.arrays if any(n == f"{c}_{x}" for c in cases for x in "abcd")}
    for name, (_, variant, absorbed) in cases.items():
        mine = {f"{name}_{c}" for c in {"two": "ab", "factor": "abc"}.get(variant or "", "abcd")}
        assert (not (mine & left)) == (absorbed and layout == "cell"), name
    assert before != sdfg.to_json()


_COMPILED: dict = {}


def compiled(layout: str):
    if layout not in _COMPILED:
        _COMPILED[layout] = build(layout).compile()
    return _COMPILED[layout]


@pytest.mark.parametrize("layout", ["cell", "k"])
def test_bitwise_equal_to_the_reference(layout):
    prog = compiled(layout)
    rng = np.random.default_rng(7)
    for ncol, nlev in SIZES:
        p, r = (rng.standard_normal((ncol, nlev + 1)) for _ in range(2))
        q, c_in, d_in = (rng.standard_normal((ncol, nlev)) for _ in range(3))
        s = rng.standard_normal(ncol)
        args = {"p": numpy_array(p, 1, layout), "r": numpy_array(r, 1, layout), "q": numpy_array(q, 1, layout),
                "c": numpy_array(c_in, 1, layout), "d": numpy_array(d_in, 1, layout), "s": s.copy()}
        outs = {}
        for name, (_, variant, _) in CASES.items():
            for out in (("w", "cp") if variant == "factor" else ("x",)):
                outs[f"{out}_{name}"] = numpy_array(np.zeros((ncol, nlev)), 1, layout)
            if variant == "shared":
                outs[f"b_{name}"] = numpy_array(np.zeros((ncol, nlev)), 1, layout)
            if variant == "extra":
                outs[f"e_{name}"] = numpy_array(np.zeros((ncol, nlev)), 1, layout)
        prog(**args, **outs, N=ncol, K=nlev)
        a, b, c, d = _coefficients(p, q, r, s)
        full = reference.tridiagonal_solve(a, b, c, d, axis=1)
        bits = lambda v: v.view(np.uint64)  # noqa: E731
        for name in ("fused", "fused_block64", "shared", "extra", "own_output"):
            assert np.array_equal(bits(outs[f"x_{name}"]), bits(full)), (name, layout, ncol, nlev)
        two = reference.tridiagonal_solve(a, b, c_in, d_in, axis=1)
        assert np.array_equal(bits(outs["x_fused_two"]), bits(two)), (layout, ncol, nlev)
        assert np.array_equal(outs["b_shared"], b) and np.array_equal(outs["e_extra"], q)
        w, cp = reference.tridiagonal_factor(a, b, c, axis=1)
        assert np.array_equal(bits(outs["w_factor"]), bits(w)) and np.array_equal(bits(outs["cp_factor"]), bits(cp))
