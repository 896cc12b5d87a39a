"""Test set-up shared by every test module.

- DaCe builds go to a per-process temporary folder (parallel workers and concurrent runs never share
  a build directory, and no stale build can hide a wrong transformation).
- ``optimizer.match_exception``: an exception inside ``can_be_applied`` fails the test instead of
  being swallowed by DaCe's pattern matcher.
- ``shared_dir``: ``../shared`` beside the repository (fixtures, tools), or a skip with the reason.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import dace
import pytest

import sdfg_scan  # noqa: F401  (registers the library and the frontend lowerings)

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
_BUILD = tempfile.mkdtemp(prefix=f"sdfg_scan_build_{os.getpid()}_")
dace.Config.set("default_build_folder", value=_BUILD)
# one build folder for the icon4py fixtures per test run, shared by the xdist workers (icon4py_fixtures.py)
os.environ.setdefault("SDFG_SCAN_FIXTURE_BUILDS", tempfile.mkdtemp(prefix="sdfg_scan_fixtures_"))
dace.Config.set("optimizer", "match_exception", value=True)
# the exporter's fixtures (`make fixtures`) stay where the user's cache is: keep their folder before the
# cache moves (icon4py_fixtures.py and shared_dir read it)
from sdfg_scan.export import FIXTURES_ENV, fixture_dir  # noqa: E402

os.environ.setdefault(FIXTURES_ENV, str(fixture_dir()))
# selection must not read a user's autotune cache (tests that fill one set their own directory)
os.environ["SDFG_SCAN_CACHE"] = tempfile.mkdtemp(prefix="sdfg_scan_cache_")
dace.Config.set("compiler", "allow_view_arguments", value=True)
# DaCe's default "inspect" walks the Python stack for every node added (tens of ms under pytest's deep
# stacks); sdfg_scan turns it off for its own builders (sdfg_scan.lineinfo, test_lineinfo.py checks that
# under "inspect"), and the tests' own SDFG builders need no line info either
dace.Config.set("compiler", "lineinfo", value="none")
# DaCe's default ("hash") serialises every nested SDFG to JSON at code generation, to emit one function for
# nested SDFGs with equal contents; a nested SDFG inside a nested SDFG is serialised again at every level. A
# program with such duplicates only gets a function per copy under "none"; on graupel, the dycore forward sweep
# and diagnose_pressure the code is the same byte for byte (stop 60), and graupel's generation takes 8.6 s, not 21.8 s
dace.Config.set("compiler", "unique_functions", value="none")


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    """``../shared`` when present, else the exporter's cache (``sdfg-scan export`` / ``make fixtures`` write
    ``<cache>/fixtures/icon4py``), else a skip naming the command that produces the fixtures."""
    if (SHARED / "fixtures" / "icon4py").is_dir():
        return SHARED
    if fixture_dir().is_dir():
        return fixture_dir().parents[1]
    pytest.skip(f"the fixtures are absent: neither {SHARED / 'fixtures' / 'icon4py'} (shipped beside the "
                f"repository as ../shared) nor the exporter cache {fixture_dir()}; "
                "produce them with `make fixtures` (sdfg-scan export MODULE:PROGRAM in the gt4py venv)")


def nvcc_compile(code: str, tmp_path: Path) -> None:
    """Compile CUDA source with ``nvcc -arch=sm_90`` (object only); skip when nvcc is absent."""
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("nvcc is not on PATH: CUDA code is generated but not compiled")
    src = tmp_path / "kernel.cu"
    src.write_text(code)
    include = Path(dace.__file__).parent / "runtime" / "include"
    cmd = [nvcc, "-c", "-std=c++17", "-arch=sm_90", "--fmad=false", f"-I{include}", str(src), "-o",
           str(tmp_path / "kernel.o")]
    res = subprocess.run(cmd, capture_output=True, text=True)
    assert res.returncode == 0, f"nvcc failed:\n{res.stderr[-4000:]}"


def streams_within_context(code: str) -> tuple[tuple[int, int], int, int]:
    """``((streams, events) of the CUDA context, largest stream used + 1, largest event used + 1)``."""
    (ctx,) = {tuple(int(x) for x in m) for m in re.findall(r"Context\((\d+), (\d+)\)", code)}
    used_s = max((int(x) + 1 for x in re.findall(r"streams\[(\d+)\]", code)), default=0)
    used_e = max((int(x) + 1 for x in re.findall(r"events\[(\d+)\]", code)), default=0)
    return ctx, used_s, used_e


def top_level_args(text: str) -> list[str]:
    """``a, f(b, c), d`` -> ``["a", "f(b, c)", "d"]``."""
    out, depth, cur = [], 0, ""
    for ch in text:
        depth += (ch == "(") - (ch == ")")
        if ch == "," and depth == 0:
            out, cur = out + [cur.strip()], ""
        else:
            cur += ch
    return out + [cur.strip()]


def launch_grids(code: str) -> dict[str, list[str]]:
    """``{kernel: [x, y, z]}``: the grid of every ``cudaLaunchKernel`` in generated CUDA code."""
    grids = {}
    for m in re.finditer(r"cudaLaunchKernel\(\(void\*\)(\w+), dim3\(", code):
        depth, i = 1, m.end()
        while depth:
            depth += (code[i] == "(") - (code[i] == ")")
            i += 1
        grids[m.group(1)] = top_level_args(code[m.end():i - 1])
    return grids


def cuda_code(sdfg: dace.SDFG) -> str:
    """The ``.cu`` translation unit DaCe generates for an SDFG after the GPU transformation."""
    objs = [o for o in sdfg.generate_code() if o.language == "cu"]
    assert objs, "no CUDA code object was generated"
    return objs[0].clean_code
