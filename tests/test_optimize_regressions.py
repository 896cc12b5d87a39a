"""Regression tests for failures found by the randomised test of ``optimize`` (test_optimize_random.py).

Each case is a :class:`gt4py_shaped.Column` as hypothesis printed it (shrunk by hand), checked with
the same differential check: optimize a deep copy, validate, compile both IEEE-strict, compare every
output bitwise.
"""

from __future__ import annotations

import gt4py_shaped as gs
import pytest
from gt4py_shaped import Column, Slot

CASES = {
    # levels_outside (ScanLoopInterchange's rewrite): a scan whose only output is written in the exit
    # state left the level part's map exit without inputs (a source node), so DaCe could not build the
    # scope tree ("Leftover nodes in queue") when the part's carry paths were added
    "last_level_output_only_cell_contiguous": Column((Slot("recurrent", out=False, last=True),),
                                                     cell_contiguous=True),
    # DeadCarryElimination's delay-line window: with one constant level the inputs have shape (1,), the
    # connector of the whole input is squeezed to a scalar and ``__x[k - 1]`` did not validate
    "delay_line_one_constant_level": Column((Slot("delay_line", ins=(1, 2, 1)),), backward=True, nlev=1),
    # DeadCarryElimination removed the dead recurrence c2 and the flag c3, ScanFission split c0 from c1, and
    # c1's part reads no input: the expansions over columns wired the body into the map scope only after
    # the outputs' memlet paths, whose propagation needs it there ("Leftover nodes in queue: last_c1")
    "part_without_inputs_after_dead_slots": Column(
        (Slot("recurrent", last=True), Slot("flag", out=False, last=True),
         Slot("recurrent", ins=(0, 0, 2), out=False), Slot("flag", form=3, ins=(0, 0, 1), out=False)),
        nlev=1, cell_contiguous=True, init_in_map=True, via_temporary=True),
    # LiftCellMap moved constant tasklets that read a symbol (gt4py's ``__tlet_out = lower`` for an int
    # argument its auto-optimize made a symbol: icon4py's _compute_param) into the body without passing the
    # symbol through the node's symbol mapping: the expansions over cells failed ("Missing symbols on nested
    # SDFG"); here flag and counter inits read S and the counter a scalar input filled from S
    "inits_and_scalar_input_read_a_symbol": Column(
        (Slot("counter"), Slot("flag", last=True), Slot("recurrent", update="if_copy", cond="flag", flag_slot=1)),
        init_in_map=True, init_symbol=True),
    "inits_and_scalar_input_read_a_symbol_cell_contiguous": Column(
        (Slot("counter", last=True), Slot("flag"), Slot("recurrent", update="if_else", cond="flag", flag_slot=1)),
        backward=True, cell_contiguous=True, init_in_map=True, init_symbol=True),
    # gt4py's compiled program (icon4py's muphys_run, program.sdfgz): LiftScans refused init copies written as
    # tasklets, and once it took them, the blocked tasklet declared a connector named as the container it
    # reads (``double* x0 = &x0[0];``, the local shadowing the array: a crash)
    "compiled_program_copies_and_names": Column(
        (Slot("recurrent", update="if_copy", cond="data", last=True, ins=(0, 1, 0)),), cell_contiguous=True,
        via_temporary=True, compiled=True),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_optimize_regression(name):
    gs.check_optimize_bitwise(CASES[name])


@pytest.mark.parametrize("name", ["inits_and_scalar_input_read_a_symbol",
                                  "inits_and_scalar_input_read_a_symbol_cell_contiguous"])
def test_every_eligible_expansion_of_a_lifted_scan_reading_a_symbol(name):
    """The symbols a moved constant tasklet reads reach every exact CPU expansion over cells, not only the
    one ``optimize`` picks: each eligible one compiled (IEEE-strict), bitwise the original program."""
    import copy

    import numpy as np

    from sdfg_scan.choice import refusal, specs
    from sdfg_scan.context import context_of
    from sdfg_scan.nodes.scan import Scan

    col = CASES[name]
    original = gs.program(col, f"sym_{name}")
    optimized = copy.deepcopy(original)
    optimized.name = original.name + "_opt"
    report = gs.sdfg_scan.optimize(optimized, target="cpu", reproducibility="exact")
    assert report.applied["LiftCellMap"] >= 1, report.table()
    (node, state), = [(n, s) for n, s in optimized.all_nodes_recursive() if isinstance(n, Scan)]
    assert "S" in node.symbol_mapping
    ctx = context_of(node, state, "exact")
    eligible = [k for k, cls in specs(node).items() if refusal(node, k, cls, ctx) is None]
    assert "sequential" in eligible and "levels_outside" in eligible, eligible
    base = gs.compile_exact(original)
    runs = {}
    for impl in eligible:
        variant = copy.deepcopy(optimized)
        variant.name = f"{optimized.name}_{impl}"
        (pinned,) = [n for n, _ in variant.all_nodes_recursive() if isinstance(n, Scan)]
        pinned.implementation = impl
        runs[impl] = gs.compile_exact(variant)
    for nlev in (1, 2, 7):
        kw = gs.arguments(col, original, gs.NCELLS, nlev, nlev)
        for s_value in (-2, 0, 2):   # the flag's init S > 0 both ways, the counter's start and scale
            kw["S"] = s_value
            want = gs._fresh(kw)
            base(**want)
            for impl, prog in runs.items():
                got = gs._fresh(kw)
                prog(**got)
                for k, v in want.items():
                    if isinstance(v, np.ndarray):
                        assert np.array_equal(gs._bytes(v), gs._bytes(got[k])), (impl, k, nlev, s_value)


@pytest.mark.parametrize("impl", ["blocked", "blocked_simd_exact"])
def test_blocked_kernels_of_a_compiled_gt4py_program(impl):
    """The blocked kernels on gt4py's compiled form (init copies as tasklets, the fields and the temporary
    named as the scan's connectors): lifted, connectors renamed where they would shadow a container of the
    program (the crash on icon4py's muphys_run), bitwise the original built IEEE-strict."""
    import copy

    import numpy as np

    from sdfg_scan.nodes.scan import Scan

    col = CASES["compiled_program_copies_and_names"]
    original = gs.program(col, f"cpd_{impl}")
    optimized = copy.deepcopy(original)
    optimized.name = original.name + "_opt"
    report = gs.sdfg_scan.optimize(optimized, target="cpu", reproducibility="exact")
    assert report.applied["LiftScans"] == 1 and report.applied["LiftCellMap"] == 1, report.table()
    (node, _), = [(n, s) for n, s in optimized.all_nodes_recursive() if isinstance(n, Scan)]
    assert {"x0", "x1", "__gtir_scan_output_c0"} <= set(node.in_connectors) | set(node.out_connectors)
    node.implementation = impl
    base, new = gs.compile_exact(original), gs.compile_exact(optimized)
    for nlev in (1, 2, 7):
        kw = gs.arguments(col, original, gs.NCELLS, nlev, nlev)
        want, got = gs._fresh(kw), gs._fresh(kw)
        base(**want)
        new(**got)
        for k, v in want.items():
            if isinstance(v, np.ndarray):
                assert np.array_equal(gs._bytes(v), gs._bytes(got[k])), (impl, k, nlev)


def test_connectors_renamed_past_the_symbols_the_body_assigns():
    """The blocked kernels rename a connector that would shadow a name of the program (``x0`` -> ``x0_c0``);
    the new name also avoids the symbols the body assigns on the inter-state edges of its level loop, which
    ``body.symbols`` does not list: a body that assigns ``x0_c0`` gets ``x0_c1``, and the node still validates."""
    import copy

    from dace.sdfg.state import LoopRegion

    from sdfg_scan.expansions.scan_blocked import _unshadowed
    from sdfg_scan.nodes.scan import Scan

    col = CASES["compiled_program_copies_and_names"]
    optimized = copy.deepcopy(gs.program(col, "unshadowed_assigned"))
    gs.sdfg_scan.optimize(optimized, target="cpu", reproducibility="exact")
    (node, state), = [(n, s) for n, s in optimized.all_nodes_recursive() if isinstance(n, Scan)]
    assert "x0" in node.in_connectors and "x0" in optimized.arrays
    (loop,) = [b for b in node.body.nodes() if isinstance(b, LoopRegion)]
    loop.add_state_before(loop.start_block, "assigns", is_start_block=True, assignments={"x0_c0": "0"})
    assert "x0_c0" not in node.body.symbols   # the case under test: assigned, not declared
    _unshadowed(node, state)
    assert "x0_c1" in node.in_connectors and not {"x0", "x0_c0"} & set(node.in_connectors)
    node.validate(state.sdfg, state)
