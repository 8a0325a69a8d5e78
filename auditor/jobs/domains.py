"""Which domain(s) a stored record is scored under, for live scoring, re-audits and imported outputs alike.

- A domain the request (or the imported line) named is used as is.
- A record whose tenant had detection `off` when it was written is `not_applicable`: nobody said what it is.
- Otherwise (detected at request time, imported without a domain, or written before detection existed
  with no domain) the domain is detected again from the stored prompt and the whole output, so the
  evaluation covers every sentence with the current detector; the detection is kept in the evaluation.
  Text of no domain is `not_applicable`, with the best score as the reason.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from auditor.trail.domain_source import resolution_details, resolution_of, source_of
from knowledge_graphs.detection import Detection, DomainDetector


@dataclass(frozen=True, slots=True)
class ScoringDomains:
    domains: tuple[str, ...]                  # best first; empty when not applicable
    details: dict[str, Any] | None            # stored in the evaluation (None: the domain was given)
    not_applicable: str | None = None         # why no validator applies


def prompt_text(stored_prompt: str | None) -> str:
    """The user's words in a stored prompt: chat prompts are stored as the JSON list of messages."""
    if not stored_prompt:
        return ""
    try:
        messages = json.loads(stored_prompt)
    except ValueError:
        return stored_prompt
    if isinstance(messages, list) and all(isinstance(m, dict) for m in messages):
        return "\n".join(str(m.get("content", "")) for m in messages if m.get("role") in ("user", "tool"))
    return stored_prompt


def scoring_domains(*, domain: str | None, details: Mapping[str, Any] | None, prompt: str | None, text: str,
                    load_detector: Callable[[], DomainDetector]) -> ScoringDomains:
    """`load_detector` is called only when the domain must be detected (records that named one need no model)."""
    resolution = resolution_of(details) or {}
    if source_of(details, domain) == "given" and domain:
        return ScoringDomains((domain,), None)
    mode = resolution.get("mode")
    if mode == "off":
        return ScoringDomains((), resolution_details(source="none", mode=mode),
                              "the record names no domain and domain detection was off for its tenant")
    detection = load_detector().detect(prompt_text(prompt), text)
    details_out = resolution_details(source="detected" if detection.domains else "none", mode=mode,
                                     detection=detection.to_dict(), verified_under=list(detection.domains))
    if not detection.domains:
        return ScoringDomains((), details_out, _no_domain_reason(detection))
    return ScoringDomains(detection.domains, details_out)


def _no_domain_reason(detection: Detection) -> str:
    best = max(detection.scores, key=detection.scores.__getitem__, default=None)
    score = f"; best {best} {detection.scores[best]:.2f}" if best else ""
    return f"the text belongs to no domain (no detection score reached {detection.threshold}{score})"


class DetectorUnavailable(RuntimeError):
    """The domain detector could not be loaded (retryable: the record is not at fault)."""


_detector: DomainDetector | None = None
_lock = threading.Lock()


def install_detector(detector: DomainDetector) -> None:
    """Share a detector already loaded in this process (the app's, for its embedded worker)."""
    global _detector
    with _lock:
        _detector = detector


def shared_detector() -> DomainDetector:
    """This process's detector over the configured domains' KGs, loaded on first use (MiniLM + linkers)."""
    global _detector
    with _lock:
        if _detector is None:
            from auditor.settings import get_settings
            from knowledge_graphs import load_kg

            settings = get_settings()
            try:
                _detector = DomainDetector({d: load_kg(d) for d in settings.domains},
                                           threshold=settings.domain_detection_threshold,
                                           embedding_cache=settings.domain_detection_embedding_cache,
                                           embedding_dtype=settings.embedding_dtype)
            except Exception as exc:   # noqa: BLE001 - any load failure means the same to the caller
                raise DetectorUnavailable(f"cannot load the domain detector: {exc}") from exc
        return _detector
