"""How a report writes numbers and text: the templates' filters, so every number is formatted in one place.

The conventions stated at the end of each report (judge/report/conventions.py) describe these formats.
"""

from __future__ import annotations

from decimal import ROUND_HALF_UP, Decimal
from typing import Any, Optional

from .. import contain

KIB = 1024


def _fixed(value: float, places: int) -> str:
    """`value` with `places` decimals, halves rounded up as written (f-strings round the binary value)."""
    return f"{Decimal(repr(float(value))).quantize(Decimal(1).scaleb(-places), rounding=ROUND_HALF_UP):f}"


def _signed(text: str) -> str:
    """A formatted number with its sign always shown: +20.0, -30.8."""
    return text if text.startswith("-") else f"+{text}"


def fmt_us(value: Optional[float]) -> str:
    """A time in us to 3 significant digits, halves rounded up, without exponent notation (1234.5 -> 1235)."""
    if value is None:
        return "-"
    if value == 0:
        return "0"
    exact = Decimal(repr(float(value)))
    if abs(exact) >= 1000:
        return str(exact.quantize(Decimal(1), rounding=ROUND_HALF_UP))
    rounded = exact.quantize(Decimal(1).scaleb(exact.adjusted() - 2), rounding=ROUND_HALF_UP)
    if rounded.adjusted() > exact.adjusted():  # 9.996 -> 10.00: one digit too many
        rounded = rounded.quantize(Decimal(1).scaleb(rounded.adjusted() - 2), rounding=ROUND_HALF_UP)
    return f"{rounded:f}"


def fmt_x(value: Optional[float]) -> str:
    return "-" if value is None else f"{_fixed(value, 3)}x"


def fmt_ci(ci: Optional[list]) -> str:
    if not ci or ci[0] is None:
        return ""
    return f"[{_fixed(ci[0], 3)}, {_fixed(ci[1], 3)}]"


def fmt_speedup(value: Optional[float], ci: Optional[list] = None) -> str:
    """1.250x [1.244, 1.256]: the point estimate and its 95% interval."""
    if value is None:
        return "-"
    interval = fmt_ci(ci)
    return f"{fmt_x(value)} {interval}" if interval else fmt_x(value)


def fmt_pct(value: Optional[float]) -> str:
    """A signed percentage, 1 decimal: +20.0%, -30.8%."""
    if value is None:
        return "-"
    return f"{_signed(_fixed(value, 1))}%"


def fmt_plain_pct(value: Optional[float]) -> str:
    return "-" if value is None else f"{_fixed(value, 1)}%"


def fmt_claim(claim: Optional[list]) -> str:
    """A claimed range as the proposer wrote it: 1.5-1.8x (a single value when low = high)."""
    if not claim:
        return "no claim"
    low, high = claim
    return f"{low:g}x" if low == high else f"{low:g}-{high:g}x"


def fmt_delta(cell: Optional[dict]) -> str:
    """A count against the base: 168 (+40); no delta where the base has no such configuration."""
    if cell is None or cell.get("value") is None:
        return "-"
    value, base = cell["value"], cell.get("base")
    if base is None:
        return f"{value}"
    return f"{value} ({value - base:+d})"


def fmt_kib(cell: Optional[dict]) -> str:
    """A size in bytes shown in KiB, 1 decimal, against the base: 110.0 (+72.0) for 112640 bytes against 38912."""
    if cell is None or cell.get("value") is None:
        return "-"
    value, base = cell["value"], cell.get("base")
    text = _fixed(value / KIB, 1)
    if base is None:
        return text
    return f"{text} ({_signed(_fixed((value - base) / KIB, 1))})"


def fmt_seconds(value: Optional[float]) -> str:
    return "-" if value is None else f"{_fixed(value, 1)} s"


def fmt_patch(stats: Optional[dict]) -> str:
    if not stats:
        return "no patch"
    hunks = stats["hunks"]
    return f"+{stats['added']}/-{stats['removed']} lines in {hunks} hunk{'' if hunks == 1 else 's'}"


def fmt_votes(counts: dict) -> str:
    """How many votes judge could total and how many wait on a measurement: '1 computed, 1 pending'."""
    parts = [f"{counts[k]} {k}" for k in ("computed", "pending") if counts[k]]
    return ", ".join(parts) if parts else "none"


def fmt_device(device: dict) -> str:
    """One line of what a GPU was: name, SMs, architecture, clocks, driver and software versions; for a CPU target,
    the CPU: its model, cores and hardware threads."""
    if device.get("kind") == "cpu":
        return fmt_cpu(device)
    parts = [str(device.get("name", "unknown GPU"))]
    if device.get("sm_count") is not None:
        parts.append(f"{device['sm_count']} SMs")
    if device.get("arch"):
        parts.append(f"{device['arch']} (capability {device.get('capability', '?')})")
    if device.get("memory_gb") is not None:
        parts.append(f"{device['memory_gb']} GB memory")
    if device.get("l2_mb") is not None:
        parts.append(f"{device['l2_mb']} MB L2")
    if device.get("sm_clock_mhz") is not None:
        maximum = f" (max {device['sm_clock_max_mhz']})" if device.get("sm_clock_max_mhz") is not None else ""
        parts.append(f"SM clock {device['sm_clock_mhz']} MHz{maximum}")
    if device.get("mem_clock_mhz") is not None:
        parts.append(f"memory clock {device['mem_clock_mhz']} MHz")
    if device.get("temperature_c") is not None:
        parts.append(f"{device['temperature_c']} C")
    for key, name in (("driver", "driver"), ("cuda", "CUDA"), ("torch", "torch"), ("cutedsl", "CuTe DSL")):
        if device.get(key):
            parts.append(f"{name} {device[key]}")
    return ", ".join(parts)


def fmt_cpu(device: dict) -> str:
    """`CPU: AMD EPYC 7B13, 2 cores, 2 threads, torch 2.13.0+cpu`."""
    cores, threads = device.get("cores"), device.get("threads")
    parts = [f"CPU: {device.get('name') or 'unknown CPU'}"]
    if cores:
        parts.append(f"{cores} core{'s' if cores != 1 else ''}")
    if threads:
        parts.append(f"{threads} thread{'s' if threads != 1 else ''}")
    if device.get("torch"):
        parts.append(f"torch {device['torch']}")
    return ", ".join(parts)


def fmt_knob(value: Any) -> str:
    """A compile knob's value as read in the source: tuples as 128x128x256, not as ranges."""
    if value is None:
        return "none"
    if isinstance(value, (list, tuple)):
        return "x".join(str(v) for v in value)
    return str(value)


def signature_label(signature: Any) -> str:
    """A whole compile signature on one line: 'ab_stages=1 mma_tiler_mnk=128x128x256'."""
    if not isinstance(signature, dict) or not signature:
        return "(all)"
    return " ".join(f"{key}={fmt_knob(value)}" for key, value in signature.items())


def fmt_knob_changes(changes: Optional[list]) -> str:
    """The knobs a configuration changed against the base's: 'num_ab_stages 1 -> 3'; 'none' when equal."""
    if changes is None:
        return "no base counterpart"
    if not changes:
        return "none"
    return "; ".join(f"{c['knob']} {fmt_knob(c['base'])} -> {fmt_knob(c['value'])}" for c in changes)


def fmt_line(value: Any) -> str:
    """Judge's own text on one Markdown line (its confinement summary, its notes): whitespace made one space.
    Text that a contestant, a shark or candidate code wrote goes through judge/contain.py instead."""
    return "" if value is None else " ".join(str(value).split())


def confinement_summary(record: Optional[dict]) -> Optional[str]:
    """The one line a report shows for a runner's confinement record (judge.sandbox.confine.Confinement)."""
    if not record:
        return None
    from ..sandbox.confine import Confinement

    return Confinement.from_dict(record).summary()


def fmt_text(value: Any) -> str:
    """Contestant text on one line (error lines, summaries, reasons, notes), contained: judge/contain.py."""
    return contain.md_text(value)


def fmt_cell(value: Any) -> str:
    """Contestant text in a table cell: contained as on a line, pipes escaped too."""
    return contain.md_text(value, cell=True)


def fmt_name(value: Any) -> str:
    """An id, a name or an author, contained and capped at contain.NAME_CAP, on a line or in a cell."""
    return contain.md_text(value, contain.NAME_CAP, cell=True)


def fmt_title(value: Any) -> str:
    """A title or a list of a proposal's (risks, references, joined), contained and capped at contain.TITLE_CAP."""
    if isinstance(value, (list, tuple)):
        value = "; ".join(str(v) for v in value)
    return contain.md_text(value, contain.TITLE_CAP, cell=True)


def fmt_code(value: Any) -> str:
    """Inline code on one line (a patch line, a compile error), contained: judge/contain.py md_code."""
    return contain.md_code(value)


def fmt_quote(value: Any) -> str:
    """A pitch as a Markdown quote it cannot close, capped at contain.PITCH_CAP: judge/contain.py md_quote."""
    return contain.md_quote(value)


def fmt_fraction(value: Optional[float]) -> str:
    """A fraction (0.41) as a whole percentage (41%); "-" where unknown."""
    return "-" if value is None else f"{value:.0%}"


def fmt_number(value: Optional[float]) -> str:
    """A measured number to its units (GB/s, %), no decimals; "-" where unknown."""
    return "-" if value is None else f"{value:,.0f}"


def fmt_ids(ids: list[int]) -> str:
    return ", ".join(f"#{i}" for i in ids)


FILTERS = {
    "us": fmt_us,
    "x": fmt_x,
    "ci": fmt_ci,
    "speedup": fmt_speedup,
    "pct": fmt_pct,
    "plain_pct": fmt_plain_pct,
    "claim": fmt_claim,
    "delta": fmt_delta,
    "kib": fmt_kib,
    "seconds": fmt_seconds,
    "patch": fmt_patch,
    "votes": fmt_votes,
    "device": fmt_device,
    "knob": fmt_knob,
    "knob_changes": fmt_knob_changes,
    "line": fmt_line,
    "text": fmt_text,
    "cell": fmt_cell,
    "name": fmt_name,
    "title": fmt_title,
    "code": fmt_code,
    "quote": fmt_quote,
    "ids": fmt_ids,
    "fraction": fmt_fraction,
    "number": fmt_number,
}
