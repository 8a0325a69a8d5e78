"""Smoke tests of scripts/train_demo_model.py: a tiny model on a tiny corpus, a few steps, into tmp_path."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from safetensors.torch import load_file
from tokenizers import Tokenizer

from scripts.train_demo_model import EOS, ROLE_TOKENS, main, tokenize_conversation, train_tokenizer

CASES = [("Brown v. Board of Education", "347 U.S. 483", 1954), ("Miranda v. Arizona", "384 U.S. 436", 1966),
         ("Roe v. Wade", "410 U.S. 113", 1973), ("Gideon v. Wainwright", "372 U.S. 335", 1963)]


def write_corpus(path: Path) -> Path:
    rows = [{"messages": [{"role": "user", "content": f"What is the citation of {name}?"},
                          {"role": "assistant", "content": f"{name}, {cite} ({year})."}]}
            for name, cite, year in CASES * 3]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("train")
    out = root / "model"
    assert main(["--tiny", "--steps", "3", "--out", str(out), "--corpus", str(write_corpus(root / "c.jsonl"))]) == 0
    return out


def test_writes_the_hugging_face_layout_and_training_record(trained: Path) -> None:
    for name in ("config.json", "model.safetensors", "generation_config.json", "tokenizer.json",
                 "tokenizer_config.json", "TRAINING.md", "loss_curve.png"):
        assert (trained / name).is_file(), name
    config = json.loads((trained / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"]
    tokenizer_config = json.loads((trained / "tokenizer_config.json").read_text())
    assert tokenizer_config["eos_token"] == EOS and "chat_template" in tokenizer_config
    record = (trained / "TRAINING.md").read_text()
    assert "sha256" in record and "final loss" in record and "steps: 3" in record
    assert (trained / "loss_curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_output_loads_and_generates_with_the_engine(trained: Path) -> None:
    llm_engine = pytest.importorskip("engine.llm_engine", reason="engine package not importable")
    from engine.config import EngineConfig
    from engine.sampling_params import SamplingParams

    engine = llm_engine.LLMEngine.from_pretrained(trained, EngineConfig(kv_cache_memory_bytes=4 * 2**20))
    prompt = engine.tokenizer.apply_chat_template([{"role": "user", "content": "What is the citation of Roe v. Wade?"}])
    assert prompt == "<s><|user|>\nWhat is the citation of Roe v. Wade?<|end|>\n<|assistant|>\n"
    [output] = engine.generate([prompt], SamplingParams(temperature=0, max_tokens=5))
    assert len(output.token_ids) >= 1
    assert engine.tokenizer.eos_token_ids == [Tokenizer.from_file(str(trained / "tokenizer.json")).token_to_id(EOS)]


def test_same_seed_gives_identical_weights(trained: Path, tmp_path: Path) -> None:
    again = tmp_path / "again"
    assert main(["--tiny", "--steps", "3", "--out", str(again), "--corpus", str(write_corpus(tmp_path / "c.jsonl"))]) == 0
    first, second = load_file(str(trained / "model.safetensors")), load_file(str(again / "model.safetensors"))
    assert first.keys() == second.keys()
    assert all(bool((first[k] == second[k]).all()) for k in first)
    assert (trained / "tokenizer.json").read_bytes() == (again / "tokenizer.json").read_bytes()


def test_only_assistant_turns_are_learned() -> None:
    conversation = [{"role": "user", "content": "Is Iran on the FATF black list?"},
                    {"role": "assistant", "content": "Yes."}]
    tokenizer = train_tokenizer([conversation], vocab_size=300)
    ids, labels = tokenize_conversation(tokenizer, conversation)
    learned = [t for t, label in zip(ids, labels, strict=True) if label != -100]
    assert tokenizer.decode(learned, skip_special_tokens=False) == f"Yes.{EOS}"
    assert all(tokenizer.token_to_id(token) is not None for token in ROLE_TOKENS.values())
    assert tokenizer.encode(ROLE_TOKENS["user"], add_special_tokens=False).ids == [tokenizer.token_to_id("<|user|>")]


@pytest.mark.parametrize("content", ["", "not json\n", '{"messages": [{"role": "robot", "content": "x"}]}\n'])
def test_bad_corpus_is_a_one_line_error(tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str) -> None:
    corpus = tmp_path / "bad.jsonl"
    corpus.write_text(content)
    assert main(["--tiny", "--steps", "1", "--out", str(tmp_path / "m"), "--corpus", str(corpus)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("train_demo_model: error:") and "\n" not in err


# -- the KG corpus (scripts/demo_corpus.py) ---------------------------------------------------------------
def small_medical_kg():  # type: ignore[no-untyped-def]
    from knowledge_graphs.model import Entity, Fact, KnowledgeGraph, Provenance

    label = Provenance("FDA-approved prescribing information (US package insert)", "GLUCOPHAGE (metformin hydrochloride) tablets, section 2 DOSAGE AND ADMINISTRATION", "2026-12-02")
    entities = [Entity("drug:DB00331", "drug", "Metformin"), Entity("drug:DB00682", "drug", "Warfarin"),
                Entity("drug:DB00945", "drug", "Aspirin"),
                Entity("condition:type-2-diabetes", "condition", "Type 2 diabetes mellitus")]
    facts = [Fact("drug:DB00331", "max_daily_dose", value=2550, unit="mg",
                  qualifiers={"route": "oral", "population": "adult"}, provenance=label),
             Fact("drug:DB00331", "indicated_for", "condition:type-2-diabetes", provenance=label),
             Fact("drug:DB00682", "interacts_with", "drug:DB00945",
                  qualifiers={"severity": "major", "effect": "bleeding"}, provenance=label)]
    return KnowledgeGraph("medical", entities, facts)


def test_corpus_states_kg_facts_with_their_source() -> None:
    from scripts.demo_corpus import build_corpus, domain_qas

    kg = small_medical_kg()
    answers = {qa.kind: qa for qa in domain_qas(kg, seed=0)}
    dose = answers["max_daily_dose"]
    assert dose.answer == ("For adults, the maximum daily dose of Metformin is 2550 mg by mouth "
                           "(FDA-approved prescribing information, section 2 DOSAGE AND ADMINISTRATION).")
    assert dose.gold_literals == ("2550",) and dose.subject == "drug:DB00331"
    assert "Warfarin interacts with Aspirin (major)" in answers["interacts_with"].answer
    assert answers["treatments_for"].gold_entities == ("condition:type-2-diabetes", "drug:DB00331")

    corpus = build_corpus({"medical": kg}, seed=0)
    assert corpus == build_corpus({"medical": kg}, seed=0)          # seeded: same corpus every time
    questions = {conversation[0]["content"] for conversation in corpus}
    assert dose.questions[0] in questions
    assert dose.held_out_question not in questions                   # kept back for the evaluation


def test_eval_prompts_use_held_out_phrasings_with_kg_gold() -> None:
    from scripts.demo_corpus import build_eval_prompts

    prompts = build_eval_prompts({"medical": small_medical_kg()}, seed=0, per_domain=3)
    assert len(prompts) == 3 and len({p.kind for p in prompts}) == 3   # round-robin over kinds
    dose = next(p for p in prompts if p.kind == "max_daily_dose")
    assert dose.prompt == "Tell me the daily dose limit of Metformin for adults."
    assert dose.gold_entities == ["drug:DB00331"] and dose.gold_literals == ["2550"]
