"""The ``sdfg-scan`` command line.

Subcommands register themselves in :data:`COMMANDS` (name -> (help, add_arguments, run)).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable


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


COMMANDS: dict[str, tuple[str, Callable, Callable]] = {
    "demo": ("build, compile and verify the samples; print a table of expansions, checks and times",
             _demo_args, _demo),
    "list": ("list the library nodes, their expansions (targets, reproducibility) and transformations",
             _list_args, _list),
}

from sdfg_scan.cli_scan import COMMANDS as _SCAN_COMMANDS  # noqa: E402

COMMANDS.update(_SCAN_COMMANDS)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="sdfg-scan", description="sdfg_scan: column algorithms for DaCe SDFGs")
    sub = parser.add_subparsers(dest="command", required=True)
    for name, (help_text, add_args, _) in COMMANDS.items():
        add_args(sub.add_parser(name, help=help_text, description=help_text))
    args = parser.parse_args(argv)
    return COMMANDS[args.command][2](args)


if __name__ == "__main__":
    sys.exit(main())
