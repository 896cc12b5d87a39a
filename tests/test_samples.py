"""Every sample runs and matches its NumPy/SciPy check (small sizes; `auto` expansion)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from sdfg_scan.demo import SAMPLES_DIR, _equal, load_sample

SAMPLES = sorted(p.stem for p in Path(SAMPLES_DIR).glob("*.py"))
SMALL = {"N": 37, "K": 9, "M": 7, "H": 4}


def test_samples_found():
    assert len(SAMPLES) >= 9, SAMPLES


@pytest.mark.parametrize("name", SAMPLES)
def test_sample(name, capsys):
    sample = load_sample(name)
    if hasattr(sample, "main"):  # self-checking script with its own (small) sizes
        assert sample.main() == 0, capsys.readouterr().out
        return
    for key in sample.SIZE:
        sample.SIZE[key] = SMALL[key]
    rng = np.random.default_rng(3)
    args = sample.inputs(rng)
    want = sample.expected(args)
    impl = "auto" if "auto" in sample.IMPLEMENTATIONS else sample.IMPLEMENTATIONS[-1]
    sdfg = sample.build(impl)
    sdfg.name = f"test_{sdfg.name}"
    call = {k: (v.copy(order="K") if isinstance(v, np.ndarray) else v) for k, v in args.items()}
    sdfg.compile()(**call)
    exact = getattr(sample, "BITWISE_VS_NUMPY", True)
    for key, value in want.items():
        assert _equal(call[key], value, exact), f"{name}: output '{key}' differs from the NumPy reference"
