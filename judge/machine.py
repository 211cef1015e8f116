"""What the machine a process runs on is, read in that process: its GPU (name, SMs, memory, the clocks and
temperature as read now, driver, CUDA, torch and CuTe DSL versions) and its CPU. Nothing here starts a process
of its own but nvidia-smi: the oracle reads its facts here (judge.boundary.oracle), and judge.devices probes
the machine's GPU by calling `facts_here` in a child.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import asdict, dataclass
from importlib import metadata
from pathlib import Path
from typing import Any


@dataclass
class DeviceFacts:
    """The GPU and software a measurement was taken on; clocks are as read when the facts were taken."""

    name: str
    sm_count: int
    capability: str  # "9.0"
    arch: str  # "sm_90"
    memory_gb: float
    l2_mb: float
    sm_clock_mhz: int | None = None
    mem_clock_mhz: int | None = None
    sm_clock_max_mhz: int | None = None
    temperature_c: int | None = None
    driver: str | None = None
    cuda: str | None = None
    torch: str | None = None
    cutedsl: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def host_gpu_count(proc: Path = Path("/proc/driver/nvidia/gpus")) -> int:
    """How many NVIDIA GPUs the host has, whatever CUDA_VISIBLE_DEVICES leaves this process: the driver's own
    listing, read without a CUDA context (a Ray actor sees one GPU of several, and its evaluator must still keep
    off the cores where the others' pairs are timed). 0 where the driver lists none."""
    try:
        return sum(1 for entry in proc.iterdir() if entry.is_dir())
    except OSError:
        return 0


def facts_dict(facts) -> dict[str, Any] | None:
    """Device facts as the ledger stores them: a DeviceFacts, or the plain dict a test's fake stages give."""
    if facts is None:
        return None
    return facts.to_dict() if isinstance(facts, DeviceFacts) else dict(facts)


def host_facts(cpuinfo: str | None = None) -> dict[str, Any]:
    """The CPU a CPU target runs on, from /proc/cpuinfo (else the platform module): its model, physical cores and
    hardware threads, and torch's version (read from its metadata: nothing is imported)."""
    import os
    import platform

    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            cpuinfo = ""
    model, cores, threads, physical = None, set(), 0, None
    for line in cpuinfo.splitlines():
        key, _, value = (part.strip() for part in line.partition(":"))
        if key == "processor":
            threads += 1
        elif key == "model name" and model is None:
            model = value
        elif key == "physical id":
            physical = value
        elif key == "core id":
            cores.add((physical, value))
    threads = threads or os.cpu_count() or 0
    return {"kind": "cpu", "name": model or platform.processor() or platform.machine() or "unknown CPU",
            "cores": len(cores) or threads, "threads": threads, "torch": _version("torch")}


def facts_here(device: int = 0) -> DeviceFacts | None:
    """The facts of a CUDA device as seen from this process (which then holds a CUDA context)."""
    import torch

    if not torch.cuda.is_available():
        return None
    props = torch.cuda.get_device_properties(device)
    clocks = read_clocks(device)
    return DeviceFacts(
        name=props.name,
        sm_count=props.multi_processor_count,
        capability=f"{props.major}.{props.minor}",
        arch=f"sm_{props.major}{props.minor}",
        memory_gb=round(props.total_memory / 2**30, 1),
        l2_mb=round(getattr(props, "L2_cache_size", 0) / 2**20, 1),
        sm_clock_mhz=clocks.get("sm_clock_mhz"),
        mem_clock_mhz=clocks.get("mem_clock_mhz"),
        sm_clock_max_mhz=clocks.get("sm_clock_max_mhz"),
        temperature_c=clocks.get("temperature_c"),
        driver=clocks.get("driver"),
        cuda=torch.version.cuda,
        torch=torch.__version__,
        cutedsl=_version("nvidia-cutlass-dsl"),
    )


_SMI_FIELDS = {
    "clocks.sm": "sm_clock_mhz",
    "clocks.mem": "mem_clock_mhz",
    "clocks.max.sm": "sm_clock_max_mhz",
    "temperature.gpu": "temperature_c",
    "driver_version": "driver",
}


def read_clocks(device: int = 0) -> dict[str, Any]:
    """Current SM and memory clocks, temperature and driver: from NVML in this process where the driver's
    library loads (well under a millisecond a read), else from nvidia-smi (a process of its own: about 30 ms on
    an H100 host, read twice per candidate's timing), else {}."""
    facts = _nvml_clocks(device)
    return facts if facts is not None else _smi_clocks(device)


class _Nvml:
    """The driver's NVML library through ctypes, loaded and initialised once per process."""

    CLOCK_SM, CLOCK_MEM, TEMPERATURE_GPU = 1, 2, 0

    def __init__(self):
        import ctypes

        self.ctypes = ctypes
        self.lib = ctypes.CDLL("libnvidia-ml.so.1")
        self._check(self.lib.nvmlInit_v2())
        self.handles: dict[int, Any] = {}

    def _check(self, status: int) -> None:
        if status != 0:
            raise OSError(f"NVML returned {status}")

    def handle(self, device: int):
        """The NVML handle of CUDA device `device` of this process, found by its PCI bus id (NVML's indices
        ignore CUDA_VISIBLE_DEVICES), else by index."""
        if device not in self.handles:
            handle = self.ctypes.c_void_p()
            bus_id = _pci_bus_id(device)
            if bus_id is None or self.lib.nvmlDeviceGetHandleByPciBusId_v2(bus_id.encode(), self.ctypes.byref(handle)):
                self._check(self.lib.nvmlDeviceGetHandleByIndex_v2(self.ctypes.c_uint(device), self.ctypes.byref(handle)))
            self.handles[device] = handle
        return self.handles[device]

    def uint(self, function, *args) -> int:
        value = self.ctypes.c_uint()
        self._check(function(*args, self.ctypes.byref(value)))
        return value.value

    def read(self, device: int) -> dict[str, Any]:
        handle = self.handle(device)
        driver = self.ctypes.create_string_buffer(96)
        self._check(self.lib.nvmlSystemGetDriverVersion(driver, self.ctypes.c_uint(96)))
        return {
            "sm_clock_mhz": self.uint(self.lib.nvmlDeviceGetClockInfo, handle, self.CLOCK_SM),
            "mem_clock_mhz": self.uint(self.lib.nvmlDeviceGetClockInfo, handle, self.CLOCK_MEM),
            "sm_clock_max_mhz": self.uint(self.lib.nvmlDeviceGetMaxClockInfo, handle, self.CLOCK_SM),
            "temperature_c": self.uint(self.lib.nvmlDeviceGetTemperature, handle, self.TEMPERATURE_GPU),
            "driver": driver.value.decode(),
        }

    def capabilities(self) -> list[str]:
        """Every GPU's compute capability ("9.0"), as NVML lists them (its order, not CUDA's)."""
        major, minor = self.ctypes.c_int(), self.ctypes.c_int()
        found = []
        for index in range(self.uint(self.lib.nvmlDeviceGetCount_v2)):
            handle = self.ctypes.c_void_p()
            self._check(self.lib.nvmlDeviceGetHandleByIndex_v2(self.ctypes.c_uint(index), self.ctypes.byref(handle)))
            self._check(self.lib.nvmlDeviceGetCudaComputeCapability(handle, self.ctypes.byref(major),
                                                                     self.ctypes.byref(minor)))
            found.append(f"{major.value}.{minor.value}")
        return found


_NVML: list[_Nvml | None] = []


def _nvml() -> _Nvml | None:
    """This process's NVML, loaded once; None where the driver's library is missing or does not start."""
    if not _NVML:
        try:
            _NVML.append(_Nvml())
        except (OSError, AttributeError):
            _NVML.append(None)
    return _NVML[0]


def _nvml_clocks(device: int) -> dict[str, Any] | None:
    """NVML's reading, or None where NVML cannot be loaded or answers with an error (nvidia-smi is asked then)."""
    nvml = _nvml()
    try:
        return nvml.read(device) if nvml is not None else None
    except (OSError, AttributeError):
        return None


def nvml_capabilities() -> list[str]:
    """The compute capability of every GPU of the host, read from the driver's NVML without a CUDA context (well
    under a second, where a probe imports torch: judge.devices); [] where NVML cannot say."""
    nvml = _nvml()
    try:
        return nvml.capabilities() if nvml is not None else []
    except (OSError, AttributeError):
        return []


def _pci_bus_id(device: int) -> str | None:
    """'0000:1B:00.0' for CUDA device `device`, from torch's device properties (None where they lack it)."""
    try:
        import torch

        props = torch.cuda.get_device_properties(device)
        return f"{props.pci_domain_id:08X}:{props.pci_bus_id:02X}:{props.pci_device_id:02X}.0"
    except (AttributeError, RuntimeError, AssertionError):
        return None


def _smi_clocks(device: int) -> dict[str, Any]:
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return {}
    query = ",".join(_SMI_FIELDS)
    try:
        out = subprocess.run(
            [smi, f"--query-gpu={query}", "--format=csv,noheader,nounits", "-i", str(device)],
            capture_output=True, text=True, timeout=30, check=True,
        ).stdout
    except (subprocess.SubprocessError, OSError):
        return {}
    values = [v.strip() for v in out.strip().splitlines()[0].split(",")] if out.strip() else []
    facts: dict[str, Any] = {}
    for key, value in zip(_SMI_FIELDS.values(), values):
        if key == "driver":
            facts[key] = value
        else:
            try:
                facts[key] = int(float(value))
            except ValueError:
                facts[key] = None
    return facts


def _version(distribution: str) -> str | None:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def host_memory(meminfo: str = "/proc/meminfo", cgroup: str = "/sys/fs/cgroup") -> dict:
    """The host's memory as a CPU target's timing may use it: MemTotal and MemAvailable, or the cgroup's limit and
    what is left under it where that is lower (a container's 18 GiB on a larger host)."""
    fields = {}
    for line in open(meminfo):
        name, _, rest = line.partition(":")
        fields[name] = int(rest.split()[0]) * 1024
    total, free = fields["MemTotal"], fields.get("MemAvailable", fields.get("MemFree", 0))
    try:
        limit = open(os.path.join(cgroup, "memory.max")).read().strip()
        current = int(open(os.path.join(cgroup, "memory.current")).read())
        if limit != "max" and int(limit) < total:
            total, free = int(limit), min(free, max(0, int(limit) - current))
    except (OSError, ValueError):
        pass
    return {"name": "the host", "total": total, "free": free}
