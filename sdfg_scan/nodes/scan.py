"""``Scan``: the general scan, whose body is a column SDFG (carry slots in registers, k-loop inside)."""

from __future__ import annotations

import dace
import dace.library
import sympy as sp
from dace import properties, symbolic
from dace.properties import DictProperty, SDFGReferenceProperty
from dace.transformation.transformation import ExpandTransformation

from sdfg_scan.context import CellMap, Operand
from sdfg_scan.cost import CELL_OUTER_SECONDS, FORK_JOIN_SECONDS, branch_seconds, efficiency_of, size, stream_seconds
from sdfg_scan.expansions import declare
from sdfg_scan.expansions.environments import ExactArithmetic
from sdfg_scan.expansions.levels_outside import body_plan, cell_contiguous, interchange_single_map, parallel_levels
from sdfg_scan.expansions.scan_blocked import (
    ExpandScanBlocked,
    ExpandScanBlockedExactSIMD,
    ExpandScanBlockedKCached,
    ExpandScanBlockedSIMD,
    ExpandScanBlockedTimed,
)
from sdfg_scan.expansions.scan_blocked_codegen import cell_dims, stride_kind
from sdfg_scan.expansions.scan_body import LEVELS, stride_symbol
from sdfg_scan.expansions.scan_columns import cell_map, cell_symbols, mapped_columns, nested_column, per_level
from sdfg_scan.expansions.scan_kcached import ExpandScanKCached
from sdfg_scan.nodes.base import AutoExpansion, ColumnNode
from sdfg_scan.reference import EMIT_MODES
from sdfg_scan.scan_structure import NotAScan, analyze_scan

COLUMNS = ("map", "single", "cells")


def _columns_sdfg(node, state: dace.SDFGState, name: str) -> dace.SDFG:
    """The map over columns (``columns="map"``) or over cells (``columns="cells"``) around the body."""
    return cell_map(node, state, name) if node.columns == "cells" else mapped_columns(node, state, name)


@dace.library.expansion
@declare(targets=("cpu", "gpu"), reproducibility="exact",
         efficiency={"cpu:cell": 0.03, "cpu:k": 0.37, "cpu:strided": 0.03, "gpu:cell": 0.7, "gpu": 0.1})
class ExpandScanSequential(ExpandTransformation):
    """The body per column: one column per map iteration (GPU: per thread), its k-loop inside.

    ``columns="single"`` (a lifted gt4py scan in the caller's map): the body replaces the node as it
    is (same connectors, same symbol mapping). ``columns="cells"``: the map over cells the node was
    lifted from, rebuilt around the body. ``columns="map"``: a map over every non-axis index. All
    three compute what the original program computed, bitwise.
    """

    environments = [ExactArithmetic]

    @staticmethod
    def expansion(node, parent_state, parent_sdfg):
        node.validate(parent_sdfg, parent_state)
        if node.columns == "single":
            return nested_column(node)
        return _columns_sdfg(node, parent_state, f"{node.label}_sequential")


@dace.library.expansion
@declare(targets=("cpu",), reproducibility="exact", efficiency={"cpu:cell": 0.6, "cpu:k": 0.07, "cpu:strided": 0.03})
class ExpandScanLevelsOutside(ExpandTransformation):
    """``columns="map"`` or ``"cells"``: the ``sequential`` map over columns with the level loop moved
    outside (:mod:`sdfg_scan.expansions.levels_outside`): per level a parallel map over all columns
    runs the body's loop blocks once, carries in per-column arrays. Unit-stride level rows on
    cell-contiguous data; bitwise the ``sequential`` result. One fork/join per level."""

    environments = [ExactArithmetic]

    @staticmethod
    def applies(node, ctx) -> str | None:
        if node.columns == "single":
            return "needs the map over cells in the node (columns='single' sits in the caller's map; LiftCellMap)"
        params = node.cell_params if node.columns == "cells" else []
        made = body_plan(node.body, node.symbol_mapping, params, set(node.out_connectors))
        return made if isinstance(made, str) else None

    @staticmethod
    def cost(node, ctx) -> float:
        levels = size(ctx, ctx.layout.levels, "levels")
        return stream_seconds(ctx, efficiency_of(ExpandScanLevelsOutside, ctx), chain=False) + \
            levels * FORK_JOIN_SECONDS + CELL_OUTER_SECONDS + branch_seconds(node, ctx)

    @staticmethod
    def expansion(node, parent_state, parent_sdfg):
        node.validate(parent_sdfg, parent_state)
        if node.columns == "single":
            raise node.error("the 'levels_outside' expansion needs the map over cells in the node (columns='map' "
                             "or 'cells'); sdfg_scan.optimize gives a lifted scan its map (LiftCellMap)")
        outer = _columns_sdfg(node, parent_state, f"{node.label}_levels_outside")
        reason = interchange_single_map(outer)
        if reason is not None:
            raise node.error(f"the 'levels_outside' expansion cannot move the level loop out: {reason}; "
                             "use 'sequential'")
        parallel_levels(outer, node.schedule)
        return outer


@dace.library.expansion
class ExpandScanAuto(AutoExpansion):
    """The cheapest eligible expansion (:func:`sdfg_scan.choice.choose`): ``levels_outside`` on
    cell-contiguous CPU data with enough cells to pay a fork/join per level, else ``sequential``."""


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
    connectors and ``symbol_mapping`` are the original nested SDFG's). ``columns="cells"``: the node
    owns that map over cells (``LiftCellMap``): ``cell_params`` / ``cell_ranges`` are the map's,
    ``cell_subsets`` the subset of its edge's container each connector reads or writes for one cell
    (in the map parameters, which ``symbol_mapping`` may use), the edges carry the union over all
    cells; the schedule over cells is then the expansion's choice. ``columns="map"``: the node
    takes N-d operands; every index except ``axis`` is an independent column; per-level body arrays
    have shape ``(_nk,)`` (``(_nk + 1,)`` for ``include_initial``) and stride ``_st_<connector>``,
    K-less ones are scalars.

    ====================  =========  =========  ==============================================
    implementation        targets    class      schedule
    ====================  =========  =========  ==============================================
    ``sequential``        cpu, gpu   exact      the body per column (map iteration / GPU thread)
    ``levels_outside``    cpu        exact      ``columns="map"``/``"cells"``: level loop outside, per level
                                                a map over all columns; cell-contiguous data
    ``kcached``           cpu, gpu   exact      ``sequential`` with level-offset input reads from a register
                                                ring (one load per element; :class:`ExpandScanKCached`)
    ``blocked``           cpu        exact      ``columns="cells"``: blocks of B contiguous cells, level loop
                                                inside, the body inlined as C++ per cell (scan_blocked.py)
    ``blocked_simd``      cpu        replay     ``blocked``, branches if-converted, vector libm (libmvec)
    ``blocked_simd_exact`` cpu       exact      ``blocked_simd``'s loop, glibc's scalar exp/log per lane, pow
                                                checked (glibc's call where not provably its value)
    ``blocked_kcached``   cpu        exact      ``blocked`` with level-offset input reads from ``[W, B]`` rings
    ``blocked_timed``     cpu        exact      ``blocked`` and ``blocked_simd_exact`` in one tasklet, the faster
                                                kept after timing both on the first calls (bodies with libm calls)
    ``auto``              cpu, gpu   (chosen)   the cheapest eligible (:class:`ExpandScanAuto`)
    ====================  =========  =========  ==============================================
    """

    implementations = {"sequential": ExpandScanSequential, "levels_outside": ExpandScanLevelsOutside,
                       "kcached": ExpandScanKCached,
                       "blocked": ExpandScanBlocked, "blocked_simd": ExpandScanBlockedSIMD,
                       "blocked_simd_exact": ExpandScanBlockedExactSIMD,
                       "blocked_kcached": ExpandScanBlockedKCached, "blocked_timed": ExpandScanBlockedTimed,
                       "auto": ExpandScanAuto}
    default_implementation = "auto"

    body = SDFGReferenceProperty(desc="column SDFG: entry copies, LoopRegion over the levels, exit states",
                                 allow_none=True)
    symbol_mapping = DictProperty(key_type=str, value_type=sp.Basic,
                                  desc="body symbol -> expression in the enclosing SDFG")
    columns = properties.Property(dtype=str, default="map", category="Semantics",
                                  desc="'map': N-d operands, map over non-axis indices; 'single': one column; "
                                       "'cells': the node owns gt4py's map over cells")
    cell_params = properties.ListProperty(element_type=str, default=[], category="Cells",
                                          desc="columns='cells': the map parameters")
    cell_ranges = properties.ListProperty(element_type=str, default=[], category="Cells",
                                          desc="columns='cells': the map ranges (begin:end[:step], end exclusive)")
    cell_subsets = DictProperty(key_type=str, value_type=str, default={}, category="Cells",
                                desc="columns='cells': connector -> subset one cell accesses")
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

    def before_expand(self, state: dace.SDFGState) -> None:
        """The body's operand strides follow the containers outside (a pass such as gt4py's
        ``gt_change_strides`` may have changed them since the scan was lifted): :mod:`sdfg_scan.scan_strides`."""
        from sdfg_scan.scan_strides import sync_body_strides

        sync_body_strides(self, state)

    def sync_from_body(self) -> None:
        """Re-derive ``loop_variable``, ``direction``, ``start`` and ``stop`` from the body's loop."""
        s = analyze_scan(self.body, prologue=True)
        self.loop_variable, self.direction = s.variable, s.direction
        self.start, self.stop = symbolic.simplify(s.start), symbolic.simplify(s.stop)

    def rename_connectors(self, state: dace.SDFGState, names: dict[str, str]) -> None:
        """Rename connectors ``old -> new``: the body's containers, the node's connectors, its edges in
        ``state`` and ``cell_subsets`` (the values stay those of the enclosing SDFG)."""
        if not names:
            return
        self.body.replace_dict(dict(names))
        for old, new in names.items():
            if old in self.in_connectors:
                self.add_in_connector(new, self.in_connectors[old])
            if old in self.out_connectors:
                self.add_out_connector(new, self.out_connectors[old])
        for e in state.in_edges(self):
            if e.dst_conn in names:
                e.dst_conn = names[e.dst_conn]
        for e in state.out_edges(self):
            if e.src_conn in names:
                e.src_conn = names[e.src_conn]
        for old in names:
            if old in self.in_connectors:
                self.remove_in_connector(old)
            if old in self.out_connectors:
                self.remove_out_connector(old)
        self.cell_subsets = {names.get(k, k): v for k, v in self.cell_subsets.items()}

    def describe(self) -> str:
        axis = f", axis={self.axis}" if self.columns == "map" else ""
        cells = f", cells {', '.join(self.cell_params)}" if self.columns == "cells" else ""
        return f"{self.direction}, {self.loop_variable} in [{self.start}, {self.stop}){axis}{cells}"

    @property
    def free_symbols(self) -> set[str]:
        if self.columns == "cells":
            return cell_symbols(self)
        syms = set()
        for v in self.symbol_mapping.values():
            syms |= {str(s) for s in symbolic.pystr_to_symbolic(str(v)).free_symbols}
        return syms

    # -- layout (read by sdfg_scan.context.layout_of) ---------------------------------------------
    def layout_operands(self, state: dace.SDFGState) -> list[Operand]:
        """``columns="map"``: the per-level operands."""
        return [self.operand(state, c) for c in per_level(self) if self.has_edge(state, c)]

    def cell_map(self, state: dace.SDFGState) -> CellMap | None:
        """The map over cells the node owns (``cells``) or sits in (``single``); None for ``map``."""
        if self.columns == "cells":
            rng = dace.subsets.Range.from_string(", ".join(self.cell_ranges))
            kinds = [self._unit_along(state, c, self.cell_params[-1]) for c in self.cell_subsets
                     if self.has_edge(state, c)]
            # a stride only known at run time is taken to follow the program's known ones: gt4py leaves
            # some fields' cell stride symbolic (icon4py's tuples of tracers) beside unit-stride ones, and
            # icon4py passes every field in one layout; a wrong guess costs speed, never a value (the
            # schedules index through the real strides)
            unit = "no" not in kinds and ("yes" in kinds or all(k == "any" for k in kinds))
            return CellMap(tuple(self.cell_params), rng.num_elements(), unit)
        if self.columns == "single":
            me = state.entry_node(self)
            if not isinstance(me, dace.nodes.MapEntry):
                return CellMap((), 1, False)
            return CellMap(tuple(me.map.params), me.map.range.num_elements(), cell_contiguous(state, me, self))
        return None

    def _unit_along(self, state: dace.SDFGState, c: str, param: str) -> str:
        """Whether connector ``c``'s container is unit-stride along the cell parameter: ``"yes"``,
        ``"no"`` (a constant stride other than 1, or one made of the array's sizes), ``"unknown"`` (a
        stride symbol of its own, as gt4py's) or ``"any"`` (one element per cell: a scalar, a K-less field)."""
        op = self.operand(state, c)
        if isinstance(op.desc, dace.data.Scalar):
            return "any"
        sub = dace.subsets.Range.from_string(self.cell_subsets[c])
        if sub.num_elements() == 1:   # K-less (one element per cell): no evidence of the fields' layout
            return "any"
        out = "any"
        for d in cell_dims(sub, param):
            kind = stride_kind(op.desc, d)
            if kind == "no":   # a number other than 1, or a dense stride of the array's sizes
                return "no"
            if kind == "unknown" or out == "any":
                out = kind
        return out

    def level_count(self):
        """Levels of one column (the main loop's trip count)."""
        return symbolic.pystr_to_symbolic(f"({self.stop}) - ({self.start})")

    def levels(self, state: dace.SDFGState):
        """Level count of a ``columns="map"`` node (the scan-axis size of its per-level operands)."""
        for c in list(self.in_connectors) + list(self.out_connectors):
            if not isinstance(self.body.arrays[c], dace.data.Scalar):
                op = self.operand(state, c)
                n = op.shape[self.resolved_axis(len(op.shape))]
                shape0 = self.body.arrays[c].shape[0]
                return n - (symbolic.pystr_to_symbolic(str(shape0)) - dace.symbol(LEVELS))
        raise self.error("no per-level connector; a columns='map' scan needs at least one array with the axis")

    def _extra_slots(self, connector: str):
        """Slots of a per-level connector beyond the level count (1 for ``include_initial`` carries)."""
        return symbolic.simplify(symbolic.pystr_to_symbolic(str(self.body.arrays[connector].shape[0]))
                                 - dace.symbol(LEVELS))

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
            raise self.error(f"the body does not validate: {type(e).__name__}: {_validation_message(e)}") from None
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
        if self.columns != "map":   # "map" expansions add the level count, strides and enclosing symbols
            unmapped = sorted(str(x) for x in self.body.free_symbols if str(x) not in self.symbol_mapping)
            if unmapped:
                raise self.error(f"the body reads symbols {unmapped} that its symbol_mapping does not pass in; "
                                 "add them to node.symbol_mapping (body symbol -> expression outside)")
        if self.columns == "map":
            self._validate_mapped(state)
        if self.columns == "cells":
            self._validate_cells(state)

    def _validate_cells(self, state):
        if not self.cell_params or len(self.cell_params) != len(self.cell_ranges):
            raise self.error(f"columns='cells' needs one range per map parameter, got parameters "
                             f"{list(self.cell_params)} and ranges {list(self.cell_ranges)}")
        for c in sorted(set(self.in_connectors) | set(self.out_connectors)):
            if c not in self.cell_subsets:
                raise self.error(f"connector '{c}' has no per-cell subset in cell_subsets (columns='cells')")
            if not self.has_edge(state, c):
                raise self.error(f"connector '{c}' is not connected (columns='cells' nodes connect every connector)")

    def _validate_mapped(self, state):
        conns = list(self.in_connectors) + list(self.out_connectors)
        per_level = [c for c in conns if not isinstance(self.body.arrays[c], dace.data.Scalar)]
        if not per_level:
            raise self.error("no per-level connector; a columns='map' scan needs at least one array with the axis")
        ref = self.operand(state, per_level[0])
        ndim = len(ref.shape)
        axis = self.resolved_axis(ndim)
        colshape = [s for d, s in enumerate(ref.shape) if d != axis]
        levels = self.levels(state)
        for c in per_level:
            op = self.operand(state, c)
            if len(op.shape) != ndim:
                raise self.error(f"connector '{c}' has rank {len(op.shape)}, expected rank {ndim} "
                                 f"(the rank of '{per_level[0]}')")
            want = list(ref.shape)
            want[axis] = symbolic.simplify(levels + self._extra_slots(c))
            if any(symbolic.inequal_symbols(a, b) for a, b in zip(op.shape, want, strict=True)):
                extra = self._extra_slots(c) - self._extra_slots(per_level[0])
                like = f"the shape of '{per_level[0]}' {ref.shape}" if extra == 0 else \
                    f"{tuple(want)} (the shape of '{per_level[0]}' {ref.shape}, {extra} more along axis {axis})"
                raise self.error(f"connector '{c}' has shape {op.shape}, expected {like}")
        for c in conns:
            if c in per_level:
                continue
            op = self.operand(state, c)
            shp = [s for s in op.shape if s != 1] if len(op.shape) != len(colshape) else list(op.shape)
            if shp and (len(shp) != len(colshape) or any(
                    symbolic.inequal_symbols(a, b) for a, b in zip(shp, colshape, strict=True))):
                hint = "" if any(s != 1 for s in op.shape) else (
                    f"; a one-element operand counts as a scalar only beside operands of another column rank: "
                    f"broadcast it to {tuple(colshape)} (sdfg_scan.scan does)")
                raise self.error(f"connector '{c}' is K-less with shape {op.shape}, expected the column shape "
                                 f"{tuple(colshape)} (the operand shape without axis {axis}) or a scalar{hint}")


def _validation_message(e: Exception) -> str:
    """The message of a body validation error. DaCe's ``InvalidSDFGNodeError`` / ``InvalidSDFGEdgeError``
    locate the state by its index in the SDFG's top-level blocks, but a body's states sit in its loop:
    their ``str()`` then names another state or raises ``IndexError``; the message alone is right."""
    message = getattr(e, "message", None)
    if isinstance(message, str):
        return message
    try:
        return str(e)
    except Exception:  # noqa: BLE001 - a broken __str__ must not hide the validation failure
        return repr(e.args)


__all__ = ["COLUMNS", "LEVELS", "ExpandScanAuto", "ExpandScanLevelsOutside", "ExpandScanSequential", "Scan",
           "stride_symbol"]
