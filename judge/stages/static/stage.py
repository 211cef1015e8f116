"""Static stage: a target's rules over every compiled config's PTX, and its layout checks on the CPU.

It runs wherever the compile stage runs, GPU or not, so a patch that compiles into wrong code is eliminated
(`static-check-failed`, with the rule and the PTX line) on a machine that cannot run the kernel: the SM100
target has no B200 here. The rules (judge.stages.static.rules) read what the compiler produced; the layout checks
(the target's own `layout_checks.py`) call the candidate's host code in a confined child and compare the
layouts it builds with the reference's. Both catch honest mistakes; a layout check runs the candidate's
Python, which could lie to it, so only the GPU's correctness stage has the last word where one exists.
"""

from __future__ import annotations

import hashlib
import time
from pathlib import Path
from typing import Any

from ...extensions import CHECKS
from ...sandbox.confine import Policy
from ...workspaces import fresh
from ...sandbox.isolation import run_isolated
from ..details import CompiledConfig, LayoutCheck, RuleResult, StaticConfig, StaticDetail
from ..result import StageResult
from .rules import RULES, Code, knobs_text
from ...targets import Target

STAGE = "static"
CHECKS_LIST = CHECKS  # judge.extensions.LayoutCheck


def run_static(target: Target, workspace: Path, compile_stage: StageResult) -> StageResult:
    """The target's rules on each config `compile_stage` compiled, then its layout checks on `workspace`."""
    spec = target.static
    workspace = Path(workspace).resolve()  # the layout checks' child runs elsewhere: its paths must be absolute
    start = time.monotonic()
    configs = [_config_rules(target, config) for config in compile_stage.detail.configs]
    if spec.rules and not configs:
        configs = [StaticConfig(signature=None, rules=[RuleResult(
            "compile", False, "no compiled config to read: the target's rules need a compile hook")])]
    checks: list[LayoutCheck] = []
    log_tail = ""
    if spec.layout_checks:
        checks, log_tail = run_layout_checks(target, workspace)
    seconds = time.monotonic() - start
    detail = StaticDetail(rules=sorted(spec.rules), configs=configs, layout_checks=checks,
                          layout_checks_file=spec.layout_checks)
    failures = [(c, r) for c in configs for r in c.rules if not r.passed]
    if failures:
        config, result = failures[0]
        where = f" (config {_short(config.signature)})" if len(configs) > 1 else ""
        return StageResult(STAGE, "failed", f"{result.rule}: {result.message}{where}", seconds, detail)
    failed = [c for c in checks if c.status != "passed"]
    if failed:
        first = failed[0]
        return StageResult(STAGE, "failed", f"layout check {first.name}: {first.message}", seconds, detail,
                           log_tail)
    text = summary(len(spec.rules), len(configs), len(checks))
    skipped = [r for c in configs for r in c.rules if r.ran is False]
    if skipped:
        names = ", ".join(sorted({r.rule for r in skipped}))
        text += f"; not run on this machine: {names} ({skipped[0].message})"
    return StageResult(STAGE, "passed", text, seconds, detail, log_tail)


def summary(rules: int, configs: int, checks: int) -> str:
    parts = []
    if rules:
        parts.append(f"{rules} rule{'s' if rules != 1 else ''} on {configs} config{'s' if configs != 1 else ''}")
    if checks:
        parts.append(f"{checks} layout check{'s' if checks != 1 else ''}")
    return f"{' and '.join(parts) or 'nothing declared'} passed"


def _config_rules(target: Target, config: CompiledConfig) -> StaticConfig:
    """Every declared rule on one config's PTX files (a cached config reads its files from the cache)."""
    signature = config.signature or {}
    ptx_files = [Path(path) for name, path in sorted((config.files or {}).items()) if name.endswith(".ptx")]
    results: list[RuleResult] = []
    if not ptx_files:
        results.append(RuleResult("compile", False, "no PTX kept for this config: the target's rules cannot run"))
    for path in ptx_files:
        code = Code.read(path, target.arch)
        for name, params in target.static.rules.items():
            results.append(RULES[name](code, params, signature))
    return StaticConfig(signature=signature, rules=results)


def run_layout_checks(target: Target, workspace: Path) -> tuple[list[LayoutCheck], str]:
    """The target's layout checks in a confined child that imports the candidate's kernel (contestant code)."""
    workspace = Path(workspace).resolve()
    checks_path = (target.path / target.static.layout_checks).resolve()
    scratch = fresh(workspace.parent / f".{workspace.name}-static")
    seed = int(hashlib.sha256((workspace / target.kernel_file).read_bytes()).hexdigest()[:12], 16)
    outcome = run_isolated(
        _child_layout_checks,
        {"workspace": str(workspace), "checks_path": str(checks_path),
         "kernel_module": target.kernel_file.removesuffix(".py").replace("/", "."), "seed": seed},
        timeout_s=target.limits.compile_s, cwd=scratch,
        env={"CUTE_DSL_ARCH": target.arch, "CUTE_DSL_DUMP_DIR": str(scratch), "CUTE_DSL_DISABLE_FILE_CACHING": "1"},
        log_path=workspace / "static.log",
        policy=Policy(writable=[workspace, scratch], readable=[checks_path.parent]),
    )
    if outcome.status != "ok":
        ending = "ran past the compile limit" if outcome.status == "timed-out" else outcome.error
        return [LayoutCheck(name="(all)", status="error", message=f"the layout checks' process {ending}",
                            seconds=round(outcome.seconds, 3))], outcome.log_tail
    # The child imported contestant code: its answer is read as JSON, like any other stored detail.
    return [LayoutCheck.from_json(c) for c in outcome.value], outcome.log_tail


def _short(signature: Any, limit: int = 80) -> str:
    text = knobs_text(signature) if isinstance(signature, dict) else str(signature)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _child_layout_checks(workspace: str, checks_path: str, kernel_module: str, seed: int) -> list[dict]:
    """In the child: import the kernel, the reference and the checks file; run each check with its own rng."""
    import importlib
    import importlib.util
    import random
    import sys
    import traceback

    sys.path.insert(0, workspace)
    spec = importlib.util.spec_from_file_location("judge_layout_checks", checks_path)
    checks_module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(checks_module)
    results = []
    try:
        kernel = importlib.import_module(kernel_module)
        reference = importlib.import_module("reference")
    except Exception as error:  # the kernel's import fails: every check says so
        line = traceback.format_exception_only(error)[-1].strip()
        return [{"name": "(import)", "status": "error", "message": f"the kernel does not import: {line}", "seconds": 0.0}]
    for index, check in enumerate(getattr(checks_module, CHECKS_LIST, [])):
        name = getattr(check, "__name__", f"check {index}").removeprefix("check_").replace("_", "-")
        start = time.perf_counter()
        try:
            message, status = str(check(kernel, reference, random.Random(seed + index))), "passed"
        except AssertionError as error:
            message, status = str(error) or "assertion failed", "failed"
        except Exception as error:
            line = traceback.format_exception_only(error)[-1].strip()
            message, status = f"the check could not run on this kernel ({line}): a patch must keep what it reads", "error"
        results.append({"name": name, "status": status, "message": message.splitlines()[0] if message else "",
                        "seconds": round(time.perf_counter() - start, 3)})
    return results
