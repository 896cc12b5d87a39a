"""Constant flags of a k-loop: the analysis behind the ``flag`` carry kind (:mod:`sdfg_scan.scan_findings`).

A *constant flag* is a transient boolean scalar that every iteration of the loop sets to the same
constant (diagnose_pressure's ``is_first_level``: init ``True``, ``f = False`` in ``scan_update``).
From the second level on its value is known, so branches on it are decided there
(``PeelBoundaryLevels`` peels the first level and removes them from the steady state).
"""

from __future__ import annotations

import re

import networkx as nx
import numpy as np
from dace.sdfg import SDFG, SDFGState, nodes
from dace.sdfg.state import LoopRegion

_BOOL_CONST = re.compile(r"^\s*(\w+)\s*=\s*\(?\s*(True|False)\s*\)?\s*;?\s*$")


def _constant_of(state: SDFGState, node: nodes.AccessNode) -> bool | None:
    """The bool written into ``node`` by a constant tasklet (no inputs, ``out = True|False``), or None."""
    ins = state.in_edges(node)
    if len(ins) != 1 or not isinstance(ins[0].src, nodes.Tasklet):
        return None
    t = ins[0].src
    if t.in_connectors or len(t.out_connectors) != 1 or t.code.language.name != "Python":
        return None
    m = _BOOL_CONST.match(t.code.as_string.strip())
    if m is None or m.group(1) != ins[0].src_conn:
        return None
    return m.group(2) == "True"


def _direct_body_state(loop: LoopRegion, state: SDFGState) -> bool:
    return state.parent_graph is loop


def bool_scalar(sdfg: SDFG, name: str) -> bool:
    """Whether ``name`` is a transient single-element boolean container of ``sdfg``."""
    desc = sdfg.arrays.get(name)
    return desc is not None and desc.transient and desc.total_size == 1 and desc.dtype.type in (bool, np.bool_)


def _precedes(loop: LoopRegion, a, b) -> bool:
    return a is not b and nx.has_path(loop.nx, a, b) and not nx.has_path(loop.nx, b, a)


def _write_value(loop: LoopRegion, state: SDFGState, node: nodes.AccessNode) -> tuple[bool, bool] | None:
    """``(value, unconditional)`` of a write of a flag, or None when it is not a constant write."""
    c = _constant_of(state, node)
    if c is not None:
        return c, _direct_body_state(loop, state)
    ins = state.in_edges(node)
    if len(ins) != 1 or not isinstance(ins[0].src, nodes.AccessNode):
        return None
    g = ins[0].src.data
    if not bool_scalar(loop.sdfg, g) or state.in_degree(ins[0].src) != 0:
        return None
    # g: every write is a constant tasklet in a direct body state that runs before this copy
    values = set()
    for st in loop.sdfg.all_states():
        for n in st.data_nodes():
            if n.data != g or st.in_degree(n) == 0:
                continue
            v = _constant_of(st, n)
            if v is None or not _direct_body_state(loop, st) or not _direct_body_state(loop, state):
                return None
            if st is state or not _precedes(loop, st, state):
                return None
            values.add(v)
    if len(values) != 1:
        return None
    return values.pop(), _direct_body_state(loop, state)


def constant_flags(loop: LoopRegion) -> dict[str, bool]:
    """``{flag: value}``: transient bool scalars that every iteration of ``loop`` sets to ``value``.

    Every write inside the loop is a constant (a constant tasklet, directly or through one scalar
    copy) with the same value, at least one of them in a state directly in the loop body (executed
    every iteration); a write from anything else (data, a nested SDFG) disqualifies the flag.
    """
    sdfg = loop.sdfg
    found: dict[str, list[tuple[bool, bool]]] = {}
    bad: set[str] = set()
    for st in loop.all_states():
        for n in st.data_nodes():
            if st.in_degree(n) == 0 or not bool_scalar(sdfg, n.data):
                continue
            w = _write_value(loop, st, n)
            if w is None:
                bad.add(n.data)
                continue
            found.setdefault(n.data, []).append(w)
    out = {}
    for f, ws in found.items():
        if f in bad or len({v for v, _ in ws}) != 1 or not any(u for _, u in ws):
            continue
        out[f] = ws[0][0]
    return out


__all__ = ["bool_scalar", "constant_flags"]
