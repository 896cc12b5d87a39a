"""ScanOutputsInPlace: in-place scan outputs under a declared aliasing, bitwise; refuses unchanged otherwise."""

from __future__ import annotations

import copy
import json

import icon4py_fixtures as fx
import pytest
from sdfg_scan.transformations import RemoveScanSelfCopies
from sdfg_scan.transformations.scan_outputs_in_place import ScanOutputsInPlace

# the aliasing icon4py's driver (and run_sdfg_fixture.py) sets up for graupel
DRIVER = {"q_out_2": "q_in_2", "q_out_3": "q_in_3", "q_out_4": "q_in_4", "q_out_5": "q_in_5", "t_out": "te"}


def _snapshot(sdfg) -> str:
    return json.dumps(sdfg.to_json(), sort_keys=True, default=str)


def _apply(sdfg, inplace):
    return sdfg.apply_transformations_repeated(ScanOutputsInPlace, options={"inplace": inplace}, validate=False)


def _accessed(sdfg, name) -> bool:
    return any(n.data == name for st in sdfg.states() for n in st.data_nodes())


@pytest.mark.fixtures
def test_graupel_static_bitwise():
    form = "graupel_run.opt_nohooks"
    sdfg = fx.load(form)
    xf = copy.deepcopy(sdfg)
    assert _apply(xf, DRIVER) == 4  # q species; t_out/te refused (see test_t_refused)
    assert xf.apply_transformations_repeated(RemoveScanSelfCopies, validate=False) == 4
    xf.validate()
    for k in range(2, 6):
        assert not _accessed(xf, f"q_out_{k}")  # results are written in place into q_in_k
    for t in ("gtir_tmp_2271", "gtir_tmp_2273", "gtir_tmp_2275", "gtir_tmp_2277"):
        assert t not in xf.arrays  # the Cell x K where-temporaries are gone
    kw = fx.inputs(form, sdfg)  # q_out_k aliases q_in_k, t_out aliases te
    fx.assert_bitwise_equal(fx.run(form, sdfg, kw), fx.run(form + "+inplace+rsc", xf, kw))


@pytest.mark.fixtures
def test_graupel_dyn_refuses_unchanged():
    """The symbolic-domain variant writes the scan outputs into fresh temporaries that are copied into
    q_out/t_out with a level offset (where icon4py's hooks produce NaNs): _out_written_by_scan refuses."""
    sdfg = fx.load("graupel_run_dyn.opt_nohooks")
    before = _snapshot(sdfg)
    assert _apply(sdfg, DRIVER) == 0
    assert _snapshot(sdfg) == before


GUARDS = {
    "no option: does nothing": {},
    "_producer: the where copies q_in_5, not the declared q_in_4": {"q_out_5": "q_in_4"},
    "_scan_reads: te is read as a whole array (t at k+1) inside the scan": {"t_out": "te"},
    "_declared: unknown container": {"q_out_5": "nope"},
    "_declared: input is the output": {"q_out_5": "q_out_5"},
}


@pytest.mark.fixtures
@pytest.mark.parametrize("inplace", list(GUARDS.values()), ids=list(GUARDS))
def test_does_not_apply(inplace):
    sdfg = fx.load("graupel_run.opt_nohooks")
    before = _snapshot(sdfg)
    assert _apply(sdfg, inplace) == 0
    assert _snapshot(sdfg) == before


def test_other_fixtures_untouched():
    fx.require()
    sdfg = fx.load("diagnose_pressure.opt")
    before = _snapshot(sdfg)
    outs = [a for a, d in sdfg.arrays.items() if not d.transient]
    assert _apply(sdfg, {outs[0]: outs[1]}) == 0
    assert _snapshot(sdfg) == before
