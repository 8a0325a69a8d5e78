"""The Grafana dashboard in deploy/: it is what its generator writes, every series it queries is one the
service exposes on /metrics (with the labels it groups by), and the docs' renderer evaluates each of its queries
(checked against hand-computed values)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from auditor.serving import runtime
from auditor.serving.cost import PriceTable
from scripts import grafana_dashboard, render_dashboard
from tests.auditor.real_engine import tiny_medical_kg

REPO = Path(__file__).resolve().parents[3]
DASHBOARD = REPO / "deploy" / "grafana" / "auditor-dashboard.json"
_SUFFIXES = {"counter": ("_total", "_created"), "histogram": ("_bucket", "_sum", "_count", "_created"),
             "gauge": ("",), "summary": ("_sum", "_count", "_created")}
_PROMETHEUS_LABELS = {"instance", "job", "le"}   # added by the scrape, or the histogram's own


def _queries() -> list[str]:
    board = json.loads(DASHBOARD.read_text())
    return [target["expr"] for panel in board["panels"] for target in panel.get("targets", [])]


def test_the_json_is_what_the_generator_writes() -> None:
    board = json.loads(DASHBOARD.read_text())
    assert DASHBOARD.read_text() == grafana_dashboard.render()
    titles = [panel["title"] for panel in board["panels"]]
    assert len(titles) == len(set(titles)) and board["uid"] == "auditor-golden"
    assert all(panel["targets"] for panel in board["panels"] if panel["type"] == "timeseries")


@pytest.fixture
def served_metrics(app_factory, tmp_path: Path, tiny_checkpoint: Path) -> Iterator[TestClient]:
    """The app as `auditor serve` runs it: the real engine core in its own process (its stats: queue depth per
    priority, preemptions, core restarts), a price table (the cost series)."""
    kgs = {"medical": tiny_medical_kg()}
    engine = runtime.load_engine(tiny_checkpoint, kgs, process=True)
    prices = tmp_path / "prices.yaml"
    prices.write_text("models:\n  '*': {prompt_per_1k: 1.0}\n")
    client = app_factory(overrides={"price_table": prices}, engine=engine, verifier=runtime.RulesVerifier(kgs),
                         knowledge=runtime.KgKnowledge(kgs))
    try:
        yield client
    finally:   # an engine passed in is not the app's to stop; on the app's own loop, while it still runs
        client.portal.call(engine.shutdown)


def test_every_queried_series_and_label_is_on_metrics(served_metrics: TestClient) -> None:
    client = served_metrics
    for intent in ("medical-diagnosis", "code-completion"):
        assert client.post("/v1/chat/completions", headers={"X-Intent": intent, "X-Domain": "medical"},
                           json={"model": "auditor", "messages": [{"role": "user", "content": "Is aspirin safe?"}]}
                           ).status_code == 200
    client.post("/v1/chat/completions", json={"model": "nope", "messages": []})   # an error by kind
    exposed: dict[str, set[str] | None] = {}   # sample name -> label names seen (None: no sample yet)
    for family in text_string_to_metric_families(client.get("/metrics").text):
        for suffix in _SUFFIXES.get(family.type, ("",)):
            exposed.setdefault(family.name + suffix, None)
        for sample in family.samples:
            exposed[sample.name] = (exposed.get(sample.name) or set()) | set(sample.labels)
    checked = 0
    for expr in _queries():
        for name in re.findall(r"\b(auditor_\w+)", expr):
            assert name in exposed, f"{name} (in {expr}) is not on /metrics"
            groups = re.findall(r"by \(([\w, ]+)\) \([^()]*\(?" + name, expr)
            wanted = {label.strip() for group in groups for label in group.split(",")} - _PROMETHEUS_LABELS
            if exposed[name] is not None:   # a labelled series with no sample yet shows no labels
                assert wanted <= exposed[name], f"{expr}: {name} has labels {exposed[name]}, not {wanted}"
                checked += 1
    assert checked >= 15   # most series had samples after these requests, so their labels were checked


def test_the_renderer_evaluates_every_query_like_prometheus(tmp_path: Path) -> None:
    for expr in _queries():
        render_dashboard.evaluator(expr)          # raises for a shape it does not know
    with pytest.raises(ValueError, match="does not evaluate"):
        render_dashboard.evaluator("topk(3, auditor_requests_total)")
    # two scrapes 10 s apart: 10 observations of 0.2 s and 10 of 0.8 s in buckets 0.25 / 1 / +Inf
    first = ('# TYPE h histogram\nh_bucket{intent="a",le="0.25"} 0\nh_bucket{intent="a",le="1.0"} 0\n'
             'h_bucket{intent="a",le="+Inf"} 0\nh_sum{intent="a"} 0\nh_count{intent="a"} 0\n'
             '# TYPE c counter\nc_total{kind="x"} 5\nc_total{kind="y"} 1\n# TYPE g gauge\ng{priority="0"} 3\n')
    second = first.replace('le="0.25"} 0', 'le="0.25"} 10').replace('le="1.0"} 0', 'le="1.0"} 20') \
        .replace('le="+Inf"} 0', 'le="+Inf"} 20').replace("c_total{kind=\"x\"} 5", "c_total{kind=\"x\"} 25")
    (tmp_path / "100.0.prom").write_text(first)
    (tmp_path / "110.0.prom").write_text(second)
    _times, samples = render_dashboard.load_scrapes(tmp_path)
    p50 = render_dashboard.evaluator("histogram_quantile(0.5, sum by (le, intent) (rate(h_bucket[1m])))")
    assert p50(samples, 110.0) == {(("intent", "a"),): pytest.approx(0.25)}
    p90 = render_dashboard.evaluator("histogram_quantile(0.9, sum by (le, intent) (rate(h_bucket[1m])))")
    assert p90(samples, 110.0)[(("intent", "a"),)] == pytest.approx(0.25 + 0.75 * 0.8)
    rates = render_dashboard.evaluator("sum by (kind) (rate(c_total[1m]))")(samples, 110.0)
    assert rates == {(("kind", "x"),): pytest.approx(2.0), (("kind", "y"),): 0.0}
    assert render_dashboard.evaluator('sum by (kind) (rate(c_total{kind=~"x|z"}[1m]))')(samples, 110.0) == \
        {(("kind", "x"),): pytest.approx(2.0)}
    assert render_dashboard.evaluator("sum by (priority) (g)")(samples, 100.0) == {(("priority", "0"),): 3.0}


def test_the_example_price_table_loads() -> None:
    table = PriceTable.load(REPO / "deploy" / "prices.example.yaml")
    assert table.price_for("bundled_model").completion_per_1k > 0 and table.price_for("other").engine_second > 0
