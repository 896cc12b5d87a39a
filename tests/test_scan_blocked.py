"""``Scan``'s ``blocked`` (exact) and ``blocked_simd`` (replay) expansions on the real icon4py scans.

Each fixture is lifted by ``sdfg_scan.optimize`` (``columns="cells"``), pinned to one blocked
implementation and compared with the untransformed program (both compiled with the exact flags,
:mod:`icon4py_fixtures`): bit for bit for ``blocked``, within 1e-12 relative for ``blocked_simd`` (the
small fixtures have no vectorised libm call where the scalar one would round differently by more).
"""

from __future__ import annotations

import copy
from pathlib import Path

import dace
import icon4py_fixtures as fx
import numpy as np
import pytest
from disassembly import scalar_math_in_map_loops

import sdfg_scan
from sdfg_scan.choice import choose, cost_of, refusal
from sdfg_scan.context import context_of
from sdfg_scan.nodes.scan import Scan

FORMS = ["solve_tridiagonal_matrix_for_w_back_substitution.opt", "solve_tridiagonal_matrix_for_w_forward_sweep.opt",
         "diagnose_pressure.opt", "minimal_cumsum_k.opt"]
GRAUPEL_INPLACE = {**{f"q_out_{i}": f"q_in_{i}" for i in range(2, 6)}, "t_out": "te"}


def _lifted(form: str, impl: str | None = None, reproducibility: str = "exact", vectorize_maps: bool = False):
    sdfg = fx.load(form)
    inplace = GRAUPEL_INPLACE if form.startswith("graupel") else None
    sdfg_scan.optimize(sdfg, target="cpu", reproducibility=reproducibility, inplace=inplace,
                       vectorize_maps=vectorize_maps)
    scans = [(n, st) for n, st in sdfg.all_nodes_recursive() if isinstance(n, Scan)]
    for n, _ in scans:
        if impl is not None:
            n.implementation = impl
    return sdfg, scans


def _close(a: dict, b: dict, rtol: float) -> None:
    for k in sorted(a):
        x, y = a[k], b[k]
        if x.dtype.kind != "f":
            assert np.array_equal(x, y), k
            continue
        assert np.array_equal(np.isfinite(x), np.isfinite(y)), f"'{k}': NaN/Inf positions differ"
        np.testing.assert_allclose(x, y, rtol=rtol, atol=0, err_msg=k)


@pytest.mark.parametrize("impl", ["blocked", "blocked_simd_exact"])
@pytest.mark.parametrize("form", FORMS)
def test_blocked_is_bitwise_the_original(form, impl):
    """``blocked`` (per-cell code) and ``blocked_simd_exact`` (the if-converted loop vectorised, exact math)
    on real icon4py scans: bitwise the IEEE-strict original."""
    sdfg, scans = _lifted(form, impl)
    if not scans or any(n.columns != "cells" for n, _ in scans):
        pytest.skip(f"{form}: no scan with its map over cells after optimize")
    kw = fx.inputs(form, fx.load(form))
    fx.assert_bitwise_equal(fx.run(f"orig_{form}", fx.load(form), kw), fx.run(f"{impl}_{form}", sdfg, kw))


def _avx512() -> bool:
    try:
        return "avx512f" in Path("/proc/cpuinfo").read_text()
    except OSError:
        return False


def _scan_calls(library: str, callee: str) -> list[str]:
    """The program's functions other than the vectorised maps' that call ``callee`` (a regular expression):
    the scan's own loop."""
    from disassembly import callers

    return [f for f in callers(library, callee) if "_sdfg_scan_map_" not in f]


def _calls_libmvec(csdfg) -> bool:
    """Whether a compiled program's code calls vector math (``_ZGV...`` variants: a vectorised loop)."""
    from disassembly import vector_math_called

    return vector_math_called(csdfg._lib._library_filename)


@pytest.mark.parametrize("vectorize_maps", [False, True])
@pytest.mark.parametrize("form", FORMS[:3])
def test_blocked_simd_is_close_to_the_original(form, vectorize_maps):
    sdfg, scans = _lifted(form, "blocked_simd", "replay", vectorize_maps)
    kw = fx.inputs(form, fx.load(form))
    _close(fx.run(f"orig_{form}", fx.load(form), kw),
           fx.run(f"blocked_simd_{form}_{vectorize_maps}", sdfg, kw), 1e-12)
    if form.startswith("diagnose_pressure") and _avx512():
        # its body calls exp/log: the block loop must vectorise (a silent scalar fallback kept the right
        # values at a third less speed on graupel before VectorMath asked for 512-bit vectors)
        assert _calls_libmvec(fx.compile_once(f"blocked_simd_{form}_{vectorize_maps}", sdfg))


@pytest.mark.long
def test_graupel_blocked_kcached_is_bitwise_the_original():
    """``graupel_run_dyn``: after ``DeadCarryElimination`` its ``rho`` and ``t`` delay lines are reads at
    k and k - 1; ``blocked_kcached`` serves them from ``[2, B]`` rings, bitwise the IEEE-strict original."""
    from sdfg_scan.expansions.scan_kcached import ring_plan

    form = "graupel_run_dyn.opt_nohooks"
    sdfg, scans = _lifted(form, "blocked_kcached")
    plan = ring_plan(scans[0][0].body)
    assert not isinstance(plan, str) and len(plan.rings) == 2
    kw = fx.inputs(form, fx.load(form), ncells=2048, nlev=65)
    fx.assert_bitwise_equal(fx.run(f"orig_{form}", fx.load(form), kw), fx.run(f"blocked_kc_{form}", sdfg, kw))


@pytest.mark.long
def test_graupel_blocked_simd_exact_is_bitwise_the_original():
    """``graupel_run_dyn`` with its scan pinned to ``blocked_simd_exact`` (if-converted, vectorised; glibc's
    ``exp``/``log`` per lane, the checked ``pow``) and the maps vectorised: bitwise the IEEE-strict original,
    and the scan's cell loop vectorised (it calls the lane clones)."""
    form = "graupel_run_dyn.opt_nohooks"
    sdfg, _ = _lifted(form, "blocked_simd_exact", "exact", vectorize_maps=True)
    kw = fx.inputs(form, fx.load(form), ncells=2048, nlev=65)
    fx.assert_bitwise_equal(fx.run(f"orig_{form}", fx.load(form), kw), fx.run(f"simd_exact_{form}", sdfg, kw))
    lib = fx.compile_once(f"simd_exact_{form}", sdfg)._lib._library_filename
    if _avx512():   # the scan's loop (not only the maps') calls the lane variants: the variants are always built
        assert _scan_calls(lib, "_ZGVeN8vvv__sdfg_scan_xpow1_s")


@pytest.mark.long
def test_graupel_auto_exact_is_blocked_timed_and_bitwise_the_original_on_every_call():
    """``graupel_run_dyn`` under ``optimize(reproducibility="exact")``: its scan is ``blocked_timed`` (a body
    with libm calls), and every call, the trial calls of both kernels and the calls after the choice, is
    bitwise the IEEE-strict original."""
    from sdfg_scan.expansions.scan_blocked import TIMED_TRIALS

    form = "graupel_run_dyn.opt_nohooks"
    sdfg, scans = _lifted(form)
    assert [n.implementation for n, _ in scans] == ["blocked_timed"]
    kw = fx.inputs(form, fx.load(form), ncells=2048, nlev=65)
    ref = fx.run(f"orig_{form}", fx.load(form), kw)
    timed = fx.compile_once(f"timed_{form}", sdfg)
    for _ in range(2 * TIMED_TRIALS + 1):
        fx.assert_bitwise_equal(ref, fx.outputs_of({"t": timed}, kw)["t"])


@pytest.mark.long
def test_graupel_exact_vectorised_maps_are_bitwise_the_original():
    """``graupel_run_dyn`` under ``exact`` with ``vectorize_maps=True``: gt4py's pointwise maps as vectorised
    loops whose ``pow``/``exp`` are the program's scalar calls on the lanes that take their branch
    (``VectorizeCellMap(exact=True)``): bitwise the IEEE-strict original, and every map's loop vectorised."""
    form = "graupel_run_dyn.opt_nohooks"
    sdfg, _ = _lifted(form, None, "exact", vectorize_maps=True)
    kw = fx.inputs(form, fx.load(form), ncells=2048, nlev=65)
    fx.assert_bitwise_equal(fx.run(f"orig_{form}", fx.load(form), kw), fx.run(f"exact_vmaps_{form}", sdfg, kw))
    assert not scalar_math_in_map_loops(fx.compile_once(f"exact_vmaps_{form}", sdfg)._lib._library_filename)


@pytest.mark.long
@pytest.mark.parametrize("vectorize_maps", [False, True], ids=["scan", "scan+maps"])
def test_graupel_replay_within_the_contract(vectorize_maps):
    """``graupel_run_dyn`` with ``blocked_simd`` (vector ``pow``/``exp`` in the scan, predicated by the lanes
    that take their branch): within rtol 1e-6 on
    at least 99.9 % of every float output's entries, no new NaN/Inf, the same booleans, against the
    IEEE-strict original (issue 9's replay contract). With its pointwise maps vectorised too
    (``vectorize_maps=True``: the accurate ``pow`` of ``vector_pow`` under replay) the same contract holds;
    with the fast ``pow`` it did not (the precipitation map moved cancellation residuals: 2.6 % of
    ``q_out_1``), and the maps' cell loops are vectorised (gathers of the accurate ``pow``'s tables, no scalar
    ``exp``/``log``)."""
    from disassembly import map_gathers

    form = "graupel_run_dyn.opt_nohooks"
    sdfg, _ = _lifted(form, "blocked_simd", "replay", vectorize_maps=vectorize_maps)
    kw = fx.inputs(form, fx.load(form), ncells=2048, nlev=65)
    ref, got = fx.run(f"orig_{form}", fx.load(form), kw), fx.run(f"replay_{form}_{vectorize_maps}", sdfg, kw)
    if _avx512():   # the scan's block loop vectorised (libmvec calls), not a scalar fallback
        lib = fx.compile_once(f"replay_{form}_{vectorize_maps}", sdfg)
        assert _calls_libmvec(lib)
        # and every vectorised map's cell loop (the precipitation map stayed scalar under GCC 12's jump
        # threading, and with a bool computed from a scalar-entry-point exp: VectorMath, scan_blocked_codegen)
        assert not scalar_math_in_map_loops(lib._lib._library_filename)
        assert not vectorize_maps or map_gathers(lib._lib._library_filename) > 0
        # and the scan's branches make their vector calls through the predicated variants (PREDICATED_MATH)
        assert _scan_calls(lib._lib._library_filename, r"_ZGVeN8vv__sdfg_scan_p(exp|log)1_s")
    for k in sorted(ref):
        x, y = ref[k], got[k]
        if x.dtype.kind != "f":
            assert np.array_equal(x, y), k
            continue
        fin = np.isfinite(x)
        assert not np.any(fin & ~np.isfinite(y)), f"'{k}': new NaN/Inf"
        err = np.abs(x[fin] - y[fin])
        rel = err / np.maximum(np.abs(x[fin]), np.finfo(float).tiny)
        assert np.mean(rel > 1e-6) <= 1e-3, (k, float(rel.max()), float(np.mean(rel > 1e-6)))
        if vectorize_maps:   # and, entry by entry, the bound the maps form was held to before stop 32
            floor = 1e-12 * float(np.max(np.abs(x[fin]), initial=0.0))
            assert np.all((rel <= 1e-6) | (err <= floor)), (k, float(err.max()), floor)


def test_blocked_is_eligible_on_cell_contiguous_cpu_and_ranked_by_measurement():
    """``blocked`` applies to a lifted cell-contiguous scan; the cost model ranks it below
    ``levels_outside`` (measured: forward sweep 20480 x 65, 7.5 ms against 5.9 ms), and, for a body
    without libm calls, ``blocked_simd`` below ``blocked`` (selects cost more than branches)."""
    form = FORMS[0]
    sdfg, scans = _lifted(form)
    node, state = scans[0]
    for floor in ("exact", "replay"):
        choice = choose(node, state, floor=floor)
        assert choice.implementation == "levels_outside" and "runner-up blocked" in choice.reason
    ctx = context_of(node, state, "replay")
    impls = type(node).implementations
    assert refusal(node, "blocked", impls["blocked"], ctx) is None
    assert refusal(node, "blocked_simd", impls["blocked_simd"], ctx) is None
    assert cost_of(node, impls["blocked"], ctx) < cost_of(node, impls["blocked_simd"], ctx)


def _with_libm_calls():
    """The forward sweep (lifted, cell-contiguous) with three libm calls added to its body."""
    import dace
    from dace.properties import CodeBlock

    from sdfg_scan.cost import math_calls

    sdfg, scans = _lifted(FORMS[1])
    node, state = scans[0]
    assert math_calls(node) == 0
    tasklets = [t for t, _ in node.body.all_nodes_recursive() if isinstance(t, dace.nodes.Tasklet)
                and t.language == dace.Language.Python and t.out_connectors]
    t = tasklets[0]
    out = next(iter(t.out_connectors))
    t.code = CodeBlock(t.code.as_string + f"\n{out} = {out} + 0.0 * (pow(1.5, 2.5) + exp(0.5) + log(2.0))")
    assert math_calls(node) == 3
    return node, state


def test_replay_picks_blocked_simd_for_a_body_with_libm_calls():
    """A body that calls libm (graupel: pow, exp, log, sqrt) is compute-bound: ``auto`` under ``replay``
    picks ``blocked_simd`` (vector calls), under ``exact`` a scalar expansion; the estimates differ by
    the calls only (the streaming part is the body's bytes, the same as without them)."""
    node, state = _with_libm_calls()
    assert choose(node, state, floor="replay").implementation == "blocked_simd"
    exact = choose(node, state, floor="exact")
    assert exact.implementation not in ("blocked_simd",) and exact.reproducibility == "exact"


def test_replay_leaves_blocked_simd_on_few_cells(monkeypatch):
    """``blocked_simd``'s vector loop takes 64 cells at a time (``IF_CONVERTED_QUANTUM``); a block's other cells
    run in its scalar epilogue with every branch's call made. The cost model charges the slowest thread's
    blocks so (``cost.vector_lane_ns``): on 20480 cells as before (``columns / threads`` vector cells), on
    100 cells and 2 threads (blocks of 64 and 36) the 36 epilogue cells, and ``auto`` under ``replay`` then
    picks a scalar expansion (``graupel_run``: 0.87x of gt4py's build with ``blocked_simd``, 1.08x with the
    choice, benchmarks/HISTORY.md, "Stop 46"); a symbolic size is taken as 20480 cells, as before."""
    from sdfg_scan import cost
    from sdfg_scan.expansions.scan_blocked import ExpandScanBlockedSIMD

    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    v, e = cost.VECTOR_MATH_NS, cost.EPILOGUE_MATH_NS
    blocks = ExpandScanBlockedSIMD.vector_blocks
    assert blocks == (256, 64)

    def lane(n, t):
        return cost.vector_lane_ns(n, t, *blocks)
    assert lane(20480, 2) == 10240 * v
    assert lane(100, 2) == 36 * e            # blocks of 64 and 36: the second is slower
    assert lane(128, 2) == 64 * v
    assert lane(300, 2) == 64 * v + 44 * e    # blocks of 192 and 108 (64 + 44)
    assert lane(1, 2) == e and lane(0, 2) == 0.0
    assert lane(640, 4) == 192 * v            # blocks of 192, 192, 192, 64
    node, state = _with_libm_calls()
    few = {"horizontal_start": 0, "horizontal_end": 100, "vertical_start": 0, "vertical_end": 65}
    assert choose(node, state, floor="replay", symbols=few, use_cache=False).implementation != "blocked_simd"
    many = dict(few, horizontal_end=20480)
    assert choose(node, state, floor="replay", symbols=many, use_cache=False).implementation == "blocked_simd"


@pytest.fixture(scope="module")
def delay_line_programs():
    """A gt4py-shaped delay-line scan over cell-contiguous fields (forward and backward), after
    ``optimize`` (lifted, its delay line turned into ``x[k -/+ 1]`` reads), as ``blocked`` and as
    ``blocked_kcached``, and the original; compiled once, IEEE-strict."""
    import gt4py_shaped as gs

    built = {}
    for backward in (False, True):
        col = gs.Column((gs.Slot("delay_line", ins=(1, 2, 1)),), backward=backward, cell_contiguous=True)
        orig = gs.program(col, f"bk_orig_{int(backward)}")
        progs = {"orig": gs.compile_exact(orig)}
        for impl in ("blocked", "blocked_kcached"):
            sdfg = copy.deepcopy(orig)
            sdfg.name = f"bk_{impl}_{int(backward)}"
            sdfg_scan.optimize(sdfg, target="cpu", reproducibility="exact")
            (node, state), = [(n, st) for n, st in sdfg.all_nodes_recursive() if isinstance(n, Scan)]
            assert node.columns == "cells"
            node.implementation = impl
            progs[impl] = gs.compile_exact(sdfg)
        built[backward] = (col, orig, progs)
    return built


@pytest.mark.parametrize("backward", [False, True], ids=["forward", "backward"])
def test_blocked_kcached_is_bitwise_blocked_and_the_original(delay_line_programs, backward):
    """The ring (``[W, B]`` per block) changes only copies: every output bitwise the original program
    and ``blocked``, from 1 level up, block-partial cell counts included."""
    import gt4py_shaped as gs

    col, orig, progs = delay_line_programs[backward]
    for ncells, nlev in ((1, 1), (3, 2), (257, 7), (40, 1)):
        outs = fx.outputs_of(progs, gs.arguments(col, orig, ncells, nlev, seed=ncells + nlev))
        fx.assert_bitwise_equal(outs["orig"], outs["blocked"])
        fx.assert_bitwise_equal(outs["orig"], outs["blocked_kcached"])


def test_blocked_kcached_applies_only_to_level_offset_reads():
    """Without level-offset reads (the Thomas forward sweep) ``blocked_kcached`` is refused with the
    reason, and pinning it raises a clear error; where it applies it costs what ``blocked`` costs, so
    ``auto`` keeps ``blocked``'s rank (ties go to the earlier expansion)."""
    sdfg, scans = _lifted(FORMS[1])
    node, state = scans[0]
    ctx = context_of(node, state, "exact")
    why = refusal(node, "blocked_kcached", Scan.implementations["blocked_kcached"], ctx)
    assert why is not None and "no level-offset reads to cache" in why
    node.implementation = "blocked_kcached"
    with pytest.raises(ValueError, match="blocked_kcached expansion cannot build this scan"):
        sdfg.expand_library_nodes(recursive=False)


def test_blocked_refuses_gpu_and_single_columns():
    sdfg, scans = _lifted(FORMS[0])
    node, state = scans[0]
    ctx = context_of(node, state)
    node.columns = "single"
    assert "columns='cells'" in refusal(node, "blocked", Scan.implementations["blocked"], ctx)
    node.columns = "cells"
    gpu = type(ctx)("gpu", ctx.floor, ctx.layout, ctx.symbols, ctx.state)
    assert "generates no gpu code" in refusal(node, "blocked", Scan.implementations["blocked"], gpu)


@pytest.mark.parametrize("impl", ["blocked", "blocked_simd", "blocked_simd_exact"])
def test_a_pinned_blocked_variant_that_cannot_build_names_itself(impl, monkeypatch):
    """Pinned on a scan the blocked kernels cannot build (here: ``check`` made to refuse it), the expansion
    raises an error that names the variant pinned and the reason, not ``blocked`` for all of them."""
    from sdfg_scan.expansions import scan_blocked

    sdfg, scans = _lifted(FORMS[0])
    node, _ = scans[0]
    node.implementation = impl
    monkeypatch.setattr(scan_blocked, "check", lambda *args, **kwargs: "a reason")
    with pytest.raises(ValueError, match=f"the {impl} expansion cannot build this scan: a reason"):
        sdfg.expand_library_nodes(recursive=False)


def test_symbolic_cell_strides_follow_the_known_ones():
    """gt4py leaves graupel's tracer fields (a tuple) with a symbolic cell stride beside unit-stride ones:
    the layout counts as cell-contiguous, so ``blocked_simd`` applies there too (``auto`` picked it until stop
    46; on this program's 100 cells it now picks a scalar expansion: ``test_replay_leaves_blocked_simd_on_few_cells``);
    with every cell stride symbolic (nothing known) it stays strided."""
    form = "graupel_run.opt_nohooks"
    sdfg, scans = _lifted(form, reproducibility="replay")
    node, state = scans[0]
    strides = {c: node.operand(state, c).desc.strides for c in node.in_connectors}
    assert any(dace.symbolic.issymbolic(s[0]) for s in strides.values())   # q_in_*: Cell stride symbolic
    ctx = context_of(node, state, "replay")
    assert ctx.layout.contiguity == "cell"
    assert refusal(node, "blocked_simd", type(node).implementations["blocked_simd"], ctx) is None
    for c in list(node.in_connectors) + list(node.out_connectors):   # every cell stride unknown
        desc = node.operand(state, c).desc
        if len(desc.shape) == 2 and not dace.symbolic.issymbolic(desc.strides[0]):
            desc.strides = (dace.symbol(f"__s_{c}"), desc.strides[1])
    assert context_of(node, state).layout.contiguity == "strided"


def test_if_converted_blocks_hold_multiples_of_64_cells(tmp_path):
    """An if-converted kernel (its bools kept as bytes) vectorises 64 cells at a time at 512 bits, so its blocks
    hold a multiple of 64 cells where there are few cells per thread (a smaller block never entered the vector
    loop); ``blocked`` keeps multiples of 8. The block size never exceeds the block arrays' capacity."""
    import subprocess

    from sdfg_scan.expansions import scan_blocked

    _, scans = _lifted(FORMS[0])
    node, state = scans[0]
    plain, _ = scan_blocked.kernel(node, state, if_convert=False)
    selects, _ = scan_blocked.kernel(node, state, if_convert=True)
    assert f"sdfg_scan_block_size(_ce - _cb, {scan_blocked.BLOCK}, 8)" in plain
    assert f"sdfg_scan_block_size(_ce - _cb, {scan_blocked.BLOCK}, 64)" in selects
    src = tmp_path / "b.cpp"
    src.write_text(scan_blocked.BLOCK_SIZE_CODE + """
#include <cstdio>
int main() {
    const long long cases[][3] = {{100, 256, 64}, {100, 256, 8}, {1, 256, 64}, {0, 256, 64}, {100000, 256, 64},
                                  {100, 16, 64}, {129, 256, 64}};
    for (auto& c : cases) std::printf("%lld\\n", sdfg_scan_block_size(c[0], c[1], c[2]));
}
""")
    exe = tmp_path / "b"
    subprocess.run(["g++", "-O1", str(src), "-o", str(exe)], check=True)   # no OpenMP: one thread
    got = [int(x) for x in subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout.split()]
    assert got == [128, 104, 64, 64, 256, 16, 192]


def _with_branch_libm_calls():
    """The forward sweep (lifted, cell-contiguous) with ``pow``, ``exp`` and ``log`` of its own values under
    a condition on them (a branch some cells take and others do not)."""
    from dace.properties import CodeBlock

    from sdfg_scan.cost import math_calls

    sdfg, scans = _lifted(FORMS[1])
    node, state = scans[0]
    t = [t for t, _ in node.body.all_nodes_recursive() if isinstance(t, dace.nodes.Tasklet)
         and t.language == dace.Language.Python and t.in_connectors and t.out_connectors][-1]
    out = next(iter(t.out_connectors))
    t.code = CodeBlock(t.code.as_string + f"\n{out} = (pow({out}, 0.75) + exp(-{out}) * log(1.0 + {out})) "
                                          f"if {out} > 0.0 else {out}")
    assert math_calls(node) == 3
    return sdfg, node, state


@pytest.fixture(scope="module")
def timed_programs():
    """The sweep with branch libm calls as ``sequential``, ``blocked``, ``blocked_simd_exact`` and
    ``blocked_timed``, compiled once, IEEE-strict."""
    sdfg, node, state = _with_branch_libm_calls()
    assert choose(node, state, floor="exact", use_cache=False).implementation in ("levels_outside", "blocked_timed")
    progs = {}
    for impl in ("sequential", "blocked", "blocked_simd_exact", "blocked_timed"):
        node.implementation = impl
        progs[impl] = fx.compile_once(f"timed_{impl}", sdfg)
    return sdfg, progs


def test_blocked_timed_is_bitwise_both_kernels_on_every_call(timed_programs, monkeypatch, capfd):
    """``blocked_timed`` holds ``blocked`` and ``blocked_simd_exact`` and keeps the faster after timing
    ``TIMED_TRIALS`` calls of each: every call, before and after the choice, and each kernel forced
    (``SDFG_SCAN_TIMED_KERNEL``), is bitwise ``sequential``, ``blocked`` and ``blocked_simd_exact``; the
    choice is reported once (``SDFG_SCAN_TIMED_REPORT``), and a wrong kernel name is warned about once and
    ignored; from 1 level up, block-partial cell counts included."""
    from sdfg_scan.expansions.scan_blocked import TIMED_KERNELS, TIMED_TRIALS

    sdfg, progs = timed_programs
    form = FORMS[1]
    monkeypatch.setenv("SDFG_SCAN_TIMED_REPORT", "1")
    for ncells, nlev in ((1, 1), (3, 2), (300, 7)):
        kw = fx.inputs(form, fx.load(form), ncells=ncells, nlev=nlev, seed=ncells + nlev)
        ref = fx.outputs_of({k: v for k, v in progs.items() if k != "blocked_timed"}, kw)
        fx.assert_bitwise_equal(ref["sequential"], ref["blocked"])
        fx.assert_bitwise_equal(ref["sequential"], ref["blocked_simd_exact"])
        for forced in TIMED_KERNELS:
            monkeypatch.setenv("SDFG_SCAN_TIMED_KERNEL", forced)
            fx.assert_bitwise_equal(ref["sequential"], fx.outputs_of({"t": progs["blocked_timed"]}, kw)["t"])
        monkeypatch.setenv("SDFG_SCAN_TIMED_KERNEL", "simd")   # a wrong name: warned about once, then timed
        for _ in range(2 * TIMED_TRIALS + 1 if (ncells, nlev) == (300, 7) else 1):
            fx.assert_bitwise_equal(ref["sequential"], fx.outputs_of({"t": progs["blocked_timed"]}, kw)["t"])
    err = capfd.readouterr().err
    assert err.count("blocked_timed keeps") == 1, err
    assert err.count("SDFG_SCAN_TIMED_KERNEL='simd' is neither 'blocked' nor 'blocked_simd_exact'") == 1, err
    assert f"min of {TIMED_TRIALS} calls each" in err


def test_blocked_timed_applies_to_bodies_with_libm_calls_only():
    """Without libm calls ``blocked_timed`` is refused with the reason (``blocked`` serves); with them it
    applies, costs just below ``blocked`` (so ``auto`` prefers it where it would pick ``blocked``), and
    ranks after ``levels_outside`` where that one is cheaper."""
    sdfg, scans = _lifted(FORMS[1])
    node, state = scans[0]
    ctx = context_of(node, state, "exact")
    impls = Scan.implementations
    assert "makes no libm call" in refusal(node, "blocked_timed", impls["blocked_timed"], ctx)
    _, node, state = _with_branch_libm_calls()
    ctx = context_of(node, state, "exact")
    assert refusal(node, "blocked_timed", impls["blocked_timed"], ctx) is None
    assert cost_of(node, impls["blocked_timed"], ctx) < cost_of(node, impls["blocked"], ctx)
    assert impls["blocked_timed"].reproducibility == "exact" and impls["blocked_timed"].targets == ("cpu",)
