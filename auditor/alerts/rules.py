"""Alert rule expressions: what to watch, over which window, for which records.

    fer > 0.2 over 1h for domain=medical
    contradicted_rate >= 0.1 over 24h for domain=legal, model=other-llm-7b
    critical > 0 over 5m                      # any critical verdict
    any critical verdict                      # the same, written out

`<metric> <op> <number> [over <span>] [for key=value, ...]`. Metrics are those of `auditor.trail.trends`
over the window's current verdicts (fer, mean_fer, contradicted_rate, block_rate, records, contradicted,
critical); the filter keys are the record filter's (domain, model, intent, tenant, endpoint, ...).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from auditor.trail.schemas import CleanText, RecordFilter

METRICS = ("fer", "mean_fer", "contradicted_rate", "block_rate", "records", "contradicted", "critical")
OPERATORS = {">": lambda a, b: a > b, ">=": lambda a, b: a >= b, "<": lambda a, b: a < b, "<=": lambda a, b: a <= b}
_EXPRESSION = re.compile(
    r"^\s*(?P<metric>[a-z_]+)\s*(?P<op>>=|<=|>|<)\s*(?P<threshold>\d+(?:\.\d+)?)"
    r"(?:\s+over\s+(?P<window>\d+\s*[smhdw]))?(?:\s+for\s+(?P<filters>.+?))?\s*$")
_SPAN = re.compile(r"^(\d+)\s*([smhdw])$")
_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86_400, "w": 604_800}
_ANY_CRITICAL = re.compile(r"^\s*any\s+critical\s+verdicts?(?:\s+for\s+(?P<filters>.+?))?\s*$")
DEFAULT_WINDOW_S = 300


class AlertRuleError(ValueError):
    """An expression or rule that cannot be used."""


@dataclass(frozen=True, slots=True)
class AlertSpec:
    metric: str
    op: str
    threshold: float
    window_s: int
    filters: dict[str, Any] = field(default_factory=dict)

    def holds(self, value: float | None) -> bool:
        return value is not None and OPERATORS[self.op](value, self.threshold)


def parse_expression(expression: str) -> AlertSpec:
    special = _ANY_CRITICAL.match(expression)
    if special:
        return AlertSpec("critical", ">", 0.0, DEFAULT_WINDOW_S, _filters(special.group("filters")))
    match = _EXPRESSION.match(expression)
    if not match:
        raise AlertRuleError(f"cannot read alert rule {expression!r}: write `<metric> <op> <number> [over <span>] "
                             f"[for key=value, ...]`, e.g. `fer > 0.2 over 1h for domain=medical`")
    metric = match.group("metric")
    if metric not in METRICS:
        raise AlertRuleError(f"unknown metric {metric!r} (known: {', '.join(METRICS)})")
    window = match.group("window")
    return AlertSpec(metric, match.group("op"), float(match.group("threshold")),
                     _seconds(window) if window else DEFAULT_WINDOW_S, _filters(match.group("filters")))


def _seconds(span: str) -> int:
    number, unit = _SPAN.match(span.replace(" ", "")).groups()   # type: ignore[union-attr]
    return int(number) * _SECONDS[unit]


def _filters(text: str | None) -> dict[str, Any]:
    if not text:
        return {}
    filters: dict[str, Any] = {}
    for part in re.split(r"\s*(?:,|\band\b)\s*", text.strip()):
        key, sep, value = part.partition("=")
        if not sep or not key.strip() or not value.strip():
            raise AlertRuleError(f"cannot read filter {part!r}: write key=value, e.g. domain=medical")
        filters[key.strip()] = value.strip()
    try:
        RecordFilter.model_validate(filters)
    except ValidationError as exc:
        first = exc.errors()[0]
        raise AlertRuleError(f"filter {'.'.join(map(str, first['loc']))}: {first['msg']}") from None
    return filters


class AlertRuleIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: CleanText = Field(min_length=1, max_length=128)
    expression: CleanText = Field(min_length=1, max_length=500, description="e.g. fer > 0.2 over 1h for domain=medical")
    webhook_url: CleanText = Field(min_length=8, max_length=2048)
    cooldown_s: int = Field(default=3600, ge=0, le=30 * 86_400, description="a firing rule fires again after this")
    severity: Literal["info", "warning", "critical"] | None = Field(
        default=None, description="sent with each alert; default: critical for critical-verdict rules, else warning")

    @field_validator("webhook_url")
    @classmethod
    def _http(cls, value: str) -> str:
        if not value.startswith(("http://", "https://")):
            raise ValueError("webhook_url must be an http:// or https:// URL")
        return value

    @field_validator("expression")
    @classmethod
    def _readable(cls, value: str) -> str:
        parse_expression(value)
        return value
