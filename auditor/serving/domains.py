"""Which domain(s) a request is audited under: the one it names, or the ones detected from its text.

The tenant's mode decides what happens when a request names no domain (X-Domain or a domain model id):
`detect` (the default) detects it from the prompt before generation and from each output sentence as it
is gated; `require` refuses the request (400); `off` serves it unverified, as before detection existed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from auditor.trail.domain_source import resolution_details
from knowledge_graphs.detection import Detection, DetectionState, DomainDetector


class DomainRequired(ValueError):
    """The tenant requires every request to name its domain."""


@dataclass(slots=True)
class DomainResolution:
    mode: str | None                             # the tenant's mode when it was consulted (no domain given)
    given: str | None = None
    state: DetectionState | None = None          # running detection over prompt + output so far
    verified_under: list[str] = field(default_factory=list)   # grows as the output reveals more domains

    @property
    def domain(self) -> str | None:
        """The record's domain: the given one, else the best detected one."""
        if self.given is not None:
            return self.given
        detection = self.detection
        ranked = sorted(self.verified_under, key=lambda d: -(detection.scores.get(d, 0.0) if detection else 0.0))
        return ranked[0] if ranked else None

    @property
    def detecting(self) -> bool:
        return self.state is not None

    @property
    def detection(self) -> Detection | None:
        return self.state.result() if self.state is not None else None

    def observe(self, text: str) -> list[str]:
        """Feed a piece of output to the detection; return every domain it should be verified under."""
        if self.state is not None:
            for domain in self.state.add(text).domains:
                if domain not in self.verified_under:
                    self.verified_under.append(domain)
        return list(self.verified_under)

    def details(self) -> dict[str, Any]:
        detection = self.detection
        source = "given" if self.given else ("detected" if self.verified_under else "none")
        return resolution_details(source=source, mode=self.mode, verified_under=self.verified_under,
                                  detection=detection.to_dict() if detection is not None else None)


def resolve_request_domain(*, given: str | None, mode: str, detector: DomainDetector | None,
                           prompt: str) -> DomainResolution:
    """The request's domain resolution before generation (raises DomainRequired in `require` mode)."""
    if given is not None:
        return DomainResolution(None, given=given, verified_under=[given])
    if mode == "require":
        raise DomainRequired("this tenant requires every request to name its domain: send X-Domain "
                             "(finance, legal or medical) or use a domain model such as auditor-medical")
    if mode == "off" or detector is None:
        return DomainResolution(mode)
    state = detector.start(prompt)
    return DomainResolution(mode, state=state, verified_under=list(state.result().domains))
