"""The model registry: configuration errors named precisely, id and domain resolution, and the retry policy
of the upstream client (which calls are retried, how often)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest

from auditor.serving.registry import (
    DomainConflict,
    ModelEntry,
    RegistryError,
    UnknownModel,
    UpstreamConfig,
    build_registry,
    read_entries,
)
from auditor.serving.upstream import UpstreamBackend, UpstreamError
from engine.sampling_params import SamplingParams
from tests.auditor.conftest import FakeEngine

DOMAINS = ("medical", "finance", "legal")
UPSTREAM = {"base_url": "http://vllm:8000/v1", "model": "meta-llama/Llama-3.1-8B-Instruct"}


def test_a_yaml_registry_is_read_and_inline_entries_win(tmp_path: Path) -> None:
    path = tmp_path / "models.yaml"
    path.write_text("models:\n  llama:\n    upstream: {base_url: 'http://a:1/v1', model: m}\n    domain: legal\n"
                    "  local-too:\n    engine: local\n")
    entries = read_entries(path, {"llama": {"upstream": UPSTREAM, "regenerate_on_block": 2}})
    assert entries["llama"].upstream is not None and entries["llama"].upstream.base_url == "http://vllm:8000/v1"
    assert entries["llama"].regenerate_on_block == 2 and entries["local-too"].engine == "local"


@pytest.mark.parametrize(("body", "message"), [
    ({"upstream": {**UPSTREAM, "base_url": "http://user:secret@vllm/v1"}}, "must not carry credentials"),
    ({"upstream": {**UPSTREAM, "base_url": "ftp://vllm/v1"}}, "http(s) URL"),
    ({"upstream": UPSTREAM, "engine": "local"}, "exactly one of"),
    ({}, "exactly one of"),
    ({"upstream": {**UPSTREAM, "timeout": 3}}, "upstream.timeout"),
    ({"upstream": UPSTREAM, "regenerate_on_block": 9}, "regenerate_on_block"),
    ({"upstream": {**UPSTREAM, "api_key_env": "not a name"}}, "upstream.api_key_env"),
])
def test_a_bad_entry_is_refused_naming_the_model_and_the_field(body: dict, message: str) -> None:
    with pytest.raises(RegistryError) as caught:
        read_entries(None, {"llama": body})
    assert "model 'llama'" in str(caught.value) and message in str(caught.value)


def test_a_missing_or_broken_file_is_a_registry_error(tmp_path: Path) -> None:
    with pytest.raises(RegistryError, match="cannot read"):
        read_entries(tmp_path / "absent.yaml", None)
    (tmp_path / "bad.yaml").write_text("models: [1, 2")
    with pytest.raises(RegistryError, match="invalid YAML"):
        read_entries(tmp_path / "bad.yaml", None)
    (tmp_path / "list.yaml").write_text("models: [1, 2]")
    with pytest.raises(RegistryError, match="'models:' mapping"):
        read_entries(tmp_path / "list.yaml", None)


def test_a_key_variable_that_is_not_set_fails_at_start_up() -> None:
    entries = {"llama": ModelEntry.model_validate({"upstream": {**UPSTREAM, "api_key_env": "LLAMA_KEY"}})}
    with pytest.raises(RegistryError, match="LLAMA_KEY"):
        build_registry(engine=None, entries=entries, domains=DOMAINS, environ={})
    registry = build_registry(engine=None, entries=entries, domains=DOMAINS, environ={"LLAMA_KEY": "sk-1"})
    assert registry.ids() == ["llama"]


def test_ids_and_domains_resolve_like_the_local_engine_always_did() -> None:
    entries = {"llama": ModelEntry.model_validate({"upstream": UPSTREAM, "domain": "legal"})}
    registry = build_registry(engine=FakeEngine(), entries=entries, domains=DOMAINS, environ={})
    assert registry.resolve("auditor-medical", None)[1] == "medical"
    assert registry.resolve("fake-model:finance", None)[1] == "finance"
    route, domain = registry.resolve("llama", None)
    assert route.is_upstream and domain == "legal"
    assert registry.resolve("llama:legal", "LEGAL")[1] == "legal"
    assert not registry.resolve("auditor", None)[0].is_upstream
    with pytest.raises(DomainConflict, match="contradicts"):
        registry.resolve("llama", "medical")
    with pytest.raises(DomainConflict, match="unknown domain"):
        registry.resolve("llama:tax", None)
    with pytest.raises(UnknownModel):
        registry.resolve("gpt-4o", None)
    assert registry.ids() == ["fake-model", "auditor", "llama", "auditor-medical", "auditor-finance", "auditor-legal"]


def test_a_local_entry_without_a_local_engine_is_refused() -> None:
    with pytest.raises(RegistryError, match="AUDITOR_LOCAL_ENGINE"):
        build_registry(engine=None, entries={"x": ModelEntry(engine="local")}, domains=DOMAINS, environ={})
    with pytest.raises(RegistryError, match="no model to serve"):
        build_registry(engine=None, entries={}, domains=DOMAINS, environ={})


# -- retry policy (the transport counts attempts; the faults themselves are tested against a real upstream) --


def _run_chat(transport: httpx.MockTransport, **config: object) -> UpstreamError:
    backend = UpstreamBackend("up", UpstreamConfig(**{**UPSTREAM, **config}), api_key=None, transport=transport)

    async def go() -> UpstreamError:
        await backend.start()
        try:
            async for _ in backend.generate([{"role": "user", "content": "hi"}], SamplingParams(), request_id="r",
                                            trace={}):
                pass
        except UpstreamError as exc:
            return exc
        finally:
            await backend.aclose()
        raise AssertionError("no error")

    return asyncio.run(go())


def test_a_connection_that_never_opened_is_retried_a_bounded_number_of_times() -> None:
    attempts = []

    def refuse(request: httpx.Request) -> httpx.Response:
        attempts.append(request)
        raise httpx.ConnectError("refused", request=request)

    error = _run_chat(httpx.MockTransport(refuse), connect_retries=2)
    assert error.code == "upstream_unreachable" and len(attempts) == 3


@pytest.mark.parametrize("fault", [httpx.ReadError, httpx.RemoteProtocolError, httpx.ReadTimeout])
def test_a_request_the_upstream_may_have_seen_is_never_retried(fault: type[httpx.TransportError]) -> None:
    attempts = []

    def fail_after_sending(request: httpx.Request) -> httpx.Response:
        attempts.append(request)
        raise fault("lost", request=request)

    error = _run_chat(httpx.MockTransport(fail_after_sending), connect_retries=3)
    assert len(attempts) == 1 and error.status_code in (502, 504)


def test_a_5xx_answer_to_a_generation_is_not_retried_but_listing_models_is() -> None:
    attempts = []

    def unavailable(request: httpx.Request) -> httpx.Response:
        attempts.append(request.url.path)
        return httpx.Response(503, json={"error": {"message": "overloaded"}})

    error = _run_chat(httpx.MockTransport(unavailable), connect_retries=2)
    assert error.code == "upstream_error" and "answered 503" in error.message and len(attempts) == 1
    assert error.said == "overloaded" and "overloaded" not in error.message   # its words are kept, not echoed

    backend = UpstreamBackend("up", UpstreamConfig(**UPSTREAM, connect_retries=2), api_key=None,
                              transport=httpx.MockTransport(unavailable))

    async def list_models() -> None:
        await backend.start()
        try:
            with pytest.raises(UpstreamError):
                await backend.list_models()
        finally:
            await backend.aclose()

    asyncio.run(list_models())
    assert attempts.count("/v1/models") == 3


def test_a_rate_limited_upstream_passes_its_retry_after_on() -> None:
    def limited(request: httpx.Request) -> httpx.Response:
        return httpx.Response(429, headers={"Retry-After": "7"}, json={"error": {"message": "slow down"}})

    error = _run_chat(httpx.MockTransport(limited))
    assert (error.status_code, error.code, error.headers) == (429, "upstream_rate_limited", {"Retry-After": "7"})


def test_serve_refuses_a_bad_registry_with_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    from auditor.cli import main
    from auditor.settings import get_settings

    monkeypatch.setenv("AUDITOR_DATABASE_URL", f"sqlite:///{tmp_path / 'a.db'}")
    monkeypatch.setenv("AUDITOR_MODELS", '{"llama": {"upstream": {"base_url": "http://v/v1", "model": "m", '
                                         '"api_key_env": "UNSET_LLAMA_KEY"}}}')
    monkeypatch.delenv("UNSET_LLAMA_KEY", raising=False)
    get_settings.cache_clear()
    try:
        assert main(["serve", "--port", "1"]) == 2
    finally:
        get_settings.cache_clear()
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "UNSET_LLAMA_KEY" in err[0] and "Traceback" not in err[0]
