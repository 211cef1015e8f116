"""How long the CLI as a client takes to answer, against a bare `python3 -c pass` timed in the same run (issue 40's
bars: `judge --version` within 0.25 s and `judge status` through a server within 0.5 s of it).

Starts a throwaway contest (the axpy fixture, one organizer) served on a loopback port in a process of its own,
then times each command N times (median) as a fresh process, as an agent calls it.

    PYTHONPATH=$PWD python scripts/client_latency.py [--runs 7]
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def timed(argv: list[str], env: dict, runs: int) -> float:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        done = subprocess.run(argv, env=env, capture_output=True, text=True)
        times.append(time.perf_counter() - started)
        if done.returncode != 0:
            raise SystemExit(f"{' '.join(argv)} failed: {done.stdout}{done.stderr}")
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=7)
    runs = parser.parse_args().runs
    env = {k: v for k, v in os.environ.items() if not k.startswith("JUDGE_")}
    env["PYTHONPATH"] = str(ROOT)
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        (root / "kernels").mkdir()
        os.symlink(ROOT / "tests" / "fixtures" / "axpy", root / "kernels" / "axpy")
        ledger = ["--ledger", str(root / "ledger.db"), "--kernels", str(root / "kernels")]
        added = subprocess.run([sys.executable, "-m", "judge.cli.main", *ledger, "participant", "add", "boss", "--role",
                                "organizer"], env=env, capture_output=True, text=True, check=True)
        token = added.stdout.strip()
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        server = subprocess.Popen([sys.executable, "-m", "judge.cli.main", *ledger, "serve", "--port", str(port)],
                                  env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            client = {**env, "JUDGE_SERVER": f"http://127.0.0.1:{port}", "JUDGE_TOKEN": token}
            deadline = time.monotonic() + 60
            while subprocess.run([sys.executable, "-m", "judge.cli.main", "status"], env=client,
                                 capture_output=True).returncode != 0:
                if time.monotonic() > deadline:
                    raise SystemExit("the server did not answer within 60 s")
                time.sleep(0.2)
            bare = timed([sys.executable, "-c", "pass"], env, runs)
            version = timed([sys.executable, "-m", "judge.cli.main", "--version"], env, runs)
            status = timed([sys.executable, "-m", "judge.cli.main", "status"], client, runs)
        finally:
            server.terminate()
            server.wait(timeout=20)
    print(f"python -c pass        {bare:.3f} s")
    print(f"judge --version       {version:.3f} s  (+{version - bare:.3f} s; bar +0.25 s: {'ok' if version - bare <= 0.25 else 'MISSED'})")
    print(f"judge status (server) {status:.3f} s  (+{status - bare:.3f} s; bar +0.50 s: {'ok' if status - bare <= 0.5 else 'MISSED'})")


if __name__ == "__main__":
    main()
