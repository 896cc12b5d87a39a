"""The ``sdfg-scan`` command line.

Subcommands register themselves in :data:`COMMANDS` (name -> (help, add_arguments, run)). This module
and the subcommand modules import dace and the package's nodes only inside ``run``, so that the
``sdfg-scan`` entry point (:mod:`sdfg_scan_launcher`) answers ``--help`` without importing dace.
"""

from __future__ import annotations

import argparse
import ast
import os
import sys
from collections.abc import Callable
from pathlib import Path


def _demo_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("samples", nargs="*", help="sample names (default: the demo set)")


DEMO_INTERFACE = ("build", "inputs", "expected")
"""Functions a sample module defines for the demo (:mod:`sdfg_scan.demo`); the others run on their own."""


def _demo_samples(folder: Path) -> list[str]:
    """The samples in ``folder`` that the demo can run: their source defines every function of
    :data:`DEMO_INTERFACE` (read without importing them: some need gt4py)."""
    names = []
    for path in sorted(folder.glob("*.py")) if folder.is_dir() else []:
        try:
            tree = ast.parse(path.read_text())
        except (OSError, SyntaxError, ValueError):
            continue
        defined = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
        if defined.issuperset(DEMO_INTERFACE):
            names.append(path.stem)
    return names


def _demo(args: argparse.Namespace) -> int:
    from sdfg_scan.demo import SAMPLES_DIR, main

    known = _demo_samples(SAMPLES_DIR)
    unknown = [n for n in args.samples if n not in known]
    if unknown:
        why = [f"'{n}' is not a demo sample (it defines no {'/'.join(DEMO_INTERFACE)}; run it as python "
               f"{SAMPLES_DIR / n}.py)" if (SAMPLES_DIR / f"{n}.py").is_file() else f"no sample '{n}' in {SAMPLES_DIR}"
               for n in unknown]
        print(f"sdfg-scan demo: {'; '.join(why)}; expected one of "
              f"{', '.join(known) or '(none: the demo runs from a checkout of the repository, pip install -e .)'}",
              file=sys.stderr)
        return 2
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
    from sdfg_scan.cli_scan import load, output_path

    sdfg = load(args.file, "view")
    if sdfg is None:
        return 2
    name = Path(args.file).name.removesuffix(".sdfgz").removesuffix(".sdfg")
    out = output_path(args.output or f"{name}.html", "view", "the HTML page")
    if out is None:
        return 2
    from sdfg_scan.view import sections, write_page

    try:
        write_page(sdfg, out, title=name)
    except OSError as e:
        print(f"sdfg-scan view: cannot write -o '{out}' ({e.strerror or type(e).__name__})", file=sys.stderr)
        return 2
    bodies = len(sections(sdfg)) - 1
    drawn = "1 scan body as a graph of its own" if bodies == 1 else f"{bodies} scan bodies as graphs of their own"
    print(f"written: {out} (standalone: opens without network or dace; {drawn})")
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
    """Run one subcommand. A reader that stops early (``sdfg-scan list | head -1``) ends the command quietly
    with status 141 (128 + SIGPIPE), as tools killed by SIGPIPE do; the output file is written before."""
    args = parser().parse_args(argv)
    try:
        status = COMMANDS[args.command][2](args)
        sys.stdout.flush()
    except BrokenPipeError:
        _drop_stdout()
        return 141
    return status


def _drop_stdout() -> None:
    """Point stdout at /dev/null, so that the interpreter's final flush does not fail on the closed pipe."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # not a real file (captured in tests)
        pass


if __name__ == "__main__":
    sys.exit(main())
