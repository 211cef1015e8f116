"""Compile stage: CuTe DSL ahead-of-time compile of a candidate, in a child process, on any machine.

For each distinct compile-time configuration among the target's benchmarks the kernel file's compile hook
runs once, with `CUTE_DSL_ARCH` set from the target, so that a compile error, a compiler crash or a hang
is a verdict before any GPU is involved. The kept PTX and cubin go to an on-disk cache, and what the
kernel asks of an SM (registers, spills, shared memory, threads) is read from them (judge/stages/compile/resources.py); the cache is judge/stages/compile/cache.py, error lines judge/stages/compile/tracebacks.py.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import tempfile
import time
import traceback
from concurrent.futures import ThreadPoolExecutor, as_completed
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from . import resources
from .cache import CompileCache, cache_key, default_signature, distinct_configs, sha
from ...errors import JudgeError
from ...extensions import SIGNATURE
from ...sandbox.confine import Policy
from ...sandbox.isolation import run_isolated
from ..details import CompileDetail, CompiledConfig, CompileError, KernelResources
from ..result import StageResult
from ...targets import Target
from .tracebacks import describe_error

if TYPE_CHECKING:
    from .workers import CompileWorkers

STAGE = "compile"
# What a fresh compile child imports before its confinement, as a warm one has (judge.stages.compile.workers): torch,
# with judge's bytecode cache where the machine keeps none (judge.sandbox.bytecode). On an H200 host that keeps none,
# the base's compile of pmpp/prefixsum_py, a fresh child whose kernel imported torch itself, took 3.5 s (2026-11-30).
FRESH_PRELOAD = ("torch",)
KEEP_OPTIONS = "--keep-ptx --keep-cubin"
DSL_PACKAGE = "nvidia-cutlass-dsl"


# ---------------------------------------------------------------------------------------------------------
# Public entry points


def run_compile(target: Target, workspace: Path, *, cache_dir: Path, timeout_s: float | None = None,
                workers: "CompileWorkers | None" = None) -> StageResult:
    """Compile every distinct configuration of the kernel assembled in `workspace`; cached ones skip the child,
    which is a fresh process, or one of `workers`' warm ones (judge.stages.compile.workers: the same verdicts)."""
    spawn = workers.run if workers is not None else partial(run_isolated, preload=FRESH_PRELOAD)
    workspace = Path(workspace).resolve()
    cache = CompileCache(Path(cache_dir))
    kernel_path = workspace / target.kernel_file
    if not kernel_path.is_file():
        raise JudgeError(f"{workspace}: no kernel file '{target.kernel_file}' (assemble the workspace first)")
    limit = timeout_s if timeout_s is not None else target.limits.compile_s
    if not target.compile_entry:
        return _import_only(target, workspace, limit, spawn)

    if target.arch not in resources.ARCHS and not re.fullmatch(r"sm_\d+[af]?", target.arch):
        raise JudgeError(
            f"{target.path / 'judge.toml'}: field 'arch': '{target.arch}' — a compile hook needs an architecture "
            "such as sm_100a or sm_90a"
        )
    try:
        dsl_version = importlib.metadata.version(DSL_PACKAGE)
    except importlib.metadata.PackageNotFoundError:
        raise JudgeError(f"{DSL_PACKAGE} is not installed; the compile stage needs it (pip install 'judge[cute]')") from None

    source = kernel_path.read_text()
    specs = list(target.benchmarks or target.tests)
    key_parts = {
        "source": sha(source),
        "arch": target.arch,
        "dsl": dsl_version,
        "target": target.fingerprint(),
    }
    start = time.monotonic()
    index_key = sha(json.dumps({**key_parts, "specs": specs}, sort_keys=True, default=str))
    known = cache.read_index(index_key)
    if known is not None and all(cache.has(c["key"]) for c in known):
        configs = [_from_cache(cache, c) for c in known]
        return _verdict(target, configs, time.monotonic() - start, dsl_version, log_tail="")

    result = _compile_in_child(target, workspace, specs, key_parts, cache, limit, dsl_version, start, spawn)
    if isinstance(result, StageResult):
        return result
    configs, log_tail = result
    if all(c.ok for c in configs):
        cache.write_index(index_key, [{"signature": c.signature, "benchmarks": c.benchmarks, "key": c.key} for c in configs])
    return _verdict(target, configs, time.monotonic() - start, dsl_version, log_tail)


def compile_many(
    jobs: list[tuple[Target, Path]],
    *,
    cache_dir: Path,
    workers: int | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> list[StageResult]:
    """Compile many candidates at once, one child each, across CPU cores; results come back in job order."""
    results: list[StageResult | None] = [None] * len(jobs)
    if progress:
        progress(0, len(jobs))
    with ThreadPoolExecutor(max_workers=max(1, workers or os.cpu_count() or 1)) as pool:
        futures = {
            pool.submit(run_compile, target, workspace, cache_dir=cache_dir): index
            for index, (target, workspace) in enumerate(jobs)
        }
        for done, future in enumerate(as_completed(futures), start=1):
            results[futures[future]] = future.result()
            if progress:
                progress(done, len(jobs))
    return results  # type: ignore[return-value]


# ---------------------------------------------------------------------------------------------------------
# After the child: resources, cache, verdict


def _compile_in_child(target: Target, workspace: Path, specs: list[dict], key_parts: dict[str, str],
                      cache: CompileCache, limit: float, dsl_version: str, start: float, spawn=run_isolated):
    """Compile every config not in the cache in one confined child; its configs and log, or the stage's
    result when the child failed or the kernel did not import."""
    with tempfile.TemporaryDirectory(prefix="judge-compile-") as tmp:
        scratch = Path(tmp)
        progress_path = scratch / "progress.jsonl"
        outcome = spawn(
            _child_compile,
            {
                "workspace": str(workspace),
                "kernel_module": _module_name(target.kernel_file),
                "kernel_file": target.kernel_file,
                "entry": target.compile_entry,
                "specs": specs,
                "options": KEEP_OPTIONS,
                "key_parts": key_parts,
                "cache_dir": str(cache.root),
                "progress_path": str(progress_path),
            },
            timeout_s=limit,
            cwd=scratch,
            env={
                "CUTE_DSL_ARCH": target.arch,
                "CUTE_DSL_DUMP_DIR": str(scratch),
                # Every compile here is a real one: judge keeps its own cache, keyed on what it can see.
                "CUTE_DSL_DISABLE_FILE_CACHING": "1",
            },
            log_path=workspace / "compile.log",
            # Importing the kernel runs contestant code: confined like every runner, the cache read-only.
            policy=Policy(writable=[workspace, scratch], readable=[cache.root]),
        )
        seconds = time.monotonic() - start
        if outcome.status != "ok":
            progress = _read_progress(progress_path)
            return _child_failed(target, outcome, progress, cache, scratch, seconds, limit, dsl_version)
        value = outcome.value
        if value.get("import_error"):
            error = CompileError.from_json(value["import_error"])
            return StageResult(STAGE, "failed", error.line, seconds,
                               CompileDetail(arch=target.arch, dsl_version=dsl_version, error=error, configs=[]),
                               outcome.log_tail)
        configs = [_finish_config(target, c, cache, scratch) for c in value["configs"]]
    return configs, outcome.log_tail


def _finish_config(target: Target, config: dict[str, Any], cache: CompileCache, scratch: Path) -> CompiledConfig:
    """One config from the child: read resources from its artifacts and cache them, or describe its error."""
    if config.get("cached"):
        return _from_cache(cache, config)
    error = config.get("error")
    out = CompiledConfig(signature=config["signature"], benchmarks=config["benchmarks"], key=config["key"],
                         ok=config["ok"], cached=False, seconds=config["seconds"],
                         error=CompileError.from_json(error) if error is not None else None)
    if not config["ok"]:
        return out
    ptx_paths = [scratch / p for p in config["ptx"]]
    cubin_paths = [scratch / p for p in config["cubin"]]
    if ptx_paths:
        analysis = resources.analyse(ptx_paths, cubin_paths, target.arch, config["launches"])
    else:
        analysis = {"kernels": [], "notes": [config.get("no_artifacts") or "no PTX kept: resources unknown"]}
    meta = {  # the cache entry: what a later hit needs to give the same config back
        "signature": config["signature"],
        "seconds": config["seconds"],
        "ptx_bytes": sum(p.stat().st_size for p in ptx_paths) if ptx_paths else None,
        "cubin_bytes": sum(p.stat().st_size for p in cubin_paths) if cubin_paths else None,
        "kernels": analysis["kernels"],
        "notes": analysis["notes"],
        "tools": resources.tool_versions(),
        "arch": target.arch,
    }
    files = {f"kernel{'' if i == 0 else i}.ptx": p for i, p in enumerate(ptx_paths)}
    files.update({f"kernel{'' if i == 0 else i}.cubin": p for i, p in enumerate(cubin_paths)})
    return out.updated(files=cache.put(config["key"], meta, files), **_resources(meta))


def _from_cache(cache: CompileCache, config: dict[str, Any]) -> CompiledConfig:
    meta = cache.get(config["key"])
    return CompiledConfig(signature=config["signature"], benchmarks=config["benchmarks"], key=config["key"],
                          ok=True, cached=True, seconds=meta["seconds"], error=None, files=meta["files"],
                          **_resources(meta))


def _resources(meta: dict[str, Any]) -> dict[str, Any]:
    """A config's resources as its cache entry keeps them (judge/stages/compile/resources.py's dicts), typed."""
    return {"ptx_bytes": meta["ptx_bytes"], "cubin_bytes": meta["cubin_bytes"], "notes": meta["notes"],
            "tools": meta["tools"], "kernels": [KernelResources.from_json(k) for k in meta["kernels"]]}


def _verdict(target: Target, configs: list[CompiledConfig], seconds: float, dsl_version: str,
             log_tail: str) -> StageResult:
    detail = CompileDetail(arch=target.arch, gpu=resources.arch_table(target.arch),
                           occupancy_model=resources.OCCUPANCY_MODEL, dsl_version=dsl_version,
                           entry=target.compile_entry, configs=configs)
    failed = [c for c in configs if not c.ok]
    if failed:
        first = failed[0].error.line
        if len(configs) > 1 and (len(failed) < len(configs) or len({c.error.line for c in failed}) > 1):
            summary = f"{len(failed)} of {len(configs)} configs failed; first: {first}"
        else:
            summary = first
        return StageResult(STAGE, "failed", summary, seconds, detail, log_tail)
    return StageResult(STAGE, "passed", summarize(target.arch, configs), seconds, detail, log_tail)


def summarize(arch: str, configs: list[CompiledConfig]) -> str:
    """"compiled 4/4 configs for sm_100a: 168 regs, 0 B spills, 99.3 KiB smem, 1 CTA/SM (smem)", worst case first."""
    n = len(configs)
    head = f"compiled {n}/{n} config{'s' if n != 1 else ''} for {arch}"
    cached = sum(1 for c in configs if c.cached)
    tail = f" ({cached} cached)" if cached else ""
    kernels = [k for c in configs for k in c.kernels]
    if not kernels:
        return head + tail + ": resources unknown (no PTX kept)"
    parts = []
    regs = [k.registers for k in kernels if k.registers is not None]
    if regs:
        parts.append(f"{max(regs)} regs")
    spills = [k.spill_stores + k.spill_loads for k in kernels if k.spill_stores is not None]
    if spills:
        parts.append(f"{max(spills)} B spills")
    smem = [k.smem_total for k in kernels if k.smem_total is not None]
    if smem:
        parts.append(f"{max(smem) / 1024:.1f} KiB smem")
    elif any(k.smem_static is not None for k in kernels):
        parts.append("dynamic smem unknown")
    occupancies = [k.occupancy for k in kernels if k.occupancy]
    if occupancies:
        worst = min(occupancies, key=lambda o: o.ctas_per_sm)
        parts.append(f"{worst.ctas_per_sm} CTA/SM ({worst.limited_by})")
    return head + ": " + ", ".join(parts) + tail


def _child_failed(target, outcome, progress, cache, scratch, seconds, limit, dsl_version) -> StageResult:
    """A crash or hang of the child: still a verdict, naming the config it was compiling, keeping the rest."""
    done = [_finish_config(target, c, cache, scratch) for c in progress["done"]]
    current = progress["current"]
    where = ""
    if current is not None:
        where = f" while compiling config {current['index'] + 1} of {current['total']} ({_short(current['signature'])})"
    elif not progress["started"]:
        where = " before compiling (importing the kernel file)"
    if outcome.status == "timed-out":
        summary = f"timed out after {limit:g} s{where}"
    else:
        summary = f"{outcome.status}: {outcome.error}{where}"
    detail = CompileDetail(arch=target.arch, gpu=resources.arch_table(target.arch), dsl_version=dsl_version,
                           entry=target.compile_entry, error=outcome.error, exit_code=outcome.exit_code,
                           compiling=current, configs=done)
    return StageResult(STAGE, outcome.status, summary, seconds, detail, outcome.log_tail)


def _read_progress(path: Path) -> dict[str, Any]:
    state: dict[str, Any] = {"started": False, "current": None, "done": []}
    if not path.exists():
        return state
    for line in path.read_text().splitlines():
        try:
            event = json.loads(line)
        except json.JSONDecodeError:  # the last line of a killed child may be cut short
            continue
        if event["event"] == "signatures":
            state["started"] = True
        elif event["event"] == "start":
            state["current"] = event
        elif event["event"] == "done":
            state["done"].append(event["config"])
            state["current"] = None
    return state


def _import_only(target: Target, workspace: Path, limit: float, spawn=run_isolated) -> StageResult:
    """A target without a compile hook: importing the kernel file is all that can be checked ahead of time."""
    env = {"CUTE_DSL_ARCH": target.arch} if target.arch in resources.ARCHS else None
    outcome = spawn(
        _child_import,
        {"workspace": str(workspace), "kernel_module": _module_name(target.kernel_file), "kernel_file": target.kernel_file},
        timeout_s=limit, cwd=workspace, env=env, log_path=workspace / "compile.log",
        policy=Policy(writable=[workspace], readable=[]),
    )
    detail = CompileDetail(arch=target.arch, entry=None, configs=[])
    if outcome.status == "timed-out":
        return StageResult(STAGE, "timed-out", f"timed out after {limit:g} s importing {target.kernel_file}",
                           outcome.seconds, detail.updated(error=outcome.error), outcome.log_tail)
    if outcome.status in ("crashed", "tampered"):
        return StageResult(STAGE, outcome.status, f"{outcome.status}: {outcome.error} importing {target.kernel_file}",
                           outcome.seconds, detail.updated(error=outcome.error), outcome.log_tail)
    if outcome.value.get("import_error"):
        error = CompileError.from_json(outcome.value["import_error"])
        return StageResult(STAGE, "failed", error.line, outcome.seconds, detail.updated(error=error), outcome.log_tail)
    summary = f"imported {target.kernel_file}; no compile hook: the kernel compiles at its first call"
    return StageResult(STAGE, "passed", summary, outcome.seconds, detail, outcome.log_tail)


def _module_name(kernel_file: str) -> str:
    return kernel_file.removesuffix(".py").replace("/", ".")


def _short(signature: Any, limit: int = 80) -> str:
    text = json.dumps(signature, sort_keys=True)
    return text if len(text) <= limit else text[: limit - 3] + "..."


# ---------------------------------------------------------------------------------------------------------
# In the child (cwd: a scratch directory; the DSL drops its PTX there)


def _child_import(workspace: str, kernel_module: str, kernel_file: str) -> dict:
    import importlib
    import sys

    sys.path.insert(0, workspace)
    try:
        importlib.import_module(kernel_module)
    except Exception as error:
        return {"import_error": describe_error(_format(error), kernel_file)}
    return {"import_error": None}


def _child_compile(
    workspace: str,
    kernel_module: str,
    kernel_file: str,
    entry: str,
    specs: list[dict],
    options: str,
    key_parts: dict[str, str],
    cache_dir: str,
    progress_path: str,
) -> dict:
    import importlib
    import sys

    sys.path.insert(0, workspace)
    progress = open(progress_path, "a", buffering=1)
    try:
        module = importlib.import_module(kernel_module)
    except Exception as error:
        return {"import_error": describe_error(_format(error), kernel_file)}
    hook = getattr(module, entry, None)
    if not callable(hook):
        line = f"AttributeError: {kernel_file} defines no {entry}() (the compile hook judge.toml names)"
        return {"import_error": {"type": "AttributeError", "message": line, "where": None, "line": line}}
    signature_of = getattr(module, SIGNATURE, None)  # judge.extensions.CompileSignature
    try:
        signatures = [signature_of(dict(spec)) if signature_of else default_signature(spec) for spec in specs]
    except Exception as error:
        return {"import_error": describe_error(_format(error), kernel_file)}
    configs = distinct_configs(signatures)
    progress.write(json.dumps({"event": "signatures", "count": len(configs)}) + "\n")

    cache = CompileCache(Path(cache_dir))
    results = []
    for index, (signature, served) in enumerate(configs):
        key = cache_key(key_parts, signature)
        result: dict[str, Any] = {"signature": signature, "benchmarks": served, "key": key}
        if cache.has(key):
            results.append({**result, "ok": True, "cached": True})
            continue
        progress.write(json.dumps({"event": "start", "index": index, "total": len(configs), "signature": signature}) + "\n")
        start = time.perf_counter()
        try:
            compiled = hook(dict(specs[served[0]]), options)
        except Exception as error:
            result.update(ok=False, seconds=round(time.perf_counter() - start, 3),
                          error=describe_error(_format(error), kernel_file))
            traceback.print_exception(error)
        else:
            result.update(ok=True, seconds=round(time.perf_counter() - start, 3), error=None)
            result.update(_save_artifacts(compiled, index))
        progress.write(json.dumps({"event": "done", "config": result}) + "\n")
        results.append(result)
    return {"configs": results}


def _save_artifacts(compiled: Any, index: int) -> dict[str, Any]:
    """Write the compiled objects' PTX and cubin into the scratch directory; read their launch configs."""
    objects = list(compiled.values()) if isinstance(compiled, dict) else (
        list(compiled) if isinstance(compiled, (list, tuple)) else [compiled]
    )
    ptx, cubin, launches = [], [], []
    for n, obj in enumerate(objects):
        text = getattr(obj, "__ptx__", None)
        binary = getattr(obj, "__cubin__", None)
        if text:
            name = f"config{index}-{n}.ptx"
            Path(name).write_text(text if isinstance(text, str) else text.decode())
            ptx.append(name)
        if binary:
            name = f"config{index}-{n}.cubin"
            Path(name).write_bytes(binary)
            cubin.append(name)
        module = getattr(obj, "ir_module", None)
        if module is not None:
            launches.extend(resources.parse_launches(str(module)))
    out: dict[str, Any] = {"ptx": ptx, "cubin": cubin, "launches": launches}
    if not ptx:
        kind = type(compiled).__name__
        out["no_artifacts"] = (
            f"the hook returned a {kind} with no __ptx__: it must return cute.compile's result and pass `options` on"
        )
    return out


def _format(error: BaseException) -> str:
    return "".join(traceback.format_exception(error))
