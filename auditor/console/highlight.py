"""The record page's highlighted output: the text cut into plain and claim segments, each claim segment
carrying its verdict and its claim's number (the page shows a text label beside the colour)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Segment:
    text: str
    claim_number: int | None = None   # 1-based index into the claims; None for plain text
    verdict: str | None = None


def _span(claim: dict[str, Any], text: str) -> tuple[int, int] | None:
    """The claim's [start, end) in `text`: its own span when that still points at its text, else where its
    text first occurs (claims of scripted verifiers and imports carry no span)."""
    span = claim.get("span")
    claim_text = claim.get("text")
    if isinstance(span, list | tuple) and len(span) == 2 and all(isinstance(i, int) for i in span):
        start, end = span
        if 0 <= start < end <= len(text) and (not isinstance(claim_text, str) or text[start:end] == claim_text):
            return start, end
    if isinstance(claim_text, str) and claim_text:
        start = text.find(claim_text)
        if start >= 0:
            return start, start + len(claim_text)
    return None


def segments(text: str | None, claims: list[Any] | None) -> list[Segment]:
    """Plain and claim segments covering `text` in order. Overlapping claims: the earlier-starting one is
    shown, the other stays listed below the text (nothing is dropped from the claims table)."""
    if not text:
        return []
    spans = sorted((span, number, claim.get("verdict"))
                   for number, claim in enumerate(claims or [], start=1)
                   if isinstance(claim, dict) and (span := _span(claim, text)) is not None)
    out: list[Segment] = []
    cursor = 0
    for (start, end), number, verdict in spans:
        if start < cursor:
            continue
        if start > cursor:
            out.append(Segment(text[cursor:start]))
        out.append(Segment(text[start:end], number, str(verdict or "unknown")))
        cursor = end
    if cursor < len(text):
        out.append(Segment(text[cursor:]))
    return out
