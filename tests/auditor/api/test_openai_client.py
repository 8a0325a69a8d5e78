"""A real uvicorn server on a free port, driven by the official `openai` package (real engine, tiny model)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

from auditor.app import create_app
from tests.auditor.conftest import make_settings
from tests.auditor.real_engine import build_real_runtime
from tests.auditor.served import served


@pytest.fixture(scope="module")
def server_url(tmp_path_factory: pytest.TempPathFactory, tiny_checkpoint: Path) -> Iterator[str]:
    root: Path = tmp_path_factory.mktemp("served")
    engine, verifier, knowledge = build_real_runtime(tiny_checkpoint)
    app = create_app(make_settings(f"sqlite:///{root / 'audit.db'}"), engine=engine, verifier=verifier,
                     knowledge=knowledge)
    with served(app) as url:
        yield url


@pytest.fixture
def client(server_url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server_url}/v1", api_key="ignored-in-development-mode", max_retries=0)


def _record(server_url: str, audit_id: str) -> dict:
    response = httpx.get(f"{server_url}/v1/audits/{audit_id}")
    assert response.status_code == 200
    return response.json()


def test_chat_with_raw_response_and_audit_lookup(client: openai.OpenAI, server_url: str) -> None:
    raw = client.chat.completions.with_raw_response.create(
        model="auditor-medical", max_tokens=10, temperature=0,
        messages=[{"role": "user", "content": "Does Metformin treat type 2 diabetes?"}],
        extra_headers={"X-Intent": "medical-diagnosis", "X-Request-Id": "req-42"},
    )
    audit_id = raw.headers["X-Audit-Id"]
    completion = raw.parse()
    assert completion.choices[0].message.content is not None
    assert completion.model_extra["audit_id"] == audit_id
    record = _record(server_url, audit_id)
    assert record["request_id"] == "req-42" and record["intent"] == "medical-diagnosis"
    assert record["delivered_output"] == completion.choices[0].message.content
    assert record["completion_tokens"] == completion.usage.completion_tokens


def test_streaming(client: openai.OpenAI, server_url: str) -> None:
    raw = client.chat.completions.with_raw_response.create(
        model="auditor-medical", max_tokens=12, temperature=0, stream=True,
        stream_options={"include_usage": True}, messages=[{"role": "user", "content": "Tell me about Warfarin."}],
    )
    audit_id = raw.headers["X-Audit-Id"]
    text, usage = "", None
    for chunk in raw.parse():
        if chunk.choices:
            text += chunk.choices[0].delta.content or ""
        if chunk.usage:
            usage = chunk.usage
    record = _record(server_url, audit_id)
    assert record["delivered_output"] == text
    assert usage is not None and usage.completion_tokens == record["completion_tokens"]


def test_json_object(client: openai.OpenAI, server_url: str) -> None:
    raw = client.chat.completions.with_raw_response.create(
        model="model", max_tokens=200, temperature=0, seed=3, response_format={"type": "json_object"},
        messages=[{"role": "user", "content": "Reply with a JSON object."}],
    )
    completion = raw.parse()
    content = completion.choices[0].message.content
    if completion.choices[0].finish_reason == "stop":
        assert isinstance(json.loads(content), dict)
    else:
        assert content.lstrip().startswith("{")
    assert _record(server_url, raw.headers["X-Audit-Id"])["sampling_params"]["response_format"] == {"type": "json_object"}


def test_errors_reach_the_client_as_openai_errors(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(model="model", temperature=-3, messages=[{"role": "user", "content": "x"}])
    assert caught.value.body["code"] == "invalid_parameter"
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="no-such-model", messages=[{"role": "user", "content": "x"}])
