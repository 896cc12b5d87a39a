"""Transients allocated once per compiled program instead of once per call (``optimize(...,
persistent_transients=...)``).

gt4py's SDFGs allocate their top-level ``Cell x K`` transients on every call; for graupel at 20480 x 65
that is 26 arrays of 10.6 MB whose pages the kernel zeroes again on every call (the page faults of the
profile). A persistent transient is allocated by the program's ``__dace_init`` and reused.

Legal where (each checked per array):

* the array is a transient of the **top-level** SDFG, in host memory (``Default``/``CPU_Heap``), with
  ``Scope`` lifetime (not already persistent, external or on the stack/registers);
* no access to it sits inside a map scope (such an array may be meant per thread or per iteration);
* its size is known when the program is initialised: ``"static"`` takes only arrays whose shape is made
  of numbers; ``"sized"`` also takes shapes made of the program's free symbols. DaCe initialises a
  compiled program once, with the sizes of its first call, so ``"sized"`` is only legal for a caller
  that calls it with the same sizes every time (gt4py's ``TransientMemoryMode.PERSISTENT`` makes the same
  assumption); ``"static"`` is always legal.

A transient holds no value across calls (every call writes before it reads, or the SDFG was wrong), so
results do not change: bitwise the same program (tested). What it costs: the arrays stay allocated
between calls.
"""

from __future__ import annotations

import dace
from dace import dtypes

MODES = ("static", "sized")


def make_transients_persistent(sdfg: dace.SDFG, mode: str = "static") -> list[str]:
    """Give the top-level transients of ``sdfg`` that may legally be persistent (see the module) the
    ``Persistent`` lifetime; return their names.

    :param mode: ``"static"`` (shapes of numbers only) or ``"sized"`` (also shapes of the program's free
        symbols: the caller calls with the same sizes every time).
    """
    if mode not in MODES:
        raise ValueError(f"sdfg_scan.optimize: persistent_transients must be one of {MODES} (or False), "
                         f"got {mode!r}")
    free = {str(s) for s in sdfg.free_symbols}
    refused: set[str] = set()
    seen: set[str] = set()
    for state in sdfg.states():
        scopes = state.scope_dict()
        for node in state.data_nodes():
            seen.add(node.data)
            if scopes.get(node) is not None:   # inside a map scope
                refused.add(node.data)
    chosen = []
    for name in sorted(seen - refused):
        desc = sdfg.arrays[name]
        if not desc.transient or not isinstance(desc, dace.data.Array) or isinstance(desc, dace.data.View):
            continue
        if desc.lifetime != dtypes.AllocationLifetime.Scope:
            continue
        if desc.storage not in (dtypes.StorageType.Default, dtypes.StorageType.CPU_Heap):
            continue
        symbols = {str(s) for s in desc.free_symbols}
        if symbols and (mode == "static" or not symbols <= free):
            continue
        desc.lifetime = dtypes.AllocationLifetime.Persistent
        chosen.append(name)
    return chosen


__all__ = ["MODES", "make_transients_persistent"]
