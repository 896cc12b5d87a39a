"""What every sdfg_scan library node shares: the scan axis, connector lookup, errors, the operands its
layout is read from, and the ``auto`` expansion that resolves through :func:`sdfg_scan.choice.choose`.
"""

from __future__ import annotations

import dace
from dace import properties
from dace.transformation.transformation import ExpandTransformation

from sdfg_scan.choice import check_pin, choose
from sdfg_scan.context import GPU_SCHEDULES, REPRODUCIBILITY, Operand
from sdfg_scan.lineinfo import no_stack_lineinfo
from sdfg_scan.nodes.labels import expansion_label, node_label


@properties.make_properties
class ColumnNode(dace.nodes.LibraryNode):
    """Base class of sdfg_scan library nodes that work along one axis of N-d operands.

    All axes other than ``axis`` are independent columns. Operands may have arbitrary strides and
    may be windows (memlet subsets) of larger containers.
    """

    axis = properties.Property(dtype=int, default=-1, category="Semantics",
                               desc="the scan (vertical) axis; negative values count from the last axis")
    reproducibility = properties.Property(dtype=str, default="", category="Expansion",
                                          desc="this node's reproducibility floor: exact, replay or approx; "
                                               "empty: the class selection is asked for (exact by default)")
    selection_reason = properties.Property(dtype=str, default="", category="Expansion",
                                           desc="why selection chose the implementation (set by select_expansions)")
    selected = properties.Property(dtype=str, default="", category="Expansion",
                                   desc="the implementation selection chose (a different implementation is a pin)")

    # -- serialization and viewing --------------------------------------------------------------
    def describe(self) -> str:
        """The semantics that tell nodes of one kind apart (``sum, axis=1, forward``); subclasses refine."""
        return f"axis={self.axis}"

    def implementation_class(self) -> str:
        """Reproducibility class of the chosen implementation; the requested floor while it is ``auto``."""
        impl = type(self).implementations.get(self.implementation)
        if impl is None or issubclass(impl, AutoExpansion):
            return self.reproducibility
        return getattr(impl, "reproducibility", self.reproducibility)

    def __str__(self):
        """The label viewers draw and search: ``<name>: <Kind>(<describe()>) [<implementation>, <class>]``."""
        return node_label(self.name, type(self).__name__, self.describe(),
                          self.implementation or type(self).default_implementation, self.implementation_class())

    #: attributes written first (and always, even at their default values): what a viewer shows on top
    ALWAYS_SAVED = ("implementation", "reproducibility", "selection_reason")

    def to_json(self, parent):
        """DaCe's JSON, with ``implementation``, ``reproducibility`` and ``selection_reason`` always
        present and first, and SDFG-valued properties (``Scan.body``) last, after every short one."""
        obj = super().to_json(parent)
        attrs = obj["attributes"]
        props = dict(self.__properties__)
        front = {k: props[k].to_json(getattr(self, k)) for k in self.ALWAYS_SAVED}
        rest = {k: v for k, v in attrs.items() if k not in front}
        big = {k: v for k, v in rest.items() if isinstance(v, dict) and v.get("type") == "SDFG"}
        obj["attributes"] = {**front, **{k: v for k, v in rest.items() if k not in big}, **big}
        return obj

    @no_stack_lineinfo()
    def expand(self, state_or_sdfg, state_or_impl=None, **kwargs) -> str:
        """``LibraryNode.expand``; the nested SDFG put in the node's place is labelled
        ``<name>_<implementation>`` (:func:`sdfg_scan.nodes.labels.expansion_label`) so that the expanded
        program shows which schedule each node got. DaCe's per-node walk of the Python stack is off
        meanwhile (:mod:`sdfg_scan.lineinfo`)."""
        if not isinstance(state_or_sdfg, dace.SDFGState):  # deprecated (sdfg, state) interface
            if isinstance(state_or_impl, dace.SDFGState):
                self.before_expand(state_or_impl)
            return super().expand(state_or_sdfg, state_or_impl, **kwargs)
        self.before_expand(state_or_sdfg)
        before = set(state_or_sdfg.nodes())
        chosen = super().expand(state_or_sdfg, state_or_impl, **kwargs)
        created = [n for n in state_or_sdfg.nodes() if n not in before and isinstance(n, dace.nodes.NestedSDFG)]
        if len(created) == 1:
            # ``auto`` recorded the concrete implementation in the node before expanding with it
            auto = issubclass(type(self).implementations[chosen], AutoExpansion)
            created[0].label = expansion_label(self.name, self.implementation if auto else chosen)
        return chosen

    def before_expand(self, state: dace.SDFGState) -> None:
        """Called before every expansion (``Scan``: the body's strides follow the containers outside)."""

    # -- errors ---------------------------------------------------------------------------------
    def error(self, message: str) -> ValueError:
        """A ``ValueError`` whose message names the API, the node class and its label."""
        return ValueError(f"sdfg_scan.{type(self).__name__} '{self.label}': {message}")

    # -- connectors -----------------------------------------------------------------------------
    def operand(self, state: dace.SDFGState, connector: str) -> Operand:
        """The edge and container of ``connector`` (input or output); a clear error if unconnected."""
        for e in state.in_edges(self):
            if e.dst_conn == connector:
                return Operand(connector, e, state.sdfg.arrays[e.data.data])
        for e in state.out_edges(self):
            if e.src_conn == connector:
                return Operand(connector, e, state.sdfg.arrays[e.data.data])
        raise self.error(f"connector '{connector}' is not connected; connect it with a memlet "
                         f"(in: {sorted(self.in_connectors)}, out: {sorted(self.out_connectors)})")

    def has_edge(self, state: dace.SDFGState, connector: str) -> bool:
        return any(e.dst_conn == connector for e in state.in_edges(self)) or any(
            e.src_conn == connector for e in state.out_edges(self))

    def resolved_axis(self, ndim: int) -> int:
        if not -ndim <= self.axis < ndim:
            raise self.error(f"axis {self.axis} is out of range for operands of rank {ndim}; "
                             f"expected -{ndim} <= axis < {ndim}")
        return self.axis % ndim

    def check_common(self, state: dace.SDFGState, connectors: list[str]) -> list[Operand]:
        """Check that ``connectors`` are connected, non-empty-ranked and of one shape; return them."""
        ops = [self.operand(state, c) for c in connectors]
        ref = ops[0]
        if len(ref.shape) == 0:
            raise self.error(f"connector '{ref.connector}' is a scalar; expected an array with the scan axis")
        for op in ops[1:]:
            if len(op.shape) != len(ref.shape) or any(
                    dace.symbolic.inequal_symbols(a, b) for a, b in zip(op.shape, ref.shape, strict=True)):
                raise self.error(f"connector '{op.connector}' has shape {op.shape}, expected the shape of "
                                 f"'{ref.connector}' {ref.shape}")
        self.resolved_axis(len(ref.shape))
        if self.reproducibility and self.reproducibility not in REPRODUCIBILITY:
            raise self.error(f"reproducibility must be one of {REPRODUCIBILITY} (or empty), "
                             f"got '{self.reproducibility}'")
        return ops

    # -- layout ---------------------------------------------------------------------------------
    def layout_operands(self, state: dace.SDFGState) -> list[Operand]:
        """The connected operands that carry the scan axis (the highest rank), principal one first:
        what :func:`sdfg_scan.context.layout_of` reads."""
        ops = [self.operand(state, c) for c in list(self.in_connectors) + list(self.out_connectors)
               if self.has_edge(state, c)]
        ops = [op for op in ops if op.edge.data.data is not None]
        if not ops:
            return []
        top = max(len(op.shape) for op in ops)
        return [op for op in ops if len(op.shape) == top]


class AutoExpansion(ExpandTransformation):
    """Base of every node's ``auto`` implementation.

    It asks the chooser (:func:`sdfg_scan.choice.choose`, what ``select_expansions`` uses) for a concrete
    implementation, records it in ``node.implementation`` and expands with it, so the chosen
    expansion's environments are attached (a plain dispatching ``expansion`` would only attach this
    class's empty list).
    """

    environments: list = []
    targets = ("cpu", "gpu")
    reproducibility = "exact"

    @staticmethod
    def expansion(node, parent_state, parent_sdfg):  # pragma: no cover - apply() never calls it
        raise NotImplementedError("AutoExpansion resolves in apply()")

    def apply(self, state, sdfg, *args, **kwargs):
        node = state.node(self.subgraph[type(self)._match_node])
        choice = choose(node, state)
        node.implementation, node.selection_reason = choice.implementation, choice.reason
        node.expand(state, choice.implementation)


__all__ = ["AutoExpansion", "ColumnNode", "GPU_SCHEDULES", "Operand", "check_pin"]
