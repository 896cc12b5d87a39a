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


def _cached_keys(sdfg: dace.SDFG) -> list[str]:
    """The cache keys in the code DaCe generates for ``sdfg`` (one per array taken from the buffer cache)."""
    code = "\n".join(c.clean_code for c in sdfg.generate_code())
    return re.findall(r'__sdfg_scan_buffers\.get\("([^"]+)"', code)


def test_grow_reallocates_where_a_call_outgrows_the_arrays():
    """``"grow"``: legal for any sizes. Called small, larger (the buffers are allocated again), then smaller
    (the front of the larger buffers): every call bitwise the program's values. It changes no lifetime and adds
    nothing to the graph; the code takes both temporaries from the cache."""
    sdfg = _program(False)
    sdfg.name = "persistent_grow"
    states = len(sdfg.states())
    report = sdfg_scan.optimize(sdfg, persistent_transients="grow")
    assert report.transients_persistent >= 2
    assert all(lt != dace.AllocationLifetime.Persistent for lt in _lifetimes(sdfg).values())
    assert len(sdfg.states()) <= states
    assert len(_cached_keys(sdfg)) >= 2
    compiled = sdfg.compile()
    rng = np.random.default_rng(5)
    for n, k in ((3, 2), (7, 5), (40, 9), (2, 1), (40, 9), (0, 4), (11, 6)):
        x = rng.standard_normal((n, k))
        y = np.zeros((n, k))
        compiled(x=x.copy(), y=y, N=n, K=k)
        assert np.array_equal(y, np.cumsum(x * 2.0 + x, axis=1)), (n, k)


def test_grow_is_refused_for_the_gpu_and_marks_once():
    """``"grow"`` is refused for the GPU, naming the option and the target, and leaves the SDFG as it was; a
    second ``"grow"`` pass adds no second mark; an SDFG without the mark gets DaCe's own allocations."""
    from sdfg_scan.persistent import MARK, is_marked

    sdfg = _program(False)
    before = sdfg.to_json()
    with pytest.raises(ValueError, match="persistent_transients='grow'.*target='cpu'"):
        sdfg_scan.optimize(sdfg, target="gpu", persistent_transients="grow")
    assert sdfg.to_json() == before
    assert not is_marked(sdfg) and _cached_keys(sdfg) == []
    first = make_transients_persistent(sdfg, "grow")
    assert first and make_transients_persistent(sdfg, "grow") == first
    assert sdfg.global_code["frame"].as_string.count(MARK.strip()) == 1


def test_default_is_grow_on_the_cpu_and_off_on_the_gpu():
    """Since stop 48 ``optimize`` allocates the transients once by default on the CPU (``"grow"``: legal for any
    sizes) and leaves them per call for the GPU; ``False`` keeps them per call on the CPU."""
    from sdfg_scan.persistent import is_marked

    sdfg = _program(False)
    report = sdfg_scan.optimize(sdfg)
    assert report.transients_persistent >= 2 and is_marked(sdfg)
    for kw in ({"persistent_transients": False}, {"target": "gpu"}):
        sdfg = _program(False)
        assert sdfg_scan.optimize(sdfg, **kw).transients_persistent == 0, kw
        assert all(lt != dace.AllocationLifetime.Persistent for lt in _lifetimes(sdfg).values()), kw
        assert not is_marked(sdfg), kw


def test_cli_default_and_off(tmp_path, capsys):
    from sdfg_scan.cli import main
    from sdfg_scan.persistent import is_marked

    src = tmp_path / "p.sdfg"
    _program(False).save(str(src))
    for extra, persistent in (([], True), (["--persistent-transients", "off"], False)):
        dst = tmp_path / f"o{len(extra)}.sdfg"
        assert main(["optimize", str(src), "-o", str(dst), *extra]) == 0
        out = capsys.readouterr().out
        assert bool(re.search(r"transients made persistent [1-9]", out)) == persistent, out
        back = dace.SDFG.from_file(str(dst))
        assert is_marked(back) == persistent   # (the mark is saved with the SDFG)
        assert bool(_cached_keys(back)) == persistent


def _grow_calls(compiled, outputs, sizes=((3, 2), (9, 6), (2, 1), (12, 7))):
    rng = np.random.default_rng(7)
    for n, k in sizes:
        x = rng.standard_normal((n, k))
        outs = {o: np.zeros((n, k)) for o in outputs}
        compiled(x=x.copy(), **outs, N=n, K=k)
        ref = np.cumsum(x * 2.0 + x, axis=1)
        for o, y in outs.items():
            assert np.array_equal(y, ref), (o, n, k)


def _nest(inner: dace.SDFG, name: str, outputs=("y",)) -> dace.SDFG:
    """``inner`` (one input ``x``, one output ``y``) nested in a new SDFG once per output."""
    import copy

    outer = dace.SDFG(name)
    for arr in ("x", *outputs):
        outer.add_array(arr, [N, K], dace.float64)
    st = outer.add_state()
    for out in outputs:
        nn = st.add_nested_sdfg(copy.deepcopy(inner), {"x"}, {"y"}, {"N": "N", "K": "K"})
        st.add_edge(st.add_read("x"), None, nn, "x", dace.Memlet("x[0:N, 0:K]"))
        st.add_edge(nn, "y", st.add_write(out), None, dace.Memlet(f"{out}[0:N, 0:K]"))
    return outer


def test_an_sdfg_optimized_alone_then_nested_grows_under_keys_of_its_own():
    """An SDFG ``optimize``d on its own (``"grow"`` by default) and nested in another one afterwards, twice (two
    copies of one program): each copy's arrays come from the cache under keys of their own, and every call,
    growing, shrinking and growing again, is bitwise the program's values."""
    inner = _program(False)
    inner.name = "persistent_nested_inner"
    assert sdfg_scan.optimize(inner).transients_persistent >= 2
    outer = _nest(inner, "persistent_nested_outer", ("y", "z"))
    keys = _cached_keys(outer)
    assert len(keys) == len(set(keys)) >= 2 and all(not k.endswith("@0") for k in keys)
    _grow_calls(outer.compile(), ("y", "z"))


def test_grow_survives_simplify_and_inlining():
    """The mark is all ``"grow"`` adds: ``simplify`` after ``optimize`` (which removes or renames arrays), and an
    optimised SDFG nested in another that ``simplify`` then inlines, compile and give the program's values."""
    sdfg = _program(False)
    sdfg.name = "persistent_simplified"
    sdfg_scan.optimize(sdfg)
    sdfg.simplify()
    assert _cached_keys(sdfg)
    _grow_calls(sdfg.compile(), ("y",))

    inner = _program(False)
    inner.name = "persistent_inlined_inner"
    sdfg_scan.optimize(inner)
    outer = _nest(inner, "persistent_inlined_outer")
    outer.simplify()
    assert not any(isinstance(n, dace.nodes.NestedSDFG) for n, _ in outer.all_nodes_recursive())
    _grow_calls(outer.compile(), ("y",))


def test_grow_inside_a_parallel_map_keeps_per_call_arrays():
    """An optimised SDFG nested in a parallel map runs on several threads at once: its arrays keep DaCe's own
    per-call allocation (no cache key), and every map iteration gets its own values."""
    import copy

    M = dace.symbol("M")
    inner = _program(False)
    inner.name = "persistent_in_map_inner"
    sdfg_scan.optimize(inner)
    outer = dace.SDFG("persistent_in_map_outer")
    outer.add_array("x", [M, N, K], dace.float64)
    outer.add_array("y", [M, N, K], dace.float64)
    st = outer.add_state()
    me, mx = st.add_map("m", {"i": "0:M"}, schedule=dace.ScheduleType.CPU_Multicore)
    nn = st.add_nested_sdfg(copy.deepcopy(inner), {"x"}, {"y"}, {"N": "N", "K": "K"})
    st.add_memlet_path(st.add_read("x"), me, nn, dst_conn="x", memlet=dace.Memlet("x[i, 0:N, 0:K]"))
    st.add_memlet_path(nn, mx, st.add_write("y"), src_conn="y", memlet=dace.Memlet("y[i, 0:N, 0:K]"))
    assert _cached_keys(outer) == []
    compiled = outer.compile()
    rng = np.random.default_rng(11)
    for n, k in ((3, 2), (40, 9), (2, 1), (64, 33)):
        x = rng.standard_normal((16, n, k))
        y = np.zeros_like(x)
        compiled(x=x.copy(), y=y, N=n, K=k, M=16)
        assert np.array_equal(y, np.cumsum(x * 2.0 + x, axis=2)), (n, k)


def test_large_cached_buffers_are_aligned_and_advised_for_huge_pages(tmp_path):
    """The cache's C++ (``sdfg_scan_buffers.h``) on its own: a buffer of 4 MiB or more starts on a 2 MiB
    boundary and, on Linux, its mapping carries the huge-page advice (``hg`` in ``/proc/self/smaps``'s
    ``VmFlags``); a small one keeps the alignment asked for; a larger call reallocates, a smaller one, or
    one within the 2 MiB-rounded size, reuses."""
    import ctypes
    import sys

    from cxx_harness import build

    from sdfg_scan.persistent import BUFFERS_HEADER

    src = tmp_path / "buffers.cpp"
    src.write_text(f'#include "{BUFFERS_HEADER}"\n#include <cstdint>\n'
                   "static __sdfg_scan_buffers_t cache;\n"
                   'extern "C" std::uintptr_t get(const char* key, unsigned long long bytes) {\n'
                   "    return reinterpret_cast<std::uintptr_t>(cache.get(key, bytes, 64)); }\n")
    lib, _ = build(src, "buffers", [])
    lib.get.restype = ctypes.c_size_t
    lib.get.argtypes = [ctypes.c_char_p, ctypes.c_ulonglong]
    big = lib.get(b"a", 5 << 20)
    assert big % (2 << 20) == 0
    assert lib.get(b"a", 3 << 20) == big   # a smaller call uses the front of the buffer
    assert lib.get(b"a", 6 << 20) == big   # so does a larger one within the 2 MiB-rounded capacity
    small = lib.get(b"b", 1000)
    assert small % 64 == 0
    if sys.platform.startswith("linux"):
        flags, inside = None, False
        for block in open("/proc/self/smaps").read().split("\n"):
            if re.match(r"^[0-9a-f]+-[0-9a-f]+ ", block):
                lo, hi = (int(v, 16) for v in block.split()[0].split("-"))
                inside = lo <= big < hi
            elif block.startswith("VmFlags:") and inside:
                flags = block.split()[1:]
                break
        assert flags is not None and "hg" in flags, flags
    grown = lib.get(b"a", 9 << 20)
    assert grown % (2 << 20) == 0
