"""The combine function of ``sdfg_scan.associative_scan`` as code: translated once from Python, rendered
per expansion.

``fn(a, b) -> c`` (``a`` the earlier value, ``b`` the later; each one value, or with ``n`` arrays a
tuple of ``n``) is translated into its *normal form*: one Python expression per array, over the
names ``a0 .. a{n-1}`` and ``b0 .. b{n-1}``, with every local temporary substituted into the
expressions that read it::

    def affine(a, b):                     # normal form
        A, B = a                          #   ["b0 * a0", "b0 * a1 + b1"]
        s, t = b
        return s * A, s * B + t

    lambda a, b: np.maximum(a, b)         #   ["a0 if a0 > b0 or a0 != a0 else b0"]

The expressions are what :class:`~sdfg_scan.expansions.scan_body.BodyExpressions` (the translator of
``sdfg_scan.scan`` bodies) makes of them: ``np.where`` becomes a conditional expression,
``np.minimum``/``np.maximum`` propagate NaN like NumPy, ``np.exp``/``np.sqrt``/... become ``math.*``;
numbers the function reads from its module or closure are inlined. Substituting a temporary
repeats its operations, never changes them: each expression does exactly NumPy's operations on
the values of one column (the reference computes a temporary once; the bits are the same). A
temporary read by several later ones is copied into each (a chain of such temporaries grows the
expression; the C++ compiler may merge the repeats).

Rendering (:func:`python_steps` for the ``sequential``/``blocked`` tasklets, :func:`cpp_steps` for
the ``parallel_prefix`` C++): the names become the expansion's carries and elements, and float
literals take the arrays' dtype, as NumPy's Python scalars do (``x * 0.1`` on float32 is a float32
product).
"""

from __future__ import annotations

import ast
import copy
import inspect
import re
import textwrap
from collections.abc import Callable

from dace.codegen import cppunparse

from sdfg_scan.expansions.scan_body import BodyExpressions, numeric_free_names

API = "associative_scan"
_BIN = (ast.Add, ast.Sub, ast.Mult, ast.Div, ast.Pow)
_UNARY = (ast.USub, ast.UAdd, ast.Not)
_CMP = (ast.Lt, ast.LtE, ast.Gt, ast.GtE, ast.Eq, ast.NotEq)
_BUILTINS = ("abs", "min", "max")
MAX_EXPRESSION = 20000
"""Longest expression (characters) a translated result may have: temporaries read several times are
copied into every reader, so a chain of them grows exponentially."""
FLOAT_TYPES = ("float32", "float64")
INT_TYPES = ("int32", "int64")


def _err(msg: str) -> ValueError:
    return ValueError(f"sdfg_scan.{API}: {msg}")


# -- source of fn ------------------------------------------------------------------------------------

def _function_node(fn: Callable | str) -> ast.FunctionDef | ast.Lambda:
    """The ``def`` or ``lambda`` of ``fn``: a function object (its source file is parsed), or the source
    text of a lambda (how the DaCe frontend passes a lambda written inside a program)."""
    if isinstance(fn, str):
        try:
            tree = ast.parse(textwrap.dedent(fn).strip(), mode="eval")
        except SyntaxError as e:
            raise _err(f"cannot parse fn {fn!r} ({e.msg})") from None
        if not isinstance(tree.body, ast.Lambda):
            raise _err(f"fn must be a function (def or lambda), got the expression {fn!r}")
        return tree.body
    name = getattr(fn, "__name__", repr(fn))
    try:
        lines, start = inspect.findsource(fn)
    except (OSError, TypeError) as e:
        raise _err(f"cannot read the source of fn {name!r} ({e}); inside a program fn must be a Python "
                   f"function (def or lambda) defined in a file, or one of np.add, np.multiply, np.minimum, "
                   f"np.maximum on one array") from None
    line = start + 1
    tree = ast.parse("".join(lines))
    if name != "<lambda>":
        defs = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == name
                and (n.lineno == line or any(d.lineno == line for d in n.decorator_list))]
    else:
        code = fn.__code__  # type: ignore[attr-defined]
        spots = [(p[0], p[2], p[1], p[3]) for p in code.co_positions()
                 if None not in p and (p[0], p[2]) != (p[1], p[3])]  # not the empty ones (RESUME)
        defs = [n for n in ast.walk(tree) if isinstance(n, ast.Lambda) and n.lineno == line
                and all((n.lineno, n.col_offset) <= (a, b) and (c, d) <= (n.end_lineno, n.end_col_offset)
                        for a, b, c, d in spots)]
        # the innermost lambda that holds every instruction of fn (several may share the line)
        defs.sort(key=lambda n: ((n.end_lineno or 0) - n.lineno, (n.end_col_offset or 0) - n.col_offset))
    if not defs:
        raise _err(f"cannot find the source of fn {name!r} at line {line}; define it with 'def' in a file")
    return defs[0]


# -- translation ---------------------------------------------------------------------------------------

class _Locals(ast.NodeTransformer):
    """Replaces the names bound so far (temporaries and, with one array, the arguments) by their expression."""

    def __init__(self, env: dict[str, ast.expr]):
        self.env = env

    def visit_Name(self, node: ast.Name) -> ast.expr:
        return copy.deepcopy(self.env[node.id]) if node.id in self.env else node


class _Translator:
    """Translates ``fn`` for ``n`` arrays into the normal form (module docstring)."""

    def __init__(self, fn: Callable | str, n: int, constants: dict, tupled: bool = False):
        self.node = _function_node(fn)
        self.name = getattr(self.node, "name", "<lambda>")
        params = [a.arg for a in self.node.args.args]
        if len(params) != 2 or self.node.args.vararg or self.node.args.kwonlyargs:
            raise _err(f"fn takes (earlier, later), two arguments, got parameters {params}")
        self.a, self.b = params
        self.n = n
        # with one array the arguments are plain values; with a tuple of n (n = 1 too), tuples of n read as
        # a[i] or unpacked
        self.tupled = tupled or n > 1
        self.env: dict[str, ast.expr] = {}
        if not self.tupled:
            self.env = {self.a: ast.Name("_sc_c0", ast.Load()), self.b: ast.Name("_sc_x0", ast.Load())}
        self.tr = BodyExpressions(self.a, self.b, None, n, 0.0, None, constants, api=API, what="fn")

    def _check_arguments(self, expr: ast.expr) -> None:
        """The arguments are read as NumPy would see them: values (one array) or ``a[i]`` (tuples)."""
        indexed: set[int] = set()
        for sub in ast.walk(expr):
            if isinstance(sub, ast.Subscript) and isinstance(sub.value, ast.Name) and sub.value.id in (self.a, self.b):
                if not self.tupled:
                    raise _err(f"fn indexes its argument in '{ast.unparse(sub)}', but xs is one array: "
                               f"'{sub.value.id}' is one value")
                i = sub.slice.value if isinstance(sub.slice, ast.Constant) else None
                if not isinstance(i, int) or isinstance(i, bool) or not 0 <= i < self.n:
                    raise _err(f"fn reads '{ast.unparse(sub)}'; expected {sub.value.id}[i] with an integer "
                               f"constant 0 <= i < {self.n} (one per array of xs)")
                indexed.add(id(sub.value))
        for sub in ast.walk(expr):
            if isinstance(sub, ast.Name) and sub.id in (self.a, self.b) and self.tupled and id(sub) not in indexed:
                raise _err(f"fn uses its argument '{sub.id}' whole in '{ast.unparse(expr)}'; with {self.n} arrays "
                           f"it is a tuple: read {sub.id}[i] or unpack it ({', '.join(f'v{i}' for i in range(self.n))} "
                           f"= {sub.id})")

    def user_text(self, text: str) -> str:
        """``text`` with the translator's names of the arguments written as in fn (``a``, ``b[1]``)."""
        def name(m: re.Match) -> str:
            arg = self.a if m.group(1) == "c" else self.b
            return arg if not self.tupled else f"{arg}[{m.group(2)}]"

        return re.sub(r"_sc_([cx])(\d+)", name, text)

    def expression(self, expr: ast.expr) -> ast.expr:
        """``expr`` of the source with the temporaries substituted, translated."""
        self._check_arguments(expr)
        try:
            out = self.tr.visit(_Locals(self.env).visit(copy.deepcopy(expr)))
        except ValueError as e:
            raise ValueError(self.user_text(str(e))) from None
        size = len(ast.unparse(out))
        if size > MAX_EXPRESSION:
            raise _err(f"fn '{self.name}': '{ast.unparse(expr)}' is an expression of {size} characters once the "
                       f"temporaries it reads are substituted (at most {MAX_EXPRESSION}); read each temporary "
                       f"fewer times, or write the scan with sdfg_scan.scan")
        return out

    def _bind(self, target: ast.expr, value: ast.expr) -> None:
        if isinstance(target, ast.Name):
            if target.id in (self.a, self.b):
                raise _err(f"fn assigns to its argument '{target.id}'; use a new name")
            self.env[target.id] = self.expression(value)
            return
        if isinstance(target, (ast.Tuple, ast.List)):
            if isinstance(value, ast.Name) and value.id in (self.a, self.b) and self.tupled:
                values: list[ast.expr] = [ast.Subscript(ast.Name(value.id, ast.Load()), ast.Constant(i), ast.Load())
                                          for i in range(self.n)]
            elif isinstance(value, (ast.Tuple, ast.List)):
                values = list(value.elts)
            else:
                raise _err(f"fn unpacks '{ast.unparse(value)}'; unpack only the arguments or a tuple of values")
            if len(values) != len(target.elts):
                raise _err(f"fn unpacks {len(values)} value(s) into {len(target.elts)} name(s) in "
                           f"'{ast.unparse(target)} = {ast.unparse(value)}'")
            new = {}
            for t, v in zip(target.elts, values, strict=True):
                if not isinstance(t, ast.Name):
                    raise _err(f"fn assigns to '{ast.unparse(t)}'; assign to plain names")
                new[t.id] = self.expression(v)  # all right-hand sides before any binding, as Python does
            for k, v in new.items():
                if k in (self.a, self.b):
                    raise _err(f"fn assigns to its argument '{k}'; use a new name")
                self.env[k] = v
            return
        raise _err(f"fn assigns to '{ast.unparse(target)}'; assign to plain names")

    def _statement(self, stmt: ast.stmt) -> None:
        if isinstance(stmt, ast.Assign):
            for target in stmt.targets:
                self._bind(target, stmt.value)
        elif isinstance(stmt, ast.AnnAssign) and stmt.value is not None:
            self._bind(stmt.target, stmt.value)
        elif isinstance(stmt, ast.AugAssign) and isinstance(stmt.target, ast.Name):
            self._bind(stmt.target, ast.BinOp(ast.Name(stmt.target.id, ast.Load()), stmt.op, stmt.value))
        else:
            raise _err(f"fn '{self.name}': statement '{ast.unparse(stmt).splitlines()[0]}' is not supported; use "
                       f"assignments, conditional values (np.where(c, x, y)) and one final return")

    def returned(self) -> list[ast.expr]:
        """The source expressions of the result, after the statements before the return are bound."""
        if isinstance(self.node, ast.Lambda):
            return self._results(self.node.body)
        body = [s for s in self.node.body
                if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]  # docstrings
        for i, stmt in enumerate(body):
            if isinstance(stmt, ast.Return):
                if i != len(body) - 1:
                    raise _err(f"fn '{self.name}': statements after the return; return once, at the end")
                if stmt.value is None:
                    break
                return self._results(stmt.value)
            self._statement(stmt)
        raise _err(f"fn '{self.name}' must end with 'return <value>' (one value per array of xs)")

    def _results(self, value: ast.expr) -> list[ast.expr]:
        if isinstance(value, (ast.Tuple, ast.List)):
            if not self.tupled:
                raise _err(f"fn returns a tuple of {len(value.elts)} value(s), but xs is one array: return "
                           f"one value")
            if len(value.elts) != self.n:
                raise _err(f"fn returns {len(value.elts)} value(s), but xs has {self.n} arrays; return one "
                           f"value per array, in the order of xs")
            return list(value.elts)
        if self.tupled:
            has = f"has {self.n} arrays" if self.n > 1 else "is a tuple of one array"
            raise _err(f"fn returns one value '{ast.unparse(value)}', but xs {has}; return a tuple of "
                       f"{self.n if self.n > 1 else 'one'} value{'s' if self.n > 1 else ''}")
        return [value]

    def normal_form(self) -> list[str]:
        exprs = [self.expression(e) for e in self.returned()]
        out = []
        for e in exprs:
            problem = combine_problem_in(e, self.n, slots=("_sc_c", "_sc_x"))
            if problem:
                raise _err(f"fn '{self.name}' {self.user_text(problem)}")
            out.append(ast.unparse(_Slots().visit(e)))
        return out


class _Slots(ast.NodeTransformer):
    """The translator's connector names to the normal form's: ``_sc_c{i}`` -> ``a{i}``, ``_sc_x{i}`` -> ``b{i}``."""

    def visit_Name(self, node: ast.Name) -> ast.Name:
        m = re.fullmatch(r"_sc_([cx])(\d+)", node.id)
        if m:
            return ast.Name(("a" if m.group(1) == "c" else "b") + m.group(2), ast.Load())
        return node


def translate_combine(fn: Callable | str, n: int, constants: dict | None = None, tupled: bool = False) -> list[str]:
    """The normal form of ``fn`` for ``n`` arrays (module docstring): one expression per array.

    :param fn: a Python function (``def`` or lambda) or the source text of a lambda.
    :param constants: numbers ``fn`` may read by name, besides those of its own module and closure.
    :param tupled: ``xs`` is a tuple (of one array, where ``n`` is 1): ``fn`` takes and returns tuples.
    :raises ValueError: naming ``sdfg_scan.associative_scan`` and what was found, for a statement,
        call or name that cannot be lowered, or a result that is not one value per array.
    """
    found = dict(constants or {})
    if not isinstance(fn, str):
        found.update(numeric_free_names(fn))
    return _Translator(fn, n, found, tupled).normal_form()


# -- checking the normal form ------------------------------------------------------------------------

def combine_problem_in(expr: ast.expr, n: int, dtype: str | None = None, slots: tuple[str, str] = ("a", "b")
                       ) -> str | None:
    """What in the normal-form expression ``expr`` cannot be lowered for ``n`` arrays of ``dtype``
    (a phrase: "uses ..."), or None. ``slots``: the prefixes of the argument names (``a0``, ``b0``)."""
    integer = dtype in INT_TYPES
    slot = re.compile(rf"^({re.escape(slots[0])}|{re.escape(slots[1])})(\d+)$")
    for sub in ast.walk(expr):
        if isinstance(sub, ast.Name):
            m = slot.match(sub.id)
            if m and int(m.group(2)) < n or sub.id in _BUILTINS or sub.id == "math":
                continue
            return (f"reads '{sub.id}', which is no argument, local, or number of fn's module "
                    "or closure")
        if isinstance(sub, ast.Call):
            f = sub.func
            ok = (isinstance(f, ast.Name) and f.id in _BUILTINS) or (
                isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id == "math")
            if not ok or sub.keywords:
                return f"calls '{ast.unparse(sub)}', which cannot be lowered"
            if integer and isinstance(f, ast.Attribute):
                return f"calls '{ast.unparse(sub)}' on integers"
        elif isinstance(sub, ast.Attribute):
            if not (isinstance(sub.value, ast.Name) and sub.value.id == "math"):
                return f"uses '{ast.unparse(sub)}', which cannot be lowered"
        elif isinstance(sub, ast.Constant):
            if isinstance(sub.value, bool):
                continue
            if not isinstance(sub.value, (int, float)):
                return f"uses the constant {sub.value!r}; only numbers can be lowered"
            if integer and isinstance(sub.value, float):
                return f"uses the float {sub.value!r} on integer arrays ({dtype}); NumPy would compute in float"
        elif isinstance(sub, ast.BinOp):
            if not isinstance(sub.op, _BIN):
                return f"uses the operator in '{ast.unparse(sub)}', which cannot be lowered (+ - * / ** only)"
            if integer and isinstance(sub.op, (ast.Div, ast.Pow)):
                return f"uses '{ast.unparse(sub)}' on integer arrays ({dtype})"
        elif isinstance(sub, ast.UnaryOp):
            if not isinstance(sub.op, _UNARY):
                return f"uses '{ast.unparse(sub)}', which cannot be lowered"
        elif isinstance(sub, ast.Compare):
            if not all(isinstance(o, _CMP) for o in sub.ops):
                return f"uses the comparison '{ast.unparse(sub)}', which cannot be lowered"
        elif not isinstance(sub, (ast.BoolOp, ast.IfExp, ast.Load, ast.And, ast.Or, *_BIN, *_UNARY, *_CMP)):
            return f"uses '{ast.unparse(sub)}' ({type(sub).__name__}), which cannot be lowered"
    return None


def combine_problem(combine: list[str], dtype: str | None = None) -> str | None:
    """What in a node's ``combine`` cannot be lowered (a phrase), or None."""
    if not combine:
        return "has no combine expression; expected one per array"
    if dtype is not None and dtype not in FLOAT_TYPES + INT_TYPES:
        return f"has arrays of dtype {dtype}; expected one of {FLOAT_TYPES + INT_TYPES}"
    for i, text in enumerate(combine):
        try:
            expr = ast.parse(text, mode="eval").body
        except SyntaxError as e:
            return f"combine[{i}] {text!r} is no Python expression ({e.msg})"
        problem = combine_problem_in(expr, len(combine), dtype)
        if problem:
            return f"combine[{i}] {text!r} {problem}"
    return None


# -- rendering -----------------------------------------------------------------------------------------

class _Render(ast.NodeTransformer):
    """Names to the expansion's, float literals to the arrays' dtype; for C++ also ``math.f`` to
    ``dace::math::f`` (what DaCe's tasklet unparser does)."""

    def __init__(self, names: dict[str, str], dtype: str, cpp: bool):
        self.names, self.dtype, self.cpp = names, dtype, cpp

    def visit_Name(self, node: ast.Name) -> ast.expr:
        if node.id in self.names:
            return ast.Name(self.names[node.id], ast.Load())
        return node  # abs, min, max: the DaCe runtime's global ones in C++

    def visit_Attribute(self, node: ast.Attribute) -> ast.expr:
        if self.cpp and isinstance(node.value, ast.Name) and node.value.id == "math":
            return ast.Name(f"dace::math::{node.attr}", ast.Load())
        return node  # only math.* is allowed in the normal form

    def visit_Constant(self, node: ast.Constant) -> ast.expr:
        if isinstance(node.value, float) and self.dtype == "float32":
            return ast.Name(f"{'dace::' if self.cpp else 'dace.'}float32({node.value!r})", ast.Load())
        return node


def _render(combine: list[str], names: dict[str, str], dtype: str, cpp: bool) -> list[str]:
    exprs = [_Render(names, dtype, cpp).visit(ast.parse(text, mode="eval").body) for text in combine]
    return [cppunparse.py2cpp(e, expr_semicolon=False) if cpp else ast.unparse(e) for e in exprs]


def python_steps(combine: list[str], dtype: str, carries: list[str], elements: list[str]) -> list[str]:
    """Python tasklet expressions of ``combine``: ``a{i}`` read as ``carries[i]``, ``b{i}`` as ``elements[i]``."""
    names = {f"a{i}": c for i, c in enumerate(carries)} | {f"b{i}": e for i, e in enumerate(elements)}
    return _render(combine, names, dtype, cpp=False)


def cpp_steps(combine: list[str], dtype: str) -> list[str]:
    """C++ expressions of ``combine`` over ``{c0}, {c1}, ...`` (earlier) and ``{e0}, {e1}, ...`` (later),
    the fields of :class:`~sdfg_scan.expansions.parallel_prefix.PrefixOp`."""
    names = {f"a{i}": f"{{c{i}}}" for i in range(len(combine))} | {f"b{i}": f"{{e{i}}}" for i in range(len(combine))}
    return _render(combine, names, dtype, cpp=True)


__all__ = ["FLOAT_TYPES", "INT_TYPES", "MAX_EXPRESSION", "combine_problem", "combine_problem_in", "cpp_steps", "python_steps",
           "translate_combine"]
