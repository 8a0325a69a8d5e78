"""Domain policies applied at the input stage (intent -> required annotation or refusal).

Built in until the rule packs carry them; each policy names its rule id and the reason shown
to the client and stored in the record.
"""

from __future__ import annotations

from dataclasses import dataclass

# These are this service's own policies (not a regulator's text); stored with every policy decision.
POLICY_SOURCE = {"source": "auditor built-in domain policies", "locator": "auditor/gate/policy.py",
                 "as_of": "2026-12-02", "version": "domain-policies/1"}


@dataclass(frozen=True, slots=True)
class DomainPolicy:
    rule_id: str
    intents: frozenset[str]
    action: str          # annotate | refuse
    message: str


POLICIES: tuple[DomainPolicy, ...] = (
    DomainPolicy("policy.medical.disclaimer", frozenset({"medical-diagnosis", "medical-treatment"}), "annotate",
                 "Not medical advice: a clinician must confirm any diagnosis or treatment."),
    DomainPolicy("policy.finance.disclaimer", frozenset({"fin-advice", "fin-risk"}), "annotate",
                 "Not investment advice: figures must be checked against the cited filings."),
    DomainPolicy("policy.legal.disclaimer", frozenset({"legal-advice"}), "annotate",
                 "Not legal advice: citations must be checked against the reporters."),
)


def policies_for(intent: str | None) -> list[DomainPolicy]:
    return [p for p in POLICIES if intent is not None and intent in p.intents]
