"""NumPy's types for the C++ of a scan body (:mod:`sdfg_scan.expansions.scan_body`).

The reference (:func:`sdfg_scan.reference.scan`) runs the body on NumPy arrays; the tasklet that
:func:`~sdfg_scan.expansions.scan_body.build_body` makes of it is C++. Where the two type an expression
differently, :func:`numpy_types` adds the cast that gives the C++ NumPy's values (see :class:`NumpyTypes`).
"""

from __future__ import annotations

import ast

import dace

_WEAK = ("weak_float", "weak_int", "weak_bool")
_INTEGRAL = ("int", "bool", "weak_int", "weak_bool")


class NumpyTypes:
    """Types the translated body code as NumPy evaluates the body and casts where C++ would compute otherwise.

    - A Python number is *weak* in NumPy: ``x32 * 0.1`` and ``x32 > 0.1`` compute in float32 with the
      number rounded to float32 first. C++ promotes ``x * 0.1`` to double (and ``auto`` locals then stay
      double), so the number is cast: ``dace.float32(0.1)``. A sub-expression of numbers only
      (``0.1 + 0.2``) stays a double, as in Python, and is cast as a whole.
    - ``/`` of two integers (``k / 2``, int inputs) is true division in Python and NumPy, integer division in
      C++: the left operand is cast to ``dace.float64``.

    ``types`` maps the tasklet's connector names to their dtypes, ``level`` names the level index (a Python
    int in the reference); locals take the type of their value.
    ``changed`` tells whether a cast was added.
    """

    def __init__(self, types: dict[str, dace.typeclass], level: str):
        self.types: dict[str, str | None] = {k: _kind(v) for k, v in types.items()}
        self.types[level] = "weak_int"   # the level index is a Python int in the reference
        self.changed = False

    def typed(self, stmt: ast.stmt) -> ast.stmt:
        if isinstance(stmt, (ast.Assign, ast.AnnAssign)) and stmt.value is not None:
            stmt.value, kind = self._expr(stmt.value)
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
            for t in targets:
                if isinstance(t, ast.Name):
                    self.types[t.id] = kind
        elif isinstance(stmt, ast.AugAssign) and isinstance(stmt.target, ast.Name):
            tk = self.types.get(stmt.target.id)
            stmt.value, vk = self._expr(stmt.value)
            stmt.value, vk = self._meet(stmt.value, vk, tk)
            self.types[stmt.target.id] = _promote(tk, vk)
        return stmt

    def _cast(self, node: ast.expr, dtype: str) -> ast.expr:
        self.changed = True
        return ast.Call(ast.parse(f"dace.{dtype}", mode="eval").body, [node], [])

    def _meet(self, node: ast.expr, kind: str | None, other: str | None) -> tuple[ast.expr, str | None]:
        """``node`` (of ``kind``) beside a value of kind ``other``: cast a weak float to float32."""
        if kind == "weak_float" and other == "float32":
            return self._cast(node, "float32"), "float32"
        return node, kind

    def _expr(self, node: ast.expr) -> tuple[ast.expr, str | None]:
        if isinstance(node, ast.Constant):
            v = node.value
            return node, ("weak_bool" if isinstance(v, bool) else "weak_int" if isinstance(v, int) else
                          "weak_float" if isinstance(v, float) else None)
        if isinstance(node, ast.Name):
            return node, self.types.get(node.id)
        if isinstance(node, ast.Subscript):
            return node, self.types.get(node.value.id) if isinstance(node.value, ast.Name) else None
        if isinstance(node, ast.UnaryOp):
            node.operand, kind = self._expr(node.operand)
            return node, ("bool" if isinstance(node.op, ast.Not) else kind)
        if isinstance(node, ast.BinOp):
            return self._binop(node)
        if isinstance(node, ast.Compare):
            node.left, lk = self._expr(node.left)
            kinds = [lk]
            for i, c in enumerate(node.comparators):
                node.comparators[i], ck = self._expr(c)
                kinds.append(ck)
            if "float32" in kinds:
                node.left, _ = self._meet(node.left, lk, "float32")
                node.comparators = [self._meet(c, k, "float32")[0] for c, k in zip(node.comparators, kinds[1:],
                                                                                   strict=True)]
            return node, "bool"
        if isinstance(node, ast.BoolOp):
            node.values = [self._expr(v)[0] for v in node.values]
            return node, "bool"
        if isinstance(node, ast.IfExp):
            node.test, _ = self._expr(node.test)
            node.body, bk = self._expr(node.body)
            node.orelse, ok = self._expr(node.orelse)
            node.body, bk = self._meet(node.body, bk, ok)
            node.orelse, ok = self._meet(node.orelse, ok, bk)
            return node, _promote(bk, ok)
        if isinstance(node, ast.Call):
            name = ast.unparse(node.func)
            args = [self._expr(a) for a in node.args]
            node.args = [a for a, _ in args]
            kinds = [k for _, k in args]
            if name.startswith("dace."):
                return node, _kind(getattr(dace, name[5:], None))
            if name in ("min", "max") and len(args) == 2:
                node.args = [self._meet(a, k, o)[0] for (a, k), o in zip(args, reversed(kinds), strict=True)]
                return node, _promote(*kinds)
            kind = kinds[0] if kinds else None
            if name in ("floor", "ceil") and kind == "float32":   # C's floor/ceil may take the double overload
                return self._cast(node, "float32"), kind
            return node, ("float64" if kind in _WEAK else kind)   # np.exp(0.5) is a float64 value
        return node, None

    def _binop(self, node: ast.BinOp) -> tuple[ast.expr, str | None]:
        node.left, lk = self._expr(node.left)
        node.right, rk = self._expr(node.right)
        if isinstance(node.op, ast.Div) and lk in _INTEGRAL and rk in _INTEGRAL:
            node.left = self._cast(node.left, "float64")
            return node, ("weak_float" if lk in _WEAK and rk in _WEAK else "float64")
        node.left, lk = self._meet(node.left, lk, rk)
        node.right, rk = self._meet(node.right, rk, lk)
        return node, _promote(lk, rk)


def _kind(dtype) -> str | None:
    if dtype == dace.float32:
        return "float32"
    if dtype == dace.float64:
        return "float64"
    if dtype == dace.bool_:
        return "bool"
    return "int" if isinstance(dtype, dace.typeclass) else None


def _promote(a: str | None, b: str | None) -> str | None:
    """NumPy's result kind of ``a op b`` (a weak number takes the other operand's kind)."""
    if a is None or b is None:
        return None
    if a in _WEAK and b in _WEAK:
        return max(a, b, key=_WEAK[::-1].index)
    if a in _WEAK or b in _WEAK:
        weak, strong = (a, b) if a in _WEAK else (b, a)
        return "float64" if weak == "weak_float" and strong in ("int", "bool") else strong
    if a == b:
        return a
    return "float32" if {a, b} <= {"float32", "bool"} else "float64" if "float64" in (a, b) or "float32" in (a, b) \
        else "int"


def numpy_types(code: str, types: dict[str, dace.typeclass], level: str) -> str:
    """``code`` with the casts that give it NumPy's types in C++ (:class:`NumpyTypes`); the same text where
    none is needed."""
    typer = NumpyTypes(types, level)
    tree = ast.parse(code)
    tree.body = [typer.typed(stmt) for stmt in tree.body]
    return "\n".join(ast.unparse(stmt) for stmt in tree.body) if typer.changed else code


__all__ = ["NumpyTypes", "numpy_types"]
