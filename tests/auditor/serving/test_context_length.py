"""A prompt longer than the model's context is a 400 as OpenAI words it: code `context_length_exceeded`, `param`
"messages" (chat) or "prompt" (completions), and a message naming both lengths; the same whether the engine runs
in this process or in its own (the reason crosses the process boundary), streamed or not."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from auditor.app import create_app
from auditor.serving import runtime
from auditor.serving.runtime import KgKnowledge, RulesVerifier
from tests.auditor.conftest import make_settings
from tests.auditor.real_engine import tiny_medical_kg

pytestmark = pytest.mark.timeout(240)

LONG = "Hello world! How are you today? " * 200   # far past the tiny checkpoint's 512 tokens
MESSAGE = re.compile(r"^This model's maximum context length is 512 tokens\. However, your (messages|prompt) "
                     r"resulted in (\d+) tokens")


@pytest.fixture(scope="module", params=["in-process", "core-process"])
def client(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
           tiny_checkpoint: Path) -> Iterator[TestClient]:
    root = tmp_path_factory.mktemp("context")
    kgs = {"medical": tiny_medical_kg()}
    engine = runtime.load_engine(tiny_checkpoint, kgs, process=request.param == "core-process",
                                 index_cache_dir=root / "index")
    app = create_app(make_settings(f"sqlite:///{root / 'audit.db'}"), engine=engine,
                     verifier=RulesVerifier(kgs), knowledge=KgKnowledge(kgs))
    with TestClient(app) as test_client:
        yield test_client
    if request.param == "core-process":   # the lifespan shuts down only engines it loaded itself
        asyncio.run(engine.shutdown())


def _assert_context_error(response, param: str) -> None:
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["code"] == "context_length_exceeded" and error["param"] == param
    assert error["type"] == "invalid_request_error"
    found = MESSAGE.match(error["message"])
    assert found and found.group(1) == param and int(found.group(2)) > 512, error["message"]


@pytest.mark.parametrize("stream", [False, True])
def test_a_too_long_chat_prompt_is_context_length_exceeded_on_messages(client: TestClient, stream: bool) -> None:
    response = client.post("/v1/chat/completions", json={"model": "auditor", "stream": stream, "max_tokens": 5,
                                                         "messages": [{"role": "user", "content": LONG}]})
    _assert_context_error(response, "messages")


@pytest.mark.parametrize("stream", [False, True])
def test_a_too_long_completion_prompt_is_context_length_exceeded_on_prompt(client: TestClient, stream: bool) -> None:
    response = client.post("/v1/completions", json={"model": "auditor", "stream": stream, "max_tokens": 5,
                                                    "prompt": LONG})
    _assert_context_error(response, "prompt")


def test_a_prompt_that_fits_still_answers(client: TestClient) -> None:
    response = client.post("/v1/completions", json={"model": "auditor", "max_tokens": 3, "prompt": "Hello world!"})
    assert response.status_code == 200, response.text
