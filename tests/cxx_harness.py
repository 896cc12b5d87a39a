"""Small C++ test harnesses (no DaCe program around them), built the way DaCe builds a program's code."""

from __future__ import annotations

import ctypes
import shutil
import subprocess
from pathlib import Path

import dace
import pytest


def build(src: Path, name: str, flags: list[str], libraries: tuple[str, ...] = ()) -> tuple[ctypes.CDLL, str]:
    """``src`` compiled into ``<name>.so`` beside it with DaCe's CPU flags, ``-O3`` and ``flags``: (the loaded
    library, GCC's vectorisation report). Skips the test where there is no C++ compiler."""
    cxx = shutil.which("g++") or shutil.which("c++")
    if cxx is None:
        pytest.skip("no C++ compiler")
    so = src.with_name(f"{name}.so")
    base = dace.Config.get("compiler", "cpu", "args").split() + ["-O3", "-std=c++17", "-fPIC", "-shared"]
    res = subprocess.run([cxx, *base, *flags, "-fopt-info-vec-optimized", str(src), "-o", str(so), *libraries],
                         capture_output=True, text=True, check=True)
    return ctypes.CDLL(str(so)), res.stderr
