"""The bundled demo model (auditor/bundled_model/): ships complete, loads in the engine, knows its KG facts."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

BUNDLED = Path(__file__).resolve().parent.parent / "auditor" / "bundled_model"
MAX_WEIGHT_BYTES = 30 * 2**20

# Questions phrased as in training, with what the KG says the answer must contain.
KNOWN_FACTS = [
    ("What is the maximum daily dose of Metformin for adults?", "2550"),
    ("What currency does Japan use?", "JPY"),
    ("What is the citation of Miranda v. Arizona?", "384 U.S. 436"),
]


@pytest.fixture(scope="module")
def engine():  # type: ignore[no-untyped-def]
    if not (BUNDLED / "model.safetensors").is_file():
        pytest.fail("auditor/bundled_model/ has no weights: run python -m scripts.train_demo_model")
    llm_engine = pytest.importorskip("engine.llm_engine", reason="engine package not importable")
    from engine.config import EngineConfig

    return llm_engine.LLMEngine.from_pretrained(BUNDLED, EngineConfig(kv_cache_memory_bytes=16 * 2**20))


def test_bundle_is_complete_and_small_enough() -> None:
    for name in ("config.json", "model.safetensors", "generation_config.json", "tokenizer.json",
                 "tokenizer_config.json", "TRAINING.md", "loss_curve.png"):
        assert (BUNDLED / name).is_file(), f"missing {name}"
    assert (BUNDLED / "model.safetensors").stat().st_size <= MAX_WEIGHT_BYTES
    assert json.loads((BUNDLED / "config.json").read_text())["architectures"] == ["LlamaForCausalLM"]
    assert "chat_template" in json.loads((BUNDLED / "tokenizer_config.json").read_text())


def test_training_record_names_corpus_hash_and_final_loss() -> None:
    record = (BUNDLED / "TRAINING.md").read_text()
    assert re.search(r"sha256 `[0-9a-f]{64}`", record)
    loss = re.search(r"final loss \(mean of last 20 steps\): ([0-9.]+)", record)
    assert loss is not None and float(loss.group(1)) < 1.0   # it learned the corpus, not just its alphabet


def test_generates_through_the_engine_and_stops_at_end_of_turn(engine) -> None:  # type: ignore[no-untyped-def]
    from engine.sampling_params import SamplingParams

    prompts = [engine.tokenizer.apply_chat_template([{"role": "user", "content": q}]) for q, _ in KNOWN_FACTS]
    outputs = engine.generate(prompts, SamplingParams(temperature=0, max_tokens=120))
    for (question, expected), output in zip(KNOWN_FACTS, outputs, strict=True):
        assert output.finish_reason == "stop", (question, output.text)
        assert expected in output.text, (question, output.text)


# -- the hallucination evaluation's prompt set and answer judge (benchmarks/hallucination_eval.py) -----------
def test_evaluation_prompts_cover_three_domains_with_kg_gold() -> None:
    from benchmarks.hallucination_eval import DEFAULT_PROMPTS, read_prompts

    prompts = read_prompts(DEFAULT_PROMPTS)
    assert len(prompts) >= 200
    assert {p["domain"] for p in prompts} == {"finance", "legal", "medical"}
    assert len({p["id"] for p in prompts}) == len(prompts)
    assert all(p["gold_entities"] and p["prompt"].strip() for p in prompts)


@pytest.mark.parametrize(("text", "literals", "named", "expected"), [
    ("No. As of 2025-06-13, France is not on the FATF black list.", ["no"], {"country:FR"}, True),
    ("Not known. France is on no list.", ["no"], {"country:FR"}, False),          # yes/no: the first word
    ("France, 384 U.S. 436 (1966).", ["384 U.S. 436"], {"country:FR"}, True),
    ("France, 384 U.S (1966).", ["384 U.S. 436"], {"country:FR"}, False),         # literal garbled
    ("No. It is not on the list.", ["no"], set(), False),                         # gold entity not named
])
def test_answers_are_judged_against_gold(text: str, literals: list[str], named: set[str], expected: bool) -> None:
    from benchmarks.hallucination_eval import is_correct

    assert is_correct(text, ["country:FR"], literals, named) is expected
