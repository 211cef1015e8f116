"""Every extension point a target can provide, declared in one place.

A target is a GPU MODE problem directory; beside GPU MODE's own contract (the kernel file's `custom_kernel`,
reference.py's `generate_input`, `ref_kernel` and `check_implementation`) it may hand judge more code, each
piece asked for by a key of its judge.toml. Each is declared here as a `typing.Protocol`, whose `__call__` is the
call judge makes, and each judge.toml table that asks for one as a `TypedDict`. Nothing here runs a hook: the
docstrings say who calls it, when and with what. Loading a target (judge/targets.py) reads the files its
judge.toml names, without running them, and holds what they define against these declarations
(judge/target_hooks.py): a hook that is missing, is no function, or takes another number of arguments than judge
passes is a one-line error then, not a crash in a child later. GPU MODE's own contract (`GPUMODE_REFERENCE`,
`ENTRY`) is read the same way in every target, judge.toml or none.

| judge.toml asks              | the target provides                          | declared as       | required |
|------------------------------|----------------------------------------------|-------------------|----------|
| `[compile] entry = "NAME"`   | NAME in the kernel file                      | `CompileKernel`   | yes      |
| `[compile]`                  | `compile_signature` in the kernel file       | `CompileSignature`| no       |
| `[static] layout_checks`     | `CHECKS`, a list of checks, in that file     | `LayoutCheck`     | yes      |
| `[static] rules`             | names of judge's rules, with parameters      | `STATIC_RULES`    | -        |
| `[[distributions]] generator`| `FILE.py:function`                           | `InputGenerator`  | yes      |
| `[peer] file`                | `custom_kernel` in that file                 | `KernelEntry`     | yes      |
| nothing: GPU MODE's contract | `generate_input` in reference.py             | `InputGenerator`  | [1]      |
| nothing: GPU MODE's contract | `ref_kernel` in reference.py                 | `ReferenceKernel` | yes      |
| nothing: GPU MODE's contract | `check_implementation` in reference.py       | `CheckImplementation` | [2]  |
| nothing: GPU MODE's contract | `custom_kernel` in the kernel file           | `KernelEntry`     | yes      |

[1] unless every `[[distributions]]` names a generator of its own. [2] unless judge.toml's `[tolerance]` sets
rtol or atol, which then decide alone.

A static rule is judge's own code (judge/stages/static/rules.py registers each with `@rule`), not the target's:
the target only names rules and gives their parameters, so a rule is declared here by its name and parameters
(`STATIC_RULES`), which the loader checks, and by the call the static stage makes (`StaticRule`).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Protocol, TypedDict

SEE = "judge/extensions.py"  # where a hook's error sends its reader


# ---- the compile hook (judge.toml [compile]) ---------------------------------------------------------------


class CompileTable(TypedDict, total=False):
    """judge.toml `[compile]`: `entry` names the compile hook in the kernel file."""

    entry: str


class CompileKernel(Protocol):
    """`[compile] entry`: compile, without running, the kernel for one task.yml spec.

    Called by the compile stage's confined child (judge.stages.compile.stage, `_child_compile`), once per distinct
    compile signature among the target's benchmarks (its tests where it has none), after the kernel file is
    imported with `CUTE_DSL_ARCH` set from judge.toml's `arch`. `spec` is a copy of the first spec with that
    signature; `options` is `"--keep-ptx --keep-cubin"`, to pass on to `cute.compile`, whose result the hook
    returns (judge reads its `__ptx__` and `__cubin__`). It must work on a machine without a GPU. Required
    wherever judge.toml names it."""

    def __call__(self, spec: dict, options: str) -> Any: ...


class CompileSignature(Protocol):
    """`compile_signature` in the kernel file: the part of a spec that changes the compiled code.

    Called by the same child, before any compile, once for each spec; specs of equal signatures compile once,
    and the static rules' formulas read their knobs from it. Optional: without it the signature is the whole spec
    less its `seed` (judge.stages.compile.cache.default_signature)."""

    def __call__(self, spec: dict) -> dict: ...


SIGNATURE = "compile_signature"  # the name judge looks up for CompileSignature


# ---- the layout checks (judge.toml [static] layout_checks) ------------------------------------------------


class StaticTable(TypedDict, total=False):
    """judge.toml `[static]`: the rules to run on each config's PTX, a file of layout checks, and one table of
    parameters per rule that takes some (`[static.expect-tx-bytes] bytes = "..."`)."""

    rules: list[str]
    layout_checks: str


class LayoutCheck(Protocol):
    """Each entry of `CHECKS`, the list the layout checks file defines: one check of the candidate's host code.

    Called by the static stage's confined child (judge.stages.static.stage, `_child_layout_checks`), in list order,
    after a compile passed, with the candidate's kernel module, the task's reference module and a `random.Random`
    seeded from the kernel's text and the check's index. It returns one line saying what it checked; an
    AssertionError fails it (its message is the verdict's), any other exception is an error. `CHECKS` is required
    in the file judge.toml names."""

    def __call__(self, kernel: ModuleType, reference: ModuleType, rng: random.Random) -> str: ...


CHECKS = "CHECKS"  # the list a layout checks file defines


# ---- the static rules (judge.toml [static] rules) ---------------------------------------------------------


@dataclass(frozen=True)
class RuleParameters:
    """What one of judge's static rules takes in its judge.toml table ([static.RULE]); checked when a target loads."""

    optional: frozenset[str] = frozenset()
    required: frozenset[str] = frozenset()

    @property
    def names(self) -> set[str]:
        return set(self.optional | self.required)


# Every rule a target may name in `[static] rules`; judge/stages/static/rules.py implements each (`@rule(name)`).
STATIC_RULES: dict[str, RuleParameters] = {
    "tmem-load-waited": RuleParameters(),
    "wgmma-waited": RuleParameters(),
    "expect-tx-bytes": RuleParameters(required=frozenset({"bytes"})),  # a formula (judge/formulas.py), or a list
    "tmem-alloc-paired": RuleParameters(),
    "ptxas-clean": RuleParameters(optional=frozenset({"wrong_code"})),  # more regular expressions of wrong code
}


class StaticRule(Protocol):
    """A rule of judge's over one compiled config's PTX (judge.stages.static.rules, registered with `@rule`).

    Called by the static stage in judge's own process (judge.stages.static.stage), after the compile stage
    passed, once per rule the target names and per PTX file of each config: `code` is the parsed PTX
    (judge.stages.static.rules.Code), `params` the rule's judge.toml table, `signature` the config's compile
    signature. It returns a judge.stages.details.RuleResult."""

    def __call__(self, code: Any, params: dict, signature: dict) -> Any: ...


# ---- input generators (judge.toml [[distributions]] generator) --------------------------------------------


class DistributionTable(TypedDict, total=False):
    """One judge.toml `[[distributions]]` table: a name, and `FILE.py:function` (none: reference.py's
    generate_input)."""

    name: str
    generator: str


class InputGenerator(Protocol):
    """`generator = "FILE.py:function"`: the inputs of one case under this distribution, like generate_input.

    Called by the oracle (judge.boundary.oracle, trusted: no contestant code in its process) for every
    correctness case and every timed input set, with one task.yml spec as keyword arguments, its `seed` drawn
    from the round's secret. Required: the function must take every key of the target's specs."""

    def __call__(self, **spec: Any) -> Any: ...


# ---- the peer (judge.toml [peer]) and GPU MODE's own entry point -------------------------------------------


class PeerTable(TypedDict):
    """judge.toml `[peer]`: a file in the target directory other than the kernel file, and the name reports
    give it."""

    file: str
    name: str


class KernelEntry(Protocol):
    """`custom_kernel`: GPU MODE's entry point, in the kernel file and in the `[peer]` file alike.

    Called by a confined runner (judge.boundary.runner, through judge.boundary.callframe) once per correctness
    case and per timed call, with the data generate_input (or the distribution's generator) made; it returns
    the outputs, which the oracle compares with ref_kernel's. The peer's is required wherever judge.toml names a
    peer; the kernel file's is GPU MODE's contract, required of the target's own kernel file when it loads (a
    candidate whose patch removes it is a crash in its runner)."""

    def __call__(self, data: Any) -> Any: ...


ENTRY = "custom_kernel"  # GPU MODE's entry point


class ReferenceKernel(Protocol):
    """`ref_kernel` in reference.py: the reference's outputs for one case's data.

    Called by the oracle (judge.boundary.oracle) on a copy of every correctness case's and every timed input
    set's data, as generate_input (or the distribution's generator) made it; what it returns is what every
    candidate's outputs are compared with. GPU MODE's contract: required."""

    def __call__(self, data: Any) -> Any: ...


class CheckImplementation(Protocol):
    """`check_implementation` in reference.py: the task's own verdict on a candidate's outputs.

    Called by the oracle after judge's own comparison, with the case's pristine data and the outputs the runner
    handed back, shaped as ref_kernel returns them; it returns GPU MODE's (passed, message) or a message (empty:
    passed). GPU MODE's contract: required, unless judge.toml's `[tolerance]` sets rtol or atol, which then
    decide alone."""

    def __call__(self, data: Any, output: Any) -> Any: ...


REFERENCE_FILE = "reference.py"  # the module the oracle imports (`import reference`)


@dataclass(frozen=True)
class Hook:
    """One hook as loading checks it: the name judge looks up, its declaration (whose `__call__` says how judge
    calls it: positional arguments, or a spec's keys as keyword arguments), and whether a target that asks for
    the extension must define it."""

    name: str
    protocol: type
    required: bool = True


def compile_hooks(entry: str) -> list[Hook]:
    """The hooks a kernel file provides where judge.toml's [compile] names `entry`."""
    return [Hook(entry, CompileKernel), Hook(SIGNATURE, CompileSignature, required=False)]


PEER_HOOK = Hook(ENTRY, KernelEntry)

GENERATE_INPUT = Hook("generate_input", InputGenerator)
CHECKER = Hook("check_implementation", CheckImplementation)
GPUMODE_REFERENCE = [GENERATE_INPUT, Hook("ref_kernel", ReferenceKernel), CHECKER]  # reference.py, in this order
