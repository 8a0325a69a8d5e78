"""The verification report: claims with verdicts and evidence, citations, scores and versions (pydantic).

These models are the contract between `rules.verify` and its callers (the service's safety gate, the
audit log, the CLI). Everything here is plain data; the scoring maths lives in `rules.scores`.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

Verdict = Literal["supported", "contradicted", "unverifiable"]
Severity = Literal["low", "medium", "high", "critical"]
OnFail = Literal["annotate", "redact", "block", "refuse"]
Resolution = Literal["resolved", "unconfirmed", "invalid"]

# Strength order used to pick the single action a gate should take.
ACTION_ORDER: dict[str, int] = {"annotate": 0, "redact": 1, "block": 2, "refuse": 3}
SEVERITY_ORDER: dict[str, int] = {"low": 0, "medium": 1, "high": 2, "critical": 3}


class Evidence(BaseModel):
    """Why a verdict was reached: a KG fact, a registry hit or miss, a checksum, a list snapshot, ..."""

    kind: str                      # kg_fact | registry | checksum | list_snapshot | rule | fabrication | consistency
    description: str
    source: str | None = None      # "python-stdnum==2.2", "FDA label: Glucophage ...", "FATF plenary statement"
    locator: str | None = None     # table name, label section, URL, statute
    as_of: str | None = None       # ISO date of the source / snapshot
    rule_id: str | None = None     # pack rule whose validator produced this item


class Claim(BaseModel):
    text: str
    span: tuple[int, int]          # [start, end) character offsets into the verified text
    kind: str                      # identifier | dose | indication | list_membership | case_citation | ...
    verdict: Verdict
    confidence: float = Field(ge=0.0, le=1.0)
    evidence: list[Evidence] = Field(default_factory=list)
    rule_ids: list[str] = Field(default_factory=list)
    subject: str | None = None     # KG entity id the claim is about, when linked
    domain: str | None = None      # the domain whose checkers judged it (an answer may span several)


class Citation(BaseModel):
    """A cited source (case, statute, identifier, code) and whether it resolves and supports its claim."""

    text: str
    span: tuple[int, int]
    kind: str
    resolution: Resolution         # resolved: found in a registry/KG; unconfirmed: well-formed, not found; invalid
    supports_claim: bool | None    # does the record agree with what the text attaches to it (None: nothing to judge)
    claim_index: int               # index into Report.claims


class GateAction(BaseModel):
    """What the pack says to do about one contradicted claim."""

    claim_index: int
    rule_id: str
    severity: Severity
    on_fail: OnFail


class DomainVersions(BaseModel):
    kg: str | None
    rule_pack: str


class Versions(BaseModel):
    kg: str | None
    rule_pack: str
    packages: dict[str, str]
    evaluator: str
    other_domains: dict[str, DomainVersions] = Field(default_factory=dict)   # domains the answer also touched


class Report(BaseModel):
    domain: str
    claims: list[Claim]
    citations: list[Citation]
    fer: float | None
    citation_confidence: float | None
    joint_score: float | None
    versions: Versions
    gate_actions: list[GateAction] = Field(default_factory=list)

    def strongest_action(self) -> GateAction | None:
        """The gate action to apply: strongest on_fail first, then highest severity; None when nothing failed."""
        if not self.gate_actions:
            return None
        return max(self.gate_actions, key=lambda a: (ACTION_ORDER[a.on_fail], SEVERITY_ORDER[a.severity]))

    def counts(self) -> dict[str, int]:
        out = {"supported": 0, "contradicted": 0, "unverifiable": 0}
        for claim in self.claims:
            out[claim.verdict] += 1
        return out
