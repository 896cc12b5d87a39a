"""The import graph of the package: no cycle, and nothing imports upward.

Layers, bottom to top (style.md, rule 14): contracts and analysis; expansions; nodes; selection,
frontend and transformations; pipeline and gt4py integration; command line. Imports inside functions
count too (a lazy import is still a dependency).
"""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx

REPO = Path(__file__).resolve().parents[1]

TOP = {  # module (under sdfg_scan) -> layer; unlisted modules are checked by their package
    "context": 0, "cost": 0, "choice": 0, "tuning_cache": 0, "harness": 0,
    "select": 3, "autotune": 3, "registry": 3, "scan_sites": 3, "associative": 3,
    "pipeline": 4, "gt4py": 4, "gt4py_stages": 4, "export": 4,
    "cli": 5, "cli_scan": 5, "cli_export": 5, "demo": 5, "view": 5, "vscode": 5,
}
PREFIX = {"reference": 0, "scan_": 0, "identity_copies": 0, "frontend": 3}


def _module(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[0] == "transformations":
        parts = ["sdfg_scan", *parts]
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _layer(module: str) -> int | None:
    parts = module.split(".")
    if len(parts) == 1:
        return None   # the package itself: registers everything
    if parts[1] == "expansions":
        return 1
    if parts[1] == "nodes":
        return 2
    if parts[1] == "transformations":
        return 3
    if parts[1] in TOP:
        return TOP[parts[1]]
    for prefix, layer in PREFIX.items():
        if parts[1].startswith(prefix) and parts[1] not in ("scan_sites",):
            return layer
    return None


def _graph() -> nx.DiGraph:
    files = list((REPO / "sdfg_scan").rglob("*.py")) + list((REPO / "transformations").glob("*.py"))
    modules = {_module(p): p for p in files}
    g = nx.DiGraph()
    for mod, path in modules.items():
        g.add_node(mod)
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("sdfg_scan"):
                targets = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names if a.name.startswith("sdfg_scan")]
            else:
                continue
            for t in targets:
                if t in modules and t != mod and not mod.startswith(t + "."):
                    g.add_edge(mod, t)
    return g


def test_the_import_graph_has_no_cycle():
    g = _graph()
    g.remove_nodes_from([n for n in list(g) if _layer(n) is None])   # package __init__ files re-export
    cycles = list(nx.simple_cycles(g))
    assert not cycles, f"import cycles: {cycles[:5]}"


def test_nothing_imports_upward():
    upward = []
    for a, b in _graph().edges():
        la, lb = _layer(a), _layer(b)
        if la is not None and lb is not None and lb > la:
            upward.append(f"{a} (layer {la}) imports {b} (layer {lb})")
    assert not upward, "\n".join(upward)
