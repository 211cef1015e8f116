#!/usr/bin/env bash
# Sets up a fresh machine and runs round 1 on the shipped example proposals, ending with the rendered
# scorecard: the NVFP4 grouped-GEMM contest (compiled for sm_100a here; its GPU stages need a B200) and the
# CPU example target, whose every stage and every defence of the referee runs on this machine.
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
$judge report --leaderboard > /dev/null
echo
echo "round 1 scorecard: $report"
echo
cat "$report"
