#!/usr/bin/env bash
# The CUDA part of the suite in one call, for a machine with an NVIDIA GPU: the CUDA fuzz tests, then the
# CUDA benchmarks (every size, xl included), whose table is printed last. Sized for about 5 minutes
# (docs/measurements.md has its timing on an H200).
# Without a CUDA device visible to torch or JAX it prints "skipped: no CUDA device" and exits 0.
#
#   PYTHONPATH=. bash bench/gpu.sh            (from the checkout; uses .venv/bin/python if present)
#
# Exit status: 0 when the fuzz tests pass and every benchmark's result checks out, 1 otherwise.
set -u
if [ "${1:-}" = "-h" ] || [ "${1:-}" = "--help" ]; then
    sed -n '2,9s/^# \{0,1\}//p' "$0"
    exit 0
fi
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
PYTHON="${PYTHON:-$([ -x .venv/bin/python ] && echo .venv/bin/python || echo python3)}"

if ! "$PYTHON" -c 'import sys; from bench.plan import devices_here; sys.exit("cuda" not in devices_here())' \
    2>/dev/null; then
    echo "skipped: no CUDA device"
    exit 0
fi

status=0
# Several processes share the GPU (pytest-xdist workers): JAX must not grab 75% of its memory in each.
export XLA_PYTHON_CLIENT_PREALLOCATE=false

# ---- CUDA fuzz tests ---------------------------------------------------------------------------------
# Every test parametrized on the cuda device: the fuzzer's forward and gradient properties per
# implementation x dtype (ids like torch-compile-cuda-float16), the contract's examples and edge cases,
# torch.compile's recompile count. Compiling dominates, so spread them over workers when xdist is here.
workers=()
"$PYTHON" -c 'import xdist' 2>/dev/null && workers=(-n 4)
"$PYTHON" -m pytest tests -k cuda -q -p no:cacheprovider ${workers[@]+"${workers[@]}"}
rc=$?; [ "$rc" -eq 0 ] || status=1  # 5 ("nothing selected") is a failure too: the selection is wrong

# ---- CUDA benchmarks (the table comes last) -----------------------------------------------------------
mkdir -p out/bench/cuda  # --json refuses a folder that does not exist, before it benchmarks anything
"$PYTHON" -m bench --devices cuda --quick --out out/bench/cuda --json out/bench/cuda/records.json || status=1
exit "$status"
