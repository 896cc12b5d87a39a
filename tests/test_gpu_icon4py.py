"""``benchmarks/gpu_icon4py.py``'s machinery without a GPU: arguments at any size from the prepared
inputs, device copies that keep aliasing and strides, the comparison against the CPU outputs (the GPU
run itself: ``make gpu-icon4py`` on a CUDA machine, README "Benchmarks")."""

import sys
import types
from pathlib import Path

import dace
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks import gpu_icon4py as g  # noqa: E402


def _program() -> dace.SDFG:
    """gt4py's calling convention: ``q_in``/``q_out`` over ``[Cell, K]`` and ``pr`` over ``[Cell]``."""
    sym = dace.symbolic.pystr_to_symbolic
    sdfg = dace.SDFG("gpu_icon4py_args")
    for name in ("q_in", "q_out"):
        sdfg.add_array(name, [sym(f"__{name}_Cell_range_1 - __{name}_Cell_range_0"),
                              sym(f"__{name}_K_range_1 - __{name}_K_range_0")], dace.float64,
                       strides=[1, sym(f"__{name}_K_stride")])
    sdfg.add_array("pr", [sym("__pr_Cell_range_1 - __pr_Cell_range_0")], dace.float64)
    sdfg.add_state()
    return sdfg


META = {"nlev": 3, "seed": 0, "check_cells": 4, "arguments": {"aliases": {"q_out": "q_in"}}}


def _inputs() -> dict:
    return {"pr": np.arange(4.0), "q_in": np.asfortranarray(np.arange(12.0).reshape(4, 3))}


def test_arguments_repeat_the_prepared_cells_and_keep_aliases():
    kw = g._arguments(_program(), META, _inputs(), 10)
    assert kw["q_in"] is kw["q_out"] and kw["q_in"].shape == (10, 3) and kw["q_in"].flags.f_contiguous
    assert np.array_equal(kw["q_in"][4:8], _inputs()["q_in"]) and np.array_equal(kw["q_in"][8:], _inputs()["q_in"][:2])
    assert np.array_equal(kw["pr"], np.arange(10.0) % 4)
    assert list(g._buffers(kw)) == ["pr", "q_in"]   # one name per distinct array
    small = g._arguments(_program(), META, _inputs(), 2)
    assert np.array_equal(small["q_in"], _inputs()["q_in"][:2])


def test_device_copies_keep_aliasing_and_strides():
    fake = types.SimpleNamespace(asarray=lambda v, order=None: np.array(v, order=order, copy=True))
    kw = g._arguments(_program(), META, _inputs(), 6)
    dev = g._to_device(kw, fake)
    assert dev["q_in"] is dev["q_out"] and dev["q_in"] is not kw["q_in"]
    assert dev["q_in"].strides == kw["q_in"].strides and dev["pr"].strides == kw["pr"].strides


def test_compare_measures_the_replay_contract():
    want = np.array([[1.0, 0.0], [2.0, -4.0]])
    same = g._compare(want.copy(), want)
    assert same["bitwise"] and same["max_rel"] == 0 and same["beyond_rtol"] == 0 and same["new_nan_inf"] == 0
    got = want.copy()
    got[1, 0] *= 1 + 1e-5                  # beyond rtol 1e-6
    got[0, 1] = 1e-20                      # a residual where the CPU has 0: infinitely relative, tiny scaled
    c = g._compare(got, want)
    assert not c["bitwise"] and c["beyond_rtol"] == 0.5 and c["max_rel"] == np.inf
    assert abs(c["scaled"] - 2e-5 / 4.0) < 1e-12      # the largest difference over the largest |value|
    got[1, 1] = np.nan
    assert g._compare(got, want)["new_nan_inf"] == 1
    assert not g._compare(-0.0 * want, 0.0 * want)["bitwise"]   # bits, not values
    assert g._ms(float("nan")) == "launch failed" and g._ms(0.0015) == "1.500 ms"
