"""A contest served on a loopback port for the server's tests: the axpy target, five participants with tokens,
two sharks, and rounds run with the stage fakes (a patch's `# verdict:` line says what happens)."""

from __future__ import annotations

import os
import socket
import sqlite3
import threading
import time
from pathlib import Path

import httpx
import uvicorn

from judge import participants
from judge.ledger import Ledger
from judge.records import Shark
from judge.server import Config, create_app

FIXTURE = Path(__file__).parent / "fixtures" / "axpy"
BASE = (FIXTURE / "submission.py").read_text().splitlines()
ROLES = {"boss": "organizer", "alice": "contestant", "bob": "contestant", "oracle": "shark", "critic": "shark"}
RUBRIC = [{"name": "speed", "weight": "0.5", "bound": "speedup"}, {"name": "feasibility", "weight": "0.5"}]


def knob_patch(verdict: str = "speedup 1.25") -> str:
    """A one-hunk patch of axpy's SCALE line whose marker tells the stage fakes what to report."""
    i = BASE.index("SCALE = 2.0")
    return (f"--- a/submission.py\n+++ b/submission.py\n@@ -{i},3 +{i},4 @@\n {BASE[i - 1]}\n-SCALE = 2.0\n"
            f"+SCALE = 2.0  # tuned\n+# verdict: {verdict}\n {BASE[i + 1]}\n")


def contest(root: Path) -> dict[str, str]:
    """A ledger at root/ledger.db with the axpy target under root/kernels, the participants and the two sharks;
    returns each participant's token."""
    (root / "kernels").mkdir(parents=True, exist_ok=True)
    if not (root / "kernels" / "axpy").exists():
        os.symlink(FIXTURE, root / "kernels" / "axpy")
    ledger = Ledger(root / "ledger.db")
    tokens = {name: participants.add_participant(ledger, name, role)["token"] for name, role in ROLES.items()}
    for shark in ("oracle", "critic"):
        ledger.add_shark(Shark.model_validate({"name": shark, "criteria": RUBRIC}), f"sharks/{shark}.toml")
    ledger.close()
    return tokens


def rows(path: Path) -> dict[str, list[tuple]]:
    """Every row of every table: the ledger's whole content, to compare before and after a refused request."""
    conn = sqlite3.connect(path)
    try:
        names = [r[0] for r in conn.execute("select name from sqlite_master where type = 'table' order by name")]
        return {name: conn.execute(f"select * from [{name}] order by rowid").fetchall() for name in names}
    finally:
        conn.close()


class LiveServer:
    """judge's application under uvicorn in a thread of this process, on a free loopback port."""

    def __init__(self, config: Config):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.server = uvicorn.Server(uvicorn.Config(create_app(config), log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 20
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("the test server did not start")
            time.sleep(0.02)

    def client(self, token: str | None = None) -> httpx.Client:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=60)

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=20)
        self.sock.close()


def wait_for_job(client: httpx.Client, job: dict, timeout_s: float = 60) -> dict:
    """Poll a round job until it is done or failed; every event it had, in order, under 'events'."""
    events = list(job["events"])
    deadline = time.monotonic() + timeout_s
    while job["state"] == "running":
        if time.monotonic() > deadline:
            raise TimeoutError(f"job {job['job']} still running after {timeout_s} s")
        time.sleep(0.05)
        job = client.get(f"/api/jobs/{job['job']}", params={"since": job["next"]}).json()
        events += job["events"]
    return {**job, "events": events}


def serve_here(tmp_path: Path, monkeypatch, reports: str = "server-reports") -> tuple["LiveServer", dict[str, str]]:
    """A contest in tmp_path, now the working directory, served from the very ledger the local CLI reads there (no
    JUDGE_* variable of the caller's leaks in): the server and the participants' tokens. The caller stops it."""
    monkeypatch.chdir(tmp_path)
    for name in ("JUDGE_SERVER", "JUDGE_TOKEN", "JUDGE_LEDGER"):
        monkeypatch.delenv(name, raising=False)
    tokens = contest(tmp_path)
    server = LiveServer(Config(ledger=tmp_path / "ledger.db", kernels=tmp_path / "kernels", out_dir=tmp_path / reports,
                               work_dir=tmp_path / "work", cache_dir=tmp_path / "cache"))
    return server, tokens
