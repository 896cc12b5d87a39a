"""Rewriting machinery of the levels-outside schedule (``levels_outside.py``; ``ScanLoopInterchange`` and
``Scan``'s ``levels_outside`` expansion): the
level-loop variable ``LEVEL`` and the plan record ``_Plan`` its legality check (``_plan``) fills, the
partition helpers (``_parts``, ``_accessed``) both sides use, and the rewrite (``_interchange``) that
``apply`` performs: the column SDFG cut into init / one-level / exit parts (``_part_sdfg``), each called
inside a copy of the map scope (``_copy_scope``, ``_prune``), the level loop around the middle one.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import dace
from dace import dtypes, symbolic
from dace.properties import CodeBlock
from dace.sdfg import SDFG, SDFGState, nodes
from dace.sdfg.state import LoopRegion

from sdfg_scan.scan_flow import exposed_reads
from sdfg_scan.scan_structure import ScanStructure

LEVEL = "_scan_level"
"""Loop variable of the level loop that the transformation puts around the maps."""


@dataclass
class _Plan:
    me: nodes.MapEntry
    mx: nodes.MapExit
    scope: list                      # nodes strictly inside the map scope (the scan included)
    scan: ScanStructure
    first: object                    # first level, in the caller's symbols
    cond: str                        # loop condition on LEVEL, in the caller's symbols
    step: int
    hoisted: list[str]               # column-SDFG transients that live across partitions


# -- partitions ----------------------------------------------------------------------------------

def _parts(s: ScanStructure) -> dict[str, list]:
    return {"init": list(s.entry_states) + list(s.prologue), "level": list(s.body_blocks),
            "exit": list(s.exit_states)}


def _blocks_states(blocks) -> list[SDFGState]:
    out = []
    for b in blocks:
        out += [b] if isinstance(b, SDFGState) else [x for x in b.all_control_flow_blocks() if isinstance(x, SDFGState)]
    return out


def _accessed(col: SDFG, blocks) -> set[str]:
    names = set()
    for st in _blocks_states(blocks):
        names |= {n.data for n in st.data_nodes()}
    for b in blocks:
        if not isinstance(b, SDFGState):
            names |= set(b.used_symbols(all_symbols=True)) & set(col.arrays)
    return names


# -- rewriting -----------------------------------------------------------------------------------

def _part_sdfg(col: SDFG, s: ScanStructure, part: str, hoisted: list[str], conns: set[str]):
    """A copy of the column SDFG cut to one part; returns (sdfg, inputs, outputs) or None if empty."""
    blocks = _parts(s)[part]
    if not blocks:
        return None
    new = copy.deepcopy(col)
    order = list(s.entry_states) + list(s.prologue) + [s.loop] + list(s.exit_states)
    copies = dict(zip([id(b) for b in order], [_find_block(new, b, col) for b in order], strict=True))
    keep = [copies[id(b)] for b in ([s.loop] if part == "level" else blocks)]
    for b in list(new.nodes()):
        if b not in keep:
            new.remove_node(b)
    new.start_block = new.node_id(keep[0])
    if part == "level":
        loop: LoopRegion = copies[id(s.loop)]
        loop.init_statement = CodeBlock(f"{loop.loop_variable} = {LEVEL}")
        cmp = f"< {LEVEL} + 1" if s.direction == "forward" else f">= {LEVEL}"   # one trip: k = LEVEL
        loop.loop_condition = CodeBlock(f"{loop.loop_variable} {cmp}")
        if LEVEL not in new.symbols:
            new.add_symbol(LEVEL, col.symbols.get(loop.loop_variable, dace.int32))
    elif s.loop.loop_variable in new.symbols:
        # the DaCe frontend declares the loop variable as a symbol of the column SDFG; without the loop
        # nothing defines it, and a declared symbol the nested SDFG's mapping lacks does not validate
        new.remove_symbol(s.loop.loop_variable)
    used = _accessed(new, list(new.nodes()))
    reads, writes = set(), set()
    for st in new.all_states():
        for n in st.data_nodes():
            if st.out_degree(n) > 0:
                reads.add(n.data)
            if st.in_degree(n) > 0:
                writes.add(n.data)
    for b in new.all_control_flow_blocks():
        if not isinstance(b, SDFGState):
            reads |= set(b.used_symbols(all_symbols=True)) & set(new.arrays)
    args = set(conns) | set(hoisted)
    for name in list(new.arrays):
        if name not in used:
            new.remove_data(name, validate=False)
        elif name in hoisted:
            new.arrays[name].transient = False
    if part == "level":
        # a hoisted temporary the level writes that is no carry is written before it is read on every
        # level (else the analysis would call it a carry): it is an output of the level, not an input
        # (reading it in would read the per-cell array before anything wrote it)
        reads -= {h for h in hoisted if h in writes and h not in s.carries}
    if part == "init":
        # entry states and peeled levels write values (carry inits, temporaries) before others read them
        reads -= {h for h in hoisted if h not in exposed_reads(blocks)}
    ins = sorted(reads & args & used)
    outs = sorted(writes & args & used)
    return new, ins, outs


def _find_block(new: SDFG, block, col: SDFG):
    """The block of the deep copy ``new`` at the same position as ``block`` of ``col``."""
    return new.nodes()[col.node_id(block)]


def _copy_scope(state: SDFGState, plan: _Plan, nsdfg: nodes.NestedSDFG, dst: SDFGState, part_node, hoisted_names):
    me, mx = plan.me, plan.mx
    cmap = {}
    for n in [me, mx] + plan.scope:
        cmap[n] = part_node if n is nsdfg else copy.deepcopy(n)
        dst.add_node(cmap[n])
    cmap[mx].map = cmap[me].map
    for e in state.scope_subgraph(me).edges():
        if e.dst is nsdfg and e.dst_conn not in part_node.in_connectors:
            continue
        if e.src is nsdfg and e.src_conn not in part_node.out_connectors:
            continue
        dst.add_edge(cmap[e.src], e.src_conn, cmap[e.dst], e.dst_conn, copy.deepcopy(e.data))
    for e in state.in_edges(me):
        dst.add_edge(dst.add_access(e.src.data), e.src_conn, cmap[me], e.dst_conn, copy.deepcopy(e.data))
    for e in state.out_edges(mx):
        dst.add_edge(cmap[mx], e.src_conn, dst.add_access(e.dst.data), e.dst_conn, copy.deepcopy(e.data))
    nme, nmx = cmap[me], cmap[mx]
    for conn in part_node.in_connectors:   # an output the part reads back (written at an earlier level)
        if conn in hoisted_names or any(e.dst_conn == conn for e in dst.in_edges(part_node)):
            continue
        inner = next(e for e in state.out_edges(nsdfg) if e.src_conn == conn)
        data = state.memlet_path(inner)[-1].data.data
        dst.add_memlet_path(dst.add_read(data), nme, part_node, dst_conn=conn, memlet=copy.deepcopy(inner.data))
    if dst.in_degree(part_node) == 0:   # a part without inputs (constant inits) still lives in the map scope
        dst.add_nedge(nme, part_node, dace.Memlet())
    idx = ", ".join(f"{p} - ({symbolic.symstr(b)})" for p, (b, _, _) in zip(me.map.params, me.map.range, strict=True))
    _drop_dangling(dst, nmx)   # map outputs this part does not write (else the exit is a source node: no scope)
    for inner, outer_name in hoisted_names.items():
        desc = part_node.sdfg.arrays.get(inner)
        if desc is None:
            continue
        extra = "".join(f", 0:{symbolic.symstr(d)}" for d in desc.shape) if isinstance(desc, dace.data.Array) else ""
        subset = f"{outer_name}[{idx}{extra}]"
        if inner in part_node.in_connectors:
            dst.add_memlet_path(dst.add_read(outer_name), nme, part_node, dst_conn=inner, memlet=dace.Memlet(subset))
        if inner in part_node.out_connectors:
            dst.add_memlet_path(part_node, nmx, dst.add_write(outer_name), src_conn=inner, memlet=dace.Memlet(subset))
    _prune(dst, nme, nmx, part_node)


def _prune(st: SDFGState, me: nodes.MapEntry, mx: nodes.MapExit, keep: nodes.Node) -> None:
    """Remove what the copied scope no longer needs (dangling tasklets, access nodes, connectors)."""
    changed = True
    while changed:
        changed = False
        for n in list(st.nodes()):
            if n in (me, mx, keep):
                continue
            if st.entry_node(n) is me and st.out_degree(n) == 0:
                st.remove_node(n)
                changed = True
        changed |= _drop_dangling(st, me) | _drop_dangling(st, mx)
        for n in list(st.nodes()):
            if isinstance(n, nodes.AccessNode) and st.entry_node(n) is None and st.degree(n) == 0:
                st.remove_node(n)
                changed = True
    if st.out_degree(me) == 0:
        st.add_nedge(me, keep, dace.Memlet())
    if st.in_degree(mx) == 0:
        st.add_nedge(keep, mx, dace.Memlet())


def _drop_dangling(st: SDFGState, node) -> bool:
    """Remove the connector pairs of a map entry/exit whose scope-side connector lost its edges."""
    entry = isinstance(node, nodes.MapEntry)
    changed = False
    for conn in list(node.out_connectors if entry else node.in_connectors):
        inside = st.out_edges_by_connector(node, conn) if entry else st.in_edges_by_connector(node, conn)
        if list(inside):
            continue
        other = ("IN_" + conn[4:]) if entry else ("OUT_" + conn[3:])
        outside = st.in_edges_by_connector(node, other) if entry else st.out_edges_by_connector(node, other)
        for e in list(outside):
            st.remove_edge(e)
        node.remove_in_connector(other if entry else conn)
        node.remove_out_connector(conn if entry else other)
        changed = True
    return changed


def _interchange(state: SDFGState, nsdfg: nodes.NestedSDFG, plan: _Plan) -> nodes.NestedSDFG:
    sdfg = state.sdfg
    col, s = nsdfg.sdfg, plan.scan
    me, mx = plan.me, plan.mx
    outer = SDFG(f"{nsdfg.label}_levels_outside")
    outer.using_explicit_control_flow = True
    reads = {e.data.data: e for e in state.in_edges(me) if e.data.data is not None}
    writes = {e.data.data: e for e in state.out_edges(mx) if e.data.data is not None}
    for name in set(reads) | set(writes):
        desc = copy.deepcopy(sdfg.arrays[name])
        desc.transient = False
        outer.add_datadesc(name, desc)
    inner_local = {n.data for n in plan.scope if isinstance(n, nodes.AccessNode)}
    for name in inner_local:
        outer.add_datadesc(name, copy.deepcopy(sdfg.arrays[name]))
    sizes = [symbolic.pystr_to_symbolic(f"({e}) - ({b}) + 1") for b, e, _ in me.map.range]
    subs = {symbolic.pystr_to_symbolic(k): symbolic.pystr_to_symbolic(str(v)) for k, v in nsdfg.symbol_mapping.items()}
    hoisted_names = {}
    for h in plan.hoisted:
        desc = col.arrays[h]
        extra = [symbolic.pystr_to_symbolic(str(d)).subs(subs) for d in desc.shape] \
            if isinstance(desc, dace.data.Array) else []
        name, _ = outer.add_array(f"_carry_{h}", sizes + extra, desc.dtype, transient=True, find_new_name=True,
                                  storage=dtypes.StorageType.CPU_Heap)
        hoisted_names[h] = name

    conns = set(nsdfg.in_connectors) | set(nsdfg.out_connectors)
    prev = None
    for part in ("init", "level", "exit"):
        made = _part_sdfg(col, s, part, plan.hoisted, conns)
        if made is None:
            continue
        psdfg, ins, outs = made
        mapping = dict(nsdfg.symbol_mapping)
        if part == "level":
            mapping[LEVEL] = symbolic.pystr_to_symbolic(LEVEL)
        for sym in list(mapping):
            if sym not in psdfg.symbols and sym not in psdfg.free_symbols:
                mapping.pop(sym)
        node = nodes.NestedSDFG(f"{nsdfg.label}_{part}", psdfg, list(ins), list(outs), symbol_mapping=mapping)
        if part == "level":
            loop = LoopRegion(f"{nsdfg.label}_levels", condition_expr=plan.cond, loop_var=LEVEL,
                              initialize_expr=f"{LEVEL} = {symbolic.symstr(plan.first)}",
                              update_expr=f"{LEVEL} = {LEVEL} {'+' if plan.step > 0 else '-'} 1")
            outer.add_node(loop, is_start_block=prev is None)
            st = loop.add_state(f"{nsdfg.label}_level", is_start_block=True)
            block = loop
        else:
            st = outer.add_state(f"{nsdfg.label}_{part}", is_start_block=prev is None)
            block = st
        if prev is not None:
            outer.add_edge(prev, block, dace.InterstateEdge())
        prev = block
        _copy_scope(state, plan, nsdfg, st, node, hoisted_names)
        psdfg.parent, psdfg.parent_sdfg, psdfg.parent_nsdfg_node = st, outer, node

    # replace the map scope by the new nested SDFG
    for n in [me, mx] + plan.scope:
        state.remove_node(n)
    for sym, dt in {**sdfg.symbols, **state.defined_symbols()}.items():
        if sym in outer.free_symbols and sym not in outer.symbols:
            outer.add_symbol(sym, dt)
    new = state.add_nested_sdfg(outer, sorted(reads), sorted(writes),
                                symbol_mapping={sym: symbolic.pystr_to_symbolic(sym) for sym in outer.free_symbols})
    for name, e in reads.items():
        src = e.src if e.src in state.nodes() else state.add_read(name)
        state.add_edge(src, None, new, name, dace.Memlet.from_array(name, sdfg.arrays[name]))
    for name, e in writes.items():
        dst = e.dst if e.dst in state.nodes() else state.add_write(name)
        state.add_edge(new, name, dst, None, dace.Memlet.from_array(name, sdfg.arrays[name]))
    for name in inner_local:
        if not any(n.data == name for st in sdfg.all_states() for n in st.data_nodes()):
            sdfg.remove_data(name, validate=False)
    sdfg.reset_cfg_list()
    return new
