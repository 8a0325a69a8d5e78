"""POST /v1/imports: import another LLM's outputs (JSONL: prompt, output, domain, model, timestamp per line) into
the trail for scoring and re-audit. Auditors import into their own tenant; admins may name one."""

from __future__ import annotations

import hashlib
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from starlette.concurrency import run_in_threadpool

from auditor.api.deps import ReaderDep, ServicesDep
from auditor.api.errors import ApiError
from auditor.jobs.imports import ImportFailed, ImportRejected, import_lines

router = APIRouter(tags=["re-audit"])


@router.post("/v1/imports", status_code=201)
async def import_outputs(request: Request, services: ServicesDep, reader: ReaderDep,
                         strict: Annotated[bool, Query(description="reject the whole file on a malformed line")] = False,
                         filename: Annotated[str, Query(max_length=256)] = "upload.jsonl",
                         tenant: Annotated[str | None, Query(max_length=128, description="admins only")] = None,
                         ) -> dict[str, Any]:
    if tenant is not None and reader.tenant_scope is not None and tenant != reader.tenant_scope:
        raise ApiError(403, "only admins may import into another tenant", code="insufficient_role", param="tenant")
    body = await request.body()
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ApiError(400, f"the body is not UTF-8 (byte {exc.start})", code="invalid_encoding") from exc
    try:
        result = await run_in_threadpool(
            import_lines, services.database, text.splitlines(), settings=services.settings,
            tenant=tenant or reader.tenant, strict=strict, filename=filename, sha256=hashlib.sha256(body).hexdigest())
    except ImportRejected as exc:
        raise ApiError(400, str(exc), code="import_rejected") from exc
    except ImportFailed as exc:
        raise ApiError(400, str(exc), code="import_failed") from exc
    return {"object": "import", "id": result.import_id, "lines": result.lines, "imported": result.imported,
            "skipped": result.skipped, "errors": [{"line": e.line, "message": e.message} for e in result.errors]}
