#!/usr/bin/env bash
# The Hopper FP8 contest on a GPU machine, round by round: each round's proposals (round 1's in
# proposals/fp8_group_gemm_sm90/, later ones in its round-N/ folders) and both sharks' votes, judged against
# the round's base (round 1's kernel, then each winner applied in turn), then its scorecard, the leaderboard
# and the brief for the next round.
#
#   ROUNDS="1 2 3 4" bash scripts/device_contest.sh
#
# The ledger is $LEDGER (default $OUT/fp8-contest.db): to go on in a later call, put the earlier ledger there
# and name the remaining rounds. Reports go to $OUT/reports, workspaces and compile caches to $WORK.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-device-out}
WORK=${WORK:-/tmp/judge-contest}
LEDGER=${LEDGER:-$OUT/fp8-contest.db}
TARGET=fp8_group_gemm_sm90
mkdir -p "$OUT/reports" "$WORK"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
judge() { python3 -m judge.cli.main --ledger "$LEDGER" "$@"; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv
judge init
judge shark add sharks/performance-oracle.toml sharks/measured-referee.toml
for round in ${ROUNDS:-1 2 3 4}; do
  proposals=proposals/$TARGET
  [ "$round" -gt 1 ] && proposals=$proposals/round-$round
  echo "== round $round: $(date -u '+%Y-%m-%d %H:%M') UTC"
  judge submit "$proposals"
  judge vote "votes/$TARGET/round-$round"
  judge run --round "$round" --target "$TARGET" --work-dir "$WORK/work" --cache-dir "$WORK/cache"
  judge report --round "$round" --target "$TARGET" --out "$OUT/reports"
  judge brief --round "$((round + 1))" --target "$TARGET" --out "$OUT/reports"
done
judge report --leaderboard --out "$OUT/reports"
judge status
