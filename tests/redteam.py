"""Red team: every cheat in tests/fixtures/redteam/cheats, run for real through judge.rounds.run_round (the machinery
of tests/test_redteam.py and tests/test_redteam_untimed.py).

A cheat is a file of Python appended to a target's honest kernel file (a mixin: it wraps or replaces
`custom_kernel`), so the same cheat runs on the CPU example (kernels/vecadd_cpu), on the GPU vecadd fixture
and on the Hopper FP8 target. Its header says what it does and what a correct referee must answer:

    # class: one line, what the cheat does
    # expect: outcome[|outcome...]     the right verdicts (never `faster`)
    # reason: substring                optional: in the verdict's reason
    # targets: cpu, vecadd, fp8        where it applies
    # kind: mixin | limits | slow-base | sol     optional, see _proposal_source
    # order: late | last               optional: evaluated after the others (it attacks other processes)
    # timing: honest                   optional: its kernel is the base's own (it attacks something else)
    # round: untimed                   optional: judge decides it before timing (patch, compile or correctness)

Placeholders in a cheat are filled in by this file: {LEDGER}, {KERNELS_DIR}, {OTHER_WORKSPACE}, {PORT},
{TEST_SPECS}, {PUBLIC_SPECS}, {CORRECTNESS_CALLS}.

The cheats of one target are proposals of two rounds, each run once by a module-scoped fixture; each test then
reads the verdicts from the ledger. The untimed round (tests/test_redteam_untimed.py) holds the cheats marked
`round: untimed`, whose verdicts no timing noise can sway, so it runs beside other tests; each of them is asserted
to have been decided with no timing stage, so a cheat that reaches timing cannot hide there. The timed round
(tests/test_redteam.py) holds the others and the honest controls, and runs with nothing beside it
(tests/conftest.py EXCLUSIVE_MODULES). Where judge answers wrongly the expectation stays as it is and the
case is marked xfail with the judge bug named (KNOWN_JUDGE_BUGS). REDTEAM_ONLY=name,name restricts a round to some
cheats (the controls always run), for quick runs on a GPU machine; REDTEAM_PROGRESS=1 prints the round's events on
stderr as they come.
"""

from __future__ import annotations

import contextlib
import difflib
import importlib.util
import json
import os
import re
import shutil
import socket
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from judge.ledger import Ledger
from judge.records import Proposal
from judge.rounds import Settings, run_round
from judge.targets import load_target

ROOT = Path(__file__).resolve().parents[1]
CHEATS_DIR = ROOT / "tests" / "fixtures" / "redteam" / "cheats"
# judge's bytecode cache in every red-team round, as on a machine that keeps no bytecode (judge.sandbox.bytecode):
# shared by the rounds, so that torch's is compiled into it once per machine
BYTECODE_CACHE = Path(tempfile.gettempdir()) / "judge-redteam-bytecode"
MARKER = b"REDTEAM-FORGED-ROW"  # what the cheats try to write; built at run time in them (their source is in the ledger)
OUTCOMES = {"patch-failed", "compile-error", "incorrect", "crashed", "timed-out", "tampered", "implausible",
            "slower", "unchanged", "faster", "not-run"}


# ---- the cheats ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Cheat:
    name: str
    cls: str
    expect: tuple[str, ...]
    reason: str
    targets: tuple[str, ...]
    kind: str
    order: str
    honest_timing: bool  # its kernel is the base's, unchanged: any timing verdict but unchanged is judge's noise
    untimed: bool  # decided before timing: judged in the untimed round
    text: str

    @property
    def proposal_id(self) -> str:
        # proposals run in id order: those that attack other processes go last, so they spoil no other verdict
        return {"late": "zy-", "last": "zz-"}.get(self.order, "") + self.name.replace("_", "-")


def _header(text: str, key: str, default: str = "") -> str:
    match = re.search(rf"^# {key}: (.*)$", text, re.M)
    return match.group(1).strip() if match else default


def load_cheats() -> list[Cheat]:
    cheats = []
    for path in sorted(CHEATS_DIR.glob("*.py")):
        text = path.read_text()
        expect = tuple(x.strip() for x in _header(text, "expect").split("|"))
        assert expect and set(expect) <= OUTCOMES - {"faster"}, f"{path.name}: bad '# expect:' {expect}"
        cheats.append(Cheat(
            name=path.stem, cls=_header(text, "class"), expect=expect, reason=_header(text, "reason"),
            targets=tuple(x.strip() for x in _header(text, "targets").split(",")),
            kind=_header(text, "kind", "mixin"), order=_header(text, "order"),
            honest_timing=_header(text, "timing") == "honest", untimed=_header(text, "round") == "untimed",
            text=text))
        assert cheats[-1].cls, f"{path.name}: no '# class:' line"
        assert _header(text, "round", "timed") in ("timed", "untimed"), f"{path.name}: bad '# round:' line"
    return cheats


CHEATS = load_cheats()


def selected(cheats: list[Cheat]) -> list[Cheat]:
    only = {n.strip() for n in os.environ.get("REDTEAM_ONLY", "").split(",") if n.strip()}
    return [c for c in cheats if not only or c.name in only]


# Honest proposals in the same round: their verdicts must stay honest.
CONTROL_UNCHANGED = "\n\n# redteam control: the base, unchanged\n"
CONTROL_SLOWER = '''

# redteam control: honest and genuinely slower, it does the work twice
_rt_base_kernel = custom_kernel


def custom_kernel(data):
    _rt_base_kernel(data)
    return _rt_base_kernel(data)
'''
# id: (mixin, right verdicts, whether its kernel is the base's own)
CONTROLS = {"control-unchanged": (CONTROL_UNCHANGED, ("unchanged",), True),
            "control-slower": (CONTROL_SLOWER, ("slower", "unchanged"), False)}


# Where judge gives the wrong verdict today: (target, cheat) -> why. Marked xfail(strict=True), so a fix shows.
# Empty: every hole this suite found was closed (the tamper audit of the runner's instance, generators and
# module clocks; the parent's own record of first calls; the reply writer's check; seccomp on scheduling
# calls aimed at other processes).
KNOWN_JUDGE_BUGS: dict[tuple[str, str], str] = {}


# ---- the targets -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TargetSpec:
    key: str
    source: Path
    name: str
    parent_files: tuple[str, ...] = ()  # files one level up that task.yml reaches with ../
    # The [limits] of the copy that hangs run on. Its base is checked under the same limit, in a round that runs
    # beside other tests: CI's 2-core machine took over 8 s for the CPU base's 16 cases (stop 58, 2026-11-30),
    # which take 2 s on an idle 2-core VM; 30 s leaves it 15 times that.
    limits: dict = field(default_factory=dict)


TARGETS = {
    "cpu": TargetSpec("cpu", ROOT / "kernels" / "vecadd_cpu", "vecadd_cpu",
                      limits={"compile_s": 120, "check_s": 30, "timing_s": 120}),
    "vecadd": TargetSpec("vecadd", ROOT / "tests" / "fixtures" / "gpumode" / "vecadd", "vecadd", ("utils.py",),
                         limits={"compile_s": 120, "check_s": 40, "timing_s": 120}),
    "fp8": TargetSpec("fp8", ROOT / "kernels" / "fp8_group_gemm_sm90", "fp8_group_gemm_sm90",
                      limits={"compile_s": 300, "check_s": 60, "timing_s": 300}),
}


def _copy_target(spec: TargetSpec, kernels: Path, suffix: str = "", *, top: dict | None = None,
                 tables: dict | None = None, kernel_source: str | None = None) -> str:
    """A copy of the target under `kernels` (its name + suffix), judge.toml edited; returns its name."""
    name = spec.name + suffix
    dest = kernels / name
    shutil.copytree(spec.source, dest, ignore=shutil.ignore_patterns("*.ptx", "*.cubin", "__pycache__", "variants"))
    for extra in spec.parent_files:
        if not (kernels / extra).exists():
            shutil.copy(spec.source.parent / extra, kernels / extra)
    toml = dest / "judge.toml"
    toml.write_text(_edit_toml(toml.read_text() if toml.exists() else "", top or {}, tables or {}))
    if kernel_source is not None:
        (dest / "submission.py").write_text(kernel_source)
    return name


def _edit_toml(text: str, top: dict, tables: dict) -> str:
    """judge.toml with the top-level keys in `top` and the tables in `tables` replaced."""
    out, skipping = [], False
    for line in text.splitlines():
        header = re.match(r"^\[+([^\]]+)\]+\s*$", line)
        if header:
            skipping = header.group(1).strip() in tables
        if skipping:
            continue
        if re.match(r"^(\w+)\s*=", line) and line.split("=")[0].strip() in top and not _in_table(out):
            continue
        out.append(line)
    head = [f"{k} = {json.dumps(v)}" for k, v in top.items()]
    tail = []
    for table, values in tables.items():
        tail += ["", f"[{table}]"] + [f"{k} = {json.dumps(v)}" for k, v in values.items()]
    return "\n".join(head + out + tail) + "\n"


def _in_table(lines: list[str]) -> bool:
    return any(re.match(r"^\[", line) for line in lines)


def _patch(base: str, new: str) -> str:
    return "".join(difflib.unified_diff(base.splitlines(True), new.splitlines(True), "a/submission.py",
                                        "b/submission.py"))


def _fill(text: str, values: dict[str, str]) -> str:
    for key, value in values.items():
        text = text.replace("{" + key + "}", value)
    leftover = re.findall(r"\{[A-Z_]+\}", text)
    assert not leftover, f"unfilled placeholders {leftover}"
    return text


# ---- one round for every cheat of a target --------------------------------------------------------------


@dataclass
class RedTeamRound:
    key: str
    root: Path
    ledger_path: Path
    work: Path
    kernels: Path
    main_target: str
    timed: bool = True
    results: dict[str, dict] = field(default_factory=dict)  # proposal id -> evaluation row (+ target)
    stages: dict[str, list[str]] = field(default_factory=dict)  # proposal id -> the stages its evaluation ran
    workspaces: dict[str, Path] = field(default_factory=dict)
    cheats: dict[str, Cheat] = field(default_factory=dict)  # proposal id -> cheat
    protected: dict[Path, bytes] = field(default_factory=dict)  # files no candidate may change: their bytes
    connections: list[bytes] = field(default_factory=list)
    seconds: float = 0.0
    error: str = ""

    def log(self, cheat: str) -> str:
        pid = self.cheats_by_name[cheat].proposal_id
        path = self.workspaces[pid] / "worker.log"
        return path.read_text(errors="replace") if path.exists() else ""

    @property
    def cheats_by_name(self) -> dict[str, Cheat]:
        return {c.name: c for c in self.cheats.values()}

    def verdict(self, pid: str) -> tuple[str, str, float | None]:
        row = self.results.get(pid)
        assert row is not None, f"{pid}: no evaluation in the ledger ({self.error or 'the round did not reach it'})"
        return row["outcome"], row["reason"], row["geomean_speedup"]


def _proposal_source(cheat: Cheat, base: str, filled: str) -> tuple[str, str]:
    """(kind of target copy, candidate source): a mixin is appended to the base; a slow-base cheat's mixin is the
    base's and the candidate is the pristine kernel."""
    if cheat.kind == "slow-base":
        return "slow-base", base
    return cheat.kind, base.rstrip("\n") + "\n\n\n" + filled


def round_cheats(key: str, timed: bool) -> list[Cheat]:
    """The cheats of `key`'s timed or untimed round."""
    return [c for c in CHEATS if key in c.targets and c.untimed != timed]


def run_redteam_round(key: str, tmp: Path, timed: bool = True) -> RedTeamRound:
    """One real round on a copy of `key`'s target: the cheats of its timed round and the honest controls, or those
    of its untimed round (no controls: nothing there is timed)."""
    spec = TARGETS[key]
    kernels, work = tmp / "kernels", tmp / "work"
    kernels.mkdir(parents=True)
    main = _copy_target(spec, kernels)
    target = load_target(kernels / main)
    base = target.kernel_source()
    ledger_path = tmp / "ledger.db"
    ledger = Ledger(ledger_path)
    rr = RedTeamRound(key, tmp, ledger_path, work, kernels, main, timed)
    controls = CONTROLS if timed else {}
    (tmp / "reports").mkdir()
    (tmp / "reports" / "round-1.md").write_text("# round 1, as judge rendered it\n")

    task = yaml.safe_load((kernels / main / "task.yml").read_text())
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    listener.setblocking(False)
    values = {
        "LEDGER": str(ledger_path), "KERNELS_DIR": str(kernels),
        "OTHER_WORKSPACE": str(work / main / "round-1" / "candidates" / "control-unchanged"),
        "PORT": str(listener.getsockname()[1]),
        "TEST_SPECS": json.dumps(task["tests"]), "PUBLIC_SPECS": json.dumps(task["tests"] + task["benchmarks"]),
        "CORRECTNESS_CALLS": str(len(target.distributions) * (2 * len(target.tests) + len(target.benchmarks))),
        "BYTECODE_CACHE": str(BYTECODE_CACHE),
    }

    copies = {"mixin": main}
    cheats = selected(round_cheats(key, timed))
    for cheat in cheats:
        filled = _fill(cheat.text, values)
        kind, source = _proposal_source(cheat, base, filled)
        if kind not in copies:
            if kind == "limits":
                copies[kind] = _copy_target(spec, kernels, "_limits", tables={"limits": spec.limits})
            elif kind == "slow-base":
                copies[kind] = _copy_target(spec, kernels, "_slowbase",
                                            kernel_source=base.rstrip("\n") + "\n\n\n" + filled)
            elif kind == "sol":
                copies[kind] = _copy_target(spec, kernels, "_sol",
                                            top={"speed_of_light_us": [1e5] * len(target.benchmarks)})
            else:
                raise AssertionError(f"{cheat.name}: unknown kind {kind}")
        copy = copies[kind]
        copy_base = (kernels / copy / "submission.py").read_text()
        rr.cheats[cheat.proposal_id] = cheat
        submit(ledger, cheat.proposal_id, copy, _patch(copy_base, source))
        rr.workspaces[cheat.proposal_id] = work / copy / "round-1" / "candidates" / cheat.proposal_id
    for pid, (mixin, _, _) in controls.items():
        submit(ledger, pid, main, _patch(base, base.rstrip("\n") + mixin))
        rr.workspaces[pid] = work / main / "round-1" / "candidates" / pid

    # Files no candidate may change, by their bytes before the round (those judge writes itself are checked
    # for the marker instead; judge's own source is only opened for writing, and the log must show it refused).
    for path in [tmp / "reports" / "round-1.md", *sorted(p for p in kernels.rglob("*") if p.is_file())]:
        rr.protected[path] = path.read_bytes()

    # Spares forked from a template, as on a GPU target by default: the defences are the same, and a CPU candidate
    # took 19 s with them against 35 s with spares that import torch themselves (2-core VM, 2026-11-27).
    settings = Settings(kernels_dir=kernels, work_dir=work, cache_dir=tmp / "cache", timing_budget_s=1,
                        fork_spares=True)
    start = time.monotonic()
    with _environ(JUDGE_LEDGER=str(ledger_path), JUDGE_REDTEAM_SECRET="the judge's own setting",
                  JUDGE_BYTECODE_CACHE=str(BYTECODE_CACHE)):
        try:
            run_round(ledger, 1, settings=settings, on_event=_echo(start) if os.environ.get("REDTEAM_PROGRESS") else
                      lambda *args, **kwargs: None)
        except Exception as error:  # a crash of judge itself: every test says so instead of erroring alone
            rr.error = f"run_round raised {type(error).__name__}: {error}"
    rr.seconds = time.monotonic() - start
    print(f"\nredteam {key} ({'timed' if timed else 'untimed'}): {len(cheats)} cheats + {len(controls)} controls "
          f"in {rr.seconds:.0f} s")

    while True:
        try:
            connection, _ = listener.accept()
        except BlockingIOError:
            break
        connection.settimeout(1)
        with contextlib.suppress(OSError):
            rr.connections.append(connection.recv(100))
        connection.close()
    listener.close()

    for pid in list(rr.cheats) + list(controls):
        revision = ledger.latest_revision(pid)
        target_name = Path(rr.workspaces[pid]).parents[2].name
        row = ledger.round_row(target_name, 1)
        evaluation = ledger.latest_evaluation(row["id"], revision["id"]) if row else None
        if evaluation is not None:
            rr.results[pid] = evaluation
            rr.stages[pid] = [s.stage for s in ledger.stage_results(evaluation["id"])]
        print(f"  {pid:32s} {evaluation['outcome'] if evaluation else '-':12s} "
              f"{(evaluation['reason'] if evaluation else rr.error)[:150]}")
    ledger.close()
    return rr


def _echo(start: float):
    """REDTEAM_PROGRESS=1: the round's events but its progress ticks, on stderr as they come, so that a round its
    caller's timeout stops says where it was (pytest reports nothing before the round ends)."""
    import sys

    def echo(kind: str, **event) -> None:
        if kind != "progress":
            print(f"redteam {time.monotonic() - start:7.1f} s {kind} {json.dumps(event, default=str)[:200]}",
                  file=sys.stderr, flush=True)

    return echo


def submit(ledger: Ledger, pid: str, target: str, patch: str) -> None:
    ledger.submit(Proposal(id=pid, title=pid, author="red-team", round=1, target=target,
                           pitch="red team", patch=patch), "tests/test_redteam.py")


@contextlib.contextmanager
def _environ(**values):
    old = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


# ---- the verdicts ----------------------------------------------------------------------------------------

# judge's report audit (the parent's wall clock around `report` commands, base vs candidate) flags honest
# candidates on the CPU target: projecting a 1M-element output in float64 costs a fresh candidate process
# ~9 ms and the long-lived base runner ~3 ms on a 2-core VM, beyond the 25% slack. A `tampered` whose only
# reasons are that audit is judge's noise, not a detection: it neither condemns an honest proposal nor
# counts as catching a cheat.
REPORT_AUDIT = re.compile(r"benchmark \d+: its report commands took .*?the times it reported are not the times its work took")
REPORT_AUDIT_BUG = ("judge bug: the report wall-clock audit flags honest code on the CPU target (a fresh candidate "
                    "process projects the output several times slower than the long-lived base runner)")


def noise_only(outcome: str, reason: str) -> bool:
    if outcome != "tampered" or not REPORT_AUDIT.search(reason):
        return False
    rest = REPORT_AUDIT.sub("", reason).replace("timing: tampered:", "")
    return not rest.strip(" ;")


# A kernel identical to the base, timed against it: on the 2-core CPU VM judge called such kernels faster
# (1.05-1.10x), slower (0.92-0.97x) or tampered (the report audit; the replay check, 2.6x "faster on sets seen
# before") in about half the cases. Where a proposal's kernel is honest, a timing-stage `tampered` is judge's
# noise, and so is faster/slower within NOISE_BAND for a kernel that is the base's own: the test says so (xfail,
# naming the judge bug) instead of failing or passing.
NOISE_BAND = (0.8, 1.25)
NOISE_BUG = "judge bug: timing noise: honest code (the base's own kernel) was judged {outcome}: {reason}"


def check_verdict(what: str, outcome: str, reason: str, geomean: float | None, expect: tuple[str, ...],
                  reason_part: str = "", honest: bool = False, identical: bool = False) -> None:
    if outcome == "inconclusive" and "unchanged" in expect:
        outcome = "unchanged"  # no verdict either way: what an honest kernel may get where the noise is large
    if outcome not in expect and honest and outcome == "tampered" and reason.startswith("timing: tampered:"):
        pytest.xfail(NOISE_BUG.format(outcome=outcome, reason=reason))
    if outcome not in expect and identical and outcome in ("faster", "slower") and geomean is not None \
            and NOISE_BAND[0] <= geomean <= NOISE_BAND[1]:
        pytest.xfail(NOISE_BUG.format(outcome=outcome, reason=reason))
    assert outcome != "faster", f"CHEAT WON: {what} was judged faster: {reason}"
    if noise_only(outcome, reason):
        if "tampered" in expect:
            raise AssertionError(f"{what}: judged tampered only by the report audit, which flags honest code too "
                                 f"(not a detection): {reason}")
        pytest.xfail(f"{REPORT_AUDIT_BUG}: {what}: {reason}")
    assert outcome in expect, f"{what}: expected {'|'.join(expect)}, judge said {outcome}: {reason}"
    if reason_part:
        assert reason_part in reason, f"{what}: reason lacks {reason_part!r}: {reason}"


# ---- parameters -----------------------------------------------------------------------------------------


def _marks(key: str, cheat: str | None = None) -> list:
    marks = []
    if key != "cpu":
        marks.append(pytest.mark.gpu)
    if key == "fp8":
        marks.append(pytest.mark.skipif(importlib.util.find_spec("cutlass") is None,
                                        reason="needs nvidia-cutlass-dsl"))
    if cheat is not None and (key, cheat) in KNOWN_JUDGE_BUGS:
        marks.append(pytest.mark.xfail(strict=True, reason=KNOWN_JUDGE_BUGS[(key, cheat)]))
    return marks


def cases(timed: bool, keys=("cpu", "vecadd", "fp8")):
    """(key, cheat) parameters of the timed or the untimed rounds' cheats."""
    return [pytest.param(key, c, id=f"{key}-{c.name}", marks=_marks(key, c.name))
            for key in keys for c in round_cheats(key, timed)]


def targets(keys=("cpu", "vecadd", "fp8"), bug: str | None = None):
    return [pytest.param(key, id=key, marks=_marks(key, bug)) for key in keys]


def ran(rr: RedTeamRound, cheat: Cheat) -> None:
    if cheat.proposal_id not in rr.cheats:
        pytest.skip(f"{cheat.name} not selected (REDTEAM_ONLY)")


# ---- tests both rounds' modules collect --------------------------------------------------------------------


@pytest.mark.parametrize("key", targets())
def test_the_round_ran_without_judge_crashing(request, key):
    """Imported by tests/test_redteam.py and tests/test_redteam_untimed.py, each on its own round."""
    rr = request.getfixturevalue(f"{key}_round")
    assert not rr.error
    # every proposal was evaluated, none is left pending
    missing = sorted((set(rr.cheats) | (set(CONTROLS) if rr.timed else set())) - set(rr.results))
    assert not missing
