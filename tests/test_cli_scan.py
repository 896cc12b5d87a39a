"""``sdfg_scan.optimize`` and the ``inspect`` / ``optimize`` subcommands."""

import copy
from pathlib import Path

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
    assert "lifted 1 (Scan nodes now 1)" in report.table()
    # optimize again: nothing left to lift, the row still a Scan node (the count and the rows agree)
    again = pipeline.optimize(sdfg).table()
    assert "lifted 0 (Scan nodes now 1)" in again
    (row,) = [line for line in again.splitlines() if line.startswith(r.label + " ")]
    assert " yes " in row and "no (loop)" not in row


def test_optimize_rejects_bad_options():
    with pytest.raises(ValueError, match="target must be one of"):
        pipeline.optimize(program(), target="tpu")


def test_inspect_and_optimize_cli(tmp_path, capsys):
    src = tmp_path / "p.sdfg"
    program().save(str(src))
    assert main(["inspect", str(src)]) == 0
    out = capsys.readouterr().out
    assert "1 scan(s)" in out and "recurrent" in out and "applicable (optimize applies): LiftScans" in out
    # K-contiguous fields; optimize never interchanges: marked as a transformation to apply by hand
    assert "by hand only (optimize does not apply): ScanLoopInterchange (not profitable here)" in out
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
SUGGESTABLE = ("LiftScans", "RemoveScanSelfCopies", "DeadCarryElimination", "PeelBoundaryLevels")


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
    assert not suggested & set(pipeline.RESTRUCTURE + pipeline.SPECIALISE) and "ScanLoopInterchange" not in suggested


HAND = {"flag read as data": dict(cond_as_data=True), "condition not decided": dict(cond_expr="__cond and K > 3"),
        "copy not exclusive": dict(extra_write=True), "delay index fixed": dict(extra="delay_line", extra_index="0"),
        "pass-through temp read after": dict(extra="pass_through", extra_src_read_after=True),
        "unused": dict(extra="unused"), "delay line": dict(extra="delay_line"),
        "carry read in update": dict(s_read_in_update=True), "plain": {}, "dead recurrence": dict(extra="dead"),
        "recurrence read after the loop": dict(extra="dead", extra_read_after=True)}


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


@pytest.mark.fixtures
@pytest.mark.parametrize("form, then", [("minimal_cumsum_k.opt", "ScanToCumulative"),
                                        ("solve_tridiagonal_matrix_for_w_forward_sweep.opt", "LiftCellMap")])
def test_inspect_names_what_optimize_does_and_marks_by_hand_transformations(tmp_path, capsys, form, then):
    """``inspect`` lists what ``optimize`` applies (``LiftScans, then ScanToCumulative``), each applied at
    least once by ``optimize``; ``ScanLoopInterchange``, which ``optimize`` never applies, only under
    "by hand only"."""
    fx.require(form)
    src = str(fx.path_of(form))
    assert main(["inspect", src]) == 0
    out = capsys.readouterr().out
    line = next(ln for ln in out.splitlines() if "applicable" in ln)
    assert line.strip() == f"applicable (optimize applies): LiftScans, then {then}"
    assert "by hand only (optimize does not apply): ScanLoopInterchange" in out
    report = pipeline.optimize(fx.load(form))
    assert report.applied["LiftScans"] >= 1 and report.applied[then] >= 1 and "ScanLoopInterchange" not in report.applied


# ------------------------------------------------------------------------------------------------
# usage errors: one line on stderr, exit status 2, no traceback
# ------------------------------------------------------------------------------------------------
def _one_line(capsys, *words) -> str:
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert len(lines) == 1 and all(w in lines[0] for w in words), err
    return out


@pytest.fixture
def program_file(tmp_path):
    path = tmp_path / "p.sdfg"
    program().save(str(path))
    return path


def test_optimize_checks_the_output_path_before_running_the_pipeline(tmp_path, capsys, program_file, monkeypatch):
    def never(*args, **kwargs):
        raise AssertionError("the pipeline ran although -o cannot be written")

    monkeypatch.setattr(pipeline, "optimize", never)
    assert main(["optimize", str(program_file), "-o", str(tmp_path)]) == 2
    _one_line(capsys, f"'{tmp_path}' is a directory", "expected a writable file path")
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    assert main(["optimize", str(program_file), "-o", str(blocker / "x.sdfg")]) == 2   # a folder that is a file
    _one_line(capsys, "cannot write -o", "expected a writable file path")
    if Path("/proc/self").is_dir():
        assert main(["optimize", str(program_file), "-o", "/proc/x.sdfg"]) == 2
        _one_line(capsys, "cannot write -o '/proc/x.sdfg'")
    assert not (tmp_path / "a_file").is_dir()


def test_optimize_creates_missing_folders_and_compresses_sdfgz(tmp_path, capsys, program_file):
    dst = tmp_path / "new" / "o.sdfgz"
    assert main(["optimize", str(program_file), "-o", str(dst)]) == 0
    assert dst.read_bytes()[:2] == b"\x1f\x8b"   # gzip
    assert [n for n, _ in dace.SDFG.from_file(str(dst)).all_nodes_recursive() if isinstance(n, Scan)]
    plain = tmp_path / "o.sdfg"
    assert main(["optimize", str(program_file), "-o", str(plain)]) == 0
    assert plain.read_text().lstrip().startswith("{")


def test_view_creates_missing_folders_and_refuses_a_directory(tmp_path, capsys, program_file):
    out = tmp_path / "missing" / "deeper" / "p.html"
    assert main(["view", str(program_file), "-o", str(out)]) == 0
    assert out.is_file() and f"written: {out}" in capsys.readouterr().out
    assert main(["view", str(program_file), "-o", str(tmp_path)]) == 2
    assert _one_line(capsys, "sdfg-scan view: -o", "is a directory", "HTML page") == ""


def test_demo_with_an_unknown_sample_is_one_line(capsys):
    assert main(["demo", "nosuchsample"]) == 2
    assert _one_line(capsys, "no sample 'nosuchsample'", "expected one of", "cumsum_column") == ""


def test_demo_with_a_sample_that_runs_on_its_own_is_one_line(capsys):
    """``noaa_root_zone`` is a sample, but not one of the demo (no build/inputs/expected): one line that
    says how to run it, and the list offers only samples the demo can run."""
    assert main(["demo", "noaa_root_zone"]) == 2
    _one_line(capsys, "'noaa_root_zone' is not a demo sample", "python ", "samples/noaa_root_zone.py",
              "expected one of cumsum_column, diagnose_pressure,")
    assert main(["demo", "nosuchsample"]) == 2
    assert "noaa_root_zone" not in capsys.readouterr().err


def test_inplace_names_are_checked(tmp_path, capsys, program_file):
    sdfg = program()
    args = sorted(k for k, d in sdfg.arrays.items() if not d.transient)
    with pytest.raises(ValueError, match=r"sdfg_scan.optimize: inplace pair 'OUT=nonexistent': 'nonexistent' is "
                                         r"not a non-transient array of the SDFG 'lift_prog' \(its non-transient "
                                         r"arrays: INIT, OUT, X\)"):
        pipeline.optimize(sdfg, inplace={"OUT": "nonexistent"})
    dst = str(tmp_path / "o.sdfg")
    assert main(["optimize", str(program_file), "-o", dst, "--inplace", "nonexist=alsonot"]) == 2
    _one_line(capsys, "--inplace pair 'nonexist=alsonot': 'nonexist' and 'alsonot' are not non-transient arrays",
              args[0])
    assert main(["optimize", str(program_file), "-o", dst, "--inplace", "foo"]) == 2
    _one_line(capsys, "--inplace expects OUT=IN pairs", "'foo'")
    assert not Path(dst).exists()


def test_dace_progress_does_not_reach_stdout(monkeypatch):
    """DaCe prints "Applied N X.\\r" on stdout when a transformation runs long (graupel) or ``debugprint`` is
    on: every application in ``optimize`` (in place outputs included) asks it not to."""
    calls = []
    apply = dace.SDFG.apply_transformations_repeated

    def spy(self, xforms, *args, **kwargs):
        calls.append(kwargs)
        return apply(self, xforms, *args, **kwargs)

    monkeypatch.setattr(dace.SDFG, "apply_transformations_repeated", spy)
    pipeline.optimize(program(), inplace={"OUT": "X"})
    assert len(calls) >= 10 and all(c.get("print_report") is False and c.get("progress") is False for c in calls)


def test_export_errors_go_to_stderr(tmp_path, capsys):
    assert main(["export", "nosuchmodule_for_sdfg_scan:prog", "--out", str(tmp_path)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and "sdfg-scan export" in err
    assert main(["export", "x:y", "--static", "dt"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and "--static expects NAME=VALUE" in err


class _ClosedPipe:
    def write(self, text):
        raise BrokenPipeError(32, "Broken pipe")

    def flush(self):
        raise BrokenPipeError(32, "Broken pipe")


def test_a_reader_that_stops_early_ends_the_command_quietly(monkeypatch, program_file, tmp_path, capsys):
    monkeypatch.setattr("sys.stdout", _ClosedPipe())
    assert main(["list"]) == 141
    dst = tmp_path / "o.sdfg"
    assert main(["optimize", str(program_file), "-o", str(dst)]) == 141
    assert dst.is_file()   # written before the report
    assert capsys.readouterr().err == ""


def _break_a_memlet(obj) -> bool:
    if isinstance(obj, dict):
        if obj.get("type") == "Memlet":
            obj["attributes"]["data"] = "no_such_array"
            return True
        return any(_break_a_memlet(v) for v in obj.values())
    return isinstance(obj, list) and any(_break_a_memlet(v) for v in obj)


def test_an_unreadable_file_is_one_line_without_dace_warnings(tmp_path, capsys, program_file):
    import json
    import warnings

    data = json.loads(program_file.read_text())
    assert _break_a_memlet(data)
    broken = tmp_path / "broken.sdfg"
    broken.write_text(json.dumps(data))
    text = tmp_path / "notes.sdfg"
    text.write_text("# not an SDFG\n")
    empty = tmp_path / "empty.sdfg"
    empty.write_text("")
    meta = tmp_path / "p.meta.json"
    meta.write_text('{"program": "p"}')
    listed = tmp_path / "list.sdfg"
    listed.write_text("  [1, 2]")
    for path, why in ((broken, "TypeError"), (text, "neither JSON nor gzip-compressed JSON"),
                      (empty, "(the file is empty)"), (meta, "(JSON, but not an SDFG: no 'type' field)"),
                      (listed, "(JSON, but not an SDFG: a list)")):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            assert main(["inspect", str(path)]) == 2
        assert caught == []
        _one_line(capsys, f"cannot read '{path}' as an SDFG", "expected the JSON of an .sdfg file", why)


def test_optimize_refuses_a_pin_below_the_floor_in_one_line(tmp_path, capsys):
    """A node pinned to ``parallel_prefix`` (replay) under ``--reproducibility exact``: one line naming the
    node, the implementation and the floor, nothing written; at ``replay`` the pin is kept."""
    from sdfg_scan.harness import one_node_sdfg

    n, k = dace.symbol("N"), dace.symbol("K")
    node = sdfg_scan.CumulativeScan("cs", axis=1)
    node.implementation = "parallel_prefix"
    sdfg = one_node_sdfg("pinned", node, {"_in": ((n, k), dace.float64, True)},
                         {"_out": ((n, k), dace.float64, True)}, 1, "cell")
    src, dst = tmp_path / "p.sdfg", tmp_path / "o.sdfg"
    sdfg.save(str(src))
    assert main(["optimize", str(src), "-o", str(dst)]) == 2
    _one_line(capsys, "sdfg-scan optimize: sdfg_scan.CumulativeScan 'cs': the pinned implementation "
              "'parallel_prefix' is replay, below the floor 'exact'", "nothing written")
    assert not dst.exists()
    assert main(["optimize", str(src), "-o", str(dst), "--reproducibility", "replay"]) == 0
    assert "cs: parallel_prefix: pinned by the user" in capsys.readouterr().out
