"""Issue 43, finding 14: text PostgreSQL cannot keep, in imports and other JSON bodies.

On PostgreSQL, an import line with NUL in `output` or `model` got a 503 and left its batch `importing` for
ever; NUL inside `metadata` was stored and chained, and from then on `GET /v1/usage` and the `domain_source`
filter answered 503 for every tenant. Now: NUL and lone surrogates anywhere in a line (nested metadata, keys
included) are a 400 naming the line, a batch a failure interrupts is marked failed, an admin can fail a batch a
crash left behind, and a bad row already stored breaks no one's reads. Chat bodies get a 400 the same way."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.exc import OperationalError

from tests.security.conftest import CHAT

GOOD = {"prompt": "What treats type 2 diabetes?", "output": "Metformin is a first-line treatment.",
        "domain": "medical", "model": "other-llm", "timestamp": "2026-11-02T09:30:00Z"}

BAD_LINES: dict[str, dict[str, Any]] = {
    "nul in output": {**GOOD, "output": "Metformin\x00 treats it."},
    "nul in model": {**GOOD, "model": "other\x00llm"},
    "nul in prompt": {**GOOD, "prompt": "What\x00 treats it?"},
    "nul in id": {**GOOD, "id": "ext\x001"},
    "nul in metadata value": {**GOOD, "metadata": {"source": "crm\x00"}},
    "nul in metadata key": {**GOOD, "metadata": {"so\x00urce": "crm"}},
    "nul deep in metadata": {**GOOD, "metadata": {"a": [{"b": {"c": ["ok", "x\x00y"]}}]}},
    "surrogate in output": {**GOOD, "output": "Metformin \ud800 treats it."},
    "surrogate in metadata": {**GOOD, "metadata": {"a": ["\udfff"]}},
    "surrogate in metadata key": {**GOOD, "metadata": {"\ud83d": 1}},
}


def _key(cli, url: str, role: str, tenant: str) -> str:
    status, out, err = cli(url, "keys", "create", "--tenant", tenant, "--role", role)
    assert status == 0, err
    return re.search(r"key: (aud_\S+)", out).group(1)


def _bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def _jsonl(*lines: dict[str, Any]) -> bytes:
    return "\n".join(json.dumps(line) for line in lines).encode()   # \u0000 and \ud800 escaped, as clients send them


def _reads_work(client, headers: dict[str, str]) -> None:
    for path, params in (("/v1/usage", {}), ("/v1/audits", {"domain_source": "given"}),
                         ("/v1/audits", {"domain_source": "none"}), ("/v1/audits", {}),
                         ("/v1/audits/export", {"format": "jsonl", "domain_source": "given"})):
        response = client.get(path, params=params, headers=headers)
        assert response.status_code == 200, (path, params, response.status_code, response.text[:300])


def _importing(sql, url: str) -> int:
    with sql(url).connect() as conn:
        return conn.execute(text("SELECT count(*) FROM imports WHERE status = 'importing'")).scalar()


@pytest.mark.parametrize("case", list(BAD_LINES))
def test_finding_14_unstorable_text_in_any_field_is_a_400_naming_the_line(app_on, cli, sql, store_url: str,
                                                                          case: str) -> None:
    keys = {"acme": _key(cli, store_url, "auditor", "acme"), "beta": _key(cli, store_url, "auditor", "beta")}
    client = app_on(store_url)
    acme = _bearer(keys["acme"])
    alone = client.post("/v1/imports", content=_jsonl(BAD_LINES[case]), headers=acme)
    assert alone.status_code == 400, alone.text
    assert alone.json()["error"]["type"] == "invalid_request_error" and "line 1" in alone.json()["error"]["message"]
    strict = client.post("/v1/imports", params={"strict": "true"}, content=_jsonl(GOOD, BAD_LINES[case]), headers=acme)
    assert strict.status_code == 400 and "line 2" in strict.json()["error"]["message"], strict.text
    mixed = client.post("/v1/imports", content=_jsonl(GOOD, BAD_LINES[case], GOOD), headers=acme)
    assert mixed.status_code == 201, mixed.text
    assert mixed.json()["imported"] == 2 and [e["line"] for e in mixed.json()["errors"]] == [2]
    assert _importing(sql, store_url) == 0
    for key in keys.values():   # nothing stored breaks anyone's reads
        _reads_work(client, _bearer(key))


def test_finding_14_the_cli_import_rejects_the_line_too(cli, store_url: str, tmp_path) -> None:
    path = tmp_path / "outputs.jsonl"
    path.write_bytes(_jsonl(GOOD, BAD_LINES["nul deep in metadata"]))
    status, out, err = cli(store_url, "import", str(path), "--tenant", "acme", "--strict")
    assert status == 2 and "line 2" in err and "Traceback" not in err


def test_finding_14_a_bad_row_already_stored_breaks_no_ones_reads(app_on, cli, sql, store_url: str) -> None:
    keys = {"acme": _key(cli, store_url, "auditor", "acme"), "beta": _key(cli, store_url, "auditor", "beta"),
            "admin": _key(cli, store_url, "admin", "ops")}
    client = app_on(store_url)
    for tenant in ("acme", "beta"):
        response = client.post("/v1/imports", content=_jsonl(GOOD, {**GOOD, "domain": None}),
                               headers=_bearer(keys[tenant]))
        assert response.status_code == 201, response.text
    # what the old import stored: NUL escaped inside the record's JSON details (as a database writer could too)
    with sql(store_url).begin() as conn:
        record_id, details = conn.execute(text("SELECT id, details FROM audit_records WHERE tenant = 'acme' "
                                               "ORDER BY created_at LIMIT 1")).one()
        details = json.loads(details) if isinstance(details, str) else details
        details["metadata"] = {"note": "a\x00b", "deep": [{"x": "\x00"}]}
        cast = "CAST(:details AS json)" if conn.dialect.name == "postgresql" else ":details"
        conn.execute(text(f"UPDATE audit_records SET details = {cast} WHERE id = :id"),
                     {"details": json.dumps(details), "id": record_id})
    for key in keys.values():
        _reads_work(client, _bearer(key))
    shown = client.get(f"/v1/audits/{record_id}", headers=_bearer(keys["acme"]))
    assert shown.status_code == 200, shown.text


def test_finding_14_a_batch_a_failure_interrupts_is_marked_failed(app_on, cli, sql, store_url: str,
                                                                  monkeypatch) -> None:
    import auditor.jobs.imports as imports

    key = _key(cli, store_url, "auditor", "acme")
    client = app_on(store_url)
    real_append, calls = imports.append_batch, []

    def append_then_fail(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        if len(calls) == 2:
            raise OperationalError("INSERT INTO audit_records ...", {}, Exception("the store went away"))
        return real_append(*args, **kwargs)

    monkeypatch.setattr(imports, "APPEND_BATCH", 2)
    monkeypatch.setattr(imports, "append_batch", append_then_fail)
    response = client.post("/v1/imports", content=_jsonl(GOOD, GOOD, GOOD, GOOD), headers=_bearer(key))
    assert response.status_code == 503, response.text
    assert "Traceback" not in response.text
    with sql(store_url).connect() as conn:
        status, imported, finished = conn.execute(text("SELECT status, imported, finished_at FROM imports")).one()
    assert (status, imported) == ("failed", 2) and finished is not None


def test_finding_14_an_admin_fails_a_batch_a_crash_left_importing(cli, sql, store_url: str) -> None:
    status, out, err = cli(store_url, "imports", "list")   # creates the schema, and nothing is listed yet
    assert status == 0, err
    with sql(store_url).begin() as conn:   # what a process killed mid-import leaves behind
        conn.execute(text("INSERT INTO imports (id, tenant, filename, sha256, strict, lines, imported, skipped, errors, "
                          "status, created_at) VALUES ('11111111-2222-3333-4444-555555555555', 'acme', 'x.jsonl', "
                          "'00', :f, 10, 4, 0, '[]', 'importing', CURRENT_TIMESTAMP)"), {"f": False})
    status, out, err = cli(store_url, "imports", "list")
    assert status == 0 and "importing" in out and "11111111-2222-3333-4444-555555555555" in out
    status, out, err = cli(store_url, "imports", "fail", "11111111-2222-3333-4444-555555555555")
    assert status == 0, err
    assert _importing(sql, store_url) == 0
    status, out, err = cli(store_url, "imports", "fail", "11111111-2222-3333-4444-555555555555")
    assert status == 2 and "not importing" in err                     # a finished batch is left as it is
    status, out, err = cli(store_url, "imports", "fail", "no-such\x00id")
    assert status == 2 and "Traceback" not in err


CHAT_BODIES = {
    "metadata key": {**CHAT, "metadata": {"k\x00": "v"}},
    "tool call id": {**CHAT, "messages": [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call\x001", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "call\x001", "content": "ok"}]},
    "tool parameters": {**CHAT, "tools": [{"type": "function", "function": {
        "name": "f", "parameters": {"type": "object", "properties": {"a\x00": {"type": "string",
                                                                            "description": "\x00"}}}}}]},
    "json schema": {**CHAT, "response_format": {"type": "json_schema", "json_schema": {
        "name": "x", "schema": {"type": "object", "properties": {"a": {"enum": ["\x00"]}}}}}},
    "surrogate in tool parameters": {**CHAT, "tools": [{"type": "function", "function": {
        "name": "f", "parameters": {"type": "object", "description": "\ud800"}}}]},
}


@pytest.mark.parametrize("case", list(CHAT_BODIES))
def test_finding_14_nul_anywhere_in_a_chat_body_is_a_400(app_on, store_url: str, case: str) -> None:
    client = app_on(store_url)
    response = client.post("/v1/chat/completions", content=json.dumps(CHAT_BODIES[case]),
                           headers={"Content-Type": "application/json"})
    assert response.status_code == 400, (case, response.status_code, response.text[:300])
    assert response.json()["error"]["type"] == "invalid_request_error"


@pytest.mark.parametrize("line", ['{"output": "x", "model": "m", "timestamp": "2026-10-01T12:00:00Z", "metadata": {"s": NaN}}',
                                  '{"output": "x", "model": "m", "timestamp": "2026-10-01T12:00:00Z", "metadata": '
                                  + "[" * 3000 + "]" * 3000 + "}"], ids=["nan", "deep"])
def test_found_by_the_fuzz_pass_nan_and_deep_nesting_are_line_errors(line: str) -> None:
    # both crashed the import (NaN then failed to store on PostgreSQL; deep nesting raised RecursionError)
    from auditor.jobs.imports import parse_lines

    valid, errors, seen = parse_lines([line], domains=["medical"])
    assert valid == [] and seen == 1 and len(errors) == 1 and "not valid JSON" in errors[0].message
