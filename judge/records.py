"""Pydantic models of every record judge keeps: proposals, sharks and their rubrics, votes, outcomes."""

from __future__ import annotations

import enum
import hashlib
import re
from decimal import Decimal
from typing import Annotated, Literal, Optional

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, FiniteFloat, ValidationError, field_validator, model_validator

from .errors import JudgeError
from .noise import Floor

SLUG = re.compile(r"^[a-z0-9][a-z0-9-]{0,62}$")


def sha256(text: str) -> str:
    """The digest by which every record names a text: a kernel (`kernel_sha256`, `base_sha256`), a proposal's
    content (`content_sha256`)."""
    return hashlib.sha256(text.encode()).hexdigest()


class Outcome(str, enum.Enum):
    """What happened to a proposal in a round; the order is how far it got."""

    PATCH_FAILED = "patch-failed"
    COMPILE_ERROR = "compile-error"
    STATIC_CHECK_FAILED = "static-check-failed"
    FORBIDDEN_CALL = "forbidden-call"
    INCORRECT = "incorrect"
    CRASHED = "crashed"
    TIMED_OUT = "timed-out"
    TAMPERED = "tampered"
    IMPLAUSIBLE = "implausible"
    SLOWER = "slower"
    INCONCLUSIVE = "inconclusive"
    UNCHANGED = "unchanged"
    FASTER = "faster"
    NOT_RUN = "not-run"

    @property
    def eliminates(self) -> bool:
        """A proposal leaves the contest on every measured verdict except 'faster'; not-run keeps it pending."""
        return self not in (Outcome.FASTER, Outcome.NOT_RUN)


MEANINGS = {
    Outcome.PATCH_FAILED: "the patch touches another file, is binary, or its hunks do not apply to the round's base",
    Outcome.COMPILE_ERROR: "the patched kernel does not compile for the target's architecture",
    Outcome.STATIC_CHECK_FAILED: "the compiled kernel breaks a rule its target declares (a register read before its asynchronous load completes, a wrong transaction count, ...) or a layout check: wrong without running it",
    Outcome.FORBIDDEN_CALL: "the patch adds a call its target forbids in judge.toml (such as the peer's op), however it is spelled; the call and its line are recorded",
    Outcome.INCORRECT: "the output differs from the reference beyond tolerance, has NaN/Inf, or is stale",
    Outcome.CRASHED: "the kernel's process died: a Python exception, a CUDA fault, or an exit mid-run",
    Outcome.TIMED_OUT: "a stage ran past its wall-clock limit and its process was killed",
    Outcome.TAMPERED: "the kernel's process changed what judge measures or checks with, or reported times its wall clock does not support",
    Outcome.IMPLAUSIBLE: "timed below the speed of light or beyond the target's speedup bound: held until a person clears it, which they can do only before the target's next round begins",
    Outcome.SLOWER: "correct, and slower than the base: the geomean's 95% interval lies below 1 and the geomean is {slower}",
    Outcome.INCONCLUSIVE: "correct, and no verdict either way after the most process pairs judge runs: the geomean's 95% interval reaches past the noise floor{floor} on one side and across 1 on the other",
    Outcome.UNCHANGED: "correct, and no verdict: the geomean's 95% interval contains 1, or the geomean is {within}",
    Outcome.FASTER: "correct, and faster than the base: the geomean's 95% interval lies above 1 and the geomean is {faster}",
    Outcome.NOT_RUN: "a stage could not run here (e.g. needs sm_100, this machine has none); the proposal stays pending",
}


def meaning(outcome: Outcome, floor: Optional[Floor] = None) -> str:
    """What an outcome means, in one line; the timed ones state the noise floor the verdict had to clear
    (judge.noise), in numbers where `floor` is known."""
    if floor is None:
        words = {"slower": "at least the noise floor below 1", "faster": "at least the noise floor above 1",
                 "within": "within the noise floor of 1", "floor": ""}
    else:
        words = {"slower": f"{floor.slower_at:.3f}x or less (the noise floor, {floor.percent()})",
                 "faster": f"{floor.faster_at:.3f}x or more (the noise floor, {floor.percent()})",
                 "within": f"between {floor.slower_at:.3f}x and {floor.faster_at:.3f}x (within the noise floor, "
                           f"{floor.percent()})",
                 "floor": f" ({floor.percent()})"}
    return MEANINGS[Outcome(outcome)].format(**words)

CATEGORIES = ("pipeline", "tiling", "epilogue", "scheduling", "cluster", "memory", "other")


def _exact(value):
    """Read numbers as the decimal the user wrote (0.4 stays 0.4), so score arithmetic is exact."""
    if isinstance(value, float):
        return Decimal(repr(value))
    if isinstance(value, int) and not isinstance(value, bool):
        return Decimal(value)
    return value


ExactNumber = Annotated[Decimal, BeforeValidator(_exact)]


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Claim(_Record):
    """A claimed speedup range (before/after), overall and optionally per benchmark index; finite numbers only,
    since an Infinity or NaN claim would make every JSON judge prints invalid."""

    low: float = Field(gt=0, allow_inf_nan=False)
    high: float = Field(gt=0, allow_inf_nan=False)
    per_benchmark: dict[int, tuple[FiniteFloat, FiniteFloat]] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _ordered(self):
        if self.low > self.high:
            raise ValueError(f"low ({self.low}) is above high ({self.high})")
        for index, (low, high) in self.per_benchmark.items():
            if not 0 < low <= high:
                raise ValueError(f"per_benchmark[{index}] must be 0 < low <= high, got [{low}, {high}]")
        return self


class Proposal(_Record):
    """One revision of a pitch; with a patch it can be evaluated, without one it can only be voted on."""

    id: str
    title: str = Field(min_length=1)
    author: str = Field(min_length=1)
    round: int = Field(ge=1)
    target: str = Field(min_length=1)
    category: str = "other"
    confidence: Optional[float] = Field(default=None, ge=0, le=1, allow_inf_nan=False)
    parent: Optional[str] = None
    risks: list[str] = Field(default_factory=list)
    references: list[str] = Field(default_factory=list)
    claim: Optional[Claim] = None
    pitch: str = ""
    patch: Optional[str] = None

    @field_validator("id")
    @classmethod
    def _slug(cls, value: str) -> str:
        if not SLUG.match(value):
            raise ValueError("must be a slug: lowercase letters, digits and hyphens, starting with a letter or digit")
        return value

    @field_validator("parent", mode="before")
    @classmethod
    def _empty_parent(cls, value):
        return value or None

    @field_validator("category")
    @classmethod
    def _category(cls, value: str) -> str:
        if value not in CATEGORIES:
            raise ValueError(f"must be one of {', '.join(CATEGORIES)}")
        return value

    @property
    def has_patch(self) -> bool:
        return bool(self.patch and self.patch.strip())


class Criterion(_Record):
    """One named, weighted criterion of a rubric; `bound` lets the judge fill the score from a measurement."""

    name: str
    weight: ExactNumber = Field(gt=0, le=1)
    description: str = ""
    bound: Optional[Literal["speedup", "correctness"]] = None

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not re.match(r"^[a-z][a-z0-9_]*$", value):
            raise ValueError("must be lowercase letters, digits and underscores, starting with a letter")
        return value


class Shark(_Record):
    """A judging agent and its rubric: criteria whose weights sum to exactly 1."""

    name: str
    title: str = ""
    description: str = ""
    criteria: list[Criterion] = Field(min_length=1)

    @field_validator("name")
    @classmethod
    def _slug(cls, value: str) -> str:
        if not SLUG.match(value):
            raise ValueError("must be a slug: lowercase letters, digits and hyphens")
        return value

    @model_validator(mode="after")
    def _weights(self):
        names = [c.name for c in self.criteria]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"criteria named twice: {', '.join(duplicates)}")
        total = sum(c.weight for c in self.criteria)
        if total != Decimal(1):
            raise ValueError(f"criteria weights sum to {total}, not 1")
        return self

    def criterion(self, name: str) -> Criterion:
        return next(c for c in self.criteria if c.name == name)


class Vote(_Record):
    """A shark's scores (0-10 per criterion) for one proposal, its funding decision, and the total it stated."""

    shark: str
    proposal: str
    revision: Optional[int] = Field(default=None, ge=1)
    scores: dict[str, ExactNumber]
    fund: bool = False
    notes: str = ""
    stated_total: Optional[ExactNumber] = None

    @field_validator("scores")
    @classmethod
    def _range(cls, scores: dict[str, Decimal]) -> dict[str, Decimal]:
        for name, score in scores.items():
            if not Decimal(0) <= score <= Decimal(10):
                raise ValueError(f"score for '{name}' is {score}, outside 0-10")
        return scores


def validation_message(source: str, error: ValidationError) -> str:
    """One line naming the file, the field and the reason, from pydantic's error list."""
    errors = error.errors()
    first = errors[0]
    field = ".".join(str(part) for part in first["loc"]) or "(record)"
    reason = first["msg"]
    if reason.startswith("Value error, "):
        reason = reason[len("Value error, "):]
    if first["type"] == "missing":
        reason = "required field is missing"
    elif first["type"] == "extra_forbidden":
        reason = "unknown field"
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return f"{source}: field '{field}': {reason}{more}"


def parse(model: type[BaseModel], data: dict, source: str):
    """Validate `data` as `model`, turning pydantic's errors into a one-line JudgeError naming `source`."""
    try:
        return model.model_validate(data)
    except ValidationError as error:
        raise JudgeError(validation_message(source, error)) from None
