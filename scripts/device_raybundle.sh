#!/usr/bin/env bash
# Packs Ray for the GPU machine (Python 3.12, x86-64) into .raybundle/, for rounds on several GPUs there
# (`judge run --gpus all`, `--ray`). Ray's wheel (79 MB) is over what a device run may carry; a core-only copy
# (no jars, rllib, data, serve, tune, train) packed with xz is about 30 MB. It travels instead of .devbundle
# (the two together are over the 64 MiB a run may carry), so a Ray round there runs targets that need no CuTe
# DSL: GPU MODE's torch problems, the CPU and FP8 targets.
#
#   bash scripts/device_raybundle.sh            # once per machine; needs PyPI (a minute)
#   device run: carry [".raybundle", ...], command starting with
#     source .raybundle/activate.sh && <your command>
#
# judge's own libraries the GPU image lacks (pydantic, sqlite-utils, pyseccomp) and Ray's jsonschema travel
# beside it as wheels; the image has msgpack, click, filelock, protobuf, pyyaml and requests.
set -euo pipefail
RAY=${RAY_VERSION:-2.60.0}
ROOT=$(git rev-parse --show-toplevel)
DEST=$ROOT/.raybundle
EXCLUDE=$(git rev-parse --git-path info/exclude)
mkdir -p "$(dirname "$EXCLUDE")" "$DEST/wheels"
grep -qx '/.raybundle/' "$EXCLUDE" 2>/dev/null || echo '/.raybundle/' >> "$EXCLUDE"
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
TARGET=(--only-binary=:all: --python-version 3.12 --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64)
pip download -q --no-deps "${TARGET[@]}" -d "$WORK" "ray==$RAY"
pip download -q "${TARGET[@]}" -d "$DEST/wheels" jsonschema pydantic sqlite-utils pyseccomp
# what the image already has would only shadow its own copies
for have in click typing_extensions pip pluggy python_dateutil tabulate; do rm -f "$DEST/wheels/$have"-*.whl; done
mkdir -p "$WORK/site"
python3 -m zipfile -e "$WORK"/ray-*.whl "$WORK/site"
rm -rf "$WORK/site/ray/jars" "$WORK/site/ray/rllib" "$WORK/site/ray/data" "$WORK/site/ray/serve" \
       "$WORK/site/ray/tune" "$WORK/site/ray/train"
# unzip drops the executable bit, and Ray starts these binaries itself
find "$WORK/site/ray/core/src" -type f \( -name gcs_server -o -name raylet \) -exec chmod +x {} +
tar -C "$WORK/site" -cf - . | xz -6 -T0 > "$DEST/ray-$RAY-py312.tar.xz"
cat > "$DEST/activate.sh" <<ACT
# sourced on the GPU machine: unpacks Ray $RAY once per machine and judge's missing libraries, puts both on PYTHONPATH
if [ ! -d /tmp/ray-$RAY ]; then
  mkdir -p /tmp/ray-$RAY.part && tar -xJf .raybundle/ray-$RAY-py312.tar.xz -C /tmp/ray-$RAY.part && mv /tmp/ray-$RAY.part /tmp/ray-$RAY
fi
if [ ! -d /tmp/judge-deps ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/judge-deps .raybundle/wheels/*.whl
fi
export PYTHONPATH=/tmp/ray-$RAY:/tmp/judge-deps\${PYTHONPATH:+:\$PYTHONPATH}
export PATH=/tmp/ray-$RAY/bin:\$PATH
export PYTHONUNBUFFERED=1
ACT
du -sh "$DEST"
