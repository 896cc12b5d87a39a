"""Test helper: programs that hold both scans of a Thomas solve (the icon4py dycore pair, hand-built pairs).

- :func:`composed_dycore`: icon4py's ``solve_tridiagonal_matrix_for_w_forward_sweep.opt`` and
  ``..._back_substitution.opt`` fixtures composed into one SDFG, in one state, as
  ``vertically_implicit_solver_at_predictor_step`` holds them: the forward sweep's ``z_q`` and ``w``
  feed the back substitution, which writes ``w`` in place. ``z_q`` becomes a transient (shaped like
  ``w``) unless ``z_q_argument``.
- :func:`pair`: a gt4py-like program (map over cells -> nested column SDFG with a k-loop) for each
  scan, bodies given as Python tasklet code, either layout, either elimination direction.
"""

from __future__ import annotations

import copy
import warnings

import dace
import icon4py_fixtures as fx
import numpy as np
from dace.sdfg.state import LoopRegion

FWD = "solve_tridiagonal_matrix_for_w_forward_sweep.opt"
BACK = "solve_tridiagonal_matrix_for_w_back_substitution.opt"

# z_q's field symbols -> w's (z_q is shaped like w once it is a transient)
_ZQ_AS_W = {f"__z_q_{s}": f"__w_{s}" for s in ("Cell_range_0", "Cell_range_1", "K_range_0", "K_range_1", "K_stride")}


def composed_dycore(z_q_argument: bool = False) -> dace.SDFG:
    """The forward sweep and the back substitution in one SDFG and one state (see the module docstring)."""
    sdfg = fx.load(FWD)
    back = fx.load(BACK)
    (fstate,) = sdfg.states()
    (bstate,) = back.states()
    for name, desc in back.arrays.items():
        if name not in sdfg.arrays:
            sdfg.add_datadesc(name, copy.deepcopy(desc))
    for sym, t in back.symbols.items():
        if sym not in sdfg.symbols:
            sdfg.add_symbol(sym, t)
    outs = {n.data: n for n in fstate.data_nodes() if fstate.in_degree(n) > 0 and n.data in ("z_q", "w")}
    reads = {n: outs[n.data] for n in bstate.data_nodes() if bstate.in_degree(n) == 0 and n.data in outs}
    mapping = {}
    for n in bstate.nodes():
        if n in reads:
            mapping[n] = reads[n]
        else:
            fstate.add_node(n)
            mapping[n] = n
    for e in bstate.edges():
        fstate.add_edge(mapping[e.src], e.src_conn, mapping[e.dst], e.dst_conn, copy.deepcopy(e.data))
    if not z_q_argument:
        with warnings.catch_warnings():  # w's symbols exist already: that is the point
            warnings.simplefilter("ignore", UserWarning)
            sdfg.replace_dict(_ZQ_AS_W)
        sdfg.arrays["z_q"].transient = True
    sdfg.name = "dycore_pair" + ("_zq" if z_q_argument else "")
    sdfg.reset_cfg_list()
    sdfg.validate()
    return sdfg


# -- hand-built pairs -------------------------------------------------------------------------------

ELIMINATIONS = {
    # icon4py's form: u holds -c' (z_q), one reciprocal multiplied (bitwise Thomas)
    "icon": (-1, "w = 1.0 / (_b + _a * _u)\n_nu = (0.0 - _c) * w\n_nv = (_d - _a * _v) * w"),
    # the textbook form with c' itself (bitwise Thomas)
    "textbook": (1, "w = 1.0 / (_b - _a * _u)\n_nu = _c * w\n_nv = (_d - _a * _v) * w"),
    # two divisions: Thomas' algebra, other rounding
    "divide": (1, "_nu = _c / (_b - _a * _u)\n_nv = (_d - _a * _v) / (_b - _a * _u)"),
    # not Thomas: + a*d'[k-1]
    "other": (1, "w = 1.0 / (_b - _a * _u)\n_nu = _c * w\n_nv = (_d + _a * _v) * w"),
}
SUBSTITUTIONS = {-1: "_nx = _q + _x * _p", 1: "_nx = _q - _p * _x"}


def _column(name: str, ins: list[str], carries: list[tuple[str, str]], code: str, backward: bool) -> dace.SDFG:
    """One column: carries ``(slot, output)`` start from init connectors ``init_<slot>``; ``code`` maps
    ``_<input>``, ``_<slot>`` to ``_n<slot>``; output ``<output>[k] = new slot value``."""
    s = dace.SDFG(name)
    s.using_explicit_control_flow = True
    for sym in ("K", "sK"):
        s.add_symbol(sym, dace.int64)
    for n in ins:
        s.add_array(n, [dace.symbol("K", dace.int64)], dace.float64, strides=[dace.symbol("sK", dace.int64)])
    entry = s.add_state("entry", is_start_block=True)
    if backward:
        loop = LoopRegion("levels", "k >= 0", "k", "k = K - 1", "k = k - 1")
    else:
        loop = LoopRegion("levels", "k < K", "k", "k = 0", "k = k + 1")
    s.add_node(loop)
    s.add_edge(entry, loop, dace.InterstateEdge())
    comp = loop.add_state("compute", is_start_block=True)
    upd = loop.add_state_after(comp, "update")
    t = comp.add_tasklet("level", {**{f"_{n}": None for n in ins}, **{f"_{c}": None for c, _ in carries}},
                         {f"_n{c}": None for c, _ in carries}, code)
    for n in ins:
        comp.add_edge(comp.add_read(n), None, t, f"_{n}", dace.Memlet(f"{n}[k]"))
    for c, out in carries:
        s.add_scalar(f"init_{c}", dace.float64)
        s.add_scalar(c, dace.float64, transient=True)
        s.add_scalar(f"n{c}", dace.float64, transient=True)
        s.add_array(out, [dace.symbol("K", dace.int64)], dace.float64, strides=[dace.symbol("sK", dace.int64)])
        entry.add_edge(entry.add_read(f"init_{c}"), None, entry.add_write(c), None, dace.Memlet(f"init_{c}[0]"))
        comp.add_edge(comp.add_read(c), None, t, f"_{c}", dace.Memlet(f"{c}[0]"))
        new = comp.add_access(f"n{c}")
        comp.add_edge(t, f"_n{c}", new, None, dace.Memlet(f"n{c}[0]"))
        comp.add_edge(new, None, comp.add_write(out), None, dace.Memlet(f"n{c}[0] -> [k]"))
        upd.add_edge(upd.add_read(f"n{c}"), None, upd.add_write(c), None, dace.Memlet(f"n{c}[0] -> [0]"))
    return s


def _scan_in_map(state, column: dace.SDFG, ins: dict, outs: dict, inits: list[str], stride: str):
    """map i in [0, N): init constants -> column(ins[c][i, 0:K] ...) -> outs[c][i, 0:K] (access nodes given)."""
    me, mx = state.add_map(f"{column.name}_cells", {"i": "0:N"})
    conns_in = {**{c: None for c in ins}, **{f"init_{c}": None for c in inits}}
    node = state.add_nested_sdfg(column, conns_in, {c: None for c in outs}, symbol_mapping={"K": "K", "sK": stride})
    for conn, acc in ins.items():
        state.add_memlet_path(acc, me, node, dst_conn=conn, memlet=dace.Memlet(f"{acc.data}[i, 0:K]"))
    for conn, acc in outs.items():
        state.add_memlet_path(node, mx, acc, src_conn=conn, memlet=dace.Memlet(f"{acc.data}[i, 0:K]"))
    for c in inits:
        name = state.sdfg.add_scalar(f"zero_{column.name}_{c}", dace.float64, transient=True, find_new_name=True)[0]
        t = state.add_tasklet(f"zero_{c}", {}, {"o": None}, "o = 0.0")
        state.add_edge(me, None, t, None, dace.Memlet())
        acc = state.add_access(name)
        state.add_edge(t, "o", acc, None, dace.Memlet(f"{name}[0]"))
        state.add_edge(acc, None, node, f"init_{c}", dace.Memlet(f"{name}[0]"))
    return node


def _fields(name: str, layout: str, more: dict[str, bool]) -> tuple[dace.SDFG, str]:
    """An SDFG with the (N, K) arguments ``a, b, c, d, x`` and the fields ``more`` (name -> transient) in
    the layout's order; returns it and the level stride (as the columns' symbol mapping needs it)."""
    sdfg = dace.SDFG(name)
    for sym in ("N", "K"):
        sdfg.add_symbol(sym, dace.int64)
    N, K = dace.symbol("N", dace.int64), dace.symbol("K", dace.int64)
    strides, stride = ([1, N], "N") if layout == "cell" else ([K, 1], "1")
    for n in ("a", "b", "c", "d", "x"):
        sdfg.add_array(n, [N, K], dace.float64, strides=strides)
    for n, transient in more.items():
        sdfg.add_array(n, [N, K], dace.float64, strides=strides, transient=transient)
    return sdfg, stride


def pair(layout: str = "cell", elimination: str = "icon", backward: bool = False, back_sign: int | None = None,
         back_reads: str = "cp", cp_argument: bool = False) -> dace.SDFG:
    """Elimination then back substitution over (N, K) fields: ``x`` holds d' then the solution (in place).

    :param layout: ``"cell"`` (cells contiguous) or ``"k"`` (levels contiguous).
    :param elimination: a key of ``ELIMINATIONS``; ``backward``: eliminate from the last level.
    :param back_sign: the substitution's sign convention (default: the elimination's).
    :param back_reads: the container the substitution reads as c' (``"cp"``, or e.g. ``"c"``).
    :param cp_argument: ``cp`` is a program argument instead of a transient.
    """
    s, code = ELIMINATIONS[elimination]
    sdfg, stride = _fields(f"pair_{layout}_{elimination}_{'bwd' if backward else 'fwd'}", layout,
                           {"cp": not cp_argument})
    st = sdfg.add_state("solve", is_start_block=True)
    elim = _column("elimination", ["a", "b", "c", "d"], [("u", "U"), ("v", "V")], code, backward)
    cp_w, x_w = st.add_write("cp"), st.add_access("x")
    _scan_in_map(st, elim, {n: st.add_read(n) for n in "abcd"}, {"U": cp_w, "V": x_w}, ["u", "v"], stride)
    back = _column("substitution", ["p", "q"], [("x", "X")], SUBSTITUTIONS[back_sign or s], not backward)
    p_src = cp_w if back_reads == "cp" else st.add_read(back_reads)
    _scan_in_map(st, back, {"p": p_src, "q": x_w}, {"X": st.add_write("x")}, ["x"], stride)
    sdfg.validate()
    return sdfg


def pair_inputs(ncells: int, nlev: int, layout: str, seed: int = 0) -> dict:
    """Diagonally dominant systems in the layout's memory order."""
    rng = np.random.default_rng(seed)
    order = "F" if layout == "cell" else "C"
    vals = {"a": rng.uniform(-1, 1, (ncells, nlev)), "b": rng.uniform(3, 4, (ncells, nlev)),
            "c": rng.uniform(-1, 1, (ncells, nlev)), "d": rng.uniform(-2, 2, (ncells, nlev)),
            "x": np.full((ncells, nlev), -7.0)}
    out = {k: np.asarray(v, order=order).copy(order=order) for k, v in vals.items()}
    return {**out, "N": ncells, "K": nlev}


FACTORISATION = "w = 1.0 / (_b - _a * _u)\n_nu = _c * w\n_ow = w"
FORWARD_SUBSTITUTION = {"exact": "_nv = (_d - _a * _v) * _w", "divide": "_nv = (_d - _a * _v) / (1.0 / _w)"}


def factored(layout: str = "cell", forward: str = "exact", factor_in_program: bool = True) -> dace.SDFG:
    """The factored form of a Thomas solve over (N, K) fields, three scans in one state: a factorisation
    (``a, b, c -> w, cp``; or ``w, cp`` given as program arguments when not ``factor_in_program``), a
    forward substitution (``a, d, w -> x``: d', key of ``FORWARD_SUBSTITUTION``) and the back
    substitution (``cp, x -> x``, in place)."""
    sdfg, stride = _fields(f"factored_{layout}_{forward}_{int(factor_in_program)}", layout,
                           {"w": factor_in_program, "cp": factor_in_program})
    st = sdfg.add_state("solve", is_start_block=True)
    if factor_in_program:
        fac = _column("factorisation", ["a", "b", "c"], [("u", "CP")], FACTORISATION, False)
        fac.add_array("W", [dace.symbol("K", dace.int64)], dace.float64, strides=[dace.symbol("sK", dace.int64)])
        comp = next(s for s in fac.all_states() if s.label == "compute")
        t = next(n for n in comp.nodes() if isinstance(n, dace.nodes.Tasklet))
        t.add_out_connector("_ow")
        comp.add_edge(t, "_ow", comp.add_write("W"), None, dace.Memlet("W[k]"))
        w_acc, cp_acc = st.add_access("w"), st.add_access("cp")
        _scan_in_map(st, fac, {n: st.add_read(n) for n in "abc"}, {"W": w_acc, "CP": cp_acc}, ["u"], stride)
    else:
        w_acc, cp_acc = st.add_read("w"), st.add_read("cp")
    sub = _column("forward_substitution", ["a", "d", "w"], [("v", "V")], FORWARD_SUBSTITUTION[forward], False)
    x_w = st.add_access("x")
    _scan_in_map(st, sub, {"a": st.add_read("a"), "d": st.add_read("d"), "w": w_acc}, {"V": x_w}, ["v"], stride)
    back = _column("substitution", ["p", "q"], [("x", "X")], SUBSTITUTIONS[1], True)
    _scan_in_map(st, back, {"p": cp_acc, "q": x_w}, {"X": st.add_write("x")}, ["x"], stride)
    sdfg.validate()
    return sdfg


def factored_inputs(ncells: int, nlev: int, layout: str, seed: int = 0) -> dict:
    """:func:`pair_inputs` plus ``w`` and ``cp`` of the factorisation (for ``factor_in_program=False``)."""
    from sdfg_scan import reference

    kw = pair_inputs(ncells, nlev, layout, seed)
    w, cp = reference.tridiagonal_factor(kw["a"], kw["b"], kw["c"], axis=1)
    order = "F" if layout == "cell" else "C"
    return {**kw, "w": np.asarray(w, order=order).copy(order=order), "cp": np.asarray(cp, order=order).copy(order=order)}
