#!/usr/bin/env bash
# A real round on a GPU machine: the Hopper target's example proposals, patched, compiled, checked and
# timed, then the scorecard. Run where the CuTe DSL bundle is unpacked (see README, "On the GPU machine");
# the ledger, the report and the logs go to $OUT (default ./device-out).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-device-out}
mkdir -p "$OUT"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
judge() { python3 -m judge.cli --ledger "$OUT/ledger.db" "$@"; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv | tee "$OUT/nvidia-smi.txt"
judge init
judge submit proposals/fp8_group_gemm_sm90
judge shark add sharks/performance-oracle.toml sharks/measured-referee.toml
judge vote votes/fp8_group_gemm_sm90/round-1
judge run --round 1 --target fp8_group_gemm_sm90 --work-dir "$OUT/work" --cache-dir "$OUT/cache" 2>&1 | tee "$OUT/run.log"
judge report --round 1 --target fp8_group_gemm_sm90 --out "$OUT"
judge status
