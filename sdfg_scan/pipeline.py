"""``sdfg_scan.optimize``: lift -> canonicalise -> restructure -> select, with a report.

Stages (each optional transformation is imported defensively from ``sdfg_scan.transformations``;
a stage whose transformation is not available is skipped and named in the report):

1. canonicalise the gt4py scans in place (``RemoveScanSelfCopies``, ``DeadCarryElimination``,
   ``PeelBoundaryLevels``), applied repeatedly to the whole SDFG;
2. restructure (``ScanFission``, ``ScanFusion``) when available;
3. lift every column scan to a ``Scan`` node (``LiftScans``);
4. for ``target="gpu"`` apply DaCe's GPU transformation; select one implementation per Scan node
   that fits the target and the requested reproducibility class.

The report compares each scan's structure (:mod:`sdfg_scan.scan_structure`) before and after, so
its numbers do not depend on how a transformation counts its own work.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field

import dace

from sdfg_scan.expansions import REPRODUCIBILITY
from sdfg_scan.scan_structure import find_scans

CANONICALISE = ("RemoveScanSelfCopies", "DeadCarryElimination", "PeelBoundaryLevels")
RESTRUCTURE = ("ScanFission", "ScanFusion")
TARGETS = ("cpu", "gpu")


@dataclass
class ScanReport:
    """What ``optimize`` did to one scan."""

    label: str
    direction: str
    levels: str
    lifted: bool = False
    copies_removed: int = 0
    carries_before: int = 0
    carries_after: int = 0
    carry_kinds_after: dict[str, int] = field(default_factory=dict)
    branches_peeled: int = 0
    implementation: str | None = None
    reproducibility: str | None = None


@dataclass
class OptimizeReport:
    target: str
    reproducibility: str
    scans: list[ScanReport] = field(default_factory=list)
    applied: dict[str, int] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)
    scans_before: int = 0
    scans_after: int = 0

    def table(self) -> str:
        rows = [f"target={self.target} reproducibility={self.reproducibility} scans {self.scans_before} -> "
                f"{self.scans_after}; applied {self.applied or '{}'}; skipped {self.skipped or '[]'}",
                f"{'scan':24} {'dir':8} {'levels':28} lifted copies- carries peeled impl (class)"]
        for s in self.scans:
            rows.append(f"{s.label[:24]:24} {s.direction:8} {s.levels[:28]:28} {str(s.lifted):6} "
                        f"{s.copies_removed:7} {s.carries_before}->{s.carries_after:<4} {s.branches_peeled:6} "
                        f"{s.implementation} ({s.reproducibility})")
        return "\n".join(rows)


def _transformation(name: str):
    try:
        mod = importlib.import_module("sdfg_scan.transformations")
    except Exception:  # noqa: BLE001 - a broken sibling module must not break optimize
        return None
    return getattr(mod, name, None)


def _apply(sdfg: dace.SDFG, name: str, report: OptimizeReport) -> None:
    cls = _transformation(name)
    if cls is None:
        report.skipped.append(name)
        return
    n = sdfg.apply_transformations_repeated(cls, validate=False)
    report.applied[name] = report.applied.get(name, 0) + n


def optimize(sdfg: dace.SDFG, target: str = "cpu", reproducibility: str = "exact") -> OptimizeReport:
    """Optimise every column scan of ``sdfg`` in place and return what was done.

    :param target: ``"cpu"`` or ``"gpu"`` (applies DaCe's GPU transformation before selection).
    :param reproducibility: weakest class an expansion may have (``exact``, ``replay``, ``approx``).
    """
    if target not in TARGETS:
        raise ValueError(f"sdfg_scan.optimize: target must be one of {TARGETS}, got '{target}'")
    if reproducibility not in REPRODUCIBILITY:
        raise ValueError(f"sdfg_scan.optimize: reproducibility must be one of {REPRODUCIBILITY}, "
                         f"got '{reproducibility}'")
    report = OptimizeReport(target, reproducibility)
    before = find_scans(sdfg)
    report.scans_before = len(before)
    for name in CANONICALISE + RESTRUCTURE:
        _apply(sdfg, name, report)
    _apply(sdfg, "LiftScans", report)
    if target == "gpu":
        sdfg.apply_gpu_transformations()
    sdfg.validate()
    after = find_scans(sdfg)
    report.scans_after = len(after)
    from sdfg_scan.nodes.scan import Scan

    for i, site in enumerate(after):
        s = site.structure
        old = before[i].structure if len(before) == len(after) else None
        r = ScanReport(site.node.label, s.direction, f"[{s.start}, {s.stop})", lifted=isinstance(site.node, Scan))
        r.carries_after = len(s.carries)
        r.carries_before = len(old.carries) if old else r.carries_after
        r.carry_kinds_after = {k: len(s.slots(k)) for k in dict.fromkeys(c.kind for c in s.carries.values())}
        if old:
            r.copies_removed = max(0, len(old.self_copies) - len(s.self_copies))
            r.branches_peeled = max(0, len(old.branches) - len(s.branches))
        if isinstance(site.node, Scan):
            site.node.reproducibility = reproducibility
            impl = site.node.choose_implementation(site.state)
            site.node.implementation = impl
            r.implementation = impl
            r.reproducibility = site.node.implementations[impl].reproducibility
        report.scans.append(r)
    return report


__all__ = ["OptimizeReport", "ScanReport", "optimize"]
