"""The body of a ``Scan`` as C++ for B cells at a time: the translator behind ``scan_blocked.py``.

A lifted gt4py scan body (:mod:`sdfg_scan.scan_structure`: entry states, one ``LoopRegion`` over the
levels, exit states; ``ConditionalBlock`` s and nested SDFGs inside) is walked block by block and
written out as straight-line C++ per cell, the way DaCe's CPU code generator would write it:

- every Python tasklet goes through DaCe's own ``DaCeKeywordRemover`` (``math.*`` -> ``dace::math::``,
  constant integer powers -> ``ipow``) and ``CPPUnparser`` with the connector types DaCe infers, so the
  arithmetic is the same expression tree as the original program's;
- scalars become C++ locals (one per cell) or ``[B]`` block arrays where they live across the
  entry/loop/exit parts (the carries); arrays become pointer arithmetic from the node's per-cell
  subsets and the body's strides; nested SDFGs are inlined (their containers renamed, their symbols
  declared from the symbol mapping);
- a ``ConditionalBlock`` becomes a per-cell ``if`` / ``else if`` (``if_convert=False``), or, with
  ``if_convert=True`` and when its branches only assign per-cell values, every branch is computed into
  temporaries and the results are selected (``c ? a : b``), which lets a compiler vectorise the loop
  over cells with masks. An element of memory written in every branch (an ``else`` included: the
  element is written whatever the condition) is selected like a value and written once after the
  block; a branch that writes memory the other branches do not keeps the ``if`` (the correct
  fallback: no address is read or written that the program would not touch), unless ``read_back`` (pointwise
  maps) and the body read that element unconditionally before: then it is selected against its old value.

Symbols assigned on the unconditional interstate edges of a chain become C++ locals. Anything else
(loops inside the body, conditional interstate edges, streams, views,
write-conflict resolution, non-Python tasklets, transient arrays of symbolic size) raises
:class:`Unsupported` with the reason; the expansion's ``applies`` reports it and selection falls back.
"""

from __future__ import annotations

import ast
import copy
import io
import itertools
import re

import dace
from dace import data as dt
from dace import subsets, symbolic
from dace.codegen import cppunparse
from dace.codegen.targets.cpp import DaCeKeywordRemover, sym2cpp
from dace.properties import CodeBlock
from dace.sdfg import nodes
from dace.sdfg.state import ConditionalBlock, ControlFlowRegion, LoopRegion
from dace.sdfg.utils import dfs_topological_sort

LANE = "_l"          # the cell index inside a block
LEVEL = "_lev"       # the level loop variable


def storage_type(ctype: str, if_convert: bool) -> str:
    """The C++ type a value of ``ctype`` is kept in. If-converted bodies keep bools as bytes (0/1,
    converted exactly both ways): a select between two bytes vectorises where one between two masks
    (GCC's vector bools) does not."""
    return "unsigned char" if if_convert and ctype == "bool" else ctype


def _base(text: str) -> str:
    """The variable of an lvalue (``x`` of ``x[i]``)."""
    return text.split("[", 1)[0]


class Unsupported(Exception):
    """The body holds a construct the translator does not generate (the message says which)."""


class _Fallback(Exception):
    """An if-converted branch writes memory: generate a plain ``if`` instead."""


class _Trap(_Fallback):
    """An if-converted block would divide by a value its condition may have guarded (``if m > 0: 100 // m``):
    integer division or remainder by zero traps (SIGFPE) in a lane whose branch was not taken. The outermost
    if-converted block becomes a plain ``if``, so no enclosing condition is computed past either."""


class _RegisterElement(ast.NodeTransformer):
    """``t[0]`` (or ``t[0, 0]``) -> ``t`` for the names in ``registers``; another index is unsupported."""

    def __init__(self, registers: set[str]):
        self.registers = registers

    def visit_Subscript(self, node):
        self.generic_visit(node)
        if isinstance(node.value, ast.Name) and node.value.id in self.registers:
            idx = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
            if not all(isinstance(i, ast.Constant) and i.value == 0 for i in idx):
                raise Unsupported(f"a condition reads '{ast.unparse(node)}' of a one-element container")
            return ast.copy_location(ast.Name(id=node.value.id, ctx=ast.Load()), node)
        return node


def _used_outside(sdfg: dace.SDFG, branch: ControlFlowRegion, sym: str) -> bool:
    """Whether symbol ``sym`` is read anywhere in ``sdfg`` (its own control flow, not nested SDFGs' insides:
    their symbol mappings are read by the states holding them) outside the region ``branch``. A loop whose
    variable is ``sym`` sets it anew (a level ``PeelBoundaryLevels`` peeled into a branch sets the level
    variable there; the level loop after it starts from its own init): reads in it do not count."""
    inside = {id(r) for r in branch.all_control_flow_regions()}
    for cfg in sdfg.all_control_flow_regions():
        if isinstance(cfg, LoopRegion) and cfg.loop_variable == sym:
            inside |= {id(r) for r in cfg.all_control_flow_regions()}
    for cfg in sdfg.all_control_flow_regions():
        if id(cfg) in inside:
            continue
        codes = []
        if isinstance(cfg, ConditionalBlock):
            codes = [c for c, _ in cfg.branches if c is not None]
        elif isinstance(cfg, LoopRegion):
            codes = [c for c in (cfg.loop_condition, cfg.init_statement, cfg.update_statement) if c is not None]
        if any(sym in {str(f) for f in c.get_free_symbols()} for c in codes):
            return True
        if any(sym in e.data.free_symbols for e in cfg.edges()):
            return True
        if any(isinstance(b, dace.SDFGState) and sym in b.free_symbols for b in cfg.nodes()):
            return True
    return False


def static_condition(code) -> bool | None:
    """The value of a branch condition that is a literal (``True``, ``False``, ``0``, ``1``: what
    ``FoldConstantConditions`` writes), else None."""
    if code is None or code.language != dace.dtypes.Language.Python:
        return None
    tree = condition_expression(code)
    if isinstance(tree, ast.Constant) and type(tree.value) in (bool, int):
        return bool(tree.value)
    return None


def live_branches(block: ConditionalBlock) -> list:
    """The branches of ``block`` that can run, in order: those whose condition is a literal false are left
    out, and the first one whose condition is a literal true ends the list as its ``else`` (condition None)."""
    out = []
    for c, br in block.branches:
        value = static_condition(c)
        if value is False:
            continue
        if c is None or value is True:
            out.append((None, br))
            break
        out.append((c, br))
    return out


def _code_tree(code):
    """The AST of a ``CodeBlock`` holding one expression (a condition or an edge's assignment)."""
    return code.code[0] if isinstance(code.code, list) else code.code


def condition_expression(code) -> ast.expr:
    """The expression of a Python ``CodeBlock`` holding one (a branch condition), without its statement."""
    tree = _code_tree(code)
    return tree.value if isinstance(tree, ast.Expr) else tree


def _dtypes(sdfg: dace.SDFG) -> dict:
    """name -> dtype of every container and symbol of ``sdfg`` (what :func:`_may_trap` reads)."""
    return {**{n: d.dtype for n, d in sdfg.arrays.items()}, **sdfg.symbols}


def _may_trap(tree, types: dict) -> bool:
    """Whether ``tree`` divides (``//``, ``%``, or ``/`` by an integer) by anything but a non-zero constant.
    ``types``: name -> dtype of the operands known here (an integer-typed name divides as an integer)."""
    for n in ast.walk(tree):
        if not isinstance(n, ast.BinOp) or not isinstance(n.op, (ast.Div, ast.FloorDiv, ast.Mod)):
            continue
        r = n.right
        if isinstance(r, ast.Constant) and isinstance(r.value, (int, float)) and r.value != 0:
            continue
        if isinstance(n.op, ast.Div):
            names = [x.id for x in ast.walk(r) if isinstance(x, ast.Name)]
            if not names or not all(x in types and types[x] in dace.dtypes.INTEGER_TYPES for x in names):
                continue   # a floating-point division: inf or NaN in an unselected lane, no trap
        return True
    return False


class Ref:
    """A container as C++: a scalar lvalue (``lvalue``) or a pointer (``base``) with element strides."""

    def __init__(self, ctype: str, lvalue: str | None = None, base: str | None = None, strides=(),
                 memory: bool = False):
        self.ctype, self.lvalue, self.base, self.strides, self.memory = ctype, lvalue, base, list(strides), memory

    def at(self, index: list[str]) -> str:
        if self.lvalue is not None:
            return self.lvalue
        if not index:
            return f"{self.base}[0]"
        flat = " + ".join(f"({i}) * ({s})" for i, s in zip(index, self.strides, strict=True))
        return f"{self.base}[{flat}]"


class Scope:
    """Names of one SDFG level: containers -> :class:`Ref`, symbols -> C++ names."""

    def __init__(self, sdfg: dace.SDFG, data: dict[str, Ref], syms: dict[str, str]):
        self.sdfg, self.data, self.syms = sdfg, data, syms

    def expr(self, e) -> str:
        """A symbolic expression of this scope in C++."""
        s = symbolic.pystr_to_symbolic(str(e))
        rep = {f: dace.symbol(self.syms[str(f)]) for f in s.free_symbols if str(f) in self.syms}
        missing = {str(f) for f in s.free_symbols} - set(self.syms)
        if missing:
            raise Unsupported(f"symbol(s) {sorted(missing)} are not defined in the body")
        return sym2cpp(s.subs(rep))

    def index(self, subset) -> list[str]:
        return [self.expr(b) for b, _, _ in subset.ndrange()]


class Writer:
    """C++ lines with indentation; ``fresh`` makes unique names."""

    def __init__(self):
        self.lines: list[str] = []
        self.depth = 0
        self._ids = itertools.count()

    def __call__(self, line: str) -> None:
        self.lines.append("    " * self.depth + line)

    def fresh(self, stem: str) -> str:
        return f"_{stem}{next(self._ids)}"


def _chain_assigning(cfg: ControlFlowRegion) -> list:
    """``(block, symbol assignments on the edge after it)`` in order; a chain of unconditional edges."""
    out, b, seen = [], cfg.start_block, set()
    while b is not None:
        if b in seen:
            raise Unsupported(f"the control flow of '{cfg.label}' has a cycle outside a LoopRegion")
        seen.add(b)
        edges = cfg.out_edges(b)
        if len(edges) > 1:
            raise Unsupported(f"block '{b.label}' branches through interstate edges")
        if edges and not edges[0].data.is_unconditional():
            raise Unsupported(f"the edge after '{b.label}' is conditional")
        out.append((b, dict(edges[0].data.assignments) if edges else {}))
        b = edges[0].dst if edges else None
    if len(out) != len(cfg.nodes()):
        raise Unsupported(f"'{cfg.label}' is not a chain of blocks")
    return out


class _Rename(ast.NodeTransformer):
    """Names -> C++ text (symbols, scalar containers), ``conn[i, j]`` -> flat pointer accesses."""

    def __init__(self, names: dict[str, str], arrays: dict[str, tuple[Ref, Scope]], scope: Scope):
        self.names, self.arrays, self.scope = names, arrays, scope

    def visit_Subscript(self, node):
        name = node.value.id if isinstance(node.value, ast.Name) else None
        if name not in self.arrays:
            return self.generic_visit(node)
        ref, _ = self.arrays[name]
        idx = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        index = [self.scope.expr(ast.unparse(i)) for i in idx]
        return ast.copy_location(ast.Name(id=ref.at(index), ctx=node.ctx), node)

    def visit_Name(self, node):
        if node.id in self.names:
            return ast.copy_location(ast.Name(id=self.names[node.id], ctx=node.ctx), node)
        return node


VECTOR_FUNCTIONS = {"exp": "_sdfg_scan_vexp", "log": "_sdfg_scan_vlog", "pow": "_sdfg_scan_vpow"}
"""``dace::math::f`` -> the ``omp declare simd`` wrappers of glibc's ``f`` (``scan_blocked.VECTOR_MATH``)."""
SCALAR_LANE_FUNCTIONS = {"exp": "_sdfg_scan_xexp", "log": "_sdfg_scan_xlog", "pow": "_sdfg_scan_xpow"}
"""``f`` -> wrappers whose simd clones call the program's scalar ``f`` once per lane
(``scan_blocked.SCALAR_LANE_MATH``: the exact form of a vectorised loop)."""
PREDICATED_FUNCTIONS = {"exp": "_sdfg_scan_pexp", "log": "_sdfg_scan_plog", "pow": "_sdfg_scan_ppow"}
"""``f`` -> :data:`VECTOR_FUNCTIONS`' calls given their branch's lane predicate (``scan_blocked.PREDICATED_MATH``:
no vector call where no lane of the vector takes the branch)."""


class _MaskLogic(ast.NodeTransformer):
    """``a or b`` / ``a and b`` over bools as ``a | b`` / ``a & b`` (if-converted bodies): the same values
    (the operands are connector reads and comparisons, which have no effects), and GCC vectorises
    them as mask operations instead of the short-circuit branch it makes of ``||``."""

    def __init__(self, types: dict):
        self.types = types

    def boolean(self, n) -> bool:
        if isinstance(n, ast.Compare):
            return True
        if isinstance(n, ast.Constant):
            return isinstance(n.value, bool)
        if isinstance(n, ast.Name):
            return self.types.get(n.id) == dace.bool_
        if isinstance(n, ast.UnaryOp) and isinstance(n.op, ast.Not):
            return self.boolean(n.operand)
        if isinstance(n, ast.BinOp) and isinstance(n.op, (ast.BitOr, ast.BitAnd)):
            return self.boolean(n.left) and self.boolean(n.right)
        return False

    def visit_BoolOp(self, node):
        self.generic_visit(node)
        if not all(self.boolean(v) for v in node.values):
            return node
        op = ast.BitOr() if isinstance(node.op, ast.Or) else ast.BitAnd()
        out = node.values[0]
        for v in node.values[1:]:
            out = ast.BinOp(left=out, op=op, right=v)
        return ast.copy_location(out, node)


class _QuietCompare(ast.NodeTransformer):
    """``a > b`` (``>=``, ``<``, ``<=``) as the quiet comparisons of ``scan_blocked.VECTOR_MATH``
    (``__builtin_isgreater`` and friends on floating operands, after the usual arithmetic conversions):
    the same value, NaN included, but no invalid-operation flag for a NaN operand. An ordered comparison
    may trap (``-ftrapping-math``, GCC's default), so GCC neither speculates one that a select guards nor
    if-converts the branch around it; the quiet ones it does (graupel's precipitation map)."""

    NAMES = {ast.Gt: "_sdfg_scan_gt", ast.GtE: "_sdfg_scan_ge", ast.Lt: "_sdfg_scan_lt", ast.LtE: "_sdfg_scan_le"}

    def visit_Compare(self, node):
        self.generic_visit(node)
        if len(node.ops) != 1 or type(node.ops[0]) not in self.NAMES:
            return node
        call = ast.Call(func=ast.Name(id=self.NAMES[type(node.ops[0])], ctx=ast.Load()),
                        args=[node.left, node.comparators[0]], keywords=[])
        return ast.copy_location(call, node)


def _if_converted(tree, types: dict):
    """An expression or statement as if-converted code writes it: bool ``or``/``and`` as masks
    (:class:`_MaskLogic`), ordered comparisons quiet (:class:`_QuietCompare`)."""
    return _QuietCompare().visit(_MaskLogic(types).visit(tree))


def cell_dims(subset, cell) -> list[int]:
    """The dimensions of ``subset`` a cell index ``cell`` moves along: ``cell`` in the start or the end of the
    range (gt4py passes a cell's read of a tuple field as the prefix ``0:i + 1``)."""
    c = symbolic.pystr_to_symbolic(str(cell))
    return [d for d, (b, e, _) in enumerate(subset.ndrange())
            if c in symbolic.pystr_to_symbolic(str(b)).free_symbols | symbolic.pystr_to_symbolic(str(e)).free_symbols]


def stride_kind(desc, d: int) -> str:
    """Dimension ``d`` of ``desc``: ``"yes"`` (stride 1), ``"unknown"`` (a stride of symbols that are not the
    array's sizes: gt4py leaves icon4py's tracer tuples so; known only at run time) or ``"no"`` (a number
    other than 1, or a dense stride made of the array's sizes: another layout)."""
    stride = symbolic.pystr_to_symbolic(str(desc.strides[d]))
    if str(stride) == "1":
        return "yes"
    shape_syms = set().union(*(symbolic.pystr_to_symbolic(str(n)).free_symbols for n in desc.shape))
    free = stride.free_symbols
    return "unknown" if free and not free <= shape_syms else "no"


def unknown_cell_strides(desc, dims: list[int]) -> list[str]:
    """The strides of ``desc`` in ``dims`` (the dimensions a cell index moves along) that are single symbols
    of :func:`stride_kind` ``"unknown"``: what a kernel is :func:`versioned` on."""
    out = []
    for d in dims:
        st = symbolic.pystr_to_symbolic(str(desc.strides[d]))
        if st.is_Symbol and stride_kind(desc, d) == "unknown":
            out.append(str(st))
    return out


def versioned(lines: list[str], unit: list[str]) -> list[str]:
    """``lines`` twice, behind a test that every symbol of ``unit`` is 1 at run time: the first copy with
    those symbols written as the number 1 (GCC then sees unit-stride accesses and vectorises), the second
    as they are. The same operations on the same elements either way (bitwise)."""
    unit = sorted(set(unit))
    if not unit:
        return lines
    pattern = re.compile(r"\b(" + "|".join(re.escape(u) for u in unit) + r")\b")
    fast = [pattern.sub("1", ln) for ln in lines]
    cond = " && ".join(f"({u} == 1)" for u in unit)
    return ([f"if ({cond}) {{"] + ["    " + ln for ln in fast] + ["} else {"] + ["    " + ln for ln in lines]
            + ["}"])


def vector_math(text: str, exact: bool = False, active: str = "true", predicated: bool = False,
                pow_lanes: bool = False) -> str:
    """Calls of ``dace::math::exp/log/pow`` -> the simd-declared wrappers (libmvec when vectorised; their
    template overloads call DaCe's function for arguments that are not doubles). ``exact``: the wrappers
    that call the scalar function per lane where the lane predicate ``active`` holds (the lanes whose
    branch the program takes: the others' values are never selected), for every call of those functions
    (a bare ``exp(`` of the DaCe frontend too: declared ``simd`` by a replay part of the program, it would
    reach libmvec). ``predicated`` (not ``exact``): inside a branch (``active`` not ``true``), the vector calls
    that skip a vector none of whose lanes takes it (:data:`PREDICATED_FUNCTIONS`). ``pow_lanes`` (not
    ``exact``, not ``predicated``): ``pow`` as ``_sdfg_scan_spow(active, x, y)``, the site call that
    :mod:`~sdfg_scan.expansions.staged_pow` stages (replay's accurate ``pow`` where it does not)."""
    if not exact and pow_lanes and not predicated:
        text = text.replace("dace::math::pow(", f"_sdfg_scan_spow({active}, ")
    if not exact:
        lanes = predicated and active != "true"
        for f, v in (PREDICATED_FUNCTIONS if lanes else VECTOR_FUNCTIONS).items():
            text = text.replace(f"dace::math::{f}(", f"{v}({active}, " if lanes else f"{v}(")
        return text
    for f, v in SCALAR_LANE_FUNCTIONS.items():
        text = re.sub(rf"(?<![\w:.])(?:dace::math::|std::|::)?{f}\(", f"{v}({active}, ", text)
    return text


class BodyWriter:
    """Writes the blocks of a body (and its nested SDFGs) as per-cell C++ into a :class:`Writer`."""

    def __init__(self, w: Writer, if_convert: bool, exact_math: bool = False, read_back: bool = False,
                 predicated: bool = False, pow_lanes: bool = False):
        self.w, self.if_convert = w, if_convert
        # replay: every pow written with its branch's lane predicate (vector_math's pow_lanes)
        self.pow_lanes = pow_lanes and not exact_math and not predicated
        # read_back: an element of memory that only some branches of an if-converted block write is selected
        # too (its value before the block where no branch writes it) and stored for every lane, when the body
        # has read that same element unconditionally before the block: the address is valid in every lane,
        # and a lane that keeps it stores back the value it holds. Only for bodies whose lanes each own the
        # elements they write (a pointwise map: no other point writes or reads them); off, such a block
        # stays a plain ``if``
        self.read_back = read_back
        self.readable: set[str] = set()   # memory elements every lane has read outside any branch
        self.plain = 0   # depth of plain (not if-converted) ``if`` s around the block being written
        self.exact_math = exact_math   # if-converted, but exp/log/pow stay the program's scalar calls
        # replay's vector math, each call given its branch's lane predicate (PREDICATED_FUNCTIONS)
        self.predicated = predicated and not exact_math
        self.active: list[str] = []   # exact_math, predicated: the lane predicate of each if-converted branch being written
        self.overrides: list[dict[str, str]] = []   # if-converted branches: lvalue -> temporary
        self.temps: list[list[tuple[str, str, str]]] = []
        self.declared: dict[str, int] = {}   # local -> if-converted branch depth where it is declared
        self.memory_texts: dict[str, str] = {}   # memory elements written in if-converted branches -> type
        self.branches: list[ControlFlowRegion] = []   # the conditional branches around the block being written

    # -- values ---------------------------------------------------------------------------------
    def lv(self, text: str) -> str:
        for o in reversed(self.overrides):
            if text in o:
                return o[text]
        return text

    def store(self, ref: Ref, index: list[str], ctype: str) -> str:
        """The lvalue to write element ``index`` of ``ref`` (a temporary inside an if-converted branch)."""
        text = ref.at(index)
        if not self.overrides or self._branch_local(text):
            return text
        cur = self.lv(text)
        if text in self.overrides[-1]:
            return cur
        if ref.memory:
            # an element of memory: written after the block, selected, where every branch writes it
            # (checked in _select); its old value is never selected, so it is not read (unless read_back)
            self.memory_texts[text] = ref.ctype
            cur = self._memory_before(text, cur, ref.ctype)
        tmp = self.w.fresh("sel")
        self.temps[-1].append((tmp, cur, self.storage(ref.ctype)))
        self.overrides[-1][text] = tmp
        return tmp

    def _memory_before(self, text: str, cur: str, ctype: str) -> str:
        """The value an element of memory ``text`` starts an if-converted block's selection with: ``cur`` where
        a temporary holds it or the body read it before (``read_back``), else a zero (never selected)."""
        return f"{ctype}{{}}" if cur == text and text not in self.readable else cur

    def put(self, ref: Ref, index: list[str], ctype: str, value: str) -> None:
        """``ref[index] = value`` through :meth:`store`."""
        self.w(f"{self.store(ref, index, ctype)} = {value};")

    def storage(self, ctype: str) -> str:
        return storage_type(ctype, self.if_convert)

    def _branch_local(self, text: str) -> bool:
        """``text`` is a variable declared inside the innermost if-converted branch (a nested SDFG's
        transient): written directly, it exists only there."""
        return self.declared.get(_base(text), -1) >= len(self.overrides)

    def load(self, ref: Ref, index: list[str]) -> str:
        text = ref.at(index)
        cur = self.lv(text)
        if self.read_back and ref.memory and not self.overrides and not self.plain:
            self.readable.add(text)
        if self.if_convert and ref.ctype == "bool" and cur == text:
            if ref.memory and _base(text) not in self.declared:
                # a bool of the program's memory read as a comparison: GCC vectorises it as a mask,
                # like the bools the comparisons make (a plain bool load is a byte it cannot mix with masks)
                return f"(reinterpret_cast<const unsigned char&>({text}) != 0)"
            return f"({text} != 0)"   # kept as a byte (storage)
        return cur

    # -- control flow ---------------------------------------------------------------------------
    def region(self, cfg: ControlFlowRegion, scope: Scope) -> None:
        branch = isinstance(cfg.parent_graph, ConditionalBlock)
        if branch:
            self.branches.append(cfg)
        try:
            self._region(cfg, scope)
        finally:
            if branch:
                self.branches.pop()

    def _region(self, cfg: ControlFlowRegion, scope: Scope) -> None:
        for b, assigns in _chain_assigning(cfg):
            self._block(b, scope)
            for sym in assigns:
                if self.branches and _used_outside(scope.sdfg, self.branches[-1], sym):
                    # its C++ local ends with the branch's block; DaCe's symbol lives on after it
                    raise Unsupported(f"symbol '{sym}' is assigned inside a branch of a conditional and read "
                                      "after it")
            for sym, expr in assigns.items():   # a symbol set on the edge: a local for the blocks after
                # computed for every lane of an if-converted branch
                if self.if_convert and self.overrides and _may_trap(ast.parse(str(expr)), _dtypes(scope.sdfg)):
                    raise _Trap(sym)
                name = self.w.fresh("a")
                self.w(f"const auto {name} = {self.condition(CodeBlock(expr), scope)};")
                scope.syms[sym] = name

    def _block(self, b, scope: Scope) -> None:
        if isinstance(b, dace.SDFGState):
            self.state(b, scope)
        elif isinstance(b, ConditionalBlock):
            self.conditional(b, scope)
        elif isinstance(b, LoopRegion):
            raise Unsupported(f"loop '{b.label}' inside the level loop")
        elif isinstance(b, ControlFlowRegion):
            self.region(b, scope)
        else:
            raise Unsupported(f"block '{b.label}' is a {type(b).__name__}")

    def condition(self, code, scope: Scope) -> str:
        tree = copy.deepcopy(_code_tree(code))
        # a one-element container the kernel keeps in a register, read as ``t[0]`` (DaCe's frontend writes
        # ``c = t > 0.5`` on an edge so when ``t`` is an array of one element): the register itself
        tree = _RegisterElement({n for n, r in scope.data.items() if r.lvalue is not None}).visit(tree)
        names = dict(scope.syms)
        for n in ast.walk(tree):
            if isinstance(n, ast.Name) and n.id in scope.data:
                ref = scope.data[n.id]
                if ref.lvalue is None and not isinstance(scope.sdfg.arrays[n.id], dt.Scalar):
                    raise Unsupported(f"condition reads array '{n.id}'")
                names[n.id] = f"({self.load(ref, [])})"
        if self.if_convert:
            types = {n: d.dtype for n, d in scope.sdfg.arrays.items() if n in scope.data}
            tree = _if_converted(tree, types)
        tree = _Rename(names, {}, scope).visit(tree)
        return cppunparse.pyexpr2cpp(tree)

    def conditional(self, block: ConditionalBlock, scope: Scope) -> None:
        branches = live_branches(block)
        if not branches:
            return   # no branch runs
        if branches[0][0] is None:   # the first branch that can run always does: its blocks, unconditionally
            self.w("{")
            self.w.depth += 1
            try:
                self.region(branches[0][1], scope)
            finally:
                self.w.depth -= 1
            self.w("}")
            return
        conds = [(None if c is None else self.condition(c, scope), br) for c, br in branches]
        if self.if_convert:
            mark = len(self.w.lines)
            saved = self.w.depth
            try:
                # if-converted, every condition is computed for every lane (an ``elif``'s past the arms
                # before it; all of them past an enclosing block's condition)
                types = {**{n: dace.int64 for n in scope.syms}, **_dtypes(scope.sdfg)}
                trees = [_code_tree(c) for c, _ in branches if c is not None]
                if any(_may_trap(t, types) for t in (trees if self.overrides else trees[1:])):
                    raise _Trap(block.label)
                self._select(conds, scope)
                return
            except _Fallback as exc:
                if isinstance(exc, _Trap) and self.overrides:
                    raise   # inside an enclosing if-converted block: that one becomes the plain ``if``
                del self.w.lines[mark:]
                self.w.depth = saved
        for i, (c, br) in enumerate(conds):
            head = "if" if i == 0 else "else if"
            self.w(f"{head} ({c}) {{" if c is not None else "else {")
            self.w.depth += 1
            self.plain += 1
            try:
                self.region(br, scope)
            finally:
                self.plain -= 1
            self.w.depth -= 1
            self.w("}")

    def _select(self, conds, scope: Scope) -> None:
        """Every branch into temporaries, then ``lvalue = c0 ? t0 : (c1 ? t1 : lvalue)``."""
        flags: list[str | None] = []
        for c, _ in conds:
            if c is None:
                flags.append(None)
                continue
            f = self.w.fresh("c")
            self.w(f"const bool {f} = {c};")
            flags.append(f)
        preds: list[str | None] = [None] * len(conds)
        if self.exact_math or self.predicated or self.pow_lanes:
            # the lanes that take each branch (the first true condition; inside the enclosing branch's lanes):
            # the exact form calls libm there only, as the program does; the predicated replay calls skip
            # the vectors with none of them
            for i, f in enumerate(flags):
                parts = self.active[-1:] + [f"!{g}" for g in flags[:i] if g is not None] + ([f] if f else [])
                preds[i] = self.w.fresh("a")
                self.w(f"const bool {preds[i]} = {' & '.join(parts) or 'true'};")
        decl_at = len(self.w.lines)
        picks: list[dict[str, str]] = []
        all_temps = []
        for (_, br), pred in zip(conds, preds, strict=True):
            self.overrides.append({})
            self.temps.append([])
            if pred is not None:
                self.active.append(pred)
            self.w("{")
            self.w.depth += 1
            try:
                self.region(br, scope)
            finally:
                self.w.depth -= 1
                picks.append(self.overrides.pop())
                all_temps += self.temps.pop()
                if pred is not None:
                    self.active.pop()
            self.w("}")
        pad = "    " * self.w.depth
        self.w.lines[decl_at:decl_at] = [f"{pad}{t} {n} = {v};" for n, v, t in all_temps]
        targets = list(dict.fromkeys(k for p in picks for k in p))
        for text in targets:
            if (text in self.memory_texts and text not in self.readable
                    and (None not in flags or not all(text in p for p in picks))):
                raise _Fallback(text)   # memory some branch does not write: the plain ``if`` keeps it exact
        for text in targets:
            dst = self.store_target(text)
            old = value = self.lv(text)
            for f, p in reversed(list(zip(flags, picks, strict=True))):
                # a branch that does not write ``text`` keeps its value before the block: ``if c0: (keep)
                # else: t = ...`` is ``c0 ? t_before : t1``, not ``t1`` (the first arm does not pass the
                # choice on to the later ones)
                pick = p.get(text, old)
                if f is None:
                    value = pick
                elif pick != value:
                    value = f"({f} ? {pick} : {value})"
            self.w(f"{dst} = {value};")

    def store_target(self, text: str) -> str:
        """An lvalue written after an if-converted block (itself a temporary of an outer one)."""
        if not self.overrides or self._branch_local(text):
            return text
        if text in self.overrides[-1]:
            return self.overrides[-1][text]
        tmp = self.w.fresh("sel")
        cur, ctype = self.lv(text), "auto"
        if text in self.memory_texts:
            ctype = self.memory_texts[text]
            cur = self._memory_before(text, cur, ctype)
        # declared where the enclosing branch starts (its temps are hoisted there)
        self.temps[-1].append((tmp, cur, ctype))
        self.overrides[-1][text] = tmp
        return tmp

    # -- dataflow -------------------------------------------------------------------------------
    def state(self, st: dace.SDFGState, scope: Scope) -> None:
        for n in dfs_topological_sort(st):
            if isinstance(n, nodes.AccessNode):
                desc = scope.sdfg.arrays[n.data]
                if isinstance(desc, (dt.View, dt.Stream)) or type(desc) not in (dt.Scalar, dt.Array):
                    raise Unsupported(f"container '{n.data}' is a {type(desc).__name__}")
                for e in st.out_edges(n):
                    if isinstance(e.dst, nodes.AccessNode):
                        self.copy(st, e, scope)
            else:
                self.compute(st, n, scope)
        for e in st.edges():
            if e.data.wcr is not None:
                raise Unsupported(f"memlet '{e.data}' has write-conflict resolution")

    def compute(self, st, n, scope: Scope) -> None:
        """A tasklet or a nested SDFG (anything else is :class:`Unsupported`)."""
        if isinstance(n, nodes.Tasklet):
            self.tasklet(st, n, scope)
        elif isinstance(n, nodes.NestedSDFG):
            self.nested(st, n, scope)
        else:
            raise Unsupported(f"node '{n}' is a {type(n).__name__}")

    def copy(self, st, e, scope: Scope) -> None:
        m = e.data
        if m.data is None:
            return
        src, dst = scope.data[e.src.data], scope.data[e.dst.data]
        ssub = m.get_src_subset(e, st) or subsets.Range.from_array(scope.sdfg.arrays[e.src.data])
        dsub = m.get_dst_subset(e, st) or subsets.Range.from_array(scope.sdfg.arrays[e.dst.data])
        if ssub is None or dsub is None or ssub.num_elements() != 1 or dsub.num_elements() != 1:
            raise Unsupported(f"copy '{e.src.data}' -> '{e.dst.data}' moves more than one element")
        value = self.load(src, scope.index(ssub))
        self.put(dst, scope.index(dsub), dst.ctype, value)

    def tasklet(self, st, t: nodes.Tasklet, scope: Scope) -> None:
        if t.language != dace.Language.Python:
            raise Unsupported(f"tasklet '{t.label}' is not Python")
        if t.code_global and t.code_global.as_string.strip():
            raise Unsupported(f"tasklet '{t.label}' has global code")
        ins, arrays, types = [], {}, {}
        for e in st.in_edges(t):
            if e.data.data is None:
                continue
            ref = scope.data[e.data.data]
            dtype = scope.sdfg.arrays[e.data.data].dtype
            if e.data.subset.num_elements() == 1:
                ins.append(f"{dtype.ctype} {e.dst_conn} = {self.load(ref, scope.index(e.data.subset))};")
                types[e.dst_conn] = dtype
            else:
                if ref.lvalue is not None:
                    raise Unsupported(f"tasklet '{t.label}' reads a range of scalar '{e.data.data}'")
                first = scope.index(e.data.subset)
                view = Ref(ref.ctype, base=f"(&{ref.at(first)})", strides=ref.strides, memory=True)
                arrays[e.dst_conn] = (view, scope)
                types[e.dst_conn] = dace.pointer(dtype)
        outs = []
        for e in st.out_edges(t):
            if e.data.data is None:
                continue
            if e.data.subset.num_elements() != 1:
                raise Unsupported(f"tasklet '{t.label}' writes a range through '{e.src_conn}'")
            ref = scope.data[e.data.data]
            dtype = scope.sdfg.arrays[e.data.data].dtype
            types[e.src_conn] = dtype
            outs.append((e.src_conn, ref, scope.index(e.data.subset), dtype))
        self.w("{")
        self.w.depth += 1
        for line in ins:
            self.w(line)
        locs = cppunparse.CPPLocals()
        for conn, _, _, dtype in outs:
            self.w(f"{dtype.ctype} {conn};")
            locs.define(conn, 0, 0, dtype)
        remover = DaCeKeywordRemover(scope.sdfg, {}, scope.sdfg.constants, None)
        known = {**{s: dace.int64 for s in scope.syms}, **types}
        for stmt in t.code.code:
            stmt = remover.visit(copy.deepcopy(stmt))
            if self.if_convert and self.overrides and _may_trap(stmt, known):
                raise _Trap(t.label)   # computed for every lane of an if-converted branch (a symbol divides too)
            if self.if_convert:
                stmt = _if_converted(stmt, types)
            stmt = _Rename({s: c for s, c in scope.syms.items() if s not in types}, arrays, scope).visit(stmt)
            out = io.StringIO()
            cppunparse.CPPUnparser(stmt, 0, locs, out, defined_symbols=dict(known))
            text = out.getvalue().strip()
            if self.if_convert:
                # whatever the connectors' types (a bool computed from an exp): the wrappers' overloads keep
                # DaCe's function for other argument types; a call left to dace::math (glibc's scalar entry
                # point) is opaque to GCC and keeps the whole cell loop scalar
                # not under a plain ``if``: GCC if-converts a call there only if it is a built-in (glibc's
                # exp/log/pow are) or has an "inbranch" simd clone, which the predicated calls do not have
                text = vector_math(text, self.exact_math, self.active[-1] if self.active else "true",
                                   self.predicated and not self.plain, self.pow_lanes)
            for line in text.splitlines():
                self.w(line)
        for conn, ref, index, dtype in outs:
            self.put(ref, index, dtype.ctype, conn)
        self.w.depth -= 1
        self.w("}")

    def nested(self, st, ns: nodes.NestedSDFG, scope: Scope) -> None:
        inner = ns.sdfg
        pre = self.w.fresh("n") + "_"
        syms = {}
        self.w("{")
        self.w.depth += 1
        for s, v in ns.symbol_mapping.items():
            syms[s] = f"{pre}{s}"
            self.w(f"const auto {pre}{s} = {scope.expr(v)};")
        for s in inner.free_symbols - set(syms):
            raise Unsupported(f"nested SDFG '{ns.label}' uses symbol '{s}' outside its symbol mapping")
        sub = Scope(inner, {}, syms)
        for e in list(st.in_edges(ns)) + list(st.out_edges(ns)):
            conn = e.dst_conn if e.dst is ns else e.src_conn
            if e.data.data is None or conn is None or conn in sub.data:
                continue
            sub.data[conn] = self.bind(ref=scope.data[e.data.data], index=scope.index(e.data.subset),
                                       desc=inner.arrays[conn], scope=sub, name=f"{ns.label}:{conn}")
        for name, desc in inner.arrays.items():
            if name in sub.data:
                continue
            if not desc.transient:
                raise Unsupported(f"nested SDFG '{ns.label}' has an unconnected argument '{name}'")
            sub.data[name] = self.local(pre + name, desc, sub)
        self.region(inner, sub)
        self.w.depth -= 1
        self.w("}")

    def bind(self, ref: Ref, index: list[str], desc, scope: Scope, name: str) -> Ref:
        """The inner container of a nested SDFG connector, on the outer element at ``index``."""
        if isinstance(desc, dt.Scalar) or (ref.lvalue is not None and desc.total_size == 1):
            return Ref(desc.dtype.ctype, lvalue=ref.at(index), memory=ref.memory)
        if ref.lvalue is not None:
            raise Unsupported(f"'{name}' binds an array to a scalar")
        if any(str(o) != "0" for o in desc.offset):
            raise Unsupported(f"'{name}' has a non-zero offset")
        return Ref(desc.dtype.ctype, base=f"(&{ref.at(index)})", strides=[scope.expr(s) for s in desc.strides],
                   memory=True)

    def local(self, cname: str, desc, scope: Scope) -> Ref:
        """A per-cell transient: a scalar local, or a small array of constant size."""
        self.declared[cname] = len(self.overrides)
        if isinstance(desc, dt.Scalar) or (isinstance(desc, dt.Array) and desc.total_size == 1):
            self.w(f"{self.storage(desc.dtype.ctype)} {cname};")
            return Ref(desc.dtype.ctype, lvalue=cname)
        if not isinstance(desc, dt.Array) or symbolic.issymbolic(desc.total_size):
            raise Unsupported(f"transient '{cname}' is not a scalar or an array of constant size")
        self.w(f"{self.storage(desc.dtype.ctype)} {cname}[{desc.total_size}];")
        return Ref(desc.dtype.ctype, base=cname, strides=[scope.expr(s) for s in desc.strides], memory=True)


__all__ = ["LANE", "LEVEL", "BodyWriter", "Ref", "Scope", "Unsupported", "Writer", "storage_type", "vector_math"]
