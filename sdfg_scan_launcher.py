"""Entry point of the ``sdfg-scan`` command: parses the command line before importing sdfg_scan.

Importing the ``sdfg_scan`` package registers its DaCe library, which imports dace (about 2 s).
``sdfg-scan --help``, ``sdfg-scan view --help`` and usage errors need none of that: the launcher
parses the arguments with :func:`sdfg_scan.cli.parser` while the package's ``__init__`` is bypassed
(a bare package module stands in for it, with the package's ``__path__``; ``sdfg_scan.cli`` and its
subcommand modules import nothing heavy at module level), then drops those modules and runs the
command with the real package.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types


def _owned(name: str) -> bool:
    return name == "sdfg_scan" or name.startswith("sdfg_scan.")


def parse_only(argv: list[str]) -> None:
    """Parse ``argv`` (exits for ``--help`` and usage errors) without running ``sdfg_scan/__init__``."""
    if any(_owned(k) for k in sys.modules):  # the package is loaded already: nothing to save
        importlib.import_module("sdfg_scan.cli").parser().parse_args(argv)
        return
    spec = importlib.util.find_spec("sdfg_scan")
    if spec is None or spec.submodule_search_locations is None:
        raise SystemExit("sdfg-scan: the sdfg_scan package is not importable here (pip install -e .)")
    shell = types.ModuleType("sdfg_scan", "stand-in for the package while the command line is parsed")
    shell.__path__ = list(spec.submodule_search_locations)
    sys.modules["sdfg_scan"] = shell
    try:
        importlib.import_module("sdfg_scan.cli").parser().parse_args(argv)
    finally:
        for name in [k for k in sys.modules if _owned(k)]:
            del sys.modules[name]


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parse_only(argv)
    from sdfg_scan.cli import main as run

    return run(argv)


if __name__ == "__main__":
    sys.exit(main())
