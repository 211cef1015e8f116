"""Loads a target: a GPU MODE problem directory as it is, plus judge's optional `judge.toml` beside it."""

from __future__ import annotations

import hashlib
import re
import shutil
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from .errors import JudgeError
from .extensions import STATIC_RULES
from .formulas import check_formula
from .target_hooks import check_hooks

SUBMISSION = "@SUBMISSION@"
METADATA_FILE = "judge.toml"


@dataclass
class Limits:
    """Wall-clock seconds each stage's child process may run before it is killed."""

    compile_s: float = 300.0
    check_s: float = 300.0
    timing_s: float = 600.0


CLOCKS = ("gpu", "call", "host")
RANKINGS = {"last": "the last benchmark's time", "geom": "the geometric mean of the benchmarks' times",
            "mean": "the mean of the benchmarks' times"}
"""task.yml's `ranking_by`, GPU MODE's RankCriterion: what a leaderboard ranks by, so what a verdict is on. Where
task.yml names none it is GPU MODE's default, "last" (its pmpp problems rank by their largest benchmark)."""
DOTTED = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")
DEFAULT_MAX_SPEEDUP = 10.0


@dataclass
class Distribution:
    """A named input generator: the reference's generate_input (empty `generator`) or `file.py:function` in the
    target directory, called with the same keyword arguments. Correctness runs every case under each."""

    name: str
    generator: str = ""

    @property
    def file(self) -> str | None:
        return self.generator.partition(":")[0] or None


@dataclass
class StaticSpec:
    """The static stage a target declares (judge.toml [static]): rules over each config's PTX, with their
    parameters, and a trusted file of CPU layout checks in the target directory."""

    rules: dict[str, dict[str, Any]] = field(default_factory=dict)
    layout_checks: str | None = None


@dataclass
class PeerSpec:
    """An existing implementation the target is raced against (judge.toml [peer]): a trusted file in the target
    directory with the kernel file's entry point, timed against each round's base once, for the base/peer column."""

    file: str
    name: str


@dataclass(frozen=True)
class ForbiddenCall:
    """A call a candidate may not make (judge.toml [rules] forbidden_calls), such as the peer's op: the screen
    fails a patch that adds one (outcome 'forbidden-call'), however the patch spells it."""

    call: str  # a dotted name: "torch._scaled_grouped_mm"; a bare name is a builtin
    why: str  # one line, shown in the brief and in the verdict


@dataclass
class Target:
    """Everything judge needs to know about one kernel problem."""

    name: str
    path: Path
    kernel_file: str
    arch: str
    tests: list[dict[str, Any]]
    benchmarks: list[dict[str, Any]]
    files: list[tuple[str, str]]
    rtol: float | None = None
    atol: float | None = None
    limits: Limits = field(default_factory=Limits)
    speed_of_light_us: list[float] = field(default_factory=list)
    compile_entry: str | None = None
    ranking_by: str = "geom"  # a key of RANKINGS
    clock: str = "gpu"
    distributions: list[Distribution] = field(default_factory=lambda: [Distribution("default")])
    max_speedup: float = DEFAULT_MAX_SPEEDUP
    min_effect: float | None = None
    static: StaticSpec | None = None
    peer: PeerSpec | None = None
    cores: int | None = None  # judge.toml [resources] cores; None: judge's default (cores_for_timing)
    forbidden: list[ForbiddenCall] = field(default_factory=list)

    @property
    def cores_for_timing(self) -> int:
        """The cores each timed process pair gets, base and candidate alike (they take turns on them): the
        target's budget, else one on a CPU target (one thread of the kernel's, as the base) and two on a GPU
        (the launching thread and CUDA's own)."""
        if self.cores is not None:
            return self.cores
        return 1 if self.on_cpu else 2

    @property
    def forbidden_calls(self) -> list[str]:
        """The dotted names this target forbids, as judge.toml writes them. A runtime tripwire wraps each name in
        judge.stages.screen.forbidden.spellings(name), which adds torch's op namespaces (torch.ops.aten.x, ...)."""
        return [f.call for f in self.forbidden]

    @property
    def on_cpu(self) -> bool:
        """Every stage runs on the CPU: correctness, and timing with the host's clock."""
        return self.arch == "cpu"

    @property
    def deciding_clock(self) -> str:
        return "host" if self.on_cpu else self.clock

    @property
    def kernel_path(self) -> Path:
        return self.path / self.kernel_file

    @property
    def sources(self) -> dict[str, str]:
        """Each file of the runnable directory by its name there, to the file it is read from, relative to the
        target directory (the kernel file's own path for the kernel)."""
        return {name: self.kernel_file if source == SUBMISSION else source for name, source in self.files}

    def kernel_source(self) -> str:
        return self.kernel_path.read_text()

    def benchmark_label(self, index: int) -> str:
        return spec_label(self.benchmarks[index])

    @property
    def ranked_benchmarks(self) -> list[int]:
        """The benchmarks a verdict is on, so the ones timed: the last alone where task.yml ranks by it, else all
        (every benchmark is still checked for correctness)."""
        every = list(range(len(self.benchmarks)))
        return every[-1:] if self.ranking_by == "last" else every

    def fingerprint(self) -> str:
        """Hash of the files that define the problem (not the kernel), so a changed reference is noticed."""
        digest = hashlib.sha256()
        for name, source in self.files:
            if source == SUBMISSION:
                continue
            digest.update(name.encode())
            digest.update((self.path / source).read_bytes())
        return digest.hexdigest()[:16]

    def assemble(self, dest: Path, kernel_source: str) -> Path:
        """Write a runnable directory: the task's files, with `kernel_source` as the kernel file."""
        dest.mkdir(parents=True, exist_ok=True)
        for name, source in self.files:
            out = dest / name
            out.parent.mkdir(parents=True, exist_ok=True)
            if source == SUBMISSION:
                out.write_text(kernel_source)
            else:
                shutil.copyfile(self.path / source, out)
        for distribution in self.distributions:
            if distribution.file:
                shutil.copyfile(self.path / distribution.file, dest / distribution.file)
        return dest


def spec_label(spec: dict[str, Any]) -> str:
    """A short human name for a test or benchmark spec: lists that vary show their range."""
    parts = []
    for key, value in spec.items():
        if key == "seed":
            continue
        if isinstance(value, (list, tuple)):
            values = list(value)
            if not values:
                continue
            if all(v == values[0] for v in values):
                parts.append(f"{key}={values[0]}")
            else:
                parts.append(f"{key}={min(values)}..{max(values)}")
        else:
            parts.append(f"{key}={value}")
    return " ".join(parts)


def _read_yaml(path: Path) -> dict[str, Any]:
    try:
        data = yaml.safe_load(path.read_text())
    except FileNotFoundError:
        raise JudgeError(f"{path}: not found (a target needs task.yml)") from None
    except yaml.YAMLError as error:
        raise JudgeError(f"{path}: not valid YAML: {str(error).splitlines()[0]}") from None
    if not isinstance(data, dict):
        raise JudgeError(f"{path}: expected a mapping at the top level")
    return data


def _read_metadata(path: Path) -> dict[str, Any]:
    if not path.exists():
        return {}
    try:
        return tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as error:
        raise JudgeError(f"{path}: not valid TOML: {error}") from None


def load_target(path: str | Path) -> Target:
    """Read `task.yml` and optional `judge.toml`; any GPU MODE problem directory loads unchanged. A directory
    whose files lack what judge calls (GPU MODE's contract, the hooks judge.toml asks for) is refused here, before
    any compile or process starts."""
    path = Path(path).resolve()
    if not path.is_dir():
        raise JudgeError(f"{path}: target directory not found")
    task = _read_yaml(path / "task.yml")
    if task.get("multi_gpu"):  # GPU MODE's amd_distributed: generate_input(rank, world_size, ...) on every rank
        raise JudgeError(f"{path / 'task.yml'}: field 'multi_gpu': judge runs each kernel as one process on one "
                         "device; a problem run as one process per GPU under torch.distributed is not supported")
    meta = _read_metadata(path / METADATA_FILE)
    where = path / METADATA_FILE

    kernel_file = meta.get("kernel_file", "submission.py")
    files = _files(task, path, kernel_file)
    if not (path / kernel_file).is_file():
        raise JudgeError(f"{where}: field 'kernel_file': '{kernel_file}' not found in {path}")

    for key in ("tests", "benchmarks"):
        specs = task.get(key) or []
        if not isinstance(specs, list) or not all(isinstance(s, dict) for s in specs):
            raise JudgeError(f"{path / 'task.yml'}: field '{key}': must be a list of keyword-argument mappings")

    tolerance = meta.get("tolerance", {})
    limits = _limits(meta.get("limits", {}), task, where)
    benchmarks = task.get("benchmarks") or []
    sol = [float(x) for x in meta.get("speed_of_light_us", [])]
    if sol and len(sol) != len(benchmarks):
        raise JudgeError(
            f"{where}: field 'speed_of_light_us': {len(sol)} values for {len(benchmarks)} benchmarks"
        )
    measuring = _measuring(meta, where)
    target = Target(
        name=meta.get("name", path.name),
        path=path,
        kernel_file=kernel_file,
        arch=str(meta.get("arch", "any")),
        tests=list(task.get("tests") or []),
        benchmarks=list(benchmarks),
        files=files,
        rtol=tolerance.get("rtol"),
        atol=tolerance.get("atol"),
        limits=limits,
        speed_of_light_us=sol,
        compile_entry=(meta.get("compile") or {}).get("entry"),
        ranking_by=_ranking(task, path),
        distributions=_distributions(meta.get("distributions"), path, where),
        static=_static(meta.get("static"), path, where),
        peer=_peer(meta.get("peer"), path, where, kernel_file),
        forbidden=_forbidden(meta.get("rules"), where),
        **measuring,
    )
    check_hooks(target)  # GPU MODE's contract and what judge.toml asks of the target's files, against extensions.py
    return target


def _ranking(task: dict[str, Any], path: Path) -> str:
    ranking = str(task.get("ranking_by", "last")).lower()
    if ranking not in RANKINGS:
        raise JudgeError(f"{path / 'task.yml'}: field 'ranking_by': '{task.get('ranking_by')}' — judge ranks by "
                         + ", ".join(f"'{key}' ({words})" for key, words in RANKINGS.items()))
    return ranking


def _measuring(meta: dict[str, Any], where: Path) -> dict[str, Any]:
    """judge.toml's keys for how a candidate is timed and judged: its clock, min_effect, cores and max_speedup."""
    clock = str(meta.get("clock", "gpu"))
    if clock not in CLOCKS[:2]:
        raise JudgeError(f"{where}: field 'clock': '{clock}' — 'gpu' (launch hidden) or 'call' (the whole call, "
                         "launch included, as GPU MODE times)")
    min_effect = meta.get("min_effect")
    if min_effect is not None and not 0 <= float(min_effect) < 1:
        raise JudgeError(f"{where}: field 'min_effect': a fraction in [0, 1), got {min_effect}")
    cores = (meta.get("resources") or {}).get("cores")
    if cores is not None and not (type(cores) is int and 1 <= cores <= 64):
        raise JudgeError(f"{where}: field 'resources.cores': a whole number of CPU cores from 1 to 64, got {cores!r}")
    plausibility = meta.get("plausibility", {})
    max_speedup = float(plausibility.get("max_speedup", DEFAULT_MAX_SPEEDUP))
    if max_speedup <= 1:
        raise JudgeError(f"{where}: field 'plausibility.max_speedup': must be above 1, got {max_speedup}")
    return {"clock": clock, "min_effect": float(min_effect) if min_effect is not None else None, "cores": cores,
            "max_speedup": max_speedup}


def _files(task: dict, path: Path, kernel_file: str) -> list[tuple[str, str]]:
    """task.yml's files (name, source), the kernel last; without a list, every .py beside the kernel."""
    raw_files = task.get("files")
    if raw_files:
        files = []
        for entry in raw_files:
            if not isinstance(entry, dict) or "name" not in entry or "source" not in entry:
                raise JudgeError(f"{path / 'task.yml'}: field 'files': each entry needs 'name' and 'source'")
            files.append((entry["name"], entry["source"]))
        for name, source in files:
            if source != SUBMISSION and not (path / source).is_file():
                raise JudgeError(f"{path / 'task.yml'}: field 'files': source '{source}' of '{name}' not found")
        submission_names = [name for name, source in files if source == SUBMISSION]
        if submission_names:
            kernel_name = submission_names[0]
            files = [(n, s) for n, s in files if s != SUBMISSION] + [(kernel_name, SUBMISSION)]
    else:
        files = [(p.name, p.name) for p in sorted(path.glob("*.py")) if p.name != kernel_file]
        files.append((kernel_file, SUBMISSION))
    return files


def _limits(limits_meta: dict, task: dict, where: Path) -> Limits:
    unknown = set(limits_meta) - {"compile_s", "check_s", "timing_s"}
    if unknown:
        raise JudgeError(f"{where}: field 'limits.{sorted(unknown)[0]}': unknown limit")
    return Limits(
        compile_s=float(limits_meta.get("compile_s", 300)),
        check_s=float(limits_meta.get("check_s", task.get("test_timeout", 300))),
        timing_s=float(limits_meta.get("timing_s", task.get("benchmark_timeout", 600))),
    )


def _distributions(raw: Any, path: Path, where: Path) -> list[Distribution]:
    if raw is None:
        return [Distribution("default")]
    if not isinstance(raw, list) or not raw:
        raise JudgeError(f"{where}: field 'distributions': a non-empty list of [[distributions]] tables")
    out = []
    for i, entry in enumerate(raw):
        name, generator = entry.get("name"), str(entry.get("generator", ""))
        if not isinstance(name, str) or not name:
            raise JudgeError(f"{where}: field 'distributions[{i}].name': required")
        if name in {d.name for d in out}:
            raise JudgeError(f"{where}: field 'distributions[{i}].name': '{name}' appears twice")
        distribution = Distribution(name, generator)
        if generator and (":" not in generator or not (path / distribution.file).is_file()):
            raise JudgeError(f"{where}: field 'distributions[{i}].generator': '{generator}' is not FILE.py:function "
                             f"with FILE.py in {path}")
        out.append(distribution)
    return out


def _static(raw: Any, path: Path, where: Path) -> StaticSpec | None:
    if raw is None:
        return None
    names = raw.get("rules", [])
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise JudgeError(f"{where}: field 'static.rules': a list of rule names ({', '.join(sorted(STATIC_RULES))})")
    rules: dict[str, dict[str, Any]] = {}
    for name in names:
        if name not in STATIC_RULES:
            raise JudgeError(f"{where}: field 'static.rules': unknown rule '{name}' (known: {', '.join(sorted(STATIC_RULES))})")
        params = raw.get(name, {})
        unknown = sorted(set(params) - STATIC_RULES[name].names)
        if unknown:
            raise JudgeError(f"{where}: field 'static.{name}.{unknown[0]}': rule '{name}' takes no such parameter")
        missing = sorted(STATIC_RULES[name].required - set(params))
        if missing:
            raise JudgeError(f"{where}: field 'static.{name}.{missing[0]}': required by rule '{name}'")
        for formula in ([params["bytes"]] if isinstance(params.get("bytes"), str) else params.get("bytes", [])):
            problem = check_formula(str(formula))
            if problem:
                raise JudgeError(f"{where}: field 'static.{name}.bytes': {problem}")
        rules[name] = dict(params)
    stray = sorted(set(raw) - {"rules", "layout_checks"} - set(rules))
    if stray:
        raise JudgeError(f"{where}: field 'static.{stray[0]}': not a key of [static] nor a rule it lists")
    checks = raw.get("layout_checks")
    if checks is not None and not (isinstance(checks, str) and (path / checks).is_file()):
        raise JudgeError(f"{where}: field 'static.layout_checks': '{checks}' is not a file in {path}")
    return StaticSpec(rules, checks)


def _peer(raw: Any, path: Path, where: Path, kernel_file: str) -> PeerSpec | None:
    if raw is None:
        return None
    if not isinstance(raw, dict) or set(raw) - {"file", "name"}:
        raise JudgeError(f"{where}: field 'peer': a table with 'file' (in the target directory) and 'name'")
    file, name = raw.get("file"), raw.get("name")
    if not (isinstance(file, str) and (path / file).is_file()) or file == kernel_file:
        raise JudgeError(f"{where}: field 'peer.file': '{file}' is not a file in {path} other than the kernel file")
    if not isinstance(name, str) or not name.strip():
        raise JudgeError(f"{where}: field 'peer.name': the peer's name as reports show it, e.g. 'torch._scaled_grouped_mm'")
    return PeerSpec(file, name.strip())


def _forbidden(raw: Any, where: Path) -> list[ForbiddenCall]:
    """judge.toml [rules]: forbidden_calls = [{call = "torch.x", why = "..."}, ...]."""
    if raw is None:
        return []
    if not isinstance(raw, dict):
        raise JudgeError(f"{where}: field 'rules': a table, [rules]")
    unknown = sorted(set(raw) - {"forbidden_calls"})
    if unknown:
        raise JudgeError(f"{where}: field 'rules.{unknown[0]}': unknown key (known: forbidden_calls)")
    entries = raw.get("forbidden_calls", [])
    if not isinstance(entries, list):
        raise JudgeError(f"{where}: field 'rules.forbidden_calls': a list of {{call = \"torch.x\", why = \"...\"}} tables")
    out: list[ForbiddenCall] = []
    for i, entry in enumerate(entries):
        field_ = f"rules.forbidden_calls[{i}]"
        if not isinstance(entry, dict):
            raise JudgeError(f"{where}: field '{field_}': a table {{call = \"torch.x\", why = \"...\"}}")
        unknown = sorted(set(entry) - {"call", "why"})
        if unknown:
            raise JudgeError(f"{where}: field '{field_}.{unknown[0]}': unknown key (known: call, why)")
        call, why = entry.get("call"), entry.get("why")
        if not isinstance(call, str) or not DOTTED.match(call):
            raise JudgeError(f"{where}: field '{field_}.call': a dotted Python name such as "
                             f"'torch._scaled_grouped_mm', got {call!r}")
        if call in {f.call for f in out}:
            raise JudgeError(f"{where}: field '{field_}.call': '{call}' appears twice")
        if not isinstance(why, str) or not why.strip() or "\n" in why.strip():
            raise JudgeError(f"{where}: field '{field_}.why': required: one line saying why, which the brief and "
                             "the verdict show")
        out.append(ForbiddenCall(call, why.strip()))
    return out


def find_target(name_or_path: str, kernels_dir: Path) -> Target:
    """A target by directory name under `kernels_dir`, or by an explicit path."""
    candidate = Path(name_or_path)
    if candidate.is_dir():
        return load_target(candidate)
    under = kernels_dir / name_or_path
    if under.is_dir():
        return load_target(under)
    raise JudgeError(f"target '{name_or_path}': no directory {under} (targets live under {kernels_dir}/)")
