"""Builds the column SDFG (``Scan.body``) of a general scan written as a Python body function.

The body function has the signature of :func:`sdfg_scan.reference.scan`'s ``f``::

    def body(c, x, k):            # c: tuple of carry slots, x: per-level inputs, k: level index
        a = c[0] * x[0] + x[1, -1]      # x[i] = input i at level k; x[i, o] = input i at k + o
        return (a,), (a * 2,)           # (new carry tuple, per-level outputs tuple)

Allowed: assignments to local names, tuple unpacking of ``c``, arithmetic and comparisons,
conditional expressions, ``np.where(c, a, b)``, ``np.minimum/maximum``, ``np.exp/log/sqrt/abs/floor/ceil``
(or ``math.*``), one final ``return``; ``%`` and ``//`` are refused (C++'s truncate toward zero). The body
becomes one tasklet per level, typed as NumPy types it (:mod:`sdfg_scan.expansions.scan_body_types`: Python numbers beside float32
values are float32, ``/`` of integers is true division); out-of-column offset reads return ``fill`` (the
rule of :class:`sdfg_scan.reference.LevelInputs`).

Column SDFG built (the structure :mod:`sdfg_scan.scan_structure` recognises)::

    entry:   init connector -> carry  (or constant tasklet -> carry)
    loop k over [0, _nk) (forward) or _nk-1 .. 0 (backward):
      compute: tasklet(carries, inputs at k / whole column for offsets) -> new carries, ys[k];
               emitted carry outputs (inclusive: new; exclusive / include_initial: before)
      update:  new carry -> carry
    exit:    final carries -> final outputs; include_initial's last slot
"""

from __future__ import annotations

import ast
import inspect
import textwrap
from dataclasses import dataclass, field

import dace
import numpy as np
from dace.sdfg.state import LoopRegion

from sdfg_scan.expansions.scan_body_types import numpy_types
from sdfg_scan.reference import EMIT_MODES

LEVELS = "_nk"
"""Level-count symbol of bodies built by :func:`build_body` (``Scan(columns="map")``)."""


def stride_symbol(connector: str) -> str:
    """Symbol of the scan-axis stride of a per-level connector in a ``columns="map"`` body."""
    return f"_st_{connector}"


_FUNCS = {"exp": "math.exp", "log": "math.log", "sqrt": "math.sqrt", "abs": "abs", "fabs": "abs",
          "sin": "math.sin", "cos": "math.cos", "tanh": "math.tanh",
          "min": "min", "max": "max", "pow": "math.pow", "power": "math.pow",
          # C's own floor/ceil: DaCe 2.0.0a10 lowers ``math.floor`` / ``np.floor`` / ``np.ceil`` to
          # ``dace::math::floor``/``ceil``, which it declares for its typeless NaN only (no float or double
          # overload: the program would not compile); a bare name reaches the generated C++ as written
          "floor": "floor", "ceil": "ceil"}
K = "_k"
_OPS = {ast.Mod: "%", ast.FloorDiv: "//"}


@dataclass
class BodyCode:
    """The translated body: tasklet code and which input reads it needs."""

    code: str
    ncarry: int
    ny: int
    at_level: set[int] = field(default_factory=set)
    offsets: set[int] = field(default_factory=set)


def _err(msg: str) -> ValueError:
    return ValueError(f"sdfg_scan.scan: {msg}")


class BodyExpressions(ast.NodeTransformer):
    """Rewrites the expressions of a body: inputs and carry slots to tasklet connectors, NumPy calls to
    tasklet code. ``api`` and ``what`` name the caller in errors (``sdfg_scan.<api>: ... in <what>``)."""

    def __init__(self, cname, xname, kname, ninputs, fill, dtypes, constants=None, api="scan", what="a scan body"):
        self.c, self.x, self.k, self.n, self.fill, self.dtypes = cname, xname, kname, ninputs, fill, dtypes
        self.constants = constants or {}
        self.at_level, self.offsets = set(), set()
        self.api, self.what = api, what

    def _err(self, msg: str) -> ValueError:
        return ValueError(f"sdfg_scan.{self.api}: {msg}")

    def _index(self, node):
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return node.value, 0
        if isinstance(node, ast.Tuple) and len(node.elts) == 2:
            i, o = node.elts
            off = ast.literal_eval(o) if not isinstance(o, ast.Constant) else o.value
            if isinstance(i, ast.Constant) and isinstance(i.value, int) and isinstance(off, int):
                return i.value, off
        raise self._err(f"inputs are read as x[i] or x[i, offset] with integer constants, got x[{ast.unparse(node)}]")

    def visit_Subscript(self, node):
        if isinstance(node.value, ast.Name) and node.value.id == self.x:
            i, off = self._index(node.slice)
            if not 0 <= i < self.n:
                raise self._err(f"x[{i}] is out of range; the scan has {self.n} input(s)")
            if off == 0:
                self.at_level.add(i)
                return ast.Name(f"_sc_x{i}", ast.Load())
            self.offsets.add(i)
            lvl = f"({K} + ({off}))"
            fill = f"dace.{self.dtypes[i].to_string()}({self.fill!r})" if self.dtypes else repr(self.fill)
            return ast.parse(f"(_sc_xf{i}[{lvl}] if ({lvl} >= 0 and {lvl} < {LEVELS}) else {fill})",
                             mode="eval").body
        if isinstance(node.value, ast.Name) and node.value.id == self.c:
            if isinstance(node.slice, ast.Constant) and isinstance(node.slice.value, int):
                return ast.Name(f"_sc_c{node.slice.value}", ast.Load())
            raise self._err(f"carry slots are read as c[i] with an integer constant, got {ast.unparse(node)}")
        return self.generic_visit(node)

    def visit_Name(self, node):
        if node.id == self.k:
            return ast.Name(K, ast.Load())
        if node.id in (self.c, self.x):
            raise self._err(f"'{node.id}' may only be indexed (c[i], x[i], x[i, offset]) or unpacked")
        if node.id in self.constants:
            return ast.Constant(self.constants[node.id])
        return node

    def visit_Call(self, node):
        text = ast.unparse(node)   # as the user wrote it (the arguments are translated below)
        self.generic_visit(node)
        f = node.func
        name = f.attr if isinstance(f, ast.Attribute) else (f.id if isinstance(f, ast.Name) else None)
        if name == "where" and len(node.args) == 3:
            return ast.IfExp(node.args[0], node.args[1], node.args[2])
        if name in ("minimum", "maximum") and len(node.args) == 2:
            # NumPy's bits on x86-64 (reference_levels.combine's rule): NaN propagates and the first NaN
            # stays, a tie (-0.0 against 0.0) takes the second operand (C's fmin/fmax and std::min/max differ)
            a, b = (f"({ast.unparse(x)})" for x in node.args)
            cmp = "<" if name == "minimum" else ">"
            return ast.parse(f"({a} if ({a} {cmp} {b} or {a} != {a}) else {b})", mode="eval").body
        if name in _FUNCS:
            return ast.Call(ast.parse(_FUNCS[name], mode="eval").body, node.args, [])
        raise self._err(f"call '{text}' is not supported in {self.what}; use arithmetic, np.where, "
                   f"or one of {sorted(_FUNCS)}")


def numeric_free_names(f) -> dict:
    """Numbers the body reads from its module or closure (``GRAV = 9.81``): inlined as constants."""
    try:
        cv = inspect.getclosurevars(f)
    except TypeError:
        return {}
    names = {**cv.globals, **cv.nonlocals}
    return {k: (v.item() if hasattr(v, "item") else v) for k, v in names.items()
            if isinstance(v, (bool, int, float, np.number))}


def _as_tuple(node) -> list:
    if isinstance(node, (ast.Tuple, ast.List)):
        return list(node.elts)
    return [node]


class _SplitComparisons(ast.NodeTransformer):
    """``a < b < c`` as ``(a < b) and (b < c)``: C++ reads the chain as ``(a < b) < c``."""

    def visit_Compare(self, node):
        self.generic_visit(node)
        if len(node.ops) == 1:
            return node
        operands = [node.left, *node.comparators]
        return ast.BoolOp(ast.And(), [ast.Compare(operands[i], [op], [operands[i + 1]])
                                      for i, op in enumerate(node.ops)])


def _single_assignments(stmt: ast.stmt, uid: int) -> list[ast.stmt]:
    """``stmt`` as assignments of one local name each (what a tasklet holds): ``a, b = p, q`` becomes
    ``t0 = p; t1 = q; a = t0; b = t1`` (both values are computed first, as in Python)."""
    if isinstance(stmt, ast.Assign):
        names = [t.id for t in _as_tuple(stmt.targets[0]) if isinstance(t, ast.Name)]
        if len(stmt.targets) == 1 and isinstance(stmt.targets[0], (ast.Tuple, ast.List)) \
                and isinstance(stmt.value, (ast.Tuple, ast.List)) \
                and len(names) == len(stmt.targets[0].elts) == len(stmt.value.elts):
            temps = [f"_sc_t{uid}_{i}" for i in range(len(names))]
            out: list[ast.stmt] = [ast.Assign([ast.Name(t, ast.Store())], v, lineno=0)
                                   for t, v in zip(temps, stmt.value.elts, strict=True)]
            return out + [ast.Assign([ast.Name(n, ast.Store())], ast.Name(t, ast.Load()), lineno=0)
                          for n, t in zip(names, temps, strict=True)]
        targets = stmt.targets
    elif isinstance(stmt, (ast.AugAssign, ast.AnnAssign)):
        targets = [stmt.target]
    else:
        targets = []
    if len(targets) != 1 or not isinstance(targets[0], ast.Name):
        raise _err(f"statement '{ast.unparse(stmt)}' is not supported; assign one local name per statement "
                   "('a = ...'), or a tuple of names from a tuple of values ('a, b = p, q')")
    return [stmt]


def translate(f, ncarry: int, ninputs: int, fill, dtypes: list | None = None) -> BodyCode:
    """Translate the body function ``f(c, x, k)`` into tasklet code (see the module docstring).

    ``dtypes`` (one per input) types the ``fill`` literal of offset reads (no promotion to double).
    """
    try:
        src = textwrap.dedent(inspect.getsource(f))
    except (OSError, TypeError) as e:
        raise _err(f"cannot read the source of the body {f!r} ({e}); define it with 'def' in a file") from None
    tree = ast.parse(src)
    fdef = next((n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.Lambda))), None)
    if not isinstance(fdef, ast.FunctionDef):
        raise _err("the body must be a function defined with 'def body(c, x, k): ...'")
    params = [a.arg for a in fdef.args.args]
    if len(params) != 3:
        raise _err(f"the body takes (carry, x, k), got parameters {params}")
    cname, xname, kname = params
    for node in ast.walk(fdef):
        op = node.op if isinstance(node, (ast.BinOp, ast.AugAssign)) else None
        if isinstance(op, (ast.Mod, ast.FloorDiv)):
            raise _err(f"'{ast.unparse(node)}' is not supported in a scan body: NumPy's '{_OPS[type(op)]}' rounds "
                       "toward minus infinity (a remainder takes the sign of the divisor) and takes floats, C++'s "
                       "does neither; write it with + - * / and comparisons")
    tr = BodyExpressions(cname, xname, kname, ninputs, fill, dtypes, numeric_free_names(f))

    def cxx(node) -> str:   # a statement or expression of the body as tasklet code
        return ast.unparse(_SplitComparisons().visit(tr.visit(node)))

    lines, ret = [], None
    for stmt in fdef.body:
        if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant):
            continue  # docstring
        if isinstance(stmt, ast.Return):
            ret = stmt
            break
        if isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Name) and stmt.value.id == cname:
            targets = _as_tuple(stmt.targets[0])
            if len(targets) != ncarry:
                raise _err(f"unpacking the carry into {len(targets)} names, but it has {ncarry} slot(s)")
            for i, t in enumerate(targets):
                lines.append(f"{ast.unparse(t)} = _sc_c{i}")
            continue
        if not isinstance(stmt, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
            raise _err(f"statement '{ast.unparse(stmt)}' is not supported; use assignments and one return")
        lines += [cxx(one) for one in _single_assignments(stmt, len(lines))]
    if ret is None or not isinstance(ret.value, ast.Tuple) or len(ret.value.elts) != 2:
        raise _err("the body must end with 'return new_carry, ys' (two tuples)")
    new, ys = (_as_tuple(e) for e in ret.value.elts)
    if len(new) != ncarry:
        raise _err(f"the body returns {len(new)} carry value(s), expected {ncarry} (one per init)")
    for i, e in enumerate(new):
        lines.append(f"_sc_n{i} = {cxx(e)}")
    for i, e in enumerate(ys):
        lines.append(f"_sc_y{i} = {cxx(e)}")
    return BodyCode("\n".join(lines), ncarry, len(ys), tr.at_level, tr.offsets)


def build_body(name: str, code: BodyCode, inputs: list[dace.typeclass], inits: list, carry_dtypes: list,
               y_dtypes: list, reverse: bool, emit: str, final: bool,
               emitted: set[int] | None = None) -> tuple[dace.SDFG, list[str], list[str]]:
    """The column SDFG; returns ``(body, input connectors, output connectors)``.

    ``inits[j]`` is a dtype (connector ``init{j}``) or a Python number (constant). Connectors:
    ``xs{i}`` (per level), ``init{j}``, ``carry{j}`` (per level, ``_nk + 1`` for include_initial; only
    the slots in ``emitted``, all by default), ``ys{i}`` (per level), ``final{j}`` (scalars, when ``final``).
    """
    emitted = set(range(len(carry_dtypes))) if emitted is None else set(emitted)
    if emit not in EMIT_MODES:
        raise _err(f"unknown emit mode '{emit}'; expected one of {EMIT_MODES}")
    s = dace.SDFG(name)
    s.using_explicit_control_flow = True
    s.add_symbol(LEVELS, dace.int64)
    nk = dace.symbol(LEVELS, dace.int64)
    ins, outs = [], []

    def per_level(conn, dtype, n):
        s.add_symbol(stride_symbol(conn), dace.int64)
        s.add_array(conn, [n], dtype, strides=[dace.symbol(stride_symbol(conn), dace.int64)])

    for i, dt in enumerate(inputs):
        per_level(f"xs{i}", dt, nk)
        ins.append(f"xs{i}")
    for j, dt in enumerate(carry_dtypes):
        s.add_scalar(f"_c{j}", dt, transient=True)
        s.add_scalar(f"_n{j}", dt, transient=True)
        if j in emitted:
            per_level(f"carry{j}", dt, nk + 1 if emit == "include_initial" else nk)
            outs.append(f"carry{j}")
        if not isinstance(inits[j], (int, float, bool)):
            s.add_scalar(f"init{j}", dt)
            ins.append(f"init{j}")
        if final:
            s.add_scalar(f"final{j}", dt)
            outs.append(f"final{j}")
    for i, dt in enumerate(y_dtypes):
        per_level(f"ys{i}", dt, nk)
        outs.append(f"ys{i}")

    entry = s.add_state("entry", is_start_block=True)
    for j, v in enumerate(inits):
        if isinstance(v, (int, float, bool)):
            t = entry.add_tasklet(f"init{j}", {}, {"_o": None}, f"_o = {v!r}")
            entry.add_edge(t, "_o", entry.add_write(f"_c{j}"), None, dace.Memlet(f"_c{j}[0]"))
        else:
            entry.add_nedge(entry.add_read(f"init{j}"), entry.add_write(f"_c{j}"), dace.Memlet(f"init{j}[0]"))
    if reverse:
        loop = LoopRegion("levels", f"{K} >= 0", K, f"{K} = {LEVELS} - 1", f"{K} = {K} - 1")
    else:
        loop = LoopRegion("levels", f"{K} < {LEVELS}", K, f"{K} = 0", f"{K} = {K} + 1")
    s.add_node(loop)
    s.add_edge(entry, loop, dace.InterstateEdge())
    comp = loop.add_state("compute", is_start_block=True)
    t_in = {f"_sc_c{j}": None for j in range(code.ncarry)}
    t_in.update({f"_sc_x{i}": None for i in sorted(code.at_level)})
    t_in.update({f"_sc_xf{i}": None for i in sorted(code.offsets)})
    t_out = {f"_sc_n{j}": None for j in range(code.ncarry)}
    t_out.update({f"_sc_y{i}": None for i in range(code.ny)})
    types = {f"_sc_c{j}": carry_dtypes[j] for j in range(code.ncarry)}
    types.update({f"_sc_x{i}": dt for i, dt in enumerate(inputs)} | {f"_sc_xf{i}": dt for i, dt in enumerate(inputs)})
    tk = comp.add_tasklet("level", t_in, t_out, numpy_types(code.code, types, K))
    creads = [comp.add_read(f"_c{j}") for j in range(code.ncarry)]
    for j, r in enumerate(creads):
        comp.add_edge(r, None, tk, f"_sc_c{j}", dace.Memlet(f"_c{j}[0]"))
    xreads = {i: comp.add_read(f"xs{i}") for i in sorted(code.at_level | code.offsets)}
    for i in sorted(code.at_level):
        comp.add_edge(xreads[i], None, tk, f"_sc_x{i}", dace.Memlet(f"xs{i}[{K}]"))
    for i in sorted(code.offsets):
        comp.add_edge(xreads[i], None, tk, f"_sc_xf{i}", dace.Memlet(f"xs{i}[0:{LEVELS}]", dynamic=True))
    for j in range(code.ncarry):
        nw = comp.add_write(f"_n{j}")
        comp.add_edge(tk, f"_sc_n{j}", nw, None, dace.Memlet(f"_n{j}[0]"))
        if j not in emitted:
            continue
        if emit == "inclusive":
            comp.add_nedge(nw, comp.add_write(f"carry{j}"), dace.Memlet(f"_n{j}[0] -> [{K}]"))
        else:
            slot = f"{K} + 1" if (emit == "include_initial" and reverse) else K
            comp.add_nedge(creads[j], comp.add_write(f"carry{j}"), dace.Memlet(f"_c{j}[0] -> [{slot}]"))
    for i in range(code.ny):
        comp.add_edge(tk, f"_sc_y{i}", comp.add_write(f"ys{i}"), None, dace.Memlet(f"ys{i}[{K}]"))
    upd = loop.add_state("update")
    loop.add_edge(comp, upd, dace.InterstateEdge())
    for j in range(code.ncarry):
        upd.add_nedge(upd.add_read(f"_n{j}"), upd.add_write(f"_c{j}"), dace.Memlet(f"_n{j}[0]"))
    if final or emit == "include_initial":
        ex = s.add_state("exit")
        s.add_edge(loop, ex, dace.InterstateEdge())
        for j in range(code.ncarry):
            if not final and j not in emitted:
                continue
            r = ex.add_read(f"_c{j}")
            if final:
                ex.add_nedge(r, ex.add_write(f"final{j}"), dace.Memlet(f"_c{j}[0]"))
            if emit == "include_initial" and j in emitted:
                slot = "0" if reverse else LEVELS
                ex.add_nedge(r, ex.add_write(f"carry{j}"), dace.Memlet(f"_c{j}[0] -> [{slot}]"))
    return s, ins, outs


__all__ = ["BodyCode", "BodyExpressions", "build_body", "numeric_free_names", "translate"]
