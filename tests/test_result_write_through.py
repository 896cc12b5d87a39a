"""``ResultWriteThrough``: results computed into the output they were copied to (the copy goes).

Differential: each applied case runs the original and the transformed program (IEEE-strict flags, the
same seeded inputs, outputs pre-filled with sentinels) and compares every array bitwise. Each guard has a
"does not apply" case that checks the SDFG is unchanged.
"""

from __future__ import annotations

import copy
import dataclasses
import json

import dace
import gt4py_shaped as gs
import numpy as np
import pytest

import sdfg_scan
from sdfg_scan.transformations import ResultWriteThrough
from sdfg_scan.transformations.result_write_through import refusal

N, K = dace.symbol("N"), dace.symbol("K")


def _program(name: str, *, copied: str = "0:N, 0:K", out_box: str = "2:N+2, 3:K+3", reader: bool = True,
             earlier: bool = False, nested: bool = False) -> dace.SDFG:
    """``T[i, k] = X[i, k] * 2 + 1`` (a map), optionally ``Y[i, k] = T[i, k] * T[i, k]`` (a second map reading
    ``T``), then ``O[out_box] = T[copied]``. ``O`` is column-major and larger than ``T``; ``earlier`` adds a
    map ``Z = X + 1`` before the writer (reading ``X`` first); ``nested`` writes ``T`` from a nested SDFG
    holding a whole ``T`` row."""
    sdfg = dace.SDFG(name)
    sdfg.add_array("X", [N, K], dace.float64)
    sdfg.add_array("O", [N + 2, K + 3], dace.float64, strides=(1, N + 2))
    sdfg.add_array("Y", [N, K], dace.float64)
    sdfg.add_array("Z", [N, K], dace.float64)
    sdfg.add_array("T", [N, K], dace.float64, transient=True)
    st = sdfg.add_state("s", is_start_block=True)
    if earlier:
        src = st.add_access("Z")
        st.add_mapped_tasklet("first", {"i": "0:N", "k": "0:K"}, {"a": dace.Memlet("X[i, k]")}, "b = a + 1.0",
                              {"b": dace.Memlet("Z[i, k]")}, external_edges=True, output_nodes={"Z": src})
    else:
        src = st.add_read("X")
    t = st.add_access("T")
    if nested:
        inner = dace.SDFG("row")
        inner.add_array("a", [K], dace.float64)
        inner.add_array("b", [K], dace.float64)
        ist = inner.add_state("s", is_start_block=True)
        ist.add_mapped_tasklet("r", {"k": "0:K"}, {"x": dace.Memlet("a[k]")}, "y = x * 2.0 + 1.0",
                               {"y": dace.Memlet("b[k]")}, external_edges=True)
        me, mx = st.add_map("rows", {"i": "0:N"})
        ns = st.add_nested_sdfg(inner, {"a"}, {"b"}, symbol_mapping={"K": K})
        st.add_memlet_path(src, me, ns, dst_conn="a", memlet=dace.Memlet(f"{src.data}[i, 0:K]"))
        st.add_memlet_path(ns, mx, t, src_conn="b", memlet=dace.Memlet("T[i, 0:K]"))
    else:
        st.add_mapped_tasklet("write", {"i": "0:N", "k": "0:K"}, {"a": dace.Memlet(f"{src.data}[i, k]")},
                              "b = a * 2.0 + 1.0", {"b": dace.Memlet("T[i, k]")}, external_edges=True,
                              input_nodes={src.data: src}, output_nodes={"T": t})
    if reader:
        st.add_mapped_tasklet("read", {"i": "0:N", "k": "0:K"}, {"a": dace.Memlet("T[i, k]")}, "b = a * a",
                              {"b": dace.Memlet("Y[i, k]")}, external_edges=True, input_nodes={"T": t})
    st.add_nedge(t, st.add_write("O"), dace.Memlet(data="T", subset=copied, other_subset=out_box))
    return sdfg


def _args(n: int = 5, k: int = 4) -> dict:
    rng = np.random.default_rng(7)
    return {"X": rng.uniform(-2, 2, (n, k)), "O": np.asfortranarray(np.full((n + 2, k + 3), -7.0)),
            "Y": np.full((n, k), -7.0), "Z": np.full((n, k), -7.0), "N": n, "K": k}


def _run(sdfg: dace.SDFG, kw: dict) -> dict:
    out = {k: (v.copy(order="K") if isinstance(v, np.ndarray) else v) for k, v in kw.items()}
    gs.compile_exact(sdfg)(**out)
    return out


def _same(a: dict, b: dict) -> None:
    for k, v in a.items():
        if isinstance(v, np.ndarray):
            assert np.array_equal(gs._bytes(v), gs._bytes(b[k])), k


def _apply(sdfg: dace.SDFG, **options) -> int:
    return sdfg.apply_transformations_repeated(ResultWriteThrough, options=options or None, validate=True)


@pytest.mark.parametrize("kind", ["map", "map_no_reader", "after_earlier_map"])
def test_writers_and_readers_take_the_output(kind):
    orig = _program(f"rwt_{kind}", reader=kind != "map_no_reader", earlier=kind == "after_earlier_map",
                    )
    new = copy.deepcopy(orig)
    new.name += "_new"
    assert _apply(new, **({"inplace": {"O": "X"}} if kind == "after_earlier_map" else {})) == 1
    assert "T" not in new.arrays
    kw = _args()
    _same(_run(orig, kw), _run(new, kw))


def _unchanged(sdfg: dace.SDFG, **options) -> str:
    before = json.dumps(sdfg.to_json(), sort_keys=True)
    assert _apply(sdfg, **options) == 0
    assert json.dumps(sdfg.to_json(), sort_keys=True) == before
    st = sdfg.start_block
    t = next(n for n in st.data_nodes() if n.data == "T")
    o = next(n for n in st.data_nodes() if n.data == "O")
    reason = refusal(st, sdfg, t, o, **options)
    assert reason
    return reason


def test_refuses_a_partial_copy():
    assert "outside the part that is copied" in _unchanged(_program("rwt_part", copied="0:N, 1:K",
                                                                     out_box="2:N+2, 4:K+3"))


def test_refuses_an_output_read_in_the_state():
    sdfg = _program("rwt_oread")
    st = sdfg.start_block
    o = next(n for n in st.data_nodes() if n.data == "O")
    st.add_nedge(o, st.add_write("Z"), dace.Memlet(data="O", subset="2:N+2, 3:K+3", other_subset="0:N, 0:K"))
    assert "other than by the copy" in _unchanged(sdfg)


def test_refuses_a_temporary_used_in_another_state():
    sdfg = _program("rwt_other_state")
    st2 = sdfg.add_state_after(sdfg.start_block, "later")
    st2.add_nedge(st2.add_read("T"), st2.add_write("Z"), dace.Memlet("T[0:N, 0:K]"))
    assert "outside this state" in _unchanged(sdfg)


def test_refuses_a_nested_sdfg_holding_the_temporary():
    assert "nested SDFG" in _unchanged(_program("rwt_nested", nested=True))


def test_refuses_a_declared_alias_read_by_the_writer():
    assert "may share memory" in _unchanged(_program("rwt_alias"), inplace={"O": "X"})


def test_refuses_any_global_read_by_the_writer_without_no_alias():
    assert "may share memory" in _unchanged(_program("rwt_any"), assume_no_alias=False)


def _levels_program(name: str, gt4py_min: bool) -> dace.SDFG:
    """gt4py's level ranges: the temporary starts at ``Min(vs, ve - 1)`` (one level even for an empty domain)
    when ``gt4py_min``, else at ``vs`` with ``Max(0, ve - vs)`` levels; the copy takes levels ``[vs, ve)``."""
    sdfg = dace.SDFG(name)
    lo = "Min(vs, ve - 1)" if gt4py_min else "vs"
    sdfg.add_array("X", [N, K], dace.float64)
    sdfg.add_array("O", [N, K], dace.float64)
    sdfg.add_array("T", [N, f"Max(0, ve - {lo})"], dace.float64, transient=True)
    st = sdfg.add_state("s", is_start_block=True)
    t = st.add_access("T")
    st.add_mapped_tasklet("write", {"i": "0:N", "k": f"{lo}:ve"}, {"a": dace.Memlet("X[i, k]")}, "b = a + 1.0",
                          {"b": dace.Memlet(f"T[i, k - {lo}]")}, external_edges=True, output_nodes={"T": t})
    st.add_nedge(t, st.add_write("O"), dace.Memlet(data="T", subset=f"0:N, vs - {lo}:ve - {lo}",
                                                  other_subset="0:N, vs:ve"))
    return sdfg


def test_gt4py_level_ranges():
    """Accepted where every level the writer writes is copied; refused for gt4py's ``Min(vs, ve - 1)``
    temporaries, whose one level for an empty domain is written but not copied."""
    sdfg = _levels_program("rwt_levels", gt4py_min=False)
    new = copy.deepcopy(sdfg)
    new.name += "_new"
    assert _apply(new) == 1
    rng = np.random.default_rng(3)
    for vs, ve in ((0, 4), (1, 4), (3, 4), (4, 4)):
        kw = {"X": rng.uniform(size=(3, 4)), "O": np.full((3, 4), -7.0), "N": 3, "K": 4, "vs": vs, "ve": ve}
        _same(_run(sdfg, kw), _run(new, kw))
    gt4py = _levels_program("rwt_levels_min", gt4py_min=True)
    before = json.dumps(gt4py.to_json(), sort_keys=True)
    assert _apply(gt4py) == 0
    assert json.dumps(gt4py.to_json(), sort_keys=True) == before


@pytest.mark.parametrize("cell_contiguous", [True, False], ids=["cell_contiguous", "k_contiguous"])
def test_lifted_scan_results(cell_contiguous):
    """gt4py's scan results (a lifted ``Scan`` over cells writing ``[N, K]`` temporaries copied into the
    outputs): ``optimize`` writes them through, bitwise; the temporaries' strides differ from the outputs'
    when the fields are cell-contiguous (the body takes the outputs')."""
    col = dataclasses.replace(gs.KITCHEN_SINK, start=0, via_temporary=True, cell_contiguous=cell_contiguous)
    sdfg = gs.program(col, f"rwt_scan_{int(cell_contiguous)}")
    report = sdfg_scan.optimize(copy.deepcopy(sdfg), target="cpu", reproducibility="exact")
    assert report.applied.get("ResultWriteThrough") == sum(1 for s in col.slots if s.out)
    gs.check_optimize_bitwise(col)


def test_scan_results_after_the_first_level_are_not_written_through():
    """The scan's memlet names every level, the copy only ``[1, K)``: refused, still bitwise."""
    col = dataclasses.replace(gs.KITCHEN_SINK, via_temporary=True)
    report = sdfg_scan.optimize(gs.program(col, "rwt_scan_start1"), target="cpu", reproducibility="exact")
    assert not report.applied.get("ResultWriteThrough")
    gs.check_optimize_bitwise(col)


def test_integer_division_in_the_ranges():
    """DaCe's ``int_floor`` in a writer's range is evaluated on the grid (before: an uncaught NameError)."""
    sdfg = dace.SDFG("rwt_floor")
    sdfg.add_array("X", [N], dace.float64)
    sdfg.add_array("O", [N], dace.float64)
    sdfg.add_array("T", [N], dace.float64, transient=True)
    st = sdfg.add_state("s", is_start_block=True)
    t = st.add_access("T")
    st.add_mapped_tasklet("w", {"i": "0:int_floor(N, 2)"}, {"a": dace.Memlet("X[i]")}, "b = a + 1.0",
                          {"b": dace.Memlet("T[i]")}, external_edges=True, output_nodes={"T": t})
    st.add_nedge(t, st.add_write("O"), dace.Memlet(data="T", subset="0:N", other_subset="0:N"))
    new = copy.deepcopy(sdfg)
    new.name += "_new"
    assert _apply(new) == 1
    kw = {"X": np.arange(5.0), "O": np.full(5, -7.0), "N": 5}
    out = _run(new, kw)["O"]
    assert np.array_equal(out[:2], [1.0, 2.0])   # the rest: uninitialised in the original, untouched here


def test_gt4py_argument_pairs_pair_tuple_members_and_skip_what_a_program_lacks():
    """``optimization_hooks(inplace=...)`` names gt4py parameters; gt4py flattens a tuple parameter into one
    argument per member (``q_out`` -> ``q_out_0``, ...), so a tuple pair pairs its members by position."""
    from sdfg_scan.gt4py_stages import argument_pairs

    sdfg = dace.SDFG("rwt_pairs")
    for name in ("q_in_0", "q_in_1", "q_out_0", "q_out_1", "q_out_10", "te", "t_out", "p_0_1", "r_0_1"):
        sdfg.add_array(name, [4], dace.float64)
    sdfg.add_transient("q_out_2", [4], dace.float64)   # a transient is no argument
    sdfg.add_array("q_in_2", [4], dace.float64)
    got = argument_pairs(sdfg, {"q_out": "q_in", "t_out": "te", "missing": "te", "r": "p", "q_outx": "q_in"})
    assert got == {"q_out_0": "q_in_0", "q_out_1": "q_in_1", "t_out": "te", "r_0_1": "p_0_1"}


def test_gt4py_hooks_refuse_contradictory_or_malformed_inplace():
    import sdfg_scan.gt4py as sg

    with pytest.raises(ValueError, match="assume_no_alias=True says no two arguments share memory"):
        sg.optimization_hooks(assume_no_alias=True, inplace={"q_out": "q_in"})
    with pytest.raises(ValueError, match="inplace must map output parameter names"):
        sg.optimization_hooks(inplace={"q": "q"})
    with pytest.raises(ValueError, match="inplace must map output parameter names"):
        sg.optimization_hooks(inplace={"q": 1})


def test_cover_is_checked_per_group_of_dimensions_sharing_symbols():
    """gt4py names the cell and level ranges with symbols of their own: each dimension's group is checked on
    the grid of its own symbols (three and three here; six at once were refused as too many), a group that
    shares symbols across dimensions stays one group."""
    from dace import subsets as sbs

    from sdfg_scan.transformations.result_write_through import Refuse, check_cover

    def r(text):
        return sbs.Range.from_string(text)

    shape = (dace.symbolic.pystr_to_symbolic("Max(0, he - hs)"), dace.symbolic.pystr_to_symbolic("Max(0, ve - vs)"))
    copied = r("0:he - hs, 0:ve - vs")
    check_cover(shape, [r("Min(hs, hx) - hs:he - hs, 0:ve - vs")], [r("0:Min(he, hx + 1) - hs, vx - vx:ve - vs")],
                copied)
    with pytest.raises(Refuse, match="outside the part that is copied"):
        check_cover(shape, [r("Min(hs, hx) - hs:he - hs, 0:ve - vs")], [], r("0:he - hs, Min(vx, 1):ve - vs"))
    with pytest.raises(Refuse, match=r"too many symbols in the index ranges to check them \(7\)"):
        check_cover(shape, [r("Min(hs, hx) - hs:Min(he, ve + a) - hs, Min(vs, vx) - vs:ve - vs")], [], copied)
