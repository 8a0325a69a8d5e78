"""Fixtures for the audit service: databases (SQLite and PostgreSQL), a fake engine, apps and clients.

The fake engine honours the AsyncLLMEngine contract (generate / tokenizer / model_id /
checkpoint_hash / stats) so the service can be tested before and without the real engine.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from auditor.settings import Settings
from auditor.store.database import ChainKey, Database
from auditor.store.scratch import scratch_schema
from auditor.store.signing_key import SigningKey
from engine.outputs import ProcessorEvent, RequestOutput, RequestStats, TokenLogprob
from engine.sampling_params import InvalidRequestError, SamplingParams

POSTGRES_URL = os.environ.get("AUDITOR_TEST_POSTGRES_URL")
TEST_HMAC_KEY = "test-hmac-key-0123456789-0123456789"
# A fixed Ed25519 key signs the bundles of stores opened with TEST_CHAIN_KEY (tests read its public half here).
TEST_SIGNING_KEY = SigningKey(Ed25519PrivateKey.from_private_bytes(bytes(range(32))))
TEST_CHAIN_KEY = ChainKey(TEST_HMAC_KEY.encode(), 5, TEST_SIGNING_KEY)


def _fresh_postgres_schema() -> Iterator[str]:
    if not POSTGRES_URL:
        pytest.skip("AUDITOR_TEST_POSTGRES_URL is not set (e.g. postgresql+psycopg://postgres@127.0.0.1:5432/test)")
    with scratch_schema(POSTGRES_URL, prefix="auditor_test") as url:
        yield url


@pytest.fixture(params=["sqlite", "postgres"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh, empty database URL: one SQLite file, or one PostgreSQL schema, per test."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'audit.db'}"
    else:
        yield from _fresh_postgres_schema()


@pytest.fixture
def database(database_url: str) -> Iterator[Database]:
    db = Database(database_url, chain_key=TEST_CHAIN_KEY)
    db.upgrade()
    yield db
    db.dispose()


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'audit.db'}"


def make_settings(database_url: str, **overrides: Any) -> Settings:
    values: dict[str, Any] = {
        "environment": "test", "database_url": database_url, "hmac_key": TEST_HMAC_KEY,
        "checkpoint_interval": 5, "max_body_bytes": 64_000,
        # Requests without a domain are served unverified here, as before detection existed: the tests that
        # exercise detection opt in (`overrides={"domain_detection": "detect"}`), the rest need no MiniLM.
        "domain_detection": "off",
    }
    values.update(overrides)
    return Settings(**values)


# -- fake engine --------------------------------------------------------------------------------


class FakeTokenizer:
    def apply_chat_template(self, messages: list[dict[str, Any]], add_generation_prompt: bool = True) -> str:
        turns = "".join(f"<|{m['role']}|>{m['content']}\n" for m in messages)
        return turns + ("<|assistant|>" if add_generation_prompt else "")

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return [len(word) for word in text.split()]


class FakeEngine:
    """Replies with `reply` (or a JSON object in JSON mode), one word per step, like a streaming engine."""

    model_id = "fake-model"
    checkpoint_hash = "fake-checkpoint-0001"
    dtype = "bfloat16"

    def __init__(self, reply: str = "Metformin is a first-line treatment for type 2 diabetes. It lowers glucose.") -> None:
        self.reply = reply
        self.tokenizer = FakeTokenizer()
        self.calls: list[dict[str, Any]] = []
        self.requests_total = 0

    def stats(self) -> dict[str, float]:
        return {"num_requests_running": 0, "num_requests_waiting": 0, "kv_cache_usage_perc": 0.0,
                "requests_total": self.requests_total}

    async def generate(
        self, prompt: str | list[int], params: SamplingParams, *, request_id: str,
        intent: str | None = None, cache_salt: str | None = None, output_kind: str = "cumulative",
    ) -> AsyncIterator[RequestOutput]:
        params.validate()
        if params.response_format and params.response_format.get("type") == "json_schema":
            schema = params.response_format.get("json_schema", {})
            if not isinstance(schema, dict) or not isinstance(schema.get("schema", {}), dict):
                raise InvalidRequestError("json_schema.schema must be an object")
        self.calls.append({"prompt": prompt, "params": params, "request_id": request_id,
                           "intent": intent, "cache_salt": cache_salt})
        self.requests_total += 1
        reply = self.reply
        if params.response_format and params.response_format.get("type") in ("json_object", "json_schema"):
            reply = json.dumps({"answer": "metformin", "confidence": 0.9})
        words = reply.split(" ")[: params.max_tokens]
        stats = RequestStats(arrival_time=0.0, num_prompt_tokens=len(self.tokenizer.encode(str(prompt))))
        text_so_far, token_ids, logprobs = "", [], []
        events = [ProcessorEvent("kg_constraint", 0, "allowed_set", {"size": 3})] if params.extra_args else []
        for i, word in enumerate(words):
            await asyncio.sleep(0)
            piece = word if i == 0 else " " + word
            text_so_far += piece
            token_ids.append(i)
            last = i == len(words) - 1
            stats.num_generated_tokens = i + 1
            if last:
                stats.time_to_first_token_seconds, stats.e2e_request_latency_seconds = 0.001, 0.002
            logprob = TokenLogprob(i, piece, -0.1)
            logprobs.append(logprob)
            delta = output_kind == "delta"
            yield RequestOutput(
                request_id=request_id, prompt_token_ids=[1, 2], token_ids=[i] if delta else list(token_ids),
                text=piece if delta else text_so_far, new_token_ids=[i], new_text=piece, finished=last,
                finish_reason=("length" if len(words) < len(reply.split(" ")) else "stop") if last else None,
                logprobs=None if params.logprobs is None else [logprob] if delta else list(logprobs),
                events=(events if i == 0 else []) if delta else list(events), stats=stats,
            )


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random checkpoint for the real engine, written once per test session."""
    from tests.auditor.real_engine import write_checkpoint

    return write_checkpoint(tmp_path_factory.mktemp("tiny-model") / "model")


@pytest.fixture
def fake_engine() -> FakeEngine:
    return FakeEngine()


@pytest.fixture
def app_database_url(sqlite_url: str) -> str:
    """The database apps are built on; modules override it with `database_url` to run on both backends."""
    return sqlite_url


@pytest.fixture
def app_factory(app_database_url: str, fake_engine: FakeEngine):
    """Build an app (fake engine, fresh database) and enter its lifespan; returns a TestClient per call."""
    from fastapi.testclient import TestClient

    from auditor.app import create_app

    clients: list[TestClient] = []

    def build(**kwargs: Any) -> TestClient:
        settings = kwargs.pop("settings", None) or make_settings(app_database_url, **kwargs.pop("overrides", {}))
        raise_server_exceptions = kwargs.pop("raise_server_exceptions", True)
        client = TestClient(create_app(settings, engine=kwargs.pop("engine", fake_engine), **kwargs),
                            raise_server_exceptions=raise_server_exceptions)
        client.__enter__()
        clients.append(client)
        return client

    yield build
    for client in clients:
        client.__exit__(None, None, None)


@pytest.fixture
def client(app_factory):
    return app_factory()


class ScriptedVerifier:
    """Output validator double: a sentence containing a trigger word gets that trigger's verdict/action."""

    def rule_pack_hash(self, domain: str | None) -> str | None:
        return "pack-test-1"

    def __init__(self, triggers: dict[str, tuple[str, str | None]]) -> None:
        self.triggers = triggers   # word -> (verdict, on_fail action or None)
        self.seen: list[str] = []

    def verify(self, text: str, *, domain: str | None, prompt: str | None, intent: str | None = None):
        from auditor.gate.gate import GateDecision, Verification

        self.seen.append(text)
        found = Verification()
        for word, (verdict, action) in self.triggers.items():
            if word in text:
                rule_id = f"test.{word}"
                found.claims.append({"text": text, "verdict": verdict, "rule_id": rule_id,
                                     "evidence": [{"source": "test KG", "fact": f"{word} fact"}]})
                if action:
                    found.decisions.append(GateDecision("output", rule_id, action, f"{word} is {verdict}"))
                    if action == "redact":
                        found.redacted_text = text.replace(word, "[REDACTED]")
        return found
