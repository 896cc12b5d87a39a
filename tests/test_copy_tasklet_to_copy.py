"""CopyTaskletToCopy: copies that DaCe's code generation lowered to tasklets become copies again (gt4py's
compiled ``program.sdfgz``); anything that is not exactly such a copy is refused and left untouched."""

from __future__ import annotations

import copy
import dataclasses
import json

import dace
import gt4py_shaped as gs
import numpy as np
import pytest

import sdfg_scan
from sdfg_scan.transformations import CopyTaskletToCopy


def _program(code="_cpy_out = _cpy_in", src_dtype=dace.float64, wcr=None, second_input=False, in_map=False):
    """``B[0] = A[1]`` through a tasklet (``in_map``: inside a map, the tasklet reading A through the entry)."""
    sdfg = dace.SDFG("cpy_prog")
    sdfg.add_array("A", [3], src_dtype)
    sdfg.add_array("B", [2], dace.float64)
    st = sdfg.add_state(is_start_block=True)
    ins = {"_cpy_in": None, **({"_other": None} if second_input else {})}
    tk = st.add_tasklet("copy_A_to_B", ins, {"_cpy_out": None}, code)
    if in_map:
        me, mx = st.add_map("m", {"i": "0:1"})
        st.add_memlet_path(st.add_read("A"), me, tk, dst_conn="_cpy_in", memlet=dace.Memlet("A[1]"))
        st.add_memlet_path(tk, mx, st.add_write("B"), src_conn="_cpy_out", memlet=dace.Memlet("B[0]"))
        return sdfg
    a = st.add_read("A")
    st.add_edge(a, None, tk, "_cpy_in", dace.Memlet("A[1]"))
    if second_input:
        st.add_edge(a, None, tk, "_other", dace.Memlet("A[2]"))
    st.add_edge(tk, "_cpy_out", st.add_write("B"), None, dace.Memlet("B[0]", wcr=wcr))
    return sdfg


def test_a_copy_tasklet_becomes_a_copy_with_the_same_values():
    sdfg = _program()
    ref = copy.deepcopy(sdfg)
    assert sdfg.apply_transformations_repeated(CopyTaskletToCopy) == 1
    sdfg.validate()
    (st,) = sdfg.states()
    assert not any(isinstance(n, dace.nodes.Tasklet) for n in st.nodes())
    (e,) = st.edges()
    assert (e.src.data, e.dst.data, str(e.data.subset), str(e.data.other_subset)) == ("A", "B", "1", "0")
    a = np.array([1.5, -0.0, 7.25])
    want, got = np.full(2, 9.0), np.full(2, 9.0)
    ref.name, sdfg.name = "cpy_ref", "cpy_new"
    ref(A=a, B=want)
    sdfg(A=a, B=got)
    assert np.array_equal(want, got) and got[0] == -0.0 and np.signbit(got[0])


@pytest.mark.parametrize("kw", [
    pytest.param(dict(code="_cpy_out = _cpy_in * 2"), id="computes"),
    pytest.param(dict(code="_cpy_out = -_cpy_in"), id="negates"),
    pytest.param(dict(src_dtype=dace.float32), id="converts"),
    pytest.param(dict(wcr="lambda x, y: x + y"), id="accumulates"),
    pytest.param(dict(second_input=True), id="two_inputs"),
    pytest.param(dict(in_map=True), id="through_a_map"),
])
def test_anything_else_is_refused_and_left_untouched(kw):
    sdfg = _program(**kw)
    before = json.dumps(sdfg.to_json(), sort_keys=True)
    assert sdfg.apply_transformations_repeated(CopyTaskletToCopy) == 0
    assert CopyTaskletToCopy.apply_everywhere(sdfg) == 0
    assert json.dumps(sdfg.to_json(), sort_keys=True) == before


def test_optimize_reads_a_compiled_program_as_the_original():
    """gt4py's compiled form of a column (init copies and the ``if`` arms' self-copies as tasklets): optimize
    restores the copies, so it lifts, removes the self-copies and the dead carries as on the original form."""
    col = dataclasses.replace(gs.KITCHEN_SINK, compiled=False)
    reports = {}
    for compiled in (False, True):
        form = dataclasses.replace(col, compiled=compiled)
        sdfg = gs.program(form, f"ks_{compiled}")
        reports[compiled] = sdfg_scan.optimize(sdfg, target="cpu", reproducibility="exact")
        sdfg.validate()
    plain, comp = reports[False], reports[True]
    assert comp.applied["CopyTaskletToCopy"] > plain.applied["CopyTaskletToCopy"] == 0
    for key in ("LiftScans", "RemoveScanSelfCopies", "DeadCarryElimination", "LiftCellMap"):
        assert comp.applied[key] == plain.applied[key], (key, comp.table())
    assert [s.carry_kinds_after for s in comp.scans] == [s.carry_kinds_after for s in plain.scans]
