"""Builders of the general ``Scan``'s schedules: the body as it is, or inside a map over the columns.

A ``Scan`` node holds its body, a column SDFG (entry states, one ``LoopRegion`` over the levels,
exit states). Three ``columns`` modes say how the node's operands relate to the body:

- ``single``: the node is one column inside the caller's map (a gt4py scan lifted by ``LiftScans``);
  :func:`nested_column` puts the body back as a nested SDFG, same connectors, same symbol mapping.
- ``map``: N-d operands, every non-axis index is a column, per-level body arrays of shape ``(_nk,)``
  with stride ``_st_<connector>`` (frontend scans); :func:`mapped_columns` builds the map.
- ``cells``: the node owns gt4py's map over cells (``LiftCellMap``): it keeps the map's parameters
  and ranges and, per connector, the subset the body reads or writes for one cell (in the map's
  parameters); :func:`cell_map` rebuilds exactly that map around the body.

Each builder returns the expansion SDFG with the map (``map``/``cells``) or the nested SDFG; the
levels-outside schedule (``levels_outside.py``) rewrites the map that ``map``/``cells`` produce.
"""

from __future__ import annotations

import copy

import dace
from dace import subsets, symbolic

from sdfg_scan.expansions.column_loop import window_sdfg
from sdfg_scan.expansions.dead_outputs import drop_unread_outputs
from sdfg_scan.expansions.scan_body import LEVELS, stride_symbol

GPU_BLOCK = 128
"""Threads per GPU block of the thread-per-column schedules (used when the map becomes a kernel)."""


def body_copy(node) -> dace.SDFG:
    """A copy of the body without the outputs whose connector DaCe removed as dead: write-only ones are
    dropped (:func:`drop_unread_outputs`), ones the body also reads become transients."""
    body = copy.deepcopy(node.body)
    conns = set(node.in_connectors) | set(node.out_connectors)
    for name in drop_unread_outputs(body, {n for n, d in body.arrays.items() if not d.transient} - conns):
        if stride_symbol(name) in body.symbols:
            body.remove_symbol(stride_symbol(name))
    for name, desc in body.arrays.items():
        if not desc.transient and name not in conns:
            desc.transient = True
            if isinstance(desc, dace.data.Array):
                desc.strides = [1] * len(desc.shape)
                desc.total_size = desc.shape[0] if len(desc.shape) == 1 else desc.total_size
            if stride_symbol(name) in body.symbols:
                body.remove_symbol(stride_symbol(name))
    _scalar_subsets_at_zero(body)
    return body


def _scalar_subsets_at_zero(body: dace.SDFG) -> None:
    """Index every access to a scalar container of ``body`` (and its nested SDFGs) at 0.

    The DaCe frontend squeezes the column of a constant single-level field to a scalar connector
    that the loop still reads as ``x[k]``. DaCe gives such a copy a node of its own before it expands
    library nodes (``InsertExplicitCopies``), so the original compiles; in an expansion the copy stays
    implicit and the code generator refuses to offset a scalar. 0 is its only element, and the value
    of ``k`` whenever the program is in bounds: the same accesses.
    """
    for sdfg in body.all_sdfgs_recursive():
        scalars = {name for name, desc in sdfg.arrays.items() if isinstance(desc, dace.data.Scalar)}
        for st in sdfg.all_states():
            for e in st.edges():
                mem = e.data
                if mem.is_empty():
                    continue
                if mem.data in scalars and _off_zero(mem.subset):
                    mem.subset = subsets.Range([(0, 0, 1)])
                other = e.dst if isinstance(e.src, dace.nodes.AccessNode) and e.src.data == mem.data else e.src
                if isinstance(other, dace.nodes.AccessNode) and other.data in scalars and _off_zero(mem.other_subset):
                    mem.other_subset = subsets.Range([(0, 0, 1)])


def _off_zero(subset) -> bool:
    return subset is not None and subset.min_element() != [0]


def nested_column(node) -> dace.nodes.NestedSDFG:
    """``columns="single"``: the body as a nested SDFG in the node's place (bitwise the original)."""
    return dace.nodes.NestedSDFG(node.label, body_copy(node), {c: None for c in node.in_connectors},
                                 {c: None for c in node.out_connectors}, symbol_mapping=dict(node.symbol_mapping))


def per_level(node) -> list[str]:
    """``columns="map"``: the connectors with the scan axis (the body's non-scalar arrays)."""
    return [c for c in list(node.in_connectors) + list(node.out_connectors)
            if not isinstance(node.body.arrays[c], dace.data.Scalar)]


def mapped_symbols(node, body: dace.SDFG, nk, strides: dict, symbols: dict) -> dict:
    """``columns="map"``: the symbol mapping of the ``body`` of one column: the node's own, the level count
    ``nk`` (``_nk``), each per-level connector's scan-axis stride (``strides``: connector -> stride) and the
    enclosing ``symbols`` (name -> dtype) the body reads under their own names."""
    mapping = dict(node.symbol_mapping)
    mapping[LEVELS] = nk
    for c, stride in strides.items():
        mapping[stride_symbol(c)] = stride
    for s in body.free_symbols:
        if s not in mapping and s in symbols:
            mapping[s] = dace.symbol(s, symbols[s])
    return mapping


def mapped_columns(node, state: dace.SDFGState, name: str) -> dace.SDFG:
    """``columns="map"``: map over every non-axis index -> nested column SDFG (the body)."""
    conns = list(node.in_connectors) + list(node.out_connectors)
    ops = {c: node.operand(state, c) for c in conns}
    levels = per_level(node)
    ref = ops[levels[0]]
    axis = node.resolved_axis(len(ref.shape))
    shape = ref.shape
    nk = node.levels(state)
    outer, _ = window_sdfg(node, state, conns, name,
                           keep_symbols=tuple(symbolic.pystr_to_symbolic(str(nk)).free_symbols))
    col_dims = [d for d in range(len(shape)) if d != axis]
    params = {d: f"_i{d}" for d in col_dims}
    st = outer.add_state("columns", is_start_block=True)
    ranges = {params[d]: f"0:{symbolic.symstr(shape[d])}" for d in col_dims} or {"_i": "0:1"}
    me, mx = st.add_map(f"{node.label}_columns", ranges)
    me.map.gpu_block_size = [GPU_BLOCK, 1, 1]
    body = body_copy(node)
    mapping = mapped_symbols(node, body, nk, {c: outer.arrays[c].strides[axis] for c in levels}, outer.symbols)
    nsdfg = st.add_nested_sdfg(body, {c: None for c in node.in_connectors}, {c: None for c in node.out_connectors},
                               symbol_mapping=mapping)

    def index(c):
        desc = outer.arrays[c]
        if c in levels:
            n = desc.shape[axis]
            return ", ".join(f"0:{symbolic.symstr(n)}" if d == axis else params[d] for d in range(len(shape)))
        if len(desc.shape) == len(col_dims) and col_dims:
            return ", ".join(params[d] for d in col_dims)
        return "0"

    if not node.in_connectors:   # before the outputs' paths: propagating them needs the body in the map scope
        st.add_edge(me, None, nsdfg, None, dace.Memlet())
    for c in node.in_connectors:
        st.add_memlet_path(st.add_read(c), me, nsdfg, dst_conn=c, memlet=dace.Memlet(f"{c}[{index(c)}]"))
    for c in node.out_connectors:
        st.add_memlet_path(nsdfg, mx, st.add_write(c), src_conn=c, memlet=dace.Memlet(f"{c}[{index(c)}]"))
    return outer


def cell_symbols(node) -> set[str]:
    """``columns="cells"``: the outer symbols the map's ranges, the per-cell subsets and the body's
    symbol mapping use (the map parameters excluded)."""
    syms: set[str] = set()
    for text in list(node.cell_ranges) + list(node.cell_subsets.values()):
        syms |= {str(s) for s in subsets.Range.from_string(str(text)).free_symbols}
    for v in node.symbol_mapping.values():
        syms |= {str(s) for s in symbolic.pystr_to_symbolic(str(v)).free_symbols}
    return syms - set(node.cell_params)


def cell_map(node, state: dace.SDFGState, name: str) -> dace.SDFG:
    """``columns="cells"``: the node's map over cells around the body, with the recorded per-cell
    memlets (shifted to the windows the node's edges select): the gt4py scope it was lifted from."""
    conns = [c for c in list(node.in_connectors) + list(node.out_connectors) if node.has_edge(state, c)]
    outer, _ = window_sdfg(node, state, conns, name, keep_symbols=tuple(cell_symbols(node)))
    st = outer.add_state("cells", is_start_block=True)
    me, mx = st.add_map(f"{node.label}_cells", dict(zip(node.cell_params, node.cell_ranges, strict=True)))
    me.map.gpu_block_size = [GPU_BLOCK, 1, 1]
    body = body_copy(node)
    mapping = dict(node.symbol_mapping)
    ins = [c for c in node.in_connectors if c in conns]
    outs = [c for c in node.out_connectors if c in conns]
    nsdfg = st.add_nested_sdfg(body, {c: None for c in node.in_connectors}, {c: None for c in node.out_connectors},
                               symbol_mapping=mapping)

    def memlet(c: str) -> dace.Memlet:
        sub = subsets.Range.from_string(node.cell_subsets[c])
        sub.offset(list(node.operand(state, c).offset), negative=True)
        if isinstance(outer.arrays[c], dace.data.Array) and len(sub) != len(outer.arrays[c].shape):
            sub = subsets.Range([(0, 0, 1)] * len(outer.arrays[c].shape))   # a scalar container seen as [1]
        return dace.Memlet(data=c, subset=sub)

    if not ins:   # before the outputs' paths: propagating them needs the body in the map scope
        st.add_edge(me, None, nsdfg, None, dace.Memlet())
    for c in ins:
        st.add_memlet_path(st.add_read(c), me, nsdfg, dst_conn=c, memlet=memlet(c))
    for c in outs:
        st.add_memlet_path(nsdfg, mx, st.add_write(c), src_conn=c, memlet=memlet(c))
    return outer


__all__ = ["body_copy", "cell_map", "cell_symbols", "mapped_columns", "mapped_symbols", "nested_column", "per_level"]
