"""logit_bias: validated up front, added to the biased rows only, and it steers what the engine samples."""

from __future__ import annotations

import pytest
import torch

from engine.llm_engine import LLMEngine
from engine.processors.logit_bias import LogitBiasProcessor, parse_logit_bias
from engine.sampling_params import InvalidRequestError, SamplingParams


@pytest.mark.parametrize("value, message", [
    ({"x": 1}, "not a token id"), ({"9999": 1}, "outside the vocabulary"), ({"5": 101}, "[-100, 100]"),
    ({"5": True}, "[-100, 100]"), ({str(i): 1 for i in range(301)}, "at most 300"), ([1, 2], "map token ids"),
])
def test_bad_biases_are_refused(value, message):
    with pytest.raises(InvalidRequestError, match=message.replace("[", r"\[").replace("]", r"\]")):
        parse_logit_bias(value, 1000)


def test_bias_touches_only_its_rows_and_tokens():
    processor = LogitBiasProcessor(vocab_size=8)
    assert not processor.add_request("plain", SamplingParams(), [1], [])
    assert processor.add_request("biased", SamplingParams(extra_args={"logit_bias": {"3": 5.0, 6: -100}}), [1], [])
    logits = torch.zeros(3, 8)
    processor.apply(logits, ["plain", "biased", None])
    expected = torch.zeros(3, 8)
    expected[1, 3], expected[1, 6] = 5.0, -100.0
    assert torch.equal(logits, expected)
    assert [e.kind for e in processor.pop_events("biased")] == ["biased"]


def test_bias_steers_the_engine(tmp_path):
    from engine.synthetic import write_tiny_checkpoint

    path = write_tiny_checkpoint(tmp_path / "m", vocab_size=300)
    engine = LLMEngine.from_pretrained(path, logits_processors=[LogitBiasProcessor(300)])
    greedy = engine.generate(["hello"], SamplingParams(temperature=0, max_tokens=6, ignore_eos=True))[0].token_ids
    banned = SamplingParams(temperature=0, max_tokens=6, ignore_eos=True,
                            extra_args={"logit_bias": {str(t): -100 for t in set(greedy)}})
    assert not set(engine.generate(["hello"], banned)[0].token_ids) & set(greedy)
    forced = SamplingParams(temperature=0.8, seed=1, max_tokens=6, ignore_eos=True, extra_args={"logit_bias": {"42": 100}})
    assert engine.generate(["hello"], forced)[0].token_ids == [42] * 6
