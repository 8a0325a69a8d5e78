"""Group commit for the request path's audit writes: writes that are ready together share one transaction.

One writer thread takes every write queued while the previous commit ran and commits them together, in
arrival order (so the chain order is the commit order, as before). Each caller is answered only after the
commit that holds its write, so "no output without its committed row" holds exactly as with one commit per
write; on SQLite (one fsync per commit at synchronous=FULL) a group of N costs about one commit instead of N.

Writes that know how to run together (a `combine` attribute, e.g. chained record appends: one head lock, one
multi-row insert) are handed over together, in arrival order, where the first of them stood.

If a group's transaction fails with an error that one write could have caused (an integrity or data error, a
bug), each write of the group is retried alone, so one bad write cannot fail the others. If it fails because
the store is down or stuck, every write of the group fails at once. No write waits longer than `timeout_s`
from when it was queued: one still queued past that fails with TimeoutError without being tried.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sqlalchemy.engine import Connection
from sqlalchemy.exc import DataError, IntegrityError, ProgrammingError

from auditor.store.database import Database

logger = logging.getLogger("auditor.trail")

Write = Callable[[Connection], Any]
_ITEM_SPECIFIC = (IntegrityError, DataError, ProgrammingError, ValueError, TypeError, KeyError)
_MIN_TIMEOUT_S = 0.05


@dataclass(slots=True)
class _Pending:
    write: Write
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future[Any]
    deadline: float


class GroupCommitter:
    def __init__(self, database: Database, *, timeout_s: float, max_group: int = 64) -> None:
        self.database = database
        self.timeout_s = timeout_s
        self.max_group = max_group
        self.commits = 0          # transactions committed
        self.writes = 0           # writes they held
        self._queue: queue.SimpleQueue[_Pending | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    async def write(self, write: Write) -> Any:
        """Run `write(conn)` in a write transaction shared with the other writes ready now; return its result
        once committed. Raises what the commit raised (SQLAlchemyError, or TimeoutError if it waited too long).
        A caller that is cancelled while waiting does not withdraw its write."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        self._ensure_thread()
        self._queue.put(_Pending(write, loop, future, time.monotonic() + self.timeout_s))
        return await asyncio.shield(future)

    def stop(self) -> None:
        with self._lock:
            thread, self._thread = self._thread, None
        if thread is not None:
            self._queue.put(None)
            thread.join(timeout=self.timeout_s * 2 + 1)

    def _ensure_thread(self) -> None:
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="audit-group-commit", daemon=True)
                self._thread.start()

    def _run(self) -> None:
        while True:
            first = self._queue.get()
            if first is None:
                return
            group = [first]
            while len(group) < self.max_group:
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                if item is None:
                    self._queue.put(None)   # stop after this group
                    break
                group.append(item)
            self._commit_group(group)

    def _commit_group(self, group: list[_Pending]) -> None:
        now = time.monotonic()
        live = []
        for item in group:
            if item.deadline <= now:
                _answer(item, error=TimeoutError(f"audit write queued longer than {self.timeout_s} s"))
            else:
                live.append(item)
        if not live:
            return
        timeout = max(min(item.deadline for item in live) - now, _MIN_TIMEOUT_S)
        try:
            with self.database.write_connection(timeout_s=timeout) as conn:
                results = _run_writes(conn, [item.write for item in live])
        except _ITEM_SPECIFIC as exc:
            if len(live) == 1:
                _answer(live[0], error=exc)
                return
            logger.warning("a group of %d audit writes failed (%s); retrying each alone", len(live), exc)
            for item in live:
                self._commit_group([item])
            return
        except BaseException as exc:  # noqa: BLE001 - the store is down: every caller hears it
            for item in live:
                _answer(item, error=exc)
            return
        self.commits += 1
        self.writes += len(live)
        for item, result in zip(live, results, strict=True):
            _answer(item, result=result)


def _run_writes(conn: Connection, writes: list[Write]) -> list[Any]:
    """Each write's result; writes sharing a `combine` run as one call of it, at the first one's turn."""
    results: list[Any] = [None] * len(writes)
    done: set[int] = set()
    for index, write in enumerate(writes):
        if index in done:
            continue
        combine = getattr(write, "combine", None)
        if combine is None:
            results[index] = write(conn)
            continue
        batch = [i for i in range(index, len(writes)) if getattr(writes[i], "combine", None) == combine]
        for i, result in zip(batch, combine(conn, [writes[i] for i in batch]), strict=True):
            results[i] = result
        done.update(batch)
    return results


def _answer(item: _Pending, *, result: Any = None, error: BaseException | None = None) -> None:
    def resolve() -> None:
        if item.future.done():
            return
        if error is not None:
            item.future.set_exception(error)
        else:
            item.future.set_result(result)

    try:
        item.loop.call_soon_threadsafe(resolve)
    except RuntimeError:   # that event loop is closed: nobody is waiting any more
        pass
