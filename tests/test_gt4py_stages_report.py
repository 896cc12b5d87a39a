"""The hooks' last stage writes its final choices into the lifting stage's report rows (no gt4py needed)."""

from __future__ import annotations

from sdfg_scan.choice import Choice
from sdfg_scan.gt4py_stages import _record
from sdfg_scan.pipeline import OptimizeReport, ScanReport


def _choice(label: str, impl: str, kind: str = "Scan") -> Choice:
    return Choice(label, kind, impl, "cpu", "exact", "exact", f"chose {impl}")


def _report(*rows: tuple[str, str]) -> OptimizeReport:
    r = OptimizeReport("cpu", "exact")
    r.sdfg_name = "prog"
    r.scans = [ScanReport(label, "forward", "[0, K)", lifted=kind == "Scan", kind=kind) for label, kind in rows]
    return r


def test_rows_of_a_repeated_label_take_their_own_choices_in_order():
    """Two scans lifted from columns of one name: each row says its own final choice (the last one's choice
    was written into both rows before)."""
    rep = _report(("scan", "Scan"), ("scan", "Scan"), ("other", "Scan"))
    _record([rep], "prog", [_choice("scan", "blocked"), _choice("other", "sequential"),
                            _choice("scan", "levels_outside")])
    assert [r.implementation for r in rep.scans] == ["blocked", "levels_outside", "sequential"]
    assert rep.scans[1].reason == "chose levels_outside"


def test_rows_are_left_alone_where_the_counts_of_a_label_differ_and_loops_take_nothing():
    rep = _report(("scan", "Scan"), ("scan", "Scan"), ("loop", "NestedSDFG"))
    rep.scans[0].implementation = rep.scans[1].implementation = "kept"
    _record([rep], "prog", [_choice("scan", "blocked"), _choice("loop", "sequential", kind="CumulativeScan")])
    assert [r.implementation for r in rep.scans] == ["kept", "kept", None]


def test_only_the_report_of_the_same_program_is_written():
    rep = _report(("scan", "Scan"))
    _record([rep], "another", [_choice("scan", "blocked")])
    assert rep.scans[0].implementation is None
