"""judge serve: the API end to end on a loopback port, every impersonation and escalation refused with nothing
written, the limits, and 1,000 concurrent submissions."""

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
from serving import LiveServer, contest, knob_patch, rows, wait_for_job

from judge.server import Config

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def fake_stages(monkeypatch):
    """Rounds the server runs use the stage fakes of the round tests."""
    from fakestages import rounds_with

    rounds_with(monkeypatch)


@pytest.fixture
def served(tmp_path, fake_stages):
    tokens = contest(tmp_path)
    server = LiveServer(Config(ledger=tmp_path / "ledger.db", kernels=tmp_path / "kernels", out_dir=tmp_path / "reports",
                               work_dir=tmp_path / "work", cache_dir=tmp_path / "cache"))
    yield server, tokens, tmp_path
    server.stop()


def proposal(pid: str, author: str | None = None, **fields) -> dict:
    data = {"id": pid, "title": f"{pid} title", "round": 1, "target": "axpy", "claim": {"low": 1.1, "high": 1.3},
            "pitch": "Scale in one pass.", **fields}
    if author is not None:
        data["author"] = author
    return data


def test_the_api_end_to_end(served):
    server, tokens, root = served
    alice, oracle, boss = server.client(tokens["alice"]), server.client(tokens["oracle"]), server.client(tokens["boss"])
    assert alice.get("/api/whoami").json() == {"name": "alice", "role": "contestant"}
    submitted = alice.post("/api/proposals", json=proposal("fast", patch=knob_patch("speedup 1.25")))
    assert (submitted.status_code, submitted.json()) == (200, [{"proposal_id": "fast", "revision": 1, "revision_id": 1, "status": "new"}])
    listed = alice.get("/api/proposals").json()
    assert [(p["id"], p["author"], p["outcome"]) for p in listed] == [("fast", "alice", "pending")]
    voted = oracle.post("/api/votes", json={"shark": "oracle", "proposal": "fast", "scores": {"feasibility": 7}, "fund": True})
    assert [(v["shark"], v["computed_total"], v["status"]) for v in voted.json()] == [("oracle", "pending", "new")]
    started = boss.post("/api/rounds", json={"round": 1})
    assert (started.status_code, started.json()["state"], started.json()["by"]) == (202, "running", "boss")
    job = wait_for_job(boss, started.json())
    assert job["state"] == "done", job["error"]
    kinds = [e["kind"] for e in job["events"]]
    assert kinds[0] == "probe" and "verdict" in kinds
    assert [(v["proposal_id"], v["outcome"]) for v in job["summaries"][0]["verdicts"]] == [("fast", "faster")]
    assert job["summaries"][0]["report"] == str(root / "reports" / "round-1.md")
    card = alice.get("/api/scorecards", params={"round": 1}).json()
    assert (card["name"], card["round"]["targets"][0]["winner"]["proposal_id"]) == ("round-1.md", "fast")
    assert sorted(card["charts"]) == ["round-1-axpy-claims.svg", "round-1-axpy-times.svg"]
    markdown = alice.get("/api/scorecards", params={"round": 1, "format": "md"})
    assert (markdown.headers["content-type"], markdown.text) == ("text/markdown; charset=utf-8", card["markdown"])
    assert markdown.text.startswith("# Round 1: axpy\n")
    board = alice.get("/api/leaderboard").json()
    assert board["leaderboard"]["targets"][0]["rounds"][0]["winner"]["proposal_id"] == "fast"
    brief = alice.get("/api/brief").json()
    assert (brief["name"], brief["brief"]["round"]) == ("brief-round-2-axpy.md", 2)
    status = alice.get("/api/status").json()
    assert status["rounds"][0]["winner"] == "fast" and status["counts"]["votes"] == 1
    schema = httpx.get(f"{server.url}/openapi.json").json()
    assert {"/api/proposals", "/api/votes", "/api/rounds", "/api/jobs/{job_id}", "/api/scorecards"} <= set(schema["paths"])


def test_progress_is_readable_while_a_round_runs(tmp_path, monkeypatch):
    """A round whose timing hangs a while: its job reads 'running' with its events so far, then 'done'."""
    from fakestages import FakeStages, rounds_with

    rounds_with(monkeypatch, lambda: FakeStages(hang_s=1.5))
    tokens = contest(tmp_path)
    server = LiveServer(Config(ledger=tmp_path / "ledger.db", kernels=tmp_path / "kernels", out_dir=tmp_path / "reports",
                               work_dir=tmp_path / "work", cache_dir=tmp_path / "cache"))
    try:
        boss = server.client(tokens["boss"])
        nothing = boss.post("/api/rounds", json={})  # planned before any job starts, as `judge run` plans
        assert (nothing.status_code, nothing.json()["error"], boss.get("/api/jobs").json()) == (
            400, "the ledger has no proposals yet (submit some with 'judge submit')", [])
        server.client(tokens["alice"]).post("/api/proposals", json=proposal("hang", patch=knob_patch("hang-timing")))
        job = boss.post("/api/rounds", json={}).json()
        assert job["round"] == 1  # each target's own round, named before it runs
        time.sleep(0.8)
        now = boss.get(f"/api/jobs/{job['job']}").json()
        assert now["state"] == "running" and now["events"][0]["kind"] == "probe" and now["summaries"] is None
        second = boss.post("/api/rounds", json={"round": 1})
        assert (second.status_code, second.json()["error"]) == (409, f"round 1 is already being run by this server (job 1, started {job['started_at']} by 'boss'): follow it with 'judge watch' (or 'judge run --follow'), or wait for it to finish")
        assert wait_for_job(boss, now)["state"] == "done"
    finally:
        server.stop()


IMPERSONATIONS = [
    ("a contestant submitting as another", "alice", "POST", "/api/proposals", proposal("mine", author="bob"), 403,
     "<request>: field 'author': 'bob' is not you: participant 'alice' submits only as 'alice' (the author comes from your token)"),
    ("a contestant revising another's proposal", "alice", "POST", "/api/proposals", proposal("bobs"), 403,
     "<request>: field 'id': proposal 'bobs' is another participant's: participant 'alice' revises only its own proposals (pick another id)"),
    ("a batch with one proposal in another's name", "alice", "POST", "/api/proposals",
     [proposal("ok-one", author="alice"), proposal("other", author="bob")], 403,
     "<request>[1]: field 'author': 'bob' is not you: participant 'alice' submits only as 'alice' (the author comes from your token)"),
    ("a contestant voting as a shark", "alice", "POST", "/api/votes",
     {"shark": "oracle", "proposal": "bobs", "scores": {"feasibility": 10}}, 403,
     "only sharks and the organizer vote: participant 'alice' is a contestant"),
    ("a shark voting as another shark", "critic", "POST", "/api/votes",
     {"shark": "oracle", "proposal": "bobs", "scores": {"feasibility": 0}}, 403,
     "<request>: field 'shark': 'oracle' is not you: participant 'critic' votes only as shark 'critic'"),
    ("a shark submitting a proposal", "oracle", "POST", "/api/proposals", proposal("sharky", author="oracle"), 403,
     "only contestants and the organizer submit proposals: participant 'oracle' is a shark"),
    ("a shark submitting a body that is no proposal", "oracle", "POST", "/api/proposals", {"id": "BAD"}, 403,
     "only contestants and the organizer submit proposals: participant 'oracle' is a shark"),
    ("a contestant voting with a body that is no vote", "alice", "POST", "/api/votes", {"nonsense": 1}, 403,
     "only sharks and the organizer vote: participant 'alice' is a contestant"),
    ("a shark voting as another in a batch", "critic", "POST", "/api/votes",
     [{"shark": "critic", "proposal": "bobs", "scores": {"feasibility": 5}},
      {"shark": "oracle", "proposal": "bobs", "scores": {"feasibility": 0}}], 403,
     "<request>[1]: field 'shark': 'oracle' is not you: participant 'critic' votes only as shark 'critic'"),
    ("a contestant running a round", "alice", "POST", "/api/rounds", {"round": 1}, 403,
     "only the organizer may run a round: participant 'alice' is a contestant"),
    ("a shark running a round", "oracle", "POST", "/api/rounds", {}, 403,
     "only the organizer may run a round: participant 'oracle' is a shark"),
    ("a contestant clearing a result", "alice", "POST", "/api/evaluations/1/clear", {"note": "trust me"}, 403,
     "only the organizer may clear a result: participant 'alice' is a contestant"),
    ("a contestant adding a shark", "alice", "POST", "/api/sharks", {"name": "mine", "criteria": [{"name": "a", "weight": 1}]}, 403,
     "only the organizer may add sharks: participant 'alice' is a contestant"),
    ("a contestant adding a participant", "alice", "POST", "/api/participants", {"name": "alice2", "role": "organizer"}, 403,
     "only the organizer may add participants: participant 'alice' is a contestant"),
    ("a shark revoking a participant", "oracle", "DELETE", "/api/participants/critic", None, 403,
     "only the organizer may revoke participants: participant 'oracle' is a shark"),
    ("a forged token", "judge_forged", "POST", "/api/proposals", proposal("forged", author="alice"), 401,
     "unknown token: no participant of this contest holds it (check JUDGE_TOKEN)"),
    ("no token", None, "POST", "/api/rounds", {}, 401,
     "no token: send 'Authorization: Bearer TOKEN' (the judge CLI sends JUDGE_TOKEN); the organizer gives each participant one with 'judge participant add'"),
]


@pytest.mark.parametrize("case", IMPERSONATIONS, ids=[c[0] for c in IMPERSONATIONS])
def test_every_impersonation_and_escalation_is_refused_and_nothing_written(served, case):
    server, tokens, root = served
    _, who, method, path, body, status, message = case
    assert server.client(tokens["bob"]).post("/api/proposals", json=proposal("bobs")).status_code == 200
    before = rows(root / "ledger.db")
    response = server.client(tokens.get(who, who)).request(method, path, content=None if body is None else json.dumps(body))
    assert (response.status_code, response.json()) == (status, {"error": message, "exit": 2})
    assert rows(root / "ledger.db") == before


def test_a_revoked_token_is_refused_and_its_work_stays(served):
    server, tokens, root = served
    alice, boss = server.client(tokens["alice"]), server.client(tokens["boss"])
    assert alice.post("/api/proposals", json=proposal("kept")).status_code == 200
    revoked = boss.delete("/api/participants/alice").json()
    assert (revoked["name"], revoked["role"], revoked["revoked_at"] is not None) == ("alice", "contestant", True)
    before = rows(root / "ledger.db")
    response = alice.post("/api/proposals", json=proposal("after"))
    assert (response.status_code, response.json()["error"]) == (
        401, f"the token of participant 'alice' was revoked at {revoked['revoked_at']}: ask the organizer for a new one")
    assert response.headers["www-authenticate"] == "Bearer"
    assert rows(root / "ledger.db") == before
    assert [p["id"] for p in boss.get("/api/proposals").json()] == ["kept"]


def test_the_author_comes_from_the_token_and_the_organizer_submits_for_anyone(served):
    server, tokens, root = served
    assert server.client(tokens["alice"]).post("/api/proposals", json=proposal("no-author")).status_code == 200
    assert server.client(tokens["boss"]).post("/api/proposals", json=proposal("for-bob", author="bob")).status_code == 200
    listed = server.client(tokens["boss"]).get("/api/proposals").json()
    assert [(p["id"], p["author"]) for p in listed] == [("for-bob", "bob"), ("no-author", "alice")]
    revised = server.client(tokens["bob"]).post("/api/proposals", json=proposal("for-bob", author="bob", title="better"))
    assert revised.json()[0]["status"] == "revised"


def test_the_organizer_adds_participants_and_sharks_over_the_network(served):
    server, tokens, root = served
    boss = server.client(tokens["boss"])
    added = boss.post("/api/participants", json={"name": "carol", "role": "shark"})
    assert (added.status_code, sorted(added.json())) == (201, ["created_at", "name", "role", "token"])
    shark = {"name": "carol", "criteria": [{"name": "taste", "weight": 1}]}
    assert boss.post("/api/sharks", json=shark).json()[0]["status"] == "new"
    server.client(tokens["alice"]).post("/api/proposals", json=proposal("p1"))
    carol = server.client(added.json()["token"])
    assert carol.post("/api/votes", json={"shark": "carol", "proposal": "p1", "scores": {"taste": 9}}).status_code == 200
    names = [(p["name"], p["role"]) for p in boss.get("/api/participants").json()]
    assert names == [("boss", "organizer"), ("alice", "contestant"), ("bob", "contestant"), ("oracle", "shark"),
                     ("critic", "shark"), ("carol", "shark")]
    again = boss.post("/api/participants", json={"name": "carol", "role": "contestant"})
    assert (again.status_code, again.json()["error"]) == (
        400, "participant 'carol' exists already, as a shark (revoke it first to give it a new token: 'judge participant revoke carol')")


def test_errors_are_the_clis_json_object_with_an_http_status(served):
    server, tokens, root = served
    alice = server.client(tokens["alice"])
    cases = [
        (alice.get("/api/proposals/nope"), 404, "proposal 'nope' is not in the ledger (see 'judge list')"),
        (alice.get("/api/nothing"), 404, "no such endpoint: GET /api/nothing (see /docs)"),
        (alice.put("/api/status"), 405, "/api/status does not take PUT (see /docs)"),
        (alice.get("/api/proposals", params={"round": "one"}), 400,
         "GET /api/proposals: query round: Input should be a valid integer, unable to parse string as an integer"),
        (alice.post("/api/proposals", content=b"{not json"), 400,
         "request body: not valid JSON: Expecting property name enclosed in double quotes at line 1 column 2"),
        (alice.post("/api/proposals", json=proposal("x", target="nowhere")), 400,
         f"<request>: field 'target': target 'nowhere': no directory {root / 'kernels' / 'nowhere'} (targets live under "
         f"{root / 'kernels'}/)"),
        (server.client(tokens["boss"]).get("/api/jobs/7"), 404, "job 7 is not on this server (it keeps the jobs it ran since it started)"),
        (alice.get("/api/scorecards"), 400, "no round has run yet (run one with 'judge run')"),
    ]
    for response, status, message in cases:
        assert (response.status_code, response.json()) == (status, {"error": message, "exit": 2})


def test_a_body_over_the_json_limit_is_refused_before_it_is_read(served, monkeypatch):
    server, tokens, root = served
    monkeypatch.setenv("JUDGE_MAX_JSON_BYTES", "1000")
    before = rows(root / "ledger.db")
    big = json.dumps(proposal("big", pitch="x" * 2000)).encode()
    response = server.client(tokens["alice"]).post("/api/proposals", content=big)
    size = len(big)
    assert (response.status_code, response.json()["error"]) == (
        413, f"request body: {size} bytes, over the limit of 1000 bytes for JSON or TOML input (this server's limit: its organizer sets JUDGE_MAX_JSON_BYTES where judge serve runs)")
    chunked = server.client(tokens["alice"]).post("/api/proposals", content=iter([b"[" + b" " * 600, b" " * 600 + b"]"]))
    assert (chunked.status_code, chunked.json()["error"]) == (
        413, "request body: 1001 bytes, over the limit of 1000 bytes for JSON or TOML input (this server's limit: its organizer sets JUDGE_MAX_JSON_BYTES where judge serve runs)")
    monkeypatch.setenv("JUDGE_MAX_PITCH_BYTES", "10")
    monkeypatch.delenv("JUDGE_MAX_JSON_BYTES")
    pitch = server.client(tokens["alice"]).post("/api/proposals", json=proposal("long", pitch="y" * 11))
    assert pitch.json()["error"] == ("<request>: field 'pitch': 11 bytes, over the limit of 10 bytes for a pitch "
                                     "(this server's limit: its organizer sets JUDGE_MAX_PITCH_BYTES where judge serve runs)")
    assert rows(root / "ledger.db") == before


def test_a_token_past_its_rate_is_told_when_to_retry(tmp_path):
    tokens = contest(tmp_path)
    server = LiveServer(Config(ledger=tmp_path / "ledger.db", kernels=tmp_path / "kernels", rate_limit=3))
    try:
        alice = server.client(tokens["alice"])
        assert [alice.get("/api/whoami").status_code for _ in range(3)] == [200, 200, 200]
        refused = alice.get("/api/whoami")
        assert refused.status_code == 429 and 1 <= int(refused.headers["retry-after"]) <= 60
        assert refused.json() == {"error": "too many requests: participant 'alice' sent 3 in the last minute, this server's "
                                           f"limit per token ('judge serve --rate-limit'); retry in {refused.headers['retry-after']} s",
                                  "exit": 2}
        assert server.client(tokens["bob"]).get("/api/whoami").status_code == 200  # per token
    finally:
        server.stop()


def test_1000_concurrent_submissions_are_all_stored_exactly_once(tmp_path):
    """50 clients, each a contestant with its own token, submit 20 proposals each at once to a `judge serve` process."""
    from judge import participants
    from judge.ledger import Ledger

    contest(tmp_path)
    ledger = Ledger(tmp_path / "ledger.db")
    tokens = [participants.add_participant(ledger, f"agent-{n}", "contestant")["token"] for n in range(50)]
    ledger.close()
    process, url = _serve_process(tmp_path)
    failures, started = [], time.monotonic()

    def agent(n: int) -> None:
        with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {tokens[n]}"}, timeout=120) as client:
            for k in range(20):
                body = proposal(f"a{n}-p{k}", patch=knob_patch(f"speedup 1.{k:02d}") if k % 2 else None)
                response = client.post("/api/proposals", json=body)
                if response.status_code != 200 or response.json()[0]["status"] != "new":
                    failures.append(response.text)

    try:
        threads = [threading.Thread(target=agent, args=(n,)) for n in range(50)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        elapsed = time.monotonic() - started
    finally:
        process.terminate()
        process.wait(timeout=30)
    assert failures == []
    stored = rows(tmp_path / "ledger.db")
    ids = sorted(r[0] for r in stored["proposals"])
    assert ids == sorted(f"a{n}-p{k}" for n in range(50) for k in range(20))
    assert len(stored["revisions"]) == 1000
    print(f"\n1000 submissions from 50 concurrent clients in {elapsed:.1f} s")


def _serve_process(root: Path) -> tuple[subprocess.Popen, str]:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    process = subprocess.Popen([sys.executable, "-m", "judge.cli.main", "--ledger", str(root / "ledger.db"), "--kernels",
                                str(root / "kernels"), "serve", "--port", str(port)],
                               cwd=root, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            httpx.get(f"{url}/openapi.json", timeout=1)
            return process, url
        except httpx.HTTPError:
            if process.poll() is not None or time.monotonic() > deadline:
                process.kill()
                raise RuntimeError(f"judge serve did not start: {process.stderr.read().decode()}")
            time.sleep(0.2)


def test_lookups_read_as_markdown_too(served):
    server, tokens, root = served
    alice = server.client(tokens["alice"])
    alice.post("/api/proposals", json=proposal("idea"))
    listed = alice.get("/api/proposals", params={"format": "md"})
    assert (listed.headers["content-type"], listed.text) == ("text/markdown; charset=utf-8", (
        "# Proposals\n\n| id | rev | round | target | author | claim | outcome | geomean | evaluation |\n"
        "|---|---:|---:|---|---|---|---|---|---|\n| idea | 1 | 1 | axpy | alice | 1.1-1.3x | pitch | - | - |\n"))
    shown = alice.get("/api/proposals/idea", params={"format": "md"}).text
    assert shown.startswith("# idea\n\n## Revision 1: idea title\n\n- Round 1, axpy, by alice; category other; claims 1.1-1.3x; "
                            "a pitch (no patch); submitted ")
    assert alice.get("/api/status", params={"format": "md"}).text == (
        "# Status\n\n1 proposals, 1 revisions, 2 sharks, 0 votes, 0 evaluations, 0 timings.\n\nNo round has run yet.\n")
    assert alice.get("/api/status", params={"format": "xml"}).json() == {"error": "format 'xml': expected json or md", "exit": 2}
