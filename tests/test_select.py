"""The selection layer: one chooser, reasons, floors, pins, targets and the compiler-flag contract."""

from __future__ import annotations

import dace
import numpy as np
import pytest

import sdfg_scan
from sdfg_scan.choice import choose
from sdfg_scan.context import context_of
from sdfg_scan.harness import one_node_sdfg
from sdfg_scan.nodes import ColumnReduce, CumulativeScan

N, K = dace.symbol("N"), dace.symbol("K")
F = ([N, K], dace.float64, True)


def _reduce(layout: str, op: str = "sum", implementation: str = "auto") -> tuple[dace.SDFG, ColumnReduce]:
    node = ColumnReduce("red", op=op, axis=1)
    node.implementation = implementation
    sdfg = one_node_sdfg(f"select_{layout}_{op}", node, {"_in": F}, {"_out": ([N], dace.float64, False)}, 1, layout)
    return sdfg, node


def test_every_choice_says_why_and_names_the_runner_up():
    sdfg, node = _reduce("cell")
    (choice,) = sdfg_scan.select_expansions(sdfg, target="cpu", reproducibility="exact")
    assert choice.implementation == node.implementation == node.selected == "blocked"
    assert choice.reason.startswith("blocked: lowest estimated cost") and "runner-up" in choice.reason
    assert node.selection_reason == choice.reason and choice.floor == "exact" and choice.reproducibility == "exact"


def test_a_pin_below_the_floor_is_refused_with_the_node_the_implementation_and_the_floor():
    sdfg, node = _reduce("k", implementation="lanes")   # lanes is replay
    with pytest.raises(ValueError, match=r"sdfg_scan.ColumnReduce 'red': the pinned implementation 'lanes' is "
                                         r"replay, below the floor 'exact'"):
        sdfg_scan.select_expansions(sdfg, reproducibility="exact")
    (choice,) = sdfg_scan.select_expansions(sdfg, reproducibility="replay")   # allowed at replay: kept
    assert choice.implementation == "lanes" and "pinned" in choice.reason


def test_a_node_floor_is_never_weakened_by_the_request():
    sdfg, node = _reduce("k")
    node.reproducibility = "exact"
    (choice,) = sdfg_scan.select_expansions(sdfg, reproducibility="replay")
    assert choice.floor == "exact" and choice.implementation != "lanes"
    node.reproducibility = ""
    node.implementation = "auto"
    (choice,) = sdfg_scan.select_expansions(sdfg, reproducibility="replay")
    assert choice.implementation == "lanes"   # K-contiguous float sum: the vector path


def test_reselection_replaces_earlier_choices_but_keeps_pins():
    sdfg, node = _reduce("cell")
    sdfg_scan.select_expansions(sdfg)
    assert node.implementation == "blocked"
    sdfg_scan.select_expansions(sdfg, reproducibility="replay")   # an earlier selection is no pin
    assert node.selected == node.implementation
    node.implementation = "sequential"                           # a user pin
    (choice,) = sdfg_scan.select_expansions(sdfg)
    assert choice.implementation == "sequential" and "pinned" in choice.reason


def test_a_target_the_node_does_not_run_on_is_an_error():
    sdfg, node = _reduce("cell")
    with pytest.raises(ValueError, match=r"'red': selection for target 'gpu', but the node runs on the CPU"):
        sdfg_scan.select_expansions(sdfg, target="gpu")
    with pytest.raises(ValueError, match="target must be one of"):
        sdfg_scan.select_expansions(sdfg, target="tpu")


def test_a_pin_for_another_target_names_the_implementations_of_this_one():
    """A CPU-only pin on a GPU node: a weaker class would not help, so the message names the GPU's
    implementations that fit (target, floor, node); a pin the node itself rules out suggests only unpinning."""
    sdfg, node = _reduce("cell", implementation="blocked")
    sdfg.apply_gpu_transformations()
    with pytest.raises(ValueError) as refused:
        sdfg_scan.select_expansions(sdfg, target="gpu")
    assert str(refused.value).endswith("unpin it (implementation='auto') or pin one for the GPU (sequential, tree)")
    sdfg, node = _reduce("k", op="sum", implementation="kvector")   # min/max/argmin/argmax only
    with pytest.raises(ValueError) as refused:
        sdfg_scan.select_expansions(sdfg)
    assert "weaker class" not in str(refused.value) and str(refused.value).endswith("(implementation='auto')")


def test_the_layout_is_computed_once_from_the_operands():
    for layout, want in (("cell", "cell"), ("k", "k")):
        node = CumulativeScan("cs", axis=1)
        sdfg = one_node_sdfg(f"layout_{layout}", node, {"_in": F}, {"_out": F}, 1, layout)
        ctx = context_of(node, sdfg.start_state)
        assert ctx.target == "cpu" and ctx.layout.contiguity == want and ctx.layout.axis == 1
        assert ctx.layout.cell_axis == 0 and str(ctx.layout.levels) == "K"


def test_after_the_gpu_transformation_the_node_is_chosen_for_the_gpu():
    sdfg, node = _reduce("cell", op="sum")
    sdfg.apply_gpu_transformations()
    (n, st) = next((n, st) for n, st in sdfg.all_nodes_recursive() if isinstance(n, ColumnReduce))
    assert choose(n, st).target == "gpu"


def test_compile_flags_state_the_contract():
    assert sdfg_scan.compile_flags("exact") == ["-ffp-contract=off", "-fno-reciprocal-math", "-fsigned-zeros",
                                                 "-fno-fast-math", "-fno-math-errno", "-fno-trapping-math"]
    assert sdfg_scan.compile_flags("exact", "gpu") == ["--fmad=false", "-prec-div=true", "-prec-sqrt=true"]
    assert sdfg_scan.compile_flags("replay") == [] == sdfg_scan.compile_flags("approx", "gpu")
    with pytest.raises(ValueError, match="reproducibility must be one of"):
        sdfg_scan.compile_flags("bitwise")


def test_optimize_pins_the_strict_flags_even_without_a_scan():
    """An SDFG with no scan keeps no sdfg_scan node, but ``exact`` still compiles it IEEE-strict."""
    sdfg = dace.SDFG("no_scan_flags")
    sdfg.add_array("x", [4], dace.float64)
    st = sdfg.add_state()
    t = st.add_tasklet("t", {"a"}, {"b"}, "b = a * 2.0 + 1.0")
    st.add_edge(st.add_read("x"), None, t, "a", dace.Memlet("x[0]"))
    st.add_edge(t, "b", st.add_write("x"), None, dace.Memlet("x[1]"))
    plain = sdfg.to_json()
    report = sdfg_scan.optimize(sdfg, reproducibility="exact")
    n = len(sdfg_scan.compile_flags("exact"))
    assert report.flags[:n] == sdfg_scan.compile_flags("exact") and "compiler flags: -ffp-contract=off" in report.table()
    assert any(env.endswith("ExactArithmetic") for env in t.environments)
    replay = sdfg_scan.optimize(dace.SDFG.from_json(plain), reproducibility="replay")
    assert replay.flags == [] and "compiler flags: the program's own (none added)" in replay.table()
    # a program pinned strict once keeps its flags (its code nodes carry the environment): the report says so
    again = sdfg_scan.optimize(dace.SDFG.from_json(sdfg.to_json()), reproducibility="replay")
    assert again.flags[:n] == sdfg_scan.compile_flags("exact") and again.flags_from == {
        "ExactArithmetic": ["the program's code nodes"]}
    x = np.arange(4.0)
    sdfg(x=x)
    assert x[1] == 1.0


def test_optimize_for_the_gpu_without_the_gpu_transformation():
    """gt4py's hooks (gt4py lowers a GPU program with its fields in device memory and applies its own
    GPU transformation later): ``gpu_transform=False`` chooses GPU expansions and transforms nothing."""
    sdfg, _ = _reduce("cell", op="sum")
    for d in sdfg.arrays.values():
        d.storage = dace.StorageType.GPU_Global
    states = len(list(sdfg.all_states()))
    report = sdfg_scan.optimize(sdfg, target="gpu", reproducibility="exact", gpu_transform=False)
    assert len(list(sdfg.all_states())) == states   # no copy-in/copy-out states added
    assert not any(isinstance(n, dace.nodes.MapEntry) and n.map.schedule == dace.ScheduleType.GPU_Device
                   for n, _ in sdfg.all_nodes_recursive())
    assert report.nodes and all(c.target == "gpu" for c in report.nodes)
    # gt4py lowers GPU programs with host-memory transients and moves them at its own GPU transformation:
    # before it, a node is chosen for where it runs (the CPU), no error; gt4py's last hook chooses again
    host, _ = _reduce("cell", op="sum")
    report = sdfg_scan.optimize(host, target="gpu", reproducibility="exact", gpu_transform=False)
    assert report.nodes and all(c.target == "cpu" for c in report.nodes)


def _dace_environment_flags(sdfg: dace.SDFG) -> tuple[set[str], str]:
    """The host flags and the ``CMAKE_CUDA_FLAGS`` value that DaCe's build of ``sdfg`` takes from library
    environments: its own code generation (expansions included) and flag collection, without a compiler."""
    import copy
    import shlex

    from dace.codegen import codegen, compiler

    objs = codegen.generate_code(copy.deepcopy(sdfg))
    envs = dace.library.get_environments_and_dependencies(set().union(*(o.environments for o in objs)))
    defines = dict(d.removeprefix("-D").split("=", 1) for d in compiler.get_environment_flags(envs)[0])
    cuda = shlex.split(defines["DACE_ENV_VAR_VALUES"])[0] if "CUDA" in defines["DACE_ENV_VAR_KEYS"] else ""
    return set(shlex.split(defines["DACE_ENV_COMPILE_FLAGS"])[0].split()), cuda


@pytest.mark.parametrize("reproducibility", ["exact", "replay", "approx"])
def test_the_report_names_the_flags_the_build_really_gets(reproducibility):
    """Under replay/approx an ``exact`` expansion still brings ``ExactArithmetic``, whose flags DaCe applies
    to the whole program: the report says so (the flags of every environment the build uses, and
    where they come from); a CPU build lists no nvcc flags."""
    import icon4py_fixtures as fx

    form = "solve_tridiagonal_matrix_for_w_forward_sweep.opt"
    fx.require(form)
    sdfg = fx.load(form)
    report = sdfg_scan.optimize(sdfg, target="cpu", reproducibility=reproducibility)
    host, _ = _dace_environment_flags(sdfg)
    assert set(report.flags) == host and set(sdfg_scan.compile_flags("exact")) <= host
    assert not set(report.flags) & set(sdfg_scan.compile_flags("exact", "gpu"))
    line = report.flags_line()
    # (DaCe orders the environments by a set of classes: either may come first; both orders end in the same
    # state, see environments.STRICT_HOST_FLAGS)
    assert line in report.table() and line.startswith("compiler flags: -f")
    assert "-ffp-contract=off" in line
    assert "Scan 'scan_0' (" in line and "ExactArithmetic from " in line and "whole program" in line


def test_the_report_lists_nvcc_flags_only_for_a_program_with_cuda_code():
    sdfg, _ = _reduce("cell")
    report = sdfg_scan.optimize(sdfg, target="gpu", reproducibility="exact")
    assert set(sdfg_scan.compile_flags("exact", "gpu")) <= set(report.flags)
    _, cuda = _dace_environment_flags(sdfg)
    assert all(f in cuda for f in sdfg_scan.compile_flags("exact", "gpu"))
    cpu = sdfg_scan.optimize(_reduce("cell")[0], target="cpu", reproducibility="exact")
    assert not set(cpu.flags) & set(sdfg_scan.compile_flags("exact", "gpu"))
