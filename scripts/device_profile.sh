#!/usr/bin/env bash
# On the GPU machine (issue 41): where the FP8 target's base spends its time. The base is profiled with Nsight Compute
# (ncu) where it is there, then again with ncu hidden (PATH without it, JUDGE_NCU=none) to exercise the torch.profiler
# fallback, each into a ledger of its own (under $WORK) so that the second does not reuse the first; then a candidate
# (the tile-m-64 example proposal) with `judge profile --proposal ... --json`. Prints ncu's version and, per run, the
# tool used, its notes and each benchmark's bounds and top kernels. Writes to $OUT (seven files; the device returns
# eight at most): profile-ncu.json, profile-torch.json, profile-candidate.json (`judge profile --json`),
# brief-ncu.json, the briefs brief-ncu/ and brief-torch/ (Markdown with the profile section), device_profile.log.
# PARTS="1 2 3" (default) runs all three; each part has its own ledger, so they can run in separate calls (a device
# command may take 10 minutes, and each part compiles the FP8 kernel in every runner it starts).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-device-out}
WORK=${WORK:-/tmp/judge-profile}
TARGET=${TARGET:-fp8_group_gemm_sm90}
PROPOSAL=${PROPOSAL-tile-m-64}  # empty: no candidate
PARTS=${PARTS:-1 2 3}
mkdir -p "$OUT" "$WORK"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
exec > >(tee "$OUT/device_profile.log") 2>&1
judge() { local ledger=$1; shift; python3 -m judge.cli.main --ledger "$ledger" "$@"; }
summary() {  # the tool, its notes and each benchmark's first kernels and bounds, from a `judge profile --json`
  python3 - "$1" <<'PY'
import json, sys
done = json.load(open(sys.argv[1]))
p = done["profile"]
print(f"{done['subject']} {done.get('proposal') or ''}: status {p['status']}, tool {p.get('tool')}, "
      f"versions {p.get('versions')}, peaks {p.get('peaks')}")
print("  reason:", p.get("reason")) if p.get("reason") else None
for note in p.get("notes", []):
    print("  note:", note)
for b in p.get("benchmarks", []):
    print(f"  benchmark {b['index']} ({b['label']}): call {b.get('call_us')} us, {len(b['kernels'])} kernels, "
          f"error {b.get('error')}")
    for line in b.get("bounds", []):
        print("    bound:", line)
    for k in b["kernels"][:3]:
        print(f"    {k['share']} {k['name'][:70]} us {k['us']} dram {k['dram_of_peak']} tensor {k['tensor_of_peak']}"
              f" ({k['tensor_pct']}%) occupancy {k['occupancy_pct']} stalls {k['stalls']}")
PY
}

nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
echo "ncu: ${NCU:-none found}"
[ -n "$NCU" ] && "$NCU" --version | tail -1
python3 -c "import torch; print('torch', torch.__version__, torch.version.cuda)"

export JUDGE_NCU=${NCU:-none}
HIDDEN_PATH=$(echo "$PATH" | tr ':' '\n' | grep -v -e nsight -e '/cuda[^/]*/bin' | paste -sd:)
part() { case " $PARTS " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }

if part 1; then
echo "== 1. the base with ncu =="
time judge "$WORK/ncu.db" profile --target "$TARGET" --work-dir "$WORK/ncu" --json > "$OUT/profile-ncu.json"
summary "$OUT/profile-ncu.json"
judge "$WORK/ncu.db" profile --target "$TARGET" --work-dir "$WORK/ncu" | head -3  # kept: reused, not profiled again
judge "$WORK/ncu.db" brief --target "$TARGET" --out "$OUT/brief-ncu" --json > "$OUT/brief-ncu.json"
sed -n '/### Inside a call/,/^What the base asks\|^## /p' "$OUT/brief-ncu/brief-round-1-$TARGET.md" | head -60
fi

if part 2; then
echo "== 2. the base with ncu hidden (torch.profiler) =="
time PATH=$HIDDEN_PATH JUDGE_NCU=none judge "$WORK/torch.db" profile --target "$TARGET" --work-dir "$WORK/torch" \
  --json > "$OUT/profile-torch.json"
summary "$OUT/profile-torch.json"
PATH=$HIDDEN_PATH JUDGE_NCU=none judge "$WORK/torch.db" brief --target "$TARGET" --out "$OUT/brief-torch"
sed -n '/### Inside a call/,/^What the base asks\|^## /p' "$OUT/brief-torch/brief-round-1-$TARGET.md" | head -40
fi

if part 3 && [ -n "$PROPOSAL" ]; then
  echo "== 3. a candidate with ncu: judge profile --proposal $PROPOSAL --json =="
  judge "$WORK/candidate.db" submit "proposals/$TARGET/$PROPOSAL" > /dev/null
  time judge "$WORK/candidate.db" profile --proposal "$PROPOSAL" --work-dir "$WORK/candidate" --json \
    > "$OUT/profile-candidate.json"
  summary "$OUT/profile-candidate.json"
fi
echo "device_profile.sh: done"
