"""The pointwise map that computes a sweep node's coefficients, found and taken into its blocks.

gt4py computes the coefficients of icon4py's tridiagonal system in a map over (level, cell) before
the scan (the dycore forward sweep: ``a, b, c, d`` from six fields, read at ``k-1, k, k+1``), and
writes them to four ``[cells, levels]`` transients that only the solve reads. Left alone, the CPU
``blocked`` sweeps read them back: the four arrays are written and read once more from memory.

:func:`find_producer` recognises that map; :func:`build_blocked_with_producer` (the ``thomas``
expansion on the CPU with cells contiguous) then runs the map's body inside each block's forward
loop, for the block's cells at the level the sweep is at, and the sweep's step right after it in the
same loop over cells, on scalars: the coefficients never reach memory, and the body's loads overlap
the step's arithmetic (one loop per level, not two: 1.3x on the dycore pair). Each (cell, level) is
computed once, by the map's own code, so the values are those of the original program (bitwise,
under the same flags)::

    before:  for k, i: a[i,k], b[i,k], c[i,k], d[i,k] = f(inputs at i, k-1..k+1)   # map, to memory
             x = thomas(a, b, c, d)                                                 # the node
    after:   for each block of cells (parallel):
                 for k in levels:  for i in block: a, b, c, d = f(...)              # the map body
                                                   forward step of Thomas at (i, k)  # same loop, vectorised
                 for k in levels, backward:  for i in block: back substitution

The body is copied node for node; its data copies (access node or map entry to access node) become
explicit one-element copy tasklets, and coefficients a sweep does not read (``a`` on level 0) still feed
its tasklet: otherwise passes that run after the expansion (gt4py's pipeline) move them out of the
loops.

Legality (every check before anything changes; :func:`find_producer` returns None otherwise, and the
node expands as before):

- the node's operands are 2-d (cells, levels); the coefficient is a transient ``Array`` (not a view)
  read by the node as a whole and accessed nowhere else in the SDFG;
- it is written by one map with exactly two parameters (one per operand axis), without dynamic map
  inputs, whose every output is such a coefficient of this node, each written by a tasklet once per
  iteration at ``[cell - c0, level - l0]`` where ``c0`` and ``l0`` are the parameters' first values
  and the ranges cover the whole operand;
- the map reads only access nodes (no ordering edges into it), none of which holds an output of the
  node or data that another node of the state writes; no sweep reads a coefficient at a level offset.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import dace
import sympy
from dace import dtypes, nodes, subsets, symbolic
from dace.sdfg.state import LoopRegion

from sdfg_scan.expansions.thomas import CELL, NB, NK, ColumnNode, K, SweepKernel, block_map

C0 = "_c0"
"""First value of the producer's cell parameter in a block (a symbol of the block's SDFG)."""
RESERVED = {CELL, K, NB, NK, C0}
PREFIX = "_tri_"
"""Names of the block SDFG's own arrays (the kernel's operands, its scratch, the level coefficients)."""


@dataclass
class Producer:
    """A map that computes some of a sweep node's inputs (module docstring), as found in the state."""

    entry: nodes.MapEntry
    exit: nodes.MapExit
    cell_param: str
    level_param: str
    cell_start: sympy.Basic
    level_start: sympy.Basic
    coefficients: dict[str, nodes.AccessNode]   # connector -> the transient between the map and the node
    inputs: dict[str, nodes.AccessNode]         # array name -> an access node the map reads it from


def _drop_max0(e):
    """``Max(0, n)`` -> ``n``: gt4py sizes transients ``Max(0, end - start)``; a map over ``start:end``
    covers exactly that many points whenever it runs at all."""
    e = symbolic.pystr_to_symbolic(str(e)) if not isinstance(e, sympy.Basic) else e
    return e.replace(lambda x: isinstance(x, sympy.Max) and sympy.S.Zero in x.args,
                     lambda x: sympy.Max(*[a for a in x.args if a != 0]))


def _equal(a, b) -> bool:
    return sympy.simplify(_drop_max0(a) - _drop_max0(b)) == 0


def _single_param_offset(expr, params: list[str]) -> tuple[str, sympy.Basic] | None:
    """``expr`` as ``p - off`` for one map parameter ``p`` (coefficient 1) and ``off`` free of parameters."""
    expr = symbolic.pystr_to_symbolic(str(expr))
    used = [p for p in params if symbolic.symbol(p) in expr.free_symbols]
    if len(used) != 1:
        return None
    p = symbolic.symbol(used[0])
    off = sympy.expand(p - expr)
    if any(symbolic.symbol(q) in off.free_symbols for q in params):
        return None
    return used[0], off


def _whole(subset, desc) -> bool:
    """``subset`` is all of ``desc`` (sizes compared as :func:`_equal` does)."""
    return len(subset) == len(desc.shape) and all(
        s == 1 and _equal(b, 0) and _equal(e - b + 1, n) for (b, e, s), n in zip(subset.ndrange(), desc.shape, strict=True))


def _accessed_elsewhere(sdfg: dace.SDFG, name: str, allowed: set) -> bool:
    for n, _ in sdfg.all_nodes_recursive():
        if isinstance(n, nodes.AccessNode) and n.data == name and n not in allowed:
            return True
    return any(name in e.data.free_symbols for e in sdfg.all_interstate_edges())


def _coefficient(node: ColumnNode, state: dace.SDFGState, conn: str, ops: dict):
    """The (map exit, access node) feeding connector ``conn`` as a whole transient, else None."""
    e = ops[conn].edge
    src = e.src
    if not isinstance(src, nodes.AccessNode) or state.in_degree(src) != 1 or state.out_degree(src) != 1:
        return None
    desc = state.sdfg.arrays[src.data]
    if not desc.transient or type(desc) is not dace.data.Array:
        return None
    if e.data.subset is None or not _whole(e.data.subset, desc):
        return None
    (w,) = state.in_edges(src)
    if not isinstance(w.src, nodes.MapExit):
        return None
    if _accessed_elsewhere(state.sdfg, src.data, {src}):
        return None
    return w.src, src


def _cover(state, entry, mx, coefficients, axis: int):
    """The cell and level parameters, with their first values, if every write is ``[p - first]`` over the
    whole operand; else None."""
    params = list(entry.map.params)
    if len(params) != 2:
        return None
    found: set[tuple] = set()
    for acc in coefficients.values():
        desc = state.sdfg.arrays[acc.data]
        if len(desc.shape) != 2:
            return None
        inner = [e for e in state.in_edges(mx) if e.dst_conn == "IN_" + next(
            oe.src_conn[4:] for oe in state.out_edges(mx) if oe.dst is acc)]
        if len(inner) != 1 or inner[0].data.wcr is not None or inner[0].data.data != acc.data:
            return None
        if not isinstance(inner[0].src, nodes.CodeNode):   # the value comes out of a tasklet (or nested SDFG)
            return None
        sub = inner[0].data.subset
        if sub.num_elements() != 1:
            return None
        per_dim = []
        for d in range(2):
            found_d = _single_param_offset(sub[d][0], params)
            if found_d is None:
                return None
            per_dim.append(found_d)
        if per_dim[0][0] == per_dim[1][0]:
            return None
        for d, (p, off) in enumerate(per_dim):
            b, e, s = entry.map.range[params.index(p)]
            if s != 1 or not _equal(b, off) or not _equal(e - b + 1, desc.shape[d]):
                return None
        level, cell = per_dim[axis], per_dim[1 - axis]
        found.add((cell[0], level[0], str(cell[1]), str(level[1])))
    if len(found) != 1:
        return None
    cell_p, level_p, c0, l0 = found.pop()
    return cell_p, level_p, symbolic.pystr_to_symbolic(c0), symbolic.pystr_to_symbolic(l0)


def _inputs(state, entry, node, ops) -> dict[str, nodes.AccessNode] | None:
    """The arrays the map reads (through access nodes), if none is written by the node or in the state."""
    outs = {ops[c].edge.data.data for c in node.out_connectors if c in ops}
    found: dict[str, nodes.AccessNode] = {}
    for e in state.in_edges(entry):
        if e.data.data is None:   # an ordering edge into the map: refuse rather than guess what it orders
            return None
        if not (e.dst_conn or "").startswith("IN_") or not isinstance(e.src, nodes.AccessNode):
            return None
        name = e.src.data
        desc = state.sdfg.arrays[name]
        if isinstance(desc, dace.data.View) or name in outs or _written_here(state, name, e.src):
            return None
        found.setdefault(name, e.src)
    return found


def _written_here(state, name: str, reader: nodes.AccessNode) -> bool:
    """Another access node of ``name`` in this state is written (a hazard once the reads move)."""
    return any(n is not reader and n.data == name and state.in_degree(n) > 0 for n in state.data_nodes())


def _scope_is_plain(state, entry) -> bool:
    names = set()
    for n in state.scope_subgraph(entry, include_entry=False, include_exit=False).nodes():
        if isinstance(n, (nodes.EntryNode, nodes.ExitNode, nodes.LibraryNode)):
            return False
        if isinstance(n, nodes.AccessNode):
            names.add(n.data)
    for e in state.scope_subgraph(entry, include_entry=True, include_exit=False).edges():
        if isinstance(e.dst, nodes.AccessNode) and isinstance(e.src, (nodes.AccessNode, nodes.EntryNode)):
            subs = (e.data.get_src_subset(e, state), e.data.get_dst_subset(e, state))
            if any(x is None or x.num_elements() != 1 for x in subs):   # copies become one-element tasklets
                return False
    return not any(n.startswith(PREFIX) or n in RESERVED for n in names)


def find_producer(node: ColumnNode, state: dace.SDFGState, kernel: SweepKernel, axis: int) -> Producer | None:
    """The map computing some of ``kernel``'s inputs of ``node`` (module docstring), or None."""
    ops = {c: node.operand(state, c) for c in kernel.inputs + kernel.outputs}
    if any(len(op.shape) != 2 for op in ops.values()):
        return None
    coefficients, exits = {}, set()
    for c in kernel.inputs:
        found = _coefficient(node, state, c, ops)
        if found is not None:
            exits.add(found[0])
            coefficients[c] = found[1]
    if len(exits) != 1:
        return None
    (mx,) = exits
    entry = state.entry_node(mx)
    if state.entry_node(entry) is not None or entry.map.schedule not in (
            dtypes.ScheduleType.Default, dtypes.ScheduleType.CPU_Multicore, dtypes.ScheduleType.Sequential):
        return None
    mine = set(coefficients.values())
    if any(e.dst not in mine for e in state.out_edges(mx)) or len(state.out_edges(mx)) != len(mine):
        return None
    if any(off != 0 for loop in kernel.loops for _, arr, off in loop.reads if arr in coefficients):
        return None
    if any(p in RESERVED for p in entry.map.params) or not _scope_is_plain(state, entry):
        return None
    cover = _cover(state, entry, mx, coefficients, axis)
    inputs = _inputs(state, entry, node, ops)
    if cover is None or inputs is None or any(n.startswith(PREFIX) for n in inputs):
        return None
    cell_p, level_p, c0, l0 = cover
    return Producer(entry, mx, cell_p, level_p, c0, l0, coefficients, inputs)


# -- building -----------------------------------------------------------------------------------------

def _copy_tasklet(state: dace.SDFGState, e, dst: dace.SDFGState, src_node, dst_node) -> None:
    """A data copy inside the producer (access node or map entry -> access node) as an explicit tasklet
    ``_o = _i`` in ``dst``: the same value, and no copy edge for later passes to turn into code outside the
    block's loops (seen with gt4py's pipeline after the hooks)."""
    src_data = e.src.data if isinstance(e.src, nodes.AccessNode) else e.data.data
    # one element on each side: _scope_is_plain refused the producer otherwise
    src_sub, dst_sub = e.data.get_src_subset(e, state), e.data.get_dst_subset(e, state)
    t = dst.add_tasklet(f"{PREFIX}copy_{dst_node.data}", {"_i"}, {"_o"}, "_o = _i")
    dst.add_edge(src_node, e.src_conn, t, "_i", dace.Memlet(data=src_data, subset=copy.deepcopy(src_sub)))
    dst.add_edge(t, "_o", dst_node, None, dace.Memlet(data=dst_node.data, subset=copy.deepcopy(dst_sub)))


def _copy_scope(state: dace.SDFGState, p: Producer, dst: dace.SDFGState, block: dace.SDFG):
    """The producer's map in ``dst`` for one level (``level_start + _k``) and the block's cells, its
    inner transients declared in ``block``; each coefficient goes to a scalar ``_tri_coef_<conn>`` inside
    the scope instead of the map's exit. Returns the copied entry, exit and those scalars' access nodes."""
    scope = state.scope_subgraph(p.entry, include_entry=True, include_exit=True)
    new = {n: copy.deepcopy(n) for n in scope.nodes()}
    entry, mx = new[p.entry], new[p.exit]
    ranges = {p.level_param: (p.level_start + symbolic.symbol(K),) * 2 + (1,),
              p.cell_param: (symbolic.symbol(C0), symbolic.symbol(C0) + symbolic.symbol(NB) - 1, 1)}
    entry.map.params = [p.level_param, p.cell_param]   # the cells innermost: the loop GCC vectorises
    entry.map.range = subsets.Range([ranges[q] for q in entry.map.params])
    entry.map.schedule = dtypes.ScheduleType.Sequential
    for n in new.values():
        dst.add_node(n)
        if isinstance(n, nodes.AccessNode) and n.data not in block.arrays:
            block.add_datadesc(n.data, copy.deepcopy(state.sdfg.arrays[n.data]))
        if isinstance(n, nodes.NestedSDFG):
            n.sdfg.parent, n.sdfg.parent_sdfg, n.sdfg.parent_nsdfg_node = dst, block, n
    coef_by_conn = {oe.src_conn[4:]: next(c for c, a in p.coefficients.items() if a is oe.dst)
                    for oe in state.out_edges(p.exit)}
    scalars = {}
    for e in scope.edges():
        if e.dst is p.exit and e.dst_conn and e.dst_conn.startswith("IN_"):
            conn = coef_by_conn[e.dst_conn[3:]]
            scalars[conn] = dst.add_access(f"{PREFIX}coef_{conn}")
            dst.add_edge(new[e.src], e.src_conn, scalars[conn], None, dace.Memlet(f"{PREFIX}coef_{conn}[0]"))
            continue
        if isinstance(e.dst, nodes.AccessNode) and isinstance(e.src, (nodes.AccessNode, nodes.EntryNode)):
            _copy_tasklet(state, e, dst, new[e.src], new[e.dst])
            continue
        dst.add_edge(new[e.src], e.src_conn, new[e.dst], e.dst_conn, copy.deepcopy(e.data))
    for c in list(mx.in_connectors):
        mx.remove_in_connector(c)
    for c in list(mx.out_connectors):
        mx.remove_out_connector(c)
    for e in state.in_edges(p.entry):
        desc = block.arrays[e.data.data]
        dst.add_edge(dst.add_read(e.data.data), None, entry, e.dst_conn, dace.Memlet.from_array(e.data.data, desc))
    return entry, mx, scalars


def _add_loop(block: dace.SDFG, state: dace.SDFGState, p: Producer, spec, label: str, last):
    """One sweep of the kernel: a ``LoopRegion`` over levels whose state runs the sweep's tasklet over the
    block's cells: inside the producer's map, after its body, where the sweep reads a coefficient (one
    loop per level: the body's loads and the sweep's arithmetic overlap), else in a map of its own."""
    loop = LoopRegion(label, condition_expr=spec.cond, loop_var=K, initialize_expr=f"{K} = {spec.begin}",
                      update_expr=f"{K} = {K} + ({spec.step})")
    block.add_node(loop, is_start_block=last is None)
    if last is not None:
        block.add_edge(last, loop, dace.InterstateEdge())
    st = loop.add_state(label + "_level", is_start_block=True)
    dtype = block.arrays[f"{PREFIX}coef_{next(iter(p.coefficients))}"].dtype
    tasklet = st.add_tasklet(label, {c: None for c, _, _ in spec.reads}, {c: None for c, _ in spec.writes},
                             f"using T = {dtype.ctype};\n{spec.code}", language=dtypes.Language.CPP)
    scalars: dict[str, nodes.AccessNode] = {}
    if any(arr in p.coefficients for _, arr, _ in spec.reads):
        me, mx, scalars = _copy_scope(state, p, st, block)
        cell = f"{p.cell_param} - {C0}"
    else:
        me, mx = st.add_map(label + "_cells", {CELL: f"0:{NB}"}, schedule=dtypes.ScheduleType.Sequential)
        cell = CELL
    reads: dict[str, nodes.AccessNode] = {}
    for arr in sorted(set(scalars) - {a for _, a, _ in spec.reads}):
        # a coefficient this sweep does not use (a at level 0): still an input of the step, so that no
        # node of the map's body dangles inside the scope (later passes would hoist it out of the loops)
        tasklet.add_in_connector(f"_unused_{arr}")
        st.add_edge(scalars[arr], None, tasklet, f"_unused_{arr}", dace.Memlet(f"{PREFIX}coef_{arr}[0]"))
    for conn, arr, off in spec.reads:
        if arr in scalars:
            st.add_edge(scalars[arr], None, tasklet, conn, dace.Memlet(f"{PREFIX}coef_{arr}[0]"))
            continue
        name = PREFIX + arr
        if name not in reads:
            reads[name] = st.add_read(name)
        level = K if off == 0 else f"{K} + ({off})"
        st.add_memlet_path(reads[name], me, tasklet, dst_conn=conn, memlet=dace.Memlet(f"{name}[{cell}, {level}]"))
    for conn, arr in spec.writes:
        st.add_memlet_path(tasklet, mx, st.add_write(PREFIX + arr), src_conn=conn,
                           memlet=dace.Memlet(f"{PREFIX}{arr}[{cell}, {K}]"))
    return loop


def _argument(state: dace.SDFGState, name: str) -> dace.data.Data:
    """The descriptor of ``name`` as an argument of the expansion (and its block SDFG)."""
    desc = copy.deepcopy(state.sdfg.arrays[name])
    desc.transient = False
    return desc


def _block_sdfg(node: ColumnNode, state: dace.SDFGState, kernel: SweepKernel, p: Producer, windows: dict,
                axis: int, cell_axis: int, block: int) -> dace.SDFG:
    """The per-block SDFG: the kernel's sweeps, the producer's body inside those that read coefficients."""
    b = dace.SDFG(f"{node.label}_block")
    b.using_explicit_control_flow = True
    for s in (NK, K, NB, C0):
        b.add_symbol(s, dace.symbolic.DEFAULT_SYMBOL_TYPE)
    for name in p.inputs:
        b.add_datadesc(name, _argument(state, name))
    for conn, desc in windows.items():
        b.add_array(PREFIX + conn, [NB, NK], desc.dtype, storage=desc.storage,
                    strides=[desc.strides[cell_axis], desc.strides[axis]])
    for s in kernel.scratch:
        b.add_array(PREFIX + s, [block, NK], kernel.dtype, transient=True, strides=[1, block],
                    storage=dtypes.StorageType.CPU_Heap)
    for conn in p.coefficients:
        b.add_scalar(f"{PREFIX}coef_{conn}", kernel.dtype, transient=True, storage=dtypes.StorageType.Register)
    last = None
    for i, spec in enumerate(kernel.loops):
        last = _add_loop(b, state, p, spec, f"sweep{i}", last)
    for s in b.free_symbols - set(b.symbols):
        b.add_symbol(s, state.sdfg.symbols.get(s, dace.symbolic.DEFAULT_SYMBOL_TYPE))
    return b


def _absorb(node: ColumnNode, state: dace.SDFGState, p: Producer) -> None:
    """Rewire the parent: the node reads the producer's inputs (``_p_<name>``) instead of the
    coefficients; the map, its coefficients and the arrays nothing else uses are removed."""
    sdfg = state.sdfg
    scope = list(state.scope_subgraph(p.entry, include_entry=True, include_exit=True).nodes())
    inner = {n.data for n in scope if isinstance(n, nodes.AccessNode)}
    for conn in p.coefficients:
        for e in list(state.in_edges(node)):
            if e.dst_conn == conn:
                state.remove_edge(e)
        node.remove_in_connector(conn)
    for name, acc in p.inputs.items():
        node.add_in_connector(f"_p_{name}")
        state.add_edge(acc, None, node, f"_p_{name}", dace.Memlet.from_array(name, sdfg.arrays[name]))
    coefs = list(p.coefficients.values())
    state.remove_nodes_from(scope + coefs)
    for name in inner | {a.data for a in coefs}:
        if sdfg.arrays[name].transient and not _accessed_elsewhere(sdfg, name, set()):
            sdfg.remove_data(name, validate=False)


def build_blocked_with_producer(node: ColumnNode, state: dace.SDFGState, kernel: SweepKernel, cell_axis: int,
                                block: int) -> dace.SDFG | None:
    """The ``blocked`` sweeps with the coefficients' producer inside (module docstring); None (nothing
    changed) where :func:`find_producer` finds none."""
    ops = {c: node.operand(state, c) for c in kernel.inputs + kernel.outputs}
    axis = node.resolved_axis(2)
    p = find_producer(node, state, kernel, axis)
    if p is None:
        return None
    shape = ops[kernel.outputs[0]].shape
    windows = {c: op for c, op in ops.items() if c not in p.coefficients}
    outer = dace.SDFG(f"{node.label}_blocked")
    outer.using_explicit_control_flow = True
    descs = {c: outer.add_array(c, op.shape, op.dtype, storage=op.desc.storage, strides=op.strides)[1]
             for c, op in windows.items()}
    for name in p.inputs:
        outer.add_datadesc(f"_p_{name}", _argument(state, name))
    inner = _block_sdfg(node, state, kernel, p, descs, axis, cell_axis, block)
    st = outer.add_state("blocks", is_start_block=True)
    me, mx, idx, extra = block_map(st, node.label, shape, axis, cell_axis, block)
    extra[C0] = p.cell_start + block * symbolic.symbol("_blk")
    ins = [n for n in p.inputs] + [PREFIX + c for c in kernel.inputs if c in windows]
    outs = [PREFIX + c for c in kernel.outputs]
    mapping = {s: symbolic.symbol(s, inner.symbols[s]) for s in inner.free_symbols if s not in extra}
    mapping.update(extra)
    nsdfg = st.add_nested_sdfg(inner, dict.fromkeys(ins), dict.fromkeys(outs), symbol_mapping=mapping)
    for name in p.inputs:
        st.add_memlet_path(st.add_read(f"_p_{name}"), me, nsdfg, dst_conn=name,
                           memlet=dace.Memlet.from_array(f"_p_{name}", outer.arrays[f"_p_{name}"]))
    for c in kernel.inputs:
        if c in windows:
            st.add_memlet_path(st.add_read(c), me, nsdfg, dst_conn=PREFIX + c, memlet=dace.Memlet(f"{c}[{idx}]"))
    for c in kernel.outputs:
        st.add_memlet_path(nsdfg, mx, st.add_write(c), src_conn=PREFIX + c, memlet=dace.Memlet(f"{c}[{idx}]"))
    for s in set(outer.free_symbols) | {str(x) for v in extra.values() for x in symbolic.pystr_to_symbolic(
            str(v)).free_symbols if str(x) != "_blk"}:
        if s not in outer.symbols:
            outer.add_symbol(s, state.sdfg.symbols.get(s, dace.symbolic.DEFAULT_SYMBOL_TYPE))
    _absorb(node, state, p)
    return outer


__all__ = ["Producer", "build_blocked_with_producer", "find_producer"]
