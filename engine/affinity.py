"""The engine core on CPUs of its own, the API process on the others (`AUDITOR_ENGINE_CPUS`, off by default).

Why: on a small CPU host the core's step loop is the service's throughput, and the scheduler, left alone, may put
API threads (HTTP, MiniLM forwards, group commits) on the core's CPU or move the step loop between CPUs; a lower
nice value (`engine.priority`) still gets its slices there. vLLM binds for the same reason (its CPU backend's
OpenMP threads to cores; vllm-ascend its worker's threads to CPU ranges of their own, "to reduce thread preemption").

Measured on two cores (README, "An eleventh session"): fresh servers served more tokens with a split in 13 of 14
paired rounds of 96 requests (1.09-1.20x at the median of three runs; without it, a server now and then ran at half
speed for a whole round); in longer rounds (480) the difference was within the host's noise either way, and by
`service_load --reference` none. So it stays an operator's choice, not the default: for a host given to one
server, or a container whose cpuset a second replica does not share.

"auto" gives the core `AUDITOR_ENGINE_THREADS` CPUs (all but one when that is unset) and the API process the rest,
of the CPUs this process may use, when there are at least two; "off" leaves placement to the scheduler; a CPU list
("2-7", "1,3") gives the core those. The core's torch threads then default to its CPU count. The core takes the
last CPUs: CPU 0 takes more of the interrupts (the core on CPU 0 served 0.78x of the last ones in the same rounds).
Linux only (per-thread affinity); elsewhere nothing changes.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Collection
from dataclasses import dataclass

logger = logging.getLogger("engine.affinity")

SUPPORTED = hasattr(os, "sched_setaffinity") and os.path.isdir("/proc/self/task")


@dataclass(frozen=True, slots=True)
class CpuSplit:
    core: frozenset[int]
    api: frozenset[int]


def parse_cpu_list(text: str) -> frozenset[int]:
    """"0-3,6" -> {0, 1, 2, 3, 6}; ValueError for anything else (the message names the bad part)."""
    cpus: set[int] = set()
    for part in text.replace(" ", "").split(","):
        first, dash, last = part.partition("-")
        if not first.isdigit() or (dash and not last.isdigit()):
            raise ValueError(f"engine_cpus: {part!r} is not a CPU number or range (e.g. \"2-7\" or \"1,3\")")
        low, high = int(first), int(last) if dash else int(first)
        if high < low:
            raise ValueError(f"engine_cpus: the range {part!r} runs backwards")
        cpus.update(range(low, high + 1))
    return frozenset(cpus)


def check_setting(setting: str) -> str:
    """The setting itself if it can be read ("auto", "off" or a CPU list); ValueError otherwise."""
    if setting not in ("auto", "off"):
        parse_cpu_list(setting)
    return setting


def split_cpus(setting: str, allowed: Collection[int], *, engine_threads: int | None) -> CpuSplit | None:
    """Which of the `allowed` CPUs the core and the API process run on; None: no split (placement is the
    scheduler's). ValueError for a CPU list that names CPUs not allowed, or leaves the API none."""
    allowed = frozenset(allowed)
    if setting == "off" or not SUPPORTED:
        return None
    if setting == "auto":
        wanted = engine_threads if engine_threads is not None else len(allowed) - 1
        if len(allowed) < 2 or not 1 <= wanted < len(allowed):
            return None   # the core's threads need every CPU there is: pinning would only crowd them
        core = frozenset(sorted(allowed)[-wanted:])   # the last ones: CPU 0 takes more of the interrupts
    else:
        core = parse_cpu_list(setting)
        if not core <= allowed:
            raise ValueError(f"engine_cpus: CPUs {format_cpus(core - allowed)} are not among the CPUs this process may "
                             f"use ({format_cpus(allowed)})")
        if core == allowed:
            raise ValueError(f"engine_cpus: {setting!r} leaves no CPU for the API process; name fewer, or \"off\"")
    return CpuSplit(core=core, api=allowed - core)


def pin_this_process(cpus: Collection[int]) -> int:
    """Every thread of this process onto `cpus` (threads started later inherit it from the one that starts
    them). Returns how many threads moved; 0 where unsupported or refused (a sandbox: serve as before)."""
    if not SUPPORTED or not cpus:
        return 0
    moved = 0
    for name in os.listdir("/proc/self/task"):
        try:
            os.sched_setaffinity(int(name), cpus)
        except ProcessLookupError:   # the thread ended meanwhile
            continue
        except OSError as exc:
            logger.warning("cannot pin this process to CPUs %s: %s", format_cpus(cpus), exc)
            return moved
        moved += 1
    return moved


def format_cpus(cpus: Collection[int]) -> str:
    return ",".join(str(cpu) for cpu in sorted(cpus))
