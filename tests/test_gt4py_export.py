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
    assert "cannot import" in capsys.readouterr().out
