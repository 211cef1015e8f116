"""Charts beside the Markdown reports, as SVG files the reports link (GitHub shows them).

Per round and target: the median time per benchmark of the base and of each measured proposal, against the
speed of light; and each contestant's claimed speedup against the measured geomean. Per target on the
leaderboard: the base's time per benchmark across rounds, and each round's base over round 1's.

The functions take plain data from the report views (judge/report/scorecard.py, leaderboard.py) and write
one file each. The same data gives the same bytes, so tests compare files: a Figure of its own per chart
(no pyplot, no global state), matplotlib's default style whatever the machine's matplotlibrc says, SVG ids
numbered in order, no date or creator in the metadata, text left as text in DejaVu Sans (shipped with
matplotlib, so its metrics do not depend on the machine's fonts). Other matplotlib versions lay out
differently: the bytes hold for the version the tests' fixtures name (tests/test_charts.py).
matplotlib is optional: without it the reports render without charts and say so once (MISSING).
"""

from __future__ import annotations

import importlib.util
import io
import re
import textwrap
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Optional

from ..contain import chart_label

MISSING = "charts not drawn: matplotlib is not installed"
STYLE = {
    "svg.hashsalt": "judge",
    "svg.fonttype": "none",
    "svg.image_inline": True,
    "font.family": ["sans-serif"],
    "font.sans-serif": ["DejaVu Sans"],
    "font.size": 9.0,
    "axes.titlesize": 10.0,
    "axes.grid": True,
    "axes.axisbelow": True,
    "grid.color": "#dddddd",
    "grid.linewidth": 0.6,
    "path.simplify": False,
}
BASE_COLOR = "#8c8c8c"
COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#bcbd22", "#17becf"]
WIDE = 10.0  # a span of values past this ratio gets a log scale


def available() -> bool:
    """Whether matplotlib can be imported: the reports draw charts only then."""
    return importlib.util.find_spec("matplotlib") is not None


# which charts a report gets -----------------------------------------------------------------


def round_charts(view: dict, out_dir: Path) -> dict:
    """Draw the charts of a round report (judge.report.round_view) into out_dir, beside the Markdown.
    Per target: the times chart where something was measured, the claims chart where a measured proposal
    has a claim; a file name or None for each. `note`: MISSING where charts were due but not drawn."""
    wanted: dict[tuple[str, str], tuple] = {}
    for t in view["targets"]:
        stem = f"round-{t['round']}-{t['target']}"
        if t["times"]:
            wanted[(t["target"], "times")] = (f"{stem}-times.svg", times_chart,
                                              f"Round {t['round']}, {t['target']}: median time per benchmark", t["times"])
        if any(row["claim"] for a in t["claims"]["authors"] for row in a["rows"]):
            rounds = "round 1" if t["round"] == 1 else f"rounds 1 to {t['round']}"
            wanted[(t["target"], "claims")] = (f"{stem}-claims.svg", claims_chart,
                                               f"{t['target']}, {rounds}: claimed speedup vs measured geomean",
                                               t["claims"]["authors"])
    drawn, note = _draw(wanted, Path(out_dir))
    targets = {t["target"]: {kind: drawn.get((t["target"], kind)) for kind in ("times", "claims")} for t in view["targets"]}
    return {"note": note, "targets": targets}


def leaderboard_charts(view: dict, out_dir: Path) -> dict:
    """Draw the leaderboard's chart of each target whose base was timed in some round (judge.report.leaderboard_view)."""
    wanted = {(t["target"], "progress"): (f"leaderboard-{t['target']}.svg", progress_chart,
                                          f"{t['target']}: the base across rounds", t["rounds"])
              for t in view["targets"] if any(r["base_times"] for r in t["rounds"])}
    drawn, note = _draw(wanted, Path(out_dir))
    return {"note": note, "targets": {t["target"]: drawn.get((t["target"], "progress")) for t in view["targets"]}}


def _draw(wanted: dict[tuple[str, str], tuple], out_dir: Path) -> tuple[dict, Optional[str]]:
    """Draw each wanted chart; without matplotlib draw none and say so (once, and only if one was due)."""
    if not wanted:
        return {}, None
    if not available():
        return {}, MISSING
    drawn = {}
    for key, (name, draw, title, data) in wanted.items():
        drawn[key] = draw(out_dir / name, title, data).name
    return drawn, None


# drawing ------------------------------------------------------------------------------------


@contextmanager
def _style() -> Iterator[None]:
    """matplotlib's defaults (not the machine's matplotlibrc) plus ours, only while one chart is drawn and saved."""
    import matplotlib.style

    with matplotlib.style.context(["default", STYLE]):
        yield


def _figure(width: float, height: float):
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), dpi=100, layout="constrained")


def _save(figure, path: Path) -> Path:
    """SVG without a date or a creator (matplotlib's version), its ids numbered: the same chart gives the same bytes."""
    buffer = io.BytesIO()
    figure.savefig(buffer, format="svg", metadata={"Date": None, "Creator": None})
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(_numbered_ids(buffer.getvalue().decode("utf-8")).encode("utf-8"))
    return path


def _numbered_ids(svg: str) -> str:
    """matplotlib names markers, clips and hatches by a hash of the str() of their numbers, and numpy 1 and 2 write
    a number differently (1.5, np.float64(1.5)): name them in order of first use instead."""
    names: dict[str, str] = {}

    def rename(match: re.Match) -> str:
        name = names.setdefault(match.group(2), f"{match.group(2)[0]}{len(names) + 1}")
        return f"{match.group(1)}{name}{match.group(3)}"

    return re.sub(r'(id="|href="#|url\(#)([mph][0-9a-f]{10})([")])', rename, svg)


def _scale(ax, values: list[float], axis: str = "y") -> bool:
    """A log scale where the values span more than WIDE, with plain numbers as tick labels; True if so."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    values = [v for v in values if v > 0]
    if not values or max(values) / min(values) <= WIDE:
        return False
    getattr(ax, f"set_{axis}scale")("log")
    which = ax.yaxis if axis == "y" else ax.xaxis
    if max(values) / min(values) < 1000:  # up to three decades, ticks at 1, 2 and 5 of each: enough labels to read
        which.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
    which.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    which.set_minor_formatter(NullFormatter())
    return True


def _times_axis(ax, values: list[float], label: str) -> None:
    """Times from 0 (or, on a log scale, from half the shortest) to a little above the longest."""
    log = _scale(ax, values)
    positive = [v for v in values if v > 0] or [1.0]
    ax.set_ylim(min(positive) / 2 if log else 0, max(positive) * (1.6 if log else 1.1))
    ax.set_ylabel(label + (", log scale" if log else ""))


def _label(index: int, label: str, width: int = 22) -> str:
    return "\n".join(textwrap.wrap(f"{index}: {label}", width))


def times_chart(path: Path, title: str, times: dict) -> Path:
    """Grouped bars per benchmark: the base's median time, then each measured proposal's (best geomean first);
    the benchmark's speed of light as a dashed line across its group. `times`: a round view's t["times"]."""
    benchmarks, runs = times["benchmarks"], times["proposals"]
    series = [("base", BASE_COLOR, [b["base_us"] for b in benchmarks])]
    series += [(f"{chart_label(p['proposal_id'])} r{p['revision']}" + (f" ({p['geomean']:.3f}x)" if p["geomean"] else ""),
                COLORS[k % len(COLORS)], p["after_us"]) for k, p in enumerate(runs)]
    with _style():
        figure = _figure(8.0, 4.8)
        ax = figure.add_subplot()
        width = 0.8 / len(series)
        for k, (label, color, values) in enumerate(series):
            offset = (k - (len(series) - 1) / 2) * width
            shown = [(i + offset, v) for i, v in enumerate(values) if v is not None]
            ax.bar([x for x, _ in shown], [v for _, v in shown], width * 0.92, label=label, color=color)
        sols = [(i, b["sol_us"]) for i, b in enumerate(benchmarks) if b["sol_us"]]
        for n, (i, sol) in enumerate(sols):
            ax.hlines(sol, i - 0.45, i + 0.45, colors="black", linestyles="dashed", linewidth=1.2,
                      label="speed of light" if n == 0 else "_nolegend_")
        values = [v for _, _, vs in series for v in vs if v is not None] + [sol for _, sol in sols]
        _times_axis(ax, values, "median time (us)")
        ax.set_xticks(range(len(benchmarks)), [_label(b["index"], b["label"], max(10, 80 // len(benchmarks))) for b in benchmarks],
                      fontsize=8)
        ax.grid(False, axis="x")
        ax.set_title(title)
        handles, labels = ax.get_legend_handles_labels()
        order = sorted(range(len(labels)), key=lambda n: labels[n] == "speed of light")  # bars first, as drawn
        figure.legend([handles[n] for n in order], [labels[n] for n in order], loc="outside lower center",
                      ncols=min(3, len(labels)), fontsize=8, frameon=False)
        return _save(figure, path)


def _base_times_panel(ax, rounds: list[dict]) -> None:
    """The base's median time per benchmark, one line each across the rounds that timed it; its speed of light dotted."""
    indexes = sorted({b["index"]: b for r in rounds for b in r["base_times"] or []}.items())  # label and SoL: the latest
    values = []
    for k, (index, first) in enumerate(indexes):
        points = [(r["round"], b["us"]) for r in rounds for b in r["base_times"] or [] if b["index"] == index]
        color = COLORS[k % len(COLORS)]
        ax.plot([x for x, _ in points], [y for _, y in points], marker="o", color=color, label=_label(index, first["label"]))
        values += [y for _, y in points]
        if first["sol_us"]:
            ax.axhline(first["sol_us"], color=color, linestyle="dotted", linewidth=1)
            values.append(first["sol_us"])
    if any(first["sol_us"] for _, first in indexes):
        ax.plot([], [], color="black", linestyle="dotted", linewidth=1, label="speed of light")
    _times_axis(ax, values, "base's median time (us)")
    ax.set_title("the base's time per benchmark")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.14), ncols=2, fontsize=7, frameon=False)


def _speedup_panel(ax, rounds: list[dict]) -> None:
    """Each round's base over round 1's base (the earlier winners' geomeans compounded); after a last round with a
    winner, the next round's base, hollow."""
    xs, ys = [r["round"] for r in rounds], [r["base_speedup"] for r in rounds]
    ax.plot(xs, ys, marker="o", color=COLORS[0], label="round's base")
    last = rounds[-1]
    if last["winner"] and last["winner"]["geomean"]:
        xs, ys = xs + [last["round"] + 1], ys + [last["cumulative"]]
        ax.plot(xs[-2:], ys[-2:], color=COLORS[0], linestyle="dashed")
        ax.plot(xs[-1:], ys[-1:], marker="o", color=COLORS[0], linestyle="none", markerfacecolor="white",
                label=f"round {last['round'] + 1}'s base (round {last['round']}'s winner applied)")
    for x, y in zip(xs, ys):
        ax.annotate(f"{y:.3f}x", (x, y), textcoords="offset points", xytext=(0, 7), ha="center", fontsize=8)
    ax.axhline(1.0, color=BASE_COLOR, linewidth=0.8)
    ax.set_xticks(xs)
    ax.set_xlim(min(xs) - 0.5, max(xs) + 0.5)
    ax.set_ylim(min(ys + [1.0]) * 0.95, max(ys) * 1.08)
    ax.set_ylabel("speedup over round 1's base (compounded)")
    ax.set_title("geomean speedup of each round's base")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.14), fontsize=7, frameon=False)


def progress_chart(path: Path, title: str, rounds: list[dict]) -> Path:
    """Across rounds: the base's time per benchmark, and its geomean speedup over round 1's base.
    `rounds`: a leaderboard view's t["rounds"] (round, base_times, base_speedup, winner, cumulative)."""
    with _style():
        figure = _figure(10.0, 4.8)
        times, speedups = figure.subplots(1, 2)
        _base_times_panel(times, rounds)
        _speedup_panel(speedups, rounds)
        times.set_xticks([r["round"] for r in rounds])
        times.set_xlim(rounds[0]["round"] - 0.5, rounds[-1]["round"] + 0.5)
        for ax in (times, speedups):
            ax.set_xlabel("round")
        figure.suptitle(title, fontsize=10)
        return _save(figure, path)


def claims_chart(path: Path, title: str, authors: list[dict]) -> Path:
    """Each measured proposal with a claim: its claimed range (a vertical bar) at its measured geomean (with its
    interval), one colour per contestant; on y = x the claim came true. `authors`: a round view's t["claims"]["authors"]."""
    shown = [(a, [r for r in a["rows"] if r["claim"]]) for a in authors]
    shown = [(a, rows) for a, rows in shown if rows]
    values = [1.0] + [v for _, rows in shown for r in rows for v in (*r["claim"], *(r["geomean_ci"] or [r["geomean"]]))]
    low, high = min(values) * 0.9, max(values) * 1.1
    with _style():
        figure = _figure(8.0, 5.2)
        ax = figure.add_subplot()
        ax.plot([low, high], [low, high], color="black", linestyle="dashed", linewidth=1, label="claim = measured")
        ax.axvline(1.0, color=BASE_COLOR, linewidth=0.8)
        log = _scale(ax, [low, high], "x") and _scale(ax, [low, high], "y")
        right = (low * high) ** 0.5 if log else (low + high) / 2  # labels of points right of this go to their left
        for k, (a, rows) in enumerate(shown):
            color = COLORS[k % len(COLORS)]
            for n, r in enumerate(rows):
                (claim_low, claim_high), g = r["claim"], r["geomean"]
                ci, middle = r["geomean_ci"] or [g, g], (claim_low + claim_high) / 2
                ax.errorbar([g], [middle], yerr=[[middle - claim_low], [claim_high - middle]],
                            xerr=[[max(0.0, g - ci[0])], [max(0.0, ci[1] - g)]],
                            fmt="o", markersize=4, color=color, capsize=4, elinewidth=1.5,
                            label=f"{chart_label(a['author'])}: {a['inside']} inside, {a['above']} above, {a['below']} below"
                            if n == 0 else "_nolegend_")
                ax.annotate(f"{chart_label(r['proposal_id'])} r{r['revision']} (round {r['round']})", (g, claim_high), textcoords="offset points",
                            xytext=(-5 if g > right else 5, 3), ha="right" if g > right else "left", fontsize=7, color=color)
        ax.set_xlim(low, high)
        ax.set_ylim(low, high)
        ax.set_xlabel("measured geomean speedup [95% CI]" + (", log scale" if log else ""))
        ax.set_ylabel("claimed speedup (range)" + (", log scale" if log else ""))
        ax.set_title(title)
        figure.legend(loc="outside lower center", ncols=2, fontsize=8, frameon=False)
        return _save(figure, path)
