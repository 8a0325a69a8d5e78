"""For tests that run an engine core in a fresh interpreter: kill it and wait for the client's restart."""

from __future__ import annotations

import asyncio
import os
import signal

from engine.core_client import EngineCoreClient


async def kill_and_await_restart(client: EngineCoreClient) -> int:
    """SIGKILL the client's core, wait (at most 30 s) until a new one has said hello; returns the new pid."""
    first = client.pid
    assert first is not None
    os.kill(first, signal.SIGKILL)
    for _ in range(600):
        await asyncio.sleep(0.05)
        if client.pid not in (None, first) and client.info.get("pid") == client.pid:
            break
    await client.start()
    assert client.pid is not None and client.pid != first
    return client.pid
