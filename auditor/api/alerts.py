"""Alert rules (admins create and disable them) and the alerts they fired (auditors and admins read them; a
tenant's auditor sees only the rules that watch its tenant, and their alerts)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query
from pydantic import BaseModel

from auditor.alerts import service
from auditor.alerts.rules import AlertRuleIn
from auditor.api.deps import AdminDep, DatabaseDep, ReaderDep
from auditor.api.errors import ApiError

router = APIRouter(prefix="/v1/alerts", tags=["alerts"])


class RuleList(BaseModel):
    object: str = "list"
    data: list[service.AlertRuleOut]


class AlertList(BaseModel):
    object: str = "list"
    data: list[service.AlertOut]


@router.post("/rules", status_code=201, response_model=service.AlertRuleCreated)
def create_rule(body: AlertRuleIn, database: DatabaseDep, admin: AdminDep) -> service.AlertRuleCreated:
    return service.create_rule(database, admin, body)


@router.get("/rules", response_model=RuleList)
def list_rules(database: DatabaseDep, reader: ReaderDep, include_disabled: bool = False) -> RuleList:
    return RuleList(data=service.list_rules(database, reader, include_disabled=include_disabled))


@router.post("/rules/{rule_id}/disable", response_model=service.AlertRuleOut)
def disable_rule(rule_id: int, database: DatabaseDep, _admin: AdminDep) -> service.AlertRuleOut:
    try:
        return service.disable_rule(database, rule_id)
    except service.AlertRuleNotFound as exc:
        raise ApiError(404, str(exc), code="alert_rule_not_found") from exc


@router.get("", response_model=AlertList)
def list_alerts(database: DatabaseDep, reader: ReaderDep, rule_id: int | None = None,
                limit: Annotated[int, Query(ge=1, le=500)] = 50) -> AlertList:
    return AlertList(data=service.list_alerts(database, reader, rule_id=rule_id, limit=limit))
