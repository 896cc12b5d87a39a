"""Carry classification, boundary branches and self-copies of a column scan.

Called by :func:`sdfg_scan.scan_structure.analyze_scan` once the loop, entry / exit states and
carries are known: ``_classify`` sets the kind (one of ``CARRY_KINDS``), update sources and
outputs of each ``CarrySlot``; ``_find_branches`` returns the ``BoundaryBranch`` list and
``_find_self_copies`` the ``SelfCopy`` list, both recursing into nested SDFGs of the body.
The dataclasses live in :mod:`sdfg_scan.scan_model`; flags are the loop's constant flags
(:func:`sdfg_scan.scan_flags.constant_flags`), self-copies are identity copies
(:func:`sdfg_scan.identity_copies.identity_copies`) that move a carry's old value to where its new
value goes. These are the facts the canonicalising transformations decide from.
"""

from __future__ import annotations

import re

import dace
from dace import symbolic
from dace.sdfg import nodes
from dace.sdfg.state import ConditionalBlock

from sdfg_scan.identity_copies import identity_copies, single_element
from sdfg_scan.scan_flow import _COUNTER, _accesses, _all_states, _is_write, _tasklet_code, _walk, value_source
from sdfg_scan.scan_model import BoundaryBranch, CarrySlot, ScanStructure, SelfCopy


# ------------------------------------------------------------------------------------------------
# carry classification
# ------------------------------------------------------------------------------------------------
def _classify(sdfg, c: CarrySlot, body_states, reads_exposed, written, read_any, flags: dict[str, bool],
              read_outside: set[str]) -> None:
    """Set ``c.kind`` / ``detail`` / ``update_sources`` / ``outputs`` (and ``delay_of``, ``flag_value``).

    ``flags``: the loop's constant flags; ``read_outside``: containers read before the loop (peeled
    levels of the prologue) or after it (exit states).
    """
    exposed = c.name in reads_exposed
    is_written = c.name in written
    sources = []
    for i, st in enumerate(body_states):
        for n in _accesses(st, c.name):
            for e in st.in_edges(n):
                if e.data.is_empty():
                    continue
                if isinstance(e.src, nodes.AccessNode):
                    c.update_sources.append(e.src.data)
                sources.append(value_source(sdfg, body_states, i, n))
    for src in c.update_sources:
        if not sdfg.arrays[src].transient and src not in c.outputs:
            c.outputs.append(src)
    for st in body_states:
        for n in st.data_nodes():
            if sdfg.arrays[n.data].transient or not _is_write(st, n):
                continue
            for e in st.in_edges(n):
                if isinstance(e.src, nodes.AccessNode) and (e.src.data == c.name or e.src.data in c.update_sources):
                    if n.data not in c.outputs:
                        c.outputs.append(n.data)
    if not is_written:
        if exposed:
            c.kind, c.detail = "invariant", "read on every level, never updated"
        elif c.name in read_any or c.read_after:
            c.kind, c.detail = "invariant", "init value only read after the loop"
        else:
            c.kind, c.detail = "unused", "neither read nor updated in the loop"
        return
    if not exposed:
        if c.name not in read_any and c.name not in read_outside:
            c.kind, c.detail = "unused", "updated but never read"
        else:
            c.kind, c.detail = "pass_through", "written every level before any read; never crosses a level"
        return
    if c.name in flags:
        c.kind, c.flag_value = "flag", flags[c.name]
        c.detail = f"boolean set to {flags[c.name]} on every level"
        return
    kinds = {s[0] for s in sources}
    if sources and kinds == {"array"}:
        arrays = {s[1][0] for s in sources}
        if len(arrays) == 1:
            c.kind = "delay_line"
            c.delay_of = sources[0][1]
            c.detail = f"holds input '{sources[0][1][0]}' of the previous level"
            return
    if sources and kinds == {"tasklet"} and c.dtype in (dace.int8, dace.int16, dace.int32, dace.int64,
                                                        dace.uint8, dace.uint16, dace.uint32, dace.uint64):
        ok = True
        for _, t in sources:
            m = _COUNTER.match(_tasklet_code(t))
            st = next(s for s in body_states if t in s.nodes())
            ins = [e for e in st.in_edges(t) if not e.data.is_empty()]
            if not m or len(ins) != 1 or not isinstance(ins[0].src, nodes.AccessNode) or ins[0].src.data != c.name:
                ok = False
        if ok:
            c.kind, c.detail = "counter", "integer incremented by a constant every level"
            return
    c.kind, c.detail = "recurrent", "read from the previous level and updated"


# ------------------------------------------------------------------------------------------------
# boundary branches and self-copies (recursing into nested SDFGs of the body)
# ------------------------------------------------------------------------------------------------
def _nested_env(state, nsdfg: nodes.NestedSDFG, env: dict) -> dict:
    """Meaning of a nested SDFG's inner names: ``{"level"}`` or ``{"carry:<c>"}``."""
    inner = {}
    for k, v in nsdfg.symbol_mapping.items():
        syms = {str(s) for s in symbolic.pystr_to_symbolic(str(v)).free_symbols}
        meaning = set().union(*(env.get(s, set()) for s in syms)) if syms else set()
        if meaning:
            inner[k] = meaning
    for e in state.in_edges(nsdfg):
        if e.data.data is None:
            continue
        src = state.memlet_path(e)[0].src
        if isinstance(src, nodes.AccessNode) and src.data in env:
            inner[e.dst_conn] = env[src.data]
    return inner


def _find_branches(s: ScanStructure) -> list[BoundaryBranch]:
    flags = {c.name for c in s.carries.values() if c.kind == "flag"}
    env = {s.variable: {"level"}}
    for c in s.carries:
        env[c] = {f"carry:{c}"}
    found: list[BoundaryBranch] = []

    def visit(sdfg, blocks, env, path, where):
        for b in blocks:
            for blk in _walk(b):
                if isinstance(blk, ConditionalBlock):
                    for cond, _ in blk.branches:
                        if cond is None:
                            continue
                        syms = {str(x) for x in symbolic.pystr_to_symbolic(cond.as_string).free_symbols} \
                            if _sympifiable(cond.as_string) else set(re.findall(r"[A-Za-z_]\w*", cond.as_string))
                        meaning = set().union(*(env.get(x, set()) for x in syms)) if syms else set()
                        if "level" in meaning:
                            found.append(BoundaryBranch(blk, sdfg, "level", cond.as_string, None, path, *where))
                            break
                        fl = sorted(m[6:] for m in meaning if m.startswith("carry:") and m[6:] in flags)
                        if fl:
                            conn = sorted(x for x in syms if f"carry:{fl[0]}" in env.get(x, set()))[0]
                            found.append(BoundaryBranch(blk, sdfg, "flag", cond.as_string, fl[0], path, *where[:2],
                                                        conn))
                            break
                if isinstance(blk, dace.SDFGState):
                    for n in blk.nodes():
                        if isinstance(n, nodes.NestedSDFG):
                            inner = _nested_env(blk, n, env)
                            if inner:
                                visit(n.sdfg, n.sdfg.nodes(), inner, path + (n.label,), (n, blk))

    visit(s.sdfg, s.body_blocks, env, (), (None, None))
    return found


def _sympifiable(code: str) -> bool:
    try:
        symbolic.pystr_to_symbolic(code)
        return True
    except Exception:  # noqa: BLE001 - any parse failure means "use the regex fallback"
        return False


def _find_self_copies(s: ScanStructure) -> list[SelfCopy]:
    """Identity copies inside nested SDFGs of the body that pass a value unchanged to where a carry's new
    value comes from (``SelfCopy.carry``: that carry).

    In a nested SDFG placed in the column SDFG the copied value may be any transient single-element
    container of the level (the carry itself or a temporary: gt4py's ``else: o = i`` branches); deeper
    down it must be the carry's own old value.
    """
    feeds: dict[str, set[str]] = {}
    for c in s.carries.values():
        f = {c.name} | set(c.update_sources)
        for st in [b for b in s.body_blocks if isinstance(b, dace.SDFGState)]:
            for n in st.data_nodes():
                if n.data in f:
                    for e in st.in_edges(n):
                        if isinstance(e.src, nodes.AccessNode):
                            f.add(e.src.data)
        feeds[c.name] = f
    out: list[SelfCopy] = []

    def visit(sdfg, blocks, src_env, dst_env, path, top):
        for b in blocks:
            for st in _all_states(b):
                for n in st.nodes():
                    if not isinstance(n, nodes.NestedSDFG):
                        continue
                    ins, outs = {}, {}
                    for e in st.in_edges(n):
                        src = st.memlet_path(e)[0].src
                        if not isinstance(src, nodes.AccessNode):
                            continue
                        if src.data in src_env and not _is_write(st, src):
                            ins[e.dst_conn] = src_env[src.data]
                        elif (top and src.data not in src_env and sdfg.arrays[src.data].transient
                              and single_element(sdfg.arrays[src.data])):
                            ins[e.dst_conn] = None  # a value computed in this level
                    for e in st.out_edges(n):
                        dst = st.memlet_path(e)[-1].dst
                        if isinstance(dst, nodes.AccessNode) and dst.data in dst_env:
                            outs[e.src_conn] = dst_env[dst.data]
                    if not ins or not outs:
                        continue
                    inner = n.sdfg
                    for ist, e in identity_copies(n):
                        if (e.src.data in ins and e.dst.data in outs and ist.in_degree(e.src) == 0
                                and (top or ins[e.src.data] == outs[e.dst.data])):
                            out.append(SelfCopy(inner, ist, e, outs[e.dst.data], e.src.data, e.dst.data,
                                                path + (n.label,), n, st))
                    carried = {k: v for k, v in ins.items() if v is not None}
                    visit(inner, inner.nodes(), carried, outs, path + (n.label,), False)

    src_env = {c: c for c in s.carries}
    dst_env = {d: c for c, f in feeds.items() for d in f}
    visit(s.sdfg, s.body_blocks, src_env, dst_env, (), True)
    return out
