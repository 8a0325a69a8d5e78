"""`GET /v1/usage`: the cost and token usage the records hold (`details.usage`, see `auditor.serving.cost`),
summed per tenant, intent and model (or a subset of those, or domain) over the compliance filters.

A read of the trail like any other: auditor and admin keys, a tenant's reader sees its own tenant only (asking
for another is refused and logged), and every answer is written to the access log in the same transaction.
Records without usage (imported outputs, records written before cost accounting, purges) are not counted.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator
from sqlalchemy import ColumnElement, func, select
from sqlalchemy.orm import Session

from auditor.store.database import Database
from auditor.trail.access_log import Reader, check_tenant_filter, log_access, logged_filters
from auditor.trail.models import AuditRecord, RecordVerdict
from auditor.trail.queries import filtered_query
from auditor.trail.schemas import AuditFilters, RecordFilter
from auditor.trail.stored_json import readable_json

GroupKey = Literal["tenant", "intent", "model", "domain"]
_GROUP_COLUMNS = {"tenant": AuditRecord.tenant, "intent": AuditRecord.intent, "model": AuditRecord.model_id,
                  "domain": AuditRecord.domain}
_SUMMED = ("prompt_tokens", "completion_tokens", "template_tokens", "effective_prompt_tokens",
           "effective_completion_tokens")
_EXCLUSIONS = ("failed", "empty", "retry")


class UsageFilters(RecordFilter):
    """The compliance filters of `/v1/audits`, and how to group the sums."""

    group_by: str = Field(default="tenant,intent,model", max_length=64,
                          description="Comma-separated: tenant, intent, model, domain (empty: one total)")

    @field_validator("group_by")
    @classmethod
    def _known_keys(cls, value: str) -> str:
        keys = [key.strip() for key in value.split(",") if key.strip()]
        unknown = [key for key in keys if key not in _GROUP_COLUMNS]
        if unknown:
            raise ValueError(f"unknown group_by key(s) {', '.join(unknown)}; use tenant, intent, model, domain")
        return ",".join(dict.fromkeys(keys))

    @property
    def group_keys(self) -> list[str]:
        return [key for key in self.group_by.split(",") if key]


def _usage_field(name: str) -> Any:
    # readable_json: one row whose details PostgreSQL cannot read must not fail the sums for every tenant
    return readable_json(AuditRecord.details)[("usage", name)]


def usage_summary(database: Database, reader: Reader, filters: UsageFilters) -> dict[str, Any]:
    """Sums per group (and a total), newest filters applied; the read is logged with its filters."""
    check_tenant_filter(database, reader, filters, "usage")
    with database.session(write=True) as session:
        groups = _grouped(session, filters, tenant_scope=reader.tenant_scope)
        log_access(session, reader, key=database.chain_key, action="usage", filters=logged_filters(filters),
                   result_count=sum(group["requests"] for group in groups))
    return {"object": "usage", "group_by": filters.group_keys, "data": groups, "totals": _totals(groups)}


def _grouped(session: Session, filters: UsageFilters, *, tenant_scope: str | None) -> list[dict[str, Any]]:
    # the records `/v1/audits` would list with these filters (served requests only: no purges)
    listed = AuditFilters.model_validate({**filters.model_dump(exclude={"group_by"}), "kind": "record"})
    matching = (filtered_query(listed, tenant_scope=tenant_scope).with_only_columns(RecordVerdict.record_id)
                .order_by(None))
    keys = [_GROUP_COLUMNS[key].label(key) for key in filters.group_keys]
    currency = _usage_field("currency").as_string()
    excluded = _usage_field("excluded").as_string()
    sums: list[ColumnElement[Any]] = [func.coalesce(func.sum(_usage_field(name).as_integer()), 0).label(name)
                                      for name in _SUMMED]
    sums += [func.coalesce(func.sum(_usage_field("engine_seconds").as_float()), 0.0).label("engine_seconds"),
             func.sum(_usage_field("cost").as_float()).label("cost"),
             func.count(_usage_field("cost").as_float()).label("priced_requests"),
             func.count().label("requests")]
    sums += [func.count().filter(excluded == reason).label(f"excluded_{reason}") for reason in _EXCLUSIONS]
    query = (select(*keys, currency.label("currency"), *sums)
             .where(AuditRecord.id.in_(matching), _usage_field("prompt_tokens").as_integer().is_not(None))
             .group_by(*keys, currency).order_by(*keys, currency))
    return [_group_row(row._mapping, filters.group_keys) for row in session.execute(query)]


def _group_row(row: Any, keys: list[str]) -> dict[str, Any]:
    group: dict[str, Any] = {key: row[key] for key in keys}
    group.update({name: int(row[name]) for name in _SUMMED})
    group["requests"] = int(row["requests"])
    group["engine_seconds"] = round(float(row["engine_seconds"]), 6)
    group["currency"] = row["currency"]
    group["cost"] = None if row["cost"] is None else round(float(row["cost"]), 9)
    group["unpriced_requests"] = group["requests"] - int(row["priced_requests"])
    group["excluded"] = {reason: int(row[f"excluded_{reason}"]) for reason in _EXCLUSIONS}
    group["effective_tokens_per_unit_cost"] = _per_cost(group)
    return group


def _per_cost(group: dict[str, Any]) -> float | None:
    """Tokens per dollar (or the table's currency): effective prompt and completion tokens over the cost."""
    cost = group["cost"]
    if not cost:
        return None
    return round((group["effective_prompt_tokens"] + group["effective_completion_tokens"]) / cost, 3)


def _totals(groups: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One total per currency (costs in different currencies are never added up)."""
    totals: dict[str | None, dict[str, Any]] = {}
    for group in groups:
        total = totals.setdefault(group["currency"], {
            "currency": group["currency"], "requests": 0, "unpriced_requests": 0, "engine_seconds": 0.0, "cost": None,
            **{name: 0 for name in _SUMMED}, "excluded": dict.fromkeys(_EXCLUSIONS, 0)})
        for name in (*_SUMMED, "requests", "unpriced_requests"):
            total[name] += group[name]
        total["engine_seconds"] = round(total["engine_seconds"] + group["engine_seconds"], 6)
        if group["cost"] is not None:
            total["cost"] = round((total["cost"] or 0.0) + group["cost"], 9)
        for reason in _EXCLUSIONS:
            total["excluded"][reason] += group["excluded"][reason]
    for total in totals.values():
        total["effective_tokens_per_unit_cost"] = _per_cost(total)
    return list(totals.values())
