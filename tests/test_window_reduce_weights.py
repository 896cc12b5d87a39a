"""WindowReduce with runtime weights (``weights_input``): every expansion against ``reference.window_reduce``,
bitwise, both layouts, every weight form (vector, per column, per column and level, broadcast axes)."""

import dace
import numpy as np
import pytest

import sdfg_scan
from sdfg_scan import reference as R
from tests.conftest import cuda_code

N, K = dace.symbol("N"), dace.symbol("K")
OFFSETS = {"back3": [-3, -2, -1, 0], "centred": [1, 0, -1], "ahead": [2, 5]}
IMPLS = {"direct": 1, "jam3": 3, "kcached": 1}  # name -> unroll (jam3: the unroll-and-jam path of direct)


def weight_shape(kind, layout, nterms, n=N, k=K):
    """Symbolic (or concrete) shape of the weights of ``kind`` for ``x`` of [n, k] (kcontig) or [k, n]."""
    kc = layout == "kcontig"
    return {"vector": [nterms],
            "columns": [n, nterms],
            "levels": [n, k, nterms] if kc else [k, n, nterms],
            "levels_only": [1, k, nterms] if kc else [k, 1, nterms]}[kind]


CASES = [("back3", "vector"), ("back3", "levels"), ("centred", "columns"), ("centred", "levels_only"),
         ("ahead", "levels")]  # (window, weight form): every form and every window, few nodes (compile time)


def build(layout, xdt, wdt, gpu=False):
    sdfg = dace.SDFG(f"test_window_weights_{layout}_{np.dtype(xdt).name}{'_gpu' if gpu else ''}")
    xshape = [N, K] if layout == "kcontig" else [K, N]
    sdfg.add_array("x", xshape, dace.typeclass(xdt))
    st = sdfg.add_state()
    for wname, kind in CASES:
        offs = OFFSETS[wname]
        wdata = f"w_{kind}_{wname}"
        sdfg.add_array(wdata, weight_shape(kind, layout, len(offs)), dace.typeclass(wdt))
        for impl, unroll in IMPLS.items():
            out = f"o_{impl}_{kind}_{wname}"
            sdfg.add_array(out, xshape, dace.typeclass(xdt))
            node = sdfg_scan.WindowReduce(out, offsets=offs, axis=-1 if layout == "kcontig" else 0,
                                          weights_input=True)
            node.implementation = "kcached" if impl == "kcached" else "direct"
            node.block_size, node.unroll = 16, unroll
            st.add_node(node)
            st.add_edge(st.add_read("x"), None, node, "_in", dace.Memlet.from_array("x", sdfg.arrays["x"]))
            st.add_edge(st.add_read(wdata), None, node, "_weights", dace.Memlet.from_array(wdata, sdfg.arrays[wdata]))
            st.add_edge(node, "_out", st.add_write(out), None, dace.Memlet.from_array(out, sdfg.arrays[out]))
    if gpu:
        sdfg.apply_gpu_transformations()
    sdfg.validate()
    sdfg.expand_library_nodes()
    return sdfg


@pytest.fixture(scope="module", params=[("kcontig", np.float64, np.float32), ("cellcontig", np.float32, np.float64)],
                ids=lambda p: f"{p[0]}-x{np.dtype(p[1]).name}-w{np.dtype(p[2]).name}")
def compiled(request):
    layout, xdt, wdt = request.param
    sdfg = build(layout, xdt, wdt)
    return layout, xdt, wdt, sdfg.compile()


def run_check(compiled, ncol, nlev, seed):
    layout, xdt, wdt, fn = compiled
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((ncol, nlev)).astype(xdt)  # (columns, levels); stored transposed for cellcontig
    ax = -1 if layout == "kcontig" else 0
    xa = x if layout == "kcontig" else np.array(x.T, order="C")
    ws = {f"w_{kind}_{wname}": rng.standard_normal(weight_shape(kind, layout, len(offs), ncol, nlev)).astype(wdt)
          for wname, kind in CASES for offs in [OFFSETS[wname]]}
    meta = {f"o_{impl}_{kind}_{wname}": (kind, wname) for impl in IMPLS for wname, kind in CASES}
    outs = {name: np.zeros_like(xa) for name in meta}
    fn(x=xa, N=ncol, K=nlev, **ws, **outs)
    for name, got in outs.items():
        kind, wname = meta[name]
        want = R.window_reduce(xa, ws[f"w_{kind}_{wname}"], OFFSETS[wname], axis=ax)
        assert np.array_equal(got.view(np.uint8), want.view(np.uint8)), name


@pytest.mark.parametrize("ncol, nlev", [(1, 1), (3, 2), (21, 65), (37, 13), (5, 0)])
def test_runtime_weights_against_reference(compiled, ncol, nlev):
    run_check(compiled, ncol, nlev, ncol * 100 + nlev)


def test_reference_weight_forms_agree():
    """The reference: the four weight forms of one weight vector give the same result; per-level weights are
    taken at the output level."""
    rng = np.random.default_rng(3)
    x, offs = rng.standard_normal((4, 6)), [-1, 0, 2]
    w = np.array([0.3, -0.7, 1.9])
    want = R.window_reduce(x, list(w), offs)
    for form in (np.broadcast_to(w, (4, 3)), np.broadcast_to(w, (4, 6, 3)), w.reshape(1, 1, 3), w.reshape(1, 3)):
        assert np.array_equal(R.window_reduce(x, form, offs), want)
    wl = rng.standard_normal((4, 6, 3))
    got = R.window_reduce(x, wl, offs)
    k = 2
    assert got[1, k] == ((-0.0 + wl[1, k, 0] * x[1, k - 1]) + wl[1, k, 1] * x[1, k]) + wl[1, k, 2] * x[1, k + 2]
    with pytest.raises(ValueError, match="weights of rank 4 do not fit an input of rank 2"):
        R.window_reduce(x, np.zeros((1, 1, 1, 3)), offs)
    with pytest.raises(ValueError, match="2 weights for 3 offsets"):
        R.window_reduce(x, np.zeros((4, 2)), offs)


def _node(wshape, wdtype=dace.float64, **kwargs):
    sdfg = dace.SDFG("weights_errors")
    sdfg.add_array("x", [N, K], dace.float64)
    sdfg.add_array("w", wshape, wdtype)
    sdfg.add_array("y", [N, K], dace.float64)
    st = sdfg.add_state()
    node = sdfg_scan.WindowReduce("wr", offsets=[-1, 0], weights_input=True, **kwargs)
    st.add_node(node)
    st.add_edge(st.add_read("x"), None, node, "_in", dace.Memlet("x[0:N, 0:K]"))
    st.add_edge(st.add_read("w"), None, node, "_weights", dace.Memlet.from_array("w", sdfg.arrays["w"]))
    st.add_edge(node, "_out", st.add_write("y"), None, dace.Memlet("y[0:N, 0:K]"))
    return sdfg, st, node


@pytest.mark.parametrize("wshape, kwargs, message", [
    ([3], {}, r"shape \(3,\), expected \(2,\)"),
    ([K, 2], {}, r"shape \(K, 2\), expected \(N, 2\)"),
    ([N, K, 1, 2], {}, "weights of rank 4 do not fit an input of rank 2"),
    ([2], {"weights": [1.0, 2.0]}, "leave the weights property empty"),
    ([2], {"body": "_out = x0"}, "leave the weights property empty and give no body"),
])
def test_weight_errors(wshape, kwargs, message):
    sdfg, st, node = _node(wshape, **kwargs)
    with pytest.raises(ValueError, match=message) as err:
        node.validate(sdfg, st)
    assert str(err.value).startswith("sdfg_scan.WindowReduce 'wr': ")


def test_weight_dtype_and_connector_errors():
    sdfg, st, node = _node([2], dace.bool_)
    with pytest.raises(ValueError, match="'_weights' has dtype bool, expected an integer or floating type"):
        node.validate(sdfg, st)
    sdfg, st, node = _node([2])
    node.weights_input = False
    with pytest.raises(ValueError, match="connector '_weights' is unexpected"):
        node.validate(sdfg, st)


def test_weights_round_trip():
    sdfg, _, _ = _node([1, K, 2])
    loaded = dace.SDFG.from_json(sdfg.to_json())
    node = next(n for n, _ in loaded.all_nodes_recursive() if isinstance(n, sdfg_scan.WindowReduce))
    assert node.weights_input and "_weights" in node.in_connectors
    loaded.validate()


@pytest.mark.gpu
def test_gpu_codegen_runtime_weights():
    sdfg = dace.SDFG("window_weights_gpu")
    sdfg.add_array("x", [K, N], dace.float64)
    sdfg.add_array("w", [K, N, 4], dace.float64)
    st = sdfg.add_state()
    for impl in ("direct", "kcached"):
        sdfg.add_array(f"o_{impl}", [K, N], dace.float64)
        node = sdfg_scan.WindowReduce(f"o_{impl}", offsets=OFFSETS["back3"], axis=0, weights_input=True)
        node.implementation = impl
        st.add_node(node)
        st.add_edge(st.add_read("x"), None, node, "_in", dace.Memlet("x[0:K, 0:N]"))
        st.add_edge(st.add_read("w"), None, node, "_weights", dace.Memlet("w[0:K, 0:N, 0:4]"))
        st.add_edge(node, "_out", st.add_write(f"o_{impl}"), None, dace.Memlet(f"o_{impl}[0:K, 0:N]"))
    sdfg.apply_gpu_transformations()
    sdfg.expand_library_nodes()
    assert cuda_code(sdfg).count("__global__") >= 2
