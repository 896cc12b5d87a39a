"""Regression tests for failures found by the randomised test of ``optimize`` (test_optimize_random.py).

Each case is a :class:`gt4py_shaped.Column` as hypothesis printed it (shrunk by hand), checked with
the same differential check: optimize a deep copy, validate, compile both IEEE-strict, compare every
output bitwise.
"""

from __future__ import annotations

import gt4py_shaped as gs
import pytest
from gt4py_shaped import Column, Slot

CASES = {
    # levels_outside (ScanLoopInterchange's rewrite): a scan whose only output is written in the exit
    # state left the level part's map exit without inputs (a source node), so DaCe could not build the
    # scope tree ("Leftover nodes in queue") when the part's carry paths were added
    "last_level_output_only_cell_contiguous": Column((Slot("recurrent", out=False, last=True),),
                                                     cell_contiguous=True),
    # DeadCarryElimination's delay-line window: with one constant level the inputs have shape (1,), the
    # connector of the whole input is squeezed to a scalar and ``__x[k - 1]`` did not validate
    "delay_line_one_constant_level": Column((Slot("delay_line", ins=(1, 2, 1)),), backward=True, nlev=1),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_optimize_regression(name):
    gs.check_optimize_bitwise(CASES[name])
