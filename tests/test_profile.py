"""Issue 41, where the time goes: ncu's CSV read into kernels, the bound lines the brief names, the profiles and
device peaks the ledger keeps (and reuses), the brief's profile section, `judge profile --json`, and a round that
carries on when its profile fails. No runner starts here (tests/test_profile_cpu.py profiles vecadd_cpu for real)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from judge import profiles
from judge.ledger import Ledger, sha256
from judge.records import Proposal
from judge.report.brief import brief_view, render_brief
from judge.stages.profile import ncu, stage
from judge.stages.profile.bounds import bound_lines
from judge.stages.profile.model import BenchmarkProfile, KernelShare, Profile
from judge.stages.profile.peaks import Peaks
from judge.targets import load_target
from judge.wire import WireProfile

FIXTURES = Path(__file__).parent / "fixtures"
AXPY = FIXTURES / "axpy"
H100 = Peaks("NVIDIA H100 80GB HBM3", "fp8", 3000.0, 1200.0, "2.13.0", 1979.0)
GEMM = "void fp8_grouped_gemm<128, 128>(Params)"


def test_ncu_raw_csv_is_read_past_its_own_lines_with_units_separators_and_missing_metrics():
    kernels = ncu.parse_csv((FIXTURES / "profile" / "ncu_raw.csv").read_text())
    assert [k["name"] for k in kernels] == [GEMM, "void at::native::vectorized_elementwise_kernel<4, at::native::"
                                            "FillFunctor<float>>(int, at::native::FillFunctor<float>)", GEMM]
    first, fill, last = kernels
    assert first == {"name": GEMM, "time_us": 1234.5, "dram_gbps": 1250.0, "dram_pct": 36.96, "tensor_pct": 61.2,
                     "occupancy_pct": 18.75,
                     "stalls": [["long_scoreboard", 2.1], ["math_pipe_throttle", 0.95], ["wait", 0.8]]}
    # gmma "n/a" and hmma 0: the pipe's 0; stalls of 0 and empty cells left out, "not_issued" never a reason
    assert (fill["tensor_pct"], fill["dram_gbps"], fill["stalls"]) == (0.0, 2750.0, [["long_scoreboard", 1.5],
                                                                                     ["wait", 0.25]])
    assert (last["tensor_pct"], last["time_us"], last["dram_gbps"]) == (62.0, 1200.5, 1500.0)


def test_ncu_output_without_a_table_or_with_ragged_rows_gives_what_it_can_and_never_raises():
    assert ncu.parse_csv("") == []
    assert ncu.parse_csv("==PROF== No kernels were profiled.\n") == []
    ragged = '"ID","Kernel Name","gpu__time_duration.sum"\n"0","k","1,000"\n"1"\n'
    assert ncu.parse_csv(ragged) == [{"name": "k", "time_us": 1.0, "dram_gbps": None, "dram_pct": None,
                                      "tensor_pct": None, "occupancy_pct": None, "stalls": []}]


def test_ncu_launches_the_runner_profiling_only_the_bracketed_calls():
    command = ncu.launcher("/usr/local/cuda/bin/ncu", Path("/j/ncu-0.ncu-rep"))
    assert command[:9] == ["/usr/local/cuda/bin/ncu", "--export", "/j/ncu-0.ncu-rep", "--force-overwrite",
                           "--profile-from-start", "off", "--target-processes", "all", "--launch-count"]
    assert command[-2:] == ["--metrics", ",".join(ncu.METRICS)]
    assert [command[i + 1] for i, part in enumerate(command) if part == "--section"] == list(ncu.SECTIONS)
    assert command[command.index("--clock-control") + 1] == "none"  # times comparable with the call's own
    assert "--metrics" not in ncu.launcher("ncu", Path("r.ncu-rep"), metrics=False)


def test_why_ncu_failed_is_its_own_first_error_line():
    log = ("==PROF== Connected to process 7\n==WARNING== Backing up device memory in system memory.\n"
           "==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU Performance Counters\n")
    assert ncu.complaint(log) == ("==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA "
                                  "GPU Performance Counters")
    assert ncu.complaint("==WARNING== only this\n") == "==WARNING== only this"
    assert ncu.complaint("torch says hi\n") is None


def test_judge_ncu_names_ncu_or_hides_it(monkeypatch):
    monkeypatch.setenv("JUDGE_NCU", "none")
    assert ncu.find() is None
    monkeypatch.setenv("JUDGE_NCU", "/opt/nsight/ncu")
    assert ncu.find() == "/opt/nsight/ncu"


def test_kernels_of_one_name_are_one_row_weighted_by_their_time():
    shares = stage._ncu_shares(ncu.parse_csv((FIXTURES / "profile" / "ncu_raw.csv").read_text()), calls=1)
    gemm = shares[0]
    assert (gemm.name, gemm.launches, gemm.us, gemm.stalls[0]) == (GEMM, 2.0, 2435.0, ["long_scoreboard", 2.1])
    assert gemm.dram_gbps == round((1250 * 1234.5 + 1500 * 1200.5) / 2435, 3)
    assert gemm.tensor_pct == round((61.2 * 1234.5 + 62.0 * 1200.5) / 2435, 3)
    assert shares[1].us == 3.25


def kernel(name, launches, us, share, dram=None, tensor=None, stalls=(), occupancy=None):
    return KernelShare(name, launches, us, share, dram_of_peak=dram, tensor_of_peak=tensor, stalls=list(stalls),
                       occupancy_pct=occupancy)


def test_the_two_bounds_nearest_are_named_tensor_before_launches_for_a_gemm():
    bench = BenchmarkProfile(0, "g=8", call_us=2700.0, kernels=[
        kernel(GEMM, 2, 2435.0, 0.9, dram=0.37, tensor=0.75, stalls=[["long_scoreboard", 2.1]], occupancy=18.75),
        kernel("fill", 1, 3.2, 0.0012, dram=0.83, tensor=0.0)])
    assert bound_lines(bench, H100) == [
        "tensor cores: 75% of the measured FP8 peak over 1 kernel taking 90% of the call",
        "launch/latency: 1 of its 3 launches a call take under 5 us each; the GPU busy 90% of the call"]


def test_a_call_whose_gpu_is_mostly_idle_names_the_host_before_the_tensor_cores():
    # the FP8 base's benchmark 0 under ncu on an H100 (2026-11-27): one 116 us kernel in a 370 us call
    bench = BenchmarkProfile(0, "m=64..248", call_us=369.6, kernels=[
        kernel(GEMM, 1, 115.9, 0.31, dram=0.12, tensor=0.68, stalls=[["long_scoreboard", 3.66]], occupancy=14.0)])
    assert bound_lines(bench, H100) == [
        "host/launch: the GPU busy 31% of the call (1 launch a call); the other 69% is host work and launch latency",
        "tensor cores: 68% of the measured FP8 peak over 1 kernel taking 31% of the call"]


@pytest.mark.parametrize("clock, share, first", [
    ("gpu", 0.9347, "tensor cores: 68% of the measured FP8 peak over 1 kernel taking 93% of the call"),
    ("call", 0.3136, "host/launch: the GPU busy 31% of the call (1 launch a call); the other 69% is host work and "
                     "launch latency")])
def test_shares_are_of_the_clock_the_verdict_reads(clock, share, first):
    # the FP8 base on an H100 (2026-11-27): a 116 us kernel, 124 us on the GPU clock, 370 us with the host's launch
    bench = BenchmarkProfile(0, "m=64..248", call_us=369.6, gpu_us=124.0, kernels=[
        kernel(GEMM, 1, 115.9, None, tensor=None, stalls=[["long_scoreboard", 3.66]], occupancy=14.0)])
    bench.kernels[0].tensor_pct = 46.5
    target = SimpleNamespace(deciding_clock=clock, benchmarks=[{"m": 64}], distributions=[SimpleNamespace(name="d")])
    evaluator = SimpleNamespace(target=target, plan=lambda case: {"input_bytes": 0, "output_bytes": 0})
    stage._finish(bench, evaluator, Peaks("H100", "fp8", 3000.0, 1456.4, "2.11", 2141.06), on_cpu=False)
    assert bench.kernels[0].share == share
    assert bench.bounds[0] == first


def test_a_memory_bound_benchmark_names_its_dram_fraction_and_nothing_it_is_far_from():
    bench = BenchmarkProfile(1, "n=1M", call_us=100.0, kernels=[kernel("add", 1, 50.0, 0.5, dram=0.41),
                                                                kernel("copy", 1, 43.0, 0.43, dram=0.41)])
    assert bound_lines(bench, H100) == ["memory: 41% of the measured DRAM peak over 2 kernels taking 93% of the call"]


def test_without_ncu_the_memory_bound_is_the_inputs_and_outputs_over_the_call():
    bench = BenchmarkProfile(0, "n=1M", call_us=10.0, io_gbps=1200.0, kernels=[kernel("add", 1, 9.6, 0.96)])
    assert bound_lines(bench, H100) == [
        "memory: its inputs and outputs, read and written once, come to 40% of the measured DRAM peak over the call "
        "(a floor: no per-kernel bandwidth without ncu)"]


def test_on_a_cpu_the_bounds_are_where_the_host_time_goes():
    bench = BenchmarkProfile(0, "size=4", call_us=26.0, kernels=[kernel("aten::add", 1, 21.6, 0.83),
                                                                 kernel("aten::empty", 1, 1.2, 0.046),
                                                                 kernel("aten::copy_", 1, 0.5, 0.02)])
    assert bound_lines(bench, None, on_cpu=True) == [
        "host: aten::add takes 83% of the call (21.6 us self time, 1 per call)",
        "host: aten::empty takes 5% of the call (1.2 us self time, 1 per call)"]


def ncu_profile() -> Profile:
    gemm = kernel(GEMM, 2, 2435.0, 0.9, dram=0.4167, tensor=0.75, stalls=[["long_scoreboard", 2.1], ["wait", 0.8]],
                  occupancy=18.75)
    gemm.dram_gbps, gemm.tensor_pct = 1250.0, 61.2
    bench = BenchmarkProfile(0, "g=8", call_us=2700.0, kernels=[gemm], bounds=["tensor cores: 75% of the measured "
                                                                              "FP8 peak over 1 kernel taking 90% of "
                                                                              "the call"])
    return Profile("ok", tool="ncu", device="NVIDIA H100 80GB HBM3", versions={"torch": "2.13.0", "ncu": "2025.1.0"},
                   peaks=H100.to_json(), benchmarks=[bench])


def test_migration_m008_keeps_profiles_by_kernel_text_and_device_and_peaks_by_device(tmp_path):
    ledger = Ledger(tmp_path / "ledger.db")
    assert {"profiles", "device_peaks"} <= set(ledger.db.table_names())
    failed = Profile("unavailable", reason="crashed: boom").to_json()
    ledger.record_profile(target="t", kernel_sha256="abc", subject="base", device="H100", profile=failed)
    assert ledger.stored_profile("t", "abc", "H100") is None  # a failure is profiled again next time
    assert ledger.stored_profile("t", "abc", usable_only=False)["reason"] == "crashed: boom"
    kept = ledger.record_profile(target="t", kernel_sha256="abc", subject="base", device="H100",
                                 profile=ncu_profile().to_json())
    assert ledger.stored_profile("t", "abc", "H100")["id"] == kept
    assert ledger.stored_profile("t", "abc", "A100") is None
    row = ledger.query("select tool, torch_version, ncu_version from profiles where id = ?", (kept,))[0]
    assert row == {"tool": "ncu", "torch_version": "2.13.0", "ncu_version": "2025.1.0"}
    ledger.record_device_peaks(H100.to_json(), "fp8")
    ledger.record_device_peaks({**H100.to_json(), "dram_gbps": 3100.0}, "fp8")
    assert ledger.device_peaks("NVIDIA H100 80GB HBM3", "fp8")["dram_gbps"] == 3100.0
    assert ledger.device_peaks("NVIDIA H100 80GB HBM3", "bf16") is None


@pytest.fixture
def faked(monkeypatch):
    """profile_source with this machine a fake H100 whose peaks cannot be measured and whose profile is ncu_profile;
    the sources profiled are collected."""
    profiled = []

    def fake_kernel(target, workspace, root, **kwargs):
        profiled.append((Path(workspace) / target.kernel_file).read_text())
        return ncu_profile()

    def no_peaks(family):
        raise RuntimeError("measuring the device's peaks failed (crashed): no CUDA GPU")

    monkeypatch.setattr(profiles, "device_here", lambda target: "NVIDIA H100 80GB HBM3")
    monkeypatch.setattr(profiles, "measure", no_peaks)
    monkeypatch.setattr(stage, "profile_kernel", fake_kernel)
    return profiled


def test_a_kernel_text_profiled_on_a_device_is_not_profiled_again(tmp_path, faked):
    ledger = Ledger(tmp_path / "ledger.db")
    target = load_target(AXPY)
    first = profiles.profile_source(ledger, target, "x = 1\n", "base", tmp_path / "p")
    assert (first["reused"], faked) == (False, ["x = 1\n"])
    assert first["profile"]["notes"] == ["measuring the device's peaks failed (crashed): no CUDA GPU"]
    again = profiles.profile_source(ledger, target, "x = 1\n", "base", tmp_path / "p")
    assert (again["reused"], again["profile_id"], len(faked)) == (True, first["profile_id"], 1)


def test_a_round_whose_profile_fails_says_so_in_one_line_and_goes_on(monkeypatch, tmp_path):
    def broken(*args, **kwargs):
        raise RuntimeError("the oracle could not start")

    monkeypatch.setattr(profiles, "profile_source", broken)
    events = []
    run = SimpleNamespace(settings=SimpleNamespace(profile=True), gate=None, target=SimpleNamespace(name="axpy"),
                          round_row={"id": 1, "base_source": "x"}, root=tmp_path, base_dir=tmp_path / "base",
                          ledger=SimpleNamespace(latest_evaluation=lambda *a, **k: {"outcome": "unchanged"}))
    profiles.profile_round_base(run, True, lambda kind, **info: events.append((kind, info)))
    assert events == [("stage", {"proposal": "(base)", "stage": "profile"}),
                      ("profile", {"target": "axpy", "proposal": "(base)",
                                   "line": "profile unavailable: RuntimeError: the oracle could not start"})]
    events.clear()
    profiles.profile_round_base(run, False, lambda kind, **info: events.append((kind, info)))  # interrupted: none
    assert events == []


def test_the_brief_shows_the_bases_profile_per_benchmark(tmp_path):
    ledger = Ledger(tmp_path / "ledger.db")
    target = load_target(AXPY)
    view = brief_view(ledger, target, 1)
    assert view["profile"] is None
    ledger.record_profile(target="axpy", kernel_sha256=sha256(target.kernel_source()), subject="base",
                          device="NVIDIA H100 80GB HBM3", profile=ncu_profile().to_json())
    view = brief_view(ledger, target, 1)
    assert view["profile"]["benchmarks"][0]["kernels"][0]["dram_of_peak"] == 0.4167
    assert WireProfile.model_validate(view["profile"]).model_dump() == view["profile"]  # as `judge serve` sends it
    text = render_brief(view, tmp_path).read_text()
    section = text[text.index("### Inside a call"):text.index("## What was tried")]
    day = view["profile"]["created_at"][:10]
    assert section.splitlines()[2:] == [
        f"profiled with ncu on NVIDIA H100 80GB HBM3, {day} (torch 2.13.0, ncu 2025.1.0).",
        "- Measured peaks of this device: DRAM 3,000 GB/s (a 1 GiB copy), tensor cores 1,200 TFLOPS (FP8 matmul; "
        "1,979 on paper)",
        "",
        "**Benchmark 0 (g=8)**: 2700 us a call",
        "",
        "- tensor cores: 75% of the measured FP8 peak over 1 kernel taking 90% of the call",
        "",
        "| kernel | per call | us | share of call | DRAM GB/s | of DRAM peak | tensor pipe | of tensor peak | occupancy "
        "| top stalls (cycles per instruction) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|",
        "| void fp8_grouped_gemm&lt;128, 128>(Params) | 2 | 2435 | 90% | 1,250 | 42% | 61% | 75% | 19% | "
        "long_scoreboard 2.1, wait 0.8 |",
        ""]


def test_judge_profile_json_gives_a_candidates_profile_and_then_reuses_it(judge_env, faked):
    judge, root = judge_env
    base = (AXPY / "submission.py").read_text()
    lines = base.splitlines()
    patch = (f"--- a/submission.py\n+++ b/submission.py\n@@ -6,2 +6,2 @@\n {lines[5]}\n-{lines[6]}\n+CHUNKS = 4\n")
    ledger = Ledger(root / "ledger.db")
    ledger.submit(Proposal(id="chunks", title="more chunks", author="team", round=1, target="axpy", pitch="why",
                           patch=patch), "test")
    result = judge("profile", "--proposal", "chunks", "--json")
    assert result.exit_code == 0, result.output
    answer = json.loads(result.output)
    patched = base.replace("CHUNKS = 1", "CHUNKS = 4")
    assert faked == [patched]
    assert {k: v for k, v in answer.items() if k != "profile"} == {
        "target": "axpy", "subject": "candidate", "kernel_sha256": sha256(patched), "device": "NVIDIA H100 80GB HBM3",
        "reused": False, "profile_id": 1, "proposal": "chunks", "revision": 1, "round": 1}
    bench = answer["profile"]["benchmarks"][0]
    assert (answer["profile"]["status"], answer["profile"]["tool"], bench["bounds"]) == (
        "ok", "ncu", ["tensor cores: 75% of the measured FP8 peak over 1 kernel taking 90% of the call"])
    assert sorted(bench["kernels"][0]) == ["dram_gbps", "dram_of_peak", "launches", "name", "occupancy_pct", "share",
                                           "stalls", "tensor_of_peak", "tensor_pct", "us"]
    text = judge("profile", "--proposal", "chunks")
    assert text.output.splitlines() == [
        "axpy, chunks r1: profiled with ncu on NVIDIA H100 80GB HBM3 (kept from an earlier profile of the same text)",
        "  note: measuring the device's peaks failed (crashed): no CUDA GPU",
        "benchmark 0 (g=8): 2700.0 us a call",
        "  tensor cores: 75% of the measured FP8 peak over 1 kernel taking 90% of the call",
        f"     90% {GEMM} (2x, 2435.0 us)"]
    assert judge("profile", "--proposal", "nope").output == "error: proposal nope is not in the ledger\n"


def test_a_round_profiles_its_base_after_its_verdicts_and_its_scorecard_shows_it(tmp_path, monkeypatch, faked):
    import os

    from fakestages import FakeStages

    from judge.cli.progress import progress_line
    from judge.report.rendering import render_round
    from judge.rounds import Settings, run_round

    kernels = tmp_path / "kernels"
    kernels.mkdir()
    os.symlink(AXPY, kernels / "axpy")
    ledger = Ledger(tmp_path / "ledger.db")
    settings = Settings(kernels_dir=kernels, work_dir=tmp_path / "work", cache_dir=tmp_path / "cache",
                        stages=FakeStages(), profile=True)
    events = []
    [summary] = run_round(ledger, 1, target=load_target(kernels / "axpy"), settings=settings,
                          on_event=lambda kind, **info: events.append((kind, info)))
    kinds = [kind for kind, _ in events]
    assert kinds[-2:] == ["stage", "profile"] and events[-1][1]["line"] == "profiled with ncu on NVIDIA H100 80GB HBM3"
    assert faked == [(AXPY / "submission.py").read_text()]  # the round's base, once
    text = render_round(ledger, 1, tmp_path / "reports").read_text()
    assert "## Where the base's time goes (its profile)\n\nprofiled with ncu on NVIDIA H100 80GB HBM3, " in text
    assert "- tensor cores: 75% of the measured FP8 peak over 1 kernel taking 90% of the call\n" in text
    assert progress_line({"proposal": "(base)", "stage": "profile", "benchmark": 1, "benchmarks": 2, "label": "n=1",
                          "seconds": 3.0}) == "  (base): profile, benchmark 1 of 2 (n=1), 3.0 s so far"


def test_ncu_2025s_own_csv_from_an_h100_gives_bandwidth_tensor_pipes_and_occupancy():
    # the columns judge reads, as Nsight Compute 2025.3.1 wrote them on an H100 (2026-11-27): its units row says
    # "byte/s", which an earlier parser did not know, and the brief showed no DRAM number at all
    kernels = ncu.parse_csv((FIXTURES / "profile" / "ncu_raw_h100.csv").read_text())
    assert [k["name"][:20] for k in kernels] == ["void at::<unnamed>::"] * 3 + ["nvjet_sm90_tst_256x1"]
    gemm = kernels[3]
    assert gemm["time_us"] == pytest.approx(210.752)
    assert gemm["dram_gbps"] == pytest.approx(836.29881566960)
    assert (gemm["dram_pct"], gemm["tensor_pct"], gemm["occupancy_pct"]) == (24.95, 94.89, 14.64)
    assert kernels[2]["dram_gbps"] == pytest.approx(1265.93236714976)


def test_a_rounds_profile_of_its_base_takes_a_share_of_the_rounds_own_time():
    from judge.profiles import round_profile_s

    assert round_profile_s(60.0) == 15.0  # a short round: its first benchmark may still finish (the stage's rule)
    assert round_profile_s(2000.0) == 500.0  # a quarter of a long round (cholesky_py's ran past 500 s)
    assert round_profile_s(10_000.0) == 900.0  # never past the stage's own limit


def test_a_profile_that_left_benchmarks_out_for_want_of_time_is_gone_on_with_next_time(tmp_path, monkeypatch):
    """A round's profile takes a quarter of the round's time; what it leaves out, the next round's profile of the same
    base profiles, and the ledger's profile is then whole."""
    asked = []

    def fake_kernel(target, workspace, root, indices=None, **kwargs):
        asked.append(indices)
        done = [BenchmarkProfile(i, f"n={i}", call_us=10.0 * (i + 1)) for i in (indices or range(4))][:2]
        left = [BenchmarkProfile(i, f"n={i}", error=f"{stage.OUT_OF_TIME} after 30 s")
                for i in (indices or range(4))[2:]]
        return Profile("ok", tool="ncu", device="NVIDIA H100 80GB HBM3", benchmarks=done + left)

    monkeypatch.setattr(profiles, "device_here", lambda target: "NVIDIA H100 80GB HBM3")
    monkeypatch.setattr(profiles, "peaks_for", lambda *args: None)
    monkeypatch.setattr(stage, "profile_kernel", fake_kernel)
    ledger, target = Ledger(tmp_path / "ledger.db"), load_target(AXPY)
    first = profiles.profile_source(ledger, target, "x = 1\n", "base", tmp_path / "p")
    assert Profile.from_json(first["profile"]).line == "profiled with ncu on NVIDIA H100 80GB HBM3 (2 of 4 benchmarks)"
    second = profiles.profile_source(ledger, target, "x = 1\n", "base", tmp_path / "p")
    assert asked == [None, [2, 3]] and not second["reused"] and second["profile_id"] != first["profile_id"]
    whole = Profile.from_json(second["profile"])
    assert [(b.index, b.call_us, b.error) for b in whole.benchmarks] == [
        (0, 10.0, None), (1, 20.0, None), (2, 30.0, None), (3, 40.0, None)]
    assert whole.line == "profiled with ncu on NVIDIA H100 80GB HBM3"
    third = profiles.profile_source(ledger, target, "x = 1\n", "base", tmp_path / "p")
    assert third["reused"] and third["profile_id"] == second["profile_id"] and len(asked) == 2


class _Clock:
    """time.monotonic for the profile stage, moved on by hand."""

    def __init__(self):
        self.now = 1000.0

    def monotonic(self):
        return self.now


def _ncu_stage_with(monkeypatch, seconds_each: float, fail_at: int | None = None):
    """stage._under_ncu over four benchmarks, each taking `seconds_each` on a clock of its own (benchmark `fail_at`
    fails once the deadline has passed, as a runner that ran past it does)."""
    clock = _Clock()
    monkeypatch.setattr(stage, "time", clock)
    target = SimpleNamespace(benchmarks=[{}] * 4, benchmark_label=lambda i: f"n={i}")

    def one(evaluator, workspace, ncu_path, index, metrics, deadline):
        clock.now += seconds_each
        if index == fail_at:
            clock.now = max(clock.now, deadline)
            raise RuntimeError("timed-out: ran past the stage's time limit; the runner's log ends: ...")
        return BenchmarkProfile(index, f"n={index}", call_us=10.0)

    monkeypatch.setattr(stage, "_one_under_ncu", one)
    return stage._under_ncu(SimpleNamespace(target=target), Path("w"), "ncu", clock.now + 100.0,
                            lambda **info: None, [], [0, 1, 2, 3])


def test_a_profile_whose_time_runs_out_under_ncu_keeps_the_benchmarks_it_profiled(monkeypatch):
    # 40 s each, 100 s in all: after two, 20 s are left, less than one takes; the third is not started
    benchmarks = _ncu_stage_with(monkeypatch, 40.0)
    assert [(b.index, b.error) for b in benchmarks] == [
        (0, None), (1, None), (2, "not profiled: the profile's time ran out after 80 s"),
        (3, "not profiled: the profile's time ran out after 80 s")]
    profile = Profile("ok", tool="ncu", device="NVIDIA H200", benchmarks=benchmarks)
    assert profile.line == "profiled with ncu on NVIDIA H200 (2 of 4 benchmarks)"
    # one that runs past the deadline itself: those before it are kept
    benchmarks = _ncu_stage_with(monkeypatch, 30.0, fail_at=2)
    assert [b.error for b in benchmarks] == [None, None] + ["not profiled: the profile's time ran out after 100 s"] * 2
    # with nothing profiled yet, a failure is ncu's, as before: the stage falls back to torch.profiler
    with pytest.raises(RuntimeError, match="timed-out"):
        _ncu_stage_with(monkeypatch, 10.0, fail_at=0)
    # the first benchmark may finish past the profile's time (up to NCU_BUDGET_S): the others are left for later
    benchmarks = _ncu_stage_with(monkeypatch, 150.0)
    assert [b.error for b in benchmarks] == [None] + ["not profiled: the profile's time ran out after 150 s"] * 3
