"""judge/stages/check.py: each kernel variant of the vecadd fixture gets its verdict from the oracle.

On a CPU the fixture runs as a CPU target (its inputs live on the CPU), so that the whole stage, runner and
oracle processes included, is tested everywhere; the `gpu` tests run the same table on a real GPU.
"""

import os
import re
import time
from pathlib import Path

import pytest

from judge.stages.check import check, run_correctness
from judge.stages.evaluation import Evaluator, derive
from judge.targets import load_target
from judge.sandbox.confine import landlock_abi

# The cases' seeds are the round's where runners are confined by Landlock, else the evaluation's (nonce 0 here).
WHOSE = "case" if landlock_abi() > 0 else 0

FIXTURE = Path(__file__).parent / "fixtures" / "gpumode" / "vecadd"
VARIANTS = FIXTURE / "variants"
SMALL_BENCHMARKS = [{"size": 20000, "seed": 1}, {"size": 40000, "seed": 2}]


def cuda_available() -> bool:
    torch = pytest.importorskip("torch")
    return torch.cuda.is_available()


def cpu_target():
    target = load_target(FIXTURE)
    target.arch = "cpu"
    target.benchmarks = SMALL_BENCHMARKS
    return target


def judge_variant(target, variant: str, tmp_path: Path, timeout_s: float = 120, secret: int = 7, progress=None):
    workspace = target.assemble(tmp_path / variant, (VARIANTS / f"{variant}.py").read_text())
    with Evaluator(target, tmp_path / "round", secret=secret) as evaluator:
        result = check(evaluator, workspace, timeout_s=timeout_s, nonce=0, progress=progress or (lambda **_: None))
    return result


def test_not_run_without_a_gpu(tmp_path):
    if cuda_available():
        pytest.skip("this machine has a GPU")
    target = load_target(FIXTURE)
    result = run_correctness(target, target.assemble(tmp_path / "correct", target.kernel_source()))
    assert result.status == "not-run"
    assert result.summary == "not run: needs a CUDA GPU, this machine has none"


def test_correct_passes_on_secret_seeds(tmp_path):
    said = []
    result = judge_variant(cpu_target(), "correct", tmp_path, progress=lambda **info: said.append(info))
    assert result.status == "passed", result.summary + result.log_tail
    assert result.summary == "8 of 8 checks passed (3 tests x 2 seeds + 2 benchmarks)"
    # progress: each case as it starts, with the stage's seconds so far
    assert [(i["stage"], i["case"], i["cases"]) for i in said] == [("correctness", n, 8) for n in range(1, 9)]
    assert [i["seconds"] for i in said] == sorted(i["seconds"] for i in said)
    cases = result.detail.cases
    expected_seeds = [derive(7, WHOSE, "test", i, call, "default") for i in range(3) for call in (1, 2)]
    expected_seeds += [derive(7, WHOSE, "benchmark", j, "default") for j in range(2)]
    assert [c.seed for c in cases] == expected_seeds
    assert not {4242, 4243, 5236, 1001, 1, 2} & {c.seed for c in cases}  # task.yml's public seeds are not used
    assert [(c.kind, c.test, c.call) for c in cases] == [
        ("test", 0, 1), ("test", 0, 2), ("test", 1, 1), ("test", 1, 2), ("test", 2, 1), ("test", 2, 2),
        ("benchmark", 0, 1), ("benchmark", 1, 1)]
    assert all(c.poisoned == ["[2]"] for c in cases)  # the preallocated output, found by the oracle
    assert all(c.check_implementation == {"passed": True, "message": ""} for c in cases)
    assert result.detail.tolerance == {"rtol": 1e-6, "atol": 1e-6}
    assert result.detail.confinement["filesystem"]
    assert (tmp_path / "correct" / "worker.log").exists()


def test_wrong_fails_with_mismatches(tmp_path):
    result = judge_variant(cpu_target(), "wrong", tmp_path)
    assert result.status == "failed"
    seed = derive(7, WHOSE, "test", 0, 1, "default")
    assert result.summary.startswith(  # one failed check decides
        f"check 1 of 8 failed (the 7 after it not run): test 0 (size=127), first call (seed {seed}): output: ")
    assert (len(result.detail.cases), result.detail.planned) == (1, 8)
    first = result.detail.cases[0].outputs[0]
    assert first["mismatched"] > 100 and first["nonfinite"] == 0
    assert 1e-4 < first["max_abs_err"] < 1e-2  # 0.001 * |b|
    mismatch = first["first_mismatches"][0]
    assert set(mismatch) == {"index", "got", "expected"}
    assert abs(mismatch["got"] - mismatch["expected"]) > 1e-6


def test_partial_write_fails_on_poison(tmp_path):
    result = judge_variant(cpu_target(), "partial", tmp_path)
    assert result.status == "failed"
    first = result.detail.cases[0]
    assert first.reason.startswith("output has 64 NaN/Inf of 127 elements")
    assert first.outputs[0]["first_mismatches"][0]["index"] == [63]
    assert first.outputs[0]["first_mismatches"][0]["got"] == "nan"


def test_cache_is_stale_on_the_second_call(tmp_path):
    result = judge_variant(cpu_target(), "cached", tmp_path)
    assert result.status == "failed"
    verdicts = [(c.kind, c.call, c.passed) for c in result.detail.cases]
    assert verdicts == [("test", 1, True), ("test", 2, False)]  # the check stops at the first that fails
    seed = derive(7, WHOSE, "test", 0, 2, "default")
    assert result.summary.startswith(f"check 2 of 8 failed (the 6 after it not run): test 0 (size=127), second call (seed {seed})")


def test_right_on_test_shapes_only_fails_on_a_benchmark_shape(tmp_path):
    target = cpu_target()
    source = target.kernel_source().replace(
        "    torch.add(a, b, out=out)", "    n = min(a.numel(), 100003)\n    torch.add(a[:n], b[:n], out=out[:n])")
    workspace = target.assemble(tmp_path / "tests-only", source)
    target.benchmarks = [{"size": 200000, "seed": 1}]
    with Evaluator(target, tmp_path / "round", secret=7) as evaluator:
        result = check(evaluator, workspace, nonce=0)
    assert result.status == "failed"
    seed = derive(7, WHOSE, "benchmark", 0, "default")
    assert result.summary == (f"check 7 of 7 failed: benchmark 0 (size=200000) (seed {seed}): output has "
                              "99997 NaN/Inf of 200000 elements; check_implementation: mismatch against the reference")


def test_exception_crashes(tmp_path):
    result = judge_variant(cpu_target(), "faults", tmp_path)
    assert result.status == "crashed"
    seed = derive(7, WHOSE, "test", 0, 1, "default")
    assert result.summary == (f"crashed: IndexError: index 508 is out of bounds for dimension 0 with size 127 "
                              f"(test 0 (size=127), first call (seed {seed}))")
    assert "Traceback" in result.log_tail


def test_hang_times_out_after_its_full_limit_from_its_runners_start(tmp_path, monkeypatch):
    """The runner's start is judge's time (a spare still importing torch while the round starts): a runner that
    took 3 s to come leaves the kernel its whole 8 s, where the stage's clock used to include the wait (a CPU base
    timed out in CI at 8 s beside other tests, 2026-11-29)."""
    from judge.stages.lease import RunnerLease

    acquire = RunnerLease.acquire

    def slow_acquire(self, *args, **kwargs):
        time.sleep(3)
        return acquire(self, *args, **kwargs)

    monkeypatch.setattr(RunnerLease, "acquire", slow_acquire)
    result = judge_variant(cpu_target(), "hangs", tmp_path, timeout_s=8)
    assert result.status == "timed-out"
    # killed while it hangs, or found past the stage's limit at its next command on a slow machine
    assert result.summary.startswith("timed-out: killed after") or result.summary == (
        "timed-out: ran past the stage's time limit")
    start = result.detail.runner_start_s  # the 3 s, and the runner's own start (a cold one here)
    assert start >= 3
    assert 8 <= result.seconds - start < 14


def test_patching_the_reference_in_its_own_process_changes_nothing(tmp_path):
    target = cpu_target()
    source = target.kernel_source() + (
        "\nimport reference\nreference.ref_kernel = lambda data: data[2]\n"
        "reference.check_implementation = lambda data, output: (True, '')\n\n"
        "def custom_kernel(data):\n    a, b, out = data\n    out.zero_()\n    return out\n")
    workspace = target.assemble(tmp_path / "patcher", source)
    with Evaluator(target, tmp_path / "round", secret=7) as evaluator:
        result = check(evaluator, workspace, nonce=0)
    # the runner never imports the reference: the kernel's own copy of it reaches nothing judge uses
    assert result.status == "failed"
    assert not any(c.passed for c in result.detail.cases)  # the oracle's reference was never touched


def test_input_distributions_are_all_checked(tmp_path):
    target = load_target(Path(__file__).resolve().parents[1] / "kernels" / "vecadd_cpu")
    clamping = target.kernel_source().replace("    torch.add(a, b, out=out)",
                                              "    torch.add(a, b, out=out)\n    out.clamp_(-12.0, 12.0)")
    workspace = target.assemble(tmp_path / "clamps", clamping)
    with Evaluator(target, tmp_path / "round", secret=7) as evaluator:
        result = check(evaluator, workspace, nonce=0)
    assert result.status == "failed"
    failed = [(c.distribution, c.passed) for c in result.detail.cases]
    assert failed == [("randn", True)] * 8 + [("wide", False)]  # every randn case passed before a wide one failed
    assert result.summary.startswith("check 9 of 16 failed (the 7 after it not run): test 0 (size=127), first call "
                                     "(seed ")
    assert ", wide inputs): output: " in result.summary


GPU_VERDICTS = [
    ("correct", "passed"), ("wrong", "failed"), ("partial", "failed"), ("cached", "failed"),
    ("side_stream", "passed"), ("faults", "crashed"), ("hangs", "timed-out"),
]


@pytest.mark.gpu
@pytest.mark.parametrize("variant,status", GPU_VERDICTS)
def test_verdicts_on_gpu(variant, status, tmp_path):
    target = load_target(FIXTURE)
    result = judge_variant(target, variant, tmp_path, timeout_s=20 if variant == "hangs" else 180)
    print(f"{variant}: {result.status}: {result.summary} ({result.seconds:.1f} s)")
    assert result.status == status, result.summary + "\n" + result.log_tail
    if variant == "cached":  # its second call on the first case returns the first call's answer; the check stops there
        assert [(c.call, c.passed) for c in result.detail.cases] == [(1, True), (2, False)]
        assert result.summary.startswith("check 2 of 10 failed (the 8 after it not run): test 0 (size=127), second "
                                         "call (seed ")
    if variant == "faults":
        assert "CUDA" in result.summary or "device-side assert" in result.log_tail


GPUMODE = os.environ.get("JUDGE_GPUMODE_PROBLEMS")


@pytest.mark.gpu
@pytest.mark.skipif(not GPUMODE, reason="set JUDGE_GPUMODE_PROBLEMS to a GPU MODE problems/ directory")
def test_real_gpumode_vectoradd(tmp_path):
    target = load_target(Path(GPUMODE) / "pmpp_v2" / "vectoradd_py")
    good = run_correctness(target, target.assemble(tmp_path / "good", target.kernel_source()))
    print("vectoradd_py reference submission:", good.status, good.summary)
    assert good.status == "passed", good.summary + good.log_tail
    assert good.detail.tolerance is None and good.detail.check_implementation
    assert good.detail.cases[0].poisoned == ["[2]"]
    half = target.kernel_source().replace("output[...] = A + B", "output[: A.shape[0] // 2] = (A + B)[: A.shape[0] // 2]")
    assert half != target.kernel_source()
    bad = run_correctness(target, target.assemble(tmp_path / "half", half))
    print("vectoradd_py half-written:", bad.status, bad.summary)
    assert bad.status == "failed"


def small_cpu_problem(problem: Path, reference: str, submission: str):
    """A GPU MODE problem of one test (size 100) and one benchmark (size 1000) on the CPU, loaded as a target."""
    problem.mkdir()
    (problem / "task.yml").write_text(
        'files:\n  - {"name": "submission.py", "source": "@SUBMISSION@"}\n  - {"name": "reference.py", "source": "reference.py"}\n'
        'tests:\n  - {"size": 100, "seed": 1}\nbenchmarks:\n  - {"size": 1000, "seed": 2}\n')
    (problem / "judge.toml").write_text('arch = "cpu"\n')
    (problem / "reference.py").write_text(reference)
    (problem / "submission.py").write_text(submission)
    return load_target(problem)


def test_without_a_tolerance_the_problems_checker_decides_on_shapes(tmp_path):
    """GPU MODE's vectorsum: the reference returns a 0-d sum, a correct solution a (1,)-shaped one; its
    check_implementation compares with broadcasting, and judge, holding no tolerance of its own, defers."""
    target = small_cpu_problem(
        tmp_path / "vectorsum",
        "import torch\n\ndef generate_input(size, seed):\n"
        "    return torch.randn(size, generator=torch.Generator().manual_seed(seed)), torch.empty(1)\n\n"
        "def ref_kernel(data):\n    return data[0].sum()\n\n"
        "def check_implementation(data, output):\n"
        "    return (True, '') if torch.allclose(output, ref_kernel(data), rtol=1e-5, atol=1e-5) else (False, 'sum')\n",
        "def custom_kernel(data):\n    x, out = data\n    out[...] = x.sum()\n    return out\n")
    workspace = target.assemble(tmp_path / "ws", target.kernel_source())
    with Evaluator(target, tmp_path / "round", secret=7) as evaluator:
        result = check(evaluator, workspace, nonce=0)
    assert result.status == "passed", result.summary
    assert result.summary == "3 of 3 checks passed (1 tests x 2 seeds + 1 benchmarks)"


def test_a_check_or_call_the_device_has_no_room_for_leaves_the_kernel_not_run_and_the_next_one_is_checked(tmp_path):
    """trimul on an H100 (2026-11-28): the problem's checker ran out of device memory beside a runner that held
    30 GiB, and the round was lost as the reference's failure. Which process took the room cannot be told, so it is
    no verdict on the kernel: its check is run once more without the spares (each a CUDA context on a GPU), then not
    run, and the evaluator goes on to the next kernel."""
    target = small_cpu_problem(
        tmp_path / "roomy",
        "import torch\n\ndef generate_input(size, seed):\n"
        "    return torch.randn(size, generator=torch.Generator().manual_seed(seed))\n\n"
        "def ref_kernel(data):\n    return data * 2\n\n"
        "def check_implementation(data, output):\n"
        "    if float(output[0]) == 1234.0:  # what a kernel that hogs the device leaves the checker\n"
        "        raise torch.OutOfMemoryError('CUDA out of memory. Tried to allocate 3.00 GiB. GPU 0 has a total '\n"
        "                                     'capacity of 79.18 GiB of which 2.67 GiB is free. Process 918 has '\n"
        "                                     '29.90 GiB memory in use.')\n"
        "    return (True, '') if torch.allclose(output, data * 2) else (False, 'not doubled')\n",
        "def custom_kernel(data):\n    return data * 2\n")
    hog = "def custom_kernel(data):\n    out = data * 2\n    out[0] = 1234.0\n    return out\n"
    oom = ("import torch\n\ndef custom_kernel(data):\n    raise torch.OutOfMemoryError('CUDA out of memory. Tried to "
           "allocate 6.00 GiB. GPU 0 has a total capacity of 79.18 GiB of which 2.98 GiB is free. Process 534 has "
           "26.31 GiB memory in use.')\n")
    with Evaluator(target, tmp_path / "round", secret=7) as evaluator:
        hogged = check(evaluator, target.assemble(tmp_path / "hog", hog), nonce=0)
        short = check(evaluator, target.assemble(tmp_path / "short", oom), nonce=2)
        honest = check(evaluator, target.assemble(tmp_path / "ws", target.kernel_source()), nonce=1)
        # the first check ran twice, the second time with the spares' memory given back and none started again
        assert (evaluator.spares, evaluator._pool) == (0, [])
    # its own call out of memory beside judge's processes (trimul's wrong variant, called crashed on an H100)
    assert (short.status, short.summary) == (
        "not-run", "not run: its call ran out of device memory beside judge's own processes (OutOfMemoryError: CUDA "
                   "out of memory. Tried to allocate 6.00 GiB. GPU 0 has a total capacity of 79.18 GiB of which 2.98 "
                   "GiB is free)")
    seed = derive(7, WHOSE, "test", 0, 1, "default")
    assert hogged.status == "not-run"
    assert hogged.summary == (
        f"not run: the device had no room left to check the output of test 0 (size=100), first call (seed {seed}) "
        "(OutOfMemoryError: CUDA out of memory. Tried to allocate 3.00 GiB. GPU 0 has a total capacity of 79.18 "
        "GiB of which 2.67 GiB is free)")
    assert honest.status == "passed", honest.summary


def test_a_check_that_finds_no_room_beside_the_kernels_runner_is_made_again_once_that_runner_is_closed(tmp_path):
    """trimul's wrong variant on an H200 (2026-11-28): its runner held 62 GiB after its call while the problem's own
    checker, finding the output wrong, needed 6 GiB more; the kernel was called not run. What memory a kernel keeps
    must not turn a wrong verdict into none: the check runs again with that runner closed, and the next case gets a
    new one. This checker runs out of memory while the process that made the output (its pid in the output) lives."""
    target = small_cpu_problem(
        tmp_path / "hogged",
        "import torch\n\ndef generate_input(size, seed):\n"
        "    return torch.randn(size, generator=torch.Generator().manual_seed(seed))\n\n"
        "def ref_kernel(data):\n    return data * 2\n\n"
        "def _alive(pid):\n"
        "    try:\n        return '\\nState:\\tZ' not in open(f'/proc/{pid}/status').read()\n"
        "    except OSError:\n        return False\n\n"
        "def check_implementation(data, output):\n"
        "    if _alive(int(output[0])):  # the kernel's process holds the room\n"
        "        raise torch.OutOfMemoryError('CUDA out of memory. Tried to allocate 6.00 GiB.')\n"
        "    return (True, '') if torch.allclose(output[1:], data[1:] * 2) else (False, 'not doubled')\n",
        "import os\n\ndef custom_kernel(data):\n    out = data * 2\n    out[0] = float(os.getpid())\n    return out\n")
    wrong = "import os\n\ndef custom_kernel(data):\n    out = data * 3\n    out[0] = float(os.getpid())\n    return out\n"
    with Evaluator(target, tmp_path / "round", secret=7) as evaluator:
        honest = check(evaluator, target.assemble(tmp_path / "ws", target.kernel_source()), nonce=0)
        spoiled = check(evaluator, target.assemble(tmp_path / "wrong", wrong), nonce=1)
    assert (honest.status, honest.summary) == ("passed", "3 of 3 checks passed (1 tests x 2 seeds + 1 benchmarks)")
    assert spoiled.status == "failed"
    assert spoiled.summary.startswith("check 1 of 3 failed (the 2 after it not run): test 0 (size=100)")
    assert spoiled.summary.endswith("not doubled")


def test_a_runner_that_finds_no_device_memory_for_its_inputs_leaves_the_kernel_not_run(tmp_path, monkeypatch):
    """A runner allocates the device memory its inputs live in (judge/stages/build.py): where the device has no room
    for it, that is judge's room and the processes beside it, not the kernel's crash."""
    from judge.sandbox.worker import CommandFailed
    from judge.stages import check as check_module

    def no_room(*args):
        raise CommandFailed("IpcError: cuMemAlloc failed: CUDA_ERROR_OUT_OF_MEMORY (2)")

    monkeypatch.setattr(check_module, "build", no_room)
    target = small_cpu_problem(
        tmp_path / "full", "import torch\n\ndef generate_input(size, seed):\n"
        "    return torch.randn(size, generator=torch.Generator().manual_seed(seed))\n\n"
        "def ref_kernel(data):\n    return data * 2\n\n"
        "def check_implementation(data, output):\n"
        "    return (True, '') if torch.allclose(output, data * 2) else (False, 'not doubled')\n",
        "def custom_kernel(data):\n    return data * 2\n")
    with Evaluator(target, tmp_path / "round", secret=7) as evaluator:
        result = check(evaluator, target.assemble(tmp_path / "ws", target.kernel_source()), nonce=0)
    seed = derive(7, WHOSE, "test", 0, 1, "default")
    assert (result.status, result.summary) == (
        "not-run", f"not run: the device had no room left for the inputs of test 0 (size=100), first call (seed "
                   f"{seed}) (IpcError: cuMemAlloc failed: CUDA_ERROR_OUT_OF_MEMORY (2))")


ROWMAX = Path(__file__).parent / "fixtures" / "gpumode" / "rowmax"


def test_named_tuples_and_numbers_reach_the_checker_and_every_timed_check_as_the_kernel_returned_them(tmp_path):
    """The rowmax fixture's reference returns (torch.max(x, dim=1), float(x.sum())): a torch named tuple
    (torch.return_types.max) and a Python float. An identical copy of it passes, so does a kernel that returns a
    plain tuple instead of the named one (judged on values, as the problem's checker, which unpacks, sees it);
    a NaN total is incorrect, with its reason. In timing, the base's named tuple and a candidate's plain tuple
    pass the oracle's check of every call, the float compared too: a total that turns NaN after the candidate's
    first calls is caught on a timed call. (One evaluator for all: its oracle and spares start once.)"""
    from judge.stages.timing.stage import measure

    target = load_target(ROWMAX)
    target.arch = "cpu"
    target.speed_of_light_us = []
    base = target.kernel_source()
    line = "    return torch.max(data, dim=1), float(data.sum())"
    plain = "    values, indices = torch.max(data, dim=1)\n    return (values, indices), float(data.sum())"
    sources = {
        "copy": base,
        "plain": base.replace(line, plain),
        "nan": base.replace(line, "    return torch.max(data, dim=1), float('nan')"),
    }
    late = base.replace(line, "    _calls.append(1)\n" + plain.replace("float(data.sum())", "(float(data.sum()) if "
                                                                       "len(_calls) < 30 else float('nan'))"))
    late = late.replace("def custom_kernel", "_calls = []\n\n\ndef custom_kernel")
    base_dir = target.assemble(tmp_path / "base", base)
    with Evaluator(target, tmp_path / "round", secret=7, base_dir=base_dir) as evaluator:
        results = {name: check(evaluator, target.assemble(tmp_path / name, source), nonce=0)
                   for name, source in sources.items()}
        timed = measure(evaluator, target.assemble(tmp_path / "late", late), budget_s=1, timeout_s=300)
    for name in ("copy", "plain"):
        assert results[name].status == "passed", results[name].summary + results[name].log_tail
        assert results[name].summary == "3 of 3 checks passed (1 tests x 2 seeds + 1 benchmarks)"
        case = results[name].detail.cases[0]
        assert case.check_implementation == {"passed": True, "message": ""}
        assert [o["path"] for o in case.outputs] == ["[0][0]", "[0][1]", "[1]"]
        assert case.outputs[2]["dtype"] == "float" and case.outputs[2]["mismatched"] == 0
    seed = derive(7, WHOSE, "test", 0, 1, "default")
    assert results["nan"].status == "failed"
    assert results["nan"].summary == (f"check 1 of 3 failed (the 2 after it not run): test 0 (rows=17 cols=33), "
                                      f"first call (seed {seed}): output[1] has 1 NaN/Inf of 1 elements; check_implementation: the "
                                      "total is off")
    assert timed.status == "failed", timed.summary + timed.log_tail
    assert re.fullmatch(r"benchmark 0 \(rows=256 cols=512\), timed call \d+ on input set \d \(host clock\): its "
                        r"output\[1\] is nan, the reference's is -?\d+\.\d+(e[-+]\d+)?", timed.summary), timed.summary


ROWSIGN = Path(__file__).parent / "fixtures" / "gpumode" / "rowsign"


def test_an_output_right_in_another_form_passes_every_timed_check_where_the_problems_checker_decides(tmp_path):
    """The rowsign fixture's answer is each row at unit length in either direction (as an eigenvector or a QR factor
    is right up to its sign), its checker accepts both, and its judge.toml sets no tolerance: the checker decides.
    A kernel that flips every other row passes correctness, and its timed calls pass too, though their projections
    are far from the reference's answer: the checker judges those outputs. One that scales rows by 2 after its
    first calls is caught on a timed call, with both reasons."""
    from judge.stages.timing.stage import measure

    target = load_target(ROWSIGN)
    target.arch = "cpu"
    target.speed_of_light_us = []
    base = target.kernel_source()
    line = "    return data / data.norm(dim=1, keepdim=True)"
    flipped = base.replace(line, "    out = data / data.norm(dim=1, keepdim=True)\n    out[1::2] *= -1\n    return out")
    late = flipped.replace("    return out", "    _calls.append(1)\n    return out if len(_calls) < 30 else 2 * out")
    late = late.replace("def custom_kernel", "_calls = []\n\n\ndef custom_kernel")
    base_dir = target.assemble(tmp_path / "base", base)
    with Evaluator(target, tmp_path / "round", secret=7, base_dir=base_dir) as evaluator:
        checked = check(evaluator, target.assemble(tmp_path / "flipped", flipped), nonce=0)
        timed = measure(evaluator, target.assemble(tmp_path / "flipped-t", flipped), budget_s=1, timeout_s=300)
        caught = measure(evaluator, target.assemble(tmp_path / "late", late), budget_s=1, timeout_s=300)
    assert checked.status == "passed", checked.summary + checked.log_tail
    assert timed.status == "passed", timed.summary + timed.log_tail
    assert caught.status == "failed", caught.summary + caught.log_tail
    assert re.fullmatch(r"benchmark 0 \(rows=256 cols=512\), timed call \d+ on input set \d \(host clock\): its output "
                        r"is far from the reference: projection \S+ vs \S+ \(an honest output is within \S+\); "
                        r"check_implementation: 256 rows are neither the unit row nor its negation", caught.summary), \
        caught.summary


@pytest.mark.gpu
@pytest.mark.skipif(not GPUMODE, reason="set JUDGE_GPUMODE_PROBLEMS to a GPU MODE problems/ directory")
@pytest.mark.parametrize("problem", ["qr_py", "eigh_py"])
def test_real_gpumode_linalg_outputs_as_their_checkers_take_them(problem, tmp_path):
    """GPU MODE's linalg problems return tuples: qr_py's base torch.geqrf's named tuple (torch.return_types.geqrf),
    eigh_py's a plain (Q, L). An identical copy of the base, a candidate that returns a plain tuple and one that
    returns a named tuple of its own all pass correctness, and the plain one's timed calls all pass their checks."""
    from judge.stages.timing.stage import measure

    target = load_target(Path(GPUMODE) / "linalg" / problem)
    target.tests, target.benchmarks, target.speed_of_light_us = target.tests[:3], target.benchmarks[:2], []
    base = target.kernel_source()
    wrapped = base + "\n\nimport collections as _rt_c\n_rt_kernel = custom_kernel\n\n"
    sources = {"copy": base,
               "plain": wrapped + "def custom_kernel(data):\n    return tuple(_rt_kernel(data))\n",
               "named": wrapped + "_RtPair = _rt_c.namedtuple('_RtPair', 'first second')\n\n"
                                  "def custom_kernel(data):\n    return _RtPair(*_rt_kernel(data))\n"}
    dirs = {name: target.assemble(tmp_path / name, source) for name, source in sources.items()}
    with Evaluator(target, tmp_path / "round", base_dir=dirs["copy"]) as evaluator:
        checked = {name: check(evaluator, directory) for name, directory in dirs.items()}
        timed = measure(evaluator, dirs["plain"], budget_s=4)
    for name, result in checked.items():
        print(f"{problem} {name}: {result.status}: {result.summary}")
        assert result.status == "passed", result.summary + result.log_tail
        assert all(c.check_implementation["passed"] for c in result.detail.cases)
    print(f"{problem} plain timing: {timed.status}: {timed.summary}")
    assert timed.status == "passed", timed.summary + timed.log_tail


PUBLIC_ONLY = '''import torch

from reference import generate_input
from task import input_t, output_t

_PUBLIC = float(generate_input(40000, 2)[0][0])  # benchmark 1 as task.yml seeds it


def custom_kernel(data: input_t) -> output_t:
    a, b, out = data
    torch.add(a, b, out=out)
    if a.numel() == 40000 and float(a[0]) != _PUBLIC:  # wrong on every other input of that size
        out[0] += 1.0
    return out
'''


def test_a_base_that_fails_on_a_drawn_seed_is_run_again_on_task_ymls_own_seed(tmp_path):
    """pmpp/vectorsum_py's Triton base failed the problem's own check on 4 of 10 seeds of its 52M benchmark and
    passed on task.yml's (H200, 2026-11-29), which is all GPU MODE's eval.py checks. The base stays incorrect; its
    verdict says which kind of failure it is."""
    from judge.stages.check import check_base

    target = cpu_target()
    for name, source in (("public-only", PUBLIC_ONLY), ("wrong", (VARIANTS / "wrong.py").read_text())):
        base = target.assemble(tmp_path / name, source)
        with Evaluator(target, tmp_path / f"round-{name}", secret=7) as evaluator:
            result = check_base(evaluator, base)
        assert result.status == "failed", result.summary
        first = result.detail.cases[-1]
        assert [c.passed for c in result.detail.cases] == [True] * (len(result.detail.cases) - 1) + [False]
        where = (f"benchmark 1 (size=40000) (seed {first.seed})" if name == "public-only"
                 else f"test 0 (size={target.tests[0]['size']}), first call (seed {first.seed})")
        run = len(result.detail.cases)
        after = f" (the {8 - run} after it not run)" if run < 8 else ""  # public-only fails on the last benchmark
        assert result.summary.startswith(f"check {run} of 8 failed{after}: {where}: "), result.summary
        assert result.summary.endswith(
            "; on task.yml's own seed (2) the same benchmark passes: the base fails the problem's check on some of its "
            "inputs, and a check of task.yml's seeds alone (GPU MODE's eval.py) passes it" if name == "public-only"
            else f"; it fails on task.yml's own seed ({target.tests[0]['seed']}) too"), result.summary


@pytest.mark.parametrize("oracle_answers", [True, False])
def test_a_check_out_of_device_memory_runs_again_with_the_kept_inputs_and_the_spares_given_back(monkeypatch,
                                                                                             oracle_answers):
    from types import SimpleNamespace

    from judge.errors import JudgeError
    from judge.stages import check as check_module
    from judge.stages.result import StageResult

    passed = StageResult("correctness", "passed", "49 of 49 checks passed")
    runs, asked = [], []

    def checked(*args):
        runs.append(args)
        if len(runs) == 1:
            raise check_module.NoRoom("the oracle's check of case 48 ran out of device memory")
        return passed

    def ask(op, **options):
        asked.append((op, options))
        if not oracle_answers:
            raise JudgeError("the oracle is gone")
        return {}

    evaluator = SimpleNamespace(ask=ask, give_back_spares=lambda: True, nonce=lambda: 7)
    monkeypatch.setattr(check_module, "_check", checked)
    assert check_module.check(evaluator, Path("ws")) is passed
    assert len(runs) == 2 and asked == [("memory", {"timing": True})]
