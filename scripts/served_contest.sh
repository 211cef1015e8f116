#!/usr/bin/env bash
# Issue 40's bars, end to end on this machine: a contest served by `judge serve` and driven only through the CLI as a
# client (JUDGE_SERVER, JUDGE_TOKEN), on the CPU target vecadd_cpu (every stage runs here; a few minutes on 2 cores).
# A contestant reads the brief and the base and submits a proposal folder without `author`; the organizer runs the
# round through the server (exit 0, its progress printed); then `judge base` through the server is the exact base
# of round 2, and the brief of round 2 states the floor round 1's verdicts used. Prints "ok: ..." per bar; exits
# non-zero at the first bar missed.
#   PYTHONPATH=$PWD bash scripts/served_contest.sh [PYTHON]
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
py="${1:-python3}"
case "$py" in */*) py="$(cd "$(dirname "$py")" && pwd)/$(basename "$py")" ;; esac  # the script changes directory
judge() { "$py" -m judge.cli.main "$@"; }
server=""
home="$(mktemp -d)"; trap '[ -n "$server" ] && kill "$server" 2>/dev/null; rm -rf "$home"' EXIT
export PYTHONPATH="$repo"
unset JUDGE_SERVER JUDGE_TOKEN JUDGE_LEDGER
mkdir -p "$home/server" "$home/alice" "$home/boss"
cd "$home/server"
ln -s "$repo/kernels" kernels
boss=$(judge participant add boss --role organizer 2>/dev/null)
alice=$(judge participant add alice --role contestant 2>/dev/null)
port=$("$py" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
"$py" -m judge.cli.main serve --port "$port" >"$home/serve.log" 2>&1 &  # not through the function: $! is the server
server=$!
export JUDGE_SERVER="http://127.0.0.1:$port"
for _ in $(seq 100); do JUDGE_TOKEN=$alice judge status >/dev/null 2>&1 && break; sleep 0.2; done

cd "$home/alice"
export JUDGE_TOKEN=$alice
judge brief --target vecadd_cpu >/dev/null
judge base --target vecadd_cpu --out base.py 2>/dev/null
cmp -s base.py "$repo/kernels/vecadd_cpu/submission.py" && echo "ok: judge base through the server is round 1's base"
mkdir -p proposals/chunked
cp "$repo/proposals/vecadd_cpu/chunked-adds/"{pitch.md,patch.diff} proposals/chunked/
grep -v '^author' "$repo/proposals/vecadd_cpu/chunked-adds/proposal.toml" | sed 's/^id = .*/id = "chunked"/' \
  > proposals/chunked/proposal.toml
judge submit proposals/chunked
echo "ok: a folder proposal without author accepted"

cd "$home/boss"
export JUDGE_TOKEN=$boss
judge run --target vecadd_cpu
echo "ok: the organizer's run through the server ended with exit 0"

cd "$home/alice"
export JUDGE_TOKEN=$alice
judge base --target vecadd_cpu > served-base.py
(cd "$home/server" && env -u JUDGE_SERVER -u JUDGE_TOKEN "$py" -m judge.cli.main base --target vecadd_cpu) > local-base.py
cmp served-base.py local-base.py && echo "ok: judge base through the server is the exact base of round 2"
judge report --round 1 --target vecadd_cpu --json > card.json
judge brief --target vecadd_cpu --json > brief.json
"$py" - <<'PY'
import json
card, brief = json.load(open("card.json")), json.load(open("brief.json"))
control = card["round"]["targets"][0]["control"]
used = control["floor"] if control and control.get("floor") else None
stated = brief["brief"]["rules"]["floor"]
assert used is not None, "round 1 recorded no floor"
assert (stated["effect"], stated["words"]) == (used["effect"], used["words"]), (stated, used)
print(f"ok: the brief's threshold is the round's measured floor: {stated['words']}")
PY
