"""The ledger's record of judge's own noise: each round's A/A control (an evaluation with subject 'control') and
`judge calibrate`'s runs (the `calibrations` table), and the samples the noise floor is computed from. A part of
judge.ledger.Ledger (its SQL stays in this package)."""

from __future__ import annotations

import json

from .common import _json, now

CONTROL = "control"  # evaluations.subject of the base against an identical copy of itself: never ranked


class NoiseRecords:
    """Ledger methods about controls and calibrations; they use the Ledger's transaction() and query()."""

    def control_evaluation(self, round_id: int) -> dict | None:
        """The round's latest A/A control (judge/control.py), or None."""
        return self.latest_evaluation(round_id, None, subject=CONTROL)

    def verdict_floor(self, round_id: int) -> dict | None:
        """The noise floor (judge.noise.Floor's JSON) that the round's latest passed candidate timing recorded, or
        None where none did."""
        rows = self.query(
            "select s.detail_json from stage_results s join evaluations e on e.id = s.evaluation_id "
            "where e.round_id = ? and e.subject = 'candidate' and s.stage = 'timing' and s.status = 'passed' "
            "order by e.id desc limit 1", (round_id,))
        return json.loads(rows[0]["detail_json"]).get("floor") if rows else None

    def control_samples(self, target: str, device: str) -> list[list[float]]:
        """Per control and calibration A/A run of `target` on `device`, oldest first: its process pairs' geomean
        log ratios."""
        rows = self.query(
            "select e.id, e.device_json, s.detail_json, e.finished_at from evaluations e "
            "join rounds r on r.id = e.round_id "
            "join stage_results s on s.evaluation_id = e.id and s.stage = 'timing' and s.status = 'passed' "
            "where e.subject = ? and r.target = ? order by e.id", (CONTROL, target))
        found = []
        for row in rows:
            if _device_name(row["device_json"]) != device:
                continue
            logs = _logs(json.loads(row["detail_json"]).get("pair_geomeans"))
            if logs:
                found.append((row["finished_at"], logs))
        for row in self.query("select result_json, device, created_at from calibrations where target = ? "
                              "order by id", (target,)):
            if row["device"] != device:
                continue
            for run in json.loads(row["result_json"]).get("controls", []):
                logs = _logs(run.get("pair_geomeans"))
                if logs:
                    found.append((row["created_at"], logs))
        return [logs for _, logs in sorted(found, key=lambda item: item[0])]

    def measured_base(self, target: str, base_sha256: str, device: str, round_id: int,
                      before: str | None = None) -> dict | None:
        """The latest A/A measurement of this very base (its sha256) on `device` made outside round `round_id` (and,
        with `before`, finished by then): an earlier round's control whose timing passed ({"round": N,
        "evaluation_id": id}) or a `judge calibrate` run of it with timed controls ({"calibration": id}); None where
        there is none. Its pairs are in the target's floor already (control_samples), and a round on the same base
        and device need not time them again."""
        found = []
        for row in self.query(
                "select e.id, e.device_json, e.finished_at, r.round from evaluations e "
                "join rounds r on r.id = e.round_id "
                "join stage_results s on s.evaluation_id = e.id and s.stage = 'timing' and s.status = 'passed' "
                "where e.subject = ? and r.target = ? and e.kernel_sha256 = ? and e.round_id != ? order by e.id",
                (CONTROL, target, base_sha256, round_id)):
            if _device_name(row["device_json"]) == device:
                found.append((row["finished_at"] or "", {"round": row["round"], "evaluation_id": row["id"]}))
        for row in self.query("select id, result_json, created_at from calibrations where target = ? and "
                              "base_sha256 = ? and device = ? order by id", (target, base_sha256, device)):
            if any(_logs(run.get("pair_geomeans")) for run in json.loads(row["result_json"]).get("controls", [])):
                found.append((row["created_at"] or "", {"calibration": row["id"]}))
        found = [item for item in found if before is None or item[0] <= before]
        return sorted(found, key=lambda item: item[0])[-1][1] if found else None  # a tie: the calibration

    def latest_control_device(self, target: str) -> str | None:
        """The device (judge.noise.device_name) of `target`'s latest A/A control or calibration, or None."""
        found = []
        for row in self.query(
                "select e.device_json, e.finished_at from evaluations e join rounds r on r.id = e.round_id "
                "join stage_results s on s.evaluation_id = e.id and s.stage = 'timing' and s.status = 'passed' "
                "where e.subject = ? and r.target = ? order by e.id desc limit 1", (CONTROL, target)):
            found.append((row["finished_at"] or "", _device_name(row["device_json"])))
        for row in self.query("select device, created_at from calibrations where target = ? order by id desc limit 1",
                              (target,)):
            found.append((row["created_at"] or "", row["device"]))
        return max(found)[1] if found else None

    def record_calibration(self, target: str, device: str, device_facts: dict | None, base_sha256: str,
                           result: dict, argv: list[str]) -> int:
        """Keep one `judge calibrate` run: its A/A runs, its slowdowns, the floors it found."""
        with self.transaction() as db:
            return db["calibrations"].insert({
                "target": target, "device": device, "device_json": _json(device_facts) if device_facts else None,
                "base_sha256": base_sha256, "result_json": _json(result), "argv_json": _json(argv),
                "created_at": now()}).last_pk

    def calibrations(self, target: str | None = None) -> list[dict]:
        if target is None:
            return self.query("select * from calibrations order by id")
        return self.query("select * from calibrations where target = ? order by id", (target,))


def _device_name(device_json: str | None) -> str:
    from ..noise import device_name

    return device_name(json.loads(device_json) if device_json else None)


def _logs(geomeans) -> list[float]:
    import math

    if not isinstance(geomeans, list):
        return []
    return [math.log(g) for g in geomeans if isinstance(g, (int, float)) and g > 0]
