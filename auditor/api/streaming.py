"""Server-sent events for streamed completions.

The stream is primed before the response starts: the first released text (or, for short or held
outputs, the committed Outcome) is awaited first, so an engine rejection is a plain 400 and an audit
store failure a plain 503. After that, the record is committed before the final chunk and `[DONE]`;
if it cannot be, the client gets an error event and nothing more.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import anyio

from auditor.api.errors import audit_store_unavailable, error_body
from auditor.api.openai_format import ChunkFactory, sse, usage
from auditor.serving.inference import AuditUnavailable, BadRequest, InferenceService, Outcome, Prepared
from auditor.serving.upstream import UpstreamError

Piece = str | Outcome


async def start_stream(inference: InferenceService, prepared: Prepared) -> tuple[Piece, AsyncIterator[Piece]]:
    """The first piece and the rest; raises BadRequest / AuditUnavailable before any byte is sent."""
    pieces = inference.stream(prepared, durable=True)
    return await anext(pieces), pieces


async def event_stream(first: Piece, rest: AsyncIterator[Piece], make_chunk: ChunkFactory, *,
                       include_usage: bool) -> AsyncIterator[str]:
    sent = ""
    yield sse(make_chunk("", None, True))
    try:
        piece: Piece | None = first
        while piece is not None:
            if isinstance(piece, Outcome):
                if len(piece.text) > len(sent):  # e.g. an input-stage refusal message, sent after the commit
                    yield sse(make_chunk(piece.text[len(sent):], None, False))
                final = make_chunk(None, piece.finish_reason, False)
                final["audit"] = piece.audit_summary()
                yield sse(final)
                if include_usage:
                    yield sse({**make_chunk(None, None, False), "choices": [], "usage": usage(piece)})
                yield sse("[DONE]")
                return
            sent += piece
            yield sse(make_chunk(piece, None, False))
            piece = await anext(rest, None)
    except AuditUnavailable:
        error = audit_store_unavailable()
        yield sse(error_body(error.status_code, error.message, error.code))
    except BadRequest as exc:
        yield sse(error_body(400, str(exc), exc.code, exc.param))
    except UpstreamError as exc:       # the upstream failed mid-answer: 502/504 in the OpenAI shape
        yield sse(error_body(exc.status_code, exc.message, exc.code))
    finally:
        # A client that went away cancels this generator; shielded, the close still runs now (not whenever the
        # GC finalises it), so the service records the request as ended early and the engine frees its blocks.
        with anyio.CancelScope(shield=True):
            await rest.aclose()
