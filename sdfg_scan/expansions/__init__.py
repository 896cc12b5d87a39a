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

TARGETS = ("cpu", "gpu")
REPRODUCIBILITY = ("exact", "replay", "approx")


def declare(*, targets: tuple[str, ...], reproducibility: str) -> Callable[[type], type]:
    """Class decorator: record the targets and the reproducibility class of an expansion.

    :param targets: subset of ``("cpu", "gpu")``.
    :param reproducibility: ``"exact"``, ``"replay"`` or ``"approx"``.
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
        return cls

    return wrap


def rank(reproducibility: str) -> int:
    """Order of the classes: exact (0) is stronger than replay (1), which is stronger than approx (2)."""
    return REPRODUCIBILITY.index(reproducibility)


__all__ = ["REPRODUCIBILITY", "TARGETS", "declare", "rank"]
