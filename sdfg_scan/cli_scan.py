"""``sdfg-scan inspect`` and ``sdfg-scan optimize``: scans in SDFG files (registered in ``cli.py``)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # dace is imported when a command runs, not for ``--help``
    import dace


def load(path: str, command: str) -> dace.SDFG | None:
    """The SDFG in ``path``, or ``None`` after one clear line on stderr (missing, unreadable, not an SDFG).

    DaCe's warnings while reading (elements it cannot deserialize) are held back: a file that does not
    load gets only the one line; a file that loads lets them through."""
    import warnings

    import dace

    p = Path(path)
    if not p.is_file():
        print(f"sdfg-scan {command}: '{path}' " + ("is a directory" if p.is_dir() else "does not exist")
              + "; expected an .sdfg or .sdfgz file", file=sys.stderr)
        return None
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 20000))  # gt4py's lowered SDFGs nest ~100 deep
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            sdfg = dace.SDFG.from_file(str(p))
        except Exception as e:  # noqa: BLE001 - any failure to parse is reported as one line
            print(f"sdfg-scan {command}: cannot read '{path}' as an SDFG: expected the JSON of an .sdfg file or a "
                  f"gzip-compressed .sdfgz ({_why(e, p)})", file=sys.stderr)
            return None
    for w in caught:
        warnings.showwarning(w.message, w.category, w.filename, w.lineno, w.file, w.line)
    return sdfg


def _why(error: Exception, path: Path | None = None) -> str:
    """What went wrong reading a file, for people: DaCe tries pickle after JSON, so a text file that is not
    JSON fails with pickle's error (an empty file with pickle's ``EOFError``); name it as not JSON, or as
    JSON of another kind (a list, a number: DaCe reads only an object as JSON)."""
    import pickle

    if isinstance(error, pickle.UnpicklingError):
        kind = _json_kind(path) if path is not None else None
        return f"JSON, but not an SDFG: {kind}" if kind else "neither JSON nor gzip-compressed JSON"
    if isinstance(error, EOFError):
        return "the file is empty"
    if isinstance(error, KeyError):   # a JSON object without the fields of an SDFG (e.g. a .meta.json)
        return f"JSON, but not an SDFG: no {error} field"
    return f"{type(error).__name__}: {error}"


def _json_kind(path: Path) -> str | None:
    """``"a list"``, ``"a number"``, ... where ``path`` holds (gzip-compressed) JSON that is no object, else None."""
    import gzip
    import json

    try:
        raw = path.read_bytes()
        text = gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw
        value = json.loads(text)
    except (OSError, ValueError, EOFError):
        return None
    kinds = {list: "a list", str: "a string", bool: "a boolean", type(None): "null", int: "a number",
             float: "a number"}
    return kinds.get(type(value))


def output_path(path: str, command: str, what: str) -> Path | None:
    """``path`` resolved, its missing folders created, checked writable (by creating the file and removing it
    again if it was not there), or ``None`` after one line on stderr naming the path and what was expected."""
    p = Path(path).resolve()
    expected = f"expected a writable file path for {what}"
    if p.is_dir():
        print(f"sdfg-scan {command}: -o '{path}' is a directory; {expected}", file=sys.stderr)
        return None
    existed = p.exists()
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        with open(p, "a"):
            pass
    except OSError as e:
        print(f"sdfg-scan {command}: cannot write -o '{path}' ({e.strerror or type(e).__name__}); {expected}",
              file=sys.stderr)
        return None
    if not existed:
        p.unlink()
    return p


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
    """The transformations of ``optimize``'s first stages (lift, canonicalise) that apply to the scan at
    ``site``, each decided by the very predicate its ``can_be_applied`` uses (on the same analysis,
    ``site.structure``), so ``inspect`` never suggests what ``optimize`` then applies 0 times."""
    from dace.sdfg import nodes

    from sdfg_scan.transformations import LiftScans
    from sdfg_scan.transformations.dead_carry_elimination import dead_carries
    from sdfg_scan.transformations.peel_boundary_levels import peel_plan
    from sdfg_scan.transformations.remove_scan_self_copies import removable_self_copies

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
    return out


def _after_lifting(sdfg: dace.SDFG, index: int) -> list[str]:
    """What ``optimize`` then does to scan ``index`` of ``find_scans(sdfg)`` once it is lifted and its body
    canonicalised (tried on a copy): ``ScanToCumulative``, else ``LiftCellMap``; empty when it cannot be
    lifted. (Transformations of two scans, fusion and the tridiagonal pairs, are not previewed.)"""
    import copy

    from dace.sdfg import nodes

    from sdfg_scan.pipeline import OptimizeReport, _canonicalise_body
    from sdfg_scan.scan_sites import find_scans
    from sdfg_scan.transformations import LiftCellMap, LiftScans, ScanToCumulative

    work = copy.deepcopy(sdfg)
    site = find_scans(work)[index]
    if not (isinstance(site.node, nodes.NestedSDFG) and LiftScans.can_be_applied_to(site.parent, nsdfg=site.node)):
        return []
    scan = LiftScans.apply_to(site.parent, nsdfg=site.node, verify=False, save=False)
    _canonicalise_body(scan, OptimizeReport("cpu", "exact"))
    for name, cls in (("ScanToCumulative", ScanToCumulative), ("LiftCellMap", LiftCellMap)):
        if cls.can_be_applied_to(site.parent, scan=scan):
            return [name]
    return []


def _by_hand(site) -> list[str]:
    """Transformations that apply to the scan at ``site`` but that ``optimize`` does not apply (only by
    hand: ``sdfg.apply_transformations(...)``)."""
    from dace.sdfg import nodes

    from sdfg_scan.transformations.scan_loop_interchange import can_interchange, profitable

    me = site.state.entry_node(site.node) if isinstance(site.node, nodes.NestedSDFG) else None
    if isinstance(me, nodes.MapEntry) and can_interchange(site.state, me, site.node):
        return ["ScanLoopInterchange" + ("" if profitable(site.state, me, site.node) else " (not profitable here)")]
    return []


def inspect_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", help="an .sdfg or .sdfgz file")


def inspect(args: argparse.Namespace) -> int:
    from sdfg_scan.scan_sites import find_scans
    from sdfg_scan.transformations.dead_carry_elimination import dead_containers

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
        dead = dead_containers(s.sdfg)
        for c in s.carries.values():
            init = c.init or (f"const {c.init_constant}" if c.init_constant else "none")
            extra = f"; delay of {c.delay_of[0]}" if c.delay_of else ""
            extra += "; dead (its value reaches no output)" if c.name in dead else ""
            print(f"    {c.name:28} {str(c.dtype):8} {c.kind:13} init={init}; outputs={c.outputs}{extra}")
        print(f"  boundary branches ({len(s.branches)}):")
        for b in s.branches:
            print(f"    {b.kind:6} condition '{b.condition}'" + (f" (flag {b.carry})" if b.carry else "")
                  + (f" in {'/'.join(b.path)}" if b.path else ""))
        print(f"  self-copies ({len(s.self_copies)}):")
        for c in s.self_copies:
            print(f"    {c.src} -> {c.dst} (carry {c.carry}) in {'/'.join(c.path)}")
        applicable = _applicable(site)
        if "LiftScans" in applicable:
            applicable += [f"then {name}" for name in _after_lifting(sdfg, i)]
        print(f"  applicable (optimize applies): {', '.join(applicable) or '(none)'}")
        hand = _by_hand(site)
        if hand:
            print(f"  by hand only (optimize does not apply): {', '.join(hand)}")
    return 0


def optimize_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", help="an .sdfg or .sdfgz file (never overwritten)")
    p.add_argument("-o", "--output", required=True, help="where to write the transformed SDFG (a .sdfgz name is written gzip-compressed)")
    p.add_argument("--target", choices=("cpu", "gpu"), default="cpu")
    p.add_argument("--reproducibility", choices=("exact", "replay", "approx"), default="exact")
    p.add_argument("--inplace", default="", metavar="OUT=IN,...",
                   help="outputs the caller aliases with inputs (as icon4py's graupel driver does: "
                        "q_out_2=q_in_2,...,t_out=te); lets ScanOutputsInPlace write them in place")
    p.add_argument("--persistent-transients", choices=("static", "sized", "grow", "off"), default=None,
                   help="allocate the top-level transients once, not on every call (static: constant shapes "
                        "only; sized: also shapes of the program's symbols, for callers that always pass the "
                        "same sizes; grow: the heap transients no two threads share, from a cache in the program's "
                        "state, reallocated where a call's sizes outgrow them: any sizes, CPU only; off: on every "
                        "call). Default: grow for --target cpu, off for gpu")


class UsageError(ValueError):
    """A command-line value that cannot be used: one line on stderr, exit status 2."""


def _pairs(text: str) -> dict[str, str]:
    pairs = {}
    for item in filter(None, (t.strip() for t in text.split(","))):
        out, sep, inp = item.partition("=")
        if not sep or not out.strip() or not inp.strip():
            raise UsageError(f"sdfg-scan optimize: --inplace expects OUT=IN pairs separated by commas, got '{item}'")
        pairs[out.strip()] = inp.strip()
    return pairs


def optimize(args: argparse.Namespace) -> int:
    from sdfg_scan.pipeline import check_inplace
    from sdfg_scan.pipeline import optimize as run_pipeline

    src = Path(args.file).resolve()
    if src == Path(args.output).resolve():
        print(f"sdfg-scan optimize: refusing to overwrite the input '{args.file}'; choose another -o", file=sys.stderr)
        return 2
    try:
        inplace = _pairs(args.inplace)
    except UsageError as e:
        print(e, file=sys.stderr)
        return 2
    sdfg = load(args.file, "optimize")
    if sdfg is None:
        return 2
    dst = output_path(args.output, "optimize", "the optimized SDFG (.sdfg, or .sdfgz for gzip)")
    if dst is None:
        return 2
    try:
        sdfg.validate()
    except Exception as e:  # noqa: BLE001 - report any validation failure as a clear refusal
        print(f"sdfg-scan optimize: '{args.file}' does not validate, nothing written: {type(e).__name__}: {e}",
              file=sys.stderr)
        return 2
    try:
        check_inplace(sdfg, inplace)
    except ValueError as e:
        print(f"sdfg-scan optimize: --inplace {e}", file=sys.stderr)
        return 2
    try:
        persistent = False if args.persistent_transients == "off" else args.persistent_transients
        report = run_pipeline(sdfg, target=args.target, reproducibility=args.reproducibility,
                              inplace=inplace or None, persistent_transients=persistent)
    except ValueError as e:  # a node the selection refuses (a pin below the floor, an unknown implementation)
        print(f"sdfg-scan optimize: {e}; nothing written", file=sys.stderr)
        return 2
    try:
        sdfg.save(str(dst), compress=dst.suffix == ".sdfgz")
    except OSError as e:
        print(f"sdfg-scan optimize: cannot write -o '{args.output}' ({e.strerror or type(e).__name__})",
              file=sys.stderr)
        return 2
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

__all__ = ["COMMANDS", "UsageError", "inspect", "inspect_args", "load", "node_rows", "optimize", "optimize_args",
           "output_path", "print_nodes"]
