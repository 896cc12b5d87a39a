"""Transients allocated once per compiled program instead of once per call (``optimize(...,
persistent_transients=...)``).

gt4py's SDFGs allocate their top-level ``Cell x K`` transients on every call; for graupel at 20480 x 65
that is 26 arrays of 10.6 MB whose pages the kernel zeroes again on every call (the page faults of the
profile). A persistent transient is allocated by the program's ``__dace_init`` and reused.

Legal where (each checked per array):

* the array is a transient of the **top-level** SDFG, in host memory (``Default``/``CPU_Heap``), with
  ``Scope`` lifetime (not already persistent, external or on the stack/registers);
* no access to it sits inside a map scope (such an array may be meant per thread or per iteration);
* its size is known when the program is initialised: ``"static"`` takes only arrays whose shape is made
  of numbers; ``"sized"`` and ``"grow"`` also take shapes made of the program's free symbols. DaCe
  initialises a compiled program once, with the sizes of its first call, so ``"sized"`` is only legal for a
  caller that calls it with the same sizes every time (gt4py's ``TransientMemoryMode.PERSISTENT`` makes the
  same assumption); ``"static"`` is always legal, and so is ``"grow"``: the program starts with a state
  (``GROW_STATE``) whose tasklet compares each such array's size at this call with the size it holds and
  allocates it again, larger, where it is too small (the capacities live in the program's state struct, by
  array name, :class:`GrowingTransients`). A call with smaller sizes uses the front of the larger buffers: the
  addressing of an array is computed from its strides at each call, not from its allocation.

Like every persistent array in DaCe, the buffers belong to the compiled program's state, so two threads must
not call one compiled program at the same time (DaCe's own persistent transients have the same limit). The
``"grow"`` tasklet names the arrays as DaCe's code generator names a persistent array of the top-level
SDFG (``__state->__0_<name>``). If such an SDFG is nested in another one afterwards, the prologue is written
again just before code generation with the nested SDFG's names (:func:`rename_nested_prologues`, installed
by ``sdfg_scan.dace_fixes``). Where that cannot apply (say the nested SDFG was inlined into its parent and
its arrays renamed) the C++ compiler reports the unknown name and quotes the prologue's line, which says
what to do: :data:`NESTED_HINT`; nothing runs wrongly. ``optimize`` applies ``"grow"`` by default on the
CPU since stop 48.

A transient holds no value across calls (every call writes before it reads, or the SDFG was wrong), so
results do not change: bitwise the same program (tested). What it costs: the arrays stay allocated
between calls.
"""

from __future__ import annotations

import re

import dace
from dace import dtypes

MODES = ("static", "sized", "grow")

GROW_STATE = "sdfg_scan_grow_transients"
"""Label of the state ``"grow"`` puts at the start of the program."""

CAPACITY_FIELD = "__sdfg_scan_grow_capacity"

NESTED_HINT = ("sdfg_scan: the persistent_transients='grow' prologue of an SDFG whose arrays have other names "
               "here (an SDFG optimized alone, then inlined into another?): optimize the outer SDFG instead, or "
               "this one with persistent_transients=False")
"""A comment on each line of the ``"grow"`` prologue: the compiler's error quotes it where the prologue names
arrays that have other names in the program being built."""


@dace.library.environment
class GrowingTransients:
    """The state-struct field in which ``persistent_transients="grow"`` keeps the number of elements each
    grown array holds, by the array's name (so that a second ``"grow"`` pass over the same SDFG, with a
    prologue of its own, cannot mix up two arrays; empty with a new state struct: the first call allocates
    every array again at its own sizes)."""

    cmake_minimum_version = None
    cmake_packages: list[str] = []
    cmake_variables: dict[str, str] = {}
    cmake_includes: list[str] = []
    cmake_libraries: list[str] = []
    cmake_compile_flags: list[str] = []
    cmake_link_flags: list[str] = []
    cmake_files: list[str] = []
    headers = {"frame": ["string", "unordered_map", "new"]}
    state_fields = [f"std::unordered_map<std::string, unsigned long long> {CAPACITY_FIELD};"]
    init_code = ""
    finalize_code = ""
    dependencies: list[type] = []


def make_transients_persistent(sdfg: dace.SDFG, mode: str = "static") -> list[str]:
    """Give the top-level transients of ``sdfg`` that may legally be persistent (see the module) the
    ``Persistent`` lifetime; return their names.

    :param mode: ``"static"`` (shapes of numbers only), ``"sized"`` (also shapes of the program's free
        symbols: the caller calls with the same sizes every time) or ``"grow"`` (as ``"sized"``, and every
        call reallocates the arrays its sizes outgrow: legal for any caller).
    """
    if mode not in MODES:
        raise ValueError(f"sdfg_scan.optimize: persistent_transients must be one of {MODES} (or False), "
                         f"got {mode!r}")
    free = {str(s) for s in sdfg.free_symbols}
    refused: set[str] = set()
    seen: set[str] = set()
    for state in sdfg.states():
        scopes = state.scope_dict()
        for node in state.data_nodes():
            seen.add(node.data)
            if scopes.get(node) is not None:   # inside a map scope
                refused.add(node.data)
    chosen = []
    for name in sorted(seen - refused):
        desc = sdfg.arrays[name]
        if not desc.transient or not isinstance(desc, dace.data.Array) or isinstance(desc, dace.data.View):
            continue
        if desc.lifetime != dtypes.AllocationLifetime.Scope:
            continue
        if desc.storage not in (dtypes.StorageType.Default, dtypes.StorageType.CPU_Heap):
            continue
        symbols = {str(s) for s in desc.free_symbols}
        if symbols and (mode == "static" or not symbols <= free):
            continue
        chosen.append(name)
    for name in chosen:
        sdfg.arrays[name].lifetime = dtypes.AllocationLifetime.Persistent
    growing = [n for n in chosen if sdfg.arrays[n].free_symbols] if mode == "grow" else []
    if growing:
        state = sdfg.add_state_before(sdfg.start_block, label=GROW_STATE, is_start_block=True)
        t = state.add_tasklet(GROW_STATE, {}, {}, _grow_code(sdfg, growing), language=dtypes.Language.CPP,
                              side_effects=True)
        t.environments = {GrowingTransients.full_class_path()}  # type: ignore[attr-defined]
    return chosen


_CAPACITY_KEY = re.compile(r'_caps\["([^"@]+)(?:@\d+)?"\]')


def rename_nested_prologues(sdfg: dace.SDFG) -> int:
    """Write the ``"grow"`` prologue of every SDFG nested in ``sdfg`` again, with the names DaCe's code
    generator gives the persistent arrays of that nested SDFG (``__state->__<cfg_id>_<name>``) and capacity
    keys of its own (``<name>@<cfg_id>``: two nested copies of one program keep two capacities); returns how
    many prologues were written. Called just before code generation, when the nesting and the SDFGs' ids are
    final (``sdfg_scan.dace_fixes`` installs the call), so that an SDFG optimised on its own and nested in
    another one afterwards compiles and grows its arrays as it does at the top level."""
    count = 0
    sdfg.reset_cfg_list()   # the ids DaCe's code generator uses (it resets the list first too)
    for sd in sdfg.all_sdfgs_recursive():
        if sd.parent_nsdfg_node is None:
            continue
        for state in sd.states():
            for node in state.nodes():
                if not (isinstance(node, dace.nodes.Tasklet) and node.label == GROW_STATE
                        and NESTED_HINT in node.code.as_string):
                    continue
                names = [n for n in dict.fromkeys(_CAPACITY_KEY.findall(node.code.as_string))
                         if n in sd.arrays and sd.arrays[n].lifetime == dtypes.AllocationLifetime.Persistent]
                node.code = dace.properties.CodeBlock(_grow_code(sd, names, f"@{sd.cfg_id}"),
                                                      dtypes.Language.CPP)
                count += 1
    return count


def _grow_code(sdfg: dace.SDFG, names: list[str], key_suffix: str = "") -> str:
    """C++ that allocates each of ``names`` (persistent arrays of ``sdfg``, the top-level SDFG unless
    :func:`rename_nested_prologues` writes it for a nested one) again where this call's size exceeds the
    capacity recorded in the state struct (under the array's name plus ``key_suffix``). The pointer and the
    (aligned or plain) ``new``/``delete`` are DaCe's own for a persistent array (``cpp.ptr``, the CPU code
    generator's choice of aligned ``operator new``), so that DaCe's ``__dace_exit`` frees what the prologue
    allocated."""
    from dace.codegen.targets import cpp
    from dace.codegen.targets.cpu import _use_aligned_operator_new

    lines = [f"auto &_caps = __state->{CAPACITY_FIELD};"]
    for name in names:
        desc = sdfg.arrays[name]
        ptr = cpp.ptr(name, desc, sdfg)
        ctype = desc.dtype.ctype
        if _use_aligned_operator_new(desc):
            align = 64 if desc.alignment == 0 else desc.alignment
            free = f"::operator delete[]({ptr}, std::align_val_t({align}));"
            new = f"new (std::align_val_t({align})) {ctype} [_need]"
        else:
            free, new = f"delete[] {ptr};", f"new {ctype} [_need]"
        lines.append(f"{{ const long long _size = {cpp.sym2cpp(desc.total_size)};")
        lines.append("  const unsigned long long _need = _size > 0 ? (unsigned long long)_size : 0ULL;")
        lines.append(f"  unsigned long long &_cap = _caps[\"{name}{key_suffix}\"];")
        # the hint rides on the line the C++ compiler quotes when a name is wrong (rename_nested_prologues
        # could not apply: the arrays of a nested SDFG renamed, say by inlining it)
        lines.append(f"  if (_need > _cap) {{ {free} {ptr} = {new}; _cap = _need; }} }}  // {NESTED_HINT}")
    return "\n".join(lines)


__all__ = ["CAPACITY_FIELD", "GROW_STATE", "GrowingTransients", "MODES", "NESTED_HINT", "make_transients_persistent",
           "rename_nested_prologues"]
