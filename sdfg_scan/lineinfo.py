"""Building SDFGs without DaCe's per-node walk of the Python stack.

DaCe 2.0.0a10's default ``compiler.lineinfo = "inspect"`` makes every ``add_access``, ``add_tasklet``,
``add_map``, ... call ``inspect.stack()`` to record which Python line created the node. That walk resolves
the module of every frame on the stack, so its cost grows with the depth of the caller's stack and the
number of loaded modules: under pytest one node costs tens of milliseconds, and an expansion that adds a
few hundred nodes spends most of its time there (a test of eight ``blocked`` cumulative scans: 12.6 s of
expansion, 11.4 s of it in the walk, under cProfile).

The nodes sdfg_scan adds would only be given lines of sdfg_scan's own source, which tell a user of the
SDFG nothing, so every expansion (:meth:`sdfg_scan.nodes.base.ColumnNode.expand`), every transformation's
``apply`` (``sdfg_scan.transformations``) and :func:`sdfg_scan.optimize` run with ``lineinfo`` set to
``"none"`` and restore the caller's setting on return. Nodes the caller builds, and line information
DaCe's frontend takes from a parsed program, are not affected.
"""

from __future__ import annotations

from typing import Any

import dace


def no_stack_lineinfo() -> Any:
    """``compiler.lineinfo`` is ``"none"`` inside, the caller's value after: DaCe's own
    ``dace.config.set_temporary`` (a generator context manager, so also a decorator, ``@no_stack_lineinfo()``,
    saving and restoring at each call: nesting and recursion are safe). DaCe keeps its configuration per
    thread (``dace.config._ConfigData`` is a ``threading.local``): a context in one thread leaves every
    other thread's setting alone."""
    return dace.config.set_temporary("compiler", "lineinfo", value="none")


__all__ = ["no_stack_lineinfo"]
