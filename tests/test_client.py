"""The CLI as a client of judge serve: the same commands print the same bytes as on the local ledger, files are
read and reports written on the agent's side, and an agent's whole loop runs through JUDGE_SERVER alone."""

import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from click.testing import CliRunner
from serving import contest, knob_patch, serve_here

from judge.cli.main import main
from judge.ledger import Ledger

JUDGE = Path(sys.executable).parent / "judge"


@pytest.fixture
def fake_stages(monkeypatch):
    from fakestages import rounds_with

    rounds_with(monkeypatch)


@pytest.fixture
def served(tmp_path, monkeypatch, fake_stages):
    """A contest in tmp_path (the working directory), served from the same ledger file as the local CLI reads."""
    server, tokens = serve_here(tmp_path, monkeypatch)
    yield server, tokens, tmp_path
    server.stop()


def judge(*args, server=None, token=None, input=None, root=None):
    """judge in this process: on the server at `server`, or on the ledger and kernels of `root` named as the server
    names them (by absolute path), or on those of the working directory."""
    env = {"JUDGE_SERVER": server, "JUDGE_TOKEN": token} if server else {}
    where = ["--ledger", str(root / "ledger.db"), "--kernels", str(root / "kernels")] if root else []
    return CliRunner().invoke(main, where + list(args), input=input, env=env, catch_exceptions=False)


def proposal_dir(root: Path, pid: str, author: str, patch: str | None) -> None:
    d = root / "proposals" / pid
    d.mkdir(parents=True)
    (d / "proposal.toml").write_text(f'id = "{pid}"\ntitle = "{pid}"\nauthor = "{author}"\nround = 1\ntarget = "axpy"\n'
                                     '[claim]\nlow = 1.1\nhigh = 1.3\n')
    (d / "pitch.md").write_text("One pass.")
    if patch is not None:
        (d / "patch.diff").write_text(patch)


def _ran_round(root: Path, tokens: dict) -> None:
    proposal_dir(root, "fast", "alice", knob_patch("speedup 1.25"))
    proposal_dir(root, "slow", "bob", knob_patch("speedup 0.8"))
    proposal_dir(root, "idea", "alice", None)
    assert judge("submit", "proposals").exit_code == 0
    vote = {"shark": "oracle", "proposal": "fast", "scores": {"feasibility": 7.5}, "fund": True, "stated_total": 9}
    assert judge("vote", "-", input=json.dumps(vote)).exit_code == 0
    assert judge("run", "--round", "1", "--json").exit_code == 0
    shutil.rmtree(root / "reports")


def _reports(root: Path) -> dict[str, bytes]:
    """What the last command wrote under reports/, by name; the folder is then emptied for the next one."""
    folder = root / "reports"
    written = {p.name: p.read_bytes() for p in folder.iterdir()} if folder.exists() else {}
    shutil.rmtree(folder, ignore_errors=True)
    return written


READS = [("list",), ("list", "--round", "1"), ("show", "fast"), ("show", "idea"), ("status",), ("brief",),
         ("brief", "--round", "1"), ("shark", "list"), ("report", "--round", "1"), ("report", "--leaderboard"), ("report",),
         ("base",), ("base", "--round", "1"), ("base", "--round", "2", "--out", "kernel.py")]


@pytest.mark.parametrize("as_json", [True, False], ids=["json", "text"])
def test_the_cli_against_the_server_prints_the_same_bytes_as_on_the_ledger(served, as_json):
    server, tokens, root = served
    _ran_round(root, tokens)
    charts = set()
    for args in READS:
        args = args + (("--json",) if as_json else ())
        local = judge(*args, root=root)
        assert local.exit_code == 0 and local.output, (args, local.output)
        written = _reports(root)
        kernel = (root / "kernel.py").read_bytes() if "--out" in args else None
        # every proposal is judged: a contestant reads what the ledger's holder reads, but where the ledger lies
        remote = judge(*args, server=server.url, token=tokens["boss" if args[0] == "status" else "bob"])
        assert (remote.exit_code, remote.stdout, remote.stderr) == (local.exit_code, local.stdout, local.stderr), args
        assert _reports(root) == written, args
        if kernel is not None:
            assert (root / "kernel.py").read_bytes() == kernel and b"# tuned" in kernel  # the winner's patch applied
        charts |= {name for name in written if name.endswith(".svg")}
    assert charts  # the reports had their charts, written here too
    status = judge("status", "--json", server=server.url, token=tokens["bob"])
    assert json.loads(status.stdout)["ledger"] == "ledger.db"


ROLE_READS = [("list",), ("show", "fast"), ("status",), ("brief",), ("base",), ("base", "--round", "1"), ("shark", "list")]


def test_every_role_reads_through_the_server_what_the_ledger_prints(served):
    """The matrix's other axis: the organizer, a contestant (author or not) and a shark read, once the round has
    judged everything, the same bytes as the local ledger prints; only where the ledger lies is the organizer's."""
    server, tokens, root = served
    _ran_round(root, tokens)
    for role in ("boss", "alice", "oracle"):
        for args in ROLE_READS:
            for as_json in (("--json",), ()):
                local = judge(*args, *as_json, root=root)
                _reports(root)
                remote = judge(*args, *as_json, server=server.url, token=tokens[role])
                _reports(root)
                expected = local.stdout
                if args == ("status",) and role != "boss":
                    expected = expected.replace(str(root / "ledger.db"), "ledger.db")
                assert (remote.exit_code, remote.stdout, remote.stderr) == (0, expected, local.stderr), (role, args)


def test_errors_through_the_server_are_the_same_line_with_the_same_exit(served):
    server, tokens, root = served
    _ran_round(root, tokens)
    for args in [("show", "nope"), ("show", "nope", "--json"), ("report", "--round", "4"), ("brief", "--target", "nowhere"),
                 ("clear", "2", "--note", "real", "--json")]:
        local = judge(*args, root=root)
        remote = judge(*args, server=server.url, token=tokens["boss"])
        assert (remote.exit_code, remote.stdout, remote.stderr) == (local.exit_code, local.stdout, local.stderr), args
        assert remote.exit_code == 2


def test_writes_through_the_server_print_what_they_print_locally(served, tmp_path_factory):
    """Two identical contests, one local and one served: the same submissions and votes print the same."""
    server, tokens, root = served
    twin = tmp_path_factory.mktemp("twin")
    contest(twin)
    for where in (root, twin):
        proposal_dir(where, "fast", "alice", knob_patch())
        proposal_dir(where, "broken", "alice", knob_patch().replace("a/submission.py", "a/reference.py"))
    os.chdir(twin)
    local = [judge("submit", "proposals"), judge("submit", "proposals/fast", "--json")]
    os.chdir(root)
    remote = [judge("submit", "proposals", server=server.url, token=tokens["alice"]),
              judge("submit", "proposals/fast", "--json", server=server.url, token=tokens["alice"])]
    assert [(r.exit_code, r.stdout, r.stderr) for r in remote] == [(r.exit_code, r.stdout, r.stderr) for r in local]
    assert remote[0].stderr == ("error: proposals/broken/patch.diff: touches reference.py; only the target's kernel "
                                "file submission.py may change\n")
    assert json.loads(remote[1].stdout) == [{"proposal_id": "fast", "revision": 1, "revision_id": 1, "status": "new"}]
    vote = json.dumps({"shark": "critic", "proposal": "fast", "scores": {"feasibility": 4}, "stated_total": 2})
    os.chdir(twin)
    local_vote = judge("vote", "-", input=vote)
    os.chdir(root)
    remote_vote = judge("vote", "-", input=vote, server=server.url, token=tokens["critic"])
    assert (remote_vote.exit_code, remote_vote.stdout) == (local_vote.exit_code, local_vote.stdout)
    assert remote_vote.stdout == "new       vote #1: critic on fast r1: total pending, stated 2\n"


def test_the_organizer_runs_a_round_from_afar_and_gets_its_report_here(served, tmp_path_factory):
    server, tokens, root = served
    proposal_dir(root, "fast", "alice", knob_patch())
    assert judge("submit", "proposals").exit_code == 0
    away = tmp_path_factory.mktemp("organizer")
    os.chdir(away)
    result = judge("run", "--json", server=server.url, token=tokens["boss"])
    assert result.exit_code == 0, result.output
    [summary] = json.loads(result.stdout)
    assert (summary["round"], summary["winner"], summary["report"]) == (1, "fast", "reports/round-1.md")
    assert (away / "reports" / "round-1.md").read_text() == (root / "server-reports" / "round-1.md").read_text()
    refused = judge("run", "--gpus", "all", server=server.url, token=tokens["boss"])
    assert (refused.exit_code, refused.stderr) == (2, "error: --ray and --gpus are the server's to choose (judge serve --ray, --gpus)\n")
    contestant = judge("run", "--json", server=server.url, token=tokens["alice"])
    assert (contestant.exit_code, json.loads(contestant.stdout)) == (
        2, {"error": "only the organizer may run a round: participant 'alice' is a contestant", "exit": 2})


def test_participants_locally_and_through_the_server(served):
    server, tokens, root = served
    added = judge("participant", "add", "dora", "--role", "contestant")
    assert added.exit_code == 0 and added.stdout.startswith("judge_") and len(added.stdout.strip()) == 49
    assert added.stderr == "participant 'dora' added as contestant; its token, shown this once (hand it over as JUDGE_TOKEN):\n"
    stored = Ledger(root / "ledger.db").query("select token_sha256 from participants where name = 'dora'")[0]["token_sha256"]
    assert added.stdout.strip() not in (root / "ledger.db").read_bytes().decode("latin-1") and len(stored) == 64
    by_boss = judge("participant", "add", "eve", "--role", "shark", "--json", server=server.url, token=tokens["boss"])
    assert sorted(json.loads(by_boss.stdout)) == ["created_at", "name", "role", "token"]
    refused = judge("participant", "add", "mallory", "--role", "organizer", server=server.url, token=tokens["alice"])
    assert (refused.exit_code, refused.stderr) == (2, "error: only the organizer may add participants: participant 'alice' is a contestant\n")
    revoked = judge("participant", "revoke", "dora", server=server.url, token=tokens["boss"])
    assert revoked.stdout.startswith("participant 'dora' (contestant) revoked at ")
    listed = judge("participant", "list", "--json", server=server.url, token=tokens["boss"])
    assert [(p["name"], p["revoked_at"] is not None) for p in json.loads(listed.stdout)][-2:] == [("dora", True), ("eve", False)]


def test_a_missing_token_or_an_unreachable_server_is_one_line(served):
    server, tokens, root = served
    missing = judge("list", "--json", server=server.url)
    assert (missing.exit_code, json.loads(missing.stdout)["error"]) == (
        2, "no token: send 'Authorization: Bearer TOKEN' (the judge CLI sends JUDGE_TOKEN); the organizer gives each "
           "participant one with 'judge participant add'")
    gone = judge("status", server="http://127.0.0.1:9", token="x")
    assert gone.exit_code == 2 and gone.stderr.startswith("error: http://127.0.0.1:9: cannot reach the judge server (ConnectionRefusedError: ")


def _agent(args: list[str], cwd: Path, env: dict, input: str | None = None) -> dict | list:
    done = subprocess.run([str(JUDGE), *args, "--json"], cwd=cwd, env=env, input=input, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout)


def test_an_agents_loop_runs_through_judge_server_alone(served, tmp_path_factory):
    """In an empty folder, with JUDGE_SERVER and JUDGE_TOKEN and nothing else: read the brief, submit, wait for the
    organizer's round, read the scorecard."""
    server, tokens, root = served
    home = tmp_path_factory.mktemp("agent")
    base = {k: v for k, v in os.environ.items() if not k.startswith("JUDGE_")}
    agent = {**base, "JUDGE_SERVER": server.url, "JUDGE_TOKEN": tokens["alice"]}
    brief = _agent(["brief", "--target", "axpy"], home, agent)
    assert (brief["path"], brief["brief"]["round"], brief["brief"]["target"]) == ("reports/brief-round-1-axpy.md", 1, "axpy")
    assert (home / brief["path"]).read_text().startswith("# Brief: round 1 of axpy")
    mine = {"id": "one-pass", "title": "One pass", "round": brief["brief"]["round"], "target": "axpy",
            "claim": {"low": 1.1, "high": 1.4}, "pitch": "Fuse the scale.", "patch": knob_patch("speedup 1.3")}
    assert _agent(["submit", "-"], home, agent, json.dumps(mine)) == [
        {"proposal_id": "one-pass", "revision": 1, "revision_id": 1, "status": "new"}]
    organizer = threading.Thread(target=lambda: (time.sleep(1), _agent(
        ["run"], tmp_path_factory.mktemp("boss"), {**base, "JUDGE_SERVER": server.url, "JUDGE_TOKEN": tokens["boss"]})))
    organizer.start()
    deadline = time.monotonic() + 90
    while not (status := _agent(["status"], home, agent))["rounds"]:
        assert time.monotonic() < deadline, "the round never ran"
        time.sleep(0.5)
    while _agent(["list"], home, agent)[0]["outcome"] == "pending":
        assert time.monotonic() < deadline, "the round never finished"
        time.sleep(0.5)
    organizer.join()
    card = _agent(["report", "--round", "1"], home, agent)
    assert card["path"] == "reports/round-1.md"
    assert card["round"]["targets"][0]["winner"]["proposal_id"] == "one-pass"
    assert "| 1 | one-pass r1 (winner) | alice | faster | 1.300x [1.294, 1.307] | - | none | #3 |" in (home / card["path"]).read_text()
    assert sorted(p.name for p in home.iterdir()) == ["reports"] and status["rounds"][0]["target"] == "axpy"


HEAVY = ("sqlite_utils", "pydantic", "httpx", "numpy", "torch", "jinja2", "judge.ledger", "judge.records",
         "judge.actions", "judge.rounds", "judge.round_actions", "judge.stages", "judge.report", "judge.wire")


def _imported(args: list[str], env: dict) -> set[str]:
    """The modules `judge ARGS` imports, read from python -X importtime (every module, each once)."""
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "judge.cli.main", *args], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    return {line.split("|")[-1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")}


def test_a_client_command_imports_nothing_heavy(served):
    """judge --version and judge status through a server answer at once: no ledger, no pydantic, no httpx, no
    library behind the command (the served contest of 2026-11-27: 0.68 s for --version, 0.66 s of imports)."""
    server, tokens, root = served
    env = {k: v for k, v in os.environ.items() if not k.startswith("JUDGE_")}
    env["PYTHONPATH"] = str(Path(__file__).parent.parent)
    for args, extra in ((["--version"], {}), (["status", "--json"], {"JUDGE_SERVER": server.url, "JUDGE_TOKEN": tokens["bob"]})):
        loaded = _imported(args, {**env, **extra})
        assert "judge.cli.main" in loaded and not {m for m in loaded if m.split(".")[0] in HEAVY or
                                                   any(m == h or m.startswith(h + ".") for h in HEAVY)}, args


def test_a_contestants_folder_proposal_without_author_and_a_token_with_a_trailing_space(served):
    """The token names the author, as it does for JSON on stdin; a pasted token's trailing space or newline is no
    error, and a token with characters no token has is refused without being printed."""
    server, tokens, root = served
    proposal_dir(root, "mine", "alice", knob_patch())
    toml = root / "proposals" / "mine" / "proposal.toml"
    toml.write_text(toml.read_text().replace('author = "alice"\n', ""))
    sent = judge("submit", "proposals/mine", "--json", server=server.url, token=tokens["alice"] + " \n")
    assert (sent.exit_code, json.loads(sent.stdout)) == (0, [{"proposal_id": "mine", "revision": 1, "revision_id": 1,
                                                              "status": "new"}])
    assert Ledger(root / "ledger.db").latest_revision("mine")["author"] == "alice"
    odd = judge("status", server=server.url, token="judge_sec ret")
    assert (odd.exit_code, "sec" in odd.output) == (2, False)
    assert odd.stderr == ("error: JUDGE_TOKEN holds characters a token never has (spaces, control or non-ASCII "
                          "characters): set it to the token 'judge participant add' printed, alone\n")


def test_every_answer_is_the_model_the_openapi_document_declares_for_it(served):
    """An agent in any language reads the schema: each JSON answer validates against the model /openapi.json names
    for its route and status (judge.wire), errors included."""
    from pydantic import TypeAdapter

    from judge import wire

    server, tokens, root = served
    _ran_round(root, tokens)
    boss = server.client(tokens["boss"])
    document = boss.get("/openapi.json").json()

    def model(path: str, method: str, status: int):
        responses = document["paths"][path][method]["responses"]
        schema = (responses.get(str(status)) or responses[f"{str(status)[0]}XX"])["content"]["application/json"]["schema"]
        if schema.get("type") == "array":
            return list[getattr(wire, schema["items"]["$ref"].rsplit("/", 1)[1])]
        return getattr(wire, schema["$ref"].rsplit("/", 1)[1])

    vote = {"shark": "critic", "proposal": "fast", "scores": {"feasibility": 4}}
    calls = [("get", "/api/whoami", "/api/whoami", None), ("get", "/api/ledger", "/api/ledger", None),
             ("get", "/api/status", "/api/status", None), ("get", "/api/proposals", "/api/proposals", None),
             ("get", "/api/proposals/fast", "/api/proposals/{proposal_id}", None),
             ("get", "/api/base?round=2", "/api/base", None), ("get", "/api/brief", "/api/brief", None),
             ("get", "/api/scorecards?round=1", "/api/scorecards", None), ("get", "/api/leaderboard", "/api/leaderboard", None),
             ("get", "/api/jobs", "/api/jobs", None), ("get", "/api/participants", "/api/participants", None),
             ("post", "/api/votes", "/api/votes", vote), ("post", "/api/participants", "/api/participants",
                                                          {"name": "dora", "role": "contestant"}),
             ("delete", "/api/participants/dora", "/api/participants/{name}", None),
             ("get", "/api/proposals/nope", "/api/proposals/{proposal_id}", None),
             ("post", "/api/rounds", "/api/rounds", {"round": 7})]
    for method, url, route, body in calls:
        response = boss.request(method.upper(), url, json=body)
        TypeAdapter(model(route, method, response.status_code)).validate_python(response.json())


def test_the_organizers_run_and_clear_print_the_same_through_the_server(served, tmp_path_factory):
    """The matrix's organizer commands on two identical contests, one local and one served: `judge run` and
    `judge clear` of a result held as implausible print the same (but the seconds a run took and where each ledger's
    targets lie), and the clearance's reports are rendered again where the command ran."""
    server, tokens, root = served
    twin = tmp_path_factory.mktemp("twin")
    contest(twin)
    away = tmp_path_factory.mktemp("organizer")
    for where in (root, twin):
        proposal_dir(where, "fast", "alice", knob_patch("speedup 1.25"))
        proposal_dir(where, "wild", "bob", knob_patch("speedup 30"))
        assert judge("submit", "proposals", root=where).exit_code == 0

    def same(text: str) -> str:
        kept = [line for line in text.splitlines() if not line.startswith("time: ")]
        return "\n".join(kept).replace(str(root), "ROOT").replace(str(twin), "ROOT")

    os.chdir(twin)
    local = judge("run", root=twin)
    os.chdir(away)
    remote = judge("run", server=server.url, token=tokens["boss"])
    assert (remote.exit_code, same(remote.stdout)) == (local.exit_code, same(local.stdout)) and local.exit_code == 0
    assert "held: wild r1 (evaluation #" in local.stdout
    held = int(local.stdout.split("held: wild r1 (evaluation #")[1].split(")")[0])
    os.chdir(twin)
    local = judge("clear", str(held), "--note", "checked by hand", root=twin)
    os.chdir(away)
    remote = judge("clear", str(held), "--note", "checked by hand", server=server.url, token=tokens["boss"])
    assert (remote.exit_code, same(remote.stdout), remote.stderr) == (local.exit_code, same(local.stdout), local.stderr)
    assert local.exit_code == 0 and "rendered again: reports/round-1.md" in local.stdout
    assert (away / "reports" / "leaderboard.md").read_text().count("wild") == (twin / "reports" / "leaderboard.md").read_text().count("wild")


def test_the_client_goes_through_the_proxy_the_environment_names(monkeypatch):
    from urllib.parse import urlsplit

    from judge.cli.client import _proxy

    server = urlsplit("https://judge.example.org")
    for name in ("http_proxy", "https_proxy", "all_proxy", "no_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
    assert _proxy(server) is None
    monkeypatch.setenv("https_proxy", "http://proxy.internal:3128")
    assert (_proxy(server).hostname, _proxy(server).port) == ("proxy.internal", 3128)
    assert _proxy(urlsplit("http://judge.example.org")) is None  # no proxy for plain http named
    monkeypatch.setenv("no_proxy", "example.org")
    assert _proxy(server) is None
