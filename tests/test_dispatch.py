"""judge/dispatch.py: a round's kernel stages on Ray actors give the verdicts a local run gives, each recorded by
the driver with the worker that ran it. A CPU target (vecadd_cpu) runs on CPU actors, each holding a block of
cores (judge.core_blocks), on a local Ray of 4 logical CPUs: two actors, as on a CI runner. A GPU target runs on
one actor per (pretend) GPU; without a GPU here its kernel stages are not run, and a cluster without GPUs is
refused for it."""

from __future__ import annotations

import difflib
import json
import importlib.util
import os
from pathlib import Path

import pytest

from judge import actions
from judge.errors import JudgeError
from judge.ledger import Ledger
from judge.rounds import Settings, run_round

pytestmark = pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="needs ray (pip install 'judge[ray]')")

ROOT = Path(__file__).resolve().parents[1]
BASE = (ROOT / "kernels" / "vecadd_cpu" / "submission.py").read_text()
GPUMODE = ROOT / "tests" / "fixtures" / "gpumode"
GPU_BASE = (GPUMODE / "vecadd" / "submission.py").read_text()
ADD = "    torch.add(a, b, out=out)\n"
# Verdicts no timing noise can turn: a wrong answer, an exception, ten times the work, and the base's own kernel
# (a comment added), which must come out unchanged, never faster or slower (`outcomes`).
KERNELS = {
    "wrong-sign": BASE.replace(ADD, "    torch.sub(a, b, out=out)\n"),
    "raises": BASE.replace(ADD, "    raise RuntimeError('out of registers')\n"),
    "ten-times": BASE.replace(ADD, "    for _ in range(10):\n        torch.add(a, b, out=out)\n"),
    "identical": BASE.replace(ADD, "    # the same kernel\n" + ADD),
}
EXPECTED = {
    "wrong-sign": "incorrect",
    "raises": "crashed",
    "ten-times": "slower",
    "identical": "unchanged",
}


def outcomes(summary) -> dict[str, str]:
    """Each proposal's verdict; the identical copy's 'inconclusive' read as 'unchanged': on a loaded VM a control
    can leave the noise floor too wide to call honest code unchanged (as in
    test_redteam's check_verdict), which is no verdict either way, never faster or slower."""
    found = {v.proposal_id: v.outcome for v in summary.verdicts}
    if found.get("identical") == "inconclusive":
        found["identical"] = "unchanged"
    return found


def reasons(summary) -> str:
    """Each verdict's reason (its interval, pairs and floor), for an assertion's message: a verdict that a loaded
    machine turned is then read off CI's log."""
    return "\n".join(f"{v.proposal_id}: {v.outcome}: {v.reason}" for v in summary.verdicts)


def actor_count() -> int:
    """Two actors where this host has two blocks of two cores; one on a 2-core host (CI), where a second actor would
    pin nothing and share the first one's cores while it is timed."""
    return 2 if len(os.sched_getaffinity(0)) >= 4 else 1


@pytest.fixture
def local_ray():
    """Two logical CPUs per actor: vecadd_cpu times on one core, its oracle on another."""
    import ray

    ray.init(num_cpus=2 * actor_count(), num_gpus=0, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


def submit(tmp_path: Path, kernels: dict[str, str] = KERNELS, target: str = "vecadd_cpu",
           kernels_dir: Path = ROOT / "kernels", base: str = BASE) -> Ledger:
    ledger = Ledger(tmp_path / "ledger.db")
    for name, source in kernels.items():
        folder = tmp_path / "proposals" / name
        folder.mkdir(parents=True)
        (folder / "proposal.toml").write_text(
            f'id = "{name}"\ntitle = "{name}"\nauthor = "contestant-1"\nround = 1\ntarget = "{target}"\n\n'
            "[claim]\nlow = 1.1\nhigh = 1.2\n")
        (folder / "pitch.md").write_text(f"# {name}\n\nA kernel for the dispatch test.\n")
        (folder / "patch.diff").write_text("".join(difflib.unified_diff(
            base.splitlines(True), source.splitlines(True), "a/submission.py", "b/submission.py")))
        actions.submit(ledger, actions.load_submissions([str(folder)], None), kernels_dir)
    return ledger


def settings_for(tmp_path: Path, ray: bool, kernels_dir: Path = ROOT / "kernels") -> Settings:
    # Spares forked from a template (as on a GPU target by default), locally and in each actor: a CPU candidate
    # takes about half as long as with spares that import torch themselves. A pair of vecadd_cpu takes 3-3.5 s on
    # a 2-core VM, so 15 s gives a comparison still undecided after three pairs one or two more: the ten-times
    # kernel's pairs read 0.22-0.38x there, and one stray pair near 0.55x among three leaves its interval across 1.
    return Settings(kernels_dir=kernels_dir, work_dir=tmp_path / "work", cache_dir=tmp_path / "cache",
                    timing_budget_s=15.0, ray=ray, fork_spares=True)


def expected_blocks() -> list[str]:
    """The cores of the actors, as their places name them: the last two cores this process may use, and the two
    before them where there is a second actor."""
    allowed = sorted(os.sched_getaffinity(0))
    return sorted([f"{allowed[-2]},{allowed[-1]}"] + ([f"{allowed[-4]},{allowed[-3]}"] if actor_count() == 2 else []))


@pytest.fixture(scope="module")
def sequential_round(tmp_path_factory):
    """The same proposals judged on this machine without Ray (checked one after another, timed together): the
    summary, the run's events and its ledger."""
    from types import SimpleNamespace

    tmp_path = tmp_path_factory.mktemp("sequential")
    events, ledger = [], submit(tmp_path)
    [summary] = run_round(ledger, 1, settings=settings_for(tmp_path, ray=False),
                          on_event=lambda kind, **info: events.append((kind, info)))
    return SimpleNamespace(summary=summary, events=events, ledger=ledger)


def test_a_local_round_times_its_control_in_the_candidates_group_and_reads_the_floor_before_their_verdicts(
        sequential_round):
    events, ledger = sequential_round.events, sequential_round.ledger
    said = [(info["proposal"], info["stage"]) for kind, info in events if kind == "stage"]
    assert ("(control)", "the base against an identical copy of itself, in the candidates' process group") in said
    grouped = "timing, in one process group of 3 kernels (the round's control among them) beside the base"
    assert [stage for name, stage in said if name in ("ten-times", "identical") and stage != "correctness"] == [
        grouped, grouped]
    # the two that failed their checks are recorded at once, the control as soon as its own comparison is done
    rows = ledger.query("select e.subject, r.proposal_id, s.detail_json from evaluations e left join revisions r "
                        "on r.id = e.revision_id left join stage_results s on s.evaluation_id = e.id and "
                        "s.stage = 'timing' order by e.id")
    assert [r["subject"] for r in rows] == ["base", "candidate", "candidate", "control", "candidate", "candidate"]
    assert sorted(r["proposal_id"] for r in rows[1:3]) == ["raises", "wrong-sign"]  # in the order they compiled
    assert sorted(r["proposal_id"] for r in rows[4:]) == ["identical", "ten-times"]
    # one floor, said after the control's evaluation and before any timed verdict, and cleared by both of them
    order = [(kind, info.get("proposal")) for kind, info in events if kind in ("floor", "evaluated", "verdict")]
    [floor_at] = [i for i, (kind, _) in enumerate(order) if kind == "floor"]
    assert order[floor_at - 1] == ("evaluated", "(control)")
    assert all(order.index(("verdict", name)) > floor_at for name in ("identical", "ten-times"))
    [floor] = [info["floor"] for kind, info in events if kind == "floor"]
    assert [json.loads(r["detail_json"])["floor"] for r in rows[4:]] == [floor.to_json()] * 2


def test_cpu_actors_give_the_sequential_verdicts_lose_nothing_when_killed_and_say_where_they_ran(
        sequential_round, local_ray, tmp_path):
    """One Ray round (each costs minutes on CI's 2 cores): an actor is killed after the first verdict, so the
    candidate it held is resent to it once Ray has started it again."""
    import signal

    from judge.dispatch import describe_place
    from judge.local_groups import timing_words

    ledger = submit(tmp_path)
    events, killed = [], []

    def on_event(kind, **info):
        events.append((kind, info))
        if kind == "workers":
            killed.append(info["places"][0]["pid"])
        elif kind == "verdict" and len(killed) == 1:  # the first verdict: the next candidate is on its way
            os.kill(killed[0], signal.SIGKILL)
            killed.append("done")

    [summary] = run_round(ledger, 1, settings=settings_for(tmp_path, ray=True), on_event=on_event)
    assert killed[1:] == ["done"]
    assert outcomes(sequential_round.summary) == EXPECTED, reasons(sequential_round.summary)
    assert outcomes(summary) == EXPECTED, reasons(summary)
    [(_, workers)] = [e for e in events if e[0] == "workers"]
    places = workers["places"]
    assert sorted(p["cpus"] for p in places) == expected_blocks()  # each actor with cores of its own
    assert all(p["gpus"] == "" and p["device"]["kind"] == "cpu" for p in places)
    host, name = places[0]["host"], places[0]["device"]["name"]
    assert sorted(describe_place(p) for p in places) == sorted(f"{host}, CPU {cpus} ({name})"
                                                                for cpus in expected_blocks())
    rows = ledger.query("select r.proposal_id, e.subject, e.device_json from evaluations e left join revisions r "
                        "on r.id = e.revision_id order by e.id")
    assert [r["subject"] for r in rows] == ["base", "control"] + ["candidate"] * 4  # each recorded once
    assert sorted(r["proposal_id"] for r in rows[2:]) == sorted(KERNELS)
    devices = [json.loads(r["device_json"]) for r in rows]
    assert all(d["cpus"] in expected_blocks() and d["gpus"] == "" and d["host"] for d in devices)
    # the two that passed their checks were timed together on the actor that checked them, after every check
    timed = {r["proposal_id"]: json.loads(r["device_json"])["cpus"] for r in rows[2:]
             if r["proposal_id"] in ("ten-times", "identical")}
    said = [(info["proposal"], info["stage"]) for kind, info in events if kind == "stage"]
    for name, cpus in timed.items():
        beside = sum(1 for other in timed.values() if other == cpus)
        assert (name, timing_words(beside, beside)) in said, said
    assert [stage for name, stage in said if name == "raises"] == ["correctness (sent to Ray)"]
    assert ledger.query("select status from runs")[0]["status"] == "finished"
    # the actors' progress reaches the driver: each case and timed benchmark as it started, before the evaluation's
    # `evaluated` and its verdict (a resent evaluation's progress comes again)
    stages: dict[str, set] = {}
    for kind, info in events:
        if kind == "progress":
            stages.setdefault(info["proposal"], set()).add(info["stage"])
    assert stages.pop("(base)") == {"sizing", "correctness"}  # its benchmarks sized for the memory plan first
    assert stages == {"(control)": {"timing"}, "wrong-sign": {"correctness"},  # the control: timed only
                      "raises": {"correctness"}, "ten-times": {"correctness", "timing"},
                      "identical": {"correctness", "timing"}}
    for name in KERNELS:
        order = [kind for kind, info in events if info.get("proposal") == name and kind != "stage"]
        assert order[-2:] == ["evaluated", "verdict"] and set(order[:-2]) == {"progress"}, order


def test_gpu_actors_one_per_gpu_gated_where_there_is_none(tmp_path):
    """A GPU target keeps one actor per GPU (`num_gpus=1`): two pretend GPUs, two actors, each holding one; this
    machine has no GPU, so every actor gates the kernel stages and each candidate is recorded not run."""
    import ray

    ray.init(num_cpus=2, num_gpus=2, include_dashboard=False, log_to_driver=False)
    try:
        ledger = submit(tmp_path, {"raises": GPU_BASE.replace(ADD, "    raise RuntimeError('no')\n")}, "vecadd",
                        GPUMODE, GPU_BASE)
        events = []
        [summary] = run_round(ledger, 1, settings=settings_for(tmp_path, True, GPUMODE),
                              on_event=lambda kind, **kw: events.append((kind, kw)))
    finally:
        ray.shutdown()
    [(_, workers)] = [e for e in events if e[0] == "workers"]
    assert sorted(p["gpus"] for p in workers["places"]) == ["0", "1"] and all("cpus" not in p for p in workers["places"])
    if torch_has_no_gpu():
        assert [v.outcome for v in summary.verdicts] == ["not-run"]


def torch_has_no_gpu() -> bool:
    import torch

    return not torch.cuda.is_available()


def test_a_ray_cluster_without_gpus_is_refused_for_a_gpu_target(tmp_path):
    import ray

    ray.init(num_cpus=1, num_gpus=0, include_dashboard=False, log_to_driver=False)
    try:
        ledger = submit(tmp_path, {"raises": GPU_BASE.replace(ADD, "    raise RuntimeError('no')\n")}, "vecadd",
                        GPUMODE, GPU_BASE)
        with pytest.raises(JudgeError) as error:
            run_round(ledger, 1, settings=settings_for(tmp_path, True, GPUMODE))
        assert str(error.value) == ("the Ray cluster has no GPU: nothing to run the kernels on (start its workers "
                                    "with GPUs, or run without --ray)")
    finally:
        ray.shutdown()


def test_a_cpu_actors_place_names_its_host_cores_and_cpu():
    from judge.dispatch import describe_place

    place = {"host": "node-a", "gpus": "", "cpus": "2,3", "device": {"kind": "cpu", "name": "AMD EPYC"}, "gate": None}
    assert describe_place(place) == "node-a, CPU 2,3 (AMD EPYC)"
    assert describe_place({**place, "cpus": ""}) == "node-a, CPU unpinned (AMD EPYC): no block of its host's cores was free"
    gpu = {"host": "node-a", "gpus": "1", "device": {"name": "NVIDIA H200"}, "gate": None}
    assert describe_place(gpu) == "node-a, GPU 1 (NVIDIA H200)"


class FakeRay:
    """What cpu_actors and gpu_actors read of a cluster."""

    def __init__(self, nodes: list[dict], gpus: int = 0):
        self._nodes, self._gpus = nodes, gpus

    def nodes(self) -> list[dict]:
        return self._nodes

    def cluster_resources(self) -> dict:
        return {"CPU": sum(n["Resources"].get("CPU", 0) for n in self._nodes), "GPU": self._gpus}


def test_a_cpu_target_gets_an_actor_per_block_of_each_live_nodes_cpus():
    from judge.ray_actor import cpu_actors, gpu_actors
    from judge.targets import load_target

    cpu = load_target(ROOT / "kernels" / "vecadd_cpu")
    cluster = FakeRay([{"Alive": True, "Resources": {"CPU": 5.0}}, {"Alive": True, "Resources": {"CPU": 3.0}},
                       {"Alive": False, "Resources": {"CPU": 64.0}}, {"Alive": True, "Resources": {"GPU": 1.0}}])
    assert cpu_actors(cluster, cpu, None) == ({"num_cpus": 2}, 3)  # 2 + 1: a block is 2 CPUs, odd ones left idle
    assert gpu_actors(FakeRay([], gpus=3), cpu, None) == ({"num_gpus": 1, "num_cpus": 1}, 3)
    with pytest.raises(JudgeError) as error:
        cpu_actors(FakeRay([{"Alive": True, "Resources": {"CPU": 1.0}}] * 3), cpu, "head:6379")
    assert str(error.value) == ("the Ray cluster at head:6379 has no node with 2 CPUs: an evaluation of vecadd_cpu "
                                "needs 2 (its timed pair's 1 and one for its oracle and spares)")


def test_core_blocks_are_disjoint_counted_from_the_last_core_and_held_while_their_lock_is(monkeypatch, tmp_path):
    from judge import core_blocks
    from judge.targets import load_target

    cpu = load_target(ROOT / "kernels" / "vecadd_cpu")
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(7)))
    assert [core_blocks.block_placement(cpu, b) for b in range(4)] == [
        {"timing": [6], "others": [5]}, {"timing": [4], "others": [3]}, {"timing": [2], "others": [1]}, None]
    first, held = core_blocks.claim_block(cpu, tmp_path)
    second, other = core_blocks.claim_block(cpu, tmp_path)
    assert (first, second) == (0, 1) and len(held) == len(other) == 2
    core_blocks.release(held)  # as when the actor holding block 0 dies: the next actor started gets it
    again, held = core_blocks.claim_block(cpu, tmp_path)
    third, last = core_blocks.claim_block(cpu, tmp_path)
    full, none = core_blocks.claim_block(cpu, tmp_path)
    assert (again, third, full, none) == (0, 2, 3, [])  # all three held: the fourth pins nothing
    core_blocks.release(held + other + last)
    wider = load_target(ROOT / "kernels" / "vecadd_cpu")
    wider.cores = 2  # blocks of three cores: 4-6, then 1-3
    _, blocking = core_blocks.claim_block(cpu, tmp_path)  # block 0 of two: cores 5 and 6
    block, locked = core_blocks.claim_block(wider, tmp_path)
    assert (block, core_blocks.block_placement(wider, block)) == (1, {"timing": [2, 3], "others": [1]})
    core_blocks.release(blocking + locked)


@pytest.mark.parametrize("text,message", [
    ("0,x", "--gpus: '0,x' is neither 'all' nor a list of GPU indices such as 0,1"),
    ("1,1", "--gpus: '1,1' names a GPU twice or a negative index"),
    ("-1", "--gpus: '-1' names a GPU twice or a negative index"),
])
def test_gpus_that_cannot_be_meant_are_refused(text, message):
    from judge.dispatch import parse_gpus

    with pytest.raises(JudgeError) as error:
        parse_gpus(text)
    assert str(error.value) == message


def test_gpus_lists_and_all(monkeypatch):
    import subprocess

    from judge import dispatch

    assert dispatch.parse_gpus("2,0") == [2, 0]
    listing = "GPU 0: NVIDIA H200 (UUID: GPU-1)\nGPU 1: NVIDIA H200 (UUID: GPU-2)\n"
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: subprocess.CompletedProcess(a, 0, listing, ""))
    assert dispatch.parse_gpus("all") == [0, 1]
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: subprocess.CompletedProcess(a, 0, "", ""))
    with pytest.raises(JudgeError, match=r"^--gpus all: this machine has no NVIDIA GPU \(nvidia-smi lists none\)$"):
        dispatch.parse_gpus("all")


def test_a_target_travels_with_the_files_its_task_takes_from_beside_it(tmp_path):
    """GPU MODE's task.yml names `../utils.py`: an actor on another machine must get it too (on the two-H200
    machine the first Ray round failed in every actor with "source '../utils.py' of 'utils.py' not found")."""
    from judge.target_files import target_files, write_target
    from judge.targets import load_target

    target = load_target(ROOT / "tests" / "fixtures" / "gpumode" / "vecadd")
    files = target_files(target)
    assert files["../utils.py"] == (ROOT / "tests" / "fixtures" / "gpumode" / "utils.py").read_bytes()
    assert {"task.yml", "reference.py", "submission.py"} <= set(files)
    copy = load_target(write_target(files, tmp_path / "target", "vecadd"))
    assert copy.kernel_source() == target.kernel_source() and (tmp_path / "target" / "utils.py").is_file()
    with pytest.raises(JudgeError, match="would land outside"):
        write_target({"../../escape.py": b""}, tmp_path / "other", "vecadd")


def test_an_actor_starts_its_oracle_and_spares_before_its_first_candidate(tmp_path):
    """`warm` runs while the driver compiles; without a GPU for a GPU target it starts nothing. No base runner is
    kept: each timed pair starts a fresh base and candidate runner. Closing the actor removes its files."""
    from judge.ray_actor import EvaluationActor
    from judge.target_files import target_files
    from judge.targets import load_target

    cpu = load_target(ROOT / "kernels" / "vecadd_cpu")
    actor = EvaluationActor(target_files(cpu), "vecadd_cpu", cpu.kernel_source(), 0.5)
    try:
        actor.warm()
        assert actor.evaluator._oracle is not None and actor.evaluator._oracle.is_ready()
        assert len(actor.evaluator._pool) == actor.evaluator.spares == 2  # its spares load torch meanwhile
        actor.expect(2)  # its groups may time two candidates: the first timing here plans for them
        key, stages, _ = actor.evaluate("0", "same", cpu.kernel_source())
        assert [s.status for s in stages] == ["passed", "passed"]
        assert actor.evaluator.memory_plan().runners == 3  # the base's and two kernels'
        # a candidate checked here and one it never checked (an actor Ray started again after that check) are timed
        # together, in one group beside the base
        _, [checked], _ = actor.check("2", "checked", cpu.kernel_source())
        assert checked.status == "passed" and actor.group_size(2) == 2
        timed = actor.time_group([("2", "checked", cpu.kernel_source()), ("3", "elsewhere", cpu.kernel_source())])
        assert [(key, result.status) for key, result, _ in timed] == [("2", "passed"), ("3", "passed")]
        gate = "the round's A/A control ran out of its 5 s of timing in pair 1 (on another actor)"
        _, gated, _ = actor.evaluate("1", "gated", cpu.kernel_source(), timing_gate=gate)
        assert [(s.status, s.summary) for s in gated][1:] == [("not-run", f"not run: {gate}")]
        assert gated[0].status == "passed"  # still checked
    finally:
        tallies = actor.close()
    assert tallies["bind"][0] >= 1  # what its runner commands cost, for `judge_scale.py --events`
    assert not actor.root.exists()  # its copy of the round, spares and workspaces with it, is gone with it
    gpu = load_target(ROOT / "tests" / "fixtures" / "gpumode" / "vecadd")
    idle = EvaluationActor(target_files(gpu), "vecadd", gpu.kernel_source(), 0.5)
    try:
        if idle.gate_reason:
            idle.warm()
            assert idle.evaluator._oracle is None and idle.evaluator._pool == []
    finally:
        idle.close()


def test_a_round_says_its_control_is_timed_only():
    from judge.dispatch import kernel_stage_words
    from judge.stages.job import Job

    assert kernel_stage_words(Job(None, "(control)", "", Path("."), control=True)) == "timing"
    assert kernel_stage_words(Job(None, "a-fast", "", Path("."))) == "correctness and timing"


class Answered:
    """A fake Ray object reference to a call already answered."""

    def __init__(self, value):
        self.value = value


class FakeActors:
    """Ray's actors, pool and `ray.get`/`ray.wait` as a driver sees them, each call answered at once: the pool gives
    the jobs to the actors in turn. Each actor's calls are noted, by actor, as (method, args)."""

    def __init__(self, count: int, failing: set[str]):
        from types import SimpleNamespace

        self.calls: list[tuple[int, str, tuple]] = []
        self.failing = failing
        self.actors = [SimpleNamespace(**{method: SimpleNamespace(remote=self._method(i, method)) for method in (
            "expect", "check", "evaluate", "group_size", "time_group")}) for i in range(count)]
        self.queue, self.pending, self.idle = [], [], list(self.actors)

    def _method(self, index: int, method: str):
        from judge.stages.result import StageResult

        def call(*args):
            self.calls.append((index, method, args))
            return Answered(answer(*args))

        def answer(*args):
            place = {"actor": index}
            if method == "check":
                key, name, _ = args
                status = "failed" if name in self.failing else "passed"
                return key, [StageResult("correctness", status, f"{name} {status}", 1.0)], place
            if method == "evaluate":
                return args[0], [StageResult("timing", "passed", "the control", 2.0)], place
            if method == "group_size":
                return min(args[0], 2)
            if method == "time_group":
                return [(key, StageResult("timing", "passed", f"{name} timed by actor {index}", 3.0), place)
                        for key, name, _ in args[0]]
            return None

        return call

    # ray
    def get(self, refs):
        return [ref.value for ref in refs] if isinstance(refs, list) else refs.value

    def wait(self, refs, num_returns, timeout=None):
        return refs[:num_returns], refs[num_returns:]

    # ActorPool: an idle actor takes each job (the first idle one, an actor back at the end of the line); a job sent
    # while none is idle waits for the next one pushed back
    def submit(self, fn, value):
        if not self.idle:
            self.pending.append((fn, value))
            return
        actor = self.idle.pop(0)
        self.queue.append((fn(actor, value).value, actor))

    def has_next(self):
        return bool(self.queue)

    def get_next_unordered(self, timeout=None):
        value, actor = self.queue.pop(0)
        self.push(actor)
        return value

    def pop_idle(self):
        return self.idle.pop() if self.idle else None

    def push(self, actor):
        self.idle.append(actor)
        if self.pending:
            self.submit(*self.pending.pop(0))


def test_a_ray_round_checks_each_candidate_where_idle_and_times_those_that_pass_in_groups_where_checked():
    """The driver's side of a Ray round: a failed check comes back at once; the others wait on the actor that
    checked them and, once every job is checked, are timed there together (EvaluationActor.time_group), each actor
    sent the round's floor and its timing gate (the control that ran out of time on another actor leaves every
    candidate untimed: judge.control.timing_gate), and each candidate's `stage` says how it is timed."""
    from types import SimpleNamespace

    from judge.noise import Floor
    from judge.ray_dispatch import RayDispatch
    from judge.stages.job import Job

    fake = FakeActors(2, failing={"wrong"})
    events = []
    dispatch = object.__new__(RayDispatch)
    floor = Floor(effect=0.05, min_effect=0.01, source="controls", controls=1)
    dispatch.run = SimpleNamespace(floor=floor, timing_gate="the round's A/A control ran out of its 600 s",
                                   candidates=5, on_event=lambda kind, **info: events.append((kind, info)))
    dispatch.ray, dispatch.pool, dispatch.actors, dispatch._checked_on = fake, fake, fake.actors, {}
    dispatch._evaluated = lambda name, stages: events.append(("evaluated", {"proposal": name}))
    names = ["a", "wrong", "b", "c", "d"]
    came = [(job.name, [s.summary for s in stages], place) for job, stages, place in dispatch.evaluate(
        Job(None, name, f"source of {name}", Path(".")) for name in names)]
    # actor 0 checked a, b and d; actor 1 wrong and c: wrong first, at once, then each actor's group
    assert came == [("wrong", ["wrong failed"], {"actor": 1}),
                    ("a", ["a passed", "a timed by actor 0"], {"actor": 0}),
                    ("b", ["b passed", "b timed by actor 0"], {"actor": 0}),
                    ("d", ["d passed", "d timed by actor 0"], {"actor": 0}),
                    ("c", ["c passed", "c timed by actor 1"], {"actor": 1})]
    gate = "the round's A/A control ran out of its 600 s"
    assert [(i, method, args) for i, method, args in fake.calls if method in ("group_size", "time_group")] == [
        (0, "group_size", (3,)), (1, "group_size", (1,)),
        (0, "time_group", ([("0", "a", "source of a"), ("2", "b", "source of b"), ("4", "d", "source of d")],
                           floor.to_json(), gate)),
        (1, "time_group", ([("3", "c", "source of c")], floor.to_json(), gate))]
    said = [(info["proposal"], info["stage"]) for kind, info in events if kind == "stage"]
    assert said == [(name, "correctness (sent to Ray)") for name in names] + [
        (name, "timing, 3 kernels in process groups of 2 beside the base") for name in "abd"] + [("c", "timing")]
    # a control goes to an actor with its floor and gate, timed by the controls' rule for the verdicts it serves
    control = Job(None, "(control)", "source", Path("."), control=True, serves=4)
    [(job, stages, _)] = dispatch.evaluate([control])
    assert job is control and [s.summary for s in stages] == ["the control"]
    # its actor told first how many candidates its groups may time (5 over 2 actors), for the plan its timing makes
    assert fake.calls[-2:] == [(0, "expect", (3,)),
                               (0, "evaluate", ("0", "(control)", "source", floor.to_json(), True, gate, 4))]


def test_a_ray_round_times_the_checked_candidates_where_the_next_compile_keeps_them_waiting_and_checks_later_ones_beside():
    """As a local round (judge.local_groups): with no check out, the candidates held wait for the next compile
    MIN_PAIRS times their mean check; where it does not end by then each actor times those it holds, out of the pool,
    and a later candidate is checked on the actor that is not timing, in a group after them. A failed check is the
    last before the slow compile here, as on vectoradd_py's H200 round (2026-12-01)."""
    from types import SimpleNamespace

    from judge.noise import Floor
    from judge.ray_dispatch import RayDispatch
    from judge.stages.job import Job

    fake, events, waits = FakeActors(2, failing={"wrong"}), [], []
    dispatch = object.__new__(RayDispatch)
    dispatch.run = SimpleNamespace(floor=Floor(effect=0.05, min_effect=0.01, source="controls", controls=1),
                                   timing_gate=None, candidates=4,
                                   on_event=lambda kind, **info: events.append((kind, info)))
    dispatch.ray, dispatch.pool, dispatch.actors, dispatch._checked_on = fake, fake, fake.actors, {}
    dispatch._evaluated = lambda name, stages: events.append(("evaluated", {"proposal": name}))

    class Compiles:  # "a" and "wrong" compile at once; "late" after the held candidates' wait
        def __init__(self):
            self.jobs = [Job(None, name, f"source of {name}", Path(".")) for name in ("a", "wrong", "late")]

        def __iter__(self):
            return iter(self.jobs)

        def wait_next(self, seconds):
            waits.append(seconds)
            return seconds == 0 and len(waits) != 2  # "late" is not ready, nor within the wait, after "wrong"

    came = [(job.name, [s.summary for s in stages], place) for job, stages, place in dispatch.evaluate(Compiles())]
    assert came == [("wrong", ["wrong failed"], {"actor": 1}),
                    ("a", ["a passed", "a timed by actor 0"], {"actor": 0}),
                    ("late", ["late passed", "late timed by actor 1"], {"actor": 1})]
    assert waits[:3] == [0, 0, 3 * 1.0]  # the wait: MIN_PAIRS times a's one-second check
    timed = [(i, method) for i, method, args in fake.calls if method in ("check", "time_group")]
    assert timed == [(0, "check"), (1, "check"), (0, "time_group"), (1, "check"), (1, "time_group")]
    said = [(info["proposal"], info["stage"]) for kind, info in events if kind == "stage"]
    assert said == [("a", "correctness (sent to Ray)"), ("wrong", "correctness (sent to Ray)"), ("a", "timing"),
                    ("late", "correctness (sent to Ray)"),
                    ("late", "timing, after the candidates whose compiles ended first")]


def test_a_control_that_ran_out_of_time_is_timed_again_by_the_next_run(tmp_path):
    """Its round's candidates were left untimed on its account; a run with a longer limit times them only if it
    times the control again. Any other standing control is kept."""
    from types import SimpleNamespace

    from judge.control import control_job
    from judge.targets import load_target

    target = load_target(ROOT / "kernels" / "vecadd_cpu")

    def run_with(outcome):
        ledger = SimpleNamespace(control_evaluation=lambda round_id: {"outcome": outcome},
                                 measured_base=lambda *args: None)
        return SimpleNamespace(gate=None, stale=lambda previous: False, ledger=ledger, target=target,
                               round_row={"id": 1, "base_source": target.kernel_source(), "base_sha256": "ab"},
                               root=tmp_path, candidates=3, settings=SimpleNamespace(again=False), device=None)

    again = control_job(run_with("timed-out"))
    assert again is not None and again.job.control and (tmp_path / "control" / target.kernel_file).is_file()
    assert again.job.serves == 3  # the candidates the run may time, whose verdicts its floor serves
    assert control_job(run_with("unchanged")) is None
