"""The engine-core wire format: msgpack lists, one message per ZeroMQ frame (as vLLM V1 does).

Client -> core:  ["hello", output_address] | ["add", request_id, prompt_token_ids, params, intent, cache_salt]
                 | ["abort", [request_id, ...], reason] | ["shutdown"]
Core -> client:  ["out", [output, ...]] | ["err", request_id, message, {reason}?] (refused: 400)
                 | ["fail", request_id, message] (a bug preparing it: 500) | ["stats", {name: number}]
                 | ["info", {model_id, checkpoint_hash, max_model_len, pid}] | ["dead", message]
An output is one request's step delta (`EngineCoreOutput`), never a copy of what came before."""

from __future__ import annotations

from dataclasses import asdict, fields
from typing import Any

import msgpack

from engine.outputs import EngineCoreOutput, ProcessorEvent, RequestStats
from engine.sampling_params import SamplingParams

_STATS_FIELDS = tuple(f.name for f in fields(RequestStats))


def pack(message: list[Any]) -> bytes:
    return msgpack.packb(message, use_bin_type=True, default=_plain)


def _plain(value: Any) -> Any:
    """What msgpack does not know, as plain data: numpy scalars and arrays, sets, tuples inside dicts."""
    if hasattr(value, "tolist"):   # numpy and torch scalars / arrays
        return value.tolist()
    if isinstance(value, set | frozenset):
        return sorted(value, key=str)
    raise TypeError(f"cannot send a {type(value).__name__} across the engine-core boundary")


def unpack(payload: bytes) -> list[Any]:
    return msgpack.unpackb(payload, raw=False, strict_map_key=False)


def params_to_wire(params: SamplingParams) -> dict[str, Any]:
    return asdict(params)


def params_from_wire(values: dict[str, Any]) -> SamplingParams:
    return SamplingParams(**values)


def output_to_wire(out: EngineCoreOutput) -> list[Any]:
    stats = None if out.stats is None else [getattr(out.stats, name) for name in _STATS_FIELDS]
    events = [[e.processor, e.position, e.kind, e.data] for e in out.new_events]
    return [out.request_id, out.new_token_ids, out.new_logprobs, events, out.finish_reason, out.stop_reason, stats]


def output_from_wire(values: list[Any]) -> EngineCoreOutput:
    request_id, token_ids, logprobs, events, finish_reason, stop_reason, stats = values
    if logprobs is not None:
        logprobs = [(token, logprob, [(t, lp) for t, lp in top]) for token, logprob, top in logprobs]
    return EngineCoreOutput(
        request_id, token_ids, logprobs, [ProcessorEvent(*event) for event in events], finish_reason, stop_reason,
        None if stats is None else RequestStats(**dict(zip(_STATS_FIELDS, stats, strict=True))),
    )
