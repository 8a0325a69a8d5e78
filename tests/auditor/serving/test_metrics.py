"""The golden metrics on /metrics, read the way Prometheus reads them (the text format, parsed): per-intent
latency histograms, tokens, gate actions, verdicts and FER, errors by kind, saturation from the engine's stats,
and label values that stay bounded whatever X-Intent a client sends."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from auditor.serving.metrics import BoundedLabel
from engine.errors import EngineDeadError
from engine.outputs import RequestOutput
from engine.sampling_params import SamplingParams
from tests.auditor.conftest import FakeEngine, ScriptedVerifier

CHAT = {"model": "fake-model", "messages": [{"role": "user", "content": "Is metformin safe?"}]}


def samples(client: TestClient) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Every sample of a scrape: (name, labels) -> value."""
    found = {}
    for family in text_string_to_metric_families(client.get("/metrics").text):
        for sample in family.samples:
            found[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return found


def value(found: dict, name: str, **labels: str) -> float | None:
    return found.get((name, frozenset(labels.items())))


def _chat(client: TestClient, **headers: str) -> None:
    assert client.post("/v1/chat/completions", json=CHAT, headers=headers).status_code == 200


def test_latency_and_tokens_per_intent(client: TestClient) -> None:
    for intent in ("medical-diagnosis", "medical-diagnosis", "code-completion"):
        _chat(client, **{"X-Intent": intent})
    _chat(client)
    found = samples(client)
    for name in ("auditor_time_to_first_token_seconds_count", "auditor_e2e_request_latency_seconds_count"):
        assert value(found, name, intent="medical-diagnosis") == 2
        assert value(found, name, intent="code-completion") == 1
        assert value(found, name, intent="none") == 1
    # the fake engine writes one word per token
    words = len(FakeEngine().reply.split())
    assert value(found, "auditor_completion_tokens_total", intent="medical-diagnosis") == 2 * words
    assert value(found, "auditor_prompt_tokens_total", intent="medical-diagnosis") > 0
    assert value(found, "auditor_e2e_request_latency_seconds_bucket", intent="medical-diagnosis", le="+Inf") == 2


def test_inter_token_latency_and_queue_time_come_from_the_engines_stats(app_factory) -> None:
    class Timed(FakeEngine):
        async def generate(self, *args: Any, **kwargs: Any) -> AsyncIterator[RequestOutput]:
            async for out in super().generate(*args, **kwargs):
                if out.finished:
                    out.stats.inter_token_latency_seconds = [0.002, 0.003, 0.2]
                    out.stats.request_queue_time_seconds = 0.3
                yield out

    client = app_factory(engine=Timed())
    _chat(client, **{"X-Intent": "fin-risk"})
    found = samples(client)
    assert value(found, "auditor_inter_token_latency_seconds_count", intent="fin-risk") == 3
    assert value(found, "auditor_inter_token_latency_seconds_bucket", intent="fin-risk", le="0.005") == 2
    assert value(found, "auditor_inter_token_latency_seconds_sum", intent="fin-risk") == pytest.approx(0.205)
    assert value(found, "auditor_engine_queue_time_seconds_bucket", intent="fin-risk", le="0.25") == 0
    assert value(found, "auditor_engine_queue_time_seconds_bucket", intent="fin-risk", le="0.5") == 1


def test_free_form_intents_cannot_blow_up_the_series_count(client: TestClient) -> None:
    for i in range(40):
        _chat(client, **{"X-Intent": f"made-up-{i}"})
    found = samples(client)
    intents = {dict(labels).get("intent") for name, labels in found if name == "auditor_e2e_request_latency_seconds_count"}
    assert intents == {"other"}
    assert value(found, "auditor_e2e_request_latency_seconds_count", intent="other") == 40


def test_configured_intents_get_their_own_label(app_factory) -> None:
    client = app_factory(overrides={"metrics_intents": ["triage"]})
    _chat(client, **{"X-Intent": "triage"})
    _chat(client, **{"X-Intent": "medical-diagnosis"})   # not configured here
    found = samples(client)
    assert value(found, "auditor_e2e_request_latency_seconds_count", intent="triage") == 1
    assert value(found, "auditor_e2e_request_latency_seconds_count", intent="other") == 1


def test_bounded_label_caps_first_come_values() -> None:
    tenants = BoundedLabel(cap=2, missing="")
    assert [tenants(t) for t in ("a", "b", "c", "a", None, "other")] == ["a", "b", "other", "a", "", "other"]


def test_gate_actions_verdicts_and_fer_per_intent(app_factory) -> None:
    engine = FakeEngine(reply="Aspirin is safe. Warfarin doubles the dose. Insulin is fine.")
    client = app_factory(engine=engine, verifier=ScriptedVerifier(
        {"Warfarin": ("contradicted", "annotate"), "Aspirin": ("supported", None), "Insulin": ("supported", None)}))
    _chat(client, **{"X-Intent": "medical-diagnosis"})
    _chat(client, **{"X-Intent": "medical-diagnosis"})
    found = samples(client)
    assert value(found, "auditor_claim_verdicts_total", intent="medical-diagnosis", verdict="supported") == 4
    assert value(found, "auditor_claim_verdicts_total", intent="medical-diagnosis", verdict="contradicted") == 2
    assert value(found, "auditor_gate_actions_total", intent="medical-diagnosis", action="annotate") == 2
    assert value(found, "auditor_fer_count", intent="medical-diagnosis") == 2
    assert abs(value(found, "auditor_fer_sum", intent="medical-diagnosis") - 2 / 3) < 1e-9   # 1/3 each
    assert value(found, "auditor_fer_bucket", intent="medical-diagnosis", le="0.3") == 0
    assert value(found, "auditor_fer_bucket", intent="medical-diagnosis", le="0.4") == 2


class DeadEngine(FakeEngine):
    async def generate(self, prompt: Any, params: SamplingParams, **kwargs: Any) -> AsyncIterator[RequestOutput]:
        raise EngineDeadError("engine core restarting")
        yield  # pragma: no cover - makes this an async generator


def test_errors_by_kind(app_factory) -> None:
    client = app_factory()
    client.post("/v1/chat/completions", json={**CHAT, "temperature": 9})                 # invalid_parameter
    client.post("/v1/chat/completions", json={**CHAT, "frobnicate": 1})                  # unsupported_parameter
    client.get("/v1/audits/no-such-record")                                               # audit_not_found
    client.get("/v1/nothing-here")                                                        # not_found
    dead = app_factory(engine=DeadEngine())
    assert dead.post("/v1/chat/completions", json=CHAT).status_code == 503
    stream = dead.post("/v1/chat/completions", json={**CHAT, "stream": True})
    assert stream.status_code == 503
    found = samples(client)
    assert value(found, "auditor_errors_total", kind="invalid_parameter", status="400") == 1
    assert value(found, "auditor_errors_total", kind="unsupported_parameter", status="400") == 1
    assert value(found, "auditor_errors_total", kind="audit_not_found", status="404") == 1
    assert value(found, "auditor_errors_total", kind="not_found", status="404") == 1
    dead_found = samples(dead)
    assert value(dead_found, "auditor_errors_total", kind="engine_unavailable", status="503") == 2
    assert value(dead_found, "auditor_requests_total", endpoint="chat", status="error") == 2


class SaturatedEngine(FakeEngine):
    def stats(self) -> dict[str, Any]:
        return {"kv_cache_usage_perc": 0.75, "num_preemptions": 3, "num_requests_waiting": 5,
                "num_requests_waiting_by_priority": {"0": 1, "1": 0, "2": 4},
                "num_requests_running_by_priority": {"0": 2, "1": 1, "2": 0},
                "finish_reasons": {"stop": 7, "length": 2}, "time_to_first_token_seconds": [0.1, 0.2],
                "kg_constraint_view_bytes": {"finance": 1024, "medical": 4096},
                "kg_constraint_budget_bytes": {"finance": 75497472, "medical": 75497472}}


def test_saturation_from_the_engine_stats(app_factory) -> None:
    found = samples(app_factory(engine=SaturatedEngine()))
    assert value(found, "auditor_engine_kv_cache_usage_perc") == 0.75
    assert value(found, "auditor_engine_num_preemptions") == 3
    assert value(found, "auditor_engine_num_requests_waiting_by_priority", priority="2") == 4
    assert value(found, "auditor_engine_num_requests_waiting_by_priority", priority="1") == 0
    assert value(found, "auditor_engine_num_requests_running_by_priority", priority="0") == 2
    assert value(found, "auditor_engine_finish_reasons", reason="length") == 2
    # the KG constraint's caches against their budget, per domain (a slow RSS climb an operator can account for)
    assert value(found, "auditor_engine_kg_constraint_view_bytes", domain="medical") == 4096
    assert value(found, "auditor_engine_kg_constraint_budget_bytes", domain="finance") == 75497472
    assert not any(name.startswith("auditor_engine_time_to_first") for name, _ in found)   # lists are not gauges
