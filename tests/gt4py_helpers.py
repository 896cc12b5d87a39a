"""What the gt4py test modules share: the backends they compare and the memoised runs of the test programs.

Imported by ``test_gt4py*.py`` in the gt4py venv; without gt4py the import skips the importing module. The
modules are split so that ``make test-gt4py`` (``-n 2 --dist loadfile``) keeps both workers busy; every
module compiles its programs in its own worker (gt4py's build cache and :data:`_RESULTS` live per process).

Backends (:data:`BACKENDS`, each with the ``CXXFLAGS`` it must be built under):

* ``exact``: ``sdfg_scan.gt4py.make_backend(reproducibility="exact", stage="hooks")``;
* ``exact_final``: ``make_backend(reproducibility="exact")``, its CPU default ``stage="final"``;
* ``stock_strict``: gt4py's ``run_dace_cpu`` toolchain with ``CXXFLAGS`` = gt4py's flags + the strict ones;
* ``stock``: gt4py's defaults (``-O3 -march=native``, FP contraction allowed).
"""

from __future__ import annotations

import contextlib
import os

import numpy as np
import pytest

os.environ.setdefault("GT4PY_BUILD_JOBS_MODE", "serial")  # read at gt4py import: translate in this process
gtx = pytest.importorskip("gt4py.next", reason="gt4py is not installed here: the gt4py tests run in the gt4py "
                          "venv (`make test-gt4py`, Python >= 3.12)")

from gt4py.next.program_processors.runners.dace.transformations import GT4PyAutoOptHook as Hook  # noqa: E402, F401
from gt4py.next.program_processors.runners.dace.workflow import backend as gtx_backend  # noqa: E402
from gt4py.next.program_processors.runners.dace.workflow import factory as gtx_factory  # noqa: E402
from gt4py_programs.programs import PROGRAMS, Cell, K  # noqa: E402

import sdfg_scan.gt4py as sg  # noqa: E402
from sdfg_scan.expansions.environments import ExactArithmetic  # noqa: E402

GT4PY_CXXFLAGS = "-fPIC -O3 -march=native -Wall -Wextra -Wno-unused-parameter -Wno-unused-label"
STRICT_CXXFLAGS = " ".join([GT4PY_CXXFLAGS, *ExactArithmetic.cmake_compile_flags])
SHAPES = [(5, 7, "C"), (6, 9, "F"), (1, 1, "C"), (3, 1, "F"), (1, 4, "F"), (4, 2, "C")]
SHAPE_IDS = [f"{n}x{k}{o}" for n, k, o in SHAPES]


@contextlib.contextmanager
def cxxflags(flags: str | None):
    """gt4py reads ``CXXFLAGS`` when it builds (and fingerprints) a program: scope it to one backend."""
    old = os.environ.get("CXXFLAGS")
    if flags is not None:
        os.environ["CXXFLAGS"] = flags
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("CXXFLAGS", None)
        else:
            os.environ["CXXFLAGS"] = old


def _backends():
    with cxxflags(STRICT_CXXFLAGS):
        strict = gtx_backend.make_dace_toolchain(gtx_factory.DaCeConfig(), name_postfix="_strict")
    return {
        "stock": (gtx_backend.make_dace_toolchain(gtx_factory.DaCeConfig(), name_postfix="_stock"), None),
        "stock_strict": (strict, STRICT_CXXFLAGS),
        "exact": (sg.make_backend(gpu=False, reproducibility="exact", stage="hooks"), None),
        "exact_final": (sg.make_backend(gpu=False, reproducibility="exact"), None),   # the CPU default: "final"
    }


BACKENDS = _backends()
_RESULTS: dict[tuple, tuple[dict, tuple]] = {}


def run_program(program: str, backend: str, shape: tuple[int, int, str]) -> tuple[dict, tuple]:
    """(outputs, NumPy reference) of ``program`` on ``backend`` at ``shape`` (seeded inputs; memoised)."""
    key = (program, backend, shape)
    if key not in _RESULTS:
        case = PROGRAMS[program]
        n, nk, order = shape
        ins = {k: np.asarray(v, order=order) for k, v in case.make_inputs(np.random.default_rng(7), n, nk).items()}
        fields = {k: gtx.as_field([Cell, K], v, allocator=np) for k, v in ins.items()}
        outs = {k: gtx.as_field([Cell, K], np.full((n, nk), np.nan, order=order), allocator=np)
                for k in case.outputs}
        be, flags = BACKENDS[backend]
        with cxxflags(flags):
            case.program.with_backend(be)(**fields, **outs, offset_provider={})
        ref = case.reference(*(ins[k] for k in case.inputs))
        _RESULTS[key] = ({k: v.asnumpy() for k, v in outs.items()}, ref)
    return _RESULTS[key]


def bitwise(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and np.array_equal(a.view(np.uint64), b.view(np.uint64))


def translate(program: str, hooks) -> object:
    translator = gtx_factory.make_dace_translator(gtx_factory.DaCeConfig(),
                                                  auto_optimize_args={"optimization_hooks": hooks})
    return translator.generate_sdfg(PROGRAMS[program].program.gtir, {}, K)
