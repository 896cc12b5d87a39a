"""FoldConstantConditions: a branch condition that reads a value the program fixes with a literal becomes that literal."""

from __future__ import annotations

import ast

from dace import data as dt
from dace import dtypes, properties
from dace.properties import CodeBlock
from dace.sdfg import SDFG, nodes
from dace.sdfg import utils as sdutil
from dace.sdfg.state import ConditionalBlock
from dace.transformation import transformation as xf

from sdfg_scan.expansions.scan_blocked_codegen import condition_expression

LITERAL_TYPES = (bool, int, float)


@properties.make_properties
@xf.explicit_cf_compatible
class FoldConstantConditions(xf.MultiStateTransformation):
    """Write a literal into the conditions of a ``ConditionalBlock`` that read a constant container.

    gt4py lowers a compile-time argument of a program (``use_aes_graupel=False`` given as a static argument
    of icon4py's graupel) as a tasklet ``__tlet_out = False`` writing a transient scalar before the level
    loop, and passes that scalar into the nested SDFG of the loop body, whose branch ``if use_aes_graupel_``
    then reads it at every level and cell. Its value never changes, but the C++ compiler does not see that
    (the blocked kernels keep it in a per-cell array), so an if-converted kernel computes both arms for every
    cell. With the literal in the condition (``if False``) the compiler drops the arm no cell takes, and
    ``scan_blocked``'s translator does not write it at all.

    Matched pattern: a ``ConditionalBlock`` one of whose (Python) branch conditions reads, as a bare name, a
    container that is *constant* (:func:`constant_of`):

    - a transient single-element container of the SDFG (a scalar or an array of one element) whose every
      write is the one output of a tasklet without inputs whose code is ``out = <literal>`` (a bool, int or
      float; several such writes must write the same literal), or
    - a non-transient single-element container of a nested SDFG that the SDFG never writes and never passes
      out, which its parent state passes in (one element, through the nested SDFG node's in-connector of that
      name) from a container that is constant in the parent SDFG (recursively).

    A branch condition reads the value when it runs; a write before it is a write of the same literal, so the
    literal is the value read (a read before any write would read an unset transient, which a valid program
    does not do). ``apply`` puts the literal in place of each such name in every branch condition of the block
    and writes a condition that is then a constant expression (``not False``, ``False or x`` is left as is)
    as that constant. The values computed are unchanged, bit for bit. Conditions that are not Python, and
    names that are not constant, are left as they are.

    No options.
    """

    block = xf.PatternNode(ConditionalBlock)

    @classmethod
    def expressions(cls):
        return [sdutil.node_path_graph(cls.block)]

    def can_be_applied(self, graph, expr_index: int, sdfg: SDFG, permissive: bool = False) -> bool:
        return bool(foldable_names(self.block, self.block.sdfg))

    def apply(self, graph, sdfg: SDFG):
        block = self.block
        consts = foldable_names(block, block.sdfg)
        if not consts:
            raise ValueError(f"sdfg_scan.FoldConstantConditions: no condition of conditional block '{block.label}' "
                             "reads a constant container; call can_be_applied first")
        for pair in block.branches:   # DaCe keeps each branch as a mutable [condition, region] pair
            cond = pair[0]
            if cond is not None and cond.language == dtypes.Language.Python:
                pair[0] = CodeBlock(_folded(condition_expression(cond), consts))


class _Substitute(ast.NodeTransformer):
    def __init__(self, consts: dict):
        self.consts = consts

    def visit_Name(self, node):
        if isinstance(node.ctx, ast.Load) and node.id in self.consts:
            return ast.copy_location(ast.Constant(value=self.consts[node.id]), node)
        return node


def _constant_value(tree: ast.expr):
    """The value of ``tree`` when it is made of literals, ``not``/``and``/``or``, unary minus and comparisons
    only; else None."""
    for n in ast.walk(tree):
        if not isinstance(n, (ast.Constant, ast.UnaryOp, ast.BoolOp, ast.Compare, ast.Not, ast.USub, ast.UAdd,
                              ast.And, ast.Or, ast.Eq, ast.NotEq, ast.Lt, ast.LtE, ast.Gt, ast.GtE)):
            return None
        if isinstance(n, ast.Constant) and type(n.value) not in LITERAL_TYPES:
            return None
    value = eval(compile(ast.Expression(body=tree), "<condition>", "eval"), {"__builtins__": {}})  # noqa: S307
    return value if type(value) in LITERAL_TYPES else None


def _folded(tree: ast.expr, consts: dict) -> str:
    tree = ast.fix_missing_locations(_Substitute(consts).visit(tree))
    value = _constant_value(tree)
    return repr(bool(value)) if value is not None else ast.unparse(tree)


def foldable_names(block: ConditionalBlock, sdfg: SDFG) -> dict:
    """``{name: literal}`` for the names that the Python conditions of ``block`` read and that are constant in
    ``sdfg`` (:func:`constant_of`)."""
    out = {}
    for cond, _ in block.branches:
        if cond is None or cond.language != dtypes.Language.Python:
            continue
        try:
            tree = condition_expression(cond)
        except (AttributeError, IndexError, TypeError):
            continue
        for n in ast.walk(tree):
            if isinstance(n, ast.Name) and n.id in sdfg.arrays and n.id not in out:
                value = constant_of(sdfg, n.id)
                if value is not None:
                    out[n.id] = value
    return out


def _single(desc) -> bool:
    return (isinstance(desc, dt.Scalar) or (type(desc) is dt.Array and desc.total_size == 1))


def _literal_tasklet(t: nodes.Tasklet):
    """The literal of a tasklet ``out = <literal>`` without inputs, else None."""
    if t.in_connectors or len(t.out_connectors) != 1 or t.language != dtypes.Language.Python or t.side_effects:
        return None
    body = t.code.code if isinstance(t.code.code, list) else [t.code.code]
    if len(body) != 1 or not isinstance(body[0], ast.Assign) or len(body[0].targets) != 1:
        return None
    target, value = body[0].targets[0], body[0].value
    if not isinstance(target, ast.Name) or target.id not in t.out_connectors:
        return None
    negate = False
    if isinstance(value, ast.UnaryOp) and isinstance(value.op, ast.USub):
        negate, value = True, value.operand
    if not isinstance(value, ast.Constant) or type(value.value) not in LITERAL_TYPES:
        return None
    literal = value.value
    if negate:
        if isinstance(literal, bool) or not isinstance(literal, (int, float)):
            return None
        return -literal
    return literal


def constant_of(sdfg: SDFG, name: str, _depth: int = 0):
    """The literal a single-element container ``name`` of ``sdfg`` always holds when read (the class
    docstring says when), else None."""
    desc = sdfg.arrays.get(name)
    if desc is None or not _single(desc) or _depth > 32:
        return None
    writes = []
    for st in sdfg.states():
        for n in st.data_nodes():
            if n.data == name:
                writes += [(st, e) for e in st.in_edges(n)]
    if desc.transient:
        values = set()
        for state, e in writes:
            if not isinstance(e.src, nodes.Tasklet) or e.data.wcr is not None or state.out_degree(e.src) != 1:
                return None
            v = _literal_tasklet(e.src)
            if v is None:
                return None
            values.add((type(v), v))
        return values.pop()[1] if len(values) == 1 else None
    node = sdfg.parent_nsdfg_node
    if writes or node is None or name in node.out_connectors or name not in node.in_connectors:
        return None
    outer = sdfg.parent
    edges = [e for e in outer.in_edges(node) if e.dst_conn == name]
    if len(edges) != 1 or edges[0].data.data is None or edges[0].data.wcr is not None:
        return None
    src = edges[0].data.data
    if edges[0].data.subset is None or edges[0].data.subset.num_elements() != 1:
        return None
    return constant_of(outer.sdfg, src, _depth + 1)
