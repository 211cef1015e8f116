#!/usr/bin/env bash
# A real round on a GPU machine: the Hopper target's example proposals, patched, compiled, checked and
# timed, then the scorecard. Run where the CuTe DSL bundle is unpacked (see README, "On the GPU machine");
# the ledgers and the reports go to $OUT (default ./device-out), workspaces and compile caches to $WORK.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-device-out}
WORK=${WORK:-/tmp/judge-device}
mkdir -p "$OUT" "$WORK"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
judge() { python3 -m judge.cli.main --ledger "$OUT/ledger.db" "$@"; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv
judge init
judge submit proposals/fp8_group_gemm_sm90
judge shark add sharks/performance-oracle.toml sharks/measured-referee.toml
judge vote votes/fp8_group_gemm_sm90/round-1
judge run --round 1 --target fp8_group_gemm_sm90 --work-dir "$WORK/work" --cache-dir "$WORK/cache" --out "$OUT"
judge report --round 1 --target fp8_group_gemm_sm90 --out "$OUT"
judge status

# A GPU MODE problem, unchanged, as a target: GPU_MODE_PROBLEM=path/to/problems/pmpp_v2/vectoradd_py
if [ -n "${GPU_MODE_PROBLEM:-}" ]; then
  gm() { python3 -m judge.cli.main --ledger "$OUT/gpumode.db" --kernels "$(dirname "$GPU_MODE_PROBLEM")" "$@"; }
  name=$(basename "$GPU_MODE_PROBLEM")
  gm init
  printf '%s' "{\"id\": \"torch-add-out\", \"title\": \"torch.add into the output\", \"author\": \"agent-1\", \"round\": 1,
    \"target\": \"$name\", \"category\": \"memory\", \"claim\": {\"low\": 1.0, \"high\": 1.6},
    \"pitch\": \"Write A + B straight into the output instead of through a temporary.\",
    \"patch\": \"--- a/submission.py\n+++ b/submission.py\n@@ -2,6 +2,7 @@\n \n \n def custom_kernel(data: input_t) -> output_t:\n     A, B, output = data\n-    output[...] = A + B\n+    import torch\n+    torch.add(A, B, out=output)\n     return output\n\"}" | gm submit -
  gm run --round 1 --target "$GPU_MODE_PROBLEM" --work-dir "$WORK/gm-work" --cache-dir "$WORK/gm-cache"
  gm report --round 1 --out "$OUT/gpumode"
fi
