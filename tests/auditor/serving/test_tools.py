"""Tool calling's pieces: rendering through released templates as Hugging Face does, dialects, parsing, policies."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from tokenizers import Tokenizer as BackendTokenizer
from tokenizers import models
from transformers.utils.chat_template_utils import render_jinja_template

from auditor.gate.tool_policy import ToolPolicy, ToolPolicyFile, check_calls, load_tool_policies
from auditor.serving.tools import (
    HERMES,
    LLAMA3_JSON,
    ToolRequest,
    ToolsUnsupported,
    dialect_for,
    template_messages,
)
from engine.chat_templates import ROLE_MARKER_TOOLS_TEMPLATE
from engine.tokenizer import Tokenizer

QWEN3 = (Path(__file__).parents[2] / "fixtures" / "chat_templates" / "qwen3.jinja").read_text()
DOSE = {"type": "function", "function": {"name": "get_max_dose", "description": "Maximum daily dose",
                                         "parameters": {"type": "object", "properties": {"drug": {"type": "string"}},
                                                        "required": ["drug"]}}}
LOOP = [
    {"role": "system", "content": "You are a pharmacist."},
    {"role": "user", "content": "Max dose of metformin?"},
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "get_max_dose", "arguments": '{"drug": "metformin"}'}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": "2550 mg per day"},
]


def _ours(template: str, messages: list[dict], tools: list[dict] | None) -> str:
    """The engine's renderer (`Tokenizer.apply_chat_template`) on a tokenizer that only carries the template."""
    backend = BackendTokenizer(models.WordLevel({"<unk>": 0}, unk_token="<unk>"))
    tokenizer = Tokenizer(backend, {"eos_token": "<|im_end|>", "chat_template": template}, [])
    kwargs = {"tools": tools} if tools is not None else {}
    return tokenizer.apply_chat_template(messages, add_generation_prompt=True, **kwargs)


@pytest.mark.parametrize("tools", [None, [DOSE]])
def test_a_released_template_renders_tools_as_hugging_face_does(tools):
    messages = template_messages(LOOP)
    ours = _ours(QWEN3, messages, tools)
    theirs = render_jinja_template([messages], tools=tools, chat_template=QWEN3, add_generation_prompt=True,
                                   bos_token="", eos_token="<|im_end|>")[0][0]
    assert ours == theirs
    assert '<tool_call>\n{"name": "get_max_dose", "arguments": {"drug": "metformin"}}\n</tool_call>' in ours
    assert "<tool_response>\n2550 mg per day\n</tool_response>" in ours
    assert (tools is not None) == ('"name": "get_max_dose", "description"' in ours)


def test_template_messages_give_templates_argument_objects():
    (_, _, assistant, tool) = template_messages(LOOP)
    assert assistant["content"] == "" and assistant["tool_calls"][0]["function"]["arguments"] == {"drug": "metformin"}
    assert tool["tool_call_id"] == "call_1"
    with pytest.raises(ToolsUnsupported):
        template_messages([{"role": "assistant", "tool_calls": [
            {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{not json"}}]}])


def test_dialects_are_read_from_the_template():
    assert dialect_for(QWEN3) is HERMES
    assert dialect_for(ROLE_MARKER_TOOLS_TEMPLATE) is HERMES
    llama31_like = "{% if tools %}Environment: ipython{% endif %}<|python_tag|>{{ 'parameters' }}"
    assert dialect_for(llama31_like) is LLAMA3_JSON
    for template in (None, "{{ messages }}", "{% for t in tools %}{{ t }}{% endfor %}"):
        with pytest.raises(ToolsUnsupported):
            dialect_for(template)


@pytest.mark.parametrize("dialect, text, content, calls", [
    (HERMES, 'Let me check.\n<tool_call>\n{"name": "a", "arguments": {"x": 1}}\n</tool_call>', "Let me check.",
     [("a", {"x": 1})]),
    (HERMES, '<tool_call>\n{"name": "a", "arguments": {}}\n</tool_call>\n<tool_call>\n{"name": "b", "arguments": '
             '{"y": [1, {"z": "}"}]}}\n</tool_call>', None, [("a", {}), ("b", {"y": [1, {"z": "}"}]})]),
    (HERMES, 'No call, just "text" with {braces}.', 'No call, just "text" with {braces}.', []),
    (HERMES, '<tool_call>\n{"name": "a", "arguments": {"x": ', '<tool_call>\n{"name": "a", "arguments": {"x":', []),
    (LLAMA3_JSON, '{"name": "a", "parameters": {"q": "x"}}; {"name": "b", "parameters": {}}', None,
     [("a", {"q": "x"}), ("b", {})]),
])
def test_calls_parse_into_content_and_calls(dialect, text, content, calls):
    found_content, found = dialect.parse(text)
    assert found_content == content
    assert [(c["name"], c["arguments"]) for c in found] == calls


def test_calls_get_ids_the_record_can_name():
    request = ToolRequest([DOSE], "auto", parallel=True, dialect=HERMES)
    _, calls = request.parse('<tool_call>\n{"name": "get_max_dose", "arguments": {"drug": "x"}}\n</tool_call>',
                             call_id_seed="audit-1")
    again = request.parse('<tool_call>\n{"name": "get_max_dose", "arguments": {"drug": "x"}}\n</tool_call>',
                          call_id_seed="audit-1")[1]
    assert calls == again and calls[0]["id"].startswith("call_") and len(calls[0]["id"]) == 29
    assert json.loads(calls[0]["function"]["arguments"]) == {"drug": "x"}


def test_tool_choice_none_renders_and_constrains_nothing():
    request = ToolRequest([DOSE], "none", parallel=True, dialect=HERMES)
    assert not request.active and request.template_kwargs() == {}


def _policies(*policies: ToolPolicy) -> ToolPolicyFile:
    return ToolPolicyFile(version="t", source="test", as_of="2026-12-03", policies=list(policies))


def _call(name: str, arguments: dict) -> dict:
    return {"id": f"call_{name}", "function": {"name": name, "arguments": json.dumps(arguments)},
            "parsed_arguments": arguments}


AMOUNT = ToolPolicy(rule_id="amount", kind="argument_threshold", argument="payment.amount", above=10000,
                    unless_intents=["fin-risk"])


@pytest.mark.parametrize("amount, blocked", [
    (10000, False), (10000.5, True), ("20,000", True), ("1e999", True), ("nan", True), (-5, False),
    (math.inf, True),
    (True, True), ("ten thousand", True),   # cannot be read as a number: counts as above (fails closed, issue 43)
])
def test_amount_rule_reads_numbers_however_written(amount, blocked):
    found = check_calls([_call("pay", {"payment": {"amount": amount}})], intent=None, tenant="t",
                        policies=_policies(AMOUNT))
    assert bool(found) == blocked


def test_amount_rule_spares_the_fin_risk_intent():
    calls = [_call("pay", {"payment": {"amount": 50000}})]
    assert check_calls(calls, intent="fin-risk", tenant="t", policies=_policies(AMOUNT)) == []


def test_allow_lists_by_intent_and_tenant():
    by_intent = ToolPolicy(rule_id="i", kind="allow_list", intents=["medical-diagnosis"], functions=["lookup"])
    by_tenant = ToolPolicy(rule_id="t", kind="allow_list", tenants=["acme"], functions=["lookup"], action="annotate")
    policies = _policies(by_intent, by_tenant)
    calls = [_call("lookup", {}), _call("transfer", {})]
    assert [(d.call_index, d.decision.rule_id, d.decision.action) for d in
            check_calls(calls, intent="medical-diagnosis", tenant="other", policies=policies)] == [(1, "i", "block")]
    assert [(d.call_index, d.decision.rule_id, d.decision.action) for d in
            check_calls(calls, intent=None, tenant="acme", policies=policies)] == [(1, "t", "annotate")]
    assert check_calls(calls, intent=None, tenant="other", policies=policies) == []
    assert check_calls([_call("Lookup", {})], intent="medical-diagnosis", tenant="x", policies=policies)


def test_the_built_in_policies_load_and_name_their_source():
    built_in = load_tool_policies()
    assert built_in.policies and built_in.provenance()["as_of"]
    with pytest.raises(ValueError):
        ToolPolicyFile.model_validate({"version": "x", "source": "y", "as_of": "z",
                                       "policies": [{"rule_id": "r", "kind": "nonsense"}]})
