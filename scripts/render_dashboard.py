"""Draws the panels of deploy/grafana/auditor-dashboard.json from saved /metrics scrapes, with matplotlib: what
the docs show in place of a Grafana screenshot (no Grafana runs here). It is a rendering, not Grafana.

    python scripts/render_dashboard.py SCRAPES_DIR docs/img/grafana_dashboard.png

SCRAPES_DIR holds one Prometheus text exposition per file, named by its Unix time (`<seconds>.prom`), e.g.
`while true; do curl -s 127.0.0.1:8000/metrics > scrapes/$(date +%s.%N).prom; sleep 2; done` during a loadgen
run. Each panel's PromQL is evaluated here, for the shapes the dashboard uses and nothing more:

- `histogram_quantile(q, sum by (le, L) (rate(H_bucket[Nm])))`: Prometheus's interpolation within a bucket;
- `sum by (L) (rate(C{matchers}[Nm]))`, and the ratio of two of them;
- `G` and `sum by (L) (G)` for gauges.

rate() is the increase between the first and last scrape inside the window over their time apart (counter
resets handled, no extrapolation to the window's edges, unlike Prometheus); a missing label groups as "".
"""

from __future__ import annotations

import json
import math
import re
import sys
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

Labels = tuple[tuple[str, str], ...]
Series = dict[Labels, list[tuple[float, float]]]      # labels -> [(time, value)]

_QUANTILE = re.compile(r"^histogram_quantile\(([\d.]+), sum by \(le, ([\w, ]+)\) \(rate\((\w+)\[(\d+)m\]\)\)\)$")
_RATE = re.compile(r"^sum by \(([\w, ]+)\) \(rate\((\w+)(\{[^}]*\})?\[(\d+)m\]\)\)$")
_SUM_GAUGE = re.compile(r"^sum by \(([\w, ]+)\) \((\w+)\)$")
_GAUGE = re.compile(r"^(\w+)$")
_MATCHER = re.compile(r'(\w+)(=~|=)"([^"]*)"')


def load_scrapes(folder: Path) -> tuple[list[float], dict[str, Series]]:
    """Every sample of every scrape, by sample name; and the scrape times."""
    samples: dict[str, Series] = defaultdict(lambda: defaultdict(list))
    times = []
    for path in sorted(folder.glob("*.prom"), key=lambda p: float(p.stem)):
        text = path.read_text()
        if not text.strip():
            continue   # a scrape that timed out
        at = float(path.stem)
        times.append(at)
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                samples[sample.name][tuple(sorted(sample.labels.items()))].append((at, sample.value))
    return times, samples


def _labels_by(labels: Labels, by: list[str]) -> Labels:
    values = dict(labels)
    return tuple((name, values.get(name, "")) for name in by)


def _matches(labels: Labels, matchers: str | None) -> bool:
    values = dict(labels)
    for name, op, pattern in _MATCHER.findall(matchers or ""):
        value = values.get(name, "")
        if (op == "=" and value != pattern) or (op == "=~" and not re.fullmatch(pattern, value)):
            return False
    return True


def _rate_at(points: list[tuple[float, float]], at: float, window_s: float) -> float | None:
    inside = [(t, v) for t, v in points if at - window_s <= t <= at]
    if len(inside) < 2 or inside[-1][0] == inside[0][0]:
        return None
    increase = 0.0
    for (_, before), (_, after) in zip(inside, inside[1:], strict=False):
        increase += after - before if after >= before else after   # a reset starts the counter again from 0
    return increase / (inside[-1][0] - inside[0][0])


def _summed_rate(samples: dict[str, Series], name: str, matchers: str | None, by: list[str],
                 at: float, window_s: float) -> dict[Labels, float]:
    out: dict[Labels, float] = defaultdict(float)
    for labels, points in samples.get(name, {}).items():
        if _matches(labels, matchers) and (value := _rate_at(points, at, window_s)) is not None:
            out[_labels_by(labels, by)] += value
    return dict(out)


def _quantile(q: float, buckets: dict[float, float]) -> float | None:
    """Prometheus's histogram_quantile over cumulative bucket rates."""
    ordered = sorted(buckets.items())
    if not ordered or ordered[-1][1] <= 0:
        return None
    rank = q * ordered[-1][1]
    lower_bound, lower_count = 0.0, 0.0
    for bound, count in ordered:
        if count >= rank:
            if math.isinf(bound):
                return lower_bound
            return lower_bound + (bound - lower_bound) * (rank - lower_count) / max(count - lower_count, 1e-12)
        lower_bound, lower_count = bound, count
    return None


def evaluator(expr: str) -> Callable[[dict[str, Series], float], dict[Labels, float]]:
    """A function of (samples, time) -> {group labels: value}, for the shapes this script knows."""
    if " / " in expr:
        top, bottom = (evaluator(part) for part in expr.split(" / ", 1))

        def ratio(samples: dict[str, Series], at: float) -> dict[Labels, float]:
            a, b = top(samples, at), bottom(samples, at)
            return {k: a[k] / b[k] for k in a if b.get(k)}
        return ratio
    if match := _QUANTILE.match(expr):
        q, by, name, minutes = float(match[1]), [s.strip() for s in match[2].split(",")], match[3], int(match[4])

        def quantile(samples: dict[str, Series], at: float) -> dict[Labels, float]:
            rates = _summed_rate(samples, name, None, ["le", *by], at, minutes * 60)
            groups: dict[Labels, dict[float, float]] = defaultdict(dict)
            for labels, value in rates.items():
                groups[labels[1:]][float(labels[0][1])] = value
            return {k: v for k, buckets in groups.items() if (v := _quantile(q, buckets)) is not None}
        return quantile
    if match := _RATE.match(expr):
        by, name, matchers, minutes = [s.strip() for s in match[1].split(",")], match[2], match[3], int(match[4])
        return lambda samples, at: _summed_rate(samples, name, matchers, by, at, minutes * 60)
    if match := _SUM_GAUGE.match(expr) or _GAUGE.match(expr):
        by = [s.strip() for s in match[1].split(",")] if match.re is _SUM_GAUGE else []
        name = match[2] if match.re is _SUM_GAUGE else match[1]

        def gauge(samples: dict[str, Series], at: float) -> dict[Labels, float]:
            out: dict[Labels, float] = defaultdict(float)
            for labels, points in samples.get(name, {}).items():
                here = [v for t, v in points if t == at]
                if here:
                    out[_labels_by(labels, by)] += here[0]
            return dict(out)
        return gauge
    raise ValueError(f"render_dashboard does not evaluate this PromQL: {expr}")


_UNITS: dict[str, tuple[float, str]] = {"s": (1000.0, "ms"), "percentunit": (100.0, "%"), "reqps": (1.0, "req/s"),
                                        "currencyUSD": (1.0, "USD/s"), "short": (1.0, ""), "bytes": (2.0**-20, "MB")}


def render(dashboard: dict[str, Any], scrapes: Path, out: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    times, samples = load_scrapes(scrapes)
    if len(times) < 3:
        raise SystemExit(f"{scrapes}: need at least 3 scrapes, found {len(times)}")
    start = times[0]
    rows: list[tuple[str, list[dict[str, Any]]]] = []
    for panel in dashboard["panels"]:
        if panel["type"] == "row":
            rows.append((panel["title"], []))
        else:
            rows[-1][1].append(panel)
    plt.style.use("dark_background")
    width = max(len(panels) for _, panels in rows)
    fig, axes = plt.subplots(len(rows), width, figsize=(5.2 * width, 3.3 * len(rows)), squeeze=False)
    fig.patch.set_facecolor("#111217")
    for r, (row_title, panels) in enumerate(rows):
        for c in range(width):
            ax = axes[r][c]
            if c >= len(panels):
                ax.set_visible(False)
                continue
            panel = panels[c]
            scale, unit = _UNITS.get(panel["fieldConfig"]["defaults"]["unit"], (1.0, ""))
            ax.set_facecolor("#181b1f")
            for target in panel["targets"]:
                evaluate = evaluator(target["expr"])
                lines: dict[Labels, list[tuple[float, float]]] = defaultdict(list)
                for at in times:
                    for labels, value in evaluate(samples, at).items():
                        if math.isfinite(value):
                            lines[labels].append((at - start, value * scale))
                for labels, points in sorted(lines.items()):
                    legend = re.sub(r"\{\{(\w+)\}\}", lambda m, lb=dict(labels): lb.get(m[1], ""), target["legendFormat"])
                    ax.plot([t for t, _ in points], [v for _, v in points], linewidth=1.2, label=legend)
            ax.set_xlim(0, times[-1] - start)   # one time axis for every panel, as on a dashboard
            ax.set_title(f"{row_title}: {panel['title']}" if c == 0 else panel["title"], fontsize=9, loc="left")
            ax.set_ylabel(unit, fontsize=8)
            ax.tick_params(labelsize=7)
            ax.grid(True, alpha=0.15)
            if ax.get_legend_handles_labels()[0]:
                ax.legend(fontsize=6, loc="upper left", framealpha=0.3)
            else:
                ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes, color="#888")
            if r == len(rows) - 1 or c >= len(rows[r + 1][1]):
                ax.set_xlabel("seconds into the run", fontsize=7)
    fig.suptitle(f"{dashboard['title']} (deploy/grafana/auditor-dashboard.json): a matplotlib rendering of its "
                 f"queries over {len(times)} /metrics scrapes of an `auditor loadgen` run, not a Grafana screenshot",
                 fontsize=11)
    fig.tight_layout(rect=(0, 0, 1, 0.97))
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=80, facecolor=fig.get_facecolor())
    plt.close(fig)
    return out


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit("usage: python scripts/render_dashboard.py SCRAPES_DIR OUT.png")
    board = json.loads((Path(__file__).resolve().parents[1] / "deploy/grafana/auditor-dashboard.json").read_text())
    print(f"wrote {render(board, Path(sys.argv[1]), Path(sys.argv[2]))}")
