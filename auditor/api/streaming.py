"""Server-sent events for streamed completions, one choice or several (n > 1).

The stream is primed before the response starts: the first released text (or, for short or held
outputs, the committed Outcome) of every choice is awaited first, so an engine rejection is a plain 400
and an audit store failure a plain 503. After that, each choice's record is committed before its final
chunk, and `[DONE]` follows the last; if a record cannot be committed, the client gets an error event
and nothing more. Tool calls and logprobs leave in a choice's closing chunks, after its record's commit.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import anyio

from auditor.api.errors import audit_store_unavailable, engine_unavailable, error_body
from auditor.api.openai_format import ChunkFactory, closing_chunks, sse, total_usage
from auditor.serving.inference import (
    AuditUnavailable,
    BadRequest,
    EngineUnavailable,
    InferenceService,
    Outcome,
    Prepared,
)

Piece = str | Outcome
Primed = tuple[Piece, AsyncIterator[Piece]]


async def start_stream(inference: InferenceService, prepared: Prepared) -> Primed:
    """The first piece and the rest; raises BadRequest / AuditUnavailable / EngineUnavailable before any byte is sent."""
    pieces = inference.stream(prepared, durable=True)
    return await anext(pieces), pieces


async def event_stream(streams: list[Primed], make_chunk: ChunkFactory, *, include_usage: bool,
                       echo: str = "") -> AsyncIterator[str]:
    outcomes: list[Outcome] = []
    try:
        async for item in _merged(streams, make_chunk, echo):
            if isinstance(item, Outcome):
                outcomes.append(item)
            else:
                yield sse(item)
        if include_usage:
            yield sse({**make_chunk(None, None, False), "choices": [], "usage": total_usage(outcomes)})
        yield sse("[DONE]")
    except AuditUnavailable:
        error = audit_store_unavailable()
        yield sse(error_body(error.status_code, error.message, error.code))
    except EngineUnavailable as exc:
        error = engine_unavailable(str(exc))
        yield sse(error_body(error.status_code, error.message, error.code))
    except BadRequest as exc:
        yield sse(error_body(400, str(exc), exc.code, exc.param))
    finally:
        # A client that went away cancels this generator; shielded, the close still runs now (not whenever the
        # GC finalises it), so the service records the request as ended early and the engine frees its blocks.
        with anyio.CancelScope(shield=True):
            for _, rest in streams:
                await rest.aclose()


async def _merged(streams: list[Primed], make_chunk: ChunkFactory, echo: str) -> AsyncIterator[dict[str, Any] | Outcome]:
    """Chunks of every choice as they come (each tagged with its index), then each choice's Outcome."""
    if len(streams) == 1:
        async for item in _choice(*streams[0], make_chunk, 0, echo):
            yield item
        return
    queue: asyncio.Queue[dict[str, Any] | Outcome | BaseException | None] = asyncio.Queue()

    async def pump(index: int, first: Piece, rest: AsyncIterator[Piece]) -> None:
        try:
            async for item in _choice(first, rest, make_chunk, index, echo):
                await queue.put(item)
        except Exception as exc:  # noqa: BLE001 - handed to the consumer, which raises it
            await queue.put(exc)
        finally:
            await queue.put(None)

    tasks = [asyncio.create_task(pump(i, first, rest)) for i, (first, rest) in enumerate(streams)]
    try:
        running = len(tasks)
        while running:
            item = await queue.get()
            if item is None:
                running -= 1
            elif isinstance(item, BaseException):
                raise item
            else:
                yield item
    finally:
        for task in tasks:
            task.cancel()


async def _choice(first: Piece, rest: AsyncIterator[Piece], make_chunk: ChunkFactory, index: int,
                  echo: str) -> AsyncIterator[dict[str, Any] | Outcome]:
    sent = ""
    yield _indexed(make_chunk(echo, None, True), index)
    piece: Piece | None = first
    while piece is not None:
        if isinstance(piece, Outcome):
            if len(piece.text) > len(sent):  # e.g. a refusal, or the content beside tool calls, sent after the commit
                yield _indexed(make_chunk(piece.text[len(sent):], None, False), index)
            for chunk in closing_chunks(make_chunk, piece):
                yield _indexed(chunk, index)
            yield piece
            return
        sent += piece
        yield _indexed(make_chunk(piece, None, False), index)
        piece = await anext(rest, None)


def _indexed(chunk: dict[str, Any], index: int) -> dict[str, Any]:
    for choice in chunk["choices"]:
        choice["index"] = index
    return chunk
