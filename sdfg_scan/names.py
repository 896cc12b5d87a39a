"""Fresh names for what sdfg_scan adds to or renames in a scan body.

A scan body (a nested SDFG) defines names in three places: its containers, its symbols, and the symbols its
inter-state edges assign, inside its level loop too (DaCe lists those among the symbols only once they are
declared). A new name must avoid all three, and whatever the caller adds to ``taken``.
"""

from __future__ import annotations

import itertools

import dace


def body_names(body: dace.SDFG) -> set[str]:
    """Every name ``body`` defines: containers, symbols and the symbols its inter-state edges assign."""
    names = set(body.arrays) | set(body.symbols) | set(body.constants)
    for e in body.all_interstate_edges(recursive=True):
        names |= set(e.data.assignments)
    return names


def fresh_name(base: str, taken: set[str], suffix: str, start: int = 0) -> str:
    """``f"{base}{suffix}{i}"`` for the first ``i >= start`` not in ``taken``; the name is added to ``taken``."""
    for i in itertools.count(start):
        name = f"{base}{suffix}{i}"
        if name not in taken:
            taken.add(name)
            return name
    raise AssertionError("unreachable")


__all__ = ["body_names", "fresh_name"]
