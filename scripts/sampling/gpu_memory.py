"""Every 2 s, each process's GPU memory (nvidia-smi) with judge's role for it (its setup.json, or `fork` for a
forked spare) and its working directory: OUT.log, and per process its peak in OUT.peaks, largest first. For a
device run (scripts/device_parity.sh with SAMPLE=1); stop it with a signal.

    python3 scripts/sampling/gpu_memory.py OUT
"""

import json
import os
import subprocess
import sys
import time


def role(pid: int, roles: dict) -> str:
    if pid not in roles:
        try:
            args = [a.decode(errors="replace") for a in open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0") if a]
        except OSError:
            return "?"
        found = "other"
        if "judge.sandbox.child" in args and "serve" in args:
            try:
                found = json.load(open(args[-1])).get("role", "?")
            except (OSError, ValueError):
                found = "child"
        elif any("forkserver" in a for a in args):
            found = "fork"
        roles[pid] = found
    return roles[pid]


def main(out: str) -> None:
    roles, peaks = {}, {}
    with open(out + ".log", "a") as log:
        while True:
            time.sleep(2)
            rows = subprocess.run(["nvidia-smi", "--query-compute-apps=gpu_bus_id,pid,used_memory",
                                   "--format=csv,noheader,nounits"], capture_output=True, text=True).stdout
            now = time.strftime("%H:%M:%S")
            for row in rows.splitlines():
                try:
                    bus, pid, mib = (x.strip() for x in row.split(","))
                    pid, mib = int(pid), int(mib)
                except ValueError:
                    continue
                try:
                    cwd = os.readlink(f"/proc/{pid}/cwd")
                except OSError:
                    cwd = "?"
                log.write(f"{now} {bus} {pid} {mib} {role(pid, roles)} {cwd}\n")
                peaks[(bus, pid)] = (max(peaks.get((bus, pid), (0,))[0], mib), roles.get(pid, "?"), cwd)
            log.flush()
            with open(out + ".peaks", "w") as f:
                for (bus, pid), (mib, who, cwd) in sorted(peaks.items(), key=lambda kv: -kv[1][0]):
                    f.write(f"{bus} {pid} {mib} MiB {who} {cwd}\n")


if __name__ == "__main__":
    main(sys.argv[1])
