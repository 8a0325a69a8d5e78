"""n > 1: parallel samples of one prompt, each its own audited request, sharing the prompt's KV blocks.

Choice 0 runs first; the others join once its first output has arrived, when its prompt's full KV blocks
are computed and published in the prefix cache, so they reuse those blocks instead of computing the prompt
again (same tenant, same salt). Each choice is its own record (gate, claims and verdicts are per text),
named in `details.choice` with the group's first audit id; with a seed, choice i samples with seed + i.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import TypeVar

import anyio

from auditor.serving.inference import Prepared

T = TypeVar("T")
_INT64 = 2**63


def fork_choices(prepared: Prepared, n: int) -> list[Prepared]:
    """The n choices of a prepared request; choice 0 is `prepared` itself."""
    prepared.surface.n, prepared.surface.group_id = n, prepared.audit_id
    if n == 1:
        return [prepared]
    prepared.prefilled = anyio.Event()
    return [prepared] + [_fork(prepared, index) for index in range(1, n)]


def _fork(prepared: Prepared, index: int) -> Prepared:
    params = dataclasses.replace(prepared.params, extra_args=dict(prepared.params.extra_args),
                                 stop=list(prepared.params.stop))
    if params.seed is not None:  # distinct, reproducible samples; wrapped inside int64
        params.seed = (params.seed + index + _INT64) % (2 * _INT64) - _INT64
    surface = dataclasses.replace(prepared.surface, choice_index=index, tool_result_checks=list(
        prepared.surface.tool_result_checks), tool_calls=[], delivered_call_ids=[], structured=None)
    return dataclasses.replace(prepared, audit_id=str(uuid.uuid4()), params=params, surface=surface,
                               started=time.perf_counter(), prefilled=None)


async def run_choices(choices: list[Prepared], start: Callable[[Prepared], Awaitable[T]]) -> list[T]:
    """`start` every choice, the others once choice 0's prompt is in the KV cache (or choice 0 is over)."""
    first = asyncio.ensure_future(start(choices[0]))
    if len(choices) == 1:
        return [await first]
    assert choices[0].prefilled is not None
    prefilled = asyncio.ensure_future(choices[0].prefilled.wait())
    await asyncio.wait([first, prefilled], return_when=asyncio.FIRST_COMPLETED)
    prefilled.cancel()
    rest = [asyncio.ensure_future(start(choice)) for choice in choices[1:]]
    try:
        return list(await asyncio.gather(first, *rest))
    except BaseException:
        for task in (first, *rest):
            task.cancel()
        await asyncio.gather(first, *rest, return_exceptions=True)   # each cancelled choice records itself
        raise
