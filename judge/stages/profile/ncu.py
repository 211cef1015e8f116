"""Nsight Compute (`ncu`): how the profile stage launches a runner under it and reads its report back.

ncu injects itself into the process it starts, so a profiled runner is started by ncu (`launcher`), with
`--profile-from-start off`: only the calls the runner brackets with cudaProfilerStart/Stop are profiled
(judge.boundary.profiling), never its warm-up. The report is exported to a file of judge's and read back with
`ncu --import ... --csv --page raw` (`export_csv`); `parse_csv` is pure and never raises on a row or a metric it
cannot read: a metric a GPU lacks is None.
"""

from __future__ import annotations

import csv
import io
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Optional

SECTIONS = ("SpeedOfLight", "Occupancy", "WarpStateStats")
METRICS = ("gpu__time_duration.sum", "dram__bytes.sum.per_second", "dram__throughput.avg.pct_of_peak_sustained_elapsed",
           "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active",
           "sm__inst_executed_pipe_tensor_op_gmma.avg.pct_of_peak_sustained_active",
           "sm__warps_active.avg.pct_of_peak_sustained_active")
LAUNCH_LIMIT = 200  # kernels profiled per run at most: each is replayed once per pass
TOP_STALLS = 3
EXPORT_S = 300.0

TIME_UNITS = {"nsecond": 1e-3, "ns": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3, "ms": 1e3, "second": 1e6, "s": 1e6}
# Bytes a second in GB/s, from any of ncu's spellings: "byte/s" (Nsight Compute 2025.3 on an H100, 2026-11-27),
# "Gbyte/second", "GB/s".
RATE_UNITS = {f"{prefix}{byte}/{second}": scale for prefix, scale in (("", 1e-9), ("K", 1e-6), ("M", 1e-3), ("G", 1.0),
                                                                    ("T", 1e3))
              for byte in ("byte", "B") for second in ("s", "second")}
# The stall families ncu reports, the one preferred first: cycles a warp spent stalled per issued instruction
# (WarpStateStats), the warp latency's share, then the PC sampler's counts.
STALL_FAMILIES = (
    re.compile(r"^smsp__average_warps_issue_stalled_(?P<reason>[a-z0-9_]+?)_per_issue_active\.ratio$"),
    re.compile(r"^smsp__average_warp_latency_issue_stalled_(?P<reason>[a-z0-9_]+?)(\.ratio|\.pct)?$"),
    re.compile(r"^smsp__pcsamp_warps_issue_stalled_(?P<reason>[a-z0-9_]+?)(\.sum)?$"),
)
NAME_COLUMNS = ("Kernel Name", "Function Name", "Demangled Name")


def find() -> Optional[str]:
    """ncu's path on this machine: JUDGE_NCU where set ("none": no ncu, as if it were missing), else PATH, then
    CUDA's usual place; None where there is none."""
    chosen = os.environ.get("JUDGE_NCU")
    if chosen is not None:
        return None if chosen in ("", "none") else chosen
    found = shutil.which("ncu")
    if found:
        return found
    fallback = Path("/usr/local/cuda/bin/ncu")
    return str(fallback) if fallback.is_file() else None


def version(ncu: str) -> Optional[str]:
    """`ncu --version`'s last line (e.g. "Version 2025.1.0.0 (build ...)"), or None when it does not answer."""
    try:
        done = subprocess.run([ncu, "--version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = [line.strip() for line in done.stdout.splitlines() if line.strip()]
    return lines[-1] if done.returncode == 0 and lines else None


def launcher(ncu: str, report: Path, metrics: bool = True) -> list[str]:
    """The command that goes before a runner's own: ncu starts it, profiles the bracketed calls' kernels at the
    GPU's own clocks (not locked to base: their times are compared with the call's) and exports them to `report`
    (.ncu-rep) when the runner exits. Without `metrics`, the sections alone (a GPU that lacks a metric named in
    METRICS makes ncu refuse the whole run)."""
    command = [ncu, "--export", str(report), "--force-overwrite", "--profile-from-start", "off",
               "--target-processes", "all", "--launch-count", str(LAUNCH_LIMIT), "--clock-control", "none"]
    for section in SECTIONS:
        command += ["--section", section]
    return command + (["--metrics", ",".join(METRICS)] if metrics else [])


def complaint(log: str) -> Optional[str]:
    """ncu's first error (or else warning) line in a runner's log, where it wrote one (ERR_NVGPUCTRPERM, an
    unknown metric, a process it could not follow)."""
    lines = [line.strip() for line in (log or "").splitlines()]
    found = [line for line in lines if line.startswith("==ERROR==")] or \
        [line for line in lines if line.startswith("==WARNING==")]
    return found[0][:300] if found else None


def export_csv(ncu: str, report: Path) -> str:
    """The report's raw page as CSV (one row per kernel after a units row); raises RuntimeError in one line."""
    if not report.is_file():
        raise RuntimeError(f"ncu wrote no report ({report.name})")
    done = subprocess.run([ncu, "--import", str(report), "--csv", "--page", "raw"], capture_output=True, text=True,
                          timeout=EXPORT_S)
    if done.returncode != 0:
        raise RuntimeError(f"ncu --import failed: {(done.stderr or done.stdout).strip()[:200]}")
    return done.stdout


def parse_csv(text: str) -> list[dict]:
    """Each profiled kernel of ncu's raw CSV, in launch order: name, time_us, dram_gbps, dram_pct, tensor_pct (the
    larger of the mma and, on Hopper, wgmma pipes), occupancy_pct and its top stalls [[reason, value], ...]. Lines
    before the header (ncu's own ==PROF== lines) are skipped, a units row read, thousands separators dropped; a
    metric missing or unreadable is None."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID"') or line.startswith("ID,")), None)
    if start is None:
        return []
    rows = list(csv.reader(io.StringIO("\n".join(lines[start:]))))
    header, body = rows[0], rows[1:]
    units = {}
    if body and _number(_cell(body[0], header, "ID")) is None:
        units = dict(zip(header, body[0]))
        body = body[1:]
    kernels = []
    for row in body:
        if len(row) < len(header):  # a line cut short: nothing in it can be placed
            continue
        values = dict(zip(header, row))
        kernels.append(_kernel(values, units))
    return kernels


def _kernel(values: dict, units: dict) -> dict:
    name = next((values[c] for c in NAME_COLUMNS if values.get(c)), "?")
    time_us = _scaled(values, units, "gpu__time_duration.sum", TIME_UNITS, "nsecond")
    tensor = [_number(values.get(m)) for m in METRICS[3:5]]
    known = [t for t in tensor if t is not None]
    return {"name": name, "time_us": time_us,
            "dram_gbps": _scaled(values, units, "dram__bytes.sum.per_second", RATE_UNITS, "byte/second"),
            "dram_pct": _number(values.get("dram__throughput.avg.pct_of_peak_sustained_elapsed")),
            "tensor_pct": max(known) if known else None,
            "occupancy_pct": _number(values.get("sm__warps_active.avg.pct_of_peak_sustained_active")),
            "stalls": _stalls(values)}


def _stalls(values: dict) -> list[list]:
    """The worst TOP_STALLS reasons of the first stall family the report has numbers for."""
    for family in STALL_FAMILIES:
        found = []
        for column, raw in values.items():
            match = family.match(column)
            if match is None or match.group("reason").endswith("not_issued"):
                continue
            number = _number(raw)
            if number is not None and number > 0:
                found.append([match.group("reason"), round(number, 3)])
        if found:
            return sorted(found, key=lambda item: (-item[1], item[0]))[:TOP_STALLS]
    return []


def _scaled(values: dict, units: dict, metric: str, table: dict, default: str) -> Optional[float]:
    number = _number(values.get(metric))
    if number is None:
        return None
    factor = table.get((units.get(metric) or default).strip())
    return None if factor is None else number * factor


def _cell(row: list, header: list, column: str) -> str:
    try:
        return row[header.index(column)]
    except (ValueError, IndexError):
        return ""


def _number(raw) -> Optional[float]:
    """A cell as a number: "1,234.5" is 1234.5; "", "n/a" and anything else unreadable are None."""
    if raw is None:
        return None
    text = str(raw).strip().replace(",", "")
    try:
        value = float(text)
    except ValueError:
        return None
    return value if value == value and abs(value) != float("inf") else None
