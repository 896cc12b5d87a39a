"""Builder of the ``parallel_prefix`` expansion family: a chunked reduce-then-scan along the levels.

For few, long columns, where a thread per column leaves threads idle or runs one dependent chain
per thread. The levels of a column, in visiting order, are cut into chunks of ``C = node.chunk_size``
levels (a node property: the chunking never depends on the thread count or the device, so the
bits do not either; the order is pinned by :mod:`sdfg_scan.reference_prefix`)::

    pass 1 (map over (column, chunk group)):  T[j] = fold of chunk j              (reads the inputs)
    pass 2 (map over columns):                 P[j] = P[j-1] (+) T[j]              (a few values)
    pass 3 (map over (column, chunk group)):  chunk j rescanned from P[j-1]       (reads + writes)

A task of passes 1 and 3 is a group of ``G`` consecutive chunks of one column (``G = 4`` on CPU, 1 on
GPU) whose dependent chains run interleaved in one loop, which hides the latency of the chain (about
4 cycles per element for a sum, 8 for the affine step): this is where the gain over ``sequential``
comes from when every thread already has a column. ``G`` changes no bit.

On the GPU the expansion holds three schedules, all built, and picks one at run time from the sizes
(``nch`` chunks per column, ``ncol`` columns; both symbolic when the SDFG is built) in a ``ConditionalBlock``:

- warp per column, where ``nch <= GPU_WARP`` (short columns, or a small ``chunk_size``): one kernel, blocks
  of ``GPU_BLOCK`` threads holding ``GPU_BLOCK // GPU_WARP`` columns, a warp each; ``__syncwarp()``;
- block per column, where ``nch <= GPU_BLOCK`` or the columns' blocks fill the GPU (``ncol * GPU_BLOCK >=
  GPU_COLUMNS_TO_FILL``): one kernel, a block of ``GPU_BLOCK`` threads per column; ``__syncthreads()``;
- three kernels otherwise (few columns with more chunks than a block has threads): totals and rescan a
  thread per (column, chunk), offsets a thread per column. For 2 columns x 4M levels in chunks of 1024
  this runs 8192 threads spread over the device, where a block per column runs 512 on two multiprocessors.

In the one-kernel schedules thread ``t`` of a column's ``W`` threads folds chunks ``t, t + W, ...`` into
their totals (pass 1); after a barrier thread 0 computes the column's offsets in order (pass 2); after a
second barrier each thread rescans its chunks (pass 3): one launch instead of three. In DaCe this is a
``GPU_Device`` map over blocks around a ``GPU_ThreadBlock`` map of exactly ``GPU_BLOCK`` threads around
one C++ tasklet holding the barriers: DaCe puts no guard around a thread-block map whose range is the
block size, and the tasklet has no return and no barrier inside a loop, so every thread of a block
reaches both barriers (the padding warps past the last column included). Every schedule runs the same
pass code (:func:`_pass_code`, :func:`_offsets_code`), so the operations, their order and the bits are
the same: the choice changes the speed only. The thresholds are not measured yet (no GPU in this
project's CI; ``benchmarks/gpu_check.py --prefix-schedules`` times each schedule).

On the CPU one tasklet holds the schedule (:func:`_cpu_code`), chosen at run time from the thread count:
where the columns fill the threads, one OpenMP loop over columns in which each column walks its groups in
order (pass 1 for a group, its offsets, pass 3 while the group is in cache: the inputs come from memory
once); else the three passes as OpenMP loops over tasks. Both run the same operations on the same
values, so the bits are the same. Contiguous CPU outputs are written with streaming stores
(:data:`STREAM_STORES`).

Cost description (for the cost model; ``s`` = item size, per level of a column)::

    bytes moved = (2 * inputs + outputs) * s        # inputs read in passes 1 and 3, outputs written once
                                                    # (the CPU one-pass schedule reads the second time from
                                                    # cache; the cost model still charges it)
                + 2 * carries * s * columns * ceil(levels / C) / (columns * levels)   # chunk totals
    sequential  = (inputs + outputs) * s
    chains      = levels / C independent chains per column (parallelism: columns * levels / C tasks)

``CumulativeScan``: inputs 1, outputs 1, carries 1 (3 s per level against 2 s). ``LinearRecurrence``:
inputs 2, outputs 1, carries 2 (5 s against 3 s).

Reproducibility: ``replay``. Chunk 0 is bitwise the sequential scan; later levels differ by the
reassociation at chunk boundaries (the results match ``reference.<fn>(order="chunked", chunk=C)``
bitwise); min/max are exactly associative and give the sequential bits. The generated code carries
the :class:`~sdfg_scan.expansions.environments.ExactArithmetic` flags (no FMA contraction), so the
same bits come from every thread count and, with ``exact_cuda_flags()``, from the GPU.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, TypeAlias

import dace
from dace import dtypes
from dace.properties import CodeBlock
from dace.sdfg.state import ConditionalBlock, ControlFlowRegion

from sdfg_scan.context import target_of
from sdfg_scan.cost import GPU_COLUMNS_TO_FILL
from sdfg_scan.expansions.column_loop import window_sdfg

ColumnNode: TypeAlias = Any  # the node type (duck-typed: an expansion never imports a node module)

CPU_GROUP = 4
"""Chunks per CPU task, run interleaved (independent chains)."""

STREAM_STORES = """#ifndef SDFG_SCAN_STREAM_STORES
#define SDFG_SCAN_STREAM_STORES
#include <omp.h>
#include <cstring>
#if defined(__x86_64__) && defined(__SSE2__)
#include <immintrin.h>
static inline void sdfg_scan_put(double* p, double v, bool unit) {
    if (unit) { long long b; std::memcpy(&b, &v, 8); _mm_stream_si64(reinterpret_cast<long long*>(p), b); }
    else { *p = v; }
}
static inline void sdfg_scan_put(float* p, float v, bool unit) {
    if (unit) { int b; std::memcpy(&b, &v, 4); _mm_stream_si32(reinterpret_cast<int*>(p), b); }
    else { *p = v; }
}
static inline void sdfg_scan_fence() { _mm_sfence(); }
#else
static inline void sdfg_scan_fence() {}
#endif
template <typename T> static inline void sdfg_scan_put(T* p, T v, bool) { *p = v; }
#endif
"""
"""CPU output stores. A long column's outputs are not read again soon: on x86-64, contiguous outputs
are written with non-temporal stores (no read-for-ownership of the output lines: a third less memory
traffic for a cumulative sum), fenced before the parallel loop ends. The stored bits are the same."""

DEFAULT_CHUNK = 15000
"""Levels per chunk unless the node says otherwise (``chunk_size``). Not a power of two: chunks whose
byte size is a multiple of 4 KiB put the interleaved chains of a task into one cache set."""


@dataclass
class PrefixOp:
    """An associative scan in the carry-first form ``c = step(c, e)``; C++ expressions over
    ``{c0}, {c1}, ...`` (the carry) and ``{e0}, {e1}, ...`` (the element of one level; the chunk
    totals have the same form), as ``str.format`` fields. ``start`` gives the carry after the first visited level of a column
    (may read the K-less inputs as ``col_<conn>``); ``emit`` the value written to each output."""

    ctype: str
    inputs: list[str]
    step: list[str]
    start: list[str]
    outputs: dict[str, int]
    col_inputs: list[str] = field(default_factory=list)
    exclusive_first: str | None = None  # exclusive scans: the value emitted at the first level


def _s(expr) -> str:
    return dace.symbolic.symstr(expr)


class _Code:
    """C++ pieces shared by the passes."""

    def __init__(self, node: ColumnNode, state: dace.SDFGState, op: PrefixOp, chunk: int, stream: bool):
        self.op = op
        self.ops = {c: node.operand(state, c) for c in op.inputs + op.col_inputs + list(op.outputs)}
        ref = self.ops[op.inputs[0]]
        self.shape = ref.shape
        self.axis = node.resolved_axis(len(self.shape))
        self.cols = [d for d in range(len(self.shape)) if d != self.axis]
        self.nk = _s(self.shape[self.axis])
        self.ncol = " * ".join(f"({_s(self.shape[d])})" for d in self.cols) or "1"
        self.chunk = chunk
        self.reverse = bool(node.reverse)
        self.nc = len(op.step)
        self.stream = stream  # outputs written with streaming stores (CPU, see STREAM_STORES)

    def header(self, group: int, per_column: bool = False) -> str:
        """Sizes, the column of this task (map parameter ``_t``: a group of chunks; ``_c``: a whole
        column, ``per_column``) and, for tasks, each operand's column base offset and level stride."""
        lines = [f"const long long nk = {self.nk};", f"const long long C = {self.chunk};",
                 "const long long nch = (nk + C - 1) / C;"]
        if per_column:
            return "\n".join(lines + ["const long long col = _c;"]) + "\n"
        lines += [f"const long long ntc = (nch + {group} - 1) / {group};",
                  "const long long col = _t / ntc;", f"const long long j0 = (_t % ntc) * {group};",
                  "long long r_ = col;"]
        for d in reversed(self.cols):
            lines.append(f"const long long i{d} = r_ % ({_s(self.shape[d])}); r_ /= ({_s(self.shape[d])});")
        lines.append("(void)r_;")
        for c, o in self.ops.items():
            if c in self.op.col_inputs:
                terms = [f"i{d} * ({_s(o.strides[i])})" for i, d in enumerate(self.cols)]
            else:
                terms = [f"i{d} * ({_s(o.strides[d])})" for d in self.cols]
            lines.append(f"const long long o_{c} = {' + '.join(terms) or '0'};")
        for c in self.op.inputs + list(self.op.outputs):
            lines.append(f"const long long s_{c} = {_s(self.ops[c].strides[self.axis])};")
        for c in self.op.col_inputs:
            lines.append(f"const {self.op.ctype} col_{c} = p_{c}[o_{c}];")
        return "\n".join(lines) + "\n"

    def level(self, pos: str) -> str:
        return f"(nk - 1 - ({pos}))" if self.reverse else f"({pos})"

    def load(self, g: str, pos: str) -> str:
        """``e0, e1, ...`` of the level at visiting position ``pos`` (in chunk slot ``g``)."""
        lv = self.level(pos)
        return "".join(f"const {self.op.ctype} e{i} = p_{c}[o_{c} + {lv} * s_{c}];\n"
                       for i, c in enumerate(self.op.inputs))

    def assign(self, exprs: list[str], g: str) -> str:
        """``c_i[g] = expr_i`` for all i, every expression evaluated before any assignment."""
        names = {f"c{i}": f"c{i}[{g}]" for i in range(self.nc)} | {f"e{i}": f"e{i}" for i in range(self.nc)}
        sub = [e.format(**names) for e in exprs]
        tmp = "".join(f"const {self.op.ctype} n{i} = {s};\n" for i, s in enumerate(sub))
        return "{\n" + tmp + "".join(f"c{i}[{g}] = n{i};\n" for i in range(self.nc)) + "}\n"

    def emit(self, g: str, pos: str, value: str | None = None) -> str:
        lv = self.level(pos)
        if self.stream:
            return "".join(f"sdfg_scan_put(p_{c} + o_{c} + {lv} * s_{c}, "
                           f"{value if value is not None else f'c{i}[{g}]'}, s_{c} == 1);\n"
                           for c, i in self.op.outputs.items())
        return "".join(f"p_{c}[o_{c} + {lv} * s_{c}] = {value if value is not None else f'c{i}[{g}]'};\n"
                       for c, i in self.op.outputs.items())

    def carries(self, group: int) -> str:
        return "".join(f"{self.op.ctype} c{i}[{group}];\n" for i in range(self.nc))


def _chunk_loop(code: _Code, group: int, rescan: bool, count: str, length: str) -> str:
    """Process chunks ``j0 .. j0 + count - 1`` of length ``length`` interleaved (``count <= group``)."""
    exclusive = code.op.exclusive_first is not None
    unroll = f"#pragma GCC unroll {group}\n" if group > 1 else ""
    # first level of every chunk
    first = code.load("g", "p0")
    if rescan:
        start0 = (code.emit("g", "p0", code.op.exclusive_first) if exclusive else "") + code.assign(
            code.op.start, "g") + ("" if exclusive else code.emit("g", "p0"))
        later = "".join(f"c{i}[g] = q_tot{i}[col * nch + j - 1];\n" for i in range(code.nc))
        later += (code.emit("g", "p0") if exclusive else "") + code.assign(code.op.step, "g") + (
            "" if exclusive else code.emit("g", "p0"))
    else:
        start0 = code.assign(code.op.start, "g")
        later = "".join(f"c{i}[g] = e{i};\n" for i in range(code.nc))
    body = (code.emit("g", "p") if exclusive and rescan else "") + code.assign(code.op.step, "g") + (
        code.emit("g", "p") if rescan and not exclusive else "")
    out = f"""{{
const long long cnt = {count}, len = {length};
for (long long g = 0; g < cnt; ++g) {{
  const long long j = j0 + g, p0 = j * C;
  {first}  if (j == 0) {{
{start0}  }} else {{
{later}  }}
}}
for (long long i = 1; i < len; ++i) {{
{unroll}  for (long long g = 0; g < {group if group > 1 else 'cnt'}; ++g) {{
    const long long p = (j0 + g) * C + i;
    {code.load("g", "p")}{body}  }}
}}
"""
    if not rescan:
        out += "".join(f"for (long long g = 0; g < cnt; ++g) p_tot{i}[col * nch + j0 + g] = c{i}[g];\n"
                       for i in range(code.nc))
    return out + "}\n"


def _pass_code(code: _Code, group: int, rescan: bool) -> str:
    """One task: the chunks ``j0 ..`` of column ``col``; full groups interleaved, the rest one by one."""
    head = code.header(group) + code.carries(group)
    if group == 1:
        return head + "if (j0 < nch) {\n" + _chunk_loop(code, 1, rescan, "1",
                                                        "(nk - j0 * C < C ? nk - j0 * C : C)") + "}\n"
    full = _chunk_loop(code, group, rescan, str(group), "C")
    one = _chunk_loop(code, 1, rescan, "1", "(nk - j0 * C < C ? nk - j0 * C : C)")
    return head + f"""if ((j0 + {group}) * C <= nk) {{
{full}}} else {{
  const long long jb = j0;
  for (long long jj = jb; jj < nch; ++jj) {{
    const long long j0 = jj;
{one}  }}
}}
"""


def _offset_step(code: _Code) -> str:
    """``P[j] = step(c, T[j])`` in place over the chunk totals of column ``col``, ``c`` holding ``P[j-1]``."""
    elems = "".join(f"const {code.op.ctype} e{i} = p_tot{i}[col * nch + j];\n" for i in range(code.nc))
    store = "".join(f"p_tot{i}[col * nch + j] = c{i}[0];\n" for i in range(code.nc))
    return elems + code.assign(code.op.step, "0") + store


def _offsets_code(code: _Code) -> str:
    """Pass 2, one column: ``P[j] = step(P[j-1], T[j])`` in place over the chunk totals."""
    head = code.header(1, per_column=True) + code.carries(1)
    load = "".join(f"c{i}[0] = p_tot{i}[col * nch];\n" for i in range(code.nc))
    return head + f"if (nch > 0) {{\n{load}for (long long j = 1; j < nch; ++j) {{\n{_offset_step(code)}}}\n}}\n"


def _chain_code(code: _Code, group: int) -> str:
    """The offsets of chunks ``j0 .. j0 + group - 1`` of column ``col``: the operations of
    :func:`_offsets_code`, for one group, after the groups before it."""
    load = "".join(f"c{i}[0] = p_tot{i}[col * nch + j - 1];\n" for i in range(code.nc))
    return (code.carries(1) + f"const long long je = (j0 + {group} < nch) ? j0 + {group} : nch;\n"
            f"for (long long j = (j0 > 0 ? j0 : 1); j < je; ++j) {{\n{load}{_offset_step(code)}}}\n")


def _cpu_code(code: _Code, group: int) -> str:
    """The CPU program: one OpenMP loop over columns where the columns fill the threads, each column
    walking its groups of chunks in order (totals, offsets, rescan of a group while it is in cache:
    the inputs are read from memory once); else the three passes, each a loop over tasks. Both run
    the same operations on the same values, so the bits do not depend on the thread count."""
    head = (f"const long long nk = {code.nk};\nconst long long C = {code.chunk};\n"
            f"const long long nch = (nk + C - 1) / C;\nconst long long ncol = {code.ncol};\n"
            f"const long long ntc = (nch + {group} - 1) / {group};\n"
            + "".join(f"{code.op.ctype}* const q_tot{i} = p_tot{i};\n" for i in range(code.nc)))
    totals, rescan = _pass_code(code, group, False), _pass_code(code, group, True)
    offsets = _offsets_code(code)
    return head + f"""if (ncol >= (long long)omp_get_max_threads() || nch <= {group}) {{
  #pragma omp parallel for schedule(static)
  for (long long _cc = 0; _cc < ncol; ++_cc) {{
    for (long long _u = 0; _u < ntc; ++_u) {{
      const long long _t = _cc * ntc + _u;
      {{
{totals}      }}
      {{
        const long long col = _cc, j0 = _u * {group};
{_chain_code(code, group)}      }}
      {{
{rescan}      }}
    }}
    sdfg_scan_fence();
  }}
}} else {{
  #pragma omp parallel for schedule(static)
  for (long long _t = 0; _t < ncol * ntc; ++_t) {{
{totals}  }}
  #pragma omp parallel for schedule(static)
  for (long long _c = 0; _c < ncol; ++_c) {{
{offsets}  }}
  #pragma omp parallel for schedule(static)
  for (long long _t = 0; _t < ncol * ntc; ++_t) {{
{rescan}    sdfg_scan_fence();
  }}
}}
"""


GPU_WARP = 32
"""Threads per column of the warp-per-column kernel, which takes the columns of at most this many chunks."""

GPU_BLOCK = 256
"""Threads per block of both one-kernel schedules: one column per block (block per column), or
``GPU_BLOCK // GPU_WARP`` columns, a warp each (warp per column)."""


def _in_block_passes(code: _Code, width: int) -> tuple[str, list[str]]:
    """Thread ``_w`` of block ``_b`` in the one-kernel schedules, as a head (sizes, the thread's column
    ``_c`` and ``lane``) and the three passes, which run between barriers: the ``width`` threads of a
    column (a warp or the block) share its chunks round robin in passes 1 and 3, thread 0 runs pass 2.
    The passes are the three-kernel schedule's code, so the operations and their order are the same."""
    per_block = GPU_BLOCK // width
    col = "(long long)_b" if per_block == 1 else f"(long long)_b * {per_block} + _w / {width}"
    head = (f"const long long nk = {code.nk};\nconst long long C = {code.chunk};\n"
            f"const long long nch = (nk + C - 1) / C;\nconst long long ncol = {code.ncol};\n"
            f"const long long _c = {col}, lane = _w % {width};\n"
            "const long long mine = _c < ncol ? nch : 0;\n"   # 0 in the padding warps past the last column
            + "".join(f"{code.op.ctype}* const q_tot{i} = p_tot{i};\n" for i in range(code.nc)))

    def each_chunk(src: str) -> str:
        return (f"for (long long _j = lane; _j < mine; _j += {width}) {{\n"
                f"const long long _t = _c * nch + _j;\n{{\n{src}}}\n}}\n")

    return head, [each_chunk(_pass_code(code, 1, False)),
                  f"if (lane == 0 && mine > 0) {{\n{_offsets_code(code)}}}\n",
                  each_chunk(_pass_code(code, 1, True))]


def _in_block_code(code: _Code, width: int) -> str:
    """The tasklet of a one-kernel schedule: :func:`_in_block_passes` with a barrier between passes. Every
    thread reaches both barriers: no return, and the loops hold no barrier."""
    head, passes = _in_block_passes(code, width)
    return head + ("__syncthreads();\n" if width == GPU_BLOCK else "__syncwarp();\n").join(passes)


def _add_kernel(st: dace.SDFGState, name: str, maps: list, src: str, reads: list[str], outs: list[str],
                dtype: dace.typeclass) -> None:
    """A C++ tasklet ``src`` inside ``maps`` (``(range, schedule)``, outermost first) reading the arrays
    ``reads`` (the chunk totals, the only transients, through ``q_*`` connectors, the rest through ``p_*``)
    and writing ``outs`` through ``p_*``, whole arrays as pointers."""
    scopes = [st.add_map(name + ("_threads" if i else ""), rng, schedule=sched) for i, (rng, sched) in enumerate(maps)]
    if len(maps) == 1:
        scopes[0][0].map.gpu_block_size = [64, 1, 1]

    def conn(c: str) -> str:
        return ("q_" if st.sdfg.arrays[c].transient else "p_") + c

    t = st.add_tasklet(name, {conn(c): dtypes.pointer(dtype) for c in reads},
                       {"p_" + c: dtypes.pointer(dtype) for c in outs}, src, language=dtypes.Language.CPP)
    for c in reads:
        st.add_memlet_path(st.add_read(c), *[e for e, _ in scopes], t, dst_conn=conn(c),
                           memlet=dace.Memlet.from_array(c, st.sdfg.arrays[c]))
    for c in outs:
        st.add_memlet_path(t, *[x for _, x in reversed(scopes)], st.add_write(c), src_conn="p_" + c,
                           memlet=dace.Memlet.from_array(c, st.sdfg.arrays[c]))


def _gpu_schedules(sdfg: dace.SDFG, node: ColumnNode, code: _Code, dtype: dace.typeclass) -> None:
    """The GPU control flow: one branch per schedule, chosen at run time from the sizes (module docstring)."""
    tots = [f"tot{i}" for i in range(code.nc)]
    ins, outs = code.op.inputs + code.op.col_inputs, list(code.op.outputs)
    device, block = dtypes.ScheduleType.GPU_Device, dtypes.ScheduleType.GPU_ThreadBlock
    nch = f"int_ceil({code.nk}, {code.chunk})"
    fill = int(GPU_COLUMNS_TO_FILL) // GPU_BLOCK   # columns whose blocks fill the GPU
    choice = ConditionalBlock(f"{node.label}_schedule")
    sdfg.add_node(choice, is_start_block=True)
    for label, cond, width in (("warp_per_column", f"{nch} <= {GPU_WARP}", GPU_WARP),
                               ("block_per_column", f"({nch} <= {GPU_BLOCK}) or ({code.ncol} >= {fill})",
                                GPU_BLOCK)):
        region = ControlFlowRegion(label, sdfg=sdfg)
        choice.add_branch(CodeBlock(cond), region)
        grid = code.ncol if width == GPU_BLOCK else f"int_ceil({code.ncol}, {GPU_BLOCK // width})"
        _add_kernel(region.add_state(label, is_start_block=True), f"{node.label}_{label}",
                    [({"_b": f"0:{grid}"}, device), ({"_w": f"0:{GPU_BLOCK}"}, block)],
                    _in_block_code(code, width), ins, outs + tots, dtype)
    region = ControlFlowRegion("three_kernels", sdfg=sdfg)
    choice.add_branch(None, region)
    tasks = f"0:({code.ncol}) * {nch}"
    # pass 2 reads the totals through q_tot* and updates them in place through p_tot* (same memory)
    alias = "".join(f"(void)q_tot{i};\n" for i in range(code.nc))
    passes = [("totals", {"_t": tasks}, _pass_code(code, 1, False), ins, tots),
              ("offsets", {"_c": f"0:{code.ncol}"}, alias + _offsets_code(code), tots, tots),
              ("rescan", {"_t": tasks}, _pass_code(code, 1, True), ins + tots, outs)]
    prev = None
    for label, rng, src, reads, writes in passes:
        st = region.add_state(label, is_start_block=prev is None)
        if prev is not None:
            region.add_edge(prev, st, dace.InterstateEdge())
        _add_kernel(st, f"{node.label}_{label}", [(rng, device)], src, reads, writes, dtype)
        prev = st


def build_parallel_prefix(node: ColumnNode, state: dace.SDFGState, op: PrefixOp, chunk: int) -> dace.SDFG:
    """The expansion SDFG of ``op`` on ``node`` (module docstring)."""
    if chunk < 1:
        raise node.error(f"chunk_size must be a positive level count, got {chunk}")
    on_gpu = target_of(node, state) == "gpu"
    code = _Code(node, state, op, chunk, stream=not on_gpu)
    conns = op.inputs + op.col_inputs + list(op.outputs)
    sdfg, descs = window_sdfg(node, state, conns, f"{node.label}_parallel_prefix")
    dtype = descs[op.inputs[0]].dtype
    ntot = f"({code.ncol}) * int_ceil({code.nk}, {chunk})"
    storage = dtypes.StorageType.GPU_Global if on_gpu else dtypes.StorageType.CPU_Heap
    for i in range(code.nc):
        sdfg.add_array(f"tot{i}", [dace.symbolic.pystr_to_symbolic(ntot)], dtype, transient=True, storage=storage)
    if on_gpu:
        _gpu_schedules(sdfg, node, code, dtype)
        return sdfg
    tots = [f"tot{i}" for i in range(code.nc)]

    def full(c: str) -> dace.Memlet:
        return dace.Memlet.from_array(c, sdfg.arrays[c])

    st = sdfg.add_state("parallel_prefix", is_start_block=True)
    t = st.add_tasklet(f"{node.label}_parallel_prefix", {"p_" + c: dtypes.pointer(dtype)
                                                         for c in op.inputs + op.col_inputs},
                       {"p_" + c: dtypes.pointer(dtype) for c in list(op.outputs) + tots},
                       _cpu_code(code, CPU_GROUP), language=dtypes.Language.CPP,
                       code_global=STREAM_STORES)
    for c in op.inputs + op.col_inputs:
        st.add_edge(st.add_read(c), None, t, "p_" + c, full(c))
    for c in list(op.outputs) + tots:
        st.add_edge(t, "p_" + c, st.add_write(c), None, full(c))
    return sdfg


__all__ = ["CPU_GROUP", "DEFAULT_CHUNK", "GPU_BLOCK", "GPU_WARP", "PrefixOp", "build_parallel_prefix"]
