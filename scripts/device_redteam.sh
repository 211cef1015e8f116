#!/usr/bin/env bash
# On a GPU machine, as root (see README, "On a GPU machine"): issue 39's red team on the FP8 target, both rounds
# (tests/test_redteam.py, tests/test_redteam_untimed.py, -k fp8), in two setups: judge as root with its runners
# dropped to uid nobody (pytest's temporary directories opened by tests/open_tmp.py so that the drop can happen),
# and judge itself as uid nobody (setpriv). Each setup on a GPU of its own where the host has two, one after the
# other where it has one; logs in $OUT/redteam-root.log and $OUT/redteam-nobody.log, each ending in its exit status.
# Each setup has a base temporary directory of its own: a pytest that starts without one makes /tmp/pytest-of-USER
# 0700 again under the other setup's runners, which judge's drop check then refuses (an H200, 2026-11-30: an
# honest kernel `crashed` on "Permission denied" as a second pytest started beside a red-team round).
#   SETUPS='root nobody'    which setups
#   MODULES='tests/test_redteam.py tests/test_redteam_untimed.py'
#   REDTEAM_ONLY=a,b        only these cheats (the controls always run); LIMIT_S=540 per setup
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-device-out}
mkdir -p "$OUT"
root_dir=$PWD
export PYTHONPATH=$root_dir${PYTHONPATH:+:$PYTHONPATH}
# uid nobody must read the repository, the bundle's libraries and its own home
for d in "$root_dir" /tmp/cutedsl-4.8.1 /tmp/judge-deps; do [ -e "$d" ] && chmod -R a+rX "$d"; done
mkdir -p /tmp/nobody-home && chown 65534:65534 /tmp/nobody-home
gpus=$(nvidia-smi -L | wc -l)
run_setup() {  # SETUP GPU
  local setup=$1 gpu=$2 log="$OUT/redteam-$1.log" start=$SECONDS
  local -a as=()
  [ "$setup" = nobody ] && as=(setpriv --reuid=65534 --regid=65534 --clear-groups env HOME=/tmp/nobody-home)
  local -a plugin=()
  [ "$setup" = root ] && plugin=(-p open_tmp)
  { id; nvidia-smi --query-gpu=index,name,driver_version --format=csv -i "$gpu"; } > "$log" 2>&1
  CUDA_VISIBLE_DEVICES=$gpu REDTEAM_ONLY=${REDTEAM_ONLY:-} PYTHONPATH=$PYTHONPATH:$root_dir/tests \
    timeout "${LIMIT_S:-540}" "${as[@]}" python3 -m pytest -q -rs -p no:cacheprovider "${plugin[@]}" \
    --basetemp="/tmp/judge-redteam-$setup" \
    ${MODULES:-tests/test_redteam.py tests/test_redteam_untimed.py} -k fp8 >> "$log" 2>&1
  echo "exit $? after $((SECONDS - start)) s ($setup, GPU $gpu)" >> "$log"
}
index=0
for setup in ${SETUPS:-root nobody}; do
  gpu=$((index % gpus))
  if [ "$gpus" -gt 1 ]; then run_setup "$setup" "$gpu" & else run_setup "$setup" "$gpu"; fi
  index=$((index + 1))
done
wait
tail -n 3 "$OUT"/redteam-*.log
