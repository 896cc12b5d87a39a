"""``benchmarks/gpu_check.py`` (the prepared GPU run) builds here: ``--build-only`` on a subset of its
cases (the whole CUDA build of each SDFG, cuSPARSE linked); the numerics and timing need a GPU."""

import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

pytestmark = [pytest.mark.gpu, pytest.mark.slow]


@pytest.mark.parametrize("cases,impls", [
    ("window M=3", ("direct", "kcached")),
    pytest.param("tridiagonal solve", ("thomas", "pcr", "cusparse"), marks=pytest.mark.long),
    pytest.param("tridiagonal factor,prefactored solve,associative scan,scan k-3..k",
                 ("thomas", "sequential", "parallel_prefix", "kcached"), marks=pytest.mark.long),
], ids=["window", "tridiagonal", "the rest"])   # CI: the script's machinery on one case, built by two
def test_gpu_check_builds(capsys, cases, impls):   # processes (--jobs); every expansion's CUDA is
    if shutil.which("nvcc") is None:                  # compiled by nvcc in its own module's tests
        pytest.skip("nvcc is not on PATH: the GPU check cannot be built here")
    from benchmarks.gpu_check import main

    assert main(["--build-only", "--jobs", "2", "--only", cases, "--layouts", "cell"]) == 0
    out = capsys.readouterr().out
    for impl in impls:
        assert f"| {impl}" in out
