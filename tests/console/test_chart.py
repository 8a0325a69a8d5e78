"""The trends chart's geometry: time on the x axis, rates on a fixed 0-100% scale, one styled line per series."""

from __future__ import annotations

from auditor.console.chart import BOTTOM, HEIGHT, LEFT, RIGHT, TOP, WIDTH, trend_chart


def _point(bucket: str, domain: str, fer: float | None) -> dict:
    return {"bucket_start": bucket, "domain": domain, "fer": fer, "records": 1}


def test_x_is_time_and_rates_use_the_full_scale() -> None:
    result = {"bucket": "hour", "group_by": ["domain"], "series": [
        _point("2026-01-01T00:00:00Z", "medical", 0.0), _point("2026-01-01T01:00:00Z", "medical", 1.0),
        _point("2026-01-04T01:00:00Z", "medical", 0.5), _point("2026-01-01T01:00:00Z", "legal", None)]}
    chart = trend_chart(result, "fer")
    medical = next(s for s in chart.series if s.name == "medical")
    xs = [x for x, _, _, _ in medical.points]
    assert xs[0] == LEFT and xs[-1] == WIDTH - RIGHT
    assert xs[1] - xs[0] < (xs[2] - xs[1]) / 50            # one hour is a sliver of three days
    ys = [y for _, y, _, _ in medical.points]
    assert ys[0] == HEIGHT - BOTTOM and ys[1] == TOP       # 0% at the axis, 100% at the top
    assert [value for *_, value in medical.points] == ["0.0%", "100.0%", "50.0%"]
    legal = next(s for s in chart.series if s.name == "legal")
    assert legal.points == []                               # no FER (nothing verified) is no point, not 0
    assert medical.dash != legal.dash                       # told apart without colour too


def test_counts_scale_to_their_maximum() -> None:
    result = {"bucket": "day", "group_by": [], "series": [
        {"bucket_start": "2026-01-01T00:00:00Z", "records": 4}, {"bucket_start": "2026-01-02T00:00:00Z", "records": 8}]}
    chart = trend_chart(result, "records")
    (line,) = chart.series
    assert line.name == "all" and [p[1] for p in line.points] == [TOP + (HEIGHT - TOP - BOTTOM) / 2, TOP]
    assert chart.x_ticks[0][1] == "2026-01-01"
