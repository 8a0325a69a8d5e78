"""Checkpoint loading: layouts, errors that name the problem, tokenizer and chat template."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

from engine.config import EngineConfig, ModelLoadError
from engine.llm_engine import LLMEngine
from engine.sampling_params import InvalidRequestError, SamplingParams
from engine.synthetic import build_bpe_tokenizer, write_checkpoint_with_tokenizer, write_tiny_checkpoint


def _greedy(engine: LLMEngine, prompt: str) -> list[int]:
    return engine.generate([prompt], SamplingParams(temperature=0, max_tokens=8, ignore_eos=True))[0].token_ids


def test_sharded_checkpoint_loads_like_single_file(tmp_path):
    single = write_tiny_checkpoint(tmp_path / "single", seed=3)
    sharded = write_tiny_checkpoint(tmp_path / "sharded", seed=3, num_shards=3)
    assert (sharded / "model.safetensors.index.json").is_file()
    a, b = LLMEngine.from_pretrained(single), LLMEngine.from_pretrained(sharded)
    assert _greedy(a, "The court held") == _greedy(b, "The court held")
    assert b.model_id == "sharded"


def test_checkpoint_hash_is_stable_and_tracks_weights(tmp_path):
    first = write_tiny_checkpoint(tmp_path / "a", seed=1)
    same = write_tiny_checkpoint(tmp_path / "b", seed=1)
    other = write_tiny_checkpoint(tmp_path / "c", seed=2)
    hashes = [LLMEngine.from_pretrained(p).checkpoint_hash for p in (first, same, other)]
    assert len(hashes[0]) == 64
    assert hashes[0] == hashes[1] != hashes[2]


def test_unknown_architecture_is_named(tmp_path):
    path = write_tiny_checkpoint(tmp_path / "m")
    config = json.loads((path / "config.json").read_text())
    config["architectures"] = ["GPTNeoXForCausalLM"]
    (path / "config.json").write_text(json.dumps(config))
    with pytest.raises(ModelLoadError, match="GPTNeoXForCausalLM"):
        LLMEngine.from_pretrained(path)
    assert issubclass(ModelLoadError, ValueError)


def test_missing_weight_file_is_named(tmp_path):
    path = write_tiny_checkpoint(tmp_path / "m", num_shards=2)
    (path / "model-00002-of-00002.safetensors").unlink()
    with pytest.raises(ModelLoadError, match="model-00002-of-00002.safetensors"):
        LLMEngine.from_pretrained(path)


def test_corrupt_weight_file_is_named(tmp_path):
    path = write_tiny_checkpoint(tmp_path / "m")
    data = (path / "model.safetensors").read_bytes()
    (path / "model.safetensors").write_bytes(data[: len(data) // 2])
    with pytest.raises(ModelLoadError, match="model.safetensors"):
        LLMEngine.from_pretrained(path)


def test_missing_folder_and_tokenizer_are_named(tmp_path):
    with pytest.raises(ModelLoadError, match="nowhere"):
        LLMEngine.from_pretrained(tmp_path / "nowhere")
    path = write_tiny_checkpoint(tmp_path / "m")
    (path / "tokenizer.json").unlink()
    with pytest.raises(ModelLoadError, match="tokenizer.json"):
        LLMEngine.from_pretrained(path)


def test_dtypes_load_and_generate(tiny_llama):
    for dtype in ("float32", "bfloat16", "float16"):
        engine = LLMEngine.from_pretrained(tiny_llama, EngineConfig(dtype=dtype))
        assert next(engine.model.parameters()).dtype == getattr(torch, dtype)
        assert len(_greedy(engine, "Hello")) == 8
    with pytest.raises(ValueError, match="dtype"):
        LLMEngine.from_pretrained(tiny_llama, EngineConfig(dtype="int3"))


def test_tokenizer_round_trip_and_special_ids(tiny_llama):
    tok = LLMEngine.from_pretrained(tiny_llama).tokenizer
    text = "The patient was prescribed 500 mg of amoxicillin."
    ids = tok.encode(text)
    assert ids[0] == tok.bos_token_id  # add_bos_token from tokenizer_config
    assert tok.decode(ids) == text
    assert tok.eos_token_ids == [tok.backend.token_to_id("</s>")]
    assert tok.vocab_size == tok.backend.get_vocab_size()


def test_chat_template_renders_like_transformers(tiny_llama):
    transformers = pytest.importorskip("transformers")
    ours = LLMEngine.from_pretrained(tiny_llama).tokenizer
    theirs = transformers.PreTrainedTokenizerFast.from_pretrained(tiny_llama)
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Dose of aspirin?"}]
    for add in (True, False):
        expected = theirs.apply_chat_template(messages, add_generation_prompt=add, tokenize=False)
        assert ours.apply_chat_template(messages, add_generation_prompt=add) == expected


def test_missing_chat_template_is_a_clear_error(tmp_path):
    path = write_tiny_checkpoint(tmp_path / "m")
    config = json.loads((path / "tokenizer_config.json").read_text())
    del config["chat_template"]
    (path / "tokenizer_config.json").write_text(json.dumps(config))
    with pytest.raises(InvalidRequestError, match="chat_template"):
        LLMEngine.from_pretrained(path).tokenizer.apply_chat_template([{"role": "user", "content": "x"}])


def test_copied_checkpoint_keeps_working(tmp_path, tiny_llama):
    copy = shutil.copytree(tiny_llama, tmp_path / "copy")
    assert LLMEngine.from_pretrained(copy).checkpoint_hash == LLMEngine.from_pretrained(tiny_llama).checkpoint_hash


def test_a_rendered_chat_prompt_gets_exactly_one_bos(tiny_llama):
    tok = LLMEngine.from_pretrained(tiny_llama).tokenizer
    rendered = tok.apply_chat_template([{"role": "user", "content": "Dose of aspirin?"}])
    ids = tok.encode(rendered)
    assert ids[0] == tok.bos_token_id and ids[1] != tok.bos_token_id
    assert ids == tok.apply_chat_template([{"role": "user", "content": "Dose of aspirin?"}], tokenize=True)


def test_tiny_checkpoint_tokenizer_learns_the_given_texts(tmp_path):
    texts = ["hydrochlorothiazide 25 mg daily", "metformin 500 mg twice daily"] * 20
    path = write_tiny_checkpoint(tmp_path / "m", vocab_from_texts=texts, vocab_size=300, model_vocab_size=512)
    engine = LLMEngine.from_pretrained(path)
    ids = engine.tokenizer.encode("hydrochlorothiazide", add_special_tokens=False)
    assert len(ids) <= 3  # learned merges, not 19 single bytes
    assert engine.model.config.vocab_size == 512 >= engine.tokenizer.vocab_size
    assert engine.tokenizer.decode(ids) == "hydrochlorothiazide"


def _released_style_tokenizer(folder):
    """A tokenizer folder shaped like Qwen's: no BOS, an added end-of-turn token as eos, a chat template."""
    folder.mkdir()
    tokenizer = build_bpe_tokenizer(["Hello there, how are you?", "Aspirin 81 mg daily."], 300)
    tokenizer.add_special_tokens(["<|im_start|>", "<|im_end|>"])
    tokenizer.save(str(folder / "tokenizer.json"))
    template = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
                "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
    (folder / "tokenizer_config.json").write_text(json.dumps(
        {"bos_token": None, "eos_token": "<|im_end|>", "add_bos_token": False, "chat_template": template}))
    return tokenizer


def test_checkpoint_around_a_released_tokenizer(tmp_path):
    tokenizer = _released_style_tokenizer(tmp_path / "tok")
    path = write_checkpoint_with_tokenizer(tmp_path / "ckpt", tmp_path / "tok", hidden_size=32, intermediate_size=64,
                                           num_layers=1, num_heads=2, num_kv_heads=1)
    assert (path / "tokenizer.json").read_bytes() == (tmp_path / "tok" / "tokenizer.json").read_bytes()
    config = json.loads((path / "config.json").read_text())
    assert config["vocab_size"] % 128 == 0 and config["vocab_size"] >= tokenizer.get_vocab_size()
    engine = LLMEngine.from_pretrained(path)
    assert engine.tokenizer.eos_token_ids == [tokenizer.token_to_id("<|im_end|>")]
    prompt = engine.tokenizer.apply_chat_template([{"role": "user", "content": "Hello there"}])
    out = engine.generate([prompt], SamplingParams(temperature=1.0, seed=0, max_tokens=6, ignore_eos=True))[0]
    assert len(out.token_ids) == 6


def test_checkpoint_around_a_tokenizer_folder_that_lacks_its_files(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="tokenizer.json"):
        write_checkpoint_with_tokenizer(tmp_path / "ckpt", tmp_path / "empty")
