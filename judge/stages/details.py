"""What each stage records beside its status and summary, typed: one class per stage and per record inside
one, and the one place that turns them into the JSON the ledger keeps (`stage_results.detail_json`) and back.

A key a stage did not write is absent, not null: a crashed compile has no `occupancy_model`, a failed timing
no `geomean`, and a ledger from an older judge lacks keys added since. A field that a writer may leave out
defaults to ABSENT; read back, an absent field is None (an empty list for a list), and `to_json` leaves it
out again, so a stored detail round-trips byte for byte. Keys this judge does not know are kept as they came.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import io
import tokenize
from dataclasses import dataclass, fields
from typing import Any, ClassVar, Self


class _Absent:
    """The value of a field whose key the JSON does not have."""

    def __repr__(self) -> str:
        return "ABSENT"

    def __reduce__(self) -> str:  # one sentinel, through pickling (Ray) too
        return "ABSENT"


ABSENT: Any = _Absent()


class Detail:
    """A typed detail: `to_json` writes what the ledger keeps, `from_json` reads it back."""

    NESTED: ClassVar[dict[str, type[Detail]]] = {}  # fields holding typed records, or lists of them
    APART: ClassVar[tuple[str, ...]] = ()  # fields the ledger keeps in rows of their own, never in the JSON
    _absent: frozenset[str]  # the fields whose keys the JSON leaves out
    _extra: dict[str, Any]  # keys of the JSON that no field names (a later judge's), kept as they came

    def __post_init__(self) -> None:
        absent = frozenset(f.name for f in fields(self) if getattr(self, f.name) is ABSENT)
        for f in fields(self):
            if f.name in absent:
                object.__setattr__(self, f.name, [] if str(f.type).startswith("list") else None)
        object.__setattr__(self, "_absent", absent)
        object.__setattr__(self, "_extra", {})

    def to_json(self) -> dict[str, Any]:
        """Plain JSON, keys sorted as the ledger stores them; absent fields left out, unknown keys kept."""
        out = dict(self._extra)
        for f in fields(self):
            if f.name not in self._absent and f.name not in self.APART:
                out[f.name] = _plain(getattr(self, f.name))
        return dict(sorted(out.items()))

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Self:
        """A detail from its JSON, whatever judge wrote it: a key it lacks is an absent field."""
        names = {f.name for f in fields(cls)}
        detail = cls(**{f.name: _typed(cls.NESTED.get(f.name), data[f.name]) if f.name in data else ABSENT
                        for f in fields(cls)})
        object.__setattr__(detail, "_extra", {k: v for k, v in data.items() if k not in names})
        return detail

    def updated(self, **changes: Any) -> Self:
        """A copy with `changes` (ABSENT leaves a key out); what was absent or unknown stays so."""
        values = {f.name: ABSENT if f.name in self._absent else getattr(self, f.name) for f in fields(self)}
        copy = type(self)(**{**values, **changes})
        object.__setattr__(copy, "_extra", self._extra)
        return copy

    def require(self) -> Self:
        """Itself when every field without a default is there, else a KeyError naming the first one missing:
        a record read from partial JSON (a benchmark without its speedup) cannot become a ledger row."""
        for f in fields(self):
            required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
            if required and f.name in self._absent:
                raise KeyError(f.name)
        return self


def _plain(value: Any) -> Any:
    if isinstance(value, Detail):
        return value.to_json()
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def _typed(kind: type[Detail] | None, value: Any) -> Any:
    """JSON to records where a field holds them; anything else (an older ledger's oddity) stays as it came."""
    if kind is None:
        return value
    if isinstance(value, list):
        return [kind.from_json(v) if isinstance(v, dict) else v for v in value]
    return kind.from_json(value) if isinstance(value, dict) else value


# ---------------------------------------------------------------------------------------------------------
# patch and screen


@dataclass(frozen=True)
class NoDetail(Detail):
    """The patch stage's detail: nothing beyond its status and summary."""


@dataclass(frozen=True)
class Flag(Detail):
    """One screening flag: a line of the patched kernel that the sharks should look at."""

    rule: str  # the screening rule (judge/stages/screen/stage.py RULES; 'forbidden-call' fails the stage)
    line: int  # the line in the patched kernel file
    text: str  # that line, stripped (120 characters at most)
    why: str  # what the rule saw there


@dataclass(frozen=True)
class ScreenDetail(Detail):
    """The screen stage's detail: flags for the sharks; a 'forbidden-call' flag is the stage's one verdict."""

    NESTED = {"flags": Flag}
    flags: list[Flag]  # every flag, in line order


# ---------------------------------------------------------------------------------------------------------
# compile (docs/compile.md)


@dataclass(frozen=True)
class CompileError(Detail):
    """A compile's error read down to the one line a report shows (judge/stages/compile/tracebacks.py)."""

    type: str  # the exception's class name
    message: str  # its first meaningful message line
    where: dict | None  # {file, line, text} of the kernel file's line it points to, or null
    line: str  # the one line: type, message and where


@dataclass(frozen=True)
class Occupancy(Detail):
    """CTAs per SM from a kernel's resources, the arithmetic of CUDA's cuda_occupancy.h."""

    ctas_per_sm: int  # CTAs of this kernel one SM holds at once
    limited_by: str  # which limit binds: ctas, threads, registers, smem or barriers ('/'-joined on a tie)
    limits: dict[str, int]  # CTAs per SM under each limit alone: ctas, threads, registers, smem[, barriers]
    warps_per_sm: int  # ctas_per_sm x warps per CTA
    occupancy: float  # warps_per_sm over the SM's maximum warps
    regs_per_warp: int  # registers per warp, rounded to the allocation unit
    smem_per_cta: int  # shared memory per CTA with the driver's 1 KB reservation, rounded to its unit


@dataclass(frozen=True)
class KernelResources(Detail):
    """What one kernel entry of a compiled config asks of an SM (judge/stages/compile/resources.py)."""

    NESTED = {"occupancy": Occupancy}
    name: str  # the PTX entry's name
    registers: int | None  # registers per thread
    registers_from: str | None  # "cubin (cuobjdump)" or "ptxas -v"
    spill_stores: int | None  # bytes of spill stores (ptxas -v)
    spill_loads: int | None  # bytes of spill loads (ptxas -v)
    stack_bytes: int | None  # stack frame bytes (ptxas -v, else the cubin)
    smem_static: int | None  # static shared memory bytes (ptxas -v, else the cubin less the reservation)
    smem_dynamic: int | None  # dynamic shared memory bytes, from the launch config in the lowered host code
    smem_dynamic_from: str  # where smem_dynamic came from, or why it is unknown
    smem_total: int | None  # smem_static + smem_dynamic, null when either is unknown
    barriers: int | None  # named barriers (ptxas -v)
    threads: int | None  # threads per CTA
    threads_from: str | None  # ".reqntid", ".maxntid" or the launch's blockDim
    ptxas: dict | None  # every number ptxas -v printed for the kernel
    cubin: dict | None  # every number cuobjdump printed for it
    occupancy: Occupancy | None  # null where registers, threads or smem_total is unknown


@dataclass(frozen=True)
class CompiledConfig(Detail):
    """One distinct compile-time configuration (signature), compiled once for the benchmarks it serves."""

    NESTED = {"error": CompileError, "kernels": KernelResources}
    signature: Any  # compile_signature(spec), canonical JSON
    benchmarks: list[int]  # indices of the benchmarks with this signature
    key: str  # its compile cache key
    ok: bool  # whether the hook compiled it
    cached: bool  # whether it came from the compile cache
    seconds: float  # how long its compile took (also on a cache hit: the first compile's)
    error: CompileError | None  # the hook's error, null when ok
    ptx_bytes: int | None = ABSENT  # size of the kept PTX, null where none was kept; absent when not ok
    cubin_bytes: int | None = ABSENT  # size of the kept cubin, as ptx_bytes
    files: dict[str, str] = ABSENT  # "kernel.ptx", "kernel.cubin" (kernel1.ptx, ... for more): paths in the cache
    tools: dict[str, str | None] = ABSENT  # versions of ptxas and cuobjdump that read the files
    notes: list[str] = ABSENT  # what could not be read, and why
    kernels: list[KernelResources] = ABSENT  # each kernel entry's resources


@dataclass(frozen=True)
class CompileDetail(Detail):
    """The compile stage's detail."""

    NESTED = {"configs": CompiledConfig, "error": CompileError}
    arch: str = ABSENT  # the architecture compiled for (judge.toml arch)
    gpu: dict | None = ABSENT  # that architecture's facts (resources.ARCHS: sms, smem_per_sm, ...)
    occupancy_model: str = ABSENT  # what the occupancy arithmetic models and leaves out
    dsl_version: str = ABSENT  # the CuTe DSL (nvidia-cutlass-dsl) version
    entry: str | None = ABSENT  # the compile hook; null for a target without one (the kernel is imported only)
    configs: list[CompiledConfig] = ABSENT  # every config, or those finished before a crash or hang
    error: CompileError | str = ABSENT  # a failed import's error, or how the child crashed or hung
    exit_code: int | None = ABSENT  # the crashed or killed child's exit code
    compiling: dict | None = ABSENT  # the config under way when the child crashed or hung: index, total, signature


# ---------------------------------------------------------------------------------------------------------
# static (docs/static_checks.md)


@dataclass(frozen=True)
class RuleResult(Detail):
    """What one static rule found in one config's PTX (judge/stages/static/rules.py)."""

    rule: str  # the rule's name
    passed: bool  # whether the PTX keeps it
    message: str  # what failed and where, or what was checked
    line: int | None = None  # the PTX line of the failure
    ran: bool | None = ABSENT  # false where this machine could not run the rule (a missing or too old tool): no finding; absent where it ran


@dataclass(frozen=True)
class StaticConfig(Detail):
    """The target's rules on one compiled config."""

    NESTED = {"rules": RuleResult}
    signature: Any  # the config's compile signature (null where no config was compiled)
    rules: list[RuleResult]  # each rule on each of its PTX files


@dataclass(frozen=True)
class LayoutCheck(Detail):
    """One of the target's layout checks, run on the candidate's host code in a confined child."""

    name: str  # the check function's name less check_, with dashes
    status: str  # passed, failed (an assertion) or error (it could not run)
    message: str  # what it returned or the first line of why it failed
    seconds: float  # how long it took


@dataclass(frozen=True)
class StaticDetail(Detail):
    """The static stage's detail."""

    NESTED = {"configs": StaticConfig, "layout_checks": LayoutCheck}
    rules: list[str]  # the rules the target declares, sorted
    configs: list[StaticConfig]  # the rules on each compiled config
    layout_checks: list[LayoutCheck]  # the layout checks, in the order of the file's CHECKS
    layout_checks_file: str | None  # the target's layout checks file, null where it has none


# ---------------------------------------------------------------------------------------------------------
# correctness


@dataclass(frozen=True)
class CheckedCase(Detail):
    """One correctness call: a test (on each of two seeds) or a benchmark shape, under one distribution."""

    kind: str  # test or benchmark
    test: int  # its index in task.yml's tests or benchmarks
    label: str  # its spec, as the report names it
    call: int  # 1 or 2: a test runs on two secret seeds
    seed: int | None  # the seed its inputs came from, null for fixed inputs
    distribution: str  # the input distribution (judge.toml), "default" without one
    poisoned: list[str] = ABSENT  # the output slots judge filled with garbage before the call
    kernel_s: float = ABSENT  # the kernel call's seconds in the runner
    passed: bool = ABSENT  # the oracle's verdict
    reason: str = ABSENT  # why it failed, "" when it passed
    outputs: list[dict] = ABSENT  # per output tensor or number: path, dtype, elements, nonfinite, mismatched, errors, tolerances
    check_implementation: dict = ABSENT  # the task's own checker: {passed, message}, where it has one


@dataclass(frozen=True)
class CheckDetail(Detail):
    """The correctness stage's detail; a runner that died or hung leaves `error` (and `runner_start_s`, once it had one)."""

    NESTED = {"cases": CheckedCase}
    cases: list[CheckedCase] = ABSENT  # every case run, in order: the check stops at the first that fails
    planned: int = ABSENT  # how many cases the check had; those after a failed one were not run
    tolerance: dict | None = ABSENT  # judge.toml's {rtol, atol}, null where it sets neither
    check_implementation: bool = ABSENT  # whether the task's check_implementation ran
    confinement: dict | None = ABSENT  # the runner's confinement record (judge.sandbox.confine.Confinement)
    secret_seeds: bool = ABSENT  # inputs came from seeds derived from the round's secret
    runner_start_s: float = ABSENT  # seconds to a runner (a spare's bind, or a cold start): judge's, not the limit's
    distributions: list[str] = ABSENT  # the input distributions every case ran under
    tampered: list[str] = ABSENT  # what the runner's audit found changed in its process
    error: str = ABSENT  # why the runner stopped: crashed, timed out or tampered


# ---------------------------------------------------------------------------------------------------------
# timing


@dataclass(frozen=True)
class TimedBenchmark(Detail):
    """One benchmark timed, base against candidate, on the deciding clock; its repetitions are `timings` rows."""

    APART = ("base_us", "cand_us", "rep_pairs")
    index: int  # the benchmark's index in task.yml
    base_median_us: float  # the base's median time on the deciding clock
    cand_median_us: float  # the candidate's median time
    speedup: float  # base over candidate: the geometric mean over process pairs of each pair's ratio of medians
    ci_low: float  # the low end of the speedup's 95% interval (Student's t over the pairs)
    ci_high: float  # its high end
    significant: bool  # whether the interval excludes 1
    reps: int  # repetitions per kernel on the deciding clock
    label: str = ABSENT  # its spec, as the report names it
    clock: str = ABSENT  # the deciding clock: gpu, call or host
    stopped: str = ABSENT  # why timing stopped: pairs (the process pairs' decision); earlier: precise, budget, max-reps
    method: str = ABSENT  # stream or device-wide (gpu clock), else the clock
    clocks: dict[str, dict] = ABSENT  # per clock: base and candidate medians, speedup, reps
    audit: dict = ABSENT  # wall_excess_us, wall_overhead_us, replay_ratio
    spin_us: float = ABSENT  # the GPU wait's least, which hides the launch (gpu clock)
    sets: int = ABSENT  # input sets the timed calls rotate through
    copies: int = ABSENT  # physical copies of the inputs the timed calls run on in turn (each set copied in)
    placement: str = ABSENT  # separate: each kernel's inputs in its runner's own memory; shared (older ledgers): one area
    processes: int = ABSENT  # runner processes per kernel: one per process pair
    process_medians_us: dict = ABSENT  # base and cand: the analysed clock's median in each of their processes
    pair_log_ratios: list[float] = ABSENT  # each process pair's log(base median / candidate median)
    measuring_s: float = ABSENT  # seconds spent timing it
    speed_of_light_us: float = ABSENT  # judge.toml's bound for it, where the target gives one
    base_us: list[float] = ABSENT  # every repetition (the `timings` rows, not in the JSON)
    cand_us: list[float] = ABSENT  # the candidate's, paired with base_us by repetition
    rep_pairs: list[int] = ABSENT  # which process pair each repetition ran in (the `timings` rows' pair)


@dataclass(frozen=True)
class TimingDetail(Detail):
    """The timing stage's detail; a runner that died or hung leaves only `error` and `who`."""

    NESTED = {"benchmarks": TimedBenchmark}
    benchmarks: list[TimedBenchmark] = ABSENT  # each benchmark timed, up to the first that failed
    clock: str = ABSENT  # the deciding clock
    method: str = ABSENT  # how it was measured, in words
    confinement: dict | None = ABSENT  # the candidate runner's confinement record
    max_speedup: float | None = ABSENT  # the target's plausibility bound on the geomean
    min_effect: float | None = ABSENT  # the target's smallest change that counts, null for judge's own
    device: dict | None = ABSENT  # the GPU's facts before timing (null on a CPU)
    device_after: dict | None = ABSENT  # its clocks and temperature after
    geomean: float = ABSENT  # the geometric mean speedup; absent where no benchmark was timed
    geomean_ci: list[float] = ABSENT  # its 95% interval
    significant: bool = ABSENT  # whether that interval excludes 1
    measuring_s: float = ABSENT  # seconds spent timing, over the benchmarks
    pairs: int = ABSENT  # process pairs timed
    pair_geomeans: list[float] = ABSENT  # each pair's geomean speedup
    decision: str = ABSENT  # faster, slower, unchanged or inconclusive: the pairs' verdict against the floor
    floor: dict = ABSENT  # the noise floor the decision used (judge.noise.Floor)
    cores: list[int] | None = ABSENT  # the CPU cores every timed process pair ran on, null where not pinned
    summary: str = ABSENT  # the geomean line, kept here where the stage failed or was tampered
    audit_reasons: list[str] = ABSENT  # what the audits found, kept here where the stage failed
    tampered: list[str] = ABSENT  # every audit's finding that made it tampered
    error: str = ABSENT  # why a runner stopped
    who: str = ABSENT  # whose runner stopped: base or candidate
    gate: str = ABSENT  # a control's that ran out of time: why no candidate of its round is timed


DETAILS: dict[str, type[Detail]] = {
    "patch": NoDetail, "screen": ScreenDetail, "compile": CompileDetail, "static": StaticDetail,
    "correctness": CheckDetail, "timing": TimingDetail,
}


def detail_type(stage: str) -> type[Detail]:
    """The detail type of a stage (a stage judge does not know has none)."""
    return DETAILS.get(stage, NoDetail)


# ---------------------------------------------------------------------------------------------------------
# The schema, as docs show it (tests/test_stage_details.py compares the docs with this)


def schema_fields(kind: type[Detail]) -> list[tuple[str, str, str, str]]:
    """Each field of a type: its name, its type as written, whether the JSON always has it, the comment beside it."""
    source = inspect.getsource(kind)
    comments = {t.start[0]: t.string.lstrip("#").strip()
                for t in tokenize.generate_tokens(io.StringIO(source).readline) if t.type == tokenize.COMMENT}
    key = {f.name: "never (a table of its own)" if f.name in kind.APART else
           "may be absent" if f.default is ABSENT else "always" for f in fields(kind)}
    return [(node.target.id, ast.unparse(node.annotation), key[node.target.id], comments.get(node.lineno, ""))
            for node in ast.parse(source).body[0].body if isinstance(node, ast.AnnAssign)]


def schema_markdown(*kinds: type[Detail]) -> str:
    """One Markdown table per type: field, type, whether the JSON always has its key, what it holds."""
    tables = []
    for kind in kinds:
        rows = [f"`{kind.__name__}`: {kind.__doc__.strip()}", "", "| field | type | key | what |", "|---|---|---|---|"]
        for name, annotation, key, comment in schema_fields(kind):
            escaped = annotation.replace("|", "\\|")  # a table cell's own pipe
            rows.append(f"| `{name}` | `{escaped}` | {key} | {comment} |")
        tables.append("\n".join(rows))
    return "\n\n".join(tables) + "\n"
