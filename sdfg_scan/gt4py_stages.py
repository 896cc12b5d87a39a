"""The callables :func:`sdfg_scan.gt4py.optimization_hooks` installs (picklable: gt4py may translate in a
process pool). Each takes the SDFG gt4py is optimising and changes it in place."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

import dace

from sdfg_scan import __version__

EXACT_ENV = "sdfg_scan.expansions.environments.ExactArithmetic"
"""The environment whose compile flags make a program IEEE-strict (``reproducibility="exact"``)."""

HOOKS_REVISION = f"{__version__}-31"
"""sdfg_scan's version and a revision of what the hooks do. Every stage carries it as a field, so it is part
of the fingerprint gt4py keys its (persistent) translation cache with: programs an older sdfg_scan
translated are not served to a newer one. Bump it when lifting, recognition or selection changes (-8: the
Thomas pair in icon4py's concat_where form, the absorbed coefficient map, write_through; -9: results
written through into outputs by ``ResultWriteThrough``, the ``assume_no_alias`` option, copies walking the
unit-stride dimension innermost, ``CopyInLayoutOrder``; -10: the ``inplace`` option; -11: declared pairs a
program reads and writes unordered are not used there, ``unordered_pairs``; -12: ``LiftCellMap`` takes a
scan out of a map that holds other independent work, ``ScanFission``'s parts; -13: if-conversion keeps a value
an arm does not write, guarded integer division stays under its ``if``, a symbol assigned in a branch and
read after it is refused; -14: such a division in a symbol assigned in an arm, conditions reading a
one-element container kept in a register; -15: ``levels_outside``'s per-level maps are OpenMP loops when the
code generator expands the node, a division by an integer symbol stays under its ``if``; -16: dead
recurrences removed, temporaries written in every arm of an ``if`` before they are read are no carries,
symbols read by the constant tasklets ``LiftCellMap`` moves into the body are mapped; -19: the first stage
leaves the maps unvectorised; -20: a vectorised map reads a bool scalar argument per lane from a block
array, and the accurate-pow builds do not unswitch loops; -21: the exact flags end with
``-fno-math-errno -fno-trapping-math``; -22: the exact flags as one string, in a fixed order, the exact lane
form's checked ``pow``, blocked kernels' blocks sized by the thread count; -23: a vectorised map selects an
element of memory one arm writes where its body read that element before; -24: if-converted blocked kernels
split few cells into blocks of multiples of 64; -25: the exact lane calls' vector variants return at once
where no lane is active; -26: replay's vector calls in an if-converted branch take its lane predicate; -27: branch
conditions that read a value the program sets with a literal read the literal, ``FoldConstantConditions``; -28:
``LiftScans`` takes init copies written as tasklets, a blocked kernel's connectors that share a name with a
container of the program are renamed; -29: copies lowered to tasklets are copies again, ``CopyTaskletToCopy``,
and replay builds compile their arithmetic IEEE-strict, ``REPLAY_ARITHMETIC``; -30: the program's constants moved
into the maps before they are vectorised, ``constants_into_maps``; -31: ``make_backend(stage="final")``,
``FinalStage``)."""


@dataclass
class Chained:
    """Run ``first`` (a hook the user gave) then ``then`` (ours) under one gt4py hook key."""

    first: Callable[[dace.SDFG], None]
    then: Callable[[dace.SDFG], None]

    def __call__(self, sdfg: dace.SDFG) -> None:
        self.first(sdfg)
        self.then(sdfg)


def chain_after(first: Callable[[dace.SDFG], None], then: Callable[[dace.SDFG], None]) -> Chained:
    return Chained(first, then)


def without_stages(hook: Callable[[dace.SDFG], None] | None) -> Callable[[dace.SDFG], None] | None:
    """``hook`` without the stages of an earlier ``optimization_hooks`` (a mapping it made, given again as
    ``existing``, or chained into another): None where nothing else is left. Otherwise both would run, e.g.
    an ``exact`` lifting (which pins the strict flags) before a ``replay`` one."""
    if isinstance(hook, (LiftStage, ExpandStage)):
        return None
    if isinstance(hook, Chained):
        first, then = without_stages(hook.first), without_stages(hook.then)
        return first if then is None else then if first is None else Chained(first, then)
    return hook


def _library_nodes(sdfg: dace.SDFG) -> list:
    from sdfg_scan.nodes.base import ColumnNode

    return [(n, st) for n, st in sdfg.all_nodes_recursive() if isinstance(n, ColumnNode)]


@dataclass
class LiftStage:
    """``TopLevelDataFlowPre``: ``sdfg_scan.optimize`` (lift, canonicalise, restructure, select)."""

    target: str
    reproducibility: str
    reports: list = field(default_factory=list)
    revision: str = HOOKS_REVISION
    assume_no_alias: bool = False
    inplace: dict[str, str] | None = None

    def __call__(self, sdfg: dace.SDFG) -> None:
        # gt4py applies its own GPU transformation later (gpu_transform=False); lifting and canonicalising
        # are target-free, the target-specific choice is made again by ExpandStage where the layout is final;
        # vectorize_maps=False: gt4py sets its temporaries' final strides after this hook, and a vectorised map
        # indexes through the strides it was written with (ExpandStage vectorises, where they are final);
        # persistent_transients=False: lifetimes are gt4py's (its transient_memory_mode)
        optimize_declared(sdfg, self.reports, self.inplace, self.assume_no_alias, target=self.target,
                          reproducibility=self.reproducibility, gpu_transform=False, vectorize_maps=False,
                          persistent_transients=False)


def optimize_declared(sdfg: dace.SDFG, reports: list, inplace: dict[str, str] | None, assume_no_alias: bool,
                      **options) -> None:
    """``sdfg_scan.optimize(sdfg, **options)`` with the caller's declared ``inplace`` pairs (gt4py parameter
    names, :func:`argument_pairs`) where this program can use them; its report, named after the program, goes
    to ``reports`` (:class:`LiftStage` and :class:`FinalStage`).

    ``assume_no_alias`` False: a result is written through into an output only where no other argument is
    accessed while or after it is computed (icon4py's graupel driver passes one buffer twice); declared pairs:
    those pairs share memory, every other pair of arguments does not. A program that reads a declared input
    and writes its output unordered (:func:`unordered_pairs`) is optimized as if nothing had been declared,
    and its report's ``skipped`` says so."""
    from sdfg_scan import optimize

    pairs = None if inplace is None else argument_pairs(sdfg, inplace)
    unordered = unordered_pairs(sdfg, pairs) if pairs else {}
    if unordered:   # the declaration cannot be used here: optimize as if it had not been made
        pairs = None
    report = optimize(sdfg, inplace=pairs, assume_no_alias=assume_no_alias or pairs is not None, **options)
    if unordered:
        report.skipped.append(f"inplace {unordered} (a read of the input is not ordered before a write of its "
                              "output: optimized as without inplace)")
    setattr(report, "sdfg_name", sdfg.name)  # noqa: B010  (which program the report is about)
    reports.append(report)


def argument_pairs(sdfg: dace.SDFG, inplace: dict[str, str]) -> dict[str, str]:
    """The ``output -> input`` pairs of ``inplace`` (gt4py parameter names) as ``sdfg``'s argument arrays.

    A field parameter is one array of its name; gt4py flattens a tuple parameter into one array per member,
    named by the member's position (``q_out`` of six fields is ``q_out_0`` ... ``q_out_5``; nested tuples
    add further ``_<i>``), so a tuple pair pairs its members position by position. A pair whose names are
    not both arguments of ``sdfg`` is skipped: the hooks see every program the backend translates."""
    # the arguments optimize(inplace=...) accepts (pipeline.inplace_errors): non-transient arrays
    args = {n for n, d in sdfg.arrays.items() if not d.transient and isinstance(d, dace.data.Array)}
    pairs: dict[str, str] = {}
    for out, inp in inplace.items():
        if out in args and inp in args:
            pairs[out] = inp
            continue
        for name in sorted(args):
            tail = name[len(out):]
            if name.startswith(out) and re.fullmatch(r"(_\d+)+", tail) and inp + tail in args:
                pairs[name] = inp + tail
    return pairs


def unordered_pairs(sdfg: dace.SDFG, pairs: dict[str, str]) -> dict[str, str]:
    """The ``output -> input`` pairs of ``pairs`` (arrays the caller passes as one buffer) that some state
    reads (the input) and writes (the output) at its top level with no path between the reader and the
    writer.

    gt4py's dataflow does not know that two arguments share memory, so such a read and write run in
    whatever order the code generator emits them; a transformation that removes an unrelated copy (a result
    written through into its output) may change that order, and the read then sees the output's values
    (a program reading ``x`` one level above for one scan while another's result goes to ``f_out`` = ``x``).
    :class:`LiftStage` does not use the declaration for a program with such a pair; it optimizes it as the
    default hooks do (``ResultWriteThrough`` only where no other argument is accessed while or after a
    result is computed). A node that reads and writes the pair itself (a scan updating its input in place)
    and a read ordered before or after the write are not counted."""
    import networkx as nx

    def top(state: dace.SDFGState, node, scope: dict):   # the top-level node an edge end belongs to
        if isinstance(node, dace.nodes.ExitNode):
            node = state.entry_node(node)
        while scope.get(node) is not None:
            node = scope[node]
        return state.exit_node(node) if isinstance(node, dace.nodes.EntryNode) else node

    found: dict[str, str] = {}
    for state in sdfg.states():
        scope = state.scope_dict()
        tops = [n for n in state.data_nodes() if scope[n] is None]
        for out, inp in pairs.items():
            if out in found:
                continue
            writers = {top(state, e.src, scope) for n in tops if n.data == out for e in state.in_edges(n)}
            readers = {top(state, e.dst, scope) for n in tops if n.data == inp for e in state.out_edges(n)
                       if not e.data.is_empty()}
            for r in readers:
                if any(r is not w and not nx.has_path(state.nx, r, w) and not nx.has_path(state.nx, w, r)
                       for w in writers):
                    found[out] = inp
                    break
    return found


def horizontal_unit_stride(sdfg: dace.SDFG) -> bool:
    """Whether gt4py translates ``sdfg`` with the horizontal dimension at unit stride
    (``unstructured_horizontal_has_unit_stride``, as icon4py builds): gt4py then substitutes 1 for the
    horizontal stride symbol of every field argument before the hooks run, so some argument of two or more
    dimensions has the number 1 as its first stride (gt4py orders the horizontal dimension first)."""
    return any(not d.transient and isinstance(d, dace.data.Array) and len(d.shape) >= 2
               and str(d.strides[0]) == "1" for d in sdfg.arrays.values())


def final_strides(sdfg: dace.SDFG) -> int:
    """gt4py's ``gt_set_iteration_order`` and ``gt_change_strides(sdfg, HORIZONTAL)`` (maps with the cell
    parameter innermost, temporaries column-major) now rather than after the last CPU hook, then every
    ``Scan`` body's strides taken from outside (gt4py's propagation does not enter library nodes).
    gt4py runs them again later: they set the same order and strides.
    Returns the number of scans whose body strides changed."""
    from gt4py.next import common as gtx_common
    from gt4py.next.program_processors.runners.dace.transformations import map_orderer as gtx_order
    from gt4py.next.program_processors.runners.dace.transformations import strides as gtx_strides

    from sdfg_scan.nodes.scan import Scan
    from sdfg_scan.scan_strides import sync_body_strides

    # the two steps of gt4py's _gt_auto_configure_maps_and_strides, in its order
    gtx_order.gt_set_iteration_order(sdfg, unit_strides_kind=gtx_common.DimensionKind.HORIZONTAL, validate=False)
    gtx_strides.gt_change_strides(sdfg, prefered_direction_kind=gtx_common.DimensionKind.HORIZONTAL)
    return sum(bool(sync_body_strides(n, st)) for n, st in sdfg.all_nodes_recursive() if isinstance(n, Scan))


def constants_into_maps(sdfg: dace.SDFG) -> int:
    """gt4py's ``GT4PyMoveTaskletIntoMap`` now rather than in its inner-dataflow stage, which runs only after
    the last CPU hook: a tasklet without inputs (a constant: ``__tlet_out = 1.625``, icon4py's
    ``B2 = wpfloat(1.625)`` in ``power(rho * qr, B2)``) that writes a transient scalar read by a top-level map
    is copied into that map, which then reads its own scalar. Before it the maps read such constants as
    kernel arguments, so a map vectorised here (``VectorizeCellMap``) computed with values the C++ compiler
    cannot see, and its staged ``pow`` calls took their exponent per lane (``muphys_run``: 48 of its 52
    ``pow`` sites; benchmarks/HISTORY.md, "Stop 55"). gt4py applies the same transformation again later;
    there is then nothing left to move. Returns the number of tasklets moved."""
    from gt4py.next import utils as gtx_utils
    from gt4py.next.program_processors.runners.dace import transformations as gtx_transformations

    move = gtx_transformations.GT4PyMoveTaskletIntoMap(uids=gtx_utils.IDGeneratorPool())
    return sdfg.apply_transformations_once_everywhere(move, validate=False)


@dataclass
class ExpandStage:
    """The last hook (``TopLevelDataFlowPost`` on CPU, ``AfterToGPU`` on GPU): select for the final
    layout, then expand every sdfg_scan node so that ``set_fast_implementations`` cannot reset it.

    On the CPU gt4py sets the strides of its transients only after ``TopLevelDataFlowPost`` (in
    ``_gt_auto_configure_maps_and_strides``: column-major when the horizontal dimension has unit stride).
    Chosen before that, a scan reading gt4py's ``[Cell, K]`` temporaries saw them K-contiguous and got a
    per-column schedule. So where gt4py will make that change (``horizontal_unit_stride``: True, False, or
    None to read it from the SDFG, :func:`horizontal_unit_stride`) this stage makes it first
    (:func:`final_strides`), then selects and expands. ``AfterToGPU`` runs after it already.
    ``vectorize_maps`` (CPU): ``VectorizeCellMap`` on the top-level pointwise maps first (its exact form under
    ``exact``, the accurate ``pow`` under ``replay``), as ``optimize(..., vectorize_maps=True)`` does."""

    target: str
    reproducibility: str
    reports: list = field(default_factory=list)
    horizontal_unit_stride: bool | None = None
    vectorize_maps: bool = False
    revision: str = HOOKS_REVISION

    def __call__(self, sdfg: dace.SDFG) -> None:
        from sdfg_scan.select import build_flags, pin_flags, select_expansions

        unit = self.horizontal_unit_stride
        if self.target == "cpu" and (unit if unit is not None else horizontal_unit_stride(sdfg)):
            final_strides(sdfg)
        if self.vectorize_maps and self.target == "cpu":
            from sdfg_scan.transformations.vectorize_cell_map import map_options, vectorize_cell_maps

            # the program's constants inside the maps first (gt4py puts them there only after this hook), so
            # that the vectorised bodies read literals, not kernel arguments
            constants_into_maps(sdfg)
            # where the strides are final (the kernels index through them)
            vectorize_cell_maps(sdfg, **map_options(self.reproducibility))
        if self.target == "cpu":   # the strides are final: gt4py's copies walk the unit-stride dimension innermost
            from sdfg_scan.transformations.copy_in_layout_order import CopyInLayoutOrder

            sdfg.apply_transformations_repeated(CopyInLayoutOrder, validate=False)
        choices = select_expansions(sdfg, target=self.target, reproducibility=self.reproducibility)
        pin_flags(sdfg, self.reproducibility)   # exact: before build_flags, so that the report says what the build gets
        _record(self.reports, sdfg.name, choices, build_flags(sdfg))
        expand_all(sdfg)
        if self.reproducibility == "exact":
            pin_flags(sdfg, "exact")   # the whole program compiles IEEE-strict


def expand_all(sdfg: dace.SDFG) -> None:
    """Expand every sdfg_scan node of ``sdfg`` to its chosen implementation: what gt4py compiles is then plain
    DaCe (``set_fast_implementations`` cannot reset a choice, and a build process need not import sdfg_scan to
    read the SDFG)."""
    for _ in range(8):  # an expansion may hold further sdfg_scan nodes
        found = _library_nodes(sdfg)
        if not found:
            break
        for node, state in found:
            node.expand(state)


@dataclass
class FinalStage:
    """``make_backend(stage="final")``: ``sdfg_scan.optimize`` on the SDFG gt4py's translation step returns,
    after the whole of ``gt_auto_optimize`` (its inner-dataflow stage, strides and map configuration
    included): the program gt4py would compile, which is also what gt4py's build cache holds
    (``program.sdfgz``) and what ``optimize`` is measured on in ``benchmarks/bench_icon4py.py``. Then every
    sdfg_scan node is expanded (:func:`expand_all`). CPU only."""

    reproducibility: str
    reports: list = field(default_factory=list)
    vectorize_maps: bool | None = None
    assume_no_alias: bool = False
    inplace: dict[str, str] | None = None
    revision: str = HOOKS_REVISION

    def __call__(self, sdfg: dace.SDFG) -> None:
        optimize_declared(sdfg, self.reports, self.inplace, self.assume_no_alias, target="cpu",
                          reproducibility=self.reproducibility, vectorize_maps=self.vectorize_maps)
        expand_all(sdfg)


def _record(reports: list, name: str, choices: list, flags=None) -> None:
    """The final choices into the ``OptimizeReport`` that ``LiftStage`` made for the same program (its rows
    then say what was expanded, not what was chosen where the layout was not yet final), and the compiler
    flags the build gets from those choices (``flags``: :func:`sdfg_scan.select.build_flags`; the lifting
    stage's line named the expansions it had chosen, e.g. an ``exact`` one's strict flags under ``replay``)."""
    for report in reversed(reports):
        if getattr(report, "sdfg_name", None) != name:
            continue
        report.nodes = list(choices)
        if flags is not None:
            report.flags, report.flags_from = flags.flags, flags.sources
        # rows and choices name their node by label; labels may repeat (two scans lifted from columns of
        # one name): the k-th row of a label takes the k-th choice of it (both walk the SDFG in DaCe's
        # order), and where their counts differ the rows of that label keep what the lifting stage chose
        by_label: dict[str, list] = {}
        for c in choices:
            if c.kind == "Scan":
                by_label.setdefault(c.node, []).append(c)
        rows: dict[str, list] = {}
        for row in report.scans:
            if row.kind == "Scan":
                rows.setdefault(row.label, []).append(row)
        for label, rs in rows.items():
            cs = by_label.get(label, [])
            if len(cs) != len(rs):
                continue
            for row, c in zip(rs, cs, strict=True):
                row.implementation, row.reproducibility, row.reason = c.implementation, c.reproducibility, c.reason
        return
