"""What every validator shares: the `Finding` it returns, the registry it is listed in, package versions."""

from __future__ import annotations

import importlib.metadata
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from rules.claims import Document
from rules.report import Evidence, Resolution, Verdict

# Bumped whenever a validator's logic changes, so re-audits can tell evaluations apart.
EVALUATOR_VERSION = "rules-validators/1.0.0"


@dataclass(slots=True)
class CitationCheck:
    kind: str                       # case | statute | identifier | icd10cm_code
    resolution: Resolution
    supports_claim: bool | None


@dataclass(slots=True)
class Finding:
    """One validator's verdict on one claim."""

    text: str
    span: tuple[int, int]
    kind: str
    verdict: Verdict
    confidence: float
    evidence: list[Evidence]
    subject: str | None = None
    citation: CitationCheck | None = None
    # (subject, attribute, value) a claim asserts, for the within-answer consistency check
    assertion: tuple[str, str, Any] | None = None
    meta: dict[str, Any] = field(default_factory=dict)


Validator = Callable[[Document, Mapping[str, Any]], list[Finding]]
VALIDATORS: dict[str, Validator] = {}


def validator(name: str) -> Callable[[Validator], Validator]:
    """Register a validator under the name rule packs refer to."""

    def register(fn: Validator) -> Validator:
        assert name not in VALIDATORS, f"validator {name} registered twice"
        VALIDATORS[name] = fn
        return fn

    return register


@cache
def package_version(distribution: str) -> str:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def package_source(distribution: str) -> str:
    return f"{distribution}=={package_version(distribution)}"


def kg_evidence(description: str, provenance: Any, *, kind: str = "kg_fact") -> Evidence:
    """Evidence from a KG entity or fact, carrying its provenance."""
    if provenance is None:
        return Evidence(kind=kind, description=description, source="knowledge graph")
    return Evidence(kind=kind, description=description, source=provenance.source,
                    locator=provenance.locator, as_of=provenance.as_of)


def possible_fabrication(reference: str, index: str) -> Evidence:
    """A reference the offline index does not hold, where the index does not cover its range completely: it may be
    fabricated, or real and outside what the KG holds (issue 48). Marked so records and the console can show it."""
    return Evidence(kind="possible_fabrication", description=f"possible fabrication: {reference} is not in the "
                    f"{index}; coverage of this range is partial, so absence is not proof that it does not exist")
