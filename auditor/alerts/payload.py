"""What an alert webhook receives: the rule, its severity, the metric and window, the tenant, and the records
that made it fire (at most `MAX_RECORD_IDS` ids, newest first, with the full count), each with a console link
when the service's public URL is configured.

The record ids are chosen when the alert fires (and kept in its chained event); the links are added at each
delivery, from the settings of the process that delivers."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import Connection, func, or_

from auditor.alerts.rules import AlertSpec
from auditor.trail.models import RecordVerdict
from auditor.trail.queries import filtered_query
from auditor.trail.schemas import RecordFilter

MAX_RECORD_IDS = 100
SEVERITIES = ("info", "warning", "critical")

# the records that count toward each metric; rules that fire when a rate is *low* name the whole window
_CONTRIBUTING = {
    "fer": RecordVerdict.n_contradicted > 0, "mean_fer": RecordVerdict.n_contradicted > 0,
    "contradicted": RecordVerdict.n_contradicted > 0, "contradicted_rate": RecordVerdict.n_contradicted > 0,
    "critical": RecordVerdict.max_severity == "critical",
    "block_rate": or_(RecordVerdict.gate_action.in_(("block", "refuse")),
                      RecordVerdict.implied_action.in_(("block", "refuse"))),
}


def default_severity(metric: str) -> str:
    return "critical" if metric == "critical" else "warning"


def firing_records(conn: Connection, spec: AlertSpec, *, since: datetime, until: datetime) -> tuple[list[str], int]:
    """(up to MAX_RECORD_IDS record ids, newest first; how many records there are in all)."""
    filters = RecordFilter.model_validate({**spec.filters, "since": since, "until": until})
    extra = _CONTRIBUTING.get(spec.metric) if spec.op in (">", ">=") else None
    matching = filtered_query(filters, tenant_scope=None, extra=extra).where(RecordVerdict.kind == "record")
    ids = list(conn.execute(matching.with_only_columns(RecordVerdict.record_id).limit(MAX_RECORD_IDS)).scalars())
    count = conn.execute(matching.with_only_columns(func.count()).order_by(None)).scalar_one()
    return ids, int(count)


def record_links(record_ids: list[str], public_url: str | None) -> list[dict[str, str]]:
    if not public_url:
        return [{"id": record_id} for record_id in record_ids]
    base = public_url.rstrip("/")
    return [{"id": record_id, "console_url": f"{base}/console/records/{record_id}"} for record_id in record_ids]


def build(*, alert_id: str, fired_at: str, attempt: int, details: dict[str, Any], severity: str | None,
          public_url: str | None, test: bool = False) -> dict[str, Any]:
    """The JSON body. `details` is what the alert recorded when it fired (rule, metric, value, window, ...)."""
    details = dict(details)
    record_ids = details.pop("record_ids", [])
    record_count = details.pop("record_count", len(record_ids))
    tenant = (details.get("filters") or {}).get("tenant")
    return {"id": alert_id, "type": "alert", "test": test, "fired_at": fired_at, "attempt": attempt,
            "severity": severity or default_severity(str(details.get("metric"))),
            "tenant": str(tenant) if tenant is not None else "*", **details,
            "record_count": record_count, "records_truncated": record_count > len(record_ids),
            "records": record_links(record_ids, public_url)}
