"""Reading a streamed chat completion the way a client does: the data lines, and the text they deliver."""

from __future__ import annotations

import json


def events(body: str) -> list[str]:
    return [line.removeprefix("data: ") for line in body.splitlines() if line.startswith("data: ")]


def delivered(lines: list[str]) -> str:
    """The content a client would show: only the deltas' text, never ids or audit metadata."""
    text = ""
    for line in lines:
        if line != "[DONE]":
            for choice in json.loads(line).get("choices", []):
                text += choice.get("delta", {}).get("content") or ""
    return text
