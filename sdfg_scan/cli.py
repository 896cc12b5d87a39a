"""The ``sdfg-scan`` command line.

Subcommands register themselves in :data:`COMMANDS` (name -> (help, add_arguments, run)). This module
and the subcommand modules import dace and the package's nodes only inside ``run``, so that the
``sdfg-scan`` entry point (:mod:`sdfg_scan_launcher`) answers ``--help`` without importing dace.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path


def _demo_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("samples", nargs="*", help="sample names (default: the demo set)")


def _demo(args: argparse.Namespace) -> int:
    from sdfg_scan.demo import main

    return main(args.samples or None)


def _list_args(p: argparse.ArgumentParser) -> None:
    pass


def _list(args: argparse.Namespace) -> int:
    from sdfg_scan import registry

    print(registry.table())
    names = sorted(registry.transformations())
    print("\ntransformations: " + (", ".join(names) if names else "(none)"))
    return 0


def _view_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", help="an .sdfg or .sdfgz file")
    p.add_argument("-o", "--output", default=None,
                   help="the HTML page to write (default: FILE's name with .html, in the current directory)")


def _view(args: argparse.Namespace) -> int:
    from sdfg_scan.cli_scan import load

    sdfg = load(args.file, "view")
    if sdfg is None:
        return 2
    from sdfg_scan.view import sections, write_page

    name = Path(args.file).name.removesuffix(".sdfgz").removesuffix(".sdfg")
    out = write_page(sdfg, args.output or f"{name}.html", title=name)
    bodies = len(sections(sdfg)) - 1
    print(f"written: {out} (standalone: opens without network or dace; {bodies} scan bod"
          f"{'y' if bodies == 1 else 'ies'} as graphs of their own)")
    return 0


COMMANDS: dict[str, tuple[str, Callable, Callable]] = {
    "demo": ("build, compile and verify the samples; print a table of expansions, checks and times",
             _demo_args, _demo),
    "list": ("list the library nodes, their expansions (targets, reproducibility) and transformations",
             _list_args, _list),
    "view": ("write a standalone HTML page that draws the SDFG with DaCe's viewer, each Scan body as a graph",
             _view_args, _view),
}

from sdfg_scan.cli_export import COMMANDS as _EXPORT_COMMANDS  # noqa: E402
from sdfg_scan.cli_scan import COMMANDS as _SCAN_COMMANDS  # noqa: E402

COMMANDS.update(_EXPORT_COMMANDS)

COMMANDS.update(_SCAN_COMMANDS)


def parser() -> argparse.ArgumentParser:
    """The argument parser of every subcommand (builds without importing dace)."""
    top = argparse.ArgumentParser(prog="sdfg-scan", description="sdfg_scan: column algorithms for DaCe SDFGs")
    sub = top.add_subparsers(dest="command", required=True)
    for name, (help_text, add_args, _) in COMMANDS.items():
        add_args(sub.add_parser(name, help=help_text, description=help_text))
    return top


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    return COMMANDS[args.command][2](args)


if __name__ == "__main__":
    sys.exit(main())
