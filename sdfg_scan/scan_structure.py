"""Structural analysis of column scans: the k-loop, its carries and its boundary logic.

A *column SDFG* is an SDFG that computes one column of a scan (gt4py's scan nested SDFG, or the
``body`` of a :class:`sdfg_scan.nodes.scan.Scan` node). It is recognised by structure only; no
name, label or loop-variable spelling matters::

    entry states          copies  init connector -> carry container   (or constant tasklet -> carry)
    LoopRegion k          init k = first; cond k < stop / k >= start; update k = k +/- 1
      body blocks         states, ConditionalBlocks, nested SDFGs; reads carries and inputs at k,
                          writes outputs at k and the new carry values
    exit states           (optional) e.g. gt4py's ``scan_last_level``: reads final carries / temps

Public API (stable; used by LiftScans, the canonicalising transformations, ``optimize`` and
``sdfg-scan inspect``)::

    analyze_scan(sdfg) -> ScanStructure            # raises NotAScan(reason) when it is not a scan
    scan_mismatch(sdfg) -> str | None              # the reason, or None when it is a scan
    is_scan(sdfg) -> bool
    find_scans(sdfg) -> list[ScanSite]             # every scan (NestedSDFG or Scan node), recursively
    analyze_scan(sdfg, prologue=True)              # also accept blocks between entry and loop (peeled
                                                   # levels); used for Scan bodies (find_scans, validate)

    ScanStructure: sdfg, loop, variable, direction ("forward"|"backward"), start, stop (half-open
        level range [start, stop), symbolic in the column SDFG's symbols), first_level, last_level,
        entry_states, exit_states, body_blocks (loop blocks in execution order), carries
        {name: CarrySlot}, inputs / outputs (non-transient containers read / written),
        branches [BoundaryBranch], self_copies [SelfCopy], prologue (blocks between entry and loop,
        prologue mode only); slots(kind) -> [CarrySlot]
    CarrySlot: name, dtype, init (input connector copied in the entry state, or None),
        init_constant (code of a constant-init tasklet, or None), kind (one of CARRY_KINDS),
        update_sources (containers whose value is copied into the carry in the body),
        outputs (non-transient containers that receive the carry's per-level value),
        read_after (read in the exit states), delay_of ((container, subset) for delay lines),
        detail (one human-readable sentence)
    BoundaryBranch: block (ConditionalBlock), owner (SDFG holding it), kind ("level" | "flag"),
        condition (str), carry (flag carry name or None), path (nested-SDFG labels to it)
    SelfCopy: owner (SDFG), state, edge (the copy edge), carry, src, dst, path

Carry kinds (``CARRY_KINDS``):

- ``recurrent``: read before written in a level and updated: a true recurrence.
- ``pass_through``: written every level but never read before being written (its value never
  crosses a level boundary); only delivers per-level outputs / the final value.
- ``delay_line``: its new value is only a copy of an input read at the current level (so reads
  of it are that input at the previous level, ``x[k-1]`` forward / ``x[k+1]`` backward).
- ``flag``: boolean whose every update is a constant (``is_first_level``).
- ``counter``: integer updated as ``c + const`` / ``c - const``.
- ``invariant``: read in the loop but never updated (the init value on every level).
- ``unused``: neither read in the loop nor after it.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field

import dace
import networkx as nx
from dace import symbolic
from dace.sdfg import nodes
from dace.sdfg.state import (
    BreakBlock,
    ConditionalBlock,
    ContinueBlock,
    ControlFlowRegion,
    LoopRegion,
    ReturnBlock,
)
from dace.transformation.passes.analysis import loop_analysis

CARRY_KINDS = ("recurrent", "pass_through", "delay_line", "flag", "counter", "invariant", "unused")
DIRECTIONS = ("forward", "backward")


class NotAScan(ValueError):
    """Raised by :func:`analyze_scan` when an SDFG does not have the column-scan structure."""


@dataclass
class CarrySlot:
    name: str
    dtype: dace.typeclass
    init: str | None = None
    init_constant: str | None = None
    kind: str = "recurrent"
    update_sources: list[str] = field(default_factory=list)
    outputs: list[str] = field(default_factory=list)
    read_after: bool = False
    delay_of: tuple[str, str] | None = None
    detail: str = ""


@dataclass
class BoundaryBranch:
    block: ConditionalBlock
    owner: dace.SDFG
    kind: str
    condition: str
    carry: str | None = None
    path: tuple[str, ...] = ()


@dataclass
class SelfCopy:
    owner: dace.SDFG
    state: dace.SDFGState
    edge: object
    carry: str
    src: str
    dst: str
    path: tuple[str, ...] = ()


@dataclass
class ScanStructure:
    sdfg: dace.SDFG
    loop: LoopRegion
    variable: str
    direction: str
    start: object
    stop: object
    entry_states: list
    exit_states: list
    body_blocks: list
    carries: dict[str, CarrySlot]
    inputs: list[str]
    outputs: list[str]
    branches: list[BoundaryBranch] = field(default_factory=list)
    self_copies: list[SelfCopy] = field(default_factory=list)
    prologue: list = field(default_factory=list)

    @property
    def first_level(self):
        return self.start if self.direction == "forward" else self.stop - 1

    @property
    def last_level(self):
        return self.stop - 1 if self.direction == "forward" else self.start

    @property
    def trip_count(self):
        return self.stop - self.start

    def slots(self, kind: str) -> list[CarrySlot]:
        if kind not in CARRY_KINDS:
            raise ValueError(f"sdfg_scan.scan_structure: unknown carry kind '{kind}'; expected one of {CARRY_KINDS}")
        return [c for c in self.carries.values() if c.kind == kind]


@dataclass
class ScanSite:
    """Where a scan lives: ``node`` (NestedSDFG or Scan) in ``state`` of ``parent``; ``structure`` of its body."""

    node: nodes.Node
    state: dace.SDFGState
    parent: dace.SDFG
    structure: ScanStructure


# ------------------------------------------------------------------------------------------------
# loop and control flow
# ------------------------------------------------------------------------------------------------
def used_in_control_flow(sdfg: dace.SDFG, name: str) -> bool:
    """Whether ``name`` appears in an interstate edge or a branch / loop condition of ``sdfg``."""
    for e in sdfg.all_interstate_edges():
        if name in e.data.free_symbols:
            return True
    for b in sdfg.all_control_flow_blocks():
        if isinstance(b, ConditionalBlock) and any(c is not None and name in c.get_free_symbols()
                                                   for c, _ in b.branches):
            return True
        if isinstance(b, LoopRegion) and any(c is not None and name in c.get_free_symbols() for c in
                                             (b.loop_condition, b.init_statement, b.update_statement)):
            return True
    return False


def ordered_blocks(region: ControlFlowRegion) -> list:
    """The blocks of ``region`` in a topological (execution) order starting at its start block."""
    order = list(nx.topological_sort(region.nx))
    start = region.start_block
    if order and order[0] is not start:
        order.remove(start)
        order.insert(0, start)
    return order


def _chain(sdfg: dace.SDFG) -> list:
    blocks = sdfg.nodes()
    if not blocks:
        raise NotAScan("the SDFG is empty")
    for e in sdfg.edges():
        if not e.data.is_unconditional() or e.data.assignments:
            raise NotAScan(f"top-level edge {e.src.label} -> {e.dst.label} has a condition or assignments; "
                           "expected an unconditional chain entry -> loop -> exit")
    for b in blocks:
        if sdfg.in_degree(b) > 1 or sdfg.out_degree(b) > 1:
            raise NotAScan(f"block '{b.label}' branches or joins; expected a linear chain of blocks")
    start = sdfg.start_block
    chain, cur = [start], start
    while sdfg.out_degree(cur):
        cur = sdfg.out_edges(cur)[0].dst
        chain.append(cur)
    if len(chain) != len(blocks):
        raise NotAScan("not all top-level blocks are reachable in one chain")
    return chain


def loop_range(loop: LoopRegion) -> tuple[str, object, object]:
    """``(direction, start, stop)`` of a unit-stride loop: the levels visited are ``[start, stop)``."""
    if loop.inverted:
        raise NotAScan(f"loop '{loop.label}' is inverted (do-while); expected a pre-tested loop")
    var = loop.loop_variable
    if not var:
        raise NotAScan(f"loop '{loop.label}' has no loop variable")
    init = loop_analysis.get_init_assignment(loop)
    end = loop_analysis.get_loop_end(loop)
    stride = loop_analysis.get_loop_stride(loop)
    if init is None or end is None or stride is None:
        raise NotAScan(f"loop '{loop.label}': cannot read init/condition/update as 'k = a', 'k < b', 'k = k +/- 1'")
    stride = symbolic.simplify(stride)
    cond = loop.loop_condition.as_string.replace(" ", "")
    if stride == 1:
        if not re.search(r"<", cond):
            raise NotAScan(f"loop '{loop.label}' counts up but its condition '{cond}' is not an upper bound")
        return "forward", init, end + 1
    if stride == -1:
        if not re.search(r">", cond):
            raise NotAScan(f"loop '{loop.label}' counts down but its condition '{cond}' is not a lower bound")
        return "backward", end, init + 1
    raise NotAScan(f"loop '{loop.label}' has stride {stride}; expected +1 or -1")


def _all_blocks(region: ControlFlowRegion):
    for b in region.nodes():
        yield b
        if isinstance(b, ConditionalBlock):
            for _, br in b.branches:
                yield from _all_blocks(br)
        elif isinstance(b, ControlFlowRegion):
            yield from _all_blocks(b)


def _all_states(block):
    if isinstance(block, dace.SDFGState):
        yield block
    elif isinstance(block, ConditionalBlock):
        for _, br in block.branches:
            for b in br.nodes():
                yield from _all_states(b)
    elif isinstance(block, ControlFlowRegion):
        for b in block.nodes():
            yield from _all_states(b)


def _check_body(loop: LoopRegion, sdfg: dace.SDFG) -> None:
    var = loop.loop_variable
    if var in sdfg.arrays:
        raise NotAScan(f"loop variable '{var}' is also a data container")
    for b in _all_blocks(loop):
        if isinstance(b, (BreakBlock, ContinueBlock, ReturnBlock)):
            raise NotAScan(f"loop body contains a {type(b).__name__} '{b.label}'; expected straight levels")
        if isinstance(b, LoopRegion):
            raise NotAScan(f"loop body contains a nested loop '{b.label}'")
        if isinstance(b, ControlFlowRegion) and not isinstance(b, ConditionalBlock):
            for e in b.edges():
                if var in e.data.assignments:
                    raise NotAScan(f"loop body assigns the loop variable '{var}'")
    for e in loop.edges():
        if var in e.data.assignments:
            raise NotAScan(f"loop body assigns the loop variable '{var}'")


# ------------------------------------------------------------------------------------------------
# data flow helpers
# ------------------------------------------------------------------------------------------------
def _accesses(state: dace.SDFGState, data: str):
    return [n for n in state.data_nodes() if n.data == data]


def _is_write(state, node) -> bool:
    return any(not e.data.is_empty() for e in state.in_edges(node))


def _is_read(state, node) -> bool:
    return any(not e.data.is_empty() for e in state.out_edges(node))


_IDENTITY = re.compile(r"^\s*(\w+)\s*=\s*(\w+)\s*;?\s*$")
_CONST = re.compile(r"^\s*(\w+)\s*=\s*\(?\s*(True|False|true|false|[-+]?[0-9.eE+-]+)\s*\)?\s*;?\s*$")
_COUNTER = re.compile(r"^\s*(\w+)\s*=\s*\(?\s*(\w+)\s*([+-])\s*\(?\s*([0-9]+)\s*\)?\s*\)?\s*;?\s*$")


def _tasklet_code(t: nodes.Tasklet) -> str:
    return t.code.as_string.strip()


def _is_const(code: str) -> bool:
    """Whether tasklet code is one assignment of a constant expression (``o = -1.0``, ``o = False``)."""
    if _CONST.match(code):
        return True
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return False
    if len(tree.body) != 1 or not isinstance(tree.body[0], ast.Assign):
        return False
    return not any(isinstance(n, (ast.Name, ast.Call, ast.Subscript, ast.Attribute))
                   for n in ast.walk(tree.body[0].value))


def value_source(sdfg, states: list, idx: int, node: nodes.Node, depth: int = 0):
    """Follow identity copies back from ``node`` (in ``states[idx]``) to what produced the value.

    Returns a tuple ``(kind, payload)``: ``("const", code)``, ``("array", (name, subset))`` for a read
    of a non-transient container, ``("read", name)`` for an upward-exposed read of a transient,
    ``("tasklet", tasklet)``, ``("nested", node)`` or ``("unknown", None)``.
    """
    state = states[idx]
    if depth > 64:
        return ("unknown", None)
    if isinstance(node, nodes.AccessNode):
        ins = [e for e in state.in_edges(node) if not e.data.is_empty()]
        if not ins:
            desc = sdfg.arrays[node.data]
            if not desc.transient:
                return ("array", (node.data, None))
            for j in range(idx - 1, -1, -1):
                writers = [n for n in _accesses(states[j], node.data) if _is_write(states[j], n)]
                if writers:
                    return value_source(sdfg, states, j, writers[-1], depth + 1)
            return ("read", node.data)
        if len(ins) > 1:
            return ("unknown", None)
        e = ins[0]
        src = e.src
        if isinstance(src, nodes.AccessNode):
            if not sdfg.arrays[src.data].transient and not _is_write(state, src):
                return ("array", (src.data, str(e.data.subset if e.data.data == src.data else e.data.other_subset)))
            return value_source(sdfg, states, idx, src, depth + 1)
        return _tasklet_source(sdfg, states, idx, src, depth)
    return ("unknown", None)


def _tasklet_source(sdfg, states, idx, src, depth):
    state = states[idx]
    if isinstance(src, nodes.NestedSDFG):
        return ("nested", src)
    if not isinstance(src, nodes.Tasklet):
        return ("unknown", None)
    ins = [e for e in state.in_edges(src) if not e.data.is_empty()]
    code = _tasklet_code(src)
    if not ins and _is_const(code):
        return ("const", code)
    m = _IDENTITY.match(code)
    if m and len(ins) == 1 and ins[0].dst_conn == m.group(2):
        e = ins[0]
        if isinstance(e.src, nodes.AccessNode):
            if not sdfg.arrays[e.src.data].transient and not _is_write(state, e.src):
                return ("array", (e.src.data, str(e.data.subset)))
            return value_source(sdfg, states, idx, e.src, depth + 1)
    return ("tasklet", src)


# ------------------------------------------------------------------------------------------------
# main analysis
# ------------------------------------------------------------------------------------------------
def _init_only(sdfg: dace.SDFG, block) -> bool:
    """Whether ``block`` is a state holding only init copies (input -> transient) and constant inits."""
    if not isinstance(block, dace.SDFGState):
        return False
    for n in block.nodes():
        if isinstance(n, nodes.AccessNode):
            continue
        if not (isinstance(n, nodes.Tasklet) and not block.in_edges(n) and _is_const(_tasklet_code(n))):
            return False
    for e in block.edges():
        if isinstance(e.src, nodes.AccessNode) and isinstance(e.dst, nodes.AccessNode):
            if sdfg.arrays[e.src.data].transient or not sdfg.arrays[e.dst.data].transient:
                return False
    return True


def analyze_scan(sdfg: dace.SDFG, prologue: bool = False) -> ScanStructure:
    """Recognise the column-scan structure of ``sdfg``; raise :class:`NotAScan` with the reason if absent.

    :param prologue: also accept blocks between the init-copy entry states and the loop (any
        states or ``ConditionalBlock``s without loops, e.g. levels peeled by ``PeelBoundaryLevels``);
        they are returned as ``ScanStructure.prologue`` and their accesses count as inputs / outputs.
        ``start`` / ``stop`` then describe the main loop only. Off (strict) for lifting.
    """
    chain = _chain(sdfg)
    loops = [i for i, b in enumerate(chain) if isinstance(b, LoopRegion)]
    if len(loops) != 1:
        raise NotAScan(f"expected exactly one top-level LoopRegion, found {len(loops)}")
    li = loops[0]
    loop = chain[li]
    for b in chain[li + 1:] + ([] if prologue else chain[:li]):
        if not isinstance(b, dace.SDFGState):
            raise NotAScan(f"top-level block '{b.label}' is a {type(b).__name__}; expected states around the loop")
    direction, start, stop = loop_range(loop)
    _check_body(loop, sdfg)
    entry, exit_ = chain[:li], chain[li + 1:]
    pro: list = []
    if prologue:
        n_init = 0
        while n_init < li and _init_only(sdfg, chain[n_init]):
            n_init += 1
        entry, pro = chain[:n_init], chain[n_init:li]
        for b in pro:
            for blk in _all_blocks(b) if isinstance(b, ControlFlowRegion) else [b]:
                if isinstance(blk, (LoopRegion, BreakBlock, ContinueBlock, ReturnBlock)):
                    raise NotAScan(f"block '{blk.label}' before the main loop is a {type(blk).__name__}; "
                                   "expected straight-line levels (states or conditional blocks)")

    carries: dict[str, CarrySlot] = {}
    for st in entry:
        for n in st.nodes():
            if isinstance(n, nodes.AccessNode):
                continue
            if isinstance(n, nodes.Tasklet) and not st.in_edges(n) and _is_const(_tasklet_code(n)):
                for e in st.out_edges(n):
                    d = st.memlet_path(e)[-1].dst
                    if isinstance(d, nodes.AccessNode) and sdfg.arrays[d.data].transient:
                        carries[d.data] = CarrySlot(d.data, sdfg.arrays[d.data].dtype,
                                                    init_constant=_tasklet_code(n))
                continue
            raise NotAScan(f"entry state '{st.label}' holds a {type(n).__name__} '{n}'; expected only init copies")
        for e in st.edges():
            if isinstance(e.src, nodes.AccessNode) and isinstance(e.dst, nodes.AccessNode):
                src_desc, dst_desc = sdfg.arrays[e.src.data], sdfg.arrays[e.dst.data]
                if src_desc.transient or not dst_desc.transient:
                    raise NotAScan(f"entry state '{st.label}' copies '{e.src.data}' -> '{e.dst.data}'; "
                                   "expected input connector -> transient carry")
                carries[e.dst.data] = CarrySlot(e.dst.data, dst_desc.dtype, init=e.src.data)

    body = ordered_blocks(loop)
    body_states = [b for b in body if isinstance(b, dace.SDFGState)]
    reads_exposed: set[str] = set()
    written: dict[str, int] = {}
    must: set[str] = set()
    read_any: set[str] = set()
    for b in body:
        sts = [b] if isinstance(b, dace.SDFGState) else list(_all_states(b))
        new_must = set()
        for st in sts:
            for n in st.data_nodes():
                if _is_read(st, n):
                    read_any.add(n.data)
                    if not _is_write(st, n) and n.data not in must:
                        reads_exposed.add(n.data)
                if _is_write(st, n):
                    written[n.data] = written.get(n.data, 0) + 1
                    if isinstance(b, dace.SDFGState):
                        new_must.add(n.data)
        must |= new_must
    # carries without init: transients that cross the level boundary (exposed read + written)
    for name in sorted(reads_exposed & set(written)):
        desc = sdfg.arrays[name]
        if desc.transient and name not in carries:
            carries[name] = CarrySlot(name, desc.dtype)

    read_after = set()
    for st in exit_:
        for n in st.data_nodes():
            if _is_read(st, n):
                read_after.add(n.data)

    inputs, outputs = set(), set()
    for st in list(entry) + [s for b in pro + body for s in _all_states(b)] + list(exit_):
        for n in st.data_nodes():
            desc = sdfg.arrays[n.data]
            if desc.transient:
                continue
            if _is_read(st, n):
                inputs.add(n.data)
            if _is_write(st, n):
                outputs.add(n.data)

    for c in carries.values():
        c.read_after = c.name in read_after
        _classify(sdfg, c, body_states, reads_exposed, written, read_any)

    structure = ScanStructure(sdfg, loop, loop.loop_variable, direction, start, stop, list(entry), list(exit_),
                              body, carries, sorted(inputs), sorted(outputs), prologue=list(pro))
    structure.branches = _find_branches(structure)
    structure.self_copies = _find_self_copies(structure)
    return structure


def _classify(sdfg, c: CarrySlot, body_states, reads_exposed, written, read_any) -> None:
    exposed = c.name in reads_exposed
    is_written = c.name in written
    sources = []
    for i, st in enumerate(body_states):
        for n in _accesses(st, c.name):
            for e in st.in_edges(n):
                if e.data.is_empty():
                    continue
                if isinstance(e.src, nodes.AccessNode):
                    c.update_sources.append(e.src.data)
                sources.append(value_source(sdfg, body_states, i, n))
    for src in c.update_sources:
        if not sdfg.arrays[src].transient and src not in c.outputs:
            c.outputs.append(src)
    for st in body_states:
        for n in st.data_nodes():
            if sdfg.arrays[n.data].transient or not _is_write(st, n):
                continue
            for e in st.in_edges(n):
                if isinstance(e.src, nodes.AccessNode) and (e.src.data == c.name or e.src.data in c.update_sources):
                    if n.data not in c.outputs:
                        c.outputs.append(n.data)
    if not is_written:
        if exposed:
            c.kind, c.detail = "invariant", "read on every level, never updated"
        elif c.name in read_any or c.read_after:
            c.kind, c.detail = "invariant", "init value only read after the loop"
        else:
            c.kind, c.detail = "unused", "neither read nor updated in the loop"
        return
    if not exposed:
        if not c.outputs and not c.read_after and c.name not in read_any:
            c.kind, c.detail = "unused", "updated but never read"
        else:
            c.kind, c.detail = "pass_through", "written every level before any read; never crosses a level"
        return
    kinds = {s[0] for s in sources}
    if sources and kinds == {"const"} and c.dtype == dace.bool_:
        c.kind, c.detail = "flag", f"boolean set to a constant in the update ({sources[0][1]})"
        return
    if sources and kinds == {"array"}:
        arrays = {s[1][0] for s in sources}
        if len(arrays) == 1:
            c.kind = "delay_line"
            c.delay_of = sources[0][1]
            c.detail = f"holds input '{sources[0][1][0]}' of the previous level"
            return
    if sources and kinds == {"tasklet"} and c.dtype in (dace.int8, dace.int16, dace.int32, dace.int64,
                                                        dace.uint8, dace.uint16, dace.uint32, dace.uint64):
        ok = True
        for _, t in sources:
            m = _COUNTER.match(_tasklet_code(t))
            st = next(s for s in body_states if t in s.nodes())
            ins = [e for e in st.in_edges(t) if not e.data.is_empty()]
            if not m or len(ins) != 1 or not isinstance(ins[0].src, nodes.AccessNode) or ins[0].src.data != c.name:
                ok = False
        if ok:
            c.kind, c.detail = "counter", "integer incremented by a constant every level"
            return
    c.kind, c.detail = "recurrent", "read from the previous level and updated"


# ------------------------------------------------------------------------------------------------
# boundary branches and self-copies (recursing into nested SDFGs of the body)
# ------------------------------------------------------------------------------------------------
def _nested_env(state, nsdfg: nodes.NestedSDFG, env: dict) -> dict:
    """Meaning of a nested SDFG's inner names: ``{"level"}`` or ``{"carry:<c>"}``."""
    inner = {}
    for k, v in nsdfg.symbol_mapping.items():
        syms = {str(s) for s in symbolic.pystr_to_symbolic(str(v)).free_symbols}
        meaning = set().union(*(env.get(s, set()) for s in syms)) if syms else set()
        if meaning:
            inner[k] = meaning
    for e in state.in_edges(nsdfg):
        if e.data.data is None:
            continue
        src = state.memlet_path(e)[0].src
        if isinstance(src, nodes.AccessNode) and src.data in env:
            inner[e.dst_conn] = env[src.data]
    return inner


def _find_branches(s: ScanStructure) -> list[BoundaryBranch]:
    flags = {c.name for c in s.carries.values() if c.kind == "flag"}
    env = {s.variable: {"level"}}
    for c in s.carries:
        env[c] = {f"carry:{c}"}
    found: list[BoundaryBranch] = []

    def visit(sdfg, blocks, env, path):
        for b in blocks:
            for blk in _walk(b):
                if isinstance(blk, ConditionalBlock):
                    for cond, _ in blk.branches:
                        if cond is None:
                            continue
                        syms = {str(x) for x in symbolic.pystr_to_symbolic(cond.as_string).free_symbols} \
                            if _sympifiable(cond.as_string) else set(re.findall(r"[A-Za-z_]\w*", cond.as_string))
                        meaning = set().union(*(env.get(x, set()) for x in syms)) if syms else set()
                        if "level" in meaning:
                            found.append(BoundaryBranch(blk, sdfg, "level", cond.as_string, None, path))
                            break
                        fl = sorted(m[6:] for m in meaning if m.startswith("carry:") and m[6:] in flags)
                        if fl:
                            found.append(BoundaryBranch(blk, sdfg, "flag", cond.as_string, fl[0], path))
                            break
                if isinstance(blk, dace.SDFGState):
                    for n in blk.nodes():
                        if isinstance(n, nodes.NestedSDFG):
                            inner = _nested_env(blk, n, env)
                            if inner:
                                visit(n.sdfg, n.sdfg.nodes(), inner, path + (n.label,))

    visit(s.sdfg, s.body_blocks, env, ())
    return found


def _sympifiable(code: str) -> bool:
    try:
        symbolic.pystr_to_symbolic(code)
        return True
    except Exception:  # noqa: BLE001 - any parse failure means "use the regex fallback"
        return False


def _walk(block):
    yield block
    if isinstance(block, ConditionalBlock):
        for _, br in block.branches:
            for b in br.nodes():
                yield from _walk(b)
    elif isinstance(block, ControlFlowRegion):
        for b in block.nodes():
            yield from _walk(b)


def _find_self_copies(s: ScanStructure) -> list[SelfCopy]:
    """Copies inside nested SDFGs of the body that move a carry's old value to where its new one goes."""
    feeds: dict[str, set[str]] = {}
    for c in s.carries.values():
        f = {c.name} | set(c.update_sources)
        for st in [b for b in s.body_blocks if isinstance(b, dace.SDFGState)]:
            for n in st.data_nodes():
                if n.data in f:
                    for e in st.in_edges(n):
                        if isinstance(e.src, nodes.AccessNode):
                            f.add(e.src.data)
        feeds[c.name] = f
    out: list[SelfCopy] = []

    def visit(sdfg, blocks, src_env, dst_env, path):
        for b in blocks:
            for st in _all_states(b):
                for n in st.nodes():
                    if not isinstance(n, nodes.NestedSDFG):
                        continue
                    ins, outs = {}, {}
                    for e in st.in_edges(n):
                        src = st.memlet_path(e)[0].src
                        if isinstance(src, nodes.AccessNode) and src.data in src_env and not _is_write(st, src):
                            ins[e.dst_conn] = src_env[src.data]
                    for e in st.out_edges(n):
                        dst = st.memlet_path(e)[-1].dst
                        if isinstance(dst, nodes.AccessNode) and dst.data in dst_env:
                            outs[e.src_conn] = dst_env[dst.data]
                    if not ins or not outs:
                        continue
                    inner = n.sdfg
                    for ist in inner.all_states():
                        for e in ist.edges():
                            if (isinstance(e.src, nodes.AccessNode) and isinstance(e.dst, nodes.AccessNode)
                                    and e.src.data in ins and e.dst.data in outs
                                    and ins[e.src.data] == outs[e.dst.data] and ist.in_degree(e.src) == 0):
                                out.append(SelfCopy(inner, ist, e, ins[e.src.data], e.src.data, e.dst.data,
                                                    path + (n.label,)))
                    visit(inner, inner.nodes(), ins, outs, path + (n.label,))

    src_env = {c: c for c in s.carries}
    dst_env = {d: c for c, f in feeds.items() for d in f}
    visit(s.sdfg, s.body_blocks, src_env, dst_env, ())
    return out


# ------------------------------------------------------------------------------------------------
def scan_mismatch(sdfg: dace.SDFG) -> str | None:
    """Why ``sdfg`` is not a column scan, or None when it is one."""
    if not any(isinstance(b, LoopRegion) for b in sdfg.nodes()):
        return "no top-level LoopRegion"
    try:
        analyze_scan(sdfg)
    except NotAScan as e:
        return str(e)
    return None


def is_scan(sdfg: dace.SDFG) -> bool:
    return scan_mismatch(sdfg) is None


def find_scans(sdfg: dace.SDFG) -> list[ScanSite]:
    """Every scan in ``sdfg`` (recursively): NestedSDFG nodes with a column-scan SDFG and Scan nodes."""
    from sdfg_scan.nodes.scan import Scan  # local: the node module imports this one

    sites: list[ScanSite] = []

    def visit(g: dace.SDFG):
        for st in g.all_states():
            for n in st.nodes():
                if isinstance(n, Scan):
                    try:
                        sites.append(ScanSite(n, st, g, analyze_scan(n.body, prologue=True)))
                    except NotAScan:
                        pass
                elif isinstance(n, nodes.NestedSDFG):
                    if any(isinstance(b, LoopRegion) for b in n.sdfg.nodes()):
                        try:
                            sites.append(ScanSite(n, st, g, analyze_scan(n.sdfg)))
                            continue
                        except NotAScan:
                            pass
                    visit(n.sdfg)

    visit(sdfg)
    return sites


__all__ = ["CARRY_KINDS", "DIRECTIONS", "BoundaryBranch", "CarrySlot", "NotAScan", "ScanSite", "ScanStructure",
           "SelfCopy", "analyze_scan", "find_scans", "is_scan", "loop_range", "ordered_blocks", "scan_mismatch",
           "used_in_control_flow", "value_source"]
