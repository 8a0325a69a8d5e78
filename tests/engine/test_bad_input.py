"""Unusable requests raise ValueError subclasses at add_request, before any compute."""

from __future__ import annotations

import pytest

from engine.config import EngineConfig
from engine.llm_engine import LLMEngine
from engine.processors.logits_process import LogitsProcessor
from engine.sampling_params import InvalidRequestError, SamplingParams


class RejectsEverything(LogitsProcessor):
    name = "strict"

    def validate_params(self, params):
        if "strict" in params.extra_args:
            raise InvalidRequestError("strict: bad arguments")

    def add_request(self, request_id, params, prompt_token_ids, output_token_ids):
        return False

    def remove_request(self, request_id):
        pass

    def apply(self, logits, request_ids):
        pass

    def accept_token(self, request_id, token_id):
        pass


@pytest.fixture(scope="module")
def engine(tiny_llama):
    engine = LLMEngine.from_pretrained(
        tiny_llama, EngineConfig(max_model_len=64, num_kv_blocks=8, block_size=16), [RejectsEverything()]
    )
    calls = []
    original = engine.runner.execute
    engine.runner.execute = lambda batch: calls.append(batch) or original(batch)  # type: ignore[method-assign]
    engine.compute_calls = calls  # type: ignore[attr-defined]
    return engine


@pytest.mark.parametrize(
    ("prompt", "params", "message"),
    [
        (list(range(3, 67)), SamplingParams(), "context holds 64"),
        ([], SamplingParams(), "empty"),
        ([3, 4, 99999], SamplingParams(), "outside the vocabulary"),
        ("hi", SamplingParams(max_tokens=0), "max_tokens"),
        ("hi", SamplingParams(temperature=-1.0), "temperature"),
        ("hi", SamplingParams(top_p=0.0), "top_p"),
        ("hi", SamplingParams(top_p=1.5), "top_p"),
        ("hi", SamplingParams(extra_args={"strict": {}}), "strict: bad arguments"),
    ],
)
def test_rejected_before_any_compute(engine, prompt, params, message):
    with pytest.raises(InvalidRequestError, match=message) as error:
        engine.add_request("r", prompt, params)
    assert isinstance(error.value, ValueError)
    assert not engine.has_unfinished()
    assert engine.step() == []
    assert engine.compute_calls == []


def test_request_larger_than_the_kv_pool_is_rejected(tiny_llama):
    engine = LLMEngine.from_pretrained(tiny_llama, EngineConfig(num_kv_blocks=2, block_size=4))
    with pytest.raises(InvalidRequestError, match="KV cache"):
        engine.add_request("r", list(range(3, 10)), SamplingParams(max_tokens=4))


def test_duplicate_request_id(tiny_llama):
    engine = LLMEngine.from_pretrained(tiny_llama)
    engine.add_request("same", "hi")
    with pytest.raises(InvalidRequestError, match="already in use"):
        engine.add_request("same", "hi")


def test_bad_engine_config_is_a_value_error(tiny_llama):
    with pytest.raises(ValueError, match="block_size"):
        LLMEngine.from_pretrained(tiny_llama, EngineConfig(block_size=3))


def test_generate_validates_every_prompt_before_queueing_any(tiny_llama):
    engine = LLMEngine.from_pretrained(tiny_llama)
    with pytest.raises(InvalidRequestError, match="max_tokens"):
        engine.generate(["fine", "also fine", "bad"], [SamplingParams(), SamplingParams(), SamplingParams(max_tokens=0)])
    assert not engine.has_unfinished()
