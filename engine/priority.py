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
import sys
import threading
from collections.abc import Callable, Collection
from concurrent.futures import ThreadPoolExecutor
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
    """One thread that runs what it is given (`run`) at the priority the process had when it was made."""

    def __init__(self, name: str) -> None:
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=name)
        # its worker is started now (by this first call), so at this thread's priority, and kept for good
        self.native_id: int = self._executor.submit(threading.get_native_id).result()

    def run(self, call: Callable[[], Any]) -> Any:
        """`call()` on this thread; returns its result or raises its exception."""
        return self._executor.submit(call).result()
