"""``ScanToCumulative``: a lifted gt4py cumulative sum (map over cells + ``Scan``) -> one ``CumulativeScan``."""

from __future__ import annotations

import ast
import math
from dataclasses import dataclass

import dace
import networkx as nx
import sympy
from dace import properties, subsets, symbolic
from dace.sdfg import nodes
from dace.sdfg import utils as sdutil
from dace.sdfg.state import LoopRegion
from dace.transformation import transformation as xf

from sdfg_scan.nodes.cumulative_scan import CumulativeScan
from sdfg_scan.nodes.scan import Scan
from sdfg_scan.scan_structure import NotAScan, analyze_scan, ordered_blocks

_K = "__stc_k"  # stands for the body's level index in outer index expressions


class _Refuse(Exception):
    """Internal: the pattern does not match (the reason is the message)."""


@dataclass
class _Plan:
    entry: nodes.MapEntry
    exit: nodes.MapExit
    scan: Scan
    src: nodes.AccessNode
    dst: nodes.AccessNode
    in_subset: subsets.Range
    out_subset: subsets.Range
    axis: int
    reverse: bool
    removable: list


@properties.make_properties
class ScanToCumulative(xf.SingleStateTransformation):
    """Replace a map over cells holding a lifted cumulative-sum ``Scan`` by one N-d ``CumulativeScan``.

    Matched pattern: a ``columns="single"`` :class:`sdfg_scan.Scan` whose body (recognised by
    structure, names play no role) keeps exactly one carry ``s``, initialised from the constant
    ``+0`` (gt4py's ``init=0.0``: a constant tasklet in the map or outside it, feeding the init
    connector through a transient used nowhere else), and computes per level, forward or backward,
    ``s = s + x[c, k]; out[c, k] = s`` (one tasklet ``o = a + b`` with the carry as left operand;
    copies through scalars and the output element are followed)::

        map c in [c0, c1):                               CumulativeScan(sum, axis=K,
          Scan(init=0.0, x[c, ...] -> out[c, ...])  ->       start_from_identity=True)
                                                           x[c0+dx:c1+dx, k0+ex:k1+ex] -> out[...]

    ``start_from_identity`` makes the first level compute ``0.0 + x[first]`` like the body, so the
    result is bitwise the original (``-0.0`` inputs included); the order of the sums is unchanged.

    Legality checks (``can_be_applied`` runs the same analysis as ``apply``; refused => unchanged):

    - ``_map``: the Scan is directly inside a one-parameter unit-step map that holds nothing else
      (except the init constant's tasklet and transient), every map input goes to the Scan or is an
      empty edge to that tasklet, and every map output comes from the Scan;
    - ``_body``: ``analyze_scan`` finds no prologue, no exit states, no boundary branches, exactly
      one carry (``recurrent``), initialised from a connector; the loop holds only states in a chain;
      the level is ``carry + x`` with ``x`` a non-transient input and one non-transient write of
      that value, all through single-element memlets (``_level``);
    - ``_init``: the init connector's value is a constant tasklet ``+0`` (not ``-0.0``), through a
      one-element transient written and read only there;
    - ``_outer``: the body arrays of ``x`` and ``out`` have zero offsets and the outer arrays'
      strides (after the symbol mapping) on the dimensions the memlet keeps; both outer arrays have
      rank 2, the element index is ``c + const`` on one dimension and ``k + const`` on the other, in
      the same order for both; ``x`` and ``out`` are different containers with the same dtype.
    """

    scan = xf.PatternNode(Scan)

    @classmethod
    def expressions(cls):
        return [sdutil.node_path_graph(cls.scan)]

    def can_be_applied(self, graph, expr_index, sdfg, permissive=False):
        return _plan_or_none(graph, sdfg, self.scan) is not None

    def apply(self, graph: dace.SDFGState, sdfg: dace.SDFG):
        plan = _plan(graph, sdfg, self.scan)
        node = CumulativeScan(f"{self.scan.label}_cumsum", op="sum", axis=plan.axis, reverse=plan.reverse)
        node.start_from_identity = True
        node.debuginfo = self.scan.debuginfo
        graph.add_node(node)
        graph.add_edge(plan.src, None, node, "_in", dace.Memlet(data=plan.src.data, subset=plan.in_subset))
        graph.add_edge(node, "_out", plan.dst, None, dace.Memlet(data=plan.dst.data, subset=plan.out_subset))
        for n in [plan.entry, plan.exit, plan.scan] + plan.removable:
            graph.remove_node(n)
        for n in plan.removable:
            if isinstance(n, nodes.AccessNode):
                sdfg.remove_data(n.data, validate=False)
        sdfg.root_sdfg.reset_cfg_list()
        return node


def _plan_or_none(state, sdfg, scan) -> _Plan | None:
    try:
        return _plan(state, sdfg, scan)
    except (_Refuse, NotAScan, ValueError, TypeError, KeyError, SyntaxError):
        return None


def _plan(state: dace.SDFGState, sdfg: dace.SDFG, scan: Scan) -> _Plan:
    if scan.columns != "single" or scan.body is None:
        raise _Refuse("not a lifted single-column scan")
    body = scan.body
    s = analyze_scan(body, prologue=True)
    if s.prologue or s.exit_states or s.branches or s.self_copies:
        raise _Refuse("prologue, exit states or boundary branches")
    if len(s.carries) != 1:
        raise _Refuse("not exactly one carry")
    carry = next(iter(s.carries.values()))
    if carry.kind != "recurrent" or carry.init is None or carry.init not in scan.in_connectors:
        raise _Refuse("carry is not a recurrence initialised from a connector")
    if len(scan.in_connectors) != 2 or len(scan.out_connectors) != 1:
        raise _Refuse("expected connectors init, x -> out")
    xname, xsub, oname, osub = _level(body, s.loop, carry.name)
    if xname == carry.init or xname not in scan.in_connectors or oname not in scan.out_connectors:
        raise _Refuse("x or out is not a connector")
    dtypes = {body.arrays[n].dtype for n in (xname, oname, carry.name, carry.init)}
    if len(dtypes) != 1:
        raise _Refuse("mixed dtypes")

    entry, exit_ = _map(state, scan)
    init_nodes = _init(state, sdfg, scan, carry.init, entry)
    children = set(state.scope_children()[entry])
    if children != {scan, exit_} | set(n for n in init_nodes if state.entry_node(n) is entry):
        raise _Refuse("the map holds more than the scan")

    param = entry.map.params[0]
    b, e, st = entry.map.range[0]
    if st != 1:
        raise _Refuse("map step is not 1")
    repl = {k: symbolic.pystr_to_symbolic(str(v)) for k, v in scan.symbol_mapping.items()}
    repl[s.variable] = symbolic.pystr_to_symbolic(_K)
    start, stop = _subs(s.start, repl), _subs(s.stop, repl)

    x_edge = next(ed for ed in state.in_edges(scan) if ed.dst_conn == xname)
    o_edge = next(ed for ed in state.out_edges(scan) if ed.src_conn == oname)
    src = state.memlet_path(x_edge)[0].src
    dst = state.memlet_path(o_edge)[-1].dst
    if not isinstance(src, nodes.AccessNode) or not isinstance(dst, nodes.AccessNode):
        raise _Refuse("operands are not access nodes")
    if src.data != x_edge.data.data or dst.data != o_edge.data.data or src.data == dst.data:
        raise _Refuse("operand containers differ along the path or alias")
    xi = _outer_index(sdfg, body, x_edge, xname, xsub, repl)
    oi = _outer_index(sdfg, body, o_edge, oname, osub, repl)
    dims = None
    for idx in (xi, oi):
        roles = [_role(ex, param) for ex in idx]
        if len(roles) != 2 or sorted(r for r, _ in roles) != ["cell", "level"]:
            raise _Refuse("outer index is not (cell + const, level + const)")
        d = [r for r, _ in roles]
        if dims is not None and d != dims:
            raise _Refuse("x and out order cell and level differently")
        dims = d
    assert dims is not None  # the loop above ran (twice)
    axis = dims.index("level")

    def window(idx):
        rng = []
        for role, const in (_role(ex, param) for ex in idx):
            if role == "cell":
                rng.append((b + const, e + const, 1))
            else:
                rng.append((start + const, stop - 1 + const, 1))
        return subsets.Range(rng)

    return _Plan(entry, exit_, scan, src, dst, window(xi), window(oi), axis, s.direction == "backward",
                 list(init_nodes))


def _subs(expr, repl: dict):
    ex = symbolic.pystr_to_symbolic(str(expr))
    m = {sym: repl[str(sym)] for sym in ex.free_symbols if str(sym) in repl}
    return ex.subs(m, simultaneous=True)


def _role(expr, param: str):
    """``("cell", c)`` for ``param + c``, ``("level", c)`` for ``k + c``; refuses anything else."""
    free = {str(x): x for x in expr.free_symbols}
    p, k = free.get(param), free.get(_K)
    cp = sympy.diff(expr, p) if p is not None else 0
    ck = sympy.diff(expr, k) if k is not None else 0
    rest = sympy.expand(expr - (cp * p if p is not None else 0) - (ck * k if k is not None else 0))
    if {str(x) for x in rest.free_symbols} & {param, _K}:
        raise _Refuse("non-linear index")
    if cp == 1 and ck == 0:
        return "cell", rest
    if ck == 1 and cp == 0:
        return "level", rest
    raise _Refuse(f"index {expr} is neither cell + const nor level + const")


def _outer_index(sdfg, body, edge, conn, inner_subset, repl) -> list:
    """Outer element index (per outer dimension) of body element ``conn[inner_subset]``."""
    outer = sdfg.arrays[edge.data.data]
    inner = body.arrays[conn]
    osub = edge.data.subset
    if any(symbolic.pystr_to_symbolic(str(o)) != 0 for o in inner.offset):
        raise _Refuse("inner offset")
    if len(inner.shape) == len(outer.shape):
        kept = list(range(len(outer.shape)))
    else:
        kept = [d for d, n in enumerate(osub.size()) if symbolic.pystr_to_symbolic(str(n)) != 1]
    if len(kept) != len(inner.shape) or len(inner_subset) != len(inner.shape):
        raise _Refuse("cannot match inner to outer dimensions")
    for j, d in enumerate(kept):
        diff = sympy.simplify(_subs(inner.strides[j], repl) - symbolic.pystr_to_symbolic(str(outer.strides[d])))
        if diff != 0:
            raise _Refuse("inner strides differ from outer strides")
    idx = []
    for d, (rb, _, _) in enumerate(osub.ndrange()):
        ex = _subs(rb, repl)
        if d in kept:
            ib, ie, _ = inner_subset[kept.index(d)]
            if symbolic.pystr_to_symbolic(str(ib)) != symbolic.pystr_to_symbolic(str(ie)):
                raise _Refuse("inner access is not a point")
            ex = ex + _subs(ib, repl)
        idx.append(sympy.expand(ex))
    return idx


def _map(state, scan):
    entry = state.entry_node(scan)
    if not isinstance(entry, nodes.MapEntry) or state.entry_node(entry) is not None:
        raise _Refuse("not directly in a top-level map")
    if len(entry.map.params) != 1:
        raise _Refuse("map has more than one parameter")
    exit_ = state.exit_node(entry)
    for ed in state.out_edges(entry):
        if ed.dst is not scan and not ed.data.is_empty():
            raise _Refuse("map feeds something else")
    for ed in state.in_edges(exit_):
        if ed.src is not scan:
            raise _Refuse("map writes something else")
    for ed in state.in_edges(scan) + state.out_edges(scan):
        if ed.data.is_empty() or ed.data.wcr is not None:
            raise _Refuse("empty or WCR memlet at the scan")
    return entry, exit_


def _init(state, sdfg, scan, conn, entry) -> list:
    """The constant-tasklet and transient that feed the init connector (refuses unless the value is +0)."""
    edges = [ed for ed in state.in_edges(scan) if ed.dst_conn == conn]
    if len(edges) != 1:
        raise _Refuse("init connector")
    path = state.memlet_path(edges[0])
    acc = path[0].src
    if not isinstance(acc, nodes.AccessNode) or not sdfg.arrays[acc.data].transient:
        raise _Refuse("init is not a transient")
    if sdfg.arrays[acc.data].total_size != 1:
        raise _Refuse("init is not one element")
    uses = [(n, st) for st in sdfg.states() for n in st.data_nodes() if n.data == acc.data]
    if len(uses) != 1 or state.out_degree(acc) != 1 or state.in_degree(acc) != 1:
        raise _Refuse("init transient used elsewhere")
    if any(acc.data in ed.data.free_symbols for ed in sdfg.all_interstate_edges()):
        raise _Refuse("init transient in control flow")
    t = state.in_edges(acc)[0].src
    if not isinstance(t, nodes.Tasklet) or state.out_degree(t) != 1:
        raise _Refuse("init is not a tasklet")
    if any(not ed.data.is_empty() or ed.src is not entry for ed in state.in_edges(t)):
        raise _Refuse("init tasklet has inputs")
    if t.language != dace.Language.Python or _constant(t.code.as_string, t) is None:
        raise _Refuse("init is not a constant")
    value = _constant(t.code.as_string, t)
    if value != 0 or math.copysign(1.0, value) < 0:
        raise _Refuse("init is not +0")
    return [t, acc]


def _constant(code: str, t):
    tree = ast.parse(code.strip())
    if len(tree.body) != 1 or not isinstance(tree.body[0], ast.Assign) or len(tree.body[0].targets) != 1:
        return None
    tgt = tree.body[0].targets[0]
    if not isinstance(tgt, ast.Name) or tgt.id not in t.out_connectors:
        return None
    v = tree.body[0].value
    sign = 1.0
    while isinstance(v, ast.UnaryOp) and isinstance(v.op, (ast.USub, ast.UAdd)):
        sign = -sign if isinstance(v.op, ast.USub) else sign
        v = v.operand
    if not isinstance(v, ast.Constant) or isinstance(v.value, bool) or not isinstance(v.value, (int, float)):
        return None
    return sign * float(v.value)


def _tasklet_value(t: nodes.Tasklet, ins: dict):
    """Value of tasklet ``t`` given its input values: only ``o = a + b`` and ``o = a``."""
    if t.language != dace.Language.Python or len(t.out_connectors) != 1:
        raise _Refuse("tasklet is not a one-output Python tasklet")
    tree = ast.parse(t.code.as_string.strip())
    if len(tree.body) != 1 or not isinstance(tree.body[0], ast.Assign) or len(tree.body[0].targets) != 1:
        raise _Refuse("tasklet is not one assignment")
    tgt, v = tree.body[0].targets[0], tree.body[0].value
    if not isinstance(tgt, ast.Name) or tgt.id not in t.out_connectors:
        raise _Refuse("tasklet target")
    if isinstance(v, ast.Name) and v.id in ins:
        return ins[v.id]
    if (isinstance(v, ast.BinOp) and isinstance(v.op, ast.Add) and isinstance(v.left, ast.Name)
            and isinstance(v.right, ast.Name) and v.left.id in ins and v.right.id in ins):
        return ("add", ins[v.left.id], ins[v.right.id])
    raise _Refuse(f"tasklet code '{t.code.as_string}' is not a sum of two inputs")


def _level(body: dace.SDFG, loop: LoopRegion, carry: str):
    """Interpret one level; returns (x, x subset, out, out subset) for ``s = s + x; out = s``."""
    blocks = ordered_blocks(loop)
    for blk in blocks:
        if not isinstance(blk, dace.SDFGState):
            raise _Refuse("loop holds a non-state block")
    for ed in loop.edges():
        if not ed.data.is_unconditional() or ed.data.assignments:
            raise _Refuse("conditional or assigning edge in the loop")
    if body.arrays[carry].total_size != 1:
        raise _Refuse("carry is not one element")
    written_anywhere = {n.data for blk in blocks for n in blk.data_nodes() if blk.in_degree(n) > 0}
    env: dict = {}
    writes = []
    reads = set()

    def key(data, sub):
        return data if data == carry else (data, str(sub))

    def read(data, sub):
        k = key(data, sub)
        if k in env:
            return env[k]
        if data == carry:
            return ("carry",)
        if not body.arrays[data].transient and data not in written_anywhere:
            if sub.num_elements() != 1:
                raise _Refuse("non-point read")
            reads.add(data)
            return ("x", data, sub)
        raise _Refuse(f"'{data}' read before it is written in the level")

    for st in blocks:
        vals: dict = {}
        for n in nx.topological_sort(st.nx):
            if isinstance(n, nodes.AccessNode):
                for ed in st.in_edges(n):
                    if ed.data.is_empty():
                        continue
                    m = ed.data
                    if isinstance(ed.src, nodes.AccessNode):
                        ssub = m.subset if m.data == ed.src.data else (m.other_subset or m.subset)
                        dsub = (m.other_subset or m.subset) if m.data == ed.src.data else m.subset
                        val = read(ed.src.data, ssub)
                    elif isinstance(ed.src, nodes.Tasklet):
                        dsub, val = m.subset, vals[ed.src]
                    else:
                        raise _Refuse("unexpected producer")
                    if dsub.num_elements() != 1 or m.wcr is not None:
                        raise _Refuse("non-point or WCR write")
                    env[key(n.data, dsub)] = val
                    if not body.arrays[n.data].transient:
                        writes.append((n.data, dsub, val))
            elif isinstance(n, nodes.Tasklet):
                ins = {}
                for ed in st.in_edges(n):
                    if ed.data.is_empty():
                        continue
                    if not isinstance(ed.src, nodes.AccessNode) or ed.dst_conn in ins:
                        raise _Refuse("tasklet input")
                    if ed.data.subset.num_elements() != 1:
                        raise _Refuse("non-point tasklet input")
                    ins[ed.dst_conn] = read(ed.src.data, ed.data.subset)
                vals[n] = _tasklet_value(n, ins)
                for ed in st.out_edges(n):
                    if not isinstance(ed.dst, nodes.AccessNode):
                        raise _Refuse("tasklet output")
            else:
                raise _Refuse(f"unexpected node {n}")
    final = env.get(carry)
    if not (isinstance(final, tuple) and final[0] == "add" and final[1] == ("carry",) and final[2][0] == "x"):
        raise _Refuse("the carry update is not carry + x")
    if len(writes) != 1 or writes[0][2] is not final or len(reads) != 1:
        raise _Refuse("expected one output of the new carry and one input")
    return final[2][1], list(final[2][2].ndrange()), writes[0][0], list(writes[0][1].ndrange())


__all__ = ["ScanToCumulative"]
