"""judge/devices.py: the architecture gate's verdicts and reasons, and the probe on this machine."""

import pytest

from judge.devices import DeviceFacts, arch_gate, may_run, probe
from judge.errors import JudgeError


def facts(capability: str) -> DeviceFacts:
    major, minor = capability.split(".")
    return DeviceFacts(name="test GPU", sm_count=132, capability=capability, arch=f"sm_{major}{minor}",
                       memory_gb=79.1, l2_mb=50.0)


H100, B200, A100, GB300 = facts("9.0"), facts("10.0"), facts("8.0"), facts("10.3")


def test_any_runs_on_any_cuda_gpu():
    assert arch_gate("any", H100) is None
    assert arch_gate("any", A100) is None
    assert arch_gate("any", None) == "needs a CUDA GPU, this machine has none"


def test_arch_specific_needs_the_exact_capability():
    assert arch_gate("sm_90a", H100) is None
    assert arch_gate("sm_90a", B200) == "needs sm_90, this machine has none"
    assert arch_gate("sm_100a", B200) is None
    assert arch_gate("sm_100a", H100) == "needs sm_100, this machine has none"
    assert arch_gate("sm_100a", GB300) == "needs sm_100, this machine has none"
    assert arch_gate("sm_100a", None) == "needs sm_100, this machine has none"


def test_plain_and_family_arch_run_on_later_minors_of_the_major():
    assert arch_gate("sm_90", H100) is None
    assert arch_gate("sm_80", A100) is None
    assert arch_gate("sm_80", H100) == "needs sm_80, this machine has none"
    assert arch_gate("sm_100f", GB300) is None
    assert arch_gate("sm_103", B200) == "needs sm_103, this machine has none"


def test_bad_arch_is_a_user_error():
    with pytest.raises(JudgeError, match="target arch 'hopper': expected 'any' or sm_"):
        arch_gate("hopper", H100)


def test_probe_without_a_gpu_is_none():
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    assert probe() is None


@pytest.mark.gpu
def test_probe_on_a_gpu():
    found = probe()
    assert found is not None
    assert found.sm_count > 0 and found.l2_mb > 0 and found.memory_gb > 0
    assert found.arch == "sm_" + found.capability.replace(".", "")
    assert found.torch
    print(found.to_dict())


def test_a_round_guesses_from_nvmls_capabilities_whether_its_target_may_run_here(monkeypatch):
    """Before its probe, a round starts its oracle only where the driver lists a GPU the target's arch can run on."""
    import judge.devices

    monkeypatch.setattr(judge.devices, "nvml_capabilities", lambda: ["8.0", "9.0"])
    assert may_run("sm_90a") and may_run("any") and may_run("sm_80")
    assert not may_run("sm_100a") and not may_run("cpu")  # a CPU target starts no GPU oracle
    monkeypatch.setattr(judge.devices, "nvml_capabilities", lambda: [])  # no driver (this VM, CI)
    assert not may_run("any") and not may_run("sm_90a")


@pytest.mark.gpu
def test_nvml_lists_the_capability_torch_reads():
    from judge import machine

    found = probe()
    assert found is not None and found.capability in machine.nvml_capabilities()


@pytest.mark.gpu
def test_nvml_reads_what_nvidia_smi_reads():
    """The clocks are read through NVML in the oracle's process; nvidia-smi (a process per read) is the fallback,
    and both must say the same of the same GPU."""
    import shutil

    from judge import machine

    if shutil.which("nvidia-smi") is None:
        pytest.skip("no nvidia-smi to compare with")
    nvml = machine._nvml_clocks(0)
    smi = machine._smi_clocks(0)
    assert nvml is not None, "NVML did not load on a machine with an NVIDIA driver"
    assert nvml["driver"] == smi["driver"]
    assert nvml["sm_clock_max_mhz"] == smi["sm_clock_max_mhz"]
    assert abs(nvml["temperature_c"] - smi["temperature_c"]) <= 3
    assert set(nvml) == set(smi)


CPUINFO = """processor\t: 0
model name\t: AMD EPYC 7B13
physical id\t: 0
core id\t\t: 0

processor\t: 1
model name\t: AMD EPYC 7B13
physical id\t: 0
core id\t\t: 0

processor\t: 2
model name\t: AMD EPYC 7B13
physical id\t: 0
core id\t\t: 1

processor\t: 3
model name\t: AMD EPYC 7B13
physical id\t: 0
core id\t\t: 1
"""


def test_a_cpu_target_records_the_cpu_its_model_cores_and_threads():
    from judge.machine import host_facts
    from judge.report.formatting import fmt_device

    facts = host_facts(CPUINFO)
    assert {k: facts[k] for k in ("kind", "name", "cores", "threads")} == \
        {"kind": "cpu", "name": "AMD EPYC 7B13", "cores": 2, "threads": 4}
    assert fmt_device({**facts, "torch": "2.13.0+cpu"}) == "CPU: AMD EPYC 7B13, 2 cores, 4 threads, torch 2.13.0+cpu"
    here = host_facts()  # this machine's, from /proc/cpuinfo
    assert here["threads"] >= here["cores"] >= 1 and here["name"]
