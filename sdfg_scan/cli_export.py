"""``sdfg-scan export``: write a gt4py program's SDFGs (lowered, optimized with and without hooks) and
their calling convention as fixtures (:mod:`sdfg_scan.export`)."""

from __future__ import annotations

import argparse
import ast
import sys
from collections.abc import Callable


def _export_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("programs", nargs="+", help="gt4py programs by import path, 'module:attr' (e.g. "
                   "icon4py.model.common.diagnostic_calculations.stencils.diagnose_pressure:diagnose_pressure); "
                   "'module:attr=NAME' writes the files as NAME.*")
    p.add_argument("--out", default=None, help="output folder (default: the exporter cache, "
                   "$SDFG_SCAN_CACHE/fixtures/icon4py or ~/.cache/sdfg_scan/fixtures/icon4py)")
    p.add_argument("--hooks", default=None, help="'module:attr' of extra optimization hooks (a mapping or a "
                   "factory) for the opt_hooks variant, e.g. icon4py's graupel hooks")
    p.add_argument("--static", action="append", default=[], metavar="NAME=VALUE",
                   help="bind a scalar parameter at compile time, as program.compile(...) does (repeatable; "
                        "e.g. --static dt=30.0 --static enable_masking=True --static vertical_end=65)")
    p.add_argument("--variants", default=None, help="comma-separated subset of lowered,opt,opt_hooks,opt_sdfg_scan "
                   "(default: all that apply); exports of other variants into the same folder are kept")
    p.add_argument("--lineinfo", action="store_true", help="keep DaCe's compiler.lineinfo (default 'inspect': "
                   "each node records the Python line that made it, and the translation walks the stack once per "
                   "node); without it the SDFGs carry no source lines")


def _static(items: list[str]) -> dict:
    out = {}
    for item in items:
        name, sep, text = item.partition("=")
        if not sep or not name.strip():
            raise ValueError(f"sdfg-scan export: --static expects NAME=VALUE, got '{item}'")
        try:
            out[name.strip()] = ast.literal_eval(text.strip())
        except (ValueError, SyntaxError):
            raise ValueError(f"sdfg-scan export: --static {name.strip()}: '{text}' is not a Python literal "
                             "(a number or True/False)") from None
    return out


def _export(args: argparse.Namespace) -> int:
    try:
        from sdfg_scan.export import export
    except ImportError as e:  # pragma: no cover
        print(f"sdfg-scan export: {e}", file=sys.stderr)
        return 2
    try:
        static = _static(args.static)
    except ValueError as e:
        print(e, file=sys.stderr)
        return 2
    variants = [v.strip() for v in args.variants.split(",") if v.strip()] if args.variants else None
    for spec in args.programs:
        ref, _, name = spec.partition("=")
        try:
            path = export(ref, args.out, name=name or None, hooks=args.hooks, static=static, variants=variants,
                          lineinfo=args.lineinfo)
        except ValueError as e:
            print(e, file=sys.stderr)
            return 2
        except ImportError as e:
            print(f"sdfg-scan export: cannot import '{ref}' ({e}); gt4py programs need the gt4py venv "
                  "(`make fixtures`, Python >= 3.12, pip install -e '.[gt4py]')", file=sys.stderr)
            return 2
        print(f"wrote {path.parent}/{path.name.removesuffix('.meta.json')}.* ({path})")
    return 0


COMMANDS: dict[str, tuple[str, Callable, Callable]] = {
    "export": ("write a gt4py program's SDFGs (lowered / optimized, with and without hooks) and calling "
               "convention as fixtures", _export_args, _export),
}
