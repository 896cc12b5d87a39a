"""Save/load in a fresh process keeps our nodes; the registry is consistent with the tests."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import dace

from sdfg_scan import registry
from sdfg_scan.expansions import REPRODUCIBILITY, TARGETS
from sdfg_scan.harness import one_node_sdfg
from sdfg_scan.nodes import AssociativeScan, CumulativeScan, LinearRecurrence

N, K = dace.symbol("N"), dace.symbol("K")
TESTS = Path(__file__).resolve().parent

_LOAD = """
import json, sys
import dace
sdfg = dace.SDFG.from_file(sys.argv[1])
out = []
for node, _ in sdfg.all_nodes_recursive():
    if isinstance(node, dace.nodes.LibraryNode):
        out.append({"class": type(node).__module__ + "." + type(node).__name__,
                    "implementation": node.implementation,
                    "props": {k: str(getattr(node, k, None)) for k in sys.argv[2].split(",")}})
print(json.dumps(out))
"""


def test_save_load_in_fresh_process(tmp_path):
    f = ([N, K], dace.float64, True)
    node = CumulativeScan("cs", op="max", axis=0, reverse=True, exclusive=True)
    node.implementation = "blocked"
    node.block_size = 512
    sdfg = one_node_sdfg("roundtrip_cs", node, {"_in": f}, {"_out": f}, 0, "cell")
    lr = LinearRecurrence("lr", axis=1, reverse=True, has_init=True, init_value=0.0)
    st = sdfg.start_state
    st.add_node(lr)
    sdfg.add_array("init", [N], dace.float64)
    sdfg.add_array("y", [N, K], dace.float64)
    st.add_edge(st.add_read("_in"), None, lr, "a", dace.Memlet("_in[0:N, 0:K]"))
    st.add_edge(st.add_read("_in"), None, lr, "b", dace.Memlet("_in[0:N, 0:K]"))
    st.add_edge(st.add_read("init"), None, lr, "init", dace.Memlet("init[0:N]"))
    st.add_edge(lr, "_out", st.add_write("y"), None, dace.Memlet("y[0:N, 0:K]"))
    assoc = AssociativeScan("assoc", ["a0 * b0", "b0 * a1 + b1"], axis=1, reverse=True)
    assoc.implementation, assoc.chunk_size = "parallel_prefix", 77
    st.add_node(assoc)
    for i, out in enumerate(("A", "B")):
        sdfg.add_array(out, [N, K], dace.float64)
        st.add_edge(st.add_read("_in"), None, assoc, f"_in{i}", dace.Memlet("_in[0:N, 0:K]"))
        st.add_edge(assoc, f"_out{i}", st.add_write(out), None, dace.Memlet(f"{out}[0:N, 0:K]"))
    sdfg.validate()
    path = tmp_path / "roundtrip.sdfg"
    sdfg.save(str(path))
    props = "op,axis,reverse,exclusive,block_size,has_init,label,combine,chunk_size"
    res = subprocess.run([sys.executable, "-c", _LOAD, str(path), props],
                         capture_output=True, text=True, check=True)
    nodes = {n["props"]["label"]: n for n in json.loads(res.stdout.strip().splitlines()[-1])}
    assert nodes["cs"]["class"] == "sdfg_scan.nodes.cumulative_scan.CumulativeScan"
    assert nodes["cs"]["implementation"] == "blocked"
    assert nodes["cs"]["props"]["op"] == "max" and nodes["cs"]["props"]["axis"] == "0"
    assert nodes["cs"]["props"]["reverse"] == "True" and nodes["cs"]["props"]["exclusive"] == "True"
    assert nodes["cs"]["props"]["block_size"] == "512"
    assert nodes["lr"]["class"] == "sdfg_scan.nodes.linear_recurrence.LinearRecurrence"
    assert nodes["lr"]["props"]["has_init"] == "True" and nodes["lr"]["props"]["reverse"] == "True"
    assert nodes["assoc"]["class"] == "sdfg_scan.nodes.associative_scan.AssociativeScan"
    assert nodes["assoc"]["implementation"] == "parallel_prefix"
    assert nodes["assoc"]["props"]["combine"] == "['a0 * b0', 'b0 * a1 + b1']"
    assert nodes["assoc"]["props"]["chunk_size"] == "77" and nodes["assoc"]["props"]["reverse"] == "True"
    # the JSON carries the classpath the VS Code viewer's daemon resolves, and the SDFV label
    doc = json.loads(path.read_text())
    text = json.dumps(doc)
    assert "sdfg_scan.nodes.cumulative_scan.CumulativeScan" in text
    assert "CumulativeScan(max, axis=0, exclusive reverse)" in text


def test_every_expansion_declares_targets_and_class():
    entries = registry.expansions()
    assert entries
    for e in entries:
        assert e.targets and set(e.targets) <= set(TARGETS), e
        assert e.reproducibility in REPRODUCIBILITY, e
        assert e.name == e.name.lower() and " " not in e.name, f"implementation names are identifiers: {e.name}"
    for cls in registry.nodes().values():
        assert "auto" in cls.implementations, f"{cls.__name__} has no 'auto' implementation"
        assert cls.__doc__ and "reference" in cls.__doc__.lower(), f"{cls.__name__} docstring lacks a reference loop"


def test_every_registered_expansion_is_exercised_by_a_test():
    """Each (node, implementation) pair is named by some test module that also names the node."""
    sources = {p.name: p.read_text() for p in TESTS.glob("test_*.py")}
    missing = []
    for e in registry.expansions():
        pattern = re.compile(rf"['\"]{re.escape(e.name)}['\"]")
        if not any(e.node.__name__ in src and pattern.search(src) for src in sources.values()):
            missing.append(f"{e.node.__name__}.{e.name}")
    assert not missing, f"expansions without a test: {missing}"


def test_transformation_registry_names_match_files():
    root = TESTS.parent / "transformations"
    for name, cls in registry.transformations().items():
        assert cls.__name__ == name
        snake = re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()
        assert (root / f"{snake}.py").is_file(), f"{name} must live in transformations/{snake}.py"


def test_auto_keeps_the_chosen_expansions_environments():
    f = ([N, K], dace.float64, True)
    for layout, want in (("cell", "blocked"), ("k", "sequential")):
        node = CumulativeScan("cs", axis=1)
        sdfg = one_node_sdfg(f"env_auto_{layout}", node, {"_in": f}, {"_out": f}, 1, layout)
        assert node.implementation in (None, "auto")  # the class default, "auto", applies
        sdfg.expand_library_nodes(recursive=False)
        (nested,) = [n for n in sdfg.start_state.nodes() if isinstance(n, dace.nodes.NestedSDFG)]
        assert nested.sdfg.name == f"cs_{want}"
        assert any(env.endswith("ExactArithmetic") for env in nested.environments), nested.environments
