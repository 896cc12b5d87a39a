"""``sdfg-scan export``: write a gt4py program's SDFGs (lowered, optimized with and without hooks) and
their calling convention as fixtures (:mod:`sdfg_scan.export`)."""

from __future__ import annotations

import argparse
from collections.abc import Callable


def _export_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("programs", nargs="+", help="gt4py programs by import path, 'module:attr' (e.g. "
                   "icon4py.model.common.diagnostic_calculations.stencils.diagnose_pressure:diagnose_pressure); "
                   "'module:attr=NAME' writes the files as NAME.*")
    p.add_argument("--out", default=None, help="output folder (default: the exporter cache, "
                   "$SDFG_SCAN_CACHE/fixtures/icon4py or ~/.cache/sdfg_scan/fixtures/icon4py)")
    p.add_argument("--hooks", default=None, help="'module:attr' of extra optimization hooks (a mapping or a "
                   "factory) for the opt_hooks variant, e.g. icon4py's graupel hooks")


def _export(args: argparse.Namespace) -> int:
    try:
        from sdfg_scan.export import export
    except ImportError as e:  # pragma: no cover
        print(f"sdfg-scan export: {e}")
        return 2
    for spec in args.programs:
        ref, _, name = spec.partition("=")
        try:
            path = export(ref, args.out, name=name or None, hooks=args.hooks)
        except ImportError as e:
            print(f"sdfg-scan export: cannot import '{ref}' ({e}); gt4py programs need the gt4py venv "
                  "(`make fixtures`, Python >= 3.12, pip install -e '.[gt4py]')")
            return 2
        print(f"wrote {path.parent}/{path.name.removesuffix('.meta.json')}.* ({path})")
    return 0


COMMANDS: dict[str, tuple[str, Callable, Callable]] = {
    "export": ("write a gt4py program's SDFGs (lowered / optimized, with and without hooks) and calling "
               "convention as fixtures", _export_args, _export),
}
