#!/usr/bin/env bash
# On a GPU machine (see README, "On a GPU machine"): judge beside GPU MODE's own eval.py on the same submissions of
# GPU MODE's problems (benchmarks/gpumode_parity.py), with the tables in $OUT/parity.md, every number in
# $OUT/parity.json and judge's scorecards in $OUT/scorecards.md. Needs a copy of gpu-mode/reference-kernels'
# problems/ in .gpumode/problems (carry it) and judge's libraries (.devbundle/activate.sh).
#   PROBLEMS='pmpp_v2/vectoradd_py linalg/*'  globs relative to .gpumode/problems (default: every family that can
#                                             run on an H100); one call has about 9 minutes, so pick a few
#   LIMIT_S=240 BUDGET_S=510                  seconds per problem (judge's round, and again eval.py's calls); in all
#   PARITY_ARGS='--all-benchmarks'            anything else for the script
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-device-out}
mkdir -p "$OUT"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv | tee "$OUT/gpus.csv"
export PROBLEMS=${PROBLEMS:-}  # the script reads the globs itself, so that the shell expands none of them
# shellcheck disable=SC2086
python3 benchmarks/gpumode_parity.py --root .gpumode/problems \
  --limit-s "${LIMIT_S:-240}" --budget-s "${BUDGET_S:-510}" --out "$OUT" ${PARITY_ARGS:-} 2>&1 | tee "$OUT/parity.log"
# judge's own log of each problem's round (its progress lines and the oracle's log's tail), for where the time went
for scratch in /tmp/judge-parity-*/*/; do
  [ -f "$scratch/run.log" ] || continue
  log="$OUT/judge-$(basename "$scratch").log"
  cp "$scratch/run.log" "$log"
  find "$scratch/work" -name oracle.log -exec sh -c 'echo "== $1"; tail -n 40 "$1"' _ {} \; >> "$log" 2>/dev/null
done
