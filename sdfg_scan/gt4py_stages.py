"""The callables :func:`sdfg_scan.gt4py.optimization_hooks` installs (picklable: gt4py may translate in a
process pool). Each takes the SDFG gt4py is optimising and changes it in place."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import dace

EXACT_ENV = "sdfg_scan.expansions.environments.ExactArithmetic"
"""The environment whose compile flags make a program IEEE-strict (``reproducibility="exact"``)."""


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

    def __call__(self, sdfg: dace.SDFG) -> None:
        from sdfg_scan import optimize

        # gt4py applies its own GPU transformation later; lifting and canonicalising are target-free,
        # the target-specific choice is made again by ExpandStage where the layout is final
        report = optimize(sdfg, target="cpu", reproducibility=self.reproducibility) if self.target == "cpu" \
            else _optimize_without_gpu_transform(sdfg, self.reproducibility)
        setattr(report, "sdfg_name", sdfg.name)  # noqa: B010  (which program the report is about)
        self.reports.append(report)


def _optimize_without_gpu_transform(sdfg: dace.SDFG, reproducibility: str):
    """``optimize(target="gpu")`` without DaCe's GPU transformation, which gt4py applies itself later."""
    from sdfg_scan import optimize

    return optimize(sdfg, target="gpu", reproducibility=reproducibility, gpu_transform=False)


def pin_exact(sdfg: dace.SDFG) -> list[str]:
    """The whole program compiles IEEE-strict: :func:`sdfg_scan.select.pin_flags` (``exact``)."""
    from sdfg_scan.select import pin_flags

    return pin_flags(sdfg, "exact")


@dataclass
class ExpandStage:
    """The last hook (``TopLevelDataFlowPost`` on CPU, ``AfterToGPU`` on GPU): select for the final
    layout, then expand every sdfg_scan node so that ``set_fast_implementations`` cannot reset it."""

    target: str
    reproducibility: str

    def __call__(self, sdfg: dace.SDFG) -> None:
        from sdfg_scan.select import select_expansions

        select_expansions(sdfg, target=self.target, reproducibility=self.reproducibility)
        for _ in range(8):  # an expansion may hold further sdfg_scan nodes
            found = _library_nodes(sdfg)
            if not found:
                break
            for node, state in found:
                node.expand(state)
        if self.reproducibility == "exact":
            pin_exact(sdfg)
