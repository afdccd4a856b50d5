#!/usr/bin/env bash
# The CUDA part of the suite in one call, for a machine with an NVIDIA GPU (under 5 minutes):
# the CUDA fuzz tests, then the CUDA benchmarks (every size, xl included), whose table is printed last.
# Without a CUDA device visible to torch or JAX it prints "skipped: no CUDA device" and exits 0.
#
#   PYTHONPATH=. bash bench/gpu.sh            (from the checkout; uses .venv/bin/python if present)
#
# Exit status: 0 when the fuzz tests pass and every benchmark's result checks out, 1 otherwise.
set -u
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
PYTHON="${PYTHON:-$([ -x .venv/bin/python ] && echo .venv/bin/python || echo python3)}"

if ! "$PYTHON" -c 'import sys; from bench.plan import devices_here; sys.exit("cuda" not in devices_here())' \
    2>/dev/null; then
    echo "skipped: no CUDA device"
    exit 0
fi

status=0

# ---- CUDA fuzz tests ---------------------------------------------------------------------------------
# CUDA FUZZ SELECTION (maintainers: put the exact command here; pytest's 5 = "nothing selected")
"$PYTHON" -m pytest tests -k cuda -q -p no:cacheprovider
rc=$?; [ "$rc" -eq 0 ] || [ "$rc" -eq 5 ] || status=1

# ---- CUDA benchmarks (the table comes last) -----------------------------------------------------------
"$PYTHON" -m bench --devices cuda --quick --out out/bench/cuda --json out/bench/cuda/records.json || status=1
exit "$status"
