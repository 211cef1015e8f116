"""Numbered schema migrations of ledger.db, applied in order and recorded in `_judge_migrations`.

A schema change is a new function appended here; an applied migration is never edited.
"""

from __future__ import annotations

import datetime
from typing import Callable

import sqlite_utils

from .. import __version__
from ..errors import JudgeError

MIGRATIONS_TABLE = "_judge_migrations"
MIGRATIONS: list[Callable[[sqlite_utils.Database], None]] = []


def migration(fn: Callable[[sqlite_utils.Database], None]):
    MIGRATIONS.append(fn)
    return fn


@migration
def m001_initial(db: sqlite_utils.Database) -> None:
    db["proposals"].create(
        {"id": str, "author": str, "first_round": int, "created_at": str},
        pk="id",
    )
    db["revisions"].create(
        {
            "id": int,
            "proposal_id": str,
            "revision": int,
            "round": int,
            "title": str,
            "author": str,
            "target": str,
            "category": str,
            "confidence": float,
            "parent": str,
            "claim_low": float,
            "claim_high": float,
            "claim_json": str,
            "risks_json": str,
            "references_json": str,
            "pitch": str,
            "patch": str,
            "content_sha256": str,
            "source": str,
            "submitted_at": str,
        },
        pk="id",
        foreign_keys=[("proposal_id", "proposals", "id")],
    )
    db["revisions"].create_index(["proposal_id", "revision"], unique=True)
    db["sharks"].create(
        {
            "id": int,
            "name": str,
            "version": int,
            "title": str,
            "description": str,
            "rubric_json": str,
            "content_sha256": str,
            "created_at": str,
        },
        pk="id",
    )
    db["sharks"].create_index(["name", "version"], unique=True)
    db["votes"].create(
        {
            "id": int,
            "shark_id": int,
            "revision_id": int,
            "proposal_id": str,
            "round": int,
            "scores_json": str,
            "fund": int,
            "notes": str,
            "stated_total": str,
            "source": str,
            "cast_at": str,
        },
        pk="id",
        foreign_keys=[("shark_id", "sharks", "id"), ("revision_id", "revisions", "id")],
    )
    db["rounds"].create(
        {
            "id": int,
            "target": str,
            "round": int,
            "base_sha256": str,
            "base_source": str,
            "base_origin": str,
            "winner_revision_id": int,
            "created_at": str,
        },
        pk="id",
        foreign_keys=[("winner_revision_id", "revisions", "id")],
    )
    db["rounds"].create_index(["target", "round"], unique=True)
    db["runs"].create(
        {
            "id": int,
            "round_id": int,
            "status": str,
            "pid": int,
            "host": str,
            "argv_json": str,
            "judge_version": str,
            "started_at": str,
            "finished_at": str,
        },
        pk="id",
        foreign_keys=[("round_id", "rounds", "id")],
    )
    db["evaluations"].create(
        {
            "id": int,
            "run_id": int,
            "round_id": int,
            "revision_id": int,
            "subject": str,
            "kernel_sha256": str,
            "outcome": str,
            "reason": str,
            "geomean_speedup": float,
            "geomean_ci_low": float,
            "geomean_ci_high": float,
            "device_json": str,
            "started_at": str,
            "finished_at": str,
        },
        pk="id",
        foreign_keys=[
            ("run_id", "runs", "id"),
            ("round_id", "rounds", "id"),
            ("revision_id", "revisions", "id"),
        ],
    )
    db["evaluations"].create_index(["round_id", "revision_id"])
    db["stage_results"].create(
        {
            "id": int,
            "evaluation_id": int,
            "stage": str,
            "status": str,
            "summary": str,
            "seconds": float,
            "detail_json": str,
            "log_tail": str,
        },
        pk="id",
        foreign_keys=[("evaluation_id", "evaluations", "id")],
    )
    db["benchmark_results"].create(
        {
            "id": int,
            "evaluation_id": int,
            "benchmark": int,
            "label": str,
            "base_median_us": float,
            "cand_median_us": float,
            "speedup": float,
            "ci_low": float,
            "ci_high": float,
            "significant": int,
            "reps": int,
            "speed_of_light_us": float,
        },
        pk="id",
        foreign_keys=[("evaluation_id", "evaluations", "id")],
    )
    db["timings"].create(
        {"id": int, "benchmark_result_id": int, "rep": int, "base_us": float, "cand_us": float},
        pk="id",
        foreign_keys=[("benchmark_result_id", "benchmark_results", "id")],
    )
    db["kernel_resources"].create(
        {
            "id": int,
            "evaluation_id": int,
            "signature": str,
            "ok": int,
            "registers": int,
            "smem_bytes": int,
            "spill_bytes": int,
            "stack_bytes": int,
            "threads_per_cta": int,
            "ctas_per_sm": int,
            "limiter": str,
            "ptx_bytes": int,
            "cubin_bytes": int,
            "compile_seconds": float,
            "error": str,
        },
        pk="id",
        foreign_keys=[("evaluation_id", "evaluations", "id")],
    )


@migration
def m002_kernel_resources_per_kernel(db: sqlite_utils.Database) -> None:
    """One row per compiled kernel, with the benchmarks its configuration serves, so that a candidate's
    configuration pairs with the base's by benchmark even when a knob in its signature changed."""
    db["kernel_resources"].add_column("kernel", str)
    db["kernel_resources"].add_column("benchmarks_json", str)


@migration
def m003_clocks_audits_clearances(db: sqlite_utils.Database) -> None:
    """Each benchmark result says which clock decided it, what every clock measured and what the audits found;
    each evaluation says which confinement its kernel ran under; a person can clear an implausible result."""
    db["benchmark_results"].add_column("clock", str)
    db["benchmark_results"].add_column("clocks_json", str)
    db["benchmark_results"].add_column("audit_json", str)
    db["evaluations"].add_column("confinement", str)
    db["clearances"].create(
        {"id": int, "evaluation_id": int, "outcome": str, "note": str, "cleared_by": str, "cleared_at": str},
        pk="id",
        foreign_keys=[("evaluation_id", "evaluations", "id")],
    )
    db["clearances"].create_index(["evaluation_id"], unique=True)


@migration
def m004_benchmark_inputs(db: sqlite_utils.Database) -> None:
    """Each benchmark result says where its timed inputs were (shared device memory, or each runner's own and
    why) and in how many runner processes each kernel ran."""
    db["benchmark_results"].add_column("placement", str)
    db["benchmark_results"].add_column("processes", int)


@migration
def m005_clearance_reason(db: sqlite_utils.Database) -> None:
    """A clearance keeps the reason of the timing verdict the evaluation then stands at, so that every view states
    that reason, not the hold's."""
    db["clearances"].add_column("reason", str)


@migration
def m006_participants(db: sqlite_utils.Database) -> None:
    """Who takes part over the network (`judge serve`) and in which role; a token is kept only as its sha256.
    A name is unique among participants not revoked, so a revoked name can be given a new token."""
    db["participants"].create(
        {"id": int, "name": str, "role": str, "token_sha256": str, "created_at": str, "revoked_at": str},
        pk="id",
    )
    db["participants"].create_index(["token_sha256"], unique=True)
    db.execute("create unique index idx_participants_active_name on participants (name) where revoked_at is null")


@migration
def m007_process_pairs_and_calibrations(db: sqlite_utils.Database) -> None:
    """Each timed repetition says which process pair it ran in (timing's unit since judge compares processes,
    not repetitions), and `judge calibrate` keeps its runs: A/A comparisons and calibrated slowdowns per target
    and device, whose spread sets the noise floor with the rounds' controls."""
    db["timings"].add_column("pair", int)
    db["calibrations"].create(
        {"id": int, "target": str, "device": str, "device_json": str, "base_sha256": str, "result_json": str,
         "argv_json": str, "created_at": str},
        pk="id",
    )
    db["calibrations"].create_index(["target", "device"])


@migration
def m008_profiles_and_device_peaks(db: sqlite_utils.Database) -> None:
    """Issue 41: where a kernel's time goes (judge.stages.profile), per kernel text and device, with the tools'
    versions, so that a base profiled once is not profiled again; and each device's measured peaks (DRAM
    bandwidth, tensor throughput per matmul family) that profiles are read against."""
    db["profiles"].create(
        {"id": int, "target": str, "kernel_sha256": str, "subject": str, "round_id": int, "revision_id": int,
         "device": str, "tool": str, "status": str, "reason": str, "torch_version": str, "ncu_version": str,
         "profile_json": str, "created_at": str},
        pk="id", foreign_keys=[("round_id", "rounds", "id"), ("revision_id", "revisions", "id")],
    )
    db["profiles"].create_index(["target", "kernel_sha256", "device"])
    db["device_peaks"].create(
        {"device": str, "family": str, "dram_gbps": float, "tensor_tflops": float, "theoretical_tflops": float,
         "torch_version": str, "created_at": str},
        pk=("device", "family"),
    )


def applied(db: sqlite_utils.Database) -> list[str]:
    if MIGRATIONS_TABLE not in db.table_names():
        return []
    return [row["name"] for row in db[MIGRATIONS_TABLE].rows_where(order_by="rowid")]


def check_known(db: sqlite_utils.Database, source: str = "ledger") -> None:
    """Refuse a ledger that a later judge migrated: this judge would misread tables it does not know."""
    known = {fn.__name__ for fn in MIGRATIONS}
    unknown = [name for name in applied(db) if name not in known]
    if unknown:
        raise JudgeError(
            f"{source}: written by a later judge: migrations {', '.join(unknown)} are unknown to judge {__version__} "
            f"(it knows {MIGRATIONS[0].__name__} to {MIGRATIONS[-1].__name__}); open it with a judge that knows them"
        )


def migrate(db: sqlite_utils.Database, source: str = "ledger") -> list[str]:
    """Apply every migration not yet recorded, all in one transaction; return the names applied.

    A ledger that is up to date is only read, so a read-only one still opens; one from a later judge is refused."""
    check_known(db, source)
    if MIGRATIONS_TABLE in db.table_names() and not _pending(db):
        return []
    db.execute("BEGIN IMMEDIATE")
    try:
        db[MIGRATIONS_TABLE].create({"name": str, "applied_at": str}, pk="name", if_not_exists=True)
        check_known(db, source)  # again inside the lock: another process may have migrated meanwhile
        newly = []
        for fn in _pending(db):
            fn(db)
            db[MIGRATIONS_TABLE].insert(
                {"name": fn.__name__, "applied_at": datetime.datetime.now(datetime.timezone.utc).isoformat()}
            )
            newly.append(fn.__name__)
        db.execute("COMMIT")
    except BaseException:
        if db.conn.in_transaction:
            db.execute("ROLLBACK")
        raise
    return newly


def _pending(db: sqlite_utils.Database) -> list[Callable[[sqlite_utils.Database], None]]:
    done = set(applied(db))
    return [fn for fn in MIGRATIONS if fn.__name__ not in done]
