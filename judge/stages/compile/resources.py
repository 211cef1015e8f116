"""What a compiled kernel asks of an SM, read from its artifacts, and how many CTAs of it fit on one.

Everything here is pure text parsing and arithmetic, so it runs in the judge process without CUDA:
`ptxas -v` on the kept PTX (registers, spills, stack, static shared memory, barriers), `cuobjdump` on the
cubin the DSL actually built (when a PyPI package ships it), `.reqntid` from the PTX, and the launch
configuration (threads and dynamic shared memory) from the host code of CuTe DSL's lowered module.
The occupancy arithmetic follows CUDA's own `cuda_occupancy.h`.
"""

from __future__ import annotations

import math
import re
import shutil
import subprocess
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

KB = 1024


@dataclass(frozen=True)
class ArchFacts:
    """Per-SM limits of one GPU, in the units `cuda_occupancy.h` uses."""

    gpu: str
    sms: int
    smem_per_sm: int  # bytes, the largest shared-memory carveout
    smem_per_block_optin: int  # bytes a CTA may request with the opt-in attribute
    smem_reserved_per_block: int  # bytes the driver reserves per CTA (sm_80 and later)
    smem_granularity: int  # bytes; a CTA's shared memory is rounded up to this
    regs_per_sm: int
    regs_per_block: int
    reg_granularity: int  # registers, allocated per warp
    max_regs_per_thread: int
    sub_partitions: int  # the register file is split in these; a warp's registers live in one
    threads_per_sm: int
    max_threads_per_block: int
    max_ctas_per_sm: int
    barriers_per_sm: int  # named barriers: 16 per CTA, 2 x max CTAs per SM on sm_90/sm_100
    warp_size: int = 32


_HOPPER_BLACKWELL = dict(
    smem_per_sm=228 * KB,
    smem_per_block_optin=227 * KB,
    smem_reserved_per_block=1 * KB,
    smem_granularity=128,
    regs_per_sm=65536,
    regs_per_block=65536,
    reg_granularity=256,
    max_regs_per_thread=255,
    sub_partitions=4,
    threads_per_sm=2048,
    max_threads_per_block=1024,
    max_ctas_per_sm=32,
    barriers_per_sm=64,
)

ARCHS: dict[str, ArchFacts] = {
    "sm_100a": ArchFacts(gpu="B200", sms=148, **_HOPPER_BLACKWELL),
    "sm_90a": ArchFacts(gpu="H100", sms=132, **_HOPPER_BLACKWELL),
}
ARCHS["sm_100"] = ARCHS["sm_100a"]
OCCUPANCY_MODEL = (
    "cuda_occupancy.h arithmetic: warps, registers (256 per warp, per sub-partition), shared memory "
    "(+1 KB driver reservation per CTA, 128 B units, largest carveout), barriers, CTA slots; "
    "tensor memory (sm_100) and cluster scheduling are not modelled"
)
ARCHS["sm_90"] = ARCHS["sm_90a"]


# ---------------------------------------------------------------------------------------------------------
# Tools


def find_tool(name: str) -> str | None:
    """A CUDA binary from the pip wheels in this environment (nvidia-cuda-nvcc, nvidia-cuda-cuobjdump), else PATH."""
    try:
        import nvidia  # namespace package of NVIDIA's wheels
    except ImportError:
        nvidia = None
    if nvidia is not None:
        for root in getattr(nvidia, "__path__", []):
            found = sorted(Path(root).glob(f"*/bin/{name}"), reverse=True)  # cu13 before cu12, cuda_nvcc
            for path in found:
                if path.is_file():
                    return str(path)
    return shutil.which(name)


def tool_version(path: str) -> str:
    """The `release X.Y, VX.Y.Z` part of a CUDA tool's --version, for the record."""
    out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=60).stdout
    match = re.search(r"release [\d.]+, V[\d.]+", out)
    return match.group(0) if match else out.strip().splitlines()[-1] if out.strip() else "unknown"


def run_ptxas(ptx_path: Path, arch: str, ptxas: str) -> str:
    """`ptxas -v` output for a PTX file; the cubin it writes is thrown away (the DSL's own is kept)."""
    result = subprocess.run(
        [ptxas, "-v", f"-arch={arch}", str(ptx_path), "-o", "/dev/null"],
        capture_output=True, text=True, timeout=300,
    )
    if result.returncode != 0:
        lines = [line for line in (result.stderr + result.stdout).splitlines() if line.strip()]
        raise RuntimeError(f"ptxas failed on {ptx_path.name}: {lines[0] if lines else result.returncode}")
    return result.stderr + result.stdout


def run_cuobjdump(cubin_path: Path, cuobjdump: str) -> str:
    result = subprocess.run(
        [cuobjdump, "--dump-resource-usage", str(cubin_path)], capture_output=True, text=True, timeout=120
    )
    if result.returncode != 0:
        lines = [line for line in (result.stderr + result.stdout).splitlines() if line.strip()]
        raise RuntimeError(f"cuobjdump failed on {cubin_path.name}: {lines[0] if lines else result.returncode}")
    return result.stdout


# ---------------------------------------------------------------------------------------------------------
# Parsers


_PTXAS_FUNCTION = re.compile(r"(?:Compiling entry function|Function properties for) '?([\w$.]+)'?")
_PTXAS_FRAME = re.compile(
    r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads"
)
_PTXAS_USED = re.compile(r"Used (\d+) registers")
_PTXAS_SMEM = re.compile(r"(\d+) bytes smem")
_PTXAS_CMEM = re.compile(r"(\d+) bytes cmem\[0\]")
_PTXAS_BARRIERS = re.compile(r"used (\d+) barriers")


def parse_ptxas(text: str) -> dict[str, dict[str, int]]:
    """Per kernel: registers, spill store/load bytes, stack frame bytes, static smem, barriers (from `ptxas -v`)."""
    kernels: dict[str, dict[str, int]] = {}
    current: dict[str, int] | None = None
    for line in text.splitlines():
        match = _PTXAS_FUNCTION.search(line)
        if match:
            current = kernels.setdefault(
                match.group(1),
                {"registers": 0, "spill_stores": 0, "spill_loads": 0, "stack_bytes": 0, "smem_static": 0,
                 "barriers": 0},
            )
            continue
        if current is None:
            continue
        if match := _PTXAS_FRAME.search(line):
            current["stack_bytes"] = int(match.group(1))
            current["spill_stores"] = int(match.group(2))
            current["spill_loads"] = int(match.group(3))
        if match := _PTXAS_USED.search(line):
            current["registers"] = int(match.group(1))
            if smem := _PTXAS_SMEM.search(line):
                current["smem_static"] = int(smem.group(1))
            if barriers := _PTXAS_BARRIERS.search(line):
                current["barriers"] = int(barriers.group(1))
    return kernels


_CUOBJDUMP_FUNCTION = re.compile(r"^\s*Function ([\w$.]+):")
_CUOBJDUMP_FIELD = re.compile(r"(REG|STACK|SHARED|LOCAL):(\d+)")


def parse_cuobjdump(text: str) -> dict[str, dict[str, int]]:
    """Per kernel in a cubin: registers, stack, shared (ELF section, the 1 KB system reservation included), local."""
    kernels: dict[str, dict[str, int]] = {}
    name = None
    names = {"REG": "registers", "STACK": "stack_bytes", "SHARED": "shared_bytes", "LOCAL": "local_bytes"}
    for line in text.splitlines():
        if match := _CUOBJDUMP_FUNCTION.match(line):
            name = match.group(1)
            continue
        if name and "REG:" in line:
            kernels[name] = {names[k]: int(v) for k, v in _CUOBJDUMP_FIELD.findall(line)}
            name = None
    return kernels


_PTX_ENTRY = re.compile(r"\.entry\s+([\w$]+)\s*\(")
_PTX_NTID = re.compile(r"\.(reqntid|maxntid)\s+(\d+)(?:\s*,\s*(\d+))?(?:\s*,\s*(\d+))?")


def parse_ptx_entries(ptx: str) -> dict[str, dict[str, Any]]:
    """Per `.entry`: threads per CTA from `.reqntid` (exact) or `.maxntid` (an upper bound), if the PTX says."""
    entries: dict[str, dict[str, Any]] = {}
    positions = [(m.start(), m.group(1)) for m in _PTX_ENTRY.finditer(ptx)]
    for index, (start, name) in enumerate(positions):
        body_start = ptx.find(")", start)
        brace = ptx.find("{", body_start)
        header = ptx[body_start:brace if brace != -1 else None]
        info: dict[str, Any] = {"threads": None, "threads_from": None}
        if match := _PTX_NTID.search(header):
            dims = [int(d) for d in match.groups()[1:] if d is not None]
            info["threads"] = math.prod(dims)
            info["threads_from"] = f".{match.group(1)} {', '.join(map(str, dims))}"
        entries[name] = info
    return entries


_LAUNCH_STRUCT = "!llvm.struct<(array<3 x i32>, array<3 x i32>, i64, ptr, ptr, i32)>"
_FUNC = re.compile(r"^\s*llvm\.func @", re.M)
_CONST = re.compile(r"%(\w+) = llvm\.mlir\.constant\((-?\d+) : i(?:32|64)\)")
_GEP = re.compile(r"%(\w+) = llvm\.getelementptr %(\w+)\[([\d, ]+)\] : \(!llvm\.ptr\) -> !llvm\.ptr, " + re.escape(_LAUNCH_STRUCT))
_STORE = re.compile(r"llvm\.store %(\w+), %(\w+) : i(?:32|64), !llvm\.ptr")
_ALLOCA = re.compile(r"%(\w+) = llvm\.alloca %\w+ x " + re.escape(_LAUNCH_STRUCT))
_KERNEL_REF = re.compile(r"llvm\.mlir\.addressof @kernels_([\w$]+)")
_LAUNCH_CALL = re.compile(r"llvm\.call @_cudaLaunchKernelEx\(")


def parse_launches(module_text: str) -> list[dict[str, Any]]:
    """Launch configurations in CuTe DSL's lowered host code (LLVM dialect), in launch order.

    The DSL fills a `cudaLaunchConfig_t` {gridDim, blockDim, dynamicSmemBytes, stream, attrs, numAttrs}
    before each `cudaLaunchKernelEx`; its blockDim and dynamicSmemBytes are compile-time constants for a
    CuTe DSL kernel (the shared-memory size is resolved when the kernel is lowered). A field that is not a
    constant comes back as None. The kernel is the `@kernels_<entry>` symbol referenced before the call.
    """
    launches = []
    starts = [m.start() for m in _FUNC.finditer(module_text)] + [len(module_text)]
    for begin, end in zip(starts, starts[1:]):
        body = module_text[begin:end]
        if "_cudaLaunchKernelEx(" not in body:
            continue
        constants = {name: int(value) for name, value in _CONST.findall(body)}
        fields: dict[str, dict[tuple[int, ...], str]] = {}
        gep_owner: dict[str, tuple[str, tuple[int, ...]]] = {}
        for name, base, indices in _GEP.findall(body):
            gep_owner[name] = (base, tuple(int(i) for i in indices.split(",")))
        for value, address in _STORE.findall(body):
            if address in gep_owner:
                base, index = gep_owner[address]
                fields.setdefault(base, {})[index] = value
        calls = [m.start() for m in _LAUNCH_CALL.finditer(body)]
        for alloca in _ALLOCA.finditer(body):
            stored = fields.get(alloca.group(1), {})

            def value(index, stored=stored):
                name = stored.get(index)
                return constants.get(name) if name is not None else None

            block = [value((0, 1, i)) for i in range(3)]
            call = next((c for c in calls if c > alloca.start()), None)
            kernel = None
            if call is not None:
                refs = list(_KERNEL_REF.finditer(body, alloca.start(), call))
                kernel = refs[-1].group(1) if refs else None
            launches.append({
                "kernel": kernel,
                "block": block,
                "threads": math.prod(block) if None not in block else None,
                "dynamic_smem": value((0, 2)),
            })
    return launches


# ---------------------------------------------------------------------------------------------------------
# Occupancy


def _round_up(x: int, unit: int) -> int:
    return -(-x // unit) * unit


def occupancy(arch: ArchFacts, *, registers: int, threads: int, smem_bytes: int, barriers: int = 0) -> dict[str, Any]:
    """CTAs per SM and what limits them, as `cudaOccupancyMaxActiveBlocksPerMultiprocessor` computes it.

    `smem_bytes` is static + dynamic shared memory per CTA; the driver's per-CTA reservation is added here.
    Registers go to warps in 256-register units, and a warp's registers must fit in one of the four
    sub-partitions of the register file, so 168 registers x 128 threads gives 3 CTAs, not 65536/21504.
    Assumes the largest shared-memory carveout; tensor memory (sm_100) and clusters are not modelled.
    """
    warps = -(-threads // arch.warp_size)
    limits: dict[str, int] = {"ctas": arch.max_ctas_per_sm}

    limits["threads"] = 0 if threads > arch.max_threads_per_block else (arch.threads_per_sm // arch.warp_size) // warps

    regs_per_warp = _round_up(registers * arch.warp_size, arch.reg_granularity)
    fits = (
        registers <= arch.max_regs_per_thread
        and regs_per_warp * _round_up(warps, arch.sub_partitions) <= arch.regs_per_block
    )
    if not fits:
        limits["registers"] = 0
    elif regs_per_warp == 0:
        limits["registers"] = arch.max_ctas_per_sm
    else:
        warps_per_sub = (arch.regs_per_sm // arch.sub_partitions) // regs_per_warp
        limits["registers"] = warps_per_sub * arch.sub_partitions // warps

    smem_per_cta = _round_up(smem_bytes + arch.smem_reserved_per_block, arch.smem_granularity)
    if smem_per_cta > arch.smem_per_block_optin + arch.smem_reserved_per_block:
        limits["smem"] = 0
    else:
        limits["smem"] = arch.smem_per_sm // smem_per_cta

    if barriers:
        limits["barriers"] = arch.barriers_per_sm // barriers

    ctas = min(limits.values())
    limiters = [name for name, value in limits.items() if value == ctas]
    return {
        "ctas_per_sm": ctas,
        "limited_by": "/".join(limiters),
        "limits": limits,
        "warps_per_sm": ctas * warps,
        "occupancy": round(ctas * warps / (arch.threads_per_sm // arch.warp_size), 4),
        "regs_per_warp": regs_per_warp,
        "smem_per_cta": smem_per_cta,
    }


def arch_table(arch: str) -> dict[str, Any] | None:
    facts = ARCHS.get(arch)
    return asdict(facts) if facts else None


# ---------------------------------------------------------------------------------------------------------
# A compiled config's kernels: resources and occupancy from its PTX and cubin


def analyse(ptx_paths: list[Path], cubin_paths: list[Path], arch: str, launches: list[dict]) -> dict[str, Any]:
    """Per kernel entry: resources from `ptxas -v` (and `cuobjdump` on the DSL's cubin), threads, smem, occupancy."""
    ptxas = find_tool("ptxas")
    cuobjdump = find_tool("cuobjdump")
    notes = []
    ptxas_numbers: dict[str, dict] = {}
    entries: dict[str, dict] = {}
    for ptx in ptx_paths:
        entries.update(parse_ptx_entries(ptx.read_text()))
        if ptxas:
            try:
                ptxas_numbers.update(parse_ptxas(run_ptxas(ptx, arch, ptxas)))
            except RuntimeError as error:  # e.g. a PTX ISA newer than this ptxas: the compile itself stands
                notes.append(str(error))
    if not ptxas:
        notes.append("ptxas not found (pip install nvidia-cuda-nvcc): no spills, stack or static smem")
    cubin_numbers: dict[str, dict] = {}
    if cuobjdump:
        for cubin in cubin_paths:
            try:
                cubin_numbers.update(parse_cuobjdump(run_cuobjdump(cubin, cuobjdump)))
            except RuntimeError as error:
                notes.append(str(error))
    facts = ARCHS.get(arch)
    if facts is None:
        notes.append(f"no architecture facts for {arch}: occupancy not computed")

    by_kernel = {launch["kernel"]: launch for launch in launches if launch.get("kernel")}
    kernels = [_kernel(name, ptxas_numbers.get(name, {}), cubin_numbers.get(name), entries.get(name, {}),
                       by_kernel.get(name), facts, notes) for name in entries or ptxas_numbers]
    return {"kernels": kernels, "notes": notes}


def _kernel(name: str, numbers: dict, cubin: dict | None, entry: dict, launch: dict | None, facts, notes: list) -> dict[str, Any]:
    """One kernel entry's resources, each with where it was read, and its occupancy where all are known."""
    kernel: dict[str, Any] = {"name": name}
    if cubin:
        kernel["registers"], kernel["registers_from"] = cubin["registers"], "cubin (cuobjdump)"
    elif numbers:
        kernel["registers"], kernel["registers_from"] = numbers["registers"], "ptxas -v"
    else:
        kernel["registers"], kernel["registers_from"] = None, None
    for field in ("spill_stores", "spill_loads", "stack_bytes", "smem_static", "barriers"):
        kernel[field] = numbers.get(field)
    if not numbers and cubin:
        # No ptxas that reads this PTX (the GPU machine's CUDA 13.0 ptxas is older than CuTe DSL's
        # PTX ISA): the DSL's own cubin still gives the stack and the static shared memory.
        reserved = facts.smem_reserved_per_block if facts else 1024
        kernel["stack_bytes"] = cubin.get("stack_bytes")
        if cubin.get("shared_bytes") is not None:
            kernel["smem_static"] = max(cubin["shared_bytes"] - reserved, 0)
    if launch is None:
        kernel["smem_dynamic"] = None
        kernel["smem_dynamic_from"] = "not found: no launch of this kernel in the compiled host code"
    elif launch["dynamic_smem"] is None:
        kernel["smem_dynamic"] = None
        kernel["smem_dynamic_from"] = "not found: the launch's dynamic shared memory is not a compile-time constant"
    else:
        kernel["smem_dynamic"] = launch["dynamic_smem"]
        kernel["smem_dynamic_from"] = "launch config in the compiled host code"
    if kernel["smem_static"] is not None and kernel["smem_dynamic"] is not None:
        kernel["smem_total"] = kernel["smem_static"] + kernel["smem_dynamic"]
    else:
        kernel["smem_total"] = None
    if entry.get("threads"):
        kernel["threads"], kernel["threads_from"] = entry["threads"], entry["threads_from"]
    elif launch and launch.get("threads"):
        kernel["threads"], kernel["threads_from"] = launch["threads"], f"launch blockDim {launch['block']}"
    else:
        kernel["threads"], kernel["threads_from"] = None, None
    kernel["ptxas"] = numbers or None
    kernel["cubin"] = cubin
    kernel["occupancy"] = None
    missing = [k for k in ("registers", "threads", "smem_total") if kernel[k] is None]
    if facts and not missing:
        kernel["occupancy"] = occupancy(
            facts, registers=kernel["registers"], threads=kernel["threads"],
            smem_bytes=kernel["smem_total"], barriers=kernel["barriers"] or 0,
        )
    elif facts:
        notes.append(f"{name}: occupancy not computed ({', '.join(missing)} unknown)")
    return kernel


_TOOL_VERSIONS: dict[str, str] = {}


def tool_versions() -> dict[str, str | None]:
    """Versions of the tools that read the artifacts, once per process."""
    out: dict[str, str | None] = {}
    for name in ("ptxas", "cuobjdump"):
        path = find_tool(name)
        if path and path not in _TOOL_VERSIONS:
            _TOOL_VERSIONS[path] = tool_version(path)
        out[name] = _TOOL_VERSIONS.get(path) if path else None
    return out

