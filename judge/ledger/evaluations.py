"""The ledger's evaluations: what each stage said, the benchmark results and timings, resources, clearances, and
the queries the reports and the CLI ask of them. A part of judge.ledger.Ledger (its SQL stays in this package)."""

from __future__ import annotations

import json

from .. import contain
from ..errors import JudgeError
from ..stages.details import CompileDetail, CompileError, TimedBenchmark, detail_type
from ..stages.result import StageResult
from .common import _json, now
from .rows import CandidateEvaluationRow, ClearedEvaluationRow, EvaluationRow, WinnerRow

PEER = "peer"  # evaluations.subject of a target's peer: timed like a candidate, never ranked


class EvaluationRecords:
    """Ledger methods about evaluations; they use the Ledger's db, transaction() and query()."""

    def record_evaluation(
        self,
        *,
        run_id: int,
        round_id: int,
        revision_id: int | None,
        subject: str,
        kernel_sha256: str | None,
        outcome: str,
        reason: str,
        stages: list[StageResult],
        device: dict | None,
        started_at: str,
        confinement: str | None = None,
    ) -> int:
        """Write one finished evaluation with its stages, benchmarks, repetitions and resources at once. Text a
        candidate's processes produced is capped first (StageResult.bounded, contain.REASON_CAP): a 16 MiB error
        line is kept as its first 4 KiB and how much more there was. `confinement` is the line a report shows of
        its runners' confinement (judge.report.formatting.confinement_summary), kept as given."""
        stages = [s.bounded() for s in stages]
        reason = contain.cap(reason, contain.REASON_CAP)
        timing = next((s for s in stages if s.stage == "timing" and s.status == "passed"), None)
        geomean = ci = None
        if timing:
            geomean = timing.detail.geomean
            ci = timing.detail.geomean_ci
        with self.transaction() as db:
            evaluation_id = db["evaluations"].insert(
                {
                    "run_id": run_id,
                    "round_id": round_id,
                    "revision_id": revision_id,
                    "subject": subject,
                    "kernel_sha256": kernel_sha256,
                    "outcome": outcome,
                    "reason": reason,
                    "geomean_speedup": geomean,
                    "geomean_ci_low": ci[0] if ci else None,
                    "geomean_ci_high": ci[1] if ci else None,
                    "device_json": _json(device) if device else None,
                    "confinement": confinement,
                    "started_at": started_at,
                    "finished_at": now(),
                }
            ).last_pk
            _insert_stages(db, evaluation_id, stages)
            if timing:
                _insert_benchmarks(db, evaluation_id, timing.detail.benchmarks)
        return evaluation_id

    def evaluations(self, round_id: int) -> list[EvaluationRow]:
        return self.query("select * from evaluations where round_id = ? order by id", (round_id,))

    def latest_evaluation(self, round_id: int, revision_id: int | None,
                          subject: str = "candidate") -> EvaluationRow | None:
        rows = self.query(
            "select * from evaluations where round_id = ? and subject = ? and "
            "(revision_id = ? or (? is null and revision_id is null)) order by id desc limit 1",
            (round_id, subject, revision_id, revision_id),
        )
        return rows[0] if rows else None

    def peer_evaluation(self, round_id: int) -> EvaluationRow | None:
        """The round's latest evaluation of the target's peer (judge/peer.py), or None."""
        return self.latest_evaluation(round_id, None, subject=PEER)

    def stage_results(self, evaluation_id: int) -> list[StageResult]:
        rows = self.query("select * from stage_results where evaluation_id = ? order by id", (evaluation_id,))
        return [
            StageResult(
                stage=r["stage"],
                status=r["status"],
                summary=r["summary"],
                seconds=r["seconds"] or 0.0,
                detail=detail_type(r["stage"]).from_json(json.loads(r["detail_json"] or "{}")),
                log_tail=r["log_tail"] or "",
            )
            for r in rows
        ]

    def benchmark_results(self, evaluation_id: int) -> list[dict]:
        return self.query("select * from benchmark_results where evaluation_id = ? order by benchmark", (evaluation_id,))

    def round_winner(self, round_id: int) -> WinnerRow | None:
        """The latest candidate evaluation per revision of the round that stands as faster, best geomean first."""
        rows = self.query(
            """
            select e.*, r.proposal_id, r.revision, r.patch from evaluations e
            join revisions r on r.id = e.revision_id
            left join clearances c on c.evaluation_id = e.id
            where e.id in (select max(id) from evaluations where round_id = ? and subject = 'candidate'
                           group by revision_id)
              and (e.outcome = 'faster' or (e.outcome = 'implausible' and c.outcome = 'faster'))
            order by e.geomean_speedup desc, e.id
            """,
            (round_id,),
        )
        return rows[0] if rows else None

    def clear(self, evaluation_id: int, outcome: str, note: str, cleared_by: str, reason: str | None = None,
              check=None) -> int:
        """Record that a person cleared an implausible result; it then stands at `outcome` for `reason`. Once only;
        `check(ledger)`, run inside the write transaction, may still refuse it (judge.schedule: a closed round)."""
        with self.transaction() as db:
            if self.clearance(evaluation_id):
                raise JudgeError(f"evaluation {evaluation_id} is already cleared")
            if check is not None:
                check(self)
            return db["clearances"].insert({"evaluation_id": evaluation_id, "outcome": outcome, "reason": reason,
                                            "note": note, "cleared_by": cleared_by, "cleared_at": now()}).last_pk

    def clearance(self, evaluation_id: int) -> dict | None:
        rows = self.query("select * from clearances where evaluation_id = ?", (evaluation_id,))
        return rows[0] if rows else None

    def evaluation(self, evaluation_id: int) -> EvaluationRow | None:
        rows = self.query("select * from evaluations where id = ?", (evaluation_id,))
        return rows[0] if rows else None

    def kernel_resources(self, evaluation_id: int) -> list[dict]:
        return self.query("select * from kernel_resources where evaluation_id = ? order by id", (evaluation_id,))

    def revisions_of_round(self, target: str, round: int) -> list[dict]:
        """Each proposal's latest revision submitted for this round of this target (later rounds' are not its)."""
        return self.query(
            """
            select r.* from revisions r
            join (select proposal_id, max(revision) as revision from revisions
                  where round = :round and target = :target group by proposal_id) latest
              on latest.proposal_id = r.proposal_id and latest.revision = r.revision
            order by r.proposal_id
            """,
            {"round": round, "target": target},
        )

    def revisions_up_to_round(self, target: str, round: int) -> list[dict]:
        """Every revision of every proposal of a target submitted for rounds up to `round`, in revision order."""
        return self.query(
            "select * from revisions where target = ? and round <= ? order by proposal_id, revision", (target, round)
        )

    def latest_candidate_evaluations(self, round_id: int) -> list[CandidateEvaluationRow]:
        """The latest candidate evaluation of each revision in a round, with its revision's fields and the
        outcome a person cleared it to (`cleared_outcome`, null when not cleared), oldest first."""
        return self.query(
            """
            select e.*, r.proposal_id, r.revision, r.author, r.title, r.claim_low, r.claim_high,
                   c.outcome as cleared_outcome, c.reason as cleared_reason
            from evaluations e
            join revisions r on r.id = e.revision_id
            left join clearances c on c.evaluation_id = e.id
            where e.id in (select max(id) from evaluations where round_id = ? and subject = 'candidate'
                           group by revision_id)
            order by e.id
            """,
            (round_id,),
        )

    def latest_evaluation_of_revision(self, revision_id: int) -> ClearedEvaluationRow | None:
        """A revision's latest candidate evaluation in any round, with `cleared_outcome` as above."""
        rows = self.query(
            "select e.*, c.outcome as cleared_outcome, c.reason as cleared_reason from evaluations e "
            "left join clearances c on c.evaluation_id = e.id "
            "where e.revision_id = ? and e.subject = 'candidate' order by e.id desc limit 1",
            (revision_id,),
        )
        return rows[0] if rows else None

    def evaluations_of_revision(self, revision_id: int) -> list[EvaluationRow]:
        return self.query("select * from evaluations where revision_id = ? order by id", (revision_id,))

    def held(self, round_id: int) -> list[dict]:
        """The round's latest candidate evaluations held as implausible that no person has cleared, oldest first."""
        return [e for e in self.latest_candidate_evaluations(round_id)
                if e["outcome"] == "implausible" and not e["cleared_outcome"]]

    def outcome_counts(self, round_id: int) -> dict[str, int]:
        """How many of a round's revisions stand at each outcome (their latest candidate evaluation; a cleared one
        at the outcome it was cleared to, as 'faster (cleared)')."""
        rows = self.query(
            "select coalesce(c.outcome || ' (cleared)', e.outcome) as outcome, count(*) as n from evaluations e "
            "left join clearances c on c.evaluation_id = e.id where e.id in "
            "(select max(id) from evaluations where round_id = ? and subject = 'candidate' group by revision_id) "
            "group by 1 order by 1",
            (round_id,),
        )
        return {r["outcome"]: r["n"] for r in rows}

    def superseded_candidate_evaluations(self, round_id: int) -> list[dict]:
        """Candidate evaluations of a round that a later evaluation of the same revision replaced, oldest first."""
        return self.query(
            """
            select id, revision_id, outcome from evaluations
            where round_id = ? and subject = 'candidate'
              and id not in (select max(id) from evaluations where round_id = ? and subject = 'candidate'
                             group by revision_id)
            order by id
            """,
            (round_id, round_id),
        )

    def runs_of_round(self, round_id: int) -> list[dict]:
        """Every run of a round: where and when it ran and how it ended."""
        return self.query(
            "select id, status, host, pid, started_at, finished_at from runs where round_id = ? order by id", (round_id,)
        )

    def judged_revision_ids(self) -> set[int]:
        """The revisions their round has judged: a candidate evaluation in their own round (whose rounds row exists
        once it started), or, for a pitch (no patch: no round evaluates it), a finished run of their round."""
        rows = self.query(
            """
            select r.id from revisions r join rounds ro on ro.target = r.target and ro.round = r.round
            where exists (select 1 from evaluations e where e.revision_id = r.id and e.round_id = ro.id
                          and e.subject = 'candidate')
               or (r.patch is null and exists (select 1 from runs u where u.round_id = ro.id and u.status = 'finished'))
            """
        )
        return {row["id"] for row in rows}

    def proposal_authors(self, target: str) -> list[dict]:
        """Each (author, proposal_id) pair a target's revisions name, once."""
        return self.query(
            "select distinct author, proposal_id from revisions where target = ? order by author, proposal_id", (target,)
        )


def _insert_stages(db, evaluation_id: int, stages: list[StageResult]) -> None:
    """An evaluation's stages and each compiled kernel's resources, inside the evaluation's transaction."""
    for stage in stages:
        db["stage_results"].insert(
            {
                "evaluation_id": evaluation_id,
                "stage": stage.stage,
                "status": stage.status,
                "summary": stage.summary,
                "seconds": stage.seconds,
                "detail_json": _json(stage.detail.to_json()),
                "log_tail": stage.log_tail,
            }
        )
        if isinstance(stage.detail, CompileDetail):
            db["kernel_resources"].insert_all(_resource_rows(evaluation_id, stage.detail))


def _insert_benchmarks(db, evaluation_id: int, benchmarks: list[TimedBenchmark]) -> None:
    """A timing stage's per-benchmark results and every repetition, inside the evaluation's transaction."""
    for bench in (b.require() for b in benchmarks):
        bench_id = db["benchmark_results"].insert(
            {
                "evaluation_id": evaluation_id,
                "benchmark": bench.index,
                "label": bench.label,
                "base_median_us": bench.base_median_us,
                "cand_median_us": bench.cand_median_us,
                "speedup": bench.speedup,
                "ci_low": bench.ci_low,
                "ci_high": bench.ci_high,
                "significant": int(bool(bench.significant)),
                "reps": bench.reps,
                "speed_of_light_us": bench.speed_of_light_us,
                "clock": bench.clock,
                "clocks_json": _json(bench.clocks) if bench.clocks else None,
                "audit_json": _json(bench.audit) if bench.audit else None,
                "placement": bench.placement or None,
                "processes": bench.processes or None,
            }
        ).last_pk
        pairs = bench.rep_pairs or [None] * len(bench.base_us)
        db["timings"].insert_all(
            {"benchmark_result_id": bench_id, "rep": i, "base_us": b, "cand_us": c, "pair": p}
            for i, (b, c, p) in enumerate(zip(bench.base_us, bench.cand_us, pairs))
        )


RESOURCE_FIELDS = ("kernel", "registers", "smem_bytes", "spill_bytes", "stack_bytes", "threads_per_cta", "ctas_per_sm", "limiter")


def _resource_rows(evaluation_id: int, detail: CompileDetail) -> list[dict]:
    """One row per kernel of each compiled configuration (one row for a configuration that failed)."""
    rows = []
    for config in detail.configs:
        error = config.error
        common = {
            "evaluation_id": evaluation_id,
            "signature": _json(config.signature),
            "benchmarks_json": _json(config.benchmarks),
            "ok": int(bool(config.ok)),
            "ptx_bytes": config.ptx_bytes,
            "cubin_bytes": config.cubin_bytes,
            "compile_seconds": config.seconds,
            "error": _capped(error.line if isinstance(error, CompileError) else error),
        }
        kernels = config.kernels or [None]
        for kernel in kernels:
            if kernel is None:
                rows.append({**common, **dict.fromkeys(RESOURCE_FIELDS)})
                continue
            occupancy = kernel.occupancy
            spills = [kernel.spill_stores, kernel.spill_loads]
            rows.append(
                {
                    **common,
                    "kernel": _capped(kernel.name),
                    "registers": kernel.registers,
                    "smem_bytes": kernel.smem_total,
                    "spill_bytes": sum(spills) if None not in spills else None,
                    "stack_bytes": kernel.stack_bytes,
                    "threads_per_cta": kernel.threads,
                    "ctas_per_sm": occupancy.ctas_per_sm if occupancy else None,
                    "limiter": occupancy.limited_by if occupancy else None,
                }
            )
    return rows


def _capped(text: str | None) -> str | None:
    """A compile error or a kernel's name (both the candidate's doing) as the ledger keeps them: a line at most."""
    return None if text is None else contain.cap(text, contain.LINE_CAP)
