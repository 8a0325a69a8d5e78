"""What loads after ready (`auditor.serving.on_demand.OnDemand`): loaded once whoever asks first, callers wait for
that load, and a request that names no domain is never served as if there were no detector while it loads."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

import pytest

from auditor.serving.domains import resolve_request_domain
from auditor.serving.on_demand import OnDemand


@dataclass
class _Detection:
    domains: list[str]


@dataclass
class _State:
    domains: list[str]

    def result(self) -> _Detection:
        return _Detection(self.domains)


@dataclass
class _KeywordDetector:
    """Stands in for the MiniLM detector: a prompt that mentions a dose is medical."""

    def start(self, prompt: str | None = None) -> _State:
        return _State(["medical"] if prompt and " mg" in prompt else [])


def test_threads_that_race_for_it_load_it_once_and_get_the_same_object() -> None:
    loads: list[int] = []

    def load() -> _KeywordDetector:
        loads.append(1)
        time.sleep(0.2)
        return _KeywordDetector()

    detector = OnDemand(load)
    seen: list[object] = []
    threads = [threading.Thread(target=lambda: seen.append(detector.get())) for _ in range(5)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(5)
    assert loads == [1] and len(seen) == 5 and all(found is seen[0] for found in seen)
    assert detector.loaded and detector.start("Take 20 mg of lisinopril?").result().domains == ["medical"]


def test_a_failed_load_raises_in_the_caller_and_the_next_caller_tries_again() -> None:
    attempts: list[int] = []

    def load() -> _KeywordDetector:
        attempts.append(1)
        if len(attempts) == 1:
            raise OSError("model file missing")
        return _KeywordDetector()

    detector = OnDemand(load)
    with pytest.raises(OSError, match="model file missing"):
        detector.start("Is 40 mg of atorvastatin too much?")
    assert not detector.loaded
    assert detector.start("Is 40 mg of atorvastatin too much?").result().domains == ["medical"]
    assert len(attempts) == 2


def test_a_request_that_names_no_domain_waits_for_the_detector_and_is_verified() -> None:
    release = threading.Event()

    def slow_load() -> _KeywordDetector:
        release.wait(10)
        return _KeywordDetector()

    detector = OnDemand(slow_load)
    warm_up = threading.Thread(target=detector.get)   # the warm-up thread after ready
    warm_up.start()
    resolved: list[list[str]] = []
    request = threading.Thread(target=lambda: resolved.append(resolve_request_domain(
        given=None, mode="detect", detector=detector, prompt="My doctor prescribed 5 mg of warfarin daily.",
    ).verified_under))
    request.start()
    request.join(0.3)
    assert request.is_alive() and resolved == []   # waiting for the load, not served unverified
    release.set()
    request.join(5)
    warm_up.join(5)
    assert resolved == [["medical"]]
