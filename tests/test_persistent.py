"""``optimize(..., persistent_transients=...)``: top-level transients allocated once, results unchanged."""

import re

import dace
import numpy as np
import pytest

import sdfg_scan
from sdfg_scan.persistent import make_transients_persistent

N = dace.symbol("N")
K = dace.symbol("K")


@dace.program
def _static(x: dace.float64[7, 5], y: dace.float64[7, 5]):
    t = x * 2.0
    u = t + x
    y[:] = np.cumsum(u, axis=1)


@dace.program
def _sized(x: dace.float64[N, K], y: dace.float64[N, K]):
    t = x * 2.0
    u = t + x
    y[:] = np.cumsum(u, axis=1)


def _program(static: bool) -> dace.SDFG:
    sdfg = (_static if static else _sized).to_sdfg(simplify=False)
    sdfg.name = f"persistent_{'static' if static else 'sized'}"
    return sdfg


def _lifetimes(sdfg: dace.SDFG) -> dict[str, dace.AllocationLifetime]:
    return {n: d.lifetime for n, d in sdfg.arrays.items() if d.transient and isinstance(d, dace.data.Array)}


@pytest.mark.parametrize("static, mode, expected", [(True, "static", True), (False, "static", False),
                                                    (False, "sized", True), (True, "sized", True)])
def test_which_transients_become_persistent(static, mode, expected):
    sdfg = _program(static)
    chosen = make_transients_persistent(sdfg, mode)
    assert bool(chosen) == expected
    for name, lifetime in _lifetimes(sdfg).items():
        assert (lifetime == dace.AllocationLifetime.Persistent) == (name in chosen)


def test_bad_mode_names_the_option():
    with pytest.raises(ValueError, match="persistent_transients must be one of"):
        sdfg_scan.optimize(_program(True), persistent_transients="always")


@pytest.mark.parametrize("static", [True, False])
def test_results_unchanged_and_stable_across_calls(static):
    rng = np.random.default_rng(3)
    x = rng.standard_normal((7, 5))
    ref = np.cumsum(x * 2.0 + x, axis=1)   # the program's roundings
    sdfg = _program(static)
    report = sdfg_scan.optimize(sdfg, persistent_transients="static" if static else "sized")
    assert report.transients_persistent >= 2
    assert "transients made persistent" in report.table()
    compiled = sdfg.compile()
    sizes = {} if static else {"N": 7, "K": 5}
    for _ in range(3):   # the same buffers serve every call: nothing leaks from one call into the next
        y = np.zeros((7, 5))
        compiled(x=x.copy(), y=y, **sizes)
        assert np.array_equal(y, ref)


def test_cli_option(tmp_path, capsys):
    from sdfg_scan.cli import main

    src, dst = tmp_path / "p.sdfg", tmp_path / "o.sdfg"
    _program(True).save(str(src))
    assert main(["optimize", str(src), "-o", str(dst), "--persistent-transients", "static"]) == 0
    assert re.search(r"transients made persistent [1-9]", capsys.readouterr().out)
    back = dace.SDFG.from_file(str(dst))
    assert any(d.lifetime == dace.AllocationLifetime.Persistent for d in back.arrays.values())


def test_grow_reallocates_where_a_call_outgrows_the_arrays():
    """``"grow"``: legal for any sizes. Called small, larger (the arrays are allocated again), then smaller
    (the front of the larger buffers): every call bitwise the program's values; the prologue state is first."""
    from sdfg_scan.persistent import GROW_STATE

    sdfg = _program(False)
    sdfg.name = "persistent_grow"
    report = sdfg_scan.optimize(sdfg, persistent_transients="grow")
    assert report.transients_persistent >= 2
    assert sdfg.start_block.label == GROW_STATE
    compiled = sdfg.compile()
    rng = np.random.default_rng(5)
    for n, k in ((3, 2), (7, 5), (40, 9), (2, 1), (40, 9), (0, 4), (11, 6)):
        x = rng.standard_normal((n, k))
        y = np.zeros((n, k))
        compiled(x=x.copy(), y=y, N=n, K=k)
        assert np.array_equal(y, np.cumsum(x * 2.0 + x, axis=1)), (n, k)


def test_grow_marks_only_symbol_sized_arrays_for_reallocation():
    """Constant shapes are persistent without a prologue; ``"grow"`` is refused for the GPU, naming the
    option and the target, and leaves the SDFG as it was."""
    sdfg = _program(True)
    assert make_transients_persistent(sdfg, "grow")
    assert all(s.label != "sdfg_scan_grow_transients" for s in sdfg.states())
    sdfg = _program(False)
    before = sdfg.to_json()
    with pytest.raises(ValueError, match="persistent_transients='grow'.*target='cpu'"):
        sdfg_scan.optimize(sdfg, target="gpu", persistent_transients="grow")
    assert sdfg.to_json() == before


def test_grow_keys_each_capacity_by_its_array():
    """The prologue records each array's capacity under the array's name: a second ``"grow"`` pass (here: one
    that finds nothing left to take) adds no second prologue, and one that did could not mix two arrays up."""
    from sdfg_scan.persistent import GROW_STATE

    sdfg = _program(False)
    chosen = make_transients_persistent(sdfg, "grow")
    (tasklet,) = [n for n in sdfg.start_block.nodes() if isinstance(n, dace.nodes.Tasklet)]
    for name in chosen:
        assert f'_caps["{name}"]' in tasklet.code.as_string
    assert make_transients_persistent(sdfg, "grow") == []
    assert sum(s.label == GROW_STATE for s in sdfg.states()) == 1


def test_default_is_grow_on_the_cpu_and_off_on_the_gpu():
    """Since stop 48 ``optimize`` allocates the transients once by default on the CPU (``"grow"``: legal for any
    sizes) and leaves them per call for the GPU; ``False`` keeps them per call on the CPU."""
    from sdfg_scan.persistent import GROW_STATE, NESTED_HINT

    sdfg = _program(False)
    report = sdfg_scan.optimize(sdfg)
    assert report.transients_persistent >= 2 and sdfg.start_block.label == GROW_STATE
    (tasklet,) = [n for n in sdfg.start_block.nodes() if isinstance(n, dace.nodes.Tasklet)]
    assert NESTED_HINT in tasklet.code.as_string   # what the compiler quotes if its array names are wrong
    for kw in ({"persistent_transients": False}, {"target": "gpu"}):
        sdfg = _program(False)
        assert sdfg_scan.optimize(sdfg, **kw).transients_persistent == 0, kw
        assert all(lt != dace.AllocationLifetime.Persistent for lt in _lifetimes(sdfg).values()), kw
        assert all(s.label != GROW_STATE for s in sdfg.states()), kw


def test_cli_default_and_off(tmp_path, capsys):
    from sdfg_scan.cli import main

    src = tmp_path / "p.sdfg"
    _program(False).save(str(src))
    for extra, persistent in (([], True), (["--persistent-transients", "off"], False)):
        dst = tmp_path / f"o{len(extra)}.sdfg"
        assert main(["optimize", str(src), "-o", str(dst), *extra]) == 0
        out = capsys.readouterr().out
        assert bool(re.search(r"transients made persistent [1-9]", out)) == persistent, out
        back = dace.SDFG.from_file(str(dst))
        assert any(d.lifetime == dace.AllocationLifetime.Persistent for d in back.arrays.values()) == persistent


def test_an_sdfg_optimized_alone_then_nested_grows_under_its_nested_names():
    """An SDFG ``optimize``d on its own (``"grow"`` by default) and nested in another one afterwards, twice (two
    copies of one program, one capacity each): its prologue is written again before code generation with the
    names its arrays have there, and every call, growing, shrinking and growing again, is bitwise the program's
    values."""
    import copy

    from sdfg_scan.persistent import rename_nested_prologues

    inner = _program(False)
    inner.name = "persistent_nested_inner"
    assert sdfg_scan.optimize(inner).transients_persistent >= 2
    outer = dace.SDFG("persistent_nested_outer")
    for name in ("x", "y", "z"):
        outer.add_array(name, [N, K], dace.float64)
    st = outer.add_state()
    for out in ("y", "z"):
        nn = st.add_nested_sdfg(copy.deepcopy(inner), {"x"}, {"y"}, {"N": "N", "K": "K"})
        st.add_edge(st.add_read("x"), None, nn, "x", dace.Memlet("x[0:N, 0:K]"))
        st.add_edge(nn, "y", st.add_write(out), None, dace.Memlet(f"{out}[0:N, 0:K]"))
    def prologues():
        return [n.code.as_string for n, _ in outer.all_nodes_recursive()
                if isinstance(n, dace.nodes.Tasklet) and "_caps[" in n.code.as_string]

    assert rename_nested_prologues(outer) == 2   # (what the code generator calls on its copy of the program)
    codes = prologues()
    assert len(codes) == 2 and codes[0] != codes[1] and all("__state->__0_" not in c for c in codes)
    assert rename_nested_prologues(outer) == 2 and prologues() == codes   # the keys are read back without the id
    compiled = outer.compile()
    rng = np.random.default_rng(7)
    for n, k in ((3, 2), (9, 6), (2, 1), (12, 7)):
        x = rng.standard_normal((n, k))
        y, z = np.zeros((n, k)), np.zeros((n, k))
        compiled(x=x.copy(), y=y, z=z, N=n, K=k)
        ref = np.cumsum(x * 2.0 + x, axis=1)
        assert np.array_equal(y, ref) and np.array_equal(z, ref), (n, k)
