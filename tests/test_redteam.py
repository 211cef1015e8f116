"""Red team: every cheat in tests/fixtures/redteam/cheats, run for real through judge.rounds.run_round.

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

Placeholders in a cheat are filled in by this file: {LEDGER}, {KERNELS_DIR}, {OTHER_WORKSPACE}, {PORT},
{TEST_SPECS}, {PUBLIC_SPECS}, {CORRECTNESS_CALLS}.

All the cheats of one target are proposals of ONE round (a module-scoped fixture runs it once); each test
then reads the verdicts from the ledger. Where judge answers wrongly the expectation stays as it is and the
case is marked xfail with the judge bug named (KNOWN_JUDGE_BUGS). REDTEAM_ONLY=name,name restricts a round
to some cheats (the controls always run), for quick runs on a GPU machine.
"""

from __future__ import annotations

import contextlib
import difflib
import hashlib
import importlib.util
import json
import os
import re
import shutil
import socket
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
            honest_timing=_header(text, "timing") == "honest", text=text))
        assert cheats[-1].cls, f"{path.name}: no '# class:' line"
    return cheats


CHEATS = load_cheats()


def _selected(cheats: list[Cheat]) -> list[Cheat]:
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
    limits: dict = field(default_factory=dict)  # the [limits] of the copy that hangs run on


TARGETS = {
    "cpu": TargetSpec("cpu", ROOT / "kernels" / "vecadd_cpu", "vecadd_cpu",
                      limits={"compile_s": 120, "check_s": 8, "timing_s": 120}),
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
    results: dict[str, dict] = field(default_factory=dict)  # proposal id -> evaluation row (+ target)
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


def run_redteam_round(key: str, tmp: Path) -> RedTeamRound:
    spec = TARGETS[key]
    kernels, work = tmp / "kernels", tmp / "work"
    kernels.mkdir(parents=True)
    main = _copy_target(spec, kernels)
    target = load_target(kernels / main)
    base = target.kernel_source()
    ledger_path = tmp / "ledger.db"
    ledger = Ledger(ledger_path)
    rr = RedTeamRound(key, tmp, ledger_path, work, kernels, main)
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
    }

    copies = {"mixin": main}
    cheats = [c for c in _selected(CHEATS) if key in c.targets]
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
        _submit(ledger, cheat.proposal_id, copy, _patch(copy_base, source))
        rr.workspaces[cheat.proposal_id] = work / copy / "round-1" / "candidates" / cheat.proposal_id
    for pid, (mixin, _, _) in CONTROLS.items():
        _submit(ledger, pid, main, _patch(base, base.rstrip("\n") + mixin))
        rr.workspaces[pid] = work / main / "round-1" / "candidates" / pid

    # Files no candidate may change, by their bytes before the round (those judge writes itself are checked
    # for the marker instead; judge's own source is only opened for writing, and the log must show it refused).
    for path in [tmp / "reports" / "round-1.md", *sorted(p for p in kernels.rglob("*") if p.is_file())]:
        rr.protected[path] = path.read_bytes()

    settings = Settings(kernels_dir=kernels, work_dir=work, cache_dir=tmp / "cache", timing_budget_s=1)
    start = time.monotonic()
    with _environ(JUDGE_LEDGER=str(ledger_path), JUDGE_REDTEAM_SECRET="the judge's own setting"):
        try:
            run_round(ledger, 1, settings=settings)
        except Exception as error:  # a crash of judge itself: every test says so instead of erroring alone
            rr.error = f"run_round raised {type(error).__name__}: {error}"
    rr.seconds = time.monotonic() - start
    print(f"\nredteam {key}: {len(cheats)} cheats + {len(CONTROLS)} controls in {rr.seconds:.0f} s")

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

    for pid in list(rr.cheats) + list(CONTROLS):
        revision = ledger.latest_revision(pid)
        target_name = Path(rr.workspaces[pid]).parents[2].name
        row = ledger.round_row(target_name, 1)
        evaluation = ledger.latest_evaluation(row["id"], revision["id"]) if row else None
        if evaluation is not None:
            rr.results[pid] = evaluation
        print(f"  {pid:32s} {evaluation['outcome'] if evaluation else '-':12s} "
              f"{(evaluation['reason'] if evaluation else rr.error)[:150]}")
    ledger.close()
    return rr


def _submit(ledger: Ledger, pid: str, target: str, patch: str) -> None:
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


# ---- fixtures: one round per target ----------------------------------------------------------------------


def _has_cuda() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


@pytest.fixture(scope="module")
def cpu_round(tmp_path_factory):
    return run_redteam_round("cpu", tmp_path_factory.mktemp("redteam-cpu"))


@pytest.fixture(scope="module")
def vecadd_round(tmp_path_factory):
    return run_redteam_round("vecadd", tmp_path_factory.mktemp("redteam-vecadd"))


@pytest.fixture(scope="module")
def fp8_round(tmp_path_factory):
    return run_redteam_round("fp8", tmp_path_factory.mktemp("redteam-fp8"))


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


def _cases(keys=("cpu", "vecadd", "fp8"), only=None):
    return [pytest.param(key, c, id=f"{key}-{c.name}", marks=_marks(key, c.name))
            for key in keys for c in CHEATS if key in c.targets and (only is None or c.name in only)]


def _targets(keys=("cpu", "vecadd", "fp8"), bug: str | None = None):
    return [pytest.param(key, id=key, marks=_marks(key, bug)) for key in keys]


def _round(request, key: str) -> RedTeamRound:
    rr = request.getfixturevalue(f"{key}_round")
    return rr


def _ran(rr: RedTeamRound, cheat: Cheat) -> None:
    if cheat.proposal_id not in rr.cheats:
        pytest.skip(f"{cheat.name} not selected (REDTEAM_ONLY)")


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


@pytest.mark.parametrize("key, cheat", _cases())
def test_cheat_gets_the_right_verdict(request, key, cheat):
    rr = _round(request, key)
    _ran(rr, cheat)
    outcome, reason, geomean = rr.verdict(cheat.proposal_id)
    check_verdict(f"{cheat.name} ({cheat.cls})", outcome, reason, geomean, cheat.expect, cheat.reason,
                  honest=cheat.honest_timing, identical=cheat.honest_timing)


@pytest.mark.parametrize("key", _targets())
@pytest.mark.parametrize("control", sorted(CONTROLS))
def test_honest_controls_keep_their_verdicts(request, key, control):
    if (key, control) in KNOWN_JUDGE_BUGS:
        request.applymarker(pytest.mark.xfail(strict=True, reason=KNOWN_JUDGE_BUGS[(key, control)]))
    rr = _round(request, key)
    outcome, reason, geomean = rr.verdict(control)
    _, expect, identical = CONTROLS[control]
    check_verdict(control, outcome, reason, geomean, expect, honest=True, identical=identical)


@pytest.mark.parametrize("key", _targets())
def test_the_round_ran_without_judge_crashing(request, key):
    rr = _round(request, key)
    assert not rr.error
    # every proposal was evaluated, none is left pending
    missing = sorted((set(rr.cheats) | set(CONTROLS)) - set(rr.results))
    assert not missing


# ---- what candidates must not reach ----------------------------------------------------------------------


def _lines(log: str, prefix: str) -> list[str]:
    return [line for line in log.splitlines() if line.startswith(prefix)]


@pytest.mark.parametrize("key", _targets())
def test_the_ledger_is_never_written_by_candidate_code(request, key):
    rr = _round(request, key)
    cheat = rr.cheats_by_name.get("write_ledger")
    if cheat is None:
        pytest.skip("write_ledger not selected")
    log = rr.log("write_ledger")
    # it found the ledger by walking up from its workspace, and saw no JUDGE_* variable
    assert f"REDTEAM ledger candidates: " in log, log[-2000:]
    assert str(rr.ledger_path) in _lines(log, "REDTEAM ledger candidates:")[0]
    assert "REDTEAM judge variables seen: []" in log
    attempts = _lines(log, f"REDTEAM write ledger {rr.ledger_path}:")
    assert attempts and all("PermissionError" in line for line in attempts), attempts
    assert all("WROTE" not in line for line in _lines(log, "REDTEAM sql ledger")), log
    for path in rr.root.glob("ledger.db*"):
        assert MARKER not in path.read_bytes(), f"{path.name} holds the cheat's marker"
    ledger = Ledger(rr.ledger_path)
    try:
        tables = {r["name"] for r in ledger.query("select name from sqlite_master where type = 'table'")}
        assert "redteam_marker" not in tables
    finally:
        ledger.close()


@pytest.mark.parametrize("key", _targets())
def test_no_file_outside_its_workspace_is_changed(request, key):
    rr = _round(request, key)
    cheat = rr.cheats_by_name.get("write_ledger")
    if cheat is None:
        pytest.skip("write_ledger not selected")
    log = rr.log("write_ledger")
    attempts = [line for line in _lines(log, "REDTEAM write ")]
    for what in ("ledger", "reports", "kernels", "judge source", "other workspace", "base", "oracle"):
        assert any(line.startswith(f"REDTEAM write {what} ") for line in attempts), (what, log[-3000:])
    wrote = [line for line in attempts if line.endswith(": WROTE")]
    assert not wrote
    assert all("PermissionError" in line for line in attempts), attempts
    changed = [str(p) for p, before in rr.protected.items() if not p.exists() or p.read_bytes() != before]
    assert not changed
    workspace = rr.workspaces[cheat.proposal_id]
    round_dir = workspace.parents[1]
    judge_written = [round_dir / "base" / "submission.py", round_dir / ".judge-round" / "oracle" / "reference.py",
                     workspace.parent / "control-unchanged" / "submission.py"]
    for path in judge_written:
        assert path.exists() and MARKER not in path.read_bytes(), path


@pytest.mark.parametrize("key", _targets())
def test_reads_outside_its_workspace_fail(request, key):
    rr = _round(request, key)
    if "read_secrets" not in rr.cheats_by_name:
        pytest.skip("read_secrets not selected")
    lines = _lines(rr.log("read_secrets"), "REDTEAM read ")
    assert len(lines) == 8, lines
    read = [line for line in lines if ": READ " in line]
    assert not read


@pytest.mark.parametrize("key", _targets())
def test_the_network_is_out_of_reach(request, key):
    rr = _round(request, key)
    if "network" not in rr.cheats_by_name:
        pytest.skip("network not selected")
    lines = _lines(rr.log("network"), "REDTEAM connect:")
    assert lines and "CONNECTED" not in lines[0], lines
    assert not rr.connections, rr.connections


@pytest.mark.parametrize("key", _targets())
def test_judge_and_the_base_cannot_be_signalled_or_outrun(request, key):
    rr = _round(request, key)
    if "stop_parent" not in rr.cheats_by_name:
        pytest.skip("stop_parent not selected")
    lines = [line for line in _lines(rr.log("stop_parent"), "REDTEAM ")]
    assert any(line.startswith("REDTEAM sigstop parent") for line in lines), lines
    assert any(line.startswith("REDTEAM hog") for line in lines), lines
    done = [line for line in lines if ": DONE" in line]
    assert not done


@pytest.mark.parametrize("key", _targets(bug="renice"))
def test_other_processes_cannot_be_reniced_or_pinned(request, key):
    rr = _round(request, key)
    if "renice_base" not in rr.cheats_by_name:
        pytest.skip("renice_base not selected")
    lines = _lines(rr.log("renice_base"), "REDTEAM ")
    assert lines, "it found no other judge process to slow"
    done = [line for line in lines if line.endswith(": DONE")]
    assert not done, done[:4]


# ---- what the round's report shows of them --------------------------------------------------------------

# Cheats whose crash message, error line or output is written to rewrite or swamp the scorecard.
TEXT_CHEATS = ("text_in_error", "text_in_import_error", "huge_error_line", "huge_error_lines", "flood_output",
               "flood_output_lines")
REPORT_SECONDS = 60  # judge's renderer on a 2-core VM: 3.6 s for the round with a 16 MiB error stored whole
ROW_BYTES = 256 << 10  # what the ledger may hold of one evaluation's text: its reason, summaries, details, log tails


@pytest.mark.parametrize("key", _targets())
def test_the_report_shows_what_candidates_wrote_contained(request, key, tmp_path):
    """judge's own renderer on the round's ledger: in seconds, no control character, raw tag or comment, link,
    bold judge did not write or split row; the forged text there only as text; the ledger small."""
    from judge.report import render_round
    from test_report_contain import problems

    rr = _round(request, key)
    if not {"text_in_error", "huge_error_line", "flood_output"} <= set(rr.cheats_by_name):
        pytest.skip("the text cheats were not selected")
    ledger = Ledger(rr.ledger_path)
    try:
        started = time.monotonic()
        markdown = render_round(ledger, 1, tmp_path, target=rr.main_target).read_text()
        assert time.monotonic() - started < REPORT_SECONDS
        sizes = {row["id"]: row["n"] for row in ledger.query(
            "select e.id, length(e.reason) + sum(length(s.summary) + length(s.detail_json) + length(s.log_tail)) as n "
            "from evaluations e join stage_results s on s.evaluation_id = e.id group by e.id")}
    finally:
        ledger.close()
    assert problems(markdown) == []
    assert [line for line in markdown.splitlines() if "**faster**" in line and not line.startswith("- Status: **faster**")] == []
    assert "\\*\\*faster\\*\\* (evaluation #1)" in markdown and "&lt;img src=x onerror=alert(1)>" in markdown
    assert len(markdown) < 2 << 20
    for name in TEXT_CHEATS:
        cheat = rr.cheats_by_name.get(name)
        if cheat is not None:
            evaluation = rr.results[cheat.proposal_id]["id"]
            assert sizes[evaluation] < ROW_BYTES, f"{name}: {sizes[evaluation]} characters of text in the ledger"


def test_every_cheat_file_is_well_formed():
    names = {c.name for c in CHEATS}
    assert len(CHEATS) >= 25
    for cheat in CHEATS:
        assert set(cheat.targets) <= set(TARGETS), cheat.name
        assert cheat.kind in {"mixin", "limits", "slow-base", "sol"}, cheat.name
        compile(cheat.text, cheat.name, "exec")
    assert {"write_ledger", "read_secrets", "network", "stop_parent"} <= names
