"""``sdfg_scan.optimize`` and the ``inspect`` / ``optimize`` subcommands."""

import dace
import pytest
from test_lift_scans import program

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
