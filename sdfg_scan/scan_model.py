"""The result types of the column-scan analysis (:func:`sdfg_scan.scan_structure.analyze_scan`).

The bottom of the analysis: plain dataclasses that import only DaCe. :mod:`sdfg_scan.scan_findings`
fills them, :mod:`sdfg_scan.scan_structure` assembles a :class:`ScanStructure`; the canonicalising
transformations, the ``optimize`` report and ``sdfg-scan inspect`` read them. Field meanings are
listed in :mod:`sdfg_scan.scan_structure`'s docstring.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import dace
from dace.sdfg import nodes
from dace.sdfg.state import ConditionalBlock, LoopRegion

CARRY_KINDS = ("recurrent", "pass_through", "delay_line", "flag", "counter", "invariant", "unused")
DIRECTIONS = ("forward", "backward")


@dataclass
class CarrySlot:
    name: str
    dtype: dace.typeclass
    init: str | None = None
    init_constant: str | None = None
    kind: str = "recurrent"
    update_sources: list[str] = field(default_factory=list)
    outputs: list[str] = field(default_factory=list)
    read_after: bool = False
    delay_of: tuple[str, str | None] | None = None
    flag_value: bool | None = None
    detail: str = ""


@dataclass
class BoundaryBranch:
    block: ConditionalBlock
    owner: dace.SDFG
    kind: str
    condition: str
    carry: str | None = None
    path: tuple[str, ...] = ()
    nsdfg: nodes.NestedSDFG | None = None
    host: dace.SDFGState | None = None
    connector: str | None = None


@dataclass
class SelfCopy:
    owner: dace.SDFG
    state: dace.SDFGState
    edge: Any
    carry: str
    src: str
    dst: str
    path: tuple[str, ...] = ()
    nsdfg: nodes.NestedSDFG | None = None
    host: dace.SDFGState | None = None


@dataclass
class ScanStructure:
    sdfg: dace.SDFG
    loop: LoopRegion
    variable: str
    direction: str
    start: Any
    stop: Any
    entry_states: list
    exit_states: list
    body_blocks: list
    carries: dict[str, CarrySlot]
    inputs: list[str]
    outputs: list[str]
    branches: list[BoundaryBranch] = field(default_factory=list)
    self_copies: list[SelfCopy] = field(default_factory=list)
    prologue: list = field(default_factory=list)

    @property
    def first_level(self):
        return self.start if self.direction == "forward" else self.stop - 1

    @property
    def last_level(self):
        return self.stop - 1 if self.direction == "forward" else self.start

    @property
    def trip_count(self):
        return self.stop - self.start

    def slots(self, kind: str) -> list[CarrySlot]:
        if kind not in CARRY_KINDS:
            raise ValueError(f"sdfg_scan.scan_structure: unknown carry kind '{kind}'; expected one of {CARRY_KINDS}")
        return [c for c in self.carries.values() if c.kind == kind]


__all__ = ["CARRY_KINDS", "DIRECTIONS", "BoundaryBranch", "CarrySlot", "ScanStructure", "SelfCopy"]
