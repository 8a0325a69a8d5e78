"""The compliance API: list, show, export (lines or a regulator bundle), verify and review the audit trail
(`auditor.trail.reads` logs every read).

Roles: auditor (its own tenant) and admin (all tenants); a reviewer may show records and review them.
Another tenant's record answers 404."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, Query
from fastapi.responses import FileResponse, StreamingResponse
from starlette.background import BackgroundTask

from auditor.api.deps import DatabaseDep, ReaderDep, ReviewerDep, SettingsDep
from auditor.api.errors import ApiError
from auditor.api.schemas import AuditPage, ChainReportOut
from auditor.trail import reads, reviews
from auditor.trail.bundle import BundleError, BundleFilters, write_bundle, zip_folder
from auditor.trail.queries import AuditQueryError
from auditor.trail.reviews import ReviewIn
from auditor.trail.schemas import AuditFilters, AuditRecordOut, ExportFilters
from auditor.trail.witness import WitnessError, open_witness

router = APIRouter(prefix="/v1/audits", tags=["compliance"])


@contextmanager
def read_errors() -> Iterator[None]:
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
    with read_errors():
        rows, cursor = reads.list_page(database, reader, filters)
    return AuditPage(data=rows, next_cursor=cursor)


@router.get("/verify", response_model=ChainReportOut)
def verify_chain(database: DatabaseDep, settings: SettingsDep, reader: ReaderDep,
                 witness: Annotated[bool, Query(description="also compare with AUDITOR_CHAIN_WITNESS")] = False,
                 incremental: Annotated[bool, Query(description="start at the last verified signed checkpoint")] = False,
                 ) -> ChainReportOut:
    if witness and not settings.chain_witness:
        raise ApiError(400, "no witness is configured (AUDITOR_CHAIN_WITNESS)", code="no_witness", param="witness")
    try:
        report = reads.verify(database, reader, hmac_key=settings.hmac_key.get_secret_value().encode(),
                              witness=open_witness(settings.chain_witness) if witness and settings.chain_witness else None,
                              mode="incremental" if incremental else "full")
    except WitnessError as exc:
        raise ApiError(503, f"the chain witness is unavailable: {exc}", code="witness_unavailable") from exc
    return ChainReportOut.model_validate(reads.scoped_report(database, reader, report))


@router.get("/export")
def export_audits(filters: Annotated[ExportFilters, Query()], database: DatabaseDep,
                  reader: ReaderDep) -> StreamingResponse:
    with read_errors():
        lines = reads.export(database, reader, filters)
    media_type = "text/csv" if filters.format == "csv" else "application/x-ndjson"
    return StreamingResponse(lines, media_type=media_type,
                             headers={"Content-Disposition": f'attachment; filename="audits.{filters.format}"'})


@router.get("/bundle", response_class=FileResponse,
            responses={200: {"content": {"application/zip": {}}, "description": "the bundle as a zip file"}})
def export_bundle(filters: Annotated[BundleFilters, Query()], database: DatabaseDep, reader: ReaderDep) -> FileResponse:
    """A regulator bundle (see `auditor.trail.bundle`) of the matching records, as one zip file."""
    workdir = Path(tempfile.mkdtemp(prefix="auditor-bundle-"))
    try:
        with read_errors():
            try:
                manifest = write_bundle(database, reader, filters, workdir / "bundle")
            except BundleError as exc:   # no signing key, or a chain the HMAC key does not vouch for
                raise ApiError(503, str(exc), code="bundle_not_signed") from exc
        archive = zip_folder(workdir / "bundle", workdir / "bundle.zip")
    except BaseException:
        shutil.rmtree(workdir, ignore_errors=True)
        raise
    name = f"audit-bundle-{manifest['created_at'][:10]}.zip"
    return FileResponse(archive, media_type="application/zip", filename=name,
                        background=BackgroundTask(shutil.rmtree, workdir, ignore_errors=True))


@router.get("/{audit_id}", response_model=AuditRecordOut)
def show_audit(audit_id: str, database: DatabaseDep, reader: ReviewerDep) -> AuditRecordOut:
    with read_errors():
        return reads.show_record(database, reader, audit_id)


@router.post("/{audit_id}/reviews", status_code=201)
def review_audit(audit_id: str, body: ReviewIn, database: DatabaseDep, reviewer: ReviewerDep) -> dict[str, Any]:
    """Confirm or dispute the record's current verdicts, claim by claim (a chained event)."""
    with read_errors():
        try:
            return reviews.submit_review(database, reviewer, audit_id, body)
        except reviews.ReviewConflict as exc:
            raise ApiError(409, str(exc), code="verdicts_changed", param="evaluation_id") from exc
        except reviews.ReviewError as exc:
            raise ApiError(400, str(exc), code="invalid_review", param="claims") from exc
