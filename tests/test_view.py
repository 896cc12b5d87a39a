"""What viewers show of sdfg_scan nodes: labels, saved properties, expanded nodes, the ``view`` page
(rendered in a real headless browser where one is installed) and the VS Code helper module."""

import importlib.util
import json
import shutil
import subprocess
import sys
import warnings
import zlib
from pathlib import Path

import dace
import icon4py_fixtures as fx
import pytest

import sdfg_scan
from sdfg_scan.cli import main
from sdfg_scan.harness import one_node_sdfg
from sdfg_scan.view import page, sections

N, K = dace.symbol("N"), dace.symbol("K")
CHROMIUM = next((shutil.which(b) for b in ("chromium", "chromium-browser", "google-chrome") if shutil.which(b)), None)


def cumsum_sdfg(implementation=None):
    node = sdfg_scan.CumulativeScan("cumsum", op="sum", axis=1)
    if implementation:
        node.implementation = implementation
    sdfg = one_node_sdfg("view_cumsum", node, {"_in": ((N, K), dace.float64, True)},
                         {"_out": ((N, K), dace.float64, True)}, axis=1, layout="cell")
    return sdfg, node


def test_label_names_node_kind_semantics_and_implementation():
    _, node = cumsum_sdfg("blocked")
    assert str(node) == "cumsum: CumulativeScan(sum, axis=1, forward) [blocked, exact]"
    _, auto = cumsum_sdfg()
    assert str(auto).startswith("cumsum: CumulativeScan(sum, axis=1, forward) [auto")


def test_json_always_has_selection_properties_first_and_round_trips(tmp_path):
    sdfg, node = cumsum_sdfg()
    attrs = node.to_json(sdfg.start_state)["attributes"]
    assert list(attrs)[:3] == ["implementation", "reproducibility", "selection_reason"]
    path = tmp_path / "c.sdfg"
    sdfg.save(str(path))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # e.g. "Unused properties"
        back = dace.SDFG.from_file(str(path))
    (loaded,) = [n for n, _ in back.all_nodes_recursive() if isinstance(n, sdfg_scan.CumulativeScan)]
    assert (loaded.implementation, loaded.reproducibility, loaded.op) == (node.implementation, node.reproducibility, "sum")


def test_expanded_node_is_labelled_with_its_implementation():
    sdfg, node = cumsum_sdfg()
    node.expand(sdfg.start_state, "sequential")
    assert [n.label for n in sdfg.start_state.nodes() if isinstance(n, dace.nodes.NestedSDFG)] == ["cumsum_sequential"]
    sdfg, node = cumsum_sdfg("auto")
    node.expand(sdfg.start_state)  # auto resolves, then expands with the concrete implementation
    (nested,) = [n for n in sdfg.start_state.nodes() if isinstance(n, dace.nodes.NestedSDFG)]
    assert nested.label == f"cumsum_{node.implementation}" and node.implementation != "auto"
    sdfg.validate()


@pytest.fixture(scope="module")
def pressure_opt(tmp_path_factory):
    """icon4py's diagnose_pressure after ``sdfg_scan.optimize``: one lifted ``Scan``."""
    if not fx.available():
        pytest.skip(fx.SKIP_REASON)
    sdfg = fx.load("diagnose_pressure.opt")
    sdfg_scan.optimize(sdfg)
    path = tmp_path_factory.mktemp("view") / "diagnose_pressure.opt.sdfg"
    sdfg.save(str(path))
    return sdfg, path


@pytest.mark.fixtures
def test_scan_body_comes_last_and_becomes_a_section(pressure_opt):
    sdfg, _ = pressure_opt
    (scan, state), = [(n, s) for n, s in sdfg.all_nodes_recursive() if isinstance(n, sdfg_scan.Scan)]
    attrs = list(scan.to_json(state)["attributes"])
    assert attrs[:3] == ["implementation", "reproducibility", "selection_reason"] and attrs[-1] == "body"
    secs = sections(sdfg)
    assert [s.anchor for s in secs] == ["program", "body-0"] and secs[1].title == "scan_0 body"
    assert secs[1].sdfg["type"] == "SDFG"
    assert "drawn as a graph in section 'scan_0 body'" in json.dumps(secs[0].sdfg)
    html = page(sdfg)
    assert "<script src=" not in html.replace('<script src="data:text/javascript,">', "")  # nothing to fetch


def _chromium(url: str, *args: str) -> str:
    cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--virtual-time-budget=4000", *args, url]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False).stdout


def _drawn(dom: str) -> tuple[str, list[str]]:
    head, _, rest = dom.partition('<pre id="sdfg-scan-drawn"')
    section = rest.partition('data-section="')[2].partition('"')[0]
    return section, rest.partition(">")[2].partition("</pre>")[0].splitlines()


def _png_varies(path: Path) -> bool:
    """More than a blank page: the decoded (filtered) image data takes many distinct byte values."""
    data, pos, idat = path.read_bytes(), 8, b""
    while pos < len(data):
        length = int.from_bytes(data[pos:pos + 4], "big")
        if data[pos + 4:pos + 8] == b"IDAT":
            idat += data[pos + 8:pos + 8 + length]
        pos += 12 + length
    return len(set(zlib.decompress(idat))) > 32


@pytest.mark.fixtures
@pytest.mark.skipif(CHROMIUM is None, reason="no headless browser installed (apt-get install -y chromium)")
def test_view_page_renders_in_a_browser_after_being_moved(pressure_opt, tmp_path, capsys):
    _, src = pressure_opt
    first = tmp_path / "first" / "p.html"
    first.parent.mkdir()
    assert main(["view", str(src), "-o", str(first)]) == 0
    assert "1 scan body" in capsys.readouterr().out
    moved = tmp_path / "elsewhere" / "moved.html"
    moved.parent.mkdir()
    shutil.move(first, moved)  # standalone: nothing next to it is needed
    section, labels = _drawn(_chromium(moved.as_uri(), "--dump-dom"))
    assert section == "program"
    # the shared fixture's domain is static ([0, 64)), an exported one's symbolic ([vertical_start, ...))
    (scan,) = [lab for lab in labels if lab.startswith("scan_0: Scan(backward, i_K_gtx_vertical in [")]
    assert scan.endswith(", exact]")  # the chosen implementation and its class
    section, labels = _drawn(_chromium(moved.as_uri() + "#body-0", "--dump-dom"))
    assert section == "body-0" and len(labels) > 5  # the body's states, loop and nodes
    shot = tmp_path / "shot.png"
    _chromium(moved.as_uri(), f"--screenshot={shot}", "--window-size=1200,800",
              "--run-all-compositor-stages-before-draw")
    assert shot.is_file() and _png_varies(shot)


def test_view_cli_reports_a_missing_file_in_one_line(tmp_path, capsys):
    assert main(["view", str(tmp_path / "nope.sdfg")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "does not exist" in err[0]


def test_vscode_module_loads_by_path_as_the_extension_does():
    path = Path(sdfg_scan.__file__).parent / "vscode.py"
    spec = importlib.util.spec_from_file_location(str(path), path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert {"CumulativeScan", "Scan", "LinearRecurrence"} <= set(module.NODES)
    assert "LiftScans" in module.TRANSFORMATIONS


def test_help_does_not_import_dace():
    code = ("import sys, sdfg_scan_launcher\n"
            "try:\n    sdfg_scan_launcher.main(['view', '--help'])\n"
            "except SystemExit as e:\n    print('exit', e.code, 'dace' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         cwd=Path(__file__).resolve().parents[1]).stdout
    assert "standalone HTML page" in out and out.strip().endswith("exit 0 False")


def _body(c, x, k):
    (s,) = c
    return (s + x[0],), ()


def _no_scan(a, b, c):
    c[:] = a


def _one_scan(a, b, c):
    b[:] = sdfg_scan.scan(_body, (0.0,), (a,), axis=1)


def _two_scans(a, b, c):
    b[:] = sdfg_scan.scan(_body, (0.0,), (a,), axis=1)
    c[:] = sdfg_scan.scan(_body, (1.0,), (a,), axis=1)


@pytest.mark.parametrize("prog, words", [(_no_scan, "0 scan bodies as graphs of their own"),
                                         (_one_scan, "1 scan body as a graph of its own"),
                                         (_two_scans, "2 scan bodies as graphs of their own")], ids=["0", "1", "2"])
def test_view_cli_counts_the_scan_bodies(tmp_path, capsys, prog, words):
    """The ``written:`` line counts the bodies drawn as graphs of their own, in words that fit the count."""
    prog.__annotations__ = dict(a=dace.float64[N, K], b=dace.float64[N, K], c=dace.float64[N, K])
    path, out = tmp_path / "p.sdfg", tmp_path / "p.html"
    dace.program(prog).to_sdfg().save(str(path))
    assert main(["view", str(path), "-o", str(out)]) == 0
    assert f"written: {out} (standalone: opens without network or dace; {words})" in capsys.readouterr().out
