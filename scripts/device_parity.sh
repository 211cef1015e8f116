#!/usr/bin/env bash
# On a GPU machine (see README, "On a GPU machine"): judge beside GPU MODE's own eval.py on the same submissions of
# GPU MODE's problems (benchmarks/gpumode_parity.py), with the tables in $OUT/parity.md, every number in
# $OUT/parity.json and judge's scorecards in $OUT/scorecards.md. Needs a copy of gpu-mode/reference-kernels'
# problems/ in .gpumode/problems (carry it) and judge's libraries (.devbundle/activate.sh).
#   PROBLEMS='pmpp_v2/vectoradd_py linalg/*'  globs relative to .gpumode/problems (default: every family that can
#                                             run on an H100); one call has about 9 minutes, so pick a few
#   LIMIT_S=240 BUDGET_S=510                  seconds per problem (judge's round, and again eval.py's calls); in all
#   PARITY_ARGS='--all-benchmarks'            anything else for the script
#   GPUS=2                                    the globs dealt out in turn to this many GPUs of the host, one run of
#                                             the script on each at once (CUDA_VISIBLE_DEVICES), out in $OUT/gpuN/;
#                                             give one glob per problem to spread problems
#   SAMPLE=1                                  where the time and memory go: judge's CLI, oracle and runners sample
#                                             their stacks (scripts/sampling/sitecustomize.py; not confined, so
#                                             never for a contest) into $OUT/samples/, each process's GPU memory
#                                             into $OUT/samples/gpu-memory.{log,peaks}; read them with
#                                             scripts/sampling/summary.py
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-device-out}
mkdir -p "$OUT"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv | tee "$OUT/gpus.csv"
export PROBLEMS=${PROBLEMS:-}  # the script reads the globs itself, so that the shell expands none of them
watcher=""
if [ "${SAMPLE:-0}" = 1 ]; then
  mkdir -p "$OUT/samples" && touch /tmp/judge_sample_on
  export JUDGE_SAMPLE_DIR=$PWD/$OUT/samples PYTHONPATH=$PWD/scripts/sampling:$PYTHONPATH
  [[ "$OUT" = /* ]] && JUDGE_SAMPLE_DIR=$OUT/samples
  python3 scripts/sampling/gpu_memory.py "$JUDGE_SAMPLE_DIR/gpu-memory" & watcher=$!
fi

parity_on() {  # GPU OUT SCRATCH PROBLEMS: one run of the script, then judge's own log of each problem's round (its
  # progress lines and the oracle's log's tail), for where the time went
  local gpu=$1 out=$2 scratch_root=$3
  mkdir -p "$out" "$scratch_root"
  # shellcheck disable=SC2086
  CUDA_VISIBLE_DEVICES=$gpu PROBLEMS=$4 python3 benchmarks/gpumode_parity.py --root .gpumode/problems \
    --limit-s "${LIMIT_S:-240}" --budget-s "${BUDGET_S:-510}" --out "$out" --gpu "$gpu" --scratch "$scratch_root" \
    ${PARITY_ARGS:-} > "$out/parity.log" 2>&1
  for scratch in "$scratch_root"/*/; do
    [ -f "$scratch/run.log" ] || continue
    log="$out/judge-$(basename "$scratch").log"
    cp "$scratch/run.log" "$log"
    find "$scratch/work" -name oracle.log -exec sh -c 'echo "== $1"; tail -n 40 "$1"' _ {} \; >> "$log" 2>/dev/null
    # a runner writes its samples where it may: its workspace or scratch
    [ "${SAMPLE:-0}" = 1 ] && find "$scratch" -name 'sample-*.txt' -exec sh -c \
      'cp "$1" "$2/$(basename "$(dirname "$1")")-$(basename "$1")"' _ {} "$JUDGE_SAMPLE_DIR" \;
  done
}

gpus=${GPUS:-1}
if [ "$gpus" -le 1 ]; then
  parity_on 0 "$OUT" "$(mktemp -d /tmp/judge-parity-XXXXXX)" "$PROBLEMS"
  cat "$OUT/parity.log"
else
  read -r -a globs <<< "$PROBLEMS"
  [ ${#globs[@]} -gt 0 ] || { echo "GPUS=$gpus needs PROBLEMS: the globs to deal out" >&2; exit 2; }
  for ((gpu = 0; gpu < gpus; gpu++)); do
    share=""
    for ((i = gpu; i < ${#globs[@]}; i += gpus)); do share+="${globs[$i]} "; done
    [ -n "$share" ] && parity_on "$gpu" "$OUT/gpu$gpu" "$(mktemp -d /tmp/judge-parity-XXXXXX)" "$share" &
  done
  wait
  tail -n 5 "$OUT"/gpu*/parity.log
fi
if [ -n "$watcher" ]; then kill "$watcher"; rm -f /tmp/judge_sample_on; fi
