"""Small hand-built column SDFGs shaped like gt4py's scan nested SDFG, for transformation guard tests.

``column(...)`` builds, for one column of ``K`` levels (``K`` symbolic)::

    c = init; f = True                                   # entry: carry and first-level flag
    for k in range(K)   (or reversed):
        o = if_stmt(__cond=f, i=c, xk=x[k])              # nested SDFG: if __cond: o = i + xk  else: o = i
        t = o; out[k] = t; g = False
        c = t; f = g                                     # update state
    last = c                                             # exit state (optional)

Keyword switches break one precondition each (see the tests that use them).
"""

from __future__ import annotations

import dace
import numpy as np
from dace.sdfg.state import ConditionalBlock, ControlFlowRegion, LoopRegion

K = dace.symbol("K", dace.int32)


def if_stmt(name="if_stmt", *, else_identity=True, extra_write=False, write_i=False, cond_expr="__cond",
            cond_as_data=False) -> dace.SDFG:
    s = dace.SDFG(name)
    s.using_explicit_control_flow = True
    s.add_scalar("__cond", dace.bool_)
    s.add_scalar("i", dace.float64)
    s.add_scalar("xk", dace.float64)
    s.add_scalar("o", dace.float64)
    s.add_scalar("tmp", dace.float64, transient=True)
    cb = ConditionalBlock("if")
    s.add_node(cb, is_start_block=True)
    then = ControlFlowRegion("then_r", sdfg=s)
    ts = then.add_state("then_s", is_start_block=True)
    tk = ts.add_tasklet("add", {"a": None, "b": None}, {"r": None}, "r = a + b")
    ts.add_edge(ts.add_read("i"), None, tk, "a", dace.Memlet("i[0]"))
    ts.add_edge(ts.add_read("xk"), None, tk, "b", dace.Memlet("xk[0]"))
    ts.add_edge(tk, "r", ts.add_write("o"), None, dace.Memlet("o[0]"))
    cb.add_branch(dace.properties.CodeBlock(cond_expr), then)
    els = ControlFlowRegion("else_r", sdfg=s)
    es = els.add_state("else_s", is_start_block=True)
    if else_identity:
        es.add_edge(es.add_read("i"), None, es.add_write("o"), None, dace.Memlet("i[0]"))
    else:
        tk = es.add_tasklet("neg", {"a": None}, {"r": None}, "r = -a")
        es.add_edge(es.add_read("i"), None, tk, "a", dace.Memlet("i[0]"))
        es.add_edge(tk, "r", es.add_write("o"), None, dace.Memlet("o[0]"))
    if write_i:
        tk = es.add_tasklet("wi", {}, {"r": None}, "r = 1.0")
        es.add_edge(tk, "r", es.add_write("i"), None, dace.Memlet("i[0]"))
    if cond_as_data:
        tk = es.add_tasklet("rc", {"a": None}, {"r": None}, "r = 1.0 if a else 2.0")
        es.add_edge(es.add_read("__cond"), None, tk, "a", dace.Memlet("__cond[0]"))
        es.add_edge(tk, "r", es.add_write("tmp"), None, dace.Memlet("tmp[0]"))
    cb.add_branch(None, els)
    if extra_write:  # a later, non-exclusive write of o
        after = s.add_state_after(cb, "after")
        tk = after.add_tasklet("w", {"a": None}, {"r": None}, "r = a * 2.0")
        after.add_edge(after.add_read("xk"), None, tk, "a", dace.Memlet("xk[0]"))
        after.add_edge(tk, "r", after.add_write("o"), None, dace.Memlet("o[0]"))
    return s


def column(name="column", *, backward=False, stride=1, in_loop=True, flag_value="False", flag_conditional=False,
           flag_from_data=False, t_written_twice=False, s_read_after_n=False, s_read_in_update=False,
           o_to_array=False, var_used_after=False, exit_state=True, extra=None, extra_index="k",
           extra_read_after=False, extra_src_read_after=False, extra_written_twice=False, cf_uses=None,
           dead_fed_by_code=False, **if_kw) -> dace.SDFG:
    s = dace.SDFG(name)
    s.using_explicit_control_flow = True
    s.add_symbol("K", dace.int32)
    s.add_array("x", [K], dace.float64)
    s.add_array("out", [K], dace.float64)
    s.add_array("last", [1], dace.float64)
    s.add_array("last2", [1], dace.float64)
    s.add_array("aux", [K], dace.float64)
    s.add_scalar("init", dace.float64)
    for n, t in (("c", dace.float64), ("t", dace.float64), ("u", dace.float64), ("f", dace.bool_),
                 ("g", dace.bool_), ("d", dace.float64), ("v", dace.float64)):
        s.add_scalar(n, t, transient=True)
    entry = s.add_state("scan_entry", is_start_block=True)
    entry.add_edge(entry.add_read("init"), None, entry.add_write("c"), None, dace.Memlet("init[0]"))
    tk = entry.add_tasklet("set_f", {}, {"r": None}, "r = True")
    entry.add_edge(tk, "r", entry.add_write("f"), None, dace.Memlet("f[0]"))
    k = "k"
    if backward:
        loop = LoopRegion("scan", f"{k} >= 0", k, f"{k} = K - 1", f"{k} = {k} - {stride}")
    else:
        loop = LoopRegion("scan", f"{k} < K", k, f"{k} = 0", f"{k} = {k} + {stride}")
    if in_loop:
        s.add_node(loop)
        s.add_edge(entry, loop, dace.InterstateEdge())
        comp = loop.add_state("scan_compute", is_start_block=True)
        upd = loop.add_state_after(comp, "scan_update")
    else:
        comp = s.add_state_after(entry, "scan_compute")
        upd = s.add_state_after(comp, "scan_update")
        k = "0"
    if cf_uses is not None:  # an interstate assignment that reads the scalar ``cf_uses``
        region = loop if in_loop else s
        region.edges_between(comp, upd)[0].data.assignments = {"zz_probe": cf_uses}
    inner = if_stmt(**if_kw)
    n = comp.add_nested_sdfg(inner, {"__cond": None, "i": None, "xk": None}, {"o": None})
    c_read = comp.add_read("c")
    comp.add_edge(comp.add_read("f"), None, n, "__cond", dace.Memlet("f[0]"))
    comp.add_edge(c_read, None, n, "i", dace.Memlet("c[0]"))
    comp.add_edge(comp.add_read("x"), None, n, "xk", dace.Memlet(f"x[{k}]"))
    if o_to_array:
        comp.add_edge(n, "o", comp.add_write("out"), None, dace.Memlet(f"out[{k}]"))
        t_node = comp.add_write("t")
        tk = comp.add_tasklet("cp", {"a": None}, {"r": None}, "r = a")
        comp.add_edge(comp.add_read("x"), None, tk, "a", dace.Memlet(f"x[{k}]"))
        comp.add_edge(tk, "r", t_node, None, dace.Memlet("t[0]"))
    else:
        t_node = comp.add_access("t")
        comp.add_edge(n, "o", t_node, None, dace.Memlet("t[0]"))
        comp.add_edge(t_node, None, comp.add_write("out"), None, dace.Memlet(f"t[0] -> [{k}]"))
    if s_read_after_n:
        tk = comp.add_tasklet("rd", {"a": None, "b": None}, {"r": None}, "r = a + b")
        comp.add_edge(c_read, None, tk, "a", dace.Memlet("c[0]"))
        comp.add_edge(t_node, None, tk, "b", dace.Memlet("t[0]"))
        comp.add_edge(tk, "r", comp.add_write("aux"), None, dace.Memlet(f"aux[{k}]"))
    if flag_from_data:
        tk = comp.add_tasklet("set_g", {"a": None}, {"r": None}, "r = a > 0.5")
        comp.add_edge(comp.add_read("x"), None, tk, "a", dace.Memlet(f"x[{k}]"))
    else:
        tk = comp.add_tasklet("set_g", {}, {"r": None}, f"r = {flag_value}")
    comp.add_edge(tk, "r", comp.add_write("g"), None, dace.Memlet("g[0]"))
    upd.add_edge(upd.add_read("t"), None, upd.add_write("c"), None, dace.Memlet("t[0] -> [0]"))
    if flag_conditional:
        cb = ConditionalBlock("maybe")
        loop.add_node(cb)
        loop.add_edge(upd, cb, dace.InterstateEdge())
        br = ControlFlowRegion("maybe_r", sdfg=s)
        st = br.add_state("maybe_s", is_start_block=True)
        st.add_edge(st.add_read("g"), None, st.add_write("f"), None, dace.Memlet("g[0] -> [0]"))
        cb.add_branch(dace.properties.CodeBlock("K > 3"), br)
    else:
        upd.add_edge(upd.add_read("g"), None, upd.add_write("f"), None, dace.Memlet("g[0] -> [0]"))
    if t_written_twice:
        tk = upd.add_tasklet("wt", {}, {"r": None}, "r = 0.5")
        upd.add_edge(tk, "r", upd.add_write("t"), None, dace.Memlet("t[0]"))
    if s_read_in_update:
        tk = upd.add_tasklet("ru", {"a": None}, {"r": None}, "r = a")
        upd.add_edge(upd.add_read("c"), None, tk, "a", dace.Memlet("c[0]"))
        upd.add_edge(tk, "r", upd.add_write("aux"), None, dace.Memlet(f"aux[{k}]"))
    if extra is not None:  # a second carry d with its own temporary v (see module docstring of the tests)
        entry.add_edge(entry.add_read("init"), None, entry.add_write("d"), None, dace.Memlet("init[0] -> [0]"))
        idx = k if extra_index == "k" else extra_index
        if extra == "delay_line":
            comp.add_edge(comp.add_read("x"), None, comp.add_write("v"), None, dace.Memlet(f"x[{idx}] -> [0]"))
            tk = comp.add_tasklet("use_d", {"a": None}, {"r": None}, "r = a + 1.0")
            comp.add_edge(comp.add_read("d"), None, tk, "a", dace.Memlet("d[0]"))
            comp.add_edge(tk, "r", comp.add_write("aux"), None, dace.Memlet(f"aux[{k}]"))
        elif extra == "dead":   # d = d * 0.5 + x[k]: a recurrence whose value nothing reads
            tk = comp.add_tasklet("make_v", {"a": None, "b": None}, {"r": None}, "r = a * 0.5 + b")
            comp.add_edge(comp.add_read("d"), None, tk, "a", dace.Memlet("d[0]"))
            if dead_fed_by_code:   # x[k] reaches make_v through a tasklet that also writes aux[k]
                t0 = comp.add_tasklet("split_x", {"p": None}, {"q": None, "w": None}, "q = p\nw = p * 3.0")
                comp.add_edge(comp.add_read("x"), None, t0, "p", dace.Memlet(f"x[{idx}]"))
                comp.add_edge(t0, "q", tk, "b", dace.Memlet())
                comp.add_edge(t0, "w", comp.add_write("aux"), None, dace.Memlet(f"aux[{k}]"))
            else:
                comp.add_edge(comp.add_read("x"), None, tk, "b", dace.Memlet(f"x[{idx}]"))
            comp.add_edge(tk, "r", comp.add_write("v"), None, dace.Memlet("v[0]"))
        else:
            tk = comp.add_tasklet("make_v", {"a": None}, {"r": None}, "r = a * 2.0")
            comp.add_edge(comp.add_read("x"), None, tk, "a", dace.Memlet(f"x[{idx}]"))
            comp.add_edge(tk, "r", comp.add_write("v"), None, dace.Memlet("v[0]"))
        upd.add_edge(upd.add_read("v"), None, upd.add_write("d"), None, dace.Memlet("v[0] -> [0]"))
        if extra_written_twice:
            tk = comp.add_tasklet("wd", {}, {"r": None}, "r = 0.5")
            comp.add_edge(tk, "r", comp.add_write("d"), None, dace.Memlet("d[0]"))
    if exit_state:
        ex = s.add_state_after(loop if in_loop else upd, "scan_last_level")
        if extra == "pass_through" or extra_read_after:
            ex.add_edge(ex.add_read("d"), None, ex.add_write("last2"), None, dace.Memlet("d[0] -> [0]"))
        if extra_src_read_after:
            tk = ex.add_tasklet("rv", {"a": None}, {"r": None}, "r = a")
            ex.add_edge(ex.add_read("v"), None, tk, "a", dace.Memlet("v[0]"))
            ex.add_edge(tk, "r", ex.add_write("aux"), None, dace.Memlet("aux[0]"))
        src = "t" if not o_to_array else "c"
        ex.add_edge(ex.add_read(src), None, ex.add_write("last"), None, dace.Memlet(f"{src}[0] -> [0]"))
        if var_used_after:
            tk = ex.add_tasklet("kv", {}, {"r": None}, "r = k")
            ex.add_edge(tk, "r", ex.add_write("aux"), None, dace.Memlet("aux[0]"))
    return s


def run_column(csdfg, nlev: int, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.uniform(0.0, 1.0, nlev)
    out = np.full(nlev, -7.0)
    aux = np.full(max(nlev, 1), -3.0)
    last = np.full(1, -5.0)
    last2 = np.full(1, -6.0)
    csdfg(x=x, out=out, last=last, last2=last2, aux=aux[:nlev] if nlev else aux, init=np.float64(0.25), K=nlev)
    res = {"out": out, "last": last, "last2": last2, "aux": aux}
    if nlev == 0:  # ``last`` reads a never-written temporary in the original (undefined value)
        del res["last"]
    return res
