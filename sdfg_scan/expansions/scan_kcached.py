"""The ``kcached`` expansion of the general ``Scan``: level-offset input reads from a register ring.

A scan body that reads one input at several constant level offsets (``x[k]``, ``x[k - 1]``,
``x[k - 2]``, ...; after ``DeadCarryElimination`` a delay line is such a read) loads every element
once per offset. This expansion rewrites the body so that every element is loaded once: per cached
input ``x`` a ring of ``W`` transient scalars ``r[0] .. r[W - 1]`` holds the window of the current
level, and the offset reads become reads of the ring. Reference loop (forward, offsets ``o`` in
``[lo, hi]``, ``W = hi - lo + 1``; backward mirrors it with ``k - o``)::

    r[j] = x[first + hi - j] if inside else 0     for j = 1 .. W - 1      # before the loop
    for k in levels:
        r[0] = x[k + hi] if inside else 0                                 # the one load per level
        ... body, x[k + o] read as r[hi - o] ...
        r[W - 1], ..., r[1] = r[W - 2], ..., r[0]                         # shift
    # "inside": the index lies in the array; the body keeps its own column-end tests, so an
    # out-of-column read still yields what the original read yielded (its fill, or its branch)

Handled reads of a read-only, non-transient array ``x`` inside the level loop (all of them, or ``x``
is left alone): (a) a memlet of one element whose index is ``k + constant`` along one dimension
and loop-invariant along the others; (b) a Python tasklet connector bound to ``x`` (any window)
whose code uses it only as ``conn[k + constant, ...]`` (the frontend's ``x[i, o]`` reads,
``DeadCarryElimination``'s windows). Only copies change: the results are bitwise those of
``sequential`` (class ``exact``). The new level load is a plain memlet when an unconditional read
at the leading offset proves it inside the array, else a guarded tasklet.

:func:`ring_plan` is the analysis (a reason string when nothing applies), :func:`cache_levels` the
rewrite of a column SDFG; :class:`ExpandScanKCached` builds the ``sequential`` schedule and rewrites
the body copy in it.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

import dace
from dace import data as dt
from dace import dtypes, subsets, symbolic
from dace.properties import CodeBlock
from dace.sdfg import nodes
from dace.sdfg.state import BreakBlock, ContinueBlock, LoopRegion, ReturnBlock
from dace.transformation.transformation import ExpandTransformation

from sdfg_scan.expansions import declare
from sdfg_scan.expansions.environments import ExactArithmetic
from sdfg_scan.expansions.scan_columns import cell_map, mapped_columns, nested_column
from sdfg_scan.scan_structure import NotAScan, analyze_scan

MAX_WINDOW = 16
"""Largest ring (levels between the lowest and the highest offset, inclusive) kept in registers."""


@dataclass
class Ring:
    """One cached input: its reads and the window they span (``d = offset * step``)."""

    array: str
    dim: int                      # the level dimension of ``array``
    base: object                  # the index of level k is ``k + base`` (+ the read's constant offset)
    others: tuple                 # loop-invariant indices of the other dimensions
    memlet_reads: list = field(default_factory=list)    # (state, edge, d)
    tasklet_reads: list = field(default_factory=list)   # (state, edge, {ast index text: d})
    unconditional: set = field(default_factory=set)     # d of reads executed on every level

    @property
    def dists(self) -> set[int]:
        ds = {d for _, _, d in self.memlet_reads}
        for _, _, subs in self.tasklet_reads:
            ds |= set(subs.values())
        return ds

    @property
    def lead(self) -> int:
        return max(self.dists)

    @property
    def width(self) -> int:
        return self.lead - min(self.dists) + 1


@dataclass
class RingPlan:
    loop: LoopRegion
    step: int
    first: object
    rings: list[Ring]


def _inside(block, loop: LoopRegion) -> bool:
    g = block.parent_graph
    while g is not None and not isinstance(g, dace.SDFG):
        if g is loop:
            return True
        g = g.parent_graph
    return False


def _level_index(indices, var, invariant: set[str]):
    """``(dim, offset, others)`` of an index tuple ``k + offset`` along one dimension (``offset``
    loop-invariant, e.g. gt4py's ``- __x_K_range_0 + 1``), or None."""
    k = symbolic.pystr_to_symbolic(var)
    found, others = None, []
    for d, e in enumerate(indices):
        e = symbolic.pystr_to_symbolic(str(e))
        if k in e.free_symbols:
            off = symbolic.simplify(e - k)
            if found is not None or not {str(s) for s in off.free_symbols} <= invariant:
                return None
            found = (d, off)
            others.append(None)
        else:
            if not {str(s) for s in e.free_symbols} <= invariant:
                return None
            others.append(e)
    return None if found is None else (found[0], found[1], tuple(others))


def _subscripts(code: str, conn: str):
    """The index texts of ``conn[...]`` in ``code``, or None when ``conn`` is used otherwise."""
    tree = ast.parse(code)
    subs = [n for n in ast.walk(tree) if isinstance(n, ast.Subscript) and isinstance(n.value, ast.Name)
            and n.value.id == conn]
    names = [n for n in ast.walk(tree) if isinstance(n, ast.Name) and n.id == conn]
    if len(names) != len(subs) or any(not isinstance(n.ctx, ast.Load) for n in subs):
        return None
    out = []
    for n in subs:
        sl = n.slice
        out.append([ast.unparse(e) for e in sl.elts] if isinstance(sl, ast.Tuple) else [ast.unparse(sl)])
    return out


def _loop_assigned(loop: LoopRegion) -> set[str]:
    names = {loop.loop_variable}
    for e in loop.all_interstate_edges():
        names |= set(e.data.assignments)
    return names


def _read_only_arrays(sdfg: dace.SDFG) -> set[str]:
    written = {n.data for st in sdfg.all_states() for n in st.data_nodes() if st.in_degree(n) > 0}
    return {name for name, d in sdfg.arrays.items()
            if not d.transient and isinstance(d, dt.Array) and not isinstance(d, dt.View) and name not in written
            and d.dtype in (dace.float16, dace.float32, dace.float64, dace.int8, dace.int16, dace.int32, dace.int64,
                            dace.uint8, dace.uint16, dace.uint32, dace.uint64)}


def _every_level(st, loop: LoopRegion) -> bool:
    return st.parent_graph is loop and all(e.data.is_unconditional() for e in loop.edges())


def _classify(sdfg, loop, x, step, invariant) -> Ring | str | None:
    """All reads of ``x`` in ``loop`` as one ring, why not, or None when the loop does not read ``x``."""
    ring: Ring | None = None

    def place(ix, st, unconditional):
        nonlocal ring
        got = _level_index(ix, loop.loop_variable, invariant)
        if got is None:
            return None
        dim, off, others = got
        if ring is None:
            ring = Ring(x, dim, off, others)
        rel = symbolic.simplify(off - ring.base)
        if dim != ring.dim or not rel.is_Integer or any(
                a is not b and (a is None or b is None or symbolic.inequal_symbols(a, b))
                for a, b in zip(others, ring.others, strict=True)):
            return None
        if unconditional:
            ring.unconditional.add(int(rel) * step)
        return int(rel) * step

    for st in loop.all_states():
        for n in st.data_nodes():
            if n.data != x:
                continue
            for e in st.out_edges(n):
                sub = e.data.src_subset
                if e.data.wcr is not None or sub is None:
                    return f"'{x}' is read with a write-conflict memlet"
                if sub.num_elements() == 1:
                    d = place([b for b, _, _ in sub.ndrange()], st, _every_level(st, loop))
                    if d is None:
                        return f"'{x}' is read at {sub}, not at the level index plus a constant"
                    ring.memlet_reads.append((st, e, d))  # type: ignore[union-attr]
                    continue
                tk = e.dst
                if not isinstance(tk, nodes.Tasklet) or tk.language != dtypes.Language.Python:
                    return f"'{x}' is read as a window by {type(tk).__name__} '{tk}', not by a Python tasklet"
                texts = _subscripts(tk.code.as_string, e.dst_conn)
                if texts is None:
                    return f"tasklet '{tk}' uses its window '{e.dst_conn}' of '{x}' other than as conn[index]"
                starts = [b for b, _, _ in sub.ndrange()]
                subs: dict[str, int] = {}
                for t in texts:
                    if len(t) != len(starts):
                        return f"tasklet '{tk}' indexes '{e.dst_conn}' with {len(t)} indices, expected {len(starts)}"
                    absolute = [f"({s}) + ({i})" for s, i in zip(starts, t, strict=True)]
                    d = place(absolute, st, False)
                    if d is None:
                        return f"tasklet '{tk}' reads '{e.dst_conn}[{', '.join(t)}]', not the level index plus a constant"
                    subs[", ".join(t)] = d
                ring.tasklet_reads.append((st, e, subs))  # type: ignore[union-attr]
    if ring is None:
        return None
    if len(ring.dists) < 2:
        return f"'{x}' is read at one level offset only"
    if ring.width > MAX_WINDOW:
        return f"'{x}' is read over a window of {ring.width} levels (at most {MAX_WINDOW} are cached)"
    return ring


def ring_plan(sdfg: dace.SDFG) -> RingPlan | str:
    """The inputs of the column SDFG ``sdfg`` to cache, or why none (one line)."""
    try:
        s = analyze_scan(sdfg, prologue=True)
    except NotAScan as e:
        return f"the body is not a column scan: {e}"
    loop = s.loop
    if any(isinstance(b, (BreakBlock, ContinueBlock, ReturnBlock)) for b in loop.all_control_flow_blocks()):
        return "the level loop has a break, continue or return block"
    if len(loop.sink_nodes()) != 1:
        return "the level loop body has more than one last block"
    step = 1 if s.direction == "forward" else -1
    assigned = _loop_assigned(loop)
    invariant = ({str(n) for n in sdfg.symbols} | {str(n) for n in sdfg.free_symbols}) - assigned
    rings, why = [], []
    for x in sorted(_read_only_arrays(sdfg)):
        got = _classify(sdfg, loop, x, step, invariant)
        if isinstance(got, Ring):
            rings.append(got)
        elif got is not None:
            why.append(got)
    if not rings:
        detail = "; ".join(why) if why else "the loop reads no read-only input array"
        return f"no input is read at two or more constant level offsets ({detail})"
    return RingPlan(loop, step, s.first_level, rings)


# ------------------------------------------------------------------------------------------------
# rewrite
# ------------------------------------------------------------------------------------------------
def _index(ring: Ring, level) -> list:
    return [level + ring.base if o is None else o for o in ring.others]


def _guarded_load(sdfg, st, ring: Ring, level, dst: str) -> None:
    """``dst = x[..., level, ...]`` if the index lies in the array, else zero (a tasklet in ``st``)."""
    desc = sdfg.arrays[ring.array]
    idx = ", ".join(symbolic.symstr(i) for i in _index(ring, level))
    lvl = symbolic.symstr(level + ring.base)
    inside = f"(({lvl}) >= 0) and (({lvl}) < ({symbolic.symstr(desc.shape[ring.dim])}))"
    zero = f"dace.{desc.dtype.to_string()}(0)"
    if symbolic.pystr_to_symbolic(lvl).is_Integer and int(symbolic.pystr_to_symbolic(lvl)) < 0:
        tk = st.add_tasklet(f"kcache_{dst}", {}, {"__r": None}, f"__r = {zero}")   # before the array
        st.add_edge(tk, "__r", st.add_write(dst), None, dace.Memlet(f"{dst}[0]"))
        return
    tk = st.add_tasklet(f"kcache_{dst}", {"__x": None}, {"__r": None}, f"__r = __x[{idx}] if {inside} else {zero}")
    st.add_edge(st.add_read(ring.array), None, tk, "__x", dace.Memlet.from_array(ring.array, desc))
    st.add_edge(tk, "__r", st.add_write(dst), None, dace.Memlet(f"{dst}[0]"))


def _load(sdfg, st, ring: Ring, level, dst: str, guarded: bool) -> None:
    if guarded:
        _guarded_load(sdfg, st, ring, level, dst)
        return
    sub = subsets.Range([(i, i, 1) for i in _index(ring, level)])
    st.add_nedge(st.add_read(ring.array), st.add_write(dst), dace.Memlet(data=ring.array, subset=sub,
                                                                         other_subset=subsets.Range([(0, 0, 1)])))


def _shift(st, regs: list[str]) -> None:
    """``regs[j] = regs[j - 1]`` for ``j = W - 1 .. 1`` in one tasklet (reads before writes)."""
    n = len(regs)
    ins = {f"__i{j}": None for j in range(n - 1)}
    outs = {f"__o{j}": None for j in range(1, n)}
    tk = st.add_tasklet("kcache_shift", ins, outs, "\n".join(f"__o{j} = __i{j - 1}" for j in range(1, n)))
    for j in range(n - 1):
        st.add_edge(st.add_read(regs[j]), None, tk, f"__i{j}", dace.Memlet(f"{regs[j]}[0]"))
    for j in range(1, n):
        st.add_edge(tk, f"__o{j}", st.add_write(regs[j]), None, dace.Memlet(f"{regs[j]}[0]"))


class _Replace(ast.NodeTransformer):
    def __init__(self, conn: str, names: dict[str, str]):
        self.conn, self.names = conn, names

    def visit_Subscript(self, node):
        if isinstance(node.value, ast.Name) and node.value.id == self.conn:
            sl = node.slice
            text = ", ".join(ast.unparse(e) for e in sl.elts) if isinstance(sl, ast.Tuple) else ast.unparse(sl)
            return ast.Name(self.names[text], ast.Load())
        return self.generic_visit(node)


def _redirect_memlet_read(st, e, reg: str) -> None:
    src = e.src
    st.remove_edge(e)
    if isinstance(e.dst, nodes.AccessNode):
        mem = dace.Memlet(data=reg, subset="0", other_subset=e.data.dst_subset or subsets.Range([(0, 0, 1)]))
    else:
        mem = dace.Memlet(f"{reg}[0]")
    st.add_edge(st.add_read(reg), None, e.dst, e.dst_conn, mem)
    if st.degree(src) == 0:
        st.remove_node(src)


def _redirect_tasklet_read(st, e, subs: dict[str, int], regs: list[str], lead: int) -> None:
    tk, conn = e.dst, e.dst_conn
    used = sorted(set(subs.values()), reverse=True)
    conns = {d: f"{conn}_kc{lead - d}" for d in used}
    tree = _Replace(conn, {text: conns[d] for text, d in subs.items()}).visit(ast.parse(tk.code.as_string))
    tk.code = CodeBlock(ast.unparse(tree), dtypes.Language.Python)
    st.remove_edge(e)
    tk.remove_in_connector(conn)
    if st.degree(e.src) == 0:
        st.remove_node(e.src)
    for d, c in conns.items():
        tk.add_in_connector(c)
        st.add_edge(st.add_read(regs[lead - d]), None, tk, c, dace.Memlet(f"{regs[lead - d]}[0]"))


def _state_before(loop: LoopRegion, label: str):
    """A new state on every edge into ``loop`` (the start block when ``loop`` is)."""
    g = loop.parent_graph
    st = g.add_state(label)
    for e in list(g.in_edges(loop)):
        g.remove_edge(e)
        g.add_edge(e.src, st, e.data)
    if g.start_block is loop:
        g.start_block = g.node_id(st)
    g.add_edge(st, loop, dace.InterstateEdge())
    return st


def cache_levels(sdfg: dace.SDFG) -> RingPlan | str:
    """Rewrite the column SDFG ``sdfg`` in place (module docstring); returns the plan, or why not
    (then ``sdfg`` is untouched)."""
    plan = ring_plan(sdfg)
    if isinstance(plan, str):
        return plan
    loop, step = plan.loop, plan.step
    k = symbolic.pystr_to_symbolic(loop.loop_variable)
    old_start = loop.start_block
    sink = loop.sink_nodes()[0]
    load = loop.add_state("kcache_load")
    loop.add_edge(load, old_start, dace.InterstateEdge())
    loop.start_block = loop.node_id(load)
    shift = loop.add_state("kcache_shift")
    loop.add_edge(sink, shift, dace.InterstateEdge())
    before = _state_before(loop, "kcache_init")
    first = symbolic.pystr_to_symbolic(str(plan.first))
    for ring in plan.rings:
        dtype = sdfg.arrays[ring.array].dtype
        regs = [sdfg.add_scalar(f"kc_{ring.array}_{j}", dtype, transient=True, find_new_name=True)[0]
                for j in range(ring.width)]
        for j in range(1, ring.width):
            _guarded_load(sdfg, before, ring, first + step * (ring.lead - j), regs[j])
        _load(sdfg, load, ring, k + step * ring.lead, regs[0], ring.lead not in ring.unconditional)
        if ring.width > 1:
            _shift(shift, regs)
        for st, e, d in ring.memlet_reads:
            _redirect_memlet_read(st, e, regs[ring.lead - d])
        for st, e, subs in ring.tasklet_reads:
            _redirect_tasklet_read(st, e, subs, regs, ring.lead)
    return plan


# ------------------------------------------------------------------------------------------------
# the expansion
# ------------------------------------------------------------------------------------------------
def _body_of(result) -> dace.SDFG:
    if isinstance(result, nodes.NestedSDFG):
        return result.sdfg
    inner = [n for n, _ in result.all_nodes_recursive() if isinstance(n, nodes.NestedSDFG)]
    return inner[0].sdfg


# efficiencies: those of ``sequential`` on purpose (ties go to ``sequential``, so ``auto`` is unchanged);
# measured on the windowed scan of benchmarks/bench_scans.py: 1.1-1.4x (K-contiguous) and 1.3-1.5x
# (cell-contiguous) faster than ``sequential``
@dace.library.expansion
@declare(targets=("cpu", "gpu"), reproducibility="exact",   # sequential's x 1.2-1.3 (bench_scans.py window rows)
         efficiency={"cpu:cell": 0.04, "cpu:k": 0.44, "cpu:strided": 0.04, "gpu:cell": 0.75, "gpu": 0.12})
class ExpandScanKCached(ExpandTransformation):
    """``sequential`` with the body's level-offset input reads served by a register ring
    (:mod:`sdfg_scan.expansions.scan_kcached`): one load per element instead of one per offset.
    Bitwise the ``sequential`` result."""

    environments = [ExactArithmetic]

    @staticmethod
    def applies(node, ctx) -> str | None:
        plan = ring_plan(node.body)
        return plan if isinstance(plan, str) else None

    @staticmethod
    def expansion(node, parent_state, parent_sdfg):
        node.validate(parent_sdfg, parent_state)
        name = f"{node.label}_kcached"
        if node.columns == "single":
            result = nested_column(node)
        elif node.columns == "cells":
            result = cell_map(node, parent_state, name)
        else:
            result = mapped_columns(node, parent_state, name)
        done = cache_levels(_body_of(result))
        if isinstance(done, str):
            raise node.error(f"the 'kcached' expansion does not apply: {done}; use 'sequential'")
        return result


__all__ = ["MAX_WINDOW", "ExpandScanKCached", "Ring", "RingPlan", "cache_levels", "ring_plan"]
