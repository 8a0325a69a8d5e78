"""Driving the load: open-loop Poisson arrivals at a rate, or a closed loop of N users; always bounded.

Open loop (the regime users meet: arrivals do not wait for answers): inter-arrival times are exponential with
mean 1/rate, from a seeded generator, so two runs send the same schedule. `max_concurrency` caps requests in
flight (a client's own limit); an arrival that finds the cap full waits, and is counted as `delayed`, since
the run is then no longer purely open-loop. Closed loop: each of `users` sends its next request as soon as its
previous one ends.

Bounds: no request is sent after `duration_s` or beyond `max_requests`; requests still in flight then get
`drain_s` to finish, after which they are cancelled and counted as such (status 0, error "cancelled").
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import httpx

from auditor.loadgen.client import Result, send
from auditor.loadgen.workload import PlannedRequest

MAX_DURATION_S = 3600.0
MAX_REQUESTS = 100_000


@dataclass(slots=True)
class LoadSpec:
    base_url: str
    rate: float | None = None            # requests per second (open loop)
    users: int | None = None             # closed loop
    duration_s: float = 30.0
    max_requests: int = MAX_REQUESTS
    max_concurrency: int = 256
    max_tokens: int = 64
    model: str = "auditor"
    api_key: str | None = None
    timeout_s: float = 120.0
    drain_s: float = 120.0
    seed: int = 0

    def check(self) -> None:
        if (self.rate is None) == (self.users is None):
            raise ValueError("give either a rate (open loop) or a number of users (closed loop)")
        if self.rate is not None and not 0 < self.rate <= 10_000:
            raise ValueError("the rate must be above 0 and at most 10000 requests/s")
        if self.users is not None and not 1 <= self.users <= 10_000:
            raise ValueError("users must be between 1 and 10000")
        if not 0 < self.duration_s <= MAX_DURATION_S:
            raise ValueError(f"the duration must be above 0 and at most {MAX_DURATION_S:.0f} s")
        if not 1 <= self.max_requests <= MAX_REQUESTS:
            raise ValueError(f"the request count must be between 1 and {MAX_REQUESTS}")
        if not 1 <= self.max_concurrency <= 10_000:
            raise ValueError("max concurrency must be between 1 and 10000")
        if not 1 <= self.max_tokens <= 8192:
            raise ValueError("max tokens must be between 1 and 8192")
        if not 0 < self.timeout_s <= MAX_DURATION_S or not 0 <= self.drain_s <= MAX_DURATION_S:
            raise ValueError(f"the request timeout must be above 0 and at most {MAX_DURATION_S:.0f} s")

    @property
    def expected_requests(self) -> int:
        """What the progress bar counts toward (closed loop: the cap, or a guess from nothing: the cap)."""
        if self.rate is not None:
            return max(1, min(self.max_requests, round(self.rate * self.duration_s)))
        return self.max_requests


@dataclass(slots=True)
class RunResult:
    results: list[Result]
    elapsed_s: float                 # from the first send to the last answer
    delayed: int = 0                 # open-loop arrivals that waited for a free slot
    cancelled: int = 0
    started_wall: float = 0.0        # time.time() at the start, to find the run's records
    notes: list[str] = field(default_factory=list)


Progress = Callable[[Result], None]


async def run_load(spec: LoadSpec, requests: Iterator[PlannedRequest], *, on_result: Progress | None = None) -> RunResult:
    spec.check()
    headers = {"Authorization": f"Bearer {spec.api_key}"} if spec.api_key else {}
    limit = spec.users or spec.max_concurrency
    limits = httpx.Limits(max_connections=limit, max_keepalive_connections=limit)
    timeout = httpx.Timeout(spec.timeout_s, connect=min(10.0, spec.timeout_s))
    results: list[Result] = []
    report = on_result or (lambda _result: None)
    started_wall = time.time()
    async with httpx.AsyncClient(base_url=spec.base_url, headers=headers, limits=limits, timeout=timeout) as client:
        started = time.perf_counter()
        deadline = started + spec.duration_s

        async def one(request: PlannedRequest) -> None:
            result = await send(client, request, model=spec.model, max_tokens=spec.max_tokens, started=started)
            results.append(result)
            report(result)

        if spec.rate is not None:
            tasks, delayed = await _open_loop(spec, requests, one, started, deadline)
        else:
            tasks, delayed = _closed_loop(spec, requests, one, deadline), 0
        cancelled = await _drain(tasks, spec.drain_s)
        elapsed = time.perf_counter() - started
    for _ in range(cancelled):
        results.append(Result(-1, "", 0.0, error="cancelled"))
    return RunResult(results, elapsed, delayed=delayed, cancelled=cancelled, started_wall=started_wall)


async def _open_loop(spec: LoadSpec, requests: Iterator[PlannedRequest], one: Callable, started: float,
                     deadline: float) -> tuple[list[asyncio.Task[None]], int]:
    assert spec.rate is not None
    rng = random.Random(spec.seed)
    slots = asyncio.Semaphore(spec.max_concurrency)
    tasks: list[asyncio.Task[None]] = []
    delayed = 0
    next_at = started

    async def held(request: PlannedRequest) -> None:
        try:
            await one(request)
        finally:
            slots.release()

    for _ in range(spec.max_requests):
        next_at += rng.expovariate(spec.rate)
        if next_at >= deadline:
            break
        await asyncio.sleep(max(0.0, next_at - time.perf_counter()))
        if slots.locked():
            # Only a wait for the cap may end the schedule early: a client merely behind its schedule (a busy
            # machine) still sends every arrival planned before the deadline, so a seed means one schedule.
            delayed += 1
            await slots.acquire()
            if time.perf_counter() >= deadline:
                slots.release()
                break
        else:
            await slots.acquire()
        tasks.append(asyncio.create_task(held(next(requests))))
    return tasks, delayed


def _closed_loop(spec: LoadSpec, requests: Iterator[PlannedRequest], one: Callable,
                 deadline: float) -> list[asyncio.Task[None]]:
    assert spec.users is not None
    budget = [spec.max_requests]

    async def user() -> None:
        while time.perf_counter() < deadline and budget[0] > 0:
            budget[0] -= 1
            await one(next(requests))

    return [asyncio.create_task(user()) for _ in range(spec.users)]


async def _drain(tasks: list[asyncio.Task[None]], drain_s: float) -> int:
    """Wait for what is in flight, at most drain_s; cancel the rest. Returns how many were cancelled."""
    if not tasks:
        return 0
    _done, pending = await asyncio.wait(tasks, timeout=drain_s)
    for task in pending:
        task.cancel()
    await asyncio.gather(*pending, return_exceptions=True)
    return len(pending)
