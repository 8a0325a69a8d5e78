"""Domain-independent validators.

`common.consistency` reads the findings of the rules listed before it in the pack (verify stores them in
`doc.cache["findings"]`), so it belongs at the end of a pack.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rules.claims import Document
from rules.report import Evidence
from rules.validators.base import Finding, validator


@validator("common.consistency")
def consistency(doc: Document, params: Mapping[str, Any]) -> list[Finding]:
    """The same quantity of the same subject restated with a different value within one answer, when the KG
    cannot say which value is right (otherwise the KG verdicts already mark the wrong one)."""
    earlier: dict[tuple[str, str], Finding] = {}
    findings: list[Finding] = []
    for finding in sorted(doc.cache.get("findings", []), key=lambda f: f.span[0]):
        if finding.assertion is None:
            continue
        subject, attribute, value = finding.assertion
        key = (subject, attribute)
        first = earlier.setdefault(key, finding)
        if first is finding or _same(first.assertion[2], value):  # type: ignore[index]
            continue
        if first.verdict != "unverifiable" or finding.verdict != "unverifiable":
            continue  # the KG already judged one of them: that verdict says which value is wrong
        findings.append(Finding(
            finding.text, finding.span, "consistency", "contradicted", 0.8,
            [Evidence(kind="consistency",
                      description=f"{attribute.split(':')[0]} of {subject} is given as {first.assertion[2]:,g} "  # type: ignore[index]
                                  f"at characters {first.span[0]}-{first.span[1]} and as {value:,g} here")],
            subject=subject,
        ))
    return findings


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, int | float) and isinstance(b, int | float):
        return abs(a - b) <= 1e-6 * max(abs(a), abs(b), 1.0)
    return bool(a == b)
