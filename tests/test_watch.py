"""Results as they land: a round the server runs streams its events (long polls of /api/jobs), `judge watch` and
`judge run --follow` attach to it while it runs, and a contestant reads its own verdict as soon as its candidate is
judged, never another's proposal before it is judged."""

import json
import threading
import time

import pytest
from click.testing import CliRunner
from serving import knob_patch, serve_here

from judge.cli.main import main


@pytest.fixture
def held_round(tmp_path, monkeypatch):
    """A served contest whose round holds the candidate marked hang-timing in its timing until `release` is set."""
    from fakestages import FakeStages, rounds_with

    release = threading.Event()

    class Held(FakeStages):
        def timing(self, target, candidate, base, budget_s, progress=None):
            from fakestages import marker

            if marker(candidate) == "hang-timing":
                assert release.wait(60)
            return super().timing(target, candidate, base, budget_s, progress)

    rounds_with(monkeypatch, Held)
    server, tokens = serve_here(tmp_path, monkeypatch, "srv")
    yield server, tokens, release
    release.set()
    server.stop()


def judge(*args, server, token):
    return CliRunner().invoke(main, list(args), env={"JUDGE_SERVER": server, "JUDGE_TOKEN": token},
                              catch_exceptions=False)


def test_a_contestant_reads_its_own_verdict_as_it_lands_and_nothing_of_anothers_unjudged_proposal(held_round):
    server, tokens, release = held_round
    alice, bob, boss = (server.client(tokens[n]) for n in ("alice", "bob", "boss"))
    for client, pid, verdict in ((alice, "a-fast", "speedup 1.25"), (bob, "b-held", "hang-timing")):
        sent = client.post("/api/proposals", json={"id": pid, "title": pid, "round": 1, "target": "axpy",
                                                   "pitch": "p", "patch": knob_patch(verdict)})
        assert sent.status_code == 200, sent.text
    job = boss.post("/api/rounds", json={}).json()
    deadline = time.monotonic() + 60
    mine = []
    since = 0
    while not any(e["kind"] == "verdict" for e in mine):  # long polls: each answers once an event lands
        assert time.monotonic() < deadline
        page = alice.get("/api/jobs/latest", params={"since": since, "wait": 5}).json()
        mine += page["events"]
        since = page["next"]
    assert page["state"] == "running" and page["summaries"] is None
    assert [(e["proposal"], e["outcome"]) for e in mine if e["kind"] == "verdict"] == [("a-fast", "faster")]
    assert not [e for e in mine if e.get("proposal") == "b-held"]
    assert {e["kind"] for e in mine} <= {"probe", "cpu", "floor", "stage", "progress", "evaluated", "verdict"}
    everything = boss.get(f"/api/jobs/{job['job']}").json()["events"]
    assert any(e.get("proposal") == "b-held" for e in everything)  # the organizer reads it all
    assert not [e for e in alice.get("/api/jobs").json()[0]["events"] if e.get("proposal") == "b-held"]

    # re-attach while it runs: the organizer's second `judge run` follows the running round instead of a refusal
    results = {}
    follower = threading.Thread(target=lambda: results.update(
        run=judge("run", "--follow", "--json", server=server.url, token=tokens["boss"]),
        watch=judge("watch", server=server.url, token=tokens["alice"])))
    follower.start()
    time.sleep(1.0)
    release.set()
    follower.join(60)
    run, watch = results["run"], results["watch"]
    assert run.exit_code == 0, run.output
    assert [(v["proposal_id"], v["outcome"]) for v in json.loads(run.stdout)[0]["verdicts"]] == [
        ("a-fast", "faster"), ("b-held", "unchanged")]
    assert watch.exit_code == 0 and watch.stdout.splitlines()[-1] == "job 1 (round 1): done"
    assert "a-fast: faster (" in watch.stdout and "b-held: unchanged (" in watch.stdout  # judged: now anyone's to read
    # the same events as server-sent events, for curl -N: a reconnect resumes after its Last-Event-ID
    with alice.stream("GET", f"/api/jobs/{job['job']}/events") as stream:
        lines = list(stream.iter_lines())
    assert stream.headers["content-type"].startswith("text/event-stream")
    kinds = [line[len("event: "):] for line in lines if line.startswith("event: ")]
    assert kinds[-1] == "end" and kinds.count("verdict") == 2  # both judged by now: both readable
    data = [json.loads(line[len("data: "):]) for line in lines if line.startswith("data: ")]
    last = data[-2]["seq"]
    with alice.stream("GET", f"/api/jobs/{job['job']}/events", headers={"Last-Event-ID": str(last)}) as stream:
        again = [json.loads(line[len("data: "):]) for line in stream.iter_lines() if line.startswith("data: ")]
    assert again == data[-1:]
    refused = judge("run", server=server.url, token=tokens["alice"])
    assert (refused.exit_code, refused.stderr) == (2, "error: only the organizer may run a round: participant 'alice' "
                                                      "is a contestant\n")


def test_a_long_poll_wakes_for_what_its_reader_may_read_and_at_the_end():
    import asyncio

    from judge.server.jobs import Job

    job = Job(1, 1, None, "boss", "2026-11-27T10:00:00")
    mine = lambda event: getattr(event, "proposal", None) == "mine"  # noqa: E731

    async def waited(since: int, timeout_s: float, wakes=None) -> float:
        started = time.monotonic()
        await job.wait(since, timeout_s, wakes)
        return time.monotonic() - started

    job.event("stage", proposal="theirs", stage="static")
    assert asyncio.run(waited(0, 0.3, mine)) >= 0.3  # another's progress: the wait runs out
    job.event("stage", proposal="mine", stage="static")
    assert asyncio.run(waited(0, 5, mine)) < 1 and asyncio.run(waited(1, 5)) < 1
    job.state = "done"
    assert asyncio.run(waited(2, 5, mine)) < 1  # an ended job answers at once


def test_every_reader_reads_why_no_candidate_of_the_round_was_timed():
    """A failed base is the round's news (its text is public, as the base is): a contestant's filter and long poll
    let the event through, as they do the control's."""
    from types import SimpleNamespace

    from judge.server.api import _reader_filter, _wakes
    from judge.wire import make_event

    contestant = SimpleNamespace(role="contestant", name="alice")
    ledger = SimpleNamespace(current_revisions=lambda: [], latest_revision=lambda proposal: None)
    event = make_event(4, "base-failed", {"proposal": "(base)", "reason": "the round's base is compile-error (...)"})
    assert _reader_filter(ledger, contestant)(event) and _wakes(ledger, contestant)(event)
    assert not _reader_filter(ledger, contestant)(make_event(5, "stage", {"proposal": "bobs", "stage": "static"}))
