"""Refuse NaN and Infinity in JSON request bodies.

Python's JSON parser (and so FastAPI's) reads them, but they are not JSON: PostgreSQL refuses them in a JSON
column, so a body that carries one into a record (a `logit_bias` value, an import's metadata) failed as 503
"audit store unavailable" after the model ran; and other readers of an exported record cannot parse it. They
are refused at the edge, with a 400 naming the problem, on every route (an app-wide dependency)."""

from __future__ import annotations

import json

from fastapi import Request

from auditor.api.errors import ApiError
from auditor.trail.storable import refuse_non_finite

_TOKENS = (b"NaN", b"Infinity")


async def refuse_non_finite_numbers(request: Request) -> None:
    if request.method not in ("POST", "PUT", "PATCH") or "json" not in request.headers.get("content-type", ""):
        return
    body = await request.body()   # already read and cached for the route's own parsing
    if not any(token in body for token in _TOKENS):
        return   # the common case costs one bytes search; only a body naming a constant is parsed again
    try:
        json.loads(body, parse_constant=refuse_non_finite)
    except json.JSONDecodeError:
        return   # not JSON at all: the route's own parsing answers that
    except ValueError as exc:
        raise ApiError(400, str(exc), code="invalid_number") from None
    except RecursionError:
        return   # nesting past the parser's depth: the route's own parsing refuses it
