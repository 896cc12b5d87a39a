#!/usr/bin/env bash
# The whole GPU check in one call on a lent CUDA machine (README "Benchmarks"): the machine has
# Python, nvcc, cmake, ninja and cupy but no DaCe, so DaCe 2.0.0a10 and its pure-Python needs travel
# in .devpkgs (made by `make devpkgs`). Logs go to $OUT (default /tmp/gpu_check_out).
#   1. every GPU expansion of every node, both layouts, 327680 x 90 (builds in parallel first);
#   2. each GPU schedule of parallel_prefix (--prefix-schedules): cumsum, linear recurrence, associative scan;
#   3. few long columns: cumsum parallel_prefix against sequential, 2 x 4194304, K-contiguous.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/gpu_check_out}
JOBS=${JOBS:-$(( $(nproc) > 2 ? $(nproc) - 2 : 1 ))}
mkdir -p "$OUT"
export PYTHONPATH="$PWD/.devpkgs:$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
{ date; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,memory.total --format=csv
  nvcc --version | tail -1; cmake --version | head -1
  python3 -c "import sys, dace, numpy, sympy, cupy; print(sys.version.split()[0], 'dace', dace.__version__, 'numpy', numpy.__version__, 'sympy', sympy.__version__, 'cupy', cupy.__version__)"
} 2>&1 | tee "$OUT/machine.txt" || exit 1
python3 -c "import dace" || exit 1
run() {  # log name, arguments
  local log=$1; shift
  python3 benchmarks/gpu_check.py "$@" 2>&1 | grep -v -E '^(--|\[[0-9]+/[0-9]+\])' | tee "$OUT/$log"
}
run main.log --jobs "$JOBS" "${@}"
run prefix.log --prefix-schedules --only "cumsum,linear recurrence,associative scan" --jobs "$JOBS"
run long.log --ncol 2 --nlev 4194304 --only cumsum --layouts k --chunk 1024 --repeats 5 --jobs 2
grep -h -E "^FAILED|builds in|probe" "$OUT"/main.log "$OUT"/prefix.log "$OUT"/long.log
