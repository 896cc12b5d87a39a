"""``sdfg-scan inspect`` and ``sdfg-scan optimize``: scans in SDFG files (registered in ``cli.py``)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # dace is imported when a command runs, not for ``--help``
    import dace


def load(path: str, command: str) -> dace.SDFG | None:
    """The SDFG in ``path``, or ``None`` after one clear line on stderr (missing, unreadable, not an SDFG)."""
    import dace

    p = Path(path)
    if not p.is_file():
        print(f"sdfg-scan {command}: '{path}' " + ("is a directory" if p.is_dir() else "does not exist")
              + "; expected an .sdfg or .sdfgz file", file=sys.stderr)
        return None
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 20000))  # gt4py's lowered SDFGs nest ~100 deep
    try:
        return dace.SDFG.from_file(str(p))
    except Exception as e:  # noqa: BLE001 - any failure to parse is reported as one line
        print(f"sdfg-scan {command}: cannot read '{path}' as an SDFG ({type(e).__name__}: {e})", file=sys.stderr)
        return None


def node_rows(sdfg: dace.SDFG) -> list[tuple[str, str, str, str, str]]:
    """``(kind, name, implementation, reproducibility class, label)`` of every sdfg_scan library node."""
    from sdfg_scan.nodes.base import ColumnNode

    rows = []
    for node, _ in sdfg.all_nodes_recursive():
        if isinstance(node, ColumnNode):
            rows.append((type(node).__name__, node.name, str(node.implementation), node.implementation_class() or "-",
                         str(node)))
    return rows


def print_nodes(sdfg: dace.SDFG) -> None:
    """The table of sdfg_scan nodes (:func:`node_rows`)."""
    rows = node_rows(sdfg)
    print(f"sdfg_scan nodes ({len(rows)}):")
    for kind, name, impl, klass, label in rows:
        print(f"  {kind:18} {name:24} {impl:16} {klass:7} {label}")


def _applicable(site) -> list[str]:
    """The transformations that apply to the scan at ``site``, each decided by the very predicate its
    ``can_be_applied`` uses (on the same analysis, ``site.structure``), so ``inspect`` never suggests
    what ``optimize`` then applies 0 times."""
    from dace.sdfg import nodes

    from sdfg_scan.transformations import LiftScans
    from sdfg_scan.transformations.dead_carry_elimination import dead_carries
    from sdfg_scan.transformations.peel_boundary_levels import peel_plan
    from sdfg_scan.transformations.remove_scan_self_copies import removable_self_copies
    from sdfg_scan.transformations.scan_loop_interchange import can_interchange, profitable

    s = site.structure
    out = []
    if isinstance(site.node, nodes.NestedSDFG) and LiftScans.can_be_applied_to(site.parent, nsdfg=site.node):
        out.append("LiftScans")
    if removable_self_copies(s):
        out.append("RemoveScanSelfCopies")
    if dead_carries(s):
        out.append("DeadCarryElimination")
    if peel_plan(s):
        out.append("PeelBoundaryLevels")
    me = site.state.entry_node(site.node) if isinstance(site.node, nodes.NestedSDFG) else None
    if isinstance(me, nodes.MapEntry) and can_interchange(site.state, me, site.node):
        out.append("ScanLoopInterchange" + ("" if profitable(site.state, me, site.node) else " (not profitable here)"))
    return out


def inspect_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", help="an .sdfg or .sdfgz file")


def inspect(args: argparse.Namespace) -> int:
    from sdfg_scan.scan_sites import find_scans

    sdfg = load(args.file, "inspect")
    if sdfg is None:
        return 2
    print(f"{args.file}:")
    print_nodes(sdfg)
    sites = find_scans(sdfg)
    print(f"\n{len(sites)} scan(s)")
    for i, site in enumerate(sites):
        s = site.structure
        print(f"\nscan {i}: {type(site.node).__name__} '{site.node.label}' in state '{site.state.label}'")
        print(f"  axis/loop variable: {s.variable}   direction: {s.direction}   levels: [{s.start}, {s.stop})")
        print(f"  carry slots ({len(s.carries)}):")
        for c in s.carries.values():
            init = c.init or (f"const {c.init_constant}" if c.init_constant else "none")
            extra = f"; delay of {c.delay_of[0]}" if c.delay_of else ""
            print(f"    {c.name:28} {str(c.dtype):8} {c.kind:13} init={init}; outputs={c.outputs}{extra}")
        print(f"  boundary branches ({len(s.branches)}):")
        for b in s.branches:
            print(f"    {b.kind:6} condition '{b.condition}'" + (f" (flag {b.carry})" if b.carry else "")
                  + (f" in {'/'.join(b.path)}" if b.path else ""))
        print(f"  self-copies ({len(s.self_copies)}):")
        for c in s.self_copies:
            print(f"    {c.src} -> {c.dst} (carry {c.carry}) in {'/'.join(c.path)}")
        print(f"  applicable: {', '.join(_applicable(site)) or '(none)'}")
    return 0


def optimize_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", help="an .sdfg or .sdfgz file (never overwritten)")
    p.add_argument("-o", "--output", required=True, help="where to write the transformed SDFG")
    p.add_argument("--target", choices=("cpu", "gpu"), default="cpu")
    p.add_argument("--reproducibility", choices=("exact", "replay", "approx"), default="exact")
    p.add_argument("--inplace", default="", metavar="OUT=IN,...",
                   help="outputs the caller aliases with inputs (as icon4py's graupel driver does: "
                        "q_out_2=q_in_2,...,t_out=te); lets ScanOutputsInPlace write them in place")
    p.add_argument("--persistent-transients", choices=("static", "sized"), default=None,
                   help="allocate the top-level transients once, not on every call (static: constant shapes "
                        "only; sized: also shapes of the program's symbols, for callers that always pass the "
                        "same sizes)")


def _pairs(text: str) -> dict[str, str]:
    pairs = {}
    for item in filter(None, (t.strip() for t in text.split(","))):
        out, sep, inp = item.partition("=")
        if not sep or not out or not inp:
            raise SystemExit(f"sdfg-scan optimize: --inplace expects OUT=IN pairs separated by commas, got '{item}'")
        pairs[out.strip()] = inp.strip()
    return pairs


def optimize(args: argparse.Namespace) -> int:
    from sdfg_scan.pipeline import optimize as run_pipeline

    src, dst = Path(args.file).resolve(), Path(args.output).resolve()
    if src == dst:
        print(f"sdfg-scan optimize: refusing to overwrite the input '{args.file}'; choose another -o", file=sys.stderr)
        return 2
    inplace = _pairs(args.inplace)
    sdfg = load(args.file, "optimize")
    if sdfg is None:
        return 2
    try:
        sdfg.validate()
    except Exception as e:  # noqa: BLE001 - report any validation failure as a clear refusal
        print(f"sdfg-scan optimize: '{args.file}' does not validate, nothing written: {type(e).__name__}: {e}",
              file=sys.stderr)
        return 2
    report = run_pipeline(sdfg, target=args.target, reproducibility=args.reproducibility, inplace=inplace or None,
                          persistent_transients=args.persistent_transients or False)
    sdfg.save(str(dst))
    print(report.table())
    print()
    print_nodes(sdfg)
    print(f"written: {dst}")
    return 0


COMMANDS = {
    "inspect": ("list every scan: loop variable, direction, range, carry slots by kind, boundary branches, "
                "self-copies, applicable transformations", inspect_args, inspect),
    "optimize": ("lift, canonicalise and select expansions; write the result to -o (never the input)",
                 optimize_args, optimize),
}

__all__ = ["COMMANDS", "inspect", "inspect_args", "load", "node_rows", "optimize", "optimize_args", "print_nodes"]
