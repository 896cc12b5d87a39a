"""Identity copies inside nested SDFGs: the analysis behind ``RemoveScanSelfCopies`` and
``ScanOutputsInPlace``.

An *identity copy* is an access-node -> access-node copy from an input connector to an output
connector of a nested SDFG (both single elements of one dtype): in gt4py's scans, the identity
else-branch of ``if activated:`` that passes a carry or an input through unchanged.
"""

from __future__ import annotations

import ast

from dace import Memlet, dtypes
from dace import data as dt
from dace.sdfg import SDFG, SDFGState, nodes
from dace.sdfg.state import ConditionalBlock, LoopRegion


def single_element(desc) -> bool:
    return isinstance(desc, dt.Scalar) or (isinstance(desc, dt.Array) and desc.total_size == 1)


def enclosing_loop(state: SDFGState) -> LoopRegion | None:
    g = state.parent_graph
    while g is not None and not isinstance(g, SDFG):
        if isinstance(g, LoopRegion):
            return g
        g = g.parent_graph
    return None


def writes(sdfg: SDFG, data: str):
    """``(state, access node)`` for every write of ``data`` in ``sdfg`` (not descending into nested SDFGs)."""
    for st in sdfg.all_states():
        for n in st.data_nodes():
            if n.data == data and st.in_degree(n) > 0:
                yield st, n


def reads(sdfg: SDFG, data: str):
    for st in sdfg.all_states():
        for n in st.data_nodes():
            if n.data == data and st.out_degree(n) > 0:
                yield st, n


def ancestors(block) -> list:
    chain = [block]
    g = block.parent_graph
    while g is not None:
        chain.append(g)
        if isinstance(g, SDFG):
            break
        g = g.parent_graph
    return chain


def mutually_exclusive(a: SDFGState, b: SDFGState) -> bool:
    """True when ``a`` and ``b`` lie in different branches of one ``ConditionalBlock``."""
    chain_a = ancestors(a)
    ids_a = {id(x): k for k, x in enumerate(chain_a)}
    chain_b = ancestors(b)
    for k, x in enumerate(chain_b):
        if id(x) in ids_a:
            if isinstance(x, ConditionalBlock):
                # the children on both sides are two branch regions of x
                ca, cb = chain_a[ids_a[id(x)] - 1], chain_b[k - 1]
                return ca is not cb
            return False
    return False


def copy_tasklet(sdfg: SDFG, state: SDFGState, node) -> tuple | None:
    """``(src, dst, in_edge, out_edge)`` when ``node`` is a copy written as a tasklet, else None.

    Such a tasklet is Python ``out = in`` on its only two connectors, with one in-edge straight from an access
    node and one out-edge straight to an access node of another container, each memlet one element of its
    own container (no write-conflict resolution), both containers of one dtype: the form DaCe's code
    generation gives an access-node copy (``_cpy_out = _cpy_in``; gt4py's compiled ``program.sdfgz`` holds
    every copy of its nested SDFGs so), and exactly the copy ``src -> dst`` of that element.
    """
    if not isinstance(node, nodes.Tasklet) or node.language != dtypes.Language.Python:
        return None
    ins, outs = state.in_edges(node), state.out_edges(node)
    if len(ins) != 1 or len(outs) != 1 or len(node.in_connectors) != 1 or len(node.out_connectors) != 1:
        return None
    (ie,), (oe,) = ins, outs
    try:
        body = ast.parse(node.code.as_string.strip()).body
    except SyntaxError:
        return None
    if not (len(body) == 1 and isinstance(body[0], ast.Assign) and len(body[0].targets) == 1):
        return None
    target, value = body[0].targets[0], body[0].value
    if not (isinstance(target, ast.Name) and isinstance(value, ast.Name)
            and target.id == oe.src_conn and value.id == ie.dst_conn and target.id != value.id):
        return None
    src, dst = ie.src, oe.dst
    if not (isinstance(src, nodes.AccessNode) and isinstance(dst, nodes.AccessNode) and src.data != dst.data):
        return None
    for e, an in ((ie, src), (oe, dst)):
        m = e.data
        if m.data != an.data or m.wcr is not None or m.dynamic or m.subset is None or m.other_subset is not None \
                or m.subset.num_elements() != 1:
            return None
    if sdfg.arrays[src.data].dtype != sdfg.arrays[dst.data].dtype:
        return None
    return src, dst, ie, oe


def replace_copy_tasklet(state: SDFGState, tasklet: nodes.Tasklet, found: tuple) -> None:
    """Replace ``tasklet`` by the access-node copy it stands for (``found``: what :func:`copy_tasklet` returned)."""
    src, dst, ie, oe = found
    state.remove_node(tasklet)
    state.add_edge(src, None, dst, None, Memlet(data=src.data, subset=ie.data.subset, other_subset=oe.data.subset))


def identity_copies(nsdfg: nodes.NestedSDFG):
    """Candidate ``(state, edge)``: access-node copy input connector -> output connector inside ``nsdfg``."""
    inner = nsdfg.sdfg
    for st in inner.all_states():
        for e in st.edges():
            src, dst = e.src, e.dst
            if not (isinstance(src, nodes.AccessNode) and isinstance(dst, nodes.AccessNode)):
                continue
            i, o = src.data, dst.data
            if i not in nsdfg.in_connectors or o not in nsdfg.out_connectors or o in nsdfg.in_connectors:
                continue
            if i in nsdfg.out_connectors or e.data.wcr is not None:
                continue
            di, do = inner.arrays[i], inner.arrays[o]
            if not (single_element(di) and single_element(do)) or di.dtype != do.dtype:
                continue
            if st.in_degree(dst) != 1 or st.out_degree(dst) != 0:
                continue
            if any(n.data == o for n in st.data_nodes() if n is not dst):
                continue
            if any(True for _ in writes(inner, i)) or any(True for _ in reads(inner, o)):
                continue
            if not all(ws is st or mutually_exclusive(ws, st) for ws, _ in writes(inner, o) if ws is not st):
                continue
            yield st, e


__all__ = ["ancestors", "copy_tasklet", "enclosing_loop", "identity_copies", "mutually_exclusive", "reads",
           "replace_copy_tasklet", "single_element", "writes"]
