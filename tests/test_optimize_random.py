"""Randomised differential test of ``sdfg_scan.optimize`` on gt4py-shaped column scans.

Hypothesis draws a :class:`gt4py_shaped.Column` (1 to 30 carry slots of every kind, flag / level /
data branches with and without self-copies, forward or backward, symbolic or constant K, first level
0 or 1, K- or cell-contiguous fields, inits from arrays or from tasklets in the map), builds the
SDFG, and checks through the public API only: ``optimize`` a deep copy, ``validate`` it, compile
both with the same IEEE-strict host flags, run them on the same random inputs and compare every
output bitwise (NaNs by position, via the raw bytes).

CI runs ``EXAMPLES`` (11) derandomised examples plus ``gt4py_shaped.KITCHEN_SINK`` (every kind, branch
and self-copy in one column), so the run is reproducible; ``make fuzz`` sets
``SDFG_SCAN_FUZZ_EXAMPLES`` for a longer, randomised run. A failure found here becomes a regular
test in ``tests/test_optimize_regressions.py``.
"""

from __future__ import annotations

import os

import gt4py_shaped as gs
from hypothesis import HealthCheck, Phase, example, given, note, settings

FUZZ = int(os.environ.get("SDFG_SCAN_FUZZ_EXAMPLES", "0"))
EXAMPLES = FUZZ or 11  # + the explicit KITCHEN_SINK example


# CI: derandomised (reproducible) and no shrinking (each shrink step compiles two SDFGs); the failing
# example is printed in full with its structure (``note``). ``make fuzz``: random, shrinks, keeps a database.
@settings(max_examples=EXAMPLES, derandomize=not FUZZ, deadline=None, database=settings().database if FUZZ else None,
          phases=tuple(Phase) if FUZZ else (Phase.explicit, Phase.generate), print_blob=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(col=gs.columns())
@example(col=gs.KITCHEN_SINK)
def test_optimize_keeps_random_scans_bitwise(col):
    gs.check_optimize_bitwise(col, log=note)
