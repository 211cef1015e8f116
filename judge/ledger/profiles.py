"""The ledger's profiles (judge.stages.profile: where a kernel's time goes, per kernel text and device) and each
device's measured peaks. A part of judge.ledger.Ledger; the only SQL about these tables."""

from __future__ import annotations

import json
from typing import Optional

from .common import _json, now


class ProfileRecords:
    """Ledger methods about profiles and device peaks; they use the Ledger's transaction() and query()."""

    def record_profile(self, *, target: str, kernel_sha256: str, subject: str, device: Optional[str], profile: dict,
                       round_id: Optional[int] = None, revision_id: Optional[int] = None) -> int:
        """Keep one profile (judge.stages.profile.model.Profile's JSON), with its tool's and torch's versions."""
        versions = profile.get("versions") or {}
        row = {"target": target, "kernel_sha256": kernel_sha256, "subject": subject, "round_id": round_id,
               "revision_id": revision_id, "device": device, "tool": profile.get("tool"),
               "status": profile.get("status"), "reason": profile.get("reason"),
               "torch_version": versions.get("torch"), "ncu_version": versions.get("ncu"),
               "profile_json": _json(profile), "created_at": now()}
        with self.transaction() as db:
            return db["profiles"].insert(row).last_pk

    def stored_profile(self, target: str, kernel_sha256: str, device: Optional[str] = None,
                       usable_only: bool = True) -> Optional[dict]:
        """The latest profile of this kernel text (on `device`, any device when None), usable ones only unless
        asked: its JSON, with `id`, `device` and `created_at` added; None where there is none."""
        sql = "select id, device, status, profile_json, created_at from profiles where target = ? and kernel_sha256 = ?"
        params: list = [target, kernel_sha256]
        if device is not None:
            sql += " and device = ?"
            params.append(device)
        if usable_only:
            sql += " and status = 'ok'"
        rows = self.query(sql + " order by id desc limit 1", tuple(params))
        if not rows:
            return None
        row = rows[0]
        return {**json.loads(row["profile_json"]), "id": row["id"], "device": row["device"],
                "created_at": row["created_at"]}

    def device_peaks(self, device: str, family: str) -> Optional[dict]:
        rows = self.query("select device, family, dram_gbps, tensor_tflops, theoretical_tflops, torch_version "
                          "from device_peaks where device = ? and family = ?", (device, family))
        if not rows:
            return None
        row = rows[0]
        return {"device": row["device"], "family": row["family"], "dram_gbps": row["dram_gbps"],
                "tensor_tflops": row["tensor_tflops"], "theoretical_tflops": row["theoretical_tflops"],
                "torch": row["torch_version"]}

    def record_device_peaks(self, peaks: dict, family: str) -> None:
        """Keep a device's measured peaks under the family asked for (a GPU without FP8 measures bf16 for it)."""
        row = {"device": peaks["device"], "family": family, "dram_gbps": peaks["dram_gbps"],
               "tensor_tflops": peaks["tensor_tflops"], "theoretical_tflops": peaks.get("theoretical_tflops"),
               "torch_version": peaks.get("torch"), "created_at": now()}
        with self.transaction() as db:
            db["device_peaks"].upsert(row, pk=("device", "family"))
