"""Quantized KV cache: layout bytes and pool sizing, the block manager's tier rule, and the engine on it
(prefix caching, chunked prefill, preemption), compared with the full-precision cache."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import torch

from engine.block_manager import BlockManager
from engine.config import EngineConfig
from engine.kv_cache import KVCache, pool_sizes
from engine.kv_spec import KVCacheSpec
from engine.llm_engine import LLMEngine
from engine.loader import load_model_config
from engine.sampling_params import SamplingParams
from engine.sequence import Sequence

BUNDLED = Path(__file__).resolve().parents[2] / "auditor" / "bundled_model"
GREEDY = SamplingParams(temperature=0, max_tokens=24, ignore_eos=True)


def _seq(tokens: list[int], request_id: str = "s") -> Sequence:
    return Sequence(request_id, tokens, GREEDY, priority=1, arrival_time=0.0)


def _spec(dtype: str, model_dtype: torch.dtype = torch.float32, **overrides) -> KVCacheSpec:
    config = EngineConfig(kv_cache_dtype=dtype, **overrides)
    return KVCacheSpec.from_configs(load_model_config(BUNDLED), config, model_dtype)


# ---- layout and sizing ---------------------------------------------------------------------------


@pytest.mark.parametrize(("dtype", "model_dtype"), [("auto", torch.float32), ("int8", torch.float32),
                                                   ("int4", torch.float32), ("int4", torch.bfloat16)])
def test_block_bytes_are_the_bytes_the_pools_allocate_scales_included(dtype, model_dtype):
    spec = _spec(dtype, model_dtype)
    cache = KVCache(spec, num_full=3, num_quantized=5 if spec.quantized else 0, device=torch.device("cpu"))
    full = sum(layer.k.nbytes + layer.v.nbytes for layer in cache.layers)
    assert full == 3 * spec.full_block_bytes
    if spec.quantized:
        quantized = sum(t.nbytes for layer in cache.layers for t in layer.quantized.tensors())
        assert quantized == 5 * spec.quantized_block_bytes
        assert cache.read_block(3).numel() == spec.stored_block_bytes == spec.quantized_block_bytes


def test_quantized_blocks_are_several_times_smaller():
    auto, int8, int4 = _spec("auto"), _spec("int8"), _spec("int4")
    per_token = {name: spec.stored_block_bytes / spec.block_size for name, spec in
                 (("auto", auto), ("int8", int8), ("int4", int4))}
    # fp32 model, groups of 32 values: a value costs its code plus its share of the group's (scale, min),
    # fp16 for int4 (1 bit a value), fp32 for int8 (2 bits: the format of the fused 8-bit gather)
    assert per_token["auto"] / per_token["int8"] == pytest.approx(32 / (8 + 2))
    assert per_token["auto"] / per_token["int4"] == pytest.approx(32 / (4 + 1))


@pytest.mark.parametrize("dtype", ["auto", "int8", "int4"])
def test_pools_fit_the_memory_budget(dtype):
    spec = _spec(dtype)
    config = EngineConfig(kv_cache_dtype=dtype, kv_cache_memory_bytes=64 * 2**20, max_num_seqs=1024)
    num_full, num_quantized = pool_sizes(spec, config, max_model_len=256)
    used = num_full * spec.full_block_bytes + num_quantized * spec.quantized_block_bytes
    assert 64 * 2**20 - max(spec.full_block_bytes, spec.quantized_block_bytes) < used <= 64 * 2**20


def test_a_budget_too_small_for_the_residuals_is_refused_with_the_fix():
    spec = _spec("int8")
    config = EngineConfig(kv_cache_dtype="int8", kv_cache_memory_bytes=spec.full_block_bytes * 2)
    with pytest.raises(ValueError, match="kv_cache_residual_tokens"):
        pool_sizes(spec, config, max_model_len=256)


@pytest.mark.parametrize(("settings", "message"), [
    (dict(kv_cache_dtype="fp8"), "kv_cache_dtype must be one of auto, int8, int4"),
    (dict(kv_cache_strategy="hot"), "kv_cache_strategy must be one of static, tiered"),
    (dict(kv_cache_dtype="int4", kv_cache_group_size=16), "kv_cache_group_size must be 32 or 64"),
    (dict(kv_cache_dtype="int4", block_size=16), "block_size must equal kv_cache_group_size"),
    (dict(kv_cache_dtype="int8", kv_cache_residual_tokens=48), "multiple of kv_cache_group_size"),
    (dict(kv_cache_dtype="int8", kv_cache_residual_tokens=0), "multiple of kv_cache_group_size"),
    (dict(kv_cache_strategy="tiered"), "needs kv_cache_cold_dir"),
    (dict(kv_cache_strategy="tiered", kv_cache_cold_dir="/tmp/x", enable_prefix_caching=False),
     "needs enable_prefix_caching"),
])
def test_invalid_combinations_are_rejected_at_startup(tiny_llama, settings, message):
    with pytest.raises(ValueError, match=message):
        LLMEngine.from_pretrained(tiny_llama, EngineConfig(**settings))


def test_a_head_dim_the_groups_do_not_divide_is_rejected_before_loading(tmp_path):
    from engine.synthetic import write_tiny_checkpoint

    odd = write_tiny_checkpoint(tmp_path / "odd", hidden_size=96, num_heads=2, num_kv_heads=1)  # head_dim 48
    with pytest.raises(ValueError, match="does not fit this model.*head_dim 48"):
        LLMEngine.from_pretrained(odd, EngineConfig(kv_cache_dtype="int4"))


def test_block_size_follows_the_group_size_unless_set():
    assert EngineConfig().kv_block_size == 16
    assert EngineConfig(kv_cache_dtype="int8").kv_block_size == 32
    assert EngineConfig(kv_cache_dtype="int4", kv_cache_group_size=64).kv_block_size == 64
    assert replace(EngineConfig(block_size=8), kv_cache_dtype="auto").kv_block_size == 8


# ---- the tier rule in the block manager ----------------------------------------------------------


def _manager(num_full: int = 8, num_quantized: int = 16, residual: int = 8, caching: bool = True) -> BlockManager:
    return BlockManager(num_full, 4, caching, num_quantized_blocks=num_quantized, residual_tokens=residual)


def _step(manager: BlockManager, seq: Sequence, num_new: int) -> None:
    if seq.block_table:
        assert manager.append_slots(seq, num_new)
    else:
        assert manager.allocate_prompt(seq, num_new)
    seq.num_computed_tokens += num_new
    manager.register_full_blocks(seq)


def _kinds(manager: BlockManager, seq: Sequence) -> str:
    return "".join("q" if manager.blocks[b].quantized else "f" for b in seq.block_table)


def test_a_prefill_writes_blocks_before_the_residual_straight_to_quantized_blocks():
    manager = _manager()
    seq = _seq(list(range(100, 121)))                # 21 tokens, blocks of 4, residual 8
    _step(manager, seq, 21)
    # the next query (position 21) sees 16 tokens = 4 blocks quantized; the residual in full precision
    assert _kinds(manager, seq) == "qqqqff"
    ops = manager.take_ops()
    assert not ops.conversions                       # written whole by the step: quantized on the way in


def test_decoding_converts_each_residual_group_once_it_is_complete():
    manager = _manager()
    seq = _seq(list(range(100, 106)))
    _step(manager, seq, 6)
    assert _kinds(manager, seq) == "ff"
    kinds = []
    for _ in range(12):                              # decode positions 6..17, one token a step
        seq.output_token_ids.append(7)
        _step(manager, seq, 1)
        kinds.append(_kinds(manager, seq))
    assert kinds[1] == "ff"                          # position 7: the first group (0..7) is not complete
    assert kinds[2] == "qqf"                         # position 8 sees blocks 0, 1 quantized: converted
    assert kinds[-1] == "qqqqf"                      # position 17 sees 0..15 quantized
    assert manager.num_conversions == 4
    assert len(manager.take_ops().conversions) == 4


def test_a_chunk_that_completes_a_block_it_did_not_start_converts_it_next_step():
    manager = _manager(residual=4)
    seq = _seq(list(range(100, 120)))
    _step(manager, seq, 6)                           # block 1 half written
    assert _kinds(manager, seq) == "qf"
    _step(manager, seq, 6)                           # completes block 1, writes block 2 whole
    assert _kinds(manager, seq) == "qfq"
    manager.take_ops()
    _step(manager, seq, 1)
    assert _kinds(manager, seq) == "qqqf"
    assert len(manager.take_ops().conversions) == 1


def test_prefix_hits_stop_where_a_quantized_block_would_stand_in_a_residual():
    manager = _manager(residual=8)
    owner = _seq(list(range(100, 141)))              # 41 tokens: the query at 41 sees 10 blocks quantized
    _step(manager, owner, 41)
    assert _kinds(manager, owner) == "qqqqqqqqqqf"
    # a newcomer sharing 40 tokens: its first query (position 40) sees blocks 0..9 quantized: all usable
    assert len(manager.find_cached_prefix(_seq(list(range(100, 141)) + [5], "a"))) == 10
    manager.free(owner)
    again = _seq(list(range(100, 141)) + [5], "b")
    assert manager.allocate_prompt(again, again.num_tokens)
    assert again.num_computed_tokens == 40
    # a newcomer sharing 21 tokens would start at position 20, where block 4 belongs to its residual, but
    # the cache holds block 4 quantized: it reuses 4 blocks (16 tokens) and recomputes the rest
    short = _seq(list(range(100, 121)) + [1, 2], "c")
    assert len(manager.find_cached_prefix(short)) == 4
    aligned = _seq(list(range(100, 125)) + [1, 2], "d")   # 24 shared tokens: a whole residual group
    assert len(manager.find_cached_prefix(aligned)) == 6


def test_a_full_precision_hit_below_the_residual_is_converted_at_admission():
    manager = _manager(residual=4)
    owner = _seq(list(range(100, 103)))
    _step(manager, owner, 3)
    for token in range(5):                           # decode up to 8 tokens: block 1 just completed
        owner.output_token_ids.append(token)
        _step(manager, owner, 1)
    assert _kinds(manager, owner) == "qf"            # converted only when the owner's next step needs it
    manager.take_ops()
    newcomer = _seq(owner.all_token_ids()[:8] + list(range(200, 210)), "n")
    assert manager.allocate_prompt(newcomer, newcomer.num_tokens)
    assert newcomer.num_computed_tokens == 8
    assert _kinds(manager, newcomer)[:2] == "qq"     # block 1 quantized for the newcomer at admission
    assert len(manager.take_ops().conversions) == 1


def test_a_full_precision_cache_has_no_quantized_tier():
    manager = BlockManager(12, 4, True)
    seq = _seq(list(range(100, 141)))
    _step(manager, seq, 41)
    assert _kinds(manager, seq) == "f" * 11 and not manager.take_ops()
    assert manager.fits(48) and not manager.fits(49)


def test_fits_counts_the_residual_and_the_quantized_history():
    manager = _manager(num_full=3, num_quantized=10, residual=8)
    assert manager.fits(47)                          # 10 quantized blocks + a residual of 2 (+1 spare)
    assert not manager.fits(48)                      # the query at 48 would see 12 blocks quantized
    assert not _manager(num_full=2, num_quantized=10, residual=8).fits(12)   # residual 2 + 1 spare > 2
    assert manager.max_seq_tokens == 47


# ---- the engine on a quantized cache -------------------------------------------------------------


def _engine(path: Path, dtype: str, **overrides) -> LLMEngine:
    # fp32 pinned: on a host with bf16 hardware `auto` runs bf16, whose outputs may depend on the batch they ran
    # in; these tests compare exact outputs and the quantized cache against full precision
    return LLMEngine.from_pretrained(path, EngineConfig(kv_cache_dtype=dtype, dtype="float32", **overrides))


def _prompts(count: int, length: int, seed: int = 0, vocab: int = 450) -> list[list[int]]:
    generator = torch.Generator().manual_seed(seed)
    return [torch.randint(5, vocab, (length,), generator=generator).tolist() for _ in range(count)]


@pytest.mark.parametrize("dtype", ["int8", "int4"])
def test_sequences_shorter_than_the_residual_are_exact(tiny_llama, dtype):
    prompts = _prompts(3, 8)
    params = SamplingParams(temperature=0, max_tokens=20, ignore_eos=True)     # 28 tokens < 32
    expected = [o.token_ids for o in _engine(tiny_llama, "auto").generate(prompts, params)]
    assert [o.token_ids for o in _engine(tiny_llama, dtype).generate(prompts, params)] == expected


@pytest.mark.parametrize("dtype", ["int8", "int4"])
def test_chunking_and_prefix_hits_do_not_change_what_a_query_sees(tiny_llama, dtype):
    prompts = _prompts(3, 150, seed=1)
    expected = [o.token_ids for o in _engine(tiny_llama, dtype).generate(prompts, GREEDY)]
    chunked = _engine(tiny_llama, dtype, max_num_batched_tokens=23)
    assert [o.token_ids for o in chunked.generate(prompts, GREEDY)] == expected
    cached = _engine(tiny_llama, dtype)
    cached.generate([p[:100] for p in prompts], GREEDY)
    outputs = cached.generate(prompts, GREEDY)
    assert all(o.stats.num_cached_tokens >= 64 for o in outputs)
    assert [o.token_ids for o in outputs] == expected


@pytest.mark.parametrize("dtype", ["int8", "int4"])
def test_preemption_recomputes_to_the_same_output(tiny_llama, dtype):
    prompts = _prompts(4, 60, seed=2)
    params = SamplingParams(temperature=0, max_tokens=100, ignore_eos=True)
    expected = [o.token_ids for o in _engine(tiny_llama, dtype, enable_prefix_caching=False).generate(prompts, params)]
    # 4 sequences of 160 tokens need 4 x 4 quantized blocks; 9 force preemptions
    tight = _engine(tiny_llama, dtype, num_kv_blocks=9, max_num_seqs=4, enable_prefix_caching=False)
    outputs = tight.generate(prompts, params)
    assert tight.stats()["num_preemptions"] > 0
    assert [o.token_ids for o in outputs] == expected
    assert tight.block_manager.num_free_blocks == tight.block_manager.num_blocks


def test_prefix_cache_shares_quantized_blocks_between_requests(tiny_llama):
    engine = _engine(tiny_llama, "int8", num_kv_blocks=64)
    shared = _prompts(1, 96, seed=3)[0]
    engine.add_request("a", shared + [7, 8, 9], SamplingParams(temperature=0, max_tokens=30, ignore_eos=True))
    engine.add_request("b", shared + [9, 8], SamplingParams(temperature=0, max_tokens=30, ignore_eos=True))
    engine.step()                                    # both admitted: b finds a's blocks once registered
    engine.step()
    engine.add_request("c", shared + [1], SamplingParams(temperature=0, max_tokens=30, ignore_eos=True))
    engine.step()
    a, c = engine.requests["a"], engine.requests["c"]
    assert c.stats.num_cached_tokens == 96
    quantized_a = [b for b in a.block_table if engine.block_manager.blocks[b].quantized]
    assert quantized_a and set(quantized_a) <= set(c.block_table)
    assert all(engine.block_manager.blocks[b].ref_count >= 2 for b in quantized_a)


def test_quantized_logits_stay_close_to_full_precision_on_the_bundled_model():
    from engine.processors.logits_process import LogitsProcessor

    class Capture(LogitsProcessor):
        name = "capture"

        def __init__(self) -> None:
            self.rows: list[torch.Tensor] = []

        def validate_params(self, params): ...
        def add_request(self, request_id, params, prompt, output): return True
        def remove_request(self, request_id): ...
        def accept_token(self, request_id, token_id): ...

        def apply(self, logits, request_ids):
            self.rows.append(logits[0].log_softmax(-1))
            logits.fill_(float("-inf"))               # teacher-force one fixed continuation
            logits[0, 100 + len(self.rows)] = 0.0

    prompt = _prompts(1, 70, seed=5, vocab=4000)[0]
    rows = {}
    for dtype in ("auto", "int8", "int4"):
        capture = Capture()
        engine = LLMEngine.from_pretrained(BUNDLED, EngineConfig(kv_cache_dtype=dtype, dtype="float32"), [capture])
        engine.generate([prompt], SamplingParams(temperature=0, max_tokens=50, ignore_eos=True))
        rows[dtype] = torch.stack(capture.rows)
    drift = {dtype: (rows[dtype].exp() - rows["auto"].exp()).abs().sum(-1).max().item() for dtype in ("int8", "int4")}
    assert drift["int8"] < 0.02        # total-variation distance of next-token distributions
    assert drift["int4"] < 0.3
    assert drift["int8"] < drift["int4"]


def test_stats_and_settings_name_the_kv_cache(tiny_llama):
    engine = _engine(tiny_llama, "int4")
    engine.generate(_prompts(2, 70, seed=6), SamplingParams(temperature=0, max_tokens=40, ignore_eos=True))
    stats = engine.stats()
    assert stats["kv_cache"] == engine.kv_cache_settings == {
        "dtype": "int4", "strategy": "static", "model_dtype": "float32", "block_size": 32, "group_size": 32,
        "value_group_size": 16, "residual_tokens": 32}
    assert stats["kv_cache_quantized_blocks"] > 0 and stats["kv_cache_conversions"] > 0
    assert _engine(tiny_llama, "auto").kv_cache_settings["dtype"] == "auto"
