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
    # DeadCarryElimination removed the dead recurrence c2 and the flag c3, ScanFission split c0 from c1, and
    # c1's part reads no input: the expansions over columns wired the body into the map scope only after
    # the outputs' memlet paths, whose propagation needs it there ("Leftover nodes in queue: last_c1")
    "part_without_inputs_after_dead_slots": Column(
        (Slot("recurrent", last=True), Slot("flag", out=False, last=True),
         Slot("recurrent", ins=(0, 0, 2), out=False), Slot("flag", form=3, ins=(0, 0, 1), out=False)),
        nlev=1, cell_contiguous=True, init_in_map=True, via_temporary=True),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_optimize_regression(name):
    gs.check_optimize_bitwise(CASES[name])
