"""judge serve: a proposal is its author's and the organizers' until its round judged it (the sharks read its pitch),
on every route, page and CLI command; limits per contestant answer 429 with when to retry; bidi and zero-width
characters reach no page and no JSON. One ledger with a fake evaluation row stands in for a round: nothing is run."""

import json
import os

import httpx
import pytest
from click.testing import CliRunner
from serving import BASE, LiveServer, contest, knob_patch, rows

from judge.cli.main import main
from judge.ledger import Ledger
from judge.records import Proposal
from judge.server import Config

# U+202E (right-to-left override), U+2066..U+2069 (isolates), U+200B (zero-width space), U+200D (joiner)
BIDI = "\u202e\u2066\u2067\u2068\u2069\u200b\u200d"
SECRET_PITCH = "Split the scale into two warps (SECRET-PITCH)."


def _proposal(pid: str, author: str, round: int, title: str, pitch: str, patch: str | None) -> Proposal:
    return Proposal(id=pid, title=title, author=author, round=round, target="axpy", pitch=pitch,
                    claim={"low": 1.1, "high": 1.3}, patch=patch)


def _judged_round(ledger: Ledger) -> None:
    """Round 1 of axpy ran and judged bob's 'judged' (slower) and alice's pitch 'musing': a rounds row, a finished
    run, a candidate evaluation row."""
    base = "\n".join(BASE) + "\n"
    round_row = ledger.create_round("axpy", 1, base, "tests/fixtures/axpy/submission.py")
    run_id = ledger.start_run(round_row["id"], [])
    revision = ledger.latest_revision("judged")
    ledger.record_evaluation(run_id=run_id, round_id=round_row["id"], revision_id=revision["id"], subject="candidate",
                             kernel_sha256="0" * 64, outcome="slower", reason="geomean 0.900x", stages=[], device=None,
                             started_at="2026-11-27T10:00:00+00:00")
    ledger.finish_run(run_id, "finished")


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """Round 1 judged bob's 'judged' (its title and pitch with bidi and zero-width characters) and alice's pitch
    'musing'; for round 2, not judged: alice's 'hush-warp' and bob's second revision of 'judged'."""
    root = tmp_path_factory.mktemp("visibility")
    tokens = contest(root)
    ledger = Ledger(root / "ledger.db")
    ledger.submit(_proposal("judged", "bob", 1, f"Judged{BIDI} idea", f"JUDGED-PITCH{BIDI}", knob_patch("speedup 0.9")),
                  "test")
    ledger.submit(_proposal("musing", "alice", 1, "A musing", "MUSING-PITCH", None), "test")
    _judged_round(ledger)
    ledger.submit(_proposal("hush-warp", "alice", 2, "Secret warp split", SECRET_PITCH, knob_patch("speedup 1.3")), "test")
    ledger.submit(_proposal("judged", "bob", 2, "Judged idea, again", "REVISED-PITCH", knob_patch("speedup 1.1")), "test")
    ledger.close()
    server = LiveServer(Config(ledger=root / "ledger.db", kernels=root / "kernels", out_dir=root / "reports"))
    yield server, tokens, root
    server.stop()


def _get(server, token, path, **params) -> httpx.Response:
    return server.client(token).get(path, params=params)


# who reads what, before and after judging ---------------------------------------------------------------------

# (reader, the ids of the proposals it lists)
LISTS = [("alice", ["hush-warp", "judged", "musing"]), ("boss", ["hush-warp", "judged", "musing"]),
         ("oracle", ["hush-warp", "judged", "musing"]), ("bob", ["judged", "musing"])]


@pytest.mark.parametrize("reader,ids", LISTS, ids=[r for r, _ in LISTS])
def test_the_list_holds_what_its_reader_may_see(site, reader, ids):
    server, tokens, root = site
    listed = _get(server, tokens[reader], "/api/proposals").json()
    assert sorted(p["id"] for p in listed) == ids


def test_a_revision_not_yet_judged_is_its_authors_a_contestant_reads_the_judged_one(site):
    server, tokens, root = site
    alice = [(p["id"], p["revision"], p["title"]) for p in _get(server, tokens["alice"], "/api/proposals").json()]
    assert ("judged", 1, "Judged idea") in alice  # bob's revision 2 is bob's until round 2 judges it
    shown = _get(server, tokens["alice"], "/api/proposals/judged").json()
    assert [r["revision"] for r in shown["revisions"]] == [1]
    assert [r["revision"] for r in _get(server, tokens["bob"], "/api/proposals/judged").json()["revisions"]] == [1, 2]


@pytest.mark.parametrize("reader", ["alice", "boss", "oracle"])
def test_the_author_the_organizer_and_the_sharks_read_an_unjudged_pitch(site, reader):
    server, tokens, root = site
    shown = _get(server, tokens[reader], "/api/proposals/hush-warp")
    assert (shown.status_code, shown.json()["revisions"][0]["pitch"]) == (200, SECRET_PITCH)


# Every way a contestant (bob) or a reader without a token could learn of alice's unjudged 'hush-warp': each refused,
# or answered without a trace of it (its id, title, pitch).
PROBES = [
    ("show, JSON", "bob", "/api/proposals/hush-warp", {}, 404),
    ("show, Markdown", "bob", "/api/proposals/hush-warp", {"format": "md"}, 404),
    ("list of round 2", "bob", "/api/proposals", {"round": 2}, 200),
    ("list, Markdown", "bob", "/api/proposals", {"format": "md"}, 200),
    ("brief, JSON", "bob", "/api/brief", {"target": "axpy"}, 200),
    ("brief, Markdown", "bob", "/api/brief", {"target": "axpy", "format": "md"}, 200),
    ("status", "bob", "/api/status", {}, 200),
    ("leaderboard", "bob", "/api/leaderboard", {}, 200),
    ("scorecard", "bob", "/api/scorecards", {"round": 1}, 200),
    ("jobs", "bob", "/api/jobs", {}, 200),  # each job with the events its reader may read (test_watch.py)
    ("shark list", "bob", "/api/sharks", {}, 200),
    ("the API without a token", None, "/api/proposals/hush-warp", {}, 401),
    ("the brief page", None, "/pages/brief-axpy.html", {}, 200),
    ("the contest's page", None, "/pages/index.html", {}, 200),
    ("the round page", None, "/pages/round-1.html", {}, 200),
    ("the leaderboard page", None, "/pages/leaderboard.html", {}, 200),
    ("an unjudged proposal's page", None, "/pages/proposal-hush-warp.html", {}, 404),
    ("a judged proposal's page", None, "/pages/proposal-judged.html", {}, 200),
]


@pytest.mark.parametrize("case", PROBES, ids=[c[0] for c in PROBES])
def test_no_route_or_page_tells_another_contestant_of_an_unjudged_proposal(site, case):
    server, tokens, root = site
    _, reader, path, params, status = case
    response = _get(server, tokens.get(reader), path, **params)
    assert response.status_code == status, response.text
    traces = ["Secret warp split", "SECRET-PITCH"] + (["REVISED-PITCH", "Judged idea, again"] if reader is None else [])
    for trace in traces + (["hush-warp"] if status != 404 else []):  # a 404 names the id it was asked for
        assert trace not in response.text, trace
    if status == 404:
        assert response.json() == {"error": "proposal 'hush-warp' is not in the ledger (see 'judge list')", "exit": 2}


def test_the_author_reads_its_proposal_in_the_brief_and_another_contestant_does_not(site):
    server, tokens, root = site
    mine = _get(server, tokens["alice"], "/api/brief", target="axpy", format="md").text
    theirs = _get(server, tokens["bob"], "/api/brief", target="axpy", format="md").text
    assert "hush-warp" in mine and "hush-warp" not in theirs
    page = _get(server, None, "/pages/round-1.html").text
    assert "judged" in page and "musing" in page  # judged: everyone's, the pages' readers too


def test_the_cli_through_the_server_reads_as_its_token_may(site, monkeypatch):
    server, tokens, root = site
    monkeypatch.chdir(root)
    for name in ("JUDGE_SERVER", "JUDGE_TOKEN", "JUDGE_LEDGER"):
        monkeypatch.delenv(name, raising=False)

    def judge(token, *args):
        return CliRunner().invoke(main, list(args), env={"JUDGE_SERVER": server.url, "JUDGE_TOKEN": token},
                                  catch_exceptions=False)

    shown = judge(tokens["bob"], "show", "hush-warp")
    assert (shown.exit_code, shown.stderr) == (2, "error: proposal 'hush-warp' is not in the ledger (see 'judge list')\n")
    listed = judge(tokens["bob"], "list", "--json")
    assert sorted(p["id"] for p in json.loads(listed.stdout)) == ["judged", "musing"]
    brief = judge(tokens["bob"], "brief", "--target", "axpy", "--out", str(root / "bob-brief"))
    assert brief.exit_code == 0 and "hush-warp" not in brief.stdout
    assert all("hush-warp" not in p.read_text() for p in (root / "bob-brief").iterdir())
    assert json.loads(judge(tokens["alice"], "show", "hush-warp", "--json").stdout)["revisions"][0]["pitch"] == SECRET_PITCH


def test_the_counts_are_of_what_the_reader_may_see(site):
    server, tokens, root = site
    assert _get(server, tokens["bob"], "/api/status").json()["counts"]["proposals"] == 2  # not alice's hush-warp
    assert _get(server, tokens["alice"], "/api/status").json()["counts"]["revisions"] == 3  # not bob's revision 2
    assert _get(server, tokens["boss"], "/api/status").json()["counts"]["revisions"] == 4


def test_the_ledgers_path_is_the_organizers(site):
    server, tokens, root = site
    assert _get(server, tokens["bob"], "/api/ledger").json()["ledger"] == "ledger.db"
    assert _get(server, tokens["bob"], "/api/status").json()["ledger"] == "ledger.db"
    assert _get(server, tokens["boss"], "/api/ledger").json()["ledger"] == str(root / "ledger.db")


def test_judged_proposals_for_participants_only_leave_no_pages(site):
    server, tokens, root = site
    private = LiveServer(Config(ledger=root / "ledger.db", kernels=root / "kernels", judged_visible_to="participants"))
    try:
        page = httpx.get(f"{private.url}/pages/round-1.html")
        assert (page.status_code, page.json()["error"]) == (
            401, "this contest shows its proposals to participants only ('judge serve --judged-visible-to participants'): "
                 "read them through /api with a token (the judge CLI's --server)")
        listed = private.client(tokens["bob"]).get("/api/proposals").json()
        assert sorted(p["id"] for p in listed) == ["judged", "musing"]
    finally:
        private.stop()


# text contained ------------------------------------------------------------------------------------------------


def test_bidi_and_zero_width_characters_reach_no_json(site):
    server, tokens, root = site
    shown = _get(server, tokens["bob"], "/api/proposals/judged").json()
    assert (shown["revisions"][0]["title"], shown["revisions"][0]["pitch"]) == ("Judged idea", "JUDGED-PITCH")
    listed = _get(server, tokens["alice"], "/api/proposals").json()
    assert [p["title"] for p in listed if p["id"] == "judged"] == ["Judged idea"]
    card = _get(server, tokens["alice"], "/api/scorecards", round=1)
    assert not any(ch in json.dumps(card.json(), ensure_ascii=False) for ch in BIDI)


def test_bidi_and_zero_width_characters_reach_no_page(site):
    server, tokens, root = site
    page = _get(server, None, "/pages/round-1.html").text
    assert "Judged idea" in page and not any(ch in page for ch in BIDI)


# limits ----------------------------------------------------------------------------------------------------------


def _pitch(pid: str, round: int = 3) -> dict:
    return {"id": pid, "title": pid, "round": round, "target": "axpy", "pitch": "p"}


def test_a_flood_of_proposals_is_told_when_to_retry(tmp_path):
    """The default quota, 20 proposals per contestant and round: the 21st, one by one or in a batch, is refused with
    when to retry and nothing written; revising one is free, the next round and the organizer are not limited."""
    tokens = contest(tmp_path)
    server = LiveServer(Config(ledger=tmp_path / "ledger.db", kernels=tmp_path / "kernels"))
    try:
        alice, boss = server.client(tokens["alice"]), server.client(tokens["boss"])
        assert alice.post("/api/proposals", json=[_pitch(f"p{n}", 1) for n in range(19)]).status_code == 200
        assert alice.post("/api/proposals", json=_pitch("p19", 1)).status_code == 200
        before = rows(tmp_path / "ledger.db")
        for body in (_pitch("p20", 1), [_pitch("p0", 1), _pitch("p20", 1), _pitch("p21", 1)]):
            refused = alice.post("/api/proposals", json=body)
            assert (refused.status_code, refused.headers["retry-after"]) == (429, "600")
            many = 21 if isinstance(body, dict) else 22
            assert refused.json() == {"error": f"too many proposals: participant 'alice' would have {many} in round 1 of "
                                               "axpy, this contest's limit is 20 per contestant and round ('judge serve "
                                               "--proposals-per-round'); revise one of yours, or submit for round 2 once "
                                               "round 1 has run; retry in 600 s", "exit": 2}
        assert rows(tmp_path / "ledger.db") == before
        assert alice.post("/api/proposals", json={**_pitch("p3", 1), "title": "better"}).json()[0]["status"] == "revised"
        assert boss.post("/api/proposals", json={**_pitch("p20", 1), "author": "alice"}).status_code == 200
    finally:
        server.stop()


def test_the_rate_limit_holds_contestants_and_sharks_not_organizers(tmp_path):
    tokens = contest(tmp_path)
    server = LiveServer(Config(ledger=tmp_path / "ledger.db", kernels=tmp_path / "kernels", rate_limit=2))
    try:
        for name, codes in (("oracle", [200, 200, 429]), ("boss", [200, 200, 200])):
            client = server.client(tokens[name])
            assert [client.get("/api/whoami").status_code for _ in range(3)] == codes, name
    finally:
        server.stop()


def test_serve_takes_the_limits_and_who_reads_judged_proposals(tmp_path, monkeypatch):
    """`judge serve`'s options reach the server's settings (uvicorn is not started)."""
    import uvicorn

    started = {}
    monkeypatch.setattr(uvicorn, "run", lambda app, **kw: started.update(config=app.state.judge.config))
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, ["serve", "--rate-limit", "30", "--proposals-per-round", "5",
                                       "--judged-visible-to", "participants"], env={"JUDGE_SERVER": None})
    assert result.exit_code == 0, result.output
    config = started["config"]
    assert (config.rate_limit, config.proposals_per_round, config.judged_visible_to) == (30, 5, "participants")
    assert Config(ledger=tmp_path).rate_limit == 120 and Config(ledger=tmp_path).proposals_per_round == 20
    assert os.path.exists(tmp_path / "ledger.db")


def test_a_judged_proposal_has_a_page_of_its_own_at_a_stable_link(site):
    server, tokens, root = site
    page = _get(server, None, "/pages/proposal-judged.html")
    assert page.status_code == 200 and "<h1>judged</h1>" in page.text
    assert "JUDGED-PITCH" in page.text and "REVISED-PITCH" not in page.text  # its judged revision, not the later one
