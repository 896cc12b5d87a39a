"""The explicit registry: every library node with its expansions, and every transformation.

``expansions()`` lists ``(node class, implementation name, expansion class)``; each expansion class
declares ``targets`` and ``reproducibility`` (see :func:`sdfg_scan.expansions.declare`). A test keeps
this registry, the declarations and the test suite consistent.
"""

from __future__ import annotations

from dataclasses import dataclass

import dace

import sdfg_scan.nodes as _nodes


@dataclass(frozen=True)
class ExpansionEntry:
    node: type
    name: str
    expansion: type

    @property
    def targets(self) -> tuple[str, ...]:
        return self.expansion.targets  # type: ignore[attr-defined]  # set by declare

    @property
    def reproducibility(self) -> str:
        return self.expansion.reproducibility  # type: ignore[attr-defined]  # set by declare


def nodes() -> dict[str, type]:
    """Every sdfg_scan library node class by name."""
    return {name: obj for name, obj in vars(_nodes).items()
            if isinstance(obj, type) and issubclass(obj, dace.nodes.LibraryNode)}


def expansions() -> list[ExpansionEntry]:
    """Every (node, implementation) pair, in the nodes' declaration order."""
    return [ExpansionEntry(cls, name, exp) for cls in nodes().values() for name, exp in cls.implementations.items()]  # type: ignore[attr-defined]  # DaCe library node


def transformations() -> dict[str, type]:
    """Every transformation of ``sdfg_scan.transformations`` by class name."""
    import sdfg_scan.transformations as xf

    return {name: getattr(xf, name) for name in getattr(xf, "__all__", [])}


def table() -> str:
    """A Markdown table of the expansions (used by the README and ``sdfg-scan list``)."""
    lines = ["| node | implementation | targets | reproducibility |", "|---|---|---|---|"]
    for e in expansions():
        lines.append(f"| {e.node.__name__} | `{e.name}` | {', '.join(e.targets)} | {e.reproducibility} |")
    return "\n".join(lines)


__all__ = ["ExpansionEntry", "expansions", "nodes", "table", "transformations"]
