"""The compliance API: list, show, export and verify the audit trail (`auditor.trail.reads` logs every read).

Roles: auditor (its own tenant) and admin (all tenants). Another tenant's record answers 404."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated

from fastapi import APIRouter, Query
from fastapi.responses import StreamingResponse

from auditor.api.deps import DatabaseDep, ReaderDep, SettingsDep
from auditor.api.errors import ApiError
from auditor.api.schemas import AuditPage, ChainReportOut
from auditor.trail import reads
from auditor.trail.queries import AuditQueryError
from auditor.trail.schemas import AuditFilters, AuditRecordOut, ExportFilters
from auditor.trail.witness import WitnessError, open_witness

router = APIRouter(prefix="/v1/audits", tags=["compliance"])


@contextmanager
def _read_errors() -> Iterator[None]:
    try:
        yield
    except reads.TenantNotAllowed as exc:
        raise ApiError(403, str(exc), code="insufficient_role", param="tenant") from exc
    except AuditQueryError as exc:
        raise ApiError(400, str(exc), code="invalid_cursor", param="cursor") from exc
    except reads.RecordNotFound as exc:
        raise ApiError(404, str(exc), code="audit_not_found") from exc


@router.get("", response_model=AuditPage)
def list_audits(filters: Annotated[AuditFilters, Query()], database: DatabaseDep, reader: ReaderDep) -> AuditPage:
    with _read_errors():
        rows, cursor = reads.list_page(database, reader, filters)
    return AuditPage(data=rows, next_cursor=cursor)


@router.get("/verify", response_model=ChainReportOut)
def verify_chain(database: DatabaseDep, settings: SettingsDep, reader: ReaderDep,
                 witness: Annotated[bool, Query(description="also compare with AUDITOR_CHAIN_WITNESS")] = False
                 ) -> ChainReportOut:
    if witness and not settings.chain_witness:
        raise ApiError(400, "no witness is configured (AUDITOR_CHAIN_WITNESS)", code="no_witness", param="witness")
    try:
        report = reads.verify(database, reader, hmac_key=settings.hmac_key.get_secret_value().encode(),
                              witness=open_witness(settings.chain_witness) if witness and settings.chain_witness else None)
    except WitnessError as exc:
        raise ApiError(503, f"the chain witness is unavailable: {exc}", code="witness_unavailable") from exc
    return ChainReportOut.model_validate(reads.scoped_report(database, reader, report))


@router.get("/export")
def export_audits(filters: Annotated[ExportFilters, Query()], database: DatabaseDep,
                  reader: ReaderDep) -> StreamingResponse:
    with _read_errors():
        lines = reads.export(database, reader, filters)
    media_type = "text/csv" if filters.format == "csv" else "application/x-ndjson"
    return StreamingResponse(lines, media_type=media_type,
                             headers={"Content-Disposition": f'attachment; filename="audits.{filters.format}"'})


@router.get("/{audit_id}", response_model=AuditRecordOut)
def show_audit(audit_id: str, database: DatabaseDep, reader: ReaderDep) -> AuditRecordOut:
    with _read_errors():
        return reads.show_record(database, reader, audit_id)
