"""Every error the API returns has OpenAI's shape: {"error": {"message", "type", "code"}}."""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy.exc import SQLAlchemyError
from starlette.exceptions import HTTPException as StarletteHTTPException

logger = logging.getLogger("auditor.api")

_TYPES = {
    400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
    404: "not_found_error", 405: "invalid_request_error", 413: "invalid_request_error",
    422: "invalid_request_error", 429: "rate_limit_error", 503: "service_unavailable",
}


class ApiError(Exception):
    """Raised by dependencies and routers; rendered in the OpenAI error shape."""

    def __init__(self, status_code: int, message: str, *, code: str | None = None, param: str | None = None) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.message = message
        self.code = code
        self.param = param


def error_body(status_code: int, message: str, code: str | None = None, param: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": _TYPES.get(status_code, "server_error"), "param": param, "code": code}}


def error_response(status_code: int, message: str, code: str | None = None, param: str | None = None,
                   headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse(error_body(status_code, message, code, param), status_code=status_code, headers=headers)


def audit_store_unavailable() -> ApiError:
    return ApiError(503, "the audit store is unavailable; no output is returned without its audit record",
                    code="audit_store_unavailable")


def engine_unavailable(detail: str) -> ApiError:
    return ApiError(503, f"the inference engine is unavailable ({detail}); the request was recorded as failed, "
                    "retry shortly", code="engine_unavailable")


ENGINE_RETRY_AFTER = {"Retry-After": "2"}


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(ApiError)
    async def _api_error(_request: Request, exc: ApiError) -> JSONResponse:
        headers = {"WWW-Authenticate": "Bearer"} if exc.status_code == 401 else None
        return error_response(exc.status_code, exc.message, exc.code, exc.param, headers)

    @app.exception_handler(RequestValidationError)
    async def _validation_error(_request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = exc.errors()
        first = errors[0] if errors else {"loc": (), "msg": "invalid request"}
        param = ".".join(str(p) for p in first.get("loc", ()) if p not in ("body", "query", "header", "path"))
        if first.get("type") == "extra_forbidden":   # nothing a client sends is silently dropped: name them all
            names = [".".join(str(p) for p in e.get("loc", ()) if p != "body") for e in errors
                     if e.get("type") == "extra_forbidden"]
            return error_response(400, f"{', '.join(names)} {'is' if len(names) == 1 else 'are'} not supported by "
                                  "this service (docs/openai_compatibility.md lists every field and what happens to "
                                  "it)", "unsupported_parameter", param)
        message = f"{param or 'request'}: {first.get('msg', 'invalid value')}"
        if len(errors) > 1:
            message += f" (and {len(errors) - 1} more)"
        return error_response(400, message, "invalid_parameter", param or None)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(_request: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code)
        return error_response(exc.status_code, str(exc.detail), code, headers=getattr(exc, "headers", None))

    @app.exception_handler(SQLAlchemyError)
    async def _database_error(_request: Request, exc: SQLAlchemyError) -> JSONResponse:
        logger.error("audit store error: %s: %s", exc.__class__.__name__, str(exc).splitlines()[0][:300])
        error = audit_store_unavailable()
        return error_response(error.status_code, error.message, error.code)
