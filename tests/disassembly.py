"""What the vectorised maps of a compiled program call (``objdump -d``): whether GCC vectorised their loops."""

from __future__ import annotations

import re
import subprocess

SCALAR_MATH = re.compile(r"((__)?(exp|log|pow)(_finite)?@|_ZL\d+_sdfg_scan_x(exp|log|pow)1|_sdfg_scan_[xp](exp|log|pow)1_s)")
"""A scalar call of glibc's ``exp``/``log``/``pow`` (or the scalar entry of the exact form's per-lane wrapper:
GCC's static clone form, or the ``_s`` symbol of the variants ``scan_blocked._lane_calls`` writes; or that of
the predicated replay calls, ``scan_blocked._predicated_calls``)."""


def _functions(library: str) -> dict[str, str]:
    text = subprocess.run(["objdump", "-d", "--no-show-raw-insn", library], capture_output=True, text=True,
                          check=True).stdout
    return dict(re.findall(r"^[0-9a-f]+ <([^>]+)>:\n(.*?)(?=^[0-9a-f]+ <|\Z)", text, re.S | re.M))


def callers(library: str, callee: str) -> list[str]:
    """The functions of the program, vector variants (``_ZGV...``) themselves aside, that call a symbol whose
    whole name matches the regular expression ``callee``."""
    return [name for name, body in _functions(library).items()
            if not name.startswith("_ZGV") and re.search(rf"call\s+\S+\s+<(?:{callee})>", body)]


def vector_math_called(library: str) -> bool:
    """Whether some function of the program calls a vector math variant (``_ZGV...``: libmvec's, or the exact
    lane calls' variants ``scan_blocked._lane_calls`` writes): a vectorised loop. Those written variants are in
    every library of an exact vectorised program, whether a loop calls them or not, so their presence says
    nothing."""
    return bool(callers(library, r"_ZGV[^>]*"))


def _map_bodies(library: str) -> dict[str, str]:
    """``{function: its disassembly}`` for ``VectorizeCellMap``'s functions (``_sdfg_scan_map_*`` and their
    OpenMP bodies, and the packed ``pow`` of its staged call sites, ``_sdfg_scan_pw_*``) in the shared library
    ``library``."""
    return {name: body for name, body in _functions(library).items()
            if "_sdfg_scan_map_" in name or "_sdfg_scan_pw_" in name}


def map_calls(library: str) -> dict[str, set[str]]:
    """``{function: symbols it calls}`` for ``VectorizeCellMap``'s functions."""
    return {name: set(re.findall(r"call\s+\S+\s+<([^>]+)>", body)) for name, body in _map_bodies(library).items()}


def map_gathers(library: str) -> int:
    """How many vector gathers ``VectorizeCellMap``'s functions hold, emulated ones included: the accurate
    ``pow``'s table loads in a vectorised cell loop (a scalar loop loads one entry at a time). GCC 12 emits
    ``vgatherqpd`` only under a tuning that enables gathers; under its generic tuning (``-march=native`` on
    a CPU it does not know, such as an Intel Xeon of model 207) it loads the lanes one by one into a vector
    register instead. Such a loop is counted by its packed double arithmetic on 256- and 512-bit registers
    (none in a scalar loop's code)."""
    bodies = _map_bodies(library).values()
    gathers = sum(len(re.findall(r"\bvgather[dq]pd\b", body)) for body in bodies)
    packed = sum(len(re.findall(r"\bv(?:add|sub|mul|div|max|min|fn?m(?:add|sub)\d*)pd\s+[^\n]*%[yz]mm", body))
                 for body in bodies)
    return gathers or packed


def scalar_math_in_map_loops(library: str) -> list[str]:
    """The vectorised maps' functions that call scalar ``exp``/``log``/``pow`` but no simd function (a
    vectorised loop calls ``_ZGV...``: libmvec, or the exact form's per-lane clones; its scalar remainder
    may call the scalar functions too): cell loops GCC left scalar."""
    return [name for name, calls in map_calls(library).items()
            if any(SCALAR_MATH.match(c) for c in calls) and not any(c.startswith("_ZGV") for c in calls)]
