#!/usr/bin/env bash
# Sets up a fresh machine and runs round 1 on the shipped example proposals: the NVFP4 grouped-GEMM contest
# (compiled for sm_100a here; its GPU stages need a B200) and the CPU example target, whose every stage and
# every defence of the referee runs on this machine. Ends with a short summary (each target's verdicts,
# `judge status`) and the paths of the scorecard and the leaderboard, not the scorecard itself.
# Safe to run again: nothing is duplicated.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
judge=.venv/bin/judge
$judge init
$judge submit proposals/nvfp4_group_gemm proposals/vecadd_cpu
$judge shark add sharks/performance-oracle.toml sharks/measured-referee.toml
$judge vote votes/nvfp4_group_gemm/round-1
$judge run --round 1
report=$($judge report --round 1)
leaderboard=$($judge report --leaderboard)
echo
$judge status
echo
echo "round 1 scorecard: $report ($(wc -l < "$report") lines)"
echo "leaderboard: $leaderboard"
echo "next: 'judge brief --target vecadd_cpu' writes round 2's brief; 'judge base --target vecadd_cpu' prints its base"
