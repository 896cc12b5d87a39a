"""``sdfg_scan_libm.h``: a program holding an exact expansion (``ExactArithmetic``) or replay math (``VectorMath``)
calls glibc's errno-free ``__pow_finite``/``__exp_finite``/``__log_finite`` for its scalar ``pow``/``exp``/``log``
of doubles. The same implementation without the wrapper: bitwise the plain build, special values included."""

import os
import re
import subprocess

import dace
import numpy as np
import pytest

from sdfg_scan.expansions.environments import ExactArithmetic, libm_finite_version
from sdfg_scan.expansions.scan_blocked import VectorMath

N = dace.symbol("N")


def _math() -> dace.SDFG:
    """One map, one Python tasklet as gt4py writes them (``math.exp`` -> ``dace::math::exp``)."""
    sdfg = dace.SDFG("libm")
    for name in ("a", "e", "p", "x", "lg", "q"):
        sdfg.add_array(name, [N], dace.float64)
    state = sdfg.add_state()
    state.add_mapped_tasklet(
        "math", {"i": "0:N"}, {"ai": dace.Memlet("a[i]"), "ei": dace.Memlet("e[i]")},
        "po = ai ** ei\nxo = math.exp(ei)\nlo = math.log(ai)\nqo = ai ** 3",
        {"po": dace.Memlet("p[i]"), "xo": dace.Memlet("x[i]"), "lo": dace.Memlet("lg[i]"), "qo": dace.Memlet("q[i]")},
        external_edges=True)
    return sdfg


def _with(env) -> dace.SDFG:
    sdfg = _math()
    sdfg.name = f"libm_{env.__name__ if env else 'plain'}"
    if env is not None:
        for n, _ in sdfg.all_nodes_recursive():
            if isinstance(n, dace.nodes.Tasklet):
                n.environments = set(n.environments) | {env.full_class_path()}
    return sdfg


@pytest.fixture(scope="module")
def builds():
    flags = dace.Config.get("compiler", "cpu", "args") + " " + " ".join(ExactArithmetic.cmake_compile_flags)
    with dace.config.set_temporary("compiler", "cpu", "args", value=flags):   # the same IEEE flags for all
        return {name: _with(env).compile() for name, env in
                (("plain", None), ("exact", ExactArithmetic), ("replay", VectorMath))}


def _inputs(n=4096, seed=3):
    rng = np.random.default_rng(seed)
    special = [0.0, -0.0, -2.0, -1.0, 1.0, 2.0, np.inf, -np.inf, np.nan, 5e-324, 2.2e-308, 1e-300, 1e300, 0.5, 3.7e-3]
    a = np.exp(rng.uniform(-40, 10, n))
    e = rng.uniform(-5, 5, n)
    a[:len(special) ** 2] = np.repeat(special, len(special))[:n]
    e[:len(special) ** 2] = np.tile(special + [800.0, -800.0, 3.0, 0.5], len(special))[:len(special) ** 2]
    e[-100:] = rng.uniform(-760, 720, 100)   # exp near overflow and into the subnormal range
    return a, e


def _run(csdfg, a, e):
    out = {k: np.full(a.shape, 7.0) for k in ("p", "x", "lg", "q")}
    with np.errstate(all="ignore"):
        csdfg(a=a.copy(), e=e.copy(), **out, N=a.size)
    return out


@pytest.mark.parametrize("variant", ["exact", "replay"])
def test_bitwise_the_plain_build(builds, variant):
    a, e = _inputs()
    want, got = _run(builds["plain"], a, e), _run(builds[variant], a, e)
    for k in want:
        assert np.array_equal(want[k].view(np.int64), got[k].view(np.int64)), k


def test_the_entry_points_are_called(builds):
    """Where this libm exports them, the exact build imports ``__pow_finite`` & co. (and the plain one does
    not); elsewhere the header declares nothing and both call ``pow``."""
    def imported(csdfg):
        lib = csdfg.filename if hasattr(csdfg, "filename") else csdfg._lib._library_filename
        syms = subprocess.run(["nm", "-D", "--undefined-only", lib], capture_output=True, text=True).stdout
        return set(re.findall(r"(__\w+_finite|\bpow\b|\bexp\b|\blog\b)", syms))

    if libm_finite_version() is None:
        pytest.skip("this libm does not export __pow_finite/__exp_finite/__log_finite: the header is off")
    exact, plain = imported(builds["exact"]), imported(builds["plain"])
    assert {"__pow_finite", "__exp_finite", "__log_finite"} <= exact and "pow" not in exact, exact
    assert not any(s.endswith("_finite") for s in plain) and "pow" in plain, plain


def test_header_is_inert_without_the_flag(tmp_path):
    """Without ``SDFG_SCAN_LIBM_FINITE`` (a libm without the entry points) the header declares nothing."""
    from sdfg_scan.expansions.environments import LIBM_HEADER

    src = tmp_path / "t.cpp"
    src.write_text(f'#include <cmath>\nnamespace dace {{ namespace math {{ }} }}\n#include "{LIBM_HEADER}"\n'
                   "#ifdef SDFG_SCAN_LIBM_VERSION\n#error declared\n#endif\nint main() { return 0; }\n")
    cxx = os.environ.get("CXX", "g++")
    r = subprocess.run([cxx, "-fsyntax-only", str(src)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    r = subprocess.run([cxx, "-fsyntax-only", "-DSDFG_SCAN_LIBM_FINITE=999", str(src)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_gathers_only_where_gcc_tunes_an_intel_avx512_cpu_as_generic(monkeypatch, tmp_path):
    """``gather_flags``: GCC's gather tuning where the host is an Intel CPU with AVX-512 that GCC tunes as
    ``generic`` (a model newer than the compiler); nothing for the CPUs GCC knows, for AMD, for a compiler
    that is not GCC, or with ``SDFG_SCAN_GATHERS=0``; ``=1`` forces it wherever the compiler is GCC."""
    import platform

    from sdfg_scan.expansions import environments as env

    def case(vendor: str, flags: str, tuning, switch: str = "") -> list[str]:
        info = tmp_path / f"cpuinfo_{vendor}_{len(flags)}"
        info.write_text(f"processor\t: 0\nvendor_id\t: {vendor}\nflags\t\t: fpu sse2 {flags}\n")
        real_path = env.Path
        monkeypatch.setattr(env, "Path", lambda p: real_path(info) if p == "/proc/cpuinfo" else real_path(p))
        monkeypatch.setattr(env, "_native_tuning", lambda compiler: tuning)
        monkeypatch.setenv("SDFG_SCAN_GATHERS", switch)
        env.gather_flags.cache_clear()
        try:
            return env.gather_flags()
        finally:
            env.gather_flags.cache_clear()

    if platform.machine() not in ("x86_64", "AMD64"):
        assert case("GenuineIntel", "avx512f", ("cooperlake", "generic")) == []
        return
    assert case("GenuineIntel", "avx2 avx512f avx512dq", ("cooperlake", "generic")) == env.GATHER_TUNING
    assert case("GenuineIntel", "avx2 avx512f", ("sapphirerapids", "sapphirerapids")) == []   # GCC knows it
    assert case("GenuineIntel", "avx2", ("haswell", "generic")) == []   # no AVX-512
    assert case("AuthenticAMD", "avx2 avx512f", ("znver4", "generic")) == []
    assert case("GenuineIntel", "avx2 avx512f", None) == []   # not GCC
    assert case("GenuineIntel", "avx2 avx512f", ("cooperlake", "generic"), "0") == []
    assert case("AuthenticAMD", "avx2", ("znver3", "znver3"), "1") == env.GATHER_TUNING
    assert case("AuthenticAMD", "avx2", None, "1") == []


def test_the_native_tuning_query_reads_gcc():
    """``_native_tuning`` parses GCC's ``-Q --help=target``; a command that is not a compiler gives None."""
    import shutil

    from sdfg_scan.expansions import environments as env

    assert env._native_tuning("/nonexistent/c++") is None
    gcc = shutil.which("g++")
    if gcc is None:
        pytest.skip("no g++")
    arch, tune = env._native_tuning(gcc)
    assert arch and tune
