"""A Hypothesis fuzz pass over every API body and the output-import format, on SQLite and PostgreSQL.

Each example starts from a valid body and replaces one part of it (a leaf, a container, the whole body) with
something hostile: NUL and control characters, lone surrogates (legal as JSON escapes, illegal in UTF-8 and in
PostgreSQL text), bidi overrides, numbers past 64 bits and past float range, NaN and Infinity (Python's JSON
reads them), deep nesting, wrong types. Whatever it sends, the answer is below 500 and, when refused, in the
OpenAI error shape; and the store still answers the reads that every tenant shares afterwards (a stored bad
value must not break a list for everyone, issue 43 finding 14)."""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from typing import Any

import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from auditor.auth.keys import create_key

HOSTILE_STRINGS = [
    "\x00", "a\x00b", "\ud800", "x\udfffy", "\u202eevil\u202c", "\x1b]0;owned\x07\x1b[2J", "\ufeff", "𝕏" * 300,
    "' OR 1=1 --", "=cmd|' /C calc'!A0", "../../etc/passwd", "%00", "\r\n\r\nHTTP/1.1 200", "",
]
HOSTILE_NUMBERS = [10**400, -(10**400), 2**63, 2**64, -(2**63) - 1, 1e308, -0.0, 5e-324, float("nan"),
                   float("inf"), float("-inf")]
DEEP = "__deep__"   # stands for 3,000 nested lists, spliced into the serialised body

hostile_leaf = st.one_of(
    st.sampled_from(HOSTILE_STRINGS), st.sampled_from(HOSTILE_NUMBERS), st.text(max_size=40),
    st.integers(), st.floats(allow_nan=True, allow_infinity=True), st.none(), st.booleans(),
    st.just([]), st.just({}), st.just(DEEP),
    st.lists(st.sampled_from(HOSTILE_STRINGS), max_size=3),
    st.dictionaries(st.sampled_from(HOSTILE_STRINGS), st.sampled_from(HOSTILE_STRINGS), max_size=2),
)


def _paths(value: Any, prefix: tuple = ()) -> list[tuple]:
    """Every place in a JSON value: the root, each key and index below it."""
    found = [prefix]
    if isinstance(value, dict):
        for key, child in value.items():
            found += _paths(child, prefix + (key,))
    elif isinstance(value, list):
        for index, child in enumerate(value):
            found += _paths(child, prefix + (index,))
    return found


def _replace(value: Any, path: tuple, new: Any) -> Any:
    if not path:
        return new
    copy = dict(value) if isinstance(value, dict) else list(value)
    copy[path[0]] = _replace(copy[path[0]], path[1:], new)
    return copy


def _serialise(body: Any) -> bytes:
    text = json.dumps(body, ensure_ascii=True, allow_nan=True)   # "\ud800" travels as a legal JSON escape
    return text.replace(json.dumps(DEEP), "[" * 3000 + "]" * 3000).encode()


@st.composite
def mutated(draw: st.DrawFn, template: Any) -> bytes:
    paths = _paths(template)
    path = draw(st.sampled_from(paths))
    body = _replace(template, path, draw(hostile_leaf))
    if isinstance(body, dict) and draw(st.booleans()):
        body = {**body, draw(st.sampled_from(["extra", "\x00", "model\u200b"])): draw(hostile_leaf)}
    return _serialise(body)


def _templates(audit_id: str) -> dict[str, Any]:
    return {
        "/v1/chat/completions": {"model": "fake-model", "max_tokens": 8, "temperature": 0, "stop": ["\n\n"],
                                 "metadata": {"case": "1"}, "user": "u-1",
                                 "messages": [{"role": "system", "content": "Be brief."},
                                              {"role": "user", "content": "What treats type 2 diabetes?"}]},
        "/v1/completions": {"model": "fake-model", "prompt": "Metformin is", "max_tokens": 8, "logit_bias": {"5": 1}},
        "/v1/embeddings": {"model": "fake-model", "input": ["metformin", "aspirin"]},
        f"/v1/audits/{audit_id}/reviews": {"claims": [{"claim_index": 0, "decision": "confirm", "note": "ok"}],
                                           "note": "checked"},
        "/v1/reaudits": {"filter": {"domain": "medical"}},
        "/v1/holds": {"matter_id": "M-1", "reason": "litigation", "scope": {"records": [audit_id]}},
        "/v1/keys": {"tenant": "acme", "role": "client", "name": "fuzz"},
        "/v1/rules/medical/activate": {"version": "0.0.0", "reason": "fuzz"},
        "/v1/alerts/rules": {"name": "fer", "expression": "fer > 0.5 over 5m", "webhook_url": "http://127.0.0.1:9/x",
                             "cooldown_s": 60},
    }


IMPORT_LINE = {"prompt": "dose?", "output": "Metformin is a first-line treatment.", "domain": "medical",
               "model": "other-llm", "timestamp": "2026-10-01T12:00:00Z", "metadata": {"ticket": "T-1"}}


def _assert_answered(response: Any, what: str) -> None:
    assert response.status_code < 500, f"{what}: {response.status_code} {response.text[:300]}"
    if response.status_code >= 400:
        error = response.json()["error"]
        assert {"message", "type", "code"} <= set(error), f"{what}: {error}"


def _shared_reads_answer(client: TestClient, headers: dict[str, str]) -> None:
    """What a compliance officer reads every day still answers after whatever the fuzzer stored."""
    for path in ("/v1/audits", "/v1/audits?domain_source=given", "/v1/usage", "/v1/alerts/rules"):
        response = client.get(path, headers=headers)
        assert response.status_code == 200, f"{path}: {response.status_code} {response.text[:300]}"


@pytest.fixture
def fuzz_client(store_url: str, app_on: Callable[..., TestClient]) -> tuple[TestClient, dict[str, str], str]:
    client = app_on(store_url)
    with client.app.state.services.database.session(write=True) as session:
        _, plaintext = create_key(session, tenant="default", role="admin", name="fuzzer")
    headers = {"Authorization": f"Bearer {plaintext}"}
    response = client.post("/v1/chat/completions", headers=headers,
                           json={"model": "fake-model", "messages": [{"role": "user", "content": "metformin?"}]})
    assert response.status_code == 200, response.text
    return client, headers, response.headers["x-audit-id"]


FUZZ = settings(max_examples=15, deadline=None, derandomize=True, database=None,
                suppress_health_check=list(HealthCheck))


def test_api_bodies_never_get_a_server_error(fuzz_client) -> None:
    client, headers, audit_id = fuzz_client
    templates = _templates(audit_id)

    def fuzz(path: str, template: Any) -> None:
        @FUZZ
        @given(body=mutated(template))
        def post(body: bytes) -> None:
            response = client.post(path, content=body, headers={**headers, "Content-Type": "application/json"})
            _assert_answered(response, f"POST {path} {body[:120]!r}")

        post()

    for path, template in templates.items():
        fuzz(path, template)
    _shared_reads_answer(client, headers)


def test_import_lines_never_get_a_server_error(fuzz_client) -> None:
    client, headers, _ = fuzz_client

    @FUZZ
    @given(lines=st.lists(mutated(IMPORT_LINE), min_size=1, max_size=3), strict=st.booleans())
    def post(lines: list[bytes], strict: bool) -> None:
        valid = json.dumps(IMPORT_LINE).encode()
        body = b"\n".join([valid, *lines])
        response = client.post(f"/v1/imports?strict={str(strict).lower()}", content=body, headers=headers)
        _assert_answered(response, f"import {body[:160]!r}")

    post()
    # raw bytes too: invalid UTF-8, a NUL byte outside any JSON string, CR-only line ends
    for body in (b"\xff\xfe{}", b'{"output": "a"}\x00\n', b'{"output":"x","model":"m"}\r{"output":"y"}',
                 random.Random(7).randbytes(512)):
        _assert_answered(client.post("/v1/imports", content=body, headers=headers), f"import {body[:60]!r}")
    _shared_reads_answer(client, headers)


@pytest.mark.parametrize(("path", "body"), [
    ("/v1/completions", b'{"model": "fake-model", "prompt": "Hi", "max_tokens": 4, "logit_bias": {"7": -Infinity}}'),
    ("/v1/chat/completions", b'{"model": "fake-model", "messages": [{"role": "user", "content": "Hi"}], '
                             b'"metadata": {"score": NaN}}'),
    ("/v1/chat/completions", b'{"model": "fake-model", "messages": [{"role": "user", "content": "Hi"}], '
                             b'"temperature": Infinity}'),
    ("/v1/alerts/rules", b'{"name": "n", "expression": "fer > 0.5", "webhook_url": "http://127.0.0.1:9/x", '
                         b'"cooldown_s": NaN}'),
])
def test_non_finite_numbers_are_refused_before_anything_is_stored(fuzz_client, path: str, body: bytes) -> None:
    """Found by the fuzz pass: NaN in `logit_bias` ran the model, then failed to store on PostgreSQL (503)."""
    client, headers, _ = fuzz_client
    response = client.post(path, content=body, headers={**headers, "Content-Type": "application/json"})
    assert response.status_code == 400, response.text
    assert response.json()["error"]["code"] == "invalid_number"
    # a string that merely says NaN is text, not a number, and goes through
    fine = client.post("/v1/chat/completions", headers=headers,
                       json={"model": "fake-model", "messages": [{"role": "user", "content": "Is NaN == NaN? Infinity?"}]})
    assert fine.status_code == 200, fine.text
