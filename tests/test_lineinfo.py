"""sdfg_scan builds SDFGs without DaCe's per-node walk of the Python stack (``sdfg_scan.lineinfo``).

Under DaCe's default ``compiler.lineinfo = "inspect"`` each node added calls ``inspect.stack()``; these tests
make that call fail, so any node an expansion, a transformation or ``optimize`` adds with the walk on is
an error, and check that the caller's setting is back afterwards (also when the expansion raises)."""

import inspect

import dace
import pytest

import sdfg_scan
from sdfg_scan.lineinfo import no_stack_lineinfo
from sdfg_scan.nodes import CumulativeScan
from sdfg_scan.transformations import LiftScans

N, K = dace.symbol("N"), dace.symbol("K")


@pytest.fixture
def walking_forbidden(monkeypatch):
    """``compiler.lineinfo = "inspect"`` and an ``inspect.stack`` that raises (DaCe calls it per node)."""
    def _walk(*args, **kwargs):
        raise AssertionError("inspect.stack() called: a node was added with DaCe's stack walk on")

    monkeypatch.setattr(inspect, "stack", _walk)
    with dace.config.set_temporary("compiler", "lineinfo", value="inspect"):
        yield


def _cumulative(impl: str) -> tuple[dace.SDFG, dace.SDFGState, CumulativeScan]:
    with no_stack_lineinfo():
        sdfg = dace.SDFG(f"lineinfo_{impl}")
        sdfg.add_array("x", [N, K], dace.float64)
        sdfg.add_array("y", [N, K], dace.float64)
        state = sdfg.add_state()
        node = CumulativeScan("c", op="sum", axis=1)
        node.implementation = impl
        state.add_edge(state.add_read("x"), None, node, "_in", dace.Memlet("x[0:N, 0:K]"))
        state.add_edge(node, "_out", state.add_write("y"), None, dace.Memlet("y[0:N, 0:K]"))
    return sdfg, state, node


@pytest.mark.parametrize("impl", ["sequential", "blocked", "auto"])
def test_expansions_add_nodes_without_walking_the_stack(walking_forbidden, impl):
    sdfg, state, node = _cumulative(impl)
    node.expand(state)
    assert not any(isinstance(n, CumulativeScan) for n, _ in sdfg.all_nodes_recursive())
    assert dace.Config.get("compiler", "lineinfo") == "inspect"


def test_the_setting_is_restored_when_an_expansion_raises(walking_forbidden):
    sdfg, state, node = _cumulative("sequential")
    node.axis = 5
    with pytest.raises(Exception, match="axis 5"):
        node.expand(state)
    assert dace.Config.get("compiler", "lineinfo") == "inspect"


def _numpy_scan() -> dace.SDFG:
    @dace.program
    def lineinfo_scan(a: dace.float64[N, K], out: dace.float64[N, K]):
        for i in dace.map[0:N]:
            acc = 0.0
            for k in range(K):
                acc = acc * 0.5 + a[i, k]
                out[i, k] = acc

    with no_stack_lineinfo():
        return lineinfo_scan.to_sdfg()


def test_optimize_and_transformations_add_nodes_without_walking_the_stack(walking_forbidden):
    sdfg = _numpy_scan()
    report = sdfg_scan.optimize(sdfg)
    assert report.nodes and dace.Config.get("compiler", "lineinfo") == "inspect"
    sdfg = _numpy_scan()
    assert sdfg.apply_transformations_repeated(LiftScans, validate=False) == 1
    assert dace.Config.get("compiler", "lineinfo") == "inspect"


def test_nested_and_concurrent_uses_give_the_setting_back():
    """Nested uses restore in order; DaCe's configuration is per thread, so a context open in another thread
    changes nothing here."""
    import threading

    with dace.config.set_temporary("compiler", "lineinfo", value="inspect"):
        inside, release = threading.Event(), threading.Event()

        def other():
            with no_stack_lineinfo():
                inside.set()
                release.wait(10)

        t = threading.Thread(target=other)
        t.start()
        assert inside.wait(10)
        assert dace.Config.get("compiler", "lineinfo") == "inspect"
        with no_stack_lineinfo():
            with no_stack_lineinfo():
                assert dace.Config.get("compiler", "lineinfo") == "none"
            assert dace.Config.get("compiler", "lineinfo") == "none"
            release.set()
            t.join(10)
            assert dace.Config.get("compiler", "lineinfo") == "none"
        assert dace.Config.get("compiler", "lineinfo") == "inspect"


def test_every_registered_transformation_applies_without_the_walk():
    from sdfg_scan import registry

    unwrapped = [name for name, cls in registry.transformations().items()
                 if not getattr(cls.apply, "_sdfg_scan_no_lineinfo", False)]
    assert not unwrapped, f"transformations whose apply walks the stack: {unwrapped}"
