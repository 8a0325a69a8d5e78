"""The API process yields the CPU to its engine core, on machines whose CPUs the two share.

Why: on a small CPU host the core's step loop is the service's throughput, and every API thread that wakes (an
HTTP request, a MiniLM forward for domain detection, a group commit) could preempt it: in paired rounds on two
cores (`python -m benchmarks.service_load --requests 480 --rounds 5 --reference DIR`) the step loop waited ~15% of
each step in the run queue, and with the API process 5 nice values lower and SCHED_BATCH (no wakeup preemption)
the median ratio to the bare engine rose 6%, 6%, 14% and 8% in four paired runs and fell 2% in a fifth (the
README's table). Where a CPU is free the API's threads still run at once; a host with cores to spare sees no
difference.

A process can lower its own threads' priority but, unprivileged, never raise it again; a child inherits the
priority of the thread that starts it. So the core is started from a thread kept at the process's first priority
(`LaunchThread`): a core restarted after a crash is not stuck at the API's lowered one. Linux only (thread ids and
SCHED_BATCH): elsewhere nothing changes.
"""

from __future__ import annotations

import logging
import os
import queue
import sys
import threading
from collections.abc import Callable, Collection
from concurrent.futures import Future
from typing import Any

logger = logging.getLogger("engine.priority")

SUPPORTED = sys.platform.startswith("linux") and hasattr(os, "SCHED_BATCH")


def lower_process_priority(steps: int, *, keep: Collection[int] = ()) -> int:
    """Every thread of this process except `keep` (native thread ids): `steps` nice values lower than `base`
    (the nice of the first kept thread, else of this thread) and SCHED_BATCH; threads started later inherit it
    from the thread that starts them. Setting from a base, not adding, so calling twice lowers once.
    Returns how many threads changed (0 where unsupported, or `steps` is 0)."""
    if steps <= 0 or not SUPPORTED:
        return 0
    base = os.getpriority(os.PRIO_PROCESS, next(iter(keep), 0))
    nice = min(19, base + steps)
    changed = 0
    for name in os.listdir("/proc/self/task"):
        tid = int(name)
        if tid in keep:
            continue
        try:
            os.setpriority(os.PRIO_PROCESS, tid, nice)
            os.sched_setscheduler(tid, os.SCHED_BATCH, os.sched_param(0))   # type: ignore[attr-defined]
        except ProcessLookupError:   # the thread ended meanwhile
            continue
        except OSError as exc:   # a sandbox that forbids it: serve as before
            logger.warning("cannot lower the API process's CPU priority: %s", exc)
            return changed
        changed += 1
    return changed


class LaunchThread:
    """A thread that runs what it is given (`run`) at the priority the process had when it was made."""

    def __init__(self, name: str) -> None:
        self._calls: queue.SimpleQueue[tuple[Callable[[], Any], Future[Any]]] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self._thread.start()

    @property
    def native_id(self) -> int:
        assert self._thread.native_id is not None   # set once started
        return self._thread.native_id

    def run(self, call: Callable[[], Any]) -> Any:
        """`call()` on this thread; returns its result or raises its exception."""
        future: Future[Any] = Future()
        self._calls.put((call, future))
        return future.result()

    def _serve(self) -> None:
        while True:
            call, future = self._calls.get()
            try:
                future.set_result(call())
            except BaseException as exc:  # noqa: BLE001 - the caller raises it
                future.set_exception(exc)
