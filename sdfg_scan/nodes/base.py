"""What every sdfg_scan library node shares: the scan axis, connector lookup, errors, target detection
and the ``auto`` expansion that resolves to a concrete one.
"""

from __future__ import annotations

from dataclasses import dataclass

import dace
from dace import dtypes, properties
from dace.sdfg.scope import is_devicelevel_gpu
from dace.transformation.transformation import ExpandTransformation

from sdfg_scan.expansions import REPRODUCIBILITY, rank

GPU_SCHEDULES = (dtypes.ScheduleType.GPU_Device, dtypes.ScheduleType.GPU_ThreadBlock,
                 dtypes.ScheduleType.GPU_Persistent, dtypes.ScheduleType.GPU_ThreadBlock_Dynamic)


@dataclass(frozen=True)
class Operand:
    """One connected connector of a node: its edge, the outer container and the accessed window.

    ``shape`` is the size of the memlet subset (the window the node works on; all dimensions kept),
    ``strides`` the window's strides (container strides times the subset step), ``offset`` the
    subset's first index per dimension.
    """

    connector: str
    edge: dace.sdfg.graph.MultiConnectorEdge
    desc: dace.data.Data

    @property
    def shape(self) -> tuple:
        return tuple(self.edge.data.subset.size())

    @property
    def offset(self) -> tuple:
        return tuple(r[0] for r in self.edge.data.subset.ndrange())

    @property
    def strides(self) -> tuple:
        """Element strides of the window: container strides times the subset's step."""
        return tuple(s * r[2] for s, r in zip(self.desc.strides, self.edge.data.subset.ndrange(), strict=True))

    @property
    def dtype(self) -> dace.typeclass:
        return self.desc.dtype


@properties.make_properties
class ColumnNode(dace.nodes.LibraryNode):
    """Base class of sdfg_scan library nodes that work along one axis of N-d operands.

    All axes other than ``axis`` are independent columns. Operands may have arbitrary strides and
    may be windows (memlet subsets) of larger containers.
    """

    axis = properties.Property(dtype=int, default=-1, category="Semantics",
                               desc="the scan (vertical) axis; negative values count from the last axis")
    reproducibility = properties.Property(dtype=str, default="exact", category="Expansion",
                                          desc="weakest reproducibility class 'auto' may select: "
                                               "exact, replay or approx")

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
        if self.reproducibility not in REPRODUCIBILITY:
            raise self.error(f"reproducibility must be one of {REPRODUCIBILITY}, got '{self.reproducibility}'")
        return ops

    # -- expansion choice -----------------------------------------------------------------------
    def target(self, state: dace.SDFGState) -> str:
        """``"gpu"`` when the node runs on the GPU (schedule, storage or enclosing scope), else ``"cpu"``."""
        if self.schedule in GPU_SCHEDULES or is_devicelevel_gpu(state.sdfg, state, self):
            return "gpu"
        for e in list(state.in_edges(self)) + list(state.out_edges(self)):
            if e.data.data is not None and state.sdfg.arrays[e.data.data].storage in (
                    dtypes.StorageType.GPU_Global, dtypes.StorageType.GPU_Shared):
                return "gpu"
        return "cpu"

    def candidates(self, state: dace.SDFGState) -> list[str]:
        """Implementations that fit the target and the requested reproducibility, in registry order."""
        tgt = self.target(state)
        floor = rank(self.reproducibility)
        return [name for name, cls in self.implementations.items()
                if name != "auto" and tgt in cls.targets and rank(cls.reproducibility) <= floor]

    def choose_implementation(self, state: dace.SDFGState) -> str:
        """The implementation ``auto`` expands to; subclasses refine this (strides, sizes)."""
        cands = self.candidates(state)
        if not cands:
            raise self.error(f"no expansion fits target '{self.target(state)}' with reproducibility "
                             f"'{self.reproducibility}' or stronger")
        return cands[0]


class AutoExpansion(ExpandTransformation):
    """Base of every node's ``auto`` implementation.

    It asks the node for a concrete implementation (:meth:`ColumnNode.choose_implementation`), records
    it in ``node.implementation`` and expands with it, so the chosen expansion's environments are
    attached (a plain dispatching ``expansion`` would only attach this class's empty list).
    """

    environments: list = []
    targets = ("cpu", "gpu")
    reproducibility = "exact"

    @staticmethod
    def expansion(node, parent_state, parent_sdfg):  # pragma: no cover - apply() never calls it
        raise NotImplementedError("AutoExpansion resolves in apply()")

    def apply(self, state, sdfg, *args, **kwargs):
        node = state.node(self.subgraph[type(self)._match_node])
        chosen = node.choose_implementation(state)
        node.implementation = chosen
        node.expand(state, chosen)


__all__ = ["AutoExpansion", "ColumnNode", "GPU_SCHEDULES", "Operand"]
