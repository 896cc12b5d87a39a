"""``sdfg_scan.optimize``: lift -> canonicalise -> restructure -> select, with a report.

Stages (each transformation is looked up in ``sdfg_scan.transformations``; one that is not
available is skipped and named in the report):

0. ``CopyTaskletToCopy``: a copy DaCe's code generation lowered to a tasklet ``_cpy_out = _cpy_in`` (gt4py's
   compiled ``program.sdfgz``) is an access-node copy again, as the analyses below read copies; then, only
   with ``inplace={out: in}`` (outputs the caller aliases with inputs): ``ScanOutputsInPlace``;
1. lift every column scan to a ``Scan`` node (``LiftScans``);
2. canonicalise **on each ``Scan.body`` after lifting** (``RemoveScanSelfCopies``,
   ``DeadCarryElimination``, ``PeelBoundaryLevels``, repeated on the body, then
   ``node.sync_from_body()``), so lifting always sees gt4py's original structure and the
   canonicalisers work on the small body as one unit; scans that could not be lifted (not in a map)
   are canonicalised in place in the enclosing SDFG;
3. ``ScanPairToTridiagonal`` replaces a Thomas forward sweep + back substitution by one
   ``TridiagonalSolve`` (``exact=False``, i.e. algebraically identical forms within 1e-12, only when
   the class asked for is weaker than ``exact``), a forward substitution + back substitution that
   read a factorisation by one pre-factored ``TridiagonalSolve``, and ``ScanToTridiagonalFactor`` the
   factorisation scan by one ``TridiagonalFactor``; restructure: ``ScanFusion`` then ``ScanFission``. Fusion joins scans over the same levels,
   fission then splits what is independent again, so the result is one scan per
   dependence-connected group (producer -> consumer pairs stay fused; scans with peeled levels are
   not fused with others: their loop ranges differ); then ``ScanToCumulative`` replaces a map
   whose scan is a plain cumulative sum by one N-d ``CumulativeScan`` (counted as
   ``scans_specialised``; such scans are no longer ``Scan`` nodes, so they leave ``scans_after``);
4. ``LiftCellMap``: each lifted scan takes gt4py's map over cells into its node
   (``columns="cells"``), so that the schedule over cells is the expansion's choice;
   ``FoldConstantConditions`` (the program and each ``Scan`` body) writes the literal into the branch
   conditions that read a value the program sets with a literal (gt4py's static arguments); on the CPU under
   ``replay`` (by default; under ``exact`` by default only the maps whose math calls it stages, every map
   with ``vectorize_maps=True``; under ``approx`` with ``vectorize_maps=True``), ``VectorizeCellMap`` writes
   each top-level pointwise map over cells as one loop nest with an ``omp simd`` cell loop: vector math
   (``replay``: the accurate ``pow``), under ``exact`` the program's scalar ``exp``/``log`` per lane and the
   checked ``pow`` (glibc's value in every lane, ``vector_pow.CHECK_ULPS``) (``maps_vectorized``);
5. for ``target="gpu"`` apply DaCe's GPU transformation; choose one implementation per sdfg_scan
   node (:func:`sdfg_scan.select.select_expansions`: cost model, autotune cache, reproducibility
   floor). **Nothing is expanded**: the SDFG keeps its sdfg_scan nodes (DaCe expands them when it
   compiles), so it can be saved, viewed, inspected and reselected for another target;
6. ``exact``: the whole program is compiled IEEE-strict (:func:`sdfg_scan.select.pin_flags`). For every
   class the report's ``flags`` are the flags the build really gets from environments
   (:func:`sdfg_scan.select.build_flags`): under ``replay``/``approx`` a chosen ``exact`` expansion brings
   ``ExactArithmetic``, whose flags DaCe applies to the whole program too; nvcc flags only where the
   program has CUDA code.

Counts in the report: copies removed and carry slots rewritten are the canonicalisers'
applications (one copy / one slot each); peeled branches, fused and split scans are read from the
scan structure (:mod:`sdfg_scan.scan_structure`) before and after the stage.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field

import dace

from sdfg_scan.expansions import REPRODUCIBILITY
from sdfg_scan.lineinfo import no_stack_lineinfo
from sdfg_scan.scan_sites import find_scans
from sdfg_scan.scan_structure import NotAScan, analyze_scan

CANONICALISE = ("RemoveScanSelfCopies", "DeadCarryElimination", "PeelBoundaryLevels")
FOLD = "FoldConstantConditions"   # branch conditions on values the program fixes -> literals (stage 4)
RESTRUCTURE = ("ScanFusion", "ScanFission")
SPECIALISE = ("ScanToCumulative",)
PAIRS = "ScanPairToTridiagonal"   # two scans -> one TridiagonalSolve (counted as two specialised scans)
FACTOR = "ScanToTridiagonalFactor"   # a factorisation scan -> TridiagonalFactor (its solve: PAIRS, pre-factored)
TAKE_CELLS = "LiftCellMap"
WRITE_THROUGH = "ResultWriteThrough"   # temporary -> output copies: the writers write the output
COPY_ORDER = "CopyInLayoutOrder"   # array copies as maps walking the unit-stride dimension innermost
TARGETS = ("cpu", "gpu")
QUIET = {"print_report": False, "progress": False}   # DaCe prints "Applied N X." (with \r) on stdout otherwise


@dataclass
class ScanReport:
    """What ``optimize`` did to one scan."""

    label: str
    direction: str
    levels: str
    lifted: bool = False
    copies_removed: int = 0
    # carry slots that pass a value from one level to the next (every kind but ``invariant``: LiftCellMap
    # brings the cell map's constants into the body as invariant slots, and a demoted delay line is left as
    # one), before canonicalising and in the result
    carries_before: int = 0
    carries_after: int = 0
    carry_kinds_after: dict[str, int] = field(default_factory=dict)
    branches_peeled: int = 0
    implementation: str | None = None
    reproducibility: str | None = None
    kind: str = "NestedSDFG"
    reason: str = ""


@dataclass
class OptimizeReport:
    target: str
    reproducibility: str
    scans: list[ScanReport] = field(default_factory=list)
    applied: dict[str, int] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)
    scans_before: int = 0
    scans_after: int = 0
    scans_lifted: int = 0
    copies_removed: int = 0
    carries_removed: int = 0
    carries_demoted: int = 0
    branches_peeled: int = 0
    scans_fused: int = 0
    scans_split: int = 0
    outputs_in_place: int = 0
    scans_specialised: int = 0
    scans_with_cells: int = 0
    maps_vectorized: int = 0
    transients_persistent: int = 0
    flags: list[str] = field(default_factory=list)   # what the build gets from environments (whole program)
    flags_from: dict[str, list[str]] = field(default_factory=dict)   # environment -> what brings it
    nodes: list = field(default_factory=list)   # every sdfg_scan node's Choice (sdfg_scan.choice.Choice)

    def table(self) -> str:
        rows = [f"target={self.target} reproducibility={self.reproducibility} scans {self.scans_before} -> "
                f"{self.scans_after}; applied {self.applied or '{}'}; skipped {self.skipped or '[]'}",
                f"lifted {self.scans_lifted} (Scan nodes now {sum(s.lifted for s in self.scans)}), copies removed "
                f"{self.copies_removed}, carry slots removed "
                f"{self.carries_removed} / demoted {self.carries_demoted}, branches peeled {self.branches_peeled}, "
                f"scans fused {self.scans_fused} / split {self.scans_split}, outputs in place {self.outputs_in_place}, "
                f"specialised {self.scans_specialised}, own their cell map {self.scans_with_cells}, "
                f"pointwise maps vectorised {self.maps_vectorized}, transients made persistent "
                f"{self.transients_persistent}",
                self.flags_line()]
        # "Scan node": the scan is a Scan node now (lifted by this run or built as one), else still a loop
        head = ("scan", "kind", "dir", "levels", "Scan node", "copies-", "carries", "peeled", "impl (class)")
        body = [(s.label, s.kind, s.direction, s.levels, "yes" if s.lifted else "no (loop)", str(s.copies_removed),
                 f"{s.carries_before}->{s.carries_after}", str(s.branches_peeled),
                 f"{s.implementation} ({s.reproducibility})") for s in self.scans]
        rows += _columns([head] + body)
        others = [c for c in self.nodes if c.kind != "Scan"]
        if others:
            rows.append("other sdfg_scan nodes:")
            rows += _columns([("node", "kind", "impl (class)")] +
                             [(c.node, c.kind, f"{c.implementation} ({c.reproducibility})") for c in others])
        for c in self.nodes:
            rows.append(f"  {c.node}: {c.reason}")
        return "\n".join(rows)


    def flags_line(self) -> str:
        """The flags the build of the whole program gets, and which environments bring them."""
        if not self.flags:
            return "compiler flags: the program's own (none added)"
        why = "; ".join(f"{env} from " + ", ".join(_first(who, 3)) for env, who in self.flags_from.items())
        return (f"compiler flags: {' '.join(self.flags)} (the whole program: DaCe applies each environment's "
                f"flags to the whole build; {why})")


def _first(items: list[str], n: int) -> list[str]:
    """The first ``n`` of ``items``, then how many more."""
    return items[:n] + ([f"{len(items) - n} more"] if len(items) > n else [])


def _columns(rows: list[tuple]) -> list[str]:
    """Left-aligned columns as wide as their widest cell (nothing is cut)."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip() for r in rows]


def _transformation(name: str):
    try:
        mod = importlib.import_module("sdfg_scan.transformations")
    except Exception:  # noqa: BLE001 - a broken sibling module must not break optimize
        return None
    return getattr(mod, name, None)


def _apply(sdfg: dace.SDFG, name: str, report: OptimizeReport, options: dict | None = None) -> int:
    cls = _transformation(name)
    if cls is None:
        if name not in report.skipped:
            report.skipped.append(name)
        return 0
    n = sdfg.apply_transformations_repeated(cls, options=options, validate=False, **QUIET)
    report.applied[name] = report.applied.get(name, 0) + n
    return n


def inplace_errors(sdfg: dace.SDFG, inplace: dict[str, str]) -> list[str]:
    """One sentence per ``inplace`` pair that names something other than a non-transient array of ``sdfg``."""
    args = sorted(k for k, d in sdfg.arrays.items() if not d.transient and isinstance(d, dace.data.Array))
    errors = []
    for out, inp in inplace.items():
        bad = [name for name in (out, inp) if name not in args]
        if bad:
            errors.append(f"pair '{out}={inp}': " + " and ".join(f"'{b}'" for b in bad)
                          + (" is not a non-transient array" if len(bad) == 1 else " are not non-transient arrays")
                          + f" of the SDFG '{sdfg.name}'")
    if errors:
        shown = ", ".join(args[:12]) + (f", ... ({len(args) - 12} more)" if len(args) > 12 else "")
        errors[-1] += f" (its non-transient arrays: {shown or 'none'})"
    return errors


def check_inplace(sdfg: dace.SDFG, inplace: dict[str, str] | None) -> None:
    """Raise ``ValueError`` naming every ``inplace`` pair whose names are not non-transient arrays of ``sdfg``."""
    errors = inplace_errors(sdfg, inplace or {})
    if errors:
        raise ValueError("; ".join(errors) + "; pass OUT=IN names of the program's array arguments")


def _scan_nodes(sdfg: dace.SDFG) -> list:
    from sdfg_scan.nodes.scan import Scan

    return [(n, st) for n, st in sdfg.all_nodes_recursive() if isinstance(n, Scan)]


def _level_carries(s) -> int:
    """The carry slots of the scan structure ``s`` that cross levels (every kind but ``invariant``)."""
    return sum(1 for c in s.carries.values() if c.kind != "invariant")


def _canonicalise_body(node, report: OptimizeReport) -> tuple[int, int, int, int, int]:
    """Canonicalise one ``Scan.body``; returns (copies removed, carries removed, demoted, branches peeled,
    carries crossing levels before: :func:`_level_carries`).

    Copies are counted by the transformations' applications (one copy each); a carry slot counts as
    removed when it is gone and was not ``pass_through`` (``unused`` and dead slots: one application of
    ``DeadCarryElimination`` removes a dead set whole), as demoted when it was ``pass_through`` and is gone
    or was a ``delay_line`` and is one no more.
    Peeled branches are the boundary branches the analysis no longer finds in the loop.
    """
    try:
        before = analyze_scan(node.body, prologue=True)
    except NotAScan:
        return 0, 0, 0, 0, 0
    copies, slots, _ = (_apply(node.body, name, report) for name in CANONICALISE)
    node.sync_from_body()
    after = analyze_scan(node.body, prologue=True)
    gone = set(before.carries) - set(after.carries)
    removed = sum(1 for c in gone if before.carries[c].kind != "pass_through")
    demoted = sum(1 for c, slot in before.carries.items() if slot.kind == "pass_through" and c in gone
                  or slot.kind == "delay_line" and c in after.carries and after.carries[c].kind != "delay_line")
    return (copies, removed, demoted if slots else 0, max(0, len(before.branches) - len(after.branches)),
            _level_carries(before))


@no_stack_lineinfo()
def optimize(sdfg: dace.SDFG, target: str = "cpu", reproducibility: str = "exact",
             inplace: dict[str, str] | None = None, vectorize_maps: bool | None = None,
             gpu_transform: bool = True, persistent_transients: str | bool | None = None,
             assume_no_alias: bool = True) -> OptimizeReport:
    """Optimise every column scan of ``sdfg`` in place and return what was done.

    :param target: ``"cpu"`` or ``"gpu"`` (applies DaCe's GPU transformation before selection).
    :param reproducibility: weakest class an expansion may have (``exact``, ``replay``, ``approx``).
    :param inplace: output -> input pairs that the *caller* aliases (icon4py's graupel driver passes
        ``q_out_k`` = ``q_in_k`` and ``t_out`` = ``te``); ``ScanOutputsInPlace`` then writes those outputs
        in place and drops their identity copies (each pair is checked; an illegal pair is left alone).
        Only pass pairs the caller really aliases: the outputs are no longer written otherwise.
    :param gpu_transform: ``target="gpu"`` applies DaCe's GPU transformation unless this is False
        (gt4py's hooks: gt4py applies its own later). Then each node is chosen for where its data are
        now (host memory: a CPU expansion), and the caller selects again after its GPU transformation
        (``sdfg_scan.gt4py``'s last hook does).
    :param persistent_transients: ``"static"``, ``"sized"`` or ``"grow"``: the top-level transients the
        program allocates on every call are allocated once (:mod:`sdfg_scan.persistent`: ``"static"`` only
        those of constant shape, always legal; ``"sized"`` also those sized by the program's symbols, legal
        only when the caller always calls with the same sizes; ``"grow"``: the SDFG is marked, and at code
        generation its heap transients that no two threads use at once come from a buffer cache in the
        program's state, which a call whose sizes outgrow a buffer allocates again: legal for any sizes and
        after any later change to the SDFG, CPU only); False: allocated on every
        call, as DaCe does. None (the default): ``"grow"`` under ``target="cpu"``, False under ``"gpu"``.
        Results do not change. Persistent arrays stay allocated between calls (graupel at 20480 x 65: 20
        arrays, 166 MB), and two threads must not call one compiled program at once; per-call arrays cost
        the kernel's page faults on every call wherever glibc serves them from fresh pages, which depends on
        what the process allocated before (in a time loop on one set of fields, graupel's replay build ran
        26 to 28 % slower with them: benchmarks/HISTORY.md, "Stop 48").
    :param assume_no_alias: DaCe's model: non-transient arrays not paired in ``inplace`` do not share
        memory. ``ResultWriteThrough`` (a result temporary copied whole into an output: its writers write
        the output) then checks the order of accesses only for the ``inplace`` pairs; with False (gt4py's
        hooks: callers may pass one buffer twice) for every non-transient array.
    :param vectorize_maps: on the CPU, apply ``VectorizeCellMap`` to the top-level pointwise maps: under
        ``replay`` with libmvec's ``exp``/``log`` and the accurate ``pow`` of
        :mod:`sdfg_scan.expansions.vector_pow` (within the replay contract on graupel; the fast ``pow`` was
        not), under ``approx`` with vector math (libmvec, ``pow`` as ``exp(y log x)``), under ``exact`` in
        its exact form (the arithmetic in vectors, every ``exp``/``log`` the program's scalar call per lane,
        ``pow`` the checked accurate ``pow`` with glibc's call in the lanes where its value is not provably
        glibc's: bitwise the program under the same IEEE-strict flags; on ``graupel_run_dyn`` no faster than the
        scalar maps on an AMD Zen 4 (1.42x against 1.40x, stop 36), 5 to 12 % slower on an Intel AVX-512 Xeon
        (stop 42), and ``graupel_run``, 100 cells, 0.96x against 1.06x; with its ``pow`` calls staged
        (:mod:`sdfg_scan.expansions.staged_pow`, stop 45) 2 to 3 % faster than the scalar maps on that Xeon:
        README). None (the default): every map under ``replay``; under ``exact`` only the maps whose
        ``exp``/``log``/``pow`` calls are staged (or that make none) and whose cell range is not a constant
        below ``STAGED_MIN_CELLS`` (``VectorizeCellMap.staged_only``, stop 46; the others keep the program's
        scalar code, as every map did in stops 42 to 45); none under ``approx``. True or False: every map
        under every class, or none. A
        vectorised map indexes through the strides its arrays have when ``optimize`` runs: pass False where
        the layout changes afterwards (the gt4py hooks' first stage, before gt4py's final strides).
    """
    if target not in TARGETS:
        raise ValueError(f"sdfg_scan.optimize: target must be one of {TARGETS}, got '{target}'")
    if reproducibility not in REPRODUCIBILITY:
        raise ValueError(f"sdfg_scan.optimize: reproducibility must be one of {REPRODUCIBILITY}, "
                         f"got '{reproducibility}'")
    from sdfg_scan.nodes.scan import Scan
    from sdfg_scan.persistent import MODES as PERSISTENT_MODES
    from sdfg_scan.select import build_flags, pin_flags, select_expansions

    if vectorize_maps is not None and not isinstance(vectorize_maps, bool):
        raise TypeError(f"sdfg_scan.optimize: vectorize_maps must be True, False or None (under replay), "
                        f"got {vectorize_maps!r}")
    # None: every map under replay; under exact the maps whose exp/log/pow calls are staged (stop 46)
    staged_only = vectorize_maps is None and reproducibility == "exact"
    if vectorize_maps is None:
        vectorize_maps = reproducibility in ("replay", "exact")
    if persistent_transients is None:   # stop 48: allocated once by default on the CPU
        persistent_transients = "grow" if target == "cpu" else False
    if persistent_transients not in (False, *PERSISTENT_MODES):
        raise ValueError(f"sdfg_scan.optimize: persistent_transients must be one of {PERSISTENT_MODES} or "
                         f"False, got {persistent_transients!r}")
    if persistent_transients == "grow" and target != "cpu":
        raise ValueError("sdfg_scan.optimize: persistent_transients='grow' reallocates host arrays and is for "
                         f"target='cpu'; got target={target!r} (use 'static' or 'sized')")
    try:
        check_inplace(sdfg, inplace)
    except ValueError as e:
        raise ValueError(f"sdfg_scan.optimize: inplace {e}") from None
    report = OptimizeReport(target, reproducibility)
    # copies DaCe's code generation lowered to tasklets (gt4py's compiled program.sdfgz) are copies again
    restore = _transformation("CopyTaskletToCopy")
    if restore is not None:
        report.applied["CopyTaskletToCopy"] = restore.apply_everywhere(sdfg)
    report.scans_before = len(find_scans(sdfg))
    # 0. declared in-place outputs (before lifting: the rewrite spans the scan and the maps around it)
    if inplace:
        cls = _transformation("ScanOutputsInPlace")
        n = sdfg.apply_transformations_repeated(cls, options={"inplace": dict(inplace)}, validate=False, **QUIET)
        report.applied["ScanOutputsInPlace"] = n
        report.outputs_in_place = n
    # 1. lift
    report.scans_lifted = _apply(sdfg, "LiftScans", report)
    # 2. canonicalise each Scan body (and, in place, the scans that could not be lifted)
    stats: dict[int, tuple[int, int, int, int, int]] = {}
    for node, _ in _scan_nodes(sdfg):
        stats[id(node)] = _canonicalise_body(node, report)
    if any(not isinstance(site.node, Scan) for site in find_scans(sdfg)):
        unlifted = [site.structure for site in find_scans(sdfg) if not isinstance(site.node, Scan)]
        for name in CANONICALISE:
            _apply(sdfg, name, report)
        now = [site.structure for site in find_scans(sdfg) if not isinstance(site.node, Scan)]
        if len(now) == len(unlifted):
            for old, new in zip(unlifted, now, strict=True):
                report.copies_removed += max(0, len(old.self_copies) - len(new.self_copies))
                report.branches_peeled += max(0, len(old.branches) - len(new.branches))
                report.carries_demoted += max(0, len(old.carries) - len(new.carries))
    for c, r, d, b, _ in stats.values():
        report.copies_removed += c
        report.carries_removed += r
        report.carries_demoted += d
        report.branches_peeled += b
    # 3. recognise a Thomas pair (before fusion could merge one of its scans with a neighbour), restructure
    report.scans_specialised += 2 * _apply(sdfg, PAIRS, report, {"exact": reproducibility == "exact"})
    report.scans_specialised += _apply(sdfg, FACTOR, report, {"exact": reproducibility == "exact"})
    fused = _apply(sdfg, "ScanFusion", report)
    split_nodes = len(_scan_nodes(sdfg))
    _apply(sdfg, "ScanFission", report)
    report.scans_fused = fused
    report.scans_split = len(_scan_nodes(sdfg)) - split_nodes
    for name in SPECIALISE:
        report.scans_specialised += _apply(sdfg, name, report)
    # 4. each lifted scan takes its map over cells (the schedule over cells becomes an expansion)
    report.scans_with_cells = _apply(sdfg, TAKE_CELLS, report)
    # branch conditions that read a value the program sets with a literal (gt4py's static arguments) read the
    # literal; after LiftCellMap, which brings the literal's tasklet into the scan's body
    _apply(sdfg, FOLD, report)
    for node, _ in _scan_nodes(sdfg):
        _apply(node.body, FOLD, report)
    # 4a. results computed straight into the outputs they were copied to (the copies go)
    _apply(sdfg, WRITE_THROUGH, report, {"inplace": dict(inplace or {}), "assume_no_alias": assume_no_alias})
    # 4b. copies left between cell-contiguous arrays walk the unit-stride dimension innermost (on the GPU:
    # along the grid's x axis, coalesced, where DaCe's own copy kernel put the cells on y, capped at 65535)
    _apply(sdfg, COPY_ORDER, report)
    # 4c. on the CPU: the top-level pointwise maps as vectorised loop nests (vector math, with the accurate
    # pow under replay; under exact the program's scalar libm calls per lane)
    if vectorize_maps and target == "cpu":
        from sdfg_scan.transformations.vectorize_cell_map import map_options, vectorize_cell_maps

        report.maps_vectorized = vectorize_cell_maps(sdfg, **map_options(reproducibility), staged_only=staged_only)
        report.applied["VectorizeCellMap"] = report.maps_vectorized
    # 4d. transients allocated once, not on every call
    if persistent_transients:
        from sdfg_scan.persistent import make_transients_persistent

        report.transients_persistent = len(make_transients_persistent(sdfg, str(persistent_transients)))
    # 5. select (nothing is expanded)
    if target == "gpu" and gpu_transform:
        sdfg.apply_gpu_transformations()
        _apply(sdfg, COPY_ORDER, report)   # the transients are in GPU memory now: their copies too
    sdfg.validate()
    # without the GPU transformation (gt4py's hooks: gt4py moves the data later) a node whose data are still
    # in host memory is chosen for where it runs now; the caller selects again once the layout is final
    where = None if (target == "gpu" and not gpu_transform) else target
    report.nodes = select_expansions(sdfg, target=where, reproducibility=reproducibility)
    # 6. the reproducibility contract's compiler flags, for the whole program; reported: all the build gets
    pin_flags(sdfg, reproducibility)
    flags = build_flags(sdfg)
    report.flags, report.flags_from = flags.flags, flags.sources
    after = find_scans(sdfg)
    report.scans_after = len(after)
    for site in after:
        s = site.structure
        r = ScanReport(site.node.label, s.direction, f"[{s.start}, {s.stop})", lifted=isinstance(site.node, Scan),
                       kind=type(site.node).__name__)
        r.carries_after = _level_carries(s)
        r.carry_kinds_after = {k: len(s.slots(k)) for k in dict.fromkeys(c.kind for c in s.carries.values())}
        c, _, _, b, before = stats.get(id(site.node), (0, 0, 0, 0, r.carries_after))
        r.copies_removed, r.branches_peeled, r.carries_before = c, b, before
        if isinstance(site.node, Scan):   # read from the node itself: two scans may share a label
            node = site.node
            r.implementation, r.reproducibility = node.implementation, node.implementation_class()
            r.reason = node.selection_reason
        report.scans.append(r)
    return report


__all__ = ["OptimizeReport", "ScanReport", "check_inplace", "optimize"]
