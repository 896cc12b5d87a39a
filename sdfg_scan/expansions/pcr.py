"""Builder of parallel cyclic reduction (PCR) for batched tridiagonal systems.

Every level of every column is one parallel map iteration. Step ``s`` (1, 2, 4, ...) eliminates the
couplings to ``k - s`` and ``k + s`` from equation ``k``::

    al = -a[k] / b[k-s];  ga = -c[k] / b[k+s]          (a term whose level is outside the column is skipped)
    a'[k] = al * a[k-s];  c'[k] = ga * c[k+s]
    b'[k] = (b[k] + al * c[k-s]) + ga * a[k+s]
    d'[k] = (d[k] + al * d[k-s]) + ga * d[k+s]

after ``ceil(log2 n)`` steps every equation is decoupled and ``x = d / b``. Work is ``O(n log n)`` per
column but the depth is ``O(log n)``: the expansion for few, long columns and for GPUs. The steps
ping-pong between two sets of full-size scratch arrays (cells innermost), two steps per
``LoopRegion`` iteration (a step with ``s >= n`` skips every term, so an extra one changes no bit).

The operation order depends only on ``n``, not on threads or hardware, so results repeat on every
run; they differ from Thomas' in the last bits (other operations), hence not ``exact``.
"""

from __future__ import annotations

from typing import Any, TypeAlias

import dace
from dace import dtypes
from dace.sdfg.state import LoopRegion

from sdfg_scan.expansions.environments import BLOCK_DEFAULT

ColumnNode: TypeAlias = Any  # the node type (duck-typed: an expansion never imports a node module)


STEP = """\
using T = {T};
T bn = _bk, dn = _dk, an = T(0), cn = T(0);
if ({k} >= {s}) {{
    T al = -_ak / _bl;
    an = al * _al;
    bn = bn + al * _cl;
    dn = dn + al * _dl;
}}
if ({k} + {s} < {nk}) {{
    T ga = -_ck / _bh;
    cn = ga * _ch;
    bn = bn + ga * _ah;
    dn = dn + ga * _dh;
}}
_an = an; _bn = bn; _cn = cn; _dn = dn;"""


def _strides(shape, axis: int) -> list:
    order = [d for d in range(len(shape)) if d != axis][::-1] + [axis]
    strides, acc = [0] * len(shape), 1
    for d in order:
        strides[d] = acc
        acc = acc * shape[d]
    return strides


class _PCR:
    def __init__(self, node: ColumnNode, state: dace.SDFGState, dtype: dace.typeclass):
        ops = {c: node.operand(state, c) for c in "abcdx"}
        self.shape = ops["x"].shape
        self.axis = node.resolved_axis(len(self.shape))
        self.dtype = dtype
        self.sdfg = dace.SDFG(f"{node.label}_pcr")
        self.sdfg.using_explicit_control_flow = True
        for c, op in ops.items():
            self.sdfg.add_array(c, op.shape, op.dtype, storage=op.desc.storage, strides=op.strides)
        used = set()
        for c in ops:
            used |= {str(s) for s in self.sdfg.arrays[c].free_symbols}
        for sym, dt in state.sdfg.symbols.items():
            if sym in used and sym not in self.sdfg.symbols:
                self.sdfg.add_symbol(sym, dt)
        self.sdfg.add_symbol("_s", dace.symbolic.DEFAULT_SYMBOL_TYPE)
        on_gpu = ops["x"].desc.storage in (dtypes.StorageType.GPU_Global, dtypes.StorageType.GPU_Shared)
        storage = dtypes.StorageType.GPU_Global if on_gpu else dtypes.StorageType.CPU_Heap
        for buf in ("0", "1"):
            for c in "abcd":
                self.sdfg.add_array(f"{c.upper()}{buf}", self.shape, dtype, transient=True, storage=storage,
                                    strides=_strides(self.shape, self.axis))
        self.nk = dace.symbolic.symstr(self.shape[self.axis])
        self.params = {d: ("_k" if d == self.axis else f"_i{d}") for d in range(len(self.shape))}

    def _ranges(self) -> dict[str, str]:
        order = [self.axis] + [d for d in range(len(self.shape)) if d != self.axis]
        return {self.params[d]: f"0:{dace.symbolic.symstr(self.shape[d])}" for d in order}

    def _index(self, level: str) -> str:
        return ", ".join(level if d == self.axis else self.params[d] for d in range(len(self.shape)))

    def _mapped(self, state: dace.SDFGState, label: str, code: str, reads: dict, writes: dict) -> None:
        _, me, _ = state.add_mapped_tasklet(label, self._ranges(), {c: dace.Memlet(m) for c, m in reads.items()},
                                            code, {c: dace.Memlet(m) for c, m in writes.items()},
                                            external_edges=True, language=dtypes.Language.CPP)
        me.map.gpu_block_size = list(BLOCK_DEFAULT)   # used only when the map becomes a GPU kernel

    def _init(self, state: dace.SDFGState) -> None:
        i = self._index("_k")
        code = (f"using T = {self.dtype.ctype};\n_A = _k > 0 ? _a : T(0);\n_B = _b;\n"
                f"_C = _k + 1 < {self.nk} ? _c : T(0);\n_D = _d;")
        self._mapped(state, "pcr_init", code, {f"_{c}": f"{c}[{i}]" for c in "abcd"},
                     {f"_{c.upper()}": f"{c.upper()}0[{i}]" for c in "abcd"})

    def _step(self, state: dace.SDFGState, src: str, dst: str, s: str) -> None:
        lo = self._index(f"Max(_k - ({s}), 0)")
        hi = self._index(f"Min(_k + ({s}), {self.nk} - 1)")
        here = self._index("_k")
        reads = {}
        for c in "abcd":
            reads[f"_{c}k"] = f"{c.upper()}{src}[{here}]"
            reads[f"_{c}l"] = f"{c.upper()}{src}[{lo}]"
            reads[f"_{c}h"] = f"{c.upper()}{src}[{hi}]"
        code = STEP.format(T=self.dtype.ctype, k="_k", s=f"({s})", nk=self.nk)
        self._mapped(state, f"pcr_step_{src}{dst}", code, reads,
                     {f"_{c}n": f"{c.upper()}{dst}[{here}]" for c in "abcd"})

    def build(self) -> dace.SDFG:
        init = self.sdfg.add_state("init", is_start_block=True)
        self._init(init)
        loop = LoopRegion("pcr_steps", condition_expr=f"_s < {self.nk}", loop_var="_s", initialize_expr="_s = 1",
                          update_expr="_s = 4 * _s")
        self.sdfg.add_node(loop)
        self.sdfg.add_edge(init, loop, dace.InterstateEdge())
        first = loop.add_state("step_01", is_start_block=True)
        second = loop.add_state("step_10")
        loop.add_edge(first, second, dace.InterstateEdge())
        self._step(first, "0", "1", "_s")
        self._step(second, "1", "0", "2 * _s")
        final = self.sdfg.add_state("solution")
        self.sdfg.add_edge(loop, final, dace.InterstateEdge())
        i = self._index("_k")
        self._mapped(final, "pcr_solution", "_x = _d / _b;", {"_d": f"D0[{i}]", "_b": f"B0[{i}]"},
                     {"_x": f"x[{i}]"})
        return self.sdfg


def build_pcr(node: ColumnNode, state: dace.SDFGState, dtype: dace.typeclass) -> dace.SDFG:
    """The PCR expansion SDFG of a ``TridiagonalSolve`` node (connectors ``a, b, c, d -> x``)."""
    return _PCR(node, state, dtype).build()


__all__ = ["build_pcr"]
