#!/usr/bin/env bash
# On a GPU machine (see README, "On a GPU machine"): the GPU tests, GPU MODE's pmpp_v2 solutions and the
# red-team suite, with their output in $OUT/tests.log. Needs the CuTe DSL bundle and, for the pmpp_v2 tests,
# a copy of gpu-mode/reference-kernels' problems/ in .gpumode/problems.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-device-out}
mkdir -p "$OUT"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
export JUDGE_GPUMODE_PROBLEMS=$PWD/.gpumode/problems
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv
python3 -m pytest -q -rs -m gpu -p no:cacheprovider "$@" 2>&1 | tee "$OUT/tests.log"
