"""A contest's history through the CLI (judge/schedule.py, judge/round_actions.py): the sequences of issue 26 and
more, each ending in one history that every view tells alike (status, the leaderboard, each round's report, the
brief, `judge base`), or in a refusal of one line, exit 2, that writes nothing."""

import hashlib
import itertools
import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from judge.cli.main import main
from judge.ledger import Ledger
from judge.stages.patch import apply_patch

FIXTURE = Path(__file__).parent / "fixtures" / "axpy"
SERIAL = itertools.count(1)


@pytest.fixture
def contest(tmp_path, monkeypatch):
    """Two targets with the axpy fixture's files (axpy, bxpy), the stage fakes, and a `judge` that returns
    (exit code, stdout, stderr)."""
    from fakestages import rounds_with

    rounds_with(monkeypatch)
    monkeypatch.chdir(tmp_path)
    for name in ("axpy", "bxpy"):
        shutil.copytree(FIXTURE, tmp_path / "kernels" / name)
    runner = CliRunner()

    def judge(*args):
        result = runner.invoke(main, list(args), catch_exceptions=False)
        return result.exit_code, result.stdout, result.stderr

    return judge, tmp_path


def propose(root: Path, pid: str, round: int, target: str, verdict: str, base: str | None = None,
            knob: str = "SCALE = 2.0") -> Path:
    """A proposal directory whose patch changes one knob line of `base` (default: the target's kernel file) and
    tells the fakes what to report."""
    base = base if base is not None else (FIXTURE / "submission.py").read_text()
    lines = base.splitlines()
    i = lines.index(knob)
    d = root / "proposals" / f"{next(SERIAL)}-{pid}"
    d.mkdir(parents=True)
    (d / "proposal.toml").write_text(f'id = "{pid}"\ntitle = "{pid}"\nauthor = "team-{pid}"\nround = {round}\n'
                                     f'target = "{target}"\n[claim]\nlow = 1.1\nhigh = 1.3\n')
    (d / "pitch.md").write_text("why")
    (d / "patch.diff").write_text(f"--- a/submission.py\n+++ b/submission.py\n@@ -{i},3 +{i},4 @@\n {lines[i - 1]}\n"
                                  f"-{knob}\n+{knob}  # {pid}\n+# verdict: {verdict}\n {lines[i + 1]}\n")
    return d


def snapshot(root: Path) -> tuple:
    """Every row of every ledger table, and every file under reports/ with its bytes."""
    ledger = root / "ledger.db"
    rows = {}
    if ledger.exists():
        db = Ledger(ledger, create=False)
        for name in db.db.table_names():
            rows[name] = db.query(f"select * from [{name}] order by rowid")
        db.close()
    reports = {p.name: p.read_bytes() for p in sorted((root / "reports").glob("*"))} if (root / "reports").exists() else {}
    return rows, reports


def refused(judge, root: Path, args: tuple, message: str) -> None:
    """The step is refused with exactly this line, exit 2, and nothing in the ledger or the reports changes."""
    before = snapshot(root)
    code, stdout, stderr = judge(*args)
    assert (code, stdout, stderr) == (2, "", f"error: {message}\n")
    assert snapshot(root) == before


def ok(judge, *args) -> str:
    code, stdout, stderr = judge(*args)
    assert code == 0, stderr
    return stdout


def agree(judge, root: Path) -> dict:
    """Check that every view tells the same history of each target, and return it: per target, its rounds as
    (round, base sha256, base origin, winner) and its open round."""
    status = json.loads(ok(judge, "status", "--json"))
    board = json.loads(ok(judge, "report", "--leaderboard", "--json"))["leaderboard"]
    histories = {}
    for entry in status["targets"]:
        target, open_round = entry["target"], entry["open_round"]
        told = [(r["round"], r["base_sha256"], r["base_origin"], r["winner"]) for r in status["rounds"]
                if r["target"] == target]
        assert [r[0] for r in told] == list(range(1, open_round))  # rounds 1..N, in order, none skipped
        board_rounds = next((t["rounds"] for t in board["targets"] if t["target"] == target), [])
        assert [(r["round"], r["base_sha256_short"], r["base_origin"], r["winner"]["proposal_id"] if r["winner"] else None)
                for r in board_rounds] == [(n, sha[:12], origin, w) for n, sha, origin, w in told]
        cumulative = None
        sources = {}
        for n, sha, origin, winner in told:
            rendered = json.loads(ok(judge, "report", "--round", str(n), "--target", target, "--json"))
            t = rendered["round"]["targets"][0]
            assert (t["base"]["sha256"], t["base"]["origin"]) == (sha, origin)
            assert (t["winner"]["proposal_id"] if t["winner"] else None) == winner
            assert t["closed"] == (n + 1 < open_round)
            base = json.loads(ok(judge, "base", "--target", target, "--round", str(n), "--json"))
            assert (base["sha256"], base["origin"]) == (sha, origin)
            assert hashlib.sha256(base["source"].encode()).hexdigest() == sha
            sources[n] = base["source"]
            if n > 1:
                assert (t["changed"]["winner"]["proposal_id"] if t["changed"]["winner"] else None) == told[n - 2][3]
            markdown = Path(rendered["path"]).read_text()
            assert (f"**Winner: {winner} revision" in markdown) == (winner is not None)
            if winner:
                cumulative = (cumulative or 1.0) * t["winner"]["geomean"]
            assert board_rounds[n - 1]["cumulative"] == pytest.approx(cumulative)  # the winners so far, compounded
        # each base is the one before with its winner applied, as its origin says
        for n, sha, origin, _ in told[1:]:
            previous = told[n - 2]
            if previous[3] is None:
                assert origin == f"round {n - 1} base (round {n - 1} had no winner)" and sha == previous[1]
            else:
                assert origin.startswith(f"round {n - 1} base + winner {previous[3]} r")
                revision = int(origin.rsplit(" r", 1)[1])
                patch = Ledger(root / "ledger.db", create=False).revision_by_number(previous[3], revision)["patch"]
                assert hashlib.sha256(apply_patch(sources[n - 1], patch, "submission.py").encode()).hexdigest() == sha
        # the open round: the brief and `judge base` name the same base, built from the last round's winner
        brief = json.loads(ok(judge, "brief", "--target", target, "--json"))["brief"]
        base = json.loads(ok(judge, "base", "--target", target, "--json"))
        assert (brief["round"], base["round"]) == (open_round, open_round)
        assert brief["base"]["sha256"] == base["sha256"] == hashlib.sha256(ok(judge, "base", "--target", target).encode()).hexdigest()
        assert brief["base"]["origin"] == base["origin"]
        if told:
            last = told[-1]
            expected = (f"round {last[0]} base + winner {last[3]} r" if last[3] else
                        f"round {last[0]} base (round {last[0]} had no winner)")
            assert base["origin"].startswith(expected)
        assert sorted((t["round"], t["proposal"]) for t in brief["tried"] if t["won"]) == \
            sorted((n, w) for n, _, _, w in told if w)
        histories[target] = {"rounds": told, "open": open_round}
    return histories


def test_a_target_without_round_runs_its_own_round_not_another_targets(contest):
    """Issue 26, 1: `judge run --target bxpy` on a ledger with a round-2 proposal for axpy ran an empty round 2."""
    judge, root = contest
    ok(judge, "submit", str(propose(root, "a1", 1, "axpy", "speedup 1.0")))
    ok(judge, "run", "--target", "axpy")
    ok(judge, "submit", str(propose(root, "a2", 2, "axpy", "speedup 1.0")), str(propose(root, "b1", 1, "bxpy", "speedup 1.3")))
    out = ok(judge, "run", "--target", "bxpy")
    assert "round 1 · bxpy · base: " in out and "winner: b1" in out
    history = agree(judge, root)
    assert [(n, w) for n, _, _, w in history["bxpy"]["rounds"]] == [(1, "b1")]
    assert history["axpy"]["open"] == 2 and history["bxpy"]["open"] == 2
    ok(judge, "run")  # each target its own default round: axpy's round 2 (a2 waits), bxpy's round 1 (nothing new)
    assert ok(judge, "report").splitlines() == ["reports/round-2-axpy.md", "reports/round-1-bxpy.md"]  # each its latest
    history = agree(judge, root)
    assert [n for n, *_ in history["axpy"]["rounds"]] == [1, 2] and history["bxpy"]["open"] == 2


def test_a_proposal_for_a_round_that_started_is_late_and_a_revision_before_is_welcome(contest):
    """Issue 26, 1: a proposal for a round that had run was accepted, won a rerun, and bent the history."""
    judge, root = contest
    ok(judge, "submit", str(propose(root, "a1", 1, "axpy", "speedup 1.0")))
    revised = propose(root, "a1", 1, "axpy", "speedup 1.2")
    assert ok(judge, "submit", str(revised)) == "revised   a1 revision 2\n"  # before the round runs: welcome
    ok(judge, "run", "--target", "axpy")
    began = Ledger(root / "ledger.db", create=False).round_row("axpy", 1)["created_at"]
    late = propose(root, "late", 1, "axpy", "speedup 1.5", knob="CHUNKS = 1")
    refused(judge, root, ("submit", str(late)),
            f"{late / 'proposal.toml'}: field 'round': late: round 1 of axpy started on {began}; proposals now go to "
            "round 2 (get its base with 'judge base --target axpy')")
    again = propose(root, "a1", 1, "axpy", "speedup 1.9")
    refused(judge, root, ("submit", str(again)),
            f"{again / 'proposal.toml'}: field 'round': late: round 1 of axpy started on {began}; proposals now go to "
            "round 2 (get its base with 'judge base --target axpy')")
    assert ok(judge, "submit", str(revised)) == "unchanged a1 revision 2\n"  # the same content again writes nothing
    history = agree(judge, root)
    assert [(n, w) for n, _, _, w in history["axpy"]["rounds"]] == [(1, "a1")]


def test_a_round_past_the_next_is_refused_everywhere(contest):
    """Issue 26, 1: a typo, --round 7, created an empty round 7 whose base read 'round 6 base'."""
    judge, root = contest
    refused(judge, root, ("run", "--round", "7", "--target", "axpy"),
            "round 7 of axpy cannot run: no round has started, so the next is round 1")
    assert not (root / "ledger.db").exists()
    ok(judge, "submit", str(propose(root, "a1", 1, "axpy", "speedup 1.25")))
    ok(judge, "run", "--target", "axpy")
    refused(judge, root, ("run", "--round", "7", "--target", "axpy"),
            "round 7 of axpy cannot run: round 1 has started, so the next is round 2")
    typo = propose(root, "a7", 7, "axpy", "speedup 1.1")
    refused(judge, root, ("submit", str(typo)),
            f"{typo / 'proposal.toml'}: field 'round': round 7 of axpy is not open: round 1 has started, so proposals "
            "go to round 2 (get its base with 'judge base --target axpy')")
    refused(judge, root, ("brief", "--target", "axpy", "--round", "7"),
            "round 7 of axpy has no base yet: round 1 has started, so the next is round 2")
    refused(judge, root, ("base", "--target", "axpy", "--round", "7"),
            "round 7 of axpy has no base yet: round 1 has started, so the next is round 2")
    assert agree(judge, root)["axpy"]["open"] == 2


def test_clear_is_refused_once_the_next_round_began_and_rebases_before(contest):
    """Issue 26, 1 and 5: clearing round 1's held winner after round 2 ran said it 'becomes the base of round 2'
    while round 3's base stayed the original kernel. Before round 2 starts a clearance rebases it; after, it is
    refused and writes nothing."""
    judge, root = contest
    ok(judge, "submit", str(propose(root, "a1", 1, "axpy", "speedup 20")), str(propose(root, "b1", 1, "bxpy", "speedup 20")))
    out = ok(judge, "run", "--round", "1")
    assert "winner: none yet (a1 (evaluation #3) is held as implausible, see below)" in out.splitlines()
    assert ('held: a1 r1 (evaluation #3) is implausible and cannot win until a person who has checked it runs: '
            'judge clear 3 --note "why it is real" (before round 2 starts)') in out.splitlines()
    # axpy: cleared before round 2 starts; its winner becomes round 2's base
    out = ok(judge, "clear", "3", "--note", "re-timed by hand")
    assert out.splitlines()[:3] == [
        "evaluation 3 cleared: it stands as faster (geomean 20.000x [19.900, 20.100] over 2 benchmarks)",
        "round 1 winner: a1",
        f"round 2 of axpy will start from: round 1 base + winner a1 r1 (sha256 "
        f"{json.loads(ok(judge, 'base', '--target', 'axpy', '--json'))['sha256'][:12]})",
    ]
    shown = ok(judge, "show", "a1").splitlines()
    assert shown[1].startswith("  evaluation #3: faster (geomean 20.000x [19.900, 20.100] over 2 benchmarks); cleared by ")
    assert shown[1].endswith(", held before as implausible")
    # bxpy: round 2 starts with b1 still held; then its clearance is refused
    ok(judge, "run", "--target", "bxpy", "--round", "2")
    began = Ledger(root / "ledger.db", create=False).round_row("bxpy", 2)["created_at"]
    refused(judge, root, ("clear", "6", "--note", "it was real"),
            f"evaluation 6 cannot be cleared: it is in round 1 of bxpy, which closed when round 2 began on {began}, and "
            "a clearance now would change a base already in use; nothing was written (a new revision for round 3 can "
            "win there)")
    refused(judge, root, ("run", "--target", "bxpy", "--round", "1", "--again"),
            f"round 1 of bxpy is closed: round 2 began on {began} from its result, so its verdicts and winner stay as "
            "they are")
    history = agree(judge, root)
    assert [(n, w) for n, _, _, w in history["axpy"]["rounds"]] == [(1, "a1")]
    assert [(n, w) for n, _, _, w in history["bxpy"]["rounds"]] == [(1, None), (2, None)]
    report = (root / "reports" / "round-1-bxpy.md").read_text().splitlines()
    assert ("- Held: nobody cleared it before round 2 began, so it can no longer win (`judge clear` refuses a closed "
            "round); a new revision for a later round is judged afresh.") in report
    status = ok(judge, "status").splitlines()
    assert ("    held: b1 r1 (evaluation #6), implausible, never cleared: round 2 has begun, so it can no longer win"
            in status)


def test_a_round_starts_only_after_the_one_before_finished(contest):
    """A run stopped by Ctrl-C keeps its verdicts and says how to resume; the next round cannot start meanwhile,
    and the default round is the one to resume."""
    judge, root = contest
    ok(judge, "submit", str(propose(root, "a1", 1, "axpy", "speedup 1.3")),
       str(propose(root, "b1", 1, "axpy", "interrupt", knob="CHUNKS = 1")))
    code, stdout, stderr = judge("run", "--target", "axpy")
    assert (code, stdout) == (130, "")
    assert stderr.splitlines()[-1] == (
        "interrupted: round 1 of axpy kept 1 verdict of this run (#3) in ledger.db; 1 proposal has no verdict yet "
        "(b1); 'judge run --target axpy --round 1' resumes with the proposals that have no verdict yet")
    base = ok(judge, "base", "--target", "axpy")  # round 2's, as round 1 stands so far
    ok(judge, "submit", str(propose(root, "a2", 2, "axpy", "speedup 1.1", base=base, knob="CHUNKS = 1")))
    refused(judge, root, ("run", "--target", "axpy", "--round", "2"),
            "round 2 of axpy cannot start: round 1 has not finished a run; finish it first with "
            "'judge run --target axpy --round 1'")
    fixed = propose(root, "b1", 1, "axpy", "speedup 1.1", knob="CHUNKS = 1")
    refused(judge, root, ("submit", str(fixed)), f"{fixed / 'proposal.toml'}: field 'round': late: round 1 of axpy "
            f"started on {Ledger(root / 'ledger.db', create=False).round_row('axpy', 1)['created_at']}; proposals now "
            "go to round 2 (get its base with 'judge base --target axpy')")
    [resumed] = json.loads(ok(judge, "run", "--json"))  # the default round is the one to resume
    assert (resumed["round"], [(v["proposal_id"], v["outcome"], v["skipped"]) for v in resumed["verdicts"]]) == \
        (1, [("a1", "faster", True), ("b1", "unchanged", False)])
    ok(judge, "run", "--target", "axpy", "--round", "2")
    history = agree(judge, root)
    # (the fakes read the first marker: a2's patched base still carries a1's "speedup 1.3")
    assert [(n, w) for n, _, _, w in history["axpy"]["rounds"]] == [(1, "a1"), (2, "a2")]
