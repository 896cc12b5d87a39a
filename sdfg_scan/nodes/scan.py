"""``Scan``: the general scan, whose body is a column SDFG (carry slots in registers, k-loop inside)."""

from __future__ import annotations

import copy

import dace
import dace.library
import sympy as sp
from dace import properties, symbolic
from dace.properties import DictProperty, SDFGReferenceProperty
from dace.transformation.transformation import ExpandTransformation

from sdfg_scan.expansions import declare
from sdfg_scan.expansions.column_loop import window_sdfg
from sdfg_scan.expansions.environments import ExactArithmetic
from sdfg_scan.nodes.base import AutoExpansion, ColumnNode
from sdfg_scan.reference import EMIT_MODES
from sdfg_scan.scan_structure import NotAScan, analyze_scan

COLUMNS = ("map", "single")
LEVELS = "_nk"
"""Level-count symbol of bodies built by :func:`sdfg_scan.expansions.scan_body.build_body` (``columns="map"``)."""


def stride_symbol(connector: str) -> str:
    """Symbol of the scan-axis stride of a per-level connector in a ``columns="map"`` body."""
    return f"_st_{connector}"


def _body_copy(node: Scan) -> dace.SDFG:
    """A copy of the body whose outputs without a connector (removed as dead by DaCe) are transients."""
    body = copy.deepcopy(node.body)
    conns = set(node.in_connectors) | set(node.out_connectors)
    for name, desc in body.arrays.items():
        if not desc.transient and name not in conns:
            desc.transient = True
            if isinstance(desc, dace.data.Array):
                desc.strides = [1] * len(desc.shape)
                desc.total_size = desc.shape[0] if len(desc.shape) == 1 else desc.total_size
            if stride_symbol(name) in body.symbols:
                body.remove_symbol(stride_symbol(name))
    return body


def _nested_column(node: Scan) -> dace.nodes.NestedSDFG:
    body = _body_copy(node)
    return dace.nodes.NestedSDFG(node.label, body, {c: None for c in node.in_connectors},
                                 {c: None for c in node.out_connectors}, symbol_mapping=dict(node.symbol_mapping))


def _mapped_columns(node: Scan, state: dace.SDFGState) -> dace.SDFG:
    """``columns="map"``: map over every non-axis index -> nested column SDFG (the body)."""
    conns = list(node.in_connectors) + list(node.out_connectors)
    ops = {c: node.operand(state, c) for c in conns}
    per_level = [c for c in conns if not isinstance(node.body.arrays[c], dace.data.Scalar)]
    ref = ops[per_level[0]]
    axis = node.resolved_axis(len(ref.shape))
    shape = ref.shape
    nk = node.levels(state)
    outer, _ = window_sdfg(node, state, conns, f"{node.label}_sequential",
                           keep_symbols=tuple(symbolic.pystr_to_symbolic(str(nk)).free_symbols))
    col_dims = [d for d in range(len(shape)) if d != axis]
    params = {d: f"_i{d}" for d in col_dims}
    st = outer.add_state("columns", is_start_block=True)
    ranges = {params[d]: f"0:{symbolic.symstr(shape[d])}" for d in col_dims} or {"_i": "0:1"}
    me, mx = st.add_map(f"{node.label}_columns", ranges)
    body = _body_copy(node)
    mapping = dict(node.symbol_mapping)
    mapping[LEVELS] = nk
    for c in per_level:
        mapping[stride_symbol(c)] = outer.arrays[c].strides[axis]
    for s in body.free_symbols:
        if s not in mapping and s in outer.symbols:
            mapping[s] = dace.symbol(s, outer.symbols[s])
    nsdfg = st.add_nested_sdfg(body, {c: None for c in node.in_connectors}, {c: None for c in node.out_connectors},
                               symbol_mapping=mapping)

    def index(c):
        desc = outer.arrays[c]
        if c in per_level:
            n = desc.shape[axis]
            return ", ".join(f"0:{symbolic.symstr(n)}" if d == axis else params[d] for d in range(len(shape)))
        if len(desc.shape) == len(col_dims) and col_dims:
            return ", ".join(params[d] for d in col_dims)
        return "0"

    for c in node.in_connectors:
        st.add_memlet_path(st.add_read(c), me, nsdfg, dst_conn=c, memlet=dace.Memlet(f"{c}[{index(c)}]"))
    for c in node.out_connectors:
        st.add_memlet_path(nsdfg, mx, st.add_write(c), src_conn=c, memlet=dace.Memlet(f"{c}[{index(c)}]"))
    if not node.in_connectors:
        st.add_edge(me, None, nsdfg, None, dace.Memlet())
    return outer


@dace.library.expansion
@declare(targets=("cpu", "gpu"), reproducibility="exact")
class ExpandScanSequential(ExpandTransformation):
    """The body as a nested SDFG: one column per map iteration, its k-loop inside, carries in scalars.

    ``columns="single"`` (lifted gt4py scans): the body replaces the node as it is (same connectors,
    same symbol mapping), so the computation is the original one, bitwise. ``columns="map"``: a map
    over every non-axis index around the body.
    """

    environments = [ExactArithmetic]

    @staticmethod
    def expansion(node, parent_state, parent_sdfg):
        node.validate(parent_sdfg, parent_state)
        if node.columns == "single":
            return _nested_column(node)
        return _mapped_columns(node, parent_state)


@dace.library.expansion
@declare(targets=("cpu",), reproducibility="exact")
class ExpandScanLevelsOutside(ExpandTransformation):
    """``columns="map"`` only: the ``sequential`` map over columns with ``ScanLoopInterchange``
    applied: the level loop outside, per level a parallel map over all columns running the body's
    loop blocks once (carries in per-column arrays). Unit-stride level rows on cell-contiguous data;
    bitwise the ``sequential`` result."""

    environments = [ExactArithmetic]

    @staticmethod
    def expansion(node, parent_state, parent_sdfg):
        from sdfg_scan.transformations.scan_loop_interchange import interchange_single_map

        node.validate(parent_sdfg, parent_state)
        if node.columns != "map":
            raise node.error("the 'levels_outside' expansion needs columns='map' (a lifted gt4py scan sits in the "
                             "caller's map: use sdfg_scan.optimize or ScanLoopInterchange on the expanded SDFG)")
        outer = _mapped_columns(node, parent_state)
        reason = interchange_single_map(outer)
        if reason is not None:
            raise node.error(f"the 'levels_outside' expansion cannot move the level loop out: {reason}; "
                             "use 'sequential'")
        return outer


@dace.library.expansion
class ExpandScanAuto(AutoExpansion):
    """See :meth:`Scan.choose_implementation`."""


@dace.library.node
class Scan(ColumnNode):
    """General scan along one axis whose body is a column SDFG.

    ``scan :: (c -> x_k -> (c, y_k)) -> c -> [x] -> ([c], [y], c)``. Reference loop (one column,
    forward; ``sdfg_scan.reference.scan``)::

        carry = init
        for k in levels(start, stop, direction):
            carry, y = body(carry, x, k)   # x readable at k and at constant offsets k +/- o
            out[k] = carry (emit) ; ys[k] = y
        final = carry

    The body (``body``, an SDFG held like ``NestedSDFG.sdfg``) has gt4py's structure: entry states
    copy init connectors into carry containers, one ``LoopRegion`` runs over the levels, optional exit
    states read the final carries (see :mod:`sdfg_scan.scan_structure`); blocks between the entry
    states and the loop (levels peeled by ``PeelBoundaryLevels``) are accepted, and ``start`` /
    ``stop`` then describe the main loop (``analyze_scan(body, prologue=True)``). ``loop_variable``,
    ``direction``, ``start`` and ``stop`` are derived from the body (:meth:`sync_from_body`) and checked
    by :meth:`validate`. Unlike a ``NestedSDFG``, the body is opaque to DaCe passes until expansion, so
    scan transformations can rewrite it as one unit.

    ``columns="single"``: the node computes one column (a lifted gt4py scan inside the caller's map;
    connectors and ``symbol_mapping`` are the original nested SDFG's). ``columns="map"``: the node
    takes N-d operands; every index except ``axis`` is an independent column; per-level body arrays
    have shape ``(_nk,)`` (``(_nk + 1,)`` for ``include_initial``) and stride ``_st_<connector>``,
    K-less ones are scalars.

    ==================  =========  =========  ==============================================
    implementation      targets    class      schedule
    ==================  =========  =========  ==============================================
    ``sequential``      cpu, gpu   exact      the body per column (map iteration / GPU thread)
    ``levels_outside``  cpu        exact      ``columns="map"``: level loop outside, per level a map over
                                              all columns (``ScanLoopInterchange``); cell-contiguous data
    ``auto``            cpu, gpu   exact      ``levels_outside`` for cell-contiguous CPU data, else
                                              ``sequential``
    ==================  =========  =========  ==============================================
    """

    implementations = {"sequential": ExpandScanSequential, "levels_outside": ExpandScanLevelsOutside,
                       "auto": ExpandScanAuto}
    default_implementation = "auto"

    body = SDFGReferenceProperty(desc="column SDFG: entry copies, LoopRegion over the levels, exit states",
                                 allow_none=True)
    symbol_mapping = DictProperty(key_type=str, value_type=sp.Basic,
                                  desc="body symbol -> expression in the enclosing SDFG")
    columns = properties.Property(dtype=str, default="map", category="Semantics",
                                  desc="'map': N-d operands, map over non-axis indices; 'single': one column")
    emit = properties.Property(dtype=str, default="inclusive", category="Semantics",
                               desc=f"carry outputs per level, one of {EMIT_MODES} (as built by the frontend)")
    loop_variable = properties.Property(dtype=str, default="", category="Derived", desc="the body's level index")
    direction = properties.Property(dtype=str, default="forward", category="Derived",
                                    desc="forward (increasing level) or backward")
    start = properties.SymbolicProperty(default=0, category="Derived", desc="first level of [start, stop)")
    stop = properties.SymbolicProperty(default=0, category="Derived", desc="end of [start, stop) (exclusive)")

    def __init__(self, name, body: dace.SDFG | None = None, inputs=(), outputs=(), symbol_mapping=None,
                 columns: str = "map", axis: int = -1, emit: str = "inclusive", **kwargs):
        super().__init__(name, inputs={c: None for c in inputs}, outputs={c: None for c in outputs}, **kwargs)
        self.body = body
        self.symbol_mapping = dict(symbol_mapping or {})
        self.columns, self.axis, self.emit = columns, axis, emit
        if body is not None:
            self.sync_from_body()

    @classmethod
    def from_nested_sdfg(cls, nsdfg: dace.nodes.NestedSDFG) -> Scan:
        """A ``columns="single"`` Scan with the nested SDFG's SDFG as body and the same connectors."""
        node = cls(nsdfg.label, nsdfg.sdfg, list(nsdfg.in_connectors), list(nsdfg.out_connectors),
                   symbol_mapping=dict(nsdfg.symbol_mapping), columns="single")
        node.body.parent_nsdfg_node = None
        node.body.parent = None
        node.body.parent_sdfg = None
        node.debuginfo = nsdfg.debuginfo
        return node

    def sync_from_body(self) -> None:
        """Re-derive ``loop_variable``, ``direction``, ``start`` and ``stop`` from the body's loop."""
        s = analyze_scan(self.body, prologue=True)
        self.loop_variable, self.direction = s.variable, s.direction
        self.start, self.stop = symbolic.simplify(s.start), symbolic.simplify(s.stop)

    def __str__(self):
        return f"Scan({self.direction}, {self.loop_variable} in [{self.start}, {self.stop}))"

    @property
    def free_symbols(self) -> set[str]:
        syms = set()
        for v in self.symbol_mapping.values():
            syms |= {str(s) for s in symbolic.pystr_to_symbolic(str(v)).free_symbols}
        return syms

    def levels(self, state: dace.SDFGState):
        """Level count of a ``columns="map"`` node (the scan-axis size of its per-level operands)."""
        for c in list(self.in_connectors) + list(self.out_connectors):
            if not isinstance(self.body.arrays[c], dace.data.Scalar):
                op = self.operand(state, c)
                n = op.shape[self.resolved_axis(len(op.shape))]
                shape0 = self.body.arrays[c].shape[0]
                return n - (symbolic.pystr_to_symbolic(str(shape0)) - dace.symbol(LEVELS))
        raise self.error("no per-level connector; a columns='map' scan needs at least one array with the axis")

    def choose_implementation(self, state):
        """CPU, ``columns="map"``, every per-level operand unit-stride along its last column axis:
        ``levels_outside``; otherwise ``sequential``."""
        cands = self.candidates(state)
        if self.target(state) == "cpu" and self.columns == "map" and "levels_outside" in cands:
            conns = [c for c in list(self.in_connectors) + list(self.out_connectors)
                     if self.has_edge(state, c) and not isinstance(self.body.arrays[c], dace.data.Scalar)]
            unit = True
            for c in conns:
                op = self.operand(state, c)
                axis = self.resolved_axis(len(op.shape))
                cols = [d for d in range(len(op.shape)) if d != axis]
                stride = op.strides[cols[-1]] if cols else 0
                unit &= not symbolic.issymbolic(stride) and stride == 1
            if conns and unit:
                return "levels_outside"
        return "sequential" if "sequential" in cands else super().choose_implementation(state)

    # -- validation -------------------------------------------------------------------------------
    def validate(self, sdfg, state):
        if self.body is None:
            raise self.error("has no body; build it with sdfg_scan.scan(...) or lift it with LiftScans")
        if self.columns not in COLUMNS:
            raise self.error(f"columns must be one of {COLUMNS}, got '{self.columns}'")
        if self.emit not in EMIT_MODES:
            raise self.error(f"unknown emit mode '{self.emit}'; expected one of {EMIT_MODES}")
        try:
            s = analyze_scan(self.body, prologue=True)
        except NotAScan as e:
            raise self.error(f"the body is not a column scan: {e}") from None
        try:
            self.body.validate()
        except Exception as e:  # noqa: BLE001 - name the node in any body validation failure
            raise self.error(f"the body does not validate: {type(e).__name__}: {e}") from None
        for prop, derived in (("loop_variable", s.variable), ("direction", s.direction)):
            if getattr(self, prop) != derived:
                raise self.error(f"property {prop} is '{getattr(self, prop)}' but the body says '{derived}'; "
                                 "call node.sync_from_body() after editing the body")
        for prop, derived in (("start", s.start), ("stop", s.stop)):
            if symbolic.inequal_symbols(symbolic.simplify(getattr(self, prop)), symbolic.simplify(derived)):
                raise self.error(f"property {prop} is '{getattr(self, prop)}' but the body says '{derived}'; "
                                 "call node.sync_from_body() after editing the body")
        body_args = {k for k, d in self.body.arrays.items() if not d.transient}
        conns = set(self.in_connectors) | set(self.out_connectors)
        for c in sorted(conns - body_args):
            raise self.error(f"connector '{c}' has no non-transient container in the body; "
                             f"expected one of {sorted(body_args)}")
        for c in sorted((body_args - conns) & set(s.inputs)):
            raise self.error(f"body input '{c}' is not a connector of the node; add connector '{c}'")
        for c in sorted(conns):
            if not self.has_edge(state, c):
                continue
            op = self.operand(state, c)
            inner = self.body.arrays[c]
            if op.dtype != inner.dtype:
                kind = "carry init" if c in self.in_connectors and isinstance(inner, dace.data.Scalar) else "operand"
                raise self.error(f"connector '{c}' ({kind}) has dtype {op.dtype}, expected {inner.dtype} "
                                 "(the body's container); cast the operand or rebuild the body")
        if self.columns == "map":
            self._validate_mapped(state)

    def _validate_mapped(self, state):
        conns = list(self.in_connectors) + list(self.out_connectors)
        per_level = [c for c in conns if not isinstance(self.body.arrays[c], dace.data.Scalar)]
        if not per_level:
            raise self.error("no per-level connector; a columns='map' scan needs at least one array with the axis")
        ref = self.operand(state, per_level[0])
        ndim = len(ref.shape)
        axis = self.resolved_axis(ndim)
        colshape = [s for d, s in enumerate(ref.shape) if d != axis]
        for c in per_level:
            op = self.operand(state, c)
            if len(op.shape) != ndim:
                raise self.error(f"connector '{c}' has rank {len(op.shape)}, expected rank {ndim} "
                                 f"(the rank of '{per_level[0]}')")
            cs = [s for d, s in enumerate(op.shape) if d != axis]
            if any(symbolic.inequal_symbols(a, b) for a, b in zip(cs, colshape, strict=True)):
                raise self.error(f"connector '{c}' has shape {op.shape}, expected columns {tuple(colshape)} "
                                 f"around axis {axis} (like '{per_level[0]}')")
        for c in conns:
            if c in per_level:
                continue
            op = self.operand(state, c)
            shp = [s for s in op.shape if s != 1] if len(op.shape) != len(colshape) else list(op.shape)
            if shp and (len(shp) != len(colshape) or any(
                    symbolic.inequal_symbols(a, b) for a, b in zip(shp, colshape, strict=True))):
                raise self.error(f"connector '{c}' is K-less with shape {op.shape}, expected the column shape "
                                 f"{tuple(colshape)} (the operand shape without axis {axis}) or a scalar")


__all__ = ["COLUMNS", "LEVELS", "ExpandScanAuto", "ExpandScanLevelsOutside", "ExpandScanSequential", "Scan",
           "stride_symbol"]
