"""The compliance API: list, show, export and verify the audit trail. Every read is logged.

Roles: auditor (its own tenant) and admin (all tenants). Another tenant's record answers 404."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import StreamingResponse

from auditor.api.deps import get_services
from auditor.api.errors import ApiError
from auditor.auth.principal import Principal, authenticate, require_role
from auditor.trail import chain
from auditor.trail import records as audit_log
from auditor.trail.export import export_lines
from auditor.trail.records import AuditQueryError
from auditor.trail.schemas import (
    AuditFilters,
    AuditPage,
    AuditRecordOut,
    ChainReportOut,
    EvaluationOut,
    ExportFilters,
)

router = APIRouter(prefix="/v1/audits", tags=["compliance"])


def _reader(principal: Annotated[Principal, Depends(authenticate)]) -> Principal:
    return require_role(principal, "auditor", "admin")


def _check_tenant_filter(principal: Principal, filters: AuditFilters) -> None:
    if filters.tenant is not None and principal.role != "admin" and filters.tenant != principal.tenant:
        raise ApiError(403, "only admins may read other tenants' records", code="insufficient_role", param="tenant")


def _logged_filters(filters: AuditFilters) -> dict[str, Any]:
    return filters.model_dump(mode="json", exclude_none=True)


@router.get("", response_model=AuditPage)
def list_audits(request: Request, filters: Annotated[AuditFilters, Query()],
                principal: Annotated[Principal, Depends(_reader)]) -> AuditPage:
    _check_tenant_filter(principal, filters)
    with get_services(request).database.session(write=True) as session:
        try:
            rows, cursor = audit_log.list_records(session, filters, tenant_scope=principal.tenant_scope)
        except AuditQueryError as exc:
            raise ApiError(400, str(exc), code="invalid_cursor", param="cursor") from exc
        audit_log.log_access(session, key_id=principal.key_id, tenant=principal.tenant, role=principal.role,
                             action="list", filters=_logged_filters(filters), result_count=len(rows))
        return AuditPage(data=[AuditRecordOut.model_validate(row) for row in rows], next_cursor=cursor)


@router.get("/verify", response_model=ChainReportOut)
def verify_chain(request: Request, principal: Annotated[Principal, Depends(_reader)]) -> ChainReportOut:
    services = get_services(request)
    with services.database.engine.connect() as conn:
        report = chain.verify_chain(conn, services.settings.hmac_key.get_secret_value().encode())
    with services.database.session(write=True) as session:
        audit_log.log_access(session, key_id=principal.key_id, tenant=principal.tenant, role=principal.role,
                             action="verify", result_count=report.records_checked)
    return ChainReportOut.model_validate(report.to_dict())


@router.get("/export")
def export_audits(request: Request, filters: Annotated[ExportFilters, Query()],
                  principal: Annotated[Principal, Depends(_reader)]) -> StreamingResponse:
    _check_tenant_filter(principal, filters)
    if filters.cursor is not None:
        _check_cursor(filters.cursor)
    database = get_services(request).database
    with database.session(write=True) as session:  # logged before the first byte: an export is a read even if cut short
        audit_log.log_access(session, key_id=principal.key_id, tenant=principal.tenant, role=principal.role,
                             action="export", filters=_logged_filters(filters))

    def lines() -> Iterator[str]:
        with database.session() as session:
            rows = audit_log.iter_records(session, filters, tenant_scope=principal.tenant_scope,
                                          batch_size=filters.limit)
            yield from export_lines(rows, filters.format)

    media_type = "text/csv" if filters.format == "csv" else "application/x-ndjson"
    return StreamingResponse(lines(), media_type=media_type,
                             headers={"Content-Disposition": f'attachment; filename="audits.{filters.format}"'})


def _check_cursor(cursor: str) -> None:
    try:
        audit_log.decode_cursor(cursor)
    except AuditQueryError as exc:
        raise ApiError(400, str(exc), code="invalid_cursor", param="cursor") from exc


@router.get("/{audit_id}", response_model=AuditRecordOut)
def show_audit(audit_id: str, request: Request, principal: Annotated[Principal, Depends(_reader)]) -> AuditRecordOut:
    with get_services(request).database.session(write=True) as session:
        row = audit_log.get_record(session, audit_id, tenant_scope=principal.tenant_scope)
        audit_log.log_access(session, key_id=principal.key_id, tenant=principal.tenant, role=principal.role,
                             action="show", target=audit_id[:64], result_count=0 if row is None else 1)
        if row is not None:
            evaluations = [EvaluationOut.model_validate(e) for e in audit_log.evaluations_for(session, audit_id)]
            return AuditRecordOut.model_validate(row).model_copy(update={"evaluations": evaluations})
    # Outside the session block so the failed read's log entry is committed; other tenants' ids look absent.
    raise ApiError(404, f"no audit record {audit_id!r}", code="audit_not_found")
