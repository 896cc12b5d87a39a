"""Random gt4py-shaped column scans for differential tests of ``sdfg_scan.optimize``.

A :class:`Column` describes one scan the way gt4py's DaCe backend lowers a ``scan_operator``
(see ``../shared/fixtures/icon4py/README.md``, "How a scan is represented")::

    map i_Cell in [0, N):                                  top-level state ``stmt_0``
      (init tasklets ``__tlet_out = <const>`` for flags / counters when ``init_in_map``)
      NestedSDFG scan_0(x0.., __gtir_scan_input_cS.. -> __gtir_scan_output_cS.., last_cS..)
        scan_entry:  __gtir_scan_input_cS -> cS            carry init copies
        LoopRegion over K (forward or backward, first level ``start``; K symbolic or constant)
          scan_compute: one piece of data flow per slot (tasklets, if_stmt nested SDFGs)
          scan_update:  tS -> cS / vS -> cS / gS -> cS     carry <- this level's value
        scan_last_level (when some slot has a last-level output): cS -> last_cS

Each :class:`Slot` is one carry of a given kind (``KINDS``, the kinds of
``sdfg_scan.scan_structure.CARRY_KINDS``); recurrent slots update through a tasklet, an if/else
nested SDFG, or an if/else whose else branch is a self-copy ``o = i`` (``UPDATES``), selected by a
first-level flag carry, a first- or last-level test on the loop variable, or data (``CONDS``).
Arithmetic is FMA-sensitive (``a * b + c`` forms and divisions), so a flag or operation-order
mistake changes bits. ``columns()`` is the hypothesis strategy; ``program(column, name)`` builds the
SDFG; ``arguments(column, sdfg, ncells, nlev, seed)`` its inputs; ``compile_exact`` compiles with the
IEEE-strict host flags; ``check_optimize_bitwise(column)`` is the differential check (optimize a deep
copy, validate, compile both, compare every output bitwise on symbolic K = start+1, start+2, 7).
"""

from __future__ import annotations

import copy
import itertools
import os
from dataclasses import dataclass, replace

import dace
import numpy as np
from dace.sdfg.state import ConditionalBlock, ControlFlowRegion, LoopRegion
from hypothesis import strategies as st

import sdfg_scan
from sdfg_scan.expansions.environments import ExactArithmetic

KINDS = ("recurrent", "pass_through", "delay_line", "flag", "counter", "invariant", "unused")
UPDATES = ("tasklet", "if_else", "if_copy")
CONDS = ("flag", "first", "last", "data", "const")
NX = 3  # input fields x0, x1, x2 shared by the slots
FORMS = ("r = a * b + c", "r = a / b + c * a", "r = (a - c) * b - a * c", "r = a * b * b + c / (b + 1.0)")
# if_stmt branches (tasklet connectors vi, va, vb -> vo read scalars i, a, b and write o)
THEN_FORMS = ("vo = vi * va + vb", "vo = vi / va + vb * vi", "vo = (vi - vb) * va - vi * vb",
              "vo = vi * va * va + vb / (va + 1.0)")
ELSE_FORMS = ("vo = vi / va - vb", "vo = vi - va * vb")
KV, CELL = "i_K_gtx_vertical", "i_Cell_gtx_horizontal"
NCELLS = 3
K = dace.symbol("K", dace.int32)
N = dace.symbol("N", dace.int32)
DTYPES = {"flag": dace.bool_, "counter": dace.int32}
NP_DTYPES = {"flag": np.bool_, "counter": np.int32}
# kinds whose slot computes a float ``tS`` in scan_compute that a later slot may read
PRODUCES_T = ("recurrent", "pass_through", "delay_line", "flag", "counter", "invariant")


@dataclass(frozen=True)
class Slot:
    """One carry slot: its kind and how its value is computed and delivered."""

    kind: str
    update: str = "tasklet"   # recurrent only: tasklet | if_else | if_copy (else branch ``o = i``)
    cond: str = "data"        # if_*: flag (a flag slot's carry) | first / last (level test) | data (x > 1) |
    #                           const (an input the map sets with a literal, gt4py's static argument: True for
    #                           an even ``form``)
    form: int = 0             # index into FORMS (unused: 0 untouched in the loop, 1 updated but never read)
    ins: tuple[int, int, int] = (0, 1, 2)  # input fields used as operands
    reads: int | None = None  # tasklet forms: operand c is slot ``reads``'s new value of this level
    flag_slot: int | None = None  # cond == "flag": the flag slot
    out: bool = True          # per-level output __gtir_scan_output_cS
    last: bool = False        # last-level output last_cS (written in scan_last_level)


@dataclass(frozen=True)
class Column:
    slots: tuple[Slot, ...]
    backward: bool = False
    nlev: int | None = None   # None: symbolic K; else the constant number of levels
    start: int = 0            # loop over levels [start, K)
    cell_contiguous: bool = False  # fields [N, K] with strides (1, N) (icon4py nproma) instead of (K, 1)
    init_in_map: bool = False  # flag / counter inits from constant tasklets inside the map (gt4py opt)
    init_symbol: bool = False  # with init_in_map: those tasklets read the int symbol S, and counters also read
    #                            a scalar input ``lim`` a tasklet fills from S (gt4py's int arguments it made symbols)
    via_temporary: bool = False  # per-level outputs into a [N, K] temporary copied into OUT (gt4py's results)
    compiled: bool = False    # gt4py's compiled program.sdfgz: init and self-copies as tasklets ``_cpy_out = _cpy_in``, the
    #                           input fields and temporaries named as the scan's connectors (x0, __gtir_scan_output_c0)

    def describe(self) -> str:
        head = (f"{'backward' if self.backward else 'forward'} levels [{self.start}, "
                f"{'K' if self.nlev is None else self.nlev}) {'cell' if self.cell_contiguous else 'K'}-contiguous"
                f"{' init-in-map' if self.init_in_map else ''}{' init-symbol' if self.symbol_inits else ''}"
                f"{' via-temporary' if self.via_temporary else ''}{' compiled' if self.compiled else ''}")
        return "\n".join([head] + [f"  c{i}: {s}" for i, s in enumerate(self.slots)])

    @property
    def symbol_inits(self) -> bool:
        return self.init_in_map and self.init_symbol

    @property
    def limit_input(self) -> bool:
        """The body reads the scalar input ``lim`` (counters with ``symbol_inits``)."""
        return self.symbol_inits and any(s.kind == "counter" for s in self.slots)


# ------------------------------------------------------------------------------------------------
# strategy
# ------------------------------------------------------------------------------------------------
# recurrent slots (the ones with if/else updates) are drawn 3x as often as the other kinds
_slot = st.builds(
    Slot, kind=st.sampled_from(KINDS[:1] * 3 + KINDS), update=st.sampled_from(UPDATES), cond=st.sampled_from(CONDS),
    form=st.integers(0, len(FORMS) - 1), ins=st.tuples(*[st.integers(0, NX - 1)] * 3),
    reads=st.one_of(st.none(), st.integers(1, 4)), out=st.booleans(), last=st.booleans())


def _normalise(slots: list[Slot]) -> tuple[Slot, ...]:
    """Make the drawn slots consistent: resolve ``reads`` (a distance back) to an earlier slot that
    produces a value, pick the flag slot of flag conditions, drop fields a kind does not use."""
    flags = [i for i, s in enumerate(slots) if s.kind == "flag"]
    out = []
    for i, s in enumerate(slots):
        upd = s.update if s.kind == "recurrent" else "tasklet"
        cond, flag_slot = s.cond, None
        if upd != "tasklet" and cond == "flag":
            if flags:
                flag_slot = flags[(i + s.form) % len(flags)]
            else:
                cond = "data"
        reads = None
        if s.reads is not None and upd == "tasklet" and s.kind in ("recurrent", "pass_through") and i >= s.reads:
            j = i - s.reads
            if slots[j].kind in PRODUCES_T:
                reads = j
        simple = dict(update=upd, cond=cond if upd != "tasklet" else "data", flag_slot=flag_slot, reads=reads)
        if s.kind == "unused":
            out.append(replace(s, **simple, form=s.form % 2, out=False, last=False))
        else:
            out.append(replace(s, **simple))
    return tuple(out)


@st.composite
def columns(draw, max_slots: int = 30) -> Column:
    raw = draw(st.lists(_slot, min_size=1, max_size=max_slots))
    if not any((s.out or s.last) and s.kind != "unused" for s in raw):  # something must be observable
        raw[0] = replace(raw[0], kind="recurrent" if raw[0].kind == "unused" else raw[0].kind, out=True)
    slots = _normalise(raw)
    nlev = draw(st.one_of(st.none(), st.integers(1, 6)))
    start = draw(st.integers(0, 1))
    if nlev is not None and nlev <= start:
        start = 0
    return Column(slots, backward=draw(st.booleans()), nlev=nlev, start=start,
                  cell_contiguous=draw(st.booleans()), init_in_map=draw(st.booleans()),
                  init_symbol=draw(st.booleans()), via_temporary=draw(st.booleans()), compiled=draw(st.booleans()))


# ------------------------------------------------------------------------------------------------
# SDFG builder
# ------------------------------------------------------------------------------------------------
KITCHEN_SINK = Column((
    Slot("flag"), Slot("recurrent", update="if_copy", cond="flag", flag_slot=0, last=True),
    Slot("delay_line", last=True), Slot("counter"), Slot("invariant", form=1), Slot("unused", form=1, out=False),
    Slot("pass_through", reads=1, form=3, last=True), Slot("recurrent", update="if_else", cond="last", form=2),
    Slot("recurrent", update="if_else", cond="first", form=1), Slot("recurrent", update="if_copy", cond="data")),
    backward=True, start=1, cell_contiguous=True, init_in_map=True)
"""One column with every kind, branch and self-copy (an explicit example of the randomised test)."""


def _levels(col: Column):
    return K if col.nlev is None else col.nlev


def _bounds(col: Column) -> tuple[str, str]:
    """(first level, last level) of the loop, as expressions."""
    top = "K - 1" if col.nlev is None else str(col.nlev - 1)
    return (top, str(col.start)) if col.backward else (str(col.start), top)


def if_stmt(name: str, *, cond: str, then_code: str, else_code: str | None, level: bool,
            copy_tasklet: bool = False) -> dace.SDFG:
    """gt4py's ``if_stmt_N``: inputs i, a, b (and ``__cond`` unless ``level``), output o;
    ``if cond: then_code else: else_code`` (``None``: the else branch is the self-copy ``o = i``, with
    ``copy_tasklet`` as the tasklet ``_cpy_out = _cpy_in`` DaCe's code generation lowers it to)."""
    s = dace.SDFG(name)
    s.using_explicit_control_flow = True
    if level:
        s.add_symbol("kk", dace.int32)
        if "K" in cond:
            s.add_symbol("K", dace.int32)
    else:
        s.add_scalar("__cond", dace.bool_)
    for c in ("i", "a", "b", "o"):
        s.add_scalar(c, dace.float64)
    cb = ConditionalBlock("if")
    s.add_node(cb, is_start_block=True)
    for code, label in ((then_code, "then"), (else_code, "else")):
        region = ControlFlowRegion(f"{label}_r", sdfg=s)
        bs = region.add_state(f"{label}_s", is_start_block=True)
        if code is None and copy_tasklet:
            tk = bs.add_tasklet("copy_i_to_o", {"_cpy_in": None}, {"_cpy_out": None}, "_cpy_out = _cpy_in")
            bs.add_edge(bs.add_read("i"), None, tk, "_cpy_in", dace.Memlet("i[0]"))
            bs.add_edge(tk, "_cpy_out", bs.add_write("o"), None, dace.Memlet("o[0]"))
        elif code is None:
            bs.add_nedge(bs.add_read("i"), bs.add_write("o"), dace.Memlet("i[0]"))
        else:
            tk = bs.add_tasklet(label, {"vi": None, "va": None, "vb": None}, {"vo": None}, code)
            for c in ("i", "a", "b"):
                bs.add_edge(bs.add_read(c), None, tk, f"v{c}", dace.Memlet(f"{c}[0]"))
            bs.add_edge(tk, "vo", bs.add_write("o"), None, dace.Memlet("o[0]"))
        cb.add_branch(dace.properties.CodeBlock(cond) if label == "then" else None, region)
    return s


class _ColumnBuilder:
    def __init__(self, col: Column):
        self.col = col
        s = self.s = dace.SDFG("scan_0")
        s.using_explicit_control_flow = True
        lev = _levels(col)
        if col.nlev is None:
            s.add_symbol("K", dace.int32)
        strides = (N,) if col.cell_contiguous else (1,)
        if col.cell_contiguous:
            s.add_symbol("N", dace.int32)
        self.strides = strides
        for i, sl in enumerate(col.slots):
            dt = DTYPES.get(sl.kind, dace.float64)
            s.add_scalar(f"__gtir_scan_input_c{i}", dt)
            s.add_scalar(f"c{i}", dt, transient=True)
            if sl.out:
                s.add_array(f"__gtir_scan_output_c{i}", [lev], dace.float64, strides=strides)
            if sl.last:
                s.add_scalar(f"last_c{i}", dt)
        self.entry = s.add_state("scan_entry", is_start_block=True)
        first, last = _bounds(col)
        if col.backward:
            loop = LoopRegion("scan", f"{KV} >= {col.start}", KV, f"{KV} = {first}", f"{KV} = {KV} - 1")
        else:
            loop = LoopRegion("scan", f"{KV} < {'K' if col.nlev is None else col.nlev}", KV, f"{KV} = {first}",
                              f"{KV} = {KV} + 1")
        s.add_node(loop)
        s.add_edge(self.entry, loop, dace.InterstateEdge())
        self.comp = loop.add_state("scan_compute", is_start_block=True)
        self.upd = loop.add_state_after(self.comp, "scan_update")
        self.exit = s.add_state_after(loop, "scan_last_level") if any(sl.last for sl in col.slots) else None
        self.t_nodes: dict[int, dace.nodes.AccessNode] = {}

    # -- small helpers -----------------------------------------------------------------------------
    def _x(self, j: int) -> tuple[dace.nodes.AccessNode, str]:
        if f"x{j}" not in self.s.arrays:  # an input field becomes a connector on first use
            self.s.add_array(f"x{j}", [_levels(self.col)], dace.float64, strides=self.strides)
        return self.comp.add_read(f"x{j}"), f"x{j}[{KV}]"

    def _scalar(self, name: str, dtype=dace.float64) -> str:
        self.s.add_scalar(name, dtype, transient=True)
        return name

    def _tasklet(self, label: str, code: str, ins: dict, out: str, out_dtype=dace.float64) -> dace.nodes.AccessNode:
        """``code`` reading ``ins`` {conn: (node, memlet)} into a new transient scalar ``out``."""
        st_ = self.comp
        tk = st_.add_tasklet(label, {c: None for c in ins}, {"r": None}, code)
        for c, (node, mem) in ins.items():
            st_.add_edge(node, None, tk, c, dace.Memlet(mem))
        w = st_.add_access(self._scalar(out, out_dtype))
        st_.add_edge(tk, "r", w, None, dace.Memlet(f"{out}[0]"))
        return w

    def _carry(self, i: int):
        return self.comp.add_read(f"c{i}"), f"c{i}[0]"

    def _operand_c(self, i: int, sl: Slot):
        if sl.reads is not None:
            return self.t_nodes[sl.reads], f"t{sl.reads}[0]"
        return self._x(sl.ins[2])

    def _deliver(self, i: int, sl: Slot, t: dace.nodes.AccessNode) -> None:
        self.t_nodes[i] = t
        if sl.out:
            self.comp.add_nedge(t, self.comp.add_write(f"__gtir_scan_output_c{i}"), dace.Memlet(f"t{i}[0] -> [{KV}]"))

    def _update_from(self, i: int, src: str) -> None:
        self.upd.add_nedge(self.upd.add_read(src), self.upd.add_write(f"c{i}"), dace.Memlet(f"{src}[0] -> [0]"))

    # -- slots -------------------------------------------------------------------------------------
    def slot(self, i: int, sl: Slot) -> None:
        src, dst = self.entry.add_read(f"__gtir_scan_input_c{i}"), self.entry.add_write(f"c{i}")
        if self.col.compiled:   # the copy as DaCe's code generation lowers it
            tk = self.entry.add_tasklet(f"copy_c{i}", {"_cpy_in": None}, {"_cpy_out": None}, "_cpy_out = _cpy_in")
            self.entry.add_edge(src, None, tk, "_cpy_in", dace.Memlet(f"__gtir_scan_input_c{i}[0]"))
            self.entry.add_edge(tk, "_cpy_out", dst, None, dace.Memlet(f"c{i}[0]"))
        else:
            self.entry.add_nedge(src, dst, dace.Memlet(f"__gtir_scan_input_c{i}[0] -> [0]"))
        getattr(self, f"_{sl.kind}")(i, sl)
        if sl.last:
            self.exit.add_nedge(self.exit.add_read(f"c{i}"), self.exit.add_write(f"last_c{i}"),
                                dace.Memlet(f"c{i}[0] -> [0]"))

    def _recurrent(self, i: int, sl: Slot) -> None:
        if sl.update == "tasklet":
            t = self._tasklet(f"rec{i}", FORMS[sl.form], {"a": self._carry(i), "b": self._x(sl.ins[1]),
                                                          "c": self._operand_c(i, sl)}, f"t{i}")
        else:
            t = self._if(i, sl, self._carry(i))
        self._deliver(i, sl, t)
        self._update_from(i, f"t{i}")

    def _if(self, i: int, sl: Slot, operand_i) -> dace.nodes.AccessNode:
        first, last = _bounds(self.col)
        level = sl.cond in ("first", "last")
        cond = f"kk == {first if sl.cond == 'first' else last}" if level else "__cond"
        then_code = THEN_FORMS[sl.form]
        else_code = None if sl.update == "if_copy" else ELSE_FORMS[sl.form % 2]
        inner = if_stmt(f"if_stmt_{i}", cond=cond, then_code=then_code, else_code=else_code, level=level,
                        copy_tasklet=self.col.compiled)
        ins = {"i": None, "a": None, "b": None}
        mapping = {}
        if level:
            mapping = {"kk": KV, **({"K": "K"} if "K" in cond else {})}
        else:
            ins["__cond"] = None
        n = self.comp.add_nested_sdfg(inner, ins, {"o": None}, symbol_mapping=mapping)
        for conn, (node, mem) in (("i", operand_i), ("a", self._x(sl.ins[1])), ("b", self._x(sl.ins[2]))):
            self.comp.add_edge(node, None, n, conn, dace.Memlet(mem))
        if not level:
            if sl.cond == "flag":
                node, mem = self._carry(sl.flag_slot)
            elif sl.cond == "const":
                node, mem = self.comp.add_read(self._const_input(i)), f"kc{i}[0]"
            else:
                a, am = self._x(sl.ins[0])
                node, mem = self._tasklet(f"cond{i}", "r = a > 1.0", {"a": (a, am)}, f"q{i}", dace.bool_), f"q{i}[0]"
            self.comp.add_edge(node, None, n, "__cond", dace.Memlet(mem))
        t = self.comp.add_access(self._scalar(f"t{i}"))
        self.comp.add_edge(n, "o", t, None, dace.Memlet(f"t{i}[0]"))
        return t

    def _const_input(self, i: int) -> str:
        """The body's bool input ``kc<i>``, which ``program`` fills from a constant tasklet in the map."""
        if f"kc{i}" not in self.s.arrays:
            self.s.add_scalar(f"kc{i}", dace.bool_)
        return f"kc{i}"

    def _pass_through(self, i: int, sl: Slot) -> None:
        t = self._tasklet(f"pt{i}", FORMS[sl.form], {"a": self._x(sl.ins[0]), "b": self._x(sl.ins[1]),
                                                     "c": self._operand_c(i, sl)}, f"t{i}")
        self._deliver(i, sl, t)
        self._update_from(i, f"t{i}")

    def _delay_line(self, i: int, sl: Slot) -> None:
        x, xm = self._x(sl.ins[0])
        self.comp.add_nedge(x, self.comp.add_write(self._scalar(f"v{i}")), dace.Memlet(f"{xm} -> [0]"))
        t = self._tasklet(f"dl{i}", FORMS[sl.form], {"a": self._carry(i), "b": self._x(sl.ins[1]),
                                                     "c": self._x(sl.ins[2])}, f"t{i}")
        self._deliver(i, sl, t)
        self._update_from(i, f"v{i}")

    def _flag(self, i: int, sl: Slot) -> None:
        first_branch = replace(sl, update="if_else", cond="flag", flag_slot=i)
        t = self._if(i, first_branch, self._x(sl.ins[0]))
        self._deliver(i, sl, t)
        st_ = self.comp
        tk = st_.add_tasklet(f"set_g{i}", {}, {"r": None}, "r = False")
        st_.add_edge(tk, "r", st_.add_write(self._scalar(f"g{i}", dace.bool_)), None, dace.Memlet(f"g{i}[0]"))
        self._update_from(i, f"g{i}")

    def _counter(self, i: int, sl: Slot) -> None:
        self._tasklet(f"inc{i}", f"r = a {'+' if sl.form % 2 == 0 else '-'} {1 + sl.form // 2}",
                      {"a": self._carry(i)}, f"n{i}", dace.int32)
        ins = {"a": self._carry(i), "b": self._x(sl.ins[1]), "c": self._x(sl.ins[2])}
        if self.col.limit_input:   # a read-only scalar input
            if "lim" not in self.s.arrays:
                self.s.add_scalar("lim", dace.int32)
            ins["s"] = (self.comp.add_read("lim"), "lim[0]")
        t = self._tasklet(f"cnt{i}", "r = b * a + c * s" if "s" in ins else "r = b * a + c", ins, f"t{i}")
        self._deliver(i, sl, t)
        self._update_from(i, f"n{i}")

    def _invariant(self, i: int, sl: Slot) -> None:
        t = self._tasklet(f"inv{i}", FORMS[sl.form], {"a": self._carry(i), "b": self._x(sl.ins[1]),
                                                      "c": self._x(sl.ins[2])}, f"t{i}")
        self._deliver(i, sl, t)

    def _unused(self, i: int, sl: Slot) -> None:
        if sl.form == 1:  # updated every level, never read
            self._tasklet(f"un{i}", FORMS[0], {"a": self._x(sl.ins[0]), "b": self._x(sl.ins[1]),
                                               "c": self._x(sl.ins[2])}, f"t{i}")
            self._update_from(i, f"t{i}")


def column_sdfg(col: Column) -> dace.SDFG:
    b = _ColumnBuilder(col)
    for i, sl in enumerate(col.slots):
        b.slot(i, sl)
    return b.s


def program(col: Column, name: str) -> dace.SDFG:
    """The top-level SDFG: a map over ``N`` cells around the column scan of ``col``."""
    inner = column_sdfg(col)
    sdfg = dace.SDFG(name)
    sdfg.using_explicit_control_flow = True
    lev = _levels(col)
    strides = (1, N) if col.cell_contiguous else None
    xname = "x{}" if col.compiled else "X{}"
    for j in range(NX):
        if f"x{j}" in inner.arrays:
            sdfg.add_array(xname.format(j), [N, lev], dace.float64, strides=strides)
    st_ = sdfg.add_state("stmt_0", is_start_block=True)
    me, mx = st_.add_map("map_0_fieldop", {CELL: "0:N"})
    ins = {n: None for n, d in inner.arrays.items()
           if not d.transient and (n.startswith("x") or "input" in n or n == "lim" or n.startswith("kc"))}
    outs = {n: None for n, d in inner.arrays.items() if not d.transient and n not in ins}
    mapping = {**({"K": K} if col.nlev is None else {}), **({"N": N} if col.cell_contiguous else {})}
    node = st_.add_nested_sdfg(inner, ins, outs, symbol_mapping=mapping)
    if col.symbol_inits:
        sdfg.add_symbol("S", dace.int32)
    if "lim" in ins:
        _symbol_tasklet(sdfg, st_, me, "lim_0", "__tlet_out = S + 1", dace.int32, node, "lim")
    for i, sl in enumerate(col.slots):   # gt4py's static arguments: a literal the map writes
        if f"kc{i}" in ins:
            _symbol_tasklet(sdfg, st_, me, f"kc_{i}", f"__tlet_out = {sl.form % 2 == 0}", dace.bool_, node, f"kc{i}")
    for j in range(NX):
        if f"x{j}" in ins:
            st_.add_memlet_path(st_.add_read(xname.format(j)), me, node, dst_conn=f"x{j}",
                                memlet=dace.Memlet(f"{xname.format(j)}[{CELL}, 0:{lev}]"))
    for i, sl in enumerate(col.slots):
        conn = f"__gtir_scan_input_c{i}"
        dt = DTYPES.get(sl.kind, dace.float64)
        if col.init_in_map and sl.kind in DTYPES:
            if col.symbol_inits:
                code = "__tlet_out = S > 0" if sl.kind == "flag" else f"__tlet_out = S + {i % 3}"
            else:
                code = "__tlet_out = True" if sl.kind == "flag" else f"__tlet_out = {i % 3}"
            _symbol_tasklet(sdfg, st_, me, f"init_c{i}", code, dt, node, conn)
        else:
            sdfg.add_array(f"INIT{i}", [N], dt)
            st_.add_memlet_path(st_.add_read(f"INIT{i}"), me, node, dst_conn=conn, memlet=dace.Memlet(f"INIT{i}[{CELL}]"))
        if sl.out:
            res = (f"__gtir_scan_output_c{i}" if col.compiled else f"T{i}") if col.via_temporary else f"OUT{i}"
            if col.via_temporary:   # gt4py's form: a temporary, its written levels copied out (other layout)
                sdfg.add_array(res, [N, lev], dace.float64, transient=True, strides=strides)
                sdfg.add_array(f"OUT{i}", [N, lev], dace.float64, strides=None if col.cell_contiguous else (1, N))
            else:
                sdfg.add_array(f"OUT{i}", [N, lev], dace.float64, strides=strides)
            w = st_.add_write(res)
            st_.add_memlet_path(node, mx, w, src_conn=f"__gtir_scan_output_c{i}",
                                memlet=dace.Memlet(f"{res}[{CELL}, 0:{lev}]"))
            if col.via_temporary:
                st_.add_nedge(w, st_.add_write(f"OUT{i}"), dace.Memlet(
                    data=res, subset=f"0:N, {col.start}:{lev}", other_subset=f"0:N, {col.start}:{lev}"))
        if sl.last:
            sdfg.add_array(f"LAST{i}", [N], dt)
            st_.add_memlet_path(node, mx, st_.add_write(f"LAST{i}"), src_conn=f"last_c{i}",
                                memlet=dace.Memlet(f"LAST{i}[{CELL}]"))
    if not outs:  # nothing observable: keep one output so that the program is not empty
        raise ValueError("gt4py_shaped.program: the column has no output")
    return sdfg


def _symbol_tasklet(sdfg, st_, me, name: str, code: str, dtype, node, conn: str) -> None:
    """gt4py's constant inside the map: tasklet ``code`` (no inputs) -> transient scalar ``name`` -> ``conn``."""
    sdfg.add_scalar(name, dtype, transient=True)
    tk = st_.add_tasklet(f"{name}_tlet", {}, {"__tlet_out": None}, code)
    st_.add_nedge(me, tk, dace.Memlet())
    a = st_.add_access(name)
    st_.add_edge(tk, "__tlet_out", a, None, dace.Memlet(f"{name}[0]"))
    st_.add_edge(a, None, node, conn, dace.Memlet(f"{name}[0]"))


def arguments(col: Column, sdfg: dace.SDFG, ncells: int, nlev: int, seed: int) -> dict:
    """Seeded inputs for ``sdfg`` (built from ``col``) with ``ncells`` cells and ``nlev`` levels; outputs
    pre-filled with sentinels (levels a scan does not write must stay as they were)."""
    rng = np.random.default_rng(seed)
    order = "F" if col.cell_contiguous else "C"
    kw: dict = {"N": ncells}
    if col.symbol_inits:
        kw["S"] = int(rng.integers(-2, 3))
    if col.nlev is None:
        kw["K"] = nlev
    for name, desc in sdfg.arrays.items():
        if desc.transient:
            continue
        shape = (ncells, nlev) if len(desc.shape) == 2 else (ncells,)
        dt = desc.dtype.as_numpy_dtype()
        if name.startswith(("X", "x")):
            v = rng.uniform(0.5, 1.5, shape)
        elif name.startswith("INIT"):
            v = rng.uniform(0.5, 1.5, shape) if dt == np.float64 else rng.integers(-3, 4, shape)
            v = (v > 0) if dt == np.bool_ else v
        else:
            v = np.full(shape, -7)
        flip = col.via_temporary and name.startswith("OUT")   # the outputs' layout differs from the temporaries'
        kw[name] = np.array(v, dtype=dt, order={"F": "C", "C": "F"}[order] if flip else order)
    return kw


def compile_flags() -> str:
    """DaCe's CPU flags plus the IEEE-strict ones (``sdfg_scan.compile_flags("exact")`` when present)."""
    if hasattr(sdfg_scan, "compile_flags"):
        extra = sdfg_scan.compile_flags("exact")
        extra = extra if isinstance(extra, str) else " ".join(extra)
    else:
        extra = " ".join(ExactArithmetic.cmake_compile_flags)
    return dace.Config.get("compiler", "cpu", "args") + " " + extra


def compile_exact(sdfg: dace.SDFG):
    with dace.config.set_temporary("compiler", "cpu", "args", value=compile_flags()):
        return sdfg.compile()


_IDS = itertools.count()


def _fresh(kw: dict) -> dict:
    return {k: (v.copy(order="K") if isinstance(v, np.ndarray) else v) for k, v in kw.items()}


def _bytes(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a).view(np.uint8)


def check_optimize_bitwise(col: Column, seed: int = 0, log=print) -> None:
    """``optimize`` keeps ``col``'s program valid and every output bitwise (the differential check);
    ``log`` receives the structure and the optimize report (hypothesis ``note`` inside a test)."""
    log(col.describe())
    name = f"fuzz_{os.getpid()}_{next(_IDS)}"
    original = program(col, name)
    original.validate()
    optimized = copy.deepcopy(original)
    optimized.name = name + "_opt"
    report = sdfg_scan.optimize(optimized, target="cpu", reproducibility="exact")
    log(report.table())
    optimized.validate()
    base, new = compile_exact(original), compile_exact(optimized)
    levels = [col.nlev] if col.nlev is not None else [col.start + 1, col.start + 2, 7]
    for nlev in levels:
        kw = arguments(col, original, NCELLS, nlev, seed + nlev)
        a, b = _fresh(kw), _fresh(kw)
        base(**a)
        new(**b)
        for k, v in a.items():
            if isinstance(v, np.ndarray):
                assert np.array_equal(_bytes(v), _bytes(b[k])), \
                    f"output '{k}' differs after optimize (nlev={nlev}):\noriginal  {v}\noptimized {b[k]}"
