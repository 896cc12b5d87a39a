"""DeadCarryElimination: unused / pass-through / delay-line / dead carry slots, bitwise; refuses what it must."""

from __future__ import annotations

import copy
import json

import dace
import hand_columns as hc
import icon4py_fixtures as fx
import pytest
from dace.sdfg.state import LoopRegion

from sdfg_scan.nodes.scan import Scan
from sdfg_scan.scan_structure import analyze_loop
from sdfg_scan.transformations import DeadCarryElimination, LiftScans, PeelBoundaryLevels, RemoveScanSelfCopies
from sdfg_scan.transformations.dead_carry_elimination import dead_carries


def _snapshot(sdfg) -> str:
    return json.dumps(sdfg.to_json(), sort_keys=True)


def _applied_once_bitwise(sdfg, check) -> None:
    """Apply DeadCarryElimination to a copy of the hand column ``sdfg``: exactly one application, a valid
    result that passes ``check``, bitwise the original's outputs at 0, 1 and 6 levels."""
    sdfg.validate()
    xf = copy.deepcopy(sdfg)
    xf.name = sdfg.name + "_xf"
    assert xf.apply_transformations_repeated(DeadCarryElimination, validate=False) == 1
    xf.validate()
    check(xf)
    a, b = sdfg.compile(), xf.compile()
    for nlev in (0, 1, 6):
        fx.assert_bitwise_equal(hc.run_column(a, nlev), hc.run_column(b, nlev))


@pytest.mark.parametrize("backward", [False, True], ids=["forward", "backward"])
@pytest.mark.parametrize("kind", ["unused", "pass_through", "delay_line"])
def test_hand_column_bitwise(kind, backward):
    def check(xf):
        assert "d" not in xf.arrays if kind != "delay_line" else "v" not in xf.arrays

    _applied_once_bitwise(hc.column(f"dce_{kind}_{int(backward)}", backward=backward, extra=kind), check)


@pytest.mark.parametrize("kw", [dict(extra="dead"), dict(extra="dead", backward=True),
                                dict(extra="unused", extra_written_twice=True)],
                         ids=["self_updating", "self_updating_backward", "written_twice"])
def test_dead_slot_is_removed_with_what_only_it_feeds(kw):
    """A recurrence nothing reads (``d = d * 0.5 + x[k]``, gt4py's scan tuple member the program drops) or a
    slot written twice and never read: the slot, its temporary and the tasklet computing it are removed in
    one application; the program is bitwise the same."""
    sdfg = hc.column(f"dce_dead_{len(kw)}_{int(kw.get('backward', False))}", **kw)
    s = analyze_loop(next(b for b in sdfg.all_control_flow_blocks() if isinstance(b, LoopRegion)))
    assert [(k, c) for k, c, _ in dead_carries(s)] == [("dead", "d")]

    def check(xf):
        assert "d" not in xf.arrays and "v" not in xf.arrays
        assert not any(isinstance(n, dace.nodes.Tasklet) and n.label in ("make_v", "wd")
                       for n, _ in xf.all_nodes_recursive())

    _applied_once_bitwise(sdfg, check)


GUARDS = {
    "_candidates: stride 2": dict(extra="unused", stride=2),
    "pass-through: its temporary is also used after the loop": dict(extra="pass_through", extra_src_read_after=True),
    "delay line: the slot is read after the loop": dict(extra="delay_line", extra_read_after=True),
    "_delay_source: the input index does not move with k": dict(extra="delay_line", extra_index="0"),
    "no dead slot (recurrence and flag only)": dict(),
    "dead: the self-updating slot is read after the loop": dict(extra="dead", extra_read_after=True),
    "dead: the self-updating slot is read by an interstate edge": dict(extra="dead", cf_uses="d"),
    "dead: its tasklet is fed by a tasklet that also writes an output": dict(extra="dead", dead_fed_by_code=True),
    "used_in_control_flow: the unused slot is read by an interstate edge": dict(extra="unused", cf_uses="d"),
}


@pytest.mark.parametrize("kw", list(GUARDS.values()), ids=list(GUARDS))
def test_does_not_apply(kw):
    sdfg = hc.column("dce_guard", **kw)
    sdfg.validate()
    before = _snapshot(sdfg)
    assert sdfg.apply_transformations_repeated(DeadCarryElimination, validate=False) == 0
    assert _snapshot(sdfg) == before


EXPECTED = {  # delay lines rho (previous_level_5) and t (previous_level_7) of graupel's scan
    "graupel_run.opt_nohooks": 2, "graupel_run.opt_hooks": 2, "graupel_run_dyn.opt_nohooks": 2,
    "graupel_run.lowered": 2, "graupel_run_dyn.lowered": 2,
}


@pytest.mark.fixtures
@pytest.mark.parametrize("form", [f for f in fx.FORMS if f not in fx.NO_COMPILE])  # lowered graupel: see
def test_fixture_applies_and_validates(form):  # test_dead_carry_elimination.test_lowered_graupel_all
    sdfg = fx.load(form)
    count = sdfg.apply_transformations_repeated(DeadCarryElimination, validate=False)
    sdfg.validate()
    print(f"{form}: DeadCarryElimination rewrote {count} carry slots")
    if form in EXPECTED:
        assert count == EXPECTED[form]
    for loop in [b for b in sdfg.all_control_flow_blocks(recursive=True) if isinstance(b, LoopRegion)]:
        for name in ("previous_level_5", "previous_level_7"):
            assert not any(n.data == name for st in loop.all_states() for n in st.data_nodes()
                           if st.in_degree(n) > 0)


@pytest.mark.fixtures
def test_scan_node_body():
    """The same transformations apply inside a lifted ``Scan`` node's body and leave the SDFG valid."""
    sdfg = fx.load("graupel_run.opt_nohooks")
    assert sdfg.apply_transformations_repeated(LiftScans, validate=False) == 1
    (scan,) = [n for n, _ in sdfg.all_nodes_recursive() if isinstance(n, Scan)]
    counts = [scan.body.apply_transformations_repeated(t, validate=False) for t in (RemoveScanSelfCopies, DeadCarryElimination)]
    assert counts == [4, 2]
    sdfg.validate()


@pytest.mark.fixtures
@pytest.mark.long
@pytest.mark.parametrize("form", sorted(fx.NO_COMPILE))
def test_lowered_graupel_all(form):
    """The ~95-deep lowered graupel (never compiled here): all three canonicalising transformations,
    loaded once, applied in pipeline order, then validated. ``make test-long``: in CI, test_pipeline's
    optimize of ``graupel_run.lowered`` checks the same counts (4 copies, 2 carries, 0 peeled)."""
    sdfg = fx.load(form)
    counts = [sdfg.apply_transformations_repeated(t, validate=False) for t in (RemoveScanSelfCopies, DeadCarryElimination,
                                                               PeelBoundaryLevels)]
    print(f"{form}: self-copies {counts[0]}, dead carries {counts[1]}, peeled {counts[2]}")
    assert counts == [4, 2, 0]
    sdfg.validate()


def test_dead_recurrences_of_a_gt4py_shaped_scan(tmp_path, capsys):
    """A gt4py-shaped scan (map over cells, nested column SDFG) whose program keeps one slot's results and
    drops three: a recurrence updated through an if/else on a flag slot, that flag, and a counter. ``inspect``
    marks the three dead and suggests the transformation; ``optimize`` removes all three (one application)
    and every output stays bitwise (IEEE-strict builds of both)."""
    import gt4py_shaped as gs

    from sdfg_scan.cli import main

    col = gs.Column((gs.Slot("recurrent"), gs.Slot("flag", out=False),
                     gs.Slot("recurrent", update="if_else", cond="flag", flag_slot=1, form=2, out=False),
                     gs.Slot("counter", out=False)))
    src = tmp_path / "dead.sdfg"
    gs.program(col, "dce_dead_gt4py_shaped").save(str(src))
    assert main(["inspect", str(src)]) == 0
    out = capsys.readouterr().out
    dead = [line.split()[0] for line in out.splitlines() if line.endswith("dead (its value reaches no output)")]
    assert len(dead) == 3 and "DeadCarryElimination" in out, out
    lines: list[str] = []
    gs.check_optimize_bitwise(col, log=lines.append)
    assert "carry slots removed 3 / demoted 0" in "\n".join(lines), "\n".join(lines)
