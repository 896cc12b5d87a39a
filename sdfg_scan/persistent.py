"""Transients allocated once per compiled program instead of once per call (``optimize(...,
persistent_transients=...)``).

gt4py's SDFGs allocate their top-level ``Cell x K`` transients on every call; for graupel at 20480 x 65
that is 26 arrays of 10.6 MB whose pages the kernel zeroes again on every call (the page faults of the
profile).

``"static"`` and ``"sized"`` give such arrays DaCe's ``Persistent`` lifetime: the program's ``__dace_init``
allocates them, with the sizes of the first call. Legal where (each checked per array):

* the array is a transient of the **top-level** SDFG, in host memory (``Default``/``CPU_Heap``), with
  ``Scope`` lifetime (not already persistent, external or on the stack/registers);
* no access to it sits inside a map scope (such an array may be meant per thread or per iteration);
* its size is known when the program is initialised: ``"static"`` takes only arrays whose shape is made
  of numbers; ``"sized"`` also takes shapes made of the program's free symbols, and is only legal for a
  caller that calls it with the same sizes every time (gt4py's ``TransientMemoryMode.PERSISTENT`` makes the
  same assumption). Like every DaCe persistent array, these belong to the compiled program's state: such an
  SDFG must not be nested inside a parallel map afterwards.

``"grow"`` (``optimize``'s default on the CPU since stop 48) changes no lifetime and adds nothing to the
graph. It marks the SDFG (a comment in its global code, :data:`MARK`), and when that SDFG is compiled in a
process that imported ``sdfg_scan``, DaCe's CPU code generator takes the buffer of each of its heap arrays
from a cache in the program's state struct instead of ``new``/``delete`` (:func:`install_codegen`, which
``sdfg_scan.dace_fixes`` installs). The cache keeps one buffer per array (keyed by its name and its SDFG's
id); a call that needs more than the buffer holds allocates it again, larger; a smaller call uses the front
of it. Buffers of 4 MiB or more are 2 MiB-aligned, their size rounded up to 2 MiB (a call within the rounded
size reuses them), and advised for transparent huge pages on Linux (:data:`BUFFERS_HEADER`: a column kernel
reads each level of a block of cells from another 4 KiB page, and on graupel the advice saved 5 to 10 % of a
call). Nothing in the SDFG depends on the arrays' names or place, so the SDFG stays an ordinary one: it may
be simplified, transformed, saved and loaded, nested in another SDFG, or inlined into it (where the mark is
lost the arrays are simply allocated per call). Decided at code generation, per allocation, where DaCe
allocates the array (its allocation scope):

* the SDFG carries the mark, and no enclosing nested-SDFG node sits inside a map or consume scope or in an
  SDFG with OpenMP sections (then two threads could run that code at once: such arrays keep ``new``);
* DaCe allocates the array for its whole SDFG or for one state, not inside a map scope (an array allocated
  per map iteration or per thread keeps ``new``);
* it is a plain transient array in ``CPU_Heap`` (not a view, reference, stream or scalar), of a basic type,
  without ``setzero`` or a start offset.

A transient holds no value across calls (every call writes before it reads, or the SDFG was wrong), so
results do not change: bitwise the same program (tested). What it costs: the buffers stay allocated between
calls (freed with the program's state), and two threads must not call one compiled program at the same time
(as for any DaCe persistent array).
"""

from __future__ import annotations

import threading
from pathlib import Path

import dace
from dace import dtypes

MODES = ("static", "sized", "grow")

MARK = "// sdfg_scan: persistent_transients='grow' (heap transients taken from a cache in the program's state)\n"
"""The comment ``"grow"`` appends to an SDFG's global code (``frame``): the mark the code generator looks for."""

CACHE_FIELD = "__sdfg_scan_buffers"
"""The state-struct field holding the cached buffers (:class:`CachedTransients`)."""

BUFFERS_HEADER = str(Path(__file__).with_name("expansions") / "sdfg_scan_buffers.h")
"""The C++ of the cache (``__sdfg_scan_buffers_t``): buffers grown on demand, large ones in huge pages."""

_CACHE_TYPE = f"__sdfg_scan_buffers_t {CACHE_FIELD};"


@dace.library.environment
class CachedTransients:
    """The state-struct field of ``persistent_transients="grow"``: the buffers by key (array name and SDFG id),
    each with its size in bytes; freed with the program's state (``__dace_exit``). Buffers of 4 MiB or more are
    2 MiB-aligned and advised for transparent huge pages on Linux (:data:`BUFFERS_HEADER`)."""

    cmake_minimum_version = None
    cmake_packages: list[str] = []
    cmake_variables: dict[str, str] = {}
    cmake_includes: list[str] = []
    cmake_libraries: list[str] = []
    cmake_compile_flags: list[str] = []
    cmake_link_flags: list[str] = []
    cmake_files: list[str] = []
    headers = {"frame": [BUFFERS_HEADER]}
    state_fields = [_CACHE_TYPE]
    init_code = ""
    finalize_code = ""
    dependencies: list[type] = []


def make_transients_persistent(sdfg: dace.SDFG, mode: str = "static") -> list[str]:
    """``"static"``/``"sized"``: give the top-level transients of ``sdfg`` that may legally be persistent (see
    the module) the ``Persistent`` lifetime. ``"grow"``: mark ``sdfg`` so that its heap transients come from the
    program's buffer cache (no lifetime changes). Returns the names of the top-level transients taken (for
    ``"grow"``: those the code generator will take, as far as the SDFG shows it now).

    :param mode: ``"static"`` (shapes of numbers only), ``"sized"`` (also shapes of the program's free
        symbols: the caller calls with the same sizes every time) or ``"grow"`` (any sizes: a call that
        outgrows a buffer allocates it again).
    """
    if mode not in MODES:
        raise ValueError(f"sdfg_scan.optimize: persistent_transients must be one of {MODES} (or False), "
                         f"got {mode!r}")
    if mode == "grow":
        if not is_marked(sdfg):
            sdfg.append_global_code(MARK)
        return _grown(sdfg)
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
        if not _plain_host_array(desc) or desc.lifetime != dtypes.AllocationLifetime.Scope:
            continue
        symbols = {str(s) for s in desc.free_symbols}
        if symbols and (mode == "static" or not symbols <= free):
            continue
        chosen.append(name)
    for name in chosen:
        sdfg.arrays[name].lifetime = dtypes.AllocationLifetime.Persistent
    return chosen


def is_marked(sdfg: dace.SDFG) -> bool:
    """Whether ``sdfg`` itself carries the ``"grow"`` mark."""
    block = sdfg.global_code.get("frame")
    return block is not None and MARK.strip() in block.as_string


def _plain_host_array(desc) -> bool:
    return (desc.transient and isinstance(desc, dace.data.Array)
            and not isinstance(desc, (dace.data.View, dace.data.Reference))
            and desc.storage in (dtypes.StorageType.Default, dtypes.StorageType.CPU_Heap)
            and not isinstance(desc.dtype, (dtypes.opaque, dtypes.struct, dtypes.pointer)))


def _cacheable(desc) -> bool:
    """A plain host array whose buffer ``"grow"`` may take from the cache: a per-call lifetime, no start offset
    (where it is allocated is checked at code generation)."""
    return (_plain_host_array(desc) and not desc.start_offset
            and desc.lifetime in (dtypes.AllocationLifetime.Scope, dtypes.AllocationLifetime.State,
                                  dtypes.AllocationLifetime.SDFG))


def _grown(sdfg: dace.SDFG) -> list[str]:
    """The top-level transients ``"grow"`` takes: plain host arrays with a per-call lifetime that DaCe will not
    allocate inside a map scope (used in several states, or somewhere outside the maps of their one state)."""
    states: dict[str, set] = {}
    outside: set[str] = set()
    for state in sdfg.states():
        scopes = state.scope_dict()
        for node in state.data_nodes():
            states.setdefault(node.data, set()).add(state)
            if scopes.get(node) is None:
                outside.add(node.data)
    return sorted(n for n, used in states.items() if _cacheable(sdfg.arrays[n]) and (len(used) > 1 or n in outside))


# ---- code generation (installed by sdfg_scan.dace_fixes) -----------------------------------------------------

_SCOPE = threading.local()


def _runs_alone(sdfg: dace.SDFG) -> bool:
    """No two threads run ``sdfg``'s code at once: it is the top-level SDFG, or every nested-SDFG node above it
    sits outside map/consume scopes, in an SDFG without OpenMP sections."""
    while sdfg.parent_nsdfg_node is not None:
        state, parent = sdfg.parent, sdfg.parent_sdfg
        if state is None or parent is None or parent.openmp_sections:
            return False
        if state.entry_node(sdfg.parent_nsdfg_node) is not None:
            return False
        sdfg = parent
    return True


def _takes(sdfg, node, desc) -> bool:
    scope = getattr(_SCOPE, "scope", None)
    return (scope is not None and not isinstance(scope, dace.nodes.EntryNode) and is_marked(sdfg)
            and _cacheable(desc) and desc.storage == dtypes.StorageType.CPU_Heap
            and not getattr(node, "setzero", False) and _runs_alone(sdfg))


def _allocation_scope(original):
    """``DaCeCodeGenerator.allocate_arrays_in_scope`` recording the scope it allocates for (an entry node, a
    state or an SDFG), which the CPU allocation below reads."""

    def allocate_arrays_in_scope(self, sdfg, cfg, scope, function_stream, callsite_stream):
        previous = getattr(_SCOPE, "scope", None)
        _SCOPE.scope = scope
        try:
            return original(self, sdfg, cfg, scope, function_stream, callsite_stream)
        finally:
            _SCOPE.scope = previous

    return allocate_arrays_in_scope


def _cached_allocate(original):
    """``CPUCodeGen.allocate_array`` taking the buffer of a ``"grow"`` array from the state's cache: DaCe's own
    code declares and books the pointer; only its ``new`` line is replaced (where it is the one line DaCe wrote;
    anything else is written as DaCe wrote it)."""

    def allocate_array(self, sdfg, cfg, dfg, state_id, node, nodedesc, function_stream, declaration_stream,
                       allocation_stream, *args, **kwargs):
        if not _takes(sdfg, node, nodedesc):
            return original(self, sdfg, cfg, dfg, state_id, node, nodedesc, function_stream, declaration_stream,
                            allocation_stream, *args, **kwargs)
        from dace.codegen.prettycode import CodeIOStream
        from dace.codegen.targets import cpp

        name = self.ptr(node.data, nodedesc, sdfg)
        captured = CodeIOStream()
        same = declaration_stream is allocation_stream
        result = original(self, sdfg, cfg, dfg, state_id, node, nodedesc, function_stream,
                          captured if same else declaration_stream, captured, *args, **kwargs)
        text = captured.getvalue()
        lines = [ln for ln in text.splitlines() if ln.strip()]
        new = [ln for ln in lines if ln.strip().startswith(f"{name} = new ")]
        if len(new) != 1 or len(lines) - 1 > int(same):
            allocation_stream.write(text, cfg, state_id, node)   # not the form expected: DaCe's code as is
            return result
        for ln in lines:
            if ln is not new[0]:
                allocation_stream.write(ln + "\n", cfg, state_id, node)   # (the declaration)
        ctype = nodedesc.dtype.ctype
        align = 64 if nodedesc.alignment == 0 else nodedesc.alignment
        key = f"{node.data}@{sdfg.cfg_id}"
        size = cpp.sym2cpp(nodedesc.total_size)
        allocation_stream.write(
            f"{name} = static_cast<{ctype}*>(__state->{CACHE_FIELD}.get(\"{key}\", sizeof({ctype}) * "
            f"(({size}) > 0 ? (unsigned long long)({size}) : 0ULL), {align}));  "
            "// sdfg_scan: persistent_transients='grow'\n", cfg, state_id, node)
        _cached(self).add((sdfg.cfg_id, name))
        self._dispatcher._used_environments.add(CachedTransients.full_class_path())  # type: ignore[attr-defined]
        return result

    return allocate_array


def _cached_deallocate(original):
    """``CPUCodeGen.deallocate_array``: DaCe's bookkeeping, without the ``delete`` of a cached buffer."""

    def deallocate_array(self, sdfg, cfg, dfg, state_id, node, nodedesc, function_stream, callsite_stream,
                         *args, **kwargs):
        from dace.codegen.prettycode import CodeIOStream

        if (sdfg.cfg_id, self.ptr(node.data, nodedesc, sdfg)) in _cached(self):
            return original(self, sdfg, cfg, dfg, state_id, node, nodedesc, function_stream, CodeIOStream(),
                            *args, **kwargs)
        return original(self, sdfg, cfg, dfg, state_id, node, nodedesc, function_stream, callsite_stream,
                        *args, **kwargs)

    return deallocate_array


def _cached(codegen) -> set:
    """The (SDFG id, pointer) pairs whose buffer a code generator took from the cache (one set per program)."""
    return codegen.__dict__.setdefault("_sdfg_scan_cached", set())


__all__ = ["CACHE_FIELD", "CachedTransients", "MARK", "MODES", "is_marked", "make_transients_persistent"]
