"""Shared builders for the expansion families, and the declaration every expansion carries.

Every expansion class (a ``dace.transformation.ExpandTransformation`` subclass decorated with
``@dace.library.expansion``) also carries :func:`declare`: the targets it can generate code for and
its reproducibility class (architecture.md section 3):

- ``exact``: bitwise identical for every expansion of that class, on every backend and machine;
- ``replay``: identical on rerun with the same machine and configuration;
- ``approx``: may differ from run to run.
"""

from __future__ import annotations

from collections.abc import Callable

from sdfg_scan.context import REPRODUCIBILITY, TARGETS, rank


def declare(*, targets: tuple[str, ...], reproducibility: str,
            efficiency: dict[str, float] | None = None) -> Callable[[type], type]:
    """Class decorator: record the targets, the reproducibility class and the measured efficiency of an
    expansion (the spec :mod:`sdfg_scan.choice` reads).

    An expansion class may also define ``applies(node, ctx) -> str | None`` (why it does not apply to
    this node in this context, or None) and ``cost(node, ctx) -> float`` (estimated seconds); without
    them it applies everywhere its targets allow and costs :func:`sdfg_scan.cost.stream_seconds` at
    its ``efficiency``.

    :param targets: subset of ``("cpu", "gpu")``.
    :param reproducibility: ``"exact"``, ``"replay"`` or ``"approx"``.
    :param efficiency: fraction of the target's memory bandwidth reached per layout, keyed
        ``"<target>:<contiguity>"`` (``"cpu:cell"``, ``"cpu:k"``, ``"gpu:strided"``, ...) or
        ``"<target>"``; calibrated with ``benchmarks/`` (see ``sdfg_scan/cost.py``).
    """
    bad = [t for t in targets if t not in TARGETS]
    if not targets or bad:
        raise ValueError(f"sdfg_scan.declare: targets must be a non-empty subset of {TARGETS}, got {targets}")
    if reproducibility not in REPRODUCIBILITY:
        raise ValueError(f"sdfg_scan.declare: reproducibility must be one of {REPRODUCIBILITY}, "
                         f"got '{reproducibility}'")

    def wrap(cls: type) -> type:
        cls.targets = tuple(targets)  # type: ignore[attr-defined]  # the attributes this decorator adds
        cls.reproducibility = reproducibility  # type: ignore[attr-defined]
        cls.efficiency = dict(efficiency or {})  # type: ignore[attr-defined]
        return cls

    return wrap


__all__ = ["REPRODUCIBILITY", "TARGETS", "declare", "rank"]
