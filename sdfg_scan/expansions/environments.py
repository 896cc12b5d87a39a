"""DaCe library environments of sdfg_scan expansions."""

import glob
import importlib.util
import os
import shutil
from pathlib import Path

import dace.library
from dace.libraries.sparse.environments.cusparse import cuSPARSE as _DaceCuSparse


@dace.library.environment
class ExactArithmetic:
    """Pins host floating-point code generation for ``exact`` expansions.

    DaCe's default CPU flags (``-O3 -march=native -freciprocal-math -fno-signed-zeros ...``) let GCC
    contract ``a*b + c`` into an FMA and replace ``x / y`` by ``x * (1/y)``; either changes bits. An SDFG
    that holds an ``exact`` expansion is compiled with these flags appended (they come after DaCe's own
    flags, so they win). They apply to the whole host translation unit of that SDFG, which only ever
    makes other code more faithful to IEEE semantics; ``CMAKE_CUDA_FLAGS`` gives a CUDA build the nvcc
    equivalents (:data:`FLAGS_CUDA`). ``sdfg_scan.compile_flags("exact")`` lists them.
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
    cmake_compile_flags = ["-ffp-contract=off", "-fno-reciprocal-math", "-fsigned-zeros", "-fno-fast-math"]
    cmake_link_flags: list[str] = []
    cmake_files: list[str] = []
    headers: list[str] = []
    state_fields: list[str] = []
    init_code = ""
    finalize_code = ""
    dependencies: list[type] = []


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


__all__ = ["CuSparse", "ExactArithmetic", "FLAGS_CUDA", "cusparse_available", "cusparse_wheel"]
