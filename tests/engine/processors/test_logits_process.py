"""The engine drives the LogitsProcessor protocol exactly as its contract says."""

from __future__ import annotations

import json

import pytest
import torch

from engine.config import EngineConfig
from engine.kernels.bitmask import apply_token_bitmask_torch, bitmask_from_token_ids
from engine.llm_engine import LLMEngine
from engine.outputs import ProcessorEvent
from engine.processors.logits_process import LogitsProcessor
from engine.sampling_params import InvalidRequestError, SamplingParams

GREEDY = dict(temperature=0, ignore_eos=True)


class BanTokens(LogitsProcessor):
    """extra_args["ban"] = {"tokens": [...], "dead_at": k, "finish_after": m}: a bitmask ban, a forced
    dead end at output position k (every token masked), a finished constraint after m tokens."""

    name = "ban"

    def __init__(self, vocab_size: int) -> None:
        self.vocab_size = vocab_size
        self.masks: dict[str, torch.Tensor] = {}
        self.state: dict[str, dict] = {}
        self.log: list[tuple] = []

    def validate_params(self, params):
        args = params.extra_args.get(self.name)
        if args is not None and not isinstance(args.get("tokens", []), list):
            raise InvalidRequestError("ban.tokens must be a list")

    def add_request(self, request_id, params, prompt_token_ids, output_token_ids):
        self.log.append(("add", request_id, list(output_token_ids)))
        args = params.extra_args.get(self.name)
        if args is None:
            return False
        allowed = [t for t in range(self.vocab_size) if t not in set(args.get("tokens", []))]
        self.masks[request_id] = bitmask_from_token_ids(allowed, self.vocab_size)  # built once, cached
        self.state[request_id] = {"args": args, "position": len(output_token_ids), "events": []}
        return True

    def remove_request(self, request_id):
        self.log.append(("remove", request_id))
        self.masks.pop(request_id, None)
        self.state.pop(request_id, None)

    def apply(self, logits, request_ids):
        self.log.append(("apply", tuple(request_ids)))
        rows = [i for i, r in enumerate(request_ids) if r in self.masks]
        masks = torch.stack([self.masks[request_ids[i]] for i in rows])
        apply_token_bitmask_torch(logits, masks, torch.tensor(rows))
        for i in rows:
            state = self.state[request_ids[i]]
            if state["args"].get("dead_at") == state["position"]:
                logits[i] = float("-inf")
            state["events"].append(ProcessorEvent(self.name, state["position"], "masked", {"banned": len(state["args"].get("tokens", []))}))

    def accept_token(self, request_id, token_id):
        self.log.append(("accept", request_id, token_id))
        self.state[request_id]["position"] += 1

    def is_finished(self, request_id):
        state = self.state[request_id]
        return state["args"].get("finish_after") == state["position"]

    def pop_events(self, request_id):
        state = self.state.get(request_id)
        if state is None:
            return []
        events, state["events"] = state["events"], []
        return events


def _engine(tiny_llama, **config):
    vocab_size = json.loads((tiny_llama / "config.json").read_text())["vocab_size"]
    processor = BanTokens(vocab_size)
    return LLMEngine.from_pretrained(tiny_llama, EngineConfig(**config), [processor]), processor


def test_banned_tokens_never_appear_and_the_protocol_is_followed(tiny_llama):
    engine, processor = _engine(tiny_llama)
    free = engine.generate(["The patient was"], SamplingParams(max_tokens=8, **GREEDY))[0]
    banned = sorted(set(free.token_ids))[:3]  # tokens the unconstrained model picks
    out = engine.generate(
        ["The patient was"], SamplingParams(max_tokens=8, extra_args={"ban": {"tokens": banned}}, **GREEDY)
    )[0]
    assert not set(out.token_ids) & set(banned)
    request_id = out.request_id
    accepted = [e[2] for e in processor.log if e[0] == "accept" and e[1] == request_id]
    assert accepted == out.token_ids
    assert [e.position for e in out.events] == list(range(8))
    assert processor.log[-1] == ("remove", request_id)
    assert request_id not in processor.state


def test_idle_processors_are_not_applied(tiny_llama):
    engine, processor = _engine(tiny_llama)
    engine.generate(["hello", "world"], SamplingParams(max_tokens=4, **GREEDY))
    assert not [e for e in processor.log if e[0] == "apply"]
    assert [e[0] for e in processor.log].count("add") == 2


def test_mixed_batch_only_constrained_rows_are_touched(tiny_llama):
    engine, processor = _engine(tiny_llama)
    plain = SamplingParams(max_tokens=6, **GREEDY)
    reference = engine.generate(["hello"], plain)[0].token_ids
    outputs = engine.generate(
        ["hello", "hello"],
        [plain, SamplingParams(max_tokens=6, extra_args={"ban": {"tokens": reference[:2]}}, **GREEDY)],
    )
    assert outputs[0].token_ids == reference
    assert not set(outputs[1].token_ids) & set(reference[:2])
    applies = [e for e in processor.log if e[0] == "apply"]
    assert applies and all(len(e[1]) == 2 for e in applies[:1])


@pytest.mark.parametrize("sampling", [GREEDY, dict(temperature=1.0, seed=5, ignore_eos=True),
                                      dict(temperature=0.8, top_p=0.9, top_k=5, ignore_eos=True)])
def test_dead_end_finishes_with_its_own_reason(tiny_llama, sampling):
    engine, processor = _engine(tiny_llama)
    out = engine.generate(["hello"], SamplingParams(max_tokens=10, extra_args={"ban": {"dead_at": 3}}, **sampling))[0]
    assert out.finish_reason == "constraint_dead_end"
    assert len(out.token_ids) == 3
    assert engine.block_manager.num_free_blocks == engine.block_manager.num_blocks
    assert not processor.state


def test_finished_constraint_stops_the_request(tiny_llama):
    engine, _ = _engine(tiny_llama)
    out = engine.generate(["hello"], SamplingParams(max_tokens=10, extra_args={"ban": {"finish_after": 4}}, **GREEDY))[0]
    assert out.finish_reason == "stop" and len(out.token_ids) == 4


def test_processors_replay_after_preemption(tiny_llama):
    engine, processor = _engine(tiny_llama, block_size=4, num_kv_blocks=12)
    prompts = [list(range(10, 26)), list(range(30, 46)), list(range(50, 66))]
    params = SamplingParams(max_tokens=12, extra_args={"ban": {"tokens": [7]}}, **GREEDY)
    outputs = engine.generate(prompts, params)
    assert engine.stats()["num_preemptions"] > 0
    readds = [e for e in processor.log if e[0] == "add" and e[2]]
    assert readds, "a preempted request must be re-added with its output so far"
    for _, request_id, replayed in readds:
        final = next(o for o in outputs if o.request_id == request_id)
        assert final.token_ids[: len(replayed)] == replayed
    for out in outputs:  # events survive preemption: one per position, no gaps or repeats
        assert [e.position for e in out.events] == list(range(len(out.token_ids)))
