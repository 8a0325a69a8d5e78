"""The load generator's inputs and arithmetic: the mix, SLAs, prompt files, loopback-only targets, percentiles,
goodput, the Pareto frontier."""

from __future__ import annotations

import json
from collections import Counter
from itertools import islice
from pathlib import Path

import pytest

from auditor.loadgen.charts import pareto_frontier
from auditor.loadgen.client import NotLoopback, Result, require_loopback
from auditor.loadgen.report import meets, percentile
from auditor.loadgen.workload import PROMPTS, Sla, WorkloadError, load_prompts, parse_mix, parse_slas, plan

MIX = "medical-diagnosis=0.3,fin-risk=0.3,legal-advice=0.2,code-completion=0.2"


def test_mix_is_normalised() -> None:
    assert parse_mix("a=3, b=1") == {"a": 0.75, "b": 0.25}
    assert parse_mix("a=1,b=0") == {"a": 1.0}       # a zero weight sends nothing


@pytest.mark.parametrize("text, fragment", [
    ("", "at least one"), ("a=0", "at least one"), ("a", "intent=weight"), ("A=1", "intent=weight"),
    ("a=x", "not a number"), ("a=-1", ">= 0"), ("a=inf", "finite"), ("a=1,a=2", "twice"),
    ("has space=1", "intent=weight"), ("x" * 65 + "=1", "intent=weight"),
])
def test_bad_mixes_say_what_is_wrong(text: str, fragment: str) -> None:
    with pytest.raises(WorkloadError, match=fragment):
        parse_mix(text)


def test_slas_per_intent_and_for_all() -> None:
    mix = parse_mix(MIX)
    slas = parse_slas(["medical-diagnosis:ttft_p99=500ms,e2e_p90=2.5s", "*:itl_p99.9=80ms"], mix)
    assert slas == [Sla("medical-diagnosis", "ttft", 99, 0.5), Sla("medical-diagnosis", "e2e", 90, 2.5),
                    Sla("*", "itl", 99.9, 0.08)]
    assert slas[2].applies_to("fin-risk") and not slas[0].applies_to("fin-risk")
    assert slas[0].label == "medical-diagnosis:ttft_p99<=500ms"


@pytest.mark.parametrize("text, fragment", [
    ("medical-diagnosis", "expected intent:metric"), ("nobody:ttft_p99=1s", "not in the mix"),
    ("fin-risk:latency_p99=1s", "metric one of"), ("fin-risk:ttft_p100=1s", "metric_pNN"),
    ("fin-risk:ttft_p0=1s", "between 0 and 100"), ("fin-risk:ttft_p99=1min", "metric_pNN"),
    ("fin-risk:ttft_p99=-1s", "metric_pNN"), ("fin-risk:", "expected intent:metric"),
])
def test_bad_slas_say_what_is_wrong(text: str, fragment: str) -> None:
    with pytest.raises(WorkloadError, match=fragment):
        parse_slas([text], parse_mix(MIX))


def test_bundled_prompts_cover_the_default_mix_with_provenance() -> None:
    prompts = load_prompts(None, parse_mix(MIX))
    assert {intent: len(rows) for intent, rows in prompts.items()} == {
        "medical-diagnosis": 80, "fin-risk": 80, "legal-advice": 80, "code-completion": 40}
    assert {p.domain for p in prompts["fin-risk"]} == {"finance"} and prompts["code-completion"][0].domain is None
    assert all(json.loads(line).get("source") for line in PROMPTS.read_text().splitlines())


def test_prompt_files_are_checked(tmp_path: Path) -> None:
    path = tmp_path / "p.jsonl"
    path.write_text('{"intent": "triage", "prompt": "Chest pain since noon?", "domain": "medical"}\n\n')
    assert load_prompts(path, {"triage": 1.0})["triage"][0].domain == "medical"
    with pytest.raises(WorkloadError, match="no prompts for fin-risk"):
        load_prompts(path, {"fin-risk": 1.0})
    path.write_text('{"intent": "triage"}\n')
    with pytest.raises(WorkloadError, match="p.jsonl:1: expected a JSON object"):
        load_prompts(path, {"triage": 1.0})
    path.write_text('not json\n')
    with pytest.raises(WorkloadError, match="p.jsonl:1"):
        load_prompts(path, {"triage": 1.0})
    with pytest.raises(WorkloadError, match="cannot read the prompts file"):
        load_prompts(tmp_path / "absent.jsonl", {"triage": 1.0})


def test_the_plan_follows_the_mix_reproducibly_with_unique_texts() -> None:
    mix = parse_mix(MIX)
    prompts = load_prompts(None, mix)
    first = list(islice(plan(mix, prompts, seed=3, tag="t"), 4000))
    again = list(islice(plan(mix, prompts, seed=3, tag="t"), 50))
    assert first[:50] == again
    shares = Counter(r.intent for r in first)
    for intent, share in mix.items():
        assert abs(shares[intent] / len(first) - share) < 0.03
    assert len({r.text for r in first}) == len(first)
    request = first[0]
    assert request.headers()["X-Intent"] == request.intent
    assert ("X-Domain" in request.headers()) == (request.domain is not None)
    assert request.body(model="auditor", max_tokens=16)["stream"] is True


@pytest.mark.parametrize("url", ["http://127.0.0.1:8000", "http://localhost:9/", "http://127.9.9.9", "http://[::1]:80"])
def test_loopback_targets_are_accepted(url: str) -> None:
    assert require_loopback(url) == url.rstrip("/")


@pytest.mark.parametrize("url", [
    "http://10.0.0.7:8000", "https://api.openai.com", "http://127.0.0.1.nip.io", "http://127.0.0.1@evil.example",
    "http://0.0.0.0:8000", "ftp://127.0.0.1", "127.0.0.1:8000", "http://[::ffff:8.8.8.8]", "http://localhost.evil.example",
])
def test_other_targets_are_refused(url: str) -> None:
    with pytest.raises(NotLoopback):
        require_loopback(url)


def test_percentile_interpolates_like_numpy() -> None:
    import numpy as np

    values = [0.3, 0.1, 0.9, 0.5, 0.7, 0.2]
    for q in (0, 50, 90, 99, 100):
        assert percentile(values, q) == pytest.approx(float(np.percentile(values, q)))
    assert percentile([], 99) is None


def test_goodput_counts_requests_that_meet_every_objective_of_their_intent() -> None:
    slas = [Sla("fin-risk", "ttft", 99, 0.5), Sla("*", "e2e", 90, 2.0), Sla("fin-risk", "itl", 99, 0.1)]
    fast = Result(0, "fin-risk", 0.0, status=200, ttft_s=0.2, e2e_s=1.0, chunk_gaps=[0.05, 0.09])
    assert meets(fast, slas)
    assert not meets(Result(1, "fin-risk", 0.0, status=200, ttft_s=0.6, e2e_s=1.0), slas)
    assert not meets(Result(2, "fin-risk", 0.0, status=200, ttft_s=0.2, e2e_s=1.0, chunk_gaps=[0.2]), slas)
    assert meets(Result(3, "code-completion", 0.0, status=200, ttft_s=1.9, e2e_s=1.9), slas)   # not its SLA
    assert not meets(Result(4, "code-completion", 0.0, status=200, ttft_s=None, e2e_s=2.5), slas)
    assert not meets(Result(5, "fin-risk", 0.0, status=200, error="engine_unavailable", ttft_s=0.1, e2e_s=0.2), slas)
    # an objective on a metric the request has no value for (no content ever came) is not met
    assert not meets(Result(6, "fin-risk", 0.0, status=200, ttft_s=None, e2e_s=0.1), slas)


def test_tpot_and_itl_of_one_request() -> None:
    result = Result(0, "x", 0.0, status=200, ttft_s=0.5, e2e_s=1.5, completion_tokens=11, chunk_gaps=[0.3, 0.7])
    assert result.tpot_s == pytest.approx(0.1) and result.itl_s == 0.7
    assert Result(0, "x", 0.0, completion_tokens=1, ttft_s=0.1).tpot_s is None


def test_pareto_frontier() -> None:
    points = [(100, 0.3), (200, 0.2), (150, 0.25), (300, 0.2), (120, 0.1), (400, 0.4)]
    # lower latency and lower rate both better
    assert pareto_frontier(points, maximise_x=False) == [(100, 0.3), (120, 0.1)]
    # higher throughput and lower rate both better
    assert pareto_frontier(points, maximise_x=True) == [(120, 0.1), (300, 0.2), (400, 0.4)]
