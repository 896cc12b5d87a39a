"""Staged ``pow`` in vectorised cell maps (:mod:`sdfg_scan.expansions.staged_pow`): each ``pow`` call site
computed only in the lanes that take its branch, after a recording pass over the block. The analysis of the
loop body (depths, what stays inline, refusals) on C++ text, and compiled maps against the original program:
the exact form bitwise under the IEEE-strict flags (with AVX-512's packing and, on x86-64, without it), replay
bitwise its unstaged form, for block tails, one cell, one level and both branch outcomes."""

import copy
import platform

import dace
import numpy as np
import pytest

from sdfg_scan.expansions import staged_pow
from sdfg_scan.transformations.vectorize_cell_map import vectorize_cell_maps

K, N = dace.symbol("K"), dace.symbol("N")

BODY = """double a = _r_x[i];
const bool _c1 = (a > 0.5);
const bool _a2 = _c1;
double t = 4.0;
double u = t;
long long m = 3;
double _sel1 = 0.0;
{
    double r;
    r = _sdfg_scan_xpow(_a2, a, 1.5) + _sdfg_scan_xpow(_a2, a, u) + _sdfg_scan_xpow(_a2, a, 2.0);
    double q = _sdfg_scan_xpow(_a2, _sdfg_scan_xpow(_a2, a, 0.3), _sdfg_scan_xexp(_a2, a));
    double z = _sdfg_scan_xpow(_a2, a, m);
    _sel1 = r + q + z;
}
a = _c1 ? _sel1 : a;
_w_y[i] = a;""".split("\n")


def test_sites_depths_and_what_stays_inline(monkeypatch):
    """Depth-0 sites with double arguments are staged (a literal exponent of 4.0, reached through copies,
    too); a literal exponent GCC folds (2.0) and an integer exponent stay inline, kept from pass 0 where their
    arguments allow; a ``pow`` of a staged ``pow`` (depth 1) stays inline in the last pass; ``exp`` is
    computed once, in pass 0. Pass 0 stores nothing to memory; the last pass is the whole body. A site with a
    literal exponent is evaluated packed with the literal in place (``LITERAL_EXPONENTS``; off: with the
    recorded exponents, as before)."""
    st = staged_pow.stage(BODY, "exact", 256)
    assert st is not None
    assert st.sites == [0, 1, 3] and st.after == [[0, 1, 3]]
    assert st.cached == [2, 4]   # pow(a, 2.0) and exp(a); pow(a, m) with an integer m is neither
    first, last = st.passes
    assert not any("_w_y" in ln for ln in first) and "(void)(a);" in first
    assert "_w_y[i] = a;" in last
    assert "r = _pwx0[_l] + _pwx1[_l] + _pwc2[_l];" in [ln.strip() for ln in last]
    assert any("_sdfg_scan_xpow(_a2, _pwx3[_l], _pwc4[_l])" in ln for ln in last)
    assert any("_sdfg_scan_xpow(_a2, a, m)" in ln for ln in last)
    assert sum(ln.count("_sdfg_scan_pw_rec(") for ln in first) == 3
    code = "\n".join(staged_pow.loops(st, ["#pragma omp simd", "for (long long _l = 0; _l < _n; ++_l) {"],
                                      "exact"))
    assert code.count("#pragma omp simd") == 2
    # every staged exponent here is a literal (4.0 through two copies): only the bases are packed, and the pow
    # is evaluated with the literal in place
    assert st.exponents == {0: "1.5", 1: "4.0", 3: "0.3"}
    for s, y in st.exponents.items():
        assert (f"_sdfg_scan_pw_eval_y(_n, _pwa{s}, _pwx{s}, [](double _v) __attribute__((always_inline)) "
                f"{{ return SDFG_SCAN_PW_XPOW(_v, {y}); }});") in code
    monkeypatch.setattr(staged_pow, "LITERAL_EXPONENTS", False)
    code = "\n".join(staged_pow.loops(st, ["#pragma omp simd", "for (long long _l = 0; _l < _n; ++_l) {"],
                                      "exact"))
    assert [f"_sdfg_scan_pw_exact(_n, _pwa{s}, _pwx{s}, _pwy{s});" in code for s in (0, 1, 3)] == [True] * 3


def test_a_literal_exponent_only_through_doubles():
    """An exponent is taken as a literal only where it reaches the call through ``double`` variables: a
    literal stored in an integer on the way (truncated) or an exponent assigned under a select is not."""
    body = ["double a = _r_x[i];", "const bool _a2 = (a > 0.5);", "double b;", "{", "    double t;",
            "    t = 0.94878;", "    b = t;", "}", "int k = 2.5;", "double c = k;", "double d = _a2 ? 1.5 : 2.5;",
            "_w_y[i] = _sdfg_scan_spow(_a2, a, b) + _sdfg_scan_spow(_a2, a, c) + _sdfg_scan_spow(_a2, a, d)"
            " + _sdfg_scan_spow(_a2, a, 1e-3);"]
    st = staged_pow.stage(body, "replay", 256)
    assert st is not None and st.sites == [0, 1, 2, 3]
    assert st.exponents == {0: "0.94878", 3: "1e-3"}


@pytest.mark.parametrize("change, why", [
    (lambda b: b[:8] + ["if (_c1) {"] + b[9:], "a plain if (a branch not if-converted)"),
    (lambda b: b + ["double w = _r_y[i];"], "a load after a store to the same array"),
    (lambda b: b + ["y += 1.0;"], "a compound assignment"),
    (lambda b: b + ["foo(a);"], "a statement of another form"),
    (lambda b: b + ["z = 1.0;"], "an assignment to a name the body does not declare"),
    (lambda b: b + ["double* const p = _r_x + 1;"], "a declaration of another form"),
])
def test_bodies_it_does_not_read_are_left_alone(change, why):
    assert staged_pow.stage(change(list(BODY)), "exact", 256) is None, why


def test_loads_of_other_arrays_after_a_store_are_fine():
    assert staged_pow.stage(BODY + ["double w = _r_v[i];", "_w_v[i] = w;"], "exact", 256) is not None
    assert staged_pow.stage(BODY + ["double w = _r_y[i];"], "exact", 256) is None   # _w_y and _r_y: one array


def test_off_switch_nothing_to_stage_and_the_stack_bound(monkeypatch):
    assert staged_pow.stage(["double a = _r_x[i];", "_w_y[i] = _sdfg_scan_xpow(true, a, 2.0);"], "exact", 256) is None
    assert staged_pow.stage(BODY, "exact", 2048) is not None
    assert staged_pow.stage(BODY, "exact", 65536) is None   # 11 arrays of 512 KiB: more than ARRAY_BYTES
    monkeypatch.setattr(staged_pow, "ENABLED", False)
    assert staged_pow.stage(BODY, "exact", 256) is None


@dace.program
def _physics(q: dace.float64[K, N], t: dace.float64[K, N], e: dace.float64[K, N], o1: dace.float64[K, N],
             o2: dace.float64[K, N], o3: dace.float64[K, N]):
    for k, i in dace.map[0:K, 0:N]:
        if q[k, i] > 0.3:
            if t[k, i] < 260.0:
                o1[k, i] = q[k, i] ** 1.6 * np.exp(0.05 * (t[k, i] - 273.15))
            else:
                o1[k, i] = (q[k, i] * 1.2) ** e[k, i]
            o2[k, i] = (q[k, i] ** 0.7) ** 1.3 + q[k, i] ** 2.0
        else:
            o1[k, i] = 0.0
            o2[k, i] = q[k, i] ** 3.0
        o3[k, i] = np.log(t[k, i]) + (t[k, i] / 273.15) ** 0.37


@pytest.fixture(scope="module")
def builds():
    from test_vectorize_cell_map import _strict_build

    base = _physics.to_sdfg(simplify=True)
    out = {"base": _strict_build(copy.deepcopy(base))}
    variants = [("exact", {"exact": True}, True), ("replay", {"accurate_pow": True}, True),
                ("replay_unstaged", {"accurate_pow": True}, False)]
    if platform.machine() in ("x86_64", "AMD64"):
        variants.append(("exact_no_avx512", {"exact": True}, True))   # the packing's plain loops
    for name, opts, enabled in variants:
        vec = copy.deepcopy(base)
        vec.name = f"{base.name}_{name}"
        saved = staged_pow.ENABLED
        staged_pow.ENABLED = enabled
        try:
            assert vectorize_cell_maps(vec, **opts) == 1
        finally:
            staged_pow.ENABLED = saved
        code = "\n".join(o.clean_code for o in copy.deepcopy(vec).generate_code())
        cls = "exact" if "exact" in opts else "replay"
        assert (f"_sdfg_scan_pw_{cls}(_n, " in code) == enabled, name
        out[name] = _strict_build(vec, "-mno-avx512f" if name.endswith("no_avx512") else "")
    return out


@pytest.mark.parametrize("k, n", [(1, 1), (2, 7), (1, 8), (3, 9), (2, 255), (1, 256), (2, 257), (3, 600)])
def test_staged_maps_give_the_programs_values(builds, k, n):
    """Exact: bitwise the original map under the IEEE-strict flags. Replay: bitwise its unstaged form (the same
    accurate ``pow`` on the same arguments), within 1e-13 of the original (libmvec's ``exp``/``log``). Inputs where every branch is taken by
    some cells, special values included."""
    rng = np.random.default_rng(k * 1000 + n)
    q = rng.uniform(0.0, 1.0, (k, n))
    t = rng.uniform(230.0, 300.0, (k, n))
    e = rng.uniform(-2.0, 3.0, (k, n))
    flat = q.reshape(-1)
    flat[: min(4, flat.size)] = [0.0, 1.0, 0.31, np.inf][: min(4, flat.size)]
    outs = {}
    for name, c in builds.items():
        o = {f"o{j}": np.zeros((k, n)) for j in (1, 2, 3)}
        with np.errstate(all="ignore"):
            c(q=q.copy(), t=t.copy(), e=e.copy(), **o, K=k, N=n)
        outs[name] = o
    for j in ("o1", "o2", "o3"):
        b = outs["base"][j]
        for name in ("exact", "exact_no_avx512"):
            if name in outs:
                assert np.array_equal(b.view(np.uint8), outs[name][j].view(np.uint8)), (name, j)
        assert np.array_equal(outs["replay"][j].view(np.uint8), outs["replay_unstaged"][j].view(np.uint8)), j
        np.testing.assert_allclose(outs["replay"][j], b, rtol=1e-13, err_msg=j)   # libmvec's exp, log
