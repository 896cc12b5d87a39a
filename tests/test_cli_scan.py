"""``sdfg_scan.optimize`` and the ``inspect`` / ``optimize`` subcommands."""

import copy

import dace
import hand_columns as hc
import icon4py_fixtures as fx
import pytest
from test_lift_scans import program

import sdfg_scan
import sdfg_scan.pipeline as pipeline
from sdfg_scan.cli import main
from sdfg_scan.nodes.scan import Scan


def test_optimize_lifts_and_selects():
    sdfg = program()
    report = pipeline.optimize(sdfg)
    assert report.scans_before == report.scans_after == 1
    (r,) = report.scans
    assert r.lifted and r.implementation == "sequential" and r.reproducibility == "exact"
    assert [n for n, _ in sdfg.all_nodes_recursive() if isinstance(n, Scan)]
    assert "sequential (exact)" in report.table()


def test_optimize_rejects_bad_options():
    with pytest.raises(ValueError, match="target must be one of"):
        pipeline.optimize(program(), target="tpu")


def test_inspect_and_optimize_cli(tmp_path, capsys):
    src = tmp_path / "p.sdfg"
    program().save(str(src))
    assert main(["inspect", str(src)]) == 0
    out = capsys.readouterr().out
    assert "1 scan(s)" in out and "recurrent" in out and "applicable: LiftScans" in out
    assert "ScanLoopInterchange (not profitable here)" in out   # K-contiguous fields
    assert main(["optimize", str(src), "-o", str(src)]) == 2
    assert "refusing to overwrite" in capsys.readouterr().err
    dst = tmp_path / "o.sdfg"
    assert main(["optimize", str(src), "-o", str(dst)]) == 0
    back = dace.SDFG.from_file(str(dst))
    assert [n for n, _ in back.all_nodes_recursive() if isinstance(n, Scan)]


def test_optimize_cli_refuses_invalid(tmp_path, capsys):
    sdfg = program()
    st = sdfg.start_state
    st.add_access("X")  # an isolated node: the SDFG no longer validates
    src = tmp_path / "bad.sdfg"
    sdfg.save(str(src))
    assert main(["optimize", str(src), "-o", str(tmp_path / "o.sdfg")]) == 2
    assert "does not validate" in capsys.readouterr().err
    assert not (tmp_path / "o.sdfg").exists()


def _column_program(tmp_path):
    """A program of a ``CumulativeScan`` and a ``LinearRecurrence`` (no loops: ``0 scan(s)``)."""
    from sdfg_scan.harness import one_node_sdfg

    n, k = dace.symbol("N"), dace.symbol("K")
    sdfg = one_node_sdfg("columns", sdfg_scan.CumulativeScan("cumsum", axis=1),
                         {"_in": ((n, k), dace.float64, True)}, {"_out": ((n, k), dace.float64, True)}, 1, "cell")
    st = sdfg.start_state
    rec = sdfg_scan.LinearRecurrence("recurrence", axis=1)
    st.add_node(rec)
    for c in ("a", "b"):
        sdfg.add_array(c, (n, k), dace.float64)
        st.add_edge(st.add_read(c), None, rec, c, dace.Memlet.from_array(c, sdfg.arrays[c]))
    sdfg.add_array("y", (n, k), dace.float64)
    st.add_edge(rec, "_out", st.add_write("y"), None, dace.Memlet.from_array("y", sdfg.arrays["y"]))
    path = tmp_path / "columns.sdfg"
    sdfg.save(str(path))
    return path


def test_inspect_and_optimize_list_every_sdfg_scan_node(tmp_path, capsys):
    src = _column_program(tmp_path)
    assert main(["inspect", str(src)]) == 0
    out = capsys.readouterr().out
    assert "sdfg_scan nodes (2):" in out and "0 scan(s)" in out
    assert "cumsum: CumulativeScan(sum, axis=1, forward)" in out and "recurrence: LinearRecurrence(axis=1" in out
    assert main(["optimize", str(src), "-o", str(tmp_path / "o.sdfg")]) == 0
    out = capsys.readouterr().out
    assert "sdfg_scan nodes (2):" in out and "CumulativeScan" in out and "LinearRecurrence" in out


@pytest.mark.parametrize("command", ["inspect", "optimize"])
def test_missing_or_unreadable_input_is_one_line(tmp_path, capsys, command):
    extra = ["-o", str(tmp_path / "o.sdfg")] if command == "optimize" else []
    assert main([command, str(tmp_path / "missing.sdfg"), *extra]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "does not exist" in err[0]
    bad = tmp_path / "bad.sdfg"
    bad.write_text("{not json")
    assert main([command, str(bad), *extra]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"cannot read '{bad}' as an SDFG" in err[0]


def test_demo_scan_sample_compiles_without_dace_warnings(capfd):
    """The general-Scan demo sample discards its per-level flag output: the expansion drops the
    write-only output instead of allocating it per column (DaCe: "Variable-length array ... heap")."""
    import warnings

    from sdfg_scan.demo import load_sample

    sdfg = load_sample("diagnose_pressure_scan").build("sequential")
    capfd.readouterr()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sdfg.compile()
    out, err = capfd.readouterr()
    messages = [str(w.message) for w in caught if not issubclass(w.category, DeprecationWarning)]
    assert messages == [] and "warn" not in (out + err).lower()


# ------------------------------------------------------------------------------------------------
# inspect suggests exactly the transformations that then apply (one predicate, one analysis)
# ------------------------------------------------------------------------------------------------
SUGGESTABLE = ("LiftScans", "RemoveScanSelfCopies", "DeadCarryElimination", "PeelBoundaryLevels", "ScanLoopInterchange")


def _applied(sdfg, names) -> set[str]:
    import sdfg_scan.transformations as xf

    return {n for n in names if copy.deepcopy(sdfg).apply_transformations_repeated(getattr(xf, n), validate=False) >= 1}


@pytest.mark.fixtures
@pytest.mark.parametrize("form", [f for f in fx.FORMS if f not in fx.NO_COMPILE | fx.SLOW] + ["graupel_run.opt_nohooks"])
def test_inspect_suggests_what_applies(form):
    """Every transformation ``inspect`` suggests for a scan of a fixture applies at least once to that
    form (``apply_transformations_repeated``), and every one that applies was suggested."""
    from sdfg_scan.cli_scan import _applicable
    from sdfg_scan.scan_sites import find_scans

    sdfg = fx.load(form)
    suggested = {name.split(" ")[0] for site in find_scans(sdfg) for name in _applicable(site)}
    applied = _applied(sdfg, SUGGESTABLE)
    assert suggested == applied, f"suggested only: {suggested - applied}; applied only: {applied - suggested}"


HAND = {"flag read as data": dict(cond_as_data=True), "condition not decided": dict(cond_expr="__cond and K > 3"),
        "copy not exclusive": dict(extra_write=True), "delay index fixed": dict(extra="delay_line", extra_index="0"),
        "pass-through temp read after": dict(extra="pass_through", extra_src_read_after=True),
        "unused": dict(extra="unused"), "delay line": dict(extra="delay_line"),
        "carry read in update": dict(s_read_in_update=True), "plain": {}}


@pytest.mark.parametrize("kw", list(HAND.values()), ids=list(HAND))
def test_inspect_suggests_what_applies_hand_columns(kw):
    """The hand-built columns (several break one precondition the analysis alone does not see): a
    canonicaliser is suggested exactly when it applies."""
    from sdfg_scan.cli_scan import _applicable
    from sdfg_scan.scan_sites import ScanSite
    from sdfg_scan.scan_structure import analyze_scan

    sdfg = hc.column("agree", **kw)
    site = ScanSite(None, sdfg.start_state, sdfg, analyze_scan(sdfg, prologue=True))  # a top-level column
    names = ("RemoveScanSelfCopies", "DeadCarryElimination", "PeelBoundaryLevels")
    assert set(_applicable(site)) == _applied(sdfg, names)
