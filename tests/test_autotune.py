"""sdfg_scan.autotune: times every eligible expansion, pins the fastest, and the persistent cache.

One autotune run (a cell-contiguous CumulativeScan, 64 x 5: two exact expansions, two compiles) is
shared by the module; the cache lives in a temporary ``SDFG_SCAN_CACHE``.
"""

from __future__ import annotations

import copy
import json

import dace
import numpy as np
import pytest

import sdfg_scan
from sdfg_scan import tuning_cache
from sdfg_scan.autotune import argument_symbols
from sdfg_scan.harness import numpy_array, one_node_sdfg
from sdfg_scan.nodes import CumulativeScan

N, K = dace.symbol("N"), dace.symbol("K")
F64 = dace.float64


def cumsum_sdfg(layout: str, shape=(N, K), dtype=F64) -> dace.SDFG:
    node = CumulativeScan("cumsum", op="sum", axis=1)
    return one_node_sdfg(f"tune_cumsum_{layout}", node, {"_in": (list(shape), dtype, True)},
                         {"_out": (list(shape), dtype, True)}, 1, layout)


def only_node(sdfg: dace.SDFG):
    (found,) = [(n, s) for n, s in sdfg.all_nodes_recursive() if isinstance(n, CumulativeScan)]
    return found


@pytest.fixture(scope="module")
def tuned(tmp_path_factory):
    """The autotuned SDFG, an untouched copy of it, the choices, the stderr lines and the caller's arrays."""
    cache = tmp_path_factory.mktemp("tuning_cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SDFG_SCAN_CACHE", str(cache))
        sdfg = cumsum_sdfg("cell")
        fresh = copy.deepcopy(sdfg)
        x = numpy_array(np.random.default_rng(0).random((64, 5)), 1, "cell")
        y = numpy_array(np.zeros((64, 5)), 1, "cell")
        lines: list[str] = []

        class Progress:
            def write(self, text):
                lines.extend(t for t in text.splitlines() if t)

        choices = sdfg_scan.autotune(sdfg, {"_in": x, "_out": y}, repeats=2, progress=Progress())
        yield {"sdfg": sdfg, "fresh": fresh, "choices": choices, "lines": lines, "cache": cache, "y": y}


def test_winner_pinned_and_returned(tuned):
    (choice,) = tuned["choices"]
    node, _ = only_node(tuned["sdfg"])
    assert choice.cached and choice.implementation in ("sequential", "blocked")
    assert node.implementation == node.selected == choice.implementation
    assert "autotuned" in node.selection_reason and choice.cost > 0


def test_cache_file_written_with_times(tuned):
    path = tuned["cache"] / "autotune.json"
    assert path.is_file()
    (entry,) = json.loads(path.read_text()).values()
    assert entry["implementation"] == tuned["choices"][0].implementation
    assert entry["sizes"] == {"N": 64, "K": 5}
    assert set(entry["times"]) == {"sequential", "blocked"}


def test_replay_expansion_never_timed_under_exact(tuned):
    """parallel_prefix is 'replay': below the floor 'exact', so it is neither compiled nor timed."""
    (entry,) = json.loads((tuned["cache"] / "autotune.json").read_text()).values()
    assert "parallel_prefix" not in entry["times"]
    assert len(tuned["lines"]) == 2 and not any("parallel_prefix" in line for line in tuned["lines"])


def test_caller_arrays_untouched(tuned):
    assert not tuned["y"].any()


def test_select_on_fresh_copy_hits_cache(tuned, monkeypatch):
    monkeypatch.setenv("SDFG_SCAN_CACHE", str(tuned["cache"]))
    (choice,) = sdfg_scan.select_expansions(copy.deepcopy(tuned["fresh"]), "cpu", "exact")
    assert choice.cached and choice.implementation == tuned["choices"][0].implementation
    assert "autotuned" in choice.reason and "cache" in choice.reason


@pytest.mark.parametrize("other", ["k-layout", "shape", "dtype", "target"])
def test_cache_misses(tuned, monkeypatch, other):
    """Other strides, another shape, another dtype or another target are other keys: the cost model chooses."""
    monkeypatch.setenv("SDFG_SCAN_CACHE", str(tuned["cache"]))
    if other == "target":
        node, state = only_node(tuned["fresh"])
        assert tuning_cache.lookup(tuning_cache.node_key(node, state, "gpu")) is None
        assert tuning_cache.lookup(tuning_cache.node_key(node, state, "cpu")) is not None
        return
    sdfg = {"k-layout": lambda: cumsum_sdfg("k"), "shape": lambda: cumsum_sdfg("cell", shape=(64, 5)),
            "dtype": lambda: cumsum_sdfg("cell", dtype=dace.float32)}[other]()
    (choice,) = sdfg_scan.select_expansions(sdfg, "cpu", "exact")
    assert not choice.cached and "estimated cost" in choice.reason


def test_empty_cache_dir_from_env(tmp_path, monkeypatch):
    monkeypatch.setenv("SDFG_SCAN_CACHE", str(tmp_path / "elsewhere"))
    assert tuning_cache.cache_file() == tmp_path / "elsewhere" / "autotune.json"
    (choice,) = sdfg_scan.select_expansions(cumsum_sdfg("cell"), "cpu", "exact")
    assert not choice.cached


def test_argument_symbols_from_shapes_and_scalars():
    sdfg = cumsum_sdfg("cell")
    x = np.zeros((7, 3))
    assert argument_symbols(sdfg, {"_in": x, "_out": x}) == {"N": 7, "K": 3}
    assert argument_symbols(sdfg, {"_in": x, "N": 7}) == {"N": 7, "K": 3}


@pytest.mark.parametrize("kwargs, match", [({"reproducibility": "bitwise"}, "reproducibility must be one of"),
                                           ({"target": "tpu"}, "target must be one of"),
                                           ({"repeats": 0}, "repeats must be >= 1")])
def test_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=f"sdfg_scan.autotune: {match}"):
        sdfg_scan.autotune(cumsum_sdfg("cell"), {}, **kwargs)


def test_wrong_target_names_the_node():
    with pytest.raises(ValueError, match="cumsum.*autotune for target 'gpu'"):
        sdfg_scan.autotune(cumsum_sdfg("cell"), {"_in": np.zeros((4, 3)), "_out": np.zeros((4, 3))}, target="gpu")


def _linrec_body(c, x, k):
    (y,) = c
    return (x[0] * y + x[1],), ()


def _scan_program(name: str) -> dace.SDFG:
    def prog(a, b, y0, out):
        out[:] = sdfg_scan.scan(_linrec_body, (y0,), (a, b), axis=1)

    prog.__annotations__ = dict(a=F64[N, K], b=F64[N, K], y0=F64[N], out=F64[N, K])
    sdfg = dace.program(prog).to_sdfg(simplify=True)
    sdfg.name = name
    return sdfg


def test_scan_key_ignores_guids():
    """A Scan's key hashes its body without DaCe's random guids: the same program built twice (as in two
    processes) has one key, so a later run finds the autotuned winner."""
    keys = []
    for name in ("tune_scan_a", "tune_scan_b"):
        sdfg = _scan_program(name)
        (node, state), = [(n, s) for n, s in sdfg.all_nodes_recursive() if isinstance(n, sdfg_scan.Scan)]
        keys.append(tuning_cache.node_key(node, state, "cpu"))
    assert keys[0] == keys[1]


@pytest.mark.parametrize("text", ["[1, 2]", '"x"', "{KEY: 5}", '{KEY: {"times": {}}}',
                                  '{KEY: {"implementation": "blocked", "times": [1]}}',
                                  '{KEY: {"implementation": "blocked", "times": {"blocked": "fast"}}}'],
                         ids=["list", "string", "entry-number", "no-implementation", "times-list", "times-text"])
def test_a_corrupt_cache_file_is_ignored(tmp_path, monkeypatch, text):
    """A cache file of another form (JSON, but not the cache's: edited by hand, another version) is a miss:
    the cost model chooses, no traceback; the next autotune overwrites it."""
    monkeypatch.setenv("SDFG_SCAN_CACHE", str(tmp_path))
    sdfg = cumsum_sdfg("cell")
    node, state = only_node(sdfg)
    tuning_cache.cache_file().parent.mkdir(parents=True, exist_ok=True)
    tuning_cache.cache_file().write_text(text.replace("KEY", json.dumps(tuning_cache.node_key(node, state, "cpu"))))
    (choice,) = sdfg_scan.select_expansions(sdfg, "cpu", "exact")
    assert not choice.cached and "estimated cost" in choice.reason
    tuning_cache.store("k", {"implementation": "blocked", "times": {"blocked": 1e-3}})
    assert list(tuning_cache.load()) == ["k"]


def test_the_cache_entry_records_the_node_floor(tmp_path, monkeypatch):
    """A node whose own ``reproducibility`` is ``exact``, tuned at ``replay``, is tuned at ``exact`` (its
    floor): the entry says so, and a later selection at ``replay`` (floor ``exact`` again) finds it.
    (Builds and timings stubbed: no compiler.)"""
    import sys

    at = sys.modules["sdfg_scan.autotune"]   # the module (``sdfg_scan.autotune`` is the function)
    monkeypatch.setenv("SDFG_SCAN_CACHE", str(tmp_path))
    monkeypatch.setattr(at._Builds, "call", lambda self, config: lambda: None)
    monkeypatch.setattr(at, "time_variants", lambda calls, repeats, timer: {n: 1e-3 * (n != "sequential")
                                                                              + 1e-4 for n in calls})
    sdfg = cumsum_sdfg("cell")
    node, state = only_node(sdfg)
    node.reproducibility = "exact"
    (tuned,) = sdfg_scan.autotune(sdfg, {"_in": np.zeros((8, 3)), "_out": np.zeros((8, 3))}, reproducibility="replay",
                                  progress=None)
    assert tuned.implementation == "sequential" and tuned.floor == "exact"
    assert tuning_cache.lookup(tuning_cache.node_key(node, state, "cpu"))["reproducibility"] == "exact"
    fresh = cumsum_sdfg("cell")
    only_node(fresh)[0].reproducibility = "exact"
    (choice,) = sdfg_scan.select_expansions(fresh, "cpu", "replay")
    assert choice.cached and choice.implementation == "sequential"


def test_a_cache_that_cannot_be_written_is_one_warning(tmp_path, monkeypatch):
    """``SDFG_SCAN_CACHE`` below a regular file: the timed winner is still pinned and returned; one warning
    names the cache file. (Builds and timings stubbed: no compiler.)"""
    import sys

    at = sys.modules["sdfg_scan.autotune"]
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    monkeypatch.setenv("SDFG_SCAN_CACHE", str(blocker / "cache"))
    monkeypatch.setattr(at._Builds, "call", lambda self, config: lambda: None)
    monkeypatch.setattr(at, "time_variants", lambda calls, repeats, timer: {n: 1e-3 * (n != "blocked") + 1e-4
                                                                              for n in calls})
    sdfg = cumsum_sdfg("cell")
    with pytest.warns(UserWarning, match=r"cannot write the tuning cache '.*a_file/cache/autotune.json'") as caught:
        (tuned,) = sdfg_scan.autotune(sdfg, {"_in": np.zeros((8, 3)), "_out": np.zeros((8, 3))}, progress=None)
    assert len(caught) == 1 and tuned.implementation == only_node(sdfg)[0].implementation == "blocked"


def test_a_node_tuned_at_two_classes_keeps_both_winners(tmp_path, monkeypatch):
    """Tuned at ``exact`` and then at ``replay`` (where ``parallel_prefix`` is eligible and wins), the cache
    holds a winner per class: the second run replaced the first. (Builds and timings stubbed.)"""
    import sys

    at = sys.modules["sdfg_scan.autotune"]
    monkeypatch.setenv("SDFG_SCAN_CACHE", str(tmp_path))
    monkeypatch.setattr(at._Builds, "call", lambda self, config: lambda: None)
    monkeypatch.setattr(at, "time_variants", lambda calls, repeats, timer: {
        n: 1e-4 if n == ("parallel_prefix" if "parallel_prefix" in calls else "sequential") else 1e-3 for n in calls})
    args = {"_in": np.zeros((8, 3)), "_out": np.zeros((8, 3))}
    for klass, want in (("exact", "sequential"), ("replay", "parallel_prefix")):
        (tuned,) = sdfg_scan.autotune(cumsum_sdfg("cell"), args, reproducibility=klass, progress=None)
        assert tuned.implementation == want
    for klass, want in (("exact", "sequential"), ("replay", "parallel_prefix")):
        (choice,) = sdfg_scan.select_expansions(cumsum_sdfg("cell"), "cpu", klass)
        assert choice.cached and choice.implementation == want, (klass, choice)
