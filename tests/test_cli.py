"""The CLI: each command's output for people and for agents (--json), and one-line errors with exit 2."""

import hashlib
import json
from pathlib import Path

import pytest
from harness import FIXTURE, PATCH, ROOT, proposal_dir

from judge.ledger.migrations import MIGRATIONS


def test_init_creates_the_ledger(judge_env):
    judge, root = judge_env
    result = judge("init")
    assert result.exit_code == 0
    names = [m.__name__ for m in MIGRATIONS]
    assert result.output == f"ledger ledger.db: schema at {names[-1]} ({len(names)} migrations applied)\n"
    assert (root / "ledger.db").exists()


def test_submit_a_folder_of_proposals_then_again_unchanged(judge_env):
    judge, root = judge_env
    proposal_dir(root, "alpha")
    proposal_dir(root, "beta", patch=None)
    assert judge("submit", "proposals").output == "new       alpha revision 1\nnew       beta revision 1\n"
    assert judge("submit", "proposals").output == "unchanged alpha revision 1\nunchanged beta revision 1\n"


def test_submit_json_on_stdin_for_agents(judge_env):
    judge, root = judge_env
    data = {"id": "gamma", "title": "G", "author": "agent", "round": 1, "target": "axpy", "pitch": "p", "patch": PATCH}
    result = judge("submit", "-", "--json", input=json.dumps(data))
    assert json.loads(result.output) == [{"proposal_id": "gamma", "revision": 1, "revision_id": 1, "status": "new"}]


def test_a_bad_proposal_is_one_line_exit_2_and_nothing_is_written(judge_env):
    judge, root = judge_env
    proposal_dir(root, "alpha")
    proposal_dir(root, "broken", patch=PATCH.replace("a/submission.py", "a/reference.py").replace("b/submission.py", "b/reference.py"))
    result = judge("submit", "proposals")
    assert result.exit_code == 2
    assert result.stderr == (
        f"error: {Path('proposals/broken/patch.diff')}: touches reference.py; only the target's kernel file submission.py may change\n"
    )
    assert json.loads(judge("list", "--json").output) == []


def test_a_hunk_that_does_not_apply_is_named_with_the_base(judge_env):
    judge, root = judge_env
    proposal_dir(root, "stale", patch=PATCH.replace(" CHUNKS = 1", " CHUNKS = 8"))
    result = judge("submit", "proposals/stale")
    assert result.exit_code == 2
    sha = hashlib.sha256((FIXTURE / "submission.py").read_bytes()).hexdigest()
    assert result.stderr == (
        "error: proposals/stale/patch.diff: hunk 1 '@@ -5,3 +5,3 @@' of submission.py does not apply to the base "
        "(context not found; first line: '# knobs'); tried against round 1's base of axpy "
        f"({FIXTURE / 'submission.py'}; sha256 {sha[:12]}); get it with 'judge base --target axpy --round 1'\n"
    )


def test_an_unknown_target_is_named(judge_env):
    judge, root = judge_env
    d = proposal_dir(root, "lost")
    (d / "proposal.toml").write_text((d / "proposal.toml").read_text().replace('target = "axpy"', 'target = "nope"'))
    result = judge("submit", str(d))
    assert result.exit_code == 2
    assert result.stderr == (
        f"error: {d / 'proposal.toml'}: field 'target': target 'nope': no directory kernels/nope (targets live under kernels/)\n"
    )


def test_sharks_and_votes_with_a_flag_on_a_wrong_stated_total(judge_env):
    judge, root = judge_env
    proposal_dir(root, "pipeline-stages-3")
    judge("submit", "proposals")
    assert judge("shark", "add", str(ROOT / "sharks" / "performance-oracle.toml")).output == "new       shark performance-oracle version 1\n"
    result = judge("vote", str(ROOT / "votes" / "nvfp4_group_gemm" / "round-1" / "oracle--pipeline-stages-3.toml"))
    assert result.output == "new       vote #1: performance-oracle on pipeline-stages-3 r1: total 8.575, stated 8.4  FLAG: stated 8.4, computed 8.575\n"
    again = judge("vote", "--json", str(ROOT / "votes" / "nvfp4_group_gemm" / "round-1" / "oracle--pipeline-stages-3.toml"))
    assert json.loads(again.output)[0]["status"] == "unchanged"


def test_a_vote_for_an_unknown_shark_is_refused(judge_env):
    judge, root = judge_env
    proposal_dir(root, "alpha")
    judge("submit", "proposals")
    result = judge("vote", "-", input=json.dumps({"shark": "ghost", "proposal": "alpha", "scores": {"x": 1}}))
    assert result.exit_code == 2
    assert result.stderr == "error: <stdin>: field 'shark': 'ghost' is not in the ledger (add it with 'judge shark add FILE')\n"


def test_list_show_and_status_for_agents(judge_env):
    judge, root = judge_env
    proposal_dir(root, "alpha")
    proposal_dir(root, "beta", patch=None, extra='parent = "alpha"\n')
    judge("submit", "proposals")
    rows = json.loads(judge("list", "--json").output)
    assert [(r["id"], r["outcome"], r["claim"]) for r in rows] == [("alpha", "pending", [1.1, 1.2]), ("beta", "pitch", [1.1, 1.2])]
    shown = json.loads(judge("show", "beta", "--json").output)
    assert (shown["id"], shown["revisions"][0]["parent"], shown["revisions"][0]["has_patch"]) == ("beta", "alpha", False)
    status = json.loads(judge("status", "--json").output)
    assert status["counts"] == {"proposals": 2, "revisions": 2, "sharks": 0, "votes": 0, "evaluations": 0, "timings": 0}


def test_show_an_unknown_proposal(judge_env):
    judge, _ = judge_env
    judge("init")
    result = judge("show", "nobody")
    assert (result.exit_code, result.stderr) == (2, "error: proposal 'nobody' is not in the ledger (see 'judge list')\n")


def test_the_ledger_option_picks_the_database(judge_env):
    judge, root = judge_env
    judge("--ledger", "other.db", "init")
    assert (root / "other.db").exists() and not (root / "ledger.db").exists()


NO_LEDGER = "error: ledger.db: no ledger here (create one with 'judge init'; --ledger or JUDGE_LEDGER picks another)\n"
VOTE = str(ROOT / "votes" / "nvfp4_group_gemm" / "round-1" / "oracle--pipeline-stages-3.toml")


@pytest.mark.parametrize("command", [["list"], ["show", "alpha"], ["status"], ["report"], ["shark", "list"], ["vote", VOTE],
                                     ["clear", "1", "--note", "checked"], ["run", "--round", "1"]])
def test_a_command_that_needs_a_ledger_refuses_a_missing_one_and_creates_none(judge_env, command):
    judge, root = judge_env
    result = judge(*command)
    assert (result.exit_code, result.stderr) == (2, NO_LEDGER)
    assert list(root.glob("ledger.db*")) == []


def test_a_mistyped_ledger_path_is_named_not_created(judge_env):
    judge, root = judge_env
    judge("init")
    result = judge("--ledger", "ledgr.db", "status", "--json")
    assert (result.exit_code, json.loads(result.stdout)) == (2, {"error": NO_LEDGER[7:-1].replace("ledger.db:", "ledgr.db:"), "exit": 2})
    assert not (root / "ledgr.db").exists()


def test_commands_that_add_create_a_missing_ledger(judge_env):
    judge, root = judge_env
    assert judge("shark", "add", str(ROOT / "sharks" / "performance-oracle.toml")).exit_code == 0
    assert (root / "ledger.db").exists()


def test_list_never_truncates_an_id_in_80_columns(judge_env, monkeypatch):
    from judge.cli import main as cli

    judge, root = judge_env
    long_id = "pipeline-stages-3-with-warp-specialised-epilogue"
    proposal_dir(root, long_id)
    proposal_dir(root, "beta", patch=None)
    judge("submit", "proposals")
    monkeypatch.setattr(cli.out, "_width", 80)
    lines = judge("list").output.splitlines()
    assert max(len(line) for line in lines) <= 80
    assert any(f"│ {long_id} │" in line and "pending" in line for line in lines)
    assert any("│ beta " in line and "pitch" in line for line in lines)
    assert "…" not in "".join(lines)


def test_under_json_usage_errors_and_bugs_are_one_json_object_on_stdout(judge_env, monkeypatch):
    from judge import actions

    judge, root = judge_env
    result = judge("list", "--round", "x", "--json")
    assert (result.exit_code, json.loads(result.stdout)) == (
        2, {"error": "Invalid value for '--round': 'x' is not a valid integer.", "exit": 2})
    result = judge("submit", "--json")
    assert (result.exit_code, json.loads(result.stdout)) == (2, {"error": "Missing argument 'PATHS...'.", "exit": 2})
    result = judge("show", "nobody", "--json")
    assert (result.exit_code, json.loads(result.stdout)) == (2, {"error": NO_LEDGER[7:-1], "exit": 2})
    judge("init")

    def broken(ledger):
        raise RuntimeError("boom")

    monkeypatch.setattr(actions, "status", broken)
    result = judge("status", "--json")
    assert (result.exit_code, json.loads(result.stdout)) == (1, {"error": "internal error: RuntimeError: boom", "exit": 1})
    assert "Traceback" in result.stderr


@pytest.fixture
def fake_stages(monkeypatch):
    """`judge run` through the CLI with the stage fakes of the round tests (a patch's `# verdict:` says what happens)."""
    from fakestages import rounds_with

    rounds_with(monkeypatch)


def test_run_json_gives_each_verdict_its_evaluation_and_the_report(judge_env, fake_stages):
    judge, root = judge_env
    proposal_dir(root, "alpha", patch=PATCH.replace("SCALE = 2.0  # same, faster?", "SCALE = 2.0  # verdict: speedup 1.25"))
    proposal_dir(root, "beta", patch=None)
    judge("submit", "proposals")
    result = judge("run", "--round", "1", "--json")
    assert result.exit_code == 0, result.output
    [summary] = json.loads(result.stdout)
    [verdict] = summary["verdicts"]
    # the run's events, one JSON object per line on stderr: the candidate's stage, its case and its timed benchmarks
    # as they start (from the stage fakes: one case, one pair), its kernel stages' end, its verdict
    events = [json.loads(line) for line in result.stderr.splitlines()]
    alphas = [e for e in events if e.get("proposal") == "alpha"]
    assert alphas[4].pop("seconds") >= 0
    timing = {"kind": "progress", "proposal": "alpha", "stage": "timing", "pair": 1, "max_pairs": 8, "benchmarks": 2,
              "seconds": 0.0}
    assert alphas == [
        {"kind": "stage", "proposal": "alpha", "stage": "correctness and timing"},
        {"kind": "progress", "proposal": "alpha", "stage": "correctness", "case": 1, "cases": 1, "seconds": 0.0},
        {**timing, "benchmark": 1, "label": "size=1048576"}, {**timing, "benchmark": 2, "label": "size=4194304"},
        {"kind": "evaluated", "proposal": "alpha"},
        {"kind": "verdict", "proposal": "alpha", "outcome": "faster",
         "reason": "geomean 1.250x [1.244, 1.256] over 2 benchmarks", "where": None}]
    assert events[0] == {"kind": "probe", "target": "axpy"} and "floor" in {e["kind"] for e in events}
    from judge.ledger import Ledger

    rows = Ledger(root / "ledger.db").query("select id, subject from evaluations order by id")
    # the base, the round's A/A control (the base against an identical copy), then the candidate
    assert rows == [{"id": 1, "subject": "base"}, {"id": 2, "subject": "control"}, {"id": 3, "subject": "candidate"}]
    assert (verdict["proposal_id"], verdict["outcome"], verdict["evaluation_id"]) == ("alpha", "faster", 3)
    assert (summary["base_evaluation_id"], summary["report"], summary["pitches"]) == (1, "reports/round-1.md", ["beta"])
    assert (root / "reports" / "round-1.md").read_text().startswith("# Round 1")
    again = json.loads(judge("run", "--round", "1", "--json").stdout)[0]["verdicts"][0]
    assert (again["skipped"], again["evaluation_id"]) == (True, 3)


def test_a_second_run_of_a_round_is_refused_while_the_first_lives(judge_env, fake_stages):
    import socket
    import subprocess

    from judge.errors import JudgeError
    from judge.ledger import Ledger

    judge, root = judge_env
    proposal_dir(root, "alpha")
    judge("submit", "proposals")
    ledger = Ledger(root / "ledger.db")
    round_row = ledger.create_round("axpy", 1, (FIXTURE / "submission.py").read_text(), "kernels/axpy/submission.py")
    other = subprocess.Popen(["sleep", "60"])
    try:
        ledger.db["runs"].insert({"round_id": round_row["id"], "status": "running", "pid": other.pid,
                                  "host": socket.gethostname(), "started_at": "2026-01-02T03:04:05+00:00"})
        message = (f"round 1 of axpy is already being run by judge pid {other.pid} (started 2026-01-02T03:04:05+00:00): "
                   "wait for it to finish, or stop that process")
        result = judge("run", "--round", "1")
        assert (result.exit_code, result.stderr) == (2, f"error: {message}\n")
        with pytest.raises(JudgeError, match="already being run"):
            ledger.start_run(round_row["id"], ["judge", "run"])
        assert (ledger.db["runs"].count, ledger.db["evaluations"].count) == (1, 0)
        assert not (root / "work").exists()
    finally:
        other.kill()
        other.wait()
    assert judge("run", "--round", "1", "--json").exit_code == 0
    assert [r["status"] for r in ledger.query("select status from runs order by id")] == ["interrupted", "finished"]


@pytest.mark.parametrize("verdict,line", [
    ("compile-error", "winner: none (nothing was timed in this round)"),
    ("speedup 0.8", "winner: none (no proposal was significantly faster than the base)"),
    ("speedup 1.25", "winner: alpha"),
])
def test_run_says_why_a_round_has_no_winner(judge_env, fake_stages, verdict, line):
    judge, root = judge_env
    proposal_dir(root, "alpha", patch=PATCH.replace("SCALE = 2.0  # same, faster?", f"SCALE = 2.0  # verdict: {verdict}"))
    judge("submit", "proposals")
    result = judge("run", "--round", "1")
    assert result.exit_code == 0, result.output
    assert line in result.stdout.splitlines()


def test_run_ends_with_where_the_time_went(judge_env, fake_stages):
    judge, root = judge_env
    proposal_dir(root, "alpha", patch=PATCH.replace("SCALE = 2.0  # same, faster?", "SCALE = 2.0  # verdict: speedup 1.25"))
    judge("submit", "proposals")
    [summary] = json.loads(judge("run", "--round", "1", "--json").stdout)
    stages = summary["time"]["stages_s"]
    assert set(stages) == {"patch", "screen", "compile", "correctness", "timing"}
    assert summary["time"]["wall_s"] > 0 and all(v >= 0 for v in stages.values())
    from judge.cli.rounds import time_line

    assert time_line({"wall_s": 93.14, "stages_s": {"compile": 12.04, "timing": 50.2, "measuring": 40.0, "patch": 0.0}}) \
        == "time: 93.1 s wall; compile 12.0 s, timing 50.2 s, measuring 40.0 s"
    human = judge("run", "--round", "1", "--again").stdout.splitlines()
    assert human[-2].startswith("time: ") and " s wall; " in human[-2]


def test_run_progress_counts_each_workers_candidates(monkeypatch):
    """`judge run --gpus/--ray`: a line per worker, then a bar of the round's GPU stages and a count per worker,
    advanced by each verdict on the worker that ran it."""
    import io

    from rich.console import Console

    from judge.dispatch import describe_place
    from judge.cli.progress import RunProgress

    buffer = io.StringIO()
    places = [{"host": "node-a", "gpus": "0", "device": {"name": "NVIDIA H200"}, "gate": None},
              {"host": "node-a", "gpus": "1", "device": {"name": "NVIDIA H200"}, "gate": None}]
    with RunProgress(Console(file=buffer, width=120, force_terminal=False), enabled=True) as progress:
        progress.event("workers", places=places)
        progress.event("gpu-start", total=3)
        for proposal, gpu in (("a", 0), ("b", 1), ("c", 1)):
            progress.event("verdict", proposal=proposal, outcome="faster", reason="geomean 1.1x",
                           where=describe_place(places[gpu]))
        tasks = {t.description: t.completed for t in progress.progress.tasks}
    assert tasks == {"candidates judged": 3, "  worker 1": 1, "  worker 2": 2}
    lines = buffer.getvalue().splitlines()
    assert lines[0] == f"worker 1: {describe_place(places[0])}"
    assert lines[3] == f"  b: faster (geomean 1.1x) [{describe_place(places[1])}]"


def test_base_gives_the_exact_source_whose_sha256_the_brief_names(judge_env, fake_stages):
    judge, root = judge_env
    proposal_dir(root, "alpha", patch=PATCH.replace("SCALE = 2.0  # same, faster?", "SCALE = 2.0  # verdict: speedup 1.25"))
    judge("submit", "proposals")
    judge("run", "--round", "1")
    expected = (FIXTURE / "submission.py").read_text().replace("SCALE = 2.0\n", "SCALE = 2.0  # verdict: speedup 1.25\n")
    printed = judge("base")
    assert (printed.exit_code, printed.stdout, printed.stderr) == (0, expected, "")
    brief = json.loads(judge("brief", "--json").stdout)["brief"]
    sha = hashlib.sha256(expected.encode()).hexdigest()
    assert (brief["round"], brief["base"]["sha256"], brief["base"]["origin"]) == (2, sha, "round 1 base + winner alpha r1")
    assert brief["base"]["command"] == "judge base --target axpy --round 2 --out submission.py"
    written = judge("base", "--target", "axpy", "--round", "2", "--out", "mine.py")
    assert written.stderr == f"mine.py: round 2 base of axpy (round 1 base + winner alpha r1), sha256 {sha[:12]}, 14 lines\n"
    assert (root / "mine.py").read_bytes() == expected.encode()
    assert judge("base", "--round", "1").stdout == (FIXTURE / "submission.py").read_text()
    data = json.loads(judge("base", "--json").stdout)
    assert (data["round"], data["sha256"], data["source"]) == (2, sha, expected)
    refused = judge("base", "--out", str(root))
    assert (refused.exit_code, refused.stderr) == (2, f"error: {root}: is a directory (name the file to write, e.g. "
                                                      f"{root / 'submission.py'})\n")


def test_json_is_taken_before_the_subcommand_too(judge_env):
    judge, root = judge_env
    proposal_dir(root, "alpha")
    judge("submit", "proposals")
    assert json.loads(judge("--json", "list").stdout)[0]["id"] == "alpha"
    result = judge("--json", "show", "nobody")
    assert (result.exit_code, json.loads(result.stdout)) == (
        2, {"error": "proposal 'nobody' is not in the ledger (see 'judge list')", "exit": 2})


def test_a_folder_submission_names_every_bad_proposal_and_writes_nothing(judge_env):
    judge, root = judge_env
    proposal_dir(root, "alpha")
    proposal_dir(root, "beta", patch=PATCH.replace(" CHUNKS = 1", " CHUNKS = 8"))
    (proposal_dir(root, "gamma") / "pitch.md").unlink()
    proposal_dir(root, "delta", extra="confidence = 3\n")
    result = judge("submit", "proposals")
    sha = hashlib.sha256((FIXTURE / "submission.py").read_bytes()).hexdigest()
    assert (result.exit_code, result.stdout) == (2, "")
    assert result.stderr.splitlines() == [
        f"error: {Path('proposals/delta/proposal.toml')}: field 'confidence': Input should be less than or equal to 1",
        f"error: {Path('proposals/gamma/pitch.md')}: not found (every proposal needs a pitch)",
        "error: proposals/beta/patch.diff: hunk 1 '@@ -5,3 +5,3 @@' of submission.py does not apply to the base (context "
        f"not found; first line: '# knobs'); tried against round 1's base of axpy ({FIXTURE / 'submission.py'}; "
        f"sha256 {sha[:12]}); get it with 'judge base --target axpy --round 1'",
    ]
    assert list(root.glob("ledger.db*")) == []
    as_json = json.loads(judge("submit", "proposals", "--json").stdout)
    assert (as_json["exit"], len(as_json["errors"]), as_json["error"].splitlines()) == (2, 3, as_json["errors"])


def test_list_keeps_the_target_column_in_80_columns(judge_env, monkeypatch):
    from judge.cli import main as cli

    judge, root = judge_env
    proposal_dir(root, "pipeline-stages-3-with-tma-store-epilogue")
    judge("submit", "proposals")
    monkeypatch.setattr(cli.out, "_width", 80)
    header = next(line for line in judge("list").output.splitlines() if " id " in line)
    assert [cell.strip() for cell in header.strip("┃ ").split("┃")] == ["id", "round", "target", "outcome"]


def test_a_write_that_waits_for_another_process_says_so_and_counts_the_wait(judge_env):
    import sqlite3
    import threading
    import time as clock

    from judge.cli.rounds import time_line
    from judge.ledger import Ledger

    judge, root = judge_env
    judge("init")
    other = sqlite3.connect(root / "ledger.db", check_same_thread=False)
    other.execute("BEGIN IMMEDIATE")
    release = threading.Timer(1.0, lambda: (other.execute("ROLLBACK"), other.close()))
    release.start()
    proposal_dir(root, "alpha")
    started = clock.monotonic()
    result = judge("submit", "proposals")
    assert clock.monotonic() - started >= 0.9
    assert (result.exit_code, result.stdout) == (0, "new       alpha revision 1\n")
    assert result.stderr == ("waiting for ledger.db: another judge process is writing to it (judge waits up to 60 s)\n")
    ledger = Ledger(root / "ledger.db")
    other = sqlite3.connect(root / "ledger.db", check_same_thread=False)
    other.execute("BEGIN IMMEDIATE")
    threading.Timer(0.5, lambda: (other.execute("ROLLBACK"), other.close())).start()
    with ledger.transaction():
        pass
    assert 0.4 <= ledger.waited_s < 5
    assert time_line({"wall_s": 50.0, "stages_s": {"timing": 3.0}, "ledger_wait_s": 45.04}) == \
        "time: 50.0 s wall; timing 3.0 s, waiting for the ledger's lock 45.0 s"


def test_contestant_text_reaches_the_terminal_and_json_as_plain_text(judge_env):
    """rich markup in a title is text, not style; ANSI escapes and other controls are gone, in both outputs."""
    judge, root = judge_env
    proposal_dir(root, "alpha", extra='risks = ["\\u001b]8;;https://evil\\u001b\\\\link\\u001b]8;;\\u001b\\\\"]\n')
    toml = root / "proposals" / "alpha" / "proposal.toml"
    toml.write_text(toml.read_text().replace('title = "alpha title"', 'title = "[bold red]won[/bold red] \\u001b[2J\\u0007!"'))
    (root / "proposals" / "alpha" / "pitch.md").write_text("line one\n\x1b[31mred\x1b[0m\tand \u202eevil\n")
    judge("submit", "proposals")
    assert judge("show", "alpha").stdout.splitlines()[0] == \
        "alpha r1 (round 1, axpy): [bold red]won[/bold red] ! by team-a; claims 1.1-1.2x"
    [revision] = json.loads(judge("show", "alpha", "--json").stdout)["revisions"]
    assert (revision["title"], revision["risks"], revision["pitch"]) == (
        "[bold red]won[/bold red] !", ["link"], "line one\nred\tand evil\n")


def test_a_huge_reason_leaves_judge_run_at_once(judge_env, monkeypatch):
    """rich folds a table cell in time that grows with the square of its length: a 16 MiB reason kept `judge run`
    busy for minutes after the report was written. Each cell is contained and capped first."""
    import time

    from judge import round_actions

    judge, root = judge_env
    judge("init")
    reason = "correctness: crashed: RuntimeError: \x1b[31m[bold]forged[/bold] " + "x" * (16 << 20)
    summary = {"round": 1, "target": "axpy", "base_origin": "[red]round 1 base[/red]", "pitches": [], "winner": None,
               "verdicts": [{"proposal_id": "alpha", "revision": 1, "outcome": "crashed", "skipped": False,
                             "evaluation_id": 2, "reason": reason}], "held": [], "time": {"wall_s": 1.0},
               "report": "reports/round-1.md"}
    monkeypatch.setattr(round_actions, "run", lambda *args: [summary])
    started = time.monotonic()
    result = judge("run", "--round", "1")
    assert time.monotonic() - started < 10
    out = result.stdout
    assert out.startswith("round 1 · axpy · base: [red]round 1 base[/red]\n") and "\x1b" not in out
    folded = "".join(out.replace("│", "").split())  # the reason column, folded over many lines
    assert "RuntimeError:[bold]forged[/bold]xxx" in folded and folded.count("x") > 900
    assert "xxx(16776299morecharacters)" in folded
    as_json = json.loads(judge("run", "--round", "1", "--json").stdout)[0]["verdicts"][0]["reason"]
    assert as_json == reason.replace("\x1b[31m", "")[:4069] + " (16773203 more characters)"


def test_run_progress_prints_a_verdicts_reason_contained():
    import io

    from rich.console import Console

    from judge.cli.progress import RunProgress

    buffer = io.StringIO()
    with RunProgress(Console(file=buffer, soft_wrap=True, force_terminal=False), enabled=True) as progress:
        progress.event("verdict", proposal="alpha", outcome="crashed",
                       reason="correctness: crashed: \x1b[31m[bold]<!--[/bold]\x07\nnext " + "y" * 5000)
    assert buffer.getvalue().splitlines()[0] == \
        "  alpha: crashed (correctness: crashed: [bold]<!--[/bold] next " + "y" * 932 + " (4068 more characters))"


def test_run_progress_says_once_why_no_candidate_is_timed():
    import io

    from rich.console import Console

    from judge.cli.progress import RunProgress

    buffer = io.StringIO()
    with RunProgress(Console(file=buffer, soft_wrap=True, force_terminal=False), enabled=True) as progress:
        progress.event("base-failed", proposal="(base)", reason="the round's base is compile-error (ModuleNotFoundError: No module named "
                                             "'helion'): nothing to time a candidate against")
    assert buffer.getvalue().splitlines()[0] == ("  (base): the round's base is compile-error (ModuleNotFoundError: No "
                                                 "module named 'helion'): nothing to time a candidate against")


PROGRESS = [("stage", {"proposal": "alpha", "stage": "correctness and timing"}),
            ("progress", {"proposal": "alpha", "stage": "correctness", "case": 1, "cases": 8, "seconds": 0.04}),
            ("progress", {"proposal": "alpha", "stage": "correctness", "case": 8, "cases": 8, "seconds": 1.25}),
            ("progress", {"proposal": "alpha", "stage": "timing", "pair": 1, "max_pairs": 8, "benchmark": 1,
                          "benchmarks": 2, "label": "size=4096", "seconds": 0.0}),
            ("progress", {"proposal": "alpha", "stage": "timing", "pair": 3, "max_pairs": 8, "benchmark": 2,
                          "benchmarks": 2, "label": "size=1048576", "seconds": 61.96})]


def test_in_a_log_judge_run_writes_a_line_per_case_and_per_timed_benchmark():
    """stderr that is no terminal: plain lines (a timed benchmark makes hundreds of calls: none has a line)."""
    import io

    from rich.console import Console

    from judge.cli.progress import RunProgress

    buffer = io.StringIO()
    with RunProgress(Console(file=buffer, width=120, force_terminal=False), enabled=True) as progress:
        for kind, info in PROGRESS:
            progress.event(kind, **info)
        progress.event("evaluated", proposal="alpha", seconds=63.0)
        progress.event("verdict", proposal="alpha", outcome="faster", reason="geomean 1.2x", where=None)
    assert buffer.getvalue().rstrip("\n").splitlines() == [
        "  alpha: correctness and timing ...",
        "  alpha: correctness, case 1 of 8, 0.0 s so far",
        "  alpha: correctness, case 8 of 8, 1.2 s so far",
        "  alpha: timing, pair 1, benchmark 1 of 2 (size=4096), 0.0 s so far",
        "  alpha: timing, pair 3, benchmark 2 of 2 (size=1048576), 62.0 s so far",
        "  alpha: faster (geomean 1.2x)",
    ]


def test_on_a_terminal_each_running_candidate_has_a_live_line_until_its_stages_end():
    import io

    from rich.console import Console

    from judge.cli.progress import RunProgress

    buffer = io.StringIO()
    with RunProgress(Console(file=buffer, width=120, force_terminal=True), enabled=True) as progress:
        for kind, info in PROGRESS[:3]:
            progress.event(kind, **info)
        assert [(t.description, t.completed, t.total) for t in progress.progress.tasks] == [
            ("  alpha: correctness", 7, 8)]
        for kind, info in PROGRESS[3:]:
            progress.event(kind, **info)
        progress.event("progress", **{**PROGRESS[1][1], "proposal": "(base)"})
        assert [(t.description, t.completed, t.total) for t in progress.progress.tasks] == [
            ("  alpha: timing, pair 3 (at most 8), size=1048576", 1, 2), ("  (base): correctness", 0, 8)]
        progress.event("evaluated", proposal="(base)", seconds=2.0)
        progress.event("verdict", proposal="alpha", outcome="faster", reason="geomean 1.2x", where=None)
        assert progress.progress.tasks == []
    assert "so far" not in buffer.getvalue()  # the plain lines are the log's


def test_a_cpu_target_names_the_cpu_it_runs_on_and_looks_for_no_gpu():
    import io

    from rich.console import Console

    from judge.cli.progress import RunProgress

    buffer = io.StringIO()
    device = {"kind": "cpu", "name": "AMD EPYC 7B13", "cores": 2, "threads": 4, "torch": "2.13.0+cpu"}
    with RunProgress(Console(file=buffer, width=120, force_terminal=False), enabled=True) as progress:
        progress.event("cpu", target="vecadd_cpu", device=device)
    assert buffer.getvalue().splitlines()[0] == \
        "vecadd_cpu: runs on this machine's CPU: AMD EPYC 7B13, 2 cores, 4 threads, torch 2.13.0+cpu"
    assert "GPU" not in buffer.getvalue()
