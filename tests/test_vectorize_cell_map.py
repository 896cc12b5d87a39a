"""``VectorizeCellMap`` (replay, opt-in): a top-level pointwise map over cells as one loop nest with an
``omp simd`` cell loop, if-converted branches and vector math; checked against the original program
(same values within rounding of the vector math), and its refusals leave the SDFG untouched."""


import copy
import re

import dace
import numpy as np
import pytest

from sdfg_scan.transformations.vectorize_cell_map import VectorizeCellMap, vectorize_cell_maps

K, N = dace.symbol("K"), dace.symbol("N")


@dace.program
def _pointwise(a: dace.float64[K, N], b: dace.float64[K, N], flag: dace.bool_[K, N]):
    for k, i in dace.map[0:K, 0:N]:
        if a[k, i] > 0.5:
            b[k, i] = a[k, i] ** 1.5 + np.exp(a[k, i])
            flag[k, i] = True
        else:
            b[k, i] = 2.0 * a[k, i]
            flag[k, i] = False


@dace.program
def _strided(a: dace.float64[N, K], b: dace.float64[N, K]):
    for k, i in dace.map[0:K, 0:N]:
        b[i, k] = a[i, k] * 2.0


@pytest.fixture(scope="module")
def programs():
    base = _pointwise.to_sdfg(simplify=True)
    vec = copy.deepcopy(base)
    vec.name = "pointwise_vectorized"
    assert vectorize_cell_maps(vec) == 1
    vec.validate()
    return base.compile(), vec.compile()


@pytest.mark.parametrize("k, n", [(1, 1), (2, 3), (5, 257), (3, 1000)])
def test_same_values_as_the_map(programs, k, n):
    base, vec = programs
    rng = np.random.default_rng(k * n)
    a = rng.uniform(0.0, 1.0, (k, n))
    out = [(np.zeros((k, n)), np.zeros((k, n), dtype=np.bool_)) for _ in range(2)]
    base(a=a, b=out[0][0], flag=out[0][1], K=k, N=n)
    vec(a=a, b=out[1][0], flag=out[1][1], K=k, N=n)
    np.testing.assert_allclose(out[1][0], out[0][0], rtol=1e-13)
    assert np.array_equal(out[1][1], out[0][1])


def test_refused_where_the_cell_loop_is_not_unit_stride():
    sdfg = _strided.to_sdfg(simplify=True)
    before = copy.deepcopy(sdfg.to_json())
    assert vectorize_cell_maps(sdfg) == 0
    assert sdfg.to_json() == before
    for state in sdfg.states():
        for node in state.nodes():
            if isinstance(node, dace.nodes.MapEntry):
                x = VectorizeCellMap()
                x.setup_match(sdfg, state.parent_graph.cfg_id, state.block_id,
                              {VectorizeCellMap.map_entry: state.node_id(node)}, 0)
                assert not x.can_be_applied(state, 0, sdfg)


@dace.program
def _compares(a: dace.float64[K, N], b: dace.float64[K, N], i: dace.int64[K, N], o: dace.int64[K, N]):
    for k, c in dace.map[0:K, 0:N]:
        o[k, c] = (1 * (a[k, c] > b[k, c]) + 2 * (a[k, c] >= b[k, c]) + 4 * (a[k, c] < b[k, c])
                   + 8 * (a[k, c] <= b[k, c]) + 16 * (i[k, c] > 3) + 32 * (i[k, c] <= a[k, c]))


def test_quiet_comparisons_give_numpys_values_with_nan():
    """If-converted code compares through ``__builtin_isgreater`` and friends (no invalid-operation trap,
    so GCC if-converts around them): the same truth values as ``>``, ``>=``, ``<``, ``<=``, NaN included,
    for floats, integers and mixed operands."""
    sdfg = _compares.to_sdfg(simplify=True)
    assert vectorize_cell_maps(sdfg) == 1
    code = "\n".join(o.clean_code for o in sdfg.generate_code())
    assert "_sdfg_scan_gt(" in code and "_sdfg_scan_le(" in code
    rng = np.random.default_rng(7)
    k, n = 3, 301
    a, b = rng.choice([np.nan, -1.0, 0.0, 2.5, np.inf], (k, n)), rng.choice([np.nan, 0.0, 2.5, 7.0], (k, n))
    i = rng.integers(0, 8, (k, n))
    o = np.zeros((k, n), dtype=np.int64)
    sdfg(a=a, b=b, i=i, o=o, K=k, N=n)
    want = (1 * (a > b) + 2 * (a >= b) + 4 * (a < b) + 8 * (a <= b) + 16 * (i > 3) + 32 * (i <= a))
    assert np.array_equal(o, want)


@dace.program
def _powers(a: dace.float64[K, N], e: dace.float64[K, N], o0: dace.float64[K, N], o1: dace.float64[K, N],
            o2: dace.float64[K, N], o3: dace.float64[K, N], o4: dace.float64[K, N], o5: dace.float64[K, N],
            o6: dace.float64[K, N], o7: dace.float64[K, N]):
    for k, i in dace.map[0:K, 0:N]:
        o0[k, i] = a[k, i] ** 1.5
        o1[k, i] = a[k, i] ** 0.37
        o2[k, i] = a[k, i] ** -0.7
        o3[k, i] = a[k, i] ** 2.0
        o4[k, i] = a[k, i] ** 3.0
        o5[k, i] = a[k, i] ** e[k, i]
        o6[k, i] = 10.0 ** a[k, i]
        o7[k, i] = 0.25 ** a[k, i]


def test_constant_powers_give_numpys_values_within_rounding():
    """Replay math writes ``pow(x, c)`` with a constant non-integer ``c`` as ``exp(c * log(x))`` (two fast
    vector calls; ``scan_blocked.VECTOR_MATH``): NumPy's values within 1e-13 relative, the same NaN/Inf and
    zeros for the special bases (0, -0, negative, inf, NaN, tiny, huge); integer and runtime exponents keep
    ``pow`` (a negative base to an integer power stays finite). A constant positive base (``10 ** x``) is
    ``exp(x * log(10))``: pow's values for the same special exponents. Built with the IEEE-strict flags (DaCe's
    default ``-ffast-math`` gives up signed zeros and infinities)."""
    from sdfg_scan.expansions.environments import ExactArithmetic

    sdfg = _powers.to_sdfg(simplify=True)
    assert vectorize_cell_maps(sdfg) == 1
    flags = dace.Config.get("compiler", "cpu", "args") + " " + " ".join(ExactArithmetic.cmake_compile_flags)
    with dace.config.set_temporary("compiler", "cpu", "args", value=flags):   # IEEE semantics (no fast-math)
        sdfg = sdfg.compile()
    special = [0.0, -0.0, -2.0, 1.0, np.inf, -np.inf, np.nan, 1e-300, 1e300, 3.7e-3, 0.5, 42.0]
    rng = np.random.default_rng(5)
    k, n = 2, 257
    a = rng.choice(special, (k, n))
    a[:, :12] = special
    e = rng.choice([0.5, 2.0, -1.0, 1.3], (k, n))
    outs = {f"o{j}": np.zeros((k, n)) for j in range(8)}
    sdfg(a=a, e=e, **outs, K=k, N=n)
    o = np.stack([outs[f"o{j}"] for j in range(8)], axis=-1)
    with np.errstate(all="ignore"):
        want = np.stack([a ** 1.5, a ** 0.37, a ** -0.7, a ** 2.0, a ** 3.0, a ** e, 10.0 ** a, 0.25 ** a], axis=-1)
    assert np.array_equal(np.isnan(o), np.isnan(want))
    assert np.array_equal(np.isinf(o), np.isinf(want)) and np.array_equal(np.sign(o), np.sign(want), equal_nan=True)
    fin = np.isfinite(want) & (want != 0)
    np.testing.assert_allclose(o[fin], want[fin], rtol=1e-13)
    assert np.array_equal(o[want == 0], want[want == 0])


def test_symbolic_cell_stride_beside_a_unit_one():
    """gt4py leaves the cell stride of icon4py's tracer tuples symbolic beside unit-stride fields: such a map
    is vectorised (the kernel indexes through the real strides, whatever they are at run time); one whose
    written arrays are all of unknown stride is refused."""
    sdfg = _pointwise.to_sdfg(simplify=True)
    sdfg.add_symbol("SK", dace.int64)
    sdfg.add_symbol("SC", dace.int64)
    sdfg.arrays["flag"].strides = (dace.symbol("SK"), dace.symbol("SC"))
    unknown = copy.deepcopy(sdfg)
    unknown.arrays["b"].strides = (dace.symbol("SK"), dace.symbol("SC"))
    assert vectorize_cell_maps(unknown) == 0
    assert vectorize_cell_maps(sdfg) == 1
    code = "\n".join(o.clean_code for o in copy.deepcopy(sdfg).generate_code())
    assert "if ((SC == 1)) {" in code   # a copy of the loop nest for a unit stride at run time
    k, n = 3, 301
    a = np.random.default_rng(2).uniform(0.0, 1.0, (k, n))
    b, flag = np.zeros((k, n)), np.zeros((n, k), dtype=np.bool_).T   # flag: cell stride k, level stride 1
    sdfg(a=a, b=b, flag=flag, K=k, N=n, SK=1, SC=k)
    assert np.array_equal(flag, a > 0.5)
    np.testing.assert_allclose(b, np.where(a > 0.5, a ** 1.5 + np.exp(a), 2.0 * a), rtol=1e-13)
    flag = np.zeros((k, n), dtype=np.bool_)   # the unit-stride copy of the loop nest
    sdfg(a=a, b=b, flag=flag, K=k, N=n, SK=n, SC=1)
    assert np.array_equal(flag, a > 0.5)


@dace.program
def _first_arm_keeps(a: dace.float64[K, N], c: dace.float64[K, N], b: dace.float64[K, N]):
    for k, i in dace.map[0:K, 0:N]:
        t = a[k, i] * 2.0
        s = a[k, i] * 3.0
        if a[k, i] > 0.5:
            s = a[k, i] + 1.0
        else:
            t = np.exp(a[k, i])
        b[k, i] = t + s


@dace.program
def _middle_arm_keeps(a: dace.float64[K, N], c: dace.float64[K, N], b: dace.float64[K, N]):
    for k, i in dace.map[0:K, 0:N]:
        t = a[k, i] * 2.0
        s = a[k, i] * 3.0
        if a[k, i] > 0.7:
            t = np.exp(a[k, i])
        elif a[k, i] > 0.3:
            s = a[k, i] + 1.0
        else:
            t = a[k, i] - 5.0
            s = np.log(a[k, i])
        b[k, i] = t + s


@dace.program
def _nested_arm_keeps(a: dace.float64[K, N], c: dace.float64[K, N], b: dace.float64[K, N]):
    for k, i in dace.map[0:K, 0:N]:
        t = a[k, i] * 2.0
        s = c[k, i]
        if a[k, i] > 0.5:
            if c[k, i] > 0.5:
                s = s * 0.5
            else:
                t = np.exp(a[k, i])
        else:
            s = s + 1.0
        b[k, i] = t * 10.0 + s


@pytest.mark.parametrize("prog", [_first_arm_keeps, _middle_arm_keeps, _nested_arm_keeps])
def test_a_value_an_arm_does_not_write_keeps_its_value_there(prog):
    """If-converted, ``if c: s = ... else: t = ...`` is ``t = c ? t_before : t_else``: a value the first arm
    (or a middle ``elif`` arm, or an inner arm) leaves alone was taken from a later arm in every lane
    (``if frozen: keep, else: update``, a common microphysics form, gave wrong results under ``replay``).
    DaCe's frontend writes the ``elif`` condition as a symbol assigned and read inside the ``else`` branch:
    vectorised (one read after the branch is refused, below)."""
    base = prog.to_sdfg(simplify=True)
    vec = copy.deepcopy(base)
    vec.name = base.name + "_vectorized"
    assert vectorize_cell_maps(vec) == 1
    k, n = 3, 300
    rng = np.random.default_rng(5)
    a, c = rng.uniform(0.01, 1.0, (k, n)), rng.uniform(0.0, 1.0, (k, n))
    want, got = np.zeros((k, n)), np.zeros((k, n))
    base(a=a, c=c, b=want, K=k, N=n)
    vec(a=a, c=c, b=got, K=k, N=n)
    np.testing.assert_allclose(got, want, rtol=1e-13)


@dace.program
def _update_in_place(t: dace.float64[K, N], q: dace.float64[K, N], o: dace.float64[K, N]):
    for k, i in dace.map[0:K, 0:N]:
        if q[k, i] + t[k, i] > 1.0:   # (graupel's "level activated" branch: the physics updates te in place)
            t[k, i] = t[k, i] * np.exp(q[k, i]) + q[k, i] ** 1.5
        o[k, i] = t[k, i] + q[k, i]


@dace.program
def _write_unread(a: dace.float64[K, N], b: dace.float64[K, N]):
    for k, i in dace.map[0:K, 0:N]:
        if a[k, i] > 0.5:
            b[k, i] = np.exp(a[k, i])


@pytest.mark.parametrize("exact", [False, True])
def test_an_element_one_arm_writes_is_selected_where_the_body_read_it(exact):
    """A branch that writes an element of memory the other arm leaves alone is if-converted when the body has
    read that element unconditionally before (each lane then stores back the value it holds): the cell loop
    vectorises, exact calls included (GCC 12 does not if-convert a loop with a call under a branch: graupel's
    static map ran scalar). An element the body has not read keeps the plain ``if`` (its address may not be
    one the program touches in that lane). Values: the map's (bitwise in the exact form)."""
    for prog, converted in ((_update_in_place, True), (_write_unread, False)):
        base, vec, _, loop = _vectorized_copy(prog, f"_read_back_{exact}", exact=exact)
        body = loop[:loop.index("void __program_")]
        assert ("if (" not in body) == converted, body
        rng = np.random.default_rng(3)
        k, n = 3, 301
        args = {name: rng.uniform(0.0, 1.0, (k, n)) for name, desc in base.arrays.items() if not desc.transient}
        got = {a: v.copy() for a, v in args.items()}
        _strict_build(base)(**args, K=k, N=n)
        _strict_build(vec)(**got, K=k, N=n)
        for a in args:
            if exact:
                assert np.array_equal(args[a].view(np.uint8), got[a].view(np.uint8)), a
            else:
                np.testing.assert_allclose(got[a], args[a], rtol=1e-13)


@dace.program
def _symbol_in_a_branch(m: dace.int32[K, N], b: dace.int32[K, N]):
    for k, i in dace.map[0:K, 0:N]:
        t = m[k, i] * 2
        if m[k, i] > 0:
            t = 100 // m[k, i]
        b[k, i] = t


def test_a_symbol_assigned_inside_a_branch_is_refused_untouched():
    """DaCe's frontend makes ``t`` an interstate symbol assigned inside the branch and read after it; its
    C++ local would end with the branch (the kernel did not compile). Refused, the SDFG untouched."""
    sdfg = _symbol_in_a_branch.to_sdfg(simplify=True)
    before = copy.deepcopy(sdfg.to_json())
    assert vectorize_cell_maps(sdfg) == 0
    assert sdfg.to_json() == before


def test_divisions_that_may_trap_in_an_unselected_lane():
    """An if-converted branch runs for every lane: an integer division or remainder by a value its condition
    guarded (``if m > 0: 100 // m``) traps where ``m == 0``, so such a conditional stays a plain ``if``.
    A floating-point division (inf/NaN, selected away) and division by a non-zero constant may be computed."""
    import ast

    from sdfg_scan.expansions.scan_blocked_codegen import _may_trap

    types = {"m": dace.int32, "x": dace.float64}
    assert _may_trap(ast.parse("q = 100 // m"), types)
    assert _may_trap(ast.parse("q = 100 % m"), types)
    assert _may_trap(ast.parse("q = 100 / m"), types)    # C++ integer division
    assert not _may_trap(ast.parse("q = x / m"), {"m": dace.float64, "x": dace.float64})
    assert not _may_trap(ast.parse("q = m // 4 + m % 3 + x / 2.0"), types)
    assert _may_trap(ast.parse("q = m // 0"), types)


@dace.program
def _guarded_integer_division(m: dace.int32[K, N], a: dace.float64[K, N], b: dace.float64[K, N]):
    for k, i in dace.map[0:K, 0:N]:
        s = a[k, i] * 1.0
        if m[k, i] > 0:
            q = 100 // m[k, i]   # DaCe's frontend: an interstate symbol assigned inside the branch
            s = a[k, i] * q
        b[k, i] = s


def test_a_guarded_integer_division_stays_under_its_if():
    """The map is vectorised, but its conditional stays a plain ``if``: the division runs only for the cells
    with ``m > 0`` (if-converted, it would run for ``m == 0`` too, where integer division traps)."""
    sdfg = _guarded_integer_division.to_sdfg(simplify=True)
    assert vectorize_cell_maps(sdfg) == 1
    (t,) = [n for n, _ in sdfg.all_nodes_recursive() if isinstance(n, dace.nodes.Tasklet) and "vectorized" in n.label]
    code = t.code_global.as_string
    lines = code[code.index("#pragma omp simd"):].splitlines()   # the cell loop (not the math wrappers)
    div = next(j for j, line in enumerate(lines) if "100 /" in line)
    assert any(line.strip().startswith("if (") for line in lines[:div])
    m = np.random.default_rng(3).integers(-2, 4, (3, 300)).astype(np.int32)
    a = np.random.default_rng(4).uniform(0.0, 1.0, (3, 300))
    b = np.zeros((3, 300))
    sdfg(m=m, a=a, b=b, K=3, N=300)
    safe = np.where(m > 0, m, 1)
    assert np.array_equal(b, np.where(m > 0, a * (100 // safe), a * 1.0))


@dace.program
def _level_scaled(a: dace.float64[K, N], b: dace.float64[K, N]):
    for k, i in dace.map[0:K, 0:N]:
        s = a[k, i] * 1.0
        if a[k, i] > 0.5:
            s = a[k, i] * 3.0
        b[k, i] = s


def test_a_division_by_an_integer_symbol_stays_under_its_if():
    """``100 / k`` with ``k`` a symbol (the level) is C++ integer division: computed for every lane of an
    if-converted branch it divides by zero where the branch's guard ``k > 0`` is false. The trap rule counted
    only containers as integers; symbols count too. (DaCe's frontend cannot write ``100 // k``: the tasklet
    and its guard are edited in.)"""
    from dace.properties import CodeBlock
    from dace.sdfg.state import ConditionalBlock

    sdfg = _level_scaled.to_sdfg(simplify=True)
    (t, st), = [(n, st) for n, st in sdfg.all_nodes_recursive()
                if isinstance(n, dace.nodes.Tasklet) and "3.0" in n.code.as_string]
    t.code = CodeBlock("__out = __in1 * (100 / k)")
    inner = st.sdfg
    inner.add_symbol("k", dace.int64)
    inner.parent_nsdfg_node.symbol_mapping["k"] = dace.symbol("k")
    (block,) = [b for b in inner.all_control_flow_blocks() if isinstance(b, ConditionalBlock)]
    cond, arm = block.branches[0]
    block.branches[0] = (CodeBlock(f"({cond.as_string}) and (k > 0)"), arm)
    sdfg.validate()
    assert vectorize_cell_maps(sdfg) == 1
    (t,) = [n for n, _ in sdfg.all_nodes_recursive() if isinstance(n, dace.nodes.Tasklet) and "vectorized" in n.label]
    code = t.code_global.as_string
    lines = code[code.index("#pragma omp simd"):].splitlines()
    div = next(j for j, line in enumerate(lines) if "100 /" in line)
    assert any(line.strip().startswith("if (") for line in lines[:div])
    a = np.random.default_rng(4).uniform(0.0, 1.0, (3, 300))
    b = np.zeros((3, 300))
    sdfg(a=a, b=b, K=3, N=300)
    k = np.arange(3)[:, None]
    assert np.array_equal(b, np.where((a > 0.5) & (k > 0), a * (100 // np.maximum(k, 1)), a * 1.0))




def _tasklets(name: str, types: dict, codes: list[tuple[str, str, str]]) -> dace.SDFG:
    """One pointwise map over ``[K, N]`` per ``(input, output, code)`` (tasklets written as code: their
    ``exp`` is ``dace::math::exp``, unlike the DaCe frontend's NumPy calls)."""
    sdfg = dace.SDFG(name)
    for arr, dtype in types.items():
        sdfg.add_array(arr, [K, N], dtype)
    state = sdfg.add_state()
    for src, dst, code in codes:
        state.add_mapped_tasklet(f"{dst}_map", {"k": "0:K", "c": "0:N"}, {"x": dace.Memlet(f"{src}[k, c]")},
                                 code, {"y": dace.Memlet(f"{dst}[k, c]")}, external_edges=True)
    return sdfg

def _strict_build(sdfg, extra: str = ""):
    """IEEE flags and ``sdfg_scan_libm.h``, as in a program that also holds an ``exact`` node (graupel);
    ``extra``: flags after those."""
    from sdfg_scan.expansions.environments import LIBM_HEADER, ExactArithmetic

    sdfg.append_global_code(f'#include "{LIBM_HEADER}"\n')
    flags = dace.Config.get("compiler", "cpu", "args") + " " + " ".join(ExactArithmetic.cmake_compile_flags)
    flags += " " + extra
    with dace.config.set_temporary("compiler", "cpu", "args", value=flags):
        return sdfg.compile()


def test_vector_math_whatever_the_tasklets_types():
    """A tasklet that computes a bool from an ``exp`` of doubles (graupel's first map holds one) gets the
    vector wrapper too: left to ``dace::math::exp``, it called glibc's scalar entry point
    (``sdfg_scan_libm.h`` under IEEE flags), which GCC cannot vectorise, and the whole cell loop stayed scalar.
    The wrappers' template overloads keep DaCe's own function for other argument types: an integer power stays
    an integer (and exact), a float's ``exp`` a float's."""
    from pathlib import Path

    sdfg = _tasklets("mixed_types", {"a": dace.float64, "i": dace.int64, "hot": dace.bool_, "j": dace.int64},
                     [("a", "hot", "y = math.exp(x) > 2.0"), ("i", "j", "y = x ** 3")])
    assert vectorize_cell_maps(sdfg) == 2
    code = "\n".join(o.clean_code for o in copy.deepcopy(sdfg).generate_code())
    loops = [part.split("\n}\n", 1)[0] for part in code.split("#pragma omp simd")[1:]]   # the cell loops
    assert len(loops) == 2 and "_sdfg_scan_vexp(" in loops[0] and not any("dace::math::exp(" in t for t in loops)
    csdfg = _strict_build(sdfg)
    if "avx512f" in Path("/proc/cpuinfo").read_text():   # the cell loop vectorised: libmvec's exp is called
        from disassembly import vector_math_called

        assert vector_math_called(csdfg._lib._library_filename)
    rng = np.random.default_rng(11)
    k, n = 3, 301
    a = rng.uniform(-3.0, 3.0, (k, n))
    a[np.abs(a - np.log(2.0)) < 1e-9] = 0.0
    i = rng.integers(-50, 50, (k, n))
    hot, j = np.zeros((k, n), dtype=np.bool_), np.zeros((k, n), dtype=np.int64)
    csdfg(a=a, i=i, hot=hot, j=j, K=k, N=n)
    assert np.array_equal(hot, np.exp(a) > 2.0)
    assert np.array_equal(j, i ** 3)
    sdfg = _tasklets("float_exp", {"f": dace.float32, "g": dace.float32}, [("f", "g", "y = math.exp(x)")])
    assert vectorize_cell_maps(sdfg) == 1
    f = rng.uniform(-3.0, 3.0, (k, n)).astype(np.float32)
    g = np.zeros((k, n), np.float32)
    _strict_build(sdfg)(f=f, g=g, K=k, N=n)
    np.testing.assert_allclose(g, np.exp(f), rtol=1e-6)


def _vectorized_copy(prog, suffix: str, **options):
    """``prog``'s SDFG, a copy with its one map vectorised (``vectorize_cell_maps(**options)``), the copy's
    generated code and its cell loop onwards."""
    base = prog.to_sdfg(simplify=True)
    vec = copy.deepcopy(base)
    vec.name = base.name + suffix
    assert vectorize_cell_maps(vec, **options) == 1
    code = "\n".join(o.clean_code for o in copy.deepcopy(vec).generate_code())
    return base, vec, code, code[code.index("#pragma omp simd"):]


@pytest.mark.parametrize("prog", [_pointwise, _powers, _compares, _first_arm_keeps, _middle_arm_keeps,
                                  _nested_arm_keeps, _update_in_place])
def test_exact_form_is_bitwise_the_map(prog):
    """``VectorizeCellMap(exact=True)`` (``optimize(..., reproducibility="exact", vectorize_maps=True)``): the
    loop's IEEE arithmetic in vectors, every ``exp``/``log``/``pow`` the program's scalar call per lane (simd
    clones that call glibc): bitwise the original map under the same IEEE-strict flags, special bases of
    ``pow`` included, and the cell loop vectorised (it calls the clones)."""
    from disassembly import map_calls, scalar_math_in_map_loops

    base, vec, code, loop = _vectorized_copy(prog, "_exact_vectorized", exact=True)
    assert "_sdfg_scan_v" not in loop   # no vector math (libmvec) anywhere: the only vector variants named are
    assert all("_sdfg_scan_x" in v for v in re.findall(r"_ZGV\w+", code))   # the lane calls' own (x86-64)
    cbase, cvec = _strict_build(base), _strict_build(vec)
    calls = set().union(*map_calls(cvec._lib._library_filename).values())
    if "_sdfg_scan_x" in loop:
        assert any(c.startswith("_ZGV") for c in calls), calls   # the clones: the loop vectorised
    assert not scalar_math_in_map_loops(cvec._lib._library_filename)
    assert not any(c.startswith("_ZGV") and "_sdfg_scan_x" not in c for c in calls)   # no libmvec, any width
    special = [0.0, -0.0, -2.0, 1.0, np.inf, -np.inf, np.nan, 1e-300, 1e300, 3.7e-3, 0.5, 42.0]
    rng = np.random.default_rng(17)
    k, n = 3, 301
    args = {}
    for name, desc in base.arrays.items():
        if desc.transient:
            continue
        if desc.dtype == dace.float64:
            args[name] = rng.uniform(0.01, 1.0, (k, n))
            args[name][:, :12] = special
        elif desc.dtype == dace.int64:
            args[name] = rng.integers(0, 8, (k, n))
        else:
            args[name] = np.zeros((k, n), dtype=desc.dtype.as_numpy_dtype())
    got = {a: v.copy() for a, v in args.items()}
    with np.errstate(all="ignore"):
        cbase(**args, K=k, N=n)
        cvec(**got, K=k, N=n)
    for a in args:
        assert np.array_equal(args[a].view(np.uint8), got[a].view(np.uint8)), a


def test_accurate_pow_form_keeps_glibcs_pow():
    """``VectorizeCellMap(accurate_pow=True)`` (replay; what ``optimize(..., vectorize_maps=True)`` applies under
    replay): every ``pow`` through ``vector_pow``'s accurate ``pow``, inlined. Against the original map under
    the same IEEE-strict flags (glibc's scalar ``pow``): the same value on at least 99.5 % of the entries and
    never more than 1 ulp away, the same NaN/Inf and signs on special bases (zeros, infinities, NaN,
    negative bases with integral exponents); the cell loop vectorised (its table loads are gathers, and it
    calls no scalar ``pow``)."""
    from disassembly import map_calls, map_gathers

    base, vec, _, loop = _vectorized_copy(_powers, "_accurate_pow", accurate_pow=True)
    # the accurate pow inline, or its staged form (staged_pow: packed per call site after a recording pass)
    assert ("_sdfg_scan_apow(" in loop or "_sdfg_scan_pw_replay(" in loop) and "_sdfg_scan_vpow(" not in loop
    cbase, cvec = _strict_build(base), _strict_build(vec)
    calls = set().union(*map_calls(cvec._lib._library_filename).values())
    # (the staged sites' packed evaluations are functions of this file: _sdfg_scan_pw_*, whose mangled names
    # may hold the program's name)
    assert not any("pow" in c for c in calls if "_sdfg_scan_pw_" not in c), calls
    if "avx512f" in open("/proc/cpuinfo").read():   # (the machine the README's numbers come from)
        assert map_gathers(cvec._lib._library_filename) > 0
    rng = np.random.default_rng(23)
    k, n = 4, 1001
    a = np.exp(rng.uniform(-20.0, 20.0, (k, n)))
    a[0, :12] = [0.0, -0.0, -2.0, 1.0, np.inf, -np.inf, np.nan, 1e-310, 1e300, -3.0, 0.5, -0.5]
    e = rng.uniform(-4.0, 4.0, (k, n))
    e[1, :12] = [0.0, 3.0, -3.0, 2.0, np.inf, -np.inf, np.nan, 0.5, -1.0, 1.0, 7.0, -2.0]
    outs = []
    for c in (cbase, cvec):
        o = {f"o{j}": np.zeros((k, n)) for j in range(8)}
        c(a=a.copy(), e=e.copy(), **o, K=k, N=n)
        outs.append(o)
    for name in outs[0]:
        x, y = outs[0][name], outs[1][name]
        assert np.array_equal(np.isnan(x), np.isnan(y)) and np.array_equal(np.isinf(x), np.isinf(y)), name
        num = ~np.isnan(x)   # (a NaN's sign carries nothing: glibc's pow(-2, 1.5) is -NaN)
        assert np.array_equal(np.signbit(x[num]), np.signbit(y[num])), name
        fin = np.isfinite(x) & (x != 0.0)
        assert np.all(np.abs(y[fin] - x[fin]) <= np.spacing(np.abs(x[fin]))), name   # at most 1 ulp
        assert np.mean(x[fin] == y[fin]) >= 0.995, name


def test_exact_and_accurate_pow_together_are_refused():
    """The exact form keeps the program's scalar ``pow``; ``accurate_pow`` is a replay option: asked for
    both, the transformation does not apply (SDFG unchanged) and ``vectorize_cell_maps`` says why."""
    sdfg = _powers.to_sdfg(simplify=True)
    before = copy.deepcopy(sdfg.to_json())
    state = next(s for s in sdfg.states() if any(isinstance(n, dace.nodes.MapEntry) for n in s.nodes()))
    entry = next(n for n in state.nodes() if isinstance(n, dace.nodes.MapEntry))
    xform = VectorizeCellMap()
    xform.exact, xform.accurate_pow = True, True
    xform.setup_match(sdfg, state.parent_graph.cfg_id, state.block_id, {VectorizeCellMap.map_entry: state.node_id(entry)}, 0)
    assert not xform.can_be_applied(state, 0, sdfg)
    with pytest.raises(ValueError, match="exact=True keeps the program's scalar pow"):
        vectorize_cell_maps(sdfg, exact=True, accurate_pow=True)
    assert sdfg.to_json() == before


@pytest.mark.parametrize("reproducibility, vectorize_maps, expected",
                         [("replay", None, 1), ("exact", None, 1), ("approx", None, 0), ("replay", False, 0),
                          ("exact", False, 0), ("exact", True, 1), ("approx", True, 1)])
def test_optimize_vectorises_the_maps_under_replay_by_default(reproducibility, vectorize_maps, expected):
    """``optimize(..., vectorize_maps=None)`` (the default) vectorises the top-level pointwise maps on the CPU
    under ``replay`` (with the accurate ``pow``), under ``exact`` those whose ``exp``/``log``/``pow`` calls are
    staged (this map's are: stop 46; the next test shows the maps it keeps scalar), not under ``approx``; True
    or False decide for every class (``exact`` + True: the exact form). A value other than True, False or None
    is refused naming the parameter."""
    import sdfg_scan

    sdfg = _pointwise.to_sdfg(simplify=True)
    report = sdfg_scan.optimize(sdfg, target="cpu", reproducibility=reproducibility, vectorize_maps=vectorize_maps)
    assert report.maps_vectorized == expected
    if expected and reproducibility in ("replay", "exact"):
        code = "\n".join(o.clean_code for o in copy.deepcopy(sdfg).generate_code())
        # the accurate pow, or the exact lane form (inline, or staged: staged_pow's recording pass)
        pow_call = "_sdfg_scan_apow(" if reproducibility == "replay" else "_sdfg_scan_xpow("
        loop = code[code.index("#pragma omp simd"):]
        assert pow_call in loop or "_sdfg_scan_pw_rec(" in loop
    with pytest.raises(TypeError, match="vectorize_maps must be True, False or None"):
        sdfg_scan.optimize(_pointwise.to_sdfg(simplify=True), vectorize_maps="yes")


@dace.program
def _arithmetic_only(a: dace.float64[K, N], b: dace.float64[K, N]):
    for k, i in dace.map[0:K, 0:N]:
        if a[k, i] > 0.25:
            b[k, i] = a[k, i] * 0.5
        else:
            b[k, i] = a[k, i] - 1.0


def test_exact_default_vectorises_only_staged_maps(monkeypatch):
    """Under ``exact`` the default (``vectorize_maps=None``) is ``VectorizeCellMap(staged_only=True)``: a map
    whose ``exp``/``pow`` the staging cannot take (here: staging switched off) keeps the program's scalar code
    (unstaged, every lane would compute every branch's call: 5 to 12 % slower than the scalar maps on graupel,
    stop 42), a map that makes no such call is vectorised all the same, and a map over a constant number of
    cells below ``STAGED_MIN_CELLS`` stays scalar (100 cells: 0.90x against 1.05x). Each refusal leaves the
    SDFG unchanged and names the map and the reason; the exact form asked for explicitly
    (``vectorize_maps=True``) is not affected, and ``staged_only`` is refused outside the exact form."""
    import sdfg_scan
    from sdfg_scan.expansions import staged_pow
    from sdfg_scan.expansions.scan_blocked_codegen import Unsupported
    from sdfg_scan.transformations import vectorize_cell_map as vcm

    def entry_of(sdfg):
        state = next(s for s in sdfg.states() if any(isinstance(n, dace.nodes.MapEntry) for n in s.nodes()))
        return state, next(n for n in state.nodes() if isinstance(n, dace.nodes.MapEntry))

    monkeypatch.setattr(staged_pow, "ENABLED", False)
    sdfg = _pointwise.to_sdfg(simplify=True)
    before = copy.deepcopy(sdfg.to_json())
    state, entry = entry_of(sdfg)
    with pytest.raises(Unsupported, match=r"map '.*': its exp/log/pow calls cannot be staged"):
        vcm.map_kernel(sdfg, state, entry, exact=True, staged_only=True)
    assert vectorize_cell_maps(sdfg, exact=True, staged_only=True) == 0
    assert sdfg.to_json() == before
    assert sdfg_scan.optimize(copy.deepcopy(sdfg), reproducibility="exact").maps_vectorized == 0
    assert sdfg_scan.optimize(copy.deepcopy(sdfg), reproducibility="exact", vectorize_maps=True).maps_vectorized == 1
    assert sdfg_scan.optimize(_arithmetic_only.to_sdfg(simplify=True), reproducibility="exact").maps_vectorized == 1
    monkeypatch.setattr(staged_pow, "ENABLED", True)

    for cells, expected in ((100, 0), (vcm.STAGED_MIN_CELLS - 1, 0), (vcm.STAGED_MIN_CELLS, 1)):
        small = _pointwise.to_sdfg(simplify=True)
        small.specialize({"N": cells})
        state, entry = entry_of(small)
        if not expected:
            with pytest.raises(Unsupported, match=rf"{cells} cells, below the {vcm.STAGED_MIN_CELLS}"):
                vcm.map_kernel(small, state, entry, exact=True, staged_only=True)
        assert sdfg_scan.optimize(small, reproducibility="exact").maps_vectorized == expected, cells
    with pytest.raises(ValueError, match="staged_only=True is an option of the exact form"):
        vectorize_cell_maps(_pointwise.to_sdfg(simplify=True), accurate_pow=True, staged_only=True)


def test_gt4pys_first_hook_leaves_the_maps_to_the_last():
    """The gt4py hooks' first stage runs ``optimize`` before gt4py sets its temporaries' final strides, and a
    vectorised map indexes through the strides it was written with: under ``replay`` that stage keeps the maps
    (the last stage vectorises them, with ``vectorize_maps=True``). The default of ``optimize`` applied there
    gave graupel through gt4py wrong values at a tenth of the speed."""
    from sdfg_scan.gt4py_stages import LiftStage

    sdfg = _pointwise.to_sdfg(simplify=True)
    stage = LiftStage("cpu", "replay")
    stage(sdfg)
    assert stage.reports[0].maps_vectorized == 0
    assert any(isinstance(n, dace.nodes.MapEntry) for n, _ in sdfg.all_nodes_recursive())


@dace.program
def _flag_scalar(a: dace.float64[K, N], o: dace.float64[K, N], wet: dace.bool_):
    for k, i in dace.map[0:K, 0:N]:
        with dace.tasklet:
            x << a[k, i]  # noqa: F821 (DaCe's tasklet syntax)
            w << wet  # noqa: F821
            y >> o[k, i]  # noqa: F821
            y = x ** 0.75 if w else x * 2.0  # noqa: F821, F841


def test_a_bool_scalar_argument_keeps_the_loop_vectorised():
    """A bool the map only reads as a scalar argument (gt4py passes its boolean constants so) drives a
    select: read directly, that is a select on a loop-invariant bool, which GCC 12 does not vectorise, and it
    left graupel's whole map scalar in gt4py's build. Read per lane from a block array of doubles, the loop
    vectorises (its accurate ``pow`` becomes gathers) and gives the map's values for either flag."""
    from disassembly import map_gathers

    base = _flag_scalar.to_sdfg(simplify=True)
    assert any(isinstance(d, dace.data.Scalar) and d.dtype == dace.bool_ for d in base.arrays.values())
    vec = copy.deepcopy(base)
    vec.name = base.name + "_vectorized"
    assert vectorize_cell_maps(vec, accurate_pow=True) == 1
    code = "\n".join(o.clean_code for o in copy.deepcopy(vec).generate_code())
    assert "_lane_wet[_l]" in code
    cbase, cvec = _strict_build(base), _strict_build(vec)
    if "avx512f" in open("/proc/cpuinfo").read():   # (the machine the README's numbers come from)
        assert map_gathers(cvec._lib._library_filename) > 0
    rng = np.random.default_rng(29)
    k, n = 3, 517
    a = np.exp(rng.uniform(-10.0, 5.0, (k, n)))
    for wet in (True, False):
        outs = []
        for c in (cbase, cvec):
            o = np.zeros((k, n))
            c(a=a.copy(), o=o, wet=wet, K=k, N=n)
            outs.append(o)
        x, y = outs
        assert np.all(np.abs(y - x) <= np.spacing(np.abs(x))), wet   # the accurate pow: at most 1 ulp
        assert np.mean(x == y) >= 0.995, wet
        if not wet:
            assert np.array_equal(x, 2.0 * a)
