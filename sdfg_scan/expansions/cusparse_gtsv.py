"""Builder of the cuSPARSE expansion of ``TridiagonalSolve`` (a host tasklet calling the library).

Two batched cuSPARSE solvers match the two memory layouts without any transposition:

- cells contiguous (``[level, cell]``, level stride = number of columns): ``cusparse<t>gtsvInterleavedBatch``
  (algorithm 0, i.e. Thomas without pivoting, the fastest);
- K contiguous (column ``i`` at ``i * batchStride``, levels adjacent): ``cusparse<t>gtsv2StridedBatch``
  (cyclic reduction + PCR, any uniform column stride >= nlev).

cuSPARSE requires the first lower and the last upper coefficient of every system to be zero, while the
node ignores them (they may hold anything): ``a``, ``b`` and ``c`` are copied into stream-ordered
scratch (``cudaMallocAsync``) whose boundary entries are cleared, ``d`` is copied into ``x``, and
cuSPARSE solves in place in ``x``. Column axes must collapse into one batch axis (dense among
themselves); anything else raises an error that names the layouts supported.
"""

from __future__ import annotations

from typing import Any, TypeAlias, cast

import dace
from dace import dtypes

from sdfg_scan.context import Operand
from sdfg_scan.expansions.environments import CuSparse

ColumnNode: TypeAlias = Any  # the node type (duck-typed: an expansion never imports a node module)

PREFIX = {dace.float32: "S", dace.float64: "D"}


def _eq(x, y) -> bool:
    return dace.symbolic.simplify(dace.symbolic.pystr_to_symbolic(str(x)) -
                                  dace.symbolic.pystr_to_symbolic(str(y))) == 0


def _batch_stride(op: Operand, axis: int):
    """The stride between consecutive columns when the column axes collapse into one, else None."""
    cols = [d for d in range(len(op.shape)) if d != axis]
    if not cols:
        return 1
    for outer, inner in zip(cols[:-1], cols[1:], strict=True):
        if not _eq(op.strides[outer], op.strides[inner] * op.shape[inner]):
            return None
    return op.strides[cols[-1]]


def layout_of(node: ColumnNode, ops: list[Operand], axis: int) -> tuple[str, object, object]:
    """``("interleaved", batch, None)`` or ``("strided", batch, None)``; an error for other layouts."""
    shape = ops[0].shape
    batch = dace.symbolic.pystr_to_symbolic("1")
    for d, s in enumerate(shape):
        if d != axis:
            batch = batch * s
    kinds: set[str | None] = set()
    for op in ops:
        stride = _batch_stride(op, axis)
        if stride is not None and _eq(stride, 1) and _eq(op.strides[axis], batch):
            kinds.add("interleaved")
        elif stride is not None and _eq(op.strides[axis], 1):
            kinds.add("strided")
        else:
            kinds.add(None)
    if len(kinds) != 1 or None in kinds:
        raise node.error("the 'cusparse' expansion needs every operand either cell-contiguous and dense "
                         "(level stride = number of columns: gtsvInterleavedBatch) or K-contiguous with one "
                         "uniform column stride (gtsv2StridedBatch), got strides "
                         f"{[tuple(op.strides) for op in ops]}; use the 'thomas' expansion")
    return cast(str, kinds.pop()), batch, None  # None was refused above


def _copy(kind: str, dst: str, dst_pitch: str, src: str, src_pitch: str) -> str:
    if kind == "interleaved":
        return f"cudaMemcpyAsync({dst}, {src}, _span * sizeof(T), cudaMemcpyDeviceToDevice, _stream);"
    return (f"cudaMemcpy2DAsync({dst}, ({dst_pitch}) * sizeof(T), {src}, ({src_pitch}) * sizeof(T), "
            f"_m * sizeof(T), _batch, cudaMemcpyDeviceToDevice, _stream);")


def build_cusparse(node: ColumnNode, state: dace.SDFGState, dtype: dace.typeclass) -> dace.SDFG:
    """An SDFG holding the host tasklet that calls cuSPARSE on the node's stream (``a, b, c, d -> x``)."""
    ops = [node.operand(state, c) for c in ("a", "b", "c", "d", "x")]
    axis = node.resolved_axis(len(ops[0].shape))
    kind, batch, _ = layout_of(node, ops, axis)
    nk = dace.symbolic.symstr(ops[0].shape[axis])
    pitch = {op.connector: dace.symbolic.symstr(_batch_stride(op, axis)) for op in ops}
    p = PREFIX[dtype]
    lines = [CuSparse.handle_setup_code(node),
             f"using T = {dtype.ctype};",
             "cudaStream_t _stream = __dace_current_stream;",
             f"const int _m = {nk};",
             f"const int _batch = {dace.symbolic.symstr(batch)};",
             "if (_m > 0 && _batch > 0) {"]
    span = "(size_t)_m * _batch" if kind == "interleaved" else f"((size_t)(_batch - 1) * ({pitch['x']}) + _m)"
    lines += [f"  const size_t _span = {span};", "  T *_dl, *_dd, *_du;"]
    for buf, src in (("_dl", "a"), ("_dd", "b"), ("_du", "c")):
        lines += [f"  cudaMallocAsync((void **)&{buf}, _span * sizeof(T), _stream);",
                  "  " + _copy(kind, buf, pitch["x"], f"_{src}", pitch[src])]
    lines.append("  " + _copy(kind, "_x", pitch["x"], "_d", pitch["d"]))
    if kind == "interleaved":
        lines += ["  cudaMemsetAsync(_dl, 0, _batch * sizeof(T), _stream);",
                  "  cudaMemsetAsync(_du + (size_t)(_m - 1) * _batch, 0, _batch * sizeof(T), _stream);"]
        args = "__dace_cusparse_handle, 0, _m, _dl, _dd, _du, _x, _batch"
        size_call = f"cusparse{p}gtsvInterleavedBatch_bufferSizeExt({args}, &_bytes)"
        solve_call = f"cusparse{p}gtsvInterleavedBatch({args}, _buf)"
    else:
        px = f"({pitch['x']}) * sizeof(T)"
        lines += [f"  cudaMemset2DAsync(_dl, {px}, 0, sizeof(T), _batch, _stream);",
                  f"  cudaMemset2DAsync(_du + (_m - 1), {px}, 0, sizeof(T), _batch, _stream);"]
        args = f"__dace_cusparse_handle, _m, _dl, _dd, _du, _x, _batch, {pitch['x']}"
        size_call = f"cusparse{p}gtsv2StridedBatch_bufferSizeExt({args}, &_bytes)"
        solve_call = f"cusparse{p}gtsv2StridedBatch({args}, _buf)"
    lines += ["  size_t _bytes = 0;",
              f"  dace::sparse::CheckCusparseError({size_call});",
              "  void *_buf = nullptr;",
              "  cudaMallocAsync(&_buf, _bytes, _stream);",
              f"  dace::sparse::CheckCusparseError({solve_call});",
              "  cudaFreeAsync(_buf, _stream);",
              "  cudaFreeAsync(_dl, _stream);",
              "  cudaFreeAsync(_dd, _stream);",
              "  cudaFreeAsync(_du, _stream);",
              "}"]
    code = "\n".join(lines)
    sdfg = dace.SDFG(f"{node.label}_cusparse")
    state_ = sdfg.add_state("solve", is_start_block=True)
    for op in ops:
        sdfg.add_array(op.connector, op.shape, dtype, storage=op.desc.storage, strides=op.strides)
    ptr = dtypes.pointer(dtype)
    tasklet = state_.add_tasklet(f"{node.label}_cusparse", {f"_{c}": ptr for c in "abcd"}, {"_x": ptr}, code,
                                 language=dtypes.Language.CPP)
    for c in "abcd":
        state_.add_edge(state_.add_read(c), None, tasklet, f"_{c}", dace.Memlet.from_array(c, sdfg.arrays[c]))
    state_.add_edge(tasklet, "_x", state_.add_write("x"), None, dace.Memlet.from_array("x", sdfg.arrays["x"]))
    return sdfg


__all__ = ["build_cusparse", "layout_of"]
