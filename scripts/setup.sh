#!/usr/bin/env bash
# Creates .venv with judge and what its stages need: torch (for the reference kernels), CuTe DSL and ptxas
# (for the compile stage). Which torch: on a machine without an NVIDIA GPU (no nvidia-smi) the CPU build,
# from PyTorch's CPU index (PyPI's Linux torch is the CUDA build, with gigabytes of CUDA libraries);
# with an NVIDIA GPU, PyPI's CUDA build. TORCH_INDEX=URL picks another index for torch.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
TORCH_VERSION=2.13.0
CPU_INDEX=https://download.pytorch.org/whl/cpu
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip
# torch first and pinned: with it installed, the project's unpinned 'torch' need is already met.
# The CPU index is an extra index, asked for torch alone (--no-deps): the CPU build (2.13.0+cpu) ranks above
# PyPI's 2.13.0, and a CPU wheel among pip's configured sources (find-links) is still found. torch's own
# dependencies then come from pip's usual sources.
# pip's own reports say which file it installed: an index that cannot be reached is skipped with a warning, and
# torch then comes from the next source, so the index asked is not always the one torch came from.
reports=$(mktemp -d)
trap 'rm -rf "$reports"' EXIT
if [ -z "${TORCH_INDEX:-}" ] && command -v nvidia-smi > /dev/null 2>&1; then
  echo "setup: NVIDIA GPU found (nvidia-smi): asking PyPI for torch $TORCH_VERSION, the CUDA build"
else
  if [ -z "${TORCH_INDEX:-}" ]; then
    TORCH_INDEX=$CPU_INDEX
    echo "setup: no NVIDIA GPU (no nvidia-smi): asking $CPU_INDEX for torch $TORCH_VERSION, the CPU build"
  else
    echo "setup: asking $TORCH_INDEX for torch $TORCH_VERSION"
  fi
  .venv/bin/python -m pip install -q --no-deps "torch==$TORCH_VERSION" --extra-index-url "$TORCH_INDEX" \
    --report "$reports/1.json"
fi
.venv/bin/python -m pip install -q "torch==$TORCH_VERSION" --report "$reports/2.json"
.venv/bin/python -m pip install -q -e '.[cute,dev]'
echo "setup: torch $(.venv/bin/python -c 'import torch; print(torch.__version__, "(CUDA " + str(torch.version.cuda) + ")" if torch.version.cuda else "(CPU build)")')"
echo "setup: torch came from $(.venv/bin/python scripts/pip_origin.py torch "$reports"/*.json)"
echo "setup: $(.venv/bin/judge --version)"
echo "setup: put judge on your PATH with 'source .venv/bin/activate' (or call .venv/bin/judge)"
