"""Trends over the current verdicts: FER, contradicted rate, block rate and claim counts per domain, model,
intent and tenant, by hour or day (of when the outputs were produced).

One GROUP BY over the current-verdict view: re-audits and reviews move the trend lines, because the view
is what the trail currently believes. Metrics per bucket and group:

- `records`: records in the bucket; `claims`: supported / contradicted / unverifiable claims;
- `fer`: pooled factual error rate, contradicted / (supported + contradicted) over all their claims;
- `mean_fer`: the mean of per-record FERs (records with no verified claim have none and are left out);
- `contradicted_rate`: the share of records with at least one contradicted claim;
- `block_rate`: the share of records that were blocked or refused, by the gate or by their current verdicts;
- `critical`: records whose contradicted claims broke a critical rule.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any, Literal

from pydantic import Field, field_validator
from sqlalchemy import Connection, case, func, literal_column, or_

from auditor.store.base import utcnow
from auditor.store.database import Database
from auditor.trail.access_log import Reader, check_tenant_filter, log_access, logged_filters
from auditor.trail.models import RecordVerdict
from auditor.trail.queries import filtered_query
from auditor.trail.schemas import RecordFilter

GroupBy = Literal["domain", "model", "intent", "tenant"]
_GROUP_COLUMNS = {"domain": RecordVerdict.domain, "model": RecordVerdict.model_id, "intent": RecordVerdict.intent,
                  "tenant": RecordVerdict.tenant}
_DEFAULT_SPAN = {"hour": timedelta(hours=48), "day": timedelta(days=30)}
MAX_BUCKETS = 24 * 400   # an hourly trend over more than ~400 days is refused rather than computed


class TrendQuery(RecordFilter):
    bucket: Literal["hour", "day"] = "day"
    group_by: list[GroupBy] = Field(default_factory=lambda: ["domain"], max_length=4,
                                    description="Series per domain, model, intent and/or tenant")

    @field_validator("group_by", mode="before")
    @classmethod
    def _comma_separated(cls, value: Any) -> Any:
        if isinstance(value, str):
            return [part.strip() for part in value.split(",") if part.strip()]
        if isinstance(value, list) and len(value) == 1 and isinstance(value[0], str) and "," in value[0]:
            return [part.strip() for part in value[0].split(",") if part.strip()]
        return value


class TrendError(ValueError):
    pass


def _bucket_start(conn: Connection, bucket: str) -> Any:
    if conn.dialect.name == "postgresql":
        return func.date_trunc(bucket, func.timezone("UTC", RecordVerdict.occurred_at))
    pattern = "%Y-%m-%dT%H:00:00" if bucket == "hour" else "%Y-%m-%dT00:00:00"
    return func.strftime(pattern, RecordVerdict.occurred_at)


def trends(conn: Connection, query: TrendQuery, *, tenant_scope: str | None) -> dict[str, Any]:
    until = query.until or utcnow()
    since = query.since or until - _DEFAULT_SPAN[query.bucket]
    span_buckets = (until - since) / (timedelta(hours=1) if query.bucket == "hour" else timedelta(days=1))
    if span_buckets > MAX_BUCKETS:
        raise TrendError(f"{query.bucket}ly buckets over {span_buckets:.0f} {query.bucket}s: narrow since/until "
                         f"or use bucket=day")
    bounded = query.model_copy(update={"since": since, "until": until})
    matching = filtered_query(bounded, tenant_scope=tenant_scope).where(RecordVerdict.kind == "record")
    start = _bucket_start(conn, query.bucket).label("bucket_start")
    groups = [_GROUP_COLUMNS[name].label(name) for name in dict.fromkeys(query.group_by)]
    rows = conn.execute(
        matching.with_only_columns(start, *groups, *_aggregates()).order_by(None)
        .group_by(literal_column("bucket_start"), *groups).order_by(literal_column("bucket_start"))
    ).mappings().all()
    return {"bucket": query.bucket, "group_by": list(dict.fromkeys(query.group_by)), "since": since, "until": until,
            "series": [_point(row, query.group_by) for row in rows]}


def _aggregates() -> list[Any]:
    """The per-group sums every metric is computed from (zero, not NULL, over no rows)."""
    blocked = or_(RecordVerdict.gate_action.in_(("block", "refuse")), RecordVerdict.implied_action.in_(("block", "refuse")))

    def total(expression: Any, name: str) -> Any:
        return func.coalesce(func.sum(expression), 0).label(name)

    return [
        func.count().label("records"), total(RecordVerdict.n_supported, "supported"),
        total(RecordVerdict.n_contradicted, "contradicted"), total(RecordVerdict.n_unverifiable, "unverifiable"),
        total(case((RecordVerdict.n_contradicted > 0, 1), else_=0), "with_contradicted"),
        total(case((blocked, 1), else_=0), "blocked"),
        total(case((RecordVerdict.max_severity == "critical", 1), else_=0), "critical"),
        func.avg(RecordVerdict.fer).label("mean_fer"), func.count(RecordVerdict.fer).label("scored"),
    ]


def _point(row: Any, group_by: list[str]) -> dict[str, Any]:
    supported, contradicted = int(row["supported"]), int(row["contradicted"])
    records = int(row["records"])
    start = row["bucket_start"]
    return {
        "bucket_start": start.isoformat() + ("Z" if start.tzinfo is None else "") if isinstance(start, datetime)
        else f"{start}Z",
        **{name: row[name] for name in dict.fromkeys(group_by)},
        "records": records,
        "claims": {"supported": supported, "contradicted": contradicted, "unverifiable": int(row["unverifiable"])},
        "fer": round(contradicted / (supported + contradicted), 4) if supported + contradicted else None,
        "mean_fer": round(float(row["mean_fer"]), 4) if row["mean_fer"] is not None else None,
        "scored": int(row["scored"]),
        "contradicted_rate": round(int(row["with_contradicted"]) / records, 4) if records else None,
        "block_rate": round(int(row["blocked"]) / records, 4) if records else None,
        "critical": int(row["critical"]),
    }


def window_totals(conn: Connection, filters: RecordFilter, *, since: datetime, until: datetime) -> dict[str, Any]:
    """The same metrics over one window, all groups together (what alert rules test)."""
    points = window_by_group(conn, filters, since=since, until=until, group_by=[], keep_empty=True)
    return points[0]


def window_by_group(conn: Connection, filters: RecordFilter, *, since: datetime, until: datetime,
                    group_by: list[str], keep_empty: bool = False) -> list[dict[str, Any]]:
    """The metrics over one window per group (domain, model, ...): alert rules and the /metrics gauges."""
    query = TrendQuery(**filters.model_dump(exclude_none=True, exclude={"since", "until"}),
                       since=since, until=until, bucket="day", group_by=group_by)
    matching = filtered_query(query, tenant_scope=None).where(RecordVerdict.kind == "record")
    groups = [_GROUP_COLUMNS[name].label(name) for name in group_by]
    statement = matching.with_only_columns(*groups, *_aggregates()).order_by(None)
    if groups:
        statement = statement.group_by(*groups)
    points = []
    for row in conn.execute(statement).mappings():
        if not row["records"] and not keep_empty:
            continue
        point = _point({**row, "bucket_start": since}, group_by)
        point.pop("bucket_start")
        point["contradicted"] = point["claims"]["contradicted"]   # alert rules name it directly
        points.append(point)
    return points


def read_trends(database: Database, reader: Reader, query: TrendQuery) -> dict[str, Any]:
    """The trend series on a reader's behalf, logged as a read (aggregates: no record ids)."""
    check_tenant_filter(database, reader, query, "trends")
    with database.session(write=True) as session:
        result = trends(session.connection(), query, tenant_scope=reader.tenant_scope)
        log_access(session, reader, key=database.chain_key, action="trends", filters=logged_filters(query),
                   result_count=len(result["series"]))
    return result
