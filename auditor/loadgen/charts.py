"""PNG charts of a sweep (matplotlib, an optional dependency: `pip install 'hallucination-auditor[loadgen]'`):

- `latency_vs_throughput.png`: each intent's p99 TTFT and p99 e2e against the throughput achieved, one line
  per server configuration;
- `ttft_by_intent.png`: p99 TTFT per intent at each rate, one panel per configuration (the priorities at work);
- `pareto.png`: hallucination rate (pooled FER; entity-violation rate) against p99 latency and against
  throughput, every (configuration, rate) point, with the Pareto frontier drawn through the points no other
  beats on both axes.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from auditor.loadgen.report import ALL
from auditor.loadgen.sweep import Point

INSTALL_HINT = "charts need matplotlib: pip install 'hallucination-auditor[loadgen]' (or matplotlib itself)"


class ChartsUnavailable(RuntimeError):
    """matplotlib is not installed."""


def require_matplotlib() -> None:
    try:
        import matplotlib  # noqa: F401, PLC0415
    except ImportError as exc:
        raise ChartsUnavailable(INSTALL_HINT) from exc


def _pyplot() -> Any:
    require_matplotlib()
    import matplotlib  # noqa: PLC0415

    matplotlib.use("Agg")   # files only, no display
    import matplotlib.pyplot as plt  # noqa: PLC0415

    return plt


def write_charts(points: list[Point], intents: list[str], out_dir: Path, *, title: str) -> list[Path]:
    plt = _pyplot()
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = [_latency_vs_throughput(plt, points, intents, out_dir / "latency_vs_throughput.png", title),
             _ttft_by_intent(plt, points, intents, out_dir / "ttft_by_intent.png", title),
             _pareto(plt, points, out_dir / "pareto.png", title)]
    return paths


def _configs(points: list[Point]) -> list[str]:
    return list(dict.fromkeys(point.config.label for point in points))


def _latency_vs_throughput(plt: Any, points: list[Point], intents: list[str], path: Path, title: str) -> Path:
    # one y scale per row: the intents' latencies compare at a glance
    fig, axes = plt.subplots(2, len(intents), figsize=(4.2 * len(intents), 7.5), squeeze=False, sharex=True,
                             sharey="row")
    for column, intent in enumerate(intents):
        for row, (key, name) in enumerate((("ttft_p99_ms", "p99 TTFT (ms)"), ("e2e_p99_ms", "p99 e2e (ms)"))):
            ax = axes[row][column]
            for label in _configs(points):
                mine = sorted((p for p in points if p.config.label == label), key=lambda p: p.rate)
                xs = [p.summary["intents"][ALL]["req_s"] for p in mine]
                ys = [p.summary["intents"][intent][key] for p in mine]
                ax.plot(*_present(xs, ys), marker="o", label=label)
            ax.set_yscale("log")
            ax.grid(True, which="both", alpha=0.3)
            if row == 0:
                ax.set_title(intent)
            else:
                ax.set_xlabel("throughput achieved, all intents (req/s)")
            if column == 0:
                ax.set_ylabel(name)
    axes[0][0].legend(fontsize=8)
    fig.suptitle(f"Latency against throughput per intent: {title}")
    return _save(plt, fig, path)


def _ttft_by_intent(plt: Any, points: list[Point], intents: list[str], path: Path, title: str) -> Path:
    configs = _configs(points)
    fig, axes = plt.subplots(1, len(configs), figsize=(4.5 * len(configs), 4), squeeze=False, sharey=True)
    for column, label in enumerate(configs):
        ax = axes[0][column]
        mine = sorted((p for p in points if p.config.label == label), key=lambda p: p.rate)
        width = 0.8 / max(1, len(intents))
        for k, intent in enumerate(intents):
            values = [p.summary["intents"][intent]["ttft_p99_ms"] or 0 for p in mine]
            ax.bar([i + k * width for i in range(len(mine))], values, width, label=intent)
        ax.set_xticks([i + width * (len(intents) - 1) / 2 for i in range(len(mine))],
                      [f"{p.rate:g}/s" for p in mine])
        ax.set_yscale("log")
        ax.set_title(label, fontsize=10)
        ax.set_xlabel("offered rate")
        ax.grid(True, axis="y", which="both", alpha=0.3)
    axes[0][0].set_ylabel("p99 TTFT (ms)")
    axes[0][0].legend(fontsize=8)
    fig.suptitle(f"p99 time to first token per intent (scheduler priorities): {title}")
    return _save(plt, fig, path)


def _pareto(plt: Any, points: list[Point], path: Path, title: str) -> Path:
    fig, axes = plt.subplots(2, 2, figsize=(11, 8.5), squeeze=False)
    rows = (("fer", "FER (pooled)"), ("violation_rate", "entity-violation rate"))
    columns = (("e2e_p99_ms", "p99 e2e latency (ms), all intents", False),
               ("output_tok_s", "output throughput (tok/s), all intents", True))
    configs = _configs(points)
    for r, (quality_key, quality_name) in enumerate(rows):
        for c, (x_key, x_name, maximise) in enumerate(columns):
            ax = axes[r][c]
            found = []
            for k, label in enumerate(configs):
                mine = [p.summary["intents"][ALL] for p in points if p.config.label == label]
                xs = [s[x_key] for s in mine]
                ys = [s.get(quality_key) for s in mine]
                ax.scatter(*_present(xs, ys), label=label, marker="osD^v<>"[k % 7], s=40)
                found += list(zip(*_present(xs, ys), strict=True))
            frontier = pareto_frontier(found, maximise_x=maximise)
            if frontier:
                ax.step(*zip(*frontier, strict=True), where="post", color="black", linewidth=1, label="Pareto frontier")
            ax.set_xlabel(x_name)
            ax.set_ylabel(quality_name)
            ax.grid(True, alpha=0.3)
    axes[0][0].legend(fontsize=8)
    fig.suptitle(f"Hallucination rate against latency and throughput: {title}")
    return _save(plt, fig, path)


def pareto_frontier(points: Sequence[tuple[float, float]], *, maximise_x: bool) -> list[tuple[float, float]]:
    """The points no other point beats on both axes (lower y, and lower x or higher x when `maximise_x`),
    sorted by x."""
    def beats(a: tuple[float, float], b: tuple[float, float]) -> bool:
        better_x = a[0] >= b[0] if maximise_x else a[0] <= b[0]
        return better_x and a[1] <= b[1] and a != b

    frontier = [p for p in points if not any(beats(q, p) for q in points)]
    return sorted(set(frontier))


def _present(xs: list[Any], ys: list[Any]) -> tuple[list[float], list[float]]:
    pairs = [(x, y) for x, y in zip(xs, ys, strict=True) if x is not None and y is not None]
    return [x for x, _ in pairs], [y for _, y in pairs]


def _save(plt: Any, fig: Any, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
