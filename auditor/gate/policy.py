"""Domain policies applied at the input stage (intent -> required annotation or refusal).

Built in until the rule packs carry them; each policy names its rule id and the reason shown
to the client and stored in the record.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

# These are this service's own policies (not a regulator's text); stored with every policy decision.
POLICY_SOURCE = {"source": "auditor built-in domain policies", "locator": "auditor/gate/policy.py",
                 "as_of": "2026-12-02", "version": "domain-policies/1"}


@dataclass(frozen=True, slots=True)
class DomainPolicy:
    rule_id: str
    domain: str
    intents: frozenset[str]
    action: str          # annotate | refuse
    message: str


POLICIES: tuple[DomainPolicy, ...] = (
    DomainPolicy("policy.medical.disclaimer", "medical", frozenset({"medical-diagnosis", "medical-treatment"}), "annotate",
                 "Not medical advice: a clinician must confirm any diagnosis or treatment."),
    DomainPolicy("policy.finance.disclaimer", "finance", frozenset({"fin-advice", "fin-risk"}), "annotate",
                 "Not investment advice: figures must be checked against the cited filings."),
    DomainPolicy("policy.legal.disclaimer", "legal", frozenset({"legal-advice"}), "annotate",
                 "Not legal advice: citations must be checked against the reporters."),
)


def policies_for(intent: str | None, *, detected_domains: Sequence[str] = ()) -> list[DomainPolicy]:
    """The policies of the request's intent; a request that names no intent gets those of the domains
    detected in its prompt (a client must not escape a domain's policy by leaving out a header). A domain
    the client named itself keeps the intent-only rule: its intent header is the client's stated choice."""
    if intent is not None:
        return [p for p in POLICIES if intent in p.intents]
    return [p for p in POLICIES if p.domain in detected_domains]
