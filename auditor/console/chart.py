"""The trends chart as server-rendered SVG: one line per series over time buckets.

Why SVG from the server rather than a vendored JavaScript library: the console needs a handful of line
charts, and an inline SVG needs no script, no third-party code to audit or keep patched in an air-gapped
bank, works under a `script-src 'self'` policy, prints, and carries its own accessible title; the page
also shows the same numbers as a table. Series differ by dash pattern and marker as well as by colour."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

WIDTH, HEIGHT = 760, 300
LEFT, RIGHT, TOP, BOTTOM = 56, 56, 16, 48
# Colour-blind-safe (Okabe-Ito) colours, each with its own dash pattern.
STYLES = [("#0072B2", ""), ("#D55E00", "6 4"), ("#009E73", "2 3"), ("#CC79A7", "10 3 2 3"), ("#000000", "1 5")]
RATES = {"fer", "contradicted_rate", "block_rate", "mean_fer"}


@dataclass(slots=True)
class Series:
    name: str
    colour: str
    dash: str
    points: list[tuple[float, float, str, str]] = field(default_factory=list)   # x, y, bucket, shown value

    @property
    def path(self) -> str:
        return " ".join(f"{x:.1f},{y:.1f}" for x, y, _, _ in self.points)


@dataclass(slots=True)
class Chart:
    title: str
    series: list[Series]
    y_ticks: list[tuple[float, str]]
    x_ticks: list[tuple[float, str]]
    width: int = WIDTH
    height: int = HEIGHT
    left: int = LEFT
    bottom_y: int = HEIGHT - BOTTOM
    right_x: int = WIDTH - RIGHT


def _moment(bucket: str) -> float:
    return datetime.fromisoformat(bucket.replace("Z", "+00:00")).timestamp()


def _value(point: dict[str, Any], metric: str) -> float | None:
    value = point.get(metric)
    return float(value) if isinstance(value, int | float) else None


def trend_chart(result: dict[str, Any], metric: str) -> Chart:
    """`result`: `auditor.trail.trends.read_trends`'s answer; `metric`: a key of each point."""
    group_by = result.get("group_by") or []
    buckets = sorted({point["bucket_start"] for point in result["series"]})
    by_series: dict[str, list[dict[str, Any]]] = {}
    for point in result["series"]:
        name = " / ".join(str(point.get(g) or "none") for g in group_by) or "all"
        by_series.setdefault(name, []).append(point)
    values = [v for points in by_series.values() for p in points if (v := _value(p, metric)) is not None]
    top = 1.0 if metric in RATES else max(values, default=1.0) or 1.0
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    # Time, not bucket order, on the x axis: a three-day gap must not look like one hour.
    first, last = (_moment(buckets[0]), _moment(buckets[-1])) if buckets else (0.0, 0.0)

    def x_of(bucket: str) -> float:
        return LEFT + (plot_w * (_moment(bucket) - first) / (last - first) if last > first else plot_w / 2)

    def y_of(value: float) -> float:
        return TOP + plot_h * (1 - value / top)

    def shown(value: float) -> str:
        return f"{value * 100:.1f}%" if metric in RATES else f"{value:g}"

    series = []
    for number, (name, points) in enumerate(sorted(by_series.items())):
        colour, dash = STYLES[number % len(STYLES)]
        line = Series(name, colour, dash)
        for point in sorted(points, key=lambda p: p["bucket_start"]):
            value = _value(point, metric)
            if value is not None:
                line.points.append((x_of(point["bucket_start"]), y_of(value), point["bucket_start"], shown(value)))
        series.append(line)
    y_ticks = [(y_of(top * i / 4), shown(top * i / 4)) for i in range(5)]
    x_ticks: list[tuple[float, str]] = []
    for bucket in buckets:   # labels that would overlap the previous one are left out
        if not x_ticks or x_of(bucket) - x_ticks[-1][0] >= 110:
            label = bucket[:13].replace("T", " ") + "h" if result.get("bucket") == "hour" else bucket[:10]
            x_ticks.append((x_of(bucket), label))
    return Chart(title=metric, series=series, y_ticks=y_ticks, x_ticks=x_ticks)
