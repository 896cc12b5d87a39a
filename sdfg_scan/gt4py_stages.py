"""The callables :func:`sdfg_scan.gt4py.optimization_hooks` installs (picklable: gt4py may translate in a
process pool). Each takes the SDFG gt4py is optimising and changes it in place."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import dace

from sdfg_scan import __version__

EXACT_ENV = "sdfg_scan.expansions.environments.ExactArithmetic"
"""The environment whose compile flags make a program IEEE-strict (``reproducibility="exact"``)."""

HOOKS_REVISION = f"{__version__}-2"
"""sdfg_scan's version and a revision of what the hooks do. Every stage carries it as a field, so it is part
of the fingerprint gt4py keys its (persistent) translation cache with: programs an older sdfg_scan
translated are not served to a newer one. Bump it when lifting or selection changes."""


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

    def __call__(self, sdfg: dace.SDFG) -> None:
        from sdfg_scan import optimize

        # gt4py applies its own GPU transformation later (gpu_transform=False); lifting and canonicalising
        # are target-free, the target-specific choice is made again by ExpandStage where the layout is final
        report = optimize(sdfg, target=self.target, reproducibility=self.reproducibility, gpu_transform=False)
        setattr(report, "sdfg_name", sdfg.name)  # noqa: B010  (which program the report is about)
        self.reports.append(report)


@dataclass
class ExpandStage:
    """The last hook (``TopLevelDataFlowPost`` on CPU, ``AfterToGPU`` on GPU): select for the final
    layout, then expand every sdfg_scan node so that ``set_fast_implementations`` cannot reset it."""

    target: str
    reproducibility: str
    revision: str = HOOKS_REVISION

    def __call__(self, sdfg: dace.SDFG) -> None:
        from sdfg_scan.select import pin_flags, select_expansions

        select_expansions(sdfg, target=self.target, reproducibility=self.reproducibility)
        for _ in range(8):  # an expansion may hold further sdfg_scan nodes
            found = _library_nodes(sdfg)
            if not found:
                break
            for node, state in found:
                node.expand(state)
        if self.reproducibility == "exact":
            pin_flags(sdfg, "exact")   # the whole program compiles IEEE-strict
