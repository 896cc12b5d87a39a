"""A lifted ``Scan`` body's strides follow the containers outside (after a pass changed their strides).

A lifted gt4py scan keeps gt4py's body: its operands are the body's non-transient arrays, whose strides are
symbols the node's ``symbol_mapping`` maps to the outer containers' strides *as they were when the scan
was lifted*. gt4py changes the strides of its transients later (``gt_change_strides`` at the end of
``gt_auto_optimize``: every multi-dimensional transient becomes column-major when the horizontal
dimension has unit stride) and propagates them into nested SDFGs, but not into a library node. So before
a ``Scan`` (``columns="single"`` or ``"cells"``) is chosen for or expanded, :func:`sync_body_strides`
re-derives each operand's strides in the body from the container outside:

* an operand whose body array has the rank of the container takes its strides dimension by dimension;
* an operand whose body array drops the dimensions the per-cell subset fixes to one index (a column of a
  ``[Cell, K]`` field) takes the strides of the remaining dimensions (dimensions of extent 1 on either
  side are left out of the matching: their stride never matters);
* a body stride that is a symbol of the mapping gets the new value; any other form gets a fresh symbol
  (``__sdfg_scan_stride_<connector>_<dim>``) mapped to it. A dimension of extent 1 is left alone.

``columns="map"`` nodes take their strides from outside at expansion already (``mapped_columns``).
"""

from __future__ import annotations

import dace
from dace import subsets, symbolic


def _dims(node, state: dace.SDFGState, c: str, outer: dace.data.Data, inner: dace.data.Array) -> dict | None:
    """``{body dimension: outer dimension}`` for the body array's dimensions of extent other than 1 (those
    of extent 1 have no stride that matters); None if they cannot be matched."""
    if len(inner.shape) == len(outer.shape):
        return {j: j for j in range(len(outer.shape))}
    if node.columns == "cells":
        sub = subsets.Range.from_string(node.cell_subsets[c])
    else:
        sub = node.operand(state, c).edge.data.subset
    if len(sub) != len(outer.shape):
        return None
    kept = [i for i, n in enumerate(sub.size()) if symbolic.inequal_symbols(n, 1)]
    wide = [j for j, n in enumerate(inner.shape) if symbolic.inequal_symbols(n, 1)]
    return dict(zip(wide, kept, strict=True)) if len(kept) == len(wide) else None


def _sanitized(c: str) -> str:
    return "".join(ch if ch.isalnum() or ch == "_" else "_" for ch in c)


def sync_body_strides(node, state: dace.SDFGState) -> list[str]:
    """Make ``node``'s body strides those of the containers outside (see the module); return the connectors
    changed. Raises the node's ``ValueError`` naming a connector whose body array cannot be matched to its
    container (another rank than the container or than its per-cell subset's free dimensions)."""
    if node.columns not in ("single", "cells") or node.body is None:
        return []
    mapping = node.symbol_mapping
    changed = []
    for c in list(node.in_connectors) + list(node.out_connectors):
        if not node.has_edge(state, c):
            continue
        outer = node.operand(state, c).desc
        inner = node.body.arrays.get(c)
        if not isinstance(inner, dace.data.Array) or not isinstance(outer, dace.data.Array):
            continue
        dims = _dims(node, state, c, outer, inner)
        if dims is None:
            raise node.error(f"connector '{c}': the body array has shape {tuple(inner.shape)}, which matches "
                             f"neither its container's rank ({tuple(outer.shape)}) nor the dimensions its "
                             "per-cell subset leaves free; cannot take the container's strides")
        strides = list(inner.strides)
        touched = False
        for j, i in dims.items():
            if not symbolic.inequal_symbols(inner.shape[j], 1):
                continue
            want = symbolic.pystr_to_symbolic(str(outer.strides[i]))
            have = symbolic.pystr_to_symbolic(str(strides[j]))
            now = have.subs({symbolic.pystr_to_symbolic(k): symbolic.pystr_to_symbolic(str(v))
                             for k, v in mapping.items() if symbolic.pystr_to_symbolic(k) in have.free_symbols})
            if not symbolic.inequal_symbols(now, want):
                continue
            name = str(have) if have.is_Symbol else None
            if name is None or name not in mapping or _shared(node, name, c):
                name = f"__sdfg_scan_stride_{_sanitized(c)}_{j}"
                if name not in node.body.symbols:
                    node.body.add_symbol(name, dace.int64)
                strides[j] = dace.symbol(name, dace.int64)
                touched = True
            mapping[name] = want
            changed.append(c)
        if touched:
            inner.strides = tuple(strides)
    return sorted(set(changed))


def _shared(node, name: str, connector: str) -> bool:
    """Whether symbol ``name`` also appears in another body array's shape or strides (then it cannot take
    one connector's new value)."""
    for k, d in node.body.arrays.items():
        if k == connector:
            continue
        if name in {str(s) for s in getattr(d, "free_symbols", set())}:
            return True
    return False


__all__ = ["sync_body_strides"]
