"""``VectorizeCellMap``: a top-level pointwise map over (levels x) cells as one vectorised C++ loop nest.

gt4py lowers the pointwise part of a physics program (everything computed level by level before the
scan reads it: rates, saturation values, ``where`` branches) to a map over ``[K, Cell]`` whose body is
tasklets and nested SDFGs with ``ConditionalBlock`` s. DaCe writes each nested SDFG as a function
called per point; GCC vectorises none of it, and every ``pow`` / ``exp`` is a scalar libm call (in
graupel this map takes about half of the program's time once the scan is blocked).

The transformation writes the map's body through the translator of the ``blocked_simd`` expansion
(:mod:`sdfg_scan.expansions.scan_blocked_codegen`: DaCe's own tasklet unparser, branches that only
assign values if-converted, ``exp``/``log``/``pow`` through glibc's vector math)::

    map k, i in K x Cells:                 one tasklet:
      body(k, i)                             parallel for (every other parameter, block of B cells):
                                               omp simd for l < B: body(k, c0 + l)

It is **replay**: the vector math differs from scalar libm in the last bits (deterministic for one
machine and build). By default ``pow`` is ``exp(y log x)`` or libmvec's, which differ from glibc's scalar
``pow`` on about a quarter of the arguments: graupel's cancelling tendencies turn that into 2.6 % of
``q_out_1`` beyond rtol 1e-6, outside the replay contract. With ``accurate_pow=True`` every ``pow`` is
:mod:`sdfg_scan.expansions.vector_pow`'s, inlined (glibc's value on all but about 1 in 1000 arguments):
within the contract, and what ``optimize(..., reproducibility="replay")`` applies on the CPU by default
(``vectorize_maps=None``; the gt4py hooks only with ``vectorize_maps=True``; ``approx`` gets the default
form with ``vectorize_maps=True``). Its **exact** form (``exact=True``; what ``optimize`` applies under ``exact``
with ``vectorize_maps=True``, and by default with ``staged_only=True``: only where the ``pow`` calls below are
staged and the cell range is not a small constant, since stop 46) keeps
the IEEE arithmetic (vector add, multiply, divide and sqrt round as the scalar ones) and makes every
``exp``/``log``/``pow`` the program's scalar libm call, once per lane whose branch the program takes
(simd clones that loop over the lanes: ``scan_blocked.SCALAR_LANE_MATH``): bitwise the map under the same
IEEE-strict flags.

Under ``exact`` and with ``accurate_pow`` the ``pow`` calls are *staged* (:mod:`sdfg_scan.expansions.staged_pow`):
a recording pass over the block writes each call site's lane predicate and arguments, each site's ``pow`` runs
on its active lanes packed together (the same function on the same arguments: the same values), and a last
pass over the block reads the results. The if-converted loop computed every site in every lane: 29 ``pow`` per
point of graupel's map against the 11.3 the program makes. A body the staging does not read stays one loop.

Legality (``can_be_applied`` runs the translator; a refusal changes nothing): a top-level map (not
inside another scope) with a default or CPU schedule, unit steps, whose innermost parameter indexes
the unit-stride dimension of every array it writes (or, beside at least one known unit-stride array, a
dimension whose stride is a symbol of its own: gt4py's tracer tuples); data in and out only through the map's own
entry and exit (no dynamic map inputs, no write-conflict resolution); a body the translator writes
(tasklets in Python, nested SDFGs whose control flow is a chain of states and conditionals, scalar
transients). Anything else raises :class:`~sdfg_scan.expansions.scan_blocked_codegen.Unsupported`.

A branch that writes an element of memory which another arm leaves alone is if-converted too when the
body has read that element unconditionally before it (``BodyWriter(read_back=True)``: the element is selected
and stored in every lane, the old value where the program keeps it; each point of a map owns the elements it
writes). Graupel's static-domain map updates ``te`` in place only in its "level activated" branch; kept a
plain ``if``, the exact form's libm calls sat under a branch, which GCC 12 does not if-convert, and the
whole cell loop ran scalar (0.42x; 0.95x since).
"""

from __future__ import annotations

import hashlib
import re

import dace
import numpy as np
from dace import data as dt
from dace import dtypes
from dace.codegen.targets.cpp import sym2cpp
from dace.properties import Property, make_properties
from dace.sdfg import nodes
from dace.sdfg.utils import dfs_topological_sort
from dace.transformation import transformation as xf

from sdfg_scan.expansions import scan_blocked_codegen as codegen
from sdfg_scan.expansions import staged_pow
from sdfg_scan.expansions.scan_blocked import (
    BLOCK,
    VECTOR_MATH,
    AccurateVectorMath,
    ScalarLaneLoops,
    VectorMath,
    accurate_pow_math,
    scalar_lane_math,
)
from sdfg_scan.expansions.scan_blocked_codegen import LANE, BodyWriter, Ref, Scope, Unsupported, Writer

SCHEDULES = (dtypes.ScheduleType.Default, dtypes.ScheduleType.CPU_Multicore)


def _outer_data(state: dace.SDFGState, entry: nodes.MapEntry) -> tuple[set[str], set[str]]:
    """Containers read (entry side) and written (exit side) by the scope."""
    exit_ = state.exit_node(entry)
    reads, writes = set(), set()
    for e in state.in_edges(entry):
        if e.data.data is None:
            continue
        if not isinstance(e.src, nodes.AccessNode) or not (e.dst_conn or "").startswith("IN_"):
            raise Unsupported(f"map '{entry.map.label}' has a dynamic input '{e.dst_conn}'")
        reads.add(e.src.data)
    for e in state.out_edges(exit_):
        if e.data.data is None:
            continue
        if not isinstance(e.dst, nodes.AccessNode):
            raise Unsupported(f"map '{entry.map.label}' writes into a {type(e.dst).__name__}")
        if e.data.wcr is not None:
            raise Unsupported(f"map '{entry.map.label}' writes '{e.dst.data}' with write-conflict resolution")
        writes.add(e.dst.data)
    return reads, writes


STAGED_MIN_CELLS = 1024
"""``staged_only``: a map whose cell range is a constant below this many cells stays scalar (``graupel_run``,
100 cells: the exact vectorised maps 0.90x of gt4py's build against 1.05x with its scalar maps,
benchmarks/HISTORY.md, "Stop 46")."""

_EXACT_NAMES = sorted({staged_pow.SITE_FUNCTIONS["exact"], *staged_pow.CACHED_FUNCTIONS["exact"]})
_EXACT_MATH = re.compile(rf"\b(?:{'|'.join(_EXACT_NAMES)})\(")
"""The exact form's math calls in a loop body (the calls staged_pow stages or caches)."""


def map_kernel(sdfg: dace.SDFG, state: dace.SDFGState, entry: nodes.MapEntry,
               block: int = BLOCK, exact: bool = False, accurate_pow: bool = False,
               staged_only: bool = False) -> tuple[str, dict, dict]:
    """The C++ of the vectorised loop nest, its input and output connectors (``name -> type``);
    ``exact``: ``exp``/``log``/``pow`` stay the program's scalar calls, one per lane; ``accurate_pow``
    (replay): ``pow`` is ``vector_pow``'s accurate one (``_sdfg_scan_apow``). ``staged_only`` (exact form):
    raise :class:`Unsupported` unless the loop is worth vectorising exactly: its math calls staged
    (:mod:`~sdfg_scan.expansions.staged_pow`; a body without ``exp``/``log``/``pow`` needs none) and its cell
    range not a constant below :data:`STAGED_MIN_CELLS`."""
    m = entry.map
    if staged_only and not exact:
        raise ValueError(f"map_kernel: staged_only is an option of the exact form (map '{m.label}')")
    if state.entry_node(entry) is not None or state.sdfg.parent_nsdfg_node is not None:
        raise Unsupported(f"map '{m.label}' is not a top-level scope of the program")
    if m.schedule not in SCHEDULES:
        raise Unsupported(f"map '{m.label}' has schedule {m.schedule}")
    for (_, _, step) in m.range.ndrange():
        if dace.symbolic.inequal_symbols(step, 1):
            raise Unsupported(f"map '{m.label}' has a non-unit step")
    if staged_only:   # (before the body is written: a constant small range needs no translation)
        first, last, _ = m.range.ndrange()[-1]
        extent = dace.symbolic.pystr_to_symbolic(f"({last}) - ({first}) + 1")
        extent = extent.subs({dace.symbol(k): v for k, v in sdfg.constants.items()
                              if isinstance(v, (int, np.integer))})   # (SDFG.specialize's sizes)
        if extent.is_number and int(extent) < STAGED_MIN_CELLS:
            raise Unsupported(f"map '{m.label}': {int(extent)} cells, below the {STAGED_MIN_CELLS} the exact "
                              "vectorised form pays off at (the program's scalar map is kept)")
    reads, writes = _outer_data(state, entry)
    if not writes:
        raise Unsupported(f"map '{m.label}' writes nothing")
    cell = m.params[-1]
    for name in writes:
        desc = sdfg.arrays[name]
        if isinstance(desc, dt.Scalar):
            raise Unsupported(f"map '{m.label}' writes scalar '{name}'")
    exit_ = state.exit_node(entry)
    known = False
    for e in state.in_edges(exit_):
        if e.data.data is None:
            continue
        desc = sdfg.arrays[e.data.data]
        sub = e.data.subset
        idx = [str(r[0]) for r in sub]
        dims = _cell_dims(sub, cell)
        kind = codegen.stride_kind(desc, dims[0]) if len(dims) == 1 else "no"
        if kind == "no":
            raise Unsupported(f"map '{m.label}': '{e.data.data}{idx}' is not unit-stride in '{cell}'")
        known |= kind == "yes"
    if not known:
        raise Unsupported(f"map '{m.label}': no array it writes is known to be unit-stride in '{cell}'")

    syms = {str(s): str(s) for s in sdfg.symbols}
    syms.update({p: f"_m_{p}" for p in m.params})
    data: dict[str, Ref] = {}
    lanes: list[str] = []   # bool scalars, read per lane from the block array _lane_<name>
    ins, outs = {}, {}
    for name in sorted(reads | writes):   # sorted: the same code on every run (sets follow the string hash)
        desc = sdfg.arrays[name]
        if isinstance(desc, dt.Scalar):
            ins[f"_r_{name}"] = desc.dtype
            if desc.dtype == dace.bool_:
                # a bool the loop only reads (gt4py passes its boolean constants so): a select on it is a
                # select on a loop-invariant scalar bool, which GCC 12 does not vectorise ("relevant stmt not
                # supported"; it left graupel's whole map scalar in gt4py's build). Read per lane from a block
                # array of doubles, it is a mask like those of the loop's double comparisons.
                lanes.append(name)
                data[name] = Ref("bool", lvalue=f"_lane_{name}[{LANE}]")
                continue
            data[name] = Ref(desc.dtype.ctype, lvalue=f"_r_{name}")
            continue
        if type(desc) is not dt.Array:
            raise Unsupported(f"map '{m.label}' accesses '{name}', a {type(desc).__name__}")
        if any(str(o) != "0" for o in desc.offset):
            raise Unsupported(f"array '{name}' has a non-zero offset")
        base = f"_w_{name}" if name in writes else f"_r_{name}"
        if name in reads:
            ins[f"_r_{name}"] = dace.pointer(desc.dtype)
        if name in writes:
            outs[f"_w_{name}"] = dace.pointer(desc.dtype)
        data[name] = Ref(desc.dtype.ctype, base=base, strides=[sym2cpp(s) for s in desc.strides], memory=True)
    scope = Scope(sdfg, data, syms)

    w = Writer()
    w.depth = 2
    bw = BodyWriter(w, if_convert=True, exact_math=exact, read_back=True, pow_lanes=accurate_pow)
    inner = state.scope_subgraph(entry, include_entry=False, include_exit=False)
    for n in inner.nodes():
        if isinstance(n, nodes.AccessNode):
            desc = sdfg.arrays[n.data]
            if not desc.transient or not (isinstance(desc, dt.Scalar) or desc.total_size == 1):
                raise Unsupported(f"map '{m.label}' holds an access to '{n.data}' (only scalar transients)")
            if n.data not in scope.data:
                scope.data[n.data] = bw.local(f"_t_{n.data}", desc, scope)
        elif isinstance(n, nodes.EntryNode):
            raise Unsupported(f"map '{m.label}' holds a nested scope '{n.label}'")
    for n in dfs_topological_sort(inner):
        if isinstance(n, nodes.AccessNode):
            for e in state.in_edges(n):
                if e.src is entry:
                    _move(bw, scope, e.data, e.data.data, n.data, into=True)
            for e in state.out_edges(n):
                if isinstance(e.dst, nodes.AccessNode):
                    bw.copy(state, e, scope)
                elif e.dst is exit_:
                    _move(bw, scope, e.data, n.data, e.data.data, into=False)
        else:
            bw.compute(state, n, scope)

    # stride symbols along the cells known only at run time (beside the unit-stride writes): versioned
    unit: list[str] = []
    for e in list(state.out_edges(entry)) + list(state.in_edges(exit_)):
        if e.data.data is None or isinstance(sdfg.arrays[e.data.data], dt.Scalar):
            continue
        unit += codegen.unknown_cell_strides(sdfg.arrays[e.data.data], _cell_dims(e.data.subset, cell))
    rng = m.range.ndrange()
    code = []
    for p, (b, e, _) in zip(m.params, rng, strict=True):
        code.append(f"const long long _b_{p} = {sym2cpp(b)}, _e_{p} = {sym2cpp(e)} + 1;")
    code.append(f"const long long _nblk = (_e_{cell} - _b_{cell} + {block - 1}) / {block};")
    outer = list(m.params[:-1])
    sizes = " * ".join([f"(_e_{p} - _b_{p} > 0 ? _e_{p} - _b_{p} : 0)" for p in outer] + ["_nblk"])
    code.append(f"const long long _ntask = {sizes};")
    tasks = ["#pragma omp parallel for schedule(static)",
             "for (long long _task = 0; _task < _ntask; ++_task) {", "    long long _r = _task;",
             "    const long long _blk = _r % _nblk; _r /= _nblk;"]
    for p in reversed(outer):
        tasks.append(f"    const long long _m_{p} = _b_{p} + _r % (_e_{p} - _b_{p}); _r /= (_e_{p} - _b_{p});")
    tasks += [f"    const long long _c0 = _b_{cell} + _blk * {block};",
              f"    const long long _n = (_e_{cell} - _c0) < {block} ? (_e_{cell} - _c0) : {block};"]
    for name in lanes:   # (names in sorted order: the loop above walks them sorted)
        tasks += [f"    double _lane_{name}[{block}];",
                  f"    for (long long _q = 0; _q < {block}; ++_q) _lane_{name}[_q] = _r_{name} ? 1.0 : 0.0;"]
    head = ["    #pragma omp simd", f"    for (long long {LANE} = 0; {LANE} < _n; ++{LANE}) {{",
            f"        const long long _m_{cell} = _c0 + {LANE};"]
    body = [codegen.vector_math(ln, exact=True) for ln in w.lines] if exact else w.lines
    cls = "exact" if exact else "replay"
    staging = staged_pow.stage(body, cls, block) if (exact or accurate_pow) else None
    if staged_only and staging is None and any(_EXACT_MATH.search(ln) for ln in body):
        raise Unsupported(f"map '{m.label}': its exp/log/pow calls cannot be staged (staged_pow refuses the "
                          "body), and unstaged every lane would compute every branch's call")
    if staging is None:
        tasks += head + body + ["    }", "}"]
    else:
        # each pow computed only in the lanes that take its branch (staged_pow: several passes over the block)
        tasks += ["    " + ln for ln in staged_pow.loops(staging, head, cls)] + ["}"]
    code += codegen.versioned(tasks, unit)
    text = "\n".join(code)
    # exact: every exp/log/pow of the loop (tasklets, conditions, symbols) through the per-lane scalar calls
    if exact:
        return codegen.vector_math(text, exact=True), ins, outs
    if accurate_pow:
        text = text.replace(codegen.VECTOR_FUNCTIONS["pow"] + "(", "_sdfg_scan_apow(")
    return text, ins, outs


def _move(bw: BodyWriter, scope: Scope, memlet: dace.Memlet, src: str, dst: str, into: bool) -> None:
    """One element between an outer array (through the map's entry or exit) and a scalar transient."""
    outer = dst if not into else src
    if memlet.data != outer or memlet.subset.num_elements() != 1:
        raise Unsupported(f"the memlet '{memlet}' between '{src}' and '{dst}' is not one element of '{outer}'")
    idx = scope.index(memlet.subset)
    value = bw.load(scope.data[src], idx if into else [])
    bw.put(scope.data[dst], [] if into else idx, scope.data[dst].ctype, value)


def _as_function(sdfg: dace.SDFG, label: str, code: str, ins: dict, outs: dict) -> tuple[str, str]:
    """The loop nest as a static function compiled without GCC's partial redundancy elimination
    (``optimize("no-tree-pre")``: PRE turns ``max(a, b) > c`` into a select between two comparisons,
    a select of vector masks GCC 12 does not vectorise), and the tasklet's call of it."""
    name = "_sdfg_scan_map_" + re.sub(r"[^A-Za-z0-9_]", "_", label)
    words = set(re.findall(r"[A-Za-z_][A-Za-z_0-9]*", code))
    syms = sorted(s for s in sdfg.symbols if s in words)
    params, args = [], []
    for c, t in {**ins, **outs}.items():
        # an array the loop only reads is a pointer to const (DaCe passes one so inside a nested SDFG); the
        # loop reads an array it also writes through its _w_ pointer
        const = "" if isinstance(t, dace.pointer) and c in outs else "const "
        params.append(f"{const}{t.ctype} {c}")
        args.append(c)
    for s in syms:
        params.append(f"const {sdfg.symbols[s].ctype} {s}")
        args.append(s)
    # guarded by a digest of the whole definition: a program holding one optimised SDFG twice (nested) defines
    # the function once; two different functions of one name still clash loudly
    definition = (f"static void __attribute__((noinline, optimize(\"no-tree-pre\"))) {name}({', '.join(params)}) {{\n"
                  f"{code}\n}}\n")
    guard = f"SDFG_SCAN_DEFINED{name}_{hashlib.sha1(definition.encode()).hexdigest()[:16]}"
    glob = f"\n#ifndef {guard}\n#define {guard}\n{definition}#endif\n"
    return glob, f"{name}({', '.join(args)});"


@make_properties
class VectorizeCellMap(xf.SingleStateTransformation):
    """A top-level pointwise map as one vectorised loop nest (module docstring). Replay."""

    map_entry = xf.PatternNode(nodes.MapEntry)
    exact = Property(dtype=bool, default=False,
                     desc="Exact: IEEE arithmetic in vectors, exp/log/pow the program's scalar calls per lane "
                          "(bitwise the map under the same IEEE-strict flags); otherwise replay (vector math)")
    staged_only = Property(dtype=bool, default=False,
                           desc="Exact form only: apply only where the loop's exp/log/pow calls are staged and "
                                "the cell range is not a small constant (what optimize applies under exact)")
    accurate_pow = Property(dtype=bool, default=False,
                            desc="Replay with sdfg_scan.expansions.vector_pow's accurate pow, inlined (glibc's value "
                                 "on all but about 1 in 1000 arguments) instead of exp(y log x) and libmvec")

    @classmethod
    def expressions(cls):
        return [dace.sdfg.utils.node_path_graph(cls.map_entry)]

    def can_be_applied(self, graph, expr_index, sdfg, permissive=False) -> bool:
        if self.exact and self.accurate_pow:
            return False   # two different math libraries asked for
        if self.staged_only and not self.exact:
            return False   # an option of the exact form
        try:
            map_kernel(sdfg, graph, self.map_entry, exact=self.exact, staged_only=self.staged_only)
        except Unsupported:
            return False
        return True

    def apply(self, graph: dace.SDFGState, sdfg: dace.SDFG):
        entry = self.map_entry
        exit_ = graph.exit_node(entry)
        code, ins, outs = map_kernel(sdfg, graph, entry, exact=self.exact, accurate_pow=self.accurate_pow,
                                     staged_only=self.staged_only)
        srcs = {e.src.data: e.src for e in graph.in_edges(entry) if e.data.data is not None}
        dsts = {e.dst.data: e.dst for e in graph.out_edges(exit_) if e.data.data is not None}
        deps = [e.src for e in graph.in_edges(entry) if e.data.data is None]
        after = [e.dst for e in graph.out_edges(exit_) if e.data.data is None]
        glob, call = _as_function(sdfg, f"{entry.map.label}_{sdfg.cfg_id}_{graph.block_id}", code, ins, outs)
        t = graph.add_tasklet(f"{entry.map.label}_vectorized", ins, outs, call, language=dtypes.Language.CPP,
                              code_global=(scalar_lane_math() if self.exact else
                                           (accurate_pow_math() if self.accurate_pow else "") + VECTOR_MATH)
                              + (staged_pow.support() if self.exact or self.accurate_pow else "") + glob)
        # libmvec and the flags GCC needs to vectorise the loop (not only where a blocked_simd node brings them)
        env = ScalarLaneLoops if self.exact else AccurateVectorMath if self.accurate_pow else VectorMath
        t.environments = {env.full_class_path()}  # type: ignore[attr-defined]  # by @dace.library.environment
        for node in graph.scope_subgraph(entry, include_entry=True, include_exit=True).nodes():
            graph.remove_node(node)
        for c in ins:
            name = c[3:]
            graph.add_edge(srcs[name], None, t, c, dace.Memlet.from_array(name, sdfg.arrays[name]))
        for c in outs:
            name = c[3:]
            graph.add_edge(t, c, dsts[name], None, dace.Memlet.from_array(name, sdfg.arrays[name]))
        for d in deps:
            graph.add_nedge(d, t, dace.Memlet())
        for a in after:
            graph.add_nedge(t, a, dace.Memlet())


def _cell_dims(subset, cell: str) -> list[int]:
    """The dimensions of ``subset`` whose index moves with the cell parameter ``cell``, by the start of the
    range only (not ``codegen.cell_dims``): the map kernel indexes each access by that start, so a prefix
    ``0:i + 1`` is no unit-stride access here and must stay refused."""
    return [d for d, r in enumerate(subset)
            if cell in {str(f) for f in dace.symbolic.pystr_to_symbolic(str(r[0])).free_symbols}]


def map_options(reproducibility: str) -> dict[str, bool]:
    """The :class:`VectorizeCellMap` form a reproducibility class gets (``optimize(..., vectorize_maps=True)``
    and the gt4py hooks): ``exact`` its exact form, ``replay`` the accurate ``pow`` (within the replay
    contract on graupel; the fast one was not), ``approx`` the fast ``pow``."""
    return {"exact": reproducibility == "exact", "accurate_pow": reproducibility == "replay"}


def vectorize_cell_maps(sdfg: dace.SDFG, exact: bool = False, accurate_pow: bool = False,
                        staged_only: bool = False) -> int:
    """Apply :class:`VectorizeCellMap` (``exact``: its exact form; ``accurate_pow``: its replay form with the
    accurate ``pow``; ``staged_only``, with ``exact``: only the maps :func:`map_kernel` finds worth it) to every
    top-level map of ``sdfg`` it applies to; the count."""
    if exact and accurate_pow:
        raise ValueError("vectorize_cell_maps: exact=True keeps the program's scalar pow; accurate_pow=True is a "
                         "replay option (vector_pow's pow); pass one of them")
    if staged_only and not exact:
        raise ValueError("vectorize_cell_maps: staged_only=True is an option of the exact form; pass exact=True")
    count = 0
    for state in list(sdfg.states()):
        for n in list(state.nodes()):
            if not isinstance(n, nodes.MapEntry) or n not in state.nodes() or state.entry_node(n) is not None:
                continue
            xform = VectorizeCellMap()
            xform.exact = exact
            xform.accurate_pow = accurate_pow
            xform.staged_only = staged_only
            xform.setup_match(sdfg, state.parent_graph.cfg_id, state.block_id,
                              {VectorizeCellMap.map_entry: state.node_id(n)}, 0)
            if xform.can_be_applied(state, 0, sdfg):
                xform.apply(state, sdfg)
                count += 1
    return count


__all__ = ["VectorizeCellMap", "map_kernel", "map_options", "vectorize_cell_maps"]
