#!/usr/bin/env bash
# judge's own cost and precision on a GPU machine: the self-check (a kernel against itself and against
# calibrated slowdowns, docs/judge_performance.md) and whole `judge run` rounds of vecadd candidates on one GPU,
# on every GPU of the host and through Ray (benchmarks/judge_scale.py). Output in $OUT (default ./device-out).
#   MODES=one,gpus,ray  which rounds benchmarks/judge_scale.py runs (ray: it starts a head on this host)
#   SELFCHECK=0         skip the self-check
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-device-out}
MODES=${MODES:-one}
mkdir -p "$OUT"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv | tee "$OUT/gpus.csv"
if [ "${SELFCHECK:-1}" = 1 ]; then
  timeout 300 python3 benchmarks/judge_selfcheck.py --json "$OUT/selfcheck.json" 2>&1 | tee "$OUT/selfcheck.md"
fi
# ray: judge_scale starts a head on this host (`ray start --head`) for that round and stops it after
timeout 420 python3 benchmarks/judge_scale.py --candidates "${CANDIDATES:-8}" --modes "$MODES" --ray-address start \
  --json "$OUT/scale.json" 2>&1 | tee "$OUT/scale.md"
