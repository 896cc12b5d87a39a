"""Agreement of the cost model with autotuning, on every node row of ``benchmarks/`` (issue 8).

For each case the other benchmarks time (``bench_scans.py``: cumsum, linear recurrence, general scan;
``bench_solvers.py``: tridiagonal solve, factor, pre-factored solve; ``bench_reduction_cases.py``:
window M=3, column sum, column argmin; both layouts; ``--icon4py``: the fixture programs after
``sdfg_scan.optimize``), built with ``implementation="auto"``:

- ``sdfg_scan.autotune`` at the benchmark's sizes times every eligible expansion (compiled with the
  class's flags, best of ``--repeats`` interleaved calls);
- the cost model's choice (:func:`sdfg_scan.choice.choose` with the cache ignored, the real sizes
  as symbols) is looked up among those times.

Printed: the agreement table (the model's choice is "within 10 %" when its measured time is at most
1.1 x the winner's) and the calibration table: per node kind, expansion and layout, the measured time,
the efficiency it implies (``bytes / (bandwidth x parallelism x time)``, the inverse of
:func:`sdfg_scan.cost.stream_seconds`) and the estimate. The winners go to the tuning cache in
``--cache`` (default: a folder in the temp directory, never the user's cache, so that later selections
elsewhere are not steered by a benchmark); ``--from-cache`` reuses times stored there at the same sizes
instead of timing again (recalibrating the model needs no new builds).
Run: ``python benchmarks/bench_selection.py [ncol nlev] [--reproducibility exact replay] [--icon4py]``.
"""

from __future__ import annotations

import argparse
import copy
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import dace
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import sdfg_scan  # noqa: E402
from benchmarks import bench_scans, bench_solvers  # noqa: E402
from benchmarks.bench_reduction_cases import LAYOUTS, reduction_sdfg  # noqa: E402
from sdfg_scan import cost, tuning_cache  # noqa: E402
from sdfg_scan.autotune import argument_symbols  # noqa: E402
from sdfg_scan.choice import choose, cost_of, refusal, specs  # noqa: E402
from sdfg_scan.context import context_of  # noqa: E402
from sdfg_scan.harness import numpy_array  # noqa: E402
from sdfg_scan.nodes.base import ColumnNode  # noqa: E402

NC, NK = dace.symbol("NC"), dace.symbol("NK")


@dataclass
class Case:
    name: str
    layout: str
    sdfg: dace.SDFG
    args: dict


@dataclass
class Result:
    case: str
    layout: str
    node: str
    times: dict[str, float]
    estimates: dict[str, float]
    model: str
    efficiency: dict[str, tuple[float, float]]   # expansion -> (implied by the time, declared/estimated)

    @property
    def winner(self) -> str:
        return min(self.times, key=self.times.get)

    @property
    def agrees(self) -> bool:
        return self.times[self.model] <= 1.1 * self.times[self.winner]


# -- the cases of the other benchmarks ---------------------------------------------------------------

def scan_cases(ncol: int, nlev: int) -> list[Case]:
    rng = np.random.default_rng(0)
    out = []
    for layout in ("k", "cell"):
        x, a, y = (numpy_array(v, 1, layout) for v in (rng.random((ncol, nlev)), rng.random((ncol, nlev)) * 0.5,
                                                         np.zeros((ncol, nlev))))
        sizes = {"N": ncol, "K": nlev}
        out.append(Case("cumsum", layout, bench_scans.cumsum_sdfg("auto", layout), {"_in": x, "_out": y, **sizes}))
        out.append(Case("linear recurrence", layout, bench_scans.linrec_sdfg("auto", layout),
                        {"a": a, "b": x, "_out": y, **sizes}))
        out.append(Case("general scan", layout, bench_scans.general_scan_sdfg("auto", layout),
                        {"a": a, "b": x, "y0": np.zeros(ncol), "out": y, **sizes}))
    return out


def solver_cases(ncol: int, nlev: int) -> list[Case]:
    rng = np.random.default_rng(0)
    a0, c0, d0 = (rng.standard_normal((ncol, nlev)) for _ in range(3))
    b0 = np.abs(a0) + np.abs(c0) + 1.0 + rng.random((ncol, nlev))
    out = []
    for layout in ("k", "cell"):
        a, b, c, d = (numpy_array(v, 1, layout) for v in (a0, b0, c0, d0))
        x, w, cp = (numpy_array(np.zeros((ncol, nlev)), 1, layout) for _ in range(3))
        sizes = {"N": ncol, "K": nlev}
        out.append(Case("tridiagonal solve", layout, bench_solvers.solve_sdfg("auto", layout),
                        {"a": a, "b": b, "c": c, "d": d, "x": x, **sizes}))
        out.append(Case("tridiagonal factor", layout, bench_solvers.factor_sdfg(layout),
                        {"a": a, "b": b, "c": c, "w": w, "cp": cp, **sizes}))
        wf, cpf = (numpy_array(v, 1, layout) for v in (1.0 / b0, 0.2 * np.tanh(c0)))
        out.append(Case("tridiagonal solve, pre-factored", layout,
                        bench_solvers.solve_sdfg("auto", layout, 0, prefactored=True),
                        {"a": a, "w": wf, "cp": cpf, "d": d, "x": x, **sizes}))
    return out


def _reduction_sdfg(kind: str, op: str, layout: str) -> dace.SDFG:
    """``bench_reduction_cases``' program for ``kind``/``op``, unexpanded and ``auto``."""
    return reduction_sdfg(kind, op, "auto", layout, prefix="select_red")


def reduction_cases(ncol: int, nlev: int) -> list[Case]:
    out = []
    for layout, (_, axis) in LAYOUTS.items():
        x = np.random.default_rng(0).standard_normal((nlev, ncol) if axis == 0 else (ncol, nlev))
        for case, kind, op in (("window M=3", "window", "sum"), ("column sum", "reduce", "sum"),
                               ("column argmin", "reduce", "argmin")):
            sdfg = _reduction_sdfg(kind, op, layout)
            y = np.empty(x.shape if kind == "window" else ncol, dtype=sdfg.arrays["y"].dtype.as_numpy_dtype())
            out.append(Case(case, "cell" if axis == 0 else "k", sdfg, {"x": x, "y": y, "NC": ncol, "NK": nlev}))
    return out


def icon4py_cases(ncells: int, nlev: int) -> list[Case]:
    """The fixture programs of ``bench_icon4py.py`` that hold sdfg_scan nodes after ``optimize``."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    import icon4py_fixtures as fx
    import tridiagonal_pairs as tp

    from sdfg_scan.transformations import LiftScans, ScanPairToTridiagonal

    if not fx.available():
        print(fx.SKIP_REASON, file=sys.stderr)
        return []
    out = []
    for form in ("minimal_cumsum_k.opt", "diagnose_pressure.opt"):
        sdfg = fx.load(form)
        sdfg_scan.optimize(sdfg, target="cpu")
        out.append(Case(form.split(".")[0], "fixture", sdfg, fx.inputs(form, fx.load(form), ncells=ncells, nlev=nlev)))
    pair = tp.composed_dycore()
    pair.apply_transformations_repeated(LiftScans)
    pair.apply_transformations_repeated(ScanPairToTridiagonal)
    out.append(Case("dycore pair (TridiagonalSolve)", "fixture", pair,
                    fx.inputs(tp.FWD, tp.composed_dycore(), ncells=ncells, nlev=nlev)))
    return out


# -- autotune vs the model ---------------------------------------------------------------------------

def _cached_times(node, state, symbols: dict) -> dict | None:
    hit = tuning_cache.lookup(tuning_cache.node_key(node, state, "cpu"))
    if hit and hit.get("sizes") == symbols and hit.get("times"):
        return hit["times"]
    return None


def evaluate(case: Case, floor: str, repeats: int, from_cache: bool, timer) -> list[Result]:
    """Autotune ``case`` (or read its times from the cache) and cost every eligible expansion.

    A new measurement is merged into the stored one at the same sizes (the best time per expansion over
    every run: on a shared machine, repeated runs only ever remove noise)."""
    symbols = argument_symbols(case.sdfg, case.args)
    nodes = [(n, s) for n, s in case.sdfg.all_nodes_recursive() if isinstance(n, ColumnNode)]
    fresh = copy.deepcopy(case.sdfg)
    stored = [_cached_times(n, s, symbols) for n, s in nodes]
    if not from_cache or any(t is None for t in stored):
        print(f"-- {case.name} / {case.layout} / {floor}", file=sys.stderr)
        sdfg_scan.autotune(case.sdfg, case.args, "cpu", floor, repeats=repeats, timer=timer)
        for (node, state), old in zip(nodes, stored, strict=True):
            key = tuning_cache.node_key(node, state, "cpu")
            entry = tuning_cache.lookup(key)
            entry["times"] = {k: min(v, (old or {}).get(k, v)) for k, v in entry["times"].items()}
            entry["implementation"] = min(entry["times"], key=entry["times"].get)
            tuning_cache.store(key, entry)
    results = []
    bw = cost.machine().cpu_bandwidth
    for (node, state), (orig, ostate) in zip(nodes, [(n, s) for n, s in fresh.all_nodes_recursive()
                                                     if isinstance(n, ColumnNode)], strict=True):
        times = {k: v for k, v in (_cached_times(node, state, symbols) or {}).items()}
        ctx = context_of(orig, ostate, floor, symbols)
        eligible = [n for n, c in specs(orig).items() if refusal(orig, n, c, ctx) is None]
        times = {k: v for k, v in times.items() if k in eligible}
        estimates = {n: cost_of(orig, specs(orig)[n], ctx) for n in eligible}
        model = choose(orig, ostate, "cpu", floor, symbols, use_cache=False).implementation
        par = cost.parallelism(ctx)
        eff = {n: (cost.nbytes(ctx) / (bw * par * times[n]), cost.nbytes(ctx) / (bw * par * estimates[n]))
               for n in times}
        results.append(Result(case.name, case.layout, f"{type(orig).__name__} '{orig.label}'", times, estimates,
                              model, eff))
    return results


def _ms(t: float) -> str:
    return f"{t * 1e3:.3f}"


def print_tables(results: list[Result], floor: str, ncol: int, nlev: int, clock: str) -> None:
    threads = os.environ.get("OMP_NUM_THREADS", os.cpu_count())
    print(f"\n### cost model vs autotuning, reproducibility '{floor}', float64, ncol={ncol}, nlev={nlev}, "
          f"threads {threads}, {clock} clock\n")
    print("| case | layout | node | eligible | autotuned winner (ms) | cost-model choice (ms) | within 10 % |")
    print("|---|---|---|---:|---|---|---|")
    for r in results:
        ok = "yes" if r.agrees else "**no**"
        alone = " (only one)" if len(r.times) == 1 else ""
        print(f"| {r.case} | {r.layout} | {r.node} | {len(r.times)} | {r.winner} {_ms(r.times[r.winner])}{alone} | "
              f"{r.model} {_ms(r.times[r.model])} | {ok} |")
    agree = sum(r.agrees for r in results)
    print(f"\nagreement: {agree} / {len(results)} rows")
    print("\n| node | layout | expansion | measured ms | estimated ms | implied efficiency | model efficiency |")
    print("|---|---|---|---:|---:|---:|---:|")
    for r in results:
        for n in sorted(r.times, key=r.times.get):
            implied, model = r.efficiency[n]
            print(f"| {r.node.split(' ')[0]} ({r.case}) | {r.layout} | {n} | {_ms(r.times[n])} | "
                  f"{_ms(r.estimates[n])} | {implied:.2f} | {model:.2f} |")


def main(argv=None) -> list[Result]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("ncol", type=int, nargs="?", default=81920)
    ap.add_argument("nlev", type=int, nargs="?", default=90)
    ap.add_argument("--reproducibility", nargs="+", default=["exact"], choices=("exact", "replay", "approx"))
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--only", nargs="*", default=None, help="case names to run (substring match)")
    ap.add_argument("--icon4py", action="store_true", help="also the icon4py fixture programs (slow builds)")
    ap.add_argument("--cache", default=str(Path(tempfile.gettempdir()) / "sdfg_scan_bench_selection"))
    ap.add_argument("--from-cache", action="store_true", help="reuse times stored in --cache at the same sizes")
    ap.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                    help="cpu: the calling thread's CPU time (needs OMP_NUM_THREADS=1; robust on a loaded machine)")
    a = ap.parse_args(argv)
    if a.clock == "cpu" and os.environ.get("OMP_NUM_THREADS") != "1":
        ap.error("--clock cpu measures the calling thread only: run with OMP_NUM_THREADS=1")
    timer = time.thread_time if a.clock == "cpu" else time.perf_counter
    results = []
    for floor in a.reproducibility:
        os.environ["SDFG_SCAN_CACHE"] = str(Path(a.cache) / floor)   # the cache key does not hold the class
        cases = scan_cases(a.ncol, a.nlev) + solver_cases(a.ncol, a.nlev) + reduction_cases(a.ncol, a.nlev)
        cases += icon4py_cases(20480, 65) if a.icon4py else []
        rows = []
        for case in cases:
            if a.only and not any(s in case.name for s in a.only):
                continue
            rows += evaluate(case, floor, a.repeats, a.from_cache, timer)
        print_tables(rows, floor, a.ncol, a.nlev, a.clock)
        results += rows
    return results


if __name__ == "__main__":
    main()
