"""Hallucination rates of a run, read from its audit records (`GET /v1/audits`, an auditor or admin key, or a
development server): the records of the audit ids the run received.

- FER (pooled): contradicted / (supported + contradicted) over the verified claims of the outputs, as the
  output gate's validators judged them inline;
- entity-violation rate: outputs naming an entity of a constrained type outside their prompt's allowed KG
  neighbourhood / outputs that had one (the `output_check` the service records in `kg_events`; prompts that
  name no entity have no neighbourhood and are not counted);
- engine queue time (p50, p99): how long each request waited in the engine's priority queue before its first
  step (`timings.queue_s`), where the scheduler's intent priorities act.
"""

from __future__ import annotations

from collections.abc import Collection
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx

from auditor.loadgen.report import ALL, percentile

PAGE = 500


class RecordsUnavailable(RuntimeError):
    """The records could not be read (no key with the auditor role, the service is gone, ...)."""


async def fetch_records(base_url: str, audit_ids: Collection[str], *, since_wall: float, api_key: str | None,
                        timeout_s: float = 60.0) -> list[dict[str, Any]]:
    """The records among `audit_ids`, paging back through `/v1/audits` from the newest to `since_wall`."""
    wanted = set(audit_ids)
    found: list[dict[str, Any]] = []
    since = (datetime.fromtimestamp(since_wall, UTC) - timedelta(seconds=5)).isoformat()
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    params: dict[str, Any] = {"since": since, "limit": PAGE}
    async with httpx.AsyncClient(base_url=base_url, headers=headers, timeout=timeout_s) as client:
        while wanted:
            try:
                response = await client.get("/v1/audits", params=params)
            except httpx.HTTPError as exc:
                raise RecordsUnavailable(f"{type(exc).__name__}: {exc}") from exc
            if response.status_code != 200:
                raise RecordsUnavailable(_reason(response))
            page = response.json()
            for record in page["data"]:
                if record["id"] in wanted:
                    wanted.discard(record["id"])
                    found.append(record)
            if not page.get("next_cursor"):
                break
            params["cursor"] = page["next_cursor"]
    return found


def _reason(response: httpx.Response) -> str:
    try:
        return f"{response.status_code}: {response.json()['error']['message']}"
    except (ValueError, KeyError, TypeError):
        return f"HTTP {response.status_code}"


def quality(records: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per intent and for "all": records, pooled FER, verified claims, entity-violation rate."""
    groups: dict[str, list[dict[str, Any]]] = {ALL: records}
    for record in records:
        groups.setdefault(record.get("intent") or "none", []).append(record)
    return {intent: _rates(rows) for intent, rows in groups.items()}


def _rates(records: list[dict[str, Any]]) -> dict[str, Any]:
    supported = sum(r.get("n_supported") or 0 for r in records)
    contradicted = sum(r.get("n_contradicted") or 0 for r in records)
    checks = [check for r in records if (check := _output_check(r)) is not None]
    violating = sum(1 for check in checks if check["violations"] > 0)
    queue = [q for r in records if isinstance(q := (r.get("timings") or {}).get("queue_s"), int | float)]
    return {"records": len(records), "verified_claims": supported + contradicted,
            **{f"queue_p{q}_ms": _ms(percentile(queue, q)) for q in (50, 99)},
            "fer": round(contradicted / (supported + contradicted), 4) if supported + contradicted else None,
            "checked_outputs": len(checks),
            "violation_rate": round(violating / len(checks), 4) if checks else None}


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000, 1)


def _output_check(record: dict[str, Any]) -> dict[str, Any] | None:
    for event in record.get("kg_events") or []:
        if event.get("processor") == "kg_linking" and event.get("kind") == "output_check":
            return event.get("data") or {"violations": 0}
    return None
