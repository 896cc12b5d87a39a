"""DaCe library environments of sdfg_scan expansions."""

import ctypes
import functools
import glob
import importlib.util
import os
import platform
import re
import shutil
import subprocess
from pathlib import Path

import dace.library
from dace.libraries.sparse.environments.cusparse import cuSPARSE as _DaceCuSparse

LIBM_HEADER = str(Path(__file__).with_name("sdfg_scan_libm.h"))
"""Overloads of ``dace::math::pow/exp/log`` for doubles that call glibc's errno-free entry points."""


@functools.cache
def libm_finite_version() -> int | None:
    """215 or 217: the symbol version (``GLIBC_2.15``, ``GLIBC_2.17``) under which this machine's libm
    exports ``__pow_finite``, ``__exp_finite`` and ``__log_finite`` (the implementations behind ``pow``,
    ``exp``, ``log``, without the wrapper that sets errno); ``None`` where it does not (not glibc, or a
    libm without them), or where the environment variable ``SDFG_SCAN_LIBM_FINITE`` is ``0`` (opt-out: the
    program then calls ``pow`` and sets errno as usual). Looked up once, with ``dlvsym``."""
    if os.environ.get("SDFG_SCAN_LIBM_FINITE", "").strip() == "0":
        return None
    try:
        libm = ctypes.CDLL("libm.so.6")
        dlvsym = ctypes.CDLL(None).dlvsym
    except (OSError, AttributeError):
        return None
    dlvsym.restype = ctypes.c_void_p
    dlvsym.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p]
    for code, version in ((215, b"GLIBC_2.15"), (217, b"GLIBC_2.17")):
        if all(dlvsym(libm._handle, f"__{f}_finite".encode(), version) for f in ("pow", "exp", "log")):
            return code
    return None


def libm_flags() -> list[str]:
    """The compile flag that switches :data:`LIBM_HEADER` on, where the entry points exist."""
    code = libm_finite_version()
    return [] if code is None else [f"-DSDFG_SCAN_LIBM_FINITE={code}"]


GATHER_TUNING = ["-mtune-ctrl=use_gather_2parts,use_gather_4parts,use_gather"]
"""GCC's tuning switches that let the vectoriser emit gather instructions (:func:`gather_flags`)."""


def _native_tuning(compiler: str) -> tuple[str, str] | None:
    """``(march, mtune)`` that ``compiler -march=native`` resolves to, if it is GCC; else None."""
    try:
        out = subprocess.run([compiler, "-march=native", "-Q", "--help=target"], capture_output=True, text=True,
                             timeout=60, check=False).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    arch, tune = re.search(r"^\s*-march=\s+(\S+)", out, re.M), re.search(r"^\s*-mtune=\s+(\S+)", out, re.M)
    return (arch.group(1), tune.group(1)) if arch and tune else None


@functools.cache
def gather_flags() -> list[str]:
    """:data:`GATHER_TUNING` where the host is an Intel CPU with AVX-512 that the C++ compiler (``$CXX``, else
    ``c++``) is GCC and tunes as ``generic`` under ``-march=native``, because it does not know the CPU model;
    else nothing. ``SDFG_SCAN_GATHERS=0`` turns it off, ``=1`` on wherever the compiler is GCC on x86-64.

    The vectorised cell loops of the accurate and checked ``pow`` load their tables by lane. GCC 12's
    ``generic`` tuning emits no gather instruction and loads the lanes one by one into vector registers;
    its tunings of the AVX-512 Intel CPUs it knows emit gathers. On an Intel Xeon of CPU model 207, which
    GCC 12.2 tunes as ``generic``, the gathers made graupel's ``exact`` build 6 % and its ``replay`` build
    8 % faster (min of 15 interleaved calls, bitwise the same values: benchmarks/HISTORY.md, "Stop 58").
    Intel CPUs newer than the compiler are newer than the gather data-sampling flaw whose microcode fix
    slows gathers on older models (which GCC 12 knows, and tunes as it does); AMD's tunings avoid gathers
    on purpose (slow there), so AMD CPUs are left alone."""
    switch = os.environ.get("SDFG_SCAN_GATHERS", "").strip()
    if switch == "0" or platform.machine() not in ("x86_64", "AMD64"):
        return []
    compiler = os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++")
    tuning = _native_tuning(compiler) if compiler else None
    if tuning is None:
        return []
    if switch == "1":
        return list(GATHER_TUNING)
    try:
        cpuinfo = Path("/proc/cpuinfo").read_text()
    except OSError:
        return []
    intel = re.search(r"^vendor_id\s*:\s*GenuineIntel", cpuinfo, re.M)
    avx512 = re.search(r"^flags\s*:.*\bavx512f\b", cpuinfo, re.M)
    return list(GATHER_TUNING) if intel and avx512 and tuning[1] == "generic" else []


STRICT_HOST_FLAGS = ["-ffp-contract=off", "-fno-reciprocal-math", "-fsigned-zeros", "-fno-fast-math",
                     "-fno-math-errno", "-fno-trapping-math"]
"""GCC flags of IEEE-strict host code (no FMA contraction, no reciprocal math, signed zeros).

``-fno-fast-math`` also turns errno-setting math and trapping math back on, and DaCe orders the
environments of a build by a set of classes, which differs from process to process: where this set came
after ``VectorMath``'s ``-fno-math-errno -fno-trapping-math``, it undid them (GCC never vectorises a call that
may set errno), so whether a replay build vectorised its math depended on the process. The last two flags
make every order end in the same state, the one of DaCe's own defaults. Neither changes a value (errno and
the floating-point exception flags are not results).

DaCe also collects the flags of all environments of a build in a *set* of strings (``compiler.py``), so their
order on the command line differs from process to process too, the flags of one environment included:
:class:`ExactArithmetic` therefore passes these as one string (one set element, split by the shell in this
order), which keeps ``-fno-fast-math`` before the two flags that undo its errno and trapping math in every
process. Before that, a process whose set put ``-fno-fast-math`` last built with trapping math, and GCC did
not if-convert the vectorised exact loops (stop 35)."""


@dace.library.environment
class ExactArithmetic:
    """Pins host floating-point code generation for ``exact`` expansions.

    DaCe's default CPU flags (``-O3 -march=native -freciprocal-math -fno-signed-zeros ...``) let GCC
    contract ``a*b + c`` into an FMA and replace ``x / y`` by ``x * (1/y)``; either changes bits. An SDFG
    that holds an ``exact`` expansion is compiled with these flags appended (they come after DaCe's own
    flags, so they win). They apply to the whole host translation unit of that SDFG, which only ever
    makes other code more faithful to IEEE semantics; ``CMAKE_CUDA_FLAGS`` gives a CUDA build the nvcc
    equivalents (:data:`FLAGS_CUDA`). ``sdfg_scan.compile_flags("exact")`` lists them.

    It also includes :data:`LIBM_HEADER`: the program's scalar ``pow``/``exp``/``log`` of doubles call
    glibc's implementations directly, skipping the wrapper that sets errno (the same values; where the
    entry points exist, :func:`libm_flags`).
    """

    cmake_minimum_version = None
    cmake_packages: list[str] = []
    # appended to DaCe's CUDA flags (the value is expanded when CMake configures): FLAGS_CUDA for device
    # code, the host flags for the host code nvcc compiles
    cmake_variables = {"CMAKE_CUDA_FLAGS": "${CMAKE_CUDA_FLAGS} --fmad=false -prec-div=true -prec-sqrt=true "
                                           "-Xcompiler=-ffp-contract=off -Xcompiler=-fno-reciprocal-math "
                                           "-Xcompiler=-fsigned-zeros"}
    cmake_includes: list[str] = []
    cmake_libraries: list[str] = []
    cmake_compile_flags = [" ".join(STRICT_HOST_FLAGS)] + libm_flags()   # one element: see STRICT_HOST_FLAGS
    cmake_link_flags: list[str] = []
    cmake_files: list[str] = []
    headers = {"frame": [LIBM_HEADER]}
    state_fields: list[str] = []
    init_code = ""
    finalize_code = ""
    dependencies: list[type] = []


BLOCK_DEFAULT = (32, 1, 1)
"""``gpu_block_size`` of the maps of our expansions that may become GPU kernels and whose block size was never
tuned on a GPU (the blocked CPU schedules, PCR's element maps): DaCe's own default
(``compiler.cuda.default_block_size``) set on the map, so that DaCe does not warn that it falls back to it."""

FLAGS_CUDA = ["--fmad=false", "-prec-div=true", "-prec-sqrt=true"]
"""nvcc flags an ``exact`` GPU build needs (see :func:`sdfg_scan.select.exact_cuda_flags`)."""


def _toolkit_roots() -> list[Path]:
    """CUDA toolkit folders: ``CUDA_HOME``/``CUDA_PATH``, the one holding ``nvcc``, ``/usr/local/cuda*``."""
    roots = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH")]
    nvcc = shutil.which("nvcc")
    if nvcc:
        roots.append(str(Path(nvcc).resolve().parent.parent))
    roots += sorted(glob.glob("/usr/local/cuda*"))
    return [Path(r) for r in roots if r and Path(r).is_dir()]


def _toolkit_has_cusparse() -> bool:
    libs = ("lib64", "lib", "targets/x86_64-linux/lib", "targets/sbsa-linux/lib")
    return any((root / "include" / "cusparse.h").is_file() and any(glob.glob(str(root / d / "libcusparse.so*")) for d in libs)
               for root in _toolkit_roots())


def cusparse_wheel() -> tuple[Path, Path] | None:
    """``(include folder, shared library)`` of a pip-installed cuSPARSE (the ``nvidia-cusparse`` wheel,
    ``nvidia/cu13`` or ``nvidia/cusparse`` layout), or ``None``."""
    spec = importlib.util.find_spec("nvidia")
    for base in (spec.submodule_search_locations or []) if spec else []:
        for sub in ("cu13", "cu12", "cusparse"):
            inc = Path(base) / sub / "include"
            libs = sorted(glob.glob(str(Path(base) / sub / "lib" / "libcusparse.so*")))
            if (inc / "cusparse.h").is_file() and libs:
                return inc, Path(libs[0])
    return None


def cusparse_available() -> bool:
    """Whether the cuSPARSE headers and library are here (CUDA toolkit or pip wheel) to build against."""
    return _toolkit_has_cusparse() or cusparse_wheel() is not None


def _cusparse_includes() -> list[str]:
    wheel = None if _toolkit_has_cusparse() else cusparse_wheel()
    return [str(wheel[0])] if wheel else []


def _cusparse_libraries() -> list[str]:
    wheel = None if _toolkit_has_cusparse() else cusparse_wheel()
    return [str(wheel[1])] if wheel else ["cusparse"]   # a full path: CMake links it and records its rpath


@dace.library.environment
class CuSparse:
    """cuSPARSE for the ``cusparse`` expansion: DaCe's handle and header (``dace_cusparse.h``), built
    against the CUDA toolkit's cuSPARSE, or against the pip wheel ``nvidia-cusparse`` where the toolkit
    has none (the ``test`` extra installs it, so that the build is tested on machines without a GPU).
    The paths are looked up when the SDFG is built, not at import."""

    cmake_minimum_version = None
    cmake_packages = ["CUDA"]
    cmake_variables: dict[str, str] = {}
    cmake_includes = _cusparse_includes
    cmake_libraries = _cusparse_libraries
    cmake_compile_flags: list[str] = []
    cmake_link_flags: list[str] = []
    cmake_files: list[str] = []
    headers = {"frame": [str(Path(_DaceCuSparse._dace_file_path).parents[1] / "include" / "dace_cusparse.h")],
               "cuda": [str(Path(_DaceCuSparse._dace_file_path).parents[1] / "include" / "dace_cusparse.h")]}
    state_fields = list(_DaceCuSparse.state_fields)
    init_code = ""
    finalize_code = ""
    dependencies: list[type] = []
    handle_setup_code = staticmethod(_DaceCuSparse.handle_setup_code)


__all__ = ["BLOCK_DEFAULT", "CuSparse", "ExactArithmetic", "FLAGS_CUDA", "LIBM_HEADER", "STRICT_HOST_FLAGS", "cusparse_available", "cusparse_wheel",
           "libm_finite_version", "libm_flags"]
