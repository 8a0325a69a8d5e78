"""JSON mode within budget: compact whitespace, and a value that max_tokens would cut is closed so it parses."""

from __future__ import annotations

import json
import re

import pytest
import torch
import xgrammar as xgr

from engine.processors.json_closing import shortest_closing
from engine.processors.json_mode import JsonModeProcessor, build_tokenizer_info
from engine.sampling_params import SamplingParams
from tests.engine.processors.test_json_mode import EOS, MODEL_VOCAB, _byte_level_tokenizer

SCHEMA = {"type": "object", "properties": {
    "drug": {"type": "string"}, "dose_mg": {"type": "integer"},
    "tags": {"type": "array", "items": {"enum": ["acute", "chronic"]}, "minItems": 1},
    "code": {"type": "string", "pattern": "^[A-Z][0-9]{2}$"}},
    "required": ["drug", "dose_mg", "tags", "code"]}


@pytest.fixture(scope="module")
def tokenizer():
    return _byte_level_tokenizer()


def _formats() -> list[dict]:
    return [{"type": "json_object"}, {"type": "json_schema", "json_schema": {"name": "t", "schema": SCHEMA}}]


def _decode(processor: JsonModeProcessor, tokenizer, response_format: dict, *, max_tokens: int, seed: int,
            whitespace_bias: float = 0.0) -> tuple[str, list[str]]:
    """Sample under the processor as the engine would (random logits, whitespace favoured if asked)."""
    processor.add_request("r", SamplingParams(max_tokens=max_tokens, response_format=response_format), [1], [])
    generator = torch.Generator().manual_seed(seed)
    blanks = [i for i in range(MODEL_VOCAB) if i < tokenizer.get_vocab_size() and not tokenizer.decode([i]).strip()]
    tokens: list[int] = []
    kinds: list[str] = []
    for _ in range(max_tokens):
        logits = torch.randn(1, MODEL_VOCAB, generator=generator) * 3
        logits[0, blanks] += whitespace_bias
        processor.apply(logits, ["r"])
        token = int(torch.multinomial(torch.softmax(logits[0], dim=-1), 1, generator=generator))
        if token == EOS:
            break
        tokens.append(token)
        processor.accept_token("r", token)
        kinds += [event.kind for event in processor.pop_events("r")]
        if processor.is_finished("r"):
            break
    processor.remove_request("r")
    return tokenizer.decode(tokens), kinds


@pytest.mark.parametrize("response_format, max_tokens", [
    (_formats()[0], 12), (_formats()[0], 40), (_formats()[0], 80), (_formats()[1], 40), (_formats()[1], 80),
], ids=["object-12", "object-40", "object-80", "schema-40", "schema-80"])
def test_every_output_parses_within_its_budget(tokenizer, response_format, max_tokens):
    """Random logits write garbage strings and nest at will; whatever they do, the value closes in time."""
    processor = JsonModeProcessor(tokenizer, vocab_size=MODEL_VOCAB, eos_token_ids=[EOS])
    for seed in range(6):
        text, _ = _decode(processor, tokenizer, response_format, max_tokens=max_tokens, seed=seed)
        value = json.loads(text)
        assert isinstance(value, dict)
        if response_format["type"] == "json_schema":
            assert set(value) == set(SCHEMA["properties"])


def test_a_budget_below_the_smallest_valid_value_is_cut_not_faked(tokenizer):
    """The schema's smallest object needs ~20 tokens: 12 cannot hold it, so the output is cut (the service
    reports finish_reason length and `parses: false`), never padded into something the schema rejects."""
    processor = JsonModeProcessor(tokenizer, vocab_size=MODEL_VOCAB, eos_token_ids=[EOS])
    text, kinds = _decode(processor, tokenizer, _formats()[1], max_tokens=12, seed=0)
    assert "closed_for_budget" in kinds
    with pytest.raises(json.JSONDecodeError):
        json.loads(text)


def test_a_model_that_loves_blanks_writes_no_runs_of_them(tokenizer):
    before = JsonModeProcessor(tokenizer, vocab_size=MODEL_VOCAB, eos_token_ids=[EOS], compact=False,
                               close_within_budget=False)
    after = JsonModeProcessor(tokenizer, vocab_size=MODEL_VOCAB, eos_token_ids=[EOS])
    old, _ = _decode(before, tokenizer, {"type": "json_object"}, max_tokens=40, seed=2, whitespace_bias=8.0)
    new, kinds = _decode(after, tokenizer, {"type": "json_object"}, max_tokens=40, seed=2, whitespace_bias=8.0)
    assert _BLANK_RUN.search(_outside_strings(old))      # what the issue saw
    assert not _BLANK_RUN.search(_outside_strings(new))
    assert isinstance(json.loads(new), dict)


_BLANK_RUN = re.compile(r"\s\s")
_STRING = re.compile(r'"(?:\\.|[^"\\])*"?')


def _outside_strings(text: str) -> str:
    """The JSON text between its string literals (blanks inside a string are content, not layout)."""
    return _STRING.sub('""', text)


def test_the_closing_is_only_forced_when_the_budget_needs_it(tokenizer):
    processor = JsonModeProcessor(tokenizer, vocab_size=MODEL_VOCAB, eos_token_ids=[EOS])
    _, kinds = _decode(processor, tokenizer, {"type": "json_object"}, max_tokens=400, seed=1)
    assert "closed_for_budget" not in kinds


@pytest.mark.parametrize("prefix, closing", [
    ('{"a": [1, {"b": "x', '"}]}'), ('{"a": 1', "}"), ("{", "}"), ('{"a": [1', "]}"), ('{"k', '": 0}'),
])
def test_shortest_closing_of_an_object(tokenizer, prefix, closing):
    info = build_tokenizer_info(tokenizer, vocab_size=MODEL_VOCAB, eos_token_ids=[EOS])
    grammar = xgr.GrammarCompiler(info).compile_json_schema('{"type":"object"}', any_whitespace=True,
                                                            max_whitespace_cnt=1)
    matcher = xgr.GrammarMatcher(grammar)
    assert matcher.accept_string(prefix)
    found = shortest_closing(matcher)
    assert found is not None and json.loads(prefix + found) is not None
    assert len(found) <= len(closing) + 2
    assert matcher.accept_string(found) and matcher.is_completed()   # the matcher itself was not advanced


def test_schema_closing_fills_required_properties(tokenizer):
    info = build_tokenizer_info(tokenizer, vocab_size=MODEL_VOCAB, eos_token_ids=[EOS])
    grammar = xgr.GrammarCompiler(info).compile_json_schema(json.dumps(SCHEMA), any_whitespace=True,
                                                            max_whitespace_cnt=1)
    matcher = xgr.GrammarMatcher(grammar)
    assert matcher.accept_string('{"drug": "met')
    value = json.loads('{"drug": "met' + shortest_closing(matcher))
    assert value["drug"] == "met" and value["tags"] and len(value["code"]) == 3
