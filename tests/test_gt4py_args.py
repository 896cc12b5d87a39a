"""``sdfg_scan.gt4py_args.gt4py_arguments`` on a hand-built SDFG shaped as gt4py's backend writes one (no gt4py)."""

from __future__ import annotations

import dace
import numpy as np
import pytest

from sdfg_scan.gt4py_args import gt4py_arguments


def _gt4py_shaped() -> dace.SDFG:
    """A field ``x`` over ``(Cell, K)`` with gt4py's range/stride symbols, gt4py's scalars and a float one."""
    sdfg = dace.SDFG("gt4py_args_probe")
    sym = {n: dace.symbol(n) for n in ("__x_Cell_range_0", "__x_Cell_range_1", "__x_K_range_0", "__x_K_range_1",
                                       "__x_Cell_stride", "__x_K_stride")}
    sdfg.add_array("x", (sym["__x_Cell_range_1"] - sym["__x_Cell_range_0"], sym["__x_K_range_1"] - sym["__x_K_range_0"]),
                   dace.float64, strides=(sym["__x_Cell_stride"], sym["__x_K_stride"]))
    sdfg.add_scalar("gt_metrics_level", dace.int32)
    sdfg.add_scalar("nlev", dace.int32)
    sdfg.add_scalar("dt", dace.float64)
    sdfg.add_symbol("horizontal_end", dace.int32)
    sdfg.add_state("s")
    return sdfg


def test_gt4py_scalars_default_as_gt4py_passes_them():
    kw = gt4py_arguments(_gt4py_shaped(), ncells=7, nlev=5, seed=3)
    assert kw["gt_metrics_level"] == 0   # gt4py calls with 0; 1 would time every call
    assert kw["nlev"] == 5
    assert kw["horizontal_end"] == 7
    assert kw["dt"] == 1.0
    x = kw["x"]
    assert x.shape == (7, 5) and x.flags.f_contiguous   # horizontal-first, as icon4py's unit-stride backends
    assert (kw["__x_Cell_range_0"], kw["__x_Cell_range_1"], kw["__x_K_range_1"]) == (0, 7, 5)
    assert (kw["__x_Cell_stride"], kw["__x_K_stride"]) == (1, 7)
    assert np.all((x >= 0.1) & (x < 1.0))


def test_given_scalars_win_and_bad_alias_is_named():
    sdfg = _gt4py_shaped()
    kw = gt4py_arguments(sdfg, 4, 3, scalars={"gt_metrics_level": 2, "nlev": 9, "dt": 30.0})
    assert (kw["gt_metrics_level"], kw["nlev"], kw["dt"]) == (2, 9, 30.0)
    sdfg.add_array("y", (3,), dace.float32)
    with pytest.raises(ValueError, match="'y' cannot alias 'x'"):
        gt4py_arguments(sdfg, 4, 3, aliases={"y": "x"})
