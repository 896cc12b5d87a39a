"""``sdfg-scan export`` (``sdfg_scan.export``): fixtures regenerated from a gt4py program (gt4py venv only)."""

from __future__ import annotations

import json
import os

import pytest

os.environ.setdefault("GT4PY_BUILD_JOBS_MODE", "serial")
pytest.importorskip("gt4py.next", reason="gt4py is not installed here: the gt4py tests run in the gt4py venv "
                    "(`make test-gt4py`, Python >= 3.12)")

import dace  # noqa: E402

from sdfg_scan.cli import main  # noqa: E402
from sdfg_scan.nodes.base import ColumnNode  # noqa: E402


def test_export_writes_the_shared_fixture_layout(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(os.path.dirname(os.path.dirname(__file__)))
    assert main(["export", "tests.gt4py_programs.programs:cumsum_k", "--out", str(tmp_path)]) == 0
    meta = json.loads((tmp_path / "cumsum_k.meta.json").read_text())
    assert set(meta["files"]) == {"lowered", "opt", "opt_sdfg_scan"}
    assert meta["versions"]["dace"] == dace.__version__
    sdfgs = {v: dace.SDFG.from_file(str(tmp_path / f)) for v, f in meta["files"].items()}
    for sdfg in sdfgs.values():
        sdfg.validate()
    # hooks keep the calling convention: the two optimized forms take the same arguments
    assert meta["calling_convention"]["opt"] == meta["calling_convention"]["opt_sdfg_scan"]
    assert meta["calling_convention"]["opt"]["x"]["kind"] == "array"
    assert not [n for n, _ in sdfgs["opt_sdfg_scan"].all_nodes_recursive() if isinstance(n, ColumnNode)]
    assert "lifted 1" in meta["variants"]["opt_sdfg_scan"]["sdfg_scan_reports"][0]


def test_export_refuses_what_is_not_a_program(tmp_path, capsys):
    with pytest.raises(TypeError, match="expected a gt4py.next @program"):
        main(["export", "sdfg_scan.export:export", "--out", str(tmp_path)])
    assert main(["export", "no_such_module_xyz:prog", "--out", str(tmp_path)]) == 2
    assert "cannot import" in capsys.readouterr().err   # errors on stderr


def test_export_binds_static_arguments_and_keeps_other_variants(tmp_path, monkeypatch, capsys):
    """``--static`` binds scalars and domain bounds as ``program.compile(...)`` does (literals in the SDFG);
    ``--variants`` writes a subset, and a second export of another variant keeps the first one's files."""
    monkeypatch.syspath_prepend(os.path.dirname(os.path.dirname(__file__)))
    prog = "tests.gt4py_programs.programs:damped_cumsum=damped"
    static = ["--static", "alpha=0.25", "--static", "horizontal_start=0", "--static", "horizontal_end=9",
              "--static", "vertical_start=0", "--static", "vertical_end=7"]
    assert main(["export", prog, *static, "--variants", "lowered", "--out", str(tmp_path)]) == 0
    assert main(["export", prog, *static, "--variants", "opt", "--out", str(tmp_path)]) == 0
    capsys.readouterr()
    meta = json.loads((tmp_path / "damped.meta.json").read_text())
    assert meta["static_args"] == {"alpha": 0.25, "horizontal_start": 0, "horizontal_end": 9, "vertical_start": 0,
                                   "vertical_end": 7}
    assert set(meta["files"]) == {"lowered", "opt"}
    for f in meta["files"].values():
        sdfg = dace.SDFG.from_file(str(tmp_path / f))
        sdfg.validate()
        text = json.dumps(sdfg.to_json())
        assert "0.25" in text and "i_K_gtx_vertical < 7" in text.replace("(", "").replace(")", "")
        code = [n.code.as_string for n, _ in sdfg.all_nodes_recursive() if isinstance(n, dace.nodes.Tasklet)]
        assert not any("alpha" in c for c in code)
    # refusals name the parameter and the problem, and write nothing
    assert main(["export", prog, "--static", "beta=1.0", "--variants", "lowered", "--out", str(tmp_path / "x")]) == 2
    assert "has no parameter 'beta'" in capsys.readouterr().err
    assert main(["export", prog, "--static", "alpha", "--out", str(tmp_path / "x")]) == 2
    assert "expects NAME=VALUE" in capsys.readouterr().err
    assert main(["export", prog, "--static", "alpha=abc", "--out", str(tmp_path / "x")]) == 2
    assert "not a Python literal" in capsys.readouterr().err
    assert main(["export", prog, "--variants", "opt_hooks", "--out", str(tmp_path / "x")]) == 2
    assert "needs hooks=" in capsys.readouterr().err
    assert not (tmp_path / "x").exists() or not list((tmp_path / "x").iterdir())


def test_find_fixture_takes_the_exporters_opt_for_opt_nohooks(tmp_path):
    from sdfg_scan.export import find_fixture

    (tmp_path / "prog.opt.sdfg").write_text("{}")
    assert find_fixture("prog.opt_nohooks", roots=[tmp_path]) == tmp_path / "prog.opt.sdfg"
    assert find_fixture("prog.opt_hooks", roots=[tmp_path]) is None


def test_export_runs_without_line_info_unless_asked(tmp_path, monkeypatch, capsys):
    """The translation runs with DaCe's ``compiler.lineinfo`` ``"none"`` (no per-node stack walk); ``--lineinfo``
    keeps the caller's setting; the metadata says which; the caller's setting is back afterwards."""
    monkeypatch.syspath_prepend(os.path.dirname(os.path.dirname(__file__)))
    with dace.config.set_temporary("compiler", "lineinfo", value="inspect"):
        prog = "tests.gt4py_programs.programs:cumsum_k"
        assert main(["export", prog, "--variants", "lowered", "--out", str(tmp_path / "a")]) == 0
        assert dace.Config.get("compiler", "lineinfo") == "inspect"
        assert main(["export", prog, "--variants", "lowered", "--lineinfo", "--out", str(tmp_path / "b")]) == 0
    capsys.readouterr()
    lines = {}
    for which in "ab":
        meta = json.loads((tmp_path / which / "cumsum_k.meta.json").read_text())
        sdfg = dace.SDFG.from_file(str(tmp_path / which / meta["files"]["lowered"]))
        lines[which] = (meta["variants"]["lowered"]["lineinfo"],
                        any(getattr(n, "debuginfo", None) is not None for n, _ in sdfg.all_nodes_recursive()))
    assert lines == {"a": ("none", False), "b": ("inspect", True)}
