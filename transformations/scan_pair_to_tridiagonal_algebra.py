"""The values a scan body computes per level, as expression trees, and their comparison with Thomas' forms.

Helpers of :class:`sdfg_scan.transformations.ScanPairToTridiagonal` (private to it).

``level_values(body, loop, carries)`` interprets one level of a column body symbolically: every
value is a tree over *leaves*, ``("in", container, subset)`` (a point read of a body input that the
level does not write) and ``("carry", name)`` (a carry slot's value from the previous level), with
nodes ``("c", float)``, ``("neg", x)`` and the binary ``"+", "-", "*", "/"``. Tasklets may hold any
sequence of assignments of arithmetic expressions (gt4py emits one operation per tasklet).

Two comparisons:

- :func:`same_value`: algebraic identity (sympy, rational functions over the leaves);
- :func:`same_arithmetic`: the same IEEE operations up to rewrites that never change a rounded result
  for finite operands: commuted ``+``/``*`` operands, ``x - y == x + (-y)``, ``-(x - y) == y - x``,
  signs moved through ``*``/``/`` and out of sums of negated terms, ``0.0 - y == -y`` (the sign of a
  zero result aside).
"""

from __future__ import annotations

import ast
import random

import dace
import networkx as nx
import sympy
from dace.sdfg import nodes
from dace.sdfg.state import LoopRegion

from sdfg_scan.scan_structure import ordered_blocks


class Refuse(Exception):
    """The pattern does not match (the reason is the message)."""


_BINOPS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/"}


# -- interpretation of one level ------------------------------------------------------------------

def _expr(node: ast.expr, env: dict):
    if isinstance(node, ast.Name):
        if node.id not in env:
            raise Refuse(f"tasklet reads '{node.id}' which is no input")
        return env[node.id]
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        return ("c", float(node.value))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        v = _expr(node.operand, env)
        return ("neg", v) if isinstance(node.op, ast.USub) else v
    if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
        return (_BINOPS[type(node.op)], _expr(node.left, env), _expr(node.right, env))
    raise Refuse(f"unsupported expression '{ast.unparse(node)}'")


def tasklet_values(t: nodes.Tasklet, ins: dict) -> dict:
    """Values of ``t``'s output connectors given its input connectors' values (assignments only)."""
    if t.language != dace.Language.Python:
        raise Refuse(f"tasklet '{t.label}' is not Python")
    env = dict(ins)
    for stmt in ast.parse(t.code.as_string.strip()).body:
        if not isinstance(stmt, ast.Assign) or len(stmt.targets) != 1 or not isinstance(stmt.targets[0], ast.Name):
            raise Refuse(f"tasklet '{t.label}' holds a statement that is not a plain assignment")
        env[stmt.targets[0].id] = _expr(stmt.value, env)
    missing = [c for c in t.out_connectors if c not in env]
    if missing:
        raise Refuse(f"tasklet '{t.label}' does not assign {missing}")
    return {c: env[c] for c in t.out_connectors}


def level_values(body: dace.SDFG, loop: LoopRegion, carries: set[str]):
    """Interpret one level: ``(carry_values, writes, reads)``.

    ``carry_values[name]``: the carry's value at the end of the level; ``writes``: list of
    ``(container, subset, value)`` for non-transient writes; ``reads``: ``{leaf: subset}``.
    """
    blocks = ordered_blocks(loop)
    if any(not isinstance(b, dace.SDFGState) for b in blocks):
        raise Refuse("the loop holds a block that is not a state")
    if any(not e.data.is_unconditional() or e.data.assignments for e in loop.edges()):
        raise Refuse("conditional or assigning edge in the loop")
    written = {n.data for b in blocks for n in b.data_nodes() if b.in_degree(n) > 0}
    env: dict = {}
    writes: list = []
    reads: dict = {}

    def key(data, sub):
        return data if body.arrays[data].total_size == 1 and body.arrays[data].transient else (data, str(sub))

    def read(data, sub):
        if sub.num_elements() != 1:
            raise Refuse(f"read of '{data}' is not a point")
        k = key(data, sub)
        if k in env:
            return env[k]
        if data in carries:
            return ("carry", data)
        if not body.arrays[data].transient and data not in written:
            leaf = ("in", data, str(sub))
            reads[leaf] = sub
            return leaf
        raise Refuse(f"'{data}' is read before it is written in the level")

    for st in blocks:
        vals: dict = {}
        for n in nx.topological_sort(st.nx):
            if isinstance(n, nodes.AccessNode):
                for e in st.in_edges(n):
                    if e.data.is_empty():
                        continue
                    m = e.data
                    if m.wcr is not None:
                        raise Refuse("WCR write")
                    if isinstance(e.src, nodes.AccessNode):
                        own = m.data == e.src.data
                        ssub = m.subset if own else (m.other_subset or m.subset)
                        dsub = (m.other_subset or m.subset) if own else m.subset
                        val = read(e.src.data, ssub)
                    elif isinstance(e.src, nodes.Tasklet):
                        dsub, val = m.subset, vals[(e.src, e.src_conn)]
                    else:
                        raise Refuse(f"unexpected producer {e.src}")
                    if dsub.num_elements() != 1:
                        raise Refuse("write is not a point")
                    env[key(n.data, dsub)] = val
                    if not body.arrays[n.data].transient:
                        writes.append((n.data, dsub, val))
            elif isinstance(n, nodes.Tasklet):
                ins = {}
                for e in st.in_edges(n):
                    if e.data.is_empty():
                        continue
                    if not isinstance(e.src, nodes.AccessNode) or e.dst_conn in ins:
                        raise Refuse(f"tasklet '{n.label}' input")
                    ins[e.dst_conn] = read(e.src.data, e.data.subset)
                for c, v in tasklet_values(n, ins).items():
                    vals[(n, c)] = v
                if any(not isinstance(e.dst, nodes.AccessNode) for e in st.out_edges(n)):
                    raise Refuse(f"tasklet '{n.label}' output")
            else:
                raise Refuse(f"unexpected node {n} in the level")
    return {c: env.get(c, ("carry", c)) for c in carries}, writes, reads


def leaves(tree, kind: str) -> set:
    if tree[0] == kind:
        return {tree}
    if tree[0] in ("c", "in", "carry"):
        return set()
    return set().union(*(leaves(t, kind) for t in tree[1:]))


# -- Thomas' forms --------------------------------------------------------------------------------

def neg(x):
    return ("neg", x)


def thomas_forms(a, b, c, d, u, v, s: int):
    """Thomas' new ``(u, v)`` given the previous ones, with ``u`` holding ``s * c'`` and ``v`` holding ``d'``.

    As the ``thomas`` expansion computes them: ``w = 1 / (b - a*c'[k-1]); c' = c*w; d' = (d - a*d'[k-1])*w``.
    """
    cpm = u if s == 1 else neg(u)
    w = ("/", ("c", 1.0), ("-", b, ("*", a, cpm)))
    cp = ("*", c, w)
    return (cp if s == 1 else neg(cp)), ("*", ("-", d, ("*", a, v)), w)


def factor_forms(a, b, c, u):
    """Thomas' factorisation as :class:`~sdfg_scan.TridiagonalFactor` computes it, ``u`` holding ``c'``:
    the new ``(w, c')`` given the previous ``c'``: ``w = 1 / (b - a*c'[k-1]); c' = c*w``."""
    w = ("/", ("c", 1.0), ("-", b, ("*", a, u)))
    return w, ("*", c, w)


def substitution_form(a, d, w, v):
    """The forward substitution of a pre-factored solve, ``v`` holding ``d'``: ``d' = (d - a*d'[k-1]) * w``."""
    return ("*", ("-", d, ("*", a, v)), w)


def back_form(cp_in, dp_in, x, s: int):
    """Thomas' back substitution ``x = d' - c' * x[k+1]`` with ``cp_in`` holding ``s * c'``."""
    return ("-", dp_in, ("*", cp_in if s == 1 else neg(cp_in), x))


# -- comparisons ----------------------------------------------------------------------------------

def _sym(tree, names: dict):
    op = tree[0]
    if op == "c":
        return sympy.Rational(tree[1])
    if op in ("in", "carry"):
        return names.setdefault(tree, sympy.Symbol(f"v{len(names)}"))
    if op == "neg":
        return -_sym(tree[1], names)
    x, y = _sym(tree[1], names), _sym(tree[2], names)
    return {"+": x + y, "-": x - y, "*": x * y, "/": x / y}[op]


def _num(tree, point: dict):
    op = tree[0]
    if op == "c":
        return tree[1]
    if op in ("in", "carry"):
        return point.setdefault(tree, random.Random(hash(tree) & 0xFFFF).uniform(0.5, 2.0))
    if op == "neg":
        return -_num(tree[1], point)
    x, y = _num(tree[1], point), _num(tree[2], point)
    return {"+": x + y, "-": x - y, "*": x * y, "/": x / y}[op] if (op != "/" or y != 0) else float("nan")


def same_value(x, y) -> bool:
    """Whether trees ``x`` and ``y`` are the same rational function of their leaves."""
    point: dict = {}
    nx_, ny_ = _num(x, point), _num(y, point)  # cheap filter before sympy
    if not abs(nx_ - ny_) <= 1e-9 * max(1.0, abs(nx_)):
        return False
    names: dict = {}
    return sympy.cancel(sympy.together(_sym(x, names) - _sym(y, names))) == 0


def _canon(t):
    op = t[0]
    if op in ("c", "in", "carry"):
        return t
    if op == "neg":
        x = _canon(t[1])
        if x[0] == "neg":
            return x[1]
        return ("c", -x[1]) if x[0] == "c" else ("neg", x)
    x, y = _canon(t[1]), _canon(t[2])
    if op == "-":
        if x == ("c", 0.0):
            return _canon(neg(y))
        op, y = "+", _canon(neg(y))
    sign = 1
    if op in ("*", "/"):
        for i, z in enumerate((x, y)):
            if z[0] == "neg":
                sign, z = -sign, z[1]
            x, y = (z, y) if i == 0 else (x, z)
        if op == "*" and repr(y) < repr(x):
            x, y = y, x
    else:  # "+": sort, and keep at most one negated term (the second)
        if x[0] == "neg" and y[0] == "neg":
            sign, x, y = -1, x[1], y[1]
        if x[0] == "neg":
            x, y = y, x
        if y[0] != "neg" and repr(y) < repr(x):
            x, y = y, x
        if y[0] == "neg" and repr(y[1]) < repr(x):  # x - y == -(y - x)
            sign, x, y = -sign, y[1], neg(x)
    r = (op, x, y)
    return r if sign == 1 else ("neg", r)


def same_arithmetic(x, y) -> bool:
    """Whether ``x`` and ``y`` perform the same IEEE operations up to rounding-neutral rewrites."""
    return _canon(x) == _canon(y)


__all__ = ["Refuse", "back_form", "factor_forms", "leaves", "level_values", "same_arithmetic", "same_value",
           "substitution_form", "tasklet_values", "thomas_forms"]
