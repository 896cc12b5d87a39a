"""``sdfg-scan inspect`` and ``sdfg-scan optimize``: scans in SDFG files (registered in ``cli.py``)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import dace

from sdfg_scan.scan_structure import find_scans


def _load(path: str) -> dace.SDFG:
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 20000))  # gt4py's lowered SDFGs nest ~100 deep
    return dace.SDFG.from_file(path)


def _applicable(site) -> list[str]:
    s = site.structure
    out = []
    if type(site.node).__name__ != "Scan":
        out.append("LiftScans")
    if s.self_copies:
        out.append("RemoveScanSelfCopies")
    if any(c.kind in ("pass_through", "delay_line", "unused") for c in s.carries.values()):
        out.append("DeadCarryElimination")
    if s.branches:
        out.append("PeelBoundaryLevels")
    from dace.sdfg import nodes

    from sdfg_scan.transformations.scan_loop_interchange import can_interchange, profitable
    me = site.state.entry_node(site.node)
    if isinstance(site.node, nodes.NestedSDFG) and isinstance(me, nodes.MapEntry) \
            and can_interchange(site.state, me, site.node):
        out.append("ScanLoopInterchange" + ("" if profitable(site.state, me, site.node) else " (not profitable here)"))
    return out


def inspect_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", help="an .sdfg or .sdfgz file")


def inspect(args: argparse.Namespace) -> int:
    sdfg = _load(args.file)
    sites = find_scans(sdfg)
    print(f"{args.file}: {len(sites)} scan(s)")
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
    sdfg = _load(args.file)
    try:
        sdfg.validate()
    except Exception as e:  # noqa: BLE001 - report any validation failure as a clear refusal
        print(f"sdfg-scan optimize: '{args.file}' does not validate, nothing written: {type(e).__name__}: {e}",
              file=sys.stderr)
        return 2
    report = run_pipeline(sdfg, target=args.target, reproducibility=args.reproducibility, inplace=inplace or None)
    sdfg.save(str(dst))
    print(report.table())
    print(f"written: {dst}")
    return 0


COMMANDS = {
    "inspect": ("list every scan: loop variable, direction, range, carry slots by kind, boundary branches, "
                "self-copies, applicable transformations", inspect_args, inspect),
    "optimize": ("lift, canonicalise and select expansions; write the result to -o (never the input)",
                 optimize_args, optimize),
}

__all__ = ["COMMANDS", "inspect", "inspect_args", "optimize", "optimize_args"]
