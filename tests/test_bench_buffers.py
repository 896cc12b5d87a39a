"""``benchmarks/bench_icon4py.py``'s timing on the same buffers (``--buffers same``): every call starts from the
inputs' values (a program that writes its input in place does not drift from call to call), on the same
memory every time; ``--buffers loop`` times the same way in a process per variant, whose result comes back
(the calls' times and page faults); a bad ``--buffers`` is refused with the choices."""

import sys
from pathlib import Path

import dace
import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks import bench_icon4py as b  # noqa: E402


@pytest.fixture(scope="module")
def in_place():
    """``x[i] = 2 * x[i] + 1``: writes its input in place, as graupel's driver does."""
    n = dace.symbol("n")
    sdfg = dace.SDFG("bench_buffers_in_place")
    sdfg.add_array("x", [n], dace.float64)
    st = sdfg.add_state()
    st.add_mapped_tasklet("twice", {"i": "0:n"}, {"a": dace.Memlet("x[i]")}, "b = 2 * a + 1",
                          {"b": dace.Memlet("x[i]")}, external_edges=True)
    return sdfg.compile()


def test_same_buffers_restart_from_the_inputs(in_place):
    kw = {"x": np.arange(5, dtype=np.float64), "n": 5}
    same = b.SameBuffers(in_place, kw)
    memory = same.args["x"].ctypes.data
    for _ in range(3):
        assert same.sample() >= 0.0
        np.testing.assert_array_equal(same.args["x"], 2 * kw["x"] + 1)   # one call's result, not three
    assert same.args["x"].ctypes.data == memory        # the same buffer every call
    np.testing.assert_array_equal(kw["x"], np.arange(5))   # the caller's inputs untouched


def test_rows_in_both_modes_and_a_bad_mode(in_place):
    kw = {"x": np.arange(5, dtype=np.float64), "n": 5}
    variants = {"gt4py default flags": in_place, "other": in_place}
    for mode in b.BUFFERS:
        rows = b._interleaved_rows(variants, kw, 2, mode)
        assert len(rows) == 2 and "speed-up vs default flags" in rows[1]
        assert ("minor page faults per call" in rows[0]) == (mode == "loop")
    with pytest.raises(ValueError, match="buffers must be one of"):
        b._interleaved_rows(variants, kw, 1, "reused")
    with pytest.raises(SystemExit):
        b.main(["--buffers", "reused"])


def test_loop_samples_run_in_their_own_process(in_place):
    kw = {"x": np.arange(5, dtype=np.float64), "n": 5}
    times, faults = b.loop_samples(in_place, kw, 3)
    assert len(times) == 3 and all(t >= 0.0 for t in times)
    assert len(faults) == 3 and all(isinstance(f, int) and f >= 0 for f in faults)
    np.testing.assert_array_equal(kw["x"], np.arange(5))   # the caller's inputs untouched


def test_decision_arrays_become_outputs_with_the_declared_strides():
    """``--only graupel_decisions``' helpers: the top-level bool transients (the branch decisions a program
    stores) are found, made arguments, and given buffers with the SDFG's symbolic shape and strides, which a
    call fills."""
    n, m = dace.symbol("n"), dace.symbol("m")
    sdfg = dace.SDFG("bench_decisions")
    sdfg.add_array("x", [n, m], dace.float64, strides=[1, n])
    sdfg.add_array("y", [n, m], dace.float64, strides=[1, n])
    sdfg.add_array("mask", [n, m], dace.bool_, strides=[1, n], transient=True)
    sdfg.add_array("other", [n, m], dace.float64, transient=True)
    st = sdfg.add_state()
    x, y, mask = st.add_read("x"), st.add_write("y"), st.add_access("mask")
    st.add_mapped_tasklet("decide", {"i": "0:n", "j": "0:m"}, {"a": dace.Memlet("x[i, j]")}, "d = a > 0.5",
                          {"d": dace.Memlet("mask[i, j]")}, input_nodes={"x": x}, output_nodes={"mask": mask},
                          external_edges=True)
    st.add_mapped_tasklet("use", {"i": "0:n", "j": "0:m"}, {"d": dace.Memlet("mask[i, j]")},
                          "b = 1.0 if d else 0.0", {"b": dace.Memlet("y[i, j]")},
                          input_nodes={"mask": mask}, output_nodes={"y": y}, external_edges=True)
    names = b._decision_arrays(sdfg)
    assert names == ["mask"]
    prog = b._with_decisions(sdfg, names).compile()
    xs = np.asfortranarray(np.random.default_rng(0).random((7, 3)))
    kw = {"x": xs, "y": np.zeros_like(xs), "n": 7, "m": 3}
    bufs = b._decision_buffers(prog.sdfg, names, kw)
    assert bufs["mask"].shape == (7, 3) and bufs["mask"].strides == (1, 7)
    with dace.config.set_temporary("compiler", "allow_view_arguments", value=True):
        prog(**kw, **bufs)
    np.testing.assert_array_equal(bufs["mask"], xs > 0.5)
    np.testing.assert_array_equal(kw["y"], (xs > 0.5).astype(float))


def test_the_pair_bandwidth_row_counts_the_arrays_moved(monkeypatch):
    """The dycore pair's bandwidth line (``_pair_bandwidth_rows``): the bytes of every array argument read once
    and every one written once (scalars and transients left out, an array both read and written counted
    twice), its rate at the best call, the probe's and the rate a 10x needs."""
    n = dace.symbol("n")
    sdfg = dace.SDFG("bench_pair_bandwidth")
    for name in ("x", "y", "z"):
        sdfg.add_array(name, [n], dace.float64)
    sdfg.add_array("t", [n], dace.float64, transient=True)
    sdfg.add_scalar("s", dace.float64)
    st = sdfg.add_state()
    st.add_mapped_tasklet("sum", {"i": "0:n"}, {"a": dace.Memlet("x[i]"), "b": dace.Memlet("y[i]")}, "c = a + b",
                          {"c": dace.Memlet("t[i]")}, external_edges=True)
    t = next(a for a in st.data_nodes() if a.data == "t")
    st.add_mapped_tasklet("scale", {"i": "0:n"}, {"a": dace.Memlet("t[i]"), "q": dace.Memlet("s[0]")}, "c = a * q",
                          {"c": dace.Memlet("y[i]")}, external_edges=True, input_nodes={"t": t})
    kw = {"x": np.zeros(1000), "y": np.zeros(1000), "z": np.zeros(1000), "s": 2.0, "n": 1000}
    monkeypatch.setattr(b, "bandwidth_probe", lambda nbytes: 40.0)   # GB/s, without compiling the probe
    (row,) = b._pair_bandwidth_rows(sdfg, kw, ours_s=1e-6, two_s=1e-5)
    moved = 3 * 8000   # x and y read, y written; z untouched, t transient, s a scalar
    assert f"moves at least {moved / 1e6:.1f} MB (reads x, y; writes y)" in row, row
    assert "24.0 GB/s at its best call, 0.60 of a copy streaming as many bytes, 40.0 GB/s" in row, row
    assert f"10x over the two programs needs {10 * moved / 1e-5 / 1e9:.1f} GB/s" in row, row
