#!/usr/bin/env bash
# judge's own cost and precision on a GPU machine: the self-check (a kernel against itself and against
# calibrated slowdowns, docs/judge_performance.md) and whole `judge run` rounds of vecadd candidates on one GPU,
# on every GPU of the host and through Ray (benchmarks/judge_scale.py). Output in $OUT (default ./device-out).
#   MODES=one,gpus,ray  which rounds benchmarks/judge_scale.py runs (ray: a head is started on this host)
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
ray_args=()
if [[ ",$MODES," == *",ray,"* ]]; then
  python3 -c 'from ray.scripts.scripts import main; main()' start --head --disable-usage-stats \
    --num-gpus "$(nvidia-smi -L | grep -c '^GPU ')" > "$OUT/ray-start.log" 2>&1
  ray_args=(--ray-address auto)
fi
timeout 420 python3 benchmarks/judge_scale.py --candidates "${CANDIDATES:-8}" --modes "$MODES" "${ray_args[@]}" \
  --json "$OUT/scale.json" 2>&1 | tee "$OUT/scale.md"
if [ ${#ray_args[@]} -gt 0 ]; then
  python3 -c 'from ray.scripts.scripts import main; main()' stop > /dev/null 2>&1
fi
