"""What every benchmark shares: timing, the memory-bandwidth probe and the table printer.

The probe is the fastest of three streaming kernels over arrays as large as the benchmark's fields
(a DaCe-compiled OpenMP copy ``y[i] = x[i]``, ``np.copyto`` and ``np.multiply(x, 2, out=y)``; on a
busy 2-core machine the single-threaded NumPy kernels can beat the OpenMP one), measured in the
same run as the benchmarks: ``GB/s = (bytes read + bytes written) / time``.
A benchmark's *fraction of the limit* is its own GB/s (counting each operand once) over the probe's.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

import dace
import numpy as np

REPEATS = int(os.environ.get("SDFG_SCAN_BENCH_REPEATS", "5"))


def best_time(fn: Callable[[], object], repeats: int = REPEATS) -> float:
    """Best wall time of ``repeats`` calls after one warm-up call."""
    fn()
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def compiled_call(prog, **kwargs) -> Callable[[], None]:
    """A no-argument callable running a compiled SDFG the way gt4py calls one: the argument vectors are
    built once (``construct_arguments``), each call is ``fast_call`` (no Python-side checks of the
    arrays; ~30-80 us less per call than ``prog(**kwargs)`` at the benchmark sizes)."""
    callargs, initargs = prog.construct_arguments(**kwargs)
    return lambda: prog.fast_call(callargs, initargs)


def bandwidth_probe(nbytes: int) -> float:
    """Measured streaming bandwidth in GB/s (read + write) for two arrays of ``nbytes`` each."""
    n = dace.symbol("n")
    sdfg = dace.SDFG("sdfg_scan_bandwidth_probe")
    sdfg.add_array("x", [n], dace.float64)
    sdfg.add_array("y", [n], dace.float64)
    st = sdfg.add_state()
    st.add_mapped_tasklet("copy", {"i": "0:n"}, {"a": dace.Memlet("x[i]")}, "b = a", {"b": dace.Memlet("y[i]")},
                          external_edges=True)
    prog = sdfg.compile()
    count = nbytes // 8
    x = np.random.default_rng(0).random(count)
    y = np.empty_like(x)
    reps = 2 * REPEATS  # the limit deserves more samples than the kernels measured against it
    times = {"DaCe OpenMP copy": best_time(compiled_call(prog, x=x, y=y, n=count), reps),
             "np.copyto": best_time(lambda: np.copyto(y, x), reps),
             "np.multiply": best_time(lambda: np.multiply(x, 2.0, out=y), reps)}
    PROBE_PARTS.clear()
    PROBE_PARTS.update({k: 2 * count * 8 / t / 1e9 for k, t in times.items()})
    return max(PROBE_PARTS.values())


PROBE_PARTS: dict[str, float] = {}
"""GB/s of each probe kernel in the last :func:`bandwidth_probe` call (printed under the table title:
``np.copyto`` may use non-temporal stores, which skip the write-allocate reads the others pay)."""


@dataclass
class Row:
    """One benchmark result: ``nbytes`` is the data the operation must move at least."""

    case: str
    layout: str
    variant: str
    seconds: float
    nbytes: int
    baseline: float | None = None   # seconds of the baseline (sequential) expansion, same case/layout

    def gbs(self) -> float:
        return self.nbytes / self.seconds / 1e9


def print_table(rows: list[Row], probe_gbs: float, title: str, out=sys.stdout) -> None:
    """Markdown table: time, GB/s, fraction of the probe, speed-up over the baseline."""
    print(f"\n### {title}\n", file=out)
    parts = ", ".join(f"{k} {v:.1f}" for k, v in PROBE_PARTS.items())
    print(f"memory-bandwidth probe (fastest streaming copy, same run): {probe_gbs:.1f} GB/s "
          f"({parts}); threads: {os.environ.get('OMP_NUM_THREADS', os.cpu_count())}\n", file=out)
    print("| case | layout | variant | time ms | GB/s | of limit | vs sequential |", file=out)
    print("|---|---|---|---:|---:|---:|---:|", file=out)
    for r in rows:
        speed = f"{r.baseline / r.seconds:.2f}x" if r.baseline else "-"
        print(f"| {r.case} | {r.layout} | {r.variant} | {r.seconds * 1e3:.2f} | {r.gbs():.1f} | "
              f"{r.gbs() / probe_gbs:.2f} | {speed} |", file=out)
