#!/usr/bin/env bash
# On a GPU machine: issue 39's isolation of runners. Confined runners start (cold, spares forked from the template,
# CUDA contexts made before and after confinement), run CUDA kernels and cuBLAS with only the /proc and /sys that
# judge/sandbox/confine.py's PROC_FACTS and SYS_TREES allow, map the oracle's device memory (CUDA IPC), and a
# colluding pair tries every channel from inside (tests/fixtures/confine/collude.py); output in $OUT/isolation.log.
# Every test should pass; the GPU pair prints what its base found (free device memory is the known residual).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-device-out}
mkdir -p "$OUT"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
{ id; uname -r; nvidia-smi --query-gpu=name,driver_version --format=csv; } 2>&1 | tee "$OUT/isolation.log"
python3 -m pytest -q -rs -s -m gpu -p no:cacheprovider tests/test_confine.py tests/test_cuda_ipc.py \
    tests/test_forkserver.py tests/test_warm.py "$@" 2>&1 | tee -a "$OUT/isolation.log"
python3 -m pytest -q -rs -p no:cacheprovider -k "candidate or exchange" tests/test_confine.py tests/test_exchange.py \
    2>&1 | tee -a "$OUT/isolation.log"
