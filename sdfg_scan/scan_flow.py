"""Control-flow and data-flow helpers of the column-scan analysis (:mod:`sdfg_scan.scan_structure`).

Holds :class:`NotAScan`, the top-level chain and k-loop checks (``_chain``, :func:`loop_range`,
``_check_body``), block / state walkers, :func:`used_in_control_flow`, :func:`ordered_blocks`, the
access-node and tasklet helpers and :func:`value_source` (following identity copies back to what
produced a value). All public names are re-exported by :mod:`sdfg_scan.scan_structure`.
"""

from __future__ import annotations

import ast
import re

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


class NotAScan(ValueError):
    """Raised by :func:`sdfg_scan.scan_structure.analyze_scan` when an SDFG does not have the column-scan structure."""


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


def _walk(block):
    """``block`` and every block nested in it (branches and regions), depth first."""
    yield block
    if isinstance(block, ConditionalBlock):
        for _, br in block.branches:
            for b in br.nodes():
                yield from _walk(b)
    elif isinstance(block, ControlFlowRegion):
        for b in block.nodes():
            yield from _walk(b)


def _all_states(block):
    return (b for b in _walk(block) if isinstance(b, dace.SDFGState))


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


def exposed_reads(blocks) -> set[str]:
    """Containers some block reads before it surely wrote them, ``blocks`` in execution order (see
    :func:`exposed_in`)."""
    exposed: set[str] = set()
    written: set[str] = set()
    for b in blocks:
        written = exposed_in(b, written, exposed)
    return exposed


def exposed_in(block, written: set[str], exposed: set[str]) -> set[str]:
    """Add to ``exposed`` what ``block`` reads before it surely wrote it (``written``: surely written
    before ``block``); return what is surely written after it.

    A state's writes count after the state (a read in the same state counts as before them). Inside a
    branch of a conditional block the branch's own earlier blocks count. After a conditional block
    with an ``else`` branch (exactly one branch runs) the one-element containers every branch surely
    writes count (gt4py's temporaries written in both arms of an ``if`` and read after it); without one,
    nothing the branches wrote. Loops and regions that are not one chain count no write of their own.
    """
    if isinstance(block, dace.SDFGState):
        for n in block.data_nodes():
            if _is_read(block, n) and not _is_write(block, n) and n.data not in written:
                exposed.add(n.data)
        return written | {n.data for n in block.data_nodes() if _is_write(block, n)}
    if isinstance(block, ConditionalBlock):
        after = [exposed_in(branch, written, exposed) for _, branch in block.branches]
        if not any(cond is None for cond, _ in block.branches):
            return written
        arrays = block.sdfg.arrays
        both = set.intersection(*after) - written
        return written | {d for d in both if d in arrays and arrays[d].total_size == 1}
    chain = _region_chain(block) if isinstance(block, ControlFlowRegion) and not isinstance(block, LoopRegion) \
        else None
    if chain is None:
        for st in _all_states(block):
            exposed_in(st, written, exposed)
        return written
    inner = written
    for b in chain:
        inner = exposed_in(b, inner, exposed)
    return inner


def _region_chain(region) -> list | None:
    """The blocks of ``region`` when they form one chain of unconditional edges from its start block."""
    blocks = [region.start_block]
    while True:
        out = region.out_edges(blocks[-1])
        if not out:
            break
        if len(out) != 1 or not out[0].data.is_unconditional():
            return None
        blocks.append(out[0].dst)
        if len(blocks) > region.number_of_nodes():
            return None
    return blocks if len(blocks) == region.number_of_nodes() else None


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
