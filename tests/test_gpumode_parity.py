"""benchmarks/gpumode_parity.py's parts that need no GPU: the submissions and proposals it builds for a problem, the
wrong variant, the cases it gives eval.py, how it reads eval.py's output, and one eval.py call (a stand-in eval.py of
our own, in plain Python) with its verdict and its seconds."""

import importlib.util
import os
import sys
import textwrap
from pathlib import Path

import pytest

from judge.stages.patch import apply_patch

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("gpumode_parity", ROOT / "benchmarks" / "gpumode_parity.py")
parity = importlib.util.module_from_spec(spec)
sys.modules["gpumode_parity"] = parity
spec.loader.exec_module(parity)

KERNEL = "import torch\n\n\ndef custom_kernel(data):\n    a, b = data\n    return a + b\n"
TASK = textwrap.dedent("""\
    files:
      - {"name": "submission.py", "source": "@SUBMISSION@"}
      - {"name": "utils.py", "source": "../utils.py"}
      - {"name": "eval.py", "source": "../eval.py"}
    lang: "py"
    config:
      main: "eval.py"
    tests:
      - {"size": 8, "seed": 1}
      - {"size": 16, "seed": 2, "case": "ones"}
    benchmarks:
      - {"size": 1024, "seed": 3}
      - {"size": 4096, "seed": 4}
    """)


@pytest.fixture
def problem(tmp_path):
    """A family folder with its eval.py and utils.py, and one problem in it with two own solutions of each kind."""
    family = tmp_path / "family"
    where = family / "add_py"
    (where / "solutions" / "correct").mkdir(parents=True)
    (where / "solutions" / "wrong").mkdir(parents=True)
    (where / "submissions").mkdir()
    (where / "task.yml").write_text(TASK)
    (where / "submission.py").write_text(KERNEL)
    (where / "solutions" / "correct" / "ref.py").write_text(KERNEL.replace("a + b", "torch.add(a, b)"))
    (where / "solutions" / "wrong" / "empty.py").write_text(KERNEL.replace("a + b", "torch.empty_like(a)"))
    (where / "submissions" / "Fast Add.py").write_text(KERNEL.replace("a + b", "b + a") + "\r\n")
    (family / "utils.py").write_text("# shared helpers\n")
    return where


def test_a_problem_gets_an_identical_copy_its_own_solutions_and_a_wrong_variant(problem):
    subs, notes = parity.build_submissions(problem)
    assert [(s.id, s.kind, s.origin) for s in subs] == [
        ("identical", "identical", "submission.py"),
        ("example-correct-ref", "example", "solutions/correct/ref.py"),
        ("wrong-wrong-empty", "wrong", "solutions/wrong/empty.py"),
        ("example-fast-add", "example", "submissions/Fast Add.py"),
        ("wrong-variant", "variant", "submission.py + spoiled result"),
    ]
    assert notes == []
    assert subs[0].source == KERNEL and "\r" not in subs[3].source


def test_each_proposal_applied_by_judge_gives_its_submission(problem, tmp_path):
    """What judge runs is what eval.py runs: each patch applied to the kernel file gives the submission's text, and
    the identical copy's is the kernel plus one comment (judge refuses an empty patch)."""
    subs, _ = parity.build_submissions(problem)
    for sub in subs:
        folder = parity.write_proposal(tmp_path / "proposals", "add_py", sub, KERNEL)
        patched = apply_patch(KERNEL, (folder / "patch.diff").read_text(), "submission.py")
        if sub.kind == "identical":
            assert patched == KERNEL + parity.IDENTICAL_COMMENT + "\n"
        else:
            assert patched == sub.source, sub.id
    toml = (tmp_path / "proposals" / "example-fast-add" / "proposal.toml").read_text()
    assert toml == ('id = "example-fast-add"\ntitle = "example: submissions/Fast Add.py"\nauthor = "parity"\n'
                    'target = "add_py"\nround = 1\ncategory = "other"\n')


def test_the_wrong_variant_spoils_one_element_of_a_copy_of_the_first_tensor():
    torch = pytest.importorskip("torch")
    source = parity.wrong_variant("import collections\nPair = collections.namedtuple('Pair', 'values counts')\n"
                                  "def custom_kernel(data):\n    return Pair(data[0], data[1])\n")
    namespace = {}
    exec(source, namespace)
    values, counts = torch.full((2, 3), 2.0), torch.arange(4)
    out = namespace["custom_kernel"]((values, counts))
    assert type(out).__name__ == "Pair"
    assert out.values[0, 0].item() == 2.0 + 1000.0 + 20.0
    assert torch.equal(out.values.flatten()[1:], torch.full((5,), 2.0))
    assert torch.equal(out.counts, counts)  # only the first tensor is spoiled
    assert values[0, 0].item() == 2.0  # the kernel's own output (here an input) is left as it was
    assert parity.wrong_variant("def cross_entropy_forward(x):\n    return x\n") is None


def test_the_wrong_variant_of_a_kernel_whose_output_carries_a_graph_keeps_nothing_alive():
    """Spoiled in place through a view of a copy that autograd tracks, the output stayed alive after its last
    reference went (a cycle through the graph's saved view that no collection frees): trimul's wrong variant grew
    its runner by every case's output and activations."""
    torch = pytest.importorskip("torch")
    import gc
    import weakref

    source = parity.wrong_variant("import torch\n_w = torch.ones(1, requires_grad=True)\n"
                                  "def custom_kernel(data):\n    return data * _w\n")
    namespace = {}
    exec(source, namespace)
    out = namespace["custom_kernel"](torch.full((4,), 2.0))
    assert out[0].item() == 2.0 + 1000.0 + 20.0 and out[1].item() == 2.0
    alive = weakref.ref(out)
    del out
    gc.collect()
    assert alive() is None
    assert parity.defines_custom_kernel("custom_kernel = torch.compile(_kernel)\n")


def test_eval_py_gets_cases_as_gpu_modes_runner_writes_them():
    task = {"tests": [{"size": 8, "seed": 1}, {"size": 16, "case": "ones"}],
            "benchmarks": [{"size": 1024, "seed": 3}, {"size": 4096, "seed": 4}]}
    assert parity.cases_for(task, "test") == "size: 8; seed: 1\nsize: 16; case: ones\n"
    assert parity.cases_for(task, "leaderboard") == "size: 4096; seed: 4\n"  # ranking_by "last", GPU MODE's default
    assert parity.cases_for(task, "benchmark", all_benchmarks=True) == "size: 1024; seed: 3\nsize: 4096; seed: 4\n"
    task["ranking_by"] = "geom"
    assert parity.cases_for(task, "leaderboard") == "size: 1024; seed: 3\nsize: 4096; seed: 4\n"


# eval.py's output in our own words: two benchmarks timed in leaderboard mode (means in nanoseconds), then a run whose
# second benchmark failed its check.
LEADERBOARD_PASSED = """\
benchmark-count: 2
benchmark.0.spec: size: 1024; seed: 3
benchmark.0.runs: 100
benchmark.0.mean: 4000.0
benchmark.0.std: 10.5
benchmark.0.err: 1.05
benchmark.0.best: 3900.0
benchmark.0.worst: 4400.0
benchmark.1.spec: size: 4096; seed: 4
benchmark.1.runs: 100
benchmark.1.mean: 9000.0
benchmark.1.std: 20.0
benchmark.1.err: 2.0
benchmark.1.best: 8800.0
benchmark.1.worst: 9900.0
check: pass
"""
LEADERBOARD_FAILED = """\
benchmark-count: 2
benchmark.0.spec: size: 1024; seed: 3
benchmark.0.runs: 3
benchmark.0.mean: 4000.0
benchmark.1.spec: size: 4096; seed: 4
benchmark.1.status: fail
benchmark.1.error: mismatch found! 1 element differs: at (0,) got 1020.0, expected 2.0
check: fail
"""


def test_eval_py_output_read_into_a_verdict():
    result = parity.parse_popcorn(LEADERBOARD_PASSED)
    assert result["benchmark.0.spec"] == "size: 1024; seed: 3"
    verdict = parity.popcorn_verdict(result, 0, "leaderboard")
    assert verdict == {"verdict": "pass", "cases": 2, "passed": 2, "message": "", "means_us": [4.0, 9.0],
                       "geomean_us": pytest.approx(6.0)}
    failed = parity.popcorn_verdict(parity.parse_popcorn(LEADERBOARD_FAILED), 112, "leaderboard")
    assert (failed["verdict"], failed["passed"], failed["geomean_us"]) == ("fail", 1, None)
    assert failed["message"] == "benchmark 1: mismatch found! 1 element differs: at (0,) got 1020.0, expected 2.0"
    # the first pmpp family's eval.py: a leaderboard run's failed check said as a test's, with no check line
    pmpp = parity.parse_popcorn("test-count: 1\ntest.0.status: fail\ntest.0.error: mismatch found! custom "
                                "implementation doesn't match reference\n")
    assert parity.popcorn_verdict(pmpp, 0, "leaderboard") == {
        "verdict": "fail", "cases": 0, "passed": 0, "message": "test 0: mismatch found! custom implementation doesn't "
        "match reference", "means_us": [], "geomean_us": None}
    tests = parity.parse_popcorn("test-count: 2\ntest.0.spec: size: 8\ntest.0.status: pass\ntest.1.spec: size: 16\n")
    assert parity.popcorn_verdict(tests, 1, "test")["verdict"] == "crashed"  # died before its check line
    assert parity.popcorn_verdict({}, None, "leaderboard")["verdict"] == "timed-out"


def test_the_slowed_variant_delays_each_call_by_a_share_of_its_own_time(problem):
    """--slow-variant: a copy that must be found slower, its delay at least the fraction asked of its call's time."""
    import time

    torch = pytest.importorskip("torch")
    subs, _ = parity.build_submissions(problem, slowdown=0.5)
    assert [(s.id, s.kind, s.origin) for s in subs][-1] == ("slowed-variant", "slowed", "submission.py + 50% delay")
    assert "slowed-variant" not in [s.id for s in parity.build_submissions(problem)[0]]
    namespace = {}
    exec(parity.slowed_variant("import time\ndef custom_kernel(data):\n    time.sleep(0.04)\n    return data[0]\n",
                               0.5), namespace)
    a = torch.ones(3)
    began = time.perf_counter()
    out = namespace["custom_kernel"]((a, a))
    assert time.perf_counter() - began >= 0.04 * 1.5 and out is a
    assert parity.slowed_variant("def cross_entropy_forward(x):\n    return x\n", 0.1) is None
    assert parity.honest("slowed", "slower", True) == "ok"
    assert parity.honest("slowed", "unchanged", True) == "NO: a slowed copy is unchanged"


def test_honesty_of_each_kind_of_submission():
    assert parity.honest("identical", "unchanged", True) == "ok"
    assert parity.honest("identical", "inconclusive", True) == "ok"
    assert parity.honest("identical", "faster", True) == "NO: an identical copy is faster"
    assert parity.honest("variant", "incorrect", False) == "ok"
    assert parity.honest("variant", "unchanged", True) == "NO: a wrong kernel is unchanged (eval.py passes it too)"
    assert parity.honest("wrong", "crashed", False) == "NO: a wrong kernel is crashed"
    assert parity.honest("example", "slower", True) == "ok"
    assert parity.honest("example", "incorrect", False) == "ok"
    assert parity.honest("example", "incorrect", True) == "NO: judge incorrect, eval.py pass"
    assert parity.honest("example", "compile-error", False) == "ok"  # its import fails for both
    assert parity.honest("example", "not-run", True) == "? judge not-run, eval.py pass"


FAKE_EVAL = """\
import os, sys
mode, cases = sys.argv[1], open(sys.argv[2]).read().splitlines()
assert open("utils.py").read() == "# shared helpers\\n" and "custom_kernel" in open("submission.py").read()
out = os.fdopen(int(os.environ["POPCORN_FD"]), "w")
out.write(f"benchmark-count: {len(cases)}\\n")
for i, case in enumerate(cases):
    out.write(f"benchmark.{i}.spec: {case}\\nbenchmark.{i}.mean: {2000.0 * (i + 1)}\\n")
out.write("check: pass\\n")
"""


def test_one_eval_py_call_as_gpu_mode_makes_it(problem, tmp_path):
    """The task's files copied beside the submission (utils.py from the family's folder), eval.py called with the
    mode and the cases file, its verdict read from what it wrote to POPCORN_FD, its wall seconds taken."""
    (problem.parent / "eval.py").write_text(FAKE_EVAL)
    task = parity.read_task(problem)
    task["ranking_by"] = "geom"
    sub = parity.build_submissions(problem)[0][0]
    ran = parity.run_eval(problem, task, sub, "leaderboard", tmp_path / "scratch", 60, parity.GpuMemory(probe=False))
    assert (ran["verdict"], ran["given"], ran["cases"], ran["means_us"], ran["rc"]) == ("pass", 2, 2, [2.0, 4.0], 0)
    assert 0 < ran["seconds"] < 60
    assert (tmp_path / "scratch" / "eval" / "identical" / "leaderboard" / "leaderboard.txt").read_text() == \
        "size: 1024; seed: 3\nsize: 4096; seed: 4\n"


class RisingMemory:
    """A stand-in for the GPU's memory: used memory climbs by 100 MiB a reading up to 900, of 1,000 in all."""

    how = "fake"

    def __init__(self):
        self.used = 0.0

    def read(self):
        self.used = min(self.used + 100.0, 900.0)
        return self.used, 1000.0


def test_the_peak_of_the_gpus_used_memory_while_a_block_runs():
    import time

    with parity.PeakSampler(RisingMemory(), every_s=0.005) as sampler:
        time.sleep(0.1)
    assert sampler.summary() == {"peak_mib": 900.0, "before_mib": 100.0, "total_mib": 1000.0}
    with parity.PeakSampler(parity.GpuMemory(probe=False)) as nothing:
        pass
    assert nothing.summary() == {"peak_mib": None, "before_mib": None, "total_mib": None}


def test_a_smaller_card_is_judged_beside_a_ballast_and_read_without_it(monkeypatch):
    """--as-card-mib: an 80 GB H100's plan on an H200. judge's plan takes 80% of the card less what others hold, so
    a ballast of 80% of the memory past the smaller card leaves it that card's plan; the peaks are then read less
    the ballast's process, against the smaller card."""
    assert parity.ballast_bytes(143_771.0, 81_559.0) == int(0.8 * 62_212 * 2**20)
    used = iter([1_000.0, 50_796.0, 118_612.0])  # before the ballast, with it, at judge's peak
    memory = parity.GpuMemory(probe=False)
    memory.how, memory.name = "nvml", "NVIDIA H200"
    monkeypatch.setattr(memory, "_read", lambda: (next(used), 143_771.0))
    monkeypatch.setattr(parity, "BALLAST", "import sys\nprint('ready', flush=True)\nsys.stdin.read()\n")
    with parity.emulated_card(memory, 81_559.0):
        assert memory.name == "NVIDIA H200 as a card of 81,559 MiB (a ballast of 49,796 MiB beside it)"
        assert memory.read() == (68_816.0, 81_559.0)
    with pytest.raises(SystemExit, match=r"^--as-card-mib 200000: the GPU has 143,771 MiB, no more than that$"):
        monkeypatch.setattr(memory, "_read", lambda: (1_000.0, 143_771.0))
        memory.card_mib = None
        with parity.emulated_card(memory, 200_000.0):
            pass


def test_a_problems_table_states_the_ratio_the_peaks_and_each_rows_honesty():
    subs = [parity.Submission("identical", "identical", "submission.py", ""),
            parity.Submission("wrong-variant", "variant", "submission.py + spoiled result", "")]
    lb = {"verdict": "pass", "given": 1, "rc": 0, "seconds": 10.0, "geomean_us": 12.5, "memory": {"peak_mib": 2000.0}}
    killed = {"verdict": "timed-out", "given": 1, "rc": None, "seconds": 180.0}
    result = {"problem": "family/add_py", "ranking_by": "last", "benchmarks": 3, "notes": [],
              "submissions": [{"id": s.id, "kind": s.kind, "origin": s.origin} for s in subs],
              "judge": {"submitted": 2, "rc": 0, "seconds": 50.0, "memory": {"peak_mib": 9000.0, "total_mib": 10000.0},
                        "verdicts": {"identical": {"outcome": "unchanged"}, "wrong-variant": {"outcome": "incorrect"}},
                        "ledger_seconds": {"identical": 12.0, "wrong-variant": 3.0},
                        "geomeans": {"identical": [0.99812, 0.99031, 1.0064]}},
              "eval": {"identical": {"leaderboard": lb, "benchmark": killed},
                       "wrong-variant": {"leaderboard": lb | {"verdict": "fail", "message": "benchmark 0: mismatch",
                                                              "seconds": 30.0}}}}
    result["summary"] = parity.summarize(result, subs)
    assert (result["summary"]["ratio"], result["summary"]["ratio_within_bar"]) == (1.25, True)
    assert result["summary"]["memory_within_bar"] is False  # judge's 9,000 MiB of 10,000 is past 80%
    assert "eval_benchmark_s_per_submission" not in result["summary"]  # a call killed at its limit counts in no mean
    lines = parity.problem_markdown(result, 10000.0).splitlines()
    assert lines[2] == ("judge: 2 candidates, round 50.0 s wall, 25.0 s per candidate (its setup, the base's check and "
                        "the A/A control included); peak GPU memory 9,000 MiB (90%)")
    assert lines[4] == ("judge / eval.py leaderboard: 1.25x (bar: at most 1.5x); peaks at most 80% of the GPU's "
                        "memory: NO; eval.py's benchmarks file: 1 of 3 benchmarks (ranking_by: last)")
    assert lines[5] == ("judge's own seconds per candidate (its stages in the ledger; no start, base check or "
                        "control): 7.5 s, 0.38x eval.py leaderboard")
    assert lines[-2:] == [
        "| identical | identical | unchanged 0.998x [0.990, 1.006] | 12.0 | pass, 12.5 us | 10.0 | 180.0 | 2,000 | ok |",
        "| wrong-variant | variant | incorrect | 3.0 | fail: benchmark 0: mismatch | 30.0 | - | 2,000 | ok |"]


def test_the_round_s_wall_clock_is_split_from_its_event_log_and_stated_under_the_judge_line(tmp_path):
    """A local round's event log (each line its second, then the event): the start up to the base's check, the
    check, the candidates' checks up to the first timing, the timing to the last verdict. A control run beside the
    base's check (two workers) does not start the timing; a line that is not an event is passed over."""
    log = tmp_path / "run.log"
    log.write_text("\n".join([
        '    0.80 {"kind": "stage", "proposal": "(base)", "stage": "compile"}',
        '    3.40 {"kind": "stage", "proposal": "(base)", "stage": "correctness"}',
        '    3.41 {"kind": "stage", "proposal": "(control)", "stage": "the base against an identical copy of itself, '
        'beside the base\'s check"}',
        '   15.30 {"kind": "evaluated", "proposal": "(base)", "seconds": 11.9}',
        '   35.00 {"kind": "verdict", "proposal": "wrong", "outcome": "incorrect"}',
        '   35.10 {"kind": "stage", "proposal": "identical", "stage": "timing, in one process group of 3 kernels"}',
        "judge oracle: a line of the oracle's log appended after the events",
        '  116.20 {"kind": "verdict", "proposal": "identical", "outcome": "unchanged"}',
        '  117.30 {"kind": "stage", "proposal": "(base)", "stage": "profile"}']) + "\n")
    parts = parity.round_parts(log)
    assert parts == {"start": 3.4, "base check": 11.9, "candidates' checks": 19.8, "timing": 81.1}
    assert parity.round_parts(tmp_path / "missing.log") is None
    line = [l for l in parity.problem_markdown(
        {"problem": "linalg/cholesky_py", "ranking_by": "geom", "benchmarks": 15, "notes": [], "submissions": [],
         "judge": {"submitted": 4, "parts_s": parts}, "summary": {}}, 143771.0).splitlines() if "event log" in l]
    assert line == ["judge's round to its last verdict, from its event log: start 3.4 s, base check 11.9 s, "
                    "candidates' checks 19.8 s, timing 81.1 s"]


def _judge_line(judge: dict, summary: dict) -> str:
    """The judge line of cholesky_py's table (15 benchmarks) on an H200."""
    return parity.problem_markdown({"problem": "linalg/cholesky_py", "ranking_by": "geom", "benchmarks": 15,
                                    "notes": [], "submissions": [], "judge": judge, "summary": summary},
                                   143771.0).splitlines()[2]


def test_a_judge_run_stopped_in_its_bases_profile_counts_its_seconds_to_its_last_verdict(tmp_path):
    """cholesky_py on an H200 (2026-11-28): every verdict in by about 340 s, then the round's profile of its base ran
    into the 450 s limit and the table had no seconds per candidate. The profile has no counterpart in eval.py."""
    script = ("import sys, time\n"
              "print('{\"kind\": \"verdict\", \"proposal\": \"a\"}', file=sys.stderr, flush=True)\n"
              "time.sleep(0.5)\n"
              "print('{\"kind\": \"verdict\", \"proposal\": \"b\"}', file=sys.stderr, flush=True)\n"
              "print('{\"kind\": \"stage\", \"stage\": \"profile\"}', file=sys.stderr, flush=True)\n"
              "time.sleep(60)\n")
    ran = parity.run_process([sys.executable, "-c", script], cwd=tmp_path, env=dict(os.environ), timeout_s=2.0,
                             memory=parity.GpuMemory(probe=False), log_path=tmp_path / "run.log",
                             marks=(parity.VERDICT_EVENT,))
    assert ran.rc is None and 0.5 <= ran.marks[parity.VERDICT_EVENT] < 2.0
    lines = (tmp_path / "run.log").read_text().splitlines()
    assert [line.split(None, 1)[1][:30] for line in lines[:2]] == ['{"kind": "verdict", "proposal"'] * 2
    assert 0.0 <= float(lines[0].split()[0]) <= float(lines[1].split()[0]) < 2.0  # each line with its second
    subs = [parity.Submission(name, "identical", "submission.py", "") for name in ("a", "b")]
    judge = {"submitted": 2, "accepted": ["a", "b"], "rc": None, "seconds": 450.3, "last_verdict_s": 340.0,
             "verdicts": {"a": {"outcome": "unchanged"}, "b": {"outcome": "incorrect"}}}
    summary = parity.summarize({"judge": judge, "eval": {}}, subs)
    assert summary["judge_s_per_candidate"] == 170.0 and summary["judge_stopped_after_verdicts"]
    assert _judge_line(judge, summary) == ("judge: 2 candidates, round 450.3 s wall (stopped at its limit; its last verdict at 340.0 s, "
                        "the base's profile after it), 170.0 s per candidate (its setup, the base's check and the A/A "
                        "control included); peak GPU memory -")
    cut = judge | {"verdicts": {"a": {"outcome": "unchanged"}}}  # stopped before its last candidate's verdict
    assert "judge_s_per_candidate" not in parity.summarize({"judge": cut, "eval": {}}, subs)
    # a round that ended after its profile counts to its last verdict as well, the round's wall clock beside it
    done = judge | {"rc": 0, "seconds": 451.9, "last_verdict_s": 253.6}
    summary = parity.summarize({"judge": done, "eval": {}}, subs)
    assert summary["judge_s_per_candidate"] == 126.8 and "judge_stopped_after_verdicts" not in summary
    assert _judge_line(done, summary) == ("judge: 2 candidates, round 451.9 s wall (its last verdict at 253.6 s, the base's profile "
                        "after it), 126.8 s per candidate (its setup, the base's check and the A/A control included); "
                        "peak GPU memory -")


def test_the_ledgers_geomean_and_interval_are_read_where_an_evaluation_was_timed(tmp_path):
    import sqlite3

    from judge.ledger import Ledger

    Ledger(tmp_path / "ledger.db").close()  # judge's own schema, its migrations applied
    with sqlite3.connect(tmp_path / "ledger.db") as db:
        db.execute("insert into evaluations (subject, outcome, reason) values ('base', 'unchanged', 'checked')")
        db.execute("insert into evaluations (subject, outcome, reason, geomean_speedup, geomean_ci_low, "
                   "geomean_ci_high) values ('control', 'inconclusive', 'geomean ...', 0.99484, 0.95962, 1.03134)")
    read = parity.ledger_evaluations(tmp_path / "ledger.db")
    assert (read["base"]["geomean"], read["control"]["geomean"]) == (None, [0.99484, 0.95962, 1.03134])
    assert parity.judge_words(read["control"], read["control"]["geomean"]) == "inconclusive 0.995x [0.960, 1.031]"
    assert parity.judge_words({"outcome": "incorrect"}, [0.5, 0.4, 0.6]) == "incorrect"  # only a timed outcome


def test_with_no_judge_eval_py_alone_runs_on_every_submission(problem, tmp_path):
    """`--no-judge`: eval.py's side alone (judge's ran on another GPU of the host at the same time, 2026-11-28)."""
    (problem.parent / "eval.py").write_text(FAKE_EVAL)
    args = parity.parse_args(["--no-judge", "--eval-modes", "leaderboard", "--limit-s", "60", "--root", str(tmp_path)])
    result = parity.parity(problem, "family/add_py", args, parity.GpuMemory(probe=False), tmp_path / "scratch",
                           deadline=float("inf"))
    assert result["judge"] == {"error": "not run (--no-judge)"}
    assert result["eval"]["identical"]["leaderboard"]["verdict"] == "pass"
    scratch = tmp_path / "scratch" / parity.slug("family/add_py")
    assert (scratch / "eval").is_dir() and not (scratch / "ledger.db").exists()  # eval.py's folders, no contest


def test_where_judge_keeps_its_own_bytecode_eval_py_runs_again_with_it(problem, tmp_path, monkeypatch):
    """A machine that keeps no bytecode (the H200s lent on 2026-11-30: PYTHONDONTWRITEBYTECODE=1) makes judge keep
    its own (judge.sandbox.bytecode); eval.py's leaderboard runs again with the same cache, and judge's ratio is
    shown against both runs."""
    (problem.parent / "eval.py").write_text(FAKE_EVAL)
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    args = parity.parse_args(["--no-judge", "--eval-modes", "leaderboard", "--limit-s", "60", "--root", str(tmp_path)])
    args.bytecode_dir = tmp_path / "cache"
    result = parity.parity(problem, "family/add_py", args, parity.GpuMemory(probe=False), tmp_path / "scratch",
                           deadline=float("inf"))
    cached = result["eval"]["identical"]["leaderboard-cached"]
    assert (cached["verdict"], cached["mode"], cached["rc"]) == ("pass", "leaderboard", 0)
    assert cached["command"].startswith(f"PYTHONPYCACHEPREFIX={tmp_path / 'cache'} cd ")
    evals = {"identical": {"leaderboard": {"seconds": 5.0, "rc": 0, "verdict": "pass"},
                           "leaderboard-cached": {"seconds": 4.0, "rc": 0, "verdict": "pass"}}}
    judge = {"submitted": 2, "accepted": ["identical"], "rc": 0, "seconds": 20.0, "last_verdict_s": 18.0,
             "verdicts": {"identical": {"outcome": "unchanged"}}}
    subs = [parity.Submission("identical", "identical", "submission.py", "")]
    result = {"problem": "family/add_py", "ranking_by": "last", "benchmarks": 2, "notes": [], "submissions": [],
              "judge": judge, "eval": evals}
    result["summary"] = parity.summarize(result, subs)
    assert (result["summary"]["ratio"], result["summary"]["ratio_cached"]) == (1.8, 2.25)
    assert ("eval.py leaderboard with judge's bytecode cache (this machine keeps none of its own): 4.0 s per "
            "submission; judge / that: 2.25x") in parity.problem_markdown(result, None).splitlines()


def test_the_round_s_logs_are_kept_beside_the_report(tmp_path):
    """A device run returns what is under --out: the round's events and each oracle's log (its lines put a memory
    peak on the step that made it) are copied there, the last LOG_TAIL_BYTES of each."""
    scratch = tmp_path / "scratch"
    oracle_log = scratch / "work" / "trimul" / "round-1" / ".judge-round" / "oracle.log"
    oracle_log.parent.mkdir(parents=True)
    oracle_log.write_text("judge oracle: the check of c1-21 peaked at 44514 MiB\n")
    (scratch / "run.log").write_bytes(b"x" * (parity.LOG_TAIL_BYTES + 3) + b"\n")
    kept = parity.keep_logs(scratch, tmp_path / "out" / "bioml-trimul")
    assert [Path(k).name for k in kept] == ["run.log", "oracle-trimul-round-1-judge-round.log"]
    assert Path(kept[1]).read_text() == "judge oracle: the check of c1-21 peaked at 44514 MiB\n"
    assert Path(kept[0]).stat().st_size == parity.LOG_TAIL_BYTES
    assert parity.keep_logs(tmp_path / "nothing", tmp_path / "out2") == []


def test_a_problem_whose_base_fails_here_says_so_and_grades_no_row():
    """helion's problems on an H200 (2026-11-29): helion 1.5.1 does not import under torch 2.11, so the base and
    every copy of it are compile-error. That says nothing of judge's honesty, and the table no longer says "NO"."""
    subs = [parity.Submission("identical", "identical", "submission.py", ""),
            parity.Submission("wrong-variant", "variant", "submission.py + spoiled result", "")]
    why = "ImportError: cannot import name 'IntelGPUError' (submission.py:4: `import helion`)"
    judge = {"submitted": 2, "accepted": ["identical", "wrong-variant"], "rc": 0, "seconds": 39.3,
             "base": {"outcome": "compile-error", "reason": why},
             "verdicts": {"identical": {"outcome": "compile-error"}, "wrong-variant": {"outcome": "compile-error"}}}
    result = {"problem": "helion/causal_conv1d_py", "ranking_by": "geom", "benchmarks": 3, "notes": [],
              "submissions": [], "judge": judge}
    result["summary"] = parity.summarize(result, subs)
    assert [row["honest"] for row in result["summary"]["rows"]] == ["- (the base is compile-error)"] * 2
    assert parity.problem_markdown(result, 143771.0).splitlines()[2] == (
        f"judge: the base is compile-error ({why}): no verdict below tells whether judge is right (the problem cannot "
        "run here)")


def test_a_base_that_fails_its_own_check_on_a_drawn_seed_is_told_from_one_that_cannot_run():
    """pmpp/vectorsum_py on an H200 (2026-11-29): its Triton base adds 51,200 float32 block sums atomically, and on
    the 52,428,800-element benchmark misses the problem's rtol of 1e-5 on some inputs. eval.py checks task.yml's
    seed, on which it passes; judge's own seeds found one on which it fails."""
    subs = [parity.Submission("identical", "identical", "submission.py", "")]
    reason = "1 of 16 checks failed; first: benchmark 5 (size=52428800) (seed 1577329051): mismatch found!"
    judge = {"submitted": 1, "accepted": ["identical"], "rc": 0, "seconds": 48.9,
             "base": {"outcome": "incorrect", "reason": reason}, "verdicts": {"identical": {"outcome": "not-run"}}}
    result = {"problem": "pmpp/vectorsum_py", "ranking_by": "last", "benchmarks": 6, "notes": [], "submissions": [],
              "judge": judge, "eval": {"identical": {"leaderboard": {"verdict": "pass"}}}}
    result["summary"] = parity.summarize(result, subs)
    assert parity.problem_markdown(result, 143771.0).splitlines()[2] == (
        f"judge: the base is incorrect ({reason}): no verdict below tells whether judge is right (eval.py passed its "
        "identical copy on task.yml's seeds; judge checks inputs drawn from seeds of its own, on one of which the base "
        "fails the problem's own check)")


def test_the_gpu_sampled_is_the_one_the_rounds_run_on(monkeypatch, capsys):
    # On an H200 host (2026-11-30) `--gpu 0` beside CUDA_VISIBLE_DEVICES=1 reported GPU 0's round's peak for GPU 1's.
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    assert parity.parse_args([]).gpu == 1
    assert parity.parse_args(["--gpu", "1"]).gpu == 1
    with pytest.raises(SystemExit) as refused:
        parity.parse_args(["--gpu", "0"])
    assert refused.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1].endswith(
        "error: --gpu 0: the rounds run on GPU 1 (CUDA_VISIBLE_DEVICES=1), whose memory is the one to sample; give "
        "--gpu 1 or leave it out")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")  # several: the first, and an explicit one is the user's
    assert parity.parse_args([]).gpu == 2 and parity.parse_args(["--gpu", "3"]).gpu == 3
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert parity.parse_args([]).gpu == 0


def test_the_machine_is_warmed_before_either_side_and_the_header_says_so(monkeypatch):
    """On a fresh machine the first Python to use torch reads its libraries from disk; judge's round ran first and
    paid it (amd/fp8-mm on an H200, 2026-12-01). The warm-up runs before both, and the report's header says what it
    took, or that it failed."""
    monkeypatch.setattr(parity, "WARM_CODE", "import time; time.sleep(0.2)")
    words = parity.warm_machine()
    seconds = float(words.split("(")[1].split(" s:")[0])
    assert 0.2 <= seconds < 30 and words == (
        f"machine warmed first ({seconds:.1f} s: torch imported, a CUDA context made, in a child of its own)")
    monkeypatch.setattr(parity, "WARM_CODE", "raise SystemExit('no GPU driver')")
    assert parity.warm_machine().endswith(": no GPU driver")
    header = {"started": "2026-12-01 00:00 UTC", "device": "NVIDIA H200", "memory_how": "memory: nvml",
              "python": "3.12.3", "eval_modes": ["leaderboard"], "warm": words}
    assert parity.report_markdown([], header, []).splitlines()[2].endswith(" · modes leaderboard · " + words)
    assert parity.parse_args([]).warm_machine and not parity.parse_args(["--no-warm-machine"]).warm_machine


def test_more_arguments_for_judge_run_go_after_the_round_s_own(monkeypatch, problem, tmp_path):
    """`--run-args '--gpus all'`: a Ray round of the same contest (amd/fp8-mm on two H200s, 2026-11-30)."""
    seen = []
    monkeypatch.setattr(parity, "submit", lambda *a: {"submitted": 1, "accepted": ["identical"], "refused": {}})
    monkeypatch.setattr(parity, "run_process", lambda argv, **kw: seen.append(argv) or parity.Ran(
        rc=1, seconds=0.1, stdout="", stderr_tail=""))
    monkeypatch.setattr(parity, "ledger_evaluations", lambda ledger: {})
    args = parity.parse_args(["--run-args=--gpus all"])
    subs = [parity.Submission("identical", "identical", "submission.py", "")]
    parity.run_judge(problem, subs, tmp_path, 60, parity.GpuMemory(probe=False), False, None,
                     tuple(parity.shlex.split(args.run_args)))
    assert seen[0][-2:] == ["--gpus", "all"] and "--round" in seen[0]
