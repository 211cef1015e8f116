#!/usr/bin/env bash
# Creates .venv with judge and what its stages need on a machine without a GPU:
# the CPU build of torch (for the reference kernels), CuTe DSL and ptxas (for the compile stage).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip
# torch first and pinned: with it installed, the project's unpinned 'torch' need is already met
.venv/bin/python -m pip install -q "torch==2.13.0"
.venv/bin/python -m pip install -q -e '.[cute,dev]'
echo "setup: $(.venv/bin/judge --version)"
