"""DaCe library environments of sdfg_scan expansions."""

import dace.library


@dace.library.environment
class ExactArithmetic:
    """Pins host floating-point code generation for ``exact`` expansions.

    DaCe's default CPU flags (``-O3 -march=native -freciprocal-math -fno-signed-zeros ...``) let GCC
    contract ``a*b + c`` into an FMA and replace ``x / y`` by ``x * (1/y)``; either changes bits. An SDFG
    that holds an ``exact`` expansion is compiled with these flags appended (they come after DaCe's own
    flags, so they win). They apply to the whole host translation unit of that SDFG, which only ever
    makes other code more faithful to IEEE semantics.
    """

    cmake_minimum_version = None
    cmake_packages = []
    cmake_variables = {}
    cmake_includes = []
    cmake_libraries = []
    cmake_compile_flags = ["-ffp-contract=off", "-fno-reciprocal-math", "-fsigned-zeros", "-fno-fast-math"]
    cmake_link_flags = []
    cmake_files = []
    headers = []
    state_fields = []
    init_code = ""
    finalize_code = ""
    dependencies = []


FLAGS_CUDA = ["--fmad=false", "-prec-div=true", "-prec-sqrt=true"]
"""nvcc flags an ``exact`` GPU build needs (see :func:`sdfg_scan.select.exact_cuda_flags`)."""

__all__ = ["ExactArithmetic", "FLAGS_CUDA"]
