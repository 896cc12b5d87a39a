"""Autotuning: time every eligible expansion of every sdfg_scan node on real arguments, pin the fastest.

``autotune(sdfg, args, target="cpu", reproducibility="exact")`` walks the sdfg_scan nodes of ``sdfg``
(nested SDFGs included) one after the other. For each node it compiles one copy of the *whole* SDFG
per eligible expansion (:func:`sdfg_scan.choice.refusal`: target, reproducibility floor, the
expansion's own ``applies``), the node pinned to that expansion and every other node at its current
choice (the winner of an earlier node, a user's pin, or the cost model's choice), and times it on
``args`` the way ``benchmarks/`` does: the argument vectors built once, ``fast_call``, best of
``repeats`` calls after a warm-up, the variants' calls interleaved so that load changes on a shared
machine hit every variant alike. A variant is compiled once per call, also when it recurs as another
node's candidate. ``exact`` builds get :func:`sdfg_scan.compile_flags` appended to DaCe's compiler
arguments, as the real build of an exact program has them.

The winner is pinned on the node (``implementation``, ``selected``, ``selection_reason``) and stored in
the persistent cache (:mod:`sdfg_scan.tuning_cache`: keyed by node signature, shapes, strides, target
and machine; ``$SDFG_SCAN_CACHE`` or the user cache directory), where later
:func:`sdfg_scan.select_expansions` calls find it and say so in the reason. Reference loop::

    for node in sdfg_scan_nodes(sdfg):
        times = {name: best_time(compile(sdfg with node.implementation = name), args)
                 for name in eligible(node, target, reproducibility)}
        node.implementation = min(times, key=times.get); cache[key(node)] = times

Unlike that loop, the arguments are copied first (outputs and in-place operands of ``args`` are never
written) and one configuration of implementations is compiled at most once.
"""

from __future__ import annotations

import copy
import sys
import time
import warnings
from collections.abc import Callable

import dace
import numpy as np
from dace import symbolic

from sdfg_scan import tuning_cache
from sdfg_scan.choice import Choice, choose, refusal, specs
from sdfg_scan.context import REPRODUCIBILITY, TARGETS, context_of
from sdfg_scan.harness import copy_arguments
from sdfg_scan.nodes.base import ColumnNode
from sdfg_scan.select import compile_flags

REPEATS = 5


def _column_nodes(sdfg: dace.SDFG) -> list[tuple[ColumnNode, dace.SDFGState]]:
    return [(n, s) for n, s in sdfg.all_nodes_recursive() if isinstance(n, ColumnNode)]


def argument_symbols(sdfg: dace.SDFG, args: dict) -> dict[str, int]:
    """Sizes of the SDFG's symbols: integer arguments named like a symbol, then array shapes
    (a dimension that is a plain symbol takes the argument's extent)."""
    names = set(sdfg.symbols) | {str(s) for s in sdfg.free_symbols}
    out = {k: int(v) for k, v in args.items()
           if k in names and isinstance(v, (int, np.integer)) and not isinstance(v, bool)}
    for name, value in args.items():
        desc = sdfg.arrays.get(name)
        if desc is None or not hasattr(value, "shape") or len(value.shape) != len(desc.shape):
            continue
        for dim, extent in zip(desc.shape, value.shape, strict=True):
            if symbolic.issymbolic(dim) and isinstance(dim, symbolic.symbol):
                out.setdefault(str(dim), int(extent))
    return out





def _current(node, state, target: str, floor: str, symbols: dict) -> str:
    """The implementation ``node`` would get now: a concrete pin, else the chooser's (cost model or cache)."""
    if node.implementation not in (None, "auto"):
        return node.implementation
    return choose(node, state, target, floor, symbols).implementation


class _Builds:
    """Compiled variants of one SDFG, keyed by the implementation of every sdfg_scan node."""

    def __init__(self, sdfg: dace.SDFG, args: dict, symbols: dict, flags: dict[str, list[str]]):
        self.sdfg, self.args, self.flags = sdfg, args, flags
        self.kwargs = {**{k: v for k, v in symbols.items() if k not in args}, **args}
        self.calls: dict[tuple, Callable[[], None]] = {}
        self.keep: list = []   # compiled programs and their argument vectors stay alive while timed

    def call(self, config: tuple[str, ...]) -> Callable[[], None]:
        if config not in self.calls:
            variant = copy.deepcopy(self.sdfg)
            variant.name = f"{self.sdfg.name}_tune{len(self.calls)}"
            for (node, _), impl in zip(_column_nodes(variant), config, strict=True):
                node.implementation = impl
            with dace.config.set_temporary("compiler", "cpu", "args", value=self._args("cpu")), \
                    dace.config.set_temporary("compiler", "cuda", "args", value=self._args("cuda")):
                prog = variant.compile()
            names = set(prog.sdfg.arglist()) | {str(s) for s in prog.sdfg.free_symbols}
            callargs, initargs = prog.construct_arguments(**{k: v for k, v in self.kwargs.items() if k in names})
            self.keep.append((prog, callargs, initargs))
            self.calls[config] = lambda: prog.fast_call(callargs, initargs)
        return self.calls[config]

    def _args(self, which: str) -> str:
        base = dace.Config.get("compiler", which, "args")
        return " ".join([base, *self.flags["cpu" if which == "cpu" else "gpu"]])


def time_variants(calls: dict[str, Callable[[], None]], repeats: int,
                  timer: Callable[[], float] = time.perf_counter) -> dict[str, float]:
    """Best time of each call over ``repeats`` rounds (one warm-up call each; rounds interleave the calls)."""
    for fn in calls.values():
        fn()
    best = dict.fromkeys(calls, float("inf"))
    for _ in range(repeats):
        for name, fn in calls.items():
            t0 = timer()
            fn()
            best[name] = min(best[name], timer() - t0)
    return best


def _ms(t: float) -> str:
    return f"{t * 1e3:.3g} ms"


def _store(key: str, entry: dict) -> bool:
    """Write one winner to the cache; a cache that cannot be written is one warning, not an error (the
    winners stay pinned on the nodes). Returns whether later winners should be written."""
    try:
        tuning_cache.store(key, entry)
    except OSError as e:
        warnings.warn(f"sdfg_scan.autotune: cannot write the tuning cache '{tuning_cache.cache_file()}' "
                      f"({e.strerror or type(e).__name__}); the winners are pinned on the nodes but not stored "
                      "(set SDFG_SCAN_CACHE to a writable folder)", stacklevel=3)
        return False
    return True


def autotune(sdfg: dace.SDFG, args: dict, target: str = "cpu", reproducibility: str = "exact",
             repeats: int = REPEATS, store: bool = True, progress=sys.stderr,
             timer: Callable[[], float] = time.perf_counter) -> list[Choice]:
    """Time every eligible expansion of every sdfg_scan node of ``sdfg`` on ``args`` and pin the fastest.

    :param args: the SDFG's arguments by name (arrays and symbols; symbols missing here are taken from
        the arrays' shapes). They are copied: the caller's arrays are never written.
    :param target: ``"cpu"`` or ``"gpu"``: where the nodes run (an error names a node that runs elsewhere).
    :param reproducibility: the weakest class a timed expansion may have (``exact``, ``replay``, ``approx``).
    :param repeats: timed calls per expansion (best taken) after one warm-up call.
    :param store: write the winners to the persistent cache (:mod:`sdfg_scan.tuning_cache`).
    :param progress: where one line per timed expansion goes (None: silent).
    :param timer: the clock (default wall time; ``time.thread_time`` measures the calling thread's CPU time,
        robust on a loaded machine when ``OMP_NUM_THREADS=1`` keeps the kernel on that thread).
    :returns: one :class:`~sdfg_scan.choice.Choice` per node (``cached=True``, ``cost``: the measured seconds).
    """
    if reproducibility not in REPRODUCIBILITY:
        raise ValueError(f"sdfg_scan.autotune: reproducibility must be one of {REPRODUCIBILITY}, "
                         f"got '{reproducibility}'")
    if target not in TARGETS:
        raise ValueError(f"sdfg_scan.autotune: target must be one of {TARGETS}, got '{target}'")
    if repeats < 1:
        raise ValueError(f"sdfg_scan.autotune: repeats must be >= 1, got {repeats}")
    symbols = argument_symbols(sdfg, args)
    nodes = _column_nodes(sdfg)
    contexts = [context_of(n, s, reproducibility, symbols) for n, s in nodes]
    for (node, _), ctx in zip(nodes, contexts, strict=True):
        if ctx.target != target:
            raise node.error(f"autotune for target '{target}', but the node runs on the {ctx.target.upper()}")
    config = [_current(n, s, target, reproducibility, symbols) for n, s in nodes]
    flags = {t: compile_flags(reproducibility, t) for t in TARGETS}
    builds = _Builds(sdfg, copy_arguments(args), symbols, flags)
    choices = []
    for i, (node, state) in enumerate(nodes):
        ctx = contexts[i]
        eligible = [name for name, cls in specs(node).items() if refusal(node, name, cls, ctx) is None]
        if not eligible:
            choose(node, state, target, reproducibility, symbols)   # raises the chooser's error naming every refusal
        calls = {name: builds.call(tuple(config[:i] + [name] + config[i + 1:])) for name in eligible}
        times = time_variants(calls, repeats, timer)
        for name in eligible:
            if progress is not None:
                print(f"sdfg_scan.autotune: {node.label} ({type(node).__name__}, {ctx.layout.contiguity}) "
                      f"{name}: {_ms(times[name])}", file=progress)
        best = min(eligible, key=lambda n: times[n])
        config[i] = best
        others = ", ".join(f"{n} {_ms(times[n])}" for n in sorted(times, key=lambda n: times[n]) if n != best)
        reason = f"{best}: autotuned, {_ms(times[best])} measured" + (f"; {others}" if others else "")
        node.implementation = node.selected = best
        node.selection_reason = reason
        if store:
            store = _store(tuning_cache.node_key(node, state, target, ctx.floor),
                           {"implementation": best, "times": times, "sizes": symbols, "reproducibility": ctx.floor})
        klass = getattr(specs(node)[best], "reproducibility", "exact")
        choices.append(Choice(node.label, type(node).__name__, best, target, klass,
                              ctx.floor, reason, times[best], True))
    return choices


__all__ = ["REPEATS", "argument_symbols", "autotune", "time_variants"]
