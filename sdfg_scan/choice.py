"""The choice of one expansion for one node: the spec of every expansion, checked and costed.

Every expansion class of a node (``type(node).implementations``, except ``auto``) is a spec: its
``targets`` and ``reproducibility`` (from :func:`sdfg_scan.expansions.declare`), an optional
``applies(node, ctx) -> reason | None`` and an optional ``cost(node, ctx) -> seconds`` (default:
:func:`sdfg_scan.cost.default_cost`). :func:`choose` keeps the specs that fit the target, the
reproducibility floor and the node, takes an autotuned winner from the cache
(:mod:`sdfg_scan.tuning_cache`) when there is one, else the cheapest, and says why in one line.
:func:`check_pin` refuses an implementation a user pinned that the floor or the node rules out.

This module sits below the nodes (it reads them duck-typed); :func:`sdfg_scan.select_expansions`
walks an SDFG with it, and every node's ``auto`` expansion calls it.
"""

from __future__ import annotations

from dataclasses import dataclass

import dace

from sdfg_scan import tuning_cache
from sdfg_scan.context import Context, context_of, rank
from sdfg_scan.cost import default_cost, math_seconds


@dataclass(frozen=True)
class Choice:
    """One node's selected expansion and why (``reason``: one readable line)."""

    node: str
    kind: str
    implementation: str
    target: str
    reproducibility: str
    floor: str
    reason: str
    cost: float | None = None
    cached: bool = False


def specs(node) -> dict[str, type]:
    """The node's expansions by name, ``auto`` excluded."""
    return {k: v for k, v in type(node).implementations.items() if k != "auto"}


def refusal(node, name: str, cls: type, ctx: Context) -> str | None:
    """Why expansion ``name`` cannot serve ``node`` in ``ctx`` (target, floor, its own ``applies``), or None."""
    if ctx.target not in getattr(cls, "targets", ()):
        return f"generates no {ctx.target} code (targets {', '.join(getattr(cls, 'targets', ()))})"
    klass = getattr(cls, "reproducibility", "exact")
    if rank(klass) > rank(ctx.floor):
        return f"is {klass}, below the floor '{ctx.floor}'"
    applies = getattr(cls, "applies", None)
    return applies(node, ctx) if applies is not None else None


def cost_of(node, cls: type, ctx: Context) -> float:
    """The expansion's estimate (its ``cost``, else :func:`~sdfg_scan.cost.default_cost`) plus the body's
    libm calls (:func:`~sdfg_scan.cost.math_seconds`; vector where the class says ``vector_math``, per block of
    its ``vector_blocks``)."""
    fn = getattr(cls, "cost", None)
    base = float(fn(node, ctx)) if fn is not None else default_cost(cls, node, ctx)
    return base + math_seconds(node, ctx, bool(getattr(cls, "vector_math", False)), getattr(cls, "vector_blocks", None))


def _ms(t: float) -> str:
    return f"{t * 1e3:.3g} ms"


def choose(node, state: dace.SDFGState, target: str | None = None, floor: str | None = None,
           symbols: dict | None = None, use_cache: bool = True) -> Choice:
    """The expansion of ``node`` for ``target`` (default: where the node runs) at ``floor``.

    :raises ValueError: (naming the node) when the node is not where ``target`` says, or nothing fits.
    """
    ctx = context_of(node, state, floor, symbols)
    if target is not None and target != ctx.target:
        where = "on the GPU" if ctx.target == "gpu" else "on the CPU (its data are in host memory)"
        fix = "apply sdfg.apply_gpu_transformations() first, or use sdfg_scan.optimize(sdfg, target='gpu')" \
            if target == "gpu" else "select for target='gpu'"
        raise node.error(f"selection for target '{target}', but the node runs {where}; {fix}")
    costs: dict[str, float] = {}
    refused: dict[str, str] = {}
    for name, cls in specs(node).items():
        why = refusal(node, name, cls, ctx)
        if why is None:
            costs[name] = cost_of(node, cls, ctx)
        else:
            refused[name] = why
    kind = type(node).__name__
    if not costs:
        detail = "; ".join(f"'{n}' {w}" for n, w in refused.items())
        raise node.error(f"no expansion fits target '{ctx.target}' at reproducibility '{ctx.floor}': {detail}")
    ranked = sorted(costs, key=lambda n: (costs[n], list(costs).index(n)))
    best, cached = ranked[0], False
    cache = tuning_cache.load() if use_cache else {}
    hit = cache.get(tuning_cache.node_key(node, state, ctx.target, ctx.floor)) if cache else None
    if hit is not None and hit.get("implementation") in costs and hit.get("reproducibility", ctx.floor) == ctx.floor:
        best, cached = hit["implementation"], True
        times = hit.get("times", {})
        others = ", ".join(f"{n} {_ms(t)}" for n, t in sorted(times.items(), key=lambda x: x[1]) if n != best)
        reason = (f"{best}: autotuned winner from the cache ({_ms(times.get(best, 0.0))} measured"
                  + (f"; {others}" if others else "") + ")")
    else:
        reason = f"{best}: lowest estimated cost {_ms(costs[best])}"
        if len(ranked) > 1:
            reason += f"; runner-up {ranked[1]} {_ms(costs[ranked[1]])}"
        elif refused:
            n, w = next(iter(refused.items()))
            reason += f"; the only eligible expansion ({n} {w})"
    klass = getattr(specs(node)[best], "reproducibility", "exact")
    return Choice(node.label, kind, best, ctx.target, klass, ctx.floor, reason, costs[best], cached)


def check_pin(node, state: dace.SDFGState, implementation: str, target: str | None = None,
              floor: str | None = None) -> Choice:
    """Accept a pinned ``implementation`` or raise a ValueError naming the node, the implementation and
    the floor (or the target / the node's own refusal)."""
    ctx = context_of(node, state, floor)
    impls = specs(node)
    if implementation not in impls:
        raise node.error(f"unknown implementation '{implementation}'; expected one of {sorted(impls)}")
    if target is not None and target != ctx.target:
        raise node.error(f"implementation '{implementation}' is pinned for target '{target}', but the node runs "
                         f"on the {ctx.target.upper()}")
    cls = impls[implementation]
    why = refusal(node, implementation, cls, ctx)
    if why is not None:
        if ctx.target not in getattr(cls, "targets", ()):
            fits = [n for n, c in impls.items() if refusal(node, n, c, ctx) is None]
            other = f" or pin one for the {ctx.target.upper()}" + (f" ({', '.join(fits)})" if fits else "")
        elif rank(getattr(cls, "reproducibility", "exact")) > rank(ctx.floor):
            other = " or request a weaker class"
        else:   # the expansion's own ``applies`` refuses this node: no class or target changes that
            other = ""
        raise node.error(f"the pinned implementation '{implementation}' {why} (floor '{ctx.floor}', target "
                         f"'{ctx.target}'); unpin it (implementation='auto'){other}")
    return Choice(node.label, type(node).__name__, implementation, ctx.target, getattr(cls, "reproducibility", "exact"),
                  ctx.floor, f"{implementation}: pinned by the user", cost_of(node, cls, ctx))


__all__ = ["Choice", "check_pin", "choose", "cost_of", "refusal", "specs"]
