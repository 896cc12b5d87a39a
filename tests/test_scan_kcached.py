"""``Scan``'s ``kcached`` expansion: level-offset reads from a register ring, bitwise ``sequential``."""

from __future__ import annotations

import copy
import json

import dace
import hand_columns as hc
import icon4py_fixtures as fx
import numpy as np
import pytest
from conftest import cuda_code, nvcc_compile

import sdfg_scan
from sdfg_scan import reference
from sdfg_scan.choice import check_pin
from sdfg_scan.context import context_of
from sdfg_scan.expansions.scan_kcached import ExpandScanKCached, cache_levels, ring_plan
from sdfg_scan.harness import numpy_array
from sdfg_scan.nodes.scan import Scan
from sdfg_scan.transformations import DeadCarryElimination, LiftScans, RemoveScanSelfCopies

N, K = dace.symbol("N"), dace.symbol("K")
F64 = dace.float64


def back3(c, x, k):
    """Window k-3 .. k of input 0 (forward) and a second input read at k only."""
    (s,) = c
    s2 = s * 0.5 + x[0] + x[0, -1] * 1.5 - x[0, -2] + x[0, -3] * x[1]
    return (s2,), (x[0, -1] - x[0, -3],)


def ahead3(c, x, k):
    """Window k .. k+3 (for a backward scan: the levels already visited)."""
    (s,) = c
    s2 = s * 0.5 + x[0] + x[0, 1] * 1.5 - x[0, 2] + x[0, 3] * x[1]
    return (s2,), (x[0, 1] - x[0, 3],)


def gaps(c, x, k):
    """No read at k (the level load is guarded), a look-ahead and a gap: offsets -2, +1."""
    (s,) = c
    s2 = s * 0.25 + x[0, -2] - x[0, 1] * x[1]
    return (s2,), (x[0, 1],)


BODIES = {"back3": back3, "ahead3": ahead3, "gaps": gaps}
CASES = [("back3", False), ("ahead3", True), ("gaps", False), ("gaps", True)]  # behind/ahead, both directions


def _program(name: str, reverse: bool, impl: str, strided: bool = True) -> dace.SDFG:
    f = BODIES[name]

    def prog(a, b, y0, out, ys):
        r, ry = sdfg_scan.scan(f, (y0,), (a, b), axis=1, reverse=reverse, fill=-2.5)
        out[:] = r
        ys[:] = ry

    prog.__annotations__ = dict(a=F64[N, K], b=F64[N, K], y0=F64[N], out=F64[N, K], ys=F64[N, K])
    sdfg = dace.program(prog).to_sdfg(simplify=True)
    sdfg.name = f"kcached_{name}_{int(reverse)}_{impl}"
    for arr in ("a", "b", "out", "ys") if strided else ():  # symbolic strides: one build, both layouts
        for i in (0, 1):
            sdfg.add_symbol(f"s_{arr}_{i}", dace.int64)
        sdfg.arrays[arr].strides = (dace.symbol(f"s_{arr}_0", dace.int64), dace.symbol(f"s_{arr}_1", dace.int64))
        sdfg.arrays[arr].total_size = N * K * 2
    for n, _ in sdfg.all_nodes_recursive():
        if isinstance(n, Scan):
            n.implementation = impl
    return sdfg


_COMPILED: dict = {}


def _compiled(name: str, reverse: bool, impl: str):
    key = (name, reverse, impl)
    if key not in _COMPILED:
        sdfg = _program(name, reverse, impl)
        sdfg.validate()
        _COMPILED[key] = sdfg.compile()
    return _COMPILED[key]


def _run(csdfg, a, b, y0, layout):
    a, b = numpy_array(a, 1, layout), numpy_array(b, 1, layout)
    out, ys = numpy_array(np.zeros(a.shape), 1, layout), numpy_array(np.zeros(a.shape), 1, layout)
    strides = {f"s_{n}_{i}": v.strides[i] // 8 for n, v in (("a", a), ("b", b), ("out", out), ("ys", ys))
               for i in (0, 1)}
    csdfg(a=a, b=b, y0=y0, out=out, ys=ys, N=a.shape[0], K=a.shape[1], **strides)
    return out, ys


def _bits(x):
    return np.ascontiguousarray(x).view(np.uint64)


@pytest.mark.parametrize("name,reverse", CASES, ids=[f"{n}-{'backward' if r else 'forward'}" for n, r in CASES])
def test_bitwise_sequential_and_reference(name, reverse):
    seq, kc = _compiled(name, reverse, "sequential"), _compiled(name, reverse, "kcached")
    rng = np.random.default_rng(7)
    for nlev in (1, 2, 3, 4, 5, 90):
        for ncol in (1, 7):
            a, b = rng.standard_normal((ncol, nlev)), rng.standard_normal((ncol, nlev))
            y0 = rng.standard_normal(ncol)
            (ref_c,), (ref_y,), _ = reference.scan(BODIES[name], (y0,), {0: a, 1: b}, axis=1, reverse=reverse,
                                                   fill=-2.5)
            for layout in ("k", "cell"):
                want = _run(seq, a, b, y0, layout)
                got = _run(kc, a, b, y0, layout)
                for w, g, r in zip(want, got, (ref_c, ref_y), strict=True):
                    assert np.array_equal(_bits(g), _bits(w)), (nlev, ncol, layout)
                    assert np.array_equal(_bits(g), _bits(r)), (nlev, ncol, layout)


def test_plan_of_a_frontend_body():
    sdfg = _program("back3", False, "kcached")
    (node,) = [n for n, _ in sdfg.all_nodes_recursive() if isinstance(n, Scan)]
    plan = ring_plan(node.body)
    assert [(r.array, r.width, sorted(r.dists)) for r in plan.rings] == [("xs0", 4, [-3, -2, -1, 0])]
    assert plan.rings[0].unconditional == {0}  # x[k] is read on every level: the level load is a plain copy


def _no_offsets(c, x, k):
    (s,) = c
    return (s + x[0] * x[1],), ()


def _snapshot(sdfg) -> str:
    return json.dumps(sdfg.to_json(), sort_keys=True)


def test_does_not_apply_without_offset_reads():
    def prog(a, b, y0, out):
        out[:] = sdfg_scan.scan(_no_offsets, (y0,), (a, b), axis=1)

    prog.__annotations__ = dict(a=F64[N, K], b=F64[N, K], y0=F64[N], out=F64[N, K])
    sdfg = dace.program(prog).to_sdfg(simplify=True)
    ((node, state),) = [(n, st) for n, st in sdfg.all_nodes_recursive() if isinstance(n, Scan)]
    why = ExpandScanKCached.applies(node, context_of(node, state))
    assert why is not None and "two or more constant level offsets" in why
    before = _snapshot(node.body)
    assert isinstance(cache_levels(node.body), str)
    assert _snapshot(node.body) == before
    with pytest.raises(ValueError, match="pinned implementation 'kcached'"):
        check_pin(node, state, "kcached")


def test_does_not_apply_before_dead_carry_elimination():
    """A delay line not yet turned into offset reads (before DeadCarryElimination): x is read at k only."""
    sdfg = hc.column("kc_guard", extra="delay_line")
    before = _snapshot(sdfg)
    why = ring_plan(sdfg)
    assert isinstance(why, str) and "'x' is read at one level offset only" in why
    assert isinstance(cache_levels(sdfg), str) and _snapshot(sdfg) == before


@pytest.mark.parametrize("backward", [False, True], ids=["forward", "backward"])
def test_after_dead_carry_elimination_bitwise(backward):
    """A lifted-shape column: the delay line becomes ``x[k -/+ 1]`` (DeadCarryElimination), read beside
    ``x[k]`` (into a nested SDFG): both come from the ring, bitwise the original."""
    sdfg = hc.column(f"kc_dce_{int(backward)}", backward=backward, extra="delay_line")
    assert sdfg.apply_transformations_repeated(DeadCarryElimination, validate=False) == 1
    xf = copy.deepcopy(sdfg)
    xf.name = sdfg.name + "_kc"
    plan = cache_levels(xf)
    assert not isinstance(plan, str), plan
    assert [(r.array, sorted(r.dists)) for r in plan.rings] == [("x", [-1, 0])]
    xf.validate()
    a, b = sdfg.compile(), xf.compile()
    for nlev in (0, 1, 2, 6):
        fx.assert_bitwise_equal(hc.run_column(a, nlev), hc.run_column(b, nlev))


@pytest.mark.fixtures
def test_graupel_after_dead_carry_elimination_plans_rho_and_t():
    """graupel's scan: rho and t are delay lines; after DeadCarryElimination each is read at k and
    k - 1, and kcached caches both (the expansion validates; the bitwise run is the column test above)."""
    sdfg = fx.load("graupel_run.opt_nohooks")
    assert sdfg.apply_transformations_repeated(LiftScans, validate=False) == 1
    (scan,) = [n for n, _ in sdfg.all_nodes_recursive() if isinstance(n, Scan)]
    assert isinstance(ring_plan(scan.body), str)  # before: rho and t are read at k only
    for t in (RemoveScanSelfCopies, DeadCarryElimination):
        scan.body.apply_transformations_repeated(t, validate=False)
    plan = ring_plan(scan.body)
    assert sorted((r.array, tuple(sorted(r.dists))) for r in plan.rings) == [("rho_", (-1, 0)), ("t_", (-1, 0))]
    scan.implementation = "kcached"
    sdfg.expand_library_nodes(recursive=False)
    sdfg.validate()


@pytest.mark.gpu
def test_gpu_codegen_keeps_the_ring_in_the_kernel(tmp_path):
    sdfg = _program("back3", False, "kcached", strided=False)
    sdfg.name = "kcached_gpu"
    sdfg.apply_gpu_transformations()
    code = cuda_code(sdfg)
    assert "__global__" in code and "kcache_shift" in code
    nvcc_compile(code, tmp_path)
