"""Sampling behaviour users rely on: seeds, filters, penalties, stops, logprobs, streaming deltas, stats."""

from __future__ import annotations

import pytest
import torch

from engine.config import EngineConfig
from engine.llm_engine import LLMEngine
from engine.sampler import Sampler
from engine.sampling_params import SamplingParams
from engine.sequence import Sequence

PROMPT = "The patient was prescribed"


@pytest.fixture(scope="module")
def engine(tiny_llama) -> LLMEngine:
    # fp32: exact batch independence of seeded rows needs batch-independent logits, which bf16's
    # rounding (it varies with the batch shape) does not give
    return LLMEngine.from_pretrained(tiny_llama, EngineConfig(block_size=8, dtype="float32"))


def _one(engine: LLMEngine, prompt=PROMPT, **params) -> object:
    return engine.generate([prompt], SamplingParams(**params))[0]


def test_same_seed_same_output_whatever_the_batch(engine):
    seeded = SamplingParams(temperature=1.0, seed=1234, max_tokens=16, ignore_eos=True)
    alone = engine.generate([PROMPT], seeded)[0].token_ids
    others = SamplingParams(temperature=1.3, max_tokens=20, ignore_eos=True)
    batch = engine.generate(["Hello world", PROMPT, "def add(a, b):"], [others, seeded, others])
    assert batch[1].token_ids == alone
    different = _one(engine, temperature=1.0, seed=99, max_tokens=16, ignore_eos=True).token_ids
    assert different != alone


@pytest.mark.parametrize("filters", [dict(top_k=1), dict(top_p=1e-6), dict(min_p=1.0)])
def test_filters_that_keep_one_token_equal_greedy(engine, filters):
    greedy = _one(engine, temperature=0, max_tokens=12, ignore_eos=True).token_ids
    assert _one(engine, temperature=1.5, seed=3, max_tokens=12, ignore_eos=True, **filters).token_ids == greedy


def _sample_many(logits_row: torch.Tensor, n: int, **params) -> torch.Tensor:
    seqs = [Sequence(str(i), [1], SamplingParams(**params), 1, 0.0) for i in range(n)]
    out = Sampler(torch.Generator().manual_seed(0))(logits_row.repeat(n, 1), seqs)
    return torch.tensor(out.token_ids)


def test_temperature_sampling_follows_the_softmax():
    logits = torch.tensor([2.0, 1.0, 0.5, 0.0, -1.0])
    draws = _sample_many(logits, 20000, temperature=0.7)
    freq = torch.bincount(draws, minlength=5).float() / len(draws)
    torch.testing.assert_close(freq, torch.softmax(logits / 0.7, -1), atol=0.015, rtol=0)


def test_top_k_top_p_min_p_restrict_the_support():
    logits = torch.tensor([3.0, 2.5, 2.0, 0.0, -1.0, -2.0])
    assert set(_sample_many(logits, 3000, top_k=2).tolist()) == {0, 1}
    probs = torch.softmax(logits, -1)  # [0.49, 0.30, 0.18, ...]: top_p=0.7 keeps the first two
    assert set(_sample_many(logits, 3000, top_p=0.7).tolist()) == {0, 1}
    assert float(probs[:2].sum()) >= 0.7 > float(probs[0])
    # min_p=0.3: keep tokens with p >= 0.3 * p_max  (0.18 / 0.49 = 0.37 stays, 0.024 / 0.49 does not)
    assert set(_sample_many(logits, 3000, min_p=0.3).tolist()) == {0, 1, 2}


def test_repetition_penalty_matches_transformers():
    transformers = pytest.importorskip("transformers")
    logits = torch.randn(1, 50, generator=torch.Generator().manual_seed(0))
    seq = Sequence("r", [3, 7, 7, 11], SamplingParams(repetition_penalty=1.3), 1, 0.0)
    seq.output_token_ids = [20, 3]
    ours = logits.clone()
    Sampler(torch.Generator())._apply_penalties(ours, [seq])
    hf = transformers.RepetitionPenaltyLogitsProcessor(1.3)(torch.tensor([[3, 7, 7, 11, 20, 3]]), logits.clone())
    torch.testing.assert_close(ours, hf)


def test_presence_and_frequency_penalties_follow_openai():
    logits = torch.zeros(1, 10)
    seq = Sequence("r", [1, 2], SamplingParams(presence_penalty=0.5, frequency_penalty=0.25), 1, 0.0)
    seq.output_token_ids = [4, 4, 4, 6]
    Sampler(torch.Generator())._apply_penalties(logits, [seq])
    expected = torch.zeros(1, 10)
    expected[0, 4] = -(0.5 + 3 * 0.25)
    expected[0, 6] = -(0.5 + 0.25)
    torch.testing.assert_close(logits, expected)  # prompt tokens 1, 2 untouched


def test_stop_string_cuts_the_text(engine):
    free = _one(engine, temperature=0, max_tokens=24, ignore_eos=True)
    text = free.text
    stop = next(text[i : i + 2] for i in range(4, len(text) - 2) if text.find(text[i : i + 2]) == i)
    out = _one(engine, temperature=0, max_tokens=24, ignore_eos=True, stop=[stop])
    assert out.text == text[: text.index(stop)]
    assert out.finish_reason == "stop" and out.stop_reason == stop


def test_stop_token_and_eos(engine):
    free = _one(engine, temperature=0, max_tokens=12, ignore_eos=True).token_ids
    stop_token = free[4]
    cut = free.index(stop_token) + 1
    out = _one(engine, temperature=0, max_tokens=12, ignore_eos=True, stop_token_ids=[stop_token])
    assert out.token_ids == free[:cut] and out.stop_reason == stop_token and out.finish_reason == "stop"
    saved = engine.post.eos_ids
    engine.post.eos_ids = frozenset({stop_token})
    try:
        assert _one(engine, temperature=0, max_tokens=12).token_ids == free[:cut]
        assert _one(engine, temperature=0, max_tokens=12, ignore_eos=True).token_ids == free
    finally:
        engine.post.eos_ids = saved
    assert _one(engine, temperature=0, max_tokens=3, ignore_eos=True).finish_reason == "length"


def test_logprobs_report_the_top_n(engine):
    out = _one(engine, temperature=0, max_tokens=5, ignore_eos=True, logprobs=3)
    assert len(out.logprobs) == 5
    for token_id, entry in zip(out.token_ids, out.logprobs, strict=True):
        assert entry.token_id == token_id and len(entry.top) == 3
        assert entry.top[0][0] == token_id and entry.top[0][2] == pytest.approx(entry.logprob)
        assert [lp for _, _, lp in entry.top] == sorted((lp for _, _, lp in entry.top), reverse=True)
        assert entry.logprob <= 0 and entry.token == engine.tokenizer.token_text(token_id)
    assert _one(engine, max_tokens=2).logprobs is None


def test_streamed_deltas_add_up_and_stats_are_filled(engine):
    free = _one(engine, temperature=0, max_tokens=20, ignore_eos=True)
    stop = free.text[len(free.text) // 2 : len(free.text) // 2 + 3]
    engine.add_request("s", PROMPT, SamplingParams(temperature=0, max_tokens=20, ignore_eos=True, stop=[stop]))
    deltas, tokens, last = [], [], None
    while engine.has_unfinished():
        for out in engine.step():
            deltas.append(out.new_text)
            tokens.extend(out.new_token_ids)
            last = out
    assert "".join(deltas) == last.text and tokens == last.token_ids
    assert stop not in last.text
    stats = last.stats
    assert stats.num_prompt_tokens == len(last.prompt_token_ids)
    assert stats.num_generated_tokens == len(last.token_ids)
    assert len(stats.inter_token_latency_seconds) == len(last.token_ids) - 1
    assert 0 <= stats.request_queue_time_seconds <= stats.time_to_first_token_seconds <= stats.e2e_request_latency_seconds
    engine_stats = engine.stats()
    for key in ("time_to_first_token_seconds", "inter_token_latency_seconds", "e2e_request_latency_seconds",
                "request_queue_time_seconds"):
        assert engine_stats[key] and all(v >= 0 for v in engine_stats[key])
