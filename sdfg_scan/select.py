"""Choosing one expansion per sdfg_scan node for a target and a reproducibility class.

``select_expansions`` walks every sdfg_scan node of an SDFG (nested SDFGs included), records the
requested reproducibility floor on the node and resolves ``auto`` to the implementation the node's
rules pick for its target (``ColumnNode.choose_implementation``: strides, target, sizes). Resolving
before ``expand_library_nodes`` keeps the chosen expansion's environments, and the returned report
says which class each node ended up with.
"""

from __future__ import annotations

from dataclasses import dataclass

import dace

from sdfg_scan.expansions import REPRODUCIBILITY
from sdfg_scan.expansions.environments import FLAGS_CUDA
from sdfg_scan.nodes.base import ColumnNode


@dataclass(frozen=True)
class Choice:
    node: str
    kind: str
    implementation: str
    target: str
    reproducibility: str


def select_expansions(sdfg: dace.SDFG, reproducibility: str = "exact", keep_explicit: bool = True) -> list[Choice]:
    """Resolve the implementation of every sdfg_scan node; returns one :class:`Choice` per node.

    :param reproducibility: the weakest class allowed (``exact``, ``replay`` or ``approx``).
    :param keep_explicit: keep implementations a user set explicitly (anything but ``auto``).
    """
    if reproducibility not in REPRODUCIBILITY:
        raise ValueError(f"sdfg_scan.select_expansions: reproducibility must be one of {REPRODUCIBILITY}, "
                         f"got '{reproducibility}'")
    choices = []
    for node, state in sdfg.all_nodes_recursive():
        if not isinstance(node, ColumnNode):
            continue
        node.reproducibility = reproducibility
        if not keep_explicit or node.implementation in (None, "auto"):
            node.implementation = node.choose_implementation(state)
        exp = type(node).implementations[node.implementation]
        choices.append(Choice(node.label, type(node).__name__, node.implementation, node.target(state),
                              exp.reproducibility))
    return choices


def exact_cuda_flags() -> None:
    """Append the nvcc flags ``exact`` GPU expansions need (no FMA contraction, IEEE division and sqrt)
    to DaCe's ``compiler.cuda.args`` for this process (idempotent)."""
    args = dace.Config.get("compiler", "cuda", "args").split()
    dace.Config.set("compiler", "cuda", "args", value=" ".join(args + [f for f in FLAGS_CUDA if f not in args]))


__all__ = ["Choice", "exact_cuda_flags", "select_expansions"]
