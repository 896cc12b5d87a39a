"""Fixes for DaCe 2.0.0a10 defects that sdfg_scan's programs reach (installed when ``sdfg_scan`` is imported).

**CUDA stream count.** DaCe's CUDA code generator gives each GPU node of a state a stream
(``CUDACodeGen._compute_cudastreams``) and creates ``dace::cuda::Context(streams, events)`` with the count
that function returns. When it meets a host-level nested SDFG while walking a state's edges (DaCe makes
one for every strided GPU-to-GPU copy: ``InsertExplicitCopies`` expands it into a nested SDFG with a
copy map), it sets its running stream counter to the nested SDFG's count, which starts from the stream
of that edge and can be lower than the streams already handed out. The state then asks for fewer
streams than its nodes use: on graupel after ``optimize(target="gpu")`` the context holds 2 streams and
the code synchronises ``streams[11]``, a read past the array (a segmentation fault or "invalid device
context" on the first call).

:func:`install` wraps the function so that, for the top-level SDFG (the count the context is created
with), it returns at least one more than the largest stream and event number assigned anywhere in the
program. It only ever raises that count and leaves every stream assignment as DaCe made it. Idempotent.

**Buffers of ``persistent_transients="grow"``.** ``optimize``'s default on the CPU since stop 48 marks the
SDFG; :func:`install` also makes DaCe's CPU code generator take the heap transients of such an SDFG from a
cache in the program's state where that is legal (:mod:`sdfg_scan.persistent`: it wraps
``DaCeCodeGenerator.allocate_arrays_in_scope``, to know where an array is allocated, and
``CPUCodeGen.allocate_array``/``deallocate_array``). SDFGs without the mark get DaCe's code unchanged.
"""

from __future__ import annotations

_MARK = "_sdfg_scan_dace_fix"   # on each wrapper install() puts in place


def _assigned(sdfg) -> tuple[int, int]:
    """One more than the largest ``_cuda_stream`` on a node and ``_cuda_event`` on a memlet edge."""
    streams = events = 0
    for node, _ in sdfg.all_nodes_recursive():
        s = getattr(node, "_cuda_stream", None)
        if isinstance(s, int):
            streams = max(streams, s + 1)
    for edge, _ in sdfg.all_edges_recursive():
        e = getattr(edge, "_cuda_event", None)
        if isinstance(e, int):
            events = max(events, e + 1)
    return streams, events


def install() -> None:
    from dace.codegen.targets import framecode
    from dace.codegen.targets.cpu import CPUCodeGen
    from dace.codegen.targets.cuda import CUDACodeGen

    from sdfg_scan import persistent

    _wrap_once(CUDACodeGen, "_compute_cudastreams", _stream_count)
    _wrap_once(framecode.DaCeCodeGenerator, "allocate_arrays_in_scope", persistent._allocation_scope)
    _wrap_once(CPUCodeGen, "allocate_array", persistent._cached_allocate)
    _wrap_once(CPUCodeGen, "deallocate_array", persistent._cached_deallocate)


def _wrap_once(owner, name: str, make) -> None:
    """Replace ``owner.name`` by ``make(original)``, unless a wrapper of this module is already there (so
    :func:`install` is idempotent); the wrapper keeps the original as ``__wrapped__`` (DaCe without the fix,
    for tests) and its docstring."""
    original = getattr(owner, name)
    if getattr(original, _MARK, False):
        return
    wrapper = make(original)
    setattr(wrapper, _MARK, True)
    wrapper.__wrapped__ = original
    wrapper.__doc__ = original.__doc__
    setattr(owner, name, wrapper)


def _stream_count(original):
    """``CUDACodeGen._compute_cudastreams`` raising the top-level count to the streams and events in use."""

    def _compute_cudastreams(self, sdfg, default_stream=0, default_event=0):
        streams, events = original(self, sdfg, default_stream, default_event)
        # nested SDFGs (the recursion) keep DaCe's counts; max_concurrent_streams < 0: the default stream only
        if sdfg.parent_nsdfg_node is not None or streams <= 0:
            return streams, events
        used_streams, used_events = _assigned(sdfg)
        return max(streams, used_streams), max(events, used_events)

    return _compute_cudastreams


__all__ = ["install"]
