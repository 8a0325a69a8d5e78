"""Tool calling on the local engine: render, constrain, parse.

- Render: `tools` go through the checkpoint's own chat template, as Hugging Face's `apply_chat_template(...,
  tools=...)` does; assistant turns carry `tool_calls` (arguments as objects, as the templates expect) and
  tool turns carry `tool_call_id`.
- Constrain: the model's call syntax is read from its template (a dialect); XGrammar's
  `get_model_structural_tag` builds the grammar for that syntax, the declared argument schemas and
  `tool_choice` (auto: text or calls; required: at least one call; a named function: exactly that call;
  none: no tools at all). JSON mode's processor applies it as a `structural_tag` response format.
- Parse: the finished text splits into content and calls in OpenAI's shape.

A template that does not take `tools`, or whose call syntax is unknown here, gets a 400 naming `tools`:
tools are never silently dropped.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any


class ToolsUnsupported(ValueError):
    """This checkpoint's chat template cannot render tools, or its call syntax is unknown."""


@dataclass(frozen=True, slots=True)
class ToolDialect:
    """How one family of chat templates writes a call; `xgrammar_model` names XGrammar's builder for it."""

    name: str
    xgrammar_model: str
    call_opening: str              # where a call's JSON object starts in the output
    arguments_key: str             # "arguments" (Hermes / Qwen) or "parameters" (Llama 3.1)

    def parse(self, text: str) -> tuple[str | None, list[dict[str, Any]]]:
        """(content outside the calls or None, [{"name", "arguments"}]) from the finished output."""
        decoder = json.JSONDecoder()
        calls: list[dict[str, Any]] = []
        content: list[str] = []
        cursor = 0
        for match in re.finditer(re.escape(self.call_opening), text):
            if match.start() < cursor:
                continue
            # The call's object starts with the opening itself (Llama) or right after it (Hermes' <tool_call>).
            start = match.start() if self.call_opening.startswith("{") else text.find("{", match.end())
            if start < 0:
                break
            try:
                value, end = decoder.raw_decode(text, start)
            except json.JSONDecodeError:
                continue
            if not (isinstance(value, dict) and isinstance(value.get("name"), str)
                    and isinstance(value.get(self.arguments_key, {}), dict)):
                continue
            content.append(text[cursor:match.start()])
            calls.append({"name": value["name"], "arguments": value.get(self.arguments_key, {})})
            cursor = _after_call(text, end)
        content.append(text[cursor:])
        joined = "".join(content).strip()
        return (joined or None), calls


def _after_call(text: str, end: int) -> int:
    """Skip the call's closing marker ("\\n</tool_call>") and a ";" between Llama calls."""
    rest = text[end:]
    closing = re.match(r"\s*(</tool_call>|;)?", rest)
    return end + (closing.end() if closing else 0)


HERMES = ToolDialect("hermes", "qwen_3", "<tool_call>", "arguments")
LLAMA3_JSON = ToolDialect("llama3_json", "llama", '{"name": ', "parameters")


def dialect_for(chat_template: str | None) -> ToolDialect:
    """The call syntax a chat template teaches; ToolsUnsupported when it takes no tools or one unknown here."""
    if not chat_template or "tools" not in chat_template:
        raise ToolsUnsupported("this checkpoint's chat template does not take tools")
    if "<tool_call>" in chat_template:
        return HERMES
    if "<|python_tag|>" in chat_template or "ipython" in chat_template:
        return LLAMA3_JSON
    raise ToolsUnsupported("this checkpoint's chat template writes tool calls in a syntax this service cannot "
                           "parse (known: Hermes/Qwen <tool_call>, Llama 3.1 JSON)")


@dataclass(slots=True)
class ToolRequest:
    """The tools a request offers and how it lets the model use them."""

    tools: list[dict[str, Any]]                 # OpenAI shape: {"type": "function", "function": {...}}
    choice: str | dict[str, Any]                # auto | required | none | {"type": "function", "function": {"name"}}
    parallel: bool
    dialect: ToolDialect
    calls: list[dict[str, Any]] = field(default_factory=list)   # filled once the output is parsed

    @property
    def active(self) -> bool:
        return bool(self.tools) and self.choice != "none"

    @property
    def names(self) -> list[str]:
        return [tool["function"]["name"] for tool in self.tools]

    def template_kwargs(self) -> dict[str, Any]:
        """What the chat template gets: the tools, unless tool_choice is none (then the model never sees them)."""
        return {"tools": self.tools} if self.active else {}

    def response_format(self) -> dict[str, Any]:
        """The structural tag the engine constrains the output with."""
        # Imported here, by the first request with tools: XGrammar imports torch, which an API process that
        # talks to an engine core otherwise never loads (~0.15 GB and a second of its start).
        import xgrammar as xgr

        # tool arguments as compact as JSON mode's: at most one whitespace character in a row
        from engine.processors.json_mode import COMPACT_MAX_WHITESPACE

        try:
            tag = xgr.get_model_structural_tag(
                self.dialect.xgrammar_model, tools=self.tools, tool_choice=self.choice, reasoning="disabled",
                max_whitespace_cnt=COMPACT_MAX_WHITESPACE, parallel_tool_calls=self.parallel)
        except ValueError as exc:
            raise ToolsUnsupported(f"tools or tool_choice cannot be used: {exc}") from exc
        return {"type": "structural_tag", "format": tag.model_dump(mode="json")["format"]}

    def parse(self, text: str, *, call_id_seed: str) -> tuple[str | None, list[dict[str, Any]]]:
        """Content and OpenAI-shaped tool calls (ids derived from `call_id_seed`, so the record can name them)."""
        content, calls = self.dialect.parse(text)
        shaped = [{
            "id": call_id(call_id_seed, index), "type": "function",
            "function": {"name": call["name"],
                         "arguments": json.dumps(call["arguments"], ensure_ascii=False, separators=(",", ":"))},
        } for index, call in enumerate(calls)]
        return content, shaped


def call_id(seed: str, index: int) -> str:
    return "call_" + hashlib.sha256(f"{seed}:{index}".encode()).hexdigest()[:24]


def template_messages(messages: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Messages as chat templates expect them: content a string, tool-call arguments as objects (the
    templates write them with `tojson`; a string would be written twice-encoded)."""
    shaped = []
    for message in messages:
        entry: dict[str, Any] = {"role": message["role"], "content": message.get("content") or ""}
        if message.get("name"):
            entry["name"] = message["name"]
        if message.get("tool_call_id"):
            entry["tool_call_id"] = message["tool_call_id"]
        if message.get("tool_calls"):
            entry["tool_calls"] = [{
                "id": call["id"], "type": "function",
                "function": {"name": call["function"]["name"], "arguments": _arguments_object(call)},
            } for call in message["tool_calls"]]
        shaped.append(entry)
    return shaped


def _arguments_object(call: dict[str, Any]) -> Any:
    arguments = call["function"].get("arguments")
    if not isinstance(arguments, str):
        return arguments
    try:
        return json.loads(arguments)
    except json.JSONDecodeError:
        raise ToolsUnsupported(f"tool call {call['id']!r}: arguments are not valid JSON") from None


def tool_results(messages: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The tool turns of a conversation, each with the call it answers ({"tool_call_id", "name", "content"})."""
    names = {call["id"]: call["function"]["name"]
             for message in messages for call in message.get("tool_calls") or []}
    return [{"tool_call_id": m.get("tool_call_id"), "name": names.get(m.get("tool_call_id")), "content": m["content"]}
            for m in messages if m["role"] == "tool"]
