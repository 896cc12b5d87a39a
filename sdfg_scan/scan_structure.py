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
    analyze_scan(sdfg, prologue=True)              # also accept blocks between entry and loop (peeled
                                                   # levels); used for Scan bodies (find_scans, validate)
    analyze_loop(loop) -> ScanStructure | None     # the scan whose k-loop is ``loop`` (prologue=True)
    sdfg_scan.scan_sites.find_scans(sdfg) -> list[ScanSite]   # every scan (NestedSDFG or Scan node),
                                                   # recursively; above the node modules

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
        flag_value (the constant a flag is set to on every level), detail (one human-readable sentence)
    BoundaryBranch: block (ConditionalBlock), owner (SDFG holding it), kind ("level" | "flag"),
        condition (str), carry (flag carry name or None), path (nested-SDFG labels to it),
        nsdfg / host (the NestedSDFG whose SDFG is ``owner`` and the state holding it; None for a
        block of the column SDFG itself), connector (flag branches: the inner name of the flag)
    SelfCopy: owner (SDFG), state, edge (the copy edge), carry, src, dst, path, nsdfg / host (the
        NestedSDFG whose SDFG is ``owner`` and the state holding it)

Carry kinds (``CARRY_KINDS``):

- ``recurrent``: read before written in a level and updated: a true recurrence.
- ``pass_through``: written every level but never read before being written (its value never
  crosses a level boundary); only delivers per-level outputs / the final value.
- ``delay_line``: its new value is only a copy of an input read at the current level (so reads
  of it are that input at the previous level, ``x[k-1]`` forward / ``x[k+1]`` backward).
- ``flag``: boolean whose every update in the loop is the same constant, at least one of them
  unconditional (``is_first_level``; :func:`sdfg_scan.scan_flags.constant_flags`).
- ``counter``: integer updated as ``c + const`` / ``c - const``.
- ``invariant``: read in the loop but never updated (the init value on every level).
- ``unused``: read nowhere: neither in the loop, nor before it (peeled levels), nor after it.

Self-copies are identity copies (:func:`sdfg_scan.identity_copies.identity_copies`) inside nested
SDFGs of the body that move a carry's old value to where its new value goes.

Layout (imports flow downwards only; nothing here imports a node, expansion or transformation):
:mod:`sdfg_scan.scan_model` the result dataclasses; :mod:`sdfg_scan.scan_flow` the loop /
control-flow / data-flow helpers (and :class:`NotAScan`, ``loop_range``, ``ordered_blocks``,
``used_in_control_flow``, ``value_source``, re-exported here); :mod:`sdfg_scan.scan_flags` constant
flags; :mod:`sdfg_scan.scan_findings` carry classification, boundary branches and self-copies; this
module ``analyze_scan`` and the public wrappers (dataclasses re-exported).
"""

from __future__ import annotations

import dace
from dace.sdfg import nodes
from dace.sdfg.state import (
    BreakBlock,
    ContinueBlock,
    ControlFlowRegion,
    LoopRegion,
    ReturnBlock,
)

from sdfg_scan.identity_copies import copy_tasklet, replace_copy_tasklet, single_element
from sdfg_scan.scan_findings import _classify, _find_branches, _find_self_copies
from sdfg_scan.scan_flags import constant_flags
from sdfg_scan.scan_flow import (
    NotAScan,
    _all_blocks,
    _all_states,
    _chain,
    _check_body,
    _is_const,
    _is_read,
    _is_write,
    _tasklet_code,
    exposed_in,
    loop_range,
    ordered_blocks,
    used_in_control_flow,
    value_source,
)
from sdfg_scan.scan_model import CARRY_KINDS, DIRECTIONS, BoundaryBranch, CarrySlot, ScanStructure, SelfCopy


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


def entry_copy_tasklet(sdfg: dace.SDFG, state: dace.SDFGState, node) -> tuple | None:
    """``(src, dst, in_edge, out_edge)`` when ``node`` is an init copy written as a tasklet, else None: a copy
    tasklet (:func:`sdfg_scan.identity_copies.copy_tasklet`) from an input container to a single-element
    transient, what a copy ``input -> carry`` becomes once DaCe's code generation lowered it (gt4py's
    compiled ``program.sdfgz`` holds its scans' init copies in this form)."""
    found = copy_tasklet(sdfg, state, node)
    if found is None:
        return None
    sd, dd = sdfg.arrays[found[0].data], sdfg.arrays[found[1].data]
    if sd.transient or not dd.transient or not (single_element(sd) and single_element(dd)):
        return None
    return found


def canonicalize_entry_copies(sdfg: dace.SDFG) -> int:
    """Rewrite the init copies that the entry states of column SDFG ``sdfg`` hold as tasklets
    (:func:`entry_copy_tasklet`) into access-node copies; return how many. Other blocks are not touched."""
    done = 0
    for st in _chain(sdfg):
        if isinstance(st, LoopRegion):
            break
        if not isinstance(st, dace.SDFGState):
            continue
        for n in list(st.nodes()):
            found = entry_copy_tasklet(sdfg, st, n)
            if found is not None:
                replace_copy_tasklet(st, n, found)
                done += 1
    return done


def analyze_scan(sdfg: dace.SDFG, prologue: bool = False, copy_tasklets: bool = False) -> ScanStructure:
    """Recognise the column-scan structure of ``sdfg``; raise :class:`NotAScan` with the reason if absent.

    :param prologue: also accept blocks between the init-copy entry states and the loop (any
        states or ``ConditionalBlock``s without loops, e.g. levels peeled by ``PeelBoundaryLevels``);
        they are returned as ``ScanStructure.prologue`` and their accesses count as inputs / outputs.
        ``start`` / ``stop`` then describe the main loop only. Off (strict) for lifting.
    :param copy_tasklets: also accept init copies written as tasklets in the entry states
        (:func:`entry_copy_tasklet`); ``LiftScans`` rewrites them into copies
        (:func:`canonicalize_entry_copies`) before it lifts, so a ``Scan`` body never holds them.
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
            found = entry_copy_tasklet(sdfg, st, n) if copy_tasklets else None
            if found is not None:
                carries[found[1].data] = CarrySlot(found[1].data, sdfg.arrays[found[1].data].dtype, init=found[0].data)
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
    read_any: set[str] = set()
    must: set[str] = set()
    for b in body:
        must = exposed_in(b, must, reads_exposed)
        for st in [b] if isinstance(b, dace.SDFGState) else _all_states(b):
            for n in st.data_nodes():
                if _is_read(st, n):
                    read_any.add(n.data)
                if _is_write(st, n):
                    written[n.data] = written.get(n.data, 0) + 1
    # carries without init: transients that cross the level boundary (exposed read + written)
    for name in sorted(reads_exposed & set(written)):
        desc = sdfg.arrays[name]
        if desc.transient and name not in carries:
            carries[name] = CarrySlot(name, desc.dtype)

    read_after: set[str] = set()
    read_before: set[str] = set()
    for states, into in ((exit_, read_after), ([s for b in pro for s in _all_states(b)], read_before)):
        for st in states:
            for n in st.data_nodes():
                if _is_read(st, n):
                    into.add(n.data)

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

    flags = constant_flags(loop)
    for c in carries.values():
        c.read_after = c.name in read_after
        _classify(sdfg, c, body_states, reads_exposed, written, read_any, flags, read_after | read_before)

    structure = ScanStructure(sdfg, loop, loop.loop_variable, direction, start, stop, list(entry), list(exit_),
                              body, carries, sorted(inputs), sorted(outputs), prologue=list(pro))
    structure.branches = _find_branches(structure)
    structure.self_copies = _find_self_copies(structure)
    return structure


# ------------------------------------------------------------------------------------------------
def scan_mismatch(sdfg: dace.SDFG, copy_tasklets: bool = False) -> str | None:
    """Why ``sdfg`` is not a column scan, or None when it is one (``copy_tasklets``: as in :func:`analyze_scan`)."""
    if not any(isinstance(b, LoopRegion) for b in sdfg.nodes()):
        return "no top-level LoopRegion"
    try:
        analyze_scan(sdfg, copy_tasklets=copy_tasklets)
    except NotAScan as e:
        return str(e)
    return None


def is_scan(sdfg: dace.SDFG) -> bool:
    return scan_mismatch(sdfg) is None


def analyze_loop(loop: LoopRegion) -> ScanStructure | None:
    """The analysis of the column SDFG whose k-loop is ``loop`` (``prologue=True``), or None when
    ``loop`` is not the k-loop of a column scan. What the canonicalising transformations match on."""
    if loop.parent_graph is not loop.sdfg:
        return None
    try:
        s = analyze_scan(loop.sdfg, prologue=True)
    except NotAScan:
        return None
    return s if s.loop is loop else None


__all__ = ["CARRY_KINDS", "DIRECTIONS", "BoundaryBranch", "CarrySlot", "NotAScan", "ScanStructure", "SelfCopy",
           "analyze_loop", "analyze_scan", "canonicalize_entry_copies", "entry_copy_tasklet", "is_scan", "loop_range", "ordered_blocks", "scan_mismatch", "used_in_control_flow",
           "value_source"]
